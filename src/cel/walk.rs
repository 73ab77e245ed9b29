//! Walking an expression's tree with the names comprehensions bind, for
//! the rewrites done at load (`variables`, `fold`).
use kube_cel::cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, MapExpr, StructExpr};
use kube_cel::cel::parser::Expression;

/// The names a comprehension binds around its loop condition, loop step
/// and result.
pub(super) struct Bound<'a> {
    pub var: &'a str,
    pub var2: Option<&'a str>,
    pub accu: &'a str,
}

impl Bound<'_> {
    /// Pushes the names onto `names`; returns the length to truncate back to.
    pub fn push_onto(&self, names: &mut Vec<String>) -> usize {
        let before = names.len();
        names.push(self.var.to_string());
        names.extend(self.var2.map(str::to_string));
        names.push(self.accu.to_string());
        before
    }
}

/// Calls `visit` on each child of `e`, in the order the interpreter
/// evaluates them, with the names a comprehension binds around the child
/// (`None` outside a comprehension's loop).
pub(super) fn children_mut(
    e: &mut Expression,
    mut visit: impl FnMut(&mut Expression, Option<&Bound<'_>>),
) {
    match &mut e.expr {
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        Expr::Select(select) => visit(&mut select.operand, None),
        Expr::Call(call) => {
            if let Some(target) = call.target.as_mut() {
                visit(target, None);
            }
            for arg in &mut call.args {
                visit(arg, None);
            }
        }
        Expr::List(list) => {
            for item in &mut list.elements {
                visit(item, None);
            }
        }
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(m) = &mut entry.expr {
                    visit(&mut m.key, None);
                    visit(&mut m.value, None);
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &mut s.entries {
                if let EntryExpr::StructField(f) = &mut entry.expr {
                    visit(&mut f.value, None);
                }
            }
        }
        Expr::Comprehension(c) => {
            let ComprehensionExpr {
                iter_range,
                iter_var,
                iter_var2,
                accu_var,
                accu_init,
                loop_cond,
                loop_step,
                result,
            } = &mut **c;
            visit(iter_range, None);
            visit(accu_init, None);
            let bound = Bound {
                var: iter_var,
                var2: iter_var2.as_deref(),
                accu: accu_var,
            };
            for part in [loop_cond, loop_step, result] {
                visit(part, Some(&bound));
            }
        }
    }
}

/// Calls `visit` on each child of `e`, in the order the interpreter
/// evaluates them, whatever names they are in the scope of.
pub(super) fn children(e: &Expression, mut visit: impl FnMut(&Expression)) {
    match &e.expr {
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        Expr::Select(select) => visit(&select.operand),
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .for_each(visit),
        Expr::List(list) => list.elements.iter().for_each(visit),
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            for entry in entries {
                match &entry.expr {
                    EntryExpr::MapEntry(m) => [&m.key, &m.value].into_iter().for_each(&mut visit),
                    EntryExpr::StructField(f) => visit(&f.value),
                }
            }
        }
        Expr::Comprehension(c) => {
            let parts = [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step];
            parts.into_iter().chain([&c.result]).for_each(visit);
        }
    }
}

/// Calls `visit` on each child of `e` with the names bound around it
/// pushed onto the `names` of `state` (and taken off after).
pub(super) fn visit_children<S>(
    state: &mut S,
    e: &mut Expression,
    names: fn(&mut S) -> &mut Vec<String>,
    visit: fn(&mut S, &mut Expression),
) {
    children_mut(e, |child, bound| {
        let before = names(state).len();
        bound.map(|b| b.push_onto(names(state)));
        visit(state, child);
        names(state).truncate(before);
    });
}

/// `source` parsed as the loader parses it (optional syntax on), for tests.
#[cfg(test)]
pub(super) fn parse(source: &str) -> Expression {
    kube_cel::cel::parser::Parser::new()
        .enable_optional_syntax(true)
        .parse(source)
        .expect("parses")
}
