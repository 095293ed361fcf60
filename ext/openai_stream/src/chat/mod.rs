//! Chat completions: the chunk model (`model.rs`) and its byte scanner
//! (`scan/`), the slotting rules (`calls.rs`), in-band errors
//! (`in_band.rs`), the legacy processor's reading (`legacy.rs`), what the
//! next request carries back (`round_trip.rs`) and the processor
//! (`processor.rs`) over the shared driver.

mod calls;
mod in_band;
pub mod legacy;
mod model;
mod processor;
pub mod round_trip;
pub mod scan;

pub use calls::Applied;
pub use model::{Choice, Chunk, Content, ContentPart, Delta, Function, ToolCallDelta, XGroq};
pub use processor::{Chat, ChatProcessor, Options};
