//! The live-cluster paths against an in-process API server that speaks
//! the list/watch protocol: the Namespace reflector behind
//! namespaceSelector and namespaceObject.
mod common;

use common::fake_apiserver::{wait_until, FakeApiServer, Recorded, NAMESPACES};
use futures_util::FutureExt as _;
use gpu_admission::namespaces::ClusterNamespaces;
use gpu_admission::policy::NamespaceLookup;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

fn namespace(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

/// The labels `lookup` sees on namespace `name`, if it knows it.
fn labels(lookup: &ClusterNamespaces, name: &str) -> Option<BTreeMap<String, String>> {
    let object = lookup.namespace(name)?;
    assert_eq!(object["kind"], "Namespace");
    Some(serde_json::from_value(object["metadata"]["labels"].clone()).unwrap_or_default())
}

fn lists(requests: &[Recorded]) -> Vec<Recorded> {
    requests
        .iter()
        .filter(|r| r.path == "/api/v1/namespaces" && !r.is_watch())
        .cloned()
        .collect()
}

fn watches(requests: &[Recorded]) -> Vec<Recorded> {
    requests
        .iter()
        .filter(|r| r.path == "/api/v1/namespaces" && r.is_watch())
        .cloned()
        .collect()
}

/// 1,201 namespaces: three pages of the reflector's 500.
const MANY: usize = 1_201;

fn numbered(i: usize) -> String {
    format!("team-{i:04}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_reflector_lists_in_pages_then_follows_the_watch() {
    let fake = FakeApiServer::start(vec![NAMESPACES]).await;
    fake.change(|cluster| {
        for i in 0..MANY {
            cluster.apply(namespace(&numbered(i), &[("tier", "cpu")]));
        }
        cluster.apply(namespace("ml", &[("gpu-admission.io/tier", "research")]));
    });
    fake.hold_continued_lists(true);
    let (lookup, task) = ClusterNamespaces::start(fake.client());

    // The first page is in, the second is held: not synced, nothing visible.
    fake.wait_for_requests("the second page to be requested", |r| {
        lists(r).iter().any(|l| l.param("continue").is_some())
    })
    .await;
    assert_eq!(lookup.wait_until_synced().now_or_never(), None);
    assert_eq!(labels(&lookup, &numbered(0)), None, "a page is not a list");
    assert_eq!(labels(&lookup, "ml"), None);
    fake.hold_continued_lists(false);
    let synced = tokio::time::timeout(Duration::from_secs(30), lookup.wait_until_synced())
        .await
        .expect("the cache syncs once the list completes");
    assert!(synced);

    let first_list = lists(&fake.requests());
    assert_eq!(first_list.len(), 3, "{first_list:?}");
    assert!(first_list.iter().all(|l| l.param("limit") == Some("500")));
    assert_eq!(first_list[0].param("continue"), None);
    assert!(first_list[1].param("continue").is_some());
    assert!(first_list[2].param("continue").is_some());
    assert_ne!(
        first_list[1].param("continue"),
        first_list[2].param("continue")
    );
    for i in [0, 499, 500, 1_000, MANY - 1] {
        let seen =
            labels(&lookup, &numbered(i)).unwrap_or_else(|| panic!("{} listed", numbered(i)));
        assert_eq!(seen["tier"], "cpu");
        assert_eq!(seen["kubernetes.io/metadata.name"], numbered(i));
    }
    assert_eq!(
        labels(&lookup, "ml").unwrap()["gpu-admission.io/tier"],
        "research"
    );
    assert_eq!(labels(&lookup, "absent"), None);

    // The watch starts where the list ended, and asks for bookmarks.
    let listed_at = fake.read(|c| c.resource_version());
    fake.wait_for_requests("a watch", |r| !watches(r).is_empty())
        .await;
    let watch = &watches(&fake.requests())[0];
    assert_eq!(
        watch.param("resourceVersion"),
        Some(listed_at.to_string().as_str())
    );
    assert_eq!(watch.param("allowWatchBookmarks"), Some("true"));

    // MODIFIED, DELETED, ADDED events reach the cache.
    fake.change(|c| {
        c.apply(namespace(
            "ml",
            &[("gpu-admission.io/tier", "premium"), ("team", "vision")],
        ))
    });
    wait_until("the MODIFIED labels", || {
        labels(&lookup, "ml").is_some_and(|l| l.get("team").map(String::as_str) == Some("vision"))
    })
    .await;
    assert_eq!(
        labels(&lookup, "ml").unwrap()["gpu-admission.io/tier"],
        "premium"
    );
    fake.change(|c| c.delete(&NAMESPACES, "", &numbered(7)));
    wait_until("the DELETED namespace to go", || {
        labels(&lookup, &numbered(7)).is_none()
    })
    .await;
    fake.change(|c| c.apply(namespace("fresh", &[("tier", "gpu")])));
    wait_until("the ADDED namespace", || labels(&lookup, "fresh").is_some()).await;

    // A bookmark moves the resume point: a watch ended after it resumes
    // from the bookmark, not from the last object event.
    let bookmark = fake.change(|c| c.bookmark(&NAMESPACES));
    let before = watches(&fake.requests()).len();
    // A watch ended before it sent the bookmark resumes from the earlier
    // point and is sent the bookmark again: end watches until one resumes
    // from the bookmark.
    wait_until("a watch resumed from the bookmark", || {
        let requests = fake.requests();
        let resumed = watches(&requests)[before..]
            .iter()
            .any(|w| w.param("resourceVersion") == Some(bookmark.to_string().as_str()));
        if !resumed {
            fake.change(|c| c.end_watches());
        }
        resumed
    })
    .await;

    // Changes the watch never carries, then history compacted: the
    // resumed watch is answered 410 Expired, and the reflector relists.
    let before = fake.requests().len();
    fake.change(|c| {
        c.end_watches();
        c.apply(namespace("ml", &[("gpu-admission.io/tier", "default")]));
        c.delete(&NAMESPACES, "", &numbered(8));
        c.apply(namespace("late", &[("tier", "gpu")]));
        c.compact();
    });
    wait_until("the relisted state", || {
        labels(&lookup, "late").is_some()
            && labels(&lookup, &numbered(8)).is_none()
            && labels(&lookup, "ml")
                .is_some_and(|l| !l.contains_key("team") && l["gpu-admission.io/tier"] == "default")
    })
    .await;
    let after = fake.requests()[before..].to_vec();
    let expired = after
        .iter()
        .position(|r| r.is_watch() && r.expired)
        .unwrap_or_else(|| panic!("a watch answered 410: {after:?}"));
    assert!(
        after[expired..]
            .iter()
            .any(|r| !r.is_watch() && r.param("continue").is_none()),
        "a fresh list after the 410: {after:?}"
    );
    // Everything else survived the relist.
    assert!(labels(&lookup, &numbered(9)).is_some());
    assert!(labels(&lookup, "fresh").is_some());
    assert_eq!(labels(&lookup, &numbered(7)), None);
    task.abort();
}
