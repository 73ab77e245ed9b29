//! A CRD's structural schema (`openAPIV3Schema`) checked the way
//! kube-apiserver checks an object against it: types, required fields,
//! enums, bounds (lengths, items, properties, numbers), RFC 3339
//! date-times, list sets, fields it would drop, and the
//! `x-kubernetes-validations` rules (judged by the caller's `rules`).
use serde_json::Value;

/// Whether a CEL rule (its source) holds for a value.
type Rules<'a> = &'a dyn Fn(&str, &Value) -> bool;

/// Every way `value` breaks `schema`, as "path: what", its rules judged
/// with the crate's CEL ([`holds`]).
pub fn with_cel(schema: &Value, value: &Value) -> Vec<String> {
    gpu_admission::cel::on_compile_stack(|| errors(schema, value, &holds)).unwrap()
}

/// Whether the CRD validation rule `source` (CEL over `self`) holds for
/// `value`. The crate's environment knows the admission variables, so the
/// rule's `self` is bound as `object`.
fn holds(source: &str, value: &Value) -> bool {
    use gpu_admission::cel::{compile_here, evaluate, json_to_value, Env, Extensions};
    let env = Env::new(Extensions::new());
    let renamed = regex::Regex::new(r"\bself\b")
        .unwrap()
        .replace_all(source, "object");
    let compiled = compile_here(&env, &renamed).unwrap_or_else(|e| panic!("rule {source:?}: {e}"));
    let mut scope = env.scope();
    scope.add_variable_from_value("object", json_to_value(value));
    match evaluate(compiled.tree(), &scope) {
        Ok(gpu_admission::cel::Value::Bool(b)) => b,
        other => panic!("rule {source:?} on {value}: {other:?}"),
    }
}

/// Every way `value` breaks `schema`, as "path: what".
pub fn errors(schema: &Value, value: &Value, rules: Rules) -> Vec<String> {
    let mut errors = Vec::new();
    walk(schema, value, "", rules, &mut errors);
    errors
}

fn walk(schema: &Value, value: &Value, path: &str, rules: Rules, errors: &mut Vec<String>) {
    let mut fail = |what: String| {
        errors.push(format!(
            "{}: {what}",
            if path.is_empty() { "." } else { path }
        ))
    };
    let ty = schema["type"].as_str().unwrap_or_default();
    let type_ok = match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        fail(format!("must be of type {ty}"));
        return;
    }
    let bound = |key: &str| schema[key].as_u64().map(|n| n as usize);
    match value {
        Value::String(s) => {
            let chars = s.chars().count();
            if bound("minLength").is_some_and(|n| chars < n) {
                fail(format!("shorter than {}", schema["minLength"]));
            }
            if bound("maxLength").is_some_and(|n| chars > n) {
                fail(format!("longer than {}", schema["maxLength"]));
            }
            if schema["format"] == "date-time" && !is_rfc3339(s) {
                fail(format!("{s:?} is not an RFC 3339 date-time"));
            }
            if let Some(allowed) = schema["enum"].as_array() {
                if !allowed.contains(value) {
                    fail(format!("{s:?} is not one of {allowed:?}"));
                }
            }
        }
        Value::Array(items) => {
            if bound("minItems").is_some_and(|n| items.len() < n) {
                fail(format!("fewer than {} items", schema["minItems"]));
            }
            if bound("maxItems").is_some_and(|n| items.len() > n) {
                fail(format!("more than {} items", schema["maxItems"]));
            }
            if schema["x-kubernetes-list-type"] == "set" {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        fail(format!("duplicate item {item}"));
                    }
                }
            }
        }
        Value::Number(n) => {
            let n = n.as_f64().unwrap_or_default();
            if schema["minimum"].as_f64().is_some_and(|min| n < min) {
                fail(format!("less than {}", schema["minimum"]));
            }
            if schema["maximum"].as_f64().is_some_and(|max| n > max) {
                fail(format!("more than {}", schema["maximum"]));
            }
        }
        Value::Object(fields) => {
            if bound("maxProperties").is_some_and(|n| fields.len() > n) {
                fail(format!("more than {} properties", schema["maxProperties"]));
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                let required = required.as_str().unwrap();
                if !fields.contains_key(required) {
                    fail(format!("{required} is required"));
                }
            }
        }
        _ => {}
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let source = rule["rule"].as_str().unwrap();
        if !rules(source, value) {
            fail(rule["message"].as_str().unwrap_or(source).to_string());
        }
    }
    // A field of an object with named fields and no others allowed is
    // one kube-apiserver drops (prunes).
    let pruning = schema.get("properties").is_some()
        && schema.get("additionalProperties").is_none()
        && schema["x-kubernetes-preserve-unknown-fields"] != true;
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                let at = format!("{path}.{key}");
                if let Some(sub) = schema["properties"].get(key) {
                    walk(sub, field, &at, rules, errors);
                } else if let Some(extra) = schema.get("additionalProperties") {
                    walk(extra, field, &at, rules, errors);
                } else if pruning {
                    errors.push(format!("{at}: not in the schema (dropped)"));
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(
                    &schema["items"],
                    item,
                    &format!("{path}[{i}]"),
                    rules,
                    errors,
                );
            }
        }
        _ => {}
    }
}

fn is_rfc3339(s: &str) -> bool {
    regex::Regex::new(
        r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$",
    )
    .unwrap()
    .is_match(s)
}
