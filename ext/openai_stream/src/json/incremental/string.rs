//! String content: plain runs copied in bulk, escapes decoded one byte at a
//! time so that any of them can be cut by a fragment boundary.
//!
//! Surrogates follow serde_json (and RFC 8259's "must be paired" reading):
//! a `\uD800`-`\uDBFF` escape must be followed at once by a `\uDC00`-`\uDFFF`
//! escape, and a low half alone is an error. Either way it is
//! [`SyntaxErrorKind::InvalidUnicode`]; the text of a String never holds a
//! lone surrogate (Rust and Ruby UTF-8 strings cannot).

use super::error::{found, SyntaxError, SyntaxErrorKind};

/// Where inside a string the text read so far ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Escape {
    /// Plain text.
    None,
    /// After a backslash.
    Backslash,
    /// Inside `\uXXXX`: `count` hex digits read, their value in `acc`;
    /// `high` is the high surrogate this escape must complete.
    Hex { high: Option<u16>, count: u8, acc: u16 },
    /// A high surrogate was read; its low half's `\` must come next.
    AfterHigh(u16),
    /// A high surrogate and a `\`; the `u` must come next.
    AfterHighBackslash(u16),
}

/// True for the bytes that end a plain run: `"`, `\` and control characters.
#[inline(always)]
fn is_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The length of the plain run at the start of `bytes`. Scans 16 bytes at a
/// time with a branch-free test the compiler vectorizes; only the block with
/// the hit is searched byte by byte.
#[inline]
fn plain_run(bytes: &[u8]) -> usize {
    const BLOCK: usize = 16;
    let mut skipped = 0;
    for block in bytes.chunks_exact(BLOCK) {
        let hit = block.iter().fold(false, |hit, &b| hit | is_special(b));
        if hit {
            break;
        }
        skipped += BLOCK;
    }
    let rest = bytes.get(skipped..).unwrap_or_default();
    skipped + rest.iter().position(|&b| is_special(b)).unwrap_or(rest.len())
}

#[inline]
fn hex_digit(b: u8) -> Option<u16> {
    char::from(b).to_digit(16).map(|d| d as u16)
}

/// Reads string content from `text[pos..]` into `out`, continuing in state
/// `esc`. Returns `Some(next)` (the position after the closing quote) when
/// the string ended, `None` when the fragment ended first (`esc` then says
/// where). `base` is the offset of `text` in the whole input, for errors.
pub(super) fn scan(
    text: &str,
    mut pos: usize,
    esc: &mut Escape,
    out: &mut String,
    base: usize,
) -> Result<Option<usize>, SyntaxError> {
    let bytes = text.as_bytes();
    loop {
        match *esc {
            Escape::None => {
                let run = plain_run(bytes.get(pos..).unwrap_or_default());
                if run > 0 {
                    // The run ends at an ASCII byte or at the end of `text`:
                    // both are char boundaries.
                    out.push_str(text.get(pos..pos + run).unwrap_or_default());
                    #[cfg(test)]
                    super::tests::count(run);
                    pos += run;
                }
                match bytes.get(pos) {
                    None => return Ok(None),
                    Some(b'"') => return Ok(Some(pos + 1)),
                    Some(b'\\') => {
                        *esc = Escape::Backslash;
                        pos += 1;
                    }
                    Some(&b) => {
                        return Err(SyntaxError::new(
                            SyntaxErrorKind::ControlCharacter,
                            base + pos,
                            format!("unescaped control character U+{b:04X} in a string"),
                        ))
                    }
                }
            }
            Escape::Backslash => {
                let Some(&b) = bytes.get(pos) else {
                    return Ok(None);
                };
                let c = match (b, short_escape(b)) {
                    (_, Some(c)) => c,
                    (b'u', None) => {
                        *esc = Escape::Hex { high: None, count: 0, acc: 0 };
                        pos += 1;
                        continue;
                    }
                    _ => {
                        let message = format!(
                            "invalid escape: expected one of \"\\/bfnrtu after '\\', found {}",
                            found(text, pos)
                        );
                        return Err(SyntaxError::new(SyntaxErrorKind::InvalidEscape, base + pos, message));
                    }
                };
                out.push(c);
                *esc = Escape::None;
                pos += 1;
            }
            Escape::Hex { high, count, acc } => {
                let Some(&b) = bytes.get(pos) else {
                    return Ok(None);
                };
                let Some(digit) = hex_digit(b) else {
                    let message =
                        format!("invalid \\u escape: expected a hex digit, found {}", found(text, pos));
                    return Err(SyntaxError::new(SyntaxErrorKind::InvalidEscape, base + pos, message));
                };
                let acc = (acc << 4) | digit;
                if count < 3 {
                    *esc = Escape::Hex { high, count: count + 1, acc };
                    pos += 1;
                    continue;
                }
                let unit = match (high, acc) {
                    (None, 0xD800..=0xDBFF) => {
                        *esc = Escape::AfterHigh(acc);
                        pos += 1;
                        continue;
                    }
                    (None, 0xDC00..=0xDFFF) => {
                        return Err(lone_surrogate(base + pos, format!("lone low surrogate \\u{acc:04X}")));
                    }
                    (None, unit) => u32::from(unit),
                    (Some(high), 0xDC00..=0xDFFF) => {
                        0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(acc) - 0xDC00)
                    }
                    (Some(high), _) => {
                        let message = format!(
                            "high surrogate \\u{high:04X} followed by \\u{acc:04X}, not by a low surrogate"
                        );
                        return Err(lone_surrogate(base + pos, message));
                    }
                };
                let Some(c) = char::from_u32(unit) else {
                    return Err(lone_surrogate(base + pos, format!("invalid code point U+{unit:04X}")));
                };
                out.push(c);
                *esc = Escape::None;
                pos += 1;
            }
            Escape::AfterHigh(high) => match bytes.get(pos) {
                None => return Ok(None),
                Some(b'\\') => {
                    *esc = Escape::AfterHighBackslash(high);
                    pos += 1;
                }
                Some(_) => return Err(unpaired_high(high, text, pos, base)),
            },
            Escape::AfterHighBackslash(high) => match bytes.get(pos) {
                None => return Ok(None),
                Some(b'u') => {
                    *esc = Escape::Hex { high: Some(high), count: 0, acc: 0 };
                    pos += 1;
                }
                Some(_) => return Err(unpaired_high(high, text, pos, base)),
            },
        }
    }
}

fn lone_surrogate(offset: usize, message: String) -> SyntaxError {
    SyntaxError::new(SyntaxErrorKind::InvalidUnicode, offset, message)
}

fn unpaired_high(high: u16, text: &str, pos: usize, base: usize) -> SyntaxError {
    let message = format!(
        "high surrogate \\u{high:04X} must be followed by a \\u low surrogate escape, found {}",
        found(text, pos)
    );
    lone_surrogate(base + pos, message)
}

/// The character of a one-letter JSON escape (`\n` and the like: `b` is the
/// byte after the backslash); `\u` and invalid escapes are `None`.
#[inline]
pub(crate) fn short_escape(b: u8) -> Option<char> {
    Some(match b {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_run_stops_at_specials_in_any_block() {
        for len in 0..70 {
            for special in [b'"', b'\\', b'\n', 0u8, 0x1f] {
                let mut bytes = vec![b'a'; len];
                assert_eq!(plain_run(&bytes), len);
                for at in 0..len {
                    bytes[at] = special;
                    assert_eq!(plain_run(&bytes), at, "len {len} at {at}");
                    bytes[at] = b'a';
                }
            }
        }
        assert_eq!(plain_run("é😀 \u{7f}x".as_bytes()), "é😀 \u{7f}x".len());
    }
}
