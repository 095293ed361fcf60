//! Token usage, merged from every chunk that carries it.
//!
//! Usage may come on a `choices: []` chunk, on the finish chunk, on the last
//! content chunk, inside the finish chunk's choice (Moonshot Kimi), on every
//! chunk as a running total (vLLM's `continuous_usage_stats`), or in Groq's
//! `x_groq.usage`. Each field takes the latest value seen; a later `null` or
//! absent field never erases one. The usage object is the chat one; the
//! Responses API's is read into it.

use std::borrow::Cow;

use serde::de::{MapAccess, SeqAccess};

use crate::lenient::{lenient_struct, Any, Field, Int, Kind, Lenient};

lenient_struct! {
    pub struct Usage {
        "prompt_tokens" => prompt_tokens: Field<Tokens>,
        "completion_tokens" => completion_tokens: Field<Tokens>,
        "prompt_tokens_details" => prompt_tokens_details: Field<PromptTokensDetails>,
        /// DeepSeek: the same tokens as `prompt_tokens_details.cached_tokens`.
        "prompt_cache_hit_tokens" => prompt_cache_hit_tokens: Field<Tokens>,
        "cache_creation_tokens" => cache_creation_tokens: Field<Tokens>,
    }

    pub struct PromptTokensDetails {
        "cached_tokens" => cached_tokens: Field<Tokens>,
        "cache_write_tokens" => cache_write_tokens: Field<Tokens>,
        "cache_creation_tokens" => cache_creation_tokens: Field<Tokens>,
        /// Alibaba DashScope (Qwen): cache writes.
        "cache_creation_input_tokens" => cache_creation_input_tokens: Field<Tokens>,
    }
}

/// A token count as sent: an integer (integral floats and strings of digits
/// convert, as for [`Int`]), or, so that it can be reported with its value,
/// what was there instead.
#[derive(Debug, Clone, PartialEq)]
pub enum Tokens {
    Count(i64),
    /// Not a count: the JSON type and an excerpt of the value.
    Bad(Kind, String),
}

impl crate::lenient::ReadsOf for Tokens {}

impl<'de> Lenient<'de> for Tokens {
    fn from_bool(v: bool) -> Field<Self> {
        Field::Value(Tokens::Bad(Kind::Boolean, v.to_string()))
    }
    fn from_i64(v: i64) -> Field<Self> {
        Field::Value(Tokens::Count(v))
    }
    fn from_u64(v: u64) -> Field<Self> {
        match i64::try_from(v) {
            Ok(v) => Field::Value(Tokens::Count(v)),
            Err(_) => Field::Value(Tokens::Bad(Kind::Integer, v.to_string())),
        }
    }
    fn from_f64(v: f64) -> Field<Self> {
        match Int::from_f64(v) {
            Field::Converted(Int(n), k) => Field::Converted(Tokens::Count(n), k),
            _ => Field::Value(Tokens::Bad(Kind::Float, format!("{v:?}"))),
        }
    }
    fn from_str(v: Cow<'de, str>) -> Field<Self> {
        match v.trim().parse::<i64>() {
            Ok(n) => Field::Converted(Tokens::Count(n), Kind::String),
            Err(_) => Field::Value(Tokens::Bad(Kind::String, crate::anomaly::excerpt(&format!("{v:?}")))),
        }
    }
    // An array or object is reported with an excerpt of its JSON text.
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Field<Self>, A::Error> {
        Ok(Field::Value(Tokens::Bad(Kind::Array, crate::anomaly::excerpt(&Any::seq(seq)?.to_json()))))
    }
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Field<Self>, A::Error> {
        Ok(Field::Value(Tokens::Bad(Kind::Object, crate::anomaly::excerpt(&Any::map(map)?.to_json()))))
    }
}

/// How `prompt_tokens` is reported, matching the two Discourse accountings
/// (named in Ruby for what they do: `:net_of_cache` and `:as_sent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsageMode {
    /// Discourse since its per-call processor (`:net_of_cache`):
    /// `prompt_tokens` net of cache reads and writes.
    #[default]
    Current,
    /// Legacy Discourse, the `cached_tokens` reader (`:as_sent`):
    /// `prompt_tokens` as the server reported it, cache reads included.
    Legacy,
}

/// A field of the usage totals that the caller may not read as-is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadUsageField {
    /// The field inside the usage object (`usage.completion_tokens`).
    pub field: &'static str,
    /// True when the value was converted and used; false when ignored.
    pub converted: bool,
    /// The JSON type found.
    pub kind: Kind,
    /// An excerpt of the value, when known.
    pub value: Option<String>,
}

/// Usage merged over a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageTotals {
    seen: bool,
    prompt: Option<u64>,
    completion: Option<u64>,
    cache_read: Option<u64>,
    cache_write: Option<u64>,
}

/// The readers' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageReport {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// Cache reads as the legacy `cached_tokens` reader reported them: only
    /// when the server sent a count (no 0 stands in for a missing one).
    pub cached_tokens: Option<u64>,
    /// True when net prompt tokens would have been negative.
    pub clamped: bool,
}

impl UsageTotals {
    /// Merges one usage object. Fields of the wrong type are reported to
    /// `bad` (each one, with its value) and ignored.
    pub fn merge(&mut self, usage: &Usage, bad: &mut impl FnMut(BadUsageField)) {
        self.seen = true;
        self.prompt = count(&usage.prompt_tokens, "usage.prompt_tokens", bad).or(self.prompt);
        self.completion = count(&usage.completion_tokens, "usage.completion_tokens", bad).or(self.completion);
        let absent = PromptTokensDetails::default();
        let d = match &usage.prompt_tokens_details {
            Field::Value(d) | Field::Converted(d, _) => d,
            Field::Wrong(kind) => {
                let field = "usage.prompt_tokens_details";
                bad(BadUsageField { field, converted: false, kind: *kind, value: None });
                &absent
            }
            Field::Missing | Field::Null => &absent,
        };
        let mut count = |field: &Field<Tokens>, name| self::count(field, name, bad);
        // Cache reads: DeepSeek sends both fields for the same tokens, so
        // the second is only a fallback, never added. Each is read (and a
        // bad one reported) whichever is used.
        let read = count(&d.cached_tokens, "usage.prompt_tokens_details.cached_tokens");
        let hit = count(&usage.prompt_cache_hit_tokens, "usage.prompt_cache_hit_tokens");
        self.cache_read = read.or(hit).or(self.cache_read);
        let write = count(&d.cache_write_tokens, "usage.prompt_tokens_details.cache_write_tokens");
        let creation = count(&d.cache_creation_tokens, "usage.prompt_tokens_details.cache_creation_tokens");
        // DashScope (Qwen) names its cache writes after Anthropic's.
        let input_creation =
            count(&d.cache_creation_input_tokens, "usage.prompt_tokens_details.cache_creation_input_tokens");
        let top_creation = count(&usage.cache_creation_tokens, "usage.cache_creation_tokens");
        self.cache_write = write.or(creation).or(input_creation).or(top_creation).or(self.cache_write);
    }

    /// The values the readers return in `mode`. Cache counts are 0 once
    /// usage was seen without them; everything is `None` before.
    pub fn report(&self, mode: UsageMode) -> UsageReport {
        if !self.seen {
            return UsageReport::default();
        }
        let read = self.cache_read.unwrap_or(0);
        let write = self.cache_write.unwrap_or(0);
        let mut clamped = false;
        let prompt = self.prompt.map(|gross| match mode {
            UsageMode::Legacy => gross,
            UsageMode::Current => {
                let cached = read.saturating_add(write);
                if cached > gross {
                    clamped = true;
                }
                gross.saturating_sub(cached)
            }
        });
        UsageReport {
            prompt_tokens: prompt,
            completion_tokens: self.completion,
            cache_read_tokens: Some(read),
            cache_write_tokens: Some(write),
            cached_tokens: self.cache_read,
            clamped,
        }
    }
}

/// A field's count, when it holds one; anything else is reported.
fn count(field: &Field<Tokens>, name: &'static str, bad: &mut impl FnMut(BadUsageField)) -> Option<u64> {
    let (kind, value) = match (field.get(), field) {
        (Some(Tokens::Count(n)), _) if *n >= 0 => {
            if let Field::Converted(_, kind) = field {
                bad(BadUsageField { field: name, converted: true, kind: *kind, value: None });
            }
            return Some(*n as u64);
        }
        (Some(Tokens::Count(n)), _) => (Kind::Integer, Some(n.to_string())),
        (Some(Tokens::Bad(kind, value)), _) => (*kind, Some(value.clone())),
        (None, Field::Wrong(kind)) => (*kind, None),
        (None, _) => return None,
    };
    bad(BadUsageField { field: name, converted: false, kind, value });
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Chunk;

    fn usage_of(json: &str) -> Usage {
        Chunk::from_json(json).unwrap().usage.get().cloned().unwrap()
    }

    fn merged(jsons: &[&str]) -> (UsageTotals, Vec<BadUsageField>) {
        let mut totals = UsageTotals::default();
        let mut bad = Vec::new();
        for j in jsons {
            totals.merge(&usage_of(j), &mut |b| bad.push(b));
        }
        (totals, bad)
    }

    #[test]
    fn nothing_before_usage_arrives() {
        assert_eq!(UsageTotals::default().report(UsageMode::Current), UsageReport::default());
    }

    #[test]
    fn net_and_gross_prompt_tokens() {
        let (t, _) = merged(&[r#"{"usage":{"prompt_tokens":100,"completion_tokens":7,
            "prompt_tokens_details":{"cached_tokens":30,"cache_write_tokens":20}}}"#]);
        let current = t.report(UsageMode::Current);
        assert_eq!(current.prompt_tokens, Some(50));
        assert_eq!(current.cache_read_tokens, Some(30));
        assert_eq!(current.cache_write_tokens, Some(20));
        assert_eq!(current.completion_tokens, Some(7));
        assert_eq!(current.cached_tokens, Some(30));
        assert_eq!(t.report(UsageMode::Legacy).prompt_tokens, Some(100));
    }

    #[test]
    fn later_values_win_and_nulls_never_erase() {
        let (t, _) = merged(&[
            r#"{"usage":{"prompt_tokens":10,"completion_tokens":1}}"#,
            r#"{"usage":{"prompt_tokens":null,"completion_tokens":23}}"#,
            r#"{"usage":{}}"#,
        ]);
        let r = t.report(UsageMode::Current);
        assert_eq!((r.prompt_tokens, r.completion_tokens), (Some(10), Some(23)));
        assert_eq!((r.cache_read_tokens, r.cache_write_tokens), (Some(0), Some(0)));
        assert_eq!(r.cached_tokens, None, "the legacy reader never reported a 0 it was not sent");
    }

    #[test]
    fn deepseek_cache_hits_are_not_added_twice() {
        let (t, _) = merged(&[r#"{"usage":{"prompt_tokens":100,"prompt_cache_hit_tokens":40,
            "prompt_tokens_details":{"cached_tokens":40}}}"#]);
        assert_eq!(t.report(UsageMode::Current).cache_read_tokens, Some(40));
        let (t, _) = merged(&[r#"{"usage":{"prompt_tokens":100,"prompt_cache_hit_tokens":40}}"#]);
        assert_eq!(t.report(UsageMode::Current).prompt_tokens, Some(60));
    }

    #[test]
    fn cache_writes_fall_back_to_cache_creation_tokens() {
        let (t, _) = merged(&[r#"{"usage":{"prompt_tokens":100,"cache_creation_tokens":5}}"#]);
        assert_eq!(t.report(UsageMode::Current).cache_write_tokens, Some(5));
    }

    #[test]
    fn dashscope_cache_creation_input_tokens_are_cache_writes() {
        let (t, bad) = merged(&[r#"{"usage":{"prompt_tokens":100,"completion_tokens":3,
            "prompt_tokens_details":{"cached_tokens":10,"cache_creation_input_tokens":25}}}"#]);
        assert!(bad.is_empty());
        let r = t.report(UsageMode::Current);
        assert_eq!((r.cache_write_tokens, r.prompt_tokens), (Some(25), Some(65)));
        // The OpenRouter field, when both are sent, is the one read.
        let (t, _) = merged(&[r#"{"usage":{"prompt_tokens":100,
            "prompt_tokens_details":{"cache_write_tokens":7,"cache_creation_input_tokens":25}}}"#]);
        assert_eq!(t.report(UsageMode::Current).cache_write_tokens, Some(7));
    }

    #[test]
    fn wrong_types_are_reported_and_negative_net_is_clamped() {
        let (t, bad) = merged(&[r#"{"usage":{"prompt_tokens":"12","completion_tokens":-3,
            "prompt_tokens_details":{"cached_tokens":50}}}"#]);
        assert_eq!(
            bad,
            [
                BadUsageField {
                    field: "usage.prompt_tokens",
                    converted: true,
                    kind: Kind::String,
                    value: None
                },
                BadUsageField {
                    field: "usage.completion_tokens",
                    converted: false,
                    kind: Kind::Integer,
                    value: Some("-3".into())
                }
            ]
        );
        let r = t.report(UsageMode::Current);
        assert_eq!(r.prompt_tokens, Some(0));
        assert!(r.clamped);
        assert_eq!(r.completion_tokens, None);
    }

    #[test]
    fn every_wrong_type_is_reported_with_its_value_and_fallbacks_still_apply() {
        let (t, bad) = merged(&[r#"{"usage":{"prompt_tokens":10,"completion_tokens":"7",
            "prompt_tokens_details":{"cached_tokens":"abc","cache_write_tokens":{"a":1}},
            "prompt_cache_hit_tokens":4,"cache_creation_tokens":[2]}}"#]);
        let seen: Vec<(&str, bool, Option<&str>)> =
            bad.iter().map(|b| (b.field, b.converted, b.value.as_deref())).collect();
        assert_eq!(
            seen,
            [
                ("usage.completion_tokens", true, None),
                ("usage.prompt_tokens_details.cached_tokens", false, Some("\"abc\"")),
                ("usage.prompt_tokens_details.cache_write_tokens", false, Some(r#"{"a":1}"#)),
                ("usage.cache_creation_tokens", false, Some("[2]")),
            ]
        );
        let r = t.report(UsageMode::Legacy);
        assert_eq!((r.completion_tokens, r.cache_read_tokens), (Some(7), Some(4)), "the fallback is read");
        let (_, bad) = merged(&[r#"{"usage":{"prompt_tokens_details":"x","completion_tokens":1.5}}"#]);
        let seen: Vec<(&str, Kind, Option<&str>)> =
            bad.iter().map(|b| (b.field, b.kind, b.value.as_deref())).collect();
        assert_eq!(
            seen,
            [
                ("usage.completion_tokens", Kind::Float, Some("1.5")),
                ("usage.prompt_tokens_details", Kind::String, None)
            ]
        );
    }
}
