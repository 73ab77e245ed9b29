//! Per-evaluation cost budget and deadline (gpu-admission patch).
//!
//! Upstream cel has no runtime limit. Kubernetes bounds every CEL evaluation
//! with a cost budget; this module gives the interpreter the same guard, and
//! a wall-clock deadline so that an answer nobody waits for any more stops
//! costing CPU. Both live in thread-locals so that `Program::execute` needs
//! no new argument: `with_budget` and `with_deadline` install them around
//! one evaluation, and the interpreter charges as it walks the expression.
//! Without an installed budget nothing is charged. Guards restore the
//! previous state on every exit, unwinding included, so a panic inside an
//! evaluation leaves nothing behind on its thread.
use crate::objects::Value;
use crate::ExecutionError;
use std::cell::Cell;
use std::time::Instant;

/// The state every evaluated node reads, kept together so that a node costs
/// one thread-local access rather than four.
struct State {
    /// Units left in the installed budget; `None` without one.
    remaining: Cell<Option<u64>>,
    depth: Cell<u32>,
    /// Units left before the clock is read again.
    until_clock: Cell<u64>,
    /// The innermost installed budget; `None` outside any.
    scope: Cell<Option<Scope>>,
}

/// One installed budget, as [`with_budget`] began it.
#[derive(Clone, Copy)]
struct Scope {
    /// What the enclosing budget had left when this one began.
    outer: Option<u64>,
    /// Units this one began with.
    start: u64,
    /// Units [`aside`] charged to the enclosing budget since.
    aside: u64,
}

thread_local! {
    static STATE: State = const {
        State {
            remaining: Cell::new(None),
            depth: Cell::new(0),
            until_clock: Cell::new(CLOCK_EVERY),
            scope: Cell::new(None),
        }
    };
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

fn remaining() -> Option<u64> {
    STATE.with(|s| s.remaining.get())
}

fn set_remaining(value: Option<u64>) {
    STATE.with(|s| s.remaining.set(value))
}

/// Deepest nesting of evaluation frames before an evaluation is stopped.
/// Keeps deep expressions or deep data from overflowing the thread stack.
pub const MAX_EVAL_DEPTH: u32 = 250;

/// Cost units charged between two readings of the clock: a few
/// microseconds of work, so a deadline is noticed promptly while the clock
/// costs nothing measurable.
const CLOCK_EVERY: u64 = 1024;

/// Runs `f` with `limit` cost units available. Returns the result of `f` and
/// the cost it used. Nested calls share the outer budget's remainder.
pub fn with_budget<R>(limit: u64, f: impl FnOnce() -> R) -> (R, u64) {
    let outer = remaining();
    let start = match outer {
        Some(rem) => rem.min(limit),
        None => limit,
    };
    set_remaining(Some(start));
    let scope = Scope {
        outer,
        start,
        aside: 0,
    };
    let guard = BudgetGuard {
        enclosing: STATE.with(|s| s.scope.replace(Some(scope))),
    };
    let result = f();
    let used = guard.used();
    drop(guard);
    (result, used)
}

/// Runs `f` beside the innermost budget instead of inside it: what `f`
/// uses is charged to the budget enclosing the innermost one, as if `f`
/// had run just before the innermost began. A host that works a variable
/// out on its first read, in the middle of an expression, charges the
/// variable to the policy's budget as kube-apiserver does, not to the
/// expression that happened to read it first. The innermost budget then
/// has at most what the enclosing one has left.
pub fn aside<R>(f: impl FnOnce() -> R) -> R {
    let Some(scope) = STATE.with(|s| s.scope.get()) else {
        return f();
    };
    let left = remaining().unwrap_or(0);
    let used = scope.start - left.min(scope.start);
    let enclosing = scope.outer.map(|o| o.saturating_sub(used + scope.aside));
    set_remaining(enclosing);
    STATE.with(|s| s.scope.set(None));
    let _back = AsideGuard {
        scope,
        left,
        enclosing,
    };
    f()
}

/// Puts the innermost budget back after [`aside`], on every exit.
struct AsideGuard {
    scope: Scope,
    left: u64,
    enclosing: Option<u64>,
}

impl Drop for AsideGuard {
    fn drop(&mut self) {
        let mut scope = self.scope;
        let mut left = self.left;
        if let (Some(before), Some(after)) = (self.enclosing, remaining()) {
            scope.aside += before.saturating_sub(after);
            // Capped by what the enclosing budget has left; what the cap
            // takes is not counted as used by the innermost.
            let capped = left.min(after);
            scope.start -= left - capped;
            left = capped;
        }
        set_remaining(Some(left));
        STATE.with(|s| s.scope.set(Some(scope)));
    }
}

/// Restores the enclosing budget, less what was used (here and aside),
/// when dropped.
struct BudgetGuard {
    enclosing: Option<Scope>,
}

impl BudgetGuard {
    fn scope(&self) -> Scope {
        STATE
            .with(|s| s.scope.get())
            .expect("a budget guard's scope is installed")
    }

    fn used(&self) -> u64 {
        let scope = self.scope();
        let left = remaining().unwrap_or(0);
        scope.start - left.min(scope.start)
    }
}

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        let used = self.used();
        let scope = self.scope();
        set_remaining(scope.outer.map(|o| o.saturating_sub(used + scope.aside)));
        STATE.with(|s| s.scope.set(self.enclosing));
    }
}

/// Runs `f` with evaluations stopping once `deadline` has passed
/// (`ExecutionError::DeadlineExceeded`). A nested call keeps the earlier of
/// the two deadlines. The clock is read every [`CLOCK_EVERY`] cost units
/// while a budget is installed.
pub fn with_deadline<R>(deadline: Instant, f: impl FnOnce() -> R) -> R {
    let outer = DEADLINE.with(|d| d.get());
    let effective = outer.map_or(deadline, |o| o.min(deadline));
    DEADLINE.with(|d| d.set(Some(effective)));
    let _guard = DeadlineGuard { outer };
    f()
}

/// Whether an installed deadline has passed.
pub fn deadline_passed() -> bool {
    DEADLINE
        .with(|d| d.get())
        .is_some_and(|d| Instant::now() >= d)
}

struct DeadlineGuard {
    outer: Option<Instant>,
}

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        let outer = self.outer;
        DEADLINE.with(|d| d.set(outer));
    }
}

/// Charges `units` to the installed budget, if any.
#[inline]
pub fn charge(units: u64) -> Result<(), ExecutionError> {
    STATE.with(|s| charge_in(s, units))
}

#[inline(always)]
fn charge_in(s: &State, units: u64) -> Result<(), ExecutionError> {
    match s.remaining.get() {
        None => Ok(()),
        Some(rem) if rem >= units => {
            s.remaining.set(Some(rem - units));
            tick(s, units)
        }
        Some(_) => {
            s.remaining.set(Some(0));
            Err(ExecutionError::CostLimitExceeded)
        }
    }
}

/// Reads the clock once every [`CLOCK_EVERY`] units charged.
#[inline(always)]
fn tick(s: &State, units: u64) -> Result<(), ExecutionError> {
    let left = s.until_clock.get();
    if left > units {
        s.until_clock.set(left - units);
        return Ok(());
    }
    s.until_clock.set(CLOCK_EVERY);
    if deadline_passed() {
        Err(ExecutionError::DeadlineExceeded)
    } else {
        Ok(())
    }
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
        Value::Opaque(o) => {
            if let Some(interpreted) = o.downcast_ref::<crate::objects::Interpreted>() {
                return charge_val(interpreted.val());
            }
            return match o.downcast_ref::<crate::objects::Preconverted>() {
                Some(pre) => charge_value(pre.value()),
                None => Ok(()),
            };
        }
        _ => return Ok(()),
    };
    charge(units)
}

/// [`charge_value`] for a value in the interpreter's form: the same units
/// for the same value.
pub fn charge_val(val: &dyn crate::common::value::Val) -> Result<(), ExecutionError> {
    use crate::common::types::{CelBytes, CelList, CelMap, CelString};
    let units = if let Some(s) = val.downcast_ref::<CelString>() {
        1 + s.len() as u64 / 10
    } else if let Some(b) = val.downcast_ref::<CelBytes>() {
        1 + b.len() as u64 / 10
    } else if let Some(l) = val.downcast_ref::<CelList>() {
        1 + l.len() as u64
    } else if let Some(m) = val.downcast_ref::<CelMap>() {
        1 + m.len() as u64
    } else {
        return Ok(());
    };
    charge(units)
}

/// Guard for one level of evaluation depth.
pub struct DepthGuard;

impl DepthGuard {
    #[cfg(test)]
    pub(crate) fn enter() -> Result<Self, ExecutionError> {
        STATE.with(|s| Self::enter_in(s))
    }

    /// One evaluated node: charges its unit and enters a level, with one
    /// thread-local access. Public so that a host evaluating a tree of its
    /// own (a compiled form of an expression) charges each node and bounds
    /// the nesting as the interpreter does.
    #[inline]
    pub fn node() -> Result<Self, ExecutionError> {
        STATE.with(|s| {
            charge_in(s, 1)?;
            Self::enter_in(s)
        })
    }

    /// Whether a node `levels` below the current one may be entered: what
    /// [`DepthGuard::node`] would answer for it, without entering. For a
    /// host that works out a node's value without evaluating the node.
    #[inline]
    pub fn check(levels: u32) -> Result<(), ExecutionError> {
        STATE.with(|s| {
            if s.depth.get() + levels > MAX_EVAL_DEPTH {
                Err(ExecutionError::DepthLimitExceeded)
            } else {
                Ok(())
            }
        })
    }

    #[inline(always)]
    fn enter_in(s: &State) -> Result<Self, ExecutionError> {
        let next = s.depth.get() + 1;
        if next > MAX_EVAL_DEPTH {
            Err(ExecutionError::DepthLimitExceeded)
        } else {
            s.depth.set(next);
            Ok(DepthGuard)
        }
    }
}

impl Drop for DepthGuard {
    #[inline]
    fn drop(&mut self) {
        STATE.with(|s| s.depth.set(s.depth.get().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::time::Duration;

    #[test]
    fn charges_until_the_limit() {
        let (results, used) = with_budget(10, || (charge(4), charge(6), charge(1)));
        assert!(results.0.is_ok() && results.1.is_ok());
        assert!(matches!(results.2, Err(ExecutionError::CostLimitExceeded)));
        assert_eq!(used, 10);
        assert_eq!(remaining(), None, "nothing left installed");
    }

    #[test]
    fn nothing_is_charged_without_a_budget() {
        assert!(charge(u64::MAX).is_ok());
    }

    #[test]
    fn nested_budgets_draw_from_the_outer_one() {
        let (inner_used, outer_used) = with_budget(100, || {
            let ((), used) = with_budget(1_000, || {
                assert_eq!(remaining(), Some(100), "inner limited by outer");
                charge(30).unwrap();
            });
            assert_eq!(remaining(), Some(70));
            used
        });
        assert_eq!(inner_used, 30);
        assert_eq!(outer_used, 30);
    }

    #[test]
    fn aside_charges_the_enclosing_budget_not_the_innermost() {
        let ((inner, used), policy_used) = with_budget(100, || {
            let ((), used) = with_budget(50, || {
                charge(10).unwrap();
                let ((), aside_used) = aside(|| with_budget(50, || charge(30).unwrap()));
                assert_eq!(aside_used, 30);
                charge(5).unwrap();
            });
            (remaining(), used)
        });
        // The expression used 15 of its own; the policy 15 + 30.
        assert_eq!((used, policy_used), (15, 45));
        assert_eq!(inner, Some(55));
        assert!(STATE.with(|s| s.scope.get()).is_none());
        assert_eq!(remaining(), None);
    }

    #[test]
    fn aside_leaves_the_innermost_what_the_enclosing_has_left() {
        let (failed, policy_used) = with_budget(40, || {
            let (result, used) = with_budget(50, || {
                charge(5).unwrap();
                aside(|| with_budget(50, || charge(30).unwrap()));
                // 40 - 5 - 30 = 5 left for the expression.
                (charge(5), charge(1))
            });
            assert_eq!(used, 10);
            result
        });
        assert!(failed.0.is_ok());
        assert!(matches!(failed.1, Err(ExecutionError::CostLimitExceeded)));
        assert_eq!(policy_used, 40);
    }

    #[test]
    fn aside_outside_any_budget_just_runs() {
        assert_eq!(aside(|| with_budget(10, || charge(3).unwrap()).1), 3);
        assert_eq!(remaining(), None);
    }

    #[test]
    fn a_panic_inside_leaves_no_budget_behind() {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            with_budget(5, || {
                charge(3).unwrap();
                panic!("evaluation bug");
            })
        }));
        assert!(caught.is_err());
        assert_eq!(remaining(), None);
        let (result, used) = with_budget(1_000, || charge(900));
        assert!(result.is_ok(), "the next evaluation gets its whole budget");
        assert_eq!(used, 900);
    }

    #[test]
    fn a_panic_inside_leaves_no_deadline_or_depth_behind() {
        let past = Instant::now() - Duration::from_secs(1);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            with_deadline(past, || {
                let _depth = DepthGuard::enter().unwrap();
                panic!("evaluation bug");
            })
        }));
        assert!(caught.is_err());
        assert!(!deadline_passed());
        assert_eq!(STATE.with(|s| s.depth.get()), 0);
    }

    #[test]
    fn a_passed_deadline_stops_charging_within_a_clock_period() {
        let past = Instant::now() - Duration::from_millis(1);
        let stopped = with_deadline(past, || {
            with_budget(u64::MAX, || (0..=CLOCK_EVERY).find_map(|_| charge(1).err())).0
        });
        assert!(matches!(stopped, Some(ExecutionError::DeadlineExceeded)));
        let future = Instant::now() + Duration::from_secs(3600);
        let ran = with_deadline(future, || {
            with_budget(u64::MAX, || {
                (0..10 * CLOCK_EVERY).all(|_| charge(1).is_ok())
            })
            .0
        });
        assert!(ran, "a deadline not yet reached stops nothing");
    }

    #[test]
    fn nested_deadlines_keep_the_earlier_one() {
        let soon = Instant::now() - Duration::from_millis(1);
        let later = Instant::now() + Duration::from_secs(3600);
        with_deadline(soon, || {
            with_deadline(later, || assert!(deadline_passed()));
            assert!(deadline_passed());
        });
        assert!(!deadline_passed());
    }

    #[test]
    fn depth_is_bounded() {
        let guards: Vec<_> = (0..MAX_EVAL_DEPTH)
            .map(|_| DepthGuard::enter().unwrap())
            .collect();
        assert!(matches!(
            DepthGuard::enter(),
            Err(ExecutionError::DepthLimitExceeded)
        ));
        drop(guards);
        assert!(DepthGuard::enter().is_ok());
    }
}
