//! Ruby binding for the `openai_stream` core. Placeholder until the processor lands.

use magnus::{prelude::*, Error, Ruby};

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    let module = ruby.define_module("DiscourseAiStream")?;
    let _native = module.define_module("Native")?;
    Ok(())
}
