use super::*;
use crate::cel::{Env, Extensions};
use kube::runtime::watcher::Event;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A cache fed by hand, with the real reader and a count of its reads.
struct Fed {
    cache: Cache,
    lookup: ClusterExceptions,
    reads: Arc<AtomicUsize>,
}

fn fed() -> Fed {
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let env = Env::new(Extensions::default());
    let read: Reader = Arc::new(move |value| {
        counted.fetch_add(1, Ordering::Relaxed);
        crate::exceptions::read(value, &env)
    });
    fed_with(read, reads)
}

fn fed_with(read: Reader, reads: Arc<AtomicUsize>) -> Fed {
    let lookup = ClusterExceptions::waiting();
    let cache = Cache::new(read, lookup.shared.clone());
    Fed {
        cache,
        lookup,
        reads,
    }
}

/// A reader that compiles nothing (for the bounds, which read thousands).
fn cheap() -> Fed {
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let read: Reader = Arc::new(move |value| {
        counted.fetch_add(1, Ordering::Relaxed);
        Ok(Exception {
            namespace: value["metadata"]["namespace"].as_str().unwrap().into(),
            name: value["metadata"]["name"].as_str().unwrap().into(),
            policies: vec!["gpu-privileged".into()],
            kinds: Vec::new(),
            names: vec!["x".into()],
            selector: None,
            expression: None,
            reason: "r".into(),
            expires_at: None,
            requested_by: None,
        })
    });
    fed_with(read, reads)
}

/// A GpuPolicyException as the API serves it in a list or watch.
fn object(namespace: &str, name: &str, version: u64, expression: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gpu-admission.io/v1alpha1",
        "kind": "GpuPolicyException",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": version.to_string(),
            "uid": format!("uid-{namespace}-{name}"), "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {
            "policies": ["gpu-privileged"],
            "match": {"kinds": ["Pod"], "names": [name], "expression": expression},
            "reason": "NCCL benchmark needs privileged for a day",
            "expiresAt": "2026-12-31T00:00:00Z",
            "requestedBy": "alice@example.com",
        },
    }))
    .unwrap()
}

fn names(lookup: &ClusterExceptions, namespace: &str) -> Vec<String> {
    lookup
        .in_namespace(namespace)
        .iter()
        .map(|e| e.name.clone())
        .collect()
}

fn listed(fed: &mut Fed, objects: Vec<DynamicObject>) {
    fed.cache.handle(Event::Init);
    for o in objects {
        fed.cache.handle(Event::InitApply(o));
    }
    fed.cache.handle(Event::InitDone);
}

#[test]
fn nothing_is_known_until_the_first_list_and_then_exactly_what_it_held() {
    let mut fed = fed();
    assert!(!fed.lookup.is_synced());
    fed.cache.handle(Event::Init);
    fed.cache.handle(Event::InitApply(object(
        "research",
        "nccl-bench",
        5,
        "true",
    )));
    // A list half read is not published.
    assert!(fed.lookup.in_namespace("research").is_empty());
    assert!(!fed.lookup.is_synced());
    fed.cache
        .handle(Event::InitApply(object("vision", "resnet", 6, "true")));
    fed.cache.handle(Event::InitDone);
    assert!(fed.lookup.is_synced());
    assert_eq!(names(&fed.lookup, "research"), ["nccl-bench"]);
    assert_eq!(names(&fed.lookup, "vision"), ["resnet"]);
    assert!(fed.lookup.in_namespace("prod").is_empty());
    let all: Vec<String> = fed.lookup.all().iter().map(|e| e.id()).collect();
    assert_eq!(all, ["research/nccl-bench", "vision/resnet"]);
    let read = &fed.lookup.in_namespace("research")[0];
    assert_eq!(read.reason, "NCCL benchmark needs privileged for a day");
    assert!(read.expression.is_some(), "the expression is compiled");
}

#[test]
fn each_object_is_read_once_per_resource_version() {
    let mut fed = fed();
    listed(&mut fed, vec![object("research", "nccl-bench", 5, "true")]);
    assert_eq!(fed.reads.load(Ordering::Relaxed), 1);
    let first = fed.lookup.in_namespace("research")[0].clone();
    // A relist (after a watch expired) of the same version reads nothing
    // and keeps the same exception.
    listed(&mut fed, vec![object("research", "nccl-bench", 5, "true")]);
    assert_eq!(fed.reads.load(Ordering::Relaxed), 1);
    assert!(Arc::ptr_eq(&first, &fed.lookup.in_namespace("research")[0]));
    // A new version is read anew.
    fed.cache.handle(Event::Apply(object(
        "research",
        "nccl-bench",
        9,
        "object.metadata.name == 'nccl-bench'",
    )));
    assert_eq!(fed.reads.load(Ordering::Relaxed), 2);
    assert!(!Arc::ptr_eq(
        &first,
        &fed.lookup.in_namespace("research")[0]
    ));
}

#[test]
fn a_change_rebuilds_only_its_namespace() {
    let mut fed = fed();
    listed(
        &mut fed,
        vec![
            object("research", "a", 2, "true"),
            object("vision", "b", 3, "true"),
        ],
    );
    let vision = fed.lookup.in_namespace("vision");
    let research = fed.lookup.in_namespace("research");
    // Lookups share the published slice.
    assert!(Arc::ptr_eq(&research, &fed.lookup.in_namespace("research")));
    fed.cache
        .handle(Event::Apply(object("research", "c", 4, "true")));
    assert_eq!(names(&fed.lookup, "research"), ["a", "c"]);
    assert!(Arc::ptr_eq(&vision, &fed.lookup.in_namespace("vision")));
    assert_eq!(research.len(), 1, "a slice held elsewhere stays as it was");
    fed.cache
        .handle(Event::Delete(object("research", "a", 5, "true")));
    assert_eq!(names(&fed.lookup, "research"), ["c"]);
    fed.cache
        .handle(Event::Delete(object("research", "c", 6, "true")));
    assert!(fed.lookup.in_namespace("research").is_empty());
    assert!(!fed.lookup.published().by_namespace.contains_key("research"));
}

#[test]
fn a_relist_drops_what_it_no_longer_lists() {
    let mut fed = fed();
    listed(
        &mut fed,
        vec![
            object("research", "a", 2, "true"),
            object("research", "b", 3, "true"),
        ],
    );
    listed(&mut fed, vec![object("research", "b", 3, "true")]);
    assert_eq!(names(&fed.lookup, "research"), ["b"]);
}

#[test]
fn an_unreadable_exception_is_not_held_and_counted_invalid_until_fixed() {
    let mut fed = fed();
    listed(
        &mut fed,
        vec![object("research", "broken", 2, "object.metadata.name ==")],
    );
    assert!(fed.lookup.in_namespace("research").is_empty());
    assert_eq!(
        fed.lookup.counts(),
        Counts {
            active: 0,
            expired: 0,
            invalid: 1
        }
    );
    fed.cache
        .handle(Event::Apply(object("research", "broken", 3, "true")));
    assert_eq!(names(&fed.lookup, "research"), ["broken"]);
    assert_eq!(fed.lookup.counts().invalid, 0);
    // Broken again, then deleted: nothing left to count.
    fed.cache
        .handle(Event::Apply(object("research", "broken", 4, "1 +")));
    assert!(fed.lookup.in_namespace("research").is_empty());
    assert_eq!(fed.lookup.counts().invalid, 1);
    fed.cache
        .handle(Event::Delete(object("research", "broken", 5, "1 +")));
    assert_eq!(fed.lookup.counts(), Counts::default());
}

#[test]
fn a_namespace_holds_at_most_its_share() {
    let mut fed = cheap();
    let objects = (0..=MAX_PER_NAMESPACE)
        .map(|i| object("research", &format!("e{i:04}"), 10 + i as u64, "true"))
        .collect();
    listed(&mut fed, objects);
    assert_eq!(fed.lookup.in_namespace("research").len(), MAX_PER_NAMESPACE);
    assert_eq!(fed.lookup.counts().invalid, 1);
    // The one beyond was not even read.
    assert_eq!(fed.reads.load(Ordering::Relaxed), MAX_PER_NAMESPACE);
    // Other namespaces still have room.
    fed.cache
        .handle(Event::Apply(object("vision", "v", 9999, "true")));
    assert_eq!(names(&fed.lookup, "vision"), ["v"]);
    // Once there is room, the ignored one is read when it next changes.
    fed.cache
        .handle(Event::Delete(object("research", "e0000", 10000, "true")));
    let last = format!("e{MAX_PER_NAMESPACE:04}");
    fed.cache
        .handle(Event::Apply(object("research", &last, 10001, "true")));
    assert_eq!(fed.lookup.in_namespace("research").len(), MAX_PER_NAMESPACE);
    assert_eq!(fed.lookup.counts().invalid, 0);
    assert!(names(&fed.lookup, "research").contains(&last));
}

#[test]
fn the_cluster_holds_at_most_its_bound() {
    let mut fed = cheap();
    let per = MAX_PER_NAMESPACE;
    let objects = (0..=MAX_HELD)
        .map(|i| {
            object(
                &format!("ns{:03}", i / per),
                &format!("e{i}"),
                i as u64 + 2,
                "true",
            )
        })
        .collect();
    listed(&mut fed, objects);
    assert_eq!(fed.lookup.all().len(), MAX_HELD);
    assert_eq!(
        fed.lookup.counts(),
        Counts {
            active: MAX_HELD,
            expired: 0,
            invalid: 1
        }
    );
    let beyond = format!("ns{:03}", MAX_HELD / per);
    assert!(!names(&fed.lookup, &beyond).contains(&format!("e{MAX_HELD}")));
}

#[test]
fn states_follow_the_clock_without_an_event() {
    let mut fed = fed();
    listed(&mut fed, vec![object("research", "nccl-bench", 2, "true")]);
    let at = Arc::new(Mutex::new(
        crate::exceptions::parse_time("2026-12-30T00:00:00Z").unwrap(),
    ));
    let clock = at.clone();
    let lookup = fed
        .lookup
        .clone()
        .with_clock(Arc::new(move || *clock.lock().unwrap()));
    assert_eq!(lookup.counts().active, 1);
    let end = crate::exceptions::parse_time("2026-12-31T00:00:00Z").unwrap();
    *at.lock().unwrap() = end + Duration::from_secs(1);
    assert_eq!(lookup.now(), end + Duration::from_secs(1));
    assert_eq!(
        lookup.counts(),
        Counts {
            active: 0,
            expired: 1,
            invalid: 0
        }
    );
    // Still held (the report lists it as expired); candidates skip it.
    assert_eq!(lookup.in_namespace("research").len(), 1);
}

#[test]
fn an_empty_relist_empties_the_cache_and_counts_as_synced() {
    // What the watch sends for a kind not served, or refused.
    let mut fed = fed();
    listed(&mut fed, Vec::new());
    assert!(fed.lookup.is_synced());
    listed(&mut fed, vec![object("research", "nccl-bench", 2, "true")]);
    assert_eq!(names(&fed.lookup, "research"), ["nccl-bench"]);
    listed(&mut fed, Vec::new());
    assert!(fed.lookup.all().is_empty());
    assert_eq!(fed.lookup.counts(), Counts::default());
}

#[tokio::test]
async fn waiting_for_the_first_list() {
    assert!(ClusterExceptions::empty().wait_until_synced().await);
    let mut fed = fed();
    let lookup = fed.lookup.clone();
    let waiting = tokio::spawn(async move { lookup.wait_until_synced().await });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    listed(&mut fed, Vec::new());
    assert!(waiting.await.unwrap());
}
