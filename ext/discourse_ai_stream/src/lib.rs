//! Ruby binding for the `openai_stream` core: conversions between Ruby and the
//! core, Ruby objects for what the core returns, core errors as Ruby
//! exceptions. No decoding logic lives here.

mod convert;
mod errors;
mod guard;
mod hash_reader;
mod holder;
mod items;
mod processor;
mod responses;
mod view;

use magnus::{function, method, prelude::*, Error, Ruby};

use processor::RbProcessor;
use responses::RbResponsesProcessor;

/// The environment variable that enables the panic hooks for tests.
const TEST_HOOKS_ENV: &str = "DISCOURSE_AI_STREAM_TEST_HOOKS";

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    built_for_this_ruby(ruby)?;
    let module = ruby.define_module("DiscourseAiStream")?;
    let native = module.define_module("Native")?;
    native.const_set("CORE_VERSION", env!("CARGO_PKG_VERSION"))?;
    native.const_set("MAX_LINE_BYTES", openai_stream::sse::DEFAULT_MAX_LINE_BYTES)?;

    let class = module.define_class("OpenAiMessageProcessor", ruby.class_object())?;
    class.define_alloc_func::<RbProcessor>();
    class.define_private_method("__setup", method!(RbProcessor::setup, 10))?;
    holder::define_shared!(class, RbProcessor);
    class.define_method("usage_mode", method!(RbProcessor::usage_mode, 0))?;
    class.define_method("legacy_tool_call_ids", method!(RbProcessor::legacy_tool_call_ids, 0))?;
    class.define_method("output_thinking?", method!(RbProcessor::output_thinking, 0))?;
    class.define_method("round_trip?", method!(RbProcessor::round_trip, 0))?;
    let responses = module.define_class("OpenAiResponsesMessageProcessor", ruby.class_object())?;
    responses.define_alloc_func::<RbResponsesProcessor>();
    responses.define_private_method("__setup", method!(RbResponsesProcessor::setup, 6))?;
    holder::define_shared!(responses, RbResponsesProcessor);
    responses.define_method("output_thinking?", method!(RbResponsesProcessor::output_thinking, 0))?;
    // Hooks that panic on purpose, so the specs can prove the guard: only
    // there when the process was started with DISCOURSE_AI_STREAM_TEST_HOOKS=1
    // (read once, when the extension loads), never in production.
    if std::env::var_os(TEST_HOOKS_ENV).is_some_and(|v| v == "1") {
        native.define_singleton_method("panic_for_tests", function!(guard::panic_for_tests, 1))?;
        class.define_private_method("__panic_for_tests", method!(RbProcessor::panic_for_tests, 0))?;
        responses
            .define_private_method("__panic_for_tests", method!(RbResponsesProcessor::panic_for_tests, 0))?;
    }
    Ok(())
}

/// A build that another Ruby minor loads (one left from a source build
/// under another Ruby, a gem packed wrong) would crash the process at its
/// first use: it is refused here, before anything is defined, with a
/// LoadError, which the loader reports as it does a build that does not
/// load. (With the test hooks on, `DISCOURSE_AI_STREAM_TEST_BUILT_FOR=X.Y`
/// stands for the Ruby the build is for, so the specs can prove it.)
fn built_for_this_ruby(ruby: &Ruby) -> Result<(), Error> {
    // SAFETY: a constant array every Ruby exports (ruby/version.h).
    let [major, minor, _] = unsafe { rb_sys::ruby_api_version };
    let running = format!("{major}.{minor}");
    let mut built = format!("{}.{}", rb_sys::RUBY_API_VERSION_MAJOR, rb_sys::RUBY_API_VERSION_MINOR);
    if std::env::var_os(TEST_HOOKS_ENV).is_some_and(|v| v == "1") {
        if let Ok(stand_in) = std::env::var("DISCOURSE_AI_STREAM_TEST_BUILT_FOR") {
            built = stand_in;
        }
    }
    if built == running {
        return Ok(());
    }
    let message = format!("this build is for Ruby {built}, not Ruby {running}: it would crash the process");
    Err(Error::new(ruby.exception_load_error(), message))
}
