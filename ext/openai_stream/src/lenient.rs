//! Lenient fields, the reading both protocols share: a chunk or an event
//! from a real server (or a Hash from Ruby) may hold any type in any field. Instead of failing the whole chunk, every field
//! records what it found: missing, null, the expected value, a value converted
//! from another type, or the wrong type. The processor turns conversions and
//! wrong types into anomalies, with the call they belong to.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::json::JsonValue;

/// The JSON type a field actually held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Null,
    Boolean,
    Integer,
    Float,
    String,
    Array,
    Object,
}

impl Kind {
    /// The name with its article, for messages: "an integer", "a string".
    pub fn described(self) -> String {
        let article = if matches!(self, Kind::Integer | Kind::Array | Kind::Object) { "an" } else { "a" };
        format!("{article} {}", self.name())
    }

    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Boolean => "boolean",
            Kind::Integer => "integer",
            Kind::Float => "float",
            Kind::String => "string",
            Kind::Array => "array",
            Kind::Object => "object",
        }
    }
}

/// What one field of a chunk held.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Field<T> {
    /// The key was absent.
    #[default]
    Missing,
    /// The key was present with `null`.
    Null,
    /// The expected type.
    Value(T),
    /// Another type that converts without loss (an integer id, a `"1"`
    /// index); the original type is kept for the anomaly report.
    Converted(T, Kind),
    /// A type that does not convert; the field is ignored.
    Wrong(Kind),
}

impl<T> Field<T> {
    /// The value, converted or not.
    pub fn get(&self) -> Option<&T> {
        match self {
            Field::Value(v) | Field::Converted(v, _) => Some(v),
            _ => None,
        }
    }

    /// True when the key was absent or `null`.
    pub fn is_absent(&self) -> bool {
        matches!(self, Field::Missing | Field::Null)
    }

    /// The value, converted or not, as [`Field::get`] gives it, owned.
    pub fn into_value(self) -> Option<T> {
        match self {
            Field::Value(v) | Field::Converted(v, _) => Some(v),
            _ => None,
        }
    }

    /// The value made into another type, what the field held kept.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Field<U> {
        match self {
            Field::Value(v) => Field::Value(f(v)),
            Field::Converted(v, k) => Field::Converted(f(v), k),
            Field::Wrong(k) => Field::Wrong(k),
            Field::Missing => Field::Missing,
            Field::Null => Field::Null,
        }
    }
}

/// A type that can be read leniently. Each method receives one kind of JSON
/// value and says what the field holds (`Value`, `Converted` or `Wrong`,
/// never `Missing` or `Null`); the defaults reject it. Compound values that are rejected must be
/// consumed, which the defaults do.
pub trait Lenient<'de>: Sized {
    fn from_bool(_v: bool) -> Field<Self> {
        Field::Wrong(Kind::Boolean)
    }
    fn from_i64(_v: i64) -> Field<Self> {
        Field::Wrong(Kind::Integer)
    }
    fn from_u64(v: u64) -> Field<Self> {
        match i64::try_from(v) {
            Ok(v) => Self::from_i64(v),
            Err(_) => Field::Wrong(Kind::Integer),
        }
    }
    fn from_f64(_v: f64) -> Field<Self> {
        Field::Wrong(Kind::Float)
    }
    fn from_str(_v: Cow<'de, str>) -> Field<Self> {
        Field::Wrong(Kind::String)
    }
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Field<Self>, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Field::Wrong(Kind::Array))
    }
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Field<Self>, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Field::Wrong(Kind::Object))
    }
}

/// A value that is read and thrown away. Unlike serde's `IgnoredAny` (which
/// serde_json skips without any nesting limit) it goes through
/// `deserialize_any`, so JSON nested deeper than the parser's recursion
/// limit is an error wherever it is, as it is for Ruby's `JSON.parse`.
pub struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

/// Visitor methods that take a scalar (or nothing) and keep nothing.
macro_rules! skip_scalars {
    ($($visit:ident($($arg:ty)?)),*) => {
        $(fn $visit<E>(self $(, _: $arg)?) -> Result<Skip, E> {
            Ok(Skip)
        })*
    };
}

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    skip_scalars!(
        visit_bool(bool),
        visit_i64(i64),
        visit_u64(u64),
        visit_f64(f64),
        visit_str(&str),
        visit_unit()
    );
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }
    // An integer beyond 64 bits from `&JsonValue` (json/beyond_f64.rs).
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
        d.deserialize_any(self)
    }
}

// The visitors here get what the crate's two deserializers hand over:
// serde_json's (`deserialize_any`: unit, bool, i64, u64, f64, a borrowed or
// escaped string, a sequence, a map; no 128-bit integers without its
// `arbitrary_precision`) and `&JsonValue`'s (beyond_f64.rs), whose keys are
// strings.

impl<'de, T: Lenient<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FieldVisitor(PhantomData))
    }
}

struct FieldVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient<'de>> Visitor<'de> for FieldVisitor<T> {
    type Value = Field<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Field<T>, E> {
        Ok(Field::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Field<T>, E> {
        Ok(T::from_bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Field<T>, E> {
        Ok(T::from_i64(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Field<T>, E> {
        Ok(T::from_u64(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Field<T>, E> {
        Ok(T::from_f64(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Field<T>, E> {
        Ok(T::from_str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Field<T>, E> {
        Ok(T::from_str(Cow::Owned(v.to_owned())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Field<T>, A::Error> {
        T::from_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Field<T>, A::Error> {
        T::from_map(map)
    }
    // An integer beyond 64 bits from `&JsonValue` (json/beyond_f64.rs): read
    // as its nearest f64, as serde_json hands it over.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Field<T>, D::Error> {
        d.deserialize_any(self)
    }
}

/// Text: accepts strings only.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de> Lenient<'de> for Text<'de> {
    fn from_str(v: Cow<'de, str>) -> Field<Self> {
        Field::Value(Text(v))
    }
}

/// A tool call id: strings, and integers converted to their decimal text
/// (Poolside sends integer ids).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Id<'a>(pub Cow<'a, str>);

impl<'de> Lenient<'de> for Id<'de> {
    fn from_str(v: Cow<'de, str>) -> Field<Self> {
        Field::Value(Id(v))
    }
    fn from_i64(v: i64) -> Field<Self> {
        Field::Converted(Id(Cow::Owned(v.to_string())), Kind::Integer)
    }
    fn from_u64(v: u64) -> Field<Self> {
        Field::Converted(Id(Cow::Owned(v.to_string())), Kind::Integer)
    }
}

/// An integer (tool call index, token count). Integral floats and strings of
/// digits convert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Int(pub i64);

impl<'de> Lenient<'de> for Int {
    fn from_i64(v: i64) -> Field<Self> {
        Field::Value(Int(v))
    }
    fn from_f64(v: f64) -> Field<Self> {
        // The range check keeps the cast exact; NaN fails every comparison.
        if v.fract() == 0.0 && (-9.0e15..=9.0e15).contains(&v) {
            Field::Converted(Int(v as i64), Kind::Float)
        } else {
            Field::Wrong(Kind::Float)
        }
    }
    fn from_str(v: Cow<'de, str>) -> Field<Self> {
        match v.trim().parse::<i64>() {
            Ok(n) => Field::Converted(Int(n), Kind::String),
            Err(_) => Field::Wrong(Kind::String),
        }
    }
}

/// Any JSON value, kept whole (error payloads), as the value's own reader
/// reads it (Infinity, from a number beyond f64's range, is kept); `null`
/// is a `Null` field.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Any(pub JsonValue);

impl<'de> Deserialize<'de> for Field<Any> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match JsonValue::deserialize(deserializer)? {
            JsonValue::Null => Field::Null,
            v => Field::Value(Any(v)),
        })
    }
}

impl Any {
    /// An array a visitor was handed, read whole.
    pub(crate) fn seq<'de, A: SeqAccess<'de>>(seq: A) -> Result<JsonValue, A::Error> {
        JsonValue::deserialize(de::value::SeqAccessDeserializer::new(seq))
    }

    /// An object a visitor was handed, read whole.
    pub(crate) fn map<'de, A: MapAccess<'de>>(map: A) -> Result<JsonValue, A::Error> {
        JsonValue::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

/// A JSON array whose elements are each read leniently. Nearly every list
/// a server sends (`choices`, the `tool_calls` of a fragment) holds one
/// element: that one is kept inline, so reading it allocates nothing.
#[derive(Clone)]
pub struct List<T>(Items<T>);

#[derive(Clone)]
enum Items<T> {
    One(Field<T>),
    Many(Vec<Field<T>>),
}

impl<T> List<T> {
    pub const fn new() -> Self {
        List(Items::Many(Vec::new()))
    }

    pub fn push(&mut self, item: Field<T>) {
        if let Items::Many(items) = &mut self.0 {
            if !items.is_empty() {
                return items.push(item);
            }
        }
        self.0 = match std::mem::replace(&mut self.0, Items::Many(Vec::new())) {
            Items::Many(_) => Items::One(item),
            Items::One(first) => Items::Many(vec![first, item]),
        };
    }

    /// Appends a default value and returns it, for readers that fill an
    /// element in place (building it first and pushing it would copy it).
    #[inline]
    pub fn push_default(&mut self) -> &mut T
    where
        T: Default,
    {
        match &mut self.0 {
            // A new list: its Vec never allocated, so there is nothing to
            // drop, and forgetting it skips a call of the drop glue.
            Items::Many(items) if items.capacity() == 0 => {
                std::mem::forget(std::mem::replace(&mut self.0, Items::One(Field::Value(T::default()))))
            }
            _ => self.push(Field::Value(T::default())),
        }
        match self.as_mut_slice().last_mut() {
            Some(Field::Value(item)) => item,
            _ => unreachable!("a value was just pushed"),
        }
    }

    pub fn as_slice(&self) -> &[Field<T>] {
        match &self.0 {
            Items::One(item) => std::slice::from_ref(item),
            Items::Many(items) => items,
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [Field<T>] {
        match &mut self.0 {
            Items::One(item) => std::slice::from_mut(item),
            Items::Many(items) => items,
        }
    }

    pub fn into_vec(self) -> Vec<Field<T>> {
        match self.0 {
            Items::One(item) => vec![item],
            Items::Many(items) => items,
        }
    }
}

impl<T> Default for List<T> {
    fn default() -> Self {
        List::new()
    }
}

impl<T> std::ops::Deref for List<T> {
    type Target = [Field<T>];

    fn deref(&self) -> &[Field<T>] {
        self.as_slice()
    }
}

impl<T: fmt::Debug> fmt::Debug for List<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("List").field(&self.as_slice()).finish()
    }
}

impl<T: PartialEq> PartialEq for List<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<'de, T: Lenient<'de>> Lenient<'de> for List<T> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Field<Self>, A::Error> {
        let mut items = List::new();
        while let Some(item) = seq.next_element::<Field<T>>()? {
            items.push(item);
        }
        Ok(Field::Value(items))
    }
}

/// What the chunk reader reads of a value: all of it, or (a struct) its
/// keys, each with what is read of that key's value (of an array, of each
/// element). The binding's Hash path writes a parsed chunk back as JSON
/// with these keys only; the others are skipped, as the scanner skips them.
#[derive(Debug)]
pub enum Reads {
    All,
    Keys(&'static [(&'static str, Reads)]),
}

/// The [`Reads`] of a field's type: all of it, unless it is a struct.
pub trait ReadsOf {
    const READS: Reads = Reads::All;
}

impl<T: ReadsOf> ReadsOf for Field<T> {
    const READS: Reads = T::READS;
}

impl<T: ReadsOf> ReadsOf for List<T> {
    const READS: Reads = T::READS;
}

impl ReadsOf for Text<'_> {}
impl ReadsOf for Id<'_> {}
impl ReadsOf for Int {}
impl ReadsOf for Any {}

/// Declares structs read from a JSON object: known keys are matched (the
/// last duplicate wins, as in Ruby's `JSON.parse`), unknown keys skipped,
/// absent keys left `Missing`. Any other JSON type is `Wrong`. The fast
/// scanner reads the same keys (`scan::ScanObject`), each field as its type
/// says (`scan::ScanField`).
macro_rules! lenient_struct {
    ($(
        $(#[$meta:meta])*
        pub struct $name:ident $(<$lt:lifetime>)? {
            $( $(#[$fmeta:meta])* $key:literal => $field:ident : $ty:ty ),* $(,)?
        }
    )+) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Default)]
        pub struct $name $(<$lt>)? {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $(<$lt>)? $name $(<$lt>)? {
            /// The keys this struct reads.
            pub const FIELDS: &'static [&'static str] = &[$( $key ),*];
        }

        // A struct that borrows names its lifetime `'a`, the one these
        // impls read it with.
        impl<'a> $crate::lenient::Lenient<'a> for $name $(<$lt>)? {
            $crate::lenient::lenient_struct!(@from_map $( $key => $field ),*);
        }

        impl<'a> $crate::lenient::ReadsOf for $name $(<$lt>)? {
            const READS: $crate::lenient::Reads =
                $crate::lenient::Reads::Keys(&[$( ($key, <$ty as $crate::lenient::ReadsOf>::READS) ),*]);
        }

        impl<'a> $crate::chat::scan::ScanObject<'a> for $name $(<$lt>)? {
            $crate::lenient::lenient_struct!(@scan 'a; $( $key => $field ),*);
        }
    )+};
    (@from_map $( $key:literal => $field:ident ),*) => {
        fn from_map<A: serde::de::MapAccess<'a>>(
            mut map: A,
        ) -> Result<$crate::lenient::Field<Self>, A::Error> {
            let mut out = Self::default();
            while let Some(key) = map.next_key_seed($crate::lenient::KeyIn(Self::FIELDS))? {
                match key {
                    $( Some($key) => out.$field = map.next_value()?, )*
                    _ => {
                        map.next_value::<$crate::lenient::Skip>()?;
                    }
                }
            }
            Ok($crate::lenient::Field::Value(out))
        }
    };
    (@scan $lt:lifetime; $( $key:literal => $field:ident ),*) => {
        fn scan_members(s: &mut $crate::chat::scan::Scanner<$lt>, out: &mut Self) -> Option<()> {
            s.object(|s, key| match &*key {
                $( $key => $crate::chat::scan::ScanField::scan(&mut out.$field, s), )*
                _ => s.skip(0),
            })
        }
    };
}
pub(crate) use lenient_struct;

/// Reads an object key as the one of `names` it equals (`None`: a key the
/// struct does not know). Nothing is allocated, whatever the key's source
/// (serde_json's escaped strings, a `&JsonValue`'s keys).
pub struct KeyIn(pub &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIn {
    type Value = Option<&'static str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for KeyIn {
    type Value = Option<&'static str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    // serde's `visit_borrowed_str` and `visit_string` come here.
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().copied().find(|name| *name == v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(list: &List<i64>) -> Vec<Option<i64>> {
        list.iter().map(|f| f.get().copied()).collect()
    }

    #[test]
    fn a_list_grows_from_none_to_one_to_many_in_order() {
        let mut list = List::new();
        assert!(list.is_empty());
        list.push(Field::Value(1));
        assert_eq!(ints(&list), [Some(1)]);
        list.push(Field::Null);
        list.push(Field::Value(3));
        assert_eq!(ints(&list), [Some(1), None, Some(3)]);
        if let Some(Field::Value(last)) = list.as_mut_slice().last_mut() {
            *last = 4;
        }
        assert_eq!(list.clone().into_vec(), [Field::Value(1), Field::Null, Field::Value(4)]);
        *list.push_default() = 5;
        assert_eq!(ints(&list), [Some(1), None, Some(4), Some(5)]);
    }

    #[test]
    fn lists_compare_and_print_by_their_elements_whatever_they_hold_them_in() {
        let inline = List(Items::One(Field::Value(7_i64)));
        let spilled = List(Items::Many(vec![Field::Value(7_i64)]));
        assert_eq!(inline, spilled);
        assert_ne!(inline, List::new());
        assert_eq!(format!("{inline:?}"), format!("{spilled:?}"));
        assert_eq!(format!("{inline:?}"), "List([Value(7)])");
    }

    #[test]
    fn a_json_array_reads_into_a_list() {
        let list: Field<List<Int>> = serde_json::from_str("[1, null, 2.0, \"x\"]").unwrap();
        let list = list.get().unwrap();
        assert_eq!(list.len(), 4);
        assert_eq!(list[0], Field::Value(Int(1)));
        assert_eq!(list[1], Field::Null);
        assert_eq!(list[3], Field::Wrong(Kind::String));
        let one: Field<List<Int>> = serde_json::from_str("[5]").unwrap();
        assert_eq!(one, Field::Value(List(Items::One(Field::Value(Int(5))))));
    }
}
