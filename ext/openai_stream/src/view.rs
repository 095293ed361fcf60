//! The partial view of a call whose arguments stream (partial tool calls):
//! its incremental parse, and the view events inside the root object that
//! the caller applies to the ToolCall's parameters.

use crate::anomaly::{Anomalies, AnomalyKind};
use crate::calls::Call;
use crate::json::{ContainerKind, IncrementalParser, JsonValue, ViewEvents, ViewSink};

/// Incremental parse of one call's arguments, for partial tool calls.
#[derive(Debug, Default)]
pub(crate) struct PartialState {
    pub(crate) parser: IncrementalParser,
    pub(crate) events: ViewEvents,
    /// Open containers, the root object included.
    depth: u32,
}

/// Feeds text to the call's incremental parser; returns whether the visible
/// parameters changed. A parse error ends partial updates for the call.
pub(crate) fn feed_partial(call: &mut Call, text: &str, anomalies: &mut Anomalies) -> bool {
    let Some(state) = call.partial.as_mut() else {
        return false;
    };
    let mut view =
        RootView { events: &mut state.events, depth: &mut state.depth, changed: false, not_an_object: false };
    let problem = match state.parser.feed(text, &mut view) {
        Err(e) => format!("arguments stopped parsing ({e})"),
        Ok(()) if view.not_an_object => "arguments are not a JSON object".to_owned(),
        Ok(()) => return view.changed,
    };
    call.partial = None;
    let msg = format!("call {:?}: {problem}; partial updates stopped", call.id);
    anomalies.push(call.anomaly(AnomalyKind::PartialArgumentsBroken, msg).excerpt(&call.raw));
    false
}

/// Arguments that arrived as an object: shown whole.
pub(crate) fn replay_partial(call: &mut Call, value: &JsonValue) -> bool {
    let Some(state) = call.partial.as_mut() else {
        return false;
    };
    let JsonValue::Object(pairs) = value else {
        return false;
    };
    for (k, v) in pairs {
        replay(&mut state.events, Some(k), v);
    }
    !pairs.is_empty()
}

/// Emits the view events that build `value` at `key`. Recursion depth is
/// bounded by the depth limit of whatever deserialized `value`.
fn replay(sink: &mut impl ViewSink, key: Option<&str>, value: &JsonValue) {
    match value {
        JsonValue::String(s) => {
            sink.open(key, ContainerKind::String);
            if !s.is_empty() {
                sink.append(s);
            }
            sink.close();
        }
        JsonValue::Array(items) => {
            sink.open(key, ContainerKind::Array);
            for item in items {
                replay(sink, None, item);
            }
            sink.close();
        }
        JsonValue::Object(pairs) => {
            sink.open(key, ContainerKind::Object);
            for (k, v) in pairs {
                replay(sink, Some(k), v);
            }
            sink.close();
        }
        scalar => sink.scalar(key, scalar),
    }
}

/// Passes events inside the root object to the call's view and notes
/// whether anything visible happened. The root object itself is the
/// ToolCall's parameters Hash, which always exists.
struct RootView<'a> {
    events: &'a mut ViewEvents,
    depth: &'a mut u32,
    changed: bool,
    not_an_object: bool,
}

impl ViewSink for RootView<'_> {
    fn open(&mut self, key: Option<&str>, kind: ContainerKind) {
        self.not_an_object |= *self.depth == 0 && kind != ContainerKind::Object;
        *self.depth += 1;
        if *self.depth > 1 && !self.not_an_object {
            self.events.open(key, kind);
            self.changed = true;
        }
    }

    fn append(&mut self, text: &str) {
        if *self.depth > 1 && !self.not_an_object {
            self.events.append(text);
            self.changed = true;
        }
    }

    fn scalar(&mut self, key: Option<&str>, value: &JsonValue) {
        self.not_an_object |= *self.depth == 0;
        if !self.not_an_object {
            self.events.scalar(key, value);
            self.changed = true;
        }
    }

    fn close(&mut self) {
        *self.depth = self.depth.saturating_sub(1);
        if *self.depth >= 1 && !self.not_an_object {
            // Recorded so the caller's stack of open containers stays in
            // step, but a value that ends shows nothing new: not a change.
            self.events.close();
        }
    }
}
