use super::*;
use crate::gpu::GpuResources;
use crate::k8s::StaticClaims;
use serde_json::json;

fn budget(spec: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": KIND,
           "metadata": {"name": "team-nlp", "namespace": "nlp"}, "spec": spec})
}

fn pod(gpus: &str, models: &[&str]) -> Value {
    let mut spec = json!({"containers": [{"name": "train", "image": "pytorch",
        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]});
    if !models.is_empty() {
        spec["nodeSelector"] = json!(null);
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-name",
                "operator": "In", "values": models}]}]}}});
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "nlp"}, "spec": spec})
}

fn charge_of(pod: &Value) -> Option<Charge> {
    let catalog = Catalog::embedded();
    charge(
        &GpuFacts::of(pod, &catalog, &GpuResources::default()),
        &catalog,
    )
}

#[test]
fn a_budget_reads_its_limits_and_selector_and_refuses_what_limits_nothing() {
    let read_ok = read(&budget(
        json!({"models": {"A100": 8, "T4": 16}, "total": 20,
        "namespaceSelector": {"matchLabels": {"team": "nlp"}}}),
    ))
    .unwrap();
    assert_eq!(read_ok.models["A100"], 8);
    assert_eq!(read_ok.total, Some(20));
    let team = BTreeMap::from([("team".to_string(), "nlp".to_string())]);
    assert!(read_ok.covers("nlp-eval", &team));
    assert!(
        !read_ok.covers("nlp", &BTreeMap::new()),
        "the selector decides, not the namespace"
    );
    let own = read(&budget(json!({"sizes": {"Standard_NC4as_T4_v3": 2}}))).unwrap();
    assert!(own.covers("nlp", &BTreeMap::new()) && !own.covers("web", &team));

    let fields = |spec: Value| -> Vec<String> {
        read(&budget(spec))
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect()
    };
    assert_eq!(fields(json!({})), ["spec"]);
    assert_eq!(
        fields(json!({"models": {"A100": -1}})),
        ["spec.models.A100"]
    );
    assert_eq!(
        fields(json!({"total": 1, "namespaceSelector": {"matchExpressions":
        [{"key": "team", "operator": "In"}]}})),
        ["spec.namespaceSelector.matchExpressions[0].values"]
    );
    assert!(
        read(&budget(json!({"total": 1, "hours": 3}))).is_err(),
        "unknown fields are refused"
    );
}

#[test]
fn a_pod_is_charged_as_the_most_expensive_model_its_selection_allows() {
    let both = charge_of(&pod("2", &["A100", "T4"])).unwrap();
    assert_eq!((both.model.as_str(), both.gpus), ("A100", 2));
    assert!(both.size.contains("A100"), "{both:?}");
    let t4 = charge_of(&pod("1", &["T4"])).unwrap();
    assert_eq!(t4.model, "T4");
    assert_eq!(charge_of(&pod("0", &["T4"])), None, "no GPU, no charge");
    // Nothing narrows it: the most expensive NVIDIA size of the catalog.
    let any = charge_of(&pod("1", &[])).unwrap();
    let catalog = Catalog::embedded();
    let top = (catalog.skus().iter())
        .filter(|s| s.manufacturer == "nvidia")
        .max_by(|a, b| costlier(a, b));
    assert_eq!(any.size, top.unwrap().name);
    assert!(catalog.get(&any.size).unwrap().premium);
}

#[test]
fn a_bound_pod_is_charged_as_the_size_of_its_node_when_the_catalog_has_it_for_its_maker() {
    let catalog = Catalog::embedded();
    let facts = GpuFacts::of(
        &pod("2", &["A100", "T4"]),
        &catalog,
        &GpuResources::default(),
    );
    let on = |landed| charge_on(&facts, &catalog, landed).unwrap();
    let t4 = on(Some("NC4as_T4_v3"));
    assert_eq!(
        (t4.model.as_str(), t4.size.as_str(), t4.gpus),
        ("T4", "Standard_NC4as_T4_v3", 2)
    );
    // Not bound, a size the catalog does not list, another maker's: as
    // its selection allows.
    let selected = charge(&facts, &catalog).unwrap();
    assert_eq!(selected.model, "A100");
    for landed in [
        None,
        Some("Standard_D4s_v5"),
        Some("Standard_ND96isr_MI300X_v5"),
    ] {
        assert_eq!(on(landed), selected, "{landed:?}");
    }
}

#[test]
fn offline_a_pod_bound_to_a_node_among_the_objects_counts_against_its_size() {
    let bound = |node: &str| {
        let mut bound = pod("1", &["A100", "T4"]);
        bound["spec"]["nodeName"] = json!(node);
        bound
    };
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "aks-t4-1",
        "labels": {"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"}}});
    let budget = budget(json!({"models": {"A100": 4, "T4": 4}}));
    let (claiming, template) = claiming_pod(2);
    let objects = [
        &budget,
        &node,
        &bound("aks-t4-1"),
        &bound("unknown"),
        &claiming,
    ];
    let catalog = Catalog::embedded();
    let namespaces = crate::k8s::StaticNamespaces::new();
    let mut claims = StaticClaims::new();
    claims.insert(&template, "default");
    let budgets = StaticBudgets::of_objects(
        &objects,
        &namespaces,
        &claims,
        None,
        &catalog,
        &GpuResources::default(),
    );
    let used = &budgets.standings()[0].used;
    // The claiming pod's 2 GPUs are held as A100s, as admission counts them.
    assert_eq!(
        (held_of(&used.models, "T4"), held_of(&used.models, "A100")),
        (1, 3)
    );
}

/// A pod in `nlp` allowed on A100s only that asks for no GPU resource
/// but `gpus` GPUs through the claim made from ResourceClaimTemplate
/// `two-gpus` (also returned).
fn claiming_pod(gpus: u64) -> (Value, Value) {
    let mut claiming = pod("0", &["A100"]);
    claiming["spec"]["resourceClaims"] =
        json!([{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]);
    claiming["spec"]["containers"][0]["resources"] = json!({"claims": [{"name": "gpu"}]});
    let template = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": "nlp"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": gpus}}]}}}});
    (claiming, template)
}

#[test]
fn a_pod_claiming_gpus_through_dra_is_charged_with_them_where_its_claims_are_known() {
    let (claiming, template) = claiming_pod(2);
    let (catalog, resources) = (Catalog::embedded(), GpuResources::default());
    let mut claims = StaticClaims::new();
    let charged = |claims: &StaticClaims, landed| {
        charge_landed(&claiming, landed, None, claims, &catalog, &resources)
    };
    assert_eq!(charged(&claims, None), None, "its claim not known: no GPU");
    claims.insert(&template, "default");
    let charge = charged(&claims, None).unwrap();
    assert_eq!((charge.model.as_str(), charge.gpus), ("A100", 2));
    let landed = charged(&claims, Some("Standard_NC48ads_A100_v4")).unwrap();
    assert_eq!(
        (landed.size.as_str(), landed.gpus),
        ("Standard_NC48ads_A100_v4", 2)
    );
}

/// GPUs claimed through an AMD device class are AMD's: a pod bound to an
/// MI300X node counts against MI300X, not the NVIDIA sizes it pins.
#[test]
fn gpus_claimed_through_an_amd_device_class_are_charged_as_amd() {
    let (claiming, template) = claiming_pod(1);
    let text = template
        .to_string()
        .replace("gpu.nvidia.com", "gpu.amd.com");
    let template: Value = serde_json::from_str(&text).unwrap();
    let (catalog, mut resources) = (Catalog::embedded(), GpuResources::default());
    resources.insert_device_class("gpu.amd.com").unwrap();
    let mut claims = StaticClaims::new();
    claims.insert(&template, "default");
    let landed = Some("Standard_ND96isr_MI300X_v5");
    let charge = charge_landed(&claiming, landed, None, &claims, &catalog, &resources).unwrap();
    assert_eq!((charge.model.as_str(), charge.gpus), ("MI300X", 1));
}

fn fixed(spec: Value, held: &[(&str, i64)]) -> StaticBudgets {
    let mut used = Usage::default();
    for (model, gpus) in held {
        let charge = Charge {
            model: model.to_string(),
            size: String::new(),
            gpus: *gpus,
        };
        used.add(&charge, 1);
    }
    let budget = Arc::new(read(&budget(spec)).unwrap());
    StaticBudgets::new(vec![Standing { budget, used }])
}

/// A100s the budgets of `lookup` hold.
fn a100s(lookup: &StaticBudgets) -> i64 {
    lookup.standings()[0]
        .used
        .models
        .get("A100")
        .copied()
        .unwrap_or(0)
}

fn ask(model: &str, gpus: i64, replicas: i64, prefix: &str) -> Ask {
    let charge = Charge {
        model: model.into(),
        size: format!("Standard_{model}"),
        gpus,
    };
    Ask {
        prefix: prefix.into(),
        charge,
        replicas,
    }
}

#[test]
fn a_pod_past_a_limit_is_denied_naming_the_budget_model_and_what_to_do() {
    let lookup = fixed(
        json!({"models": {"A100": 8, "T4": 16}}),
        &[("A100", 7), ("T4", 4)],
    );
    let labels = BTreeMap::new();
    let verdict = judge(
        &lookup,
        "nlp",
        &labels,
        &[ask("A100", 2, 1, "")],
        Some("big"),
    );
    assert_eq!(verdict.denials.len(), 1, "{verdict:?}");
    let denial = &verdict.denials[0];
    for part in [
        "GpuBudget nlp/team-nlp allows 8 A100 GPUs held at once",
        "7/8 are held",
        "this pod asks for 2 more",
        "counted as A100",
        "(T4: 12 left)",
        "ask the budget's owner",
    ] {
        assert!(denial.contains(part), "{part:?} not in {denial}");
    }
    assert_eq!(a100s(&lookup), 7, "a denied pod is not recorded");

    let verdict = judge(
        &lookup,
        "nlp",
        &labels,
        &[ask("A100", 1, 1, "")],
        Some("fits"),
    );
    assert_eq!(verdict, Verdict::default());
    assert_eq!(a100s(&lookup), 8, "the pod admitted now holds its GPU");
    // A dry run (no name given) is judged and not recorded.
    let full = judge(&lookup, "nlp", &labels, &[ask("A100", 1, 1, "")], None);
    assert!(full.denials[0].contains("8/8 are held"), "{full:?}");
    assert_eq!(a100s(&lookup), 8);
    let web = BTreeMap::new();
    let elsewhere = judge(&lookup, "web", &web, &[ask("A100", 9, 1, "")], Some("w"));
    assert_eq!(elsewhere, Verdict::default(), "no budget covers web");
    assert_eq!(a100s(&lookup), 8);
}

#[test]
fn a_template_is_warned_when_its_replicas_cannot_all_fit_and_denied_when_one_pod_cannot() {
    let lookup = fixed(json!({"models": {"T4": 16}, "total": 10}), &[("T4", 4)]);
    let labels = BTreeMap::new();
    let warned = judge(
        &lookup,
        "nlp",
        &labels,
        &[ask("T4", 2, 5, "Deployment serve: ")],
        None,
    );
    assert!(warned.denials.is_empty(), "{warned:?}");
    assert_eq!(warned.warnings.len(), 1, "{warned:?}");
    assert!(warned.warnings[0]
        .starts_with("Deployment serve: GpuBudget nlp/team-nlp allows 10 GPUs in total"));
    assert!(
        warned.warnings[0].contains("3 of 5 replicas of 2 GPUs each fit"),
        "{warned:?}"
    );
    let denied = judge(
        &lookup,
        "nlp",
        &labels,
        &[ask("T4", 7, 1, "Job big: ")],
        None,
    );
    assert!(
        denied.denials[0].contains("one pod asks for 7 more"),
        "{denied:?}"
    );
}

#[test]
fn usage_adds_and_takes_away_per_model_size_and_total() {
    let mut used = Usage::default();
    let a100 = Charge {
        model: "A100".into(),
        size: "Standard_NC24ads_A100_v4".into(),
        gpus: 2,
    };
    used.add(&a100, 3);
    used.add(&a100, -1);
    assert_eq!(
        (
            used.models["A100"],
            used.sizes["Standard_NC24ads_A100_v4"],
            used.total
        ),
        (4, 4, 4)
    );
    used.add(&a100, -2);
    assert_eq!(used, Usage::default(), "nothing held leaves no key behind");
}

#[test]
fn the_sizes_with_room_are_those_a_pod_counted_as_each_would_fit_and_nothing_is_recorded() {
    let lookup = fixed(json!({"models": {"A100": 8, "H100": 4}}), &[("A100", 7)]);
    let catalog = Catalog::embedded();
    let labels = BTreeMap::new();
    let room = |ns: &str, gpus: &str, models: &[&str]| {
        let facts = GpuFacts::of(&pod(gpus, models), &catalog, &GpuResources::default());
        with_room(&lookup, ns, &labels, &facts, &catalog)
    };
    let narrowed = room("nlp", "2", &["A100", "H100"]).unwrap();
    let names: Vec<&str> = narrowed.sizes.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"Standard_NC40ads_H100_v5"), "{names:?}");
    assert!(narrowed.sizes.iter().all(|s| s.gpu_model == "H100"));
    assert_eq!(
        narrowed.warning,
        format!("GpuBudget nlp/team-nlp has no room on A100 for this pod's 2 GPUs; its node affinity was narrowed to the sizes with room: H100 ({})", names.join(", "))
    );
    assert_eq!(room("nlp", "1", &["A100", "H100"]), None, "both fit");
    assert_eq!(room("nlp", "5", &["A100", "H100"]), None, "neither fits");
    assert_eq!(room("nlp", "2", &["A100"]), None, "no size fits");
    assert_eq!(room("web", "2", &["A100", "H100"]), None, "no budget");
    assert_eq!(a100s(&lookup), 7, "nothing recorded");
    // A size held in full: the other sizes of its model have room.
    let big = "Standard_ND96amsr_A100_v4";
    let budget = Arc::new(read(&budget(json!({"sizes": {big: 8}}))).unwrap());
    let mut used = Usage::default();
    used.add(&charge_as(catalog.get(big), 8), 1);
    let lookup = StaticBudgets::new(vec![Standing { budget, used }]);
    let facts = GpuFacts::of(&pod("1", &["A100"]), &catalog, &GpuResources::default());
    let narrowed = with_room(&lookup, "nlp", &labels, &facts, &catalog).unwrap();
    assert!(narrowed
        .sizes
        .iter()
        .all(|s| s.gpu_model == "A100" && s.name != big));
    assert!(narrowed
        .warning
        .starts_with("GpuBudget nlp/team-nlp has no room on A100 for this pod's 1 GPU;"));
}
