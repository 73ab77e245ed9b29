//! What the webhook would do to a manifest, without a cluster: the request
//! kube-apiserver would send, the mutation, then validation of the mutated
//! object (the order the apiserver runs them in).
use crate::admission::Admission;
use crate::exceptions::Excepted;
use crate::k8s::doc::Unique;
use crate::policy;
use crate::review::{self, Operation, Request};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The webhook's answers for one object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Evaluation {
    pub kind: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub operation: Operation,
    /// Allowed by both webhooks.
    pub allowed: bool,
    /// The placement profile that patched the object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<json_patch::Patch>,
    /// What each MutatingAdmissionPolicy binding changed, in order (its
    /// operations apply to the object as placement and the previous
    /// policies left it; `patch` holds them all against the manifest).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mutations: Vec<policy::AppliedMutation>,
    /// The object after the patch, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patched: Option<Value>,
    /// One line per violated policy.
    pub denials: Vec<String>,
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<String, String>,
    /// What `GpuPolicyException`s let through: each would have been a
    /// denial, a warning or an audit failure.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excepted: Vec<Excepted>,
}

/// `excepted` without repeats (a policy's failure excepted once per
/// action of its binding, and once per template pod of a workload).
pub fn excepted_results(excepted: &[Excepted]) -> Vec<Excepted> {
    let mut out: Vec<Excepted> = Vec::new();
    for e in excepted {
        if !out.contains(e) {
            out.push(e.clone());
        }
    }
    out
}

/// Runs `f` on a thread with the stack policy evaluation needs
/// ([`policy::EVALUATION_STACK`]) and waits for its result. The offline
/// commands load, compile and evaluate policies inside it; a panic in `f`
/// carries on in the caller.
pub fn with_evaluation_stack<R: Send>(f: impl FnOnce() -> R + Send) -> anyhow::Result<R> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("evaluation".into())
            .stack_size(policy::EVALUATION_STACK)
            .spawn_scoped(scope, f)
            .map_err(|e| anyhow::anyhow!("cannot start the evaluation thread: {e}"))?;
        match thread.join() {
            Ok(result) => Ok(result),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Runs `future` to its end on a runtime of its own: the offline commands
/// have none.
pub fn block_on<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(future))
}

/// Runs `/mutate` then `/validate` on `req`, as the apiserver would, on the
/// calling thread (which needs [`policy::EVALUATION_STACK`] bytes of stack:
/// see [`with_evaluation_stack`]).
pub fn evaluate(admission: &Admission, mut req: Request) -> Evaluation {
    let mutated = admission.mutate(&req);
    let mut warnings = mutated.response.warnings.clone();
    let mut denials = Vec::new();
    if !mutated.response.allowed {
        let message = mutated.response.message.as_deref().unwrap_or_default();
        denials.extend(message.lines().map(str::to_string));
    }
    let mut patched = None;
    if let (Some(patch), Some(obj)) = (&mutated.response.patch, req.object.as_mut()) {
        match json_patch::patch(obj, patch) {
            Ok(()) => patched = Some(obj.clone()),
            Err(err) => denials.push(format!("mutation patch does not apply: {err}")),
        }
    }
    let validated = admission.validate(&req);
    let excepted = excepted_results(&validated.excepted);
    let validated = validated.response;
    warnings.extend(validated.warnings.iter().cloned());
    if let Some(message) = &validated.message {
        if !validated.allowed {
            denials.extend(message.lines().map(str::to_string));
        }
    }
    Evaluation {
        kind: req.kind.kind.clone(),
        name: req.display_name(),
        namespace: req.namespace.clone(),
        operation: req.operation,
        allowed: validated.allowed && mutated.response.allowed && denials.is_empty(),
        profile: mutated.profile,
        mutations: mutated.mutations,
        patch: mutated.response.patch,
        patched,
        denials,
        warnings,
        audit_annotations: validated.audit_annotations,
        excepted,
    }
}

/// The request kube-apiserver would send for a manifest. Namespaced objects
/// without a namespace land in `namespace` or `default`, as with kubectl.
pub fn build_request(
    object: Value,
    old_object: Option<Value>,
    operation: Operation,
    namespace: Option<&str>,
) -> Request {
    let template = if object.is_null() {
        old_object.clone().unwrap_or(Value::Null)
    } else {
        object.clone()
    };
    let mut req = Request::for_object(template, operation, namespace);
    if review::is_cluster_scoped(&req.kind.group, &req.kind.kind) {
        req.namespace = None;
    } else if req.namespace.is_none() {
        req.namespace = Some("default".to_string());
    }
    let object = if object.is_null() { None } else { Some(object) };
    (req.object, req.old_object) = match operation {
        Operation::Delete => (None, old_object.or(object)),
        _ => (object, old_object),
    };
    // The apiserver fills metadata.namespace of namespaced objects.
    if let (Some(ns), Some(obj)) = (req.namespace.clone(), req.object.as_mut()) {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.entry("namespace").or_insert(Value::String(ns));
        }
    }
    req
}

/// The objects of a manifest file: every YAML or JSON document, with `List`
/// documents (as `kubectl get -o json` writes) opened into their items.
pub fn read_manifest(path: &Path) -> anyhow::Result<Vec<Value>> {
    collect_objects(|each| read_objects(path, each))
}

/// [`read_manifest`] one object at a time, so a dump need not fit in
/// memory as objects: `each` gets every object in file order. A JSON
/// file's Lists are read an item at a time; a YAML file a document at a
/// time.
pub fn read_objects(path: &Path, each: EachObject<'_>) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let located = |e: anyhow::Error| anyhow::anyhow!("{}: {e}", path.display());
    if is_json(&text) {
        json_objects(&text, each).map_err(located)
    } else {
        yaml_objects(&text, each).map_err(located)
    }
}

/// Whether `text` is JSON documents throughout (checked without building
/// them); anything else, flow-style YAML included, is read as YAML.
fn is_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '['])
        && serde_json::Deserializer::from_str(text)
            .into_iter::<serde::de::IgnoredAny>()
            .all(|doc| doc.is_ok())
}

/// Parses a (multi-document) manifest; see [`read_manifest`].
pub fn parse_manifest(text: &str) -> anyhow::Result<Vec<Value>> {
    collect_objects(|each| yaml_objects(text, each))
}

type EachObject<'a> = &'a mut dyn FnMut(Value) -> anyhow::Result<()>;

fn collect_objects(
    read: impl FnOnce(EachObject<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    read(&mut |object| {
        objects.push(object);
        Ok(())
    })?;
    Ok(objects)
}

fn yaml_objects(text: &str, each: EachObject<'_>) -> anyhow::Result<()> {
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let Unique(value) =
            Unique::deserialize(doc).map_err(|e| anyhow::anyhow!("document {}: {e}", i + 1))?;
        document(i, value, each)?;
    }
    Ok(())
}

/// A document's objects: none for an empty one, a List's items, or itself.
fn document(i: usize, value: Value, each: EachObject<'_>) -> anyhow::Result<()> {
    match value {
        Value::Null => Ok(()),
        Value::Object(mut map) if is_list(&map) => match map.remove("items") {
            Some(Value::Array(items)) => items
                .into_iter()
                .filter(|v| !v.is_null())
                .try_for_each(each),
            _ => Ok(()),
        },
        Value::Object(_) => each(value),
        other => anyhow::bail!("document {}: expected an object, got {other}", i + 1),
    }
}

/// JSON documents, each a List's items parsed one at a time (the List's
/// other fields whole: they are small).
fn json_objects(text: &str, each: EachObject<'_>) -> anyhow::Result<()> {
    use serde_json::value::RawValue;
    let docs = serde_json::Deserializer::from_str(text).into_iter::<&RawValue>();
    for (i, doc) in docs.enumerate() {
        let failed = |e: serde_json::Error| anyhow::anyhow!("document {}: {e}", i + 1);
        let doc = doc.map_err(failed)?;
        if !doc.get().starts_with('{') {
            let value: Value = serde_json::from_str(doc.get()).map_err(failed)?;
            document(i, value, each)?;
            continue;
        }
        // The fields with the items left raw: only a List's are opened.
        let mut fields: serde_json::Map<String, Value> = serde_json::Map::new();
        let mut items: Option<&RawValue> = None;
        let raw: std::collections::BTreeMap<String, &RawValue> =
            serde_json::from_str(doc.get()).map_err(failed)?;
        for (key, value) in raw {
            if key == "items" {
                items = Some(value);
            } else {
                fields.insert(key, serde_json::from_str(value.get()).map_err(failed)?);
            }
        }
        match items {
            Some(items) if items.get().starts_with('[') && is_list_kind(&fields) => {
                let mut de = serde_json::Deserializer::from_str(items.get());
                serde::de::DeserializeSeed::deserialize(EachItem(each), &mut de)
                    .map_err(|e| anyhow::anyhow!("document {}: {e}", i + 1))?;
            }
            Some(items) => {
                let items: Value = serde_json::from_str(items.get()).map_err(failed)?;
                fields.insert("items".to_string(), items);
                document(i, Value::Object(fields), each)?;
            }
            None => document(i, Value::Object(fields), each)?,
        }
    }
    Ok(())
}

/// Hands each non-null element of a JSON array to a callback as it is
/// parsed.
struct EachItem<'f>(&'f mut dyn FnMut(Value) -> anyhow::Result<()>);

impl<'de> serde::de::DeserializeSeed<'de> for EachItem<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for EachItem<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Value>()? {
            if !item.is_null() {
                (self.0)(item).map_err(serde::de::Error::custom)?;
            }
        }
        Ok(())
    }
}

fn is_list_kind(map: &serde_json::Map<String, Value>) -> bool {
    map.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k == "List" || k.ends_with("List"))
}

fn is_list(map: &serde_json::Map<String, Value>) -> bool {
    is_list_kind(map) && map.get("items").is_some_and(Value::is_array)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_lists_are_read_an_item_at_a_time_and_yaml_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let read = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            read_manifest(&path).unwrap()
        };
        let list = r#"{"apiVersion": "v1", "items": [{"kind": "Pod", "metadata": {"name": "a"}}, null,
            {"kind": "Pod", "metadata": {"name": "b"}}], "kind": "List", "metadata": {}}
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}"#;
        let names: Vec<String> = read("list.json", list)
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        // Not a List: `items` is a field like any other.
        let object = read("object.json", r#"{"kind": "Thing", "items": [1, 2]}"#);
        assert_eq!(object, vec![json!({"kind": "Thing", "items": [1, 2]})]);
        // Flow-style YAML that is not JSON is read as YAML.
        let flow = read(
            "flow.yaml",
            "{apiVersion: v1, kind: Pod, metadata: {name: d}}\n",
        );
        assert_eq!(flow[0]["metadata"]["name"], "d");
        let yaml = read(
            "list.yaml",
            "kind: List\nitems:\n- kind: Pod\n  metadata: {name: e}\n---\n",
        );
        assert_eq!(yaml[0]["metadata"]["name"], "e");
    }

    #[test]
    fn requests_for_cluster_scoped_objects_have_no_namespace() {
        let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}});
        let req = build_request(pool, None, Operation::Create, None);
        assert_eq!(req.namespace, None);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let req = build_request(pod, None, Operation::Create, Some("ml"));
        assert_eq!(req.namespace.as_deref(), Some("ml"));
        assert_eq!(req.object.unwrap()["metadata"]["namespace"], "ml");
    }

    #[test]
    fn delete_carries_the_old_object() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let req = build_request(pod, None, Operation::Delete, None);
        assert!(req.object.is_none());
        assert_eq!(req.old_object.unwrap()["metadata"]["name"], "p");
    }

    #[test]
    fn manifests_open_lists_and_skip_empty_documents() {
        let text = "---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: a}}\n- {apiVersion: v1, kind: Pod, metadata: {name: b}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
        let objects = parse_manifest(text).unwrap();
        let names: Vec<_> = objects
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(parse_manifest("- 1\n- 2\n").is_err());
    }
}
