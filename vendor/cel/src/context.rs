use crate::common::value::Val;
use crate::magic::{Function, FunctionRegistry, IntoFunction};
use crate::objects::{TryIntoValue, Value};
use crate::parser::Expression;
use crate::{functions, ExecutionError};
use std::borrow::Cow;
use std::sync::Arc;

/// Context is a collection of variables and functions that can be used
/// by the interpreter to resolve expressions.
///
/// The context can be either a parent context, or a child context. A
/// parent context is created by default and contains all of the built-in
/// functions. A child context can be created by calling `.new_inner_scope()`. The
/// child context has it's own variables (which can be added to), but it
/// will also reference the parent context. This allows for variables to
/// be overridden within the child context while still being able to
/// resolve variables in the child's parents. You can have theoretically
/// have an infinite number of child contexts that reference each-other.
///
/// So why is this important? Well some CEL-macros such as the `.map` macro
/// declare intermediate user-specified identifiers that should only be
/// available within the macro, and should not override variables in the
/// parent context. The `.map` macro can create a child context from the parent, add the
/// intermediate identifier to the child context, and then evaluate the
/// map expression.
///
/// Intermediate variable stored in child context
///               ↓
/// [1, 2, 3].map(x, x * 2) == [2, 4, 6]
///                  ↑
/// Only in scope for the duration of the map expression
///
/// gpu-admission patch: the variables of one scope, in insertion order. A
/// scope holds a handful (a comprehension's two, a policy's root ones), so a
/// short vector searched by name beats a `BTreeMap`: no node allocation per
/// scope, no allocated name for a comprehension variable. A value may be
/// borrowed: a comprehension binds each element of the list it walks, and
/// a boolean accumulator, without copying them into a box. The first four
/// are kept inline, so a new scope allocates nothing.
#[derive(Default)]
pub struct ScopeVariables<'a> {
    /// Variables bound: the first [`INLINE_VARIABLES`] in `inline`, in
    /// order, the rest in `more`.
    len: usize,
    inline: [Option<ScopeEntry<'a>>; INLINE_VARIABLES],
    more: Vec<ScopeEntry<'a>>,
}

type ScopeEntry<'a> = (Cow<'a, str>, Cow<'a, dyn Val>);

/// Variables a scope holds without allocating.
const INLINE_VARIABLES: usize = 4;

/// Whether two variable names are the same: a comprehension binds its
/// variables again on every element under the very same string, which the
/// address comparison settles without reading the bytes.
#[inline(always)]
fn same_name(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

impl<'a> ScopeVariables<'a> {
    fn insert(&mut self, name: Cow<'a, str>, value: Cow<'a, dyn Val>) {
        let inline = self.len.min(INLINE_VARIABLES);
        for (n, v) in self.inline[..inline].iter_mut().flatten() {
            if same_name(n, &name) {
                *v = value;
                return;
            }
        }
        for (n, v) in self.more.iter_mut() {
            if same_name(n, &name) {
                *v = value;
                return;
            }
        }
        match self.inline.get_mut(self.len) {
            Some(free) => *free = Some((name, value)),
            None => self.more.push((name, value)),
        }
        self.len += 1;
    }

    /// Binds the variable at `slot` (in the order they were first bound)
    /// to `value`; nothing when there is no such slot.
    fn set_slot(&mut self, slot: usize, value: Cow<'a, dyn Val>) {
        let entry = match slot.checked_sub(INLINE_VARIABLES) {
            None => self.inline[slot].as_mut(),
            Some(spilled) => self.more.get_mut(spilled),
        };
        if let Some((_, v)) = entry {
            *v = value;
        }
    }

    #[inline]
    fn get(&self, name: &str) -> Option<&dyn Val> {
        let inline = self.len.min(INLINE_VARIABLES);
        for (n, v) in self.inline[..inline].iter().flatten() {
            if n.as_ref() == name {
                return Some(v.as_ref());
            }
        }
        self.more
            .iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| v.as_ref())
    }
}

pub enum Context<'a> {
    Root {
        functions: FunctionRegistry,
        variables: ScopeVariables<'a>,
        resolver: Option<&'a dyn VariableResolver>,
    },
    Child {
        parent: &'a Context<'a>,
        variables: ScopeVariables<'a>,
        resolver: Option<&'a dyn VariableResolver>,
    },
}

impl<'a> Context<'a> {
    pub fn add_variable<S, V>(
        &mut self,
        name: S,
        value: V,
    ) -> Result<(), <V as TryIntoValue>::Error>
    where
        S: Into<Cow<'a, str>>,
        V: TryIntoValue,
    {
        match self {
            Context::Root { variables, .. } => {
                let value = value.try_into_value()?;
                let value: Box<dyn Val> = value.try_into().unwrap();
                variables.insert(name.into(), Cow::Owned(value));
            }
            Context::Child { variables, .. } => {
                let value = value.try_into_value()?;
                let value: Box<dyn Val> = value.try_into().unwrap();
                variables.insert(name.into(), Cow::Owned(value));
            }
        }
        Ok(())
    }

    pub fn add_variable_from_value<S, V>(&mut self, name: S, value: V)
    where
        S: Into<Cow<'a, str>>,
        V: Into<Value>,
    {
        match self {
            Context::Root { variables, .. } => {
                let value = value.into();
                let value: Box<dyn Val> = value.try_into().unwrap();
                variables.insert(name.into(), Cow::Owned(value));
            }
            Context::Child { variables, .. } => {
                let value = value.into();
                let value: Box<dyn Val> = value.try_into().unwrap();
                variables.insert(name.into(), Cow::Owned(value));
            }
        }
    }

    /// gpu-admission patch: like every `add_variable*`, takes a name that
    /// may be borrowed (`&'static str`, or a name the scope outlives), so
    /// binding a variable need not allocate its name.
    pub fn add_variable_as_val<S>(&mut self, name: S, value: Box<dyn Val>)
    where
        S: Into<Cow<'a, str>>,
    {
        match self {
            Context::Root { variables, .. } => {
                variables.insert(name.into(), Cow::Owned(value));
            }
            Context::Child { variables, .. } => {
                variables.insert(name.into(), Cow::Owned(value));
            }
        }
    }

    /// gpu-admission patch: binds `name` to a value the caller keeps,
    /// without copying it (a host's precomputed values, read by many
    /// expressions).
    pub fn add_variable_borrowed(&mut self, name: &'a str, value: &'a dyn Val) {
        self.set_variable_as_val(name, Cow::Borrowed(value));
    }

    /// gpu-admission patch: binds the variable this scope bound
    /// `slot`-th (from 0) again, without looking its name up: a
    /// comprehension rebinds its variables on every element. Falls back to
    /// binding by `name` when there is no such slot.
    pub(crate) fn rebind_slot<V>(&mut self, slot: usize, name: &'a str, value: V)
    where
        V: Into<Cow<'a, dyn Val>>,
    {
        let variables = match self {
            Context::Root { variables, .. } | Context::Child { variables, .. } => variables,
        };
        let value = value.into();
        if slot < variables.len {
            variables.set_slot(slot, value);
        } else {
            variables.insert(Cow::Borrowed(name), value);
        }
    }

    /// gpu-admission patch: [`Context::add_variable_as_val`] that borrows
    /// the name (an expression's comprehension variable) instead of
    /// allocating it, takes a boxed or a borrowed value, and reuses the slot
    /// of a variable already set in this scope (set on every iteration).
    pub(crate) fn set_variable_as_val<V>(&mut self, name: &'a str, value: V)
    where
        V: Into<Cow<'a, dyn Val>>,
    {
        let variables = match self {
            Context::Root { variables, .. } | Context::Child { variables, .. } => variables,
        };
        variables.insert(Cow::Borrowed(name), value.into());
    }

    pub fn set_variable_resolver(&mut self, r: &'a dyn VariableResolver) {
        match self {
            Context::Root { resolver, .. } => {
                *resolver = Some(r);
            }
            Context::Child { resolver, .. } => {
                *resolver = Some(r);
            }
        }
    }

    pub fn get_variable<S>(&'a self, name: S) -> Option<Cow<'a, dyn Val>>
    where
        S: AsRef<str>,
    {
        let name = name.as_ref();
        match self {
            Context::Child {
                variables,
                parent,
                resolver,
            } => resolver
                .and_then(|r| resolved(r, name))
                .or_else(|| {
                    variables
                        .get(name)
                        .map(Cow::<dyn Val>::Borrowed)
                        .or_else(|| parent.get_variable(name))
                }),
            Context::Root {
                variables,
                resolver,
                ..
            } => resolver
                .and_then(|r| resolved(r, name))
                .or_else(|| variables.get(name).map(Cow::<dyn Val>::Borrowed)),
        }
    }

    #[allow(dead_code)]
    pub(crate) fn get_function(&self, name: &str) -> Option<&Function> {
        match self {
            Context::Root { functions, .. } => functions.get(name),
            Context::Child { parent, .. } => parent.get_function(name),
        }
    }

    /// gpu-admission patch: calls the function registered under `name`
    /// (here or in a parent scope) with `ftx`, as the interpreter calls
    /// it; `None` when none is. A host evaluating a compiled form of an
    /// expression hands the calls it does not do itself to this.
    pub fn call_function(
        &self,
        name: &str,
        ftx: &mut functions::FunctionContext,
    ) -> Option<crate::ResolveResult> {
        self.get_function(name).map(|f| f(ftx))
    }

    /// gpu-admission patch: whether a function of this name is registered
    /// (here or in a parent scope), so a host can refuse an expression that
    /// calls an unknown function when it is loaded, as cel-go's checker does.
    pub fn has_function(&self, name: &str) -> bool {
        self.get_function(name).is_some()
    }

    /// gpu-admission patch: removes the function registered under `name`
    /// and returns it, so that a host can register a replacement that hands
    /// some calls on to it (the registry has one function per name, no
    /// overloads). `None` in a child scope, or when there is none.
    pub fn take_function(&mut self, name: &str) -> Option<crate::extractors::Function> {
        match self {
            Context::Root { functions, .. } => functions.take(name),
            Context::Child { .. } => None,
        }
    }

    pub fn add_function<T: 'static, F>(&mut self, name: &str, value: F)
    where
        F: IntoFunction<T> + 'static + Send + Sync,
    {
        if let Context::Root { functions, .. } = self {
            functions.add(name, value);
        };
    }

    pub fn resolve(&self, expr: &Expression) -> Result<Value, ExecutionError> {
        Value::resolve(expr, self)
    }

    pub fn resolve_all(&self, exprs: &[Expression]) -> Result<Value, ExecutionError> {
        Value::resolve_all(exprs, self)
    }

    pub fn new_inner_scope(&self) -> Context<'_> {
        Context::Child {
            parent: self,
            variables: Default::default(),
            resolver: None,
        }
    }

    /// Constructs a new empty context with no variables or functions.
    ///
    /// If you're looking for a context that has all the standard methods, functions
    /// and macros already added to the context, use [`Context::default`] instead.
    ///
    /// # Example
    /// ```
    /// use cel::Context;
    /// let mut context = Context::empty();
    /// context.add_function("add", |a: i64, b: i64| a + b);
    /// ```
    pub fn empty() -> Self {
        Context::Root {
            variables: Default::default(),
            functions: Default::default(),
            resolver: None,
        }
    }
}

impl Default for Context<'_> {
    fn default() -> Self {
        let mut ctx = Context::Root {
            variables: Default::default(),
            functions: Default::default(),
            resolver: None,
        };

        ctx.add_function("contains", functions::contains);
        // gpu-admission patch: the step of transformMap / transformMapEntry.
        ctx.add_function(crate::parser::MAP_INSERT, functions::map_insert);
        ctx.add_function("size", functions::size);
        ctx.add_function("max", functions::max);
        ctx.add_function("min", functions::min);
        ctx.add_function("startsWith", functions::starts_with);
        ctx.add_function("endsWith", functions::ends_with);
        ctx.add_function("string", functions::string);
        ctx.add_function("bytes", functions::bytes);
        // gpu-admission patch: `bool(string)`, `bool(bool)`.
        ctx.add_function("bool", functions::bool);
        ctx.add_function("double", functions::double);
        ctx.add_function("int", functions::int);
        ctx.add_function("uint", functions::uint);
        ctx.add_function("optional.none", functions::optional_none);
        ctx.add_function("optional.of", functions::optional_of);
        ctx.add_function(
            "optional.ofNonZeroValue",
            functions::optional_of_non_zero_value,
        );
        ctx.add_function("value", functions::optional_value);
        ctx.add_function("hasValue", functions::optional_has_value);
        ctx.add_function("or", functions::optional_or_optional);
        ctx.add_function("orValue", functions::optional_or_value);
        // gpu-admission patch: type values.
        ctx.add_function("type", functions::type_of);

        #[cfg(feature = "regex")]
        ctx.add_function("matches", functions::matches);

        #[cfg(feature = "chrono")]
        {
            ctx.add_function("duration", functions::duration);
            ctx.add_function("timestamp", functions::timestamp);
            ctx.add_function("getFullYear", functions::time::timestamp_year);
            ctx.add_function("getMonth", functions::time::timestamp_month);
            ctx.add_function("getDayOfYear", functions::time::timestamp_year_day);
            ctx.add_function("getDayOfMonth", functions::time::timestamp_month_day);
            ctx.add_function("getDate", functions::time::timestamp_date);
            ctx.add_function("getDayOfWeek", functions::time::timestamp_weekday);
            ctx.add_function("getHours", functions::time::get_hours);
            ctx.add_function("getMinutes", functions::time::get_minutes);
            ctx.add_function("getSeconds", functions::time::get_seconds);
            ctx.add_function("getMilliseconds", functions::time::get_milliseconds);
        }

        ctx
    }
}

/// VariableResolver implements a custom resolver for variables that is consulted before looking at
/// variables added to the context. This allows dynamic variables, or avoiding HashMap lookup/creation.
///
///
/// # Example
/// ```
/// struct ValueContext {
///     request: cel::Value,
///     response: cel::Value,
/// }
///
/// impl cel::context::VariableResolver for ValueContext {
///     fn resolve(&self, variable: &str) -> Option<cel::Value> {
///         match variable {
///             "request" => Some(self.request.clone()),
///             "response" => Some(self.response.clone()),
///             _ => None,
///         }
///     }
/// }
/// ```
pub trait VariableResolver: Send + Sync {
    fn resolve(&self, variable: &str) -> Option<Value>;

    /// gpu-admission patch: a value the resolver keeps itself, lent for as
    /// long as the resolver is (no conversion, no copy); consulted before
    /// [`VariableResolver::resolve`]. Lets a host work a variable out on its
    /// first read and keep it.
    fn resolve_val(&self, _variable: &str) -> Option<&dyn Val> {
        None
    }
}

/// What `r` answers for `name`: lent, or converted from its owned value.
fn resolved<'a>(r: &'a dyn VariableResolver, name: &str) -> Option<Cow<'a, dyn Val>> {
    r.resolve_val(name).map(Cow::Borrowed).or_else(|| {
        r.resolve(name)
            .map(|v| Cow::<dyn Val>::Owned(v.try_into().unwrap()))
    })
}

impl<T: VariableResolver> VariableResolver for Box<T> {
    fn resolve(&self, variable: &str) -> Option<Value> {
        (**self).resolve(variable)
    }

    fn resolve_val(&self, variable: &str) -> Option<&dyn Val> {
        (**self).resolve_val(variable)
    }
}

impl<T: VariableResolver> VariableResolver for Arc<T> {
    fn resolve(&self, variable: &str) -> Option<Value> {
        (**self).resolve(variable)
    }

    fn resolve_val(&self, variable: &str) -> Option<&dyn Val> {
        (**self).resolve_val(variable)
    }
}

impl<T: VariableResolver> VariableResolver for &T {
    fn resolve(&self, variable: &str) -> Option<Value> {
        (**self).resolve(variable)
    }

    fn resolve_val(&self, variable: &str) -> Option<&dyn Val> {
        (**self).resolve_val(variable)
    }
}

#[cfg(test)]
mod test {
    // A helper function that requires T to implement some traits
    fn assert_send<T: Send>() {}

    #[test]
    fn test_context_is_send() {
        // This line will only compile if assertion passes
        assert_send::<super::Context>();
    }

    // gpu-admission patch: variables past the inline ones spill into a
    // vector; a name bound again is replaced wherever it is kept.
    #[test]
    fn scope_variables_inline_and_spilled() {
        use super::{ScopeVariables, INLINE_VARIABLES};
        use crate::common::types::CelInt;
        use crate::common::value::Val;
        use std::borrow::Cow;
        let int = |i: i64| Cow::<dyn Val>::Owned(Box::new(CelInt::from(i)));
        let read = |vars: &ScopeVariables, name: &str| {
            vars.get(name)
                .and_then(|v| v.downcast_ref::<CelInt>().map(|i| *i.inner()))
        };
        let mut vars = ScopeVariables::default();
        let count = INLINE_VARIABLES as i64 + 3;
        for i in 0..count {
            vars.insert(Cow::Owned(format!("v{i}")), int(i));
        }
        assert_eq!(vars.more.len(), 3);
        vars.insert(Cow::Borrowed("v0"), int(100));
        vars.insert(Cow::Borrowed("v5"), int(105));
        assert_eq!(vars.more.len(), 3, "a name bound again is not added twice");
        for i in 0..count {
            let expected = match i {
                0 | 5 => 100 + i,
                _ => i,
            };
            assert_eq!(read(&vars, &format!("v{i}")), Some(expected));
        }
        assert_eq!(read(&vars, "v99"), None);
    }
}
