//! Property tests of the places hostile or unusual input meets the
//! webhook first: the AdmissionReview decoder, the placement planner and
//! the policy engine's plan.
//!
//! - `review::decode` returns `Ok` or `Err` for any bytes and any JSON,
//!   including arbitrary JSON put anywhere inside a valid review; what it
//!   decodes goes through `/mutate` and `/validate` without a panic.
//! - `/mutate` with the shipped profiles, on generated GPU pods and Karpenter
//!   NodePools: the patch applies to the raw object, only adds (nothing the
//!   object said is lost), leaves a Pod that still deserialises as one, and a
//!   second `/mutate` of the patched object patches nothing.
//! - `/mutate` with generated sets of MutatingAdmissionPolicies (sidecars,
//!   init containers, tolerations, labels) on the same pods is a fixed
//!   point in one call: placement and the `void` pins run again on what
//!   the policies made, so a second call adds nothing, and the containers
//!   the policies add are pinned whenever the pod's own are.
//! - `/validate` with the shipped policies planned with every pass and with
//!   each pass turned off (`policy::plan`) gives the same answer on the
//!   same generated pods with any JSON anywhere in them: what the plan
//!   works out at load changes no result and no error's text.
//!
//! Each property runs 1,024 cases in a release build (CI runs it so), 128
//! in a debug build, where `cargo test` waits on it; `PROPTEST_CASES`
//! overrides either.
use gpu_admission::admission::{Admission, Bundle};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::Passes;
use gpu_admission::review::{self, Operation, Request};
use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The annotation placement sets to the profile that placed the pod; it may
/// overwrite a value the pod brought.
const PROFILE_ANNOTATION: &str = "gpu-admission.io/placement-profile";

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) { 128 } else { 1_024 });
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// `/mutate` and `/validate` with the policies and profiles built into the
/// binary, loaded once for every case.
fn admission() -> &'static Admission {
    static ADMISSION: OnceLock<Admission> = OnceLock::new();
    ADMISSION.get_or_init(|| {
        let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
        let Bundle {
            policies,
            placement,
        } = loaded.bundle;
        assert!(!placement.is_empty(), "no shipped placement profiles");
        Admission::new(
            Bundle {
                policies,
                placement,
            },
            Arc::new(StaticNamespaces::new().with("ml", Default::default())),
        )
    })
}

// ---------------------------------------------------------------------------
// The review decoder

/// Strings that mean something somewhere in a review, and some that should
/// not.
const WORDS: &[&str] = &[
    "",
    "admission.k8s.io/v1",
    "AdmissionReview",
    "CREATE",
    "UPDATE",
    "DELETE",
    "Pod",
    "v1",
    "nvidia.com/gpu",
    "amd.com/gpu",
    "1",
    "-1",
    "1e400",
    "sku",
    "gpu",
    "Exists",
    "NoSchedule",
    "Always",
    "\u{0}",
    "~1/~0",
    "\u{1F600}",
];

/// Keys from the review and Pod schemas, so generated objects go deep into
/// the code that reads them.
const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "annotations",
    "labels",
    "spec",
    "containers",
    "initContainers",
    "resources",
    "limits",
    "requests",
    "nvidia.com/gpu",
    "tolerations",
    "key",
    "operator",
    "value",
    "effect",
    "nodeSelector",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    "matchExpressions",
    "values",
    "template",
    "taints",
    "requirements",
    "uid",
    "operation",
    "object",
    "oldObject",
    "request",
    "userInfo",
    "username",
    "groups",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("JSON has no NaN or infinity", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
        select(WORDS).prop_map(Value::from),
        ".{0,16}".prop_map(Value::String),
    ]
}

fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(KEYS).prop_map(str::to_string),
        1 => ".{0,8}",
    ]
}

/// Any JSON value: at most 5 levels deep and about 64 nodes.
fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A review as kube-apiserver sends it for a GPU pod.
fn valid_review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "trainer",
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:ml:trainer", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "trainer", "namespace": "ml", "labels": {"app": "train"}},
                "spec": {
                    "containers": [{
                        "name": "train",
                        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}
                    }],
                    "tolerations": [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["westeurope-1"]}
                        ]}]
                    }}}
                }
            },
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// Every JSON pointer in `value`, the root (`""`) first.
fn pointers(value: &Value) -> Vec<String> {
    fn walk(value: &Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let token = k.replace('~', "~0").replace('/', "~1");
                    walk(v, format!("{at}/{token}"), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

/// The decoded request goes through placement and the shipped policies, as
/// the server would send it; neither may panic, and `/mutate` never denies.
fn answer(req: &Request) -> Result<(), TestCaseError> {
    let mutated = admission().mutate(req);
    prop_assert!(mutated.response.allowed, "{:?}", mutated.response.message);
    if let (Some(object), Some(patch)) = (&req.object, &mutated.response.patch) {
        let mut patched = object.clone();
        prop_assert!(json_patch::patch(&mut patched, patch).is_ok());
    }
    admission().validate(req);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn decode_survives_any_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = review::decode(&body);
    }

    #[test]
    fn decode_survives_a_damaged_review(
        at in any::<Index>(),
        cut in any::<Index>(),
        byte in any::<u8>(),
    ) {
        let body = serde_json::to_vec(&valid_review()).unwrap();
        let mut changed = body.clone();
        changed[at.index(body.len())] = byte;
        if let Ok(req) = review::decode(&changed) {
            answer(&req)?;
        }
        let _ = review::decode(&body[..cut.index(body.len())]);
    }

    #[test]
    fn decode_survives_any_json(value in json_value()) {
        let body = serde_json::to_vec(&value).unwrap();
        if let Ok(req) = review::decode(&body) {
            answer(&req)?;
        }
    }

    /// Sizing the request while walking the whole body gives what sizing
    /// the request's own JSON gives, wherever a value lands in the review;
    /// and the one-pass decode agrees with opening and then decoding.
    #[test]
    fn the_request_is_sized_and_decoded_the_same_in_one_pass(
        at in any::<Index>(),
        value in json_value(),
    ) {
        let mut review = valid_review();
        let all = pointers(&review);
        let pointer = &all[at.index(all.len())];
        *review.pointer_mut(pointer).unwrap() = value;
        let body = serde_json::to_vec(&review).unwrap();
        let limits = review::Limits::default();
        if let Ok(envelope) = review::open(&body) {
            prop_assert_eq!(
                review::measure_request(&body, &limits),
                envelope.measure(&limits)
            );
            let two_passes = envelope.decode().map_err(|e| e.to_string());
            let one_pass = review::decode_review(&body).map_err(|e| e.to_string());
            prop_assert_eq!(one_pass, two_passes);
        } else {
            prop_assert!(review::decode_review(&body).is_err());
        }
    }

    /// Any value in place of any part of a valid review (the whole review,
    /// `request`, `request.kind`, a container, a toleration's key...).
    #[test]
    fn decode_survives_json_anywhere_in_a_review(at in any::<Index>(), value in json_value()) {
        let mut review = valid_review();
        let all = pointers(&review);
        let pointer = &all[at.index(all.len())];
        *review.pointer_mut(pointer).unwrap() = value;
        let body = serde_json::to_vec(&review).unwrap();
        if let Ok(req) = review::decode(&body) {
            answer(&req)?;
        }
    }

    /// The free-form fields take any JSON: the review still decodes and
    /// keeps what was sent, as the JSON parser reads it (a `null` object is
    /// an absent one), except that `object` and `oldObject` must be objects
    /// (or absent): any other value makes a review that cannot be judged,
    /// refused with its uid, never taken for one without an object.
    #[test]
    fn free_form_fields_take_any_json(
        field in select(&["object", "oldObject", "userInfo", "options"][..]),
        value in json_value(),
    ) {
        let mut review = valid_review();
        review["request"][field] = value.clone();
        let body = serde_json::to_vec(&review).unwrap();
        let req = review::decode(&body);
        if field.ends_with("bject") && !(value.is_object() || value.is_null()) {
            prop_assert!(
                matches!(req, Err(review::DecodeError::NotAnObject { .. })),
                "{field}: {:?}", req
            );
            return Ok(());
        }
        prop_assert!(req.is_ok(), "{field}: {:?}", req.err());
        let req = req.unwrap();
        let kept = match field {
            "object" => req.object.clone().unwrap_or(Value::Null),
            "oldObject" => req.old_object.clone().unwrap_or(Value::Null),
            "userInfo" => req.user_info.clone(),
            _ => req.options.clone().unwrap_or(Value::Null),
        };
        // serde_json may read a float back one unit in the last place off.
        let sent: Value = serde_json::from_slice(&serde_json::to_vec(&value).unwrap()).unwrap();
        prop_assert_eq!(kept, sent);
        answer(&req)?;
    }
}

// ---------------------------------------------------------------------------
// Placement of GPU pods

/// GPU resources of the shipped profiles, and one that is not a GPU.
const RESOURCES: &[&str] = &[
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/gpu.shared",
    "amd.com/gpu",
    "example.com/fpga",
];

/// Node label keys the profiles select on, others, and some that need
/// RFC 6901 escaping beyond `/`.
const NODE_KEYS: &[&str] = &[
    "kubernetes.azure.com/accelerator",
    "karpenter.azure.com/sku-gpu-manufacturer",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "topology.kubernetes.io/zone",
    "example.com/a~b",
    "example.com~1accelerator",
];

const NODE_VALUES: &[&str] = &[
    "nvidia",
    "amd",
    "none",
    "linux",
    "westeurope-1",
    "Standard_NC24ads_A100_v4",
    "Standard_ND96isr_MI300X_v5",
    "Standard_D4s_v5",
];

fn quantity() -> impl Strategy<Value = Value> {
    prop_oneof![
        select(&["0", "1", "2", "8", "2000m", "1e1"][..]).prop_map(Value::from),
        (0u64..4).prop_map(Value::from),
    ]
}

fn resource_list() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        prop::collection::btree_map(
            prop_oneof![select(RESOURCES), select(&["cpu", "memory"][..])],
            quantity(),
            0..3,
        )
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
    )
}

fn container(names: &'static [&'static str]) -> impl Strategy<Value = Value> {
    (select(names), resource_list(), resource_list()).prop_map(|(name, limits, requests)| {
        let mut resources = Map::new();
        if let Some(l) = limits {
            resources.insert("limits".into(), l);
        }
        if let Some(r) = requests {
            resources.insert("requests".into(), r);
        }
        json!({"name": name, "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "resources": resources})
    })
}

/// An init container, or a sidecar (an init container that keeps running).
fn init_container() -> impl Strategy<Value = Value> {
    (
        container(&["init", "fetch-weights", "proxy"]),
        any::<bool>(),
    )
        .prop_map(|(mut c, sidecar)| {
            if sidecar {
                c["restartPolicy"] = json!("Always");
            }
            c
        })
}

fn toleration() -> impl Strategy<Value = Value> {
    select(vec![
        // Tolerates every taint, with the empty key and effect left out or
        // spelled out.
        json!({"operator": "Exists"}),
        json!({"key": "", "operator": "Exists", "effect": ""}),
        // The profile's own toleration, and ones equivalent to it or wider.
        json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}),
        json!({"key": "sku", "value": "gpu", "effect": "NoSchedule"}),
        json!({"key": "sku", "operator": "Equal", "value": "gpu"}),
        json!({"key": "sku", "operator": "Exists"}),
        // Near misses.
        json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}),
        json!({"key": "sku", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}),
        // What ExtendedResourceToleration adds, and unrelated ones.
        json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
    ])
}

fn requirement() -> impl Strategy<Value = Value> {
    (
        select(NODE_KEYS),
        select(&["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"][..]),
        prop::collection::vec(select(NODE_VALUES), 1..3),
        select(&["0", "1", "4"][..]),
    )
        .prop_map(|(key, op, values, number)| match op {
            "In" | "NotIn" => json!({"key": key, "operator": op, "values": values}),
            "Gt" | "Lt" => json!({"key": key, "operator": op, "values": [number]}),
            _ => json!({"key": key, "operator": op}),
        })
}

/// A node selector term: expressions absent, empty or 1..3, sometimes with
/// `matchFields` (as the DaemonSet controller writes).
fn term() -> impl Strategy<Value = Value> {
    (
        nullable(prop::collection::vec(requirement(), 0..4)),
        any::<bool>(),
    )
        .prop_map(|(exprs, fields)| {
            let mut t = Map::new();
            if let Some(e) = exprs {
                t.insert("matchExpressions".into(), e);
            }
            if fields {
                t.insert(
                    "matchFields".into(),
                    json!([{"key": "metadata.name", "operator": "In", "values": ["aks-gpu-0"]}]),
                );
            }
            Value::Object(t)
        })
}

fn preferred_term() -> impl Strategy<Value = Value> {
    (1i64..=100, prop::collection::vec(requirement(), 0..3)).prop_map(
        |(weight, exprs)| json!({"weight": weight, "preference": {"matchExpressions": exprs}}),
    )
}

/// A list that is absent, `null` (which the API treats as absent), or given.
fn nullable<S: Strategy<Value = Vec<Value>>>(list: S) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        4 => list.prop_map(|l| Some(Value::Array(l))),
    ]
}

fn affinity() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        (
            prop::option::of(nullable(prop::collection::vec(term(), 0..4))),
            nullable(prop::collection::vec(preferred_term(), 0..3)),
            select(&["absent", "null", "object"][..]),
            any::<bool>(),
        )
            .prop_map(|(required, preferred, node_affinity, pod_anti_affinity)| {
                let mut a = Map::new();
                if node_affinity == "null" && required.is_none() && preferred.is_none() {
                    a.insert("nodeAffinity".into(), Value::Null);
                } else if node_affinity == "object" || required.is_some() || preferred.is_some() {
                    let mut n = Map::new();
                    // `required` without nodeSelectorTerms, with them null, or given.
                    if let Some(terms) = required {
                        let mut r = Map::new();
                        if let Some(t) = terms {
                            r.insert("nodeSelectorTerms".into(), t);
                        }
                        n.insert(
                            "requiredDuringSchedulingIgnoredDuringExecution".into(),
                            Value::Object(r),
                        );
                    }
                    if let Some(p) = preferred {
                        n.insert("preferredDuringSchedulingIgnoredDuringExecution".into(), p);
                    }
                    a.insert("nodeAffinity".into(), Value::Object(n));
                }
                if pod_anti_affinity {
                    a.insert(
                        "podAntiAffinity".into(),
                        json!({"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 10,
                            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                "labelSelector": {"matchLabels": {"app": "train"}}}
                        }]}),
                    );
                }
                Value::Object(a)
            }),
    )
}

/// Tolerations absent, `null`, empty or up to four.
fn tolerations() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        prop::collection::vec(toleration(), 0..5).prop_map(|t| Some(Value::Array(t))),
    ]
}

fn string_map(keys: &'static [&'static str]) -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        prop::collection::btree_map(select(keys), select(NODE_VALUES), 0..3).prop_map(|m| {
            Value::Object(
                m.into_iter()
                    .map(|(k, v)| (k.to_string(), Value::from(v)))
                    .collect(),
            )
        }),
    )
}

/// Pod annotation keys: the profile annotation itself, one that reads like
/// its escaped form, and others with `~` and `/`.
const ANNOTATION_KEYS: &[&str] = &[
    PROFILE_ANNOTATION,
    "gpu-admission.io~1placement-profile",
    "example.com/a~b",
    "kubernetes.io/description",
];

/// The main container: it asks for one resource of `RESOURCES` (a count
/// that may be zero) besides what `container` gives it.
fn main_container() -> impl Strategy<Value = Value> {
    (
        container(&["train"]),
        select(RESOURCES),
        quantity(),
        select(&["limits", "requests"][..]),
    )
        .prop_map(|(mut c, resource, count, list)| {
            let resources = &mut c["resources"];
            if !resources[list].is_object() {
                resources[list] = json!({});
            }
            resources[list][resource] = count;
            c
        })
}

fn gpu_pod() -> impl Strategy<Value = Value> {
    (
        (
            main_container(),
            prop::collection::vec(container(&["metrics", "a"]), 0..3),
        )
            .prop_map(|(main, mut others)| {
                others.insert(0, main);
                others
            }),
        prop::option::of(prop::collection::vec(init_container(), 0..3)),
        tolerations(),
        string_map(NODE_KEYS),
        affinity(),
        (
            string_map(ANNOTATION_KEYS),
            string_map(&["app", "example.com/team"]),
            prop::option::weighted(0.1, Just("aks-gpu-0")),
        ),
    )
        .prop_map(
            |(
                containers,
                init,
                tolerations,
                node_selector,
                affinity,
                (annotations, labels, node_name),
            )| {
                let mut metadata = json!({"name": "trainer", "namespace": "ml"});
                match annotations {
                    // Annotations `null`, as some clients send them.
                    Some(a) if a.as_object().is_some_and(Map::is_empty) => {
                        metadata["annotations"] = Value::Null
                    }
                    Some(a) => metadata["annotations"] = a,
                    None => {}
                }
                if let Some(l) = labels {
                    metadata["labels"] = l;
                }
                let mut spec = json!({"containers": containers});
                let fields = [
                    ("initContainers", init.map(Value::Array)),
                    ("tolerations", tolerations),
                    ("nodeSelector", node_selector),
                    ("affinity", affinity),
                    ("nodeName", node_name.map(Value::from)),
                ];
                for (key, value) in fields {
                    if let Some(v) = value {
                        spec[key] = v;
                    }
                }
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
            },
        )
}

/// Whether everything `before` says is still said in `after`: objects keep
/// their keys, lists keep their items in place (they may grow at the end),
/// scalars are unchanged; a `null` may become anything (it means absent).
/// `PROFILE_ANNOTATION` may take a new value.
fn kept(before: &Value, after: &Value, path: &str) -> Result<(), String> {
    match (before, after) {
        (Value::Null, _) => Ok(()),
        (Value::Object(b), Value::Object(a)) => b.iter().try_for_each(|(k, v)| {
            if path == "/metadata/annotations" && k == PROFILE_ANNOTATION {
                return Ok(());
            }
            let child = format!("{path}/{k}");
            a.get(k)
                .ok_or_else(|| format!("{child} was removed"))
                .and_then(|w| kept(v, w, &child))
        }),
        (Value::Array(b), Value::Array(a)) if a.len() >= b.len() => b
            .iter()
            .zip(a)
            .enumerate()
            .try_for_each(|(i, (v, w))| kept(v, w, &format!("{path}/{i}"))),
        _ if before == after => Ok(()),
        _ => Err(format!("{path}: {before} became {after}")),
    }
}

/// Applies `/mutate`'s patch for `object` on `operation`, and checks what
/// every patch must be: allowed, made of `add` operations only, applicable,
/// keeping what the object said, and final (a second call patches nothing).
/// Returns the patched object and the profile that patched it.
fn mutate_once(
    object: &Value,
    operation: Operation,
) -> Result<(Value, Option<String>), TestCaseError> {
    let req = Request::for_object(object.clone(), operation, Some("ml"));
    let outcome = admission().mutate(&req);
    prop_assert!(outcome.response.allowed);
    let Some(patch) = outcome.response.patch else {
        prop_assert!(outcome.profile.is_none());
        return Ok((object.clone(), None));
    };
    // Without a profile, only GPUs hidden from containers that ask for
    // none: each operation adds to a container's env.
    prop_assert!(
        outcome.profile.is_some()
            || patch.0.iter().all(|op| {
                let path = op.path().to_string();
                path.ends_with("/env") || path.ends_with("/env/-")
            }),
        "a patch without a profile: {}",
        serde_json::to_string(&patch).unwrap()
    );
    for op in &patch.0 {
        prop_assert!(
            matches!(op, PatchOperation::Add(_)),
            "placement only adds: {op:?}"
        );
    }
    let mut patched = object.clone();
    let applied = json_patch::patch(&mut patched, &patch);
    prop_assert!(
        applied.is_ok(),
        "{:?}\npatch: {}\nobject: {object}",
        applied.err(),
        serde_json::to_string(&patch).unwrap()
    );
    if let Err(e) = kept(object, &patched, "") {
        return Err(TestCaseError::fail(format!(
            "{e}\npatch: {}",
            serde_json::to_string(&patch).unwrap()
        )));
    }
    let again = admission().mutate(&Request::for_object(patched.clone(), operation, Some("ml")));
    prop_assert!(
        again.response.patch.is_none(),
        "a second /mutate patched again: {}\nfirst patch: {}\nobject: {object}",
        serde_json::to_string(&again.response.patch).unwrap(),
        serde_json::to_string(&patch).unwrap()
    );
    Ok((patched, outcome.profile))
}

// ---------------------------------------------------------------------------
// Karpenter NodePools

/// Instance types: GPU sizes of both makers, a fractional one, CPU sizes.
const SIZES: &[&str] = &[
    "Standard_NC24ads_A100_v4",
    "Standard_NC4as_T4_v3",
    "Standard_ND96isr_MI300X_v5",
    "Standard_NV6ads_A10_v5",
    "Standard_D4s_v5",
    "Standard_E8s_v5",
];

fn pool_requirement() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(select(SIZES), 1..3).prop_map(
            |v| json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": v})
        ),
        select(&["N", "D", "E"][..]).prop_map(
            |f| json!({"key": "karpenter.azure.com/sku-family", "operator": "In", "values": [f]})
        ),
        select(&["nvidia", "amd"][..]).prop_map(|m| {
            json!({"key": "karpenter.azure.com/sku-gpu-manufacturer", "operator": "In", "values": [m]})
        }),
        Just(json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]})),
        Just(json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]})),
    ]
}

fn pool_taint() -> impl Strategy<Value = Value> {
    select(vec![
        json!({"key": "sku", "value": "gpu", "effect": "NoSchedule"}),
        json!({"key": "sku", "value": "gpu", "effect": "NoExecute"}),
        json!({"key": "sku", "value": "cpu", "effect": "NoSchedule"}),
        json!({"key": "nvidia.com/gpu", "effect": "NoSchedule"}),
        json!({"key": "team", "value": "ml", "effect": "NoSchedule"}),
        json!({"key": "example.com/a~b", "value": "x", "effect": "PreferNoSchedule"}),
    ])
}

fn node_pool() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(pool_requirement(), 0..4),
        prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            prop::collection::vec(pool_taint(), 0..3).prop_map(|t| Some(Value::Array(t))),
        ],
        prop::option::of(prop::collection::vec(pool_taint(), 0..2)),
        any::<bool>(),
    )
        .prop_map(|(requirements, taints, startup_taints, limits)| {
            let mut node_spec = json!({
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": requirements
            });
            if let Some(t) = taints {
                node_spec["taints"] = t;
            }
            if let Some(t) = startup_taints {
                node_spec["startupTaints"] = Value::Array(t);
            }
            let mut pool = json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "gpu", "annotations": {"example.com/a~b": "c/d"}},
                "spec": {
                    "template": {"metadata": {"labels": {"team": "ml"}}, "spec": node_spec},
                    "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m"}
                }
            });
            if limits {
                pool["spec"]["limits"] = json!({"nvidia.com/gpu": 16, "cpu": "1000"});
            }
            pool
        })
}

/// Taints as (key, value, effect).
fn taints_of(pool: &Value) -> Vec<(String, String, String)> {
    pool.pointer("/spec/template/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            let field = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            (field("key"), field("value"), field("effect"))
        })
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn placement_patches_apply_once_and_keep_the_pod_a_pod(pod in gpu_pod()) {
        prop_assert!(serde_json::from_value::<Pod>(pod.clone()).is_ok(), "generated {pod}");
        let (patched, profile) = mutate_once(&pod, Operation::Create)?;
        let typed = serde_json::from_value::<Pod>(patched.clone());
        prop_assert!(typed.is_ok(), "{:?}\npatched: {patched}", typed.err());
        // A placed pod names the profile that placed it.
        if let Some(profile) = profile {
            prop_assert_eq!(
                patched.pointer("/metadata/annotations").and_then(|a| a.get(PROFILE_ANNOTATION)),
                Some(&Value::from(profile))
            );
        }
    }

    #[test]
    fn node_pool_taint_is_added_once(
        pool in node_pool(),
        operation in select(&[Operation::Create, Operation::Update][..]),
    ) {
        let (patched, _) = mutate_once(&pool, operation)?;
        let before = taints_of(&pool);
        let after = taints_of(&patched);
        let gpu = ("sku".to_string(), "gpu".to_string(), "NoSchedule".to_string());
        for t in &after {
            let was = before.iter().filter(|b| *b == t).count();
            let now = after.iter().filter(|a| *a == t).count();
            prop_assert!(
                now == was || (now == 1 && was == 0 && *t == gpu),
                "taint {t:?}: {was} before, {now} after"
            );
        }
        prop_assert!(after.len() <= before.len() + 1);
    }
}

// ---------------------------------------------------------------------------
// MutatingAdmissionPolicies: one /mutate is a fixed point

/// MutatingAdmissionPolicies as platform teams write them, each with its
/// binding; a case binds a subset. The names of the containers they add
/// are in [`ADDED`].
const MAPS: [&str; 5] = [
    // A native sidecar (restartable init container).
    include_str!("fixtures/mutating/injectors/mesh-proxy.yaml"),
    // An init container with a CUDA image, put first.
    include_str!("fixtures/mutating/injectors/fetch-model.yaml"),
    // A container taking envFrom a Secret, by apply configuration (merged
    // by name, so it applies the same way again).
    include_str!("fixtures/mutating/injectors/log-shipper.yaml"),
    // The GPU taint's toleration on pods of one team.
    include_str!("fixtures/mutating/injectors/team-tolerations.yaml"),
    // A label, by apply configuration.
    include_str!("fixtures/mutating/injectors/cost-center.yaml"),
];

/// The containers the policies of [`MAPS`] add: (field, name).
const ADDED: [(&str, &str); 3] = [
    ("initContainers", "mesh-proxy"),
    ("initContainers", "fetch-model"),
    ("containers", "log-shipper"),
];

/// The shipped policies and profiles with the policies of `MAPS` whose bit
/// is set in `mask`, compiled once per mask.
fn admission_with_maps(mask: u8) -> Arc<Admission> {
    static CACHE: OnceLock<Mutex<HashMap<u8, Arc<Admission>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(a) = cache.lock().unwrap().get(&mask) {
        return a.clone();
    }
    static SHIPPED: OnceLock<Bundle> = OnceLock::new();
    let shipped = SHIPPED.get_or_init(|| {
        (bundle::load(&PolicySource::Embedded).expect("shipped policies load")).bundle
    });
    let text: Vec<&str> = MAPS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, m)| *m)
        .collect();
    let docs = gpu_admission::policy::parse_documents(
        std::path::Path::new("maps.yaml"),
        &text.join("---\n"),
    )
    .unwrap();
    let bundle = Bundle {
        policies: shipped.policies.with_documents(&docs).unwrap(),
        placement: shipped.placement.clone(),
    };
    let admission = Arc::new(Admission::new(
        bundle,
        Arc::new(StaticNamespaces::new().with("ml", Default::default())),
    ));
    cache.lock().unwrap().insert(mask, admission.clone());
    admission
}

fn pinned(pod: &Value, field: &str, name: &str) -> bool {
    items_named(pod, field, name).is_some_and(|c| {
        c["env"].as_array().is_some_and(|env| {
            env.iter()
                .any(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES" && e["value"] == "void")
        })
    })
}

fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

fn items_named<'a>(pod: &'a Value, field: &str, name: &str) -> Option<&'a Value> {
    pod["spec"][field]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn one_mutate_with_mutating_policies_is_a_fixed_point(
        pod in gpu_pod(),
        mask in 1u8..(1 << MAPS.len()),
    ) {
        // As kube-apiserver sends it: decoded, so no `null` fields, and
        // container names unique (the policies refuse others as invalid).
        let pod = without_nulls(pod);
        let names: Vec<&Value> = ["initContainers", "containers"]
            .iter()
            .flat_map(|f| pod["spec"][*f].as_array().into_iter().flatten())
            .map(|c| &c["name"])
            .collect();
        prop_assume!(names.iter().enumerate().all(|(i, n)| !names[..i].contains(n)));
        let admission = admission_with_maps(mask);
        let req = Request::for_object(pod.clone(), Operation::Create, Some("ml"));
        let first = admission.mutate(&req);
        prop_assert!(first.response.allowed, "{:?}", first.response);
        let mut patched = pod.clone();
        if let Some(patch) = &first.response.patch {
            let applied = json_patch::patch(&mut patched, patch);
            prop_assert!(applied.is_ok(), "{:?}\npatch: {}", applied.err(),
                serde_json::to_string(patch).unwrap());
        }
        let again = admission.mutate(&Request::for_object(patched.clone(), Operation::Create, Some("ml")));
        prop_assert!(again.response.allowed);
        prop_assert!(
            again.response.patch.is_none(),
            "mutate(mutate(x)) patched again: {}\nfirst patch: {}\npod: {pod}",
            serde_json::to_string(&again.response.patch).unwrap(),
            serde_json::to_string(&first.response.patch).unwrap()
        );
        // What the policies add is hidden from whenever the pod's own
        // containers are: pinned in the same call, not the next one.
        let own_pinned = ["initContainers", "containers"].iter().any(|field| {
            pod["spec"][*field].as_array().into_iter().flatten().any(|c| {
                pinned(&patched, field, c["name"].as_str().unwrap_or(""))
            })
        });
        if own_pinned {
            for (field, name) in ADDED {
                if items_named(&patched, field, name).is_some() {
                    prop_assert!(pinned(&patched, field, name), "{field} {name} not pinned: {patched}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The plan against the interpreter

/// The shipped set and the GPU limits of the test fixtures (quantities,
/// messageExpression, auditAnnotations), planned with every pass, then with each pass turned off in turn
/// (`Passes::NAMES` order), compiled once. Every policy's failurePolicy
/// is `Fail`, so that an evaluation error is in the answer with its text
/// (under `Ignore` it is only counted).
fn replanned() -> &'static [(&'static str, Admission)] {
    static SETS: OnceLock<Vec<(&'static str, Admission)>> = OnceLock::new();
    SETS.get_or_init(|| {
        let mut documents = bundle::embedded_documents().expect("shipped policies parse");
        let fixtures = std::path::Path::new("tests/fixtures/policies/gpu");
        documents.extend(gpu_admission::policy::read_documents(fixtures).unwrap());
        for doc in &mut documents {
            if doc.type_meta().1 == "ValidatingAdmissionPolicy" {
                doc.value["spec"]["failurePolicy"] = json!("Fail");
            }
        }
        let catalog = gpu_admission::gpu::catalog::Catalog::embedded_arc();
        let shipped =
            (bundle::from_documents(documents, catalog).expect("policies compile")).bundle;
        let with = |passes| {
            Admission::new(
                Bundle {
                    policies: shipped.policies.replanned(passes).unwrap(),
                    placement: shipped.placement.clone(),
                },
                Arc::new(StaticNamespaces::new().with("ml", Default::default())),
            )
        };
        std::iter::once(("every pass", with(Passes::ALL)))
            .chain(Passes::NAMES.map(|name| (name, with(Passes::without(name).unwrap()))))
            .collect()
    })
}

proptest! {
    #![proptest_config(config())]

    /// What the plan works out at load (the reaches of `object`, the memo,
    /// params constants, variable closures, the binding index) changes no
    /// answer: on generated GPU pods, with any JSON anywhere in them
    /// (missing fields, `null`s, wrong types, big integers), `/validate`
    /// with each pass turned off gives the same response (allowed, message,
    /// warnings, audit annotations, every evaluation error's text) and
    /// every binding the same result as with all of them. An UPDATE's `oldObject` is the
    /// pod before the JSON was put in.
    #[test]
    fn the_plan_changes_no_answer_on_any_pod(
        pod in gpu_pod(),
        at in any::<Index>(),
        value in prop::option::of(json_value()),
        operation in select(&[Operation::Create, Operation::Update][..]),
    ) {
        let old = pod.clone();
        let mut pod = pod;
        if let Some(value) = value {
            let all = pointers(&pod);
            *pod.pointer_mut(&all[at.index(all.len())]).unwrap() = value;
        }
        let mut req = Request::for_object(pod.clone(), operation, Some("ml"));
        if operation == Operation::Update {
            req.old_object = Some(old);
        }
        let answer = |admission: &Admission| {
            let outcome = admission.validate(&req);
            let results: Vec<_> = (outcome.evaluations.iter())
                .map(|e| (e.policy.to_string(), format!("{:?}", e.result)))
                .collect();
            (outcome.response, results)
        };
        let sets = replanned();
        let planned = answer(&sets[0].1);
        for (name, admission) in &sets[1..] {
            prop_assert_eq!(&answer(admission), &planned, "without {}\npod: {}", name, pod);
        }
    }
}
