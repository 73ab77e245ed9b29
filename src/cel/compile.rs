//! Compiling an expression: parsed once at load, checked to be safe to
//! evaluate (bounded size, depth and comprehension nesting, known
//! variables and functions), and what it reads worked out.
use super::env::Env;
use super::limits::{self, Limits};
use super::schema::Parsed;
use super::{signatures, variables, Reach};
use kube_cel::cel::common::ast::SourceInfo;
use kube_cel::cel::objects::TypeValue;
use kube_cel::cel::parser::{Expression, Parser};
use std::collections::BTreeSet;

/// One expression, parsed and checked at load: its text, its tree and
/// what it reads. A value: nothing is written into it after compilation
/// (what the policy engine works out from it lives in its plan).
#[derive(Debug)]
pub struct Compiled {
    source: String,
    ast: Expression,
    /// Top-level variables the expression refers to.
    variables: BTreeSet<String>,
    /// Names of `variables.<name>` the expression refers to.
    policy_variables: BTreeSet<String>,
    /// Whether the expression reads `variables` whole, which then has to
    /// be built as a map (see [`variables`](super::variables)).
    reads_variables_map: bool,
}

impl Compiled {
    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The expression's tree, as written (with `variables.<name>` reads
    /// rewritten, see [`variables`](super::variables)).
    pub fn tree(&self) -> &Expression {
        &self.ast
    }

    /// Top-level variables the expression refers to.
    pub fn variables(&self) -> &BTreeSet<String> {
        &self.variables
    }

    /// Whether the expression refers to the top-level variable `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.variables.contains(name)
    }

    /// Names of the policy's `variables.<name>` the expression refers to.
    pub fn policy_variables(&self) -> &BTreeSet<String> {
        &self.policy_variables
    }

    /// Whether the expression reads `variables` whole, not only
    /// `variables.<name>`.
    pub fn reads_variables_map(&self) -> bool {
        self.reads_variables_map
    }

    /// Adds to `reach` what this expression can reach of the variable
    /// `root` (`object`, `oldObject` or `namespaceObject`).
    pub fn add_reach(&self, reach: &mut Reach, root: &str) {
        if self.variables.contains(root) {
            reach.add(&self.ast, root);
        }
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
    compile_with_limits(env, source, env.limits()).map(|(compiled, _)| compiled)
}

/// [`compile_here`], with the expression as written (its tree before any
/// rewriting, and the positions of its parts) for type checking: the one
/// parse serves both, where parsing is most of what compiling costs.
pub fn compile_written(env: &Env, source: &str) -> Result<(Compiled, Parsed), CompileError> {
    compile_with_limits(env, source, env.limits())
}

/// [`compile_written`] for a MutatingAdmissionPolicy mutation: message
/// literals (`JSONPatch{...}`, `Object{...}`) are allowed and evaluate to
/// maps of their fields.
pub fn compile_mutation_written(
    env: &Env,
    source: &str,
) -> Result<(Compiled, Parsed), CompileError> {
    let limits = Limits {
        message_literals: true,
        ..env.limits().clone()
    };
    compile_with_limits(env, source, &limits)
}

/// Compiles `source`, and gives the tree as parsed too (before
/// [`variables::inline_references`] rewrites it), with its positions: a
/// copy of the tree costs little beside parsing it.
fn compile_with_limits(
    env: &Env,
    source: &str,
    limits: &Limits,
) -> Result<(Compiled, Parsed), CompileError> {
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
    let (ast, positions) = Parser::new()
        .max_recursion_depth(limits.max_depth as u16)
        .enable_optional_syntax(true)
        .parse_with_positions(source)
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
    signatures::check_calls(&shape.calls, source, &|name| env.has_function(name))?;
    homogeneous_literals(&ast, &positions)?;
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
    let written = Parsed::of(ast.clone(), positions);
    let reads_variables_map = variables::inline_references(&mut ast);
    let compiled = Compiled {
        source: source.to_string(),
        ast,
        variables,
        policy_variables: shape.policy_variables,
        reads_variables_map,
    };
    Ok((compiled, written))
}

/// Refuses an aggregate literal whose elements (a list's) or keys or
/// values (a map's) differ in type, as kube-apiserver's type checker does
/// (cel-go's homogeneous aggregate literals): `[1, 'a']`, `{'a': 1, 'b':
/// 'c'}`, at the first that differs. Only types known without a schema
/// count; one of type `dyn` (a field of `object`...) joins with any.
fn homogeneous_literals(e: &Expression, positions: &SourceInfo) -> Result<(), CompileError> {
    let (_, found) =
        super::schema::check_tree(e, positions, &Default::default(), &Default::default());
    match found.into_iter().find(|f| f.literal) {
        Some(f) => Err(CompileError {
            message: f.message,
            line: Some(f.line).filter(|l| *l > 0),
            column: Some(f.column).filter(|c| *c > 0),
        }),
        None => Ok(()),
    }
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
