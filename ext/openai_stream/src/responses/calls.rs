//! How the Responses API's calls enter the per-call store: each is opened
//! by its output item, with its id and name, and its arguments are appended
//! (or replaced by the whole ones) to that call; no slotting.

use crate::anomaly::Anomalies;
use crate::calls::{Arguments, CallId, Calls, Nesting};

impl Calls {
    /// Opens a call whose id and name arrive together, before any argument
    /// (the Responses API's `output_item.added`): no slotting, the caller
    /// knows which call each later fragment belongs to. An empty id gets a
    /// generated one, reported as for a chat call.
    pub fn open_call(&mut self, id: &str, name: &str, anomalies: &mut Anomalies) -> CallId {
        self.begin_list();
        CallId(self.start(Some(id), name, None, anomalies))
    }

    /// The server's id for a call, learnt late (a Responses item whose
    /// `call_id` came only with its done item): a generated id gives way to
    /// it; a different server id is reported and the first kept.
    pub fn learn_id(&mut self, id: CallId, server_id: &str, anomalies: &mut Anomalies) {
        if id.index() < self.calls.len() && !server_id.is_empty() {
            self.note_id_change(id.0, Some(server_id), anomalies);
        }
    }

    /// Appends an arguments fragment to a known call, with the checks and
    /// the incremental parse of a chat fragment. Returns true when the
    /// visible parameters changed.
    pub fn append_text(&mut self, id: CallId, text: &str, anomalies: &mut Anomalies) -> bool {
        if id.index() >= self.calls.len() {
            return false;
        }
        self.append(id.0, &Arguments::Text(text.into()), anomalies)
    }

    /// Replaces the arguments text received so far with `text` (the whole
    /// arguments a server sent again at the end). Partial updates of the call
    /// stop: its streamed view no longer matches; completion gives `text`.
    pub fn replace_text(&mut self, id: CallId, text: &str) {
        if let Some(c) = self.calls.get_mut(id.index()).filter(|c| !c.completed) {
            c.raw = text.to_owned();
            c.object = None;
            c.partial = None;
            c.nesting = Nesting::default();
        }
    }
}
