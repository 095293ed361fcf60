//! What one call into the processor produced, kept in reusable buffers so a
//! steady stream allocates nothing per event: text in one arena, final
//! parameters in a list, items as small records pointing into both.
//!
//! A tool call appears at most once per output (the position of its first
//! appearance), which is what Discourse's `decode_chunk` does with a `Set` of
//! the ToolCall objects a raw chunk produced.

use crate::calls::CallId;
use crate::json::JsonValue;

#[derive(Debug, Clone, Copy)]
enum Slot {
    Text { start: u32, end: u32 },
    Call { call: CallId, completed: Option<u32> },
    Thinking { start: u32, end: u32, kind: Thinking },
}

/// What a thinking item (the Responses API's) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// A delta of a reasoning summary (partial).
    Delta,
    /// The whole summary of the finished reasoning item with that number.
    Reasoning(u32),
    /// What a native tool (web search) did; `with_items`: its provider info
    /// carries the response's output items.
    Tool { with_items: bool },
    /// No message: the response's output items, for the next turn.
    OutputItems,
    /// A chat response's reasoning up to the item that follows it, whole
    /// (rule 77).
    Chat,
}

/// One item of an output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item<'a> {
    /// Text, whitespace kept.
    Text(&'a str),
    /// A partial call whose visible parameters changed (view events on the call).
    Progress(CallId),
    /// A completed call with its final parameters.
    Completed(CallId, &'a JsonValue),
    /// Thinking (the Responses API's reasoning summaries, native tools).
    Thinking { text: &'a str, kind: Thinking },
}

/// The items of one processor call.
#[derive(Debug, Default)]
pub struct Output {
    slots: Vec<Slot>,
    text: String,
    params: Vec<JsonValue>,
    /// Per call: (epoch, slot) of its appearance in this output.
    positions: Vec<(u64, u32)>,
    epoch: u64,
    /// Reasoning held for the next item, which it precedes (see
    /// [`Output::hold_thinking`]); kept across outputs.
    held: String,
    holding: bool,
}

impl Output {
    /// Empties the output for the next call (buffers are kept).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.text.clear();
        // Nearly always empty: the check skips a call of the drop glue.
        if !self.params.is_empty() {
            self.params.clear();
        }
        self.epoch += 1;
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The only item, when it is one text: the commonest output, read
    /// without the iterator of [`Output::items`].
    pub fn only_text(&self) -> Option<&str> {
        match self.slots[..] {
            [Slot::Text { start, end }] => Some(&self.text[start as usize..end as usize]),
            _ => None,
        }
    }

    /// The items, in order.
    pub fn items(&self) -> impl ExactSizeIterator<Item = Item<'_>> + '_ {
        self.slots.iter().map(|slot| match *slot {
            Slot::Text { start, end } => Item::Text(&self.text[start as usize..end as usize]),
            Slot::Call { call, completed: None } => Item::Progress(call),
            Slot::Call { call, completed: Some(p) } => Item::Completed(call, &self.params[p as usize]),
            Slot::Thinking { start, end, kind } => {
                Item::Thinking { text: &self.text[start as usize..end as usize], kind }
            }
        })
    }

    /// Reasoning that comes out, whole, in front of the next text or
    /// completed call (in this output or a later one), or at
    /// [`Output::release_held`]: what a reader of the items sees before
    /// the text or the calls it led to. Not in front of a partial update:
    /// reasoning that resumes between parallel calls would be cut in two,
    /// and Discourse's bot sends back the thinking it holds when a call
    /// completes (the last item, in some versions). `text` adds to what is
    /// held.
    pub(crate) fn hold_thinking(&mut self, text: &str) {
        self.held.push_str(text);
        self.holding = true;
    }

    /// The held reasoning as an item now, if any: before every item pushed,
    /// and at the end of a stream.
    #[inline(always)]
    pub(crate) fn release_held(&mut self) {
        if self.holding {
            self.push_held();
        }
    }

    #[cold]
    fn push_held(&mut self) {
        self.holding = false;
        let mut held = std::mem::take(&mut self.held);
        self.push_thinking(&held, Thinking::Chat);
        held.clear();
        self.held = held;
    }

    /// The held reasoning as an item at `slot`, the items from there on one
    /// further.
    #[cold]
    fn release_held_at(&mut self, slot: usize) {
        self.push_held();
        self.slots[slot..].rotate_right(1);
        for (epoch, at) in &mut self.positions {
            if *epoch == self.epoch && (*at as usize) >= slot {
                *at += 1;
            }
        }
    }

    pub(crate) fn push_text(&mut self, text: &str) {
        self.release_held();
        let start = self.text.len() as u32;
        self.text.push_str(text);
        self.slots.push(Slot::Text { start, end: self.text.len() as u32 });
    }

    /// Text made of several pieces (content parts), as one item.
    pub(crate) fn push_text_parts<'p>(&mut self, parts: impl Iterator<Item = &'p str>) {
        let mut parts = parts.filter(|p| !p.is_empty()).peekable();
        if parts.peek().is_some() {
            self.release_held();
        }
        let start = self.text.len() as u32;
        for p in parts {
            self.text.push_str(p);
        }
        if self.text.len() as u32 > start {
            self.slots.push(Slot::Text { start, end: self.text.len() as u32 });
        }
    }

    pub(crate) fn push_thinking(&mut self, text: &str, kind: Thinking) {
        let start = self.text.len() as u32;
        self.text.push_str(text);
        self.slots.push(Slot::Thinking { start, end: self.text.len() as u32, kind });
    }

    pub(crate) fn push_progress(&mut self, call: CallId) {
        if self.position(call).is_none() {
            self.remember(call);
            self.slots.push(Slot::Call { call, completed: None });
        }
    }

    pub(crate) fn push_completed(&mut self, call: CallId, params: JsonValue) {
        if self.holding {
            // In front of the first call of this output still partial (this
            // one, or one it led to as well), as when the calls complete
            // together without partial updates.
            match self.slots.iter().position(|s| matches!(s, Slot::Call { completed: None, .. })) {
                Some(slot) => self.release_held_at(slot),
                None => self.push_held(),
            }
        }
        let p = self.params.len() as u32;
        self.params.push(params);
        match self.position(call) {
            Some(slot) => self.slots[slot] = Slot::Call { call, completed: Some(p) },
            None => {
                self.remember(call);
                self.slots.push(Slot::Call { call, completed: Some(p) });
            }
        }
    }

    fn position(&self, call: CallId) -> Option<usize> {
        match self.positions.get(call.index()) {
            Some(&(epoch, slot)) if epoch == self.epoch => Some(slot as usize),
            _ => None,
        }
    }

    fn remember(&mut self, call: CallId) {
        let i = call.index();
        if self.positions.len() <= i {
            self.positions.resize(i + 1, (0, 0));
        }
        self.positions[i] = (self.epoch, self.slots.len() as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_appears_once_at_its_first_position() {
        let mut out = Output::default();
        out.clear();
        out.push_progress(CallId(0));
        out.push_text("x");
        out.push_progress(CallId(0));
        out.push_completed(CallId(0), JsonValue::Null);
        out.push_completed(CallId(1), JsonValue::Bool(true));
        let items: Vec<_> = out.items().collect();
        assert_eq!(
            items,
            [
                Item::Completed(CallId(0), &JsonValue::Null),
                Item::Text("x"),
                Item::Completed(CallId(1), &JsonValue::Bool(true))
            ]
        );
        out.clear();
        out.push_progress(CallId(1));
        assert_eq!(out.items().collect::<Vec<_>>(), [Item::Progress(CallId(1))]);
    }

    #[test]
    fn held_reasoning_goes_in_front_of_the_first_partial_call_of_the_output_when_a_call_completes() {
        let mut out = Output::default();
        out.clear();
        out.push_completed(CallId(9), JsonValue::Null);
        out.hold_thinking("r1 ");
        out.push_progress(CallId(0));
        out.hold_thinking("r2");
        out.push_progress(CallId(1));
        out.push_completed(CallId(1), JsonValue::Bool(true));
        out.push_completed(CallId(0), JsonValue::Bool(false));
        let thinking = Item::Thinking { text: "r1 r2", kind: Thinking::Chat };
        assert_eq!(
            out.items().collect::<Vec<_>>(),
            [
                Item::Completed(CallId(9), &JsonValue::Null),
                thinking,
                Item::Completed(CallId(0), &JsonValue::Bool(false)),
                Item::Completed(CallId(1), &JsonValue::Bool(true)),
            ]
        );
        // Partial updates alone keep it held.
        out.clear();
        out.hold_thinking("r3");
        out.push_progress(CallId(2));
        assert_eq!(out.items().collect::<Vec<_>>(), [Item::Progress(CallId(2))]);
    }

    #[test]
    fn only_text_is_the_text_of_an_output_of_one_text_item() {
        let mut out = Output::default();
        assert_eq!(out.only_text(), None);
        out.push_text("first");
        out.clear();
        out.push_text("héllo");
        assert_eq!(out.only_text(), Some("héllo"));
        out.push_text("again");
        assert_eq!(out.only_text(), None);
        out.clear();
        out.push_thinking("hm", Thinking::Delta);
        assert_eq!(out.only_text(), None);
        out.clear();
        out.push_progress(CallId(0));
        assert_eq!(out.only_text(), None);
    }

    #[test]
    fn empty_parts_make_no_item() {
        let mut out = Output::default();
        out.push_text_parts(["", ""].into_iter());
        assert!(out.is_empty());
        out.push_text_parts(["a", "b"].into_iter());
        assert_eq!(out.items().collect::<Vec<_>>(), [Item::Text("ab")]);
    }
}
