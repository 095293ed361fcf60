//! View events: what became visible while a JSON text streams in, and a
//! recording sink that keeps them for the Ruby binding to apply.

use crate::json::JsonValue;

/// The kind of value a [`ViewSink::open`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    /// `{`: keys and values follow.
    Object,
    /// `[`: values follow, each pushed.
    Array,
    /// `"`: text follows in [`ViewSink::append`] calls.
    String,
}

/// Receives what becomes visible while the parser reads.
///
/// Applying the events in order to an empty tree gives the visible view: a
/// value appears at its slot when it starts (containers and strings) or when
/// it is complete (numbers, `true`, `false`, `null`); strings grow by
/// appends. A key given twice in one object names the same slot again (the
/// later value replaces the earlier one in place, as a Ruby Hash does).
pub trait ViewSink {
    /// A value began at a slot: `key` is `Some(k)` inside an object, `None`
    /// inside an array (push) or at the root.
    fn open(&mut self, key: Option<&str>, kind: ContainerKind);
    /// Text to append to the string currently open (the innermost open
    /// container is a String). Never empty.
    fn append(&mut self, text: &str);
    /// A number, `true`, `false` or `null` is complete at a slot (same key
    /// rule as [`ViewSink::open`]).
    fn scalar(&mut self, key: Option<&str>, value: &JsonValue);
    /// The innermost open container (object, array or string) is complete.
    fn close(&mut self);
}

/// The sink that ignores everything (one-shot parsing).
impl ViewSink for () {
    #[inline(always)]
    fn open(&mut self, _key: Option<&str>, _kind: ContainerKind) {}
    #[inline(always)]
    fn append(&mut self, _text: &str) {}
    #[inline(always)]
    fn scalar(&mut self, _key: Option<&str>, _value: &JsonValue) {}
    #[inline(always)]
    fn close(&mut self) {}
}

/// One recorded event, borrowed from a [`ViewEvents`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ViewEvent<'a> {
    /// See [`ViewSink::open`].
    Open {
        /// The slot's key inside an object; `None` in an array or at the root.
        key: Option<&'a str>,
        /// What starts.
        kind: ContainerKind,
    },
    /// See [`ViewSink::append`].
    Append(&'a str),
    /// See [`ViewSink::scalar`].
    Scalar {
        /// The slot's key inside an object; `None` in an array or at the root.
        key: Option<&'a str>,
        /// The complete value.
        value: &'a JsonValue,
    },
    /// See [`ViewSink::close`].
    Close,
}

/// A byte range into the text arena.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
}

#[derive(Debug, Clone, Copy)]
enum Recorded {
    Open { key: Option<Span>, kind: ContainerKind },
    Append(Span),
    Scalar { key: Option<Span>, value: usize },
    Close,
}

/// A recording sink, meant to be kept per stream and reused: events go to a
/// `Vec`, all key and appended text to one `String` arena, scalars to a side
/// table. After [`ViewEvents::clear`] the capacity stays, so steady-state
/// recording allocates nothing (except cloning a number's text).
///
/// Consecutive appends are merged into one event (they always target the
/// same open string).
#[derive(Debug, Default, Clone)]
pub struct ViewEvents {
    events: Vec<Recorded>,
    text: String,
    scalars: Vec<JsonValue>,
}

static NULL: JsonValue = JsonValue::Null;

impl ViewEvents {
    /// Forgets all events, keeping the allocated capacity.
    pub fn clear(&mut self) {
        self.events.clear();
        self.text.clear();
        self.scalars.clear();
    }

    /// True when no event was recorded since the last [`ViewEvents::clear`].
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The recorded events, in order.
    pub fn iter(&self) -> impl Iterator<Item = ViewEvent<'_>> + '_ {
        self.events.iter().map(move |event| match *event {
            Recorded::Open { key, kind } => ViewEvent::Open { key: key.map(|k| self.span(k)), kind },
            Recorded::Append(span) => ViewEvent::Append(self.span(span)),
            Recorded::Scalar { key, value } => ViewEvent::Scalar {
                key: key.map(|k| self.span(k)),
                value: self.scalars.get(value).unwrap_or(&NULL),
            },
            Recorded::Close => ViewEvent::Close,
        })
    }

    fn span(&self, span: Span) -> &str {
        // Spans are made by `store` on char boundaries of `text`.
        self.text.get(span.start..span.end).unwrap_or_default()
    }

    fn store(&mut self, text: &str) -> Span {
        #[cfg(test)]
        super::tests::count(text.len());
        let start = self.text.len();
        self.text.push_str(text);
        Span { start, end: self.text.len() }
    }
}

impl ViewSink for ViewEvents {
    fn open(&mut self, key: Option<&str>, kind: ContainerKind) {
        let key = key.map(|k| self.store(k));
        self.events.push(Recorded::Open { key, kind });
    }

    fn append(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let span = self.store(text);
        // An append right after an append extends it: its span ends where
        // the new text starts, at the end of the arena.
        if let Some(Recorded::Append(last)) = self.events.last_mut() {
            if last.end == span.start {
                last.end = span.end;
                return;
            }
        }
        self.events.push(Recorded::Append(span));
    }

    fn scalar(&mut self, key: Option<&str>, value: &JsonValue) {
        let key = key.map(|k| self.store(k));
        self.scalars.push(value.clone());
        self.events.push(Recorded::Scalar { key, value: self.scalars.len() - 1 });
    }

    fn close(&mut self) {
        self.events.push(Recorded::Close);
    }
}
