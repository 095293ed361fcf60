//! JSON values as tool arguments need them: an owned tree that keeps object
//! keys in order (duplicates included, the way Ruby's `JSON.parse` sees them),
//! and numbers as their source text so nothing is rounded on the way to Ruby.
//! [`IncrementalParser`] reads such a tree from fragments and reports what
//! became visible on the way.

mod beyond_f64;
mod incremental;
mod value;

pub use beyond_f64::{beyond_f64, Reparsed};
pub(crate) use incremental::short_escape;

pub use incremental::{
    parse_complete, ContainerKind, IncrementalParser, SyntaxError, SyntaxErrorKind, ViewEvent, ViewEvents,
    ViewSink, DEFAULT_MAX_DEPTH,
};
pub use value::{JsonValue, Number};
