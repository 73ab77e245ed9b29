//! Static limits on expressions, checked once at load so that nothing in a
//! policy file can exhaust the stack or run away at evaluation time.
use kube_cel::cel::common::ast::{EntryExpr, Expr};
use kube_cel::cel::objects::TypeValue;
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
    /// Whether message literals (`JSONPatch{...}`, `Object.spec{...}`) are
    /// allowed: only in MutatingAdmissionPolicy mutations, where they build
    /// patches and apply configurations (they evaluate to maps).
    pub message_literals: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_source_len: 4096,
            max_nodes: 2000,
            max_depth: 48,
            max_comprehension_nesting: 3,
            message_literals: false,
        }
    }
}

/// Runs of two or more unary operators (`!!`, `--`, `! -`) an expression
/// may hold.
const MAX_REPEATED_UNARY_RUNS: usize = 4;

/// Checks the source text before it is parsed. Each run of repeated unary
/// operators before a nested group (`!!(`, `--[`, `! ! f(`) multiplies the
/// parser's adaptive prediction time (about 1.4 times per run: 32 runs of
/// `!!(` take a third of a second, 48 a minute), while one long run alone
/// (`!!!!!!!!true`, a conformance case) parses in linear time. So a few runs
/// are allowed, of any length, and more are refused here.
pub fn check_source(source: &str) -> Result<(), String> {
    let bytes = source.as_bytes();
    let mut i = 0;
    // Whether the last token ends an operand (so a following `-` is binary).
    let mut after_operand = false;
    // Unary operators in a row, and runs of two or more so far.
    let mut unary_run = 0;
    let mut runs = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'\'' | b'"' => {
                i = skip_string(bytes, i);
                after_operand = true;
                unary_run = 0;
                continue;
            }
            b'!' if bytes.get(i + 1) != Some(&b'=') => {
                unary_run += 1;
                after_operand = false;
            }
            b'-' if !after_operand => {
                unary_run += 1;
            }
            _ => {
                unary_run = 0;
                after_operand = c.is_ascii_alphanumeric() || matches!(c, b'_' | b')' | b']' | b'}');
            }
        }
        if unary_run == 2 {
            runs += 1;
            if runs > MAX_REPEATED_UNARY_RUNS {
                return Err(format!(
                    "more than {MAX_REPEATED_UNARY_RUNS} runs of repeated unary operators (such as `!!` or `- -`): they change nothing and make the parser slow"
                ));
            }
        }
        i += 1;
    }
    Ok(())
}

/// Index just past the string literal starting at `start` (a quote).
fn skip_string(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    let raw = start > 0 && matches!(bytes[start - 1], b'r' | b'R');
    let mut i = start + if triple { 3 } else { 1 };
    while i < bytes.len() {
        if bytes[i] == b'\\' && !raw {
            i += 2;
            continue;
        }
        if bytes[i] == quote {
            if !triple {
                return i + 1;
            }
            if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                return i + 3;
            }
        }
        i += 1;
    }
    bytes.len()
}

/// What the checker learned about an accepted expression.
#[derive(Debug, Default)]
pub struct Shape {
    pub nodes: usize,
    pub depth: usize,
    /// Identifiers not bound by a comprehension.
    pub free_variables: BTreeSet<String>,
    /// Identifiers used as call targets (`x.f()`): a variable, or a
    /// function namespace such as `sets` in `sets.contains(...)`.
    pub call_targets: BTreeSet<String>,
    /// `<name>` in `variables.<name>` / `variables['<name>']`.
    pub policy_variables: BTreeSet<String>,
    /// Every call of a named function (operators left out), in order.
    pub calls: Vec<Call>,
}

/// A call of a named function, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub function: String,
    /// The identifier before the dot when the target is one that no
    /// comprehension binds: a variable, or a namespace (`sets` in
    /// `sets.contains(a, b)`).
    pub namespace: Option<String>,
    /// Called on a target (`x.f()`), not as `f(x)`.
    pub has_target: bool,
    pub args: usize,
}

/// The iteration variable of the comprehension `cel.bind` expands to.
const BIND_ITER_VAR: &str = "#unused";

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
            Expr::Struct(s) if !self.limits.message_literals => {
                return Err(format!(
                    "message literals ({}{{...}}) are only available in the mutations of a MutatingAdmissionPolicy",
                    s.type_name
                ))
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    match &entry.expr {
                        EntryExpr::StructField(f) => self.walk(&f.value, next, comprehensions)?,
                        EntryExpr::MapEntry(_) => {
                            return Err("a message literal holds fields, not map entries".into())
                        }
                    }
                }
            }
            Expr::Literal(_) => {}
            Expr::Ident(name) => self.ident(name),
            // A qualified type name (`net.IP`): no variable.
            Expr::Select(_)
                if TypeValue::denoted_by(&e.expr).is_some_and(|(_, root)| !self.is_bound(root)) => {}
            Expr::Select(select) => {
                if let Expr::Ident(name) = &select.operand.expr {
                    if name == "variables" && !self.is_bound(name) {
                        self.shape.policy_variables.insert(select.field.clone());
                    }
                }
                self.walk(&select.operand, next, comprehensions)?;
            }
            Expr::Call(call) => {
                // `variables['name']`, `variables[?'name']`, `variables.?name`
                if matches!(call.func_name.as_str(), "_[_]" | "_[?_]" | "_?._")
                    && call.args.len() == 2
                {
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
                if call
                    .func_name
                    .starts_with(|c: char| c.is_ascii_alphabetic())
                {
                    let namespace = match call.target.as_ref().map(|t| &t.expr) {
                        Some(Expr::Ident(name)) if !self.is_bound(name) => Some(name.clone()),
                        _ => None,
                    };
                    self.shape.calls.push(Call {
                        function: call.func_name.clone(),
                        namespace,
                        has_target: call.target.is_some(),
                        args: call.args.len(),
                    });
                }
                if let Some(target) = &call.target {
                    // `sets.contains(...)`, `optional.none()`: a namespace,
                    // not a variable.
                    if !matches!(target.expr, Expr::Ident(_)) {
                        self.walk(target, next, comprehensions)?;
                    } else {
                        self.shape.nodes += 1;
                        if let Expr::Ident(name) = &target.expr {
                            if !self.is_bound(name) {
                                self.shape.call_targets.insert(name.clone());
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
                // `cel.bind` expands to a comprehension over nothing: it
                // binds a name and repeats nothing, so it does not nest.
                let nested = if c.iter_var == BIND_ITER_VAR {
                    comprehensions
                } else {
                    comprehensions + 1
                };
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

#[cfg(test)]
mod tests {
    use super::check_source;

    #[test]
    fn repeated_unary_operators_are_refused_before_parsing() {
        for bad in [
            "!!(!!!!!!(!!!!(((((!!(!!(!!!!((1",
            "!!x || !!y || --1 == 1 || ! ! (x) || 1 + - -1 == 0",
            "!-(!!(!!(!!(!!(x)))))",
        ] {
            assert!(check_source(bad).is_err(), "{bad}");
        }
        for good in [
            "!!x",
            "! ! (x)",
            "--1",
            "1 + - -1",
            "!-x",
            "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!true",
            "--------------------------------19",
            "!!a && !!b && --c == 1 && !!(d)",
            "!x && !(y)",
            "a - -1",
            "x != 1 && !y",
            "a-1 == -2",
            "[1, -2].all(v, v != -3)",
            r#"'!!--' == "!!" && r'\!!' != '''--!!''' && "\"--" != ''"#,
            "f(x)-1 > a[0]-1",
        ] {
            assert_eq!(check_source(good), Ok(()), "{good}");
        }
    }
}
