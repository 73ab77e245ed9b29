//! The values a [`Program`](super::Program) computes with: scalars held by
//! value, strings borrowed where they stand (in the program, in the
//! request's converted object), lists the program builds held as its own,
//! and everything else in the interpreter's form, borrowed where it was.
//! Each operation gives what the interpreter's gives for the same values:
//! the common cases are done here, every other one by the interpreter's
//! own code on the values converted to its form.
use crate::cel::Tree;
use kube_cel::cel::common::types::{
    CelBool, CelBytes, CelDouble, CelInt, CelList, CelMap, CelNull, CelOptional, CelString,
    CelUInt, Type,
};
use kube_cel::cel::common::value::Val;
use kube_cel::cel::{ExecutionError, Value};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::Arc;

/// One value of an evaluation; `'a` is what the evaluation borrows from
/// (the program and the scope).
#[derive(Debug)]
pub(super) enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    /// A string borrowed from the program or from the scope.
    Str(&'a str),
    /// A string the evaluation made, or took from a value it owns.
    String(Arc<str>),
    /// A list the program built: a literal, a `map` or `filter` result.
    List(Arc<Vec<V<'a>>>),
    /// An array or object of the request's JSON, read where it stands
    /// (its scalars are read into the values above).
    Json(&'a serde_json::Value),
    /// A list or map of a host's tree (`request`, `gpu`), read where it
    /// stands as JSON is.
    Tree(&'a Tree),
    /// An element's error that an `all` or `exists` keeps as its
    /// accumulator until an element decides the result.
    Error(Box<ExecutionError>),
    /// Any other value (maps, the scope's lists, bytes, optionals, opaque
    /// host values), in the interpreter's form.
    Val(Cow<'a, dyn Val>),
}

impl Clone for V<'_> {
    fn clone(&self) -> Self {
        match self {
            V::Null => V::Null,
            V::Bool(b) => V::Bool(*b),
            V::Int(i) => V::Int(*i),
            V::UInt(u) => V::UInt(*u),
            V::Double(d) => V::Double(*d),
            V::Str(s) => V::Str(s),
            V::String(s) => V::String(s.clone()),
            V::List(l) => V::List(l.clone()),
            V::Json(j) => V::Json(j),
            V::Tree(t) => V::Tree(t),
            V::Error(e) => V::Error(e.clone()),
            V::Val(Cow::Borrowed(v)) => V::Val(Cow::Borrowed(*v)),
            V::Val(Cow::Owned(v)) => V::Val(Cow::Owned(v.clone_as_boxed())),
        }
    }
}

/// The interpreter's stand-in for an accumulated error: the type it
/// reports, and no operations. It never reaches the interpreter (a
/// program refuses to hand an accumulator to it), only messages.
#[derive(Debug, Clone)]
struct ErrorStandIn;

impl Val for ErrorStandIn {
    fn get_type(&self) -> Type<'_> {
        Type::new_opaque_type("error")
    }

    fn clone_as_boxed(&self) -> Box<dyn Val> {
        Box::new(ErrorStandIn)
    }
}

impl<'a> V<'a> {
    /// A value of the interpreter, borrowed for as long as the evaluation.
    pub(super) fn from_ref(v: &'a dyn Val) -> V<'a> {
        if let Some(s) = v.downcast_ref::<CelString>() {
            V::Str(s.inner())
        } else {
            match scalar(v) {
                Some(s) => s,
                None => V::Val(Cow::Borrowed(v)),
            }
        }
    }

    /// A value of the interpreter that outlives the borrow it was reached
    /// through (a part of a value the evaluation owns): shared or cloned.
    pub(super) fn from_part(v: &dyn Val) -> V<'a> {
        if let Some(s) = v.downcast_ref::<CelString>() {
            V::String(s.shared().clone())
        } else {
            match scalar(v) {
                Some(s) => s,
                None => V::Val(Cow::Owned(v.clone_as_boxed())),
            }
        }
    }

    /// A value of the request's JSON, as the interpreter converts it
    /// ([`crate::cel::json_to_val`]): integers that fit are `int`, other
    /// numbers `double`.
    pub(super) fn from_json(j: &'a serde_json::Value) -> V<'a> {
        use serde_json::Value as J;
        match j {
            J::Null => V::Null,
            J::Bool(b) => V::Bool(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => V::Int(i),
                None => V::Double(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => V::Str(s),
            J::Array(_) | J::Object(_) => V::Json(j),
        }
    }

    /// A value of a host's tree, as the interpreter converts it
    /// ([`Tree::to_val`]); a shared list in the form it is kept in.
    pub(super) fn from_tree(t: &'a Tree) -> V<'a> {
        match t {
            Tree::Null => V::Null,
            Tree::Bool(b) => V::Bool(*b),
            Tree::Int(i) => V::Int(*i),
            Tree::Double(d) => V::Double(*d),
            Tree::Str(s) => V::Str(s),
            Tree::Shared(list) => V::Val(Cow::Borrowed(list.val())),
            Tree::List(_) | Tree::Map(_) => V::Tree(t),
        }
    }

    /// A value the interpreter made.
    pub(super) fn from_box(v: Box<dyn Val>) -> V<'a> {
        if let Some(s) = v.downcast_ref::<CelString>() {
            V::String(s.shared().clone())
        } else {
            match scalar(v.as_ref()) {
                Some(s) => s,
                None => V::Val(Cow::Owned(v)),
            }
        }
    }

    pub(super) fn from_cow(v: Cow<'a, dyn Val>) -> V<'a> {
        match v {
            Cow::Borrowed(v) => V::from_ref(v),
            Cow::Owned(v) => V::from_box(v),
        }
    }

    /// A value the program made, in the interpreter's form.
    pub(super) fn owned<T: Val>(v: T) -> V<'a> {
        let boxed: Box<dyn Val> = Box::new(v);
        V::Val(Cow::Owned(boxed))
    }

    /// The value, borrowing what it owns.
    pub(super) fn view(&self) -> V<'_> {
        match self {
            V::String(s) => V::Str(s),
            V::Val(v) => V::Val(Cow::Borrowed(v.as_ref())),
            other => other.clone(),
        }
    }

    /// The string, if this is one.
    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            V::Str(s) => Some(s),
            V::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value in the interpreter's form, borrowed where it can be.
    pub(super) fn to_val(&self) -> Cow<'_, dyn Val> {
        match self {
            V::Val(v) => Cow::Borrowed(v.as_ref()),
            other => Cow::Owned(other.to_box()),
        }
    }

    /// The value in the interpreter's form, owned.
    pub(super) fn to_box(&self) -> Box<dyn Val> {
        match self {
            V::Null => Box::new(CelNull),
            V::Bool(b) => Box::new(CelBool::from(*b)),
            V::Int(i) => Box::new(CelInt::from(*i)),
            V::UInt(u) => Box::new(CelUInt::from(*u)),
            V::Double(d) => Box::new(CelDouble::from(*d)),
            V::Str(s) => Box::new(CelString::from(*s)),
            V::String(s) => Box::new(CelString::from(s.clone())),
            V::List(items) => Box::new(CelList::from(
                items.iter().map(V::to_box).collect::<Vec<_>>(),
            )),
            V::Json(j) => crate::cel::json_to_val(j),
            V::Tree(t) => t.to_val(),
            V::Error(_) => Box::new(ErrorStandIn),
            V::Val(v) => v.clone_as_boxed(),
        }
    }

    /// The value in the interpreter's form, owned, without copying what
    /// it already owns.
    pub(super) fn into_box(self) -> Box<dyn Val> {
        match self {
            V::Val(Cow::Owned(v)) => v,
            other => other.to_box(),
        }
    }

    /// The value as a [`Value`], as the interpreter hands a method's
    /// receiver to its function.
    pub(super) fn to_value(&self) -> Result<Value, ExecutionError> {
        match self {
            V::Null => Ok(Value::Null),
            V::Bool(b) => Ok(Value::Bool(*b)),
            V::Int(i) => Ok(Value::Int(*i)),
            V::UInt(u) => Ok(Value::UInt(*u)),
            V::Double(d) => Ok(Value::Float(*d)),
            V::Str(s) => Ok(Value::String(Arc::new(s.to_string()))),
            V::String(s) => Ok(Value::String(Arc::new(s.to_string()))),
            other => other.to_val().as_ref().try_into(),
        }
    }

    /// `!`, `&&`, `||`, `?:` and a comprehension's condition read a bool:
    /// any other value is "no matching overload", an accumulated error is
    /// that error.
    pub(super) fn try_bool(result: Result<V<'a>, ExecutionError>) -> Result<bool, ExecutionError> {
        match result? {
            V::Bool(b) => Ok(b),
            V::Error(e) => Err(*e),
            _ => Err(ExecutionError::NoSuchOverload),
        }
    }

    /// The number of elements `in` and a comprehension walk, when this is
    /// a list the program holds.
    pub(super) fn list(&self) -> Option<&[V<'a>]> {
        match self {
            V::List(items) => Some(items),
            _ => None,
        }
    }

    /// The optional this is, if it is one.
    pub(super) fn optional(&self) -> Option<&CelOptional> {
        match self {
            V::Val(v) => v.downcast_ref::<CelOptional>(),
            _ => None,
        }
    }
}

/// A scalar of the interpreter's as a value here.
fn scalar<'a>(v: &dyn Val) -> Option<V<'a>> {
    if let Some(b) = v.downcast_ref::<CelBool>() {
        Some(V::Bool(*b.inner()))
    } else if let Some(i) = v.downcast_ref::<CelInt>() {
        Some(V::Int(*i.inner()))
    } else if v.downcast_ref::<CelNull>().is_some() {
        Some(V::Null)
    } else if let Some(d) = v.downcast_ref::<CelDouble>() {
        Some(V::Double(*d.inner()))
    } else {
        v.downcast_ref::<CelUInt>().map(|u| V::UInt(*u.inner()))
    }
}

/// A number, for comparisons across the three numeric types.
#[derive(Clone, Copy)]
enum N {
    I(i64),
    U(u64),
    D(f64),
}

fn number(v: &V) -> Option<N> {
    match v {
        V::Int(i) => Some(N::I(*i)),
        V::UInt(u) => Some(N::U(*u)),
        V::Double(d) => Some(N::D(*d)),
        _ => None,
    }
}

/// `a == b` as the interpreter answers it (`a.equals(b)`): numbers equal
/// across types by value, strings by content, lists element by element;
/// values of different kinds are unequal.
pub(super) fn equals(a: &V, b: &V) -> bool {
    match (a, b) {
        (V::Null, V::Null) => true,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::Str(_) | V::String(_), V::Str(_) | V::String(_)) => a.as_str() == b.as_str(),
        (V::List(x), V::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(x, y)| equals(x, y))
        }
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => numbers_equal(x, y),
            _ => a.to_val().as_ref().equals(b.to_val().as_ref()),
        },
    }
}

fn numbers_equal(a: N, b: N) -> bool {
    match (a, b) {
        (N::I(x), N::I(y)) => x == y,
        (N::U(x), N::U(y)) => x == y,
        (N::D(x), N::D(y)) => x == y,
        (N::I(i), N::U(u)) | (N::U(u), N::I(i)) => u64::try_from(i).is_ok_and(|i| i == u),
        (N::I(i), N::D(d)) | (N::D(d), N::I(i)) => {
            (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&d)
                && i as f64 == d
        }
        (N::U(u), N::D(d)) | (N::D(d), N::U(u)) => {
            (0.0..18_446_744_073_709_551_616.0).contains(&d) && u as f64 == d
        }
    }
}

/// `a <=> b` for `<`, `<=`, `>`, `>=`, as the interpreter's comparer of
/// `a` answers it.
pub(super) fn compare(a: &V, b: &V) -> Result<Ordering, ExecutionError> {
    match (a, b) {
        (V::Int(x), V::Int(y)) => Ok(x.cmp(y)),
        (V::Str(_) | V::String(_), V::Str(_) | V::String(_)) => Ok(a.as_str().cmp(&b.as_str())),
        (V::Double(x), V::Double(y)) => x.partial_cmp(y).ok_or(ExecutionError::NoSuchOverload),
        (V::Int(x), V::Double(y)) => (*x as f64)
            .partial_cmp(y)
            .ok_or(ExecutionError::NoSuchOverload),
        (V::Double(x), V::Int(y)) => x
            .partial_cmp(&(*y as f64))
            .ok_or(ExecutionError::NoSuchOverload),
        _ => {
            let (a, b) = (a.to_val(), b.to_val());
            a.as_comparer()
                .ok_or(ExecutionError::NoSuchOverload)?
                .compare(b.as_ref())
        }
    }
}

/// The arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

impl Arith {
    /// The name the interpreter's errors give the operator.
    fn name(self) -> &'static str {
        match self {
            Arith::Add => "add",
            Arith::Sub => "sub",
            Arith::Mul => "mul",
            Arith::Div => "div",
            Arith::Mod => "rem",
        }
    }
}

/// `a op b`, as the interpreter answers it.
pub(super) fn arith<'a>(op: Arith, a: V<'a>, b: V<'a>) -> Result<V<'a>, ExecutionError> {
    let overflow = |l: i64, r: i64| ExecutionError::Overflow(op.name(), l.into(), r.into());
    match (op, &a, &b) {
        (_, V::Int(l), V::Int(r)) => {
            let (l, r) = (*l, *r);
            let result = match op {
                Arith::Add => l.checked_add(r),
                Arith::Sub => l.checked_sub(r),
                Arith::Mul => l.checked_mul(r),
                Arith::Div if r == 0 => return Err(ExecutionError::DivisionByZero(l.into())),
                Arith::Div => l.checked_div(r),
                Arith::Mod if r == 0 => return Err(ExecutionError::RemainderByZero(l.into())),
                Arith::Mod => l.checked_rem(r),
            };
            result.map(V::Int).ok_or_else(|| overflow(l, r))
        }
        (Arith::Add, V::Str(_) | V::String(_), V::Str(_) | V::String(_)) => {
            let (l, r) = (a.as_str().unwrap_or(""), b.as_str().unwrap_or(""));
            let mut s = String::with_capacity(l.len() + r.len());
            s.push_str(l);
            s.push_str(r);
            Ok(V::String(s.into()))
        }
        (Arith::Add, V::Double(l), V::Double(r)) => Ok(V::Double(l + r)),
        (Arith::Add, V::List(_), V::List(r)) => {
            let V::List(mut l) = a else { unreachable!() };
            let items = Arc::make_mut(&mut l);
            items.extend(r.iter().cloned());
            Ok(V::List(l))
        }
        _ => interpreted_arith(op, &a, &b),
    }
}

/// `a op b` by the interpreter's own operators.
fn interpreted_arith<'a>(op: Arith, a: &V, b: &V) -> Result<V<'a>, ExecutionError> {
    let (lhs, rhs) = (a.to_val(), b.to_val());
    let unsupported = || {
        ExecutionError::UnsupportedBinaryOperator(
            op.name(),
            lhs.as_ref().try_into().unwrap_or(Value::Null),
            rhs.as_ref().try_into().unwrap_or(Value::Null),
        )
    };
    let result = match op {
        Arith::Add => lhs
            .as_adder()
            .ok_or_else(unsupported)?
            .add(rhs.as_ref())?
            .into_owned(),
        Arith::Sub => lhs
            .as_subtractor()
            .ok_or_else(unsupported)?
            .sub(rhs.as_ref())?
            .into_owned(),
        Arith::Mul => lhs
            .as_multiplier()
            .ok_or_else(unsupported)?
            .mul(rhs.as_ref())?
            .into_owned(),
        Arith::Div => lhs
            .as_divider()
            .ok_or_else(unsupported)?
            .div(rhs.as_ref())?
            .into_owned(),
        Arith::Mod => lhs
            .as_modder()
            .ok_or_else(unsupported)?
            .modulo(rhs.as_ref())?
            .into_owned(),
    };
    Ok(V::from_box(result))
}

/// `-a`.
pub(super) fn negate<'a>(a: V<'a>) -> Result<V<'a>, ExecutionError> {
    match a {
        V::Int(i) => i
            .checked_neg()
            .map(V::Int)
            .ok_or_else(|| ExecutionError::Overflow("negate", i.into(), Value::Null)),
        V::Double(d) => Ok(V::Double(-d)),
        other => {
            let v = other.to_val();
            Ok(V::from_box(
                v.as_negator()
                    .ok_or(ExecutionError::NoSuchOverload)?
                    .negate()?,
            ))
        }
    }
}

/// `a in b`.
pub(super) fn contains(b: &V, a: &V) -> Result<bool, ExecutionError> {
    if let Some(items) = b.list() {
        return Ok(items.iter().any(|i| equals(i, a)));
    }
    match (b, a.as_str()) {
        (V::Json(serde_json::Value::Array(items)), _) => {
            return Ok(items.iter().any(|i| equals(&V::from_json(i), a)))
        }
        (V::Json(serde_json::Value::Object(map)), Some(key)) => return Ok(map.contains_key(key)),
        (V::Tree(Tree::List(items)), _) => {
            return Ok(items.iter().any(|i| equals(&V::from_tree(i), a)))
        }
        (V::Tree(t @ Tree::Map(_)), Some(key)) => return Ok(t.get(key).is_some()),
        _ => {}
    }
    if let V::Val(container) = b {
        if let (Some(map), Some(key)) = (container.downcast_ref::<CelMap>(), a.as_str()) {
            return Ok(map.get_field(key).is_some());
        }
        if let Some(list) = container.downcast_ref::<CelList>() {
            return Ok(list.iter().any(|i| equals(&V::from_ref(i.as_ref()), a)));
        }
    }
    let (container, value) = (b.to_val(), a.to_val());
    match container.as_container() {
        Some(c) => c.contains(value.as_ref()),
        None => Err(ExecutionError::NoSuchOverload),
    }
}

/// Whether `a[...]` can index `a` (else "no matching overload", before the
/// index is evaluated, as in the interpreter).
pub(super) fn indexable(a: &V) -> bool {
    match a {
        V::List(_) | V::Json(_) | V::Tree(_) => true,
        V::Val(v) => v.as_indexer().is_some(),
        _ => false,
    }
}

/// `a[i]`, `a` indexable and not an optional.
pub(super) fn index<'a>(a: V<'a>, i: &V) -> Result<V<'a>, ExecutionError> {
    match (&a, i) {
        (V::List(items), V::Int(n)) => {
            return items
                .get(*n as usize)
                .cloned()
                .ok_or_else(|| ExecutionError::IndexOutOfBounds((*n).into()))
        }
        (V::Json(serde_json::Value::Array(items)), V::Int(n)) => {
            return items
                .get(*n as usize)
                .map(V::from_json)
                .ok_or_else(|| ExecutionError::IndexOutOfBounds((*n).into()))
        }
        (V::Json(serde_json::Value::Object(map)), V::Str(_) | V::String(_)) => {
            if let Some(found) = map.get(i.as_str().unwrap_or("")) {
                return Ok(V::from_json(found));
            }
        }
        (V::Tree(Tree::List(items)), V::Int(n)) => {
            return items
                .get(*n as usize)
                .map(V::from_tree)
                .ok_or_else(|| ExecutionError::IndexOutOfBounds((*n).into()))
        }
        (V::Tree(t @ Tree::Map(_)), V::Str(_) | V::String(_)) => {
            if let Some(found) = t.get(i.as_str().unwrap_or("")) {
                return Ok(V::from_tree(found));
            }
        }
        (V::Val(Cow::Borrowed(v)), V::Int(n)) => {
            if let Some(list) = v.downcast_ref::<CelList>() {
                return list
                    .get(*n as usize)
                    .map(|x| V::from_ref(x.as_ref()))
                    .ok_or_else(|| ExecutionError::IndexOutOfBounds((*n).into()));
            }
        }
        (V::Val(Cow::Borrowed(v)), V::Str(_) | V::String(_)) => {
            if let Some(found) = v
                .downcast_ref::<CelMap>()
                .and_then(|m| m.get_field(i.as_str().unwrap_or("")))
            {
                return Ok(V::from_ref(found));
            }
        }
        _ => {}
    }
    let index = i.to_val();
    match a {
        V::Val(Cow::Borrowed(v)) => v
            .as_indexer()
            .ok_or(ExecutionError::NoSuchOverload)?
            .get(index.as_ref())
            .map(V::from_cow),
        other => {
            let owned = other.into_box();
            let result = owned
                .as_indexer()
                .ok_or(ExecutionError::NoSuchOverload)?
                .get(index.as_ref())?;
            Ok(V::from_part(result.as_ref()))
        }
    }
}

/// The error selecting `field` of a value that has no fields gives.
pub(super) fn no_field_selection(value: &V, field: &str) -> ExecutionError {
    let v = value.to_val();
    ExecutionError::function_error(
        "field selection",
        format!("type '{}' has no field '{field}'", v.get_type().name()),
    )
}

/// The units the interpreter charges for a value it walks (a method's
/// receiver, a function's result): strings one per ten bytes, lists and
/// maps one per element, plus one.
pub(super) fn charge_value(v: &V) -> Result<(), ExecutionError> {
    let units = match v {
        V::Str(s) => 1 + s.len() as u64 / 10,
        V::String(s) => 1 + s.len() as u64 / 10,
        V::List(items) => 1 + items.len() as u64,
        V::Json(serde_json::Value::Array(items)) => 1 + items.len() as u64,
        V::Json(serde_json::Value::Object(map)) => 1 + map.len() as u64,
        V::Tree(Tree::List(items)) => 1 + items.len() as u64,
        V::Tree(Tree::Map(entries)) => 1 + entries.len() as u64,
        V::Val(v) => {
            if let Some(l) = v.downcast_ref::<CelList>() {
                1 + l.len() as u64
            } else if let Some(m) = v.downcast_ref::<CelMap>() {
                1 + m.len() as u64
            } else if let Some(b) = v.downcast_ref::<CelBytes>() {
                1 + b.len() as u64 / 10
            } else {
                return kube_cel::cel::budget::charge_value(&v.as_ref().try_into()?);
            }
        }
        _ => return Ok(()),
    };
    kube_cel::cel::budget::charge(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(v: &V) -> Box<dyn Val> {
        v.to_box()
    }

    /// Equality and ordering agree with the interpreter's on every pair of
    /// a set of values of each kind.
    #[test]
    fn equality_and_ordering_are_the_interpreters() {
        let values = [
            V::Null,
            V::Bool(true),
            V::Bool(false),
            V::Int(1),
            V::Int(-1),
            V::UInt(1),
            V::Double(1.0),
            V::Double(f64::NAN),
            V::Double(1.5),
            V::Str("a"),
            V::String("a".into()),
            V::Str("b"),
            V::List(Arc::new(vec![V::Int(1), V::Str("a")])),
            V::List(Arc::new(vec![V::Double(1.0), V::Str("a")])),
            V::owned(CelList::from(vec![
                Box::new(CelInt::from(1)) as Box<dyn Val>,
                Box::new(CelString::from("a")),
            ])),
        ];
        for a in &values {
            for b in &values {
                let (x, y) = (val(a), val(b));
                assert_eq!(equals(a, b), x.equals(y.as_ref()), "{a:?} == {b:?}");
                let theirs = x
                    .as_comparer()
                    .ok_or(ExecutionError::NoSuchOverload)
                    .and_then(|c| c.compare(y.as_ref()));
                assert_eq!(compare(a, b).ok(), theirs.ok(), "{a:?} <=> {b:?}");
            }
        }
    }

    /// Arithmetic on ints, strings, doubles and lists gives the
    /// interpreter's values and errors.
    #[test]
    fn arithmetic_is_the_interpreters() {
        let values = [
            V::Int(7),
            V::Int(0),
            V::Int(i64::MAX),
            V::Int(i64::MIN),
            V::Int(-1),
            V::Double(2.5),
            V::Str("x"),
            V::List(Arc::new(vec![V::Int(1)])),
            V::UInt(3),
        ];
        for op in [Arith::Add, Arith::Sub, Arith::Mul, Arith::Div, Arith::Mod] {
            for a in &values {
                for b in &values {
                    let ours = arith(op, a.clone(), b.clone()).map(|v| v.to_box());
                    let theirs = interpreted_arith(op, a, b).map(|v| v.to_box());
                    match (&ours, &theirs) {
                        (Ok(x), Ok(y)) => assert!(x.equals(y.as_ref()), "{op:?} {a:?} {b:?}"),
                        (Err(x), Err(y)) => assert_eq!(x, y, "{op:?} {a:?} {b:?}"),
                        _ => panic!("{op:?} {a:?} {b:?}: {ours:?} against {theirs:?}"),
                    }
                }
            }
        }
    }

    /// Values convert to the interpreter's form and back unchanged.
    #[test]
    fn values_convert_both_ways() {
        for v in [
            V::Null,
            V::Bool(true),
            V::Int(3),
            V::UInt(4),
            V::Double(0.5),
            V::Str("s"),
        ] {
            let back = V::from_box(v.to_box());
            assert!(equals(&v, &back), "{v:?} {back:?}");
        }
        let list = V::List(Arc::new(vec![V::Str("a"), V::Int(2)]));
        let converted = V::from_box(list.to_box());
        assert!(matches!(converted, V::Val(_)));
        assert!(converted.to_box().equals(list.to_box().as_ref()));
    }
}
