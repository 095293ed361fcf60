//! What a chat response streamed beside its text and calls that the next
//! request of a tool loop must carry back (rules 77 to 79): the reasoning
//! and the fields it came in, OpenRouter's `reasoning_details` merged from
//! their fragments, each call's `extra_content`, and the turn that groups
//! one response's calls. Reasoning models behind OpenAI-compatible
//! endpoints refuse the next request without them.
//!
//! The reasoning text itself is held by the output until the item it led
//! to (`Output::hold_thinking`); the rest is kept here, for the stream.

use std::collections::HashMap;

use crate::anomaly::{Anomalies, Anomaly, AnomalyKind};
use crate::calls::{unique_id, CallId, Calls};
use crate::json::JsonValue;

/// The fields the reasoning text may come in, as the next request must
/// name them again.
pub const REASONING_FIELDS: [&str; 2] = ["reasoning_content", "reasoning"];

/// The members of a `reasoning_details` entry whose fragments are joined.
const JOINED: [&str; 3] = ["text", "summary", "data"];

/// See the module documentation.
#[derive(Debug, Default)]
pub struct RoundTrip {
    /// Something to carry back came in this response.
    carry: bool,
    /// Of [`REASONING_FIELDS`], those the server used, in order of first use.
    fields: Vec<&'static str>,
    /// The merged `reasoning_details` entries, in order of first appearance.
    details: Vec<JsonValue>,
    /// Where in `details` the entry of each (`index`, `type`) is.
    detail_at: HashMap<i64, Vec<(Option<String>, usize)>>,
    /// Per call (by its index), its `extra_content` as first received.
    extra: Vec<Option<JsonValue>>,
    /// Names this response's calls as one turn (made with the first thing
    /// to carry).
    turn: Option<String>,
    /// Who the caller says the stream comes from: stamped on what is
    /// carried back, so that it goes back to that model only. Kept from
    /// one response to the next.
    model: Option<String>,
}

impl RoundTrip {
    /// A new response starts.
    pub(crate) fn reset(&mut self) {
        let (mut details, model) = (std::mem::take(&mut self.details), self.model.take());
        details.clear();
        *self = RoundTrip { details, model, ..RoundTrip::default() };
    }

    /// Something to carry back came in.
    fn carried(&mut self) {
        self.carry = true;
        self.turn.get_or_insert_with(|| unique_id("turn"));
    }

    /// True when the response had something to carry back: a reasoning
    /// field (even empty), reasoning details, or a call's `extra_content`.
    pub fn carries(&self) -> bool {
        self.carry
    }

    /// The reasoning fields the server used, in order of first use.
    pub fn fields(&self) -> &[&'static str] {
        &self.fields
    }

    /// The merged `reasoning_details` (empty when none came).
    pub fn details(&self) -> &[JsonValue] {
        &self.details
    }

    /// The call's `extra_content`, verbatim.
    pub fn extra(&self, call: CallId) -> Option<&JsonValue> {
        self.extra.get(call.index()).and_then(Option::as_ref)
    }

    /// The name of this response's turn, the same for each of its calls,
    /// unique in the process; none until something is to be carried.
    pub fn turn(&self) -> Option<&str> {
        self.turn.as_deref()
    }

    /// See `model`.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    pub fn set_model(&mut self, model: Option<String>) {
        self.model = model;
    }

    /// A reasoning field (rule 77): `field` is one of [`REASONING_FIELDS`].
    /// True the first time the response uses it.
    pub(crate) fn field(&mut self, field: &'static str) -> bool {
        self.carried();
        let new = !self.fields.contains(&field);
        if new {
            self.fields.push(field);
        }
        new
    }

    /// A `reasoning_details` value (rule 78): each element is merged into
    /// the entry of the same `index` and `type`: `text`, `summary` and
    /// `data` joined, any other member kept as it first came (a different
    /// later value is reported). An element without an integer `index` is
    /// an entry of its own; one that is not an object is reported. True
    /// when an element was kept: an empty list (OpenRouter sends one with
    /// every delta) carries nothing.
    pub(crate) fn details_fragment(&mut self, value: &JsonValue, anomalies: &mut Anomalies) -> bool {
        let JsonValue::Array(elements) = value else {
            let what = format!("reasoning_details is {} instead of an array; ignored", value.kind());
            anomalies.push(ignored(what, "choices[0].delta.reasoning_details"));
            return false;
        };
        let mut kept = false;
        for element in elements {
            let JsonValue::Object(members) = element else {
                let what =
                    format!("a reasoning_details element is {}, not an object; ignored", element.kind());
                anomalies
                    .push(ignored(what, "choices[0].delta.reasoning_details[]").excerpt(&element.to_json()));
                continue;
            };
            if !std::mem::replace(&mut kept, true) {
                self.carried();
            }
            let key = entry_key(element);
            let at = key.and_then(|(index, kind)| {
                self.detail_at.get(&index)?.iter().find(|(k, _)| k.as_deref() == kind).map(|&(_, at)| at)
            });
            let Some(JsonValue::Object(entry)) = at.and_then(|at| self.details.get_mut(at)) else {
                if let Some((index, kind)) = key {
                    self.detail_at
                        .entry(index)
                        .or_default()
                        .push((kind.map(str::to_owned), self.details.len()));
                }
                self.details.push(element.clone());
                continue;
            };
            for (name, value) in members {
                merge_member(entry, name, value, anomalies);
            }
        }
        kept
    }

    /// A call's `extra_content` (rule 79): kept as it first came; a
    /// different later one is reported.
    pub(crate) fn extra_content(
        &mut self,
        call: CallId,
        value: &JsonValue,
        calls: &Calls,
        anomalies: &mut Anomalies,
    ) {
        let Some(info) = calls.get(call) else { return };
        if !value.is_object() {
            let what =
                format!("extra_content of call {:?} is {}, not an object; ignored", info.id, value.kind());
            let a = info.anomaly(AnomalyKind::IgnoredField, what).field("tool_calls[].extra_content");
            anomalies.push(a.excerpt(&value.to_json()));
            return;
        }
        self.carried();
        match self.extra(call) {
            None => {
                if self.extra.len() <= call.index() {
                    self.extra.resize(call.index() + 1, None);
                }
                self.extra[call.index()] = Some(value.clone());
            }
            Some(kept) if kept == value => {}
            Some(kept) => {
                let what = format!(
                    "extra_content of call {:?} came again with another value; the first is kept: {}",
                    info.id,
                    kept.to_json()
                );
                let a = info.anomaly(AnomalyKind::ConflictingValue, what).field("tool_calls[].extra_content");
                anomalies.push(a.excerpt(&value.to_json()));
            }
        }
    }
}

fn ignored(what: String, field: &'static str) -> Anomaly {
    Anomaly::new(AnomalyKind::IgnoredField, what).field(field)
}

/// An entry's (`index`, `type`), when its index is an integer.
fn entry_key(entry: &JsonValue) -> Option<(i64, Option<&str>)> {
    let index = match entry.get("index") {
        Some(JsonValue::Number(n)) => n.as_i64()?,
        _ => return None,
    };
    Some((index, entry.get("type").and_then(JsonValue::as_str)))
}

/// One member of a fragment, into its entry.
fn merge_member(
    entry: &mut Vec<(String, JsonValue)>,
    name: &str,
    value: &JsonValue,
    anomalies: &mut Anomalies,
) {
    let Some((_, kept)) = entry.iter_mut().rev().find(|(k, _)| k == name) else {
        entry.push((name.to_owned(), value.clone()));
        return;
    };
    match (kept, value) {
        (JsonValue::String(kept), JsonValue::String(more)) if JOINED.contains(&name) => kept.push_str(more),
        // An empty string is a placeholder, as null is (OpenRouter's Claude
        // opens an entry with `"signature": ""` and sends it later).
        (_, JsonValue::Null) => {}
        (_, JsonValue::String(more)) if more.is_empty() => {}
        (kept @ JsonValue::Null, value) => *kept = value.clone(),
        (JsonValue::String(kept), JsonValue::String(more)) if kept.is_empty() => more.clone_into(kept),
        (kept, value) if kept == value => {}
        (kept, value) => {
            let what = format!(
                "reasoning_details: {name:?} of an entry came again with another value; the first is kept: {}",
                kept.to_json()
            );
            let a = Anomaly::new(AnomalyKind::ConflictingValue, what)
                .field("choices[0].delta.reasoning_details[]");
            anomalies.push(a.excerpt(&value.to_json()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonValue;

    fn json(text: &str) -> JsonValue {
        serde_json::from_str(text).unwrap()
    }

    fn merged(fragments: &[&str]) -> (String, Vec<AnomalyKind>) {
        let mut trip = RoundTrip::default();
        let mut anomalies = Anomalies::default();
        for f in fragments {
            trip.details_fragment(&json(f), &mut anomalies);
        }
        let list = JsonValue::Array(trip.details().to_vec()).to_json();
        (list, anomalies.all().iter().map(|a| a.kind).collect())
    }

    #[test]
    fn fragments_merge_by_index_and_type_with_text_joined() {
        let (list, anomalies) = merged(&[
            r#"[{"type":"reasoning.text","text":"Let ","index":0,"format":"google-gemini-v1"}]"#,
            r#"[{"type":"reasoning.text","text":"me see","index":0,"signature":null}]"#,
            r#"[{"type":"reasoning.encrypted","data":"abc","index":0,"id":"call_1"}]"#,
            r#"[{"type":"reasoning.encrypted","data":"def","index":0,"id":"call_1"}]"#,
        ]);
        assert_eq!(
            list,
            r#"[{"type":"reasoning.text","text":"Let me see","index":0,"format":"google-gemini-v1","signature":null},{"type":"reasoning.encrypted","data":"abcdef","index":0,"id":"call_1"}]"#
        );
        assert!(anomalies.is_empty());
    }

    #[test]
    fn a_null_member_takes_a_later_value_and_a_changed_one_is_reported() {
        let (list, anomalies) = merged(&[
            r#"[{"type":"reasoning.text","text":"a","index":1,"signature":null,"format":"x"}]"#,
            r#"[{"type":"reasoning.text","text":"b","index":1,"signature":"sig","format":"y"}]"#,
        ]);
        assert_eq!(
            list,
            r#"[{"type":"reasoning.text","text":"ab","index":1,"signature":"sig","format":"x"}]"#
        );
        assert_eq!(anomalies, [AnomalyKind::ConflictingValue]);
    }

    /// OpenRouter's Claude opens a `reasoning.text` entry with an empty
    /// signature and sends the signature in a later fragment of it.
    #[test]
    fn an_empty_string_member_takes_a_later_value() {
        let (list, anomalies) = merged(&[
            r#"[{"type":"reasoning.text","text":"a","index":0,"signature":"","format":"anthropic-claude-v1"}]"#,
            r#"[{"type":"reasoning.text","text":"b","index":0}]"#,
            r#"[{"type":"reasoning.text","index":0,"signature":"EqQBCkYIBx"}]"#,
            r#"[{"type":"reasoning.text","index":0,"signature":"EqQBCkYIBx"}]"#,
            r#"[{"type":"reasoning.text","index":0,"signature":""}]"#,
        ]);
        assert_eq!(
            list,
            r#"[{"type":"reasoning.text","text":"ab","index":0,"signature":"EqQBCkYIBx","format":"anthropic-claude-v1"}]"#
        );
        assert!(anomalies.is_empty());
    }

    #[test]
    fn entries_without_an_integer_index_stand_alone_and_non_objects_are_reported() {
        let (list, anomalies) = merged(&[
            r#"[{"type":"reasoning.summary","summary":"a"}]"#,
            r#"[{"type":"reasoning.summary","summary":"b"}, 5]"#,
            r#"{"type":"reasoning.text"}"#,
        ]);
        assert_eq!(
            list,
            r#"[{"type":"reasoning.summary","summary":"a"},{"type":"reasoning.summary","summary":"b"}]"#
        );
        assert_eq!(anomalies, [AnomalyKind::IgnoredField, AnomalyKind::IgnoredField]);
    }

    #[test]
    fn fields_keep_their_order_of_first_use_and_reset_forgets_the_response() {
        let mut trip = RoundTrip::default();
        trip.set_model(Some("7:m".to_owned()));
        assert!(!trip.carries() && trip.turn().is_none());
        trip.field("reasoning");
        trip.field("reasoning_content");
        trip.field("reasoning");
        assert_eq!(trip.fields(), ["reasoning", "reasoning_content"]);
        assert!(trip.carries());
        let turn = trip.turn().map(str::to_owned);
        assert!(turn.as_deref().is_some_and(|t| t.starts_with("turn_das_")));
        trip.reset();
        assert!(!trip.carries() && trip.fields().is_empty() && trip.turn().is_none());
        assert_eq!(trip.model(), Some("7:m"));
        trip.field("reasoning");
        assert!(trip.turn().is_some() && trip.turn() != turn.as_deref());
    }
}
