//! JSON patches (RFC 6902) against the object as it arrived.
//!
//! Edits name a path of object keys (and, inside existing lists, indexes).
//! Where a parent on the path is missing (or null), the builder adds it
//! once, with the whole value the edits put under it, instead of an empty
//! object and then its children: fewer operations, and never a child before
//! its parent. Pointer tokens are escaped per RFC 6901 by `jsonptr`.
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use serde_json::{Map, Value};

/// A value of the wrong type on an edited path: the API would not have
/// accepted the object, so it gets no patch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path} is not {expected}")]
pub struct ShapeError {
    pub path: String,
    pub expected: &'static str,
}

enum Step {
    /// An operation on a part of the object that exists.
    Op(PatchOperation),
    /// A missing parent and everything the edits put under it, added in
    /// one operation.
    New(PointerBuf, Value),
}

/// Collects edits to `doc` and turns them into patch operations.
pub struct Patch<'a> {
    doc: &'a Value,
    steps: Vec<Step>,
}

enum Edit {
    Set(Value),
    Append(Vec<Value>),
}

impl<'a> Patch<'a> {
    pub fn new(doc: &'a Value) -> Patch<'a> {
        Patch {
            doc,
            steps: Vec::new(),
        }
    }

    /// Sets the value at `path` (added, or replacing what is there).
    pub fn set(&mut self, path: &[&str], value: Value) -> Result<(), ShapeError> {
        self.edit(path, Edit::Set(value))
    }

    /// Appends `values` to the list at `path`, creating the list (and its
    /// parents) when missing. Nothing to append: no operation.
    pub fn append(&mut self, path: &[&str], values: Vec<Value>) -> Result<(), ShapeError> {
        if values.is_empty() {
            return Ok(());
        }
        self.edit(path, Edit::Append(values))
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The operations, parents always before their children.
    pub fn into_operations(self) -> Vec<PatchOperation> {
        self.steps
            .into_iter()
            .map(|step| match step {
                Step::Op(op) => op,
                Step::New(path, value) => add(path, value),
            })
            .collect()
    }

    fn edit(&mut self, path: &[&str], edit: Edit) -> Result<(), ShapeError> {
        let shape = |pointer: &PointerBuf, expected| ShapeError {
            path: pointer.to_string(),
            expected,
        };
        let mut pointer = PointerBuf::new();
        let mut current = self.doc;
        for (i, token) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            let child = match current {
                Value::Object(m) => m.get(*token).filter(|v| !v.is_null()),
                Value::Array(a) => match token.parse::<usize>() {
                    Ok(n) if n < a.len() => Some(&a[n]),
                    Ok(_) => return Err(shape(&pointer, "a list with that index")),
                    Err(_) => return Err(shape(&pointer, "an object")),
                },
                _ => return Err(shape(&pointer, "an object")),
            };
            pointer.push_back(*token);
            let Some(child) = child else {
                // Missing from here down: add it whole, or into what an
                // earlier edit already creates here.
                self.create(pointer, &path[i + 1..], edit);
                return Ok(());
            };
            if last {
                match edit {
                    Edit::Set(value) => self.steps.push(Step::Op(add(pointer, value))),
                    Edit::Append(values) => {
                        if !child.is_array() {
                            return Err(shape(&pointer, "a list"));
                        }
                        for value in values {
                            let mut item = pointer.clone();
                            item.push_back("-");
                            self.steps.push(Step::Op(add(item, value)));
                        }
                    }
                }
                return Ok(());
            }
            current = child;
        }
        // An empty path sets or appends to the document itself.
        match edit {
            Edit::Set(value) => self.steps.push(Step::Op(add(pointer, value))),
            Edit::Append(_) => return Err(shape(&pointer, "a list")),
        }
        Ok(())
    }

    /// Records `edit` at `rest` below the missing `root`.
    fn create(&mut self, root: PointerBuf, rest: &[&str], edit: Edit) {
        let existing = self.steps.iter_mut().find_map(|s| match s {
            Step::New(p, v) if *p == root => Some(v),
            _ => None,
        });
        match existing {
            Some(value) => insert(value, rest, edit),
            None => {
                let mut value = Value::Null;
                insert(&mut value, rest, edit);
                self.steps.push(Step::New(root, value));
            }
        }
    }
}

/// Puts `edit` at `path` inside a value this patch creates.
fn insert(value: &mut Value, path: &[&str], edit: Edit) {
    match path.split_first() {
        None => match edit {
            Edit::Set(v) => *value = v,
            Edit::Append(vs) => match value {
                Value::Array(a) => a.extend(vs),
                _ => *value = Value::Array(vs),
            },
        },
        Some((key, rest)) => {
            if !value.is_object() {
                *value = Value::Object(Map::new());
            }
            if let Value::Object(m) = value {
                insert(m.entry(key.to_string()).or_insert(Value::Null), rest, edit);
            }
        }
    }
}

/// Shape-checked read of the object at `key` of an object to be patched;
/// `None` when absent or null, an error when of another type.
pub fn object_field<'a>(
    parent: Option<&'a Map<String, Value>>,
    key: &str,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    shaped_field(parent, key, path, "an object", Value::as_object)
}

/// Shape-checked read of the list at `key`; `None` when absent or null.
pub fn array_field<'a>(
    parent: Option<&'a Map<String, Value>>,
    key: &str,
    path: &str,
) -> Result<Option<&'a Vec<Value>>, ShapeError> {
    shaped_field(parent, key, path, "a list", Value::as_array)
}

fn shaped_field<'a, T>(
    parent: Option<&'a Map<String, Value>>,
    key: &str,
    path: &str,
    expected: &'static str,
    read: fn(&'a Value) -> Option<&'a T>,
) -> Result<Option<&'a T>, ShapeError> {
    match parent.and_then(|p| p.get(key)) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => read(value).map(Some).ok_or_else(|| ShapeError {
            path: path.to_string(),
            expected,
        }),
    }
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applied(doc: &Value, patch: Patch) -> (Vec<String>, Value) {
        let ops = patch.into_operations();
        let paths = ops
            .iter()
            .map(|op| match op {
                PatchOperation::Add(a) => a.path.to_string(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        let mut out = doc.clone();
        json_patch::patch(&mut out, &ops).unwrap();
        (paths, out)
    }

    #[test]
    fn missing_parents_come_whole_in_one_operation() {
        let doc = json!({"spec": {"containers": []}});
        let mut p = Patch::new(&doc);
        p.append(
            &["spec", "affinity", "nodeAffinity", "required", "terms"],
            vec![json!(1)],
        )
        .unwrap();
        p.append(
            &["spec", "affinity", "nodeAffinity", "preferred"],
            vec![json!(2)],
        )
        .unwrap();
        p.set(&["metadata", "annotations", "a/b"], json!("x"))
            .unwrap();
        let (paths, out) = applied(&doc, p);
        assert_eq!(paths, ["/spec/affinity", "/metadata"]);
        assert_eq!(
            out,
            json!({"spec": {"containers": [], "affinity": {"nodeAffinity": {"required": {"terms": [1]}, "preferred": [2]}}},
                   "metadata": {"annotations": {"a/b": "x"}}})
        );
    }

    #[test]
    fn existing_lists_are_appended_to_and_keys_escaped() {
        let doc = json!({"metadata": {"annotations": null}, "spec": {"tolerations": [{"key": "a"}], "terms": [{"x": 1}]}});
        let mut p = Patch::new(&doc);
        p.append(
            &["spec", "tolerations"],
            vec![json!({"key": "b"}), json!({"key": "c"})],
        )
        .unwrap();
        p.append(
            &["spec", "terms", "0", "matchExpressions"],
            vec![json!("e")],
        )
        .unwrap();
        p.set(
            &["metadata", "annotations", "gpu-admission.io/p"],
            json!("v"),
        )
        .unwrap();
        let (paths, out) = applied(&doc, p);
        assert_eq!(
            paths,
            [
                "/spec/tolerations/-",
                "/spec/tolerations/-",
                "/spec/terms/0/matchExpressions",
                "/metadata/annotations"
            ]
        );
        assert_eq!(out["spec"]["tolerations"].as_array().unwrap().len(), 3);
        assert_eq!(
            out["spec"]["terms"][0],
            json!({"x": 1, "matchExpressions": ["e"]})
        );
        assert_eq!(out["metadata"]["annotations"]["gpu-admission.io/p"], "v");
    }

    #[test]
    fn wrong_shapes_are_errors() {
        let doc = json!({"spec": {"tolerations": "x", "n": 1, "l": []}});
        let mut p = Patch::new(&doc);
        let e = p
            .append(&["spec", "tolerations"], vec![json!(1)])
            .unwrap_err();
        assert_eq!(e.path, "/spec/tolerations");
        assert!(p.set(&["spec", "n", "x"], json!(1)).is_err());
        assert!(p.set(&["spec", "l", "3", "x"], json!(1)).is_err());
        assert!(p.is_empty());
        assert!(p.append(&["spec", "none"], vec![]).is_ok());
        assert!(p.is_empty());
    }
}
