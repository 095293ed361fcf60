//! State per output item of a Responses stream, keyed by `output_index` and
//! item id: each function call is its own entry (so calls added before
//! either is done, and their interleaved deltas, stay apart), each reasoning
//! item keeps its own summary.

use std::borrow::Cow;

use serde::Deserialize;

use super::in_band::provider_error;
use super::model::{array_at, int_at, str_at, ItemKind, OutputItem, Place, Status};
use super::Responses;
use crate::anomaly::{excerpt, Anomaly, AnomalyKind};
use crate::calls::CallId;
use crate::driver::{keep_first, State};
use crate::error::{says_error, Error};
use crate::json::JsonValue;
use crate::lenient::{Field, Text};
use crate::output::Thinking;
use crate::scan::same;

/// What an output item is, as far as the processor follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Call(CallId),
    Reasoning(u32),
    Message,
    Other,
}

#[derive(Debug)]
struct Entry {
    output_index: Option<i64>,
    item_id: Option<String>,
    slot: Slot,
}

/// A reasoning item.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reasoning {
    /// The item id (`rs_...`).
    pub id: Option<String>,
    pub encrypted_content: Option<String>,
    /// The summary streamed so far (the whole summary once finished).
    pub summary: String,
    /// The id of the message item that followed it, once known.
    pub next_message_id: Option<String>,
    pub finished: bool,
}

#[derive(Debug, Default)]
pub(super) struct Items {
    entries: Vec<Entry>,
    pub(super) reasonings: Vec<Reasoning>,
    /// Per call: the item's (`id`, `call_id`).
    pub(super) call_items: Vec<(Option<String>, Option<String>)>,
    /// Finished reasoning items waiting for the next message's id.
    waiting: Vec<u32>,
    /// Reasonings linked to a message during the current call.
    pub(super) linked: Vec<u32>,
    /// Where (output index, item id) a summary part finished last: the
    /// next part of that item starts after a blank line; another item's
    /// first part does not.
    part_done: Option<(Option<i64>, Option<String>)>,
    /// How the response ended, and the incomplete reason.
    pub(super) ending: Option<(Status, Option<String>)>,
    /// See `ResponsesProcessor::output_items`.
    pub(super) output_items: Vec<JsonValue>,
    reported_events: Vec<String>,
    /// Per message item whose text came, what was handed out (rule 80).
    texts: Vec<MessageText>,
    /// A whole text that matched no message was reported.
    unmatched_reported: bool,
}

/// The text of one message item as handed out: its deltas, and what its
/// whole text (an `output_text.done`, the done item, the final output)
/// added to them.
#[derive(Debug)]
struct MessageText {
    output_index: Option<i64>,
    item_id: Option<String>,
    given: String,
    /// Text came as deltas.
    streamed: bool,
    /// The content parts an `output_text.done` settled: its
    /// `content_index` and where its text is in `given`.
    parts: Vec<(Option<i64>, usize, usize)>,
    /// A whole text that differs was reported (once per item).
    reported: bool,
    /// Refusal came for the message (rule 81).
    refused: bool,
}

impl Items {
    /// A summary part of the item at `at` finished before.
    fn part_done_at(&self, at: Place) -> bool {
        self.part_done
            .as_ref()
            .is_some_and(|(index, id)| *index == at.output_index && id.as_deref() == at.item_id)
    }

    /// The item an event belongs to: by item id first (of two items that
    /// share one, rule 59, the one at the event's `output_index`), else by
    /// `output_index` (the newest entry there).
    fn find(&self, at: Place, id: Option<&str>) -> Option<Slot> {
        let id = id.or(at.item_id);
        // (Item ids are short: compared without a call of memcmp.)
        let by_id = || {
            let id = id?.as_bytes();
            let named = |e: &&Entry| e.item_id.as_ref().is_some_and(|i| same(i.as_bytes(), id));
            let here = |e: &&Entry| at.output_index.is_some() && e.output_index == at.output_index;
            let unplaced = |e: &&Entry| e.output_index.is_none() || at.output_index.is_none();
            let entries = || self.entries.iter();
            entries()
                .rfind(|e| named(e) && here(e))
                .or_else(|| entries().rfind(|e| named(e) && unplaced(e)))
                .or_else(|| entries().rfind(named))
        };
        let by_index =
            || at.output_index.and_then(|_| self.entries.iter().rfind(|e| e.output_index == at.output_index));
        by_id().or_else(by_index).map(|e| e.slot)
    }

    /// The call of the function call item whose `call_id` is `call_id`.
    fn by_call_id(&self, call_id: &str) -> Option<CallId> {
        let at = self.call_items.iter().rposition(|(_, c)| c.as_deref() == Some(call_id))?;
        Some(CallId(at as u32))
    }

    /// The `call_id` the item of streamed call `call` was sent with.
    fn call_id_of(&self, call: CallId) -> Option<&str> {
        self.call_items.get(call.index()).and_then(|(_, c)| c.as_deref())
    }

    /// Whether an item with `item`'s id was announced: `Some(true)` when
    /// it is `item` again (a relay that repeats events: the newest item of
    /// that id is of the same kind and, for a function call, has the same
    /// `call_id`, or one of them has none), `Some(false)` when `item` is
    /// another item that reuses the id.
    fn announced(&self, item: &OutputItem) -> Option<bool> {
        let id = item.id?;
        let e = self.entries.iter().rfind(|e| e.item_id.as_deref() == Some(id))?;
        Some(match (e.slot, item.kind) {
            (Slot::Call(call), ItemKind::FunctionCall) => {
                self.call_id_of(call).zip(item.call_id()).is_none_or(|(a, b)| a == b)
            }
            (Slot::Reasoning(_), ItemKind::Reasoning) | (Slot::Message, ItemKind::Message) => true,
            (Slot::Other, ItemKind::WebSearch | ItemKind::Other) => true,
            _ => false,
        })
    }

    fn add(&mut self, at: Place, id: Option<&str>, slot: Slot) {
        self.entries.push(Entry { output_index: at.output_index, item_id: id.map(str::to_owned), slot });
    }

    /// The streamed call of the function call `item` of the final output:
    /// the one with its `call_id`, else the one with its item id when
    /// either has no `call_id` (another call may reuse an id).
    fn streamed_call(&self, item: &OutputItem) -> Option<CallId> {
        if let Some(call) = item.call_id().and_then(|id| self.by_call_id(id)) {
            return Some(call);
        }
        let id = item.id?;
        self.entries.iter().find_map(|e| match e.slot {
            Slot::Call(call)
                if e.item_id.as_deref() == Some(id)
                    && (item.call_id().is_none() || self.call_id_of(call).is_none()) =>
            {
                Some(call)
            }
            _ => None,
        })
    }

    /// The message text an event at `at` belongs to: by item id, else by
    /// `output_index`, else one streamed without either.
    fn text_at(&self, at: Place) -> Option<usize> {
        let texts = &self.texts;
        let by_id = |id: &str| {
            texts
                .iter()
                .rposition(|t| t.item_id.as_deref().is_some_and(|i| same(i.as_bytes(), id.as_bytes())))
        };
        at.item_id
            .and_then(by_id)
            .or_else(|| at.output_index.and_then(|n| texts.iter().rposition(|t| t.output_index == Some(n))))
            .or_else(|| texts.iter().rposition(|t| t.item_id.is_none() && t.output_index.is_none()))
    }

    fn new_text(&mut self, at: Place) -> usize {
        let item_id = at.item_id.map(str::to_owned);
        self.texts.push(MessageText {
            output_index: at.output_index,
            item_id,
            given: String::new(),
            streamed: false,
            parts: Vec::new(),
            reported: false,
            refused: false,
        });
        self.texts.len() - 1
    }

    /// Notes that refusal came for the message at `at`: whether some had
    /// come before.
    fn note_refusal(&mut self, at: Place) -> bool {
        let t = self.message_at(at);
        std::mem::replace(&mut t.refused, true)
    }

    /// The message an event of its text or refusal at `at` belongs to
    /// (one that names none: the last message announced), new if none.
    fn message_at(&mut self, at: Place) -> &mut MessageText {
        let owned = self.last_message(at);
        let at = placed(&owned, at);
        let k = match self.text_at(at) {
            Some(k) => k,
            None => self.new_text(at),
        };
        &mut self.texts[k]
    }

    /// Whether a message item was announced with the event's id (else,
    /// for an event without one, at its `output_index`).
    fn announced_message(&self, at: Place) -> bool {
        let message = |e: &Entry| match (at.item_id, at.output_index) {
            (Some(id), _) => e.item_id.as_deref() == Some(id),
            (None, Some(n)) => e.output_index == Some(n),
            (None, None) => false,
        };
        self.entries.iter().any(|e| e.slot == Slot::Message && message(e))
    }

    /// Where the last message item announced is, for an event of a
    /// message's text that says neither (it is that message's).
    fn last_message(&self, at: Place) -> Option<(Option<String>, Option<i64>)> {
        if at.item_id.is_some() || at.output_index.is_some() {
            return None;
        }
        let e = self.entries.iter().rfind(|e| e.slot == Slot::Message)?;
        Some((e.item_id.clone(), e.output_index))
    }

    /// A text delta handed out: most go to the message of the last one.
    #[inline]
    fn streamed_text(&mut self, at: Place, delta: &str) {
        let last = self.texts.last_mut().filter(|t| match (at.item_id, t.item_id.as_deref()) {
            (Some(id), Some(i)) => same(i.as_bytes(), id.as_bytes()),
            (None, None) => at.output_index.is_some() && at.output_index == t.output_index,
            _ => false,
        });
        if let Some(t) = last {
            t.streamed = true;
            t.given.push_str(delta);
            return;
        }
        self.streamed_text_apart(at, delta);
    }

    #[cold]
    fn streamed_text_apart(&mut self, at: Place, delta: &str) {
        let t = self.message_at(at);
        t.streamed = true;
        t.given.push_str(delta);
    }

    /// A reasoning item's entry and state; its number.
    fn add_reasoning(&mut self, at: Place, item: &OutputItem) -> u32 {
        let n = self.reasonings.len() as u32;
        self.reasonings.push(Reasoning {
            id: item.id.map(str::to_owned),
            encrypted_content: item.str("encrypted_content").map(str::to_owned),
            ..Reasoning::default()
        });
        self.add(at, item.id, Slot::Reasoning(n));
        n
    }
}

impl State<Responses> {
    /// One streamed event object, by its `type`.
    pub(super) fn apply_event(&mut self, value: &JsonValue) -> Result<(), Error> {
        let at = Place {
            output_index: int_at(value, "output_index"),
            item_id: str_at(value, "item_id").filter(|s| !s.is_empty()),
        };
        let delta = value.get("delta").map_or(Ok(Field::Missing), Field::<Text>::deserialize);
        if let (Ok(Field::Wrong(kind)), Some(d)) = (&delta, value.get("delta")) {
            let message = format!("delta was {}; ignored", kind.described());
            self.anomalies
                .push(Anomaly::new(AnomalyKind::IgnoredField, message).field("delta").excerpt(&d.to_json()));
        }
        let delta = delta.as_ref().ok().and_then(Field::get).map_or("", |Text(t)| t);
        let item = value.get("item").filter(|i| i.is_object()).map(OutputItem::read);
        let response = value.get("response").filter(|r| r.is_object());
        let kind = str_at(value, "type");
        self.saw_event |= kind.is_some_and(|k| k.starts_with("response.") || k == "error");
        let mut result = Ok(());
        match (kind.unwrap_or(""), item) {
            ("response.output_text.delta", _) => self.apply_delta(false, at, delta),
            ("response.function_call_arguments.delta", _) => self.apply_delta(true, at, delta),
            ("response.output_item.added", Some(item)) => self.item_added(at, &item),
            ("response.output_item.done", Some(item)) => result = self.item_done(at, &item),
            ("response.function_call_arguments.done", _) => {
                if let Some(call) = self.call_at(at, None) {
                    if let Some(text) = self.whole_arguments(value) {
                        self.settle_arguments(call, &text);
                    }
                }
            }
            ("response.reasoning_summary_part.added", _) if self.own.items.part_done_at(at) => {
                self.summary_text(at, "\n\n")
            }
            ("response.refusal.delta", _) => {
                self.own.items.note_refusal(at);
                self.refused(delta);
            }
            ("response.refusal.done", _) => {
                if let Some(text) = str_at(value, "refusal") {
                    self.whole_refusal(at, text);
                }
            }
            ("response.output_text.done", _) => {
                if let Some(text) = str_at(value, "text") {
                    self.whole_text(at, text, Some(int_at(value, "content_index")));
                }
            }
            ("response.reasoning_summary_text.delta", _) => self.summary_text(at, delta),
            ("response.reasoning_summary_part.done", _) => {
                self.own.items.part_done = Some((at.output_index, at.item_id.map(str::to_owned)))
            }
            // In-band error without a type (LiteLLM's proxy, rule 40's shape).
            ("", _) if value.get("error").is_some_and(says_error) => result = Err(provider_error(value)),
            ("response.completed", _) => result = self.ended(Status::Completed, response),
            ("response.incomplete", _) => result = self.ended(Status::Incomplete, response),
            ("response.failed", _) => result = self.ended(Status::Failed, response),
            ("error", _) => result = Err(provider_error(value)),
            // Events that carry nothing the processor returns: the envelope
            // only, content part bookkeeping, `.done` events that repeat the
            // deltas, the progress of a web search (its item is read).
            (
                "response.created"
                | "response.in_progress"
                | "response.queued"
                | "response.web_search_call.in_progress"
                | "response.web_search_call.searching"
                | "response.web_search_call.completed"
                | "response.reasoning_summary_part.added"
                | "response.content_part.added"
                | "response.content_part.done"
                | "response.output_text.annotation.added"
                | "response.reasoning_summary_text.done"
                | "response.reasoning_text.delta"
                | "response.reasoning_text.done",
                _,
            ) => {}
            _ => self.ignored_event("event", kind),
        }
        // Usage may ride on any event's response envelope; the last wins.
        if let Some(usage) = response.and_then(|r| r.get("usage")) {
            self.apply_usage(usage);
        }
        result
    }

    /// A text or arguments delta (also the fast reading of the two
    /// commonest events).
    pub(super) fn apply_delta(&mut self, arguments: bool, at: Place, delta: &str) {
        if arguments {
            self.arguments_delta(at, delta);
        } else if !delta.is_empty() {
            self.own.items.streamed_text(at, delta);
            self.out.push_text(delta);
        }
    }

    /// The whole text of a message item, or (`part`: its `content_index`)
    /// of one of its content parts, sent after its deltas (rule 80): what
    /// they left out is handed out now, and a whole text that differs from
    /// what they gave is reported, what was handed out standing. A part's
    /// text is the text since the last part settled (its start, when later
    /// parts' deltas came already), and a repeat of a settled part is
    /// compared with what settled it. A text for a message
    /// that neither streamed text nor was announced with its id, in a
    /// response where others' text streamed, is reported and not handed
    /// out: it may be theirs under another id. An empty whole text says
    /// nothing (relays send one after the deltas).
    fn whole_text(&mut self, at: Place, whole: &str, part: Option<Option<i64>>) {
        if whole.is_empty() {
            return;
        }
        let items = &mut self.own.items;
        let owned = items.last_message(at);
        let at = placed(&owned, at);
        let k = match items.text_at(at) {
            Some(k) => k,
            None if items.announced_message(at) || !items.texts.iter().any(|t| t.streamed) => {
                items.new_text(at)
            }
            None => {
                if !std::mem::replace(&mut items.unmatched_reported, true) {
                    let what = format!(
                        "the whole text of message {} ({} bytes) matched no message whose text streamed, \
                         while others' did; not handed out (reported once per response)",
                        describe_place(at),
                        whole.len()
                    );
                    self.anomalies.push(Anomaly::new(AnomalyKind::TextMismatch, what).excerpt(whole));
                }
                return;
            }
        };
        let t = &mut items.texts[k];
        let settled = part.and_then(|c| t.parts.iter().position(|p| p.0 == c));
        let (start, end) = match (part, settled) {
            (None, _) => (0, t.given.len()),
            (Some(_), Some(n)) => (t.parts[n].1, t.parts[n].2),
            (Some(_), None) => {
                let start = t.parts.last().map_or(0, |p| p.2);
                // The deltas of later parts may have come already.
                let since = t.given.get(start..).unwrap_or_default();
                match since.len() > whole.len() && since.starts_with(whole) {
                    true => (start, start + whole.len()),
                    false => (start, t.given.len()),
                }
            }
        };
        let given = t.given.get(start..end).unwrap_or_default();
        let rest = whole.strip_prefix(given).filter(|rest| !rest.is_empty() && end == t.given.len());
        let added = rest.is_some();
        if let Some(rest) = rest {
            if !given.is_empty() {
                let what = format!(
                    "the deltas of message {} stopped {} bytes short of its whole text; the rest was handed out",
                    describe_place(at),
                    rest.len()
                );
                self.anomalies.push(Anomaly::new(AnomalyKind::TextCompleted, what).excerpt(rest));
            }
            t.given.push_str(rest);
            self.out.push_text(rest);
        } else if given != whole && !t.reported {
            t.reported = true;
            let what = format!(
                "the whole text of message {} ({} bytes) differs from what its deltas gave ({} bytes); \
                 what they gave stands",
                describe_place(at),
                whole.len(),
                given.len()
            );
            self.anomalies.push(Anomaly::new(AnomalyKind::TextMismatch, what).excerpt(whole));
        }
        let end = if added { t.given.len() } else { end };
        match (part, settled) {
            (Some(c), None) => t.parts.push((c, start, end)),
            (Some(_), Some(n)) if added => t.parts[n].2 = t.given.len(),
            _ => {}
        }
    }

    /// The whole text of a message item of a done event or a final output:
    /// its `output_text` parts.
    fn message_text(&mut self, at: Place, item: &OutputItem) {
        let at = Place { item_id: item.id.or(at.item_id), ..at };
        let refusal: String = item.refusal_texts().collect();
        self.whole_refusal(at, &refusal);
        let whole: String = item.output_texts().collect();
        self.whole_text(at, &whole, None);
    }

    /// A message's whole refusal (rule 81): kept unless some of its
    /// refusal came already.
    fn whole_refusal(&mut self, at: Place, text: &str) {
        if !text.is_empty() && !self.own.items.note_refusal(at) {
            self.refused(text);
        }
    }

    /// An event (`"event"`) or output item (`"output item"`, a web search
    /// call...) of a type this processor does not return: reported once
    /// per type.
    fn ignored_event(&mut self, what: &str, kind: Option<&str>) {
        let name = format!("{what}:{}", kind.unwrap_or(""));
        if self.own.items.reported_events.len() >= 16 || self.own.items.reported_events.contains(&name) {
            return;
        }
        let of = match kind {
            Some(t) if !t.is_empty() => format!("of type {t:?}"),
            _ => "without a type".to_owned(),
        };
        self.own.items.reported_events.push(name);
        let what = format!("an {what} {of} carries nothing this processor returns; skipped (reported once)");
        self.anomalies.push(Anomaly::new(AnomalyKind::IgnoredEvent, what));
    }

    fn item_added(&mut self, at: Place, item: &OutputItem) {
        // The same item announced again (a relay that repeats events): the
        // first stays, so no second, empty call appears.
        match item.id.zip(self.own.items.announced(item)) {
            Some((id, true)) => {
                let what = format!("output_item.added for item {id:?} came again; the first is kept");
                self.anomalies.push(Anomaly::new(AnomalyKind::DuplicateId, what));
                return;
            }
            Some((id, false)) => {
                let what = format!(
                    "output item {id:?} was announced again as another item (another type or call_id); \
                     both are kept, each event going to the one at its output_index"
                );
                self.anomalies.push(Anomaly::new(AnomalyKind::DuplicateId, what));
            }
            None => {}
        }
        match item.kind {
            ItemKind::FunctionCall => {
                let call = self.open_call(at, item);
                // Some servers send the arguments with the item itself.
                if let Some(text) = self.whole_arguments(item.value).filter(|t| !t.is_empty()) {
                    self.feed(call, &text);
                }
            }
            ItemKind::Reasoning => {
                self.own.items.add_reasoning(at, item);
            }
            ItemKind::Message => self.own.items.add(at, item.id, Slot::Message),
            ItemKind::WebSearch => self.own.items.add(at, item.id, Slot::Other),
            ItemKind::Other => {
                self.own.items.add(at, item.id, Slot::Other);
                self.ignored_event("output item", item.str("type"));
            }
        }
    }

    /// A function call item's call, and its entry at `at`.
    fn open_call(&mut self, at: Place, item: &OutputItem) -> CallId {
        let name = item.str("name").unwrap_or("");
        if name.is_empty() {
            let what = "a function_call item without a name; its name is empty";
            self.anomalies.push(Anomaly::new(AnomalyKind::IgnoredField, what).field("item.name"));
        }
        let call = self.calls.open_call(item.call_id().unwrap_or(""), name, &mut self.anomalies);
        let items = &mut self.own.items.call_items;
        items.resize(items.len().max(call.index() + 1), (None, None));
        items[call.index()] = (item.id.map(str::to_owned), item.call_id().map(str::to_owned));
        self.own.items.add(at, item.id, Slot::Call(call));
        call
    }

    /// The open call an event belongs to.
    fn call_at(&self, at: Place, id: Option<&str>) -> Option<CallId> {
        match self.own.items.find(at, id)? {
            Slot::Call(call) => Some(call),
            _ => None,
        }
    }

    fn feed(&mut self, call: CallId, text: &str) {
        if self.calls.append_text(call, text, &mut self.anomalies) {
            self.out.push_progress(call);
            self.shown_views.push(call);
        }
    }

    fn arguments_delta(&mut self, at: Place, delta: &str) {
        match self.call_at(at, None) {
            Some(call) => self.feed(call, delta),
            None if delta.is_empty() => {}
            None => {
                let what = describe_place(at);
                let what = format!(
                    "an arguments delta for output item {what} matched no function_call item; skipped"
                );
                let mut a = Anomaly::new(AnomalyKind::OrphanFragment, what).excerpt(delta);
                a.index = at.output_index;
                self.anomalies.push(a);
                // It may have been an open call's: none of them is repaired.
                self.calls.note_lost(&format!("an arguments delta that matched no item: {}", excerpt(delta)));
            }
        }
    }

    /// The `arguments` of an item or event: a string as it is, an object
    /// as its JSON text (the call's parameters, as rule 4 reads an object
    /// on the chat API), an empty one as no arguments, like `""`; any other
    /// value is reported and ignored.
    fn whole_arguments<'v>(&mut self, value: &'v JsonValue) -> Option<Cow<'v, str>> {
        match value.get("arguments")? {
            JsonValue::Null => None,
            JsonValue::String(text) => Some(Cow::Borrowed(text.as_str())),
            JsonValue::Object(members) if members.is_empty() => Some(Cow::Borrowed("")),
            object if object.is_object() => Some(Cow::Owned(object.to_json())),
            other => {
                let what = format!("arguments was {}, not a string or an object; ignored", other.kind());
                let a = Anomaly::new(AnomalyKind::IgnoredField, what).field("arguments");
                self.anomalies.push(a.excerpt(&other.to_json()));
                None
            }
        }
    }

    /// The whole arguments of a call, sent at its end: they win over the
    /// deltas; a difference is reported. Empty whole arguments after
    /// deltas say nothing: the deltas are kept, and that is reported.
    fn settle_arguments(&mut self, call: CallId, whole: &str) {
        let Some(c) = self.calls.get(call).filter(|c| !c.is_completed()) else { return };
        let streamed = c.raw_arguments();
        if streamed == whole {
            return;
        }
        if streamed.is_empty() {
            self.feed(call, whole);
            return;
        }
        if whole.is_empty() {
            let msg = format!(
                "the whole arguments of call {:?} came empty after {} bytes of deltas; the deltas were used",
                c.id,
                streamed.len()
            );
            self.anomalies.push(c.anomaly(AnomalyKind::ArgumentsMismatch, msg));
            return;
        }
        let msg = format!(
            "the whole arguments of call {:?} differ from its streamed deltas ({} vs {} bytes); the whole arguments were used",
            c.id,
            whole.len(),
            streamed.len()
        );
        let a = c.anomaly(AnomalyKind::ArgumentsMismatch, msg).excerpt(streamed);
        self.anomalies.push(a);
        self.calls.replace_text(call, whole);
    }

    fn item_done(&mut self, at: Place, item: &OutputItem) -> Result<(), Error> {
        let by_call_id = || item.call_id().and_then(|id| self.own.items.by_call_id(id)).map(Slot::Call);
        let found = self.own.items.find(at, item.id).or_else(by_call_id);
        if self.own.options.output_thinking {
            self.own.items.output_items.push(item.value.clone());
        }
        match item.kind {
            ItemKind::FunctionCall => {
                let call = match found {
                    Some(Slot::Call(call)) => call,
                    // A call announced only by its done item: whole.
                    _ => self.open_call(at, item),
                };
                if let Some(c) = self.calls.get(call).filter(|c| c.is_completed()) {
                    let msg = format!("output_item.done for call {:?} came again; ignored", c.id);
                    self.anomalies.push(c.anomaly(AnomalyKind::FragmentAfterCompletion, msg));
                    return Ok(());
                }
                if let Some(call_id) = item.call_id() {
                    self.calls.learn_id(call, call_id, &mut self.anomalies);
                    if let Some(slot) = self.own.items.call_items.get_mut(call.index()) {
                        slot.1.get_or_insert_with(|| call_id.to_owned());
                        slot.0 = slot.0.take().or_else(|| item.id.map(str::to_owned));
                    }
                }
                if let Some(whole) = self.whole_arguments(item.value) {
                    self.settle_arguments(call, &whole);
                }
                return self.complete_item(call, item);
            }
            ItemKind::Reasoning => {
                let n = match found {
                    Some(Slot::Reasoning(n)) => n,
                    _ => self.own.items.add_reasoning(at, item),
                };
                self.finish_reasoning(n, item);
            }
            ItemKind::Message => {
                self.message_text(at, item);
                if let Some(id) = item.id {
                    self.link_reasonings(id);
                }
            }
            ItemKind::WebSearch => self.web_search(item, false),
            ItemKind::Other if found.is_none() => self.ignored_event("output item", item.str("type")),
            ItemKind::Other => {}
        }
        Ok(())
    }

    /// A function call item whose status is `"incomplete"` was cut by the
    /// output limit: `output_limit` decides; any other is completed.
    fn complete_item(&mut self, call: CallId, item: &OutputItem) -> Result<(), Error> {
        if item.str("status") == Some("incomplete") && self.withheld(call) {
            return Ok(());
        }
        self.complete(call)
    }

    /// A web search, with `output_thinking`: a thinking item saying what it did.
    fn web_search(&mut self, item: &OutputItem, with_items: bool) {
        if self.own.options.output_thinking {
            self.out.push_thinking(&item.web_search_summary(), Thinking::Tool { with_items });
        }
    }

    /// Streamed summary text of a reasoning item: kept for its final
    /// thinking item, and returned as a partial one.
    fn summary_text(&mut self, at: Place, text: &str) {
        if let Some(Slot::Reasoning(n)) = self.own.items.find(at, None) {
            if let Some(r) = self.own.items.reasonings.get_mut(n as usize) {
                r.summary.push_str(text);
            }
        }
        if self.own.options.output_thinking && !text.is_empty() {
            self.out.push_thinking(text, Thinking::Delta);
        }
    }

    /// A reasoning item is done: its whole summary (the streamed one, else
    /// the item's own) is returned as a finished thinking item.
    fn finish_reasoning(&mut self, n: u32, item: &OutputItem) {
        let Some(r) = self.own.items.reasonings.get_mut(n as usize).filter(|r| !r.finished) else { return };
        r.finished = true;
        r.id = r.id.take().or_else(|| item.id.map(str::to_owned));
        if let Some(e) = item.str("encrypted_content") {
            r.encrypted_content = Some(e.to_owned());
        }
        if r.summary.is_empty() {
            r.summary = item.summary_texts().collect::<Vec<_>>().join("\n\n");
        }
        if self.own.options.output_thinking {
            let text = r.summary.clone();
            self.out.push_thinking(&text, Thinking::Reasoning(n));
            self.own.items.waiting.push(n);
        }
    }

    /// The message after finished reasoning items: they learn its id.
    fn link_reasonings(&mut self, message_id: &str) {
        for n in std::mem::take(&mut self.own.items.waiting) {
            if let Some(r) = self.own.items.reasonings.get_mut(n as usize) {
                r.next_message_id = Some(message_id.to_owned());
                self.own.items.linked.push(n);
            }
        }
    }

    /// A streamed response's end: its status, then the calls only its
    /// output lists.
    fn ended(&mut self, status: Status, response: Option<&JsonValue>) -> Result<(), Error> {
        self.response_status(status, response)?;
        let output = response.map_or(&[][..], |r| array_at(r, "output"));
        for (i, item) in output.iter().map(OutputItem::read).enumerate() {
            if item.kind == ItemKind::Message {
                self.message_text(Place { output_index: Some(i as i64), item_id: None }, &item);
            }
        }
        self.report_refusal();
        self.calls_only_in_output(response)
    }

    /// How the response ended (the reason is only read by an incomplete
    /// one's reports).
    fn response_status(&mut self, status: Status, response: Option<&JsonValue>) -> Result<(), Error> {
        let field = |key| response.and_then(|r| r.get(key)).filter(|v| !matches!(v, JsonValue::Null));
        let reason = field("incomplete_details").and_then(|d| str_at(d, "reason"));
        self.own.items.ending = Some((status, reason.map(str::to_owned)));
        let output = response.map_or(&[][..], |r| array_at(r, "output"));
        if status == Status::Completed && self.own.options.output_thinking && !output.is_empty() {
            self.own.items.output_items = output.to_vec();
        }
        if status == Status::Failed {
            return Err(field("error").map_or_else(
                || Error::Provider {
                    message: "the response failed (response.failed without an error)".to_owned(),
                    payload: response.cloned(),
                },
                provider_error,
            ));
        }
        if status == Status::Incomplete {
            self.stop_reason = reason.map(str::to_owned);
            self.limit_hit = true;
            let what = reason.map_or("no reason given".to_owned(), |r| format!("reason: {r}"));
            let what = format!("the response ended incomplete ({what})");
            self.anomalies.push(Anomaly::new(AnomalyKind::IncompleteResponse, what));
        }
        Ok(())
    }

    /// The final response lists every output item. A function call in it
    /// that the stream never announced (neither by item id nor by call id)
    /// would be lost: it is completed from there, and reported.
    fn calls_only_in_output(&mut self, response: Option<&JsonValue>) -> Result<(), Error> {
        let Some(response) = response else { return Ok(()) };
        let mut result = Ok(());
        for (i, value) in array_at(response, "output").iter().enumerate() {
            let item = OutputItem::read(value);
            if item.kind != ItemKind::FunctionCall {
                continue;
            }
            if let Some(call) = self.own.items.streamed_call(&item) {
                self.settle_from_output(call, &item);
                continue;
            }
            if let Some(call) = self.renamed_call(i, &item) {
                self.settle_from_output(call, &item);
                continue;
            }
            let call = self.whole_call(i, &item);
            if let Some(c) = self.calls.get(call) {
                let msg = format!(
                    "call {:?} ({}) came only in the final response's output, never streamed; completed from there",
                    c.id, c.name
                );
                self.anomalies.push(c.anomaly(AnomalyKind::Truncated, msg));
            }
            keep_first(&mut result, self.complete(call));
        }
        result
    }

    /// The streamed call the final output lists under other ids: the call
    /// streamed at the same output index, with the same name (vLLM builds
    /// the final output's ids anew). Reported, and not handed out twice.
    fn renamed_call(&mut self, i: usize, item: &OutputItem) -> Option<CallId> {
        let call = self.own.items.entries.iter().rev().find_map(|e| match e.slot {
            Slot::Call(call) if e.output_index == Some(i as i64) => Some(call),
            _ => None,
        })?;
        let c = self.calls.get(call).filter(|c| Some(c.name.as_str()) == item.str("name"))?;
        let ids = [item.id, item.call_id()].map(|id| id.unwrap_or("none"));
        let what = format!(
            "the final response lists call {:?} ({}) at output index {i} under other ids (item {:?}, call_id {:?}); \
             taken as the same call, not handed out again",
            c.id, c.name, ids[0], ids[1]
        );
        self.anomalies.push(c.anomaly(AnomalyKind::ConflictingValue, what));
        Some(call)
    }

    /// A streamed call still open when the final response lists it
    /// completed (its `done` event lost on the way): the whole arguments
    /// listed there settle it, as the `done` item's would have.
    fn settle_from_output(&mut self, call: CallId, item: &OutputItem) {
        let open = self.calls.get(call).is_some_and(|c| !c.is_completed());
        if open && item.str("status") == Some("completed") {
            if let Some(whole) = self.whole_arguments(item.value) {
                self.settle_arguments(call, &whole);
            }
        }
    }

    /// A call read whole from the response's `output` (at `i`): opened with
    /// its arguments, to be completed.
    fn whole_call(&mut self, i: usize, item: &OutputItem) -> CallId {
        let call = self.open_call(Place { output_index: Some(i as i64), item_id: None }, item);
        if let Some(text) = self.whole_arguments(item.value) {
            let _ = self.calls.append_text(call, &text, &mut self.anomalies);
        }
        call
    }

    // ---- whole responses ---------------------------------------------------

    /// A non-streamed response: every item of `output`, in order, then usage.
    pub(super) fn apply_message(&mut self, response: &JsonValue) -> Result<(), Error> {
        if !response.is_object() {
            return Err(Error::stream(
                crate::error::StreamErrorKind::InvalidChunk,
                format!("expected a response object, got {}", response.kind()),
                String::new(),
            ));
        }
        // A response that is wrapped (`{"response": {...}}`) is read inside.
        let body = match response.get("output") {
            Some(_) => response,
            None => response.get("response").filter(|r| r.is_object()).unwrap_or(response),
        };
        let reason = body.get("incomplete_details").and_then(|d| str_at(d, "reason"));
        self.stop_reason = reason.map(str::to_owned);
        let output = array_at(body, "output");
        if self.own.options.output_thinking {
            self.own.items.output_items = output.to_vec();
        }
        let mut result = Ok(());
        for (i, value) in output.iter().enumerate() {
            if !value.is_object() {
                continue;
            }
            let item = OutputItem::read(value);
            let at = Place { output_index: Some(i as i64), item_id: None };
            match item.kind {
                ItemKind::FunctionCall => {
                    let call = self.whole_call(i, &item);
                    keep_first(&mut result, self.complete_item(call, &item));
                }
                ItemKind::Reasoning => {
                    let n = self.own.items.add_reasoning(at, &item);
                    self.finish_reasoning(n, &item);
                }
                ItemKind::Message => {
                    let texts: Vec<&str> = item.output_texts().collect();
                    self.out.push_text_parts(texts.into_iter());
                    for refusal in item.refusal_texts() {
                        self.refused(refusal);
                    }
                    if let Some(id) = item.id {
                        self.link_reasonings(id);
                    }
                }
                ItemKind::WebSearch => self.web_search(&item, true),
                ItemKind::Other => self.ignored_event("output item", item.str("type")),
            }
        }
        self.report_refusal();
        if let Some(usage) = body.get("usage") {
            self.apply_usage(usage);
        }
        if let Some(e) = body.get("error").filter(|e| !matches!(e, JsonValue::Null)) {
            return Err(provider_error(e));
        }
        if str_at(body, "status") == Some("incomplete") {
            self.response_status(Status::Incomplete, Some(body))?;
        }
        result
    }
}

/// `at`, or where [`Items::last_message`] found its message.
fn placed<'p>(owned: &'p Option<(Option<String>, Option<i64>)>, at: Place<'p>) -> Place<'p> {
    owned.as_ref().map_or(at, |(id, index)| Place { output_index: *index, item_id: id.as_deref() })
}

fn describe_place(at: Place) -> String {
    match (at.item_id, at.output_index) {
        (Some(id), Some(i)) => format!("{id:?} (output_index {i})"),
        (Some(id), None) => format!("{id:?}"),
        (None, Some(i)) => format!("at output_index {i}"),
        (None, None) => "without id or output_index".to_owned(),
    }
}
