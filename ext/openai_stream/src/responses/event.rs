//! The Responses API event model: one streamed event (or one output item of
//! a whole response), read from its JSON value by `type`. Fields of the wrong
//! type read as absent; the accumulator reports what that costs.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

use crate::chunk::lenient::Skip;
use crate::chunk::{Field, Text};
use crate::json::JsonValue;

/// One streamed event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// `response.output_text.delta`.
    TextDelta { delta: &'a str },
    /// `response.output_item.added`.
    ItemAdded { at: Place<'a>, item: OutputItem<'a> },
    /// `response.output_item.done`.
    ItemDone { at: Place<'a>, item: OutputItem<'a> },
    /// `response.function_call_arguments.delta`.
    ArgumentsDelta { at: Place<'a>, delta: &'a str },
    /// `response.function_call_arguments.done`: the whole arguments.
    ArgumentsDone { at: Place<'a>, arguments: Option<&'a str> },
    /// `response.reasoning_summary_part.added`.
    SummaryPartAdded { at: Place<'a> },
    /// `response.reasoning_summary_text.delta`.
    SummaryDelta { at: Place<'a>, delta: &'a str },
    /// `response.reasoning_summary_part.done`.
    SummaryPartDone { at: Place<'a> },
    /// `response.completed`, `response.incomplete`, `response.failed` (and
    /// `response.created` / `.in_progress`, which only carry the envelope):
    /// the response envelope.
    Response { status: Status, response: Option<&'a JsonValue> },
    /// `error`: an in-band error event.
    Error { body: &'a JsonValue },
    /// A known event that carries nothing the processor returns (content
    /// part bookkeeping, `.done` events that repeat the deltas).
    Bookkeeping,
    /// Any other `type` (or none).
    Other { kind: Option<&'a str> },
}

/// Where an event belongs: the output item's position and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Place<'a> {
    pub output_index: Option<i64>,
    pub item_id: Option<&'a str>,
}

/// What a response envelope event says about the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
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
    /// Any other item type (web search, file search...), or none.
    Other,
}

impl<'a> OutputItem<'a> {
    pub fn read(value: &'a JsonValue) -> Self {
        let kind = match str_at(value, "type") {
            Some("function_call") => ItemKind::FunctionCall,
            Some("reasoning") => ItemKind::Reasoning,
            Some("message") => ItemKind::Message,
            _ => ItemKind::Other,
        };
        OutputItem { kind, id: str_at(value, "id").filter(|s| !s.is_empty()), value }
    }

    /// The item's `type` as sent.
    pub fn type_name(&self) -> Option<&'a str> {
        str_at(self.value, "type")
    }

    pub fn call_id(&self) -> Option<&'a str> {
        str_at(self.value, "call_id").filter(|s| !s.is_empty())
    }

    pub fn name(&self) -> Option<&'a str> {
        str_at(self.value, "name")
    }

    /// The arguments text (`None` when absent or not a string).
    pub fn arguments(&self) -> Option<&'a str> {
        str_at(self.value, "arguments")
    }

    pub fn encrypted_content(&self) -> Option<&'a str> {
        str_at(self.value, "encrypted_content")
    }

    /// The texts of a reasoning item's summary parts.
    pub fn summary_texts(&self) -> impl Iterator<Item = &'a str> + 'a {
        array_at(self.value, "summary").iter().filter_map(|part| str_at(part, "text"))
    }

    /// The texts of a message item's `output_text` parts.
    pub fn output_texts(&self) -> impl Iterator<Item = &'a str> + 'a {
        array_at(self.value, "content")
            .iter()
            .filter(|part| str_at(part, "type") == Some("output_text"))
            .filter_map(|part| str_at(part, "text"))
    }
}

impl<'a> Event<'a> {
    /// Reads one event object.
    pub fn read(value: &'a JsonValue) -> Self {
        let kind = str_at(value, "type");
        let at = Place {
            output_index: int_at(value, "output_index"),
            item_id: str_at(value, "item_id").filter(|s| !s.is_empty()),
        };
        let delta = || str_at(value, "delta").unwrap_or("");
        let item = || value.get("item").filter(|i| i.is_object()).map(OutputItem::read);
        let response =
            |status| Event::Response { status, response: value.get("response").filter(|r| r.is_object()) };
        match kind {
            Some("response.output_text.delta") => Event::TextDelta { delta: delta() },
            Some("response.output_item.added") => match item() {
                Some(item) => Event::ItemAdded { at, item },
                None => Event::Other { kind },
            },
            Some("response.output_item.done") => match item() {
                Some(item) => Event::ItemDone { at, item },
                None => Event::Other { kind },
            },
            Some("response.function_call_arguments.delta") => Event::ArgumentsDelta { at, delta: delta() },
            Some("response.function_call_arguments.done") => {
                Event::ArgumentsDone { at, arguments: str_at(value, "arguments") }
            }
            Some("response.reasoning_summary_part.added") => Event::SummaryPartAdded { at },
            Some("response.reasoning_summary_text.delta") => Event::SummaryDelta { at, delta: delta() },
            Some("response.reasoning_summary_part.done") => Event::SummaryPartDone { at },
            Some("response.created" | "response.in_progress" | "response.queued") => {
                response(Status::InProgress)
            }
            Some("response.completed") => response(Status::Completed),
            Some("response.incomplete") => response(Status::Incomplete),
            Some("response.failed") => response(Status::Failed),
            Some("error") => Event::Error { body: value },
            Some(
                "response.content_part.added"
                | "response.content_part.done"
                | "response.output_text.done"
                | "response.output_text.annotation.added"
                | "response.reasoning_summary_text.done"
                | "response.reasoning_text.delta"
                | "response.reasoning_text.done",
            ) => Event::Bookkeeping,
            _ => Event::Other { kind },
        }
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

/// The two commonest events, `response.output_text.delta` and
/// `response.function_call_arguments.delta`, read without building the
/// whole value (the texts borrowed where the input allows). Deserializing
/// fails, and the caller reads the event as a [`JsonValue`], for any other
/// type, any field of another shape, or a `response` envelope (usage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaEvent<'a> {
    pub arguments: bool,
    pub delta: Cow<'a, str>,
    pub item_id: Option<Cow<'a, str>>,
    pub output_index: Option<i64>,
}

impl DeltaEvent<'_> {
    pub fn place(&self) -> Place<'_> {
        Place { output_index: self.output_index, item_id: self.item_id.as_deref().filter(|s| !s.is_empty()) }
    }
}

struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    /// A string, borrowed from the input when it has no escapes.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Field::<Text<'de>>::deserialize(d)? {
            Field::Value(Text(s)) => Ok(Str(s)),
            _ => Err(de::Error::custom("expected a string")),
        }
    }
}

impl<'de> Deserialize<'de> for DeltaEvent<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DeltaEvent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a delta event")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let (mut arguments, mut delta, mut item_id, mut output_index) = (None, None, None, None);
                while let Some(Str(key)) = map.next_key::<Str>()? {
                    match &*key {
                        "type" => {
                            let Str(kind) = map.next_value::<Str>()?;
                            arguments = Some(match &*kind {
                                "response.output_text.delta" => false,
                                "response.function_call_arguments.delta" => true,
                                _ => return Err(de::Error::custom("not a delta event")),
                            });
                        }
                        "delta" => delta = Some(map.next_value::<Str>()?.0),
                        "item_id" => item_id = map.next_value::<Option<Str>>()?.map(|s| s.0),
                        "output_index" => output_index = map.next_value::<Option<i64>>()?,
                        "response" | "item" | "error" => return Err(de::Error::custom("an envelope")),
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                match (arguments, delta) {
                    (Some(arguments), Some(delta)) => {
                        Ok(DeltaEvent { arguments, delta, item_id, output_index })
                    }
                    _ => Err(de::Error::custom("not a delta event")),
                }
            }
        }
        d.deserialize_map(V)
    }
}
