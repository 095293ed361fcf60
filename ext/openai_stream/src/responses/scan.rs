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
//! the member values that change from event to event as holes. The next
//! event with the same keys in the same places is read by reading each
//! value again with the same reader, at the same place: two comparisons and
//! a short one per hole instead of the scan. Both ways run one function per
//! member ([`Partial::member`]), so they agree. The values kept in the
//! template's text are read the same for the same bytes, and the template
//! keeps what they say: a lone `type` (which event), a lone `output_index`
//! (where the deltas go), and what is skipped and says nothing:
//! `content_index`, and values that are neither strings nor numbers
//! (`logprobs: []`). A lone `item_id` that is a plain string (no escape, at
//! most [`MAX_SAME_ID`] bytes) is a hole compared whole
//! ([`Member::SameItemId`]): its text is the value. So in the usual event
//! only the sequence number and the delta are read; duplicated members,
//! other ids and other strings and numbers (`obfuscation`) stay holes.
//!
//! A template thus reads the deltas of one output item. The memo keeps one
//! per item whose deltas interleave (up to [`MAX_SHAPES`]), and tries
//! first the one that read the event after the last one's template last
//! time: one call after another, or in turn, the first it tries reads.

use std::borrow::Cow;

use super::model::DeltaEvent;
use crate::scan::{Scanner, Template};

/// Most members of an event that leaves a template.
const MAX_MEMBERS: usize = 12;

/// Longest `item_id` text, quotes included, that a template compares whole
/// (OpenAI's are about 50 bytes); a longer one is read as a hole.
const MAX_SAME_ID: usize = 128;

/// Most templates a memo keeps: one per output item whose deltas
/// interleave (parallel calls, a message and its calls).
const MAX_SHAPES: usize = 4;

/// What a member of a delta event is to its reading, by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// `type`: which of the two events, or none of them.
    Type,
    Delta,
    ItemId,
    /// In a template, a lone `item_id` that is a plain string: the same
    /// text, compared whole, is the same id ([`Shape::item_id`]).
    SameItemId,
    OutputIndex,
    /// `content_index`: checked and skipped, kept in a template's text.
    ContentIndex,
    /// Any other key (`sequence_number`, `logprobs`, `obfuscation`...): its
    /// value is checked and skipped.
    Other,
}

/// What a stream's reading of delta events remembers of the last ones the
/// scanner read: their templates (see the module documentation). Each
/// processor keeps its own.
#[derive(Debug, Default)]
pub struct DeltaMemo {
    shapes: Vec<Shape>,
    /// The shape that read the last event.
    last: usize,
    /// For each shape, the one that read the event after its own last.
    after: [usize; MAX_SHAPES],
}

/// One template, and what the values kept in its text say.
#[derive(Debug)]
struct Shape {
    template: Template<Member>,
    /// The lone `type`'s event.
    arguments: Option<bool>,
    /// The lone `output_index` (None also when it is null or absent).
    output_index: Option<i64>,
    /// The text of a [`Member::SameItemId`] hole, quotes included.
    item_id: String,
}

impl Shape {
    #[inline(always)]
    fn read<'a>(&self, bytes: &'a [u8]) -> Option<DeltaEvent<'a>> {
        let mut e =
            Partial { arguments: self.arguments, output_index: self.output_index, ..Partial::default() };
        self.template.read(bytes, |s, member| match member {
            Member::SameItemId => {
                e.item_id = Some(Cow::Borrowed(s.same_string(&self.item_id)?));
                Some(())
            }
            _ => e.member(s, member),
        })?;
        e.event()
    }
}

/// The bytes of a payload as one of the stream's delta events read by the
/// scanner with other values: that event, the UTF-8 check of the values
/// included. None: [`read`] the text as usual.
#[inline]
pub fn plain<'a>(bytes: &'a [u8], memo: &mut DeltaMemo) -> Option<DeltaEvent<'a>> {
    let first = memo.after[memo.last];
    let order = std::iter::once(first).chain((0..memo.shapes.len()).filter(|&k| k != first));
    for k in order {
        if let Some(event) = memo.shapes.get(k).and_then(|shape| shape.read(bytes)) {
            memo.after[memo.last] = k;
            memo.last = k;
            return Some(event);
        }
    }
    None
}

/// A delta event read by the scanner, or None when the full reading must
/// decide (see the module documentation). Its template joins the memo's.
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
            "content_index" => Member::ContentIndex,
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
    if let Some(shape) = holes.get(..members).and_then(|holes| shape(text, holes, &event)) {
        memo.add(shape);
    }
    Some(event)
}

/// The template of an event read by the scanner (see the module
/// documentation): None when it cannot be cut.
fn shape(text: &str, holes: &[(usize, usize, Member)], event: &DeltaEvent) -> Option<Shape> {
    let lone = |member| holes.iter().filter(|h| h.2 == member).count() == 1;
    let (one_type, one_index, one_id) = (lone(Member::Type), lone(Member::OutputIndex), lone(Member::ItemId));
    let mut item_id = String::new();
    let mut cut = Vec::with_capacity(holes.len());
    for &(start, end, member) in holes {
        let value = text.get(start..end)?;
        let member = match member {
            Member::Type if one_type => continue,
            Member::OutputIndex if one_index => continue,
            Member::ContentIndex => continue,
            Member::ItemId
                if one_id
                    && value.len() <= MAX_SAME_ID
                    && value.starts_with('"')
                    && !value.contains('\\') =>
            {
                value.clone_into(&mut item_id);
                Member::SameItemId
            }
            Member::Other if !matches!(value.as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9')) => continue,
            member => member,
        };
        cut.push((start, end, member));
    }
    Some(Shape {
        template: Template::cut(text, &cut)?,
        arguments: one_type.then_some(event.arguments),
        output_index: event.output_index.filter(|_| one_index),
        item_id,
    })
}

impl DeltaMemo {
    /// A new template, read next: in a free place, or in place of the one
    /// after the last (the oldest, when items come one after another).
    fn add(&mut self, shape: Shape) {
        let k = self.shapes.len();
        let k = if k < MAX_SHAPES {
            self.shapes.push(shape);
            k
        } else {
            let k = (self.last + 1) % MAX_SHAPES;
            self.shapes[k] = shape;
            k
        };
        self.after[self.last] = k;
        self.after[k] = k;
        self.last = k;
    }
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
            Member::ContentIndex | Member::Other => s.skip(0)?,
            Member::SameItemId => return None,
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
