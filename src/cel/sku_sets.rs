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
use super::{type_name, Context, Value};
use crate::gpu::catalog::{Catalog, Sku};
use kube_cel::cel::common::types::{CelList, CelString};
use kube_cel::cel::common::value::Val as Interpreted;
use kube_cel::cel::extractors::Val;
use kube_cel::cel::{budget, ExecutionError, ResolveResult};
use smallvec::SmallVec;
use std::collections::HashSet;
use std::sync::Arc;

const SKUS_IN: &str = "azure.skusIn";
const SKUS_NOT_IN: &str = "azure.skusNotIn";
const SKUS_WHERE: &str = "azure.skusWhere";
const SKUS_BELOW: &str = "azure.skusBelow";
/// The four functions, each of which gives a list of SKU names.
pub(super) const NAMES: [&str; 4] = [SKUS_IN, SKUS_NOT_IN, SKUS_WHERE, SKUS_BELOW];

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

/// A numeric field of a SKU: integer fields stay integers so that an int
/// bound compares exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Number {
    Int(i64),
    Float(f64),
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

/// Registers the four functions over `catalog`. Their list arguments and
/// results stay in the interpreter's form (`extractors::Val`,
/// `Value::from_val`): no list of ~60 names is converted on the way in or
/// out.
pub(super) fn register(ctx: &mut Context<'static>, catalog: &Arc<Catalog>) {
    let sets = Arc::new(SkuSets {
        catalog: catalog.clone(),
    });
    let s = sets.clone();
    ctx.add_function(SKUS_IN, move |skus: Val, names: Val| -> ResolveResult {
        s.named(SKUS_IN, skus.0.as_ref(), names.0.as_ref(), true)
    });
    let s = sets.clone();
    ctx.add_function(SKUS_NOT_IN, move |skus: Val, names: Val| -> ResolveResult {
        s.named(SKUS_NOT_IN, skus.0.as_ref(), names.0.as_ref(), false)
    });
    let s = sets.clone();
    ctx.add_function(SKUS_WHERE, move |skus: Val, fields: Val| -> ResolveResult {
        s.where_(skus.0.as_ref(), fields.0.as_ref())
    });
    let s = sets;
    ctx.add_function(
        SKUS_BELOW,
        move |skus: Val, field: Arc<String>, bound: Value| -> ResolveResult {
            s.below(skus.0.as_ref(), &field, &bound)
        },
    );
}

/// The catalog with its SKUs numbered by position
/// ([`Catalog::position_of`]).
struct SkuSets {
    catalog: Arc<Catalog>,
}

/// A set of small numbers (catalog positions, list indices), kept inline
/// up to 256 of them: these functions run several times per request and
/// need a few such sets each.
struct Marks(SmallVec<[u64; 4]>);

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

    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }
}

impl SkuSets {
    /// The elements of the list `skus` that `keep` keeps, given each with
    /// the position of the catalog SKU it names (`None` for a name the
    /// catalog does not know), in list order, repeats dropped: a second
    /// spelling of a SKU, a second copy of an unknown string. Charges one
    /// unit per element. When every element is kept the result is the
    /// list itself (no copy); when none is, an empty list.
    fn kept(
        &self,
        function: &str,
        skus: &dyn Interpreted,
        mut keep: impl FnMut(Option<usize>) -> bool,
    ) -> ResolveResult {
        let list = list(function, "list", skus)?;
        charge(list.len())?;
        let mut seen = Marks::new(self.catalog.len());
        let mut unknown: HashSet<&str> = HashSet::new();
        let mut kept = Marks::new(list.len());
        let mut count = 0;
        for (i, value) in list.iter().enumerate() {
            let name = string_at(function, "list", i, value.as_ref())?;
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
        if count == list.len() {
            return Ok(Value::from_val(skus.clone_as_boxed()));
        }
        let mut out = Vec::with_capacity(count);
        out.extend(
            (list.iter().enumerate())
                .filter(|(i, _)| kept.contains(*i))
                .map(|(_, value)| value.clone_as_boxed()),
        );
        Ok(Value::from_val(Box::new(CelList::from(out))))
    }

    fn sku(&self, position: usize) -> &Sku {
        &self.catalog.skus()[position]
    }

    /// `azure.skusIn` (`keep` true) and `azure.skusNotIn` (`keep` false).
    fn named(
        &self,
        function: &str,
        skus: &dyn Interpreted,
        names: &dyn Interpreted,
        keep: bool,
    ) -> ResolveResult {
        let names = list(function, "names", names)?;
        charge(names.len())?;
        let mut wanted = Marks::new(self.catalog.len());
        let mut every = false;
        for (i, value) in names.iter().enumerate() {
            let name = string_at(function, "names", i, value.as_ref())?;
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
    fn where_(&self, skus: &dyn Interpreted, fields: &dyn Interpreted) -> ResolveResult {
        let fields = list(SKUS_WHERE, "fields", fields)?;
        charge(fields.len())?;
        let mut tests: SmallVec<[(Flag, bool); 4]> = SmallVec::with_capacity(fields.len());
        for (i, value) in fields.iter().enumerate() {
            let field = string_at(SKUS_WHERE, "fields", i, value.as_ref())?;
            let (name, want) = match field.strip_prefix('!') {
                Some(rest) => (rest, false),
                None => (field, true),
            };
            let test = FLAGS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, f)| *f)
                .ok_or_else(|| unknown_field(SKUS_WHERE, name, FLAGS.iter().map(|(n, _)| *n)))?;
            tests.push((test, want));
        }
        self.kept(SKUS_WHERE, skus, |p| {
            p.is_some_and(|p| {
                let sku = self.sku(p);
                tests.iter().any(|(test, want)| test(sku) == *want)
            })
        })
    }

    /// `azure.skusBelow`.
    fn below(&self, skus: &dyn Interpreted, field: &str, bound: &Value) -> ResolveResult {
        let read = NUMBERS
            .iter()
            .find(|(n, _)| *n == field)
            .map(|(_, f)| *f)
            .ok_or_else(|| unknown_field(SKUS_BELOW, field, NUMBERS.iter().map(|(n, _)| *n)))?;
        let bound = match bound {
            Value::Int(i) => Number::Int(*i),
            Value::UInt(u) => i64::try_from(*u).map_or(Number::Float(*u as f64), Number::Int),
            Value::Float(f) => Number::Float(*f),
            other => {
                return Err(ExecutionError::function_error(
                    SKUS_BELOW,
                    format!("the bound is {}, not a number", type_name(other)),
                ))
            }
        };
        self.kept(SKUS_BELOW, skus, |p| {
            p.and_then(|p| read(self.sku(p)))
                .is_some_and(|number| is_below(number, bound))
        })
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

/// The list argument `what` of `function`.
fn list<'a>(
    function: &str,
    what: &str,
    value: &'a dyn Interpreted,
) -> Result<&'a [Box<dyn Interpreted>], ExecutionError> {
    match value.downcast_ref::<CelList>() {
        Some(list) => Ok(list.inner()),
        None => Err(ExecutionError::function_error(
            function,
            format!("the {what} is {}, not a list", val_type_name(value)),
        )),
    }
}

/// Element `i` of list `what`, which must be a string.
fn string_at<'a>(
    function: &str,
    what: &str,
    i: usize,
    value: &'a dyn Interpreted,
) -> Result<&'a str, ExecutionError> {
    match value.downcast_ref::<CelString>() {
        Some(s) => Ok(s.inner()),
        None => Err(ExecutionError::function_error(
            function,
            format!(
                "element {i} of the {what} is {}, not a string",
                val_type_name(value)
            ),
        )),
    }
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
    use crate::cel::{compile, evaluate, json_to_value, Env, EvalError, Extensions, Value};
    use crate::gpu::catalog::Catalog;
    use crate::gpu::GpuResources;
    use serde_json::json;

    fn env() -> Env {
        let ext = GpuExtension::new(Catalog::embedded_arc(), GpuResources::default());
        Env::new(Extensions::new().with(ext))
    }

    /// Evaluates `expr` with `variables` bound to `vars`.
    fn run(env: &Env, expr: &str, vars: serde_json::Value) -> Result<Value, EvalError> {
        let compiled = compile(env, expr).unwrap();
        let mut ctx = env.scope();
        // Bound as the policy engine binds them: each by name, and whole.
        for (name, value) in vars.as_object().into_iter().flatten() {
            ctx.add_variable_from_value(crate::cel::variables::ident(name), json_to_value(value));
        }
        ctx.add_variable_from_value("variables", json_to_value(&vars));
        evaluate(compiled.tree(), &ctx)
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
}
