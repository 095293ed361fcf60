//! No panic crosses into Ruby. magnus itself turns a panic into `fatal`,
//! which ends the Ruby process; every entry point goes through [`guard`]
//! instead, which turns it into `DiscourseAiStream::InternalError`.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use magnus::{Error, Ruby};

use crate::errors;

/// Runs `f`, turning a panic into a Ruby exception.
pub fn guard<T>(ruby: &Ruby, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => Err(errors::internal(ruby, &panic_message(&panic))),
    }
}

fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    let text =
        panic.downcast_ref::<&str>().copied().or_else(|| panic.downcast_ref::<String>().map(|s| s.as_str()));
    text.unwrap_or("unknown panic").to_owned()
}

/// `DiscourseAiStream::Native.panic_for_tests(message)`: panics inside the
/// guard, so the specs can prove a panic becomes a Ruby exception. Defined
/// only with DISCOURSE_AI_STREAM_TEST_HOOKS=1 (see lib.rs).
pub fn panic_for_tests(ruby: &Ruby, message: String) -> Result<(), Error> {
    guard(ruby, || -> Result<(), Error> { panic!("{message}") })
}
