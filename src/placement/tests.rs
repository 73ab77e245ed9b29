use super::*;
use crate::k8s::json::Pointer as _;
use crate::k8s::namespaces::StaticNamespaces;
use crate::k8s::NamespaceLookup;
use crate::review::Request;
use serde_json::json;

const NVIDIA: &str = include_str!("../../policies/placement/aks-nvidia.yaml");
const AMD: &str = include_str!("../../policies/placement/aks-amd.yaml");

fn profile(yaml: &str) -> Profile {
    let v: Value = serde_yaml::from_str(yaml).unwrap();
    Profile::from_value(&v).unwrap()
}

fn shipped() -> ProfileSet {
    ProfileSet::new(vec![profile(NVIDIA), profile(AMD)]).unwrap()
}

/// A profile with one toleration and one required term.
fn simple(name: &str, priority: i32, extra: Value) -> Profile {
    let mut spec = json!({
        "resources": ["nvidia.com/gpu"],
        "priority": priority,
        "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "requiredNodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.azure.com/accelerator", "operator": "In", "values": ["nvidia"]}
        ]}]
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    Profile::from_value(&json!({
        "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// A set of one [`simple`] profile of priority 0.
fn only(name: &str, extra: Value) -> ProfileSet {
    ProfileSet::new(vec![simple(name, 0, extra)]).unwrap()
}

fn gpu_pod(spec_extra: Value) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {"containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}});
    for (k, v) in spec_extra.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    pod
}

/// [`gpu_pod`] with required node-selector `terms`.
fn terms_pod(terms: Value) -> Value {
    gpu_pod(crate::gpu::with_terms(terms))
}

/// Whether some operation of `plan` writes at a path that contains `part`.
fn touches(plan: &Plan, part: &str) -> bool {
    paths(plan).iter().any(|p| p.contains(part))
}

/// Asserts that `text` says each of `parts`.
#[track_caller]
fn assert_contains(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
}

fn ns() -> BTreeMap<String, String> {
    BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), "ml".to_string())])
}

/// What `/mutate`'s placement makes of `req`, its namespace looked up in
/// `namespaces`.
fn plan_in(set: &ProfileSet, req: &Request, namespaces: &dyn NamespaceLookup) -> Plan {
    plan_within(set, req, namespaces, None)
}

/// [`plan_in`], the pod kept to the sizes of `room` (budget narrowing).
fn plan_within(
    set: &ProfileSet,
    req: &Request,
    namespaces: &dyn NamespaceLookup,
    room: Option<&[&Sku]>,
) -> Plan {
    let object = req.object.as_ref().filter(|_| req.kind.kind == "Pod");
    let Some(pod) = object else {
        return super::plan(set, req, None);
    };
    let namespace = (req.namespace.as_deref().filter(|n| !n.is_empty()))
        .or(Some(crate::k8s::json::str_at(pod, "/metadata/namespace")))
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    let labels = crate::k8s::namespaces::with_name_label(
        namespace,
        labels_of(namespaces.namespace(namespace).as_deref()),
    );
    let facts = GpuFacts::of(pod, set.catalog(), set.gpu_resources());
    let placed = PodFacts {
        facts: &facts,
        namespace: Some(namespace),
        namespace_labels: &labels,
        room,
    };
    super::plan(set, req, Some(placed))
}

/// [`plan_in`] for a request whose namespace nobody knows.
fn plan(set: &ProfileSet, req: &Request) -> Plan {
    plan_in(set, req, &StaticNamespaces::new())
}

/// What `/mutate`'s placement makes of `pod` created in namespace `ml`,
/// whose labels are `labels`.
fn plan_labelled(set: &ProfileSet, pod: &Value, labels: &[(&str, &str)]) -> Plan {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let namespaces = StaticNamespaces::new().with("ml", labels);
    let req = Request::for_object(pod.clone(), Operation::Create, Some("ml"));
    plan_in(set, &req, &namespaces)
}

/// [`plan_labelled`] in a namespace without labels.
fn plan_pod(set: &ProfileSet, pod: &Value) -> Plan {
    plan_labelled(set, pod, &[])
}

/// Plans, applies, and checks that a second call returns no patch.
fn apply(set: &ProfileSet, pod: &Value) -> (Plan, Value) {
    let plan = plan_pod(set, pod);
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &plan.patch).unwrap();
    let again = plan_pod(set, &patched);
    assert!(again.patch.0.is_empty(), "patched again: {:?}", again.patch);
    (plan, patched)
}

fn paths(plan: &Plan) -> Vec<String> {
    plan.patch
        .0
        .iter()
        .map(|op| op.path().to_string())
        .collect()
}

fn required_terms(pod: &Value) -> Value {
    pod.at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .cloned()
        .unwrap_or(Value::Null)
}

fn preferred_terms(pod: &Value) -> Value {
    let at = pod.at("/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution");
    at.cloned().unwrap_or(Value::Null)
}

/// The profile [`plan_pod`] places `pod` with.
fn profile_of(set: &ProfileSet, pod: &Value) -> Option<String> {
    plan_pod(set, pod).profile
}

fn expr(key: &str, op: &str, values: &[&str]) -> Value {
    if values.is_empty() {
        json!({"key": key, "operator": op})
    } else {
        json!({"key": key, "operator": op, "values": values})
    }
}

fn accel_nvidia() -> Value {
    expr("kubernetes.azure.com/accelerator", "In", &["nvidia"])
}

fn nap_nvidia() -> Value {
    let key = "karpenter.azure.com/sku-gpu-manufacturer";
    expr(key, "In", &["nvidia"])
}

fn sku_gpu() -> Value {
    json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
}

#[test]
fn bare_gpu_pod_gets_toleration_affinity_and_parents_whole() {
    let (plan, patched) = apply(&shipped(), &gpu_pod(json!({})));
    assert_eq!(plan.profile.as_deref(), Some("aks-nvidia"));
    // A missing parent comes in one operation with everything under it.
    let whole = [
        "/spec/tolerations",
        "/spec/affinity",
        "/metadata/annotations",
    ];
    assert_eq!(paths(&plan), whole);
    assert_eq!(patched["spec"]["tolerations"], json!([sku_gpu()]));
    let both =
        json!([{"matchExpressions": [accel_nvidia()]}, {"matchExpressions": [nap_nvidia()]}]);
    assert_eq!(required_terms(&patched), both);
    let annotations = &patched["metadata"]["annotations"];
    assert_eq!(annotations[PROFILE_ANNOTATION], "aks-nvidia");
    let _: k8s_openapi::api::core::v1::Pod = serde_json::from_value(patched).unwrap();
}

#[test]
fn path_tokens_are_escaped() {
    let pod = gpu_pod(json!({}));
    let mut with_annotations = pod.clone();
    with_annotations["metadata"]["annotations"] = json!({"a/b": "c"});
    let plan = plan_pod(&shipped(), &with_annotations);
    let last = plan.patch.0.last().unwrap().path().to_string();
    assert_eq!(
        last,
        "/metadata/annotations/gpu-admission.io~1placement-profile"
    );
    assert!(!paths(&plan).contains(&"/metadata/annotations".to_string()));
}

#[test]
fn non_gpu_zero_and_bound_pods_get_no_patch() {
    let set = shipped();
    let cpu = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]}});
    assert!(plan_pod(&set, &cpu).patch.0.is_empty());
    let mut zero = gpu_pod(json!({}));
    zero["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("0");
    assert!(plan_pod(&set, &zero).patch.0.is_empty());
    let bound = gpu_pod(json!({"nodeName": "aks-gpu-12345-vmss000000"}));
    assert!(plan_pod(&set, &bound).patch.0.is_empty());
}

#[test]
fn plan_mutates_pods_on_create_only() {
    let set = shipped();
    let create = Request::for_object(gpu_pod(json!({})), Operation::Create, Some("ml"));
    assert!(!plan(&set, &create).patch.0.is_empty());
    let mut update = create.clone();
    update.operation = Operation::Update;
    update.old_object = update.object.clone();
    assert!(plan(&set, &update).patch.0.is_empty());
    let mut status = create.clone();
    status.sub_resource = Some("status".into());
    assert!(plan(&set, &status).patch.0.is_empty());
    let deployment = Request::for_object(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"template": gpu_pod(json!({}))}}),
        Operation::Create,
        Some("ml"),
    );
    assert!(plan(&set, &deployment).patch.0.is_empty());
    assert!(plan(&ProfileSet::default(), &create).patch.0.is_empty());
}

#[test]
fn amd_pods_get_the_amd_profile() {
    let mut pod = gpu_pod(json!({}));
    pod["spec"]["containers"][0]["resources"]["limits"] = json!({"amd.com/gpu": "8"});
    let (plan, patched) = apply(&shipped(), &pod);
    assert_eq!(plan.profile.as_deref(), Some("aks-amd"));
    let values = &required_terms(&patched)[0]["matchExpressions"][0]["values"];
    assert_eq!(values, &json!(["amd"]));
}

#[test]
fn mig_and_shared_resources_use_the_nvidia_profile() {
    for resource in ["nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"] {
        let mut pod = gpu_pod(json!({}));
        pod["spec"]["containers"][0]["resources"]["limits"] = json!({resource: "1"});
        let (plan, _) = apply(&shipped(), &pod);
        assert_eq!(plan.profile.as_deref(), Some("aks-nvidia"), "{resource}");
    }
}

#[test]
fn init_container_and_sidecar_gpu_requests_count() {
    let pod = gpu_pod(json!({
        "containers": [{"name": "app", "image": "busybox"}],
        "initContainers": [{"name": "warm", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    }));
    assert!(!plan_pod(&shipped(), &pod).patch.0.is_empty());
    let pod = gpu_pod(json!({
        "containers": [{"name": "app", "image": "busybox"}],
        "ephemeralContainers": [{"name": "dbg", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    }));
    assert!(plan_pod(&shipped(), &pod).patch.0.is_empty());
}

#[test]
fn toleration_with_same_key_value_effect_is_not_added() {
    let pod = gpu_pod(json!({"tolerations": [sku_gpu()]}));
    let (plan, patched) = apply(&shipped(), &pod);
    assert!(!touches(&plan, "/spec/tolerations"));
    assert_eq!(patched["spec"]["tolerations"], json!([sku_gpu()]));
}

/// An empty effect covers every effect; `Exists` covers every value of its
/// key, and with no key, every taint.
#[test]
fn a_toleration_that_covers_the_taint_is_not_added() {
    for toleration in [
        json!({"key": "sku", "operator": "Equal", "value": "gpu"}),
        json!({"key": "sku", "operator": "Exists"}),
        json!({"operator": "Exists"}),
    ] {
        let plan = plan_pod(&shipped(), &gpu_pod(json!({"tolerations": [toleration]})));
        assert!(!touches(&plan, "/spec/tolerations"), "{toleration}");
    }
}

#[test]
fn missing_toleration_is_appended_after_existing_ones() {
    let pod = gpu_pod(json!({"tolerations": [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoExecute"},
        {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
    ]}));
    let (plan, patched) = apply(&shipped(), &pod);
    assert!(paths(&plan).contains(&"/spec/tolerations/-".to_string()));
    assert_eq!(patched["spec"]["tolerations"].as_array().unwrap().len(), 3);
    assert_eq!(patched["spec"]["tolerations"][2], sku_gpu());
}

#[test]
fn extended_resource_toleration_is_kept_and_not_duplicated() {
    // What ExtendedResourceToleration adds before webhooks run.
    let ert = json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"});
    let pod = gpu_pod(json!({"tolerations": [ert.clone()]}));
    let (_, patched) = apply(&shipped(), &pod);
    assert_eq!(patched["spec"]["tolerations"], json!([ert, sku_gpu()]));
    // A profile for nvidia.com/gpu-tainted pools asks for the same toleration:
    // the plugin's one already covers it.
    let tainted = json!({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]});
    let plan = plan_pod(&only("gpu-taint", tainted), &pod);
    assert!(!touches(&plan, "/spec/tolerations"));
}

#[test]
fn requirement_is_added_to_every_existing_term() {
    let set = only("one", json!({}));
    let pod = terms_pod(json!([
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-1"])]},
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-2"])]}
    ]));
    let (plan, patched) = apply(&set, &pod);
    let replaced = paths(&plan)
        .iter()
        .any(|p| p.ends_with("/nodeSelectorTerms"));
    assert!(!replaced, "terms are not replaced");
    assert_eq!(
        required_terms(&patched),
        json!([
            {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-1"]), accel_nvidia()]},
            {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-2"]), accel_nvidia()]}
        ])
    );
}

#[test]
fn ored_profile_terms_combine_with_existing_terms_as_and() {
    let pod = terms_pod(json!([
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-1"])]},
        {"matchExpressions": [expr("karpenter.sh/capacity-type", "In", &["spot"])]}
    ]));
    let (_, patched) = apply(&shipped(), &pod);
    let zone = expr("topology.kubernetes.io/zone", "In", &["eastus-1"]);
    let spot = expr("karpenter.sh/capacity-type", "In", &["spot"]);
    // (zone or spot) and (accel or nap) = zone&accel, spot&accel, zone&nap, spot&nap
    assert_eq!(
        required_terms(&patched),
        json!([
            {"matchExpressions": [zone.clone(), accel_nvidia()]},
            {"matchExpressions": [spot.clone(), accel_nvidia()]},
            {"matchExpressions": [zone, nap_nvidia()]},
            {"matchExpressions": [spot, nap_nvidia()]}
        ])
    );
}

#[test]
fn a_term_that_already_says_the_requirement_is_left_alone() {
    let pod = terms_pod(json!([
        {"matchExpressions": [nap_nvidia(), expr("karpenter.azure.com/sku-gpu-name", "In", &["A100"])]},
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-1"])]}
    ]));
    let (plan, patched) = apply(&shipped(), &pod);
    assert!(!touches(&plan, "/nodeSelectorTerms/0"));
    let terms = required_terms(&patched);
    assert_eq!(terms[0], required_terms(&pod)[0]);
    assert_eq!(terms.as_array().unwrap().len(), 3);
}

#[test]
fn a_narrower_requirement_counts_as_saying_it() {
    let name = |values: &[&str]| json!([{"matchExpressions": [expr("karpenter.azure.com/sku-gpu-name", "In", values)]}]);
    let set = only(
        "one",
        json!({"requiredNodeSelectorTerms": name(&["A100", "H100"])}),
    );
    let plan = plan_pod(&set, &terms_pod(name(&["H100"])));
    assert!(!touches(&plan, "affinity"), "{:?}", paths(&plan));
}

#[test]
fn node_selector_that_already_selects_gpu_nodes_needs_no_affinity() {
    let pod = gpu_pod(json!({"nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"}}));
    let (plan, patched) = apply(&shipped(), &pod);
    assert!(!touches(&plan, "affinity"));
    assert_eq!(patched["spec"]["tolerations"], json!([sku_gpu()]));
}

#[test]
fn match_fields_only_terms_get_match_expressions() {
    // The shape the DaemonSet controller gives its pods.
    let fields = json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["aks-gpu-1"]}]});
    let pod = terms_pod(json!([fields.clone()]));
    let (plan, patched) = apply(&shipped(), &pod);
    assert!(paths(&plan).contains(
        &"/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions".to_string()
    ));
    let terms = required_terms(&patched);
    assert_eq!(terms[0]["matchFields"], fields["matchFields"]);
    assert_eq!(terms[0]["matchExpressions"], json!([accel_nvidia()]));
    assert_eq!(terms[1]["matchFields"], fields["matchFields"]);
    assert_eq!(terms[1]["matchExpressions"], json!([nap_nvidia()]));
}

#[test]
fn preferred_terms_and_pod_affinity_are_preserved() {
    let preferred = json!([{"weight": 10, "preference": {"matchExpressions": [expr("karpenter.sh/capacity-type", "In", &["spot"])]}}]);
    let pod_affinity = json!({"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}]});
    let anti = json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm":
        {"labelSelector": {"matchLabels": {"app": "trainer"}}, "topologyKey": "kubernetes.io/hostname"}}]});
    let pod = gpu_pod(json!({"affinity": {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred.clone()},
        "podAffinity": pod_affinity.clone(),
        "podAntiAffinity": anti.clone()
    }}));
    let (plan, patched) = apply(&shipped(), &pod);
    assert!(!paths(&plan).contains(&"/spec/affinity".to_string()));
    assert!(!paths(&plan).contains(&"/spec/affinity/nodeAffinity".to_string()));
    let a = &patched["spec"]["affinity"];
    assert_eq!(preferred_terms(&patched), preferred);
    assert_eq!(a["podAffinity"], pod_affinity);
    assert_eq!(a["podAntiAffinity"], anti);
    assert_eq!(required_terms(&patched).as_array().unwrap().len(), 2);
}

#[test]
fn profile_preferences_are_added_once() {
    let pref = json!({"weight": 20, "preference": {"matchExpressions": [expr("karpenter.sh/capacity-type", "In", &["on-demand"])]}});
    let set = only("p", json!({"preferredNodeSelectorTerms": [pref.clone()]}));
    let (_, patched) = apply(&set, &gpu_pod(json!({})));
    assert_eq!(preferred_terms(&patched), json!([pref.clone()]));
    // The pod already prefers the same nodes, with its own weight.
    let mut own = pref.clone();
    own["weight"] = json!(90);
    let pod = gpu_pod(
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own.clone()]}}}),
    );
    let (_, patched) = apply(&set, &pod);
    assert_eq!(preferred_terms(&patched), json!([own]));
}

#[test]
fn unknown_fields_survive() {
    let pod = gpu_pod(json!({
        "futureSchedulingField": {"x": 1},
        "affinity": {"nodeAffinity": {
            "x-vendor": true,
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-1"])], "x-term": "kept"}
            ]}
        }}
    }));
    let mut pod = pod;
    pod["spec"]["containers"][0]["x-container"] = json!("kept");
    pod["x-top"] = json!("kept");
    let (_, patched) = apply(&shipped(), &pod);
    assert_eq!(patched["x-top"], "kept");
    assert_eq!(patched["spec"]["futureSchedulingField"], json!({"x": 1}));
    assert_eq!(patched["spec"]["containers"][0]["x-container"], "kept");
    assert_eq!(
        patched.at("/spec/affinity/nodeAffinity/x-vendor"),
        Some(&json!(true))
    );
    let terms = required_terms(&patched);
    assert_eq!(terms[0]["x-term"], "kept");
    let why = "appended combinations copy the term";
    assert_eq!(terms[1]["x-term"], "kept", "{why}");
}

#[test]
fn null_fields_are_treated_as_absent() {
    let pod = gpu_pod(json!({"tolerations": null, "affinity": null}));
    let (_, patched) = apply(&shipped(), &pod);
    assert_eq!(patched["spec"]["tolerations"], json!([sku_gpu()]));
    assert_eq!(required_terms(&patched).as_array().unwrap().len(), 2);
    let pod = terms_pod(json!([]));
    let (_, patched) = apply(&shipped(), &pod);
    assert_eq!(required_terms(&patched).as_array().unwrap().len(), 2);
}

#[test]
fn malformed_pods_get_no_patch_and_no_panic() {
    for extra in [
        json!({"tolerations": "sku=gpu"}),
        json!({"affinity": []}),
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [null]}}}}),
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {}}}}}),
    ] {
        let pod = gpu_pod(extra.clone());
        assert!(plan_pod(&shipped(), &pod).patch.0.is_empty(), "{extra}");
    }
    assert!(plan_pod(&shipped(), &json!("pod")).patch.0.is_empty());
    assert!(plan_pod(&shipped(), &json!({"spec": 3})).patch.0.is_empty());
}

#[test]
fn highest_priority_wins_then_name() {
    let a = simple("a-low", 0, json!({}));
    let b = simple("b-high", 10, json!({}));
    let c = simple("c-high", 10, json!({}));
    let set = ProfileSet::new(vec![a, c, b]).unwrap();
    let names: Vec<&str> = set.profiles().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["b-high", "c-high", "a-low"]);
    assert_eq!(profile_of(&set, &gpu_pod(json!({}))), Some("b-high".into()));
}

#[test]
fn selectors_choose_the_profile() {
    let team = simple(
        "team-ml",
        10,
        json!({
            "namespaceSelector": {"matchLabels": {"team": "ml"}},
            "podSelector": {"matchExpressions": [{"key": "gpu-admission.io/placement", "operator": "NotIn", "values": ["skip"]}]}
        }),
    );
    let set = ProfileSet::new(vec![team, profile(NVIDIA)]).unwrap();
    let pod = gpu_pod(json!({}));
    let ml = [("team", "ml")];
    assert_eq!(
        plan_labelled(&set, &pod, &ml).profile,
        Some("team-ml".into())
    );
    assert_eq!(profile_of(&set, &pod), Some("aks-nvidia".into()));
    let mut skip = pod.clone();
    skip["metadata"]["labels"] = json!({"gpu-admission.io/placement": "skip"});
    assert_eq!(
        plan_labelled(&set, &skip, &ml).profile,
        Some("aks-nvidia".into())
    );
}

#[test]
fn namespace_labels_come_from_the_lookup() {
    struct One;
    impl NamespaceLookup for One {
        fn namespace(&self, name: &str) -> Option<Arc<Value>> {
            (name == "ml")
                .then(|| Arc::new(json!({"metadata": {"name": "ml", "labels": {"team": "ml"}}})))
        }
    }
    let set = only(
        "team-ml",
        json!({"namespaceSelector": {"matchLabels": {"team": "ml", NAMESPACE_NAME_LABEL: "ml"}}}),
    );
    let req = Request::for_object(gpu_pod(json!({})), Operation::Create, Some("ml"));
    assert_eq!(plan_in(&set, &req, &One).profile, Some("team-ml".into()));
    let why = "without a lookup only the name label is known";
    assert_eq!(plan(&set, &req).profile, None, "{why}");
}

#[test]
fn duplicate_profile_names_are_rejected() {
    let e =
        ProfileSet::new(vec![simple("x", 0, json!({})), simple("x", 1, json!({}))]).unwrap_err();
    assert_eq!(e.field, "metadata.name");
    assert_eq!(e.profile.as_deref(), Some("x"));
}

#[test]
fn profile_resources_extend_detection() {
    let fpga = simple("fpga", 0, json!({"resources": ["example.com/fpga"]}));
    let set = ProfileSet::new(vec![fpga]).unwrap();
    assert!(set.gpu_resources().matches("example.com/fpga"));
    assert!(set.gpu_resources().matches("nvidia.com/gpu"));
    let mut pod = gpu_pod(json!({}));
    pod["spec"]["containers"][0]["resources"]["limits"] = json!({"example.com/fpga": "1"});
    assert_eq!(plan_pod(&set, &pod).profile.as_deref(), Some("fpga"));
    // nvidia.com/gpu is detected but no profile serves it.
    assert!(plan_pod(&set, &gpu_pod(json!({}))).patch.0.is_empty());
}

#[test]
fn node_selector_for_non_gpu_nodes_conflicts() {
    let pod = gpu_pod(json!({"nodeSelector": {"kubernetes.azure.com/accelerator": "none"}}));
    assert!(plan_pod(&shipped(), &pod).patch.0.is_empty());
    let messages = conflicts(&shipped(), &pod, &ns());
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_contains(
        &messages[0],
        &[
            "nodeSelector kubernetes.azure.com/accelerator=none",
            "aks-nvidia",
            "kubernetes.azure.com/accelerator In [nvidia]",
        ],
    );
}

#[test]
fn cpu_agentpool_conflicts_with_a_pool_requirement() {
    let pool = expr("kubernetes.azure.com/agentpool", "In", &["gpunp"]);
    let set = only(
        "gpu-pool",
        json!({"requiredNodeSelectorTerms": [{"matchExpressions": [pool]}]}),
    );
    let pod = terms_pod(
        json!([{"matchExpressions": [expr("kubernetes.azure.com/agentpool", "In", &["nodepool1"])]}]),
    );
    assert!(plan_pod(&set, &pod).patch.0.is_empty());
    let m = conflicts(&set, &pod, &ns()).join("\n");
    assert_contains(
        &m,
        &[
            "required node affinity term 0 (kubernetes.azure.com/agentpool In [nodepool1])",
            "kubernetes.azure.com/agentpool In [gpunp]",
            "gpu-pool",
        ],
    );
}

#[test]
fn conflict_needs_every_alternative_to_be_excluded() {
    // One of the pod's terms can still reach GPU nodes: patch, no conflict.
    let pod = terms_pod(json!([
        {"matchExpressions": [expr("kubernetes.azure.com/accelerator", "In", &["none"])]},
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-1"])]}
    ]));
    assert!(conflicts(&shipped(), &pod, &ns()).is_empty());
    assert!(!plan_pod(&shipped(), &pod).patch.0.is_empty());
    // NotIn the GPU value in one term, DoesNotExist on the NAP key in the same term.
    let pod = terms_pod(json!([{"matchExpressions": [
        expr("kubernetes.azure.com/accelerator", "NotIn", &["nvidia"]),
        expr("karpenter.azure.com/sku-gpu-manufacturer", "DoesNotExist", &[])
    ]}]));
    let m = conflicts(&shipped(), &pod, &ns()).join("\n");
    assert_contains(
        &m,
        &[
            "kubernetes.azure.com/accelerator NotIn [nvidia]",
            "karpenter.azure.com/sku-gpu-manufacturer DoesNotExist",
        ],
    );
    assert!(plan_pod(&shipped(), &pod).patch.0.is_empty());
}

#[test]
fn a_selection_no_node_can_meet_is_named_whole() {
    const SIZE: &str = "node.kubernetes.io/instance-type";
    let a100 = json!({SIZE: "Standard_NC24ads_A100_v4"});
    let t4 = |values: &[&str]| json!({"matchExpressions": [expr(SIZE, "In", values)]});
    // Kueue's two flavors merged: nodeSelector one size, affinity another.
    let mut pod = terms_pod(json!([t4(&["Standard_NC4as_T4_v3"])]));
    pod["spec"]["nodeSelector"] = a100.clone();
    assert!(plan_pod(&shipped(), &pod).patch.0.is_empty());
    let m = conflicts(&shipped(), &pod, &ns()).join("\n");
    assert_contains(
        &m,
        &[
            "contradicts itself",
            "nodeSelector node.kubernetes.io/instance-type=Standard_NC24ads_A100_v4 and required node affinity term 0 (node.kubernetes.io/instance-type In [Standard_NC4as_T4_v3])",
            "never schedule",
        ],
    );
    // Every ORed term clashing: each named.
    let mut pod = terms_pod(json!([
        t4(&["Standard_NC4as_T4_v3"]),
        t4(&["Standard_NC8as_T4_v3"])
    ]));
    pod["spec"]["nodeSelector"] = a100.clone();
    let m = conflicts(&shipped(), &pod, &ns()).join("\n");
    assert_contains(&m, &["term 0", "term 1", "each of its ORed required terms"]);
    // One term the nodeSelector meets: no contradiction.
    let mut pod = terms_pod(json!([
        t4(&["Standard_NC4as_T4_v3"]),
        t4(&["Standard_NC24ads_A100_v4"])
    ]));
    pod["spec"]["nodeSelector"] = a100;
    assert!(conflicts(&shipped(), &pod, &ns()).is_empty());
    assert!(!plan_pod(&shipped(), &pod).patch.0.is_empty());
}

#[test]
fn pods_that_fit_have_no_conflicts() {
    for pod in [
        gpu_pod(json!({})),
        gpu_pod(json!({"nodeSelector": {"kubernetes.azure.com/agentpool": "gpunp"}})),
        gpu_pod(json!({"nodeSelector": {"karpenter.azure.com/sku-gpu-manufacturer": "nvidia"}})),
    ] {
        assert!(conflicts(&shipped(), &pod, &ns()).is_empty(), "{pod}");
    }
    let cpu = json!({"spec": {"nodeSelector": {"kubernetes.azure.com/accelerator": "none"}, "containers": [{"name": "c"}]}});
    assert!(conflicts(&shipped(), &cpu, &ns()).is_empty());
}

#[test]
fn shipped_profiles_load() {
    let nvidia = profile(NVIDIA);
    assert_eq!(nvidia.name, "aks-nvidia");
    assert_eq!(nvidia.tolerations[0].to_json(), sku_gpu());
    assert_eq!(nvidia.required.len(), 2);
    let taint = nvidia.node_pool_taint.as_ref().unwrap();
    assert_eq!(taint.to_string(), "sku=gpu:NoSchedule");
    let amd = profile(AMD);
    assert!(amd.resources.matches("amd.com/gpu"));
    assert!(!amd.resources.matches("nvidia.com/gpu"));
}

#[test]
fn only_requirements_a_term_lacks_are_added() {
    let linux = expr("kubernetes.io/os", "In", &["linux"]);
    let two = json!({"requiredNodeSelectorTerms": [{"matchExpressions": [accel_nvidia(), linux.clone()]}]});
    let set = only("two", two);
    let pod = terms_pod(json!([{"matchExpressions": [accel_nvidia()]}]));
    let (_, patched) = apply(&set, &pod);
    let want = json!([{"matchExpressions": [accel_nvidia(), linux]}]);
    assert_eq!(required_terms(&patched), want);
}

#[test]
fn plan_finds_the_namespace_when_the_request_has_none() {
    let only_ml = json!({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "ml"}}});
    let set = only("only-ml", only_ml);
    let mut req = Request::for_object(gpu_pod(json!({})), Operation::Create, None);
    req.namespace = None;
    let from_metadata = plan(&set, &req).profile;
    assert_eq!(
        from_metadata,
        Some("only-ml".into()),
        "from metadata.namespace"
    );
    if let Some(pod) = req.object.as_mut() {
        pod["metadata"].as_object_mut().unwrap().remove("namespace");
    }
    assert_eq!(plan(&set, &req).profile, None, "falls back to default");
}

#[test]
fn empty_terms_stay_empty() {
    // An empty term matches no node; adding requirements would revive it.
    let pod = terms_pod(json!([
        {"matchExpressions": []},
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "In", &["eastus-1"])]}
    ]));
    let (_, patched) = apply(&shipped(), &pod);
    let terms = required_terms(&patched);
    assert_eq!(terms[0], json!({"matchExpressions": []}));
    assert_eq!(terms.as_array().unwrap().len(), 3);
    assert!(conflicts(&shipped(), &pod, &ns()).is_empty());
}

#[test]
fn detected_resources_can_replace_the_defaults() {
    let set = shipped().with_gpu_resources(GpuResources::new(["example.com/fpga"]).unwrap());
    let r = set.gpu_resources();
    assert!(r.matches("example.com/fpga"));
    assert!(r.matches("nvidia.com/gpu"), "profile resources stay");
    let bare =
        ProfileSet::default().with_gpu_resources(GpuResources::new(["example.com/fpga"]).unwrap());
    assert!(!bare.gpu_resources().matches("nvidia.com/gpu"));
}

/// Budget narrowing: the sizes with room replace the tier's, and every
/// required term the pod has is intersected with them (never widened);
/// a pod none of whose sizes has room is placed as without; placing the
/// placed pod again adds nothing.
#[test]
fn sizes_with_room_narrow_every_required_term_and_widen_none() {
    let set = shipped();
    let [a100, h100, h100_2] = [
        "Standard_NC24ads_A100_v4",
        "Standard_NC40ads_H100_v5",
        "Standard_NC80adis_H100_v5",
    ];
    let room: Vec<&Sku> = [h100, h100_2]
        .iter()
        .filter_map(|n| set.catalog().get(n))
        .collect();
    let place = |pod: &Value, room: Option<&[&Sku]>| {
        let req = Request::for_object(pod.clone(), Operation::Create, Some("ml"));
        plan_within(&set, &req, &StaticNamespaces::new(), room)
    };
    // The sizes each required term of `pod` allows.
    let per_term = |pod: &Value| -> Vec<Vec<String>> {
        let terms = required_terms(pod);
        (terms.as_array().into_iter().flatten())
            .map(|t| {
                let t = Term::from_value(t);
                let skus = set.catalog().skus().iter();
                skus.filter(|s| t.requirements.iter().all(|r| r.matches_sku(s)))
                    .map(|s| s.name.clone())
                    .collect()
            })
            .collect()
    };
    let models = expr("karpenter.azure.com/sku-gpu-name", "In", &["A100", "H100"]);
    let sizes = expr("node.kubernetes.io/instance-type", "In", &[a100, h100_2]);
    let pod = terms_pod(json!([{"matchExpressions": [models]}, {"matchExpressions": [sizes]}]));
    let plan = place(&pod, Some(&room));
    let mut placed = pod.clone();
    json_patch::patch(&mut placed, &plan.patch).unwrap();
    // Each term (and the profile's second alternative appended to it) is
    // kept to the sizes with room it allowed before.
    let (both, one) = (
        vec![h100.to_string(), h100_2.to_string()],
        vec![h100_2.to_string()],
    );
    assert_eq!(per_term(&placed), [both.clone(), one.clone(), both, one]);
    assert!(place(&placed, Some(&room)).patch.0.is_empty());
    assert!(place(&placed, None).patch.0.is_empty());
    // Pinned to an A100: no size with room to keep it to, placed as without.
    let pinned = gpu_pod(json!({"nodeSelector": {"node.kubernetes.io/instance-type": a100}}));
    assert_eq!(
        place(&pinned, Some(&room)).patch,
        place(&pinned, None).patch
    );
}

/// The tier's narrowing of a profile's terms, worked out when the tiers
/// were set, is what working it out for each pod gives: for pods of every
/// GPU maker, with and without a node selection of their own, in every
/// tier with and without the premium opt-in.
#[test]
fn tier_narrowing_looked_up_is_tier_narrowing_worked_out() {
    use tiers::{PREMIUM_LABEL, TIER_LABEL};
    let tiers = SkuTiers::from_config_map(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gpu-sku-allowlist", "namespace": "gpu-admission"},
        "data": {
            "default": "Standard_NC4as_T4_v3, NV36ads_A10_v5, Standard_ND96isr_MI300X_v5",
            "standard": "Standard_NC24ads_A100_v4, Standard_NC4as_T4_v3",
            "amd": "Standard_ND96isr_MI300X_v5",
            "premium": "*"
        }
    }))
    .unwrap();
    let set = shipped().with_tiers(tiers);
    let limits = |resources: &[&str]| {
        let limits: serde_json::Map<String, Value> = resources
            .iter()
            .map(|r| (r.to_string(), json!("1")))
            .collect();
        json!({"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]})
    };
    // A pod asking for one nvidia.com/gpu, with `selection` in its spec.
    let selecting = |selection: Value| {
        let mut spec = limits(&["nvidia.com/gpu"]);
        spec.as_object_mut()
            .unwrap()
            .extend(selection.as_object().unwrap().clone());
        spec
    };
    let pods = [
        limits(&["nvidia.com/gpu"]),
        limits(&["nvidia.com/mig-1g.10gb"]),
        limits(&["amd.com/gpu"]),
        limits(&["nvidia.com/gpu", "amd.com/gpu"]),
        limits(&["microsoft.com/directx"]),
        // Own selections: computed per pod, not looked up.
        selecting(
            json!({"nodeSelector": {"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"}}),
        ),
        selecting(json!({"nodeSelector": {"topology.kubernetes.io/zone": "eastus-1"}})),
        selecting(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": []}}}}),
        ),
    ];
    let namespaces = [
        vec![],
        vec![(TIER_LABEL, "standard")],
        vec![(TIER_LABEL, "standard"), (PREMIUM_LABEL, "true")],
        vec![(TIER_LABEL, "amd")],
        vec![(TIER_LABEL, "premium")],
        vec![(TIER_LABEL, "premium"), (PREMIUM_LABEL, "true")],
    ];
    let mut narrowed = 0;
    for spec in &pods {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"}, "spec": spec});
        let request = pod_gpu_request(spec, set.gpu_resources());
        for labels in &namespaces {
            let labels: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let Some(profile) = applicable_profile(&set, &pod, &request, &labels) else {
                continue;
            };
            let looked_up = tier_terms(&set, profile, &pod, &request, &labels, None);
            let worked_out = set.tier_allowed(&labels).and_then(|allowed| {
                tiers::narrow(&profile.required, spec, &request, &allowed, set.catalog())
            });
            let (looked_up, worked_out) = (looked_up.as_deref(), worked_out.as_deref());
            assert_eq!(looked_up, worked_out, "{spec} in {labels:?}");
            narrowed += usize::from(worked_out.is_some());
        }
    }
    assert!(narrowed > 10, "the cases narrow something: {narrowed}");
}

#[test]
fn gpus_are_hidden_by_default_only_with_the_infrastructure_lists() {
    let agent = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent", "namespace": "ml"},
        "spec": {
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "containers": [{"name": "agent", "image": "fluent/fluent-bit:3.1",
                "envFrom": [{"secretRef": {"name": "outputs"}}]}]
        }
    });
    let req = Request::for_object(agent.clone(), Operation::Create, Some("ml"));
    // No lists loaded: GPUs hidden in GPU pods only, as before.
    assert!(plan(&shipped(), &req).patch.0.is_empty());
    let lists = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gpu-node-isolation", "namespace": "gpu-admission"},
        "data": {"exemptNamespaces": "gpu-operator",
                 "infrastructureImages": "nvcr.io/nvidia/k8s-device-plugin"}});
    let set = shipped().with_infrastructure(Infrastructure::from_config_map(&lists).unwrap());
    let hidden = plan(&set, &req);
    assert_eq!(hidden.profile, None, "hidden, not placed");
    let mut patched = agent.clone();
    json_patch::patch(&mut patched, &hidden.patch).unwrap();
    let void = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]);
    assert_eq!(patched.at("/spec/containers/0/env"), Some(&void));
    // Idempotent.
    let again = Request::for_object(patched, Operation::Create, Some("ml"));
    assert!(plan(&set, &again).patch.0.is_empty());
    // In an infrastructure namespace, and for a pod aimed nowhere: nothing.
    let mut operator = agent.clone();
    operator["metadata"]["namespace"] = json!("gpu-operator");
    let req = Request::for_object(operator, Operation::Create, Some("gpu-operator"));
    assert!(plan(&set, &req).patch.0.is_empty());
    let mut web = agent;
    web["spec"].as_object_mut().unwrap().remove("tolerations");
    let req = Request::for_object(web, Operation::Create, Some("ml"));
    assert!(plan(&set, &req).patch.0.is_empty());
}
