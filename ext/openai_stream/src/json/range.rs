//! Numbers beyond f64's range (`1e400`, a 400-digit integer): serde_json
//! refuses the whole text ("number out of range"), while Ruby's `JSON.parse`
//! reads them as `Infinity` and goes on. So that one such field does not
//! cost a whole event (and the tool call in it), each is rewritten as
//! `±f64::MAX`, which the lenient readers take for `±Infinity`
//! ([`crate::json::widened_to_infinity`]): the raw path then reads what the
//! Hash path reads from Ruby's parse of the same bytes.

/// The largest finite f64, as JSON text.
const MARK: &str = "1.7976931348623157e308";

/// Most numbers rewritten in one text.
const MAX_REWRITES: usize = 64;

/// `text` with every out-of-range number rewritten, when `error` (from
/// parsing `text`) says a number is out of range; `None` otherwise or when
/// the rewritten text still fails for that reason too often.
pub fn widen_out_of_range<T>(text: &str, error: &serde_json::Error) -> Option<String>
where
    T: for<'de> serde::Deserialize<'de>,
{
    let mut current = rewrite(text, error)?;
    for _ in 0..MAX_REWRITES {
        match serde_json::from_str::<T>(&current) {
            Err(e) if is_out_of_range(&e) => current = rewrite(&current, &e)?,
            _ => return Some(current),
        }
    }
    None
}

fn is_out_of_range(error: &serde_json::Error) -> bool {
    error.is_syntax() && error.to_string().starts_with("number out of range")
}

/// Rewrites the number `error` points at.
fn rewrite(text: &str, error: &serde_json::Error) -> Option<String> {
    if !is_out_of_range(error) {
        return None;
    }
    // serde_json's position: 1-based line, column = bytes read on that line.
    let line_start = if error.line() <= 1 {
        0
    } else {
        text.match_indices('\n').nth(error.line() - 2).map(|(i, _)| i + 1)?
    };
    let at = line_start.checked_add(error.column())?.min(text.len());
    let bytes = text.as_bytes();
    let is_num = |b: u8| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E');
    let mut start = at;
    while start > 0 && bytes.get(start - 1).copied().is_some_and(is_num) {
        start -= 1;
    }
    let mut end = at;
    while bytes.get(end).copied().is_some_and(is_num) {
        end += 1;
    }
    let token = text.get(start..end)?;
    if !token.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let sign = if token.starts_with('-') { "-" } else { "" };
    let mut out = String::with_capacity(text.len() + MARK.len());
    out.push_str(text.get(..start)?);
    out.push_str(sign);
    out.push_str(MARK);
    out.push_str(text.get(end..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::lenient::Skip;

    fn widen(text: &str) -> Option<String> {
        let e = serde_json::from_str::<Skip>(text).err()?;
        widen_out_of_range::<Skip>(text, &e)
    }

    #[test]
    fn out_of_range_numbers_become_the_mark() {
        assert_eq!(widen(r#"{"a":1e400}"#).as_deref(), Some(r#"{"a":1.7976931348623157e308}"#));
        assert_eq!(
            widen("[-1E+400, 2,\n 3e999]").as_deref(),
            Some("[-1.7976931348623157e308, 2,\n 1.7976931348623157e308]")
        );
        let digits = "9".repeat(400);
        assert_eq!(
            widen(&format!("{{\"n\": {digits}}}")).as_deref(),
            Some(r#"{"n": 1.7976931348623157e308}"#)
        );
    }

    #[test]
    fn other_errors_are_left_alone() {
        // Rewritten, and the caller's parse then reports the other error.
        let still_bad = widen(r#"{"a":1e400,]"#).unwrap();
        assert!(serde_json::from_str::<Skip>(&still_bad).is_err());
        assert_eq!(widen(r#"{"a":Infinity}"#), None);
        assert_eq!(widen(r#"{"a":"1e400"x}"#), None);
    }
}
