//! Raw bytes through `ChatProcessor::decode`, whole and split into reads at
//! fuzzer-chosen points, then `finish`.
//!
//! Input: a flags byte (bit 0: a small `max_line_bytes`; bit 1 / bit 2:
//! partial tool calls for the whole / the split run; bit 3: strict, so
//! unreadable events raise instead of being skipped; bits 4-7: how the
//! reads are cut), a seed byte for the split points, a byte for the small
//! line limit, then the body.
//!
//! Errors are allowed (they are clear errors); after one the run keeps
//! feeding, as a caller that logs and goes on would.
//!
//! Invariants:
//! - no panic;
//! - memory: after every `decode`, failed or not, at most one line (the
//!   limit) plus one event's pending data lines are buffered (every read is
//!   decoded to its end);
//! - every item names a call that exists, no call completes twice, and no
//!   call (its id and index) is reported invalid twice;
//! - whole and split give the same text, completed calls (compared by call:
//!   an output puts a call where it first appeared), usage and anomalies,
//!   and every bad event is reported exactly once: raised (the first of a
//!   read) or recorded (later ones of the read, `unreadable_event` /
//!   `provider_error`), so errors raised plus those anomalies are the same
//!   however the bytes are split;
//! - the Responses processor over the same bytes, whole and split, gives
//!   the same text, completed calls and usage (its usual events are read
//!   at once when a read holds them whole, else line by line);
//! - both runs return the reasoning as thinking and keep what the next
//!   request carries back (rules 77 to 79): the thinking text, the fields,
//!   the merged details and each call's extra content are the same however
//!   the bytes are split.
#![no_main]

mod common;

use std::collections::{HashMap, HashSet};

use common::{cut, longest_piece, ruby_view, Rng};
use libfuzzer_sys::fuzz_target;
use openai_stream::anomaly::{Anomalies, Anomaly, AnomalyKind};
use openai_stream::calls::CallId;
use openai_stream::chat::{ChatProcessor, Options};
use openai_stream::error::Error;
use openai_stream::json::JsonValue;
use openai_stream::output::{Item, Thinking};
use openai_stream::responses::{self, ResponsesProcessor};
use openai_stream::sse::MaxLineBytes;
use openai_stream::usage::UsageReport;

fuzz_target!(|data: &[u8]| run(data));

/// What a caller saw, flattened over all calls (progress left out: how many
/// times a call shows progress depends on the reads).
#[derive(Debug, PartialEq)]
enum Seen {
    Text(String),
    /// CallId, the server's id (None when generated: those are unique per
    /// process), name, parameters.
    Completed(u32, Option<String>, String, JsonValue),
    Thinking(String),
}

#[derive(Debug, PartialEq)]
struct Run {
    seen: Vec<Seen>,
    usage: UsageReport,
    any_error: bool,
    /// Errors raised plus bad events recorded instead of raised. (A call's
    /// invalid arguments are always an invalid_arguments anomaly, raised or
    /// not: they are compared with the anomalies.)
    reports: usize,
    /// The other anomalies.
    anomalies: Vec<AnomalyKind>,
    anomaly_limit: bool,
    /// The thinking text, then the round trip's fields, details and extra
    /// contents, as JSON.
    carried: (String, String),
}

fn run(data: &[u8]) {
    let [flags, seed, limit, body @ ..] = data else { return };
    let max_line = if flags & 1 != 0 { 1 + usize::from(*limit) } else { 1 << 20 };
    let options = |partial: bool| Options {
        partial_tool_calls: partial,
        max_line_bytes: MaxLineBytes(max_line),
        strict: flags & 8 != 0,
        output_thinking: true,
        round_trip: true,
        ..Options::default()
    };

    let reads = split(body, *flags >> 4, *seed);
    let whole = drive(ChatProcessor::new(options(flags & 2 != 0)), &[body]);
    let split = drive(ChatProcessor::new(options(flags & 4 != 0)), &reads);

    assert_eq!(texts(&whole.seen), texts(&split.seen), "text, whole vs {} reads", reads.len());
    assert_eq!(completions(&whole.seen), completions(&split.seen), "calls, whole vs {} reads", reads.len());
    assert_eq!(whole.usage, split.usage, "usage");
    assert_eq!(whole.carried, split.carried, "what the next request carries back");
    assert_eq!(whole.any_error, split.any_error, "errors");
    // The Responses processor over the same bytes: events read at once
    // (`event:`, `data:` and a blank line) or line by line, as the reads
    // fall, give the same texts, calls and usage.
    let responses = |reads: &[&[u8]]| {
        let options = responses::Options { max_line_bytes: MaxLineBytes(max_line), ..Default::default() };
        let mut p = ResponsesProcessor::new(options);
        let (mut text, mut calls) = (String::new(), Vec::new());
        for read in reads.iter().map(Some).chain([None]) {
            let _ = match read {
                Some(read) => p.decode(read).map(|_| ()),
                None => p.finish().map(|_| ()),
            };
            for item in p.output().items() {
                match item {
                    Item::Text(t) => text.push_str(t),
                    Item::Completed(id, params) => calls.push((id.0, params.to_json())),
                    _ => {}
                }
            }
        }
        calls.sort();
        (text, calls, p.usage())
    };
    assert_eq!(responses(&[body]), responses(&reads), "Responses, whole vs {} reads", reads.len());
    // Past the anomaly limit later ones are only counted, and whole and
    // split record different numbers of bad events (raised vs recorded).
    if !whole.anomaly_limit && !split.anomaly_limit {
        assert_eq!(whole.reports, split.reports, "bad events reported (raised or recorded)");
        // Partial mode adds its own anomalies (partial_arguments_broken).
        if flags & 2 == flags & 4 {
            assert_eq!(whole.anomalies, split.anomalies, "anomalies");
        }
    }
}

fn drive(mut p: ChatProcessor, reads: &[&[u8]]) -> Run {
    let max_line = p.options().max_line_bytes.0;
    let mut seen = Vec::new();
    let mut completed = HashSet::new();
    let mut any_error = false;
    let mut raised = 0;
    for read in reads {
        let result = p.decode(read).map(|_| ());
        collect(&p, &mut seen, &mut completed);
        // One line (or an event's data lines, bounded by the same limit)
        // plus up to 3 bytes of a possible BOM at the start.
        let bound = 2 * max_line + 3;
        assert!(p.buffered_bytes() <= bound, "{} bytes buffered (after {result:?})", p.buffered_bytes());
        if let Err(e) = result {
            check_error(&e);
            any_error = true;
            raised += usize::from(!matches!(e, Error::Arguments { .. }));
        }
    }
    let finished = p.finish().map(|_| ());
    collect(&p, &mut seen, &mut completed);
    if let Err(e) = finished {
        check_error(&e);
        any_error = true;
        raised += usize::from(!matches!(e, Error::Arguments { .. }));
    }
    assert_eq!(p.buffered_bytes(), 0, "finish leaves nothing buffered");
    assert!(p.calls().open().next().is_none(), "finish completes every call");
    let all = p.anomalies().all();
    let recorded = |a: &&Anomaly| matches!(a.kind, AnomalyKind::UnreadableEvent | AnomalyKind::ProviderError);
    // Identical anomalies share one entry: count them by their count.
    let reports = raised + all.iter().filter(recorded).map(|a| a.count as usize).sum::<usize>();
    let anomalies = all.iter().filter(|a| !recorded(a)).map(|a| a.kind).collect();
    // A call is named by its id and index together: a server may give two
    // calls one id, even at one index once the first is complete, and a
    // duplicate_id anomaly names each such call after the first. So no id
    // and index is reported invalid more often than the calls it names.
    let named = |kind: AnomalyKind| {
        let mut counts: HashMap<(Option<&str>, Option<i64>), u64> = HashMap::new();
        for a in all.iter().filter(|a| a.kind == kind) {
            *counts.entry((a.call_id.as_deref(), a.index)).or_default() += a.count;
        }
        counts
    };
    let duplicates = named(AnomalyKind::DuplicateId);
    for (call, reports) in named(AnomalyKind::InvalidArguments) {
        let calls = 1 + duplicates.get(&call).copied().unwrap_or(0);
        assert!(
            reports <= calls,
            "call {call:?} reported invalid {reports} times, {calls} call(s): {all:#?}"
        );
    }
    let anomaly_limit = all.len() >= Anomalies::LIMIT;
    let thinking =
        seen.iter().filter_map(|s| if let Seen::Thinking(t) = s { Some(t.as_str()) } else { None });
    let trip = p.round_trip();
    let extras =
        (0..p.calls().len() as u32).map(|n| trip.extra(CallId(n)).map_or("-".to_owned(), JsonValue::to_json));
    let carried = (
        thinking.collect::<String>(),
        format!(
            "{:?} {} {:?}",
            trip.fields(),
            JsonValue::Array(trip.details().to_vec()).to_json(),
            extras.collect::<Vec<_>>()
        ),
    );
    Run { seen, usage: p.usage(), any_error, reports, anomalies, anomaly_limit, carried }
}

fn collect(p: &ChatProcessor, seen: &mut Vec<Seen>, completed: &mut HashSet<u32>) {
    for item in p.output().items() {
        match item {
            Item::Text(t) => {
                assert!(!t.is_empty(), "an empty text item");
                seen.push(Seen::Text(t.to_owned()));
            }
            Item::Progress(id) => {
                assert!(p.calls().get(id).is_some(), "progress names a call that exists");
            }
            Item::Completed(id, params) => {
                let call = p.calls().get(id).expect("completion names a call that exists");
                assert!(call.is_completed());
                assert!(completed.insert(id.0), "call {id:?} completed twice");
                assert!(params.is_object(), "parameters are not an object: {params:?}");
                let server_id = (!call.id_generated).then(|| call.id.clone());
                seen.push(Seen::Completed(id.0, server_id, call.name.clone(), ruby_view(params)));
            }
            Item::Thinking { text, kind: Thinking::Chat } => seen.push(Seen::Thinking(text.to_owned())),
            Item::Thinking { kind, .. } => panic!("the chat processor returned a {kind:?} thinking item"),
        }
    }
}

fn texts(seen: &[Seen]) -> Vec<&str> {
    seen.iter().filter_map(|s| if let Seen::Text(t) = s { Some(t.as_str()) } else { None }).collect()
}

/// Completed calls by CallId. Their place among the text items may differ:
/// a call appears in an output at the place of its first appearance (its
/// first progress), so with partial tool calls a completion moves up to
/// where its progress was when both fall in the same read.
fn completions(seen: &[Seen]) -> Vec<&Seen> {
    let mut calls: Vec<&Seen> = seen.iter().filter(|s| matches!(s, Seen::Completed(..))).collect();
    calls.sort_by_key(|s| if let Seen::Completed(id, ..) = s { *id } else { 0 });
    calls
}

/// Errors are clear: a message that says something.
fn check_error(e: &Error) {
    let message = e.to_string();
    assert!(!message.trim().is_empty(), "an error without a message: {e:?}");
}

/// Reads: bytes cut at seeded points; `mode` picks the sizes (single
/// bytes, short runs, long runs, empty reads among them).
fn split(body: &[u8], mode: u8, seed: u8) -> Vec<&[u8]> {
    let mut rng = Rng::new(u64::from(seed) | u64::from(mode) << 8);
    let longest = longest_piece(mode, 7, 64, body.len());
    let len = || if mode & 4 != 0 && rng.below(8) == 0 { 0 } else { 1 + rng.below(longest) };
    cut(body.len(), len, |_| true).into_iter().map(|piece| &body[piece]).collect()
}
