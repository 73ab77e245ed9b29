//! CEL environment: Kubernetes libraries, host extensions, cost limits.
//!
//! Every expression is parsed and checked once, at load ([`compile`]); a
//! request converts its object to a CEL value once and evaluates the compiled
//! trees under a cost budget ([`evaluate`]). The Kubernetes CEL libraries
//! (quantity, lists, sets, regex, strings, url, ip/cidr, format, semver) come
//! from `kube-cel`; host extensions ([`Extensions`]) add functions and
//! per-request variables on top.
use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::objects::{Key, Map, TypeValue};
use kube_cel::cel::parser::{Expression, Parser};
use kube_cel::cel::{self as celrs, ExecutionError};
use kube_cel::KubeCelExt;
use std::collections::BTreeSet;
use std::sync::Arc;

pub mod authz;
pub mod fold;
pub mod gpu;
pub mod image;
mod keys;
mod limits;
pub mod portability;
mod reach;
mod signatures;
mod sku_sets;
mod strings;
mod to_val;
pub mod variables;
mod walk;

/// The cel crate types extensions work with.
pub use kube_cel::cel::common::value::Val;
pub use kube_cel::cel::{Context, Value};
pub use limits::{Limits, EXPRESSION_COST_LIMIT, POLICY_COST_LIMIT};
pub use to_val::{to_val, ToValError};

/// The variables Kubernetes gives admission policy expressions.
pub const BUILTIN_VARIABLES: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
    "authorizer",
];

/// A host extension: functions registered into every evaluation context and
/// variables computed once per evaluated object.
///
/// This is the extension point for what Kubernetes does not have, such as a
/// `gpu` variable (what a pod asks for) and `azure.*` functions (the SKU
/// catalog). Functions are registered once per policy set, when it is
/// compiled; [`Extension::variables`] is called once per request and only
/// when some expression of the set refers to one of [`Extension::variable_names`].
///
/// ```
/// use gpu_admission::cel::{json_to_value, Context, Extension, Extensions, Value};
/// use gpu_admission::policy::{parse_documents, PolicySet};
///
/// struct Host;
///
/// impl Extension for Host {
///     fn register_functions(&self, ctx: &mut Context<'static>) {
///         ctx.add_function("azure.isGpuSku", |name: std::sync::Arc<String>| name.starts_with("Standard_N"));
///     }
///     fn variable_names(&self) -> &[&'static str] {
///         &["gpu"]
///     }
///     fn variables(&self, object: Option<&serde_json::Value>) -> Vec<(String, Value)> {
///         let requested = object.is_some_and(|o| o.to_string().contains("nvidia.com/gpu"));
///         vec![("gpu".to_string(), json_to_value(&serde_json::json!({"requested": requested})))]
///     }
/// }
///
/// let docs = parse_documents("p.yaml".as_ref(), r#"
/// apiVersion: admissionregistration.k8s.io/v1
/// kind: ValidatingAdmissionPolicy
/// metadata: {name: p}
/// spec:
///   matchConstraints:
///     resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
///   validations:
///   - expression: "!gpu.requested || azure.isGpuSku('Standard_NC24ads_A100_v4')"
/// "#).unwrap();
/// let set = PolicySet::compile_with(&docs, Extensions::new().with(Host)).unwrap();
/// assert_eq!(set.len(), 1);
/// ```
pub trait Extension: Send + Sync {
    /// Registers functions, e.g. `ctx.add_function("azure.sku", f)`.
    fn register_functions(&self, _ctx: &mut Context<'static>) {}

    /// Names of the variables [`Extension::variables`] provides, so that
    /// expressions using them compile.
    fn variable_names(&self) -> &[&'static str] {
        &[]
    }

    /// The extension's variables for one evaluated object: the request's
    /// object, or the pod built from a controller's template.
    fn variables(&self, _object: Option<&serde_json::Value>) -> Vec<(String, Value)> {
        Vec::new()
    }

    /// Whether every function this extension registers gives the same
    /// result for the same arguments, so that a call of one on `params`
    /// alone may be worked out once per params object (see [`fold`]).
    /// `false` unless the extension says so.
    fn pure(&self) -> bool {
        false
    }
}

/// The host extensions a policy set is compiled with.
#[derive(Clone, Default)]
pub struct Extensions {
    list: Vec<Arc<dyn Extension>>,
}

impl Extensions {
    pub fn new() -> Extensions {
        Extensions::default()
    }

    /// Adds an extension; later ones may override earlier functions.
    pub fn with(mut self, extension: impl Extension + 'static) -> Extensions {
        self.list.push(Arc::new(extension));
        self
    }

    fn variable_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.list
            .iter()
            .flat_map(|e| e.variable_names().iter().copied())
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Extensions({})", self.list.len())
    }
}

/// The shared evaluation environment: a root context holding every function
/// (the CEL standard library, kube-cel, host extensions). Requests evaluate
/// in child scopes of it, so functions are registered once.
pub struct Env {
    root: Context<'static>,
    extensions: Extensions,
    limits: Limits,
    /// The functions of each extension that does not say they are pure,
    /// each set registered on its own (see [`Env::is_pure`]).
    impure: Vec<Context<'static>>,
}

impl Env {
    pub fn new(extensions: Extensions) -> Env {
        let mut root = Context::default().with_all();
        register_functions(&mut root);
        let mut impure = Vec::new();
        for ext in &extensions.list {
            ext.register_functions(&mut root);
            if !ext.pure() {
                let mut own = Context::default();
                ext.register_functions(&mut own);
                impure.push(own);
            }
        }
        Env {
            root,
            extensions,
            limits: Limits::default(),
            impure,
        }
    }

    /// Whether the function `name` gives the same result for the same
    /// arguments: every function but those of extensions that do not say
    /// so ([`Extension::pure`]).
    pub fn is_pure(&self, name: &str) -> bool {
        !self.impure.iter().any(|own| own.has_function(name))
    }

    /// Whether every function of the environment gives the same result
    /// for the same arguments (no extension says otherwise).
    pub fn all_pure(&self) -> bool {
        self.impure.is_empty()
    }

    /// Whether `prefix.name` is a function (a call `prefix.name(...)` on
    /// a namespace, not a method of a variable `prefix`).
    pub fn is_namespaced(&self, prefix: &str, name: &str) -> bool {
        self.root.has_function(&format!("{prefix}.{name}"))
    }

    /// Names an expression may refer to at top level.
    pub fn known_variables(&self) -> BTreeSet<&'static str> {
        BUILTIN_VARIABLES
            .iter()
            .copied()
            .chain(self.extensions.variable_names())
            .collect()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The host extensions the environment was made with.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// A child scope of the root for one evaluated object.
    pub fn scope(&self) -> Context<'_> {
        self.root.new_inner_scope()
    }

    /// Host-extension variables for one evaluated object, limited to those
    /// `wanted` (some expression refers to them, and the caller does not
    /// already have them).
    pub fn extension_variables(
        &self,
        object: Option<&serde_json::Value>,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for ext in &self.extensions.list {
            if ext.variable_names().iter().any(|n| wanted(n)) {
                out.extend(
                    ext.variables(object)
                        .into_iter()
                        .filter(|(name, _)| wanted(name)),
                );
            }
        }
        out
    }
}

/// The crate's own functions beyond kube-cel, documented in
/// docs/policies.md: `dyn(x)`, and `image.repository(ref)`, the repository of a container
/// image reference (registry and path, no tag or digest), so policies can
/// compare images with a list exactly.
fn register_functions(ctx: &mut Context<'static>) {
    // `dyn(x)` only tells cel-go's type checker to stop checking; with no
    // checker it is `x`.
    ctx.add_function(
        "dyn",
        |This(value): This<Value>| -> Result<Value, ExecutionError> { Ok(value) },
    );
    // Kubernetes' regex library, as kube-cel has it, with each pattern
    // compiled once per thread rather than on every call.
    authz::register(ctx);
    ctx.add_function("find", regex_find);
    ctx.add_function("findAll", regex_find_all);
    // Kubernetes' image library (1.33).
    image::register(ctx);
    ctx.add_function("image.repository", |image: Arc<String>| -> String {
        crate::k8s::images::repository(&image)
    });
    fold::register(ctx);
    // Kubernetes' MutatingAdmissionPolicy library: a key as one RFC 6901
    // JSON-pointer token (`~` is `~0`, `/` is `~1`).
    ctx.add_function("jsonpatch.escapeKey", |key: Arc<String>| -> String {
        key.replace('~', "~0").replace('/', "~1")
    });
    // Kubernetes' strings library where kube-cel's differs from cel-go's,
    // and `string()` as the interpreter converts (see `strings`).
    strings::register(ctx);
}

/// `<string>.find(pattern)`: the first match, or `''`.
fn regex_find(
    This(text): This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<Value, ExecutionError> {
    celrs::functions::with_regex(&pattern, |re| {
        re.find(&text)
            .map_or_else(String::new, |m| m.as_str().to_string())
    })
    .map(|found| Value::String(Arc::new(found)))
    .map_err(|e| ExecutionError::function_error("find", format!("invalid regex: {e}")))
}

/// `<string>.findAll(pattern)` and `<string>.findAll(pattern, n)`: every
/// match, or the first `n` (all when `n` is negative).
fn regex_find_all(
    This(text): This<Arc<String>>,
    Arguments(args): Arguments,
) -> Result<Value, ExecutionError> {
    let Some(Value::String(pattern)) = args.first() else {
        return Err(ExecutionError::function_error(
            "findAll",
            "expected string pattern",
        ));
    };
    let limit = match args.get(1) {
        None => usize::MAX,
        Some(Value::Int(n)) => usize::try_from(*n).unwrap_or(usize::MAX),
        Some(_) => {
            return Err(ExecutionError::function_error(
                "findAll",
                "the limit must be an int",
            ))
        }
    };
    celrs::functions::with_regex(pattern, |re| {
        re.find_iter(&text)
            .take(limit)
            .map(|m| Value::String(Arc::new(m.as_str().to_string())))
            .collect::<Vec<_>>()
    })
    .map(|found| Value::List(Arc::new(found)))
    .map_err(|e| ExecutionError::function_error("findAll", format!("invalid regex: {e}")))
}

impl Default for Env {
    fn default() -> Env {
        Env::new(Extensions::default())
    }
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("extensions", &self.extensions)
            .finish()
    }
}

pub use reach::{json_to_val_within, Reach};

/// One expression, parsed and checked at load.
#[derive(Debug)]
pub struct Compiled {
    pub source: String,
    ast: Expression,
    /// Top-level variables the expression refers to.
    pub variables: BTreeSet<String>,
    /// Names of `variables.<name>` the expression refers to.
    pub policy_variables: BTreeSet<String>,
    /// Positions, in the policy's `variables`, of those and of every
    /// variable they use in turn, in order: worked out once by the policy
    /// loader ([`Compiled::set_variable_closure`]).
    pub variable_closure: Vec<usize>,
    /// The variables the expression reads by name, each with its position
    /// in the policy's `variables` and the identifier it is bound to
    /// ([`variables::ident`]); also worked out by the policy loader.
    pub variable_reads: Vec<(usize, String)>,
    /// Whether the expression reads `variables` whole, which then has to
    /// be built as a map (see [`variables`]).
    pub reads_variables_map: bool,
    /// The expression with its parts that read only `params` taken out,
    /// when it has such parts (see [`fold`]).
    pub folded: Option<Arc<fold::Folded>>,
    /// Where a request keeps this expression's value when other policies'
    /// expressions are written the same and read only what all policies of
    /// the request see alike: set by the policy loader.
    pub memo_slot: Option<usize>,
}

impl Compiled {
    /// The expression's tree, as written (with `variables.<name>` reads
    /// rewritten, see [`variables`]).
    pub fn tree(&self) -> &Expression {
        &self.ast
    }

    /// Adds to `reach` what this expression can reach of the variable
    /// `root` (`object`, `oldObject` or `namespaceObject`).
    pub fn add_reach(&self, reach: &mut Reach, root: &str) {
        if self.variables.contains(root) {
            reach.add(&self.ast, root);
        }
    }

    /// Records which of the policy's variables (by name, in order, each
    /// with the names it refers to) this expression needs, directly or
    /// through other variables.
    pub fn set_variable_closure(&mut self, variables: &[(&str, &BTreeSet<String>)]) {
        let mut wanted: Vec<bool> = variables
            .iter()
            .map(|(name, _)| self.policy_variables.contains(*name))
            .collect();
        // Variables only use earlier ones, so one backward pass suffices.
        for i in (0..variables.len()).rev() {
            if wanted[i] {
                for (j, (name, _)) in variables.iter().enumerate().take(i) {
                    if variables[i].1.contains(*name) {
                        wanted[j] = true;
                    }
                }
            }
        }
        self.variable_closure = (0..variables.len()).filter(|i| wanted[*i]).collect();
        self.variable_reads = variables
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| self.policy_variables.contains(*name))
            .map(|(i, (name, _))| (i, variables::ident(name)))
            .collect();
    }
}

/// Why an expression was rejected at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    pub message: String,
    /// 1-based line and column inside the expression, when known.
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "line {l}, column {c}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl CompileError {
    fn plain(message: impl Into<String>) -> CompileError {
        CompileError {
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

/// Parses `source` and checks it is safe to evaluate: bounded size, depth
/// and comprehension nesting, only known variables, and no constructs the
/// interpreter cannot evaluate. Parsing runs on its own thread with a large
/// stack ([`limits::COMPILE_STACK`]): the parser recurses. To compile many
/// expressions, run them all on one such thread with
/// [`on_compile_stack`] and [`compile_here`].
pub fn compile(env: &Env, source: &str) -> Result<Compiled, CompileError> {
    on_compile_stack(|| compile_here(env, source)).unwrap_or_else(|e| Err(CompileError::plain(e)))
}

/// Runs `f` on a thread with [`limits::COMPILE_STACK`] bytes of stack and
/// waits for it; `Err` if the thread could not start or `f` panicked.
pub fn on_compile_stack<R: Send>(f: impl FnOnce() -> R + Send) -> Result<R, String> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(limits::COMPILE_STACK)
            .spawn_scoped(s, f)
            .map_err(|e| format!("cannot start the parser thread: {e}"))?
            .join()
            .map_err(|_| "the expressions could not be parsed".to_string())
    })
}

/// [`compile`] on the calling thread, which must have a stack of
/// [`limits::COMPILE_STACK`] bytes (see [`on_compile_stack`]).
pub fn compile_here(env: &Env, source: &str) -> Result<Compiled, CompileError> {
    compile_with_limits(env, source, env.limits())
}

/// [`compile_here`] for a MutatingAdmissionPolicy mutation: message
/// literals (`JSONPatch{...}`, `Object{...}`) are allowed and evaluate to
/// maps of their fields.
pub fn compile_mutation_here(env: &Env, source: &str) -> Result<Compiled, CompileError> {
    let limits = Limits {
        message_literals: true,
        ..env.limits().clone()
    };
    compile_with_limits(env, source, &limits)
}

fn compile_with_limits(env: &Env, source: &str, limits: &Limits) -> Result<Compiled, CompileError> {
    if source.trim().is_empty() {
        return Err(CompileError::plain("expression is empty"));
    }
    if source.len() > limits.max_source_len {
        return Err(CompileError::plain(format!(
            "expression is {} bytes long; at most {} are allowed",
            source.len(),
            limits.max_source_len
        )));
    }
    limits::check_source(source).map_err(CompileError::plain)?;
    let ast = Parser::new()
        .max_recursion_depth(limits.max_depth as u16)
        .enable_optional_syntax(true)
        .parse(source)
        .map_err(|errors| match errors.errors.first() {
            // The parser's positions are already 1-based, as kube-apiserver
            // reports them; (0, 0) when it has none.
            Some(e) => CompileError {
                message: parse_message(&e.msg),
                line: usize::try_from(e.pos.0).ok().filter(|l| *l > 0),
                column: usize::try_from(e.pos.1).ok().filter(|c| *c > 0),
            },
            None => CompileError::plain("syntax error"),
        })?;
    let mut ast = ast;
    let shape = limits::check(&ast, limits).map_err(CompileError::plain)?;
    signatures::check_calls(&shape.calls, source, &|name| env.root.has_function(name))?;
    let known = env.known_variables();
    // A type's name (`int`, `list`...) denotes the type when no variable
    // has it.
    let mut shape = shape;
    shape
        .free_variables
        .retain(|name| known.contains(name.as_str()) || TypeValue::denoted(name).is_none());
    for name in &shape.free_variables {
        if !known.contains(name.as_str()) {
            return Err(CompileError::plain(format!(
                "undeclared reference to '{name}' (known: {})",
                known.iter().copied().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let mut variables = shape.free_variables;
    variables.extend(
        shape
            .call_targets
            .into_iter()
            .filter(|t| known.contains(t.as_str())),
    );
    let reads_variables_map = variables::inline_references(&mut ast);
    let folded = if variables.contains("params") {
        fold::fold(&ast, &|name| env.is_pure(name), &|prefix, name| {
            env.is_namespaced(prefix, name)
        })
    } else {
        None
    };
    Ok(Compiled {
        source: source.to_string(),
        ast,
        variables,
        policy_variables: shape.policy_variables,
        variable_closure: Vec::new(),
        variable_reads: Vec::new(),
        reads_variables_map,
        folded,
        memo_slot: None,
    })
}

/// The parser's message without its debug wrapping.
fn parse_message(msg: &str) -> String {
    let inner = match (msg.find("msg: \""), msg.rfind('"')) {
        (Some(start), Some(end)) if start + 6 < end => &msg[start + 6..end],
        _ => msg,
    };
    if inner.starts_with("Recursion limit") {
        "expression is nested too deeply for the parser".to_string()
    } else {
        inner.to_string()
    }
}

/// Why an evaluation failed, in words fit for a denial message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// The expression or the policy used up its cost budget.
    CostLimit(String),
    /// Any other runtime error (no such key, no matching overload, ...).
    Runtime(String),
    /// The request's deadline passed and the evaluation was stopped.
    Deadline(String),
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::CostLimit(m) | EvalError::Runtime(m) | EvalError::Deadline(m) => {
                f.write_str(m)
            }
        }
    }
}

/// Evaluates `expr` in `ctx` with at most [`EXPRESSION_COST_LIMIT`] units,
/// drawn from the enclosing budget (the policy's) when one is installed.
pub fn evaluate(expr: &Compiled, ctx: &Context) -> Result<Value, EvalError> {
    evaluate_tree(&expr.ast, ctx)
}

/// [`evaluate`], keeping the result in the interpreter's own form: cheap to
/// hand to later expressions (policy variables) with
/// [`Context::add_variable_as_val`].
pub fn evaluate_val(expr: &Compiled, ctx: &Context) -> Result<Box<dyn Val>, EvalError> {
    evaluate_val_tree(&expr.ast, ctx)
}

/// [`evaluate`] of a tree: an expression's own ([`Compiled::tree`]) or its
/// folded one ([`fold::Folded::ast`], in a scope with its parts bound).
pub fn evaluate_tree(tree: &Expression, ctx: &Context) -> Result<Value, EvalError> {
    let (result, used) =
        celrs::budget::with_budget(EXPRESSION_COST_LIMIT, || Value::resolve(tree, ctx));
    result.map_err(|e| eval_error(e, used))
}

/// [`evaluate_val`] of a tree (see [`evaluate_tree`]).
pub fn evaluate_val_tree(tree: &Expression, ctx: &Context) -> Result<Box<dyn Val>, EvalError> {
    evaluate_val_tree_costed(tree, ctx).0
}

/// [`evaluate_val_tree`], with the cost units the evaluation used.
pub fn evaluate_val_tree_costed(
    tree: &Expression,
    ctx: &Context,
) -> (Result<Box<dyn Val>, EvalError>, u64) {
    let (result, used) = celrs::budget::with_budget(EXPRESSION_COST_LIMIT, || {
        Value::resolve_val(tree, ctx).map(|v| v.into_owned())
    });
    (result.map_err(|e| eval_error(e, used)), used)
}

/// What an evaluation that used `cost` units and answered `value` gives
/// when it is not run again: `cost` charged as the evaluation would have
/// been (to the expression's budget, drawn from the enclosing one), then
/// `value`, or the error running out of budget gives.
pub fn replay(value: &dyn Val, cost: u64) -> Result<Box<dyn Val>, EvalError> {
    let (charged, used) =
        celrs::budget::with_budget(EXPRESSION_COST_LIMIT, || celrs::budget::charge(cost));
    charged.map_err(|e| eval_error(e, used))?;
    Ok(value.clone_as_boxed())
}

/// A value in the interpreter's form as a [`Value`], as [`evaluate`]
/// answers it.
pub fn to_value(value: &dyn Val) -> Result<Value, EvalError> {
    value.try_into().map_err(|e| eval_error(e, 0))
}

fn eval_error(e: ExecutionError, used: u64) -> EvalError {
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
        CelBool, CelDouble, CelInt, CelList, CelMap, CelMapEntries, CelNull, CelString,
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
                .map(|(k, v)| (keys::key(k), json_to_val(v)))
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

#[cfg(test)]
mod tests;
