//! Static limits on expressions, checked once at load so that nothing in a
//! policy file can exhaust the stack or run away at evaluation time.
use kube_cel::cel::common::ast::{EntryExpr, Expr};
use kube_cel::cel::parser::Expression;
use std::collections::BTreeSet;

/// Kubernetes' `PerCallLimit`: cost units per expression evaluation.
pub const EXPRESSION_COST_LIMIT: u64 = 1_000_000;
/// Kubernetes' `RuntimeCELCostBudget`: cost units for all the expressions of
/// one binding on one request.
pub const POLICY_COST_LIMIT: u64 = 10_000_000;
/// Stack for the thread that parses expressions. The parser recurses once or
/// more per nesting level; with [`Limits::default`] it needs well under this.
pub const COMPILE_STACK: usize = 64 << 20;

/// Size limits for one expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of source. Parsing a flat chain (`a.b.b.b...`, `1+1+...`)
    /// recurses once per element: 4,096 bytes parse in well under 1 MiB.
    pub max_source_len: usize,
    /// Nodes of the parsed tree.
    pub max_nodes: usize,
    /// Nesting depth of the parsed tree. Evaluation recurses per level; the
    /// interpreter itself stops at 250 frames.
    pub max_depth: usize,
    /// Comprehensions (`all`, `exists`, `map`, `filter`...) inside each other.
    pub max_comprehension_nesting: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_source_len: 4096,
            max_nodes: 2000,
            max_depth: 48,
            max_comprehension_nesting: 3,
        }
    }
}

/// What the checker learned about an accepted expression.
#[derive(Debug, Default)]
pub struct Shape {
    pub nodes: usize,
    pub depth: usize,
    /// Identifiers not bound by a comprehension.
    pub free_variables: BTreeSet<String>,
    /// `<name>` in `variables.<name>` / `variables['<name>']`.
    pub policy_variables: BTreeSet<String>,
}

/// Checks `ast` against `limits`.
pub fn check(ast: &Expression, limits: &Limits) -> Result<Shape, String> {
    let mut walker = Walker {
        limits,
        shape: Shape::default(),
        bound: Vec::new(),
    };
    walker.walk(ast, 1, 0)?;
    Ok(walker.shape)
}

struct Walker<'a> {
    limits: &'a Limits,
    shape: Shape,
    bound: Vec<String>,
}

impl Walker<'_> {
    fn walk(&mut self, e: &Expression, depth: usize, comprehensions: usize) -> Result<(), String> {
        self.shape.nodes += 1;
        self.shape.depth = self.shape.depth.max(depth);
        if self.shape.nodes > self.limits.max_nodes {
            return Err(format!(
                "expression is too large: more than {} nodes",
                self.limits.max_nodes
            ));
        }
        if depth > self.limits.max_depth {
            return Err(format!(
                "expression is nested too deeply: more than {} levels",
                self.limits.max_depth
            ));
        }
        let next = depth + 1;
        match &e.expr {
            Expr::Unspecified => return Err("expression is incomplete".to_string()),
            Expr::Struct(s) => {
                return Err(format!(
                    "message literals ({}{{...}}) are not supported",
                    s.type_name
                ))
            }
            Expr::Literal(_) => {}
            Expr::Ident(name) => self.ident(name),
            Expr::Select(select) => {
                if let Expr::Ident(name) = &select.operand.expr {
                    if name == "variables" && !self.is_bound(name) {
                        self.shape.policy_variables.insert(select.field.clone());
                    }
                }
                self.walk(&select.operand, next, comprehensions)?;
            }
            Expr::Call(call) => {
                // `variables['name']`
                if call.func_name == "_[_]" && call.args.len() == 2 {
                    if let (Expr::Ident(name), Expr::Literal(lit)) =
                        (&call.args[0].expr, &call.args[1].expr)
                    {
                        if name == "variables" && !self.is_bound(name) {
                            if let kube_cel::cel::common::ast::LiteralValue::String(s) = lit {
                                self.shape.policy_variables.insert(s.inner().to_string());
                            }
                        }
                    }
                }
                if let Some(target) = &call.target {
                    // `sets.contains(...)`, `optional.none()`: a namespace,
                    // not a variable.
                    if !matches!(target.expr, Expr::Ident(_)) {
                        self.walk(target, next, comprehensions)?;
                    } else {
                        self.shape.nodes += 1;
                        if let Expr::Ident(name) = &target.expr {
                            if crate::cel::BUILTIN_VARIABLES.contains(&name.as_str()) {
                                self.ident(name);
                            }
                        }
                    }
                }
                for arg in &call.args {
                    self.walk(arg, next, comprehensions)?;
                }
            }
            Expr::List(list) => {
                for item in &list.elements {
                    self.walk(item, next, comprehensions)?;
                }
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(m) => {
                            self.walk(&m.key, next, comprehensions)?;
                            self.walk(&m.value, next, comprehensions)?;
                        }
                        EntryExpr::StructField(_) => {
                            return Err("message literals are not supported".to_string())
                        }
                    }
                }
            }
            Expr::Comprehension(c) => {
                let nested = comprehensions + 1;
                if nested > self.limits.max_comprehension_nesting {
                    return Err(format!(
                        "comprehensions are nested too deeply: more than {} levels",
                        self.limits.max_comprehension_nesting
                    ));
                }
                self.walk(&c.iter_range, next, comprehensions)?;
                self.walk(&c.accu_init, next, comprehensions)?;
                let before = self.bound.len();
                self.bound.push(c.iter_var.clone());
                if let Some(v2) = &c.iter_var2 {
                    self.bound.push(v2.clone());
                }
                self.bound.push(c.accu_var.clone());
                let result = self
                    .walk(&c.loop_cond, next, nested)
                    .and_then(|_| self.walk(&c.loop_step, next, nested))
                    .and_then(|_| self.walk(&c.result, next, nested));
                self.bound.truncate(before);
                result?;
            }
        }
        Ok(())
    }

    fn is_bound(&self, name: &str) -> bool {
        self.bound.iter().any(|b| b == name)
    }

    fn ident(&mut self, name: &str) {
        if !self.is_bound(name) {
            self.shape.free_variables.insert(name.to_string());
        }
    }
}
