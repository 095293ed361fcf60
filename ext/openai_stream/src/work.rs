//! A work counter for tests (compiled only for them): bytes handed to the
//! incremental JSON parser, bytes its string scanner copies, and bytes
//! stored as view events. It guards "linear in the argument bytes" without
//! timing anything (timings are noisy on shared machines; `bin/bench`'s
//! scaling pairs measure the time).

thread_local! {
    static BYTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts `bytes` of parser work on this thread.
pub(crate) fn count(bytes: usize) {
    BYTES.with(|b| b.set(b.get().saturating_add(bytes as u64)));
}

/// The work counted on this thread since the last call.
pub(crate) fn take() -> u64 {
    BYTES.with(|b| b.replace(0))
}

#[cfg(test)]
mod tests {
    use super::take;
    use crate::chat::{ChatProcessor, Options};
    use crate::json::JsonValue;
    use crate::output::Item;

    /// Arguments of about `size` bytes: one long string with escapes and
    /// multibyte characters, and an array of small objects.
    fn arguments(size: usize) -> String {
        let mut content = String::new();
        let mut items = Vec::new();
        let mut n = 0;
        while content.len() + items.len() * 36 < size {
            content.push_str("Line with \"quotes\", a tab\t, héllo 😀 and a path C:\\dir\n");
            items.push(serde_json::json!({"id": n, "name": format!("item {n}"), "ok": n % 2 == 0}));
            n += 1;
        }
        serde_json::to_string(&serde_json::json!({"content": content, "items": items})).unwrap_or_default()
    }

    /// One SSE event per argument fragment of about `size` bytes.
    fn sse(arguments: &str, size: usize) -> String {
        let event = |delta: serde_json::Value| {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]});
            format!("data: {chunk}\n\n")
        };
        let mut out =
            event(serde_json::json!({"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}));
        let mut start = 0;
        while start < arguments.len() {
            let mut end = (start + size).min(arguments.len());
            while !arguments.is_char_boundary(end) {
                end += 1;
            }
            out.push_str(&event(
                serde_json::json!({"index": 0, "function": {"arguments": &arguments[start..end]}}),
            ));
            start = end;
        }
        out.push_str("data: [DONE]\n\n");
        out
    }

    /// The work to stream `arguments` in 5-byte fragments with partial tool
    /// calls, checking that the call comes out with the right parameters.
    fn work_for(arguments: &str) -> u64 {
        let bytes = sse(arguments, 5);
        let mut processor = ChatProcessor::new(Options { partial_tool_calls: true, ..Options::default() });
        take();
        // Reads of 4 KiB, as from an HTTP body.
        for read in bytes.as_bytes().chunks(4096) {
            assert!(processor.decode(read).is_ok());
        }
        let out = processor.finish();
        let work = take();
        let expected: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
        let completed: Vec<JsonValue> = out
            .map(|o| {
                o.items()
                    .filter_map(|i| match i {
                        Item::Completed(_, params) => Some(params.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(completed.len(), 1);
        let got = completed.first().map(JsonValue::to_json).unwrap_or_default();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&got).ok(), Some(expected));
        work
    }

    #[test]
    fn partial_parsing_work_is_linear_in_the_argument_bytes() {
        let small = arguments(40_000);
        let big = arguments(400_000);
        let (small_work, big_work) = (work_for(&small), work_for(&big));
        let ratio = big_work as f64 / small_work as f64;
        let size_ratio = big.len() as f64 / small.len() as f64;
        // Linear: ten times the bytes, about ten times the work. Re-reading
        // the prefix on each fragment would make it about a hundred.
        assert!(
            ratio <= size_ratio * 1.2,
            "{} bytes: work {big_work}; {} bytes: work {small_work}; {ratio:.1}x the work for {size_ratio:.1}x the bytes",
            big.len(),
            small.len(),
        );
        // And a few passes over the arguments at most, whatever their size.
        assert!(big_work <= 4 * big.len() as u64, "work {big_work} for {} argument bytes", big.len());
    }
}
