//! SKU-set functions: `azure.skusIn`, `azure.skusNotIn`, `azure.skusWhere`
//! and `azure.skusBelow` narrow a list of SKU names by the catalog in one
//! native call, where a comprehension would call `azure.sku()` once or
//! twice per element. Documented in docs/cel-extensions.md.
//!
//! Each returns elements of its first argument, in its order, each SKU once
//! (the first spelling of it). Each charges the cost budget one unit per
//! element of the lists it walks, on top of what the interpreter charges
//! for the call and its result (one unit, and one per element returned):
//! the cost of a call grows with its lists, so a list too long for the
//! cost limit stops the evaluation as a comprehension over it would.
//!
//! The functions judge a list through [`Names`], however the evaluation
//! holds it: the interpreter calls them through the context's registry
//! ([`register`]), a program directly on its own values ([`SkuSetFn`]),
//! with the same answers, errors and units.
use super::{type_name, Context, Value};
use crate::gpu::catalog::{Catalog, Sku};
use kube_cel::cel::common::types::{CelList, CelString};
use kube_cel::cel::common::value::Val as Interpreted;
use kube_cel::cel::extractors::Val;
use kube_cel::cel::{budget, ExecutionError, ResolveResult};
use smallvec::SmallVec;
use std::collections::HashSet;
use std::sync::Arc;

/// The four functions, each of which gives a list of SKU names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkuFunction {
    In,
    NotIn,
    Where,
    Below,
}

impl SkuFunction {
    const ALL: [SkuFunction; 4] = [
        SkuFunction::In,
        SkuFunction::NotIn,
        SkuFunction::Where,
        SkuFunction::Below,
    ];

    /// The qualified name policies call it by.
    pub const fn name(self) -> &'static str {
        match self {
            SkuFunction::In => "azure.skusIn",
            SkuFunction::NotIn => "azure.skusNotIn",
            SkuFunction::Where => "azure.skusWhere",
            SkuFunction::Below => "azure.skusBelow",
        }
    }

    /// How many arguments it takes.
    pub const fn arity(self) -> usize {
        match self {
            SkuFunction::Below => 3,
            _ => 2,
        }
    }
}

/// The names of the four functions.
pub(super) const NAMES: [&str; 4] = [
    SkuFunction::In.name(),
    SkuFunction::NotIn.name(),
    SkuFunction::Where.name(),
    SkuFunction::Below.name(),
];

/// Reads a boolean field of a SKU.
type Flag = fn(&Sku) -> bool;

/// Reads a numeric field of a SKU; `None` for a field the catalog leaves
/// empty.
type Numeric = fn(&Sku) -> Option<Number>;

/// The boolean fields `azure.skusWhere` tests, as `azure.sku()` names them.
const FLAGS: &[(&str, Flag)] = &[
    ("aksSupported", |s| s.aks_supported),
    ("fractional", Sku::is_fractional),
    ("mig", |s| s.mig),
    ("premium", |s| s.premium),
    ("retired", |s| s.retired),
];

/// A numeric field of a SKU, or a bound: integer fields stay integers so
/// that an int bound compares exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    /// The bound `value`, or the CEL type name of what it is instead.
    pub fn of(value: &Value) -> Result<Number, String> {
        match value {
            Value::Int(i) => Ok(Number::Int(*i)),
            Value::UInt(u) => Ok(i64::try_from(*u).map_or(Number::Float(*u as f64), Number::Int)),
            Value::Float(f) => Ok(Number::Float(*f)),
            other => Err(type_name(other).to_string()),
        }
    }
}

/// The numeric fields `azure.skusBelow` compares, as `azure.sku()` names
/// them.
const NUMBERS: &[(&str, Numeric)] = &[
    ("gpuDevices", |s| {
        Some(Number::Int(i64::from(s.gpu_devices)))
    }),
    ("gpuMemoryGiB", |s| s.gpu_memory_gib.map(Number::Float)),
    ("gpus", |s| Some(Number::Float(s.gpus))),
    ("memoryGiB", |s| s.memory_gib.map(Number::Float)),
    ("vcpus", |s| Some(Number::Int(i64::from(s.vcpus)))),
];

/// A list argument as the evaluation holds it.
pub trait Names {
    fn count(&self) -> usize;
    /// Element `i`: its string, or the CEL type name of what it is
    /// instead.
    fn name(&self, i: usize) -> Result<&str, String>;
}

impl Names for CelList {
    fn count(&self) -> usize {
        self.len()
    }

    fn name(&self, i: usize) -> Result<&str, String> {
        let value = self.inner()[i].as_ref();
        match value.downcast_ref::<CelString>() {
            Some(s) => Ok(s.inner()),
            None => Err(val_type_name(value)),
        }
    }
}

/// The arguments after the list: the names (`skusIn`, `skusNotIn`) or
/// fields (`skusWhere`), or the field and bound (`skusBelow`). `Err`
/// holds the CEL type name of an argument that is not of its kind.
pub enum Given<'x> {
    List(Result<&'x dyn Names, String>),
    Bound(&'x str, Result<Number, String>),
}

/// Which elements of the list a call keeps.
pub enum Kept {
    /// Every one: the answer is the list itself.
    All,
    /// Those marked, in list order.
    Only(Marks),
}

/// A set of small numbers (catalog positions, list indices), kept inline
/// up to 256 of them: these functions run several times per request and
/// need a few such sets each.
pub struct Marks(SmallVec<[u64; 4]>);

impl Marks {
    fn new(len: usize) -> Marks {
        Marks(smallvec::smallvec![0; len.div_ceil(64)])
    }

    /// Marks `i`; whether it was unmarked.
    fn insert(&mut self, i: usize) -> bool {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }

    pub fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }
}

/// One of the functions over the catalog, for a program to call on its
/// own values ([`SkuSetFn::call`]).
#[derive(Clone)]
pub struct SkuSetFn {
    sets: Arc<SkuSets>,
    pub function: SkuFunction,
}

impl std::fmt::Debug for SkuSetFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.function.name())
    }
}

impl SkuSetFn {
    /// The four functions over `catalog`, by name.
    pub fn all(catalog: &Arc<Catalog>) -> Vec<(&'static str, SkuSetFn)> {
        let sets = Arc::new(SkuSets {
            catalog: catalog.clone(),
        });
        (SkuFunction::ALL.iter())
            .map(|&function| {
                let sets = sets.clone();
                (function.name(), SkuSetFn { sets, function })
            })
            .collect()
    }

    /// Which elements of `skus` the call keeps, given its other
    /// arguments; errors, their order and the units charged as the
    /// interpreter's call has them.
    pub fn call(
        &self,
        skus: Result<&dyn Names, String>,
        given: Given<'_>,
    ) -> Result<Kept, ExecutionError> {
        self.sets.apply(self.function, skus, given)
    }
}

/// Registers the four functions over `catalog`. Their list arguments and
/// results stay in the interpreter's form (`extractors::Val`,
/// `Value::from_val`): no list of ~60 names is converted on the way in or
/// out.
pub(super) fn register(ctx: &mut Context<'static>, functions: &[(&'static str, SkuSetFn)]) {
    for (name, f) in functions {
        let (name, f) = (*name, f.clone());
        match f.function {
            SkuFunction::Below => ctx.add_function(
                name,
                move |skus: Val, field: Arc<String>, bound: Value| -> ResolveResult {
                    let given = Given::Bound(&field, Number::of(&bound));
                    answer(f.call(list(skus.0.as_ref()), given)?, skus.0)
                },
            ),
            _ => ctx.add_function(name, move |skus: Val, other: Val| -> ResolveResult {
                let given = Given::List(list(other.0.as_ref()));
                answer(f.call(list(skus.0.as_ref()), given)?, skus.0)
            }),
        }
    }
}

/// The interpreter's answer: `skus` itself when every element is kept,
/// else a list of those kept.
fn answer(kept: Kept, skus: Box<dyn Interpreted>) -> ResolveResult {
    let Kept::Only(marks) = kept else {
        return Ok(Value::from_val(skus));
    };
    let items = skus
        .downcast_ref::<CelList>()
        .map_or(&[][..], |l| l.inner());
    let out: Vec<Box<dyn Interpreted>> = (items.iter().enumerate())
        .filter(|(i, _)| marks.contains(*i))
        .map(|(_, value)| value.clone_as_boxed())
        .collect();
    Ok(Value::from_val(Box::new(CelList::from(out))))
}

/// The elements of a list in the interpreter's form, or the type name of
/// what the value is instead.
fn list(value: &dyn Interpreted) -> Result<&dyn Names, String> {
    match value.downcast_ref::<CelList>() {
        Some(list) => Ok(list),
        None => Err(val_type_name(value)),
    }
}

/// The catalog with its SKUs numbered by position
/// ([`Catalog::position_of`]).
struct SkuSets {
    catalog: Arc<Catalog>,
}

impl SkuSets {
    fn apply(
        &self,
        function: SkuFunction,
        skus: Result<&dyn Names, String>,
        given: Given<'_>,
    ) -> Result<Kept, ExecutionError> {
        let name = function.name();
        let shape = |what| move |type_name| Refused::Shape(what, type_name);
        let kept = match (function, given) {
            (SkuFunction::In | SkuFunction::NotIn, Given::List(names)) => names
                .map_err(shape("names"))
                .and_then(|names| self.named(name, skus, names, function == SkuFunction::In)),
            (SkuFunction::Where, Given::List(fields)) => fields
                .map_err(shape("fields"))
                .and_then(|fields| self.where_(skus, fields)),
            (SkuFunction::Below, Given::Bound(field, bound)) => self.below(skus, field, bound),
            _ => Err(Refused::Error(ExecutionError::function_error(
                name,
                "unexpected arguments",
            ))),
        };
        kept.map_err(|e| match e {
            Refused::Shape(what, type_name) => ExecutionError::function_error(
                name,
                format!("the {what} is {type_name}, not a list"),
            ),
            Refused::Error(e) => e,
        })
    }

    /// The elements of the list `skus` that `keep` keeps, given each with
    /// the position of the catalog SKU it names (`None` for a name the
    /// catalog does not know), in list order, repeats dropped: a second
    /// spelling of a SKU, a second copy of an unknown string. Charges one
    /// unit per element.
    fn kept(
        &self,
        function: &str,
        skus: Result<&dyn Names, String>,
        mut keep: impl FnMut(Option<usize>) -> bool,
    ) -> Result<Kept, Refused> {
        let list = skus.map_err(|t| Refused::Shape("list", t))?;
        let len = list.count();
        charge(len)?;
        let mut seen = Marks::new(self.catalog.len());
        let mut unknown: HashSet<&str> = HashSet::new();
        let mut kept = Marks::new(len);
        let mut count = 0;
        for i in 0..len {
            let name = string_at(function, "list", i, list.name(i))?;
            // By the catalog's rules (spaces around the name ignored, as a
            // comma-separated list splits).
            let position = self.catalog.position_of(name);
            let first = match position {
                Some(p) => seen.insert(p),
                None => unknown.insert(name),
            };
            if first && keep(position) {
                kept.insert(i);
                count += 1;
            }
        }
        Ok(if count == len {
            Kept::All
        } else {
            Kept::Only(kept)
        })
    }

    fn sku(&self, position: usize) -> &Sku {
        &self.catalog.skus()[position]
    }

    /// `azure.skusIn` (`keep` true) and `azure.skusNotIn` (`keep` false).
    fn named(
        &self,
        function: &str,
        skus: Result<&dyn Names, String>,
        names: &dyn Names,
        keep: bool,
    ) -> Result<Kept, Refused> {
        charge(names.count())?;
        let mut wanted = Marks::new(self.catalog.len());
        let mut every = false;
        for i in 0..names.count() {
            let name = string_at(function, "names", i, names.name(i))?;
            if name.trim() == "*" {
                every = true;
            } else if let Some(p) = self.catalog.position_of(name) {
                wanted.insert(p);
            }
        }
        self.kept(function, skus, |p| {
            p.is_some_and(|p| every || wanted.contains(p)) == keep
        })
    }

    /// `azure.skusWhere`.
    fn where_(
        &self,
        skus: Result<&dyn Names, String>,
        fields: &dyn Names,
    ) -> Result<Kept, Refused> {
        let function = SkuFunction::Where.name();
        charge(fields.count())?;
        let mut tests: SmallVec<[(Flag, bool); 4]> = SmallVec::with_capacity(fields.count());
        for i in 0..fields.count() {
            let field = string_at(function, "fields", i, fields.name(i))?;
            let (name, want) = match field.strip_prefix('!') {
                Some(rest) => (rest, false),
                None => (field, true),
            };
            let test = FLAGS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| *f)
                .ok_or_else(|| unknown_field(function, name, FLAGS.iter().map(|(n, _)| *n)))?;
            tests.push((test, want));
        }
        self.kept(function, skus, |p| {
            p.is_some_and(|p| {
                let sku = self.sku(p);
                tests.iter().any(|(test, want)| test(sku) == *want)
            })
        })
    }

    /// `azure.skusBelow`.
    fn below(
        &self,
        skus: Result<&dyn Names, String>,
        field: &str,
        bound: Result<Number, String>,
    ) -> Result<Kept, Refused> {
        let function = SkuFunction::Below.name();
        let read = NUMBERS
            .iter()
            .find(|(n, _)| *n == field)
            .map(|(_, f)| *f)
            .ok_or_else(|| unknown_field(function, field, NUMBERS.iter().map(|(n, _)| *n)))?;
        let bound = bound.map_err(|type_name| {
            ExecutionError::function_error(
                function,
                format!("the bound is {type_name}, not a number"),
            )
        })?;
        self.kept(function, skus, |p| {
            p.and_then(|p| read(self.sku(p)))
                .is_some_and(|number| is_below(number, bound))
        })
    }
}

/// Why a call gives no list: an argument that is not a list (`what`, and
/// the type name of what it is), or any other error.
enum Refused {
    Shape(&'static str, String),
    Error(ExecutionError),
}

impl From<ExecutionError> for Refused {
    fn from(e: ExecutionError) -> Refused {
        Refused::Error(e)
    }
}

fn is_below(value: Number, bound: Number) -> bool {
    match (value, bound) {
        (Number::Int(v), Number::Int(b)) => v < b,
        (Number::Int(v), Number::Float(b)) => (v as f64) < b,
        (Number::Float(v), Number::Int(b)) => v < b as f64,
        (Number::Float(v), Number::Float(b)) => v < b,
    }
}

fn charge(elements: usize) -> Result<(), ExecutionError> {
    budget::charge(u64::try_from(elements).unwrap_or(u64::MAX))
}

/// Element `i` of list `what`, which must be a string.
fn string_at<'a>(
    function: &str,
    what: &str,
    i: usize,
    name: Result<&'a str, String>,
) -> Result<&'a str, ExecutionError> {
    name.map_err(|type_name| {
        ExecutionError::function_error(
            function,
            format!("element {i} of the {what} is {type_name}, not a string"),
        )
    })
}

/// The CEL type name of a value in the interpreter's form, as
/// [`type_name`] names it.
fn val_type_name(value: &dyn Interpreted) -> String {
    match Value::try_from(value) {
        Ok(value) => type_name(&value).to_string(),
        Err(_) => "a value of an unknown type".to_string(),
    }
}

fn unknown_field<'a>(
    function: &str,
    field: &str,
    known: impl Iterator<Item = &'a str>,
) -> ExecutionError {
    ExecutionError::function_error(
        function,
        format!(
            "unknown field '{field}' (known: {})",
            known.collect::<Vec<_>>().join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::super::gpu::GpuExtension;
    use crate::cel::{
        compile, evaluate, json_to_value, Env, EvalError, Extensions, Roots, Value,
        EXPRESSION_COST_LIMIT,
    };
    use crate::gpu::catalog::Catalog;
    use crate::gpu::GpuResources;
    use kube_cel::cel::budget;
    use serde_json::json;

    fn env() -> Env {
        let ext = GpuExtension::new(Catalog::embedded_arc(), GpuResources::default());
        Env::new(Extensions::new().with(ext))
    }

    /// Evaluates `expr` with `variables` bound to `vars`, after checking
    /// that the program, which calls these functions natively, answers as
    /// the interpreter does ([`compare`]).
    fn run(env: &Env, expr: &str, vars: serde_json::Value) -> Result<Value, EvalError> {
        let object = serde_json::Value::Null;
        // Compared on a thread of their own: outside any budget the caller
        // evaluates in, which the evaluation below is charged to.
        std::thread::scope(|s| {
            let compared = s.spawn(|| compare(env, expr, &vars, &object, EXPRESSION_COST_LIMIT));
            let (_answer, _units) = compared.join().unwrap();
        });
        let (compiled, ctx) = scope(env, expr, &vars, &object);
        evaluate(compiled.tree(), &ctx)
    }

    /// `expr` compiled, and a scope with `variables` bound to `vars` and
    /// `object` to `object`.
    fn scope<'e>(
        env: &'e Env,
        expr: &str,
        vars: &serde_json::Value,
        object: &serde_json::Value,
    ) -> (crate::cel::Compiled, crate::cel::Context<'e>) {
        let compiled = compile(env, expr).unwrap();
        let mut ctx = env.scope();
        // Bound as the policy engine binds them: each by name, and whole.
        for (name, value) in vars.as_object().into_iter().flatten() {
            ctx.add_variable_from_value(crate::cel::variables::ident(name), json_to_value(value));
        }
        ctx.add_variable_from_value("variables", json_to_value(vars));
        ctx.add_variable_from_value("object", json_to_value(object));
        (compiled, ctx)
    }

    /// The answer and units of `expr` under `limit` units: by the
    /// interpreter; by the program reading `object` from the scope; by
    /// the program reading it in place from its JSON. All three the same.
    fn compare(
        env: &Env,
        expr: &str,
        vars: &serde_json::Value,
        object: &serde_json::Value,
        limit: u64,
    ) -> (Result<Value, String>, u64) {
        let (compiled, ctx) = scope(env, expr, vars, object);
        let program = env.program(compiled.tree()).expect("a program");
        let in_place = Roots {
            object: Some(object),
            ..Roots::SCOPE
        };
        let answer = |(result, units): (Result<Value, EvalError>, u64)| {
            (result.map_err(|e| e.to_string()), units)
        };
        let theirs = answer(budget::with_budget(limit, || {
            evaluate(compiled.tree(), &ctx)
        }));
        for roots in [Roots::SCOPE, in_place] {
            let ours = budget::with_budget(limit, || program.evaluate(&ctx, &roots));
            assert_eq!(
                answer(ours),
                theirs,
                "{expr}: the program's answer and units"
            );
        }
        theirs
    }

    fn eval(expr: &str) -> Value {
        run(&env(), expr, json!({})).unwrap()
    }

    fn names(list: &[&str]) -> Value {
        json_to_value(&json!(list))
    }

    /// `expr` answers the list `want`.
    fn kept(expr: &str, want: &[&str]) {
        assert_eq!(eval(expr), names(want), "{expr}");
    }

    fn error(expr: &str) -> String {
        match run(&env(), expr, json!({})) {
            Err(EvalError::Runtime(message)) => message,
            other => panic!("{expr}: want an evaluation error, got {other:?}"),
        }
    }

    const T4: &str = "Standard_NC4as_T4_v3";
    const V100: &str = "Standard_NC6s_v3";
    const A10_SIXTH: &str = "Standard_NV6ads_A10_v5";
    const A10_THIRD: &str = "Standard_NV12ads_A10_v5";
    const A100: &str = "Standard_NC24ads_A100_v4";
    const MI25: &str = "Standard_NV32as_v4";
    const V710: &str = "Standard_NV12ads_V710_v5";
    /// No GPU memory figure in the catalog.
    const A10_V4: &str = "Standard_NC8ads_A10_v4";

    #[test]
    fn skus_in_keeps_named_elements_in_list_order() {
        let expr =
            format!("azure.skusIn(['{V100}', '{T4}', '{A10_SIXTH}'], ['{A10_SIXTH}', '{V100}'])");
        kept(&expr, &[V100, A10_SIXTH]);
        let expr = format!(
            "azure.skusNotIn(['{V100}', '{T4}', '{A10_SIXTH}'], ['{A10_SIXTH}', '{V100}'])"
        );
        kept(&expr, &[T4]);
    }

    #[test]
    fn names_match_by_the_catalog_rules() {
        // Case, the optional Standard_ prefix, aliases; on either side, and
        // the element is returned as the list spells it.
        let expr = format!(
            "azure.skusIn(['{T4}', 'Standard_ND96asr_v4', '{A100}'], ['standard_nc4as_t4_v3', ' ND96asr_A100_v4 '])"
        );
        kept(&expr, &[T4, "Standard_ND96asr_v4"]);
        let expr = format!("azure.skusIn(['nc4as_t4_v3', 'STANDARD_NC6S_V3'], ['{T4}'])");
        kept(&expr, &["nc4as_t4_v3"]);
        let expr = format!("azure.skusNotIn(['nc4as_t4_v3', 'STANDARD_NC6S_V3'], ['{T4}'])");
        kept(&expr, &["STANDARD_NC6S_V3"]);
        // Spaces around a name, as a comma-separated list splits into.
        let expr = format!("azure.skusIn(['{T4}', ' {A100}', '{V100}'], [' {T4}', '{A100}  '])");
        kept(&expr, &[T4, &format!(" {A100}")]);
        let expr = format!("azure.skusNotIn(['{T4}', ' {A100}', '{V100}'], [' {T4}', '{A100}  '])");
        kept(&expr, &[V100]);
    }

    #[test]
    fn star_names_every_catalog_sku_and_nothing_else() {
        let list = format!("['Standard_D4s_v5', '{T4}', 'kaito-gpu', '{MI25}']");
        kept(
            &format!("azure.skusIn({list}, ['{A100}', '*'])"),
            &[T4, MI25],
        );
        kept(&format!("azure.skusIn({list}, [' * '])"), &[T4, MI25]);
        kept(
            &format!("azure.skusNotIn({list}, ['*'])"),
            &["Standard_D4s_v5", "kaito-gpu"],
        );
        // A name the catalog does not know names nothing, not even itself.
        kept(&format!("azure.skusIn({list}, ['Standard_D4s_v5'])"), &[]);
    }

    #[test]
    fn repeats_are_dropped_keeping_the_first_spelling() {
        let expr =
            format!("azure.skusIn(['{T4}', 'standard_nc4as_t4_v3', 'NC4as_T4_v3', '{V100}', '{T4}'], ['*'])");
        kept(&expr, &[T4, V100]);
        kept(
            "azure.skusNotIn(['x', 'Standard_D4s_v5', 'x', 'X'], [])",
            &["x", "Standard_D4s_v5", "X"],
        );
        let expr = format!("azure.skusWhere(['{V100}', 'nc6s_v3'], ['retired'])");
        kept(&expr, &[V100]);
        let expr = format!("azure.skusBelow(['{A10_SIXTH}', 'nv6ads_a10_v5'], 'gpus', 1)");
        kept(&expr, &[A10_SIXTH]);
    }

    #[test]
    fn long_lists_keep_their_order_and_drop_only_repeats() {
        // More elements than the sets these functions keep inline, a
        // repeat past them, and the kept ones spread over the whole list.
        let mut elements: Vec<String> = (0..300).map(|i| format!("x{i}")).collect();
        elements.insert(150, T4.to_string());
        elements.push("x7".to_string());
        elements.push("nc4as_t4_v3".to_string());
        let list = serde_json::to_string(&elements).unwrap();
        let distinct: Vec<&str> = elements[..301].iter().map(String::as_str).collect();
        kept(&format!("azure.skusNotIn({list}, [])"), &distinct);
        let unknown: Vec<&str> = distinct.iter().copied().filter(|n| *n != T4).collect();
        kept(&format!("azure.skusNotIn({list}, ['*'])"), &unknown);
        kept(&format!("azure.skusIn({list}, ['*'])"), &[T4]);
        assert_eq!(
            eval(&format!("azure.skusIn({list}, ['*']) == ['{T4}']")),
            Value::Bool(true)
        );
    }

    #[test]
    fn a_list_kept_whole_is_the_same_value() {
        // Nothing dropped: the function answers with its list, which still
        // compares, indexes and concatenates as a list of strings.
        let list = format!("['{T4}', '{V100}', 'kaito-gpu']");
        for expr in [
            format!("azure.skusNotIn({list}, ['{A100}'])"),
            format!("azure.skusWhere(['{T4}', '{V100}'], ['!mig'])"),
            format!("azure.skusBelow(['{T4}', '{V100}'], 'gpus', 2)"),
        ] {
            let whole = eval(&expr);
            assert_eq!(eval(&format!("{expr} == {expr}")), Value::Bool(true));
            assert_eq!(eval(&format!("({expr})[0]")), json_to_value(&json!(T4)));
            assert_eq!(eval(&format!("({expr} + ['a']).size()")), {
                let Value::List(items) = &whole else {
                    panic!("{expr}: a list, got {whole:?}")
                };
                Value::Int(items.len() as i64 + 1)
            });
        }
        kept(
            &format!("azure.skusNotIn({list}, ['{A100}'])"),
            &[T4, V100, "kaito-gpu"],
        );
    }

    #[test]
    fn empty_lists() {
        let list = format!("['{T4}', '{V100}']");
        kept("azure.skusIn([], ['*'])", &[]);
        kept("azure.skusNotIn([], ['*'])", &[]);
        kept(&format!("azure.skusIn({list}, [])"), &[]);
        kept(&format!("azure.skusNotIn({list}, [])"), &[T4, V100]);
        kept("azure.skusWhere([], ['retired'])", &[]);
        kept(&format!("azure.skusWhere({list}, [])"), &[]);
        kept("azure.skusBelow([], 'vcpus', 8)", &[]);
    }

    #[test]
    fn skus_where_keeps_skus_with_any_listed_field_true() {
        let list = format!(
            "['{V100}', '{T4}', '{MI25}', '{V710}', '{A100}', '{A10_SIXTH}', 'Standard_D4s_v5']"
        );
        for (fields, want) in [
            ("'retired', '!aksSupported'", &[V100, MI25, V710][..]),
            ("'premium'", &[A100]),
            ("'fractional'", &[V710, A10_SIXTH]),
            // A size the catalog does not know is kept by no field, negated or not.
            ("'!premium'", &[V100, T4, MI25, V710, A10_SIXTH]),
        ] {
            kept(&format!("azure.skusWhere({list}, [{fields}])"), want);
        }
        kept(
            "azure.skusWhere(['nc24ads_a100_v4'], ['premium'])",
            &["nc24ads_a100_v4"],
        );
    }

    #[test]
    fn skus_below_compares_a_numeric_field() {
        let list = format!(
            "['{T4}', '{A10_SIXTH}', '{A10_V4}', '{A10_THIRD}', '{A100}', 'Standard_D4s_v5']"
        );
        for (field, bound, want) in [
            ("gpuMemoryGiB", "16.0", &[A10_SIXTH, A10_THIRD][..]),
            ("gpuMemoryGiB", "16", &[A10_SIXTH, A10_THIRD]),
            ("gpuMemoryGiB", "16u", &[A10_SIXTH, A10_THIRD]),
            // A SKU without the figure is never below: A10_V4 has no memory figure.
            ("gpuMemoryGiB", "1000.0", &[T4, A10_SIXTH, A10_THIRD, A100]),
            ("vcpus", "8", &[T4, A10_SIXTH]),
            ("gpus", "0.5", &[A10_SIXTH, A10_THIRD]),
            ("gpuDevices", "1", &[]),
        ] {
            kept(
                &format!("azure.skusBelow({list}, '{field}', {bound})"),
                want,
            );
        }
    }

    #[test]
    fn unknown_fields_are_errors_naming_them() {
        assert_eq!(error(&format!(
            "azure.skusWhere(['{T4}'], ['retired', 'gpuModel'])"
        )), "azure.skusWhere: unknown field 'gpuModel' (known: aksSupported, fractional, mig, premium, retired)");
        let msg = error(&format!("azure.skusWhere(['{T4}'], ['!Premium'])"));
        assert!(msg.contains("unknown field 'Premium'"), "{msg}");
        // Checked even when the list is empty: a typo does not wait for data.
        let msg = error("azure.skusWhere([], ['retierd'])");
        assert!(msg.contains("unknown field 'retierd'"), "{msg}");
        assert_eq!(error(&format!("azure.skusBelow(['{T4}'], 'gpuMemory', 16)")), "azure.skusBelow: unknown field 'gpuMemory' (known: gpuDevices, gpuMemoryGiB, gpus, memoryGiB, vcpus)");
        assert_eq!(
            error(&format!("azure.skusBelow(['{T4}'], 'vcpus', '8')")),
            "azure.skusBelow: the bound is string, not a number"
        );
    }

    #[test]
    fn non_string_elements_are_errors() {
        // `dyn(1)`: a literal `['a', 1]` is refused at load; a list from
        // `params` or an object can hold anything.
        for (expr, want) in [
            (
                format!("azure.skusIn(['{T4}', dyn(1)], ['*'])"),
                "azure.skusIn: element 1 of the list is int, not a string",
            ),
            (
                format!("azure.skusNotIn(['{T4}'], ['*', null])"),
                "azure.skusNotIn: element 1 of the names is null, not a string",
            ),
            (
                format!("azure.skusWhere([['{T4}']], ['retired'])"),
                "azure.skusWhere: element 0 of the list is list, not a string",
            ),
            (
                "azure.skusWhere([], [true])".into(),
                "azure.skusWhere: element 0 of the fields is bool, not a string",
            ),
            (
                "azure.skusBelow([{'name': 'x'}], 'vcpus', 8)".into(),
                "azure.skusBelow: element 0 of the list is map, not a string",
            ),
        ] {
            assert_eq!(error(&expr), want, "{expr}");
        }
        // Not a list at all.
        assert!(!error(&format!("azure.skusIn('{T4}', ['*'])")).is_empty());
    }

    #[test]
    fn agrees_with_the_comprehensions_it_replaces() {
        let env = env();
        let all: Vec<String> = Catalog::embedded()
            .skus()
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let vars =
            json!({"all": all, "some": all.iter().step_by(3).collect::<Vec<_>>(), "star": ["*"]});
        let pairs = [
            (
                "azure.skusWhere(variables.all, ['retired', '!aksSupported'])",
                "variables.all.filter(s, azure.sku(s).retired || !azure.sku(s).aksSupported)",
            ),
            (
                "azure.skusWhere(variables.all, ['premium'])",
                "variables.all.filter(s, azure.sku(s).premium)",
            ),
            (
                "azure.skusBelow(variables.all, 'gpuMemoryGiB', 16.0)",
                "variables.all.filter(s, azure.sku(s).gpuMemoryGiB != null && azure.sku(s).gpuMemoryGiB < 16.0)",
            ),
            (
                "azure.skusIn(variables.all, azure.skusWhere(variables.all, ['fractional']) + azure.skusBelow(variables.all, 'gpuMemoryGiB', 24.0))",
                "variables.all.filter(s, azure.sku(s).fractional || (azure.sku(s).gpuMemoryGiB != null && azure.sku(s).gpuMemoryGiB < 24.0))",
            ),
            (
                "azure.skusIn(variables.all, variables.some)",
                "variables.all.filter(s, '*' in variables.some || s in variables.some)",
            ),
            (
                "azure.skusNotIn(variables.all, variables.some)",
                "variables.all.filter(s, !('*' in variables.some || s in variables.some))",
            ),
            (
                "azure.skusIn(variables.all, variables.star)",
                "variables.all.filter(s, '*' in variables.star || s in variables.star)",
            ),
        ];
        for (native, comprehension) in pairs {
            let want = run(&env, comprehension, vars.clone()).unwrap();
            assert_eq!(run(&env, native, vars.clone()).unwrap(), want, "{native}");
            assert!(
                matches!(&want, Value::List(l) if !l.is_empty()),
                "{comprehension} keeps no SKU: a weak comparison"
            );
        }
    }

    #[test]
    fn cost_grows_with_the_lists_walked() {
        let env = env();
        let cost = |expr: &str, n: usize| {
            let vars = json!({"list": vec!["Standard_D4s_v5"; n]});
            kube_cel::cel::budget::with_budget(u64::MAX, || run(&env, expr, vars).unwrap()).1
        };
        for expr in [
            "azure.skusIn(variables.list, ['*']).size()",
            "azure.skusNotIn(['Standard_NC4as_T4_v3'], variables.list).size()",
            "azure.skusWhere(variables.list, ['retired']).size()",
            "azure.skusBelow(variables.list, 'vcpus', 8).size()",
        ] {
            let (small, large) = (cost(expr, 10), cost(expr, 1010));
            assert!(large >= small + 1000, "{expr}: {small} then {large}");
        }
        // A list longer than what is left of the budget is stopped, not walked.
        let vars = json!({"list": vec!["x"; 10_000]});
        let (stopped, _) = kube_cel::cel::budget::with_budget(5_000, || {
            run(&env, "azure.skusWhere(variables.list, ['retired'])", vars)
        });
        assert!(
            matches!(stopped, Err(EvalError::CostLimit(_))),
            "{stopped:?}"
        );
    }

    /// A program calls the functions on lists wherever it holds them: the
    /// request's JSON read in place, a list it built, the scope's; every
    /// answer, error and unit as the interpreter's.
    #[test]
    fn programs_call_them_natively_on_lists_where_they_stand() {
        let env = env();
        let object = json!({
            "sizes": [T4, "nc6s_v3", A100, "kaito-gpu", T4],
            "odd": [T4, 1, null, {"name": "x"}],
            "fields": ["premium", "!mig"],
            "bound": 16,
            "field": "gpuMemoryGiB",
            "name": T4
        });
        let vars = json!({"listed": [A100, "kaito-gpu"], "fields": ["vcpus", T4]});
        let mut answered = [0, 0];
        for expr in [
            "azure.skusIn(object.sizes, ['*'])",
            "azure.skusNotIn(object.sizes, variables.listed)",
            "azure.skusIn(object.sizes.filter(s, s != 'kaito-gpu'), object.sizes)",
            "azure.skusWhere(object.sizes.map(s, s), object.fields)",
            "azure.skusWhere(variables.listed, ['premium']) == [variables.listed[0]]",
            "azure.skusBelow(object.sizes, object.field, object.bound)",
            "azure.skusBelow(object.sizes.filter(s, true), 'vcpus', 1000u)",
            "azure.skusIn(azure.skusWhere(object.sizes, ['!premium']), ['*']).size()",
            "object.sizes.exists(s, azure.skusIn([s], variables.listed).size() > 0)",
            // An element of a narrowed list of the scope's is a string.
            "azure.skusBelow(object.sizes, azure.skusNotIn(variables.fields, ['*'])[0], 16)",
            // Errors: not lists, elements of other types, fields and bounds.
            "azure.skusIn(object.name, ['*'])",
            "azure.skusIn(object.sizes, object.name)",
            "azure.skusIn(object.odd, ['*'])",
            "azure.skusNotIn(object.sizes, object.odd)",
            "azure.skusWhere(object.sizes, object.odd)",
            "azure.skusWhere(object.odd.filter(x, true), ['retired'])",
            "azure.skusBelow(object.sizes, object.bound, 1)",
            "azure.skusBelow(object.sizes, 'vcpus', object.name)",
            "azure.skusBelow(object.sizes, 'cores', 1)",
            "azure.skusBelow(object.missing, 'vcpus', 1)",
        ] {
            let (answer, _) = compare(&env, expr, &vars, &object, EXPRESSION_COST_LIMIT);
            answered[usize::from(answer.is_err())] += 1;
        }
        // Both halves of the list above are what they say: answers, then
        // errors.
        assert_eq!(answered, [10, 10]);
        // Every element walked is charged: a long list runs out of budget
        // where the interpreter's call does.
        let long = json!({"sizes": vec![T4; 10_000]});
        let expr = "azure.skusIn(object.sizes, ['*']).size()";
        let (stopped, _) = compare(&env, expr, &json!({}), &long, 5_000);
        assert!(stopped.unwrap_err().contains("cost limit"));
    }

    /// The shipped policies' calls of these functions are made natively.
    #[test]
    fn the_shipped_calls_are_native() {
        let env = env();
        let compiled =
            compile(&env, "azure.skusWhere(azure.skusIn(['a'], ['*']), ['mig'])").unwrap();
        let program = env.program(compiled.tree()).unwrap();
        assert_eq!(program.interpreted(), 0, "{program:?}");
    }
}
