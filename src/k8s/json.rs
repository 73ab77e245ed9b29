//! Reading fields of JSON objects under admission, leniently: a field of
//! the wrong shape reads as absent. (Documents are read strictly by
//! [`super::doc`].)
use serde_json::Value;
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
}
