//! Evaluating a [`Program`]: each node as the interpreter evaluates the
//! node it stands for (see `resolve_val` in vendor/cel/src/objects.rs),
//! in the same order, charging the same units.
use super::value::{self, V};
use super::{
    Cmp, Comprehension, Constant, Interp, Join, Native, NativeCall, Node, PolicyVariables, Program,
    Roots, StrTest, Test,
};
use crate::cel::sku_sets::{Given, Kept, Marks, Names, Number, SkuFunction};
use crate::cel::Tree;
use kube_cel::cel::budget::{self, DepthGuard};
use kube_cel::cel::common::ast::LiteralValue;
use kube_cel::cel::common::types::{
    CelBytes, CelList, CelMap, CelMapEntries, CelMapKey, CelOptional, CelString, LIST_TYPE,
    MAP_TYPE, OPTIONAL_TYPE,
};
use kube_cel::cel::common::value::Val;
use kube_cel::cel::parser::Expression;
use kube_cel::cel::{Context, ExecutionError, FunctionContext, Value};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

/// The value of `program` in `ctx`.
pub(super) fn run<'a, 'r: 'a>(
    program: &'a Program,
    ctx: &'a Context<'a>,
    roots: Roots<'a>,
    variables: Option<PolicyVariables<'r>>,
) -> Result<V<'a>, ExecutionError> {
    let mut frame = Frame {
        ctx,
        roots,
        variables,
        locals: std::iter::repeat_with(|| V::Null)
            .take(program.locals)
            .collect(),
    };
    frame.eval(&program.root)
}

/// `'r`: what the policy's variables lend, which the evaluation may
/// borrow from too.
struct Frame<'a, 'r> {
    ctx: &'a Context<'a>,
    roots: Roots<'a>,
    variables: Option<PolicyVariables<'r>>,
    locals: SmallVec<[V<'a>; 8]>,
}

fn undeclared(name: &str) -> ExecutionError {
    ExecutionError::UndeclaredReference(Arc::new(name.to_string()))
}

/// Whether `&&` and `||` may absorb the error: running out of budget,
/// depth or time stops the evaluation whatever the other operand says.
fn is_absorbable(e: &ExecutionError) -> bool {
    !matches!(
        e,
        ExecutionError::CostLimitExceeded
            | ExecutionError::DepthLimitExceeded
            | ExecutionError::DeadlineExceeded
    )
}

fn absorbable(
    val: Result<bool, ExecutionError>,
) -> Result<Result<bool, ExecutionError>, ExecutionError> {
    match val {
        Err(e) if !is_absorbable(&e) => Err(e),
        other => Ok(other),
    }
}

fn literal(l: &LiteralValue) -> V<'_> {
    match l {
        LiteralValue::Boolean(b) => V::Bool(*b.inner()),
        LiteralValue::Int(i) => V::Int(*i.inner()),
        LiteralValue::UInt(u) => V::UInt(*u.inner()),
        LiteralValue::Double(d) => V::Double(*d.inner()),
        LiteralValue::Null => V::Null,
        LiteralValue::String(s) => V::Str(s.inner()),
        LiteralValue::Bytes(b) => V::Val(Cow::Borrowed(b)),
    }
}

impl<'a, 'r: 'a> Frame<'a, 'r> {
    fn eval(&mut self, node: &'a Node) -> Result<V<'a>, ExecutionError> {
        match node {
            Node::Interp(i) => return self.interp(i),
            Node::Constant(c) => return self.constant(c),
            _ => {}
        }
        let _node = DepthGuard::node()?;
        match node {
            Node::Lit(l) => Ok(literal(l)),
            Node::Local(slot) => Ok(self.locals[*slot].clone()),
            Node::TakeLocal(slot) => Ok(std::mem::replace(&mut self.locals[*slot], V::Null)),
            Node::Root(name, place) => match self.roots.read(*place, name) {
                Some(v) => Ok(v),
                None => self.root(name),
            },
            Node::Variable(ident) => match self.variables {
                Some(vars) => match vars.source.value(ident, vars.before) {
                    Some(value) => Ok(value.0.view()),
                    None => Err(undeclared(ident)),
                },
                None => self.root(ident),
            },
            Node::Interp(_) | Node::Constant(_) => unreachable!("handled above"),
            Node::Select(operand, field, test) => {
                let left = self.eval(operand)?;
                select(left, field, *test)
            }
            Node::Not(a) => V::try_bool(self.eval(a)).map(|b| V::Bool(!b)),
            Node::NotStrictlyFalse(a) => Ok(V::Bool(V::try_bool(self.eval(a)).unwrap_or(true))),
            Node::Neg(a) => value::negate(self.eval(a)?),
            Node::Cond(p) => {
                if V::try_bool(self.eval(&p[0]))? {
                    self.eval(&p[1])
                } else {
                    self.eval(&p[2])
                }
            }
            Node::Or(p) => self.logical(p, true),
            Node::And(p) => self.logical(p, false),
            Node::Eq(p, negated) => {
                let a = self.eval(&p[0])?;
                let b = self.eval(&p[1])?;
                Ok(V::Bool(value::equals(&a, &b) != *negated))
            }
            Node::Cmp(p, cmp) => {
                let a = self.eval(&p[0])?;
                let b = self.eval(&p[1])?;
                let ordering = value::compare(&a, &b)?;
                Ok(V::Bool(match cmp {
                    Cmp::Less => ordering == Ordering::Less,
                    Cmp::LessEquals => ordering != Ordering::Greater,
                    Cmp::Greater => ordering == Ordering::Greater,
                    Cmp::GreaterEquals => ordering != Ordering::Less,
                }))
            }
            Node::Arith(p, op) => {
                let a = self.eval(&p[0])?;
                let b = self.eval(&p[1])?;
                value::arith(*op, a, b)
            }
            Node::In(p) => {
                let a = self.eval(&p[0])?;
                let b = self.eval(&p[1])?;
                value::contains(&b, &a).map(V::Bool)
            }
            Node::Index(p) => self.index(p),
            Node::List(items) => {
                let mut list = Vec::with_capacity(items.len());
                for item in items {
                    list.push(self.eval(item)?);
                }
                Ok(V::List(Arc::new(list)))
            }
            Node::Map(entries) => self.map(entries),
            Node::Comprehension(c) => self.comprehension(c),
            Node::Size(arg, method) => {
                let v = match self.eval(arg) {
                    Ok(v) => v,
                    Err(e) if *method => return Err(e),
                    // As the interpreter's `size(x)` takes its argument:
                    // any error evaluating it is a missing argument.
                    Err(_) => return Err(ExecutionError::MissingArgumentOrTarget),
                };
                let size = match &v {
                    V::Str(s) => Some(s.chars().count()),
                    V::String(s) => Some(s.chars().count()),
                    V::List(items) => Some(items.len()),
                    V::Json(serde_json::Value::Array(items)) => Some(items.len()),
                    V::Json(serde_json::Value::Object(map)) => Some(map.len()),
                    V::Tree(Tree::List(items)) => Some(items.len()),
                    V::Tree(Tree::Map(entries)) => Some(entries.len()),
                    V::Val(x) => {
                        if let Some(l) = x.downcast_ref::<CelList>() {
                            Some(l.len())
                        } else if let Some(m) = x.downcast_ref::<CelMap>() {
                            Some(m.len())
                        } else {
                            x.downcast_ref::<CelBytes>().map(|b| b.inner().len())
                        }
                    }
                    _ => None,
                };
                match size {
                    // A receiver is charged for its size; these always
                    // convert to the function's form.
                    Some(n) => {
                        if *method {
                            value::charge_value(&v)?;
                        }
                        Ok(V::Int(n as i64))
                    }
                    None => {
                        let this = v.to_value()?;
                        if *method {
                            value::charge_value(&v)?;
                        }
                        self.call("size", this, &[], &[], false)
                    }
                }
            }
            Node::StrTest(t) => self.str_test(t),
            Node::Native(n) => self.native(n),
            Node::StringOf(arg) => {
                let v = self.eval(arg)?;
                let text = match &v {
                    V::Int(i) => V::String(i.to_string().into()),
                    V::UInt(u) => V::String(u.to_string().into()),
                    V::Bool(b) => V::Str(if *b { "true" } else { "false" }),
                    V::Str(_) | V::String(_) => v,
                    _ => return self.call("string", v.to_value()?, &[], &[], false),
                };
                value::charge_value(&text)?;
                Ok(text)
            }
            Node::Join(j) => self.join(j),
        }
    }

    /// `||` (`decides` true) or `&&` (`decides` false): an operand equal
    /// to `decides` decides, also over the other's error; running out of
    /// budget, depth or time is never absorbed.
    fn logical(&mut self, p: &'a [Node; 2], decides: bool) -> Result<V<'a>, ExecutionError> {
        let left = V::try_bool(self.eval(&p[0]));
        self.fold(left, &p[1], decides)
    }

    /// [`Frame::logical`] with the left operand worked out.
    fn fold(
        &mut self,
        left: Result<bool, ExecutionError>,
        right: &'a Node,
        decides: bool,
    ) -> Result<V<'a>, ExecutionError> {
        let left = absorbable(left)?;
        if matches!(left, Ok(b) if b == decides) {
            return Ok(V::Bool(decides));
        }
        let right = match self.eval(right)? {
            V::Bool(b) => Some(b),
            _ => None,
        };
        match (left, right) {
            (Ok(_), Some(right)) => Ok(V::Bool(right)),
            (Err(_), Some(right)) if right == decides => Ok(V::Bool(decides)),
            (left, _) => Err(left.err().unwrap_or(ExecutionError::NoSuchOverload)),
        }
    }

    fn root(&self, name: &str) -> Result<V<'a>, ExecutionError> {
        match self.ctx.get_variable(name) {
            Some(v) => Ok(V::from_cow(v)),
            None => Err(undeclared(name)),
        }
    }

    /// Whether the interpreter needs a scope of its own for a subtree that
    /// reads the comprehension variables `locals` (and policy variables,
    /// when `variables`): the scope does not have them.
    fn needs_scope(&self, locals: &[(String, usize)], variables: bool) -> bool {
        !locals.is_empty() || (variables && self.variables.is_some())
    }

    /// The scope the interpreter evaluates a subtree in: this one's, with
    /// the comprehension variables `locals` names bound, and the policy's
    /// variables resolved as they are kept.
    fn scope(&self, locals: &'a [(String, usize)], variables: bool) -> Context<'_> {
        let mut scope = self.ctx.new_inner_scope();
        if let (true, Some(variables)) = (variables, &self.variables) {
            scope.set_variable_resolver(variables);
        }
        for (name, slot) in locals {
            match &self.locals[*slot] {
                V::Val(v) => scope.add_variable_borrowed(name.as_str(), v.as_ref()),
                other => scope.add_variable_as_val(name.as_str(), other.to_box()),
            }
        }
        scope
    }

    /// A params part, read where it was bound and charged as the
    /// interpreter charges `@paramsConstant(<ident>)`: the call's node,
    /// its argument's, the part's cost, and the value answered. Anything
    /// else bound by that name goes to the interpreter's call.
    fn constant(&mut self, c: &'a Constant) -> Result<V<'a>, ExecutionError> {
        let bound = match self.ctx.get_variable(&c.ident) {
            Some(Cow::Borrowed(bound)) => crate::cel::fold::part(bound),
            _ => None,
        };
        let Some((value, extra)) = bound else {
            return self.interp(&c.call);
        };
        let _call = DepthGuard::node()?;
        drop(DepthGuard::node()?);
        budget::charge(extra)?;
        budget::charge_val(value)?;
        Ok(V::from_ref(value))
    }

    fn interp(&mut self, i: &'a Interp) -> Result<V<'a>, ExecutionError> {
        if !self.needs_scope(&i.locals, i.variables) {
            return Value::resolve_val(&i.expr, self.ctx).map(V::from_cow);
        }
        let scope = self.scope(&i.locals, i.variables);
        let v = Value::resolve_val(&i.expr, &scope)?;
        Ok(V::from_part(v.as_ref()))
    }

    /// Calls the function registered as `name` with the receiver `this`
    /// and the argument trees `args` (evaluated by the interpreter, with
    /// `locals` bound, and the policy's variables when they read some),
    /// charging its result as the interpreter does.
    fn call(
        &self,
        name: &'static str,
        this: Value,
        args: &'a [Expression],
        locals: &'a [(String, usize)],
        variables: bool,
    ) -> Result<V<'a>, ExecutionError> {
        let undeclared = || undeclared(name);
        let v = if !self.needs_scope(locals, variables) {
            let mut ftx = FunctionContext::new(name, Some(this), self.ctx, args);
            self.ctx
                .call_function(name, &mut ftx)
                .unwrap_or_else(|| Err(undeclared()))?
        } else {
            let scope = self.scope(locals, variables);
            let mut ftx = FunctionContext::new(name, Some(this), &scope, args);
            scope
                .call_function(name, &mut ftx)
                .unwrap_or_else(|| Err(undeclared()))?
        };
        budget::charge_value(&v)?;
        let v: Box<dyn Val> = v.try_into()?;
        Ok(V::from_box(v))
    }

    fn str_test(&mut self, t: &'a StrTest) -> Result<V<'a>, ExecutionError> {
        let target = self.eval(&t.target)?;
        let Some(s) = target.as_str() else {
            let this = target.to_value()?;
            value::charge_value(&target)?;
            let name = t.test.name();
            return self.call(name, this, &t.args.trees, &t.args.locals, t.args.variables);
        };
        value::charge_value(&target)?;
        // Evaluated (and charged) as the function's argument is, also a
        // `matches` pattern, which was compiled at load.
        let arg = self.eval(&t.arg)?;
        match arg.as_str() {
            Some(p) => Ok(V::Bool(match &t.test {
                Test::StartsWith => s.starts_with(p),
                Test::EndsWith => s.ends_with(p),
                Test::Matches(compiled) => compiled.is_match(s),
            })),
            None => Err(ExecutionError::UnexpectedType {
                got: arg.to_value()?.type_of().to_string(),
                want: "Arc<String>".to_string(),
            }),
        }
    }

    /// A native function: its arguments evaluated in order as the
    /// interpreter's extractors take them (a `skusBelow` field that is
    /// not a string stops before the bound is evaluated), the lists read
    /// where they stand, the result charged as the interpreter charges a
    /// call's.
    fn native(&mut self, n: &'a NativeCall) -> Result<V<'a>, ExecutionError> {
        let Native::SkuSet(f) = &n.native;
        let skus = self.eval(&n.args[0])?;
        let kept = match f.function {
            SkuFunction::Below => {
                let field = self.eval(&n.args[1])?;
                let Some(field) = field.as_str() else {
                    return Err(ExecutionError::UnexpectedType {
                        got: field.to_value()?.type_of().to_string(),
                        want: "Arc<String>".to_string(),
                    });
                };
                let bound = self.eval(&n.args[2])?.to_value()?;
                f.call(names(&skus), Given::Bound(field, Number::of(&bound)))?
            }
            SkuFunction::In | SkuFunction::NotIn | SkuFunction::Where => {
                let other = self.eval(&n.args[1])?;
                f.call(names(&skus), Given::List(names(&other)))?
            }
        };
        let result = match kept {
            Kept::All => skus,
            Kept::Only(marks) => kept_elements(&skus, &marks),
        };
        value::charge_value(&result)?;
        Ok(result)
    }

    /// kube-cel's `join`: the strings of a list with the separator (none
    /// when it is not a string) between them. A list of anything else,
    /// or a receiver that is not a list, is the function's to answer.
    fn join(&mut self, j: &'a Join) -> Result<V<'a>, ExecutionError> {
        let target = self.eval(&j.target)?;
        let parts: Option<Vec<&str>> = match &target {
            V::List(items) => items.iter().map(V::as_str).collect(),
            V::Json(serde_json::Value::Array(items)) => {
                items.iter().map(serde_json::Value::as_str).collect()
            }
            V::Tree(Tree::List(items)) => (items.iter())
                .map(|i| match i {
                    Tree::Str(s) => Some(&**s),
                    _ => None,
                })
                .collect(),
            V::Val(v) => v.downcast_ref::<CelList>().and_then(|l| {
                l.iter()
                    .map(|x| x.downcast_ref::<CelString>().map(|s| s.inner()))
                    .collect()
            }),
            _ => None,
        };
        let Some(parts) = parts else {
            let this = target.to_value()?;
            value::charge_value(&target)?;
            return self.call(
                "join",
                this,
                &j.args.trees,
                &j.args.locals,
                j.args.variables,
            );
        };
        value::charge_value(&target)?;
        let separator = match &j.separator {
            Some(s) => self.eval(s)?,
            None => V::Str(""),
        };
        let joined = V::String(parts.join(separator.as_str().unwrap_or("")).into());
        value::charge_value(&joined)?;
        Ok(joined)
    }

    fn index(&mut self, p: &'a [Node; 2]) -> Result<V<'a>, ExecutionError> {
        let value = self.eval(&p[0])?;
        if let Some(opt) = value.optional() {
            // An optional's value indexed, the result an optional.
            let Some(inner) = opt.inner() else {
                return Ok(V::owned(CelOptional::none()));
            };
            let inner = inner.clone_as_boxed();
            let indexer = inner.into_indexer().ok_or(ExecutionError::NoSuchOverload)?;
            let i = self.eval(&p[1])?;
            let result = indexer.steal(i.to_val().as_ref());
            return Ok(V::owned(match result {
                Ok(v) => CelOptional::from(Some(v)),
                Err(_) => CelOptional::none(),
            }));
        }
        if !value::indexable(&value) {
            return Err(ExecutionError::NoSuchOverload);
        }
        let i = self.eval(&p[1])?;
        value::index(value, &i)
    }

    fn map(&mut self, entries: &'a [[Node; 2]]) -> Result<V<'a>, ExecutionError> {
        let mut map = CelMapEntries::with_capacity_and_hasher(entries.len(), Default::default());
        for [k, v] in entries {
            let key: CelMapKey = self.eval(k)?.into_box().try_into()?;
            let value = self.eval(v)?.into_box();
            let twin = match &key {
                CelMapKey::Int(i) => u64::try_from(*i.inner())
                    .ok()
                    .map(|u| CelMapKey::UInt(u.into())),
                CelMapKey::UInt(u) => i64::try_from(*u.inner())
                    .ok()
                    .map(|i| CelMapKey::Int(i.into())),
                _ => None,
            };
            if map.contains_key(&key) || twin.is_some_and(|t| map.contains_key(&t)) {
                return Err(ExecutionError::function_error(
                    "map",
                    format!("repeated key {:?} in a map literal", key.inner()),
                ));
            }
            map.insert(key, value);
        }
        Ok(V::owned(CelMap::from(map)))
    }

    fn comprehension(&mut self, c: &'a Comprehension) -> Result<V<'a>, ExecutionError> {
        let accu = self.eval(&c.accu_init)?;
        let iter = self.eval(&c.iter_range)?;
        self.locals[c.accu_var] = accu;
        match &iter {
            V::List(items) => self.each(c, items.iter().cloned())?,
            V::Json(serde_json::Value::Array(items)) => {
                self.each(c, items.iter().map(V::from_json))?
            }
            V::Json(serde_json::Value::Object(map)) => {
                for (key, value) in map {
                    let second = c.iter_var2.map(|_| V::from_json(value));
                    if !self.iteration(c, V::Str(key), || Ok(second))? {
                        break;
                    }
                }
            }
            V::Tree(Tree::List(items)) => self.each(c, items.iter().map(V::from_tree))?,
            V::Tree(Tree::Map(entries)) => {
                for (key, value) in entries {
                    let second = c.iter_var2.map(|_| V::from_tree(value));
                    if !self.iteration(c, V::Str(key), || Ok(second))? {
                        break;
                    }
                }
            }
            V::Val(Cow::Borrowed(v)) => self.walk(c, *v, V::from_ref)?,
            V::Val(Cow::Owned(v)) => self.walk(c, v.as_ref(), V::from_part)?,
            _ => return Err(ExecutionError::NoSuchOverload),
        }
        let result = self.eval(&c.result)?;
        if let V::Error(e) = result {
            return Err(*e);
        }
        Ok(result)
    }

    /// The iterations over a list's elements `items`: each element, or
    /// its position and the element with two variables.
    fn each(
        &mut self,
        c: &'a Comprehension,
        items: impl Iterator<Item = V<'a>>,
    ) -> Result<(), ExecutionError> {
        for (index, item) in items.enumerate() {
            let (first, second) = match c.iter_var2 {
                None => (item, None),
                Some(_) => (V::Int(index as i64), Some(item)),
            };
            if !self.iteration(c, first, || Ok(second))? {
                break;
            }
        }
        Ok(())
    }

    /// The iterations over a value of the interpreter's (a list's elements,
    /// a map's keys), each element made a value by `take`.
    fn walk<'v>(
        &mut self,
        c: &'a Comprehension,
        iter: &'v dyn Val,
        take: fn(&'v dyn Val) -> V<'a>,
    ) -> Result<(), ExecutionError> {
        let mut items = iter
            .as_iterable()
            .ok_or(ExecutionError::NoSuchOverload)?
            .iter();
        let is_list = iter.get_type() == LIST_TYPE;
        let mut index: i64 = 0;
        while let Some(item) = items.next() {
            let (first, second): (V<'a>, Option<&'v dyn Val>) = match c.iter_var2 {
                None => (take(item), None),
                Some(_) if is_list => (V::Int(index), Some(item)),
                Some(_) => (take(item), Some(item)),
            };
            let second = || match second {
                None => Ok(None),
                Some(item) if is_list => Ok(Some(take(item))),
                Some(key) => {
                    let value = iter
                        .as_indexer()
                        .ok_or(ExecutionError::NoSuchOverload)?
                        .get(key)?;
                    Ok(Some(V::from_part(value.as_ref())))
                }
            };
            if !self.iteration(c, first, second)? {
                break;
            }
            index += 1;
        }
        Ok(())
    }

    /// One iteration: the element's unit, the condition, the variables
    /// bound (the second one worked out after the condition), the step.
    /// `false` when the condition ended the loop.
    fn iteration(
        &mut self,
        c: &'a Comprehension,
        first: V<'a>,
        second: impl FnOnce() -> Result<Option<V<'a>>, ExecutionError>,
    ) -> Result<bool, ExecutionError> {
        budget::charge(1)?;
        if let Some(decides) = c.quantifier {
            return self.quantify(c, decides, first, second);
        }
        if !V::try_bool(self.eval(&c.loop_cond))? {
            return Ok(false);
        }
        let second = second()?;
        self.locals[c.iter_var] = first;
        if let (Some(slot), Some(second)) = (c.iter_var2, second) {
            self.locals[slot] = second;
        }
        let accu = match self.eval(&c.loop_step) {
            Ok(accu) => accu,
            Err(e) if c.folds_logically && is_absorbable(&e) => V::Error(Box::new(e)),
            Err(e) => return Err(e),
        };
        self.locals[c.accu_var] = accu;
        Ok(true)
    }

    /// One iteration of `all` (`decides` false) or `exists` (true) after
    /// its unit: what evaluating the condition's nodes and the step's
    /// would give, with only `p` evaluated, each of the others charged its
    /// unit and entered at its level in the order the interpreter does.
    fn quantify(
        &mut self,
        c: &'a Comprehension,
        decides: bool,
        first: V<'a>,
        second: impl FnOnce() -> Result<Option<V<'a>>, ExecutionError>,
    ) -> Result<bool, ExecutionError> {
        let (Node::And(step) | Node::Or(step)) = &c.loop_step else {
            unreachable!("a quantifier's step is `&&` or `||`")
        };
        // `@not_strictly_false(@result)`: its node, (`!`,) `@result`.
        for level in 1..=(if decides { 3 } else { 2 }) {
            budget::charge(1)?;
            DepthGuard::check(level)?;
        }
        // True unless the accumulator is the deciding value (an error
        // kept is not false).
        if matches!(self.locals[c.accu_var], V::Bool(b) if b == decides) {
            return Ok(false);
        }
        let second = second()?;
        self.locals[c.iter_var] = first;
        if let (Some(slot), Some(second)) = (c.iter_var2, second) {
            self.locals[slot] = second;
        }
        // `@result && p`: the operator's node, `@result` below it, then p
        // (which does not read the accumulator).
        let accu = {
            let _operator = DepthGuard::node()?;
            budget::charge(1)?;
            DepthGuard::check(1)?;
            let left = std::mem::replace(&mut self.locals[c.accu_var], V::Null);
            self.fold(V::try_bool(Ok(left)), &step[1], decides)
        };
        self.locals[c.accu_var] = match accu {
            Ok(accu) => accu,
            Err(e) if is_absorbable(&e) => V::Error(Box::new(e)),
            Err(e) => return Err(e),
        };
        Ok(true)
    }
}

/// `left.field`, or `has(left.field)` when `test`.
fn select<'a>(left: V<'a>, field: &str, test: bool) -> Result<V<'a>, ExecutionError> {
    let missing = || ExecutionError::NoSuchKey(Arc::new(field.to_string()));
    // A field of a map, made a value by `take`.
    fn found<'m, 'a>(
        found: Option<&'m dyn Val>,
        test: bool,
        take: fn(&'m dyn Val) -> V<'a>,
        missing: impl FnOnce() -> ExecutionError,
    ) -> Result<V<'a>, ExecutionError> {
        match (test, found) {
            (true, found) => Ok(V::Bool(found.is_some())),
            (false, found) => found.map(take).ok_or_else(missing),
        }
    }
    match left {
        V::Val(Cow::Borrowed(v)) => match v.downcast_ref::<CelMap>() {
            Some(map) => found(map.get_field(field), test, V::from_ref, missing),
            None => select_val(v, field, test),
        },
        V::Val(Cow::Owned(v)) => match v.downcast_ref::<CelMap>() {
            Some(map) => found(map.get_field(field), test, V::from_part, missing),
            None => select_val(v.as_ref(), field, test),
        },
        V::Json(serde_json::Value::Object(map)) => {
            if test {
                Ok(V::Bool(map.contains_key(field)))
            } else {
                map.get(field).map(V::from_json).ok_or_else(missing)
            }
        }
        V::Tree(t @ Tree::Map(_)) => {
            let found = t.get(field);
            if test {
                Ok(V::Bool(found.is_some()))
            } else {
                found.map(V::from_tree).ok_or_else(missing)
            }
        }
        other => Err(value::no_field_selection(&other, field)),
    }
}

/// `left.field` of a value that is not a [`CelMap`], as the interpreter
/// selects it: another map by key, an optional's value (an optional), any
/// other an error.
fn select_val<'a>(left: &dyn Val, field: &str, test: bool) -> Result<V<'a>, ExecutionError> {
    let key: CelString = field.into();
    let ty = left.get_type();
    if ty == MAP_TYPE {
        let missing = || ExecutionError::NoSuchKey(Arc::new(key.inner().to_string()));
        if test {
            return left
                .as_container()
                .ok_or_else(missing)?
                .contains(&key)
                .map(V::Bool);
        }
        let found = left.as_indexer().ok_or_else(missing)?.get(&key)?;
        return Ok(V::from_part(found.as_ref()));
    }
    if ty == OPTIONAL_TYPE {
        let inner = left.downcast_ref::<CelOptional>().and_then(|o| o.inner());
        let found = match inner {
            None => None,
            Some(inner) if inner.get_type() == MAP_TYPE => inner
                .as_indexer()
                .and_then(|m| m.get(&key).ok())
                .map(|v| v.into_owned()),
            Some(inner) => return Err(value::no_field_selection(&V::from_part(inner), field)),
        };
        return Ok(if test {
            V::Bool(found.is_some())
        } else {
            V::owned(CelOptional::from(found))
        });
    }
    Err(value::no_field_selection(&V::from_part(left), field))
}

/// A list as the SKU-set functions read it, or the CEL type name of what
/// the value is instead.
fn names<'v>(v: &'v V<'_>) -> Result<&'v dyn Names, String> {
    let list: Option<&dyn Names> = match v {
        V::List(items) => Some(items.as_ref()),
        V::Json(serde_json::Value::Array(items)) => Some(items),
        V::Tree(Tree::List(items)) => Some(items),
        V::Val(val) => val.downcast_ref::<CelList>().map(|l| l as &dyn Names),
        _ => None,
    };
    list.ok_or_else(|| type_name_of(v))
}

/// The CEL type name of `v`, as the interpreter's functions name it.
fn type_name_of(v: &V) -> String {
    match v.to_value() {
        Ok(value) => crate::cel::type_name(&value).to_string(),
        Err(_) => "a value of an unknown type".to_string(),
    }
}

impl Names for Vec<V<'_>> {
    fn count(&self) -> usize {
        self.len()
    }

    fn name(&self, i: usize) -> Result<&str, String> {
        let v = &self[i];
        let string = match v {
            V::Val(val) => val.downcast_ref::<CelString>().map(|s| s.inner()),
            v => v.as_str(),
        };
        string.ok_or_else(|| type_name_of(v))
    }
}

impl Names for Vec<Tree> {
    fn count(&self) -> usize {
        self.len()
    }

    fn name(&self, i: usize) -> Result<&str, String> {
        match &self[i] {
            Tree::Str(s) => Ok(s),
            other => Err(type_name_of(&V::from_tree(other))),
        }
    }
}

impl Names for Vec<serde_json::Value> {
    fn count(&self) -> usize {
        self.len()
    }

    fn name(&self, i: usize) -> Result<&str, String> {
        let item = &self[i];
        item.as_str()
            .ok_or_else(|| type_name_of(&V::from_json(item)))
    }
}

/// The elements of the list `skus` that `marks` marks, in order, borrowed
/// from it where it is borrowed.
fn kept_elements<'a>(skus: &V<'a>, marks: &Marks) -> V<'a> {
    let kept = |i: &usize| marks.contains(*i);
    let items: Vec<V<'a>> = match skus {
        V::List(items) => (0..items.len())
            .filter(kept)
            .map(|i| items[i].clone())
            .collect(),
        V::Json(serde_json::Value::Array(items)) => (0..items.len())
            .filter(kept)
            .map(|i| V::from_json(&items[i]))
            .collect(),
        V::Tree(Tree::List(items)) => (0..items.len())
            .filter(kept)
            .map(|i| V::from_tree(&items[i]))
            .collect(),
        V::Val(Cow::Borrowed(val)) => {
            let items = val.downcast_ref::<CelList>().map_or(&[][..], |l| l.inner());
            (0..items.len())
                .filter(kept)
                .map(|i| V::from_cow(Cow::Borrowed(items[i].as_ref())))
                .collect()
        }
        V::Val(Cow::Owned(val)) => {
            let items = val.downcast_ref::<CelList>().map_or(&[][..], |l| l.inner());
            (0..items.len())
                .filter(kept)
                .map(|i| V::from_box(items[i].clone_as_boxed()))
                .collect()
        }
        _ => Vec::new(),
    };
    V::List(Arc::new(items))
}
