//! Numbers beyond f64's range (`1e400`, a 400-digit integer): serde_json
//! refuses the whole text ("number out of range"), while Ruby's `JSON.parse`
//! reads them as `Infinity` and goes on. So that one such number does not
//! cost a whole event (and the tool call in it), a text serde_json refuses
//! for that reason is parsed again by this crate's own parser, which keeps
//! numbers as their text ([`parse_complete`]), and read from the value
//! (`&JsonValue` is a serde `Deserializer`): a number beyond f64's range
//! then reads as `±Infinity`, exactly as Ruby reads the same bytes, and
//! every other number (`1.7976931348623157e308` included) as itself. The
//! text is never rewritten, so no number is mistaken for another and there
//! is no bound on how many there are.

use serde::de::value::{Error, MapDeserializer, SeqDeserializer};
use serde::de::{Deserializer, IntoDeserializer, Visitor};

use super::incremental::{parse_complete, SyntaxErrorKind};
use super::value::{JsonValue, Number, OUT_OF_64_BITS};

/// What [`beyond_f64`] made of a text serde_json refused.
pub enum Reparsed {
    /// The whole text, read by this crate's parser.
    Value(JsonValue),
    /// The text is valid so far but not complete.
    Incomplete,
}

/// The text read again when serde_json refused it for a number beyond
/// f64's range; None for any other error, or when the text has another
/// error too (serde_json's is then the one to report).
pub fn beyond_f64(text: &str, error: &serde_json::Error) -> Option<Reparsed> {
    let message = error.to_string();
    let out_of_range = (error.is_syntax() && message.starts_with("number out of range"))
        || (error.is_data() && message.starts_with(OUT_OF_64_BITS));
    if !out_of_range {
        return None;
    }
    match parse_complete(text) {
        Ok(value) => Some(Reparsed::Value(value)),
        Err(e) if e.kind == SyntaxErrorKind::UnexpectedEnd => Some(Reparsed::Incomplete),
        Err(_) => None,
    }
}

/// A reader of a number type gets what serde_json hands over for the same
/// text: a 64-bit integer as one, any other number as its nearest f64.
macro_rules! numbers_as_serde_json {
    ($($method:ident)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self {
                JsonValue::Number(n) => match number(n) {
                    Some(Ok(i)) => visitor.visit_i64(i),
                    Some(Err(u)) => visitor.visit_u64(u),
                    None => visitor.visit_f64(n.as_f64()),
                },
                _ => self.deserialize_any(visitor),
            }
        })*
    };
}

/// A parsed value read as serde_json reads the same text: integers that
/// fit 64 bits as integers, every other number as the f64 nearest to it
/// (`±Infinity` beyond the range), strings borrowed.
impl<'de> Deserializer<'de> for &'de JsonValue {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            JsonValue::Null => visitor.visit_unit(),
            JsonValue::Bool(b) => visitor.visit_bool(*b),
            // A number that is not a 64-bit integer: a value keeps its
            // text; the crate's other readers get the nearest f64, as from
            // serde_json (a reader of a number type asks for one: below).
            JsonValue::Number(n) => match number(n) {
                Some(Ok(i)) => visitor.visit_i64(i),
                Some(Err(u)) => visitor.visit_u64(u),
                None => visitor.visit_newtype_struct(Exact(n)),
            },
            JsonValue::String(s) => visitor.visit_borrowed_str(s),
            JsonValue::Array(items) => visitor.visit_seq(SeqDeserializer::new(items.iter())),
            JsonValue::Object(pairs) => {
                visitor.visit_map(MapDeserializer::new(pairs.iter().map(|(k, v)| (k.as_str(), v))))
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            JsonValue::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    numbers_as_serde_json! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128 deserialize_u8
        deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64
    }

    serde::forward_to_deserialize_any! {
        bool char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// A number as a 64-bit integer (`Ok` signed, `Err` unsigned), if it is one.
fn number(n: &Number) -> Option<Result<i64, u64>> {
    n.as_i64().map(Ok).or_else(|| n.as_str().parse::<u64>().ok().map(Err))
}

/// A number that is not a 64-bit integer: its text to a reader of text
/// (the value reader's), its nearest f64 to any other.
struct Exact<'de>(&'de Number);

impl<'de> Deserializer<'de> for Exact<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_f64(self.0.as_f64())
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_str(self.0.as_str())
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, Error> for &'de JsonValue {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn reread(text: &str) -> Option<Reparsed> {
        beyond_f64(text, &serde_json::from_str::<crate::lenient::Skip>(text).err()?)
    }

    #[test]
    fn numbers_beyond_f64_read_as_infinity_and_the_rest_as_themselves() {
        let Some(Reparsed::Value(v)) = reread(r#"{"a":1e400,"b":-1E+400,"m":1.7976931348623157e308,"i":7}"#)
        else {
            panic!("not reread")
        };
        let read = |k: &str| v.get(k).and_then(|n| f64::deserialize(n).ok());
        assert_eq!(read("a"), Some(f64::INFINITY));
        assert_eq!(read("b"), Some(f64::NEG_INFINITY));
        assert_eq!(read("m"), Some(f64::MAX));
        assert_eq!(v.get("i").and_then(|n| u8::deserialize(n).ok()), Some(7));
        let many = format!("[{}]", vec!["1e400"; 200].join(","));
        assert!(
            matches!(reread(&many), Some(Reparsed::Value(JsonValue::Array(items))) if items.len() == 200)
        );
    }

    #[test]
    fn integers_beyond_64_bits_keep_every_digit_in_a_value_and_read_as_floats_elsewhere() {
        let text = r#"{"n":18446744073709551617,"m":-99999999999999999999,"f":1e20,"x":[1.5]}"#;
        let error = serde_json::from_str::<JsonValue>(text).expect_err("refused, to be read again");
        let Some(Reparsed::Value(v)) = beyond_f64(text, &error) else { panic!("not read again") };
        // Through `&JsonValue`: a value keeps the text, a number type gets
        // the nearest f64, as from serde_json.
        let again = JsonValue::deserialize(&v).unwrap();
        assert_eq!(
            again.to_json(),
            r#"{"n":18446744073709551617,"m":-99999999999999999999,"f":1e20,"x":[1.5]}"#
        );
        assert_eq!(v.get("n").map(|n| f64::deserialize(n).unwrap()), Some(18446744073709551617.0));
        assert_eq!(v.get("f").map(|n| u64::deserialize(n).is_err()), Some(true));
        // Skipped, as a lenient field reads it.
        assert!(crate::lenient::Skip::deserialize(&v).is_ok());
        // Within 64 bits, serde_json's reading stands.
        assert!(
            serde_json::from_str::<JsonValue>(r#"[18446744073709551615,-9223372036854775808,1e15]"#).is_ok()
        );
    }

    #[test]
    fn other_errors_are_left_to_serde_json_and_a_cut_text_is_incomplete() {
        for other in [r#"{"a":1e400,]"#, r#"{"a":Infinity}"#, r#"{"a":"1e400"x}"#] {
            assert!(reread(other).is_none(), "{other}");
        }
        assert!(matches!(reread(r#"{"a":1e400,"b":"#), Some(Reparsed::Incomplete)));
    }
}
