//! `openai_stream`: the pure Rust core of `discourse_ai_stream`.
//!
//! Everything that decides what comes out of an OpenAI-compatible stream
//! lives here, with no Ruby in sight; the Ruby binding only converts values.
//! Two protocols sit side by side over shared layers:
//!
//! - [`chat`]: chat completions (the chunk model, its scanner, the slotting
//!   rules, in-band errors, the legacy simulator, [`chat::ChatProcessor`]);
//! - [`responses`]: the Responses API (the event model, the state per output
//!   item, [`responses::ResponsesProcessor`]).
//!
//! The shared layers: SSE framing ([`sse`]) and data payloads, JSON
//! ([`json`]), the byte scanner of the usual events, lenient field types
//! ([`lenient`]), usage ([`usage`]), the per-call store ([`calls`]) and its
//! partial view, argument parsing and repair ([`arguments`]), anomalies,
//! output, errors, and the driver both processors are ([`driver`]).

pub mod anomaly;
pub mod arguments;
pub mod calls;
pub mod chat;
pub mod driver;
pub mod error;
mod event_data;
pub mod json;
pub mod lenient;
pub mod output;
pub mod responses;
mod scan;
pub mod sse;
pub mod usage;
pub mod utf8;
mod view;
