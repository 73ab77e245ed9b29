//! Parts of an expression that read nothing but `params`, worked out once
//! per params object rather than on every request.
//!
//! `!(request.namespace in params.data.exemptNamespaces.split(',').map(n,
//! n.trim()))` splits and trims the same text for every pod, although the
//! params object changes only when the policy set is loaded again. At load,
//! each largest part of an expression whose only free variable is `params`
//! and that calls a function or runs a comprehension (a field read alone is
//! not worth it) is taken out: the expression is kept a second time with
//! each such part replaced by [`CONSTANT_FUNCTION`]`(@params.<k>)`, an
//! identifier no CEL source can spell. For each params object the part is
//! evaluated once ([`Constants::work_out`]); an evaluation then binds
//! `@params.<k>` to the result and uses the second tree.
//!
//! Nothing observable changes. The cost budget is charged what the part
//! cost when it was worked out, at the point the part is reached (a budget
//! running out inside the part runs out there, with the same error). A part
//! that fails for a params object (a missing key, a wrong type) is not
//! folded for it: the expression is evaluated whole, and fails as before.
//! Only functions that give the same result for the same arguments are
//! folded: the interpreter's and Kubernetes' libraries, the crate's own,
//! and those of extensions that say so ([`super::Extension::pure`]).
use super::{Compiled, Env, Value, EXPRESSION_COST_LIMIT};
use kube_cel::cel::common::ast::{CallExpr, Expr};
use kube_cel::cel::common::types::{CelInt, CelList};
use kube_cel::cel::common::value::Val;
use kube_cel::cel::parser::Expression;
use kube_cel::cel::{budget, Context, ExecutionError, ResolveResult};
use std::sync::Arc;

/// The function a folded part is replaced by a call of: it charges the
/// part's cost and answers its value. Its name starts with `@`, which no
/// CEL source can call.
pub const CONSTANT_FUNCTION: &str = "@paramsConstant";

/// The variable folding looks for.
const PARAMS: &str = "params";

/// An expression with its params-only parts taken out.
#[derive(Debug)]
pub struct Folded {
    /// The expression with each part replaced by a call of
    /// [`CONSTANT_FUNCTION`] on the part's identifier.
    pub ast: Expression,
    /// Each part's identifier (`@params.<k>`) and expression.
    pub parts: Vec<(String, Expression)>,
}

/// The parts of one folded expression worked out for one params object,
/// in the order of [`Folded::parts`]: each is bound to its identifier as a
/// list of the part's value and the cost units still to charge when it is
/// read.
#[derive(Debug)]
pub struct Constants(Vec<Box<dyn Val>>);

impl Constants {
    /// Works out every part of `folded` with `params` bound; `None` if one
    /// of them fails (or costs less than reading it back would: it is then
    /// not worth folding), so that the expression is evaluated whole.
    pub fn work_out(folded: &Folded, env: &Env, params: &Value) -> Option<Constants> {
        let mut values = Vec::with_capacity(folded.parts.len());
        for (ident, part) in &folded.parts {
            let mut scope = env.scope();
            scope.add_variable_from_value(PARAMS, params.clone());
            let (value, cost) = budget::with_budget(EXPRESSION_COST_LIMIT, || {
                Value::resolve_val(part, &scope).map(|v| v.into_owned())
            });
            let value = value.ok()?;
            // What reading the part back costs: the call, its argument and
            // the value answered.
            let read_back = read_back(ident);
            let bound = constant(value.clone_as_boxed(), 0);
            let mut scope = env.scope();
            scope.add_variable_as_val(ident, bound);
            let (read, overhead) = budget::with_budget(EXPRESSION_COST_LIMIT, || {
                Value::resolve_val(&read_back, &scope).map(|v| v.into_owned())
            });
            read.ok()?;
            let extra = cost.checked_sub(overhead)?;
            values.push(constant(value, extra));
        }
        Some(Constants(values))
    }

    /// Binds each part of `folded` in `scope`, by reference.
    pub fn bind<'a>(&'a self, folded: &'a Folded, scope: &mut Context<'a>) {
        for ((ident, _), value) in folded.parts.iter().zip(&self.0) {
            scope.add_variable_borrowed(ident, value.as_ref());
        }
    }
}

/// A part's value with the cost units reading it charges on top of what
/// the interpreter charges for the call.
fn constant(value: Box<dyn Val>, extra: u64) -> Box<dyn Val> {
    let extra = i64::try_from(extra).unwrap_or(i64::MAX);
    Box::new(CelList::from(vec![
        value,
        Box::new(CelInt::from(extra)) as Box<dyn Val>,
    ]))
}

/// `@paramsConstant(<ident>)`.
fn read_back(ident: &str) -> Expression {
    Expression {
        id: 0,
        expr: Expr::Call(CallExpr {
            func_name: CONSTANT_FUNCTION.to_string(),
            target: None,
            args: vec![Expression {
                id: 0,
                expr: Expr::Ident(ident.to_string()),
            }],
        }),
    }
}

/// A bound part (see [`Constants`]): its value, and the units reading it
/// charges on top of the call's; `None` when `bound` is not one.
pub(super) fn part(bound: &dyn Val) -> Option<(&dyn Val, u64)> {
    let list = bound.downcast_ref::<CelList>().filter(|l| l.len() == 2)?;
    let extra = list[1]
        .downcast_ref::<CelInt>()
        .map(|i| u64::try_from(*i.inner()).unwrap_or(0))
        .unwrap_or(0);
    Some((list[0].as_ref(), extra))
}

/// Registers [`CONSTANT_FUNCTION`]: given a part's value and cost (see
/// [`Constants`]), charges the cost and answers the value as it is. A
/// program reads a part without calling it ([`super::Program`]), charged
/// the same units.
pub(super) fn register(ctx: &mut Context<'static>) {
    ctx.add_function(
        CONSTANT_FUNCTION,
        |bound: kube_cel::cel::extractors::Val| -> ResolveResult {
            let (value, extra) = part(bound.0.as_ref())
                .ok_or_else(|| ExecutionError::function_error(CONSTANT_FUNCTION, "not a part"))?;
            budget::charge(extra)?;
            Ok(Value::from_val(value.clone_as_boxed()))
        },
    );
}

/// Folds `ast`: `None` when no part of it reads only `params` and is worth
/// working out once. `pure` tells the functions that give the same result
/// for the same arguments (a call of any other is never folded);
/// `namespaced` whether `prefix.name` is a function, so that the `prefix`
/// of such a call is not taken for a variable.
pub fn fold(
    ast: &Expression,
    pure: &dyn Fn(&str) -> bool,
    namespaced: &dyn Fn(&str, &str) -> bool,
) -> Option<Arc<Folded>> {
    let mut folder = Folder {
        bound: Vec::new(),
        enclosing: Vec::new(),
        pure,
        namespaced,
        parts: Vec::new(),
    };
    // The interpreter bounds nesting; a folded tree is shallower, so an
    // expression near that bound is left alone rather than let through.
    if depth(ast) >= budget::MAX_EVAL_DEPTH as usize / 2 {
        return None;
    }
    let mut folded = ast.clone();
    folder.rewrite(&mut folded);
    if folder.parts.is_empty() {
        return None;
    }
    Some(Arc::new(Folded {
        ast: folded,
        parts: folder.parts,
    }))
}

/// What a subtree reads and does.
#[derive(Clone, Copy, Default)]
struct Shape {
    /// Reads `params` (not a comprehension variable of that name).
    params: bool,
    /// Reads any other variable, or calls a function that is not pure.
    other: bool,
    /// Calls a function by name or runs a comprehension.
    work: bool,
}

impl Shape {
    fn and(self, other: Shape) -> Shape {
        Shape {
            params: self.params || other.params,
            other: self.other || other.other,
            work: self.work || other.work,
        }
    }

    fn foldable(self) -> bool {
        self.params && !self.other && self.work
    }
}

struct Folder<'a> {
    /// Names comprehensions bind where the walk is.
    bound: Vec<String>,
    /// While a subtree's shape is read: the names comprehensions around
    /// that subtree bind (free in it; never `params`).
    enclosing: Vec<String>,
    pure: &'a dyn Fn(&str) -> bool,
    namespaced: &'a dyn Fn(&str, &str) -> bool,
    parts: Vec<(String, Expression)>,
}

impl Folder<'_> {
    /// Replaces each largest foldable part of `e` by a read of its value.
    fn rewrite(&mut self, e: &mut Expression) {
        // A variable an enclosing comprehension binds is free in `e`, and
        // another variable than `params`: only what `e` binds itself counts
        // as bound while its shape is read.
        self.enclosing = std::mem::take(&mut self.bound);
        let shape = self.shape(e);
        self.bound = std::mem::take(&mut self.enclosing);
        if shape.foldable() {
            let ident = format!("@params.{}", self.parts.len());
            let read = Expression {
                id: e.id,
                expr: read_back(&ident).expr,
            };
            let part = std::mem::replace(e, read);
            self.parts.push((ident, part));
            return;
        }
        super::walk::visit_children(self, e, |s| &mut s.bound, Self::rewrite);
    }

    fn shape(&mut self, e: &Expression) -> Shape {
        match &e.expr {
            Expr::Literal(_) => Shape::default(),
            // A tree the parser never makes: not folded.
            Expr::Unspecified => Shape {
                other: true,
                ..Shape::default()
            },
            Expr::Ident(name) if self.bound.iter().any(|b| b == name) => Shape::default(),
            Expr::Ident(name) if self.enclosing.iter().any(|b| b == name) => Shape {
                other: true,
                ..Shape::default()
            },
            Expr::Ident(name) if name == PARAMS => Shape {
                params: true,
                ..Shape::default()
            },
            Expr::Ident(_) => Shape {
                other: true,
                ..Shape::default()
            },
            Expr::Select(select) => self.shape(&select.operand),
            Expr::Call(call) => {
                let operator = !call
                    .func_name
                    .as_bytes()
                    .first()
                    .is_some_and(u8::is_ascii_alphabetic);
                let mut shape = Shape {
                    work: !operator,
                    ..Shape::default()
                };
                let mut name = call.func_name.clone();
                if let Some(target) = &call.target {
                    match &target.expr {
                        Expr::Ident(prefix)
                            if !self.bound.iter().any(|b| b == prefix)
                                && (self.namespaced)(prefix, &call.func_name) =>
                        {
                            name = format!("{prefix}.{}", call.func_name);
                        }
                        _ => shape = shape.and(self.shape(target)),
                    }
                }
                if !operator && !(self.pure)(&name) {
                    shape.other = true;
                }
                for arg in &call.args {
                    shape = shape.and(self.shape(arg));
                }
                shape
            }
            Expr::List(_) | Expr::Map(_) | Expr::Struct(_) => {
                let mut shape = Shape::default();
                super::walk::children(e, |child| shape = shape.and(self.shape(child)));
                shape
            }
            Expr::Comprehension(c) => {
                let outside = self.shape(&c.iter_range).and(self.shape(&c.accu_init));
                let before = super::walk::Bound {
                    var: &c.iter_var,
                    var2: c.iter_var2.as_deref(),
                    accu: &c.accu_var,
                }
                .push_onto(&mut self.bound);
                let inside = self
                    .shape(&c.loop_cond)
                    .and(self.shape(&c.loop_step))
                    .and(self.shape(&c.result));
                self.bound.truncate(before);
                outside.and(inside).and(Shape {
                    work: true,
                    ..Shape::default()
                })
            }
        }
    }
}

/// Nesting of `e`'s tree.
fn depth(e: &Expression) -> usize {
    let mut deepest = 0;
    super::walk::children(e, |child| deepest = deepest.max(depth(child)));
    1 + deepest
}

/// The folded form of `expr`, when it reads `params` and has parts worth
/// working out once in `env` (see [`fold`]).
pub fn fold_expression(env: &Env, expr: &Compiled) -> Option<Arc<Folded>> {
    if !expr.reads(PARAMS) {
        return None;
    }
    fold(expr.tree(), &|name| env.is_pure(name), &|prefix, name| {
        env.is_namespaced(prefix, name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::walk::parse;
    use crate::cel::{compile, json_to_value, Extensions};
    use serde_json::json;

    /// How many parts `fold` takes out of `source`; `None` when nothing is
    /// folded (`azure.sku` is the one namespaced function).
    fn parts(source: &str, pure: &dyn Fn(&str) -> bool) -> Option<usize> {
        fold(&parse(source), pure, &|prefix, name| {
            (prefix, name) == ("azure", "sku")
        })
        .map(|f| f.parts.len())
    }

    fn any(_: &str) -> bool {
        true
    }

    #[test]
    fn the_largest_params_only_parts_with_work_are_taken_out() {
        let folded = fold(
            &parse("!(request.namespace in params.data.x.split(',').map(n, n.trim()))"),
            &any,
            &|_, _| false,
        )
        .expect("folded");
        assert_eq!(folded.parts.len(), 1);
        assert_eq!(folded.parts[0].0, "@params.0");
        // The part is the whole split-and-trim, not a piece of it.
        assert!(matches!(&folded.parts[0].1.expr, Expr::Comprehension(_)));
        // Two parts when two separate pieces qualify.
        assert_eq!(
            parts(
                "int(params.a) > object.x && params.b.split(',').size() > 1",
                &any
            ),
            Some(2)
        );
        // A whole expression of params alone is one part.
        assert_eq!(parts("int(params.data.max) + 1", &any), Some(1));
    }

    #[test]
    fn field_reads_operators_and_other_variables_stay() {
        // Nothing to work out once: reads and operators alone.
        assert_eq!(parts("params.data.max == '1'", &any), None);
        assert_eq!(parts("has(params.data) && params.data.x != ''", &any), None);
        // Another variable in the part.
        assert_eq!(
            parts("params.data.x.split(object.sep).size() > 0", &any),
            None
        );
        assert_eq!(parts("object.items.exists(i, i == params.x)", &any), None);
        // No params at all.
        assert_eq!(parts("object.x.split(',').size() > 0", &any), None);
    }

    #[test]
    fn variables_of_enclosing_comprehensions_keep_a_part_in() {
        // The loop step of `all` reads `c` and the accumulator, bound
        // outside it: never a part of its own.
        assert_eq!(
            parts(
                "object.items.all(c, has(c.image) && params.x.split(',').exists(i, i == c.image))",
                &any
            ),
            Some(1),
            "only the split"
        );
        assert_eq!(
            parts("object.items.all(c, c.x && params.y.size() > 0)", &any),
            Some(1),
            "only the size"
        );
    }

    #[test]
    fn a_comprehension_variable_named_params_is_not_the_params() {
        assert_eq!(
            parts(
                "object.items.all(params, params.split(',').size() > 0)",
                &any
            ),
            None
        );
        // Outside the comprehension `params` is the params again.
        assert_eq!(
            parts(
                "[1].all(params, params > 0) && params.x.split(',').size() > 0",
                &any
            ),
            Some(1)
        );
    }

    #[test]
    fn calls_of_functions_not_known_pure_are_never_folded() {
        let pure = |name: &str| name != "now";
        assert_eq!(parts("now(params.x) > 0", &pure), None);
        // Elsewhere in the expression a pure call still is.
        assert_eq!(parts("now(params.x) > int(params.y)", &pure), Some(1));
    }

    #[test]
    fn a_namespaced_function_prefix_is_not_a_variable() {
        assert_eq!(parts("azure.sku(params.x).premium", &any), Some(1));
        // `other.sku(...)` is a method of a variable `other`.
        assert_eq!(parts("other.sku(params.x).premium", &any), None);
    }

    /// Evaluates `expr` whole and folded with `params`, each under a budget
    /// of `limit`; the results (errors as text) and the units used. The
    /// folded tree is evaluated by the interpreter and by its program
    /// (which reads each part where it is bound), and both must agree.
    fn both(expr: &Compiled, env: &Env, params: &Value, limit: u64) -> [(String, u64); 2] {
        let folded = fold_expression(env, expr).expect("folded");
        let folded = &*folded;
        let constants = Constants::work_out(folded, env, params).expect("worked out");
        let show = |r: Result<Value, crate::cel::EvalError>| format!("{r:?}");
        let mut scope = env.scope();
        scope.add_variable_from_value(PARAMS, params.clone());
        let whole = budget::with_budget(limit, || crate::cel::evaluate(expr.tree(), &scope));
        let mut inner = scope.new_inner_scope();
        constants.bind(folded, &mut inner);
        let program = env.program(&folded.ast).expect("a program");
        assert_eq!(program.interpreted(), 0, "{program:?}");
        let by_program = budget::with_budget(limit, || {
            let (result, _) = program.evaluate_val(&inner, &crate::cel::Roots::SCOPE);
            result.and_then(|v| crate::cel::to_value(v.as_ref()))
        });
        let folded = budget::with_budget(limit, || crate::cel::evaluate(&folded.ast, &inner));
        let folded = (show(folded.0), folded.1);
        assert_eq!((show(by_program.0), by_program.1), folded, "by the program");
        [(show(whole.0), whole.1), folded]
    }

    #[test]
    fn a_folded_expression_gives_the_same_value_for_the_same_cost() {
        let env = Env::new(Extensions::default());
        let params = json_to_value(&json!({"data": {
            "exempt": "kube-system, gpu-operator ,monitoring",
            "max": "8",
            "names": "a,b,c,d,e,f,g,h,i,j"
        }}));
        for source in [
            "!('gpu-operator' in params.data.exempt.split(',').map(n, n.trim()))",
            "!('default' in params.data.exempt.split(',').map(n, n.trim()))",
            "int(params.data.max) >= 4",
            "params.data.names.split(',').filter(n, n > 'c').size() + int(params.data.max)",
            "'at most ' + string(int(params.data.max) * 2) + ' GPUs'",
            "[1, 2].all(x, x < int(params.data.max))",
            "params.data.names.split(',').exists(n, n == 'j')",
        ] {
            let expr = compile(&env, source).expect(source);
            let [whole, folded] = both(&expr, &env, &params, EXPRESSION_COST_LIMIT);
            assert!(!whole.0.contains("Err"), "{source}: {whole:?}");
            assert_eq!(whole, folded, "{source}");
        }
    }

    #[test]
    fn a_budget_running_out_inside_a_folded_part_runs_out_alike() {
        let env = Env::new(Extensions::default());
        let names: Vec<String> = (0..200).map(|i| format!("n{i}")).collect();
        let params = json_to_value(&json!({"data": {"names": names.join(",")}}));
        let expr = compile(
            &env,
            "params.data.names.split(',').map(n, n.trim()).size() > 0 && true",
        )
        .unwrap();
        // Enough for the whole, then too little (inside the part), then too
        // little for even the first node.
        let [whole, _] = both(&expr, &env, &params, EXPRESSION_COST_LIMIT);
        for limit in [whole.1, whole.1 - 1, 100, 1] {
            let [whole, folded] = both(&expr, &env, &params, limit);
            assert_eq!(whole, folded, "budget {limit}");
        }
        let [short, _] = both(&expr, &env, &params, 100);
        assert!(short.0.contains("cost limit"), "{short:?}");
    }

    #[test]
    fn a_part_that_fails_for_its_params_is_not_worked_out() {
        let env = Env::new(Extensions::default());
        let expr = compile(&env, "object.gpus <= int(params.data.max)").unwrap();
        let folded = &*fold_expression(&env, &expr).expect("folded");
        let params = |max: serde_json::Value| json_to_value(&json!({"data": {"max": max}}));
        assert!(Constants::work_out(folded, &env, &params(json!("8"))).is_some());
        assert!(Constants::work_out(folded, &env, &params(json!("eight"))).is_none());
        assert!(Constants::work_out(folded, &env, &json_to_value(&json!({}))).is_none());
    }

    #[test]
    fn an_expression_that_nests_deeply_is_left_whole() {
        // Built by hand: the parser refuses such nesting before this does.
        let nested = |levels: usize| {
            let mut e = parse("int(params.x)");
            for _ in 0..levels {
                e = Expression {
                    id: 0,
                    expr: Expr::List(kube_cel::cel::common::ast::ListExpr::new(vec![e])),
                };
            }
            crate::cel::on_compile_stack(move || {
                fold(&e, &any, &|_, _| false).map(|f| f.parts.len())
            })
            .unwrap()
        };
        assert_eq!(nested(130), None);
        assert_eq!(nested(10), Some(1));
    }
}
