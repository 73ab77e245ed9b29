//! Placement through `Admission::mutate` with the shipped profiles, on Pod
//! fixtures shaped like what kube-apiserver sends a mutating webhook.
//!
//! Each folder in tests/fixtures/placement holds `pod.json` (the incoming
//! object) and `expected.json` (the object after the returned patch; equal
//! to pod.json when nothing should change). Set `GPU_ADMISSION_BLESS=1` to
//! rewrite expected.json from the current output, then review the diff.
//! Each case also has a hand-written check of the property it exists for
//! (`check_property`), run on the real output, so a snapshot blessed from
//! wrong output still fails; a new case needs one.
//!
//! tests/fixtures/placement/nodepools holds Karpenter NodePools the same
//! way: `nodepool.json` and `expected.json`.
use gpu_admission::admission::{Admission, Bundle};
use gpu_admission::k8s::NamespaceLookup;
use gpu_admission::placement::{self, Profile, ProfileSet, NAMESPACE_NAME_LABEL};
use gpu_admission::review::{Operation, Request};
use gpu_admission::server::{Endpoint, Step, Webhook};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FIXTURES: &str = "tests/fixtures/placement";

struct Namespaces;

impl NamespaceLookup for Namespaces {
    fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        Some(Arc::new(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {NAMESPACE_NAME_LABEL: name}}
        })))
    }
}

fn shipped_profiles() -> ProfileSet {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/placement");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut profiles = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).unwrap();
            profiles.push(
                Profile::from_value(&value).unwrap_or_else(|e| panic!("{}: {e}", file.display())),
            );
        }
    }
    ProfileSet::new(profiles).unwrap()
}

/// The shipped profiles and the shipped policy that denies placement
/// conflicts, and no other policy.
fn admission() -> Admission {
    use gpu_admission::bundle;
    use gpu_admission::gpu::catalog::Catalog;
    let docs: Vec<_> = bundle::embedded_documents()
        .unwrap()
        .into_iter()
        .filter(|d| {
            d.source.file.starts_with("policies/placement")
                || d.source.file == Path::new("policies/gpu-placement.yaml")
        })
        .collect();
    let loaded = bundle::from_documents(docs, Catalog::embedded_arc()).unwrap();
    assert_eq!(loaded.bundle.policies.len(), 1);
    assert_eq!(loaded.bundle.placement.len(), shipped_profiles().len());
    Admission::new(loaded.bundle, Arc::new(Namespaces))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn create(pod: &Value) -> Request {
    Request::for_object(pod.clone(), Operation::Create, None)
}

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURES);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("pod.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// Mutates the case's pod and returns the patched pod and the profile used.
fn run(admission: &Admission, dir: &Path) -> Result<(), String> {
    let pod = read_json(&dir.join("pod.json"));
    let outcome = admission.mutate(&create(&pod));
    if !outcome.response.allowed {
        return Err("mutation denied the pod".into());
    }
    let mut patched = pod.clone();
    if let Some(patch) = &outcome.response.patch {
        json_patch::patch(&mut patched, patch).map_err(|e| format!("patch does not apply: {e}"))?;
    }
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(patched.clone())
        .map_err(|e| format!("patched object is not a Pod: {e}"))?;
    // The property the case exists for, written by hand: a snapshot blessed
    // from wrong output cannot satisfy it.
    let case = dir.file_name().unwrap().to_string_lossy();
    check_property(&case, &pod, &patched, outcome.profile.as_deref())?;
    let expected_path = dir.join("expected.json");
    if std::env::var_os("GPU_ADMISSION_BLESS").is_some() {
        let text = serde_json::to_string_pretty(&patched).unwrap() + "\n";
        std::fs::write(&expected_path, text).unwrap();
    }
    let expected = read_json(&expected_path);
    if patched != expected {
        return Err(format!(
            "patched pod differs from expected.json\npatch: {}\ngot: {}",
            serde_json::to_string(&outcome.response.patch).unwrap(),
            serde_json::to_string_pretty(&patched).unwrap()
        ));
    }
    match (&outcome.profile, expected == pod) {
        (Some(p), true) => return Err(format!("profile {p} reported without a change")),
        (None, false) => return Err("patched without naming a profile".into()),
        _ => {}
    }
    let again = admission.mutate(&create(&patched));
    if let Some(patch) = again.response.patch {
        return Err(format!(
            "reinvocation patched again: {}",
            serde_json::to_string(&patch).unwrap()
        ));
    }
    Ok(())
}

#[test]
fn fixtures_patch_as_expected_and_reinvocation_is_a_no_op() {
    let admission = admission();
    let cases = cases();
    assert!(cases.len() >= 13, "fixtures missing: {}", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|dir| {
            run(&admission, dir)
                .err()
                .map(|e| format!("{}: {e}", dir.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn fixture(case: &str) -> (Value, Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(FIXTURES)
        .join(case);
    (
        read_json(&dir.join("pod.json")),
        read_json(&dir.join("expected.json")),
    )
}

const SKU_TOLERATION: &str =
    r#"{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}"#;
const ACCELERATOR: &str = "kubernetes.azure.com/accelerator";
const MANUFACTURER: &str = "karpenter.azure.com/sku-gpu-manufacturer";
const PROFILE_ANNOTATION: &str = "gpu-admission.io/placement-profile";

fn tolerations(pod: &Value) -> Vec<Value> {
    pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn sku_tolerations(pod: &Value) -> usize {
    let sku: Value = serde_json::from_str(SKU_TOLERATION).unwrap();
    tolerations(pod).iter().filter(|t| **t == sku).count()
}

fn required_terms(pod: &Value) -> Vec<Value> {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Whether `term` has the requirement `key In [value]`.
fn requires(term: &Value, key: &str, value: &str) -> bool {
    term["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["key"] == key && e["operator"] == "In" && e["values"] == json!([value]))
}

fn ensure(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("property broken: {what}"))
    }
}

/// Checks the property fixture `case` exists for on its mutated pod.
/// Every case must have one: a new fixture without one fails here.
fn check_property(
    case: &str,
    pod: &Value,
    patched: &Value,
    profile: Option<&str>,
) -> Result<(), String> {
    // Common to all: existing tolerations are kept, in their order.
    let before = tolerations(pod);
    ensure(
        tolerations(patched).starts_with(&before),
        "existing tolerations kept in order",
    )?;
    let untouched = |what: &str| ensure(patched == pod && profile.is_none(), what);
    // A GPU pod placed by `want`: the toleration once, the profile named
    // in an annotation.
    let placed = |want: &str| -> Result<(), String> {
        ensure(profile == Some(want), &format!("profile {want} reported"))?;
        ensure(
            patched["metadata"]["annotations"][PROFILE_ANNOTATION] == want,
            "profile annotation",
        )?;
        ensure(
            sku_tolerations(patched) == 1,
            "sku=gpu:NoSchedule tolerated once",
        )
    };
    // Every required term selects `vendor` GPU nodes.
    let every_term_selects = |vendor: &str| -> Result<(), String> {
        let terms = required_terms(patched);
        ensure(
            !terms.is_empty()
                && terms
                    .iter()
                    .all(|t| requires(t, ACCELERATOR, vendor) || requires(t, MANUFACTURER, vendor)),
            &format!("every required term selects {vendor} GPU nodes: {terms:?}"),
        )
    };
    match case {
        "already-placed" => untouched("a pod that already tolerates and selects is left alone"),
        "cpu-pod" => untouched("nothing added for a CPU pod"),
        "zero-gpus" => untouched("nothing added for a pod asking for \"0\" GPUs"),
        "conflict-accelerator-none" => untouched(
            "a pod selecting non-GPU nodes is not rewritten (the validating side denies it)",
        ),
        "nvidia-training-pod" | "mig-job-pod" => {
            placed("aks-nvidia")?;
            every_term_selects("nvidia")?;
            ensure(
                required_terms(patched).len() == 2,
                "one term per way to find the nodes",
            )
        }
        "sidecar-gpu" => {
            ensure(
                pod["spec"]["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|c| c["resources"]["limits"].get("nvidia.com/gpu").is_none()),
                "only the init container asks for a GPU",
            )?;
            placed("aks-nvidia")?;
            every_term_selects("nvidia")
        }
        "amd-mi300x" => {
            placed("aks-amd")?;
            let terms = required_terms(patched);
            ensure(
                terms.iter().all(|t| !t.to_string().contains("nvidia")),
                "no NVIDIA requirement on an AMD pod",
            )?;
            ensure(
                terms.iter().any(|t| requires(t, MANUFACTURER, "amd")),
                "AMD GPU nodes required",
            )
        }
        "tolerates-everything" => {
            ensure(profile == Some("aks-nvidia"), "profile aks-nvidia")?;
            ensure(
                tolerations(patched) == before,
                "no toleration added: an empty-key Exists tolerates every taint",
            )?;
            every_term_selects("nvidia")
        }
        "nap-node-selector" => {
            placed("aks-nvidia")?;
            ensure(
                patched["spec"]["nodeSelector"] == pod["spec"]["nodeSelector"],
                "nodeSelector kept",
            )?;
            ensure(
                patched["spec"].get("affinity").is_none(),
                "no affinity added: the nodeSelector already selects NVIDIA GPU nodes",
            )
        }
        "existing-required-terms" | "daemonset-match-fields" => {
            placed("aks-nvidia")?;
            let old = required_terms(pod);
            let new = required_terms(patched);
            every_term_selects("nvidia")?;
            // Each existing term gets the requirement appended; none is
            // dropped or rewritten, and the preferred terms stay as they were.
            let kept = |o: &Value, n: &Value| {
                ["matchExpressions", "matchFields"].iter().all(|field| {
                    let old = o[field].as_array().cloned().unwrap_or_default();
                    let new = n[field].as_array().cloned().unwrap_or_default();
                    new.starts_with(&old)
                })
            };
            ensure(
                new.len() >= old.len() && new.len().is_multiple_of(old.len()),
                "terms are the existing ones, each with the GPU requirement",
            )?;
            ensure(
                new.iter().all(|n| old.iter().any(|o| kept(o, n))),
                &format!("every term keeps an existing term's requirements: {new:?}"),
            )?;
            ensure(
                old.iter().all(|o| new.iter().any(|n| kept(o, n))),
                "every existing term is still there",
            )?;
            ensure(
                patched["spec"]["affinity"]["nodeAffinity"]
                    ["preferredDuringSchedulingIgnoredDuringExecution"]
                    == pod["spec"]["affinity"]["nodeAffinity"]
                        ["preferredDuringSchedulingIgnoredDuringExecution"],
                "preferred terms untouched",
            )
        }
        "unknown-fields" => {
            placed("aks-nvidia")?;
            ensure(
                pod["spec"].get("schedulingFuture").is_some()
                    && patched["spec"]["schedulingFuture"] == pod["spec"]["schedulingFuture"],
                "a field unknown to k8s-openapi is kept as it came",
            )?;
            every_term_selects("nvidia")
        }
        other => Err(format!("no hand-written property for fixture {other}")),
    }
}

#[test]
fn profile_is_reported_for_the_patch() {
    let admission = admission();
    let (nvidia, _) = fixture("nvidia-training-pod");
    assert_eq!(
        admission.mutate(&create(&nvidia)).profile.as_deref(),
        Some("aks-nvidia")
    );
    let (amd, _) = fixture("amd-mi300x");
    assert_eq!(
        admission.mutate(&create(&amd)).profile.as_deref(),
        Some("aks-amd")
    );
}

#[test]
fn updates_are_never_patched() {
    let (pod, _) = fixture("nvidia-training-pod");
    let mut req = Request::for_object(pod.clone(), Operation::Update, None);
    req.old_object = Some(pod);
    let outcome = admission().mutate(&req);
    assert!(outcome.response.allowed);
    assert_eq!(outcome.response.patch, None);
}

#[test]
fn conflicting_pod_is_left_for_the_validating_side() {
    let (pod, _) = fixture("conflict-accelerator-none");
    let messages = placement::conflicts(&shipped_profiles(), &pod, &BTreeMap::new());
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0].contains("nodeSelector kubernetes.azure.com/accelerator=none"));
    assert!(messages[0].contains("aks-nvidia"));
    let (fits, _) = fixture("nvidia-training-pod");
    assert!(placement::conflicts(&shipped_profiles(), &fits, &BTreeMap::new()).is_empty());
}

#[test]
fn patches_survive_the_admission_review_encoding() {
    let (pod, expected) = fixture("existing-required-terms");
    let req = create(&pod);
    let outcome = admission().mutate(&req);
    let review = gpu_admission::review::encode(&req.uid, &outcome.response);
    assert_eq!(review["response"]["patchType"], "JSONPatch");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(review["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut patched = pod;
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched, expected);
}

// --- Karpenter NodePools -------------------------------------------------

const NODEPOOLS: &str = "tests/fixtures/placement/nodepools";

const SKU_GPU_TAINT: &str = "sku=gpu:NoSchedule";

fn nodepool_fixture(case: &str) -> (Value, Value) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(NODEPOOLS)
        .join(case);
    (
        read_json(&dir.join("nodepool.json")),
        read_json(&dir.join("expected.json")),
    )
}

fn nodepool_cases() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(NODEPOOLS);
    let mut names: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("nodepool.json").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn pool_request(pool: &Value, operation: Operation) -> Request {
    let mut req = Request::for_object(pool.clone(), operation, None);
    if operation == Operation::Update {
        req.old_object = Some(pool.clone());
    }
    req
}

/// Mutates the case's NodePool with `operation`; checks the result against
/// expected.json, the warning, the profile and reinvocation.
fn run_pool(admission: &Admission, case: &str, operation: Operation) -> Result<(), String> {
    let (pool, expected) = nodepool_fixture(case);
    let outcome = admission.mutate(&pool_request(&pool, operation));
    if !outcome.response.allowed {
        return Err("mutation denied the pool".into());
    }
    let mut patched = pool.clone();
    if let Some(patch) = &outcome.response.patch {
        json_patch::patch(&mut patched, patch).map_err(|e| format!("patch does not apply: {e}"))?;
    }
    if patched != expected {
        return Err(format!(
            "patched pool differs from expected.json\npatch: {}\ngot: {}",
            serde_json::to_string(&outcome.response.patch).unwrap(),
            serde_json::to_string_pretty(&patched).unwrap()
        ));
    }
    let name = pool["metadata"]["name"].as_str().unwrap();
    if expected == pool {
        if outcome.profile.is_some() || !outcome.response.warnings.is_empty() {
            return Err(format!(
                "untouched pool reported {:?} / {:?}",
                outcome.profile, outcome.response.warnings
            ));
        }
    } else {
        if outcome.profile.is_none() {
            return Err("patched without naming a profile".into());
        }
        let want = format!(
            "gpu-placement: NodePool {name} launches GPU nodes without a GPU taint; added {SKU_GPU_TAINT} so that only pods that tolerate it land there"
        );
        if outcome.response.warnings != [want.clone()] {
            return Err(format!(
                "warnings {:?}, want [{want:?}]",
                outcome.response.warnings
            ));
        }
    }
    let again = admission.mutate(&pool_request(&patched, operation));
    if again.response.patch.is_some() || !again.response.warnings.is_empty() {
        return Err(format!(
            "reinvocation changed it again: {} {:?}",
            serde_json::to_string(&again.response.patch).unwrap(),
            again.response.warnings
        ));
    }
    Ok(())
}

#[test]
fn nodepool_fixtures_on_create_and_update() {
    let admission = admission();
    let cases = nodepool_cases();
    assert!(cases.len() >= 7, "fixtures missing: {cases:?}");
    let mut failures = Vec::new();
    for case in &cases {
        for operation in [Operation::Create, Operation::Update] {
            if let Err(e) = run_pool(&admission, case, operation) {
                failures.push(format!("{case} ({operation:?}): {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn gpu_only_nodepools_get_the_taint_once_and_others_are_left_alone() {
    let admission = admission();
    let taint = json!({"key": "sku", "value": "gpu", "effect": "NoSchedule"});
    let taints = |pool: &Value| {
        pool["spec"]["template"]["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    for case in nodepool_cases() {
        let (pool, _) = nodepool_fixture(&case);
        let outcome = admission.mutate(&pool_request(&pool, Operation::Create));
        let mut patched = pool.clone();
        if let Some(patch) = &outcome.response.patch {
            json_patch::patch(&mut patched, patch).unwrap();
        }
        match case.as_str() {
            // GPU-only pools with no GPU taint (a GPU series names only GPU
            // sizes): the taint is added once,
            // after the taints already there.
            "gpu-only-nvidia" | "gpu-only-existing-taints" | "gpu-only-amd" | "gpu-series" => {
                let (old, new) = (taints(&pool), taints(&patched));
                assert!(new.starts_with(&old), "{case}: {new:?}");
                assert_eq!(new.len(), old.len() + 1, "{case}: {new:?}");
                assert_eq!(new.last(), Some(&taint), "{case}");
            }
            // No GPUs, GPUs mixed with CPUs, or a GPU taint already there
            // (KAITO's sku=gpu, or the nvidia.com/gpu one).
            "cpu" | "mixed-cpu-gpu" | "kaito-generated" | "nvidia-resource-taint" => {
                assert_eq!(outcome.response.patch, None, "{case}");
                assert_eq!(outcome.profile, None, "{case}");
            }
            other => panic!("no hand-written property for NodePool fixture {other}"),
        }
    }
}

#[test]
fn nodepool_patch_appends_or_creates_the_taint_list() {
    let admission = admission();
    let patch_of = |case: &str, operation| {
        let (pool, _) = nodepool_fixture(case);
        serde_json::to_value(
            admission
                .mutate(&pool_request(&pool, operation))
                .response
                .patch,
        )
        .unwrap()
    };
    let taint = json!({"key": "sku", "value": "gpu", "effect": "NoSchedule"});
    assert_eq!(
        patch_of("gpu-only-nvidia", Operation::Create),
        json!([{"op": "add", "path": "/spec/template/spec/taints", "value": [taint]}])
    );
    assert_eq!(
        patch_of("gpu-only-existing-taints", Operation::Update),
        json!([{"op": "add", "path": "/spec/template/spec/taints/-", "value": taint}])
    );
}

#[test]
fn nodepool_profile_follows_the_gpu_manufacturer() {
    let admission = admission();
    for (case, profile) in [
        ("gpu-only-nvidia", "aks-nvidia"),
        ("gpu-only-amd", "aks-amd"),
    ] {
        let (pool, _) = nodepool_fixture(case);
        let outcome = admission.mutate(&pool_request(&pool, Operation::Create));
        assert_eq!(outcome.profile.as_deref(), Some(profile), "{case}");
    }
}

#[test]
fn nodepools_are_not_patched_on_delete() {
    let (pool, _) = nodepool_fixture("gpu-only-nvidia");
    let outcome = admission().mutate(&pool_request(&pool, Operation::Delete));
    assert!(outcome.response.allowed);
    assert_eq!(outcome.response.patch, None);
    assert!(outcome.response.warnings.is_empty());
}

#[test]
fn require_profile_adds_no_taint() {
    let mut nvidia: Value = serde_yaml::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/placement/aks-nvidia.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    nvidia["spec"]["nodePoolTaintPolicy"] = json!("Require");
    let profiles = ProfileSet::new(vec![Profile::from_value(&nvidia).unwrap()]).unwrap();
    let admission = Admission::new(
        Bundle {
            placement: profiles,
            ..Bundle::default()
        },
        Arc::new(Namespaces),
    );
    let (pool, _) = nodepool_fixture("gpu-only-nvidia");
    let outcome = admission.mutate(&pool_request(&pool, Operation::Create));
    assert_eq!(outcome.response.patch, None);
    assert_eq!(outcome.profile, None);
    assert!(outcome.response.warnings.is_empty());
}

#[test]
fn nodepool_warning_and_patch_survive_the_admission_review_encoding() {
    let (pool, expected) = nodepool_fixture("gpu-only-nvidia");
    let req = pool_request(&pool, Operation::Create);
    let outcome = admission().mutate(&req);
    let review = gpu_admission::review::encode(&req.uid, &outcome.response);
    assert_eq!(review["response"]["patchType"], "JSONPatch");
    assert_eq!(
        review["response"]["warnings"][0],
        "gpu-placement: NodePool managed-gpu-np launches GPU nodes without a GPU taint; added sku=gpu:NoSchedule so that only pods that tolerate it land there"
    );
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(review["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut patched = pool;
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched, expected);
}

#[test]
fn nodepools_are_judged_with_the_catalog_the_bundle_was_loaded_with() {
    use gpu_admission::bundle::{self, PolicySource};
    use gpu_admission::gpu::catalog::Catalog;
    let csv = "name,aliases,gpu_model,manufacturer,gpus,gpu_devices,gpu_memory_gib,vcpus,family,series,retired,retired_on,aks_supported,premium,karpenter_gpu,source\n\
               Standard_NC8x_Z1_v9,,Z1,nvidia,1,1,48,8,NC_Z1_v9,NCx_Z1_v9,false,,true,false,true,team catalog\n";
    let catalog = Arc::new(Catalog::from_csv_str(csv, "team.csv").unwrap());
    let (mut pool, _) = nodepool_fixture("gpu-only-existing-taints");
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["Standard_NC8x_Z1_v9"]}
    ]);
    let req = pool_request(&pool, Operation::Create);

    let builtin = bundle::load(&PolicySource::Embedded).unwrap().bundle;
    let outcome = Admission::new(builtin, Arc::new(Namespaces)).mutate(&req);
    assert_eq!(outcome.response.patch, None, "unknown size: not a GPU pool");

    let team = bundle::load_with(&PolicySource::Embedded, catalog)
        .unwrap()
        .bundle;
    let outcome = Admission::new(team, Arc::new(Namespaces)).mutate(&req);
    assert_eq!(outcome.profile.as_deref(), Some("aks-nvidia"));
    assert!(outcome.response.patch.is_some());
}

/// A GPU pod whose own selector contradicts the profile is not patched; the
/// validating side denies it, naming both, and judges a Deployment's
/// template the same way on CREATE and on an UPDATE that changes the
/// template (a pod only on CREATE); scaling such a Deployment is allowed.
#[test]
fn conflicting_pods_and_templates_are_denied_on_validate() {
    let admission = admission();
    let (pod, _) = fixture("conflict-accelerator-none");
    let outcome = admission.validate(&create(&pod));
    assert!(!outcome.response.allowed);
    let message = outcome.response.message.unwrap();
    assert!(message.starts_with("gpu-placement: "), "{message}");
    assert!(message.contains("aks-nvidia"), "{message}");
    assert!(
        message.contains("kubernetes.azure.com/accelerator"),
        "{message}"
    );

    let mut update = create(&pod);
    update.operation = Operation::Update;
    update.old_object = Some(pod.clone());
    assert!(
        admission.validate(&update).response.allowed,
        "pods judged on CREATE only"
    );

    let deployment = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": pod["metadata"]["namespace"].clone()},
        "spec": {"selector": {"matchLabels": {"app": "t"}},
                 "template": {"metadata": {"labels": {"app": "t"}}, "spec": pod["spec"].clone()}}
    });
    let mut before = deployment.clone();
    before["spec"]["template"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("nodeSelector");
    for (operation, old) in [(Operation::Create, None), (Operation::Update, Some(before))] {
        let mut req = Request::for_object(deployment.clone(), operation, None);
        req.old_object = old;
        let outcome = admission.validate(&req);
        let message = outcome.response.message.unwrap_or_default();
        assert!(
            message.starts_with("gpu-placement: Deployment trainer: "),
            "{operation:?}: {message}"
        );
    }
    let mut scaled = deployment.clone();
    scaled["spec"]["replicas"] = serde_json::json!(0);
    let mut req = Request::for_object(scaled, Operation::Update, None);
    req.old_object = Some(deployment.clone());
    let outcome = admission.validate(&req);
    assert!(outcome.response.allowed, "{:?}", outcome.response.message);
    let started = Arc::new(admission).answer(
        Endpoint::Validate,
        &Arc::new(req),
        std::time::Instant::now(),
    );
    assert!(
        matches!(started, Step::Done(_)),
        "a scale is answered without evaluating anything"
    );
}
