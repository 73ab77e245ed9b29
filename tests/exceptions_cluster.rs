//! GpuPolicyExceptions from the cluster: served by the fake API server's
//! list and watch, held by the server's exception cache, and honoured by
//! the shipped policies behind the shipped webhook configurations (real
//! TLS, AdmissionReview JSON). Then `serve` itself in a cluster: readiness
//! waits for the first list, and not for a CRD the cluster lacks.
use crate::common;

use common::fake_apiserver::{wait_until, FakeApiServer, Resource, NAMESPACES};
use common::in_cluster::InCluster;
use common::webhooks::{Cluster, Outcome, Review};
use gpu_admission::cluster::exceptions::metrics::ExceptionMetrics;
use gpu_admission::cluster::exceptions::{ClusterExceptions, Reader};
use gpu_admission::exceptions::{parse_time, ExceptionLookup};
use gpu_admission::policy::EXCEPTIONS_ANNOTATION;
use gpu_admission::server::Metrics;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

const EXCEPTIONS: Resource = Resource::new(
    "gpu-admission.io",
    "v1alpha1",
    "GpuPolicyException",
    "gpupolicyexceptions",
    true,
);

const PODS_VALIDATE: &str = "pods.validate.gpu-admission.io";
const EXPIRES: &str = "2026-12-31T00:00:00Z";

/// A GpuPolicyException as the apiserver stores it (requestedBy written
/// by the mutating webhook, creationTimestamp by the apiserver).
fn exception(namespace: &str, name: &str, policies: &[&str], objects: &[&str]) -> Value {
    json!({
        "apiVersion": "gpu-admission.io/v1alpha1",
        "kind": "GpuPolicyException",
        "metadata": {"name": name, "namespace": namespace,
            "creationTimestamp": "2026-12-01T09:00:00Z"},
        "spec": {
            "policies": policies,
            "match": {"kinds": ["Pod"], "names": objects},
            "reason": "NCCL bandwidth benchmark needs privileged for one day; OPS-1234",
            "expiresAt": EXPIRES,
            "requestedBy": "alice@example.com",
        },
    })
}

/// A GPU pod whose container is privileged (gpu-privileged denies it)
/// asking for `gpus` GPUs (gpu-count-limits denies more than 8).
fn privileged_pod(namespace: &str, name: &str, gpus: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"containers": [{
            "name": "bench",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "command": ["all_reduce_perf", "-b", "8", "-e", "8G"],
            "securityContext": {"privileged": true},
            "resources": {
                "requests": {"cpu": "4", "memory": "16Gi"},
                "limits": {"memory": "16Gi", "nvidia.com/gpu": gpus}
            }
        }]}
    })
}

/// A GPU pod with a privileged init container that runs iptables (the
/// gpu-privileged-init policy lets it through with a warning).
fn network_init_pod(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "initContainers": [{
                "name": "block-metadata",
                "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0",
                "command": ["iptables", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "DROP"],
                "securityContext": {"privileged": true}
            }],
            "containers": [{
                "name": "notebook",
                "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-08-26",
                "resources": {
                    "requests": {"cpu": "2", "memory": "8Gi"},
                    "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}
                }
            }]
        }
    })
}

/// The time the cache judges exceptions at, moved by the test.
#[derive(Clone)]
struct Clock(Arc<Mutex<SystemTime>>);

impl Clock {
    fn at(text: &str) -> Clock {
        Clock(Arc::new(Mutex::new(parse_time(text).unwrap())))
    }

    fn set(&self, to: SystemTime) {
        *self.0.lock().unwrap() = to;
    }

    fn read(&self) -> Arc<dyn Fn() -> SystemTime + Send + Sync> {
        let at = self.0.clone();
        Arc::new(move || *at.lock().unwrap())
    }
}

/// The fake cluster serving exceptions, the server's cache watching it,
/// and the shipped webhooks in front of a server looking exceptions up in
/// that cache.
struct Setup {
    fake: FakeApiServer,
    cache: ClusterExceptions,
    cluster: Cluster,
    clock: Clock,
}

impl Setup {
    /// `exceptions` are in the cluster before the server starts.
    async fn start(exceptions: Vec<Value>) -> Setup {
        let fake = FakeApiServer::start(vec![EXCEPTIONS]).await;
        fake.change(|cluster| {
            for e in exceptions {
                cluster.apply(e);
            }
        });
        // Read as serve reads them: with the served policy set.
        let policies = gpu_admission::bundle::load(&gpu_admission::bundle::PolicySource::Dir(
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policies"),
        ))
        .expect("policies/ loads")
        .bundle
        .policies;
        let read: Reader = Arc::new(move |object| policies.read_exception(object));
        let clock = Clock::at("2026-12-10T12:00:00Z");
        let (cache, _task) = ClusterExceptions::start(fake.client(), read);
        let cache = cache.with_clock(clock.read());
        assert!(cache.wait_until_synced().await, "the first list");
        let mut exception_metrics = ExceptionMetrics::default();
        let metrics = Metrics::with_families(|registry| {
            exception_metrics = ExceptionMetrics::register(registry);
        });
        exception_metrics.watch(cache.clone());
        let counted = exception_metrics.clone();
        let cluster = Cluster::start_with_exceptions(
            Arc::new(cache.clone()),
            metrics,
            Arc::new(move |excepted| counted.count(excepted)),
        )
        .await;
        Setup {
            fake,
            cache,
            cluster,
            clock,
        }
    }

    async fn admit(&self, object: Value) -> Outcome {
        self.cluster.admit(&Review::create(object)).await
    }

    /// Admits `object` until `done` holds for the outcome (the watch has
    /// brought the change), at most 30 s.
    async fn admit_until(&self, object: &Value, what: &str, done: impl Fn(&Outcome) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let outcome = self.admit(object.clone()).await;
            if done(&outcome) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: never seen; last outcome {outcome:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The value of a sample of /metrics (0 when absent).
    async fn metric(&self, sample: &str) -> f64 {
        self.cluster.server().metric(sample).await
    }

    async fn stop(self) {
        self.cluster.stop().await;
        drop(self.fake);
    }
}

fn privileged_denial(outcome: &Outcome) -> bool {
    !outcome.allowed
        && outcome
            .message()
            .contains("gpu-privileged: container bench is privileged")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exception_lets_exactly_its_object_through_its_policy() {
    let setup = Setup::start(vec![exception(
        "research",
        "nccl-bench",
        &["gpu-privileged"],
        &["nccl-bench"],
    )])
    .await;

    let outcome = setup
        .admit(privileged_pod("research", "nccl-bench", "1"))
        .await;
    assert_eq!(outcome.validated_by, [PODS_VALIDATE]);
    assert!(outcome.allowed, "{}", outcome.message());
    assert_eq!(
        outcome.audit_annotations[EXCEPTIONS_ANNOTATION],
        r#"[{"action":"Deny","exception":"research/nccl-bench","policy":"gpu-privileged"}]"#
    );

    // The same object, a policy the exception does not name.
    let outcome = setup
        .admit(privileged_pod("research", "nccl-bench", "16"))
        .await;
    assert!(!outcome.allowed, "16 GPUs let through");
    assert!(
        outcome
            .message()
            .contains("gpu-count-limits: pod asks for 16 GPUs"),
        "{}",
        outcome.message()
    );
    assert!(
        !outcome.message().contains("gpu-privileged"),
        "{}",
        outcome.message()
    );

    // Another object of the namespace, and the same name elsewhere.
    for (namespace, name) in [("research", "train"), ("prod", "nccl-bench")] {
        let outcome = setup.admit(privileged_pod(namespace, name, "1")).await;
        assert!(
            privileged_denial(&outcome),
            "{namespace}/{name}: {outcome:?}"
        );
        assert!(
            !outcome
                .audit_annotations
                .contains_key(EXCEPTIONS_ANNOTATION),
            "{:?}",
            outcome.audit_annotations
        );
    }
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_let_through_names_the_exception() {
    let setup = Setup::start(vec![exception(
        "research",
        "notebook",
        &["gpu-privileged-init"],
        &["notebook-*"],
    )])
    .await;
    let outcome = setup
        .admit(network_init_pod("research", "notebook-alice"))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    let warning = outcome
        .warnings
        .iter()
        .find(|w| w.starts_with("gpu-privileged-init: "))
        .unwrap_or_else(|| panic!("{:?}", outcome.warnings));
    assert!(
        warning.ends_with(&format!(
            " (allowed by GpuPolicyException research/notebook (NCCL bandwidth benchmark needs privileged for one day; OPS-1234; expires {EXPIRES}))"
        )),
        "{warning}"
    );
    assert_eq!(
        outcome.audit_annotations[EXCEPTIONS_ANNOTATION],
        r#"[{"action":"Warn","exception":"research/notebook","policy":"gpu-privileged-init"}]"#
    );
    // Without a match, the warning is the policy's alone.
    let outcome = setup.admit(network_init_pod("research", "lab")).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert!(
        outcome
            .warnings
            .iter()
            .any(|w| w.starts_with("gpu-privileged-init: ") && !w.contains("GpuPolicyException")),
        "{:?}",
        outcome.warnings
    );
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_end_the_object_is_denied_again_without_an_event() {
    let setup = Setup::start(vec![exception(
        "research",
        "nccl-bench",
        &["gpu-privileged"],
        &["nccl-bench"],
    )])
    .await;
    let pod = privileged_pod("research", "nccl-bench", "1");
    assert!(setup.admit(pod.clone()).await.allowed);
    let watch_requests = setup.fake.requests().len();

    setup
        .clock
        .set(parse_time(EXPIRES).unwrap() + Duration::from_secs(1));
    let outcome = setup.admit(pod).await;
    assert!(privileged_denial(&outcome), "{outcome:?}");
    // Nothing came from the cluster in between: no event, no relist.
    assert_eq!(setup.fake.requests().len(), watch_requests);
    assert_eq!(
        setup
            .metric("gpu_admission_exceptions{state=\"expired\"}")
            .await,
        1.0
    );
    assert_eq!(
        setup
            .metric("gpu_admission_exceptions{state=\"active\"}")
            .await,
        0.0
    );
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceptions_added_changed_and_deleted_through_the_watch_take_effect() {
    let setup = Setup::start(Vec::new()).await;
    let pod = privileged_pod("research", "nccl-bench", "1");
    assert!(privileged_denial(&setup.admit(pod.clone()).await));

    setup.fake.change(|cluster| {
        cluster.apply(exception(
            "research",
            "nccl-bench",
            &["gpu-privileged"],
            &["nccl-bench"],
        ))
    });
    setup
        .admit_until(&pod, "the exception added", |o| o.allowed)
        .await;

    // Changed to match another object only.
    setup.fake.change(|cluster| {
        cluster.apply(exception(
            "research",
            "nccl-bench",
            &["gpu-privileged"],
            &["nccl-bench-2"],
        ))
    });
    setup
        .admit_until(&pod, "the exception changed", privileged_denial)
        .await;
    assert!(
        setup
            .admit(privileged_pod("research", "nccl-bench-2", "1"))
            .await
            .allowed
    );

    setup
        .fake
        .change(|cluster| cluster.delete(&EXCEPTIONS, "research", "nccl-bench"));
    setup
        .admit_until(
            &privileged_pod("research", "nccl-bench-2", "1"),
            "the exception deleted",
            privileged_denial,
        )
        .await;
    assert!(setup.cache.all().is_empty());
    setup.stop().await;
}

/// Exceptions match the object under admission (namespace, kind, name,
/// labels, expression), never the requester: a user who claims an admin
/// group, or who is the exception's requestedBy, or an object carrying
/// requestedBy-like labels and annotations, is judged as anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_requester_gains_nothing() {
    let setup = Setup::start(vec![exception(
        "research",
        "nccl-bench",
        &["gpu-privileged"],
        &["nccl-bench"],
    )])
    .await;
    let other = privileged_pod("research", "train", "1");
    let mut labelled = other.clone();
    labelled["metadata"]["labels"]["gpu-admission.io/requested-by"] = json!("alice");
    labelled["metadata"]["annotations"] = json!({
        "gpu-admission.io/requestedBy": "alice@example.com",
        "gpu-admission.io/exception": "research/nccl-bench",
    });
    let baseline = setup.admit(other.clone()).await;
    assert!(privileged_denial(&baseline), "{baseline:?}");
    let reviews = [
        Review::create(other.clone()).by("mallory", &["gpu-admission:admins", "system:masters"]),
        Review::create(other.clone()).by("alice@example.com", &[]),
        Review::create(labelled),
    ];
    for review in &reviews {
        let outcome = setup.cluster.admit(review).await;
        assert!(!outcome.allowed, "{review:?}");
        assert_eq!(outcome.message(), baseline.message(), "{review:?}");
        assert!(!outcome
            .audit_annotations
            .contains_key(EXCEPTIONS_ANNOTATION));
    }
    // The excepted object passes whoever sends it.
    let matched = privileged_pod("research", "nccl-bench", "1");
    let outcome = setup
        .cluster
        .admit(&Review::create(matched).by("bob@example.com", &[]))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    setup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_cache_by_state_and_the_requests_let_through() {
    let mut broken = exception("research", "broken", &["gpu-privileged"], &["x"]);
    broken["spec"]["match"]["expression"] = json!("object.metadata.name ==");
    let setup = Setup::start(vec![
        exception(
            "research",
            "nccl-bench",
            &["gpu-privileged"],
            &["nccl-bench"],
        ),
        broken,
    ])
    .await;
    for (state, n) in [
        ("active", 1.0),
        ("expired", 0.0),
        ("invalid", 1.0),
        ("over_bound", 0.0),
    ] {
        let sample = format!("gpu_admission_exceptions{{state=\"{state}\"}}");
        assert_eq!(setup.metric(&sample).await, n, "{sample}");
    }
    let excepted = "gpu_admission_excepted_requests_total{policy=\"gpu-privileged\"}";
    assert_eq!(setup.metric(excepted).await, 0.0);
    for _ in 0..2 {
        let outcome = setup
            .admit(privileged_pod("research", "nccl-bench", "1"))
            .await;
        assert!(outcome.allowed, "{}", outcome.message());
    }
    assert!(
        !setup
            .admit(privileged_pod("research", "train", "1"))
            .await
            .allowed
    );
    assert_eq!(setup.metric(excepted).await, 2.0);
    setup.stop().await;
}

/// 20,000 exceptions over 200 namespaces, served in pages by the fake
/// cluster: each namespace holds its fair share of the 10,000 bound (its
/// first 50 by name), the rest are counted over the bound, not invalid,
/// and let nothing through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_exceptions_are_shared_fairly_among_two_hundred_namespaces() {
    // Applied in an order that is neither by namespace nor by name.
    let mut exceptions = Vec::with_capacity(20_000);
    for i in 0..100 {
        for n in 0..200 {
            let (namespace, name) = (format!("team{n:03}"), format!("e{i:03}"));
            exceptions.push(exception(
                &namespace,
                &name,
                &["gpu-privileged"],
                &[&format!("pod-{name}")],
            ));
        }
    }
    exceptions.reverse();
    let started = std::time::Instant::now();
    let setup = Setup::start(exceptions).await;
    eprintln!(
        "20,000 exceptions listed and settled in {:?}",
        started.elapsed()
    );
    for (state, n) in [
        ("active", 10_000.0),
        ("expired", 0.0),
        ("invalid", 0.0),
        ("over_bound", 10_000.0),
    ] {
        let sample = format!("gpu_admission_exceptions{{state=\"{state}\"}}");
        assert_eq!(setup.metric(&sample).await, n, "{sample}");
    }
    for n in [0, 117, 199] {
        let namespace = format!("team{n:03}");
        let held: Vec<String> = (setup.cache.in_namespace(&namespace).iter())
            .map(|e| e.name.clone())
            .collect();
        let first: Vec<String> = (0..50).map(|i| format!("e{i:03}")).collect();
        assert_eq!(held, first, "{namespace}");
    }
    // Within the share: let through; beyond it: judged as if absent.
    let outcome = setup
        .admit(privileged_pod("team117", "pod-e049", "1"))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    let outcome = setup
        .admit(privileged_pod("team117", "pod-e050", "1"))
        .await;
    assert!(privileged_denial(&outcome), "{outcome:?}");

    // A deletion frees a slot: the next one by name is held at once.
    setup
        .fake
        .change(|cluster| cluster.delete(&EXCEPTIONS, "team117", "e000"));
    setup
        .admit_until(
            &privileged_pod("team117", "pod-e050", "1"),
            "the exception held back",
            |o| o.allowed,
        )
        .await;
    assert_eq!(
        setup
            .metric("gpu_admission_exceptions{state=\"over_bound\"}")
            .await,
        9_999.0
    );
    setup.stop().await;
}

/// [`exception`] ending ten days from the wall clock (serve judges at it).
fn current_exception(namespace: &str, name: &str, objects: &[&str]) -> Value {
    let mut e = exception(namespace, name, &["gpu-privileged"], objects);
    let end = SystemTime::now() + Duration::from_secs(10 * 86_400);
    let end = k8s_openapi::jiff::Timestamp::try_from(end).unwrap();
    e["spec"]["expiresAt"] = json!(end.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    e
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn exception_lists(fake: &FakeApiServer) -> Vec<common::fake_apiserver::Recorded> {
    fake.requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/gpupolicyexceptions") && !r.is_watch())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_is_not_ready_until_the_exceptions_are_listed() {
    let fake = FakeApiServer::start(vec![NAMESPACES, EXCEPTIONS]).await;
    // More than a page (the watch lists 500 at a time), in namespaces of
    // at most 256 each.
    fake.change(|cluster| {
        for ns in ["research", "vision", "speech"] {
            cluster.apply(namespace(ns));
        }
        cluster.apply(current_exception("research", "nccl-bench", &["nccl-bench"]));
        for i in 0..500 {
            let ns = if i < 250 { "vision" } else { "speech" };
            cluster.apply(current_exception(ns, &format!("e{i:03}"), &["x"]));
        }
    });
    fake.hold_continued_lists(true);
    let server = InCluster::serve_with(&fake, &["--metrics-listen", "off"]);
    fake.wait_for_requests("the second page of GpuPolicyExceptions", |r| {
        r.iter()
            .any(|r| r.path.ends_with("/gpupolicyexceptions") && r.param("continue").is_some())
    })
    .await;
    server
        .wait_for_readyz((503, "policy exceptions not synced\n"))
        .await;
    fake.hold_continued_lists(false);
    server.wait_for_readyz((200, "ok\n")).await;
    let (allowed, message) = server
        .validate_pod(&privileged_pod("research", "nccl-bench", "1"))
        .await;
    assert!(allowed, "{message}");
    let (allowed, message) = server
        .validate_pod(&privileged_pod("research", "train", "1"))
        .await;
    assert!(!allowed);
    assert!(message.contains("gpu-privileged: "), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_is_ready_without_the_crd_and_excepts_nothing() {
    // The fake serves no GpuPolicyException: its list answers 404.
    let fake = FakeApiServer::start(vec![NAMESPACES]).await;
    fake.change(|cluster| cluster.apply(namespace("research")));
    let server = InCluster::serve_with(&fake, &["--metrics-listen", "off"]);
    server.wait_for_readyz((200, "ok\n")).await;
    assert!(exception_lists(&fake).iter().any(|r| r.status == 404));
    let (allowed, _) = server
        .validate_pod(&privileged_pod("research", "nccl-bench", "1"))
        .await;
    assert!(!allowed);
    wait_until("the log line about the missing CRD", || {
        server.logged("does not serve gpu-admission.io/v1alpha1 gpupolicyexceptions")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refused_the_list_is_ready_excepts_nothing_and_says_what_to_grant() {
    let fake = FakeApiServer::start(vec![NAMESPACES, EXCEPTIONS]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("research"));
        cluster.apply(current_exception("research", "nccl-bench", &["nccl-bench"]));
        cluster.forbid(&EXCEPTIONS);
    });
    let server = InCluster::serve_with(&fake, &["--metrics-listen", "off"]);
    server.wait_for_readyz((200, "ok\n")).await;
    let (allowed, _) = server
        .validate_pod(&privileged_pod("research", "nccl-bench", "1"))
        .await;
    assert!(
        !allowed,
        "excepted without being allowed to list exceptions"
    );
    wait_until("the log line naming the rule to grant", || {
        server.logged("deploy/base/rbac.yaml")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_exceptions_off_never_asks_for_them() {
    let fake = FakeApiServer::start(vec![NAMESPACES, EXCEPTIONS]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("research"));
        cluster.apply(current_exception("research", "nccl-bench", &["nccl-bench"]));
    });
    let server = InCluster::serve_with(
        &fake,
        &["--metrics-listen", "off", "--policy-exceptions", "off"],
    );
    server.wait_for_readyz((200, "ok\n")).await;
    let (allowed, _) = server
        .validate_pod(&privileged_pod("research", "nccl-bench", "1"))
        .await;
    assert!(!allowed);
    assert!(exception_lists(&fake).is_empty());
}
