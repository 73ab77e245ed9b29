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

impl Fed {
    /// A watch event applying `object(..)`.
    fn apply(&mut self, namespace: &str, name: &str, version: u64, expression: &str) {
        let object = object(namespace, name, version, expression);
        self.cache.handle(Event::Apply(object));
    }

    /// A watch event deleting `object(..)`.
    fn delete(&mut self, namespace: &str, name: &str, version: u64, expression: &str) {
        let object = object(namespace, name, version, expression);
        self.cache.handle(Event::Delete(object));
    }
}

fn counts(active: usize, expired: usize, invalid: usize, over_bound: usize) -> Counts {
    Counts {
        active,
        expired,
        invalid,
        over_bound,
    }
}

/// A cache with the real reader that has listed `object(..)`s of these
/// namespaces, names and versions, each matching `true`.
fn fed_listing(objects: &[(&str, &str, u64)]) -> Fed {
    let mut fed = fed();
    let objects = objects
        .iter()
        .map(|&(ns, name, v)| object(ns, name, v, "true"));
    listed(&mut fed, objects.collect());
    fed
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
    fed.apply(
        "research",
        "nccl-bench",
        9,
        "object.metadata.name == 'nccl-bench'",
    );
    assert_eq!(fed.reads.load(Ordering::Relaxed), 2);
    assert!(!Arc::ptr_eq(
        &first,
        &fed.lookup.in_namespace("research")[0]
    ));
}

#[test]
fn a_change_rebuilds_only_its_namespace() {
    let mut fed = fed_listing(&[("research", "a", 2), ("vision", "b", 3)]);
    let vision = fed.lookup.in_namespace("vision");
    let research = fed.lookup.in_namespace("research");
    // Lookups share the published slice.
    assert!(Arc::ptr_eq(&research, &fed.lookup.in_namespace("research")));
    fed.apply("research", "c", 4, "true");
    assert_eq!(names(&fed.lookup, "research"), ["a", "c"]);
    assert!(Arc::ptr_eq(&vision, &fed.lookup.in_namespace("vision")));
    assert_eq!(research.len(), 1, "a slice held elsewhere stays as it was");
    fed.delete("research", "a", 5, "true");
    assert_eq!(names(&fed.lookup, "research"), ["c"]);
    fed.delete("research", "c", 6, "true");
    assert!(fed.lookup.in_namespace("research").is_empty());
    assert!(!fed.lookup.published().by_namespace.contains_key("research"));
}

#[test]
fn a_relist_drops_what_it_no_longer_lists() {
    let mut fed = fed_listing(&[("research", "a", 2), ("research", "b", 3)]);
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
    assert_eq!(fed.lookup.counts(), counts(0, 0, 1, 0));
    fed.apply("research", "broken", 3, "true");
    assert_eq!(names(&fed.lookup, "research"), ["broken"]);
    assert_eq!(fed.lookup.counts().invalid, 0);
    // Broken again, then deleted: nothing left to count.
    fed.apply("research", "broken", 4, "1 +");
    assert!(fed.lookup.in_namespace("research").is_empty());
    assert_eq!(fed.lookup.counts().invalid, 1);
    fed.delete("research", "broken", 5, "1 +");
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
    assert_eq!(fed.lookup.counts(), counts(MAX_PER_NAMESPACE, 0, 0, 1));
    // The one beyond (the last by name) was not even read.
    assert_eq!(fed.reads.load(Ordering::Relaxed), MAX_PER_NAMESPACE);
    let last = format!("e{MAX_PER_NAMESPACE:04}");
    assert!(!names(&fed.lookup, "research").contains(&last));
    // A new version of it is not read either while there is no room.
    fed.apply("research", &last, 9998, "true");
    assert_eq!(fed.reads.load(Ordering::Relaxed), MAX_PER_NAMESPACE);
    // Other namespaces still have room.
    fed.apply("vision", "v", 9999, "true");
    assert_eq!(names(&fed.lookup, "vision"), ["v"]);
    // A deletion makes room: the one held back is read and held at once.
    fed.delete("research", "e0000", 10000, "true");
    assert_eq!(fed.lookup.in_namespace("research").len(), MAX_PER_NAMESPACE);
    assert!(names(&fed.lookup, "research").contains(&last));
    assert_eq!(fed.lookup.counts().over_bound, 0);
    assert_eq!(fed.reads.load(Ordering::Relaxed), MAX_PER_NAMESPACE + 2);
    // One added before it by name takes its place again.
    fed.apply("research", "a", 10001, "true");
    assert!(names(&fed.lookup, "research").contains(&"a".to_string()));
    assert!(!names(&fed.lookup, "research").contains(&last));
    assert_eq!(fed.lookup.counts().over_bound, 1);
}

#[test]
fn the_cluster_holds_at_most_its_bound_shared_fairly() {
    let mut fed = cheap();
    let per = MAX_PER_NAMESPACE;
    // 39 full namespaces and one of 17: 10,001 objects.
    listed(&mut fed, spread(MAX_HELD + 1, per));
    assert_eq!(fed.lookup.all().len(), MAX_HELD);
    assert_eq!(fed.lookup.counts(), counts(MAX_HELD, 0, 0, 1));
    // The small namespace holds all it has; the one slot missing is the
    // last full namespace's by name (the remainder of an equal split goes
    // to the first by name), its last object by name.
    assert_eq!(fed.lookup.in_namespace("ns039").len(), 17);
    assert_eq!(fed.lookup.in_namespace("ns000").len(), per);
    assert_eq!(fed.lookup.in_namespace("ns038").len(), per - 1);
    assert!(!names(&fed.lookup, "ns038").contains(&format!("e{:03}", per - 1)));
    assert_eq!(fed.reads.load(Ordering::Relaxed), MAX_HELD);
}

/// `count` exceptions, `per` in each namespace (ns000/e000...).
fn spread(count: usize, per: usize) -> Vec<DynamicObject> {
    (0..count)
        .map(|i| {
            object(
                &format!("ns{:03}", i / per),
                &format!("e{:03}", i % per),
                i as u64 + 2,
                "true",
            )
        })
        .collect()
}

/// The same objects in another order (a fixed pseudo-random shuffle).
fn shuffled(mut objects: Vec<DynamicObject>, seed: u64) -> Vec<DynamicObject> {
    let mut state = seed;
    for i in (1..objects.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = (state >> 33) as usize % (i + 1);
        objects.swap(i, j);
    }
    objects
}

/// What requests see: the held exceptions by namespace, by name.
fn held(lookup: &ClusterExceptions) -> BTreeMap<String, Vec<String>> {
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in lookup.all() {
        held.entry(e.namespace.clone())
            .or_default()
            .push(e.name.clone());
    }
    for namespace in held.keys() {
        assert_eq!(
            names(lookup, namespace),
            held[namespace],
            "the published slice of {namespace} is the held ones, by name"
        );
    }
    held
}

#[test]
fn twenty_thousand_exceptions_over_two_hundred_namespaces_hold_fifty_each_whatever_the_order() {
    let objects = spread(200 * 100, 100);
    let fair: BTreeMap<String, Vec<String>> = (0..200)
        .map(|n| {
            let names = (0..50).map(|i| format!("e{i:03}")).collect();
            (format!("ns{n:03}"), names)
        })
        .collect();
    let expected = counts(MAX_HELD, 0, 0, 10_000);
    let mut reversed = objects.clone();
    reversed.reverse();
    let orders = [
        ("by name", objects.clone()),
        ("reversed", reversed),
        ("shuffled", shuffled(objects.clone(), 1)),
    ];
    for (order, objects) in orders {
        // Listed: what is beyond the bounds is never read.
        let mut fed = cheap();
        listed(&mut fed, objects);
        assert_eq!(held(&fed.lookup), fair, "listed {order}");
        assert_eq!(fed.lookup.counts(), expected, "listed {order}");
        assert_eq!(
            fed.reads.load(Ordering::Relaxed),
            MAX_HELD,
            "listed {order}"
        );
    }
    // Applied one by one through the watch in another order, after an
    // empty list.
    let mut fed = cheap();
    listed(&mut fed, Vec::new());
    for o in shuffled(objects, 2) {
        fed.cache.handle(Event::Apply(o));
    }
    assert_eq!(held(&fed.lookup), fair, "applied");
    assert_eq!(fed.lookup.counts(), expected, "applied");
}

#[test]
fn events_keep_the_fair_shares_a_list_would_give() {
    let objects = spread(200 * 100, 100);
    let mut fed = cheap();
    listed(&mut fed, objects.clone());
    let mut now: Vec<DynamicObject> = objects;
    let mut version = 100_000;
    // A held one deleted: the next by name in its namespace takes its place.
    fed.delete("ns007", "e003", version, "true");
    now.retain(|o| key_of(o) != ("ns007".into(), "e003".into()));
    assert!(names(&fed.lookup, "ns007").contains(&"e050".to_string()));
    assert_eq!(fed.lookup.counts().over_bound, 9_999);
    // A whole namespace deleted: its 50 slots go to the others, one each
    // to the first 50 by name.
    for i in 0..100 {
        version += 1;
        let name = format!("e{i:03}");
        fed.delete("ns100", &name, version, "true");
    }
    now.retain(|o| key_of(o).0 != "ns100");
    assert!(fed.lookup.in_namespace("ns100").is_empty());
    assert_eq!(fed.lookup.in_namespace("ns000").len(), 51);
    assert_eq!(fed.lookup.in_namespace("ns199").len(), 50);
    assert_eq!(fed.lookup.all().len(), MAX_HELD);
    // A new namespace of 10 gets all 10, taken from the others.
    for i in 0..10 {
        version += 1;
        let o = object("a-new", &format!("n{i}"), version, "true");
        now.push(o.clone());
        fed.cache.handle(Event::Apply(o));
    }
    assert_eq!(fed.lookup.in_namespace("a-new").len(), 10);
    assert_eq!(fed.lookup.all().len(), MAX_HELD);
    // Changes in random order, then the same objects listed again: the
    // relist changes nothing.
    for (n, o) in shuffled(now.clone(), 3).into_iter().take(500).enumerate() {
        version += 1;
        let (namespace, name) = key_of(&o);
        if n % 3 == 0 {
            fed.delete(&namespace, &name, version, "true");
            now.retain(|x| key_of(x) != (namespace.clone(), name.clone()));
        } else {
            let o = object(&namespace, &format!("x{name}"), version, "true");
            now.push(o.clone());
            fed.cache.handle(Event::Apply(o));
        }
    }
    // What the events left is what a list of the same objects gives.
    let mut fresh = cheap();
    listed(&mut fresh, now.clone());
    assert_eq!(held(&fed.lookup), held(&fresh.lookup));
    assert_eq!(fed.lookup.counts(), fresh.lookup.counts());
    let before = held(&fed.lookup);
    listed(&mut fed, shuffled(now.clone(), 4));
    assert_eq!(held(&fed.lookup), before);
}

#[test]
fn small_namespaces_hold_all_they_have_and_the_rest_share_what_is_left() {
    let mut fed = cheap();
    // 100 namespaces of 10 and 50 of 300: 1,000 + 50 * 256 wanted.
    let mut objects = spread(100 * 10, 10);
    for n in 0..50 {
        for i in 0..300 {
            objects.push(object(
                &format!("big{n:02}"),
                &format!("e{i:03}"),
                2,
                "true",
            ));
        }
    }
    listed(&mut fed, shuffled(objects, 5));
    assert_eq!(fed.lookup.in_namespace("ns042").len(), 10);
    // (10,000 - 1,000) / 50.
    assert_eq!(fed.lookup.in_namespace("big07").len(), 180);
    assert_eq!(
        fed.lookup.counts(),
        Counts {
            active: MAX_HELD,
            expired: 0,
            invalid: 0,
            over_bound: 50 * 300 - 9_000
        }
    );
}

#[test]
fn unreadable_ones_within_the_bounds_are_invalid_and_those_beyond_over_bound() {
    let mut fed = fed();
    let mut objects: Vec<DynamicObject> = (0..MAX_PER_NAMESPACE)
        .map(|i| object("research", &format!("e{i:04}"), 10 + i as u64, "true"))
        .collect();
    // One unreadable within the bounds, one beyond (never read).
    objects[3] = object("research", "e0003", 3, "object.metadata.name ==");
    objects.push(object("research", "z-broken", 4, "1 +"));
    listed(&mut fed, objects);
    assert_eq!(fed.lookup.counts(), counts(MAX_PER_NAMESPACE - 1, 0, 1, 1));
    // Fixed: held, and nothing is invalid any more.
    fed.apply("research", "e0003", 20, "true");
    assert_eq!(fed.lookup.counts().invalid, 0);
    assert_eq!(fed.lookup.counts().over_bound, 1);
}

#[test]
fn fair_shares_meet_small_wants_and_split_the_rest_by_name() {
    let shares = |wants: &[usize]| {
        let namespaces = (wants.iter().enumerate())
            .map(|(i, w)| {
                let n = Namespace {
                    objects: *w,
                    ..Namespace::default()
                };
                (format!("n{i:03}"), n)
            })
            .collect();
        fair_shares(&namespaces)
    };
    // Under the bound: every namespace its own, at most MAX_PER_NAMESPACE.
    assert_eq!(shares(&[3, 1000]), [3, MAX_PER_NAMESPACE]);
    // Over it: an equal split; its remainder to the first by name.
    let got = shares(&[300; 41]);
    assert_eq!(got.iter().sum::<usize>(), MAX_HELD);
    // 10,000 = 41 * 243 + 37.
    assert!(got[..37].iter().all(|s| *s == 244), "{got:?}");
    assert!(got[37..].iter().all(|s| *s == 243), "{got:?}");
    // Those that want less than an equal part keep all they have.
    let mut wants = vec![5; 100];
    wants.extend([256; 50]);
    let got = shares(&wants);
    assert!(got[..100].iter().all(|s| *s == 5), "{got:?}");
    assert!(got[100..].iter().all(|s| *s == 190), "{got:?}");
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
    assert_eq!(lookup.counts(), counts(0, 1, 0, 0));
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
