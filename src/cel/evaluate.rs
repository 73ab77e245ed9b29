//! Evaluating a compiled expression under the cost budget and deadline,
//! the errors it gives in words fit for a denial, and JSON values in the
//! interpreter's forms.
use super::limits::{EXPRESSION_COST_LIMIT, POLICY_COST_LIMIT};
#[cfg(doc)]
use super::Compiled;
use kube_cel::cel::common::value::Val;
use kube_cel::cel::objects::{Key, Map};
use kube_cel::cel::parser::Expression;
use kube_cel::cel::{self as celrs, Context, ExecutionError, Value};
use std::sync::Arc;

/// Why an evaluation failed, in words fit for a denial message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The expression or the policy used up its cost budget.
    #[error("{0}")]
    CostLimit(String),
    /// Any other runtime error (no such key, no matching overload, ...).
    #[error("{0}")]
    Runtime(String),
    /// The request's deadline passed and the evaluation was stopped.
    #[error("{0}")]
    Deadline(String),
}

/// Evaluates `expr` in `ctx` with at most [`EXPRESSION_COST_LIMIT`] units,
/// drawn from the enclosing budget (the policy's) when one is installed.
/// The tree is a [`Compiled`] expression's ([`Compiled::tree`]) or one the
/// policy engine's plan made of it ([`super::fold`]).
pub fn evaluate(tree: &Expression, ctx: &Context) -> Result<Value, EvalError> {
    let (result, used) =
        celrs::budget::with_budget(EXPRESSION_COST_LIMIT, || Value::resolve(tree, ctx));
    result.map_err(|e| eval_error(e, used))
}

/// [`evaluate`], keeping the result in the interpreter's own form (cheap
/// to hand to later expressions with [`Context::add_variable_borrowed`]),
/// with the cost units the evaluation used.
pub fn evaluate_val(tree: &Expression, ctx: &Context) -> (Result<Box<dyn Val>, EvalError>, u64) {
    let (result, used) = celrs::budget::with_budget(EXPRESSION_COST_LIMIT, || {
        Value::resolve_val(tree, ctx).map(|v| v.into_owned())
    });
    (result.map_err(|e| eval_error(e, used)), used)
}

/// What an evaluation that used `cost` units costs when its value is
/// kept and it is not run again: `cost` charged as the evaluation would
/// have been, or the error running out of budget gives. The evaluation
/// kept stayed within its expression's limit (`cost` is at most
/// [`EXPRESSION_COST_LIMIT`]), so only the enclosing budget can run out:
/// charged to it straight, as a budget of its own drawn from it would be.
pub fn replay(cost: u64) -> Result<(), EvalError> {
    debug_assert!(cost <= EXPRESSION_COST_LIMIT);
    celrs::budget::charge(cost).map_err(|e| eval_error(e, 0))
}

/// A value in the interpreter's form as a [`Value`], as [`evaluate`]
/// answers it.
pub fn to_value(value: &dyn Val) -> Result<Value, EvalError> {
    value.try_into().map_err(|e| eval_error(e, 0))
}

pub(super) fn eval_error(e: ExecutionError, used: u64) -> EvalError {
    match e {
        ExecutionError::CostLimitExceeded if used >= EXPRESSION_COST_LIMIT => {
            EvalError::CostLimit(format!(
                "cost limit exceeded: the expression used more than {EXPRESSION_COST_LIMIT} cost units and was stopped (an evaluation error, not a violation)"
            ))
        }
        ExecutionError::CostLimitExceeded => EvalError::CostLimit(format!(
            "cost limit exceeded: the policy used more than {POLICY_COST_LIMIT} cost units on this request and was stopped (an evaluation error, not a violation)"
        )),
        ExecutionError::DeadlineExceeded => EvalError::Deadline(
            "deadline exceeded: the request's time ran out and the evaluation was stopped (an evaluation error, not a violation)"
                .to_string(),
        ),
        other => EvalError::Runtime(one_line(&describe_error(&other))),
    }
}

/// Longest error text put in a message.
const MAX_ERROR_LEN: usize = 300;

/// Errors go into one-line denials: whitespace runs (some library errors
/// span lines) become one space, and long texts are cut.
fn one_line(text: &str) -> String {
    let mut out = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.len() > MAX_ERROR_LEN {
        let mut cut = MAX_ERROR_LEN;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// Runs `f` (all the expressions of one binding on one request) within
/// [`POLICY_COST_LIMIT`] units.
pub fn with_policy_budget<R>(f: impl FnOnce() -> R) -> R {
    celrs::budget::with_budget(POLICY_COST_LIMIT, f).0
}

/// Runs `f`, an evaluation begun in the middle of another (a variable
/// worked out on its first read), charged to the policy's budget beside
/// the expression it interrupts, not to that expression's.
pub fn aside<R>(f: impl FnOnce() -> R) -> R {
    celrs::budget::aside(f)
}

/// Runs `f` with every evaluation in it stopping once `deadline` has
/// passed ([`EvalError::Deadline`]); the clock is read every thousand or so
/// cost units, so a stopped evaluation ends within microseconds.
pub fn with_deadline<R>(deadline: std::time::Instant, f: impl FnOnce() -> R) -> R {
    celrs::budget::with_deadline(deadline, f)
}

/// Whether the deadline installed by [`with_deadline`] has passed.
pub fn deadline_passed() -> bool {
    celrs::budget::deadline_passed()
}

/// Converts JSON straight into the interpreter's own form (what a context
/// holds its variables as), with [`json_to_value`]'s rules: one conversion
/// instead of JSON to [`Value`] to the interpreter's form.
pub fn json_to_val(json: &serde_json::Value) -> Box<dyn Val> {
    use kube_cel::cel::common::types::{
        CelBool, CelDouble, CelInt, CelList, CelMap, CelMapEntries, CelMapKey, CelNull, CelString,
    };
    match json {
        serde_json::Value::Null => Box::new(CelNull),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            None => Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN))),
        },
        serde_json::Value::String(s) => Box::new(CelString::from(s.as_str())),
        serde_json::Value::Array(items) => Box::new(CelList::from(
            items.iter().map(json_to_val).collect::<Vec<_>>(),
        )),
        serde_json::Value::Object(map) => Box::new(CelMap::from(
            map.iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), json_to_val(v)))
                .collect::<CelMapEntries>(),
        )),
    }
}

/// Converts JSON to a CEL value the way Kubernetes does: integers are
/// `int` (not `uint`), other numbers `double`.
pub fn json_to_value(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => {
            Value::List(Arc::new(items.iter().map(json_to_value).collect()))
        }
        serde_json::Value::Object(fields) => Value::Map(Map {
            map: Arc::new(
                fields
                    .iter()
                    .map(|(k, v)| (Key::String(Arc::new(k.clone())), json_to_value(v)))
                    .collect(),
            ),
        }),
    }
}

/// The CEL type name of a value, as error messages show it.
pub fn type_name(value: &Value) -> &str {
    match value {
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Function(..) => "function",
        Value::Int(_) => "int",
        Value::UInt(_) => "uint",
        Value::Float(_) => "double",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::Bool(_) => "bool",
        Value::Duration(_) => "duration",
        Value::Timestamp(_) => "timestamp",
        Value::Opaque(o) => o.runtime_type_name(),
        Value::Null => "null",
    }
}

/// A short, user-facing description of a runtime error. Values are named by
/// type only: object contents (which may be Secrets) never reach a message.
pub fn describe_error(err: &ExecutionError) -> String {
    match err {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::UndeclaredReference(r) => format!("undeclared reference to '{r}'"),
        ExecutionError::InvalidArgumentCount { expected, actual } => {
            format!("wrong number of arguments: expected {expected}, got {actual}")
        }
        ExecutionError::UnsupportedTargetType { target } => {
            format!("invalid argument of type {}", type_name(target))
        }
        ExecutionError::NotSupportedAsMethod { method, target } => {
            format!("'{method}' cannot be called on {}", type_name(target))
        }
        ExecutionError::UnsupportedKeyType(v) => {
            format!("{} cannot be used as a map key", type_name(v))
        }
        ExecutionError::UnexpectedType { got, want } => {
            // `want` is the Rust type the function takes: its CEL name.
            let want = match want.as_str() {
                "i64" => "int",
                "u64" => "uint",
                "f64" => "double",
                "Arc<String>" => "string",
                "Arc<Vec<u8>>" => "bytes",
                "Arc<Vec<Value>>" => "list",
                "chrono::Duration" => "duration",
                "chrono::DateTime<chrono::FixedOffset>" => "timestamp",
                other => other,
            };
            format!("unexpected type: got {got}, want {want}")
        }
        ExecutionError::NoSuchOverload => "no matching overload".to_string(),
        ExecutionError::MissingArgumentOrTarget => "missing argument or target".to_string(),
        ExecutionError::ValuesNotComparable(a, b) => format!(
            "no matching overload for comparing {} with {}",
            type_name(a),
            type_name(b)
        ),
        ExecutionError::UnsupportedUnaryOperator(op, v) => {
            format!("no matching overload for '{op}' on {}", type_name(v))
        }
        ExecutionError::UnsupportedBinaryOperator(op, a, b) => format!(
            "no matching overload for '{op}' applied to ({}, {})",
            type_name(a),
            type_name(b)
        ),
        ExecutionError::UnsupportedMapIndex(v) => {
            format!("{} cannot index a map", type_name(v))
        }
        ExecutionError::UnsupportedListIndex(v) => {
            format!("{} cannot index a list", type_name(v))
        }
        ExecutionError::UnsupportedIndex(i, v) => {
            format!("{} cannot index {}", type_name(i), type_name(v))
        }
        ExecutionError::FunctionError { function, message } => format!("{function}: {message}"),
        ExecutionError::UnsupportedFunctionCallIdentifierType(_) => {
            "unsupported function call".to_string()
        }
        ExecutionError::UnsupportedFieldsConstruction(_) => {
            "message construction is not supported".to_string()
        }
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(op, _, _) => format!("integer overflow in '{op}'"),
        ExecutionError::IndexOutOfBounds(i) => match i {
            Value::Int(n) => format!("index out of bounds: {n}"),
            _ => "index out of bounds".to_string(),
        },
        ExecutionError::CostLimitExceeded => "cost limit exceeded".to_string(),
        ExecutionError::DepthLimitExceeded => "expression nesting too deep".to_string(),
        ExecutionError::DeadlineExceeded => "deadline exceeded".to_string(),
        other => other.to_string(),
    }
}
