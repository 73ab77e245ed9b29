//! The environment expressions compile and evaluate in: the CEL standard
//! library, Kubernetes' libraries, the crate's own functions, and host
//! extensions with their per-request variables.
use super::limits::Limits;
use super::{authz, fold, image, strings, BUILTIN_VARIABLES};
use kube_cel::cel::extractors::{Arguments, This};
use kube_cel::cel::{self as celrs, Context, ExecutionError, Value};
use kube_cel::KubeCelExt;
use std::collections::BTreeSet;
use std::sync::Arc;

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

    /// The types of its variables, for type checking (see
    /// [`super::schema`]); one not given is `dyn`.
    fn variable_types(&self) -> Vec<(&'static str, super::schema::Schema)> {
        Vec::new()
    }

    /// The result types of the namespaced functions it registers, by their
    /// qualified names (`azure.sku`), for type checking; one not given is
    /// `dyn`.
    fn function_types(&self) -> Vec<(&'static str, super::schema::Schema)> {
        Vec::new()
    }

    /// Functions it registers that a program calls on its own values
    /// rather than through the interpreter (see
    /// [`Native`](super::program::Native)), by qualified name; each
    /// answers, errs and charges as its registered form does.
    fn natives(&self) -> Vec<(&'static str, super::program::Native)> {
        Vec::new()
    }

    /// Lists its host values share, converted once
    /// ([`to_tree`](super::to_tree)).
    fn shared_lists(&self) -> Option<&super::SharedLists> {
        None
    }

    /// The extension's variables for one evaluated object: the request's
    /// object, or the pod built from a controller's template.
    fn variables(&self, _object: Option<&serde_json::Value>) -> Vec<(String, Value)> {
        Vec::new()
    }

    /// Whether every function this extension registers gives the same
    /// result for the same arguments, so that an expression written alike
    /// in several policies may be evaluated once per request and its value
    /// shared (the plan's memo), and a call of one on `params` alone worked
    /// out once per params object (see [`fold`](super::fold)). `false`
    /// unless the extension says so.
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

    /// The lists the extensions' host values share, converted once (the
    /// first extension's that has some; none else).
    pub fn shared_lists(&self) -> &super::SharedLists {
        match self.list.iter().find_map(|e| e.shared_lists()) {
            Some(lists) => lists,
            None => super::SharedLists::none(),
        }
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

    /// Whether the environment has a function `name`.
    pub(super) fn has_function(&self, name: &str) -> bool {
        self.root.has_function(name)
    }

    /// The compiled form of `tree` (an expression compiled in this
    /// environment) for evaluation in its scopes, when one gives the
    /// interpreter's answers ([`super::Program::build`]).
    pub fn program(&self, tree: &kube_cel::cel::parser::Expression) -> Option<super::Program> {
        let known = self.known_variables();
        let natives: Vec<_> = (self.extensions.list.iter())
            .flat_map(|e| e.natives())
            .collect();
        super::Program::build(
            tree,
            &|name| known.contains(name),
            &|name| self.has_function(name),
            &|name| (natives.iter().find(|(n, _)| *n == name)).map(|(_, f)| f.clone()),
        )
    }

    /// Names an expression may refer to at top level.
    pub fn known_variables(&self) -> BTreeSet<&'static str> {
        BUILTIN_VARIABLES
            .iter()
            .copied()
            .chain(self.extensions.variable_names())
            .collect()
    }

    /// The types of the host extensions' variables ([`Extension::variable_types`]).
    pub fn variable_types(&self) -> Vec<(&'static str, super::schema::Schema)> {
        self.extensions
            .list
            .iter()
            .flat_map(|e| e.variable_types())
            .collect()
    }

    /// The result types of the host extensions' namespaced functions
    /// ([`Extension::function_types`]).
    pub fn function_types(&self) -> Vec<(&'static str, super::schema::Schema)> {
        self.extensions
            .list
            .iter()
            .flat_map(|e| e.function_types())
            .collect()
    }

    /// The environment with other compile limits (tests lift them).
    #[cfg(test)]
    pub(super) fn with_limits(mut self, limits: Limits) -> Env {
        self.limits = limits;
        self
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

    /// Gives `ctx` the host `variables` (read by the interpreter through
    /// `ctx`'s resolver, converted on its first read; programs read the
    /// trees in place), then binds the host-extension variables of one
    /// evaluated `object` that `wanted` names and `variables` lacks.
    pub fn bind_host_variables<'v>(
        &self,
        ctx: &mut Context<'v>,
        object: Option<&serde_json::Value>,
        variables: &'v super::Hosts,
        wanted: impl Fn(&str) -> bool,
    ) {
        ctx.set_variable_resolver(variables);
        let missing = |name: &str| wanted(name) && !variables.has(name);
        for ext in &self.extensions.list {
            if ext.variable_names().iter().any(|n| missing(n)) {
                for (name, value) in ext.variables(object) {
                    if missing(&name) {
                        ctx.add_variable_from_value(name, value);
                    }
                }
            }
        }
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
