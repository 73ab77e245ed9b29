//! Any `Serialize` value as a [`Tree`]: the shape its JSON has, read by
//! the rules [`super::json_to_val`] applies to JSON (integers that fit are
//! `int`, larger ones and other numbers `double`, absent options `null`,
//! enum variants as serde_json writes them), with the field names of
//! structs kept as the `&'static str` they are and no value boxed. Programs
//! read a tree in place, as they read the request's JSON; the
//! interpreter's form of it ([`Tree::to_val`]) is made only where the
//! interpreter reads it. One pass instead of building a JSON tree,
//! converting it, and dropping it.
//!
//! Lists of names that many values share (the catalog's SKUs, a placement
//! profile's) are converted once and handed out for every value that
//! holds them ([`SharedLists`], [`to_tree`]).
use super::Val;
use kube_cel::cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapEntries, CelMapKey, CelNull, CelString,
};
use kube_cel::cel::context::VariableResolver;
use serde::ser::{self, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// A value in the shape of its JSON, as [`to_tree`] writes it.
#[derive(Clone, Debug, PartialEq)]
pub enum Tree {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(Box<str>),
    List(Vec<Tree>),
    /// Entries in the order they were written, no key twice: a struct's
    /// field names as they stand in the program.
    Map(Vec<(Cow<'static, str>, Tree)>),
    /// One of the lists of [`SharedLists`].
    Shared(Arc<SharedList>),
}

impl Tree {
    /// The entry `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Tree> {
        match self {
            Tree::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value in the interpreter's form, as [`super::json_to_val`]
    /// converts its JSON; a shared list is handed out, not converted.
    pub fn to_val(&self) -> Box<dyn Val> {
        match self {
            Tree::Null => Box::new(CelNull),
            Tree::Bool(b) => Box::new(CelBool::from(*b)),
            Tree::Int(i) => Box::new(CelInt::from(*i)),
            Tree::Double(d) => Box::new(CelDouble::from(*d)),
            Tree::Str(s) => Box::new(CelString::from(&**s)),
            Tree::List(items) => Box::new(CelList::from(
                items.iter().map(Tree::to_val).collect::<Vec<_>>(),
            )),
            Tree::Map(entries) => {
                let mut map =
                    CelMapEntries::with_capacity_and_hasher(entries.len(), Default::default());
                for (key, value) in entries {
                    map.insert(CelMapKey::from(&**key), value.to_val());
                }
                Box::new(CelMap::from(map))
            }
            Tree::Shared(list) => list.val.clone_as_boxed(),
        }
    }
}

/// Host variables (`request`, `gpu`) as trees, which programs read in
/// place. The interpreter reads them through the scope's resolver (a
/// scope sets it: `Context::set_variable_resolver`), each converted to its
/// form on its first read and kept: a scope whose interpreter never reads
/// one never converts it.
#[derive(Debug, Default)]
pub struct Hosts(Vec<Host>);

#[derive(Debug)]
struct Host {
    name: String,
    tree: Arc<Tree>,
    val: OnceLock<Box<dyn Val>>,
}

impl Hosts {
    /// No host variable.
    pub const NONE: &'static Hosts = &Hosts(Vec::new());

    /// Adds the variable `name`.
    pub fn push(&mut self, name: impl Into<String>, tree: Arc<Tree>) {
        self.0.push(Host {
            name: name.into(),
            tree,
            val: OnceLock::new(),
        });
    }

    /// The tree of the variable `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Tree>> {
        self.host(name).map(|h| &h.tree)
    }

    fn host(&self, name: &str) -> Option<&Host> {
        self.0.iter().find(|h| h.name == name)
    }

    /// Whether the variable `name` is held.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

impl VariableResolver for Hosts {
    fn resolve(&self, _: &str) -> Option<super::Value> {
        None
    }

    fn resolve_val(&self, name: &str) -> Option<&dyn Val> {
        let host = self.host(name)?;
        Some(host.val.get_or_init(|| host.tree.to_val()).as_ref())
    }
}

/// `value` in the interpreter's form; an error where serde_json would fail
/// too (a map key that is not a string, a failing `Serialize`).
pub fn to_val<T: Serialize + ?Sized>(value: &T) -> Result<Box<dyn Val>, ToValError> {
    Ok(to_tree(value, SharedLists::none())?.to_val())
}

/// `value` as a tree, each list of `shared` it holds as that list.
pub fn to_tree<T: Serialize + ?Sized>(value: &T, shared: &SharedLists) -> Result<Tree, ToValError> {
    value.serialize(TreeSerializer(shared))
}

/// Lists of strings converted once, each with the list it was converted
/// from. A value written as the newtype struct `name` around a slice of
/// strings (JSON writes the plain list) is the shared list when the
/// slice is one of these lists: the same memory, whole. The table holds
/// each list, so an address of one of its lists cannot be another's.
/// A converted list is shared, not copied, by each value given it.
pub struct SharedLists {
    name: &'static str,
    lists: Vec<Arc<SharedList>>,
}

/// A list of names, and the same list in the interpreter's form.
#[derive(Debug)]
pub struct SharedList {
    names: Arc<[String]>,
    val: Box<dyn Val>,
}

impl SharedList {
    /// The list in the interpreter's form.
    pub fn val(&self) -> &dyn Val {
        self.val.as_ref()
    }
}

impl PartialEq for SharedList {
    fn eq(&self, other: &SharedList) -> bool {
        self.names == other.names
    }
}

impl SharedLists {
    /// No list shared.
    pub fn none() -> &'static SharedLists {
        static NONE: SharedLists = SharedLists {
            name: "",
            lists: Vec::new(),
        };
        &NONE
    }

    /// `lists` (repeats and empty lists left out), converted, for values
    /// written as the newtype struct `name`.
    pub fn new(name: &'static str, lists: impl IntoIterator<Item = Arc<[String]>>) -> SharedLists {
        let mut kept: Vec<Arc<SharedList>> = Vec::new();
        for list in lists {
            if list.is_empty() || kept.iter().any(|l| Arc::ptr_eq(&l.names, &list)) {
                continue;
            }
            let items: Vec<Box<dyn Val>> = list.iter().map(|s| string(s)).collect();
            let val = Box::new(CelList::from(items));
            kept.push(Arc::new(SharedList { names: list, val }));
        }
        SharedLists { name, lists: kept }
    }

    /// How many lists are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lists.len()
    }

    /// The kept list whose memory `value` is, whole.
    fn get<T: ?Sized>(&self, name: &str, value: &T) -> Option<Tree> {
        if name != self.name || self.lists.is_empty() {
            return None;
        }
        let (at, size) = (value as *const T as *const (), std::mem::size_of_val(value));
        self.lists
            .iter()
            .find(|list| {
                std::ptr::eq(list.names.as_ptr() as *const (), at)
                    && std::mem::size_of_val::<[String]>(&list.names) == size
            })
            .map(|list| Tree::Shared(list.clone()))
    }
}

impl fmt::Debug for SharedLists {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedLists")
            .field("name", &self.name)
            .field("lists", &self.lists.len())
            .finish()
    }
}

/// Why a value could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ToValError(String);

impl ser::Error for ToValError {
    fn custom<T: fmt::Display>(msg: T) -> ToValError {
        ToValError(msg.to_string())
    }
}

type Out = Result<Tree, ToValError>;

fn string(v: &str) -> Box<dyn Val> {
    Box::new(CelString::from(v))
}

/// Writes one value, with the lists it may share.
#[derive(Clone, Copy)]
struct TreeSerializer<'s>(&'s SharedLists);

/// An `int` where the number fits one (`int`), else the `double` `float`.
fn int_or_double(int: Option<i64>, float: f64) -> Tree {
    match int {
        Some(i) => Tree::Int(i),
        None => Tree::Double(float),
    }
}

/// One entry `{variant: value}`, as serde_json writes data-carrying variants.
fn tagged(variant: &'static str, value: Tree) -> Tree {
    Tree::Map(vec![(Cow::Borrowed(variant), value)])
}

/// Serializer methods of narrower numbers that hand the value on, widened
/// losslessly, to the method of a wider type.
macro_rules! widened {
    ($($($method:ident($ty:ty)),* => $wide:ident($to:ty));*) => {$($(
        fn $method(self, v: $ty) -> Out {
            self.$wide(<$to>::from(v))
        }
    )*)*};
}

impl<'s> ser::Serializer for TreeSerializer<'s> {
    type Ok = Tree;
    type Error = ToValError;
    type SerializeSeq = Seq<'s>;
    type SerializeTuple = Seq<'s>;
    type SerializeTupleStruct = Seq<'s>;
    type SerializeTupleVariant = Seq<'s>;
    type SerializeMap = MapOut<'s>;
    type SerializeStruct = MapOut<'s>;
    type SerializeStructVariant = MapOut<'s>;

    fn serialize_bool(self, v: bool) -> Out {
        Ok(Tree::Bool(v))
    }
    widened!(
        serialize_i8(i8), serialize_i16(i16), serialize_i32(i32) => serialize_i64(i64);
        serialize_u8(u8), serialize_u16(u16), serialize_u32(u32) => serialize_u64(u64);
        serialize_u64(u64) => serialize_u128(u128);
        serialize_f32(f32) => serialize_f64(f64)
    );
    fn serialize_i64(self, v: i64) -> Out {
        Ok(Tree::Int(v))
    }
    fn serialize_i128(self, v: i128) -> Out {
        Ok(int_or_double(i64::try_from(v).ok(), v as f64))
    }
    fn serialize_u128(self, v: u128) -> Out {
        Ok(int_or_double(i64::try_from(v).ok(), v as f64))
    }
    fn serialize_f64(self, v: f64) -> Out {
        // serde_json writes a number that is not finite as null.
        match v.is_finite() {
            true => Ok(Tree::Double(v)),
            false => self.serialize_none(),
        }
    }
    fn serialize_char(self, v: char) -> Out {
        let mut buf = [0u8; 4];
        self.serialize_str(v.encode_utf8(&mut buf))
    }
    fn serialize_str(self, v: &str) -> Out {
        Ok(Tree::Str(v.into()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Out {
        // serde_json writes bytes as a list of numbers.
        Ok(Tree::List(
            v.iter().map(|b| Tree::Int(i64::from(*b))).collect(),
        ))
    }
    fn serialize_none(self) -> Out {
        Ok(Tree::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Out {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Out {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Out {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Out {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, name: &'static str, value: &T) -> Out {
        match self.0.get(name, value) {
            Some(shared) => Ok(shared),
            None => value.serialize(self),
        }
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Out {
        Ok(tagged(variant, value.serialize(self)?))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Seq<'s>, ToValError> {
        Ok(Seq {
            items: Vec::with_capacity(len.unwrap_or(0)),
            variant: None,
            shared: self.0,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'s>, ToValError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Seq<'s>, ToValError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Seq<'s>, ToValError> {
        Ok(Seq {
            items: Vec::with_capacity(len),
            variant: Some(variant),
            shared: self.0,
        })
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapOut<'s>, ToValError> {
        Ok(MapOut::new(None, len.unwrap_or(0), self.0))
    }
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<MapOut<'s>, ToValError> {
        Ok(MapOut::new(None, len, self.0))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<MapOut<'s>, ToValError> {
        Ok(MapOut::new(Some(variant), len, self.0))
    }
}

struct Seq<'s> {
    items: Vec<Tree>,
    /// A tuple variant's name: the list is wrapped as `{variant: [...]}`.
    variant: Option<&'static str>,
    shared: &'s SharedLists,
}

impl Seq<'_> {
    fn done(self) -> Out {
        let list = Tree::List(self.items);
        Ok(match self.variant {
            Some(variant) => tagged(variant, list),
            None => list,
        })
    }

    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ToValError> {
        self.items
            .push(value.serialize(TreeSerializer(self.shared))?);
        Ok(())
    }
}

/// The four list-shaped serde traits: each element is pushed, the list is
/// made at the end.
macro_rules! seq_like {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Seq<'_> {
            type Ok = Tree;
            type Error = ToValError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ToValError> {
                self.push(value)
            }
            fn end(self) -> Out {
                self.done()
            }
        }
    )*};
}

seq_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

struct MapOut<'s> {
    entries: Vec<(Cow<'static, str>, Tree)>,
    /// The key given by `serialize_key`, waiting for its value.
    key: Option<String>,
    /// A struct variant's name: the map is wrapped as `{variant: {...}}`.
    variant: Option<&'static str>,
    shared: &'s SharedLists,
}

impl<'s> MapOut<'s> {
    /// `len`: the entries expected (a derived struct's fields less those
    /// it skips), so the map is sized once.
    fn new(variant: Option<&'static str>, len: usize, shared: &'s SharedLists) -> MapOut<'s> {
        MapOut {
            entries: Vec::with_capacity(len),
            key: None,
            variant,
            shared,
        }
    }

    /// A later entry of the same key wins, as in serde_json's map (a map,
    /// or fields flattened into a struct, may write a key twice).
    fn insert(&mut self, key: Cow<'static, str>, value: Tree) {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    fn done(self) -> Out {
        let map = Tree::Map(self.entries);
        Ok(match self.variant {
            Some(variant) => tagged(variant, map),
            None => map,
        })
    }
}

impl ser::SerializeMap for MapOut<'_> {
    type Ok = Tree;
    type Error = ToValError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), ToValError> {
        // Keys as serde_json takes them: strings, and numbers, booleans
        // and chars written as strings.
        let key = serde_json::to_value(key).map_err(|e| ToValError(e.to_string()))?;
        self.key = Some(match key {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            _ => return Err(ToValError("map key must be a string".into())),
        });
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ToValError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| ToValError("map value without a key".into()))?;
        let value = value.serialize(TreeSerializer(self.shared))?;
        self.insert(Cow::Owned(key), value);
        Ok(())
    }
    fn end(self) -> Out {
        self.done()
    }
}

/// The two struct-shaped serde traits: each field is written under its
/// name (a struct writes each name once), the map is made at the end.
macro_rules! struct_like {
    ($($trait:ident),*) => {$(
        impl ser::$trait for MapOut<'_> {
            type Ok = Tree;
            type Error = ToValError;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), ToValError> {
                let value = value.serialize(TreeSerializer(self.shared))?;
                self.entries.push((Cow::Borrowed(key), value));
                Ok(())
            }
            fn end(self) -> Out {
                self.done()
            }
        }
    )*};
}

struct_like!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{json_to_val, Value};
    use serde::Serialize;
    use serde_json::json;

    fn as_value(val: &dyn Val) -> Value {
        Value::try_from(val).expect("a plain value")
    }

    /// Both routes give the same value for the same data.
    fn same(json: &serde_json::Value) {
        let direct = to_val(json).expect("converts");
        assert_eq!(
            as_value(direct.as_ref()),
            as_value(json_to_val(json).as_ref()),
            "{json}"
        );
    }

    #[test]
    fn json_converts_as_json_to_val_converts_it() {
        same(&json!(null));
        same(&json!(true));
        same(&json!(0));
        same(&json!(-7));
        same(&json!(i64::MAX));
        same(&json!(u64::MAX));
        same(&json!(1.5));
        same(&json!(2.0));
        same(&json!("text ü"));
        same(&json!([]));
        same(&json!({}));
        same(&json!({"a": [1, {"b": null, "c": [true, "x"]}], "d": {"e": 3.25}}));
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Sample {
        count: u32,
        huge: u64,
        ratio: f64,
        not_a_number: f64,
        name: &'static str,
        absent: Option<i64>,
        present: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<i64>,
        tags: Vec<String>,
        by_name: std::collections::BTreeMap<String, i64>,
        by_number: std::collections::BTreeMap<u16, bool>,
        #[serde(flatten)]
        inner: Inner,
        letter: char,
        unit: Shape,
        newtype: Shape,
        tuple: Shape,
        record: Shape,
        pair: (i32, &'static str),
    }

    #[derive(Serialize)]
    struct Inner {
        flattened: bool,
    }

    #[derive(Serialize)]
    enum Shape {
        Dot,
        Line(u8),
        Pair(i8, i8),
        Box { w: u8 },
    }

    #[test]
    fn derived_structs_convert_as_their_json_does() {
        let sample = Sample {
            count: 3,
            huge: u64::MAX,
            ratio: 0.25,
            not_a_number: f64::NAN,
            name: "n",
            absent: None,
            present: Some(4),
            skipped: None,
            tags: vec!["a".into(), "b".into()],
            by_name: [("x".to_string(), 1)].into(),
            by_number: [(7, true)].into(),
            inner: Inner { flattened: true },
            letter: 'q',
            unit: Shape::Dot,
            newtype: Shape::Line(2),
            tuple: Shape::Pair(-1, 1),
            record: Shape::Box { w: 9 },
            pair: (5, "five"),
        };
        let json = serde_json::to_value(&sample).unwrap();
        assert!(json.get("skipped").is_none());
        assert_eq!(json["byNumber"], json!({"7": true}));
        let direct = to_val(&sample).unwrap();
        assert_eq!(
            as_value(direct.as_ref()),
            as_value(json_to_val(&json).as_ref())
        );
    }

    #[derive(Serialize)]
    struct Names {
        #[serde(serialize_with = "as_shared")]
        names: Arc<[String]>,
        #[serde(serialize_with = "first_two")]
        first: Arc<[String]>,
    }

    fn as_shared<S: serde::Serializer>(list: &Arc<[String]>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct("Names", &**list)
    }

    /// The start of a list, under the same name: not the list.
    fn first_two<S: serde::Serializer>(list: &Arc<[String]>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct("Names", &list[..2.min(list.len())])
    }

    /// The memory of the list `field` of `val`.
    fn list_at(val: &dyn Val, field: &str) -> *const Box<dyn Val> {
        let map = val.downcast_ref::<CelMap>().unwrap();
        let list = map.get_field(field).unwrap();
        list.downcast_ref::<CelList>().unwrap().inner().as_ptr()
    }

    #[test]
    fn shared_lists_are_handed_out_not_converted_again() {
        let kept: Arc<[String]> = ["a", "b", "c"].map(String::from).into();
        let shared = SharedLists::new("Names", [kept.clone(), kept.clone(), Arc::from([])]);
        assert_eq!(shared.len(), 1, "repeats and empty lists are left out");
        let value = Names {
            names: kept.clone(),
            first: kept.clone(),
        };
        // The same value as without sharing, and as its JSON (the plain
        // lists) converts.
        let json = serde_json::to_value(&value).unwrap();
        assert_eq!(json, json!({"names": ["a", "b", "c"], "first": ["a", "b"]}));
        let once = to_tree(&value, &shared).unwrap().to_val();
        let twice = to_tree(&value, &shared).unwrap().to_val();
        let alone = to_val(&value).unwrap();
        for val in [&once, &twice, &alone] {
            assert_eq!(
                as_value(val.as_ref()),
                as_value(json_to_val(&json).as_ref())
            );
        }
        // The kept list is handed out, the same memory each time; the start
        // of it, a list of the same names elsewhere, or another name, are
        // converted.
        assert_eq!(
            list_at(once.as_ref(), "names"),
            list_at(twice.as_ref(), "names")
        );
        assert_ne!(
            list_at(once.as_ref(), "first"),
            list_at(twice.as_ref(), "first")
        );
        assert_ne!(
            list_at(once.as_ref(), "names"),
            list_at(alone.as_ref(), "names")
        );
        let copy = Names {
            names: ["a", "b", "c"].map(String::from).into(),
            first: kept.clone(),
        };
        let copied = to_tree(&copy, &shared).unwrap().to_val();
        assert_ne!(
            list_at(once.as_ref(), "names"),
            list_at(copied.as_ref(), "names")
        );
        let other = SharedLists::new("Other", [kept]);
        let other_name = to_tree(&value, &other).unwrap().to_val();
        assert_ne!(
            list_at(once.as_ref(), "names"),
            list_at(other_name.as_ref(), "names")
        );
    }

    #[test]
    fn keys_serde_json_refuses_are_refused() {
        let by_list: std::collections::BTreeMap<Vec<u8>, i64> = [(vec![1], 1)].into();
        assert!(serde_json::to_value(&by_list).is_err());
        assert!(to_val(&by_list).is_err());
    }

    #[test]
    fn a_tree_keeps_the_shape_and_order_its_json_is_written_in() {
        let sample = Names {
            names: ["a", "b"].map(String::from).into(),
            first: ["c"].map(String::from).into(),
        };
        let tree = to_tree(&sample, SharedLists::none()).unwrap();
        let Tree::Map(entries) = &tree else {
            panic!("a struct is a map: {tree:?}")
        };
        let keys: Vec<&str> = entries.iter().map(|(k, _)| &**k).collect();
        assert_eq!(keys, ["names", "first"], "the fields in their order");
        assert!(
            matches!(entries[0].0, Cow::Borrowed(_)),
            "a field's name is the program's own, not a copy"
        );
        let names = tree.get("names").unwrap();
        assert_eq!(
            *names,
            Tree::List(vec![Tree::Str("a".into()), Tree::Str("b".into())])
        );
        assert_eq!(tree.get("nope"), None);
        assert_eq!(names.get("names"), None, "a list has no entries");
        // A map written with a key twice keeps the later value, as
        // serde_json's does.
        #[derive(Serialize)]
        struct Twice {
            a: i64,
            #[serde(flatten)]
            more: std::collections::BTreeMap<String, i64>,
        }
        let twice = Twice {
            a: 1,
            more: [("a".to_string(), 2), ("b".to_string(), 3)].into(),
        };
        let tree = to_tree(&twice, SharedLists::none()).unwrap();
        assert_eq!(
            tree,
            Tree::Map(vec![("a".into(), Tree::Int(2)), ("b".into(), Tree::Int(3))])
        );
        assert_eq!(
            serde_json::to_value(&twice).unwrap(),
            json!({"a": 2, "b": 3})
        );
    }

    #[test]
    fn hosts_convert_a_variable_on_its_first_read_and_keep_it() {
        let tree = to_tree(&json!({"requested": true, "total": 2}), SharedLists::none()).unwrap();
        let mut hosts = Hosts::default();
        hosts.push("gpu", Arc::new(tree.clone()));
        assert!(hosts.has("gpu") && !hosts.has("params"));
        assert!(
            hosts.0[0].val.get().is_none(),
            "nothing converted before a read"
        );
        let first = hosts.resolve_val("gpu").unwrap() as *const dyn Val as *const ();
        let again = hosts.resolve_val("gpu").unwrap();
        assert_eq!(first, again as *const dyn Val as *const ());
        assert_eq!(
            as_value(again),
            as_value(json_to_val(&json!({"requested": true, "total": 2})).as_ref())
        );
        assert!(hosts.resolve_val("params").is_none());
        assert!(Hosts::NONE.resolve_val("gpu").is_none());
    }
}
