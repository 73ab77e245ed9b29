//! Reading fields of JSON objects, leniently (objects under admission) and
//! strictly (the project's own documents).
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// A field of a document that cannot be used, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field at fault, e.g. `spec.tolerations[0].effect`.
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for FieldError {}

/// The string at JSON pointer `pointer`, or `""`.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The string field `key` of `v`, or `""`.
pub fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The string at `pointer`, when it is one.
pub fn opt_str_at(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The elements of a list, or none when `v` is absent or not a list.
pub fn items(v: Option<&Value>) -> impl Iterator<Item = &Value> {
    v.and_then(Value::as_array).into_iter().flatten()
}

/// A scalar as the string Kubernetes would compare it as (numbers and
/// booleans as written); `None` for objects, lists and null.
pub fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A whole number written as a number or a decimal string.
pub fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `metadata.labels` of an object (string values only).
pub fn labels_of(object: Option<&Value>) -> BTreeMap<String, String> {
    string_map(object.and_then(|o| o.pointer("/metadata/labels")))
}

/// A JSON object of strings as a map; other values are left out.
pub fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Strict: the mapping at `v` (absent or null: `None`).
pub fn object<'a>(
    v: Option<&'a Value>,
    field: &str,
) -> Result<Option<&'a Map<String, Value>>, FieldError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(FieldError::new(field, "must be a mapping")),
    }
}

/// Strict: the list at `v` (absent or null: empty).
pub fn list<'a>(v: Option<&'a Value>, field: &str) -> Result<&'a [Value], FieldError> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(FieldError::new(field, "must be a list")),
    }
}

/// Strict: an error naming the first key of `obj` not in `allowed`.
pub fn unknown_fields(
    obj: &Map<String, Value>,
    field: &str,
    allowed: &[&str],
) -> Result<(), FieldError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(FieldError::new(
            join(field, k),
            format!("unknown field; expected one of {}", allowed.join(", ")),
        )),
    }
}

/// `field.key`, or `key` at the top.
pub fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lenient_readers_take_what_is_there() {
        let v = json!({"metadata": {"labels": {"a": "1", "n": 2}}, "spec": {"replicas": "3", "list": [1, 2]}});
        assert_eq!(
            labels_of(Some(&v)),
            BTreeMap::from([("a".into(), "1".into())])
        );
        assert_eq!(str_at(&v, "/metadata/labels/a"), "1");
        assert_eq!(str_at(&v, "/metadata/labels/n"), "");
        assert_eq!(v.pointer("/spec/replicas").and_then(int_of), Some(3));
        assert_eq!(items(v.pointer("/spec/list")).count(), 2);
        assert_eq!(items(v.pointer("/spec/replicas")).count(), 0);
        assert_eq!(scalar_string(&json!(4)), Some("4".into()));
        assert_eq!(scalar_string(&json!(true)), Some("true".into()));
        assert_eq!(scalar_string(&json!([1])), None);
    }

    #[test]
    fn strict_readers_name_the_field() {
        let v = json!({"a": 1, "typo": 2});
        let e = unknown_fields(v.as_object().unwrap(), "spec", &["a"]).unwrap_err();
        assert_eq!(e.to_string(), "spec.typo: unknown field; expected one of a");
        assert_eq!(
            list(Some(&json!("x")), "spec.l").unwrap_err().to_string(),
            "spec.l: must be a list"
        );
        assert!(object(Some(&Value::Null), "m").unwrap().is_none());
    }
}
