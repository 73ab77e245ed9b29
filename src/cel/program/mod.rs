//! A compiled form of an expression: its tree once more, with what the
//! interpreter works out at every node worked out at load. Operators are
//! resolved to their code, comprehension variables to slots, literals to
//! values; results are held unboxed (scalars by value, strings borrowed
//! where they stand, lists built here as the program's own), and `size`,
//! `string`, `join`, `startsWith`, `endsWith` and `matches` (a literal
//! pattern, compiled at load) are done here, as are the functions an
//! extension implements natively ([`Native`]: the SKU-set functions) and
//! the parts of an expression worked out once per params object
//! ([`super::fold`]). Every other subtree (other
//! function calls, the optional syntax, message literals, type names) is
//! handed whole to the interpreter, with the comprehension variables it
//! reads bound for it.
//!
//! A program reads `object`, `oldObject` and `namespaceObject` from the
//! request's JSON in place ([`Roots`]), and a policy's variables as the
//! policy keeps them ([`VariableSource`]): in the form the program that
//! worked each out left it ([`Computed`]), so that a list of the object's
//! containers a variable filters stays references into the request.
//!
//! A program gives what the interpreter gives for the same tree and scope:
//! the same value or the same error, having charged the same cost units at
//! the same nodes and nested as deep (each node is charged through the
//! interpreter's own budget, [`DepthGuard::node`]). The interpreter is the
//! reference it is tested against: the unit tests below and
//! `tests/plan_passes.rs` evaluate expressions both ways.
mod run;
mod value;

use super::evaluate::{eval_error, EvalError};
use super::limits::EXPRESSION_COST_LIMIT;
use kube_cel::cel::budget;
#[cfg(doc)]
use kube_cel::cel::budget::DepthGuard;
use kube_cel::cel::common::ast::{operators, EntryExpr, Expr, LiteralValue};
use kube_cel::cel::common::value::Val;
use kube_cel::cel::context::VariableResolver;
use kube_cel::cel::objects::TypeValue;
use kube_cel::cel::parser::Expression;
use kube_cel::cel::{Context, Value};
use std::collections::BTreeSet;
use value::{Arith, V};

/// An expression compiled for evaluation ([`Program::build`]).
pub struct Program {
    root: Node,
    /// Slots of comprehension variables.
    locals: usize,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("locals", &self.locals)
            .field("interpreted", &self.interpreted())
            .finish()
    }
}

/// One node: the interpreter's node of the same place, resolved.
enum Node {
    Lit(LiteralValue),
    /// A comprehension's variable.
    Local(usize),
    /// A comprehension's accumulator read by the step that replaces it
    /// (`@result + [x]`): taken out of its slot, so the list grows in place.
    TakeLocal(usize),
    /// A variable of the scope, by name; `object`, `oldObject` and
    /// `namespaceObject` read from the request's JSON, a host variable
    /// from its tree, when the evaluation has them ([`Roots`]).
    Root(Box<str>, InPlace),
    /// A policy variable, by its identifier ([`super::variables::ident`]):
    /// read as the policy keeps it when the evaluation has the policy's
    /// variables ([`PolicyVariables`]), else from the scope.
    Variable(Box<str>),
    /// A subtree the interpreter evaluates.
    Interp(Box<Interp>),
    Select(Box<Node>, Box<str>, bool),
    Not(Box<Node>),
    Neg(Box<Node>),
    NotStrictlyFalse(Box<Node>),
    And(Box<[Node; 2]>),
    Or(Box<[Node; 2]>),
    Cond(Box<[Node; 3]>),
    /// `==` (false) or `!=` (true).
    Eq(Box<[Node; 2]>, bool),
    Cmp(Box<[Node; 2]>, Cmp),
    Arith(Box<[Node; 2]>, Arith),
    In(Box<[Node; 2]>),
    Index(Box<[Node; 2]>),
    List(Vec<Node>),
    Map(Vec<[Node; 2]>),
    Comprehension(Box<Comprehension>),
    /// `size(x)` (false) or `x.size()` (true).
    Size(Box<Node>, bool),
    /// `string(x)`.
    StringOf(Box<Node>),
    /// `list.join()` or `list.join(separator)`.
    Join(Box<Join>),
    /// `s.startsWith(p)`, `s.endsWith(p)` or `s.matches('pattern')`, with
    /// the argument's tree and the comprehension variables it reads, for
    /// the interpreter's function when the receiver is not a string.
    StrTest(Box<StrTest>),
    /// A function an extension implements natively, with its arguments.
    Native(Box<NativeCall>),
    /// A part worked out once per params object ([`super::fold`]),
    /// `@paramsConstant(<ident>)`: read where the evaluation bound it.
    Constant(Box<Constant>),
}

/// `@paramsConstant(<ident>)`: the part bound as `ident`, and the call
/// for the interpreter should the scope hold no part by that name.
struct Constant {
    ident: Box<str>,
    call: Box<Interp>,
}

/// A function a program calls on its own values, where the interpreter
/// would convert each argument into its form (copying a list of SKU
/// names to narrow it, and the narrowed list again): registered by an
/// extension ([`super::Extension::natives`]) beside the interpreter's
/// form of the same function, with the same answers, errors and units.
#[derive(Clone, Debug)]
pub enum Native {
    /// `azure.skusIn`, `azure.skusNotIn`, `azure.skusWhere`,
    /// `azure.skusBelow`.
    SkuSet(super::sku_sets::SkuSetFn),
}

impl Native {
    fn arity(&self) -> usize {
        match self {
            Native::SkuSet(f) => f.function.arity(),
        }
    }
}

struct NativeCall {
    native: Native,
    args: Vec<Node>,
}

/// Where a program reads a variable of the scope in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InPlace {
    Object,
    OldObject,
    Namespace,
    /// A host variable ([`Roots::hosts`]) by its name.
    Host,
}

/// What a program reads in place instead of from the scope: the
/// request's JSON behind `object`, `oldObject` and `namespaceObject`, and
/// the trees of host variables (`gpu`). `None`, or a host variable not
/// held, is read from the scope, as the interpreter reads it. Each must
/// be what the scope's variable is (or would be) converted from: `null`
/// JSON for an absent object.
#[derive(Clone, Copy, Debug)]
pub struct Roots<'r> {
    pub object: Option<&'r serde_json::Value>,
    pub old_object: Option<&'r serde_json::Value>,
    pub namespace: Option<&'r serde_json::Value>,
    pub hosts: &'r super::Hosts,
}

/// A policy's variables as its expressions read them: each worked out on
/// its first read and kept, in a program's form for programs and, once
/// the interpreter reads it, in the interpreter's form too. A variable
/// whose evaluation failed is unbound: reading it is an undeclared
/// reference, as in the interpreter.
pub trait VariableSource<'a>: Sync {
    /// The value of the variable spelled `ident` (`variables.<name>`),
    /// when it is declared before position `before` and evaluated.
    fn value(&'a self, ident: &str, before: usize) -> Option<&'a Computed<'a>>;
    /// The same value in the interpreter's form.
    fn val(&'a self, ident: &str, before: usize) -> Option<&'a dyn Val>;
}

/// The variables an expression reads: those of `source` declared before
/// position `before` (a variable reads those declared before it, as in
/// kube-apiserver). Also the interpreter's resolver of them.
#[derive(Clone, Copy)]
pub struct PolicyVariables<'r> {
    pub source: &'r dyn VariableSource<'r>,
    pub before: usize,
}

impl std::fmt::Debug for PolicyVariables<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyVariables")
            .field("before", &self.before)
            .finish_non_exhaustive()
    }
}

impl VariableResolver for PolicyVariables<'_> {
    fn resolve(&self, _: &str) -> Option<Value> {
        None
    }

    fn resolve_val(&self, ident: &str) -> Option<&dyn Val> {
        self.source.val(ident, self.before)
    }
}

/// A value a program worked out, held in the program's form: what a
/// policy variable keeps between the expressions that read it (a list of
/// the object's containers stays a list of references into the request's
/// JSON, not a converted copy).
#[derive(Clone, Debug)]
pub struct Computed<'a>(V<'a>);

impl<'a> Computed<'a> {
    /// A value in the interpreter's form.
    pub fn from_val(v: Box<dyn Val>) -> Computed<'a> {
        Computed(V::from_box(v))
    }

    /// The value, borrowed from this one where it holds its own (a
    /// string, a value of the interpreter's): cheap to take for each read.
    pub fn view(&self) -> Computed<'_> {
        Computed(self.0.view())
    }

    /// The value in the interpreter's form.
    pub fn to_val(&self) -> Box<dyn Val> {
        self.0.to_box()
    }

    /// The value as a [`Value`].
    pub fn to_value(&self) -> Result<Value, EvalError> {
        self.0.to_value().map_err(|e| eval_error(e, 0))
    }
}

impl<'r> Roots<'r> {
    /// Every variable read from the scope.
    pub const SCOPE: Roots<'static> = Roots {
        object: None,
        old_object: None,
        namespace: None,
        hosts: super::Hosts::NONE,
    };

    /// The variable `name`, read at `place` when it is there.
    #[inline]
    fn read(&self, place: InPlace, name: &str) -> Option<V<'r>> {
        match place {
            InPlace::Object => self.object.map(V::from_json),
            InPlace::OldObject => self.old_object.map(V::from_json),
            InPlace::Namespace => self.namespace.map(V::from_json),
            InPlace::Host => self.hosts.get(name).map(|tree| V::from_tree(tree)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    Less,
    LessEquals,
    Greater,
    GreaterEquals,
}

struct Interp {
    expr: Expression,
    /// The comprehension variables the subtree reads: name and slot.
    locals: Vec<(String, usize)>,
    /// Whether it reads a policy variable.
    variables: bool,
}

struct Comprehension {
    iter_range: Node,
    iter_var: usize,
    iter_var2: Option<usize>,
    accu_var: usize,
    accu_init: Node,
    loop_cond: Node,
    loop_step: Node,
    result: Node,
    /// The step is `accu && p` or `accu || p` (`all`, `exists`): an
    /// element's error is kept as the accumulator.
    folds_logically: bool,
    /// `all` (`Some(false)`: an element that is false decides) or `exists`
    /// (`Some(true)`) as the macros write them: each iteration's condition
    /// and step are worked out without evaluating their nodes, only `p`.
    quantifier: Option<bool>,
}

impl Comprehension {
    /// Whether this is `all` or `exists` as the macros write them: the
    /// condition `@not_strictly_false(@result)` (`!@result` for exists),
    /// the step `@result && p` (`||`) with `p` not reading `@result`, the
    /// result `@result`. `Some(decides)`: the value of `p` that decides.
    fn quantifier(&self) -> Option<bool> {
        let accu = |n: &Node| matches!(n, Node::Local(s) if *s == self.accu_var);
        let (decides, step) = match &self.loop_step {
            Node::And(step) => (false, step),
            Node::Or(step) => (true, step),
            _ => return None,
        };
        let Node::NotStrictlyFalse(cond) = &self.loop_cond else {
            return None;
        };
        let cond = match (decides, &**cond) {
            (false, read) => accu(read),
            (true, Node::Not(read)) => accu(read),
            (true, _) => false,
        };
        let p = &step[1];
        (cond && accu(&step[0]) && !p.reads_slot(self.accu_var) && accu(&self.result))
            .then_some(decides)
    }
}

/// A call whose arguments the interpreter's function evaluates itself when
/// the program hands the call to it: their trees and the comprehension
/// variables they read.
struct Args {
    trees: Vec<Expression>,
    locals: Vec<(String, usize)>,
    /// Whether they read a policy variable.
    variables: bool,
}

struct Join {
    target: Node,
    separator: Option<Node>,
    args: Args,
}

struct StrTest {
    test: Test,
    target: Node,
    arg: Node,
    args: Args,
}

/// What a [`StrTest`] asks of its receiver.
enum Test {
    StartsWith,
    EndsWith,
    /// `matches` with a literal pattern: compiled at load, as the
    /// interpreter's function compiles it (the `regex` crate, its
    /// defaults), where the function compiles it on its first call on
    /// each thread and finds it again by the pattern's text on every one.
    Matches(regex::Regex),
}

impl Test {
    /// The interpreter's function.
    fn name(&self) -> &'static str {
        match self {
            Test::StartsWith => "startsWith",
            Test::EndsWith => "endsWith",
            Test::Matches(_) => "matches",
        }
    }
}

impl Program {
    /// The program of `tree`, an expression compiled at load. `known`:
    /// whether a name is a variable of the scopes it is evaluated in;
    /// `has_function`: whether a function of this name is registered;
    /// `native`: its native form, when it has one.
    /// `None` where a program could not give the interpreter's answer (an
    /// accumulated error an `all` or `exists` would hand to the
    /// interpreter): such an expression is left to the interpreter.
    pub fn build(
        tree: &Expression,
        known: &dyn Fn(&str) -> bool,
        has_function: &dyn Fn(&str) -> bool,
        native: &dyn Fn(&str) -> Option<Native>,
    ) -> Option<Program> {
        let mut builder = Builder {
            known,
            has_function,
            native,
            scopes: Vec::new(),
            logical: Vec::new(),
            slots: 0,
        };
        let root = builder.node(tree)?;
        Some(Program {
            root,
            locals: builder.slots,
        })
    }

    /// Evaluates the program in `ctx` as [`super::evaluate`] evaluates its
    /// tree: within [`EXPRESSION_COST_LIMIT`] units of the enclosing
    /// budget, the result as a [`Value`].
    pub fn evaluate(&self, ctx: &Context, roots: &Roots<'_>) -> Result<Value, EvalError> {
        let (result, used) = budget::with_budget(EXPRESSION_COST_LIMIT, || {
            run::run(self, ctx, *roots, None).and_then(|v| v.to_val().as_ref().try_into())
        });
        result.map_err(|e| eval_error(e, used))
    }

    /// [`Program::evaluate`] keeping the result in the interpreter's form,
    /// with the cost units used, as [`super::evaluate_val`].
    pub fn evaluate_val(
        &self,
        ctx: &Context,
        roots: &Roots,
    ) -> (Result<Box<dyn Val>, EvalError>, u64) {
        let (result, used) = budget::with_budget(EXPRESSION_COST_LIMIT, || {
            run::run(self, ctx, *roots, None).map(|v| v.into_box())
        });
        (result.map_err(|e| eval_error(e, used)), used)
    }

    /// [`Program::evaluate`] keeping the result in the program's form, to
    /// be read by later programs: what it borrows from the program, the
    /// scope and `roots` stays borrowed. With `variables`, the policy's
    /// variables are read as they are kept, else from the scope. Also
    /// answers the cost units it used.
    pub fn compute<'a>(
        &'a self,
        ctx: &'a Context<'a>,
        roots: Roots<'a>,
        variables: Option<PolicyVariables<'a>>,
    ) -> (Result<Computed<'a>, EvalError>, u64) {
        let (result, used) = budget::with_budget(EXPRESSION_COST_LIMIT, || {
            run::run(self, ctx, roots, variables)
        });
        (result.map(Computed).map_err(|e| eval_error(e, used)), used)
    }

    /// The trees the interpreter may evaluate for this program (subtrees,
    /// and arguments of the functions the program hands calls to), in the
    /// scope: what they reach of `object` is all the scope must hold.
    pub fn interpreted_trees(&self) -> Vec<&Expression> {
        fn walk<'p>(n: &'p Node, out: &mut Vec<&'p Expression>) {
            match n {
                Node::Interp(i) => out.push(&i.expr),
                Node::Constant(c) => out.push(&c.call.expr),
                Node::StrTest(t) => out.extend(&t.args.trees),
                Node::Join(j) => out.extend(&j.args.trees),
                _ => {}
            }
            n.children(&mut |c| walk(c, out));
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }

    /// How many of its nodes the interpreter evaluates whole.
    pub fn interpreted(&self) -> usize {
        fn count(n: &Node) -> usize {
            let mut sum = usize::from(matches!(n, Node::Interp(_)));
            n.children(&mut |c| sum += count(c));
            sum
        }
        count(&self.root)
    }
}

impl Node {
    /// Whether the tree reads comprehension slot `slot` (itself, or a
    /// subtree or arguments handed to the interpreter).
    fn reads_slot(&self, slot: usize) -> bool {
        let named = |locals: &[(String, usize)]| locals.iter().any(|(_, s)| *s == slot);
        let here = match self {
            Node::Local(s) | Node::TakeLocal(s) => *s == slot,
            Node::Interp(i) => named(&i.locals),
            Node::Constant(c) => named(&c.call.locals),
            Node::StrTest(t) => named(&t.args.locals),
            Node::Join(j) => named(&j.args.locals),
            _ => false,
        };
        let mut below = false;
        self.children(&mut |c| below |= c.reads_slot(slot));
        here || below
    }

    /// Calls `visit` on each child node.
    fn children<'n>(&'n self, visit: &mut dyn FnMut(&'n Node)) {
        match self {
            Node::Interp(_) | Node::Lit(_) | Node::Local(_) | Node::TakeLocal(_) => {}
            Node::Constant(_) => {}
            Node::Root(..) | Node::Variable(_) => {}
            Node::Select(o, _, _)
            | Node::Not(o)
            | Node::Neg(o)
            | Node::NotStrictlyFalse(o)
            | Node::Size(o, _)
            | Node::StringOf(o) => visit(o),
            Node::And(p)
            | Node::Or(p)
            | Node::Eq(p, _)
            | Node::Cmp(p, _)
            | Node::Arith(p, _)
            | Node::In(p)
            | Node::Index(p) => p.iter().for_each(visit),
            Node::Cond(p) => p.iter().for_each(visit),
            Node::List(items) => items.iter().for_each(visit),
            Node::Map(entries) => entries.iter().flatten().for_each(visit),
            Node::Comprehension(c) => [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]
            .into_iter()
            .for_each(visit),
            Node::StrTest(t) => {
                visit(&t.target);
                visit(&t.arg);
            }
            Node::Native(n) => n.args.iter().for_each(visit),
            Node::Join(j) => {
                visit(&j.target);
                j.separator.iter().for_each(visit);
            }
        }
    }
}

struct Builder<'f> {
    known: &'f dyn Fn(&str) -> bool,
    has_function: &'f dyn Fn(&str) -> bool,
    native: &'f dyn Fn(&str) -> Option<Native>,
    /// Comprehension variables in scope where the builder is: name and
    /// slot, innermost last.
    scopes: Vec<(String, usize)>,
    /// Slots of the accumulators of logically folding comprehensions in
    /// scope: never handed to the interpreter.
    logical: Vec<usize>,
    slots: usize,
}

impl Builder<'_> {
    fn local(&self, name: &str) -> Option<usize> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, slot)| *slot)
    }

    fn slot(&mut self) -> usize {
        self.slots += 1;
        self.slots - 1
    }

    /// `e` for the interpreter, with the comprehension variables it reads.
    fn interp(&mut self, e: &Expression) -> Option<Node> {
        let Args {
            mut trees,
            locals,
            variables,
        } = self.args(std::slice::from_ref(e))?;
        Some(Node::Interp(Box::new(Interp {
            expr: trees.pop()?,
            locals,
            variables,
        })))
    }

    fn two(&mut self, a: &Expression, b: &Expression) -> Option<Box<[Node; 2]>> {
        Some(Box::new([self.node(a)?, self.node(b)?]))
    }

    fn node(&mut self, e: &Expression) -> Option<Node> {
        match &e.expr {
            Expr::Literal(l) => Some(Node::Lit(l.clone())),
            Expr::Ident(name) => match self.local(name) {
                Some(slot) => Some(Node::Local(slot)),
                None if super::variables::name(name).is_some() => {
                    Some(Node::Variable(name.as_str().into()))
                }
                None if (self.known)(name) => {
                    let place = match name.as_str() {
                        "object" => InPlace::Object,
                        "oldObject" => InPlace::OldObject,
                        "namespaceObject" => InPlace::Namespace,
                        _ => InPlace::Host,
                    };
                    Some(Node::Root(name.as_str().into(), place))
                }
                None => self.interp(e),
            },
            Expr::Select(select) => {
                // A qualified type name: the interpreter tells it from a
                // variable's field.
                let denotes_type = TypeValue::denoted_by(&e.expr)
                    .is_some_and(|(_, root)| self.local(root).is_none());
                if denotes_type {
                    return self.interp(e);
                }
                let operand = self.node(&select.operand)?;
                Some(Node::Select(
                    Box::new(operand),
                    select.field.as_str().into(),
                    select.test,
                ))
            }
            Expr::List(list) if list.optional_indices.is_empty() => Some(Node::List(
                list.elements
                    .iter()
                    .map(|x| self.node(x))
                    .collect::<Option<_>>()?,
            )),
            Expr::Map(map) => {
                let mut entries = Vec::with_capacity(map.entries.len());
                for entry in &map.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(m) if !m.optional => {
                            entries.push([self.node(&m.key)?, self.node(&m.value)?])
                        }
                        _ => return self.interp(e),
                    }
                }
                Some(Node::Map(entries))
            }
            Expr::Comprehension(c) => {
                let iter_range = self.node(&c.iter_range)?;
                let accu_init = self.node(&c.accu_init)?;
                let folds_logically = matches!(&c.loop_step.expr, Expr::Call(call)
                    if call.args.len() == 2
                        && (call.func_name == operators::LOGICAL_AND
                            || call.func_name == operators::LOGICAL_OR));
                let (iter_var, accu_var) = (self.slot(), self.slot());
                let iter_var2 = c.iter_var2.as_ref().map(|_| self.slot());
                let before = self.scopes.len();
                self.scopes.push((c.iter_var.clone(), iter_var));
                if let (Some(name), Some(slot)) = (&c.iter_var2, iter_var2) {
                    self.scopes.push((name.clone(), slot));
                }
                self.scopes.push((c.accu_var.clone(), accu_var));
                if folds_logically {
                    self.logical.push(accu_var);
                }
                let built = (|| {
                    let loop_cond = self.node(&c.loop_cond)?;
                    let loop_step = self.step(&c.loop_step, &c.accu_var, accu_var)?;
                    let result = self.node(&c.result)?;
                    Some((loop_cond, loop_step, result))
                })();
                self.scopes.truncate(before);
                if folds_logically {
                    self.logical.pop();
                }
                let (loop_cond, loop_step, result) = built?;
                let mut c = Comprehension {
                    iter_range,
                    iter_var,
                    iter_var2,
                    accu_var,
                    accu_init,
                    loop_cond,
                    loop_step,
                    result,
                    folds_logically,
                    quantifier: None,
                };
                c.quantifier = c.quantifier();
                Some(Node::Comprehension(Box::new(c)))
            }
            Expr::Call(call) => self.call(e, call),
            _ => self.interp(e),
        }
    }

    /// A comprehension's step: `accu + [x]` (or a `?:` with it in a
    /// branch) grows the accumulator in place.
    fn step(&mut self, e: &Expression, accu: &str, slot: usize) -> Option<Node> {
        let Expr::Call(call) = &e.expr else {
            return self.node(e);
        };
        let reads_accu = |x: &Expression| {
            let mut free = BTreeSet::new();
            free_names(x, &mut Vec::new(), &mut free);
            free.contains(accu)
        };
        if call.target.is_none()
            && call.args.len() == 2
            && call.func_name == operators::ADD
            && matches!(&call.args[0].expr, Expr::Ident(n) if n == accu)
            && !reads_accu(&call.args[1])
        {
            let rhs = self.node(&call.args[1])?;
            return Some(Node::Arith(
                Box::new([Node::TakeLocal(slot), rhs]),
                Arith::Add,
            ));
        }
        if call.target.is_none() && call.args.len() == 3 && call.func_name == operators::CONDITIONAL
        {
            let cond = self.node(&call.args[0])?;
            let then = self.step(&call.args[1], accu, slot)?;
            let otherwise = self.step(&call.args[2], accu, slot)?;
            return Some(Node::Cond(Box::new([cond, then, otherwise])));
        }
        self.node(e)
    }

    fn call(
        &mut self,
        e: &Expression,
        call: &kube_cel::cel::common::ast::CallExpr,
    ) -> Option<Node> {
        let args = &call.args;
        let name = call.func_name.as_str();
        if args.len() == 3 && name == operators::CONDITIONAL {
            return Some(Node::Cond(Box::new([
                self.node(&args[0])?,
                self.node(&args[1])?,
                self.node(&args[2])?,
            ])));
        }
        if args.len() == 2 {
            let (a, b) = (&args[0], &args[1]);
            let node = match name {
                operators::LOGICAL_OR => Node::Or(self.two(a, b)?),
                operators::LOGICAL_AND => Node::And(self.two(a, b)?),
                operators::EQUALS => Node::Eq(self.two(a, b)?, false),
                operators::NOT_EQUALS => Node::Eq(self.two(a, b)?, true),
                operators::INDEX => Node::Index(self.two(a, b)?),
                operators::ADD => Node::Arith(self.two(a, b)?, Arith::Add),
                operators::SUBSTRACT => Node::Arith(self.two(a, b)?, Arith::Sub),
                operators::MULTIPLY => Node::Arith(self.two(a, b)?, Arith::Mul),
                operators::DIVIDE => Node::Arith(self.two(a, b)?, Arith::Div),
                operators::MODULO => Node::Arith(self.two(a, b)?, Arith::Mod),
                operators::LESS => Node::Cmp(self.two(a, b)?, Cmp::Less),
                operators::LESS_EQUALS => Node::Cmp(self.two(a, b)?, Cmp::LessEquals),
                operators::GREATER => Node::Cmp(self.two(a, b)?, Cmp::Greater),
                operators::GREATER_EQUALS => Node::Cmp(self.two(a, b)?, Cmp::GreaterEquals),
                operators::IN => Node::In(self.two(a, b)?),
                _ => return self.function(e, call),
            };
            return Some(node);
        }
        if args.len() == 1 {
            let node = match name {
                operators::LOGICAL_NOT => Node::Not(Box::new(self.node(&args[0])?)),
                operators::NEGATE => Node::Neg(Box::new(self.node(&args[0])?)),
                operators::NOT_STRICTLY_FALSE => {
                    Node::NotStrictlyFalse(Box::new(self.node(&args[0])?))
                }
                _ => return self.function(e, call),
            };
            return Some(node);
        }
        self.function(e, call)
    }

    /// A function call: done here when it is one of the few the program
    /// does itself, else by the interpreter.
    fn function(
        &mut self,
        e: &Expression,
        call: &kube_cel::cel::common::ast::CallExpr,
    ) -> Option<Node> {
        let name = call.func_name.as_str();
        if let (super::fold::CONSTANT_FUNCTION, None, [arg]) =
            (name, call.target.as_deref(), call.args.as_slice())
        {
            if let Expr::Ident(ident) = &arg.expr {
                let Some(Node::Interp(call)) = self.interp(e) else {
                    return None;
                };
                let ident = ident.as_str().into();
                return Some(Node::Constant(Box::new(Constant { ident, call })));
            }
        }
        // `prefix.name(...)` calls the function registered as
        // `prefix.name` when there is one (`azure.sku`).
        let qualified = match call.target.as_deref().map(|t| &t.expr) {
            Some(Expr::Ident(prefix)) => {
                Some(format!("{prefix}.{name}")).filter(|qualified| (self.has_function)(qualified))
            }
            _ => None,
        };
        if let Some(qualified) = qualified {
            let native = (self.native)(&qualified).filter(|n| n.arity() == call.args.len());
            let Some(native) = native else {
                return self.interp(e);
            };
            // An argument no program can evaluate leaves the whole
            // expression to the interpreter, as any other node does.
            let args = (call.args.iter())
                .map(|a| self.node(a))
                .collect::<Option<_>>()?;
            return Some(Node::Native(Box::new(NativeCall { native, args })));
        }
        match (name, call.target.as_deref(), call.args.as_slice()) {
            ("size", None, [arg]) => Some(Node::Size(Box::new(self.node(arg)?), false)),
            ("size", Some(target), []) => Some(Node::Size(Box::new(self.node(target)?), true)),
            ("startsWith" | "endsWith" | "matches", Some(target), [arg]) => {
                let test = match (name, &arg.expr) {
                    ("startsWith", _) => Test::StartsWith,
                    ("endsWith", _) => Test::EndsWith,
                    // A pattern that does not compile is the function's
                    // error to give, on each call.
                    (_, Expr::Literal(LiteralValue::String(pattern))) => {
                        match regex::Regex::new(pattern.inner()) {
                            Ok(compiled) => Test::Matches(compiled),
                            Err(_) => return self.interp(e),
                        }
                    }
                    _ => return self.interp(e),
                };
                let target = self.node(target)?;
                let args = self.args(&call.args)?;
                let arg = self.node(arg)?;
                Some(Node::StrTest(Box::new(StrTest {
                    test,
                    target,
                    arg,
                    args,
                })))
            }
            ("string", None, [arg]) => Some(Node::StringOf(Box::new(self.node(arg)?))),
            ("join", Some(target), [] | [_]) => {
                let target = self.node(target)?;
                let args = self.args(&call.args)?;
                let separator = match call.args.first() {
                    Some(arg) => Some(self.node(arg)?),
                    None => None,
                };
                Some(Node::Join(Box::new(Join {
                    target,
                    separator,
                    args,
                })))
            }
            _ => self.interp(e),
        }
    }

    /// Argument trees for the interpreter's function, with the
    /// comprehension variables they read.
    fn args(&self, trees: &[Expression]) -> Option<Args> {
        let mut free = BTreeSet::new();
        for tree in trees {
            free_names(tree, &mut Vec::new(), &mut free);
        }
        let mut locals = Vec::new();
        let mut variables = false;
        for name in free {
            variables |= super::variables::name(&name).is_some();
            if let Some(slot) = self.local(&name) {
                if self.logical.contains(&slot) {
                    return None;
                }
                locals.push((name, slot));
            }
        }
        Some(Args {
            trees: trees.to_vec(),
            locals,
            variables,
        })
    }
}

/// The names `e` reads that it does not bind itself.
fn free_names(e: &Expression, bound: &mut Vec<String>, out: &mut BTreeSet<String>) {
    match &e.expr {
        Expr::Ident(name) if !bound.contains(name) => {
            out.insert(name.clone());
        }
        Expr::Comprehension(c) => {
            free_names(&c.iter_range, bound, out);
            free_names(&c.accu_init, bound, out);
            let before = super::walk::Bound {
                var: &c.iter_var,
                var2: c.iter_var2.as_deref(),
                accu: &c.accu_var,
            }
            .push_onto(bound);
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                free_names(part, bound, out);
            }
            bound.truncate(before);
        }
        _ => super::walk::children(e, |child| free_names(child, bound, out)),
    }
}

#[cfg(test)]
mod tests;
