//! The core alone on a recorded or generated SSE body, for profiling
//! without Ruby in the picture:
//!
//! ```text
//! ruby bench/runner.rb --dump /tmp/sse      # writes one .sse file per workload
//! cargo run --release --example decode_file -- /tmp/sse/text_2k.sse 0 100
//! valgrind --tool=callgrind target/release/examples/decode_file /tmp/sse/text_2k.sse 0 3
//! ```
//!
//! Arguments: the file, `1` for partial tool calls (else `0`), the number of
//! streams to run. The body is fed in 512-byte reads, as bin/bench does
//! (`READ=N` in the environment: N-byte reads). A
//! file whose name starts with `responses_` (the Responses workloads) is
//! read by the Responses processor, any other by the chat processor.

use std::path::Path;
use std::time::Instant;

use openai_stream::chat::{self, ChatProcessor};
use openai_stream::driver::{Driver, Protocol, State};
use openai_stream::error::Error;
use openai_stream::responses::{self, ResponsesProcessor};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: decode_file FILE [PARTIAL(0|1)] [STREAMS]");
    let partial = args.next().is_some_and(|a| a == "1");
    let streams: usize = args.next().map_or(1, |n| n.parse().expect("STREAMS is a number"));
    let body = std::fs::read(&path).expect("readable file");

    let size = std::env::var("READ").ok().and_then(|s| s.parse().ok()).unwrap_or(512);
    let name = Path::new(&path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let started = Instant::now();
    let mut items = 0usize;
    for _ in 0..streams {
        items += if name.starts_with("responses_") {
            let options = responses::Options { partial_tool_calls: partial, ..responses::Options::default() };
            run(ResponsesProcessor::new(options), &body, size)
        } else {
            run(
                ChatProcessor::new(chat::Options { partial_tool_calls: partial, ..chat::Options::default() }),
                &body,
                size,
            )
        };
    }
    let elapsed = started.elapsed();
    let events =
        body.windows(6).filter(|w| w == b"\ndata:").count() + usize::from(body.starts_with(b"data:"));
    let per_stream = elapsed.as_secs_f64() / streams as f64;
    println!(
        "{path}: {streams} stream(s), {items} items, {:.1} MB/s, {:.3} us/event",
        body.len() as f64 / per_stream / 1e6,
        per_stream * 1e6 / events.max(1) as f64
    );
}

/// One stream through `processor` in `size`-byte reads: the items it returned.
fn run<P>(mut processor: Driver<P>, body: &[u8], size: usize) -> usize
where
    State<P>: Protocol,
{
    let mut items = 0;
    for read in body.chunks(size) {
        items += processor.decode(read).map(|out| out.len()).unwrap_or(0);
    }
    let finished: Result<_, Error> = processor.finish().map(|out| out.len());
    items + finished.unwrap_or(0)
}
