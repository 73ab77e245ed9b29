use crate::common::traits::{Container, Indexer, Iterable};
use crate::common::types::{CelBool, CelInt, CelString, CelUInt, Type};
use crate::common::value::Val;
use crate::common::{traits, types};
use crate::ExecutionError;
use crate::ExecutionError::NoSuchOverload;
use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::collections::hash_map::Keys;
use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;

/// gpu-admission patch: a map's entries, hashed with foldhash (upstream:
/// SipHash, a fifth of the time spent building a Kubernetes object's
/// maps). Each map gets its own random seed.
pub type MapEntries = HashMap<Key, Box<dyn Val>, foldhash::fast::RandomState>;

// gpu-admission patch: entries shared behind an `Arc`, so that cloning a
// map (every field selection) is O(1) instead of a deep copy.
#[derive(Debug, Default)]
pub struct DefaultMap(Arc<MapEntries>);

impl DefaultMap {
    pub fn into_inner(self) -> MapEntries {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| {
            shared
                .iter()
                .map(|(k, v)| (k.clone(), v.clone_as_boxed()))
                .collect()
        })
    }

    pub fn inner(&self) -> &MapEntries {
        &self.0
    }

    /// gpu-admission patch: the value under a string key, looked up without
    /// building a key (field selection).
    pub fn get_field(&self, name: &str) -> Option<&dyn Val> {
        self.0
            .get(&KeyRef::String(name) as &dyn AsKeyRef)
            .map(|v| v.as_ref())
    }
}

impl Deref for DefaultMap {
    type Target = MapEntries;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Val for DefaultMap {
    fn get_type(&self) -> Type<'_> {
        types::MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_indexer(&self) -> Option<&dyn Indexer> {
        Some(self)
    }

    fn into_indexer(self: Box<Self>) -> Option<Box<dyn Indexer>> {
        Some(self)
    }

    fn as_iterable(&self) -> Option<&dyn Iterable> {
        Some(self)
    }

    // gpu-admission patch: maps are equal when they have the same size and
    // every key of one finds an equal value in the other, numeric keys
    // compared across int, uint and double as the spec says (`{1: 'a'} ==
    // {1u: 'a'}`).
    fn equals(&self, other: &dyn Val) -> bool {
        let Some(other) = other.downcast_ref::<Self>() else {
            return false;
        };
        if Arc::ptr_eq(&self.0, &other.0) {
            return true;
        }
        self.0.len() == other.0.len()
            && self.0.iter().all(|(k, v)| {
                other
                    .lookup(k.inner())
                    .ok()
                    .flatten()
                    .is_some_and(|w| v.as_ref().equals(w.as_ref()))
            })
    }

    fn clone_as_boxed(&self) -> Box<dyn Val> {
        Box::new(Self(self.0.clone()))
    }
}

impl DefaultMap {
    /// gpu-admission patch: the entry for `key`, a number finding the
    /// entry of an equal number of another numeric type (`{1u: 'a'}[1]`,
    /// `{1: 'a'}[1.0]`), as cel-go looks keys up. `Ok(None)` when absent,
    /// an error for a key of a type maps cannot have.
    pub(crate) fn lookup(&self, key: &dyn Val) -> Result<Option<&Box<dyn Val>>, ExecutionError> {
        let find = |k: KeyRef| self.0.get(&k as &dyn AsKeyRef);
        if let Some(s) = key.downcast_ref::<CelString>() {
            return Ok(self.0.get(s as &dyn AsKeyRef));
        }
        if let Some(b) = key.downcast_ref::<CelBool>() {
            return Ok(self.0.get(b as &dyn AsKeyRef));
        }
        if let Some(i) = key.downcast_ref::<CelInt>() {
            let i = *i.inner();
            return Ok(find(KeyRef::Int(i)).or_else(|| {
                u64::try_from(i)
                    .ok()
                    .and_then(|u| find(KeyRef::Uint(u)))
            }));
        }
        if let Some(u) = key.downcast_ref::<CelUInt>() {
            let u = *u.inner();
            return Ok(find(KeyRef::Uint(u)).or_else(|| {
                i64::try_from(u)
                    .ok()
                    .and_then(|i| find(KeyRef::Int(i)))
            }));
        }
        if let Some(d) = key.downcast_ref::<types::CelDouble>() {
            let d = *d.inner();
            if !d.is_finite() || d.fract() != 0.0 {
                return Ok(None);
            }
            let as_int = (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0)
                .contains(&d)
                .then(|| find(KeyRef::Int(d as i64)))
                .flatten();
            let as_uint = || {
                (0.0..18_446_744_073_709_551_616.0)
                    .contains(&d)
                    .then(|| find(KeyRef::Uint(d as u64)))
                    .flatten()
            };
            return Ok(as_int.or_else(as_uint));
        }
        Err(NoSuchOverload)
    }
}

impl Container for DefaultMap {
    // gpu-admission patch: numeric keys found across types (see `lookup`).
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(self.lookup(key)?.is_some())
    }
}

impl Indexer for DefaultMap {
    // gpu-admission patch: numeric keys found across types (see `lookup`).
    fn get<'a>(&'a self, key: &dyn Val) -> Result<Cow<'a, dyn Val>, ExecutionError> {
        self.lookup(key)?
            .map(|v| Cow::Borrowed(v.as_ref()))
            .ok_or_else(|| ExecutionError::NoSuchKey(Arc::new(key_text(key))))
    }

    fn steal(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val>, ExecutionError> {
        self.get(key).map(|v| v.into_owned())
    }
}

/// gpu-admission patch: a key as a "no such key" error names it.
fn key_text(key: &dyn Val) -> String {
    if let Some(s) = key.downcast_ref::<CelString>() {
        s.inner().to_string()
    } else if let Some(i) = key.downcast_ref::<CelInt>() {
        i.inner().to_string()
    } else if let Some(u) = key.downcast_ref::<CelUInt>() {
        u.inner().to_string()
    } else if let Some(b) = key.downcast_ref::<CelBool>() {
        b.inner().to_string()
    } else if let Some(d) = key.downcast_ref::<types::CelDouble>() {
        d.inner().to_string()
    } else {
        format!("{key:?}")
    }
}

impl Iterable for DefaultMap {
    fn iter<'a>(&'a self) -> Box<dyn super::traits::Iterator<'a> + 'a> {
        Box::new(MapKeyIterator::new(self.0.keys()))
    }
}

impl From<MapEntries> for DefaultMap {
    fn from(value: MapEntries) -> Self {
        Self(Arc::new(value))
    }
}

#[derive(Debug, Eq, Clone)]
pub enum Key {
    Bool(CelBool),
    Int(CelInt),
    String(CelString),
    UInt(CelUInt),
}

impl Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_keyref().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_keyref() == other.as_keyref()
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_keyref().cmp(&other.as_keyref())
    }
}

impl Key {
    pub fn inner(&self) -> &dyn Val {
        match self {
            Key::Bool(b) => b,
            Key::Int(i) => i,
            Key::String(s) => s,
            Key::UInt(u) => u,
        }
    }
}

#[derive(Copy, Clone, Debug, Eq, PartialEq, Ord, PartialOrd)]
pub enum KeyRef<'a> {
    Int(i64),
    Uint(u64),
    Bool(bool),
    String(&'a str),
}

// gpu-admission patch: one hasher call per key, where the derived impl
// made three (the variant, the bytes, a terminator); every field selection
// hashes its name. Keys of different types may now hash alike: they never
// compare equal, so what a lookup finds is unchanged.
impl std::hash::Hash for KeyRef<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            KeyRef::String(s) => state.write(s.as_bytes()),
            KeyRef::Int(i) => state.write_i64(*i),
            KeyRef::Uint(u) => state.write_u64(*u),
            KeyRef::Bool(b) => state.write_u8(u8::from(*b)),
        }
    }
}

/// Trait for converting to a borrowed [`KeyRef`] for efficient lookups.
pub trait AsKeyRef {
    fn as_keyref(&self) -> KeyRef<'_>;
}

impl AsKeyRef for Key {
    fn as_keyref(&self) -> KeyRef<'_> {
        match self {
            Key::Int(i) => KeyRef::Int(*i.inner()),
            Key::UInt(u) => KeyRef::Uint(*u.inner()),
            Key::Bool(b) => KeyRef::Bool(*b.inner()),
            Key::String(s) => KeyRef::String(s.inner()),
        }
    }
}

impl AsKeyRef for CelString {
    fn as_keyref(&self) -> KeyRef<'_> {
        KeyRef::String(self.inner())
    }
}

impl AsKeyRef for CelInt {
    fn as_keyref(&self) -> KeyRef<'_> {
        KeyRef::Int(*self.inner())
    }
}

impl AsKeyRef for CelUInt {
    fn as_keyref(&self) -> KeyRef<'_> {
        KeyRef::Uint(*self.inner())
    }
}

impl AsKeyRef for CelBool {
    fn as_keyref(&self) -> KeyRef<'_> {
        KeyRef::Bool(*self.inner())
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

impl<'a> Hash for dyn AsKeyRef + 'a {
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

impl From<bool> for Key {
    fn from(value: bool) -> Self {
        Key::Bool(value.into())
    }
}

impl From<i64> for Key {
    fn from(value: i64) -> Self {
        Key::Int(value.into())
    }
}

impl From<String> for Key {
    fn from(value: String) -> Self {
        Key::String(value.into())
    }
}

impl From<&str> for Key {
    fn from(value: &str) -> Self {
        Key::String(value.into())
    }
}

impl From<u64> for Key {
    fn from(value: u64) -> Self {
        Key::UInt(value.into())
    }
}

impl TryFrom<Box<dyn Val>> for Key {
    type Error = ExecutionError;

    fn try_from(value: Box<dyn Val>) -> Result<Self, Self::Error> {
        let key = match value.get_type() {
            types::BOOL_TYPE => value
                .downcast_ref::<CelBool>()
                .copied()
                .map(Key::Bool)
                .ok_or_else(|| {
                    ExecutionError::UnsupportedKeyType(
                        value.as_ref().try_into().expect("Can't convert key!"),
                    )
                })?,
            types::INT_TYPE => value
                .downcast_ref::<CelInt>()
                .copied()
                .map(Key::Int)
                .ok_or_else(|| {
                    ExecutionError::UnsupportedKeyType(
                        value.as_ref().try_into().expect("Can't convert key!"),
                    )
                })?,
            types::STRING_TYPE => {
                let s = super::cast_boxed::<CelString>(value).map_err(|v| {
                    ExecutionError::UnsupportedKeyType(
                        v.as_ref().try_into().expect("Can't convert key!"),
                    )
                })?;
                Key::String(s.into_inner().into())
            }
            types::UINT_TYPE => value
                .downcast_ref::<CelUInt>()
                .copied()
                .map(Key::UInt)
                .ok_or_else(|| {
                    ExecutionError::UnsupportedKeyType(
                        value.as_ref().try_into().expect("Can't convert key!"),
                    )
                })?,
            _ => {
                return Err(ExecutionError::UnsupportedKeyType(
                    value.as_ref().try_into().expect("Can't convert key!"),
                ))
            }
        };
        Ok(key)
    }
}

pub struct MapKeyIterator<'a> {
    keys: Keys<'a, Key, Box<dyn Val>>,
}

impl<'a> MapKeyIterator<'a> {
    fn new(keys: Keys<'a, Key, Box<dyn Val>>) -> Self {
        Self { keys }
    }
}

impl<'a> traits::Iterator<'a> for MapKeyIterator<'a> {
    fn next(&mut self) -> Option<&'a dyn Val> {
        self.keys.next().map(|k| k.inner())
    }
}
