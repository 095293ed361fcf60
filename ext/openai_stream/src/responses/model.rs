//! The Responses API event model: where an event belongs, one output item
//! (of an `output_item` event or of a whole response's `output`), a delta
//! event as its fast reading gives it, and usage. Fields of the wrong type
//! read as absent; the processor reports what that costs.

use std::borrow::Cow;

use serde::Deserialize;

use crate::json::JsonValue;
use crate::lenient::Field;
use crate::usage::Usage;

/// Where an event belongs: the output item's position and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Place<'a> {
    pub output_index: Option<i64>,
    pub item_id: Option<&'a str>,
}

/// What a response envelope event says about the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Completed,
    Incomplete,
    Failed,
}

/// One output item (`item` of an `output_item` event, or an element of a
/// whole response's `output`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputItem<'a> {
    pub kind: ItemKind,
    /// The item's own id (`fc_...`, `rs_...`, `msg_...`).
    pub id: Option<&'a str>,
    pub value: &'a JsonValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    FunctionCall,
    Reasoning,
    Message,
    /// A native web search (`web_search_call`).
    WebSearch,
    /// Any other item type (file search...), or none.
    Other,
}

impl<'a> OutputItem<'a> {
    pub fn read(value: &'a JsonValue) -> Self {
        let kind = match str_at(value, "type") {
            Some("function_call") => ItemKind::FunctionCall,
            Some("reasoning") => ItemKind::Reasoning,
            Some("message") => ItemKind::Message,
            Some("web_search_call") => ItemKind::WebSearch,
            _ => ItemKind::Other,
        };
        OutputItem { kind, id: str_at(value, "id").filter(|s| !s.is_empty()), value }
    }

    /// A string field (`type` as sent, `name`, `arguments`,
    /// `encrypted_content`): `None` when absent or not a string.
    pub fn str(&self, key: &str) -> Option<&'a str> {
        str_at(self.value, key)
    }

    pub fn call_id(&self) -> Option<&'a str> {
        str_at(self.value, "call_id").filter(|s| !s.is_empty())
    }

    /// The texts of a reasoning item's summary parts.
    pub fn summary_texts(&self) -> impl Iterator<Item = &'a str> + 'a {
        array_at(self.value, "summary").iter().filter_map(|part| str_at(part, "text"))
    }

    /// What a web search item did, as Discourse says it: "Web search: Q1,
    /// Q2", "Web fetch: URL", "Web page search: X".
    pub fn web_search_summary(&self) -> String {
        let action = self.value.get("action").unwrap_or(&JsonValue::Null);
        let found = |keys: &[&str]| keys.iter().find_map(|k| str_at(action, k).filter(|s| !s.is_empty()));
        let first = |keys| found(keys).map(str::to_owned);
        let queries: Vec<&str> = array_at(action, "queries").iter().filter_map(JsonValue::as_str).collect();
        let (what, target) = match str_at(action, "type") {
            Some("search") if !queries.is_empty() => ("Web search", Some(queries.join(", "))),
            Some("search") => ("Web search", first(&["query"])),
            Some("open_page") => ("Web fetch", first(&["url", "page_url", "title"])),
            Some("find_in_page") => ("Web page search", first(&["pattern", "query"])),
            _ => return "Used native web tool".to_owned(),
        };
        target.map_or_else(|| what.to_owned(), |t| format!("{what}: {t}"))
    }

    /// The texts of a message item's `refusal` parts (rule 81).
    pub fn refusal_texts(&self) -> impl Iterator<Item = &'a str> + 'a {
        array_at(self.value, "content")
            .iter()
            .filter(|part| str_at(part, "type") == Some("refusal"))
            .filter_map(|part| str_at(part, "refusal"))
    }

    /// The texts of a message item's `output_text` parts.
    pub fn output_texts(&self) -> impl Iterator<Item = &'a str> + 'a {
        array_at(self.value, "content")
            .iter()
            .filter(|part| str_at(part, "type") == Some("output_text"))
            .filter_map(|part| str_at(part, "text"))
    }
}

pub(crate) fn str_at<'a>(value: &'a JsonValue, key: &str) -> Option<&'a str> {
    value.get(key).and_then(JsonValue::as_str)
}

pub(crate) fn int_at(value: &JsonValue, key: &str) -> Option<i64> {
    match value.get(key) {
        Some(JsonValue::Number(n)) => n.as_i64(),
        _ => None,
    }
}

pub(crate) fn array_at<'a>(value: &'a JsonValue, key: &str) -> &'a [JsonValue] {
    match value.get(key) {
        Some(JsonValue::Array(items)) => items,
        _ => &[],
    }
}

/// One of the two commonest events, `response.output_text.delta` and
/// `response.function_call_arguments.delta`, as their fast reading gives it
/// (`scan.rs`): the texts borrowed where the input allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaEvent<'a> {
    pub arguments: bool,
    pub delta: Cow<'a, str>,
    pub item_id: Option<Cow<'a, str>>,
    pub output_index: Option<i64>,
}

/// A Responses usage object as the shared usage fields, read by their reader
/// (rule 39) under this protocol's names (None: not an object).
pub(super) fn usage_of(usage: &JsonValue) -> Option<Usage> {
    let JsonValue::Object(pairs) = usage else { return None };
    let shared = |key: &str| match key {
        "input_tokens" => Some("prompt_tokens"),
        "output_tokens" => Some("completion_tokens"),
        "input_tokens_details" => Some("prompt_tokens_details"),
        _ => None,
    };
    let renamed = pairs.iter().filter_map(|(k, v)| Some((shared(k)?.to_owned(), v.clone()))).collect();
    Field::<Usage>::deserialize(&JsonValue::Object(renamed)).ok()?.get().cloned()
}

/// The shared usage field names in this protocol's words.
pub(super) fn responses_field_name(field: &'static str) -> &'static str {
    match field {
        "usage.prompt_tokens" => "usage.input_tokens",
        "usage.completion_tokens" => "usage.output_tokens",
        "usage.prompt_tokens_details" => "usage.input_tokens_details",
        "usage.prompt_tokens_details.cached_tokens" => "usage.input_tokens_details.cached_tokens",
        "usage.prompt_tokens_details.cache_write_tokens" => "usage.input_tokens_details.cache_write_tokens",
        "usage.prompt_tokens_details.cache_creation_tokens" => {
            "usage.input_tokens_details.cache_creation_tokens"
        }
        "usage.prompt_tokens_details.cache_creation_input_tokens" => {
            "usage.input_tokens_details.cache_creation_input_tokens"
        }
        other => other,
    }
}
