//! Strict reading of documents (the project's own and Kubernetes objects in
//! policy folders) with serde: unknown fields are errors, and every error
//! names the path of its field.
use super::json::{FieldError, Pointer};
use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Number, Value};
use std::collections::BTreeMap;
use std::fmt;

/// Reads `value` into `T`, an error naming the path of the field at fault.
/// A null field counts as absent, as in Kubernetes (YAML's `key:` with
/// nothing after it). serde's wording is turned into the engine's: a
/// missing field is `required` at its own path, and an unknown enum value
/// says what it must be.
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    fn drop_nulls(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|_, v| !v.is_null());
                m.values_mut().for_each(drop_nulls);
            }
            Value::Array(a) => a.iter_mut().for_each(drop_nulls),
            _ => {}
        }
    }
    let mut value = value.clone();
    drop_nulls(&mut value);
    from_value_with_nulls(&value)
}

/// [`from_value`] with null fields kept: for documents that carry objects
/// as data (a PolicyTest's objects and expected patches), where a null is
/// a value of its own.
pub fn from_value_with_nulls<T: DeserializeOwned>(value: &Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let mut field = if path == "." { String::new() } else { path };
        let text = e.into_inner().to_string();
        let quoted = |prefix: &str| {
            let (name, rest) = text.strip_prefix(prefix)?.split_once('`')?;
            Some((name.to_string(), rest.replace('`', "")))
        };
        let message = if let Some((name, _)) = quoted("missing field `") {
            field = if field.is_empty() {
                name
            } else {
                format!("{field}.{name}")
            };
            "required".to_string()
        } else if let Some((_, rest)) = quoted("unknown field `") {
            // The path already ends with the unknown field.
            format!("unknown field{rest}")
        } else if let Some((name, rest)) = quoted("unknown variant `") {
            format!(
                "must be {}, not {name}",
                rest.trim_start_matches(", expected ")
            )
        } else {
            text
        };
        FieldError { field, message }
    })
}

/// A Kubernetes object: `apiVersion`, `kind`, `metadata`, the kind's
/// `spec`, and the `status` a server export carries (ignored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Object<S> {
    #[serde(rename = "apiVersion")]
    _api_version: IgnoredAny,
    #[serde(rename = "kind")]
    _kind: IgnoredAny,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<S>,
    #[serde(rename = "status")]
    _status: Option<IgnoredAny>,
}

/// The part of `metadata` the engine uses; every other field Kubernetes
/// sets (uid, annotations, managedFields, ...) is accepted and ignored.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}
/// Whether `doc` is the `v1` ConfigMap named `name` (a policy folder's
/// data: tiers, exemption lists).
pub fn is_config_map(doc: &Value, name: &str) -> bool {
    doc.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && doc.get("kind").and_then(Value::as_str) == Some("ConfigMap")
        && doc.at("/metadata/name").and_then(Value::as_str) == Some(name)
}

/// A list as policies' params write one in a ConfigMap value: split at
/// commas, trimmed, empty entries dropped.
pub fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// A document read as kube-apiserver's decoder reads one: a key written
/// twice in one mapping is an error (`mapping key "name" already defined`),
/// where reading straight into a [`Value`] would keep the last one.
pub struct Unique(pub Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Unique::deserialize(d).map(|u| u.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "mapping key {key:?} already defined"
                )));
            }
            let Unique(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::Unique;
    use serde_json::json;

    #[test]
    fn a_key_written_twice_is_an_error_at_its_mapping() {
        let text = "metadata:\n  name: a\n  labels: {x: \"1\"}\n  name: b\n";
        let e = serde_yaml::from_str::<Unique>(text).err().unwrap();
        // serde_yaml names the mapping's path and where it starts.
        assert!(
            e.to_string()
                .starts_with("metadata: mapping key \"name\" already defined"),
            "{e}"
        );
        assert_eq!(e.location().map(|l| l.line()), Some(2), "{e}");
        let e = serde_json::from_str::<Unique>(r#"{"a": 1, "a": 2}"#)
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("mapping key \"a\" already defined"),
            "{e}"
        );
    }

    #[test]
    fn values_read_as_serde_json_reads_them() {
        let text = "a: [1, -2, 2.5, true, null, x, '3']\nb: {c: ~}\nd: 18446744073709551615\n";
        let Unique(value) = serde_yaml::from_str(text).unwrap();
        assert_eq!(
            value,
            serde_yaml::from_str::<serde_json::Value>(text).unwrap()
        );
        assert_eq!(value["a"], json!([1, -2, 2.5, true, null, "x", "3"]));
    }
}
