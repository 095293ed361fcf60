//! The fast reading of the two commonest events,
//! `response.output_text.delta` and `response.function_call_arguments.delta`,
//! with the shared byte scanner (`scan.rs`), as the chat processor reads its
//! deltas: the texts borrowed where the input allows, no event value built.
//!
//! The scanner reads an event's members one by one, each by what its key
//! is to the event ([`Member`]), and gives up (`None`) on any other event
//! type, any field of another shape (a delta that is not a string, an
//! `output_index` that is not a plain non-negative integer...), a member
//! the full reading uses beside the delta (`response`, `item`, `error`),
//! and whatever the scanner leaves to serde_json. The processor then reads
//! the event whole, which decides. So when it reads an event, the full
//! reading reads the same (tests/scan.rs and the `chunk_scan` fuzz target
//! hold it to that).
//!
//! The scanner leaves a template of the event in the memo: its text with
//! its member values as holes. The next event with the same keys in the
//! same places (in a stream, nearly every delta event: only the sequence
//! number, the delta and, between interleaved calls, the item change) is
//! read by reading each value again with the same reader, at the same
//! place: two comparisons and a short one per hole instead of the scan.
//! Both ways run one function per member ([`Partial::member`]), so they
//! agree. The values kept in the template's text are read the same for the
//! same bytes: a lone `type`, whose event the memo keeps, and skipped
//! values that are neither strings nor numbers.

use std::borrow::Cow;

use super::model::DeltaEvent;
use crate::scan::{Scanner, Template};

/// Most members of an event that leaves a template.
const MAX_MEMBERS: usize = 12;

/// What a member of a delta event is to its reading, by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// `type`: which of the two events, or none of them.
    Type,
    Delta,
    ItemId,
    OutputIndex,
    /// Any other key (`sequence_number`, `content_index`, `logprobs`,
    /// `obfuscation`...): its value is checked and skipped.
    Other,
}

/// What a stream's reading of delta events remembers of the last one the
/// scanner read: its template (see the module documentation). Each
/// processor keeps its own.
#[derive(Debug, Default)]
pub struct DeltaMemo {
    template: Option<Template<Member>>,
    /// What its one `type` says, when that is kept in the template's text
    /// (with two, each is a hole).
    arguments: Option<bool>,
}

/// The bytes of a payload as the stream's last delta event read by the
/// scanner with other values: that event, the UTF-8 check of the values
/// included. None: [`read`] the text as usual.
#[inline]
pub fn plain<'a>(bytes: &'a [u8], memo: &DeltaMemo) -> Option<DeltaEvent<'a>> {
    let mut e = Partial { arguments: memo.arguments, ..Partial::default() };
    memo.template.as_ref()?.read(bytes, |s, member| e.member(s, member))?;
    e.event()
}

/// A delta event read by the scanner, or None when the full reading must
/// decide (see the module documentation). Its template replaces the memo's.
pub fn read<'a>(text: &'a str, memo: &mut DeltaMemo) -> Option<DeltaEvent<'a>> {
    let mut e = Partial::default();
    let mut holes = [(0, 0, Member::Other); MAX_MEMBERS];
    let mut members = 0;
    let mut s = Scanner::new(text);
    s.ws();
    s.object(|s, key| {
        let member = match &*key {
            "type" => Member::Type,
            "delta" => Member::Delta,
            "item_id" => Member::ItemId,
            "output_index" => Member::OutputIndex,
            "response" | "item" | "error" => return None,
            _ => Member::Other,
        };
        let start = s.pos;
        e.member(s, member)?;
        if let Some(hole) = holes.get_mut(members) {
            *hole = (start, s.pos, member);
        }
        members += 1;
        Some(())
    })?;
    let event = s.at_end().then(|| e.event())??;
    let holes = holes.get(..members).unwrap_or_default();
    // Values that stay in the template's text: a lone `type` (which one it
    // is goes into the memo), and what is skipped and neither a string nor
    // a number (`logprobs: []`). Same bytes, same reading; the rest varies.
    let types = holes.iter().filter(|h| h.2 == Member::Type).count();
    let varies = |&&(start, _, member): &&(usize, usize, Member)| match member {
        Member::Type => types > 1,
        Member::Other => matches!(text.as_bytes().get(start), Some(b'"' | b'-' | b'0'..=b'9')),
        _ => true,
    };
    let holes: Vec<_> = holes.iter().filter(varies).copied().collect();
    memo.template = Template::cut(text, &holes);
    memo.arguments = (types == 1).then_some(event.arguments);
    Some(event)
}

/// A delta event's fields as its members are read.
#[derive(Debug, Default)]
struct Partial<'a> {
    arguments: Option<bool>,
    delta: Option<Cow<'a, str>>,
    item_id: Option<Cow<'a, str>>,
    output_index: Option<i64>,
}

impl<'a> Partial<'a> {
    /// The value of one member at the scanner's position (the last of
    /// duplicate keys wins, as in the full reading).
    #[inline(always)]
    fn member(&mut self, s: &mut Scanner<'a>, member: Member) -> Option<()> {
        match member {
            Member::Type => {
                self.arguments = Some(match &*s.string()? {
                    "response.output_text.delta" => false,
                    "response.function_call_arguments.delta" => true,
                    _ => return None,
                })
            }
            Member::Delta => self.delta = Some(s.string()?),
            Member::ItemId => self.item_id = s.field(Scanner::string)?.into_value(),
            Member::OutputIndex => self.output_index = s.field(Scanner::integer)?.into_value(),
            Member::Other => s.skip(0)?,
        }
        Some(())
    }

    /// The event, once every member is read: a delta event has a type and
    /// a delta.
    #[inline(always)]
    fn event(self) -> Option<DeltaEvent<'a>> {
        let Partial { arguments, delta, item_id, output_index } = self;
        Some(DeltaEvent { arguments: arguments?, delta: delta?, item_id, output_index })
    }
}
