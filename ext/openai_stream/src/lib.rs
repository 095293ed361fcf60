//! `openai_stream`: the pure Rust core of `discourse_ai_stream`.
//!
//! Everything that decides what comes out of an OpenAI-compatible chat
//! completion stream, or of a Responses API stream (`responses`), lives here, with no Ruby in sight: SSE framing, the
//! chunk model, tool-call accumulation, argument parsing (complete and
//! incremental) and usage. The Ruby binding only converts values.

pub mod anomaly;
pub mod arguments;
pub mod calls;
pub mod chunk;
pub mod driver;
pub mod error;
mod event_data;
mod in_band;
pub mod json;
pub mod legacy;
pub mod output;
pub mod processor;
pub mod responses;
pub mod sse;
pub mod usage;
pub mod utf8;
mod work;
