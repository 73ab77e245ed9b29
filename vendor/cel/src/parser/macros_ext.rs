//! gpu-admission patch: the macros Kubernetes' CEL environment adds beyond
//! the standard ones, after cel-go's `ext.TwoVarComprehensions()` and
//! `ext.Bindings()`: `transformList`, `transformMap`, `transformMapEntry`
//! (with and without a filter), `cel.bind`, and the optional library's
//! `optMap` and `optFlatMap`. The two-variable forms of
//! `all`, `exists` and `existsOne` share [`iter_vars`].
use crate::common::ast::{
    operators, CallExpr, ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr,
};
use crate::parser::{MacroExprHelper, ParseError};

use super::macros::extract_ident;

/// The accumulator of the expanded comprehensions, a name no expression can
/// spell.
const RESULT: &str = "@result";

/// The internal function that inserts into a map accumulator:
/// `@mapInsert(map, key, value)` or `@mapInsert(map, entries)`; an existing
/// key is an error (cel-go's `cel.@mapInsert`).
pub const MAP_INSERT: &str = "@mapInsert";

/// The iteration variables of a comprehension: one name, or two distinct
/// names (index or key, then value).
pub(super) fn iter_vars(
    mut vars: Vec<IdedExpr>,
    helper: &mut MacroExprHelper,
) -> Result<(String, Option<String>), ParseError> {
    let second = if vars.len() == 2 { vars.pop() } else { None };
    let first = extract_ident(vars.remove(0), helper)?;
    let Some(second) = second else {
        return Ok((first, None));
    };
    let id = second.id;
    let second = extract_ident(second, helper)?;
    if second == first {
        return Err(error(
            helper,
            id,
            format!("duplicate variable name: {first}"),
        ));
    }
    Ok((first, Some(second)))
}

fn error(helper: &MacroExprHelper, id: u64, msg: String) -> ParseError {
    ParseError {
        source: None,
        pos: helper.pos_for(id).unwrap_or_default(),
        msg,
        expr_id: 0,
        source_info: None,
    }
}

fn call(helper: &mut MacroExprHelper, func_name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    helper.next_expr(Expr::Call(CallExpr {
        func_name: func_name.to_string(),
        target: None,
        args,
    }))
}

fn ident(helper: &mut MacroExprHelper, name: &str) -> IdedExpr {
    helper.next_expr(Expr::Ident(name.to_string()))
}

/// `target.<macro>(i, v, [filter,] expr)` as a comprehension whose step is
/// `step(accumulator, first iteration variable, expr)`, guarded by the
/// filter when there is one.
fn transform(
    helper: &mut MacroExprHelper,
    target: Option<IdedExpr>,
    mut args: Vec<IdedExpr>,
    init: Expr,
    step: fn(&mut MacroExprHelper, &str, IdedExpr) -> IdedExpr,
) -> Result<IdedExpr, ParseError> {
    let Some(target) = target else {
        unreachable!("Expected a target, but got `None`!")
    };
    let expr = args.pop().expect("a transform expression");
    let filter = if args.len() == 3 { args.pop() } else { None };
    let (v, v2) = iter_vars(args, helper)?;
    let init = helper.next_expr(init);
    let condition = helper.next_expr(Expr::Literal(LiteralValue::Boolean(true.into())));
    let mut loop_step = step(helper, &v, expr);
    if let Some(filter) = filter {
        let accu = ident(helper, RESULT);
        loop_step = call(
            helper,
            operators::CONDITIONAL,
            vec![filter, loop_step, accu],
        );
    }
    let result = ident(helper, RESULT);
    Ok(
        helper.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
            iter_range: target,
            iter_var: v,
            iter_var2: v2,
            accu_var: RESULT.to_string(),
            accu_init: init,
            loop_cond: condition,
            loop_step,
            result,
        }))),
    )
}

/// `l.transformList(i, v, [filter,] expr)`: the list of `expr` for each
/// index (key) and value.
pub(super) fn transform_list_expander(
    helper: &mut MacroExprHelper,
    target: Option<IdedExpr>,
    args: Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let init = Expr::List(ListExpr::new(Vec::new()));
    transform(helper, target, args, init, |helper, _, expr| {
        let accu = ident(helper, RESULT);
        let element = helper.next_expr(Expr::List(ListExpr::new(vec![expr])));
        call(helper, operators::ADD, vec![accu, element])
    })
}

/// `m.transformMap(k, v, [filter,] expr)`: a map from each key (index) to
/// `expr`.
pub(super) fn transform_map_expander(
    helper: &mut MacroExprHelper,
    target: Option<IdedExpr>,
    args: Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let init = Expr::Map(MapExpr {
        entries: Vec::new(),
    });
    transform(helper, target, args, init, |helper, key, expr| {
        let accu = ident(helper, RESULT);
        let key = ident(helper, key);
        call(helper, MAP_INSERT, vec![accu, key, expr])
    })
}

/// `m.transformMapEntry(k, v, [filter,] expr)`: the union of the maps
/// `expr` gives (each usually of one entry); a key given twice is an error.
pub(super) fn transform_map_entry_expander(
    helper: &mut MacroExprHelper,
    target: Option<IdedExpr>,
    args: Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let init = Expr::Map(MapExpr {
        entries: Vec::new(),
    });
    transform(helper, target, args, init, |helper, _, expr| {
        let accu = ident(helper, RESULT);
        call(helper, MAP_INSERT, vec![accu, expr])
    })
}

/// `cel.bind(name, init, expr)`: `expr` with `name` bound to the value of
/// `init`, evaluated once. Expanded as cel-go does: a comprehension over an
/// empty list whose accumulator is `name`.
pub(super) fn bind_expander(
    helper: &mut MacroExprHelper,
    _target: Option<IdedExpr>,
    mut args: Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    let result = args.pop().expect("a result expression");
    let init = args.pop().expect("an initial value");
    let name = extract_ident(args.pop().expect("a variable name"), helper)?;
    let range = helper.next_expr(Expr::List(ListExpr::new(Vec::new())));
    let condition = helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into())));
    let step = ident(helper, &name);
    Ok(
        helper.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
            iter_range: range,
            iter_var: "#unused".to_string(),
            iter_var2: None,
            accu_var: name,
            accu_init: init,
            loop_cond: condition,
            loop_step: step,
            result,
        }))),
    )
}

/// `opt.optMap(x, expr)`: `optional.of(expr)` with `x` bound to the value
/// of `opt`, or `optional.none()` when `opt` has none.
pub(super) fn opt_map_expander(
    helper: &mut MacroExprHelper,
    target: Option<IdedExpr>,
    args: Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    opt_expander(helper, target, args, true)
}

/// `opt.optFlatMap(x, expr)`: `expr` (an optional) with `x` bound to the
/// value of `opt`, or `optional.none()` when `opt` has none.
pub(super) fn opt_flat_map_expander(
    helper: &mut MacroExprHelper,
    target: Option<IdedExpr>,
    args: Vec<IdedExpr>,
) -> Result<IdedExpr, ParseError> {
    opt_expander(helper, target, args, false)
}

/// As cel-go expands them:
/// `opt.hasValue() ? [optional.of](cel.bind(x, opt.value(), expr)) : optional.none()`.
fn opt_expander(
    helper: &mut MacroExprHelper,
    target: Option<IdedExpr>,
    mut args: Vec<IdedExpr>,
    wrap: bool,
) -> Result<IdedExpr, ParseError> {
    let Some(target) = target else {
        unreachable!("Expected a target, but got `None`!")
    };
    let expr = args.pop().expect("an expression");
    let name = extract_ident(args.pop().expect("a variable name"), helper)?;
    let method = |helper: &mut MacroExprHelper, target: IdedExpr, name: &str, args| {
        helper.next_expr(Expr::Call(CallExpr {
            func_name: name.to_string(),
            target: Some(Box::new(target)),
            args,
        }))
    };
    let has_value = method(helper, target.clone(), "hasValue", Vec::new());
    let value = method(helper, target, "value", Vec::new());
    let range = helper.next_expr(Expr::List(ListExpr::new(Vec::new())));
    let condition = helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into())));
    let step = ident(helper, &name);
    let mut bound = helper.next_expr(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range: range,
        iter_var: "#unused".to_string(),
        iter_var2: None,
        accu_var: name,
        accu_init: value,
        loop_cond: condition,
        loop_step: step,
        result: expr,
    })));
    if wrap {
        let optional = ident(helper, "optional");
        bound = method(helper, optional, "of", vec![bound]);
    }
    let optional = ident(helper, "optional");
    let none = method(helper, optional, "none", Vec::new());
    Ok(call(
        helper,
        operators::CONDITIONAL,
        vec![has_value, bound, none],
    ))
}
