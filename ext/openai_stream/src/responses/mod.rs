//! The Responses API: the event model (`model.rs`), the fast reading of its
//! delta events (`scan.rs`), the state per output item (`items.rs`), how its
//! calls enter the shared store (`calls.rs`), its errors (`in_band.rs`) and
//! the processor (`processor.rs`) over the shared driver.

mod calls;
mod in_band;
mod items;
mod model;
mod processor;
pub mod scan;

pub use items::Reasoning;
pub use model::{DeltaEvent, ItemKind, OutputItem, Place, Status};
pub use processor::{Options, Responses, ResponsesProcessor};
