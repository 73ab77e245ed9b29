//! Strict reading of documents (the project's own and Kubernetes objects in
//! policy folders) with serde: unknown fields are errors, and every error
//! names the path of its field.
use super::json::FieldError;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

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
        && doc.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
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
