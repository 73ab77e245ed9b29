use super::*;
use crate::budgets::{judge, Ask};
use crate::cluster::watch::{State as WatchState, Status};
use serde_json::json;

fn cache(ttl: Duration) -> ClusterBudgets {
    let cache = ClusterBudgets::with_ttl(
        Arc::new(crate::k8s::StaticNamespaces::default()),
        "gpu-admission",
        ttl,
    );
    let (_, status) = tokio::sync::watch::channel(Status {
        synced: true,
        state: WatchState::Watching,
    });
    let _ = cache.shared.pods.set(Watched::from(status));
    cache
}

fn a100(gpus: i64) -> Charge {
    Charge {
        model: "A100".into(),
        size: "Standard_NC24ads_A100_v4".into(),
        gpus,
    }
}

/// Every pod reads as `gpus` A100s, from its `gpus` annotation; bound to
/// a node of known size, as `gpus` T4s of that size.
fn reader() -> PodReader {
    Arc::new(|pod: &Value, landed: Option<&str>| {
        let gpus: i64 = str_at(pod, "/metadata/annotations/gpus").parse().ok()?;
        Some(match landed {
            Some(size) => Charge {
                model: "T4".into(),
                size: size.into(),
                gpus,
            },
            None => a100(gpus),
        })
    })
}

fn pod(name: &str, gpus: i64, node: &str, phase: &str) -> Value {
    json!({"metadata": {"namespace": "nlp", "name": name, "uid": format!("uid-{name}"),
                        "annotations": {"gpus": gpus.to_string()}},
           "spec": {"nodeName": node}, "status": {"phase": phase}})
}

fn budget_event(cache: &ClusterBudgets, limit: i64) {
    let budget = json!({"metadata": {"namespace": "nlp", "name": "team"}, "spec": {"models": {"A100": limit}}});
    let shared = &cache.shared;
    shared
        .lock()
        .budgets
        .take(Event::Apply(budget), |o| read_budget(o, "gpu-admission"));
}

fn apply(cache: &ClusterBudgets, event: Event<Value>) {
    cache.shared.lock().take(event, &*sized(reader(), None));
}

/// (held, pending) against the one A100 limit.
fn held(cache: &ClusterBudgets) -> (i64, i64) {
    let limits = cache.limits();
    assert_eq!(limits.len(), 1);
    assert_eq!(
        (limits[0].model.as_str(), limits[0].budget.as_str()),
        ("A100", "team")
    );
    (limits[0].held, limits[0].pending)
}

/// Judges a pod of `gpus` A100s named `name`; whether it is admitted.
fn admit(cache: &ClusterBudgets, name: &str, gpus: i64) -> bool {
    let ask = Ask {
        prefix: String::new(),
        charge: a100(gpus),
        replicas: 1,
    };
    let labels = with_name_label("nlp", BTreeMap::new());
    judge(cache, "nlp", &labels, &[ask], Some(name))
        .denials
        .is_empty()
}

#[test]
fn pods_held_count_until_finished_or_deleted_and_admitted_ones_until_shown() {
    let cache = cache(Duration::from_secs(60));
    budget_event(&cache, 4);
    for event in [
        Event::Init,
        Event::InitApply(pod("a", 2, "n1", "Running")),
        Event::InitApply(pod("done", 4, "n1", "Succeeded")),
        Event::InitDone,
    ] {
        apply(&cache, event);
    }
    assert_eq!(held(&cache), (2, 0));
    assert!(admit(&cache, "b", 2), "2 held + 2 fit 4");
    assert!(
        !admit(&cache, "c", 1),
        "the ledger counts b before the watch shows it"
    );
    // The watch shows b (pending): counted once, from the cache.
    apply(&cache, Event::Apply(pod("b", 2, "", "Pending")));
    assert_eq!(cache.shared.lock().ledger.len(), 0);
    assert_eq!(held(&cache), (4, 2), "b is pending");
    apply(&cache, Event::Apply(pod("b", 2, "n2", "Pending")));
    assert_eq!(held(&cache), (4, 0), "bound: held, no longer pending");
    assert!(!admit(&cache, "c", 1));
    // Finishing a frees its two.
    apply(&cache, Event::Apply(pod("a", 2, "n1", "Succeeded")));
    assert!(admit(&cache, "c", 1));
    apply(&cache, Event::Delete(pod("b", 2, "", "Pending")));
    assert!(admit(&cache, "d", 2));
    assert!(
        !admit(&cache, "e", 2),
        "c and d are in the ledger: 3 + 2 would pass 4"
    );
    assert!(
        admit(&cache, "e", 1),
        "3 + 1 is 4: at the limit, not past it"
    );
}

#[test]
fn the_ledger_forgets_after_its_ttl_and_a_relist_replaces_what_is_held() {
    let cache = cache(Duration::from_millis(50));
    budget_event(&cache, 2);
    for event in [Event::Init, Event::InitDone] {
        apply(&cache, event);
    }
    assert!(admit(&cache, "a", 2));
    assert!(!admit(&cache, "b", 1));
    std::thread::sleep(Duration::from_millis(80));
    assert!(
        admit(&cache, "b", 1),
        "a never showed: forgotten after the TTL"
    );
    for event in [
        Event::Init,
        Event::InitApply(pod("x", 1, "n1", "Running")),
        Event::InitDone,
    ] {
        apply(&cache, event);
    }
    assert_eq!(
        held(&cache),
        (2, 1),
        "x, and b still in the ledger (pending)"
    );
    assert_eq!(cache.shared.lock().by_namespace["nlp"].total, 1);
}

#[test]
fn without_the_pods_a_covered_namespace_is_refused_and_team_budgets_need_the_server_namespace() {
    let cache = ClusterBudgets::new(
        Arc::new(crate::k8s::StaticNamespaces::default()),
        "gpu-admission",
    );
    budget_event(&cache, 4);
    let labels = with_name_label("nlp", BTreeMap::new());
    let ask = Ask {
        prefix: String::new(),
        charge: a100(1),
        replicas: 1,
    };
    let verdict = judge(&cache, "nlp", &labels, &[ask], Some("a"));
    assert!(
        verdict.denials[0].contains("cannot be counted (the pods are not watched)"),
        "{verdict:?}"
    );

    let team = json!({"metadata": {"namespace": "nlp", "name": "all"},
                      "spec": {"total": 0, "namespaceSelector": {}}});
    assert_eq!(
        read_budget(&team, "gpu-admission"),
        Some(("nlp/all".to_string(), None))
    );
    let (_, honoured) = read_budget(&team, "nlp").unwrap();
    assert!(honoured.unwrap().covers("web", &BTreeMap::new()));
}

#[test]
fn the_gauges_show_each_limit_with_what_is_held_and_pending() {
    let cache = cache(Duration::from_secs(60));
    budget_event(&cache, 4);
    for event in [
        Event::Init,
        Event::InitApply(pod("a", 1, "n1", "Running")),
        Event::InitApply(pod("b", 2, "", "Pending")),
        Event::InitDone,
    ] {
        apply(&cache, event);
    }
    let mut registry = prometheus_client::registry::Registry::default();
    metrics::BudgetMetrics::register(&mut registry).watch(cache.clone());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"gpu_admission_budget_limit{namespace="nlp",budget="team",model="A100"} 4"#,
        r#"gpu_admission_budget_used{namespace="nlp",budget="team",model="A100"} 3"#,
        r#"gpu_admission_budget_pending{namespace="nlp",budget="team",model="A100"} 2"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
}

#[test]
fn a_pod_bound_to_a_node_of_known_size_is_charged_anew_its_old_charge_taken_away() {
    let cache = cache(Duration::from_secs(60));
    budget_event(&cache, 4);
    let nodes = ClusterNodes::default();
    let node = |name: &str, size: &str| {
        let labels = json!({"node.kubernetes.io/instance-type": size});
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    };
    for event in [
        Event::Init,
        Event::InitApply(node("t4-1", "Standard_NC4as_T4_v3")),
        Event::InitDone,
    ] {
        nodes.apply(event);
    }
    let read = sized(reader(), Some(nodes));
    let take = |event| cache.shared.lock().take(event, &*read);
    take(Event::Init);
    take(Event::InitApply(pod("a", 2, "", "Pending")));
    take(Event::InitDone);
    assert_eq!(held(&cache), (2, 2), "not bound: as its selection allows");
    take(Event::Apply(pod("a", 2, "t4-1", "Pending")));
    assert_eq!(held(&cache), (0, 0), "bound to a T4 node: no A100 held");
    let used = cache.shared.lock().by_namespace["nlp"].clone();
    assert_eq!(
        (used.models, used.sizes, used.total),
        (
            BTreeMap::from([("T4".to_string(), 2)]),
            BTreeMap::from([("Standard_NC4as_T4_v3".to_string(), 2)]),
            2
        )
    );
    // A node the cache does not hold: as its selection allows.
    take(Event::Apply(pod("b", 1, "gone", "Running")));
    assert_eq!(held(&cache), (1, 0));
    take(Event::Delete(pod("a", 2, "t4-1", "Running")));
    assert_eq!(cache.shared.lock().by_namespace["nlp"].total, 1);
}
