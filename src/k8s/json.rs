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

/// JSON-pointer lookups (RFC 6901) that allocate nothing: what
/// `serde_json::Value::pointer` answers, without the two `replace` calls it
/// makes on every token (a token is unescaped only when it holds a `~`).
/// Objects under admission are read this way dozens of times per request.
pub trait Pointer {
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl Pointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        let rest = pointer.strip_prefix('/')?;
        let mut target = self;
        let mut start = 0;
        // Tokens are a few bytes long: one pass over each finds its end
        // and whether it holds an escape, without a searcher per token.
        loop {
            let mut end = start;
            let mut escaped = false;
            for &b in &rest.as_bytes()[start..] {
                if b == b'/' {
                    break;
                }
                escaped |= b == b'~';
                end += 1;
            }
            let token = &rest[start..end];
            target = if escaped {
                step(target, &token.replace("~1", "/").replace("~0", "~"))?
            } else {
                step(target, token)?
            };
            if end == rest.len() {
                return Some(target);
            }
            start = end + 1;
        }
    }
}

/// One pointer token into `v`: an object's field, or a list's index as
/// RFC 6901 writes it (digits, no sign, no leading zero).
fn step<'v>(v: &'v Value, token: &str) -> Option<&'v Value> {
    match v {
        Value::Object(map) => map.get(token),
        Value::Array(list) => {
            let canonical = !token.is_empty()
                && token.bytes().all(|b| b.is_ascii_digit())
                && (token == "0" || !token.starts_with('0'));
            canonical
                .then(|| token.parse::<usize>().ok())
                .flatten()
                .and_then(|i| list.get(i))
        }
        _ => None,
    }
}

/// The string at JSON pointer `pointer`, or `""`.
/// How an object not yet named is shown: its `generateName` and `*`
/// (`web-*`); empty without one.
pub fn generated_name(object: Option<&Value>) -> String {
    match object.and_then(|o| o.at("/metadata/generateName")?.as_str()) {
        Some(prefix) => format!("{prefix}*"),
        None => String::new(),
    }
}

pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.at(pointer).and_then(Value::as_str).unwrap_or("")
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
    string_map(object.and_then(|o| o.at("/metadata/labels")))
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
    fn at_answers_as_serde_json_pointer() {
        let doc = json!({
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "metadata": {"annotations": {"example.com/a~b": "x", "": "empty", "0": "zero"}},
            "list": [[1, 2], [3]],
        });
        for pointer in [
            "",
            "/",
            "/spec",
            "/spec/containers/1/name",
            "/spec/containers/01",
            "/spec/containers/+1",
            "/spec/containers/-",
            "/spec/containers/2",
            "/spec/containers/x",
            "/metadata/annotations/example.com~1a~0b",
            "/metadata/annotations/",
            "/metadata/annotations/0",
            "/metadata/annotations/example.com~1a~2b",
            "/metadata/annotations/~",
            "/metadata/annotations/example.com~01a",
            "/metadata//annotations",
            "/spec/",
            "/spec/containers/0/",
            "/spec/containers/0/name/",
            "//",
            "/list/0/1",
            "/list/1/0/0",
            "spec",
            "/nothing/here",
        ] {
            #[allow(clippy::disallowed_methods)] // the answer `at` must give
            let expected = doc.pointer(pointer);
            assert_eq!(doc.at(pointer), expected, "{pointer:?}");
        }
    }

    #[test]
    fn lenient_readers_take_what_is_there() {
        let v = json!({"metadata": {"labels": {"a": "1", "n": 2}}, "spec": {"replicas": "3", "list": [1, 2]}});
        assert_eq!(
            labels_of(Some(&v)),
            BTreeMap::from([("a".into(), "1".into())])
        );
        assert_eq!(str_at(&v, "/metadata/labels/a"), "1");
        assert_eq!(str_at(&v, "/metadata/labels/n"), "");
        assert_eq!(v.at("/spec/replicas").and_then(int_of), Some(3));
        assert_eq!(items(v.at("/spec/list")).count(), 2);
        assert_eq!(items(v.at("/spec/replicas")).count(), 0);
        assert_eq!(scalar_string(&json!(4)), Some("4".into()));
        assert_eq!(scalar_string(&json!(true)), Some("true".into()));
        assert_eq!(scalar_string(&json!([1])), None);
    }
}
