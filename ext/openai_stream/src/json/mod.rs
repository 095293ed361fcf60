//! JSON values as tool arguments need them: an owned tree that keeps object
//! keys in order (duplicates included, the way Ruby's `JSON.parse` sees them),
//! and numbers as their source text so nothing is rounded on the way to Ruby.

mod value;

pub use value::{JsonValue, Number};
