//! Where the pods of workload kinds are described. The built-in
//! controllers keep one pod template each ([`super::workloads`]); custom
//! resources such as KubeRay's RayCluster or Kubeflow's PyTorchJob hold
//! several, at places a `PodTemplateSource` document names:
//!
//! ```yaml
//! apiVersion: gpu-admission.io/v1alpha1
//! kind: PodTemplateSource
//! metadata: {name: kuberay}
//! spec:
//!   group: ray.io
//!   kinds:
//!     - kind: RayCluster
//!       resource: rayclusters
//!       templates:
//!         - path: spec.headGroupSpec.template
//!         - path: spec.workerGroupSpecs[*].template
//!           key: groupName
//!           replicas: ["spec.workerGroupSpecs[*].replicas"]
//!           maxReplicas: ["spec.workerGroupSpecs[*].maxReplicas"]
//! ```
//!
//! A path is a dotted list of fields; `[*]` takes every element of a list
//! and `*` every value of a map. A template is a pod template
//! (`metadata` + `spec`, the default) or, with `shape: PodSpec`, an inline
//! pod spec such as KServe's `predictor`, whose containers may also come
//! from other fields (`containers`: Argo's `container` and `script`, KServe's
//! `model`, a Kubeflow TrainJob's `trainer` with its `resourcesPerNode`,
//! a SparkApplication's `executor` with its `gpu: {name, quantity}` as
//! `resourcePairs`), pod-spec fields it inherits from elsewhere in the
//! object (`podDefaults`: an Argo Workflow's own `nodeSelector`,
//! `tolerations`...) or keeps under other names (`podFields`), and a YAML
//! patch it carries (`podSpecPatch`). Any template takes the pod-spec
//! patches the object keeps elsewhere (`patches`: Argo's workflow-level
//! `podSpecPatch`, a TrainJob's `podSpecOverrides` or `runtimePatches`,
//! each `when` it targets the template), merged as a strategic merge
//! patch before the template's own.
//! (A path in a YAML flow list is quoted: `[*]` would read as an alias.)
//! The pods a template makes are the product of its `replicas` paths (each
//! absent one counts 1; `path - N` subtracts N), and at most the product
//! of its `maxReplicas` paths where the kind autoscales. The wildcards of
//! a replicas path stand for the same elements as those of the template's
//! path. See docs/workload-kinds.md.
use super::apply::{ListType, Schema};
use super::doc::{self, Object};
use super::json::{int_of, items, FieldError, Pointer};
use super::workloads;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The apiVersion of `PodTemplateSource` documents.
pub const API_VERSION: &str = "gpu-admission.io/v1alpha1";
/// The kind of the document that names where a custom resource's pod
/// templates are.
pub const KIND: &str = "PodTemplateSource";

/// A custom resource kind and where its pod templates are.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateSource {
    /// The `PodTemplateSource` document that names it.
    pub document: String,
    pub group: String,
    pub kind: String,
    /// The plural resource name (what webhook rules and policies name).
    pub resource: String,
    pub templates: Vec<TemplatePath>,
    /// States in which the object holds no GPUs (its work finished,
    /// failed or is suspended), read from its status or spec.
    pub holds_nothing_when: Vec<Condition>,
}

/// A value at `path` is one of `values` (`true` and `false` match
/// booleans): a state in which an object holds no GPUs, or the target of
/// a patch.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// The path as written.
    pub path: String,
    segments: Vec<Segment>,
    pub values: Vec<String>,
}

impl Condition {
    /// Whether it holds in `object`, the first wildcards of its path
    /// standing for the elements `bound` gives.
    fn holds(&self, object: &Value, bound: &[Bound]) -> bool {
        reach(object, &self.segments, bound).iter().any(|value| {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                _ => return false,
            };
            self.values.contains(&text)
        })
    }
}

impl TemplateSource {
    /// Whether `object` is in a state its document says holds no GPUs.
    pub fn holds_nothing(&self, object: &Value) -> bool {
        self.holds_nothing_when.iter().any(|w| w.holds(object, &[]))
    }
}

/// Where one kind of template of a [`TemplateSource`] is.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplatePath {
    /// The path as written.
    pub path: String,
    segments: Vec<Segment>,
    shape: Shape,
    /// The field that names a list element in messages (else its index).
    key: String,
    containers: Vec<ContainerSource>,
    /// For an inline pod spec: where the object keeps pod-spec fields
    /// every template takes unless it sets its own (an Argo Workflow's
    /// `spec.nodeSelector`, `spec.tolerations`...).
    pod_defaults: Option<Vec<Segment>>,
    /// For an inline pod spec: pod-spec fields it keeps under another
    /// name (`securityContext` ← Spark's `podSecurityContext`).
    pod_fields: Vec<(String, String)>,
    /// Pod-spec patches the object keeps outside the template, merged in
    /// order as Kubernetes merges a strategic patch.
    patches: Vec<PatchSource>,
    /// For an inline pod spec: the patch it carries (Argo's
    /// `podSpecPatch`), merged after `patches`.
    own_patch: Option<PatchSource>,
    replicas: Vec<Factor>,
    max_replicas: Option<Vec<Factor>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Field(String),
    /// `[*]`: every element of a list.
    Items,
    /// `*`: every value of a map.
    Values,
}

/// Where a pod-spec patch is: a pod spec or a pod template (`metadata` +
/// `spec`), or a string holding one in YAML or JSON.
#[derive(Clone, Debug, PartialEq)]
struct PatchSource {
    /// The path as written (messages name it).
    path: String,
    segments: Vec<Segment>,
    shape: Shape,
    /// Only a patch for which this holds, its wildcards standing first
    /// for the elements the patch's own stood for.
    when: Option<Condition>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
enum Shape {
    PodTemplateSpec,
    PodSpec,
}

/// Containers an inline pod spec keeps in fields of its own.
#[derive(Clone, Debug, PartialEq)]
struct ContainerSource {
    /// Relative to the template; empty for the template itself.
    segments: Vec<Segment>,
    /// The container's name when it has none.
    name: Option<String>,
    /// Where its resources are, when not at `resources`.
    resources: String,
    /// Resources it asks in fields of its own (Spark's `gpu.name` and
    /// `gpu.quantity`, `cores`).
    resource_pairs: Vec<ResourcePair>,
}

/// A resource a container asks outside `resources`: requested, and for an
/// extended resource (a name with a domain) limited too, as Kubernetes
/// requires.
#[derive(Clone, Debug, PartialEq)]
struct ResourcePair {
    /// The resource's name, or where the container names it.
    name: Result<String, Vec<Segment>>,
    quantity: Vec<Segment>,
    /// The quantity is a JVM memory size (`512m`, `4g`; MiB without a unit).
    jvm: bool,
}

/// One factor of a replica count: the integer at `segments`, minus `minus`.
#[derive(Clone, Debug, PartialEq)]
struct Factor {
    segments: Vec<Segment>,
    minus: i64,
}

/// One template found in an object.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundTemplate {
    /// Where it is, as messages name it (`workerGroupSpecs[gpu-workers]`);
    /// empty for the built-in controllers, which have one.
    pub label: String,
    /// A pod template: `metadata` (labels, annotations) and `spec`.
    pub template: Value,
    /// The JSON pointer of the template in the object, when it is a pod
    /// template there (`/spec/workerGroupSpecs/0/template`); `None` for
    /// an inline pod spec, which the object does not keep as one.
    pub pointer: Option<String>,
    /// Pods it makes.
    pub replicas: i64,
    /// Pods it may make when the kind scales it up.
    pub max_replicas: i64,
    /// Why a patch of it could not be read (`spec.podSpecPatch is neither
    /// YAML nor JSON ...`): its pods cannot be judged, nor made.
    pub unreadable: Option<String>,
}

/// The workload kinds whose pod templates are judged: the built-in
/// controllers, and the custom resources of the loaded
/// `PodTemplateSource` documents.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TemplateSources {
    sources: Vec<TemplateSource>,
}

impl TemplateSources {
    /// The built-in controllers and `sources`.
    pub fn new(sources: Vec<TemplateSource>) -> TemplateSources {
        TemplateSources { sources }
    }

    /// The custom resource kinds, in the order they were read.
    pub fn custom(&self) -> &[TemplateSource] {
        &self.sources
    }

    /// The source of `object`'s kind, when a document names it.
    pub fn source_of(&self, object: &Value) -> Option<&TemplateSource> {
        let (group, kind) = workloads::group_kind(object)?;
        self.sources
            .iter()
            .find(|s| s.kind == kind && s.group == group)
    }

    /// Whether `object` is a workload whose pods are judged: a built-in
    /// controller with a pod template, or a kind a document names.
    pub fn is_workload(&self, object: &Value) -> bool {
        workloads::pod_template(object).is_some() || self.source_of(object).is_some()
    }

    /// The pod templates of `object`, in document order: one for a
    /// built-in controller, any number for a custom resource (none when
    /// its paths find nothing). `None` when `object` is not a workload.
    pub fn templates(&self, object: &Value) -> Option<Vec<FoundTemplate>> {
        if let Some(template) = workloads::pod_template(object) {
            let replicas = workloads::replicas(object);
            let pointer = workloads::template_kind_of(object).map(|k| k.template.to_string());
            return Some(vec![FoundTemplate {
                label: String::new(),
                template: template.clone(),
                pointer,
                replicas,
                max_replicas: replicas,
                unreadable: None,
            }]);
        }
        let source = self.source_of(object)?;
        let mut found = Vec::new();
        for path in &source.templates {
            path.find(object, &mut found);
        }
        Some(found)
    }
}

/// Where a wildcard of a path stood in one object.
#[derive(Clone, Debug)]
enum Bound {
    Index(usize),
    Key(String),
}

impl TemplatePath {
    /// Appends the templates this path finds in `object`.
    fn find(&self, object: &Value, out: &mut Vec<FoundTemplate>) {
        let mut matches = Vec::new();
        walk(object, &self.segments, &mut Vec::new(), &mut matches);
        for (value, bound) in matches {
            let mut problems = Vec::new();
            let Some(template) = self.pod_template(object, value, &mut problems) else {
                continue;
            };
            let replicas = product(object, &self.replicas, &bound);
            let max_replicas = match &self.max_replicas {
                Some(factors) => product(object, factors, &bound).max(replicas),
                None => replicas,
            };
            let pointer = (self.shape == Shape::PodTemplateSpec).then(|| self.pointer(&bound));
            out.push(FoundTemplate {
                label: self.label(object, &bound),
                template,
                pointer,
                replicas,
                max_replicas,
                unreadable: (!problems.is_empty()).then(|| problems.join("; ")),
            });
        }
    }

    /// The JSON pointer of the value this path reached with `bound`.
    fn pointer(&self, bound: &[Bound]) -> String {
        let mut pointer = String::new();
        let mut bound = bound.iter();
        let escape = |s: &str| s.replace('~', "~0").replace('/', "~1");
        for segment in &self.segments {
            pointer.push('/');
            match segment {
                Segment::Field(f) => pointer.push_str(&escape(f)),
                Segment::Items | Segment::Values => match bound.next() {
                    Some(Bound::Index(i)) => pointer.push_str(&i.to_string()),
                    Some(Bound::Key(k)) => pointer.push_str(&escape(k)),
                    None => {}
                },
            }
        }
        pointer
    }

    /// The pod template at `value`, when it is one (an inline pod spec
    /// with no container is none: an Argo steps template, say).
    fn pod_template(
        &self,
        object: &Value,
        value: &Value,
        problems: &mut Vec<String>,
    ) -> Option<Value> {
        let fields = value.as_object()?;
        let mut template = match self.shape {
            Shape::PodTemplateSpec => value.clone(),
            Shape::PodSpec => {
                let mut spec: Map<String, Value> = POD_SPEC_FIELDS
                    .iter()
                    .filter_map(|&key| {
                        let renamed = self.pod_fields.iter().find(|(to, _)| to == key);
                        let from = renamed.map_or(key, |(_, from)| from.as_str());
                        Some((key.to_string(), fields.get(from)?.clone()))
                    })
                    .collect();
                let mut extra = Vec::new();
                for source in &self.containers {
                    let found = reach(value, &source.segments, &[]);
                    extra.extend(found.into_iter().filter_map(|c| source.container(c)));
                }
                if !extra.is_empty() {
                    let containers = spec.entry("containers").or_insert_with(|| json!([]));
                    if let Some(list) = containers.as_array_mut() {
                        list.extend(extra);
                    }
                }
                let defaults = self
                    .pod_defaults
                    .as_ref()
                    .and_then(|path| reach(object, path, &[]).first().and_then(|v| v.as_object()));
                for (key, value) in defaults.into_iter().flatten() {
                    let container_list = key.ends_with("ontainers");
                    if POD_SPEC_FIELDS.contains(&key.as_str()) && !container_list {
                        spec.entry(key.clone()).or_insert_with(|| value.clone());
                    }
                }
                let metadata = match fields.get("metadata") {
                    Some(m) if m.is_object() => m.clone(),
                    _ => {
                        let mut m = Map::new();
                        for key in ["labels", "annotations"] {
                            if let Some(v) = fields.get(key).filter(|v| v.is_object()) {
                                m.insert(key.into(), v.clone());
                            }
                        }
                        Value::Object(m)
                    }
                };
                // A map, not `json!`, which would serialize (copy) both.
                let mut template = Map::new();
                template.insert("metadata".into(), metadata);
                template.insert("spec".into(), Value::Object(spec));
                Value::Object(template)
            }
        };
        // An inline pod spec with no container of its own is no pod (an
        // Argo steps template), whatever the patches name.
        let has_containers = items(template.at("/spec/containers")).next().is_some();
        if self.shape == Shape::PodSpec && !has_containers {
            return None;
        }
        for patch in &self.patches {
            patch.apply(object, &mut template, problems);
        }
        if let Some(patch) = &self.own_patch {
            patch.apply(value, &mut template, problems);
        }
        Some(template)
    }

    /// `workerGroupSpecs[gpu-workers]`: the path up to its last wildcard
    /// (or all of it, without a trailing `template`), without the leading
    /// `spec`, each wildcard shown as the element it stood for.
    fn label(&self, object: &Value, bound: &[Bound]) -> String {
        let last_wildcard = self
            .segments
            .iter()
            .rposition(|s| !matches!(s, Segment::Field(_)));
        let mut end = last_wildcard.map_or(self.segments.len(), |i| i + 1);
        let skip_spec = matches!(self.segments.first(), Some(Segment::Field(f)) if f == "spec");
        let first_shown = usize::from(skip_spec && end > 1);
        if last_wildcard.is_none()
            && end - first_shown > 1
            && matches!(&self.segments[end - 1], Segment::Field(f) if f == "template")
        {
            end -= 1;
        }
        let mut label = String::new();
        let mut value = Some(object);
        let mut bound = bound.iter();
        for (i, segment) in self.segments[..end].iter().enumerate() {
            let shown = i >= first_shown;
            match segment {
                Segment::Field(f) => {
                    if shown {
                        if !label.is_empty() {
                            label.push('.');
                        }
                        label.push_str(f);
                    }
                    value = value.and_then(|v| v.get(f));
                }
                Segment::Items => {
                    let index = match bound.next() {
                        Some(Bound::Index(i)) => *i,
                        _ => 0,
                    };
                    let element = value.and_then(|v| v.get(index));
                    let name = element
                        .and_then(|e| e.get(&self.key))
                        .and_then(Value::as_str)
                        .map_or_else(|| index.to_string(), str::to_string);
                    label.push('[');
                    label.push_str(&name);
                    label.push(']');
                    value = element;
                }
                Segment::Values => {
                    let key = match bound.next() {
                        Some(Bound::Key(k)) => k.clone(),
                        _ => String::new(),
                    };
                    if !label.is_empty() {
                        label.push('.');
                    }
                    label.push_str(&key);
                    value = value.and_then(|v| v.get(&key));
                }
            }
        }
        label
    }
}

impl ContainerSource {
    /// The container at `value`, named and with its resources at
    /// `resources`, and its resource pairs among them.
    fn container(&self, value: &Value) -> Option<Value> {
        let mut container = value.as_object()?.clone();
        if let Some(name) = &self.name {
            let unnamed = container
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if unnamed {
                container.insert("name".into(), json!(name));
            }
        }
        if self.resources != "resources" {
            match container.remove(&self.resources) {
                Some(resources) => container.insert("resources".into(), resources),
                None => container.remove("resources"),
            };
        }
        for pair in &self.resource_pairs {
            let first = |path| reach(value, path, &[]).first().copied().cloned();
            let name = match &pair.name {
                Ok(name) => Some(name.clone()),
                Err(path) => first(path).and_then(|n| n.as_str().map(str::to_string)),
            };
            let quantity = match first(&pair.quantity) {
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::String(s)) => s,
                _ => continue,
            };
            let quantity = if pair.jvm {
                jvm_size(&quantity)
            } else {
                Some(quantity)
            };
            let (Some(name), Some(quantity)) = (name.filter(|n| !n.is_empty()), quantity) else {
                continue;
            };
            let sides: &[&str] = if name.contains('/') {
                &["limits", "requests"]
            } else {
                &["requests"]
            };
            let resources = container.entry("resources").or_insert_with(|| json!({}));
            for side in sides {
                let Some(r) = resources.as_object_mut() else {
                    break;
                };
                let side = r.entry(*side).or_insert_with(|| json!({}));
                if let Some(side) = side.as_object_mut() {
                    side.insert(name.clone(), json!(quantity));
                }
            }
        }
        Some(Value::Object(container))
    }
}

impl PatchSource {
    /// Merges into `template` each patch this source finds in `root` (the
    /// object, or the template's own fields) that targets it, in order; a
    /// patch that cannot be read is left out and said in `problems`.
    fn apply(&self, root: &Value, template: &mut Value, problems: &mut Vec<String>) {
        let mut found = Vec::new();
        walk(root, &self.segments, &mut Vec::new(), &mut found);
        let schema = Schema::of(&json!({"apiVersion": "v1", "kind": "Pod"}));
        for (patch, bound) in found {
            if self.when.as_ref().is_some_and(|w| !w.holds(root, &bound)) {
                continue;
            }
            let patch = match patch {
                Value::String(text) => match read_patch(text) {
                    Ok(Some(patch)) => patch,
                    Ok(None) => continue,
                    Err(e) => {
                        problems.push(format!("{} {e}", self.path));
                        continue;
                    }
                },
                Value::Object(_) => patch.clone(),
                _ => continue,
            };
            let (metadata, spec) = match self.shape {
                Shape::PodTemplateSpec => (patch.get("metadata"), patch.get("spec")),
                Shape::PodSpec => (None, Some(&patch)),
            };
            if let Some(Value::Object(metadata)) = metadata {
                merge_patch(
                    &schema,
                    &mut vec!["metadata"],
                    &mut template["metadata"],
                    metadata,
                );
            }
            if let Some(Value::Object(spec)) = spec {
                let fields = spec
                    .iter()
                    .filter(|(k, _)| POD_SPEC_FIELDS.contains(&k.as_str()));
                let spec = fields.map(|(k, v)| (k.clone(), v.clone())).collect();
                merge_patch(&schema, &mut vec!["spec"], &mut template["spec"], &spec);
            }
        }
    }
}

/// A JVM memory size (`512m`, `4g`, `1024`: MiB without a unit) as a
/// Kubernetes quantity.
fn jvm_size(text: &str) -> Option<String> {
    let text = text.trim().to_ascii_lowercase();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let unit = match unit {
        "" | "m" | "mb" => "Mi",
        "b" => "",
        "k" | "kb" => "Ki",
        "g" | "gb" => "Gi",
        "t" | "tb" => "Ti",
        "p" | "pb" => "Pi",
        _ => return None,
    };
    (!number.is_empty()).then(|| format!("{number}{unit}"))
}

/// A pod-spec patch written as YAML or JSON; `None` when there is none to
/// merge (empty, or one whole `{{...}}` expression only filled in when the
/// pod is made, as Argo fills them). `{{...}}` expressions elsewhere read
/// as plain values.
fn read_patch(text: &str) -> Result<Option<Value>, String> {
    let expressions = text.contains("{{");
    let parsed = match serde_yaml::from_str::<Value>(text) {
        Err(_) if expressions => {
            let mut plain = String::new();
            let mut rest = text;
            while let Some((before, after)) = rest.split_once("{{") {
                let Some((_, after)) = after.split_once("}}") else {
                    break;
                };
                plain.push_str(before);
                plain.push_str("parameter");
                rest = after;
            }
            plain.push_str(rest);
            serde_yaml::from_str::<Value>(&plain)
        }
        parsed => parsed,
    };
    match parsed {
        Ok(patch @ Value::Object(_)) => Ok(Some(patch)),
        Ok(Value::Null) => Ok(None),
        Ok(_) if expressions => Ok(None),
        Ok(_) => Err("is not a pod spec: a map of pod-spec fields, in YAML or JSON".into()),
        Err(e) => Err(format!("is neither YAML nor JSON ({e})")),
    }
}

/// Merges `patch` into `target` (at `path` from a pod) as a strategic
/// merge patch does: maps key by key (`null` removes a key), the lists the
/// pod schema keys ([`Schema::list_type`]: containers by name, env by
/// name...) item by item, anything else replaced.
fn merge_patch<'p>(
    schema: &Schema,
    path: &mut Vec<&'p str>,
    target: &mut Value,
    patch: &'p Map<String, Value>,
) {
    if !target.is_object() {
        *target = json!({});
    }
    let Some(target) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
            continue;
        }
        let Some(existing) = target.get_mut(key) else {
            target.insert(key.clone(), value.clone());
            continue;
        };
        path.push(key);
        match (existing, value) {
            (existing @ Value::Object(_), Value::Object(p)) => {
                merge_patch(schema, path, existing, p)
            }
            (Value::Array(list), Value::Array(items)) => match schema.list_type(path) {
                ListType::Map(keys) => {
                    let key_of = |item: &Value| -> Vec<Option<Value>> {
                        let field = |(k, d): &(&str, Option<&str>)| {
                            item.get(*k).cloned().or_else(|| d.map(|d| json!(d)))
                        };
                        keys.iter().map(field).collect()
                    };
                    for item in items {
                        let id = key_of(item);
                        let known = id.iter().any(Option::is_some);
                        let at = list.iter().position(|e| known && key_of(e) == id);
                        match (at, item) {
                            (Some(i), Value::Object(p)) => {
                                merge_patch(schema, path, &mut list[i], p)
                            }
                            _ => list.push(item.clone()),
                        }
                    }
                }
                _ => *list = items.clone(),
            },
            (existing, value) => *existing = value.clone(),
        }
        path.pop();
    }
}

/// Every value `segments` reach from `value`, each wildcard standing for
/// the element `bound` gives while it gives one, and for every element
/// after.
fn reach<'v>(value: &'v Value, segments: &[Segment], bound: &[Bound]) -> Vec<&'v Value> {
    let Some((first, rest)) = segments.split_first() else {
        return if value.is_null() {
            Vec::new()
        } else {
            vec![value]
        };
    };
    let next = match (first, bound.split_first()) {
        (Segment::Field(f), _) => {
            return value
                .get(f)
                .map_or_else(Vec::new, |v| reach(v, rest, bound))
        }
        (Segment::Items, Some((Bound::Index(i), more))) => value.get(*i).map(|v| (v, more)),
        (Segment::Values, Some((Bound::Key(k), more))) => value.get(k).map(|v| (v, more)),
        (_, Some(_)) => None,
        (Segment::Items, None) => {
            let items = value.as_array().into_iter().flatten();
            return items.flat_map(|v| reach(v, rest, &[])).collect();
        }
        (Segment::Values, None) => {
            let values = value.as_object().into_iter().flat_map(Map::values);
            return values.flat_map(|v| reach(v, rest, &[])).collect();
        }
    };
    next.map_or_else(Vec::new, |(v, more)| reach(v, rest, more))
}

/// Every value `segments` reach from `value`, with where each wildcard
/// stood.
fn walk<'v>(
    value: &'v Value,
    segments: &[Segment],
    bound: &mut Vec<Bound>,
    out: &mut Vec<(&'v Value, Vec<Bound>)>,
) {
    let Some((first, rest)) = segments.split_first() else {
        if !value.is_null() {
            out.push((value, bound.clone()));
        }
        return;
    };
    match first {
        Segment::Field(f) => {
            if let Some(v) = value.get(f) {
                walk(v, rest, bound, out);
            }
        }
        Segment::Items => {
            for (i, v) in value.as_array().into_iter().flatten().enumerate() {
                bound.push(Bound::Index(i));
                walk(v, rest, bound, out);
                bound.pop();
            }
        }
        Segment::Values => {
            for (k, v) in value.as_object().into_iter().flatten() {
                bound.push(Bound::Key(k.clone()));
                walk(v, rest, bound, out);
                bound.pop();
            }
        }
    }
}

/// The product of `factors` in `object`, each wildcard standing for the
/// element `bound` gives; an absent or unreadable factor counts 1, and no
/// factor below 0 counts.
fn product(object: &Value, factors: &[Factor], bound: &[Bound]) -> i64 {
    factors
        .iter()
        .map(|f| {
            let value = reach(object, &f.segments, bound).first().copied();
            value.and_then(int_of).map_or(1, |n| (n - f.minus).max(0))
        })
        .fold(1i64, |acc, n| acc.saturating_mul(n))
}

/// The fields of a core/v1 PodSpec, which an inline pod spec keeps beside
/// fields of its own kind.
const POD_SPEC_FIELDS: &[&str] = &[
    "activeDeadlineSeconds",
    "affinity",
    "automountServiceAccountToken",
    "containers",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "ephemeralContainers",
    "hostAliases",
    "hostIPC",
    "hostNetwork",
    "hostPID",
    "hostUsers",
    "hostname",
    "imagePullSecrets",
    "initContainers",
    "nodeName",
    "nodeSelector",
    "os",
    "overhead",
    "preemptionPolicy",
    "priority",
    "priorityClassName",
    "readinessGates",
    "resourceClaims",
    "resources",
    "restartPolicy",
    "runtimeClassName",
    "schedulerName",
    "schedulingGates",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "subdomain",
    "terminationGracePeriodSeconds",
    "tolerations",
    "topologySpreadConstraints",
    "volumes",
];

// ---- reading documents ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceSpec {
    group: String,
    kinds: Vec<KindSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
struct KindSpec {
    kind: String,
    resource: String,
    templates: Vec<TemplateSpec>,
    #[serde(default)]
    holds_nothing_when: Vec<ConditionSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionSpec {
    path: String,
    values: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchSpec {
    path: String,
    #[serde(default)]
    shape: Option<Shape>,
    #[serde(default)]
    when: Option<ConditionSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PairSpec {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    resource: Option<String>,
    quantity: String,
    #[serde(default)]
    units: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TemplateSpec {
    path: String,
    #[serde(default)]
    shape: Option<Shape>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    containers: Vec<ContainerSpec>,
    #[serde(default)]
    pod_defaults: Option<String>,
    #[serde(default)]
    pod_fields: BTreeMap<String, String>,
    #[serde(default)]
    pod_spec_patch: Option<String>,
    #[serde(default)]
    patches: Vec<PatchSpec>,
    #[serde(default)]
    replicas: Vec<String>,
    #[serde(default)]
    max_replicas: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ContainerSpec {
    path: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    resources: Option<String>,
    #[serde(default)]
    resource_pairs: Vec<PairSpec>,
}

/// Reads one `PodTemplateSource` document: its kinds, or every mistake,
/// each naming its field (`spec.kinds[0].templates[1].path`).
pub fn read(value: &Value) -> Result<Vec<TemplateSource>, Vec<FieldError>> {
    let object: Object<SourceSpec> = doc::from_value(value).map_err(|e| vec![e])?;
    let name = object.metadata.name;
    let mut errors = Vec::new();
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", "required"));
    }
    let Some(spec) = object.spec else {
        errors.push(FieldError::new("spec", "required"));
        return Err(errors);
    };
    if spec.group.is_empty() {
        errors.push(FieldError::new(
            "spec.group",
            "required: the API group of the kinds (e.g. ray.io)",
        ));
    }
    if spec.kinds.is_empty() {
        errors.push(FieldError::new("spec.kinds", "must name at least one kind"));
    }
    let mut sources = Vec::new();
    let mut seen = BTreeSet::new();
    for (k, kind) in spec.kinds.into_iter().enumerate() {
        let at = format!("spec.kinds[{k}]");
        if kind.kind.is_empty() {
            errors.push(FieldError::new(format!("{at}.kind"), "required"));
        } else if !seen.insert(kind.kind.clone()) {
            errors.push(FieldError::new(
                format!("{at}.kind"),
                format!("{} is named twice in this document", kind.kind),
            ));
        } else if workloads::template_kind(&spec.group, &kind.kind).is_some() {
            errors.push(FieldError::new(
                format!("{at}.kind"),
                format!(
                    "{}/{} is a built-in controller whose pod template is always judged",
                    spec.group, kind.kind
                ),
            ));
        }
        let resource_ok = !kind.resource.is_empty()
            && kind
                .resource
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !resource_ok {
            errors.push(FieldError::new(
                format!("{at}.resource"),
                "required: the plural resource name in lower case (e.g. rayclusters)",
            ));
        }
        if kind.templates.is_empty() {
            errors.push(FieldError::new(
                format!("{at}.templates"),
                "must name at least one template",
            ));
        }
        let mut templates = Vec::new();
        for (t, template) in kind.templates.into_iter().enumerate() {
            let at = format!("{at}.templates[{t}]");
            match read_template(template, &at) {
                Ok(path) => templates.push(path),
                Err(mut e) => errors.append(&mut e),
            }
        }
        let mut holds_nothing_when = Vec::new();
        for (w, when) in kind.holds_nothing_when.into_iter().enumerate() {
            let at = format!("{at}.holdsNothingWhen[{w}]");
            holds_nothing_when.extend(read_condition(when, &at, &mut errors));
        }
        sources.push(TemplateSource {
            document: name.clone(),
            group: spec.group.clone(),
            kind: kind.kind,
            resource: kind.resource,
            templates,
            holds_nothing_when,
        });
    }
    if errors.is_empty() {
        Ok(sources)
    } else {
        Err(errors)
    }
}

fn read_template(spec: TemplateSpec, at: &str) -> Result<TemplatePath, Vec<FieldError>> {
    let mut errors = Vec::new();
    let shape = spec.shape.unwrap_or(Shape::PodTemplateSpec);
    let segments =
        required_path(&spec.path, &format!("{at}.path"), &mut errors).unwrap_or_default();
    let wildcards = segments
        .iter()
        .filter(|s| !matches!(s, Segment::Field(_)))
        .count();
    if shape == Shape::PodTemplateSpec && spec.pod_spec_patch.is_some() {
        errors.push(FieldError::new(
            format!("{at}.podSpecPatch"),
            "only an inline pod spec (shape: PodSpec) takes a pod-spec patch",
        ));
    }
    if shape == Shape::PodTemplateSpec && !spec.containers.is_empty() {
        errors.push(FieldError::new(
            format!("{at}.containers"),
            "only an inline pod spec (shape: PodSpec) takes containers from other fields",
        ));
    }
    let mut containers = Vec::new();
    for (c, container) in spec.containers.into_iter().enumerate() {
        let at = format!("{at}.containers[{c}]");
        let segments = if container.path == "." {
            Ok(Vec::new())
        } else {
            parse_path(&container.path)
        };
        let mut resource_pairs = Vec::new();
        for (r, pair) in container.resource_pairs.into_iter().enumerate() {
            let at = format!("{at}.resourcePairs[{r}]");
            let name = match (pair.resource, pair.name) {
                (Some(resource), None) if !resource.is_empty() => Some(Ok(resource)),
                (None, Some(name)) => {
                    required_path(&name, &format!("{at}.name"), &mut errors).map(Err)
                }
                _ => {
                    let message = "either resource (the resource, e.g. cpu) or name (where the container names it)";
                    errors.push(FieldError::new(at.clone(), message));
                    None
                }
            };
            let quantity = required_path(&pair.quantity, &format!("{at}.quantity"), &mut errors);
            let jvm = match pair.units.as_deref() {
                None => false,
                Some("JVM") => true,
                Some(_) => {
                    let message = "the only units are JVM (memory sizes such as 512m, 4g)";
                    errors.push(FieldError::new(format!("{at}.units"), message));
                    false
                }
            };
            if let (Some(name), Some(quantity)) = (name, quantity) {
                resource_pairs.push(ResourcePair {
                    name,
                    quantity,
                    jvm,
                });
            }
        }
        match segments {
            Ok(segments) => containers.push(ContainerSource {
                segments,
                name: container.name.filter(|n| !n.is_empty()),
                resources: container
                    .resources
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| "resources".to_string()),
                resource_pairs,
            }),
            Err(e) => errors.push(FieldError::new(format!("{at}.path"), e)),
        }
    }
    for (to, from) in &spec.pod_fields {
        let field = POD_SPEC_FIELDS.contains(&to.as_str()) && !from.is_empty();
        if shape != Shape::PodSpec || !field {
            errors.push(FieldError::new(
                format!("{at}.podFields.{to}"),
                "maps a pod-spec field to the field of an inline pod spec (shape: PodSpec) that holds it",
            ));
        }
    }
    let mut patches = Vec::new();
    for (p, patch) in spec.patches.into_iter().enumerate() {
        let at = format!("{at}.patches[{p}]");
        let segments = required_path(&patch.path, &format!("{at}.path"), &mut errors);
        let when = match patch.when {
            Some(w) => match read_condition(w, &format!("{at}.when"), &mut errors) {
                Some(c) => Some(c),
                None => continue,
            },
            None => None,
        };
        if let Some(segments) = segments {
            let shape = patch.shape.unwrap_or(Shape::PodSpec);
            let path = patch.path;
            patches.push(PatchSource {
                path,
                segments,
                shape,
                when,
            });
        }
    }
    let own_patch = spec
        .pod_spec_patch
        .filter(|f| !f.is_empty())
        .and_then(|path| {
            let segments = required_path(&path, &format!("{at}.podSpecPatch"), &mut errors)?;
            let shape = Shape::PodSpec;
            Some(PatchSource {
                path,
                segments,
                shape,
                when: None,
            })
        });
    let pod_defaults = match spec.pod_defaults.as_deref().map(parse_path) {
        None => None,
        Some(Ok(p))
            if shape == Shape::PodSpec && p.iter().all(|s| matches!(s, Segment::Field(_))) =>
        {
            Some(p)
        }
        Some(Ok(_)) => {
            errors.push(FieldError::new(
                format!("{at}.podDefaults"),
                "a path without wildcards, for an inline pod spec (shape: PodSpec)",
            ));
            None
        }
        Some(Err(e)) => {
            errors.push(FieldError::new(format!("{at}.podDefaults"), e));
            None
        }
    };
    let mut factors = |list: Vec<String>, field: &str| -> Vec<Factor> {
        let mut out = Vec::new();
        for (i, written) in list.iter().enumerate() {
            let at = format!("{at}.{field}[{i}]");
            let (path, minus) = match written.rsplit_once(" - ") {
                Some((path, n)) => match n.trim().parse::<i64>() {
                    Ok(n) if n >= 0 => (path.trim(), n),
                    _ => {
                        errors.push(FieldError::new(
                            at,
                            format!("{written:?}: after \" - \" comes a whole number"),
                        ));
                        continue;
                    }
                },
                None => (written.trim(), 0),
            };
            match parse_path(path) {
                Ok(segments) if segments.is_empty() => {
                    errors.push(FieldError::new(at, "an empty path"))
                }
                Ok(segments) => {
                    let own = segments
                        .iter()
                        .filter(|s| !matches!(s, Segment::Field(_)))
                        .count();
                    if own > wildcards {
                        errors.push(FieldError::new(
                            at,
                            format!(
                                "{path} has {own} wildcards, its template path {wildcards}: each stands for an element the template path reached"
                            ),
                        ));
                    } else {
                        out.push(Factor { segments, minus });
                    }
                }
                Err(e) => errors.push(FieldError::new(at, e)),
            }
        }
        out
    };
    let replicas = factors(spec.replicas, "replicas");
    let max_replicas = spec.max_replicas.map(|m| factors(m, "maxReplicas"));
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(TemplatePath {
        path: spec.path,
        segments,
        shape,
        key: spec
            .key
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| "name".to_string()),
        containers,
        pod_defaults,
        pod_fields: spec.pod_fields.into_iter().collect(),
        patches,
        own_patch,
        replicas,
        max_replicas,
    })
}

/// `path` parsed, or an error at `at` when it is empty or unreadable.
fn required_path(path: &str, at: &str, errors: &mut Vec<FieldError>) -> Option<Vec<Segment>> {
    let message = match parse_path(path) {
        Ok(segments) if !segments.is_empty() => return Some(segments),
        Ok(_) => "required".to_string(),
        Err(e) => e,
    };
    errors.push(FieldError::new(at, message));
    None
}

/// A `{path, values}` condition, or its mistakes at `at`.
fn read_condition(
    spec: ConditionSpec,
    at: &str,
    errors: &mut Vec<FieldError>,
) -> Option<Condition> {
    let segments = required_path(&spec.path, &format!("{at}.path"), errors)?;
    if spec.values.is_empty() || spec.values.iter().any(String::is_empty) {
        errors.push(FieldError::new(
            format!("{at}.values"),
            "must name the values (e.g. Complete, Failed) the value at path may be one of",
        ));
        return None;
    }
    Some(Condition {
        path: spec.path,
        segments,
        values: spec.values,
    })
}

/// `spec.workerGroupSpecs[*].template` → fields and wildcards, or why the
/// path cannot be read.
fn parse_path(path: &str) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    if path.trim().is_empty() {
        return Ok(segments);
    }
    for part in path.split('.') {
        let (field, lists) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        match field {
            "" if lists.is_empty() => {
                return Err(format!(
                    "{path:?}: an empty field (two dots, or a dot at an end)"
                ))
            }
            "" => {}
            "*" => segments.push(Segment::Values),
            f if f
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'/') =>
            {
                segments.push(Segment::Field(f.to_string()))
            }
            f => {
                return Err(format!(
                    "{path:?}: {f:?} is not a field name (letters, digits, _ and -), `*` or a list wildcard `[*]`"
                ))
            }
        }
        let mut rest = lists;
        while let Some(r) = rest.strip_prefix("[*]") {
            segments.push(Segment::Items);
            rest = r;
        }
        if !rest.is_empty() {
            return Err(format!(
                "{path:?}: only [*] (every element of a list) may follow a field, not {rest:?}"
            ));
        }
    }
    Ok(segments)
}

#[cfg(test)]
mod tests;
