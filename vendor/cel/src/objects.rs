use crate::common::ast::{operators, EntryExpr, Expr};
use crate::common::types::*;
use crate::common::value::Val;
use crate::context::Context;
use crate::ExecutionError::NoSuchOverload;
use crate::{ExecutionError, Expression, FunctionContext};
#[cfg(feature = "chrono")]
use chrono::TimeZone;
use std::any::Any;
use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::convert::{Infallible, TryFrom, TryInto};
use std::fmt::{Debug, Display, Formatter};
use std::ops;
use std::ops::Deref;
use std::sync::Arc;
#[cfg(feature = "chrono")]
use std::sync::LazyLock;

/// Timestamp values are limited to the range of values which can be serialized as a string:
/// `["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z"]`. Since the max is a smaller
/// and the min is a larger timestamp than what is possible to represent with [`DateTime`],
/// we need to perform our own spec-compliant overflow checks.
///
/// https://github.com/google/cel-spec/blob/master/doc/langdef.md#overflow
#[cfg(feature = "chrono")]
static MAX_TIMESTAMP: LazyLock<chrono::DateTime<chrono::FixedOffset>> = LazyLock::new(|| {
    let naive = chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
        .unwrap()
        .and_hms_nano_opt(23, 59, 59, 999_999_999)
        .unwrap();
    chrono::FixedOffset::east_opt(0)
        .unwrap()
        .from_utc_datetime(&naive)
});

#[cfg(feature = "chrono")]
static MIN_TIMESTAMP: LazyLock<chrono::DateTime<chrono::FixedOffset>> = LazyLock::new(|| {
    let naive = chrono::NaiveDate::from_ymd_opt(1, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    chrono::FixedOffset::east_opt(0)
        .unwrap()
        .from_utc_datetime(&naive)
});

#[derive(Debug, PartialEq, Clone)]
pub struct Map {
    pub map: Arc<HashMap<Key, Value>>,
}

impl PartialOrd for Map {
    fn partial_cmp(&self, _: &Self) -> Option<Ordering> {
        None
    }
}

impl Map {
    pub(crate) fn contains_key(&self, key: &(dyn AsKeyRef + '_)) -> bool {
        self.map.contains_key(key)
    }
    /// Returns a reference to the value corresponding to the key. Implicitly converts between int
    /// and uint keys.
    pub fn get(&self, key: &(dyn AsKeyRef + '_)) -> Option<&Value> {
        self.map.get(key).or_else(|| {
            // Also check keys that are cross type comparable.
            let keyref = key.as_keyref();
            match keyref {
                KeyRef::Int(k) => {
                    let converted = u64::try_from(k).ok()?;
                    self.map.get(&Key::Uint(converted))
                }
                KeyRef::Uint(k) => {
                    let converted = i64::try_from(k).ok()?;
                    self.map.get(&Key::Int(converted))
                }
                _ => None,
            }
        })
    }
}

#[derive(Debug, Eq, PartialEq, Hash, Ord, Clone, PartialOrd)]
pub enum Key {
    Int(i64),
    Uint(u64),
    Bool(bool),
    String(Arc<String>),
}

impl From<CelMapKey> for Key {
    fn from(value: CelMapKey) -> Self {
        match value {
            CelMapKey::Bool(b) => b.into_inner().into(),
            CelMapKey::Int(i) => i.into_inner().into(),
            CelMapKey::String(s) => s.into_inner().into(),
            CelMapKey::UInt(u) => u.into_inner().into(),
        }
    }
}

impl From<Key> for CelMapKey {
    fn from(key: Key) -> Self {
        match key {
            Key::Int(i) => CelMapKey::from(i),
            Key::Uint(u) => CelMapKey::from(u),
            Key::Bool(b) => CelMapKey::from(b),
            Key::String(s) => CelMapKey::from(s.as_str()),
        }
    }
}

/// A borrowed version of [`Key`] that avoids allocating for lookups.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash, Ord, PartialOrd)]
pub enum KeyRef<'a> {
    Int(i64),
    Uint(u64),
    Bool(bool),
    String(&'a str),
}

/// Trait for converting to a borrowed [`KeyRef`] for efficient lookups.
pub trait AsKeyRef {
    fn as_keyref(&self) -> KeyRef<'_>;
}

impl AsKeyRef for Key {
    fn as_keyref(&self) -> KeyRef<'_> {
        match self {
            Key::Int(i) => KeyRef::Int(*i),
            Key::Uint(u) => KeyRef::Uint(*u),
            Key::Bool(b) => KeyRef::Bool(*b),
            Key::String(s) => KeyRef::String(s.as_str()),
        }
    }
}

impl<'a> AsKeyRef for KeyRef<'a> {
    fn as_keyref(&self) -> KeyRef<'a> {
        *self
    }
}

/// Trait object implementations for `dyn AsKeyRef` to enable hashing and comparison.
impl<'a> PartialEq for dyn AsKeyRef + 'a {
    fn eq(&self, other: &Self) -> bool {
        self.as_keyref().eq(&other.as_keyref())
    }
}

impl<'a> Eq for dyn AsKeyRef + 'a {}

impl<'a> std::hash::Hash for dyn AsKeyRef + 'a {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_keyref().hash(state)
    }
}

impl<'a> PartialOrd for dyn AsKeyRef + 'a {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<'a> Ord for dyn AsKeyRef + 'a {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_keyref().cmp(&other.as_keyref())
    }
}

/// Implement `Borrow<dyn AsKeyRef>` for `Key` to enable efficient lookups.
impl<'a> Borrow<dyn AsKeyRef + 'a> for Key {
    fn borrow(&self) -> &(dyn AsKeyRef + 'a) {
        self
    }
}

/// Implement conversions from primitive types to [`Key`]
impl From<String> for Key {
    fn from(v: String) -> Self {
        Key::String(v.into())
    }
}

impl From<Arc<String>> for Key {
    fn from(v: Arc<String>) -> Self {
        Key::String(v)
    }
}

impl<'a> From<&'a str> for Key {
    fn from(v: &'a str) -> Self {
        Key::String(Arc::new(v.into()))
    }
}

impl From<bool> for Key {
    fn from(v: bool) -> Self {
        Key::Bool(v)
    }
}

impl From<i64> for Key {
    fn from(v: i64) -> Self {
        Key::Int(v)
    }
}

impl From<i32> for Key {
    fn from(v: i32) -> Self {
        Key::Int(v as i64)
    }
}

impl From<u64> for Key {
    fn from(v: u64) -> Self {
        Key::Uint(v)
    }
}

impl From<u32> for Key {
    fn from(v: u32) -> Self {
        Key::Uint(v as u64)
    }
}

impl serde::Serialize for Key {
    fn serialize<S>(&self, serializer: S) -> Result<S::Ok, S::Error>
    where
        S: serde::Serializer,
    {
        match self {
            Key::Int(v) => v.serialize(serializer),
            Key::Uint(v) => v.serialize(serializer),
            Key::Bool(v) => v.serialize(serializer),
            Key::String(v) => v.serialize(serializer),
        }
    }
}

impl Display for Key {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Int(v) => write!(f, "{v}"),
            Key::Uint(v) => write!(f, "{v}"),
            Key::Bool(v) => write!(f, "{v}"),
            Key::String(v) => write!(f, "{v}"),
        }
    }
}

/// Implement conversions from [`Key`] into [`Value`]
impl TryInto<Key> for Value {
    type Error = Value;

    #[inline(always)]
    fn try_into(self) -> Result<Key, Self::Error> {
        match self {
            Value::Int(v) => Ok(Key::Int(v)),
            Value::UInt(v) => Ok(Key::Uint(v)),
            Value::String(v) => Ok(Key::String(v)),
            Value::Bool(v) => Ok(Key::Bool(v)),
            _ => Err(self),
        }
    }
}

/// Implement conversions from [`KeyRef`] into [`Value`]
impl<'a> TryFrom<&'a Value> for KeyRef<'a> {
    type Error = Value;

    fn try_from(value: &'a Value) -> Result<Self, Self::Error> {
        match value {
            Value::Int(v) => Ok(KeyRef::Int(*v)),
            Value::UInt(v) => Ok(KeyRef::Uint(*v)),
            Value::String(v) => Ok(KeyRef::String(v.as_str())),
            Value::Bool(v) => Ok(KeyRef::Bool(*v)),
            _ => Err(value.clone()),
        }
    }
}

// Implement conversion from HashMap<K, V> into CelMap
impl<K: Into<Key>, V: Into<Value>> From<HashMap<K, V>> for Map {
    fn from(map: HashMap<K, V>) -> Self {
        let mut new_map = HashMap::with_capacity(map.len());
        for (k, v) in map {
            new_map.insert(k.into(), v.into());
        }
        Map {
            map: Arc::new(new_map),
        }
    }
}

/// Equality helper for [`Opaque`] values.
///
/// Implementors define how two values of the same runtime type compare for
/// equality when stored as [`Value::Opaque`].
///
/// You normally don't implement this trait manually. It is automatically
/// provided for any `T: Eq + PartialEq + Any + Opaque` (see the blanket impl
/// below). The runtime will first ensure the two values have the same
/// [`Opaque::runtime_type_name`], and only then attempt a downcast and call
/// `Eq::eq`.
pub trait OpaqueEq {
    /// Compare with another [`Opaque`] erased value.
    ///
    /// Implementations should return `false` if `other` does not have the same
    /// runtime type, or if it cannot be downcast to the concrete type of `self`.
    fn opaque_eq(&self, other: &dyn Opaque) -> bool;
}

impl<T> OpaqueEq for T
where
    T: Eq + PartialEq + Any + Opaque,
{
    fn opaque_eq(&self, other: &dyn Opaque) -> bool {
        if self.runtime_type_name() != other.runtime_type_name() {
            return false;
        }
        if let Some(other) = other.downcast_ref::<T>() {
            self.eq(other)
        } else {
            false
        }
    }
}

/// Helper trait to obtain a `&dyn Debug` view.
///
/// This is auto-implemented for any `T: Debug` and is used by the runtime to
/// format [`Opaque`] values without knowing their concrete type.
pub trait AsDebug {
    /// Returns `self` as a `&dyn Debug` trait object.
    fn as_debug(&self) -> &dyn Debug;
}

impl<T> AsDebug for T
where
    T: Debug,
{
    fn as_debug(&self) -> &dyn Debug {
        self
    }
}

/// Trait for user-defined opaque values stored inside [`Value::Opaque`].
///
/// Implement this trait for types that should participate in CEL evaluation as
/// opaque/user-defined values. An opaque value:
/// - must report a stable runtime type name via [`runtime_type_name`];
/// - participates in equality via the blanket [`OpaqueEq`] implementation;
/// - can be formatted via [`AsDebug`];
/// - must be thread-safe (`Send + Sync`).
///
/// When the `json` feature is enabled you may optionally provide a JSON
/// representation for diagnostics, logging or interop. Returning `None` keeps the
/// value non-serializable for JSON.
///
/// Example
/// ```rust
/// use std::fmt::{Debug, Formatter, Result as FmtResult};
/// use std::sync::Arc;
/// use cel::objects::{Opaque, Value};
///
/// #[derive(Eq, PartialEq)]
/// struct MyId(u64);
///
/// impl Debug for MyId {
///     fn fmt(&self, f: &mut Formatter<'_>) -> FmtResult { write!(f, "MyId({})", self.0) }
/// }
///
/// impl Opaque for MyId {
///     fn runtime_type_name(&self) -> &str { "example.MyId" }
/// }
///
/// // Values of `MyId` can now be wrapped in `Value::Opaque` and compared.
/// let a = Value::Opaque(Arc::new(MyId(7)));
/// let b = Value::Opaque(Arc::new(MyId(7)));
/// assert_eq!(a, b);
/// ```
pub trait Opaque: Any + OpaqueEq + AsDebug + Send + Sync {
    /// Returns a stable, fully-qualified type name for this value's runtime type.
    ///
    /// This name is used to check type compatibility before attempting downcasts
    /// during equality checks and other operations. It should be stable across
    /// versions and unique within your application or library (e.g., a package
    /// qualified name like `my.pkg.Type`).
    fn runtime_type_name(&self) -> &str;

    /// Optional JSON representation (requires the `json` feature).
    ///
    /// The default implementation returns `None`, indicating that the value
    /// cannot be represented as JSON.
    #[cfg(feature = "json")]
    fn json(&self) -> Option<serde_json::Value> {
        None
    }
}

impl dyn Opaque {
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        let any: &dyn Any = self;
        any.downcast_ref()
    }
}

#[derive(Clone)]
struct OpaqueVal(Arc<dyn Opaque>);

impl Debug for OpaqueVal {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpaqueVal<{}>", self.0.runtime_type_name())
    }
}

impl Val for OpaqueVal {
    fn get_type(&self) -> Type<'_> {
        Type::new_opaque_type(self.0.runtime_type_name())
    }

    fn equals(&self, other: &dyn Val) -> bool {
        if other.get_type() != self.get_type() {
            false
        } else {
            match other.downcast_ref::<OpaqueVal>() {
                None => false,
                Some(other) => self.0.opaque_eq(other.0.deref()),
            }
        }
    }

    fn clone_as_boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

impl OpaqueVal {
    fn clone_inner(&self) -> Arc<dyn Opaque> {
        self.0.clone()
    }
}

/// gpu-admission patch: a type as a value, what `type(x)` answers and what
/// a type's name denotes in an expression (`int`, `list`, `null_type`...).
/// Two are equal when they name the same type.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct TypeValue(Cow<'static, str>);

impl TypeValue {
    /// The names that denote types when no variable has them.
    pub const DENOTATIONS: &'static [&'static str] = &[
        "bool",
        "bytes",
        "double",
        "int",
        "list",
        "map",
        "null_type",
        "optional_type",
        "string",
        "type",
        "uint",
        // Qualified names: what `type()` answers for timestamps and
        // durations, and for the values of Kubernetes' ip and cidr
        // libraries (kube-cel's `ip()`, `cidr()`).
        "google.protobuf.Duration",
        "google.protobuf.Timestamp",
        "net.CIDR",
        "net.IP",
    ];

    /// The type named `name`.
    pub fn named(name: impl Into<Cow<'static, str>>) -> TypeValue {
        TypeValue(name.into())
    }

    /// The type `name` denotes, if it is one of [`TypeValue::DENOTATIONS`].
    pub fn denoted(name: &str) -> Option<TypeValue> {
        Self::DENOTATIONS
            .iter()
            .find(|n| **n == name)
            .map(|n| TypeValue(Cow::Borrowed(n)))
    }

    /// The type a qualified name (`net.IP`: selections over an identifier)
    /// denotes, if it is one of [`TypeValue::DENOTATIONS`]; `None` for a
    /// field test (`has()`). The caller checks that no variable has the
    /// first name.
    pub fn denoted_by(expr: &Expr) -> Option<(TypeValue, &str)> {
        fn name(expr: &Expr, out: &mut String) -> Option<()> {
            match expr {
                Expr::Ident(root) => out.push_str(root),
                Expr::Select(s) if !s.test => {
                    name(&s.operand.expr, out)?;
                    out.push('.');
                    out.push_str(&s.field);
                }
                _ => return None,
            }
            Some(())
        }
        // gpu-admission patch: a selection whose field ends no qualified
        // name (every field of an object but these few) is not one; the
        // check comes before the name is built. Every qualified name ends
        // in a capitalised word, so a field that does not start with a
        // capital is turned away on its first byte.
        let Expr::Select(last) = expr else {
            return None;
        };
        let field = last.field.as_str();
        if !field.starts_with(|c: char| c.is_ascii_uppercase()) {
            return None;
        }
        let ends = |n: &&str| {
            n.len() > field.len()
                && n.ends_with(field)
                && n.as_bytes()[n.len() - field.len() - 1] == b'.'
        };
        if !Self::DENOTATIONS.iter().any(ends) {
            return None;
        }
        let mut root = expr;
        while let Expr::Select(s) = root {
            root = &s.operand.expr;
        }
        let Expr::Ident(root) = root else {
            return None;
        };
        let mut full = String::new();
        name(expr, &mut full)?;
        Some((Self::denoted(&full)?, root))
    }

    /// The type of `value`.
    pub fn of(value: &Value) -> TypeValue {
        TypeValue(Cow::Borrowed(match value.peel_preconverted() {
            Value::List(_) => "list",
            Value::Map(_) => "map",
            Value::Function(..) => "function",
            Value::Int(_) => "int",
            Value::UInt(_) => "uint",
            Value::Float(_) => "double",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Bool(_) => "bool",
            #[cfg(feature = "chrono")]
            Value::Duration(_) => "google.protobuf.Duration",
            #[cfg(feature = "chrono")]
            Value::Timestamp(_) => "google.protobuf.Timestamp",
            Value::Null => "null_type",
            Value::Opaque(o) if o.downcast_ref::<TypeValue>().is_some() => "type",
            Value::Opaque(o) => return TypeValue(Cow::Owned(o.runtime_type_name().to_string())),
        }))
    }

    /// The type's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Opaque for TypeValue {
    fn runtime_type_name(&self) -> &str {
        "type"
    }

    #[cfg(feature = "json")]
    fn json(&self) -> Option<serde_json::Value> {
        Some(serde_json::Value::String(self.0.to_string()))
    }
}

impl From<TypeValue> for Value {
    fn from(t: TypeValue) -> Value {
        Value::Opaque(Arc::new(t))
    }
}

#[derive(Debug, Eq, PartialEq)]
pub struct OptionalValue {
    value: Option<Value>,
}

impl OptionalValue {
    pub fn of(value: Value) -> Self {
        OptionalValue { value: Some(value) }
    }
    pub fn none() -> Self {
        OptionalValue { value: None }
    }
    pub fn value(&self) -> Option<&Value> {
        self.value.as_ref()
    }

    pub(crate) fn inner(&self) -> Option<&Value> {
        self.value.as_ref()
    }
}

impl Opaque for OptionalValue {
    fn runtime_type_name(&self) -> &str {
        "optional_type"
    }
}

impl From<OptionalValue> for Option<Value> {
    fn from(value: OptionalValue) -> Self {
        value.value
    }
}

impl<'a> TryFrom<&'a Value> for &'a OptionalValue {
    type Error = ExecutionError;

    fn try_from(value: &'a Value) -> Result<Self, Self::Error> {
        match value {
            Value::Opaque(opaque) if opaque.runtime_type_name() == "optional_type" => opaque
                .downcast_ref::<OptionalValue>()
                .ok_or_else(|| ExecutionError::function_error("optional", "failed to downcast")),
            Value::Opaque(opaque) => Err(ExecutionError::UnexpectedType {
                got: opaque.runtime_type_name().to_string(),
                want: "optional_type".to_string(),
            }),
            v => Err(ExecutionError::UnexpectedType {
                got: v.type_of().to_string(),
                want: "optional_type".to_string(),
            }),
        }
    }
}

pub trait TryIntoValue {
    type Error: std::error::Error + 'static + Send + Sync;
    fn try_into_value(self) -> Result<Value, Self::Error>;
}

impl<T: serde::Serialize> TryIntoValue for T {
    type Error = crate::ser::SerializationError;
    fn try_into_value(self) -> Result<Value, Self::Error> {
        crate::ser::to_value(self)
    }
}
impl TryIntoValue for Value {
    type Error = Infallible;
    fn try_into_value(self) -> Result<Value, Self::Error> {
        Ok(self)
    }
}

#[derive(Clone)]
pub enum Value {
    List(Arc<Vec<Value>>),
    Map(Map),

    Function(Arc<String>, Option<Box<Value>>),

    // Atoms
    Int(i64),
    UInt(u64),
    Float(f64),
    String(Arc<String>),
    Bytes(Arc<Vec<u8>>),
    Bool(bool),
    #[cfg(feature = "chrono")]
    Duration(chrono::Duration),
    #[cfg(feature = "chrono")]
    Timestamp(chrono::DateTime<chrono::FixedOffset>),
    Opaque(Arc<dyn Opaque>),
    Null,
}

impl Debug for Value {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::List(l) => write!(f, "List({:?})", l),
            Value::Map(m) => write!(f, "Map({:?})", m),
            Value::Function(name, func) => write!(f, "Function({:?}, {:?})", name, func),
            Value::Int(i) => write!(f, "Int({:?})", i),
            Value::UInt(u) => write!(f, "UInt({:?})", u),
            Value::Float(d) => write!(f, "Float({:?})", d),
            Value::String(s) => write!(f, "String({:?})", s),
            Value::Bytes(b) => write!(f, "Bytes({:?})", b),
            Value::Bool(b) => write!(f, "Bool({:?})", b),
            #[cfg(feature = "chrono")]
            Value::Duration(d) => write!(f, "Duration({:?})", d),
            #[cfg(feature = "chrono")]
            Value::Timestamp(t) => write!(f, "Timestamp({:?})", t),
            Value::Opaque(o) => write!(f, "Opaque<{}>({:?})", o.runtime_type_name(), o.as_debug()),
            Value::Null => write!(f, "Null"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum ValueType {
    List,
    Map,
    Function,
    Int,
    UInt,
    Float,
    String,
    Bytes,
    Bool,
    Duration,
    Timestamp,
    Opaque,
    Null,
}

impl Display for ValueType {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueType::List => write!(f, "list"),
            ValueType::Map => write!(f, "map"),
            ValueType::Function => write!(f, "function"),
            ValueType::Int => write!(f, "int"),
            ValueType::UInt => write!(f, "uint"),
            ValueType::Float => write!(f, "float"),
            ValueType::String => write!(f, "string"),
            ValueType::Bytes => write!(f, "bytes"),
            ValueType::Bool => write!(f, "bool"),
            ValueType::Opaque => write!(f, "opaque"),
            ValueType::Duration => write!(f, "duration"),
            ValueType::Timestamp => write!(f, "timestamp"),
            ValueType::Null => write!(f, "null"),
        }
    }
}

impl Value {
    pub fn type_of(&self) -> ValueType {
        match self {
            Value::List(_) => ValueType::List,
            Value::Map(_) => ValueType::Map,
            Value::Function(_, _) => ValueType::Function,
            Value::Int(_) => ValueType::Int,
            Value::UInt(_) => ValueType::UInt,
            Value::Float(_) => ValueType::Float,
            Value::String(_) => ValueType::String,
            Value::Bytes(_) => ValueType::Bytes,
            Value::Bool(_) => ValueType::Bool,
            Value::Opaque(_) => ValueType::Opaque,
            #[cfg(feature = "chrono")]
            Value::Duration(_) => ValueType::Duration,
            #[cfg(feature = "chrono")]
            Value::Timestamp(_) => ValueType::Timestamp,
            Value::Null => ValueType::Null,
        }
    }

    pub fn is_zero(&self) -> bool {
        match self {
            Value::List(v) => v.is_empty(),
            Value::Map(v) => v.map.is_empty(),
            Value::Int(0) => true,
            Value::UInt(0) => true,
            Value::Float(f) => *f == 0.0,
            Value::String(v) => v.is_empty(),
            Value::Bytes(v) => v.is_empty(),
            Value::Bool(false) => true,
            #[cfg(feature = "chrono")]
            Value::Duration(v) => v.is_zero(),
            Value::Null => true,
            _ => false,
        }
    }

    pub fn error_expected_type(&self, expected: ValueType) -> ExecutionError {
        ExecutionError::UnexpectedType {
            got: self.type_of().to_string(),
            want: expected.to_string(),
        }
    }
}

impl From<&Value> for Value {
    fn from(value: &Value) -> Self {
        value.clone()
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        // gpu-admission patch: a `Preconverted` compares as the value it holds.
        match (self.peel_preconverted(), other.peel_preconverted()) {
            (Value::Map(a), Value::Map(b)) => a == b,
            (Value::List(a), Value::List(b)) => a == b,
            (Value::Function(a1, a2), Value::Function(b1, b2)) => a1 == b1 && a2 == b2,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::UInt(a), Value::UInt(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Bytes(a), Value::Bytes(b)) => a == b,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Null, Value::Null) => true,
            #[cfg(feature = "chrono")]
            (Value::Duration(a), Value::Duration(b)) => a == b,
            #[cfg(feature = "chrono")]
            (Value::Timestamp(a), Value::Timestamp(b)) => a == b,
            // Allow different numeric types to be compared without explicit casting.
            (Value::Int(a), Value::UInt(b)) => a
                .to_owned()
                .try_into()
                .map(|a: u64| a == *b)
                .unwrap_or(false),
            (Value::Int(a), Value::Float(b)) => (*a as f64) == *b,
            (Value::UInt(a), Value::Int(b)) => a
                .to_owned()
                .try_into()
                .map(|a: i64| a == *b)
                .unwrap_or(false),
            (Value::UInt(a), Value::Float(b)) => (*a as f64) == *b,
            (Value::Float(a), Value::Int(b)) => *a == (*b as f64),
            (Value::Float(a), Value::UInt(b)) => *a == (*b as f64),
            (Value::Opaque(a), Value::Opaque(b)) => a.opaque_eq(b.deref()),
            (_, _) => false,
        }
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
            (Value::UInt(a), Value::UInt(b)) => Some(a.cmp(b)),
            (Value::Float(a), Value::Float(b)) => a.partial_cmp(b),
            (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (Value::Null, Value::Null) => Some(Ordering::Equal),
            #[cfg(feature = "chrono")]
            (Value::Duration(a), Value::Duration(b)) => Some(a.cmp(b)),
            #[cfg(feature = "chrono")]
            (Value::Timestamp(a), Value::Timestamp(b)) => Some(a.cmp(b)),
            // Allow different numeric types to be compared without explicit casting.
            (Value::Int(a), Value::UInt(b)) => Some(
                a.to_owned()
                    .try_into()
                    .map(|a: u64| a.cmp(b))
                    // If the i64 doesn't fit into a u64 it must be less than 0.
                    .unwrap_or(Ordering::Less),
            ),
            (Value::Int(a), Value::Float(b)) => (*a as f64).partial_cmp(b),
            (Value::UInt(a), Value::Int(b)) => Some(
                a.to_owned()
                    .try_into()
                    .map(|a: i64| a.cmp(b))
                    // If the u64 doesn't fit into a i64 it must be greater than i64::MAX.
                    .unwrap_or(Ordering::Greater),
            ),
            (Value::UInt(a), Value::Float(b)) => (*a as f64).partial_cmp(b),
            (Value::Float(a), Value::Int(b)) => a.partial_cmp(&(*b as f64)),
            (Value::Float(a), Value::UInt(b)) => a.partial_cmp(&(*b as f64)),
            _ => None,
        }
    }
}

impl From<&Key> for Value {
    fn from(value: &Key) -> Self {
        match value {
            Key::Int(v) => Value::Int(*v),
            Key::Uint(v) => Value::UInt(*v),
            Key::Bool(v) => Value::Bool(*v),
            Key::String(v) => Value::String(v.clone()),
        }
    }
}

impl From<Key> for Value {
    fn from(value: Key) -> Self {
        match value {
            Key::Int(v) => Value::Int(v),
            Key::Uint(v) => Value::UInt(v),
            Key::Bool(v) => Value::Bool(v),
            Key::String(v) => Value::String(v),
        }
    }
}

impl From<&Key> for Key {
    fn from(key: &Key) -> Self {
        key.clone()
    }
}

// Convert Vec<T> to Value
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::List(v.into_iter().map(|v| v.into()).collect::<Vec<_>>().into())
    }
}

// Convert Vec<u8> to Value
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v.into())
    }
}

#[cfg(feature = "bytes")]
// Convert Bytes to Value
impl From<::bytes::Bytes> for Value {
    fn from(v: ::bytes::Bytes) -> Self {
        Value::Bytes(v.to_vec().into())
    }
}

#[cfg(feature = "bytes")]
// Convert &Bytes to Value
impl From<&::bytes::Bytes> for Value {
    fn from(v: &::bytes::Bytes) -> Self {
        Value::Bytes(v.to_vec().into())
    }
}

// Convert String to Value
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v.into())
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_string().into())
    }
}

// Convert Option<T> to Value
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        match v {
            Some(v) => v.into(),
            None => Value::Null,
        }
    }
}

// Convert HashMap<K, V> to Value
impl<K: Into<Key>, V: Into<Value>> From<HashMap<K, V>> for Value {
    fn from(v: HashMap<K, V>) -> Self {
        Value::Map(v.into())
    }
}

impl From<ExecutionError> for ResolveResult {
    fn from(value: ExecutionError) -> Self {
        Err(value)
    }
}

pub type ResolveResult = Result<Value, ExecutionError>;

impl From<Value> for ResolveResult {
    fn from(value: Value) -> Self {
        Ok(value)
    }
}

impl TryFrom<&dyn Val> for Value {
    type Error = ExecutionError;
    fn try_from(v: &dyn Val) -> Result<Self, Self::Error> {
        match v.get_type() {
            BOOL_TYPE => Ok(Value::Bool(*v.downcast_ref::<CelBool>().unwrap().inner())),
            INT_TYPE => Ok(Value::Int(*v.downcast_ref::<CelInt>().unwrap().inner())),
            UINT_TYPE => Ok(Value::UInt(*v.downcast_ref::<CelUInt>().unwrap().inner())),
            DOUBLE_TYPE => Ok(Value::Float(
                *v.downcast_ref::<CelDouble>().unwrap().inner(),
            )),
            STRING_TYPE => Ok(Value::String(Arc::new(
                v.downcast_ref::<CelString>().unwrap().inner().to_string(),
            ))),
            NULL_TYPE => Ok(Value::Null),
            BYTES_TYPE => Ok(Value::Bytes(Arc::new(
                v.downcast_ref::<CelBytes>().unwrap().inner().to_vec(),
            ))),
            #[cfg(feature = "chrono")]
            DURATION_TYPE => Ok(Value::Duration(
                *v.downcast_ref::<CelDuration>().unwrap().inner(),
            )),
            #[cfg(feature = "chrono")]
            TIMESTAMP_TYPE => {
                let ts = v.downcast_ref::<CelTimestamp>().unwrap().inner();
                Ok(Value::Timestamp(*ts))
            }
            LIST_TYPE => {
                let list = v.downcast_ref::<CelList>().unwrap().inner();
                Ok(Value::List(Arc::new(
                    list.iter()
                        .map(|i| i.as_ref().try_into().expect("Not a Value list item"))
                        .collect(),
                )))
            }
            MAP_TYPE => {
                let map = v.downcast_ref::<CelMap>().unwrap().inner();
                Ok(Value::Map(Map {
                    map: Arc::new(
                        map.iter()
                            .map(|(k, v)| {
                                (
                                    Key::from(k.clone()),
                                    Value::try_from(v.as_ref()).expect("Not a Value map value"),
                                )
                            })
                            .collect(),
                    ),
                }))
            }
            OPTIONAL_TYPE => Ok(Value::Opaque(match v.downcast_ref::<CelOptional>() {
                None => v.downcast_ref::<OpaqueVal>().unwrap().clone_inner(),
                Some(opt) => {
                    let opt: Option<Result<Value, _>> = opt.option().map(|v| v.try_into());
                    match opt {
                        None => Arc::new(OptionalValue::none()),
                        Some(t) => match t {
                            Ok(v) => Arc::new(OptionalValue::of(v)),
                            Err(_) => Arc::new(OptionalValue::none()),
                        },
                    }
                }
            })),
            _ => {
                if let Some(opaque) = v.downcast_ref::<OpaqueVal>() {
                    Ok(Value::Opaque(opaque.0.clone()))
                } else {
                    Err(ExecutionError::UnexpectedType {
                        got: v.get_type().name().to_string(),
                        want:
                            "(BOOL|INT|UINT|DOUBLE|STRING|NULL|BYTES|TIMESTAMP|DURATION|LIST|MAP)"
                                .to_string(),
                    })
                }
            }
        }
    }
}

impl TryFrom<Value> for Box<dyn Val> {
    type Error = ExecutionError;
    fn try_from(value: Value) -> Result<Self, Self::Error> {
        match value {
            Value::Bool(b) => Ok(Box::new(CelBool::from(b))),
            Value::Int(i) => Ok(Box::new(CelInt::from(i))),
            Value::UInt(u) => Ok(Box::new(CelUInt::from(u))),
            Value::Float(f) => Ok(Box::new(CelDouble::from(f))),
            Value::String(s) => Ok(Box::new(CelString::from(s.as_str()))),
            Value::Null => Ok(Box::new(CelNull)),
            Value::Bytes(b) => Ok(Box::new(CelBytes::from(b.as_slice().to_vec()))),
            #[cfg(feature = "chrono")]
            Value::Duration(d) => Ok(Box::new(CelDuration::from(d))),
            #[cfg(feature = "chrono")]
            Value::Timestamp(ts) => Ok(Box::new(CelTimestamp::from(ts))),
            Value::List(l) => {
                let result: Result<Vec<Box<dyn Val>>, ExecutionError> =
                    l.iter().map(|i| i.clone().try_into()).collect();
                Ok(Box::new(CelList::from(result?)))
            }
            Value::Map(map) => {
                let result: Result<CelMapEntries, ExecutionError> = map
                    .map
                    .iter()
                    .map(|(k, v)| v.clone().try_into().map(|v| (k.clone().into(), v)))
                    .collect();
                Ok(Box::new(CelMap::from(result?)))
            }
            Value::Opaque(o) => {
                if let Some(pre) = o.downcast_ref::<Preconverted>() {
                    return Ok(pre.val.clone_as_boxed());
                }
                if let Some(interpreted) = o.downcast_ref::<Interpreted>() {
                    return Ok(interpreted.0.clone_as_boxed());
                }
                let v: Box<dyn Val> = if let Some(value) = o.downcast_ref::<OptionalValue>() {
                    match value.inner() {
                        None => Box::new(CelOptional::none()),
                        Some(v) => Box::new(CelOptional::of(v.clone().try_into()?)),
                    }
                } else {
                    Box::new(OpaqueVal(o))
                };
                Ok(v)
            }
            _ => Err(ExecutionError::UnsupportedTargetType { target: value }),
        }
    }
}

impl Value {
    pub fn resolve_all(expr: &[Expression], ctx: &Context) -> ResolveResult {
        let mut res = Vec::with_capacity(expr.len());
        for expr in expr {
            res.push(Value::resolve(expr, ctx)?);
        }
        Ok(Value::List(res.into()))
    }

    pub fn resolve(expr: &Expression, ctx: &Context) -> ResolveResult {
        Self::resolve_val(expr, ctx)?.as_ref().try_into()
    }

    #[inline(always)]
    pub fn resolve_val<'a>(
        expr: &'a Expression,
        ctx: &'a Context<'a>,
    ) -> Result<Cow<'a, dyn Val>, ExecutionError> {
        // gpu-admission patch: every evaluated node costs one unit, and
        // nesting is bounded so that no expression can overflow the stack.
        let _depth = crate::budget::DepthGuard::node()?;
        Self::resolve_val_unbudgeted(expr, ctx)
    }

    fn resolve_val_unbudgeted<'a>(
        expr: &'a Expression,
        ctx: &'a Context<'a>,
    ) -> Result<Cow<'a, dyn Val>, ExecutionError> {
        match &expr.expr {
            Expr::Literal(literal) => Ok(literal.to_val()),
            Expr::Call(call) => {
                // START OF SPECIAL CASES FOR operators::...
                if call.args.len() == 3 && call.func_name == operators::CONDITIONAL {
                    let cond = Value::resolve_val(&call.args[0], ctx);
                    return if try_bool(cond)? {
                        Value::resolve_val(&call.args[1], ctx)
                    } else {
                        Value::resolve_val(&call.args[2], ctx)
                    };
                }
                if call.args.len() == 2 {
                    match call.func_name.as_str() {
                        operators::LOGICAL_OR => {
                            let left = try_bool(Value::resolve_val(&call.args[0], ctx));
                            // gpu-admission patch: running out of budget,
                            // depth or time stops the evaluation; only value
                            // errors are absorbed by the other operand.
                            let left = absorbable(left)?;
                            return if Ok(true) == left {
                                Ok(Cow::<dyn Val>::Owned(Box::new(CelBool::from(true))))
                            } else {
                                let right = Value::resolve_val(&call.args[1], ctx)?
                                    .downcast_ref::<CelBool>()
                                    .map(|b| *b.inner());
                                match (&left, right) {
                                    (Ok(false), Some(right)) => {
                                        Ok(Cow::<dyn Val>::Owned(Box::new(CelBool::from(right))))
                                    }
                                    (Err(_), Some(true)) => {
                                        Ok(Cow::<dyn Val>::Owned(Box::new(CelBool::from(true))))
                                    }
                                    (_, _) => Err(left.err().unwrap_or(NoSuchOverload)),
                                }
                            };
                        }
                        operators::LOGICAL_AND => {
                            let left = try_bool(Value::resolve_val(&call.args[0], ctx));
                            // gpu-admission patch: see `||`.
                            let left = absorbable(left)?;
                            return if Ok(false) == left {
                                Ok(Cow::<dyn Val>::Owned(Box::new(CelBool::from(false))))
                            } else {
                                let right = Value::resolve_val(&call.args[1], ctx)?
                                    .downcast_ref::<CelBool>()
                                    .map(|b| *b.inner());
                                match (&left, right) {
                                    (Ok(true), Some(right)) => {
                                        Ok(Cow::<dyn Val>::Owned(Box::new(CelBool::from(right))))
                                    }
                                    (Err(_), Some(false)) => {
                                        Ok(Cow::<dyn Val>::Owned(Box::new(CelBool::from(false))))
                                    }
                                    (_, _) => Err(left.err().unwrap_or(NoSuchOverload)),
                                }
                            };
                        }
                        operators::EQUALS => {
                            return Ok(bool(
                                Value::resolve_val(&call.args[0], ctx)?
                                    .eq(&Value::resolve_val(&call.args[1], ctx)?),
                            ))
                        }
                        operators::NOT_EQUALS => {
                            return Ok(bool(
                                Value::resolve_val(&call.args[0], ctx)?
                                    .ne(&Value::resolve_val(&call.args[1], ctx)?),
                            ))
                        }
                        operators::INDEX | operators::OPT_INDEX => {
                            let mut is_optional = call.func_name == operators::OPT_INDEX;
                            let value = Value::resolve_val(&call.args[0], ctx)?;

                            let value = if let Some(opt) = value.downcast_ref::<CelOptional>() {
                                is_optional = true;
                                match opt.inner() {
                                    // todo try to keep this borrowed
                                    Some(v) => Cow::Owned(v.clone_as_boxed()),
                                    None => {
                                        return Ok(Cow::<dyn Val>::Owned(Box::new(
                                            CelOptional::none(),
                                        )))
                                    }
                                }
                            } else {
                                value
                            };

                            let result = match value {
                                Cow::Borrowed(val) => val
                                    .as_indexer()
                                    .ok_or(ExecutionError::NoSuchOverload)?
                                    .get(Self::resolve_val(&call.args[1], ctx)?.as_ref()),
                                Cow::Owned(val) => val
                                    .into_indexer()
                                    .ok_or(ExecutionError::NoSuchOverload)?
                                    .steal(Self::resolve_val(&call.args[1], ctx)?.as_ref())
                                    .map(Cow::Owned),
                            };
                            return if is_optional {
                                Ok(match result {
                                    Ok(val) => Cow::<dyn Val>::Owned(Box::new(CelOptional::from(
                                        val.clone_as_boxed(),
                                    ))),
                                    Err(_) => Cow::<dyn Val>::Owned(Box::new(CelOptional::none())),
                                })
                            } else {
                                result
                            };
                        }
                        operators::OPT_SELECT => {
                            let operand = Value::resolve_val(&call.args[0], ctx)?;
                            let field_literal = Value::resolve_val(&call.args[1], ctx)?;
                            let field = match field_literal.get_type() {
                                STRING_TYPE => field_literal
                                    .downcast_ref::<CelString>()
                                    .expect("field must be string"),
                                _ => {
                                    return Err(ExecutionError::function_error(
                                        "_?._",
                                        "field must be string",
                                    ))
                                }
                            };
                            // gpu-admission patch: `a.?b` is `optional.none()` when `a`
                            // (or the value `a` holds, when it is an optional) has no
                            // field `b`, as in cel-go; upstream raised "no such key" for
                            // a plain operand and nested an optional in an optional.
                            let target = match operand.as_ref().downcast_ref::<CelOptional>() {
                                Some(opt) => match opt.inner() {
                                    Some(inner) => inner,
                                    None => {
                                        return Ok(Cow::<dyn Val>::Owned(Box::new(
                                            CelOptional::none(),
                                        )))
                                    }
                                },
                                None => operand.as_ref(),
                            };
                            let selected = target.as_indexer().ok_or_else(|| NoSuchOverload)?.get(field);
                            return Ok(Cow::<dyn Val>::Owned(Box::new(match selected {
                                Ok(v) => CelOptional::of(v.clone_as_boxed()),
                                Err(_) => CelOptional::none(),
                            })));
                        }
                        // END OF SPECIAL CASES

                        // all below is NOT special in the interpreter
                        operators::ADD => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return Ok(Cow::Owned(
                                lhs.as_ref()
                                    .as_adder()
                                    .ok_or_else(|| {
                                        ExecutionError::UnsupportedBinaryOperator(
                                            "add",
                                            lhs.as_ref().try_into().unwrap_or(Value::Null),
                                            rhs.as_ref().try_into().unwrap_or(Value::Null),
                                        )
                                    })?
                                    .add(rhs.as_ref())?
                                    .into_owned(),
                            ));
                        }
                        operators::SUBSTRACT => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return Ok(Cow::Owned(
                                lhs.as_subtractor()
                                    .ok_or_else(|| {
                                        ExecutionError::UnsupportedBinaryOperator(
                                            "sub",
                                            lhs.as_ref().try_into().unwrap_or(Value::Null),
                                            rhs.as_ref().try_into().unwrap_or(Value::Null),
                                        )
                                    })?
                                    .sub(rhs.as_ref())?
                                    .into_owned(),
                            ));
                        }
                        operators::DIVIDE => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return Ok(Cow::Owned(
                                lhs.as_divider()
                                    .ok_or_else(|| {
                                        ExecutionError::UnsupportedBinaryOperator(
                                            "div",
                                            lhs.as_ref().try_into().unwrap_or(Value::Null),
                                            rhs.as_ref().try_into().unwrap_or(Value::Null),
                                        )
                                    })?
                                    .div(rhs.as_ref())?
                                    .into_owned(),
                            ));
                        }
                        operators::MULTIPLY => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return Ok(Cow::Owned(
                                lhs.as_multiplier()
                                    .ok_or_else(|| {
                                        ExecutionError::UnsupportedBinaryOperator(
                                            "mul",
                                            lhs.as_ref().try_into().unwrap_or(Value::Null),
                                            rhs.as_ref().try_into().unwrap_or(Value::Null),
                                        )
                                    })?
                                    .mul(rhs.as_ref())?
                                    .into_owned(),
                            ));
                        }
                        operators::MODULO => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return Ok(Cow::Owned(
                                lhs.as_modder()
                                    .ok_or_else(|| {
                                        ExecutionError::UnsupportedBinaryOperator(
                                            "rem",
                                            lhs.as_ref().try_into().unwrap_or(Value::Null),
                                            rhs.as_ref().try_into().unwrap_or(Value::Null),
                                        )
                                    })?
                                    .modulo(rhs.as_ref())?
                                    .into_owned(),
                            ));
                        }
                        operators::LESS => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return Ok(bool(
                                lhs.as_comparer()
                                    .ok_or(ExecutionError::NoSuchOverload)?
                                    .compare(rhs.as_ref())?
                                    == Ordering::Less,
                            ));
                        }
                        operators::LESS_EQUALS => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return if lhs
                                .as_comparer()
                                .ok_or(ExecutionError::NoSuchOverload)?
                                .compare(rhs.as_ref())?
                                == Ordering::Greater
                            {
                                Ok(bool(false))
                            } else {
                                Ok(bool(true))
                            };
                        }
                        operators::GREATER => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return Ok(bool(
                                lhs.as_comparer()
                                    .ok_or(ExecutionError::NoSuchOverload)?
                                    .compare(rhs.as_ref())?
                                    == Ordering::Greater,
                            ));
                        }
                        operators::GREATER_EQUALS => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return if lhs
                                .as_comparer()
                                .ok_or(ExecutionError::NoSuchOverload)?
                                .compare(rhs.as_ref())?
                                == Ordering::Less
                            {
                                Ok(bool(false))
                            } else {
                                Ok(bool(true))
                            };
                        }
                        operators::IN => {
                            let lhs = Value::resolve_val(&call.args[0], ctx)?;
                            let rhs = Value::resolve_val(&call.args[1], ctx)?;
                            return if let Some(container) = rhs.as_container() {
                                Ok(bool(container.contains(lhs.as_ref())?))
                            } else {
                                Err(ExecutionError::NoSuchOverload)
                            };
                        }
                        _ => (),
                    }
                }
                if call.args.len() == 1 {
                    match call.func_name.as_str() {
                        operators::LOGICAL_NOT => {
                            // gpu-admission patch: `!` of an error a fold
                            // kept is that error (see `try_bool`).
                            return try_bool(Value::resolve_val(&call.args[0], ctx))
                                .map(|b| bool(!b));
                        }
                        operators::NEGATE => {
                            let val = Value::resolve_val(&call.args[0], ctx)?;
                            return Ok(Cow::<dyn Val>::Owned(
                                val.as_negator()
                                    .ok_or(ExecutionError::NoSuchOverload)?
                                    .negate()?,
                            ));
                        }
                        operators::NOT_STRICTLY_FALSE => {
                            return Ok(bool(
                                try_bool(Value::resolve_val(&call.args[0], ctx)).unwrap_or(true),
                            ));
                        }
                        _ => (),
                    }
                }
                match &call.target {
                    None => {
                        let func = ctx.get_function(call.func_name.as_str()).ok_or_else(|| {
                            ExecutionError::UndeclaredReference(call.func_name.clone().into())
                        })?;
                        // todo fix this to _not_ use `Value`
                        let mut ctx = FunctionContext::new(&call.func_name, None, ctx, &call.args);
                        let v = (func)(&mut ctx)?;
                        crate::budget::charge_value(&v)?;
                        Ok(Cow::<dyn Val>::Owned(TryInto::<Box<dyn Val>>::try_into(v)?))
                    }
                    Some(target) => {
                        let qualified_func = match &target.expr {
                            Expr::Ident(prefix) => {
                                let qualified_name = format!("{prefix}.{}", &call.func_name);
                                ctx.get_function(&qualified_name)
                            }
                            _ => None,
                        };
                        match qualified_func {
                            None => {
                                let func =
                                    ctx.get_function(call.func_name.as_str()).ok_or_else(|| {
                                        ExecutionError::UndeclaredReference(
                                            call.func_name.clone().into(),
                                        )
                                    })?;
                                let target: Value =
                                    Value::resolve_val(target, ctx)?.as_ref().try_into()?;
                                crate::budget::charge_value(&target)?;
                                let mut ctx = FunctionContext::new(
                                    &call.func_name,
                                    Some(target),
                                    ctx,
                                    &call.args,
                                );
                                // todo fix this to _not_ use `Value`
                                let v = (func)(&mut ctx)?;
                                crate::budget::charge_value(&v)?;
                                Ok(Cow::<dyn Val>::Owned(TryInto::<Box<dyn Val>>::try_into(v)?))
                            }
                            Some(func) => {
                                let mut ctx =
                                    FunctionContext::new(&call.func_name, None, ctx, &call.args);
                                // todo fix this to _not_ use `Value`
                                let v = (func)(&mut ctx)?;
                                crate::budget::charge_value(&v)?;
                                Ok(Cow::<dyn Val>::Owned(TryInto::<Box<dyn Val>>::try_into(v)?))
                            }
                        }
                    }
                }
            }
            Expr::Ident(name) => match ctx.get_variable(name) {
                Some(v) => Ok(v),
                // gpu-admission patch: a type's name denotes the type.
                None => match TypeValue::denoted(name) {
                    Some(t) => Ok(Cow::Owned(Box::new(OpaqueVal(Arc::new(t))) as Box<dyn Val>)),
                    None => Err(ExecutionError::UndeclaredReference(Arc::new(name.to_string()))),
                },
            },
            Expr::Select(select) => {
                // gpu-admission patch: a qualified type name (`net.IP`)
                // denotes the type when no variable has its first name.
                if let Some((t, _)) = TypeValue::denoted_by(&expr.expr)
                    .filter(|(_, root)| ctx.get_variable(root).is_none())
                {
                    return Ok(Cow::Owned(Box::new(OpaqueVal(Arc::new(t))) as Box<dyn Val>));
                }
                let left = Value::resolve_val(select.operand.deref(), ctx)?;
                match left.get_type() {
                    MAP_TYPE => {
                        // gpu-admission patch: a field of a `CelMap` is looked
                        // up without building a key, and a field of a
                        // borrowed map (a variable, or a field of one) is
                        // borrowed too.
                        let field = select.field.as_str();
                        if let Some(map) = left.downcast_ref::<CelMap>() {
                            if select.test {
                                return Ok(bool(map.get_field(field).is_some()));
                            }
                            let missing = || ExecutionError::NoSuchKey(Arc::new(field.to_string()));
                            return match left {
                                Cow::Borrowed(left) => left
                                    .downcast_ref::<CelMap>()
                                    .and_then(|map| map.get_field(field))
                                    .map(Cow::Borrowed)
                                    .ok_or_else(missing),
                                Cow::Owned(left) => left
                                    .downcast_ref::<CelMap>()
                                    .and_then(|map| map.get_field(field))
                                    .map(|v| Cow::Owned(v.clone_as_boxed()))
                                    .ok_or_else(missing),
                            };
                        }
                        let key: CelString = field.into();
                        if select.test {
                            Ok(bool(
                                left.as_container()
                                    .ok_or_else(|| {
                                        ExecutionError::NoSuchKey(Arc::new(key.inner().to_string()))
                                    })?
                                    .contains(&key)?,
                            ))
                        } else {
                            // todo avoid cloning when not needed
                            Ok(Cow::<dyn Val>::Owned(
                                left.as_indexer()
                                    .ok_or_else(|| {
                                        ExecutionError::NoSuchKey(Arc::new(key.inner().to_string()))
                                    })?
                                    .get(&key)?
                                    .into_owned(),
                            ))
                        }
                    }
                    // gpu-admission patch: a field of an optional is an
                    // optional (`optional.of(m).f` is `optional.of(m).?f`,
                    // and stays `optional.none()` past an empty one), and
                    // `has()` through an optional asks the value it holds.
                    OPTIONAL_TYPE => {
                        let inner = left
                            .downcast_ref::<CelOptional>()
                            .and_then(|opt| opt.inner());
                        let field: CelString = select.field.as_str().into();
                        let found = match inner {
                            None => None,
                            Some(inner) => match inner.get_type() {
                                MAP_TYPE => inner
                                    .as_indexer()
                                    .and_then(|m| m.get(&field).ok())
                                    .map(|v| v.into_owned()),
                                _ => return Err(no_field_selection(inner, &select.field)),
                            },
                        };
                        if select.test {
                            Ok(bool(found.is_some()))
                        } else {
                            Ok(Cow::<dyn Val>::Owned(Box::new(CelOptional::from(found))))
                        }
                    }
                    // gpu-admission patch: selecting a field of a value that
                    // has no fields (a number, a string, a bool, null, a
                    // list) is an error, as the spec says; upstream answered
                    // `false`, so `!x.enabled` on a bool `x` was `true`.
                    _ => Err(no_field_selection(left.as_ref(), &select.field)),
                }
            }
            Expr::List(list_expr) => {
                let list = list_expr
                    .elements
                    .iter()
                    .enumerate()
                    .map(|(idx, element)| {
                        Value::resolve_val(element, ctx).map(|value| {
                            if list_expr.optional_indices.contains(&idx) {
                                if let Some(opt_val) = value.downcast_ref::<CelOptional>() {
                                    opt_val.inner().map(|v| v.clone_as_boxed())
                                } else {
                                    Some(value.into_owned())
                                }
                            } else {
                                Some(value.into_owned())
                            }
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>();
                Ok(Cow::<dyn Val>::Owned(Box::new(CelList::from(list))))
            }
            Expr::Map(map_expr) => {
                let mut map = CelMapEntries::with_capacity_and_hasher(
                    map_expr.entries.len(),
                    Default::default(),
                );
                for entry in map_expr.entries.iter() {
                    let (k, v, is_optional) = match &entry.expr {
                        // gpu-admission patch: an error, not a panic.
                        EntryExpr::StructField(_) => {
                            return Err(ExecutionError::function_error(
                                "map",
                                "a map literal holds entries, not message fields",
                            ))
                        }
                        EntryExpr::MapEntry(e) => (&e.key, &e.value, e.optional),
                    };
                    let key: CelMapKey = Value::resolve_val(k, ctx)?.into_owned().try_into()?;
                    // todo do not clone if not needed!
                    let value = Value::resolve_val(v, ctx)?.into_owned();

                    // gpu-admission patch: a key given twice in a map
                    // literal is an error, as in cel-go (upstream kept the
                    // last value).
                    let value = if is_optional {
                        match value.downcast_ref::<CelOptional>() {
                            Some(opt_val) => match opt_val.inner() {
                                Some(inner) => inner.clone_as_boxed(),
                                None => continue,
                            },
                            None => value,
                        }
                    } else {
                        value
                    };
                    let twin = match &key {
                        CelMapKey::Int(i) => u64::try_from(*i.inner()).ok().map(|u| CelMapKey::UInt(u.into())),
                        CelMapKey::UInt(u) => i64::try_from(*u.inner()).ok().map(|i| CelMapKey::Int(i.into())),
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
                let map: Box<CelMap> = CelMap::from(map).into();
                Ok(Cow::<dyn Val>::Owned(map))
            }
            Expr::Comprehension(comprehension) => {
                let accu_init = Value::resolve_val(&comprehension.accu_init, ctx)?;
                let iter = Value::resolve_val(&comprehension.iter_range, ctx)?;
                let mut ctx = ctx.new_inner_scope();
                // gpu-admission patch: the accumulator and each element are
                // bound as they are (borrowed where they were), not boxed.
                ctx.set_variable_as_val(&comprehension.accu_var, accu_init);

                let mut items = iter
                    .as_iterable()
                    .ok_or(ExecutionError::NoSuchOverload)?
                    .iter();
                // gpu-admission patch: two-variable comprehensions bind the
                // index and the element of a list, the key and the value of a map.
                let second = comprehension.iter_var2.as_deref();
                let is_list = iter.get_type() == LIST_TYPE;
                // gpu-admission patch: the accumulator is this scope's slot 0
                // and the iteration variables its slots 1 and 2 once first
                // bound; with distinct names they are bound again by slot on
                // each element, not looked up by name.
                let iter_var = comprehension.iter_var.as_str();
                let accu_var = comprehension.accu_var.as_str();
                let by_slot = iter_var != accu_var
                    && second.is_none_or(|s| s != accu_var && s != iter_var);
                let mut index: i64 = 0;
                while let Some(item) = items.next() {
                    crate::budget::charge(1)?;
                    if !try_bool(Value::resolve_val(&comprehension.loop_cond, &ctx))? {
                        break;
                    }
                    match second {
                        None => bind(&mut ctx, by_slot, 1, iter_var, item),
                        Some(second) if is_list => {
                            let position = Box::new(CelInt::from(index)) as Box<dyn Val>;
                            bind(&mut ctx, by_slot, 1, iter_var, position);
                            bind(&mut ctx, by_slot, 2, second, item);
                        }
                        Some(second) => {
                            let value = iter
                                .as_indexer()
                                .ok_or_else(|| ExecutionError::NoSuchOverload)?
                                .get(item)?
                                .into_owned();
                            bind(&mut ctx, by_slot, 1, iter_var, item);
                            bind(&mut ctx, by_slot, 2, second, value);
                        }
                    }
                    index += 1;
                    let accu = match Value::resolve_val(&comprehension.loop_step, &ctx) {
                        Ok(accu) => accu.into_owned(),
                        // gpu-admission patch: in `all` and `exists` (a step
                        // that is `accu && p` or `accu || p`) an element's
                        // error is kept as the accumulator and a later
                        // element that decides (false, true) wins, as the
                        // spec folds `&&` and `||`: `[1, 2, 3].all(e, 6 / (2
                        // - e) == 6)` is false, whatever the order.
                        Err(e) if folds_logically(&comprehension.loop_step) && is_absorbable(&e) => {
                            Box::new(ErrorVal(e))
                        }
                        Err(e) => return Err(e),
                    };
                    bind(&mut ctx, by_slot, 0, accu_var, accu);
                }
                let result = Value::resolve_val(&comprehension.result, &ctx)?;
                // gpu-admission patch: an error the fold kept is the result.
                if let Some(ErrorVal(e)) = result.downcast_ref::<ErrorVal>() {
                    return Err(e.clone());
                }
                Ok(Cow::<dyn Val>::Owned(result.into_owned()))
            }
            // gpu-admission patch: a struct literal (`JSONPatch{op: "add"}`,
            // `Object.spec{...}`) evaluates to a map of its fields; the
            // message type is not kept (the host knows what it asked for).
            Expr::Struct(struct_expr) => {
                let mut map = CelMapEntries::with_capacity_and_hasher(
                    struct_expr.entries.len(),
                    Default::default(),
                );
                for entry in struct_expr.entries.iter() {
                    let EntryExpr::StructField(field) = &entry.expr else {
                        return Err(ExecutionError::function_error(
                            &struct_expr.type_name,
                            "a message literal holds fields, not map entries",
                        ));
                    };
                    let value = Value::resolve_val(&field.value, ctx)?.into_owned();
                    let key = CelMapKey::from(field.field.as_str());
                    if field.optional {
                        if let Some(opt_val) = value.downcast_ref::<CelOptional>() {
                            if let Some(inner) = opt_val.inner() {
                                map.insert(key, inner.clone_as_boxed());
                            }
                            continue;
                        }
                    }
                    map.insert(key, value);
                }
                let map: Box<CelMap> = CelMap::from(map).into();
                Ok(Cow::<dyn Val>::Owned(map))
            }
            Expr::Unspecified => panic!("Can't evaluate Unspecified Expr"),
        }
    }
}

/// gpu-admission patch: binds a comprehension's variable `name`, by its
/// `slot` in the comprehension's scope when `by_slot` (see the call sites).
fn bind<'a, V: Into<Cow<'a, dyn Val>>>(
    ctx: &mut Context<'a>,
    by_slot: bool,
    slot: usize,
    name: &'a str,
    value: V,
) {
    if by_slot {
        ctx.rebind_slot(slot, name, value);
    } else {
        ctx.set_variable_as_val(name, value);
    }
}

fn bool<'a>(boolean: bool) -> Cow<'a, dyn Val> {
    Cow::<dyn Val>::Owned(Box::new(CelBool::from(boolean)))
}

fn try_bool(val: Result<Cow<dyn Val>, ExecutionError>) -> Result<bool, ExecutionError> {
    match val {
        Ok(val) => match val.downcast_ref::<CelBool>() {
            Some(b) => Ok(*b.inner()),
            // gpu-admission patch: an error kept by a fold (see
            // `ErrorVal`) is that error.
            None => Err(match val.downcast_ref::<ErrorVal>() {
                Some(ErrorVal(e)) => e.clone(),
                None => ExecutionError::NoSuchOverload,
            }),
        },
        Err(err) => Result::Err(err),
    }
}

/// gpu-admission patch: an error `&&` and `||` may absorb (`Ok(Err(e))`),
/// or one that stops the evaluation (`Err(e)`): the budget, the depth
/// bound or the deadline ran out.
fn absorbable(
    val: Result<bool, ExecutionError>,
) -> Result<Result<bool, ExecutionError>, ExecutionError> {
    match val {
        Err(e) if !is_absorbable(&e) => Err(e),
        other => Ok(other),
    }
}

fn is_absorbable(e: &ExecutionError) -> bool {
    !matches!(
        e,
        ExecutionError::CostLimitExceeded
            | ExecutionError::DepthLimitExceeded
            | ExecutionError::DeadlineExceeded
    )
}

/// gpu-admission patch: whether a comprehension's step is `accu && p` or
/// `accu || p` (the expansions of `all` and `exists`, one or two variables).
fn folds_logically(step: &Expression) -> bool {
    matches!(&step.expr, Expr::Call(call)
        if call.args.len() == 2
            && (call.func_name == operators::LOGICAL_AND
                || call.func_name == operators::LOGICAL_OR))
}

/// gpu-admission patch: "field selection: type 'bool' has no field 'x'".
fn no_field_selection(value: &dyn Val, field: &str) -> ExecutionError {
    ExecutionError::function_error(
        "field selection",
        format!("type '{}' has no field '{field}'", value.get_type().name()),
    )
}

/// gpu-admission patch: an element's error an `all` or `exists` keeps as
/// its accumulator until an element decides the result (see the
/// comprehension loop). Never seen outside the comprehension: its result is
/// the error itself.
#[derive(Debug, Clone)]
struct ErrorVal(ExecutionError);

impl Val for ErrorVal {
    fn get_type(&self) -> Type<'_> {
        Type::new_opaque_type("error")
    }

    fn clone_as_boxed(&self) -> Box<dyn Val> {
        Box::new(self.clone())
    }
}

impl ops::Add<Value> for Value {
    type Output = ResolveResult;

    #[inline(always)]
    fn add(self, rhs: Value) -> Self::Output {
        match (self, rhs) {
            (Value::Int(l), Value::Int(r)) => l
                .checked_add(r)
                .ok_or_else(|| ExecutionError::Overflow("add", l.into(), r.into()))
                .map(Value::Int),

            (Value::UInt(l), Value::UInt(r)) => l
                .checked_add(r)
                .ok_or_else(|| ExecutionError::Overflow("add", l.into(), r.into()))
                .map(Value::UInt),

            (Value::Float(l), Value::Float(r)) => Value::Float(l + r).into(),

            (Value::List(mut l), Value::List(mut r)) => {
                {
                    // If this is the only reference to `l`, we can append to it in place.
                    // `l` is replaced with a clone otherwise.
                    let l = Arc::make_mut(&mut l);

                    // Likewise, if this is the only reference to `r`, we can move its values
                    // instead of cloning them.
                    match Arc::get_mut(&mut r) {
                        Some(r) => l.append(r),
                        None => l.extend(r.iter().cloned()),
                    }
                }

                Ok(Value::List(l))
            }
            (Value::String(mut l), Value::String(r)) => {
                // If this is the only reference to `l`, we can append to it in place.
                // `l` is replaced with a clone otherwise.
                Arc::make_mut(&mut l).push_str(&r);
                Ok(Value::String(l))
            }
            #[cfg(feature = "chrono")]
            (Value::Duration(l), Value::Duration(r)) => l
                .checked_add(&r)
                .ok_or_else(|| ExecutionError::Overflow("add", l.into(), r.into()))
                .map(Value::Duration),
            #[cfg(feature = "chrono")]
            (Value::Timestamp(l), Value::Duration(r)) => checked_op(TsOp::Add, &l, &r),
            #[cfg(feature = "chrono")]
            (Value::Duration(l), Value::Timestamp(r)) => r
                .checked_add_signed(l)
                .ok_or_else(|| ExecutionError::Overflow("add", l.into(), r.into()))
                .map(Value::Timestamp),
            (left, right) => Err(ExecutionError::UnsupportedBinaryOperator(
                "add", left, right,
            )),
        }
    }
}

impl ops::Sub<Value> for Value {
    type Output = ResolveResult;

    #[inline(always)]
    fn sub(self, rhs: Value) -> Self::Output {
        match (self, rhs) {
            (Value::Int(l), Value::Int(r)) => l
                .checked_sub(r)
                .ok_or_else(|| ExecutionError::Overflow("sub", l.into(), r.into()))
                .map(Value::Int),

            (Value::UInt(l), Value::UInt(r)) => l
                .checked_sub(r)
                .ok_or_else(|| ExecutionError::Overflow("sub", l.into(), r.into()))
                .map(Value::UInt),

            (Value::Float(l), Value::Float(r)) => Value::Float(l - r).into(),

            #[cfg(feature = "chrono")]
            (Value::Duration(l), Value::Duration(r)) => l
                .checked_sub(&r)
                .ok_or_else(|| ExecutionError::Overflow("sub", l.into(), r.into()))
                .map(Value::Duration),
            #[cfg(feature = "chrono")]
            (Value::Timestamp(l), Value::Duration(r)) => checked_op(TsOp::Sub, &l, &r),
            #[cfg(feature = "chrono")]
            (Value::Timestamp(l), Value::Timestamp(r)) => {
                Value::Duration(l.signed_duration_since(r)).into()
            }
            (left, right) => Err(ExecutionError::UnsupportedBinaryOperator(
                "sub", left, right,
            )),
        }
    }
}

impl ops::Div<Value> for Value {
    type Output = ResolveResult;

    #[inline(always)]
    fn div(self, rhs: Value) -> Self::Output {
        match (self, rhs) {
            (Value::Int(l), Value::Int(r)) => {
                if r == 0 {
                    Err(ExecutionError::DivisionByZero(l.into()))
                } else {
                    l.checked_div(r)
                        .ok_or_else(|| ExecutionError::Overflow("div", l.into(), r.into()))
                        .map(Value::Int)
                }
            }

            (Value::UInt(l), Value::UInt(r)) => l
                .checked_div(r)
                .ok_or_else(|| ExecutionError::DivisionByZero(l.into()))
                .map(Value::UInt),

            (Value::Float(l), Value::Float(r)) => Value::Float(l / r).into(),

            (left, right) => Err(ExecutionError::UnsupportedBinaryOperator(
                "div", left, right,
            )),
        }
    }
}

impl ops::Mul<Value> for Value {
    type Output = ResolveResult;

    #[inline(always)]
    fn mul(self, rhs: Value) -> Self::Output {
        match (self, rhs) {
            (Value::Int(l), Value::Int(r)) => l
                .checked_mul(r)
                .ok_or_else(|| ExecutionError::Overflow("mul", l.into(), r.into()))
                .map(Value::Int),

            (Value::UInt(l), Value::UInt(r)) => l
                .checked_mul(r)
                .ok_or_else(|| ExecutionError::Overflow("mul", l.into(), r.into()))
                .map(Value::UInt),

            (Value::Float(l), Value::Float(r)) => Value::Float(l * r).into(),

            (left, right) => Err(ExecutionError::UnsupportedBinaryOperator(
                "mul", left, right,
            )),
        }
    }
}

impl ops::Rem<Value> for Value {
    type Output = ResolveResult;

    #[inline(always)]
    fn rem(self, rhs: Value) -> Self::Output {
        match (self, rhs) {
            (Value::Int(l), Value::Int(r)) => {
                if r == 0 {
                    Err(ExecutionError::RemainderByZero(l.into()))
                } else {
                    l.checked_rem(r)
                        .ok_or_else(|| ExecutionError::Overflow("rem", l.into(), r.into()))
                        .map(Value::Int)
                }
            }

            (Value::UInt(l), Value::UInt(r)) => l
                .checked_rem(r)
                .ok_or_else(|| ExecutionError::RemainderByZero(l.into()))
                .map(Value::UInt),

            (left, right) => Err(ExecutionError::UnsupportedBinaryOperator(
                "rem", left, right,
            )),
        }
    }
}

/// Op represents a binary arithmetic operation supported on a timestamp
///
#[cfg(feature = "chrono")]
enum TsOp {
    Add,
    Sub,
}

#[cfg(feature = "chrono")]
impl TsOp {
    fn str(&self) -> &'static str {
        match self {
            TsOp::Add => "add",
            TsOp::Sub => "sub",
        }
    }
}

/// Performs a checked arithmetic operation [`TsOp`] on a timestamp and a duration and ensures that
/// the resulting timestamp does not overflow the data type internal limits, as well as the timestamp
/// limits defined in the cel-spec. See [`MAX_TIMESTAMP`] and [`MIN_TIMESTAMP`] for more details.
#[cfg(feature = "chrono")]
fn checked_op(
    op: TsOp,
    lhs: &chrono::DateTime<chrono::FixedOffset>,
    rhs: &chrono::Duration,
) -> ResolveResult {
    // Add lhs and rhs together, checking for data type overflow
    let result = match op {
        TsOp::Add => lhs.checked_add_signed(*rhs),
        TsOp::Sub => lhs.checked_sub_signed(*rhs),
    }
    .ok_or_else(|| ExecutionError::Overflow(op.str(), (*lhs).into(), (*rhs).into()))?;

    // Check for cel-spec limits
    if result > *MAX_TIMESTAMP || result < *MIN_TIMESTAMP {
        Err(ExecutionError::Overflow(
            op.str(),
            (*lhs).into(),
            (*rhs).into(),
        ))
    } else {
        Value::Timestamp(result).into()
    }
}

#[cfg(test)]
mod tests {
    use crate::{objects::Key, Context, ExecutionError, Program, Value};
    use std::collections::HashMap;
    use std::sync::Arc;

    #[test]
    fn test_indexed_map_access() {
        let mut context = Context::default();
        let mut headers = HashMap::new();
        headers.insert("Content-Type", "application/json".to_string());
        context.add_variable_from_value("headers", headers);

        let program = Program::compile("headers[\"Content-Type\"]").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(value, "application/json".into());
    }

    #[test]
    fn test_numeric_map_access() {
        let mut context = Context::default();
        let mut numbers = HashMap::new();
        numbers.insert(Key::Uint(1), "one".to_string());
        context.add_variable_from_value("numbers", numbers);

        let program = Program::compile("numbers[1u]").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(value, "one".into());
    }

    #[test]
    fn test_heterogeneous_compare() {
        let context = Context::default();

        let program = Program::compile("1 < uint(2)").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(value, true.into());

        let program = Program::compile("1 < 1.1").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(value, true.into());

        let program = Program::compile("uint(0) > -10").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(
            value,
            true.into(),
            "negative signed ints should be less than uints"
        );
    }

    #[test]
    fn test_float_compare() {
        let context = Context::default();

        let program = Program::compile("1.0 > 0.0").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(value, true.into());

        let program = Program::compile("double('NaN') == double('NaN')").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(value, false.into(), "NaN should not equal itself");

        let program = Program::compile("1.0 > double('NaN')").unwrap();
        let result = program.execute(&context);
        assert!(
            result.is_err(),
            "NaN should not be comparable with inequality operators"
        );
    }

    #[test]
    fn test_invalid_compare() {
        let context = Context::default();

        let program = Program::compile("{} == []").unwrap();
        let value = program.execute(&context).unwrap();
        assert_eq!(value, false.into());
    }

    #[test]
    fn test_size_fn_var() {
        let program = Program::compile("size(requests) + size == 5").unwrap();
        let mut context = Context::default();
        let requests = vec![Value::Int(42), Value::Int(42)];
        context
            .add_variable("requests", Value::List(Arc::new(requests)))
            .unwrap();
        context.add_variable("size", Value::Int(3)).unwrap();
        assert_eq!(program.execute(&context).unwrap(), Value::Bool(true));
    }

    fn test_execution_error(program: &str, expected: ExecutionError) {
        let program = Program::compile(program).unwrap();
        let result = program.execute(&Context::default());
        assert_eq!(result.unwrap_err(), expected);
    }

    #[test]
    fn test_invalid_sub() {
        test_execution_error(
            "'foo' - 10",
            ExecutionError::UnsupportedBinaryOperator("sub", "foo".into(), Value::Int(10)),
        );
    }

    #[test]
    fn test_invalid_add() {
        test_execution_error(
            "'foo' + 10",
            ExecutionError::UnsupportedBinaryOperator("add", "foo".into(), Value::Int(10)),
        );
    }

    #[test]
    fn test_invalid_div() {
        test_execution_error(
            "'foo' / 10",
            ExecutionError::UnsupportedBinaryOperator("div", "foo".into(), Value::Int(10)),
        );
    }

    #[test]
    fn test_invalid_rem() {
        test_execution_error(
            "'foo' % 10",
            ExecutionError::UnsupportedBinaryOperator("rem", "foo".into(), Value::Int(10)),
        );
    }

    #[test]
    fn out_of_bound_list_access() {
        let program = Program::compile("list[10]").unwrap();
        let mut context = Context::default();
        context
            .add_variable("list", Value::List(Arc::new(vec![])))
            .unwrap();
        let result = program.execute(&context);
        assert_eq!(
            result,
            Err(ExecutionError::IndexOutOfBounds(Value::Int(10)))
        );
    }

    #[test]
    fn out_of_bound_list_access_negative() {
        let program = Program::compile("list[-1]").unwrap();
        let mut context = Context::default();
        context
            .add_variable("list", Value::List(Arc::new(vec![])))
            .unwrap();
        let result = program.execute(&context);
        assert_eq!(
            result,
            Err(ExecutionError::IndexOutOfBounds(Value::Int(-1)))
        );
    }

    #[test]
    fn list_access_uint() {
        let program = Program::compile("list[1u]").unwrap();
        let mut context = Context::default();
        context
            .add_variable("list", Value::List(Arc::new(vec![1.into(), 2.into()])))
            .unwrap();
        let result = program.execute(&context);
        assert_eq!(result, Ok(Value::Int(2.into())));
    }

    #[test]
    fn reference_to_value() {
        let test = "example".to_string();
        let direct: Value = test.as_str().into();
        assert_eq!(direct, Value::String(Arc::new(String::from("example"))));

        let vec = vec![test.as_str()];
        let indirect: Value = vec.into();
        assert_eq!(
            indirect,
            Value::List(Arc::new(vec![Value::String(Arc::new(String::from(
                "example"
            )))]))
        );
    }

    #[test]
    fn test_short_circuit_and() {
        let mut context = Context::default();
        let data: HashMap<String, String> = HashMap::new();
        context.add_variable_from_value("data", data);

        let program = Program::compile("has(data.x) && data.x.startsWith(\"foo\")").unwrap();
        let value = program.execute(&context);
        println!("{value:?}");
        assert!(
            value.is_ok(),
            "The AND expression should support short-circuit evaluation."
        );
    }

    #[test]
    fn test_or_ignores_err_when_short_circuiting() {
        let mut context = Context::default();
        context.add_variable_from_value("foo", 42);
        context.add_variable_from_value("bar", 42);
        let program = Program::compile("foo || bar > 0").unwrap();
        let value = program.execute(&context);
        assert_eq!(value, Ok(true.into()));

        let program = Program::compile("foo || bar < 0").unwrap();
        let value = program.execute(&context);
        assert!(value.is_err());
    }

    #[test]
    fn test_and_ignores_err_when_short_circuiting() {
        let mut context = Context::default();
        context.add_variable_from_value("foo", 42);
        context.add_variable_from_value("bar", 42);
        let program = Program::compile("foo && bar < 0").unwrap();
        let value = program.execute(&context);
        assert_eq!(value, Ok(false.into()));

        let program = Program::compile("foo && bar > 0").unwrap();
        let value = program.execute(&context);
        assert!(value.is_err());
    }

    #[test]
    fn invalid_int_math() {
        use ExecutionError::*;

        let cases = [
            ("1 / 0", DivisionByZero(1.into())),
            ("1 % 0", RemainderByZero(1.into())),
            (
                &format!("{} + 1", i64::MAX),
                Overflow("add", i64::MAX.into(), 1.into()),
            ),
            (
                &format!("{} - 1", i64::MIN),
                Overflow("sub", i64::MIN.into(), 1.into()),
            ),
            (
                &format!("{} * 2", i64::MAX),
                Overflow("mul", i64::MAX.into(), 2.into()),
            ),
            (
                &format!("{} / -1", i64::MIN),
                Overflow("div", i64::MIN.into(), (-1).into()),
            ),
            (
                &format!("{} % -1", i64::MIN),
                Overflow("rem", i64::MIN.into(), (-1).into()),
            ),
        ];

        for (expr, err) in cases {
            test_execution_error(expr, err);
        }
    }

    #[test]
    fn invalid_uint_math() {
        use ExecutionError::*;

        let cases = [
            ("1u / 0u", DivisionByZero(1u64.into())),
            ("1u % 0u", RemainderByZero(1u64.into())),
            (
                &format!("{}u + 1u", u64::MAX),
                Overflow("add", u64::MAX.into(), 1u64.into()),
            ),
            ("0u - 1u", Overflow("sub", 0u64.into(), 1u64.into())),
            (
                &format!("{}u * 2u", u64::MAX),
                Overflow("mul", u64::MAX.into(), 2u64.into()),
            ),
        ];

        for (expr, err) in cases {
            test_execution_error(expr, err);
        }
    }

    #[test]
    fn test_function_identifier() {
        fn with(
            ftx: &crate::FunctionContext,
            crate::extractors::This(this): crate::extractors::This<Value>,
            ident: crate::extractors::Identifier,
            expr: crate::parser::Expression,
        ) -> crate::ResolveResult {
            let mut ptx = ftx.ptx.new_inner_scope();
            ptx.add_variable_from_value(&ident, this);
            ptx.resolve(&expr)
        }
        let mut context = Context::default();
        context.add_function("with", with);

        let program = Program::compile("[1,2].with(a, a + a)").unwrap();
        let value = program.execute(&context);
        assert_eq!(
            value,
            Ok(Value::List(Arc::new(vec![
                Value::Int(1),
                Value::Int(2),
                Value::Int(1),
                Value::Int(2)
            ])))
        );
    }

    #[test]
    fn test_index_missing_map_key() {
        let mut ctx = Context::default();
        let mut map = HashMap::new();
        map.insert("a".to_string(), Value::Int(1));
        ctx.add_variable_from_value("mymap", map);

        let p = Program::compile(r#"mymap["missing"]"#).expect("Must compile");
        let result = p.execute(&ctx);

        assert!(result.is_err(), "Should error on missing map key");
    }

    mod opaque {
        use crate::objects::{Map, Opaque, OptionalValue};
        use crate::parser::Parser;
        use crate::{Context, ExecutionError, FunctionContext, Program, Value};
        use serde::Serialize;
        use std::collections::HashMap;
        use std::fmt::Debug;
        use std::ops::Deref;
        use std::sync::Arc;

        #[derive(Debug, Eq, PartialEq, Serialize)]
        struct MyStruct {
            field: String,
        }

        impl Opaque for MyStruct {
            fn runtime_type_name(&self) -> &str {
                "my_struct"
            }

            #[cfg(feature = "json")]
            fn json(&self) -> Option<serde_json::Value> {
                Some(serde_json::to_value(self).unwrap())
            }
        }

        #[test]
        fn test_opaque_fn() {
            pub fn my_fn(ftx: &FunctionContext) -> Result<Value, ExecutionError> {
                if let Some(Value::Opaque(opaque)) = &ftx.this {
                    if opaque.runtime_type_name() == "my_struct" {
                        Ok(opaque
                            .deref()
                            .downcast_ref::<MyStruct>()
                            .unwrap()
                            .field
                            .clone()
                            .into())
                    } else {
                        Err(ExecutionError::UnexpectedType {
                            got: opaque.runtime_type_name().to_string(),
                            want: "my_struct".to_string(),
                        })
                    }
                } else {
                    Err(ExecutionError::UnexpectedType {
                        got: format!("{:?}", ftx.this),
                        want: "Value::Opaque".to_string(),
                    })
                }
            }

            let value = Arc::new(MyStruct {
                field: String::from("value"),
            });

            let mut ctx = Context::default();
            ctx.add_variable_from_value("mine", Value::Opaque(value.clone()));
            ctx.add_function("myFn", my_fn);
            let prog = Program::compile("mine.myFn()").unwrap();
            assert_eq!(
                Ok(Value::String(Arc::new("value".into()))),
                prog.execute(&ctx)
            );
        }

        #[test]
        fn opaque_eq() {
            let value_1 = Arc::new(MyStruct {
                field: String::from("1"),
            });
            let value_2 = Arc::new(MyStruct {
                field: String::from("2"),
            });

            let mut ctx = Context::default();
            ctx.add_variable_from_value("v1", Value::Opaque(value_1.clone()));
            ctx.add_variable_from_value("v1b", Value::Opaque(value_1));
            ctx.add_variable_from_value("v2", Value::Opaque(value_2));
            assert_eq!(
                Program::compile("v2 == v1").unwrap().execute(&ctx),
                Ok(false.into())
            );
            assert_eq!(
                Program::compile("v1 == v1b").unwrap().execute(&ctx),
                Ok(true.into())
            );
            assert_eq!(
                Program::compile("v2 == v2").unwrap().execute(&ctx),
                Ok(true.into())
            );
        }

        #[test]
        fn test_value_holder_dbg() {
            let opaque = Arc::new(MyStruct {
                field: "not so opaque".to_string(),
            });
            let opaque = Value::Opaque(opaque);
            assert_eq!(
                "Opaque<my_struct>(MyStruct { field: \"not so opaque\" })",
                format!("{:?}", opaque)
            );
        }

        #[test]
        #[cfg(feature = "json")]
        fn test_json() {
            let value = Arc::new(MyStruct {
                field: String::from("value"),
            });
            let cel_value = Value::Opaque(value);
            let mut map = serde_json::Map::new();
            map.insert(
                "field".to_string(),
                serde_json::Value::String("value".to_string()),
            );
            assert_eq!(
                cel_value.json().expect("Must convert"),
                serde_json::Value::Object(map)
            );
        }

        #[test]
        fn test_optional() {
            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none()")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Opaque(Arc::new(OptionalValue::none())))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of(1)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Opaque(Arc::new(OptionalValue::of(Value::Int(1)))))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.ofNonZeroValue(0)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Opaque(Arc::new(OptionalValue::none())))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.ofNonZeroValue(1)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Opaque(Arc::new(OptionalValue::of(Value::Int(1)))))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of(1).value()")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Int(1))
            );
            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none().value()")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Err(ExecutionError::FunctionError {
                    function: "value".to_string(),
                    message: "optional.none() dereference".to_string()
                })
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of(1).hasValue()")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Bool(true))
            );
            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none().hasValue()")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Bool(false))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of(1).or(optional.of(2))")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Opaque(Arc::new(OptionalValue::of(Value::Int(1)))))
            );
            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none().or(optional.of(2))")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Opaque(Arc::new(OptionalValue::of(Value::Int(2)))))
            );
            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none().or(optional.none())")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Opaque(Arc::new(OptionalValue::none())))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of(1).orValue(5)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Int(1))
            );
            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none().orValue(5)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Int(5))
            );

            let mut ctx = Context::default();
            ctx.add_variable_from_value("msg", HashMap::from([("field", "value")]));

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("msg.?field")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &ctx),
                Ok(Value::Opaque(Arc::new(OptionalValue::of(Value::String(
                    Arc::new("value".to_string())
                )))))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of(msg).?field")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &ctx),
                Ok(Value::Opaque(Arc::new(OptionalValue::of(Value::String(
                    Arc::new("value".to_string())
                )))))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none().?field")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &ctx),
                Ok(Value::Opaque(Arc::new(OptionalValue::none())))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of(msg).?field.orValue('default')")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &ctx),
                Ok(Value::String(Arc::new("value".to_string())))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none().?field.orValue('default')")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &ctx),
                Ok(Value::String(Arc::new("default".to_string())))
            );

            let mut map_ctx = Context::default();
            let mut map = HashMap::new();
            map.insert("a".to_string(), Value::Int(1));
            map_ctx.add_variable_from_value("mymap", map);

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"mymap[?"missing"].orValue(99)"#)
                .expect("Must parse");
            assert_eq!(Value::resolve(&expr, &map_ctx), Ok(Value::Int(99)));

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"mymap[?"missing"].hasValue()"#)
                .expect("Must parse");
            assert_eq!(Value::resolve(&expr, &map_ctx), Ok(Value::Bool(false)));

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"mymap[?"a"].orValue(99)"#)
                .expect("Must parse");
            assert_eq!(Value::resolve(&expr, &map_ctx), Ok(Value::Int(1)));

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"mymap[?"a"].hasValue()"#)
                .expect("Must parse");
            assert_eq!(Value::resolve(&expr, &map_ctx), Ok(Value::Bool(true)));

            let mut list_ctx = Context::default();
            list_ctx.add_variable_from_value(
                "mylist",
                vec![Value::Int(1), Value::Int(2), Value::Int(3)],
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("mylist[?10].orValue(99)")
                .expect("Must parse");
            assert_eq!(Value::resolve(&expr, &list_ctx), Ok(Value::Int(99)));

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("mylist[?1].orValue(99)")
                .expect("Must parse");
            assert_eq!(Value::resolve(&expr, &list_ctx), Ok(Value::Int(2)));

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of([1, 2, 3])[1].orValue(99)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Int(2))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of([1, 2, 3])[4].orValue(99)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Int(99))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.none()[1].orValue(99)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Int(99))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("optional.of([1, 2, 3])[?1].orValue(99)")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Int(2))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("[1, 2, ?optional.of(3), 4]")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::List(Arc::new(vec![
                    Value::Int(1),
                    Value::Int(2),
                    Value::Int(3),
                    Value::Int(4)
                ])))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("[1, 2, ?optional.none(), 4]")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::List(Arc::new(vec![
                    Value::Int(1),
                    Value::Int(2),
                    Value::Int(4)
                ])))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("[?optional.of(1), ?optional.none(), ?optional.of(3)]")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::List(Arc::new(vec![Value::Int(1), Value::Int(3)])))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"[1, ?mymap[?"missing"], 3]"#)
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &map_ctx),
                Ok(Value::List(Arc::new(vec![Value::Int(1), Value::Int(3)])))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"[1, ?mymap[?"a"], 3]"#)
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &map_ctx),
                Ok(Value::List(Arc::new(vec![
                    Value::Int(1),
                    Value::Int(1),
                    Value::Int(3)
                ])))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse("[?optional.none(), ?optional.none()]")
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::List(Arc::new(vec![])))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"{"a": 1, "b": 2, ?"c": optional.of(3)}"#)
                .expect("Must parse");
            let mut expected_map = HashMap::new();
            expected_map.insert("a".into(), Value::Int(1));
            expected_map.insert("b".into(), Value::Int(2));
            expected_map.insert("c".into(), Value::Int(3));
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Map(Map {
                    map: Arc::from(expected_map)
                }))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"{"a": 1, "b": 2, ?"c": optional.none()}"#)
                .expect("Must parse");
            let mut expected_map = HashMap::new();
            expected_map.insert("a".into(), Value::Int(1));
            expected_map.insert("b".into(), Value::Int(2));
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Map(Map {
                    map: Arc::from(expected_map)
                }))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"{"a": 1, ?"b": optional.none(), ?"c": optional.of(3)}"#)
                .expect("Must parse");
            let mut expected_map = HashMap::new();
            expected_map.insert("a".into(), Value::Int(1));
            expected_map.insert("c".into(), Value::Int(3));
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Map(Map {
                    map: Arc::from(expected_map)
                }))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"{"a": 1, ?"b": mymap[?"missing"]}"#)
                .expect("Must parse");
            let mut expected_map = HashMap::new();
            expected_map.insert("a".into(), Value::Int(1));
            assert_eq!(
                Value::resolve(&expr, &map_ctx),
                Ok(Value::Map(Map {
                    map: Arc::from(expected_map)
                }))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"{"x": 10, ?"y": mymap[?"a"]}"#)
                .expect("Must parse");
            let mut expected_map = HashMap::new();
            expected_map.insert("x".into(), Value::Int(10));
            expected_map.insert("y".into(), Value::Int(1));
            assert_eq!(
                Value::resolve(&expr, &map_ctx),
                Ok(Value::Map(Map {
                    map: Arc::from(expected_map)
                }))
            );

            let expr = Parser::default()
                .enable_optional_syntax(true)
                .parse(r#"{?"a": optional.none(), ?"b": optional.none()}"#)
                .expect("Must parse");
            assert_eq!(
                Value::resolve(&expr, &Context::default()),
                Ok(Value::Map(Map {
                    map: Arc::from(HashMap::new())
                }))
            );
        }
    }
}

/// gpu-admission patch: a value a host hands out over and over (a function
/// returning one of a fixed set of records) can carry its conversion to the
/// interpreter's form, done once by [`Value::preconverted`]. A function
/// returning it (a clone: an `Arc`) has its result converted by a clone of
/// the stored form, O(1) for lists and maps, instead of a walk of the value.
///
/// It is a [`Value::Opaque`] that compares equal to the value it holds, is
/// charged like it and gives its JSON; the interpreter only ever sees the
/// stored form.
pub struct Preconverted {
    value: Value,
    val: Box<dyn Val>,
}

impl Preconverted {
    /// The value this holds, in the host's form.
    pub fn value(&self) -> &Value {
        &self.value
    }
}

impl Value {
    /// This value together with its conversion to the interpreter's form;
    /// see [`Preconverted`].
    pub fn preconverted(self) -> Result<Value, ExecutionError> {
        let val: Box<dyn Val> = self.clone().try_into()?;
        Ok(Value::Opaque(Arc::new(Preconverted { value: self, val })))
    }

    /// The value a [`Preconverted`] holds, or this value.
    fn peel_preconverted(&self) -> &Value {
        match self {
            Value::Opaque(o) => match o.downcast_ref::<Preconverted>() {
                Some(pre) => &pre.value,
                None => self,
            },
            _ => self,
        }
    }
}

/// gpu-admission patch: a value a host function built in the interpreter's
/// form (see [`Value::from_val`]). Returned from a function, it is handed
/// to the interpreter as it is (a clone: O(1) for lists and maps) instead
/// of being built as a `Value` and converted.
///
/// It is a [`Value::Opaque`] that is charged like the value it holds,
/// compares by that value and gives its JSON.
pub struct Interpreted(Box<dyn Val>);

impl Interpreted {
    /// The value this holds.
    pub fn val(&self) -> &dyn Val {
        self.0.as_ref()
    }
}

impl Value {
    /// A value already in the interpreter's form, for a host function to
    /// return; see [`Interpreted`].
    pub fn from_val(val: Box<dyn Val>) -> Value {
        Value::Opaque(Arc::new(Interpreted(val)))
    }
}

impl Debug for Interpreted {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        write!(f, "Interpreted({:?})", self.0)
    }
}

impl OpaqueEq for Interpreted {
    fn opaque_eq(&self, other: &dyn Opaque) -> bool {
        other
            .downcast_ref::<Interpreted>()
            .is_some_and(|other| self.0.equals(other.0.as_ref()))
    }
}

impl Opaque for Interpreted {
    fn runtime_type_name(&self) -> &str {
        "cel.interpreted"
    }

    #[cfg(feature = "json")]
    fn json(&self) -> Option<serde_json::Value> {
        Value::try_from(self.0.as_ref()).ok()?.json().ok()
    }
}

impl Debug for Preconverted {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        write!(f, "Preconverted({:?})", self.value)
    }
}

impl OpaqueEq for Preconverted {
    fn opaque_eq(&self, other: &dyn Opaque) -> bool {
        other
            .downcast_ref::<Preconverted>()
            .is_some_and(|other| self.value == other.value)
    }
}

impl Opaque for Preconverted {
    fn runtime_type_name(&self) -> &str {
        "cel.preconverted"
    }

    #[cfg(feature = "json")]
    fn json(&self) -> Option<serde_json::Value> {
        self.value.json().ok()
    }
}

#[cfg(test)]
mod preconverted_tests {
    use super::*;
    use crate::Program;

    fn record() -> Value {
        let mut map = HashMap::new();
        map.insert(Key::from("name"), Value::from("a"));
        map.insert(Key::from("cores"), Value::Int(4));
        map.insert(
            Key::from("zones"),
            Value::List(Arc::new(vec![Value::from("1"), Value::from("2")])),
        );
        Value::Map(Map { map: Arc::new(map) })
    }

    fn context(returned: Value) -> Context<'static> {
        let mut ctx = Context::default();
        ctx.add_function("rec", move |_: Arc<String>| -> crate::ResolveResult {
            Ok(returned.clone())
        });
        ctx
    }

    #[test]
    fn compares_as_the_value_it_holds() {
        let pre = record().preconverted().unwrap();
        assert!(matches!(pre, Value::Opaque(_)));
        assert_eq!(pre, record());
        assert_eq!(record(), pre);
        assert_eq!(pre, record().preconverted().unwrap());
        assert_ne!(pre, Value::Int(4));
    }

    #[test]
    fn a_function_returning_it_gives_the_value() {
        let plain = context(record());
        let pre = context(record().preconverted().unwrap());
        for expr in [
            "rec('a')",
            "rec('a').name",
            "rec('a').cores + 1",
            "rec('a').zones.map(z, z + 'x')",
            "'cores' in rec('a')",
            "rec('a').size() == 3",
            "rec('a') == {'name': 'a', 'cores': 4, 'zones': ['1', '2']}",
        ] {
            let program = Program::compile(expr).unwrap();
            let want = program.execute(&plain).unwrap();
            assert_eq!(program.execute(&pre).unwrap(), want, "{expr}");
            assert!(
                !matches!(
                    Value::resolve(&program.expression, &pre),
                    Ok(Value::Opaque(_))
                ),
                "{expr}: the interpreter hands back its own form"
            );
        }
        assert_eq!(
            Program::compile("rec('a')").unwrap().execute(&pre).unwrap(),
            record()
        );
    }

    #[test]
    fn is_charged_like_the_value_it_holds() {
        let program = Program::compile("rec('a').cores").unwrap();
        let cost = |ctx: &Context| crate::budget::with_budget(1_000, || program.execute(ctx)).1;
        let plain = cost(&context(record()));
        assert!(plain > 3, "the returned map is charged: {plain}");
        assert_eq!(cost(&context(record().preconverted().unwrap())), plain);
    }

    #[cfg(feature = "json")]
    #[test]
    fn gives_the_json_of_the_value_it_holds() {
        let pre = record().preconverted().unwrap();
        assert_eq!(pre.json().unwrap(), record().json().unwrap());
    }
}

#[cfg(test)]
mod select_tests {
    use super::*;
    use crate::Program;

    fn eval(expr: &str) -> crate::ResolveResult {
        let mut ctx = Context::default();
        let mut inner = HashMap::new();
        inner.insert(Key::from("name"), Value::from("n"));
        let mut outer = HashMap::new();
        outer.insert(
            Key::from("meta"),
            Value::Map(Map {
                map: Arc::new(inner),
            }),
        );
        outer.insert(Key::from("n"), Value::Int(1));
        ctx.add_variable_from_value(
            "m",
            Value::Map(Map {
                map: Arc::new(outer),
            }),
        );
        Program::compile(expr).unwrap().execute(&ctx)
    }

    #[test]
    fn fields_of_variables_and_of_computed_maps() {
        assert_eq!(eval("m.meta.name"), Ok(Value::from("n")));
        assert_eq!(eval("{'a': {'b': 2}}.a.b"), Ok(Value::Int(2)));
        assert_eq!(
            eval("has(m.meta.name) && !has(m.meta.other)"),
            Ok(true.into())
        );
        assert_eq!(eval("has({'a': 1}.a) && !has({'a': 1}.b)"), Ok(true.into()));
        assert_eq!(
            eval("m.meta.other"),
            Err(ExecutionError::NoSuchKey(Arc::new("other".to_string())))
        );
        assert_eq!(
            eval("{'a': 1}.b"),
            Err(ExecutionError::NoSuchKey(Arc::new("b".to_string())))
        );
    }

    /// gpu-admission patch: a backtick-quoted field name selects the key
    /// between the backticks (cel-spec `fields/quoted_map_fields`).
    #[test]
    fn backtick_quoted_field_names() {
        let map = "{'content-type': 'json', 'foo.txt': 32, '/api/v1': true}";
        assert_eq!(
            eval(&format!("{map}.`content-type`")),
            Ok(Value::from("json"))
        );
        assert_eq!(eval(&format!("{map}.`foo.txt`")), Ok(Value::Int(32)));
        assert_eq!(eval(&format!("{map}.`/api/v1`")), Ok(true.into()));
        assert_eq!(
            eval(&format!(
                "has({map}.`foo.txt`) && !has({map}.`/api/v3`) && !has({map}.`foo`)"
            )),
            Ok(true.into())
        );
        assert_eq!(
            eval(&format!("{map}.`foo`")),
            Err(ExecutionError::NoSuchKey(Arc::new("foo".to_string())))
        );
        let expr = crate::parser::Parser::default()
            .enable_optional_syntax(true)
            .parse("{'a-b': 1}.?`a-b`.orValue(0) + {'a': 1}.?`a-b`.orValue(0)")
            .expect("Must parse");
        assert_eq!(
            Value::resolve(&expr, &Context::default()),
            Ok(Value::Int(1))
        );
    }

    #[test]
    fn comprehension_variables_are_rebound_each_iteration() {
        assert_eq!(eval("[1, 2].all(x, [3, 4].all(y, x < y))"), Ok(true.into()));
        assert_eq!(
            eval("[[1], [2, 3]].map(x, x.map(x, x + m.n))"),
            eval("[[2], [3, 4]]")
        );
        assert_eq!(eval("[1, 2, 3].filter(x, x > 1).size()"), Ok(Value::Int(2)));
        assert_eq!(
            eval("[1, 2].exists(x, x == 2) && [3].exists(x, x == 3)"),
            Ok(true.into())
        );
    }
}

/// gpu-admission patch: functions that take and return the interpreter's
/// form (`extractors::Val`, `Value::from_val`).
#[cfg(test)]
mod interpreted_tests {
    use super::*;
    use crate::extractors::Val as ValArg;
    use crate::Program;

    /// `firstTwo(list)` in both forms: as a host function usually is
    /// (`Value` in and out) and over the interpreter's form.
    fn context(interpreted: bool) -> Context<'static> {
        let mut ctx = Context::default();
        if interpreted {
            ctx.add_function("firstTwo", |list: ValArg| -> crate::ResolveResult {
                let list = list
                    .0
                    .downcast_ref::<CelList>()
                    .ok_or(ExecutionError::NoSuchOverload)?;
                let kept: Vec<Box<dyn Val>> =
                    list.iter().take(2).map(|v| v.clone_as_boxed()).collect();
                Ok(Value::from_val(Box::new(CelList::from(kept))))
            });
        } else {
            ctx.add_function(
                "firstTwo",
                |list: Arc<Vec<Value>>| -> crate::ResolveResult {
                    Ok(Value::List(Arc::new(
                        list.iter().take(2).cloned().collect(),
                    )))
                },
            );
        }
        ctx.add_variable_from_value(
            "names",
            Value::List(Arc::new(
                ["a", "b", "c", "d"].into_iter().map(Value::from).collect(),
            )),
        );
        ctx
    }

    fn run(interpreted: bool, expr: &str) -> (crate::ResolveResult, u64) {
        let ctx = context(interpreted);
        let program = Program::compile(expr).unwrap();
        crate::budget::with_budget(u64::MAX / 2, || program.execute(&ctx))
    }

    #[test]
    fn same_results_and_costs_as_a_function_over_values() {
        for expr in [
            "firstTwo(names)",
            "firstTwo(names).size()",
            "firstTwo(names)[1]",
            "firstTwo(names) == ['a', 'b']",
            "firstTwo(['x']) + firstTwo(names)",
            "firstTwo(names).map(n, n + '!')",
            "'b' in firstTwo(names)",
            "firstTwo(firstTwo(names))",
            "firstTwo('not a list')",
        ] {
            let usual = run(false, expr);
            let interpreted = run(true, expr);
            assert_eq!(
                interpreted.0.is_ok(),
                usual.0.is_ok(),
                "{expr}: {interpreted:?} vs {usual:?}"
            );
            if usual.0.is_ok() {
                assert_eq!(interpreted, usual, "{expr}");
            }
        }
        assert_eq!(
            run(true, "firstTwo(names)").0,
            Ok(Value::List(Arc::new(vec![
                Value::from("a"),
                Value::from("b")
            ])))
        );
    }

    #[test]
    fn an_interpreted_value_compares_by_its_value_and_gives_its_json() {
        let list = || {
            Value::from_val(Box::new(CelList::from(vec![
                Box::new(CelInt::from(1)) as Box<dyn Val>
            ])))
        };
        assert_eq!(list(), list());
        assert_ne!(list(), Value::from_val(Box::new(CelList::from(Vec::new()))));
        #[cfg(feature = "json")]
        assert_eq!(list().json().unwrap(), serde_json::json!([1]));
    }
}

// gpu-admission patch: message literals evaluate to maps of their fields.
#[cfg(test)]
mod struct_tests {
    use super::*;
    use crate::Program;

    #[test]
    fn a_message_literal_is_a_map_of_its_fields() {
        let ctx = Context::default();
        let value = Program::compile(r#"JSONPatch{op: "add", value: Object.spec{a: 1}}"#)
            .unwrap()
            .execute(&ctx)
            .unwrap();
        let mut spec = HashMap::new();
        spec.insert(Key::from("a"), Value::Int(1));
        let mut want = HashMap::new();
        want.insert(Key::from("op"), Value::from("add"));
        want.insert(
            Key::from("value"),
            Value::Map(Map {
                map: Arc::new(spec),
            }),
        );
        assert_eq!(
            value,
            Value::Map(Map {
                map: Arc::new(want)
            })
        );
    }
}

/// gpu-admission patch: the semantics the CEL specification's conformance
/// suite checks (error absorption, field selection, optionals, numeric
/// equality, sizes, type values).
#[cfg(test)]
mod conformance_tests {
    use super::*;
    use crate::Program;

    fn eval(expr: &str) -> crate::ResolveResult {
        let expr = crate::parser::Parser::default()
            .enable_optional_syntax(true)
            .parse(expr)
            .unwrap();
        Value::resolve(&expr, &Context::default())
    }

    #[test]
    fn all_and_exists_let_a_deciding_element_win_over_an_error() {
        assert_eq!(eval("[1, 2, 3].all(e, 6 / (2 - e) == 6)"), Ok(false.into()));
        assert_eq!(eval("[3, 2, 1].all(e, 6 / (2 - e) == 6)"), Ok(false.into()));
        assert_eq!(eval("[2, 1].exists(e, 6 / (2 - e) == 6)"), Ok(true.into()));
        assert_eq!(eval("[0, 'foo', 3].all(i, v, v % 2 == i)"), Ok(false.into()));
        // No element decides: the error stands.
        assert!(eval("[2, 3].all(e, 6 / (2 - e) == -6)").is_err());
        assert!(eval("[1, 2].exists(e, 6 / (2 - e) == 0)").is_err());
        // Other comprehensions do not absorb.
        assert!(eval("[1, 2].map(e, 6 / (2 - e))").is_err());
        assert!(eval("[2, 1].exists_one(e, 6 / (2 - e) == 6)").is_err());
    }

    #[test]
    fn running_out_of_budget_is_never_absorbed() {
        let program = Program::compile("[1, 2, 3, 4].all(e, e > 100) || true").unwrap();
        let ctx = Context::default();
        let (result, _) = crate::budget::with_budget(3, || program.execute(&ctx));
        assert_eq!(result, Err(ExecutionError::CostLimitExceeded));
    }

    #[test]
    fn a_field_of_a_value_without_fields_is_an_error() {
        for expr in ["true.enabled", "1.x", "'s'.x", "null.x", "[1].x", "has(true.x)"] {
            assert!(eval(expr).is_err(), "{expr}");
        }
        assert_eq!(eval("has({'a': 1}.a)"), Ok(true.into()));
    }

    #[test]
    fn optionals_chain_compare_and_answer_has() {
        assert_eq!(
            eval("optional.of({'c': {'index': 'goodbye'}}).c.index.orValue('d')"),
            Ok("goodbye".into())
        );
        assert_eq!(eval("optional.of({'c': {}}).c.missing.orValue('d')"), Ok("d".into()));
        assert_eq!(eval("{}.?a.b.c.orValue(1)"), Ok(1.into()));
        assert_eq!(eval("has(optional.of({'c': 1}).c)"), Ok(true.into()));
        assert_eq!(eval("has(optional.of({'c': 1}).d)"), Ok(false.into()));
        assert_eq!(eval("optional.of(1) == optional.of(1)"), Ok(true.into()));
        assert_eq!(eval("optional.none() == optional.none()"), Ok(true.into()));
        assert_eq!(eval("optional.of(1) != optional.none()"), Ok(true.into()));
    }

    #[test]
    fn numbers_of_different_types_are_equal_when_they_hold_the_same_number() {
        for expr in [
            "1 == 1u",
            "1 == 1.0",
            "1u == 1.0",
            "[1.0, 2.0, 3] == [1u, 2, 3u]",
            "{1: 1.0, 2u: 3u} == {1u: 1, 2: 3.0}",
            "3 in [5.0, 4.0, 3.0]",
            "3.0 in {1: 1, 2: 2, 3u: 3}",
            "{1u: 'a'}[1] == 'a' && {1: 'a'}[1.0] == 'a' && {1: 'a'}[1u] == 'a'",
            "[7, 8, 9][0.0] == 7",
        ] {
            assert_eq!(eval(expr), Ok(true.into()), "{expr}");
        }
        assert_eq!(eval("-1 == 18446744073709551615u"), Ok(false.into()));
        assert_eq!(eval("0.0/0.0 == 0.0/0.0"), Ok(false.into()));
        assert_eq!(eval("3.1 in {1: 1, 3: 3}"), Ok(false.into()));
        assert!(eval("[7, 8, 9][0.5]").is_err());
    }

    #[test]
    fn a_key_given_twice_in_a_map_literal_is_an_error() {
        assert!(eval("{true: 1, false: 2, true: 3}").is_err());
        // 0 and 0u are the same key under numeric equality.
        assert!(eval("{0: 1, 0u: 2}").is_err());
    }

    #[test]
    fn an_even_run_of_a_unary_operator_cancels_out() {
        assert_eq!(eval("!!true"), Ok(true.into()));
        assert_eq!(eval("!!!true"), Ok(false.into()));
        assert_eq!(eval("--19"), Ok(19.into()));
        assert_eq!(eval("---19"), Ok((-19).into()));
    }

    #[test]
    fn strings_are_sized_in_code_points() {
        assert_eq!(eval("size('πέντε')"), Ok(5.into()));
        assert_eq!(eval("'ÿ'.size()"), Ok(1.into()));
    }

    #[test]
    fn types_are_values() {
        for expr in [
            "type(1) == int",
            "type(1u) == uint",
            "type('a') == string",
            "type([1]) == list && type({}) == map",
            "type(null) == null_type",
            "type(int) == type && type(type(1)) == type",
            "type(optional.none()) == optional_type",
            "type(1) != type(1u)",
            "type(duration('1s')) == google.protobuf.Duration",
            "google.protobuf.Timestamp == type(timestamp('2009-02-13T23:31:30Z'))",
            "google.protobuf.Timestamp != google.protobuf.Duration",
        ] {
            assert_eq!(eval(expr), Ok(true.into()), "{expr}");
        }
        // Only the declared names: `google.protobuf.Any` is no type here.
        assert!(eval("google.protobuf.Any == int").is_err());
        // `denoted_by` turns a field away on its first byte: each qualified
        // name ends in a capitalised word.
        for name in TypeValue::DENOTATIONS.iter().filter(|n| n.contains('.')) {
            let end = name.rsplit('.').next().unwrap();
            assert!(end.starts_with(|c: char| c.is_ascii_uppercase()), "{name}");
        }
        // A map with a capitalised key is still a map, not a type.
        assert_eq!(eval("{'IP': 1}.IP"), Ok(1.into()));
    }
}
