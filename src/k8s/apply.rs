//! Server-side-apply merge of an apply configuration into an object, as
//! kube-apiserver's structured-merge-diff does it for the fields the
//! Kubernetes OpenAPI schema describes.
//!
//! Maps (objects) merge field by field. A list merges by its
//! `x-kubernetes-list-type`: `map` lists by the values of their
//! `x-kubernetes-list-map-keys` (an item of the configuration replaces
//! nothing but is merged into the item with the same keys, and a new key
//! is added after the existing items), `set` lists as the union of their
//! items, and `atomic` lists (the default for a list the schema does not
//! annotate) are replaced whole. Scalars are replaced. As kube-apiserver
//! does for a MutatingAdmissionPolicy, a configuration that sets an atomic
//! map or struct (`nodeSelector`, a label selector, an `env` `valueFrom`
//! reference) is refused.
//!
//! The list types are those of the published OpenAPI schema
//! (kubernetes/kubernetes `api/openapi-spec/v3/api__v1_openapi.json`,
//! `io.k8s.api.core.v1.PodSpec`, `Container`, `EphemeralContainer`,
//! `ResourceRequirements` and `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta`:
//! `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`), for a Pod
//! and the pod template of every kind in [`workloads::TEMPLATE_KINDS`].
//! Every kind's `metadata` is ObjectMeta.
//! Lists of other kinds, and of fields outside the table, are atomic.
use super::workloads;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// How a list merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole.
    Atomic,
    /// Union of the items.
    Set,
    /// Items merged by these key fields; a key field may have a default
    /// (`protocol` of a container port is `TCP` when absent).
    Map(&'static [(&'static str, Option<&'static str>)]),
}

const NAME: ListType = ListType::Map(&[("name", None)]);

/// Lists of an `ObjectMeta`, by path from it.
const OBJECT_META: &[(&str, ListType)] = &[
    ("finalizers", ListType::Set),
    ("ownerReferences", ListType::Map(&[("uid", None)])),
];

/// Lists of a `PodSpec`, by path from it (container fields are listed once,
/// under [`CONTAINER`]).
const POD_SPEC: &[(&str, ListType)] = &[
    ("volumes", NAME),
    ("initContainers", NAME),
    ("containers", NAME),
    ("ephemeralContainers", NAME),
    ("imagePullSecrets", NAME),
    ("hostAliases", ListType::Map(&[("ip", None)])),
    (
        "topologySpreadConstraints",
        ListType::Map(&[("topologyKey", None), ("whenUnsatisfiable", None)]),
    ),
    ("resourceClaims", NAME),
    ("schedulingGates", NAME),
];

/// Lists of a `Container` (and `EphemeralContainer`), by path from it.
const CONTAINER: &[(&str, ListType)] = &[
    (
        "ports",
        ListType::Map(&[("containerPort", None), ("protocol", Some("TCP"))]),
    ),
    ("env", NAME),
    ("volumeMounts", ListType::Map(&[("mountPath", None)])),
    ("volumeDevices", ListType::Map(&[("devicePath", None)])),
    ("resources.claims", NAME),
];

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// Atomic maps and structs (`x-kubernetes-map-type: atomic`) of a
/// `PodSpec`, by path from it: an apply configuration may not set them.
const POD_SPEC_ATOMIC: &[&str] = &[
    "nodeSelector",
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.preference",
    "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.labelSelector",
    "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.namespaceSelector",
    "affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution.podAffinityTerm.labelSelector",
    "affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution.podAffinityTerm.namespaceSelector",
    "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.labelSelector",
    "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.namespaceSelector",
    "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.podAffinityTerm.labelSelector",
    "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.podAffinityTerm.namespaceSelector",
    "topologySpreadConstraints.labelSelector",
    // Items (LocalObjectReference).
    "imagePullSecrets",
];

/// Atomic structs of a `Container`, by path from it.
const CONTAINER_ATOMIC: &[&str] = &[
    "env.valueFrom.configMapKeyRef",
    "env.valueFrom.secretKeyRef",
    "env.valueFrom.fieldRef",
    "env.valueFrom.resourceFieldRef",
];

/// Atomic structs of an `ObjectMeta` (items of `ownerReferences`).
const OBJECT_META_ATOMIC: &[&str] = &["ownerReferences"];

/// The merge schema of one object, picked by its `apiVersion` and `kind`.
#[derive(Clone, Copy, Debug)]
pub struct Schema {
    /// JSON pointer to the pod template (`metadata` + `spec`) of a kind in
    /// [`workloads::TEMPLATE_KINDS`]; empty for a Pod; `None` for any other
    /// kind.
    template: Option<&'static str>,
}

/// Where a field path lies, for the tables above.
enum Place {
    /// In an ObjectMeta (the object's or its pod template's), at this
    /// path from it, dotted.
    Meta(String),
    /// In the pod spec, at this path from it, dotted.
    PodSpec(String),
    Elsewhere,
}

impl Schema {
    /// The schema for `object` (its own `apiVersion` and `kind`).
    pub fn of(object: &Value) -> Schema {
        let api = object.get("apiVersion").and_then(Value::as_str);
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let group = workloads::group_of(api.unwrap_or(""));
        let template = match kind {
            "Pod" if group.is_empty() => Some(""),
            _ => workloads::template_kind(group, kind).map(|k| k.template),
        };
        Schema { template }
    }

    /// Whether the kind's pod spec is in the table (other kinds merge their
    /// lists as atomic, `metadata` apart).
    pub fn is_known(&self) -> bool {
        self.template.is_some()
    }

    /// The list type of the list at `path` (field names from the root,
    /// list items not counted).
    pub fn list_type(&self, path: &[&str]) -> ListType {
        let lookup = |table: &[(&str, ListType)], rest: &str| {
            table
                .iter()
                .find(|(p, _)| *p == rest)
                .map_or(ListType::Atomic, |(_, t)| *t)
        };
        match self.place(path) {
            Place::Meta(rest) => lookup(OBJECT_META, &rest),
            Place::PodSpec(rest) => CONTAINER_LISTS
                .iter()
                .find_map(|list| strip(&rest, list))
                .map_or_else(|| lookup(POD_SPEC, &rest), |field| lookup(CONTAINER, field)),
            Place::Elsewhere => ListType::Atomic,
        }
    }

    /// Whether the object at `path` (field names from the root, list items
    /// not counted) is an atomic map or struct.
    pub fn is_atomic_object(&self, path: &[&str]) -> bool {
        match self.place(path) {
            Place::Meta(rest) => OBJECT_META_ATOMIC.contains(&rest.as_str()),
            Place::PodSpec(rest) => match CONTAINER_LISTS.iter().find_map(|l| strip(&rest, l)) {
                Some(field) => CONTAINER_ATOMIC.contains(&field),
                None => POD_SPEC_ATOMIC.contains(&rest.as_str()),
            },
            Place::Elsewhere => false,
        }
    }

    fn place(&self, path: &[&str]) -> Place {
        let inside = |path: &[&str], field: &str| match path.split_first() {
            Some((first, rest)) if *first == field && !rest.is_empty() => Some(rest.join(".")),
            _ => None,
        };
        if let Some(rest) = inside(path, "metadata") {
            return Place::Meta(rest);
        }
        let mut template = path;
        for token in self.template.into_iter().flat_map(|t| t.split('/').skip(1)) {
            match template.split_first() {
                Some((first, rest)) if *first == token => template = rest,
                _ => return Place::Elsewhere,
            }
        }
        if let Some(rest) = inside(template, "metadata") {
            Place::Meta(rest)
        } else if let Some(rest) = inside(template, "spec").filter(|_| self.is_known()) {
            Place::PodSpec(rest)
        } else {
            Place::Elsewhere
        }
    }
}

/// kube-apiserver refuses an apply configuration that sets an atomic map or
/// struct (its fields not given would be dropped without a word); atomic
/// lists are allowed (a container's `args`, `command`). The first one found.
fn check_no_atomic_objects(schema: &Schema, config: &Value) -> Result<(), MergeError> {
    walk_fields(config, true, &mut |path, shown, value| {
        if value.is_object() && !path.is_empty() && schema.is_atomic_object(path) {
            return Err(MergeError {
                path: shown.to_string(),
                message: "may not mutate atomic arrays, maps or structs (set it with a JSONPatch)"
                    .into(),
            });
        }
        Ok(())
    })
}

/// Checks that every keyed (`map`) list of `object` has objects with their
/// keys, each key once: what the apiserver requires of an object before
/// it can merge into it.
pub fn check(schema: &Schema, object: &Value) -> Result<(), MergeError> {
    walk_fields(object, false, &mut |path, shown, value| match value {
        Value::Array(items) => match schema.list_type(path) {
            ListType::Map(keys) => index_keys(keys, items, shown, "object").map(drop),
            _ => Ok(()),
        },
        _ => Ok(()),
    })
}

/// What [`walk_fields`] calls at each map and list: (field path, path as
/// shown, the value).
type Visit<'v> = dyn FnMut(&[&str], &str, &Value) -> Result<(), MergeError> + 'v;

/// Visits every map and list of `value`, depth first, each before what it
/// holds, with its field path (list items add nothing to it) and its path
/// as errors show it (`a.b`, with `[i]` for list items when `index_items`);
/// stops at the first error.
fn walk_fields(value: &Value, index_items: bool, visit: &mut Visit) -> Result<(), MergeError> {
    fn go(
        path: &mut Vec<String>,
        shown: &mut String,
        value: &Value,
        index_items: bool,
        visit: &mut Visit,
    ) -> Result<(), MergeError> {
        if !(value.is_object() || value.is_array()) {
            return Ok(());
        }
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        visit(&names, shown, value)?;
        let mark = shown.len();
        match value {
            Value::Object(fields) => {
                for (key, v) in fields {
                    if !shown.is_empty() {
                        shown.push('.');
                    }
                    shown.push_str(key);
                    path.push(key.clone());
                    let result = go(path, shown, v, index_items, visit);
                    path.pop();
                    shown.truncate(mark);
                    result?;
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if index_items {
                        shown.push_str(&format!("[{i}]"));
                    }
                    let result = go(path, shown, item, index_items, visit);
                    shown.truncate(mark);
                    result?;
                }
            }
            _ => {}
        }
        Ok(())
    }
    go(
        &mut Vec::new(),
        &mut String::new(),
        value,
        index_items,
        visit,
    )
}

/// `path` below `prefix` (`a.b.c` below `a` is `b.c`).
fn strip<'p>(path: &'p str, prefix: &str) -> Option<&'p str> {
    path.strip_prefix(prefix)?.strip_prefix('.')
}

/// Why an apply configuration could not be merged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct MergeError {
    /// Field path, e.g. `spec.containers[name=gpu].env`.
    pub path: String,
    pub message: String,
}

/// Merges `config` into `object` with `schema`'s list types.
pub fn merge(schema: &Schema, object: &Value, config: &Value) -> Result<Value, MergeError> {
    check_no_atomic_objects(schema, config)?;
    let mut path = Vec::new();
    let mut shown = String::new();
    merge_value(schema, &mut path, &mut shown, object, config)
}

fn merge_value(
    schema: &Schema,
    path: &mut Vec<String>,
    shown: &mut String,
    lhs: &Value,
    rhs: &Value,
) -> Result<Value, MergeError> {
    match (lhs, rhs) {
        (_, Value::Null) => Err(MergeError {
            path: shown_or_root(shown),
            message: "null in an apply configuration: an apply configuration cannot remove a field (use a JSONPatch remove)".into(),
        }),
        (Value::Object(l), Value::Object(r)) => {
            let mut out = l.clone();
            for (key, value) in r {
                let merged = {
                    let mark = shown.len();
                    if !shown.is_empty() {
                        shown.push('.');
                    }
                    shown.push_str(key);
                    path.push(key.clone());
                    let result = match l.get(key) {
                        Some(existing) => merge_value(schema, path, shown, existing, value),
                        None => fresh(schema, path, shown, value),
                    };
                    path.pop();
                    shown.truncate(mark);
                    result?
                };
                out.insert(key.clone(), merged);
            }
            Ok(Value::Object(out))
        }
        (Value::Array(l), Value::Array(r)) => {
            let names: Vec<&str> = path.iter().map(String::as_str).collect();
            match schema.list_type(&names) {
                // Atomic: replaced whole, items as given.
                ListType::Atomic => Ok(rhs.clone()),
                ListType::Set => {
                    let mut out = l.clone();
                    for item in r {
                        if !out.contains(item) {
                            out.push(item.clone());
                        }
                    }
                    Ok(Value::Array(out))
                }
                ListType::Map(keys) => merge_map_list(schema, path, shown, keys, l, r),
            }
        }
        _ => fresh(schema, path, shown, rhs),
    }
}

/// A value the object did not have: its `map` lists are still checked.
fn fresh(
    schema: &Schema,
    path: &mut Vec<String>,
    shown: &mut String,
    value: &Value,
) -> Result<Value, MergeError> {
    let empty = match value {
        Value::Object(_) => Value::Object(Map::new()),
        Value::Array(_) => Value::Array(Vec::new()),
        Value::Null => Value::Null,
        other => return Ok(other.clone()),
    };
    merge_value(schema, path, shown, &empty, value)
}

fn shown_or_root(shown: &str) -> String {
    if shown.is_empty() {
        "(root)".to_string()
    } else {
        shown.to_string()
    }
}

/// The key of one item of a `map` list.
fn item_key(
    keys: &[(&str, Option<&str>)],
    item: &Value,
    shown: &str,
    index: usize,
    side: &str,
) -> Result<Vec<Value>, MergeError> {
    let error = |message: String| MergeError {
        path: format!("{shown}[{index}]"),
        message,
    };
    let Value::Object(fields) = item else {
        return Err(error(format!("{side}: a list item must be an object")));
    };
    keys.iter()
        .map(|(key, default)| match (fields.get(*key), default) {
            (Some(v), _) if !v.is_null() => Ok(v.clone()),
            (_, Some(d)) => Ok(Value::String(d.to_string())),
            _ => Err(error(format!("{side}: the list key {key} is required"))),
        })
        .collect()
}

/// A key as text (its values as JSON, in key order), to compare and hash
/// keys by: lists may be long, and every lookup is then O(1).
fn key_text(key: &[Value]) -> String {
    serde_json::to_string(key).unwrap_or_default()
}

/// The keys of a `map` list's items, as [`key_text`], with each one's
/// position; an item without its key, or a key twice, is an error.
fn index_keys(
    keys: &[(&str, Option<&str>)],
    items: &[Value],
    shown: &str,
    side: &str,
) -> Result<(Vec<String>, HashMap<String, usize>), MergeError> {
    let mut texts = Vec::with_capacity(items.len());
    let mut positions = HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let key = item_key(keys, item, shown, i, side)?;
        let text = key_text(&key);
        if positions.insert(text.clone(), i).is_some() {
            return Err(MergeError {
                path: format!("{shown}[{i}]"),
                message: format!("{side}: duplicate list key {}", show_key(keys, &key)),
            });
        }
        texts.push(text);
    }
    Ok((texts, positions))
}

/// structured-merge-diff's order: items only in the object keep their
/// place, items in both are merged where the configuration puts them
/// relative to each other, and new items follow in the configuration's
/// order.
fn merge_map_list(
    schema: &Schema,
    path: &mut Vec<String>,
    shown: &mut String,
    keys: &[(&str, Option<&str>)],
    lhs: &[Value],
    rhs: &[Value],
) -> Result<Value, MergeError> {
    let (lkeys, lpos) = index_keys(keys, lhs, shown, "object")?;
    let (rkeys, rpos) = index_keys(keys, rhs, shown, "apply configuration")?;
    let in_rhs = |k: &String| rpos.get(k).copied();
    let in_lhs = |k: &String| lpos.get(k).copied();
    let mut shared: std::collections::VecDeque<usize> = (0..rkeys.len())
        .filter(|&r| in_lhs(&rkeys[r]).is_some())
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs = vec![false; rkeys.len()];
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let (mut li, mut ri) = (0, 0);
    let merge_item = |l: Option<&Value>,
                      r: usize,
                      path: &mut Vec<String>,
                      shown: &mut String|
     -> Result<Value, MergeError> {
        let mark = shown.len();
        let key = item_key(keys, &rhs[r], "", r, "apply configuration")?;
        shown.push_str(&format!("[{}]", show_key(keys, &key)));
        let result = match l {
            Some(l) => merge_value(schema, path, shown, l, &rhs[r]),
            None => fresh(schema, path, shown, &rhs[r]),
        };
        shown.truncate(mark);
        result
    };
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            if lkeys[li] == rkeys[ri] {
                out.push(merge_item(Some(&lhs[li]), ri, path, shown)?);
                merged_rhs[ri] = true;
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if in_rhs(&lkeys[li]).is_some() && next_shared.is_some_and(|s| rkeys[s] != lkeys[li]) {
                // Shared, but not the one the configuration wants next.
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            match in_rhs(&lkeys[li]) {
                None => {
                    out.push(lhs[li].clone());
                    li += 1;
                    continue;
                }
                Some(r) if merged_rhs[r] => {
                    li += 1;
                    continue;
                }
                Some(_) => {}
            }
        }
        if ri < rhs.len() {
            let existing = in_lhs(&rkeys[ri]).map(|l| &lhs[l]);
            out.push(merge_item(existing, ri, path, shown)?);
            merged_rhs[ri] = true;
            if next_shared == Some(ri) {
                next_shared = shared.pop_front();
            }
            ri += 1;
        }
    }
    Ok(Value::Array(out))
}

fn show_key(keys: &[(&str, Option<&str>)], key: &[Value]) -> String {
    keys.iter()
        .zip(key)
        .map(|((k, _), v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    fn merged(object: &Value, config: Value) -> Value {
        merge(&Schema::of(object), object, &config).unwrap()
    }

    fn refused(object: &Value, config: Value) -> MergeError {
        merge(&Schema::of(object), object, &config).unwrap_err()
    }

    fn names_of(list: &Value) -> Vec<&str> {
        let list = list.as_array().unwrap().iter();
        list.map(|c| c["name"].as_str().unwrap()).collect()
    }

    #[test]
    fn containers_merge_by_name_and_new_ones_follow() {
        let object = pod(json!({
            "initContainers": [{"name": "fetch-weights", "image": "registry.example.com/ml/fetch-weights:1.4"}],
            "containers": [{"name": "app", "image": "app:1", "args": ["a", "b"]}],
        }));
        let out = merged(
            &object,
            json!({"spec": {
                "initContainers": [{"name": "gpu-check", "image": "registry.example.com/gpu-admission/gpu-check:0.4.2", "restartPolicy": "Always"}],
                "containers": [{"name": "app", "args": ["c"]}],
            }}),
        );
        let names = names_of(&out["spec"]["initContainers"]);
        assert_eq!(names, ["fetch-weights", "gpu-check"]);
        // args is atomic: replaced, and the container keeps its image.
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "app", "image": "app:1", "args": ["c"]}])
        );
    }

    #[test]
    fn env_ports_and_mounts_merge_by_their_keys() {
        let object = pod(json!({"containers": [{
            "name": "app",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }]}));
        let out = merged(
            &object,
            json!({"spec": {"containers": [{
                "name": "app",
                "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 53, "protocol": "TCP"}],
                "volumeMounts": [{"name": "cache", "mountPath": "/data"}],
            }]}}),
        );
        let c = &out["spec"]["containers"][0];
        assert_eq!(
            c["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        // protocol defaults to TCP: port 80 is the same item; 53/TCP is new.
        assert_eq!(
            c["ports"],
            json!([
                {"containerPort": 80, "protocol": "TCP", "name": "http"},
                {"containerPort": 53, "protocol": "UDP"},
                {"containerPort": 53, "protocol": "TCP"}
            ])
        );
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "cache", "mountPath": "/data"}])
        );
    }

    #[test]
    fn atomic_lists_are_replaced_and_maps_merged() {
        let object = pod(json!({
            "tolerations": [{"key": "a", "operator": "Exists"}],
            "nodeSelector": {"pool": "gpu"},
            "containers": [{"name": "app"}],
        }));
        let out = merged(
            &object,
            json!({"metadata": {"labels": {"team": "ml"}}, "spec": {
                "tolerations": [{"key": "b", "operator": "Exists"}],
                "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
            }}),
        );
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "b", "operator": "Exists"}])
        );
        assert_eq!(out["spec"]["nodeSelector"], json!({"pool": "gpu"}));
        assert_eq!(out["spec"]["dnsConfig"]["options"][0]["value"], "2");
        assert_eq!(
            out["metadata"],
            json!({"name": "p", "labels": {"team": "ml"}})
        );
    }

    #[test]
    fn pod_templates_of_controllers_use_the_pod_spec_table() {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "app", "image": "x"}]}}},
        });
        let out = merged(
            &deployment,
            json!({"spec": {"template": {"metadata": {"finalizers": ["b", "a"]}, "spec": {"containers": [{"name": "side", "image": "y"}]}}}}),
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            out["spec"]["template"]["metadata"]["finalizers"],
            json!(["a", "b"])
        );
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob"});
        let schema = Schema::of(&cron);
        let path = "spec.jobTemplate.spec.template.spec.containers.env";
        assert_eq!(schema.list_type(&path.split('.').collect::<Vec<_>>()), NAME);
        assert_eq!(
            schema.list_type(&["spec", "template", "spec", "containers"]),
            ListType::Atomic
        );
        let template = json!({"apiVersion": "v1", "kind": "PodTemplate"});
        let schema = Schema::of(&template);
        assert_eq!(schema.list_type(&["template", "spec", "containers"]), NAME);
        assert!(schema.is_atomic_object(&["template", "spec", "nodeSelector"]));
        assert!(!schema.is_atomic_object(&["spec", "nodeSelector"]));
    }

    #[test]
    fn unknown_kinds_replace_their_lists() {
        let object = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"items": [{"name": "a"}]}});
        assert!(!Schema::of(&object).is_known());
        let out = merged(&object, json!({"spec": {"items": [{"name": "b"}]}}));
        assert_eq!(out["spec"]["items"], json!([{"name": "b"}]));
    }

    #[test]
    fn items_without_their_key_and_nulls_are_errors() {
        let object = pod(json!({"containers": [{"name": "app"}]}));
        let err = refused(&object, json!({"spec": {"containers": [{"image": "x"}]}}));
        assert_eq!(err.path, "spec.containers[0]");
        assert!(err.message.contains("list key name is required"), "{err}");
        let err = refused(
            &object,
            json!({"spec": {"containers": [{"name": "app", "image": null}]}}),
        );
        assert_eq!(err.path, "spec.containers[name=app].image");
        let err = refused(
            &object,
            json!({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}),
        );
        assert!(err.message.contains("duplicate list key name=a"), "{err}");
    }

    /// k8s-openapi's `DeepMerge` is generated from the same OpenAPI schema
    /// (it keys a list by its first key only, which these items do not
    /// tell apart): both merges agree on which lists merge and how.
    #[test]
    fn agrees_with_the_merge_strategies_k8s_openapi_generates() {
        use k8s_openapi::api::core::v1::Pod;
        use k8s_openapi::DeepMerge as _;
        let object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {
                "nodeSelector": {"pool": "gpu"},
                "tolerations": [{"key": "a", "operator": "Exists"}],
                "imagePullSecrets": [{"name": "reg"}],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "initContainers": [{"name": "init", "image": "i:1"}],
                "containers": [{
                    "name": "app", "image": "app:1", "args": ["a", "b"],
                    "env": [{"name": "A", "value": "1"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                }],
            },
        });
        let config = json!({
            "metadata": {"labels": {"b": "2"}, "finalizers": ["y", "x"]},
            "spec": {
                "tolerations": [{"key": "b", "operator": "Exists"}],
                "volumes": [{"name": "cache", "emptyDir": {}}],
                "initContainers": [{"name": "mesh", "image": "m:1", "restartPolicy": "Always"}],
                "containers": [
                    {
                        "name": "app", "args": ["c"],
                        "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                        "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 9090, "protocol": "TCP"}],
                    },
                    {"name": "side", "image": "s:1"},
                ],
            },
        });
        let ours: Pod = serde_json::from_value(merged(&object, config.clone())).unwrap();
        let mut theirs: Pod = serde_json::from_value(object).unwrap();
        theirs.merge_from(serde_json::from_value(config).unwrap());
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            serde_json::to_value(&theirs).unwrap()
        );
    }

    #[test]
    fn atomic_maps_and_structs_may_not_be_set() {
        let object = pod(json!({"containers": [{"name": "app"}]}));
        let schema = Schema::of(&object);
        for (config, path) in [
            (
                json!({"spec": {"nodeSelector": {"pool": "gpu"}}}),
                "spec.nodeSelector",
            ),
            (
                json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}}),
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            ),
            (
                json!({"spec": {"containers": [{"name": "app", "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}),
                "spec.containers[0].env[0].valueFrom.fieldRef",
            ),
            (
                json!({"spec": {"imagePullSecrets": [{"name": "reg"}]}}),
                "spec.imagePullSecrets[0]",
            ),
        ] {
            let err = merge(&schema, &object, &config).unwrap_err();
            assert_eq!(err.path, path, "{config}");
            assert!(err.message.starts_with("may not mutate atomic"), "{err}");
        }
        // Atomic lists are fine, as the gpu-check example's args.
        let args = json!({"spec": {"containers": [{"name": "app", "args": ["serve"], "command": ["python"]}]}});
        assert!(merge(&schema, &object, &args).is_ok());
    }

    #[test]
    fn long_keyed_lists_merge_by_key() {
        // A request may carry a container with tens of thousands of env
        // entries (that key lookups stay linear is measured by `cargo
        // bench --bench engine`, "apply configuration").
        let env: Vec<Value> = (0..50_000)
            .map(|i| json!({"name": format!("V{i}"), "value": "x"}))
            .collect();
        let object = pod(json!({"containers": [{"name": "app", "env": env}]}));
        let out = merged(
            &object,
            json!({"spec": {"containers": [{"name": "app", "env": [{"name": "V49999", "value": "y"}, {"name": "NEW", "value": "z"}]}]}}),
        );
        check(&Schema::of(&out), &out).unwrap();
        let env = out["spec"]["containers"][0]["env"].as_array().unwrap();
        assert_eq!(env.len(), 50_001);
        assert_eq!(env[49_999], json!({"name": "V49999", "value": "y"}));
        assert_eq!(env[50_000], json!({"name": "NEW", "value": "z"}));
    }

    #[test]
    fn shared_items_follow_the_configuration_order() {
        let object = pod(json!({"containers": [{"name": "a"}, {"name": "x"}, {"name": "b"}]}));
        let out = merged(
            &object,
            json!({"spec": {"containers": [{"name": "b"}, {"name": "a"}]}}),
        );
        let names = names_of(&out["spec"]["containers"]);
        // As structured-merge-diff: x keeps its place, b before a.
        assert_eq!(names, ["x", "b", "a"]);
    }
}
