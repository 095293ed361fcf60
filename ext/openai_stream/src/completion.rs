//! Completing tool calls into the output: one copy for both protocol
//! processors (chat completions and Responses).

use crate::anomaly::Anomalies;
use crate::calls::{CallId, Calls};
use crate::error::Error;
use crate::output::Output;

/// Completes one call: its parameters go to the output, or, when its
/// arguments cannot be read, an `Error::Arguments` with what arrived.
pub(crate) fn complete(
    calls: &mut Calls,
    out: &mut Output,
    anomalies: &mut Anomalies,
    call: CallId,
) -> Result<(), Error> {
    match calls.complete(call, anomalies) {
        Ok(params) => {
            out.push_completed(call, params);
            Ok(())
        }
        Err(e) => {
            let raw = calls.take_raw(call);
            let (id, name) = calls.get(call).map(|c| (c.id.clone(), c.name.clone())).unwrap_or_default();
            Err(Error::Arguments { id, name, raw, message: e.to_string() })
        }
    }
}

/// Completes every open call in order of first appearance. All are
/// completed even when one fails; the first failure is returned.
pub(crate) fn complete_open(
    calls: &mut Calls,
    out: &mut Output,
    anomalies: &mut Anomalies,
) -> Result<(), Error> {
    let open: Vec<CallId> = calls.open().collect();
    let mut first_error = Ok(());
    for call in open {
        if let Err(e) = complete(calls, out, anomalies, call) {
            if first_error.is_ok() {
                first_error = Err(e);
            }
        }
    }
    first_error
}
