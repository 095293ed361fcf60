use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON number, kept as the text it was written with (validated JSON number
/// syntax). Integers of any size survive the trip to Ruby unchanged.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Number(Box<str>);

impl Number {
    /// Wraps text that the caller has already checked is a JSON number.
    pub(crate) fn from_validated(text: &str) -> Self {
        Number(text.into())
    }

    /// Builds a number from a signed integer.
    pub fn from_i64(value: i64) -> Self {
        Number(value.to_string().into_boxed_str())
    }

    /// Builds a number from an unsigned integer.
    pub fn from_u64(value: u64) -> Self {
        Number(value.to_string().into_boxed_str())
    }

    /// Builds a number from any float. `{:?}` prints the shortest text that
    /// reads back as the same f64 and always keeps a `.` or an exponent, so
    /// the number stays a float. A float with no JSON form (from a Ruby
    /// `Float::INFINITY`, or a JSON number beyond f64's range, which Ruby's
    /// `JSON.parse` reads as one) is kept as `Infinity`, `-Infinity` or
    /// `NaN`, which [`Number::as_f64`] reads back and [`Number::is_integer`]
    /// rejects.
    pub fn from_any_f64(value: f64) -> Self {
        Number(match value {
            v if v.is_nan() => "NaN".into(),
            v if v.is_infinite() && v > 0.0 => "Infinity".into(),
            v if v.is_infinite() => "-Infinity".into(),
            v => format!("{v:?}").into_boxed_str(),
        })
    }

    /// The number as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when the text has no fraction and no exponent (and is finite).
    pub fn is_integer(&self) -> bool {
        !self.0.bytes().any(|b| matches!(b, b'.' | b'e' | b'E' | b'I' | b'N'))
    }

    /// The value as an `i64` when it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        self.is_integer().then(|| self.0.parse().ok()).flatten()
    }

    /// The value as an `f64` (rounded to nearest; huge values become infinite,
    /// as in Ruby's `JSON.parse`).
    pub fn as_f64(&self) -> f64 {
        self.0.parse().unwrap_or(f64::NAN)
    }
}

/// Both print the number as written.
macro_rules! as_written {
    ($($format:ident),*) => {$(
        impl fmt::$format for Number {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    )*};
}
as_written!(Debug, Display);

/// An owned JSON value.
///
/// Objects are a list of `(key, value)` pairs in source order. Duplicate keys
/// are kept; [`JsonValue::get`] and every conversion apply "last one wins,
/// first position kept", which is what a Ruby Hash built by `JSON.parse` does.
#[derive(Clone, PartialEq, Default)]
pub enum JsonValue {
    #[default]
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<JsonValue>),
    Object(Vec<(String, JsonValue)>),
}

impl JsonValue {
    /// The value of `key` in an object (the last one when duplicated).
    pub fn get(&self, key: &str) -> Option<&JsonValue> {
        match self {
            JsonValue::Object(pairs) => pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, when this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            JsonValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// True for objects.
    pub fn is_object(&self) -> bool {
        matches!(self, JsonValue::Object(_))
    }

    /// The JSON type name, for messages: `null`, `boolean`, `number`, `string`,
    /// `array` or `object`.
    pub fn kind(&self) -> &'static str {
        match self {
            JsonValue::Null => "null",
            JsonValue::Bool(_) => "boolean",
            JsonValue::Number(_) => "number",
            JsonValue::String(_) => "string",
            JsonValue::Array(_) => "array",
            JsonValue::Object(_) => "object",
        }
    }

    /// Compact JSON text of the value (used for excerpts in messages and for
    /// the CLI's machine output).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        match self {
            JsonValue::Null => out.push_str("null"),
            JsonValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            JsonValue::Number(n) => out.push_str(n.as_str()),
            JsonValue::String(s) => write_json_string(s, out),
            JsonValue::Array(items) => write_list(out, ('[', ']'), items, |item, out| item.write_json(out)),
            JsonValue::Object(pairs) => write_list(out, ('{', '}'), pairs, |(k, v), out| {
                write_json_string(k, out);
                out.push(':');
                v.write_json(out);
            }),
        }
    }
}

/// `items` written by `write`, comma-separated, between the two `brackets`.
fn write_list<T>(out: &mut String, brackets: (char, char), items: &[T], write: impl Fn(&T, &mut String)) {
    out.push(brackets.0);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write(item, out);
    }
    out.push(brackets.1);
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

impl fmt::Debug for JsonValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

impl<'de> Deserialize<'de> for JsonValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonValueVisitor)
    }
}

/// Reads what the two deserializers of this crate's values hand over:
/// serde_json's, and `&JsonValue`'s (beyond_f64.rs).
struct JsonValueVisitor;

/// 2^63: below it, serde_json hands integers over as `i64` or `u64`.
const BEYOND_64_BITS: f64 = 9_223_372_036_854_775_808.0;

/// The message of the refusal in [`JsonValueVisitor::visit_f64`], which
/// [`super::beyond_f64`] reads again.
pub(crate) const OUT_OF_64_BITS: &str = "number out of range of a 64-bit integer, read again";

/// The text of a [`Number`], handed over by `&JsonValue` alone (whose
/// numbers are checked already), as a number.
struct NumberText;

impl<'de> Visitor<'de> for NumberText {
    type Value = JsonValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the text of a number")
    }

    fn visit_str<E>(self, v: &str) -> Result<JsonValue, E> {
        let n = Number::from_validated(v);
        // A float beyond f64's range is Infinity, as Ruby reads it (rule 56).
        let beyond = !n.is_integer() && !n.as_f64().is_finite();
        Ok(JsonValue::Number(if beyond { Number::from_any_f64(n.as_f64()) } else { n }))
    }
}

impl<'de> Visitor<'de> for JsonValueVisitor {
    type Value = JsonValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<JsonValue, E> {
        Ok(JsonValue::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<JsonValue, E> {
        Ok(JsonValue::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<JsonValue, E> {
        Ok(JsonValue::Number(Number::from_i64(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<JsonValue, E> {
        Ok(JsonValue::Number(Number::from_u64(v)))
    }

    /// serde_json hands an integer beyond 64 bits over as its nearest f64:
    /// such a value is refused, so that the text is read again by this
    /// crate's parser, which keeps every digit (json/beyond_f64.rs). A float
    /// written that large (`1e20`) is read again the same way, and stays a
    /// float.
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<JsonValue, E> {
        if v.fract() == 0.0 && v.abs() >= BEYOND_64_BITS {
            return Err(E::custom(OUT_OF_64_BITS));
        }
        Ok(JsonValue::Number(Number::from_any_f64(v)))
    }

    /// A number from `&JsonValue` that is not a 64-bit integer
    /// (json/beyond_f64.rs): its text, as this crate's parser kept it.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<JsonValue, D::Error> {
        d.deserialize_str(NumberText)
    }

    fn visit_str<E>(self, v: &str) -> Result<JsonValue, E> {
        Ok(JsonValue::String(v.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(JsonValue::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonValue, A::Error> {
        let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value()?;
            pairs.push((key, value));
        }
        Ok(JsonValue::Object(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_returns_the_last_duplicate() {
        let v: JsonValue = serde_json::from_str(r#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(v.get("a").map(|v| v.to_json()), Some("3".to_string()));
        assert_eq!(v.get("c"), None);
    }

    #[test]
    fn numbers_keep_their_kind() {
        assert!(Number::from_i64(-5).is_integer());
        assert_eq!(Number::from_i64(-5).as_i64(), Some(-5));
        let f = Number::from_any_f64(1.0);
        assert!(!f.is_integer());
        assert_eq!(f.as_f64(), 1.0);
        let infinite = Number::from_any_f64(f64::NEG_INFINITY);
        assert_eq!((infinite.as_str(), infinite.is_integer()), ("-Infinity", false));
        assert_eq!(Number::from_validated("123456789012345678901234567890").as_i64(), None);
    }

    #[test]
    fn a_float_read_by_serde_json_is_the_nearest_f64_as_in_ruby() {
        // serde_json's default float reading is off by one unit in the last
        // place for some texts; Ruby's JSON.parse is not.
        for text in ["12345678901234567.0", "2.2250738585072011e-308", "9007199254740993.0", "0.1"] {
            let v: JsonValue = serde_json::from_str(text).unwrap();
            let JsonValue::Number(n) = v else { panic!("{text} is not a number") };
            assert_eq!(n.as_f64(), text.parse::<f64>().unwrap(), "{text}");
        }
    }

    #[test]
    fn to_json_escapes_strings() {
        let v = JsonValue::Object(vec![("k\"".into(), JsonValue::String("a\nb\u{1}".into()))]);
        assert_eq!(v.to_json(), r#"{"k\"":"a\nb\u0001"}"#);
        let back: serde_json::Value = serde_json::from_str(&v.to_json()).unwrap();
        assert_eq!(back["k\""], "a\nb\u{1}");
    }
}
