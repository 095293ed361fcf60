//! UTF-8 checks of short texts, the size of most streamed deltas.

/// The bytes as UTF-8 text, when they are.
///
/// Most texts of a stream are a few ASCII words. The standard check tests
/// the bytes after the last whole word one by one, a branch each, and how
/// many there are changes with every text, so those branches are predicted
/// poorly. Up to 32 bytes, this reads a few overlapping words instead and
/// branches only on the size class; up to 256 (the values of a Responses
/// delta event), every word and the last 8 bytes; longer texts, and any
/// text with a byte of 0x80 or more, get the standard check.
#[inline]
pub fn text(bytes: &[u8]) -> Option<&str> {
    if short_ascii(bytes) {
        // SAFETY: bytes below 0x80 are ASCII, which is UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).ok()
}

/// Longest text [`text`] checks word by word.
const MAX_SHORT: usize = 256;

/// True when the bytes are at most [`MAX_SHORT`] and all ASCII (false for
/// longer texts, which the caller checks in full).
#[inline(always)]
fn short_ascii(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let n = bytes.len();
    let high = if n > 32 {
        if n > MAX_SHORT {
            return false;
        }
        let words = bytes.chunks_exact(8).map(|w| w.try_into().map_or(0, u64::from_le_bytes));
        words.fold(word(bytes, n - 8), |bits, w| bits | w)
    } else if n > 16 {
        // The first 16 bytes and the last 16 (overlapping them).
        word(bytes, 0) | word(bytes, 8) | word(bytes, n - 16) | word(bytes, n - 8)
    } else if n >= 8 {
        word(bytes, 0) | word(bytes, n - 8)
    } else if n >= 4 {
        half(bytes, 0) | half(bytes, n - 4)
    } else {
        bytes.iter().fold(0, |bits, &b| bits | u64::from(b))
    };
    high & HIGH == 0
}

/// The 8 bytes at `at` as a word (0 past the end, which callers avoid).
#[inline(always)]
fn word(bytes: &[u8], at: usize) -> u64 {
    bytes.get(at..at + 8).and_then(|w| w.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// The 4 bytes at `at` as a word (0 past the end, which callers avoid).
#[inline(always)]
fn half(bytes: &[u8], at: usize) -> u64 {
    bytes.get(at..at + 4).and_then(|w| w.try_into().ok()).map_or(0, |w| u64::from(u32::from_le_bytes(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_standard_check_for_every_length_and_position() {
        for n in (0..48).chain([255, 256, 257, 300]) {
            let ascii: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert_eq!(text(&ascii), std::str::from_utf8(&ascii).ok(), "{n} ASCII bytes");
            assert_eq!(short_ascii(&ascii), n <= MAX_SHORT, "{n} ASCII bytes");
            for at in 0..n {
                for high in [0x80u8, 0xC3, 0xFF] {
                    let mut bytes = ascii.clone();
                    bytes[at] = high;
                    assert!(!short_ascii(&bytes), "{n} bytes, {high:#x} at {at}");
                    assert_eq!(
                        text(&bytes),
                        std::str::from_utf8(&bytes).ok(),
                        "{n} bytes, {high:#x} at {at}"
                    );
                }
            }
        }
        let cafe = "caf\u{e9} na\u{ef}ve \u{1F600}";
        assert_eq!(text(cafe.as_bytes()), Some(cafe));
    }
}
