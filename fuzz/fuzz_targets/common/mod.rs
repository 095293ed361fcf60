//! Shared by the fuzz targets: a tiny deterministic RNG for split points, a
//! mirror that applies view events the way the Ruby binding does (a Hash per
//! object, a key given twice replaces its value in place), and the check that
//! a view is consistent with a final value.
#![allow(dead_code)]

use openai_stream::json::{ContainerKind, JsonValue, ViewEvent};

/// xorshift64*: split points derived from a seed byte, so libFuzzer mutates
/// the content and the fragmentation independently.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The longest piece a split cuts, by `mode % 4`: one byte, `short`, `long`
/// or the whole input of `len` bytes.
pub fn longest_piece(mode: u8, short: usize, long: usize, len: usize) -> usize {
    match mode % 4 {
        0 => 1,
        1 => short,
        2 => long,
        _ => len.max(1),
    }
}

/// Cuts `0..len` into consecutive pieces: each `next_len()` long, its end
/// moved on to the first point `can_end` accepts.
pub fn cut(
    len: usize,
    mut next_len: impl FnMut() -> usize,
    can_end: impl Fn(usize) -> bool,
) -> Vec<std::ops::Range<usize>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < len {
        let mut end = (start + next_len()).min(len);
        while !can_end(end) {
            end += 1;
        }
        pieces.push(start..end);
        start = end;
    }
    pieces
}

/// Sets `key` as a Ruby Hash does: a key given again keeps its first
/// position and takes the new value.
fn set(pairs: &mut Vec<(String, JsonValue)>, key: &str, value: JsonValue) {
    match pairs.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => pairs.push((key.to_owned(), value)),
    }
}

/// A final value as a Ruby caller holds it: each key once, in the position
/// of its first appearance, with its last value.
pub fn ruby_view(v: &JsonValue) -> JsonValue {
    match v {
        JsonValue::Array(items) => JsonValue::Array(items.iter().map(ruby_view).collect()),
        JsonValue::Object(pairs) => {
            let mut out = Vec::new();
            for (k, v) in pairs {
                set(&mut out, k, ruby_view(v));
            }
            JsonValue::Object(out)
        }
        scalar => scalar.clone(),
    }
}

fn child_mut<'v>(v: &'v mut JsonValue, slot: &Slot) -> &'v mut JsonValue {
    match (v, slot) {
        (JsonValue::Object(pairs), Slot::Key(k)) => {
            &mut pairs.iter_mut().find(|(key, _)| key == k).expect("open key exists").1
        }
        (JsonValue::Array(items), Slot::Index(i)) => &mut items[*i],
        (other, slot) => panic!("view path {slot:?} into {other:?}"),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Slot {
    Key(String),
    Index(usize),
}

/// Applies view events. `root: None` until the first event for a raw
/// parser; a tool call's mirror starts at `{}` (its parameters Hash).
/// Any malformed event sequence (close without open, append into a
/// non-string, a key into an array...) panics: that is a finding.
#[derive(Debug, Default)]
pub struct Mirror {
    pub root: Option<JsonValue>,
    /// The open containers, as a path from the root. For a raw parser the
    /// root itself counts as open while `root_open`.
    pub path: Vec<Slot>,
    pub root_open: bool,
}

impl Mirror {
    pub fn params() -> Self {
        Mirror { root: Some(JsonValue::Object(Vec::new())), path: Vec::new(), root_open: true }
    }

    fn container(&mut self) -> &mut JsonValue {
        let mut v = self.root.as_mut().expect("an event inside a root that never opened");
        for slot in &self.path {
            v = child_mut(v, slot);
        }
        v
    }

    fn insert(&mut self, key: Option<&str>, value: JsonValue) -> Option<Slot> {
        if self.root.is_none() || (!self.root_open && self.path.is_empty()) {
            assert!(key.is_none(), "a key at the root");
            assert!(self.root.is_none(), "a second root value");
            self.root = Some(value);
            return None;
        }
        match (self.container(), key) {
            (JsonValue::Object(pairs), Some(k)) => {
                set(pairs, k, value);
                Some(Slot::Key(k.to_owned()))
            }
            (JsonValue::Array(items), None) => {
                items.push(value);
                Some(Slot::Index(items.len() - 1))
            }
            (other, key) => panic!("view event with key {key:?} into {other:?}"),
        }
    }

    pub fn apply(&mut self, event: ViewEvent) {
        match event {
            ViewEvent::Open { key, kind } => {
                let value = match kind {
                    ContainerKind::Object => JsonValue::Object(Vec::new()),
                    ContainerKind::Array => JsonValue::Array(Vec::new()),
                    ContainerKind::String => JsonValue::String(String::new()),
                };
                match self.insert(key, value) {
                    Some(slot) => self.path.push(slot),
                    None => self.root_open = true,
                }
            }
            ViewEvent::Append(text) => {
                assert!(!text.is_empty(), "an empty append");
                assert!(self.root_open, "append outside any open string");
                match self.container() {
                    JsonValue::String(s) => s.push_str(text),
                    other => panic!("append into {other:?}"),
                }
            }
            ViewEvent::Scalar { key, value } => {
                assert!(
                    !matches!(value, JsonValue::Array(_) | JsonValue::Object(_) | JsonValue::String(_)),
                    "a scalar event with {value:?}"
                );
                self.insert(key, value.clone());
            }
            ViewEvent::Close => {
                if self.path.pop().is_none() {
                    assert!(self.root_open, "close without an open container");
                    self.root_open = false;
                }
            }
        }
    }
}

/// True when `view` can still become `fin`: strings are prefixes, arrays
/// are prefixes element-wise, object keys are present in `fin` (with a
/// duplicated key, consistent with one of its values: the view shows each
/// value while it streams), scalars are equal. Containers that are closed
/// (not on `open`) must be complete: same string, same length, same keys.
/// `open`: the path of open containers below this value, or `None` when
/// this value is itself closed.
pub fn consistent(view: &JsonValue, fin: &JsonValue, open: Option<&[Slot]>) -> bool {
    let closed = open.is_none();
    let child_open = |slot: &Slot| -> Option<&[Slot]> {
        match open {
            Some([first, rest @ ..]) if first == slot => Some(rest),
            _ => None,
        }
    };
    match (view, fin) {
        (JsonValue::Null, JsonValue::Null) => true,
        (JsonValue::Bool(a), JsonValue::Bool(b)) => a == b,
        (JsonValue::Number(a), JsonValue::Number(b)) => a == b,
        (JsonValue::String(a), JsonValue::String(b)) => {
            if closed {
                a == b
            } else {
                b.starts_with(a.as_str())
            }
        }
        (JsonValue::Array(a), JsonValue::Array(b)) => {
            (if closed { a.len() == b.len() } else { a.len() <= b.len() })
                && a.iter()
                    .zip(b)
                    .enumerate()
                    .all(|(i, (x, y))| consistent(x, y, child_open(&Slot::Index(i))))
        }
        (JsonValue::Object(a), JsonValue::Object(b)) => {
            let keys_ok = !closed || {
                let mut distinct: Vec<&str> = Vec::new();
                for (k, _) in b {
                    if !distinct.contains(&k.as_str()) {
                        distinct.push(k);
                    }
                }
                distinct.len() == a.len()
            };
            keys_ok
                && a.iter().all(|(k, x)| {
                    let slot = Slot::Key(k.clone());
                    b.iter().filter(|(key, _)| key == k).any(|(_, y)| consistent(x, y, child_open(&slot)))
                })
        }
        _ => false,
    }
}

/// JsonValue to serde_json (last duplicate key wins). `None` when a number
/// does not fit an f64 (`1e400`: valid JSON, which serde_json rejects).
pub fn to_serde(v: &JsonValue) -> Option<serde_json::Value> {
    use serde_json::Value;
    Some(match v {
        JsonValue::Null => Value::Null,
        JsonValue::Bool(b) => Value::Bool(*b),
        JsonValue::Number(n) => serde_json::from_str(n.as_str()).ok()?,
        JsonValue::String(s) => Value::String(s.clone()),
        JsonValue::Array(items) => Value::Array(items.iter().map(to_serde).collect::<Option<_>>()?),
        JsonValue::Object(pairs) => {
            let mut map = serde_json::Map::new();
            for (k, v) in pairs {
                map.insert(k.clone(), to_serde(v)?);
            }
            Value::Object(map)
        }
    })
}
