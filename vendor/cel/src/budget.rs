//! Per-evaluation cost budget (gpu-admission patch).
//!
//! Upstream cel has no runtime limit. Kubernetes bounds every CEL evaluation
//! with a cost budget; this module gives the interpreter the same guard. The
//! budget lives in a thread-local so that `Program::execute` needs no new
//! argument: `with_budget` installs it around one evaluation, and the
//! interpreter charges it as it walks the expression. Without an installed
//! budget nothing is charged.
use crate::objects::Value;
use crate::ExecutionError;
use std::cell::Cell;

thread_local! {
    static REMAINING: Cell<Option<u64>> = const { Cell::new(None) };
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Deepest nesting of evaluation frames before an evaluation is stopped.
/// Keeps deep expressions or deep data from overflowing the thread stack.
pub const MAX_EVAL_DEPTH: u32 = 250;

/// Runs `f` with `limit` cost units available. Returns the result of `f` and
/// the cost it used. Nested calls share the outer budget's remainder.
pub fn with_budget<R>(limit: u64, f: impl FnOnce() -> R) -> (R, u64) {
    let outer = REMAINING.with(|r| r.get());
    let start = match outer {
        Some(rem) => rem.min(limit),
        None => limit,
    };
    REMAINING.with(|r| r.set(Some(start)));
    let result = f();
    let left = REMAINING.with(|r| r.get()).unwrap_or(0);
    let used = start - left.min(start);
    REMAINING.with(|r| {
        r.set(outer.map(|o| o.saturating_sub(used)));
    });
    (result, used)
}

/// Charges `units` to the installed budget, if any.
#[inline]
pub fn charge(units: u64) -> Result<(), ExecutionError> {
    REMAINING.with(|r| match r.get() {
        None => Ok(()),
        Some(rem) if rem >= units => {
            r.set(Some(rem - units));
            Ok(())
        }
        Some(_) => {
            r.set(Some(0));
            Err(ExecutionError::CostLimitExceeded)
        }
    })
}

/// Charges for a value that an operation has to walk: strings at one unit
/// per ten bytes (as Kubernetes does), lists and maps at one per element.
#[inline]
pub fn charge_value(value: &Value) -> Result<(), ExecutionError> {
    let units = match value {
        Value::String(s) => 1 + s.len() as u64 / 10,
        Value::Bytes(b) => 1 + b.len() as u64 / 10,
        Value::List(l) => 1 + l.len() as u64,
        Value::Map(m) => 1 + m.map.len() as u64,
        _ => return Ok(()),
    };
    charge(units)
}

/// Guard for one level of evaluation depth.
pub(crate) struct DepthGuard;

impl DepthGuard {
    #[inline]
    pub(crate) fn enter() -> Result<Self, ExecutionError> {
        DEPTH.with(|d| {
            let next = d.get() + 1;
            if next > MAX_EVAL_DEPTH {
                Err(ExecutionError::DepthLimitExceeded)
            } else {
                d.set(next);
                Ok(DepthGuard)
            }
        })
    }
}

impl Drop for DepthGuard {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}
