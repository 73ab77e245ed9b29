//! A policy's variables as the interpreter reads them.
//!
//! `variables.<name>` and `variables['<name>']` are rewritten at load into
//! one identifier spelled `variables.<name>`: no CEL source can name it
//! (identifiers hold no dot), so it cannot clash with anything written. At
//! evaluation each variable is then bound by reference under that name: a
//! read is one scope lookup, where a `variables` map had to be built for
//! every expression and the field looked up in it. What still reads
//! `variables` itself (`has(variables.x)`, the optional `variables.?x` and
//! `variables[?'x']`, an index that is not a literal, `variables` passed
//! whole) is told apart, and gets the map as before.
use kube_cel::cel::common::ast::{Expr, LiteralValue};
use kube_cel::cel::parser::Expression;

/// The identifier `variables.<name>` is rewritten to.
pub fn ident(name: &str) -> String {
    format!("variables.{name}")
}

/// The variable's name an identifier of [`ident`] spells, if it is one.
pub fn name(ident: &str) -> Option<&str> {
    ident.strip_prefix("variables.")
}

/// Rewrites every reference to one variable by name in `ast` into its
/// identifier, except where a comprehension (or `cel.bind`) binds the name
/// `variables` itself. Returns whether `variables` is still read whole.
pub(super) fn inline_references(ast: &mut Expression) -> bool {
    let mut rewriter = Rewriter {
        bound: Vec::new(),
        whole: false,
    };
    rewriter.walk(ast);
    rewriter.whole
}

struct Rewriter {
    /// Names comprehensions bind where the walk is.
    bound: Vec<String>,
    whole: bool,
}

impl Rewriter {
    fn is_policy_variables(&self, e: &Expression) -> bool {
        matches!(&e.expr, Expr::Ident(name) if name == "variables")
            && !self.bound.iter().any(|b| b == "variables")
    }

    /// The variable `e` reads by name, if it is `variables.<name>` or
    /// `variables['<name>']`.
    fn named_read(&self, e: &Expression) -> Option<String> {
        match &e.expr {
            Expr::Select(select) if !select.test && self.is_policy_variables(&select.operand) => {
                Some(select.field.clone())
            }
            Expr::Call(call)
                if call.func_name == "_[_]"
                    && call.target.is_none()
                    && call.args.len() == 2
                    && self.is_policy_variables(&call.args[0]) =>
            {
                match &call.args[1].expr {
                    Expr::Literal(LiteralValue::String(name)) => Some(name.inner().to_string()),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn walk(&mut self, e: &mut Expression) {
        if let Some(name) = self.named_read(e) {
            e.expr = Expr::Ident(ident(&name));
            return;
        }
        if self.is_policy_variables(e) {
            self.whole = true;
            return;
        }
        super::walk::visit_children(self, e, |s| &mut s.bound, Self::walk);
    }
}

#[cfg(test)]
mod tests {
    use super::inline_references;
    use crate::cel::walk::parse;
    use kube_cel::cel::common::ast::Expr;
    use kube_cel::cel::parser::Expression;

    /// Every identifier in `e`, in the order the walk meets them.
    fn idents(e: &Expression, out: &mut Vec<String>) {
        match &e.expr {
            Expr::Ident(name) => out.push(name.clone()),
            Expr::Select(s) => idents(&s.operand, out),
            Expr::Call(c) => {
                if let Some(t) = &c.target {
                    idents(t, out);
                }
                c.args.iter().for_each(|a| idents(a, out));
            }
            Expr::List(l) => l.elements.iter().for_each(|x| idents(x, out)),
            Expr::Comprehension(c) => {
                for part in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step] {
                    idents(part, out);
                }
                idents(&c.result, out);
            }
            _ => {}
        }
    }

    fn rewrite(source: &str) -> (Vec<String>, bool) {
        let mut ast = parse(source);
        let whole = inline_references(&mut ast);
        let mut names = Vec::new();
        idents(&ast, &mut names);
        names.retain(|n| n.starts_with("variables"));
        (names, whole)
    }

    #[test]
    fn reads_by_name_become_identifiers() {
        assert_eq!(
            rewrite("variables.a + variables['b'] > size(variables.c.d)"),
            (
                vec![
                    "variables.a".to_string(),
                    "variables.b".to_string(),
                    "variables.c".to_string()
                ],
                false
            )
        );
    }

    #[test]
    fn whole_reads_keep_the_map() {
        // `has()` tests the map's key; a computed index needs the map.
        assert_eq!(
            rewrite("has(variables.a)"),
            (vec!["variables".to_string()], true)
        );
        assert_eq!(
            rewrite("variables[object.kind] == variables.b"),
            (
                vec!["variables".to_string(), "variables.b".to_string()],
                true
            )
        );
    }

    #[test]
    fn a_comprehension_binding_the_name_is_left_alone() {
        let (names, whole) = rewrite("[1].all(variables, variables > 0) && variables.a");
        assert!(!whole);
        assert_eq!(names.last().map(String::as_str), Some("variables.a"));
        assert!(
            names[..names.len() - 1].iter().all(|n| n == "variables"),
            "{names:?}"
        );
        let (names, whole) = rewrite("cel.bind(variables, {'a': 1}, variables.a)");
        assert!(!whole);
        assert!(names.iter().all(|n| n == "variables"), "{names:?}");
    }
}
