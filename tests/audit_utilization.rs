//! `gpu-admission audit --prometheus URL`: a real Prometheus (Debian's
//! `prometheus`), loaded with a day of dcgm-exporter series written as a
//! TSDB by `promtool tsdb create-blocks-from openmetrics`, joined with the
//! pods of a cluster dump: idle GPU pods found, busy ones not. The same
//! answer recorded to a file gives the same section through
//! `--utilization FILE`; with Prometheus stopped the report still renders
//! and says why the section is missing. Skipped, saying so, when the
//! `prometheus` or `promtool` binary is absent (`.ci/run` installs them).
use crate::common;

use common::prometheus::{get, tool, Prometheus};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

const ENGINE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
const UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";

/// A series dcgm-exporter exports for GPU `gpu` of a node, used by
/// `namespace/pod` (labels as the exporter's Kubernetes mapping sets them).
struct Series {
    metric: &'static str,
    labels: String,
    /// Value at `hours_ago`.
    value: fn(f64) -> f64,
}

fn gpu_labels(node: &str, gpu: u32, namespace: &str, pod: &str) -> String {
    format!(
        r#"gpu="{gpu}",UUID="GPU-{node}-{gpu}",device="nvidia{gpu}",modelName="NVIDIA A100 80GB PCIe",Hostname="{node}",container="main",namespace="{namespace}",pod="{pod}""#
    )
}

/// A day and an hour of history, a sample every 5 minutes, as OpenMetrics.
fn history(now: u64) -> String {
    let mut series = Vec::new();
    // Two GPUs, never used (1 % of noise at most).
    for gpu in 0..2 {
        series.push(Series {
            metric: ENGINE,
            labels: gpu_labels("aks-a100-0", gpu, "ml", "idle-notebook"),
            value: |h| {
                if (h as u64).is_multiple_of(2) {
                    0.01
                } else {
                    0.0
                }
            },
        });
    }
    // Four GPUs busy all day.
    for gpu in 0..4 {
        series.push(Series {
            metric: ENGINE,
            labels: gpu_labels("aks-a100-1", gpu, "ml", "trainer"),
            value: |_| 0.85,
        });
    }
    // Idle but for one burst ten hours ago: not idle for the whole window.
    series.push(Series {
        metric: ENGINE,
        labels: gpu_labels("aks-a100-2", 0, "ml", "bursty"),
        value: |h| if (9.9..10.1).contains(&h) { 0.6 } else { 0.0 },
    });
    // A GPU without profiling metrics: the driver's utilization, in percent.
    series.push(Series {
        metric: UTIL,
        labels: gpu_labels("aks-t4-0", 0, "serving", "legacy-t4"),
        value: |_| 2.0,
    });
    // Scraped without honor_labels: the pod is in exported_*.
    series.push(Series {
        metric: ENGINE,
        labels: r#"gpu="0",UUID="GPU-t4-1",modelName="Tesla T4",Hostname="aks-t4-1",exported_container="main",exported_namespace="serving",exported_pod="relabelled",namespace="gpu-operator",pod="nvidia-dcgm-exporter-x2k9q""#.to_string(),
        value: |_| 0.0,
    });
    // A GPU no pod holds, and a finished pod's GPU: neither is joined.
    series.push(Series {
        metric: ENGINE,
        labels: gpu_labels("aks-a100-2", 1, "", ""),
        value: |_| 0.0,
    });
    series.push(Series {
        metric: ENGINE,
        labels: gpu_labels("aks-a100-3", 0, "ml", "finished"),
        value: |_| 0.0,
    });
    let mut out = String::new();
    for metric in [ENGINE, UTIL] {
        out.push_str(&format!("# TYPE {metric} gauge\n"));
        for s in series.iter().filter(|s| s.metric == metric) {
            let mut t = now - 25 * 3600;
            while t <= now - 60 {
                let hours_ago = (now - t) as f64 / 3600.0;
                out.push_str(&format!(
                    "{metric}{{{}}} {} {t}\n",
                    s.labels,
                    (s.value)(hours_ago)
                ));
                t += 300;
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The cluster dump: running GPU pods (one with no series at all), and a
/// finished one.
fn cluster(now: u64) -> Value {
    let pod = |namespace: &str, name: &str, gpus: u32, hours_ago: u64, phase: &str| {
        let started = k8s_openapi::jiff::Timestamp::from_second((now - hours_ago * 3600) as i64)
            .unwrap()
            .to_string();
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
            "spec": {"nodeName": "aks-gpu", "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                    "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": phase, "startTime": started}})
    };
    json!({"apiVersion": "v1", "kind": "List", "items": [
        pod("ml", "idle-notebook", 2, 48, "Running"),
        pod("ml", "trainer", 4, 48, "Running"),
        pod("ml", "bursty", 1, 30, "Running"),
        pod("serving", "legacy-t4", 1, 10, "Running"),
        pod("serving", "relabelled", 1, 72, "Running"),
        pod("ml", "no-metrics", 1, 30, "Running"),
        pod("ml", "finished", 1, 30, "Succeeded"),
    ]})
}

/// Seconds since the epoch.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// In `dir`: `history` (OpenMetrics) written as a TSDB and served by a
/// Prometheus, and `cluster` as a dump; none (saying so) without the
/// binaries.
fn serve(dir: &Path, history: &str, cluster: &Value) -> Option<(Prometheus, PathBuf)> {
    let (Some(prometheus), Some(promtool)) = (tool("prometheus"), tool("promtool")) else {
        return None;
    };
    let om = dir.join("dcgm.om");
    std::fs::write(&om, history).unwrap();
    let data = dir.join("data");
    let made = Command::new(promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics", "-q"])
        .arg(&om)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "promtool: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let dump = dir.join("cluster.json");
    std::fs::write(&dump, cluster.to_string()).unwrap();
    let config = "global:\n  evaluation_interval: 1m\nscrape_configs: []\n";
    Some((Prometheus::start(&prometheus, dir, &data, config), dump))
}

fn audit(dump: &Path, extra: &[&str], format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-f"])
        .arg(dump)
        .args(extra)
        .args(["-o", format])
        .output()
        .expect("run gpu-admission");
    assert!(
        out.status.success(),
        "audit {extra:?} -o {format} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Idle pods of a JSON report: (namespace/pod, GPUs, GPU-hours rounded).
fn idle(report: &Value) -> Vec<(String, i64, i64)> {
    report["utilization"]["idlePods"]
        .as_array()
        .unwrap_or_else(|| panic!("no idle pods in {:#}", report["utilization"]))
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap(),
                    p["pod"].as_str().unwrap()
                ),
                p["gpus"].as_i64().unwrap(),
                p["gpuHours"].as_f64().unwrap().round() as i64,
            )
        })
        .collect()
}

fn check_measured(report: &Value) {
    let u = &report["utilization"];
    assert!(u.get("missing").is_none(), "{u:#}");
    assert_eq!(u["window"], "24h");
    assert_eq!(u["thresholdPercent"], 5.0);
    assert_eq!(
        idle(report),
        vec![
            // 2 GPUs × the whole window; 1 × 24 h; 1 GPU × the 10 h it ran.
            ("ml/idle-notebook".to_string(), 2, 48),
            ("serving/relabelled".to_string(), 1, 24),
            ("serving/legacy-t4".to_string(), 1, 10),
        ]
    );
    let legacy = &u["idlePods"][2];
    assert_eq!(legacy["metric"], UTIL);
    assert_eq!(legacy["peakPercent"], 2.0);
    assert_eq!(u["idlePods"][0]["metric"], ENGINE);
    assert_eq!(u["idlePods"][0]["peakPercent"], 1.0);
    assert_eq!(u["gpuPods"], 6, "the pods holding GPUs");
    assert_eq!(u["busyPods"], 2, "trainer, and bursty by its one burst");
    assert_eq!(u["idleGpus"], 4);
    assert_eq!(u["gpuHoursWasted"].as_f64().unwrap().round(), 82.0);
    assert_eq!(u["withoutData"][0]["name"], "no-metrics");
    assert_eq!(u["withoutData"].as_array().unwrap().len(), 1);
    assert_eq!(u["metrics"], json!([UTIL, ENGINE]));
}

#[test]
fn idle_gpu_pods_from_a_real_prometheus() {
    let dir = tempfile::tempdir().unwrap();
    let now = now();
    let Some((server, dump)) = serve(dir.path(), &history(now), &cluster(now)) else {
        return;
    };
    let url = server.url.clone();
    let report: Value =
        serde_json::from_str(&audit(&dump, &["--prometheus", &url], "json")).unwrap();
    check_measured(&report);
    assert_eq!(
        report["utilization"]["source"],
        format!("Prometheus at {url}")
    );

    let html = audit(&dump, &["--prometheus", &url], "html");
    assert!(
        html.contains(r#"<section id="utilization" data-status="measured">"#),
        "{html}"
    );
    assert!(html.contains(r#"id="total-idle-gpus" data-value="4""#));
    for pod in ["idle-notebook", "relabelled", "legacy-t4"] {
        assert!(
            html.contains(&format!(r#"data-pod="{pod}""#)),
            "{pod} not in the page"
        );
    }
    for pod in ["trainer", "bursty"] {
        assert!(
            !html.contains(&format!(r#"data-pod="{pod}""#)),
            "{pod} in the page"
        );
    }
    let text = audit(&dump, &["--prometheus", &url], "text");
    assert!(
        text.contains("3 of 6 GPU pods idle, holding 4 GPUs"),
        "{text}"
    );

    // The answer recorded as docs/utilization.md says gives the same section.
    let query = gpu_admission::audit::utilization::query(Duration::from_secs(24 * 3600));
    let path = format!(
        "/api/v1/query?{}",
        form_urlencoded::Serializer::new(String::new())
            .append_pair("query", &query)
            .finish()
    );
    let (status, body) = get(server.port(), &path).unwrap();
    assert_eq!(status, 200, "{body}");
    let recorded = dir.path().join("utilization.json");
    std::fs::write(&recorded, body).unwrap();
    let from_file: Value = serde_json::from_str(&audit(
        &dump,
        &["--utilization", recorded.to_str().unwrap()],
        "json",
    ))
    .unwrap();
    check_measured(&from_file);

    // Prometheus gone: the report is complete and says why the section is not.
    server.stop();
    let report: Value =
        serde_json::from_str(&audit(&dump, &["--prometheus", &url], "json")).unwrap();
    let why = report["utilization"]["missing"].as_str().unwrap();
    assert!(why.starts_with(&format!("cannot reach {url}: ")), "{why}");
    assert!(report["utilization"].get("idlePods").is_none());
    assert_eq!(report["gpusHeld"], 10, "the rest of the report is there");
    let html = audit(&dump, &["--prometheus", &url], "html");
    assert!(
        html.contains(r#"<section id="utilization" data-status="missing">"#),
        "{html}"
    );
    assert!(
        html.contains("Utilization is missing from this report: cannot reach"),
        "{html}"
    );
    assert!(html.contains(r#"id="total-gpus-held""#), "{html}");
    assert!(html.trim_end().ends_with("</html>"));
}

/// The query docs/utilization.md gives for recording an answer is the one
/// the audit runs.
#[test]
fn the_documented_query_is_the_one_run() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/utilization.md"))
            .unwrap();
    let query = gpu_admission::audit::utilization::query(Duration::from_secs(24 * 3600));
    assert!(
        doc.contains(&query),
        "docs/utilization.md does not give the query:\n{query}"
    );
}

// A generated cluster with its own ground truth: namespaces × workload
// classes, pods with known GPUs, start times and series; the expected
// GPU-seconds allocated and used and the right-sizing choices are worked
// out here from the generator's truth, and every figure of the JSON
// report must equal them (floats to a relative 1e-9: Prometheus averages
// incrementally).

const SM: &str = "DCGM_FI_PROF_SM_ACTIVE";
const DRAM: &str = "DCGM_FI_PROF_DRAM_ACTIVE";
const FB: &str = "DCGM_FI_DEV_FB_USED";
const WINDOW: u64 = 24 * 3600;

/// A value of GPU `gpu` at `hours_ago`.
type Signal = fn(u32, f64) -> f64;

/// One generated GPU pod: where it runs, what owns it, what it exports.
struct GenPod {
    namespace: &'static str,
    name: &'static str,
    gpus: u32,
    node: &'static str,
    hours_ago: u64,
    /// Its controller (kind, name): the owner chain is built up to the root.
    owner: Option<(&'static str, &'static str)>,
    /// The kind of its workload's root, and its class.
    root: &'static str,
    class: &'static str,
    /// (metric, signal) it exports.
    series: Vec<(&'static str, Signal)>,
    /// The right-sizing choice it is built to fall under: (choice, to,
    /// GPUs after).
    right_size: Option<(&'static str, &'static str, f64)>,
}

/// The owner chains: (kind, apiVersion, name, its controller (kind, name)).
/// A controller (kind, name).
type Ref = (&'static str, &'static str);

const OWNERS: [(&str, &str, &str, Option<Ref>); 10] = [
    ("PyTorchJob", "kubeflow.org/v1", "bert", None),
    ("Job", "batch/v1", "etl", None),
    ("RayJob", "ray.io/v1", "tune", None),
    (
        "RayCluster",
        "ray.io/v1",
        "tune-raycluster",
        Some(("RayJob", "tune")),
    ),
    ("Deployment", "apps/v1", "llm", None),
    (
        "ReplicaSet",
        "apps/v1",
        "llm-7f9",
        Some(("Deployment", "llm")),
    ),
    (
        "InferenceService",
        "serving.kserve.io/v1beta1",
        "bert-isvc",
        None,
    ),
    (
        "Deployment",
        "apps/v1",
        "bert-isvc-predictor",
        Some(("InferenceService", "bert-isvc")),
    ),
    (
        "ReplicaSet",
        "apps/v1",
        "bert-isvc-predictor-5c",
        Some(("Deployment", "bert-isvc-predictor")),
    ),
    ("Notebook", "kubeflow.org/v1", "alice-nb", None),
];

/// GPU nodes no pod runs on, with unusable GPUs: (name, size, GPU
/// capacity, allocatable, the Node Problem Detector condition set `True`
/// and its message).
type UnhealthyNode = (
    &'static str,
    &'static str,
    u32,
    u32,
    Option<(&'static str, &'static str)>,
);
const UNHEALTHY: [UnhealthyNode; 2] = [
    (
        "a100-1e",
        "Standard_NC24ads_A100_v4",
        1,
        1,
        Some(("GPUXIDErrors", "XID 79 on GPU 0")),
    ),
    // The device plugin dropped one GPU: 3 allocatable, free and idle.
    ("a100-4b", "Standard_NC96ads_A100_v4", 4, 3, None),
];

/// A pod asking for 2 GPUs and not placed: (namespace, name, GPUs).
const QUEUED: (&str, &str, u32) = ("alice", "queued", 2);

/// The GPU nodes: (name, size, GPUs).
const NODES: [(&str, &str, u32); 8] = [
    ("a100-4a", "Standard_NC96ads_A100_v4", 4),
    ("a100-1a", "Standard_NC24ads_A100_v4", 1),
    ("a100-1b", "Standard_NC24ads_A100_v4", 1),
    ("a100-1c", "Standard_NC24ads_A100_v4", 1),
    ("a100-1d", "Standard_NC24ads_A100_v4", 1),
    ("t4-1a", "Standard_NC4as_T4_v3", 1),
    ("t4-1b", "Standard_NC4as_T4_v3", 1),
    ("h100-1", "Standard_NC40ads_H100_v5", 1),
];

fn gen_pods() -> Vec<GenPod> {
    let pod = |namespace, name, gpus, node, hours_ago, owner, root, class| GenPod {
        namespace,
        name,
        gpus,
        node,
        hours_ago,
        owner,
        root,
        class,
        series: Vec::new(),
        right_size: None,
    };
    let with = |mut p: GenPod, series: Vec<(&'static str, Signal)>, right_size| {
        p.series = series;
        p.right_size = right_size;
        p
    };
    vec![
        // Four A100s at under a fifth of their SMs, 20 GB each at most:
        // ⌈4 × 18.75 %⌉ = 1 GPU of compute, ⌈4 × 25,000 / 81,920⌉ = 2 of memory.
        with(
            pod(
                "research",
                "bert-master-0",
                4,
                "a100-4a",
                30,
                Some(("PyTorchJob", "bert")),
                "PyTorchJob",
                "training",
            ),
            vec![
                (SM, |g, h| {
                    if (h as u64).is_multiple_of(3) {
                        0.15
                    } else {
                        0.05 + 0.01 * g as f64
                    }
                }),
                (ENGINE, |_, _| 0.4),
                (DRAM, |g, _| 0.1 * (g + 1) as f64),
                (FB, |g, h| {
                    12_000.0 + 2_000.0 * g as f64 + if h < 2.0 { 2_000.0 } else { 0.0 }
                }),
            ],
            Some(("smaller-size", "Standard_NC48ads_A100_v4", 2.0)),
        ),
        // A T4 without profiling metrics' SM activity: engine activity only.
        with(
            pod(
                "research",
                "etl-x7k2p",
                1,
                "t4-1a",
                5,
                Some(("Job", "etl")),
                "Job",
                "training",
            ),
            vec![
                (ENGINE, |_, h| if h < 1.0 { 0.3 } else { 0.1 }),
                (FB, |_, _| 3_000.0),
            ],
            Some(("shared-gpu", "50%", 0.5)),
        ),
        // Busy: nothing smaller holds it.
        with(
            pod(
                "research",
                "tune-raycluster-head",
                1,
                "a100-1a",
                2,
                Some(("RayCluster", "tune-raycluster")),
                "RayJob",
                "training",
            ),
            vec![
                (SM, |_, h| 0.9 - 0.1 * (h as u64 % 2) as f64),
                (ENGINE, |_, _| 0.95),
                (DRAM, |_, _| 0.6),
                (FB, |_, _| 70_000.0),
            ],
            None,
        ),
        // 10 % of the SMs and 7.5 GB at most, grown: 1g.10gb.
        with(
            pod(
                "serving",
                "llm-7f9-a",
                1,
                "a100-1b",
                48,
                Some(("ReplicaSet", "llm-7f9")),
                "Deployment",
                "inference",
            ),
            vec![
                (SM, |_, h| if (h as u64) == 7 { 0.08 } else { 0.02 }),
                (ENGINE, |_, _| 0.1),
                (DRAM, |_, _| 0.05),
                (FB, |_, _| 6_000.0),
            ],
            Some(("mig", "1g.10gb", 1.0 / 7.0)),
        ),
        // No series at all: counted apart.
        pod(
            "serving",
            "llm-7f9-b",
            1,
            "a100-1c",
            20,
            Some(("ReplicaSet", "llm-7f9")),
            "Deployment",
            "inference",
        ),
        // The driver's utilization only; 12 GB of a 16 GB T4: nothing fits.
        with(
            pod(
                "serving",
                "bert-isvc-predictor-5c-q",
                1,
                "t4-1b",
                12,
                Some(("ReplicaSet", "bert-isvc-predictor-5c")),
                "InferenceService",
                "inference",
            ),
            vec![
                (UTIL, |_, h| 20.0 + (h as u64 % 4) as f64),
                (FB, |_, _| 12_000.0),
            ],
            None,
        ),
        // 30 % of the SMs and 30 GB, grown: 3g.40gb.
        with(
            pod(
                "alice",
                "alice-nb-0",
                1,
                "a100-1d",
                72,
                Some(("StatefulSet", "alice-nb")),
                "Notebook",
                "notebook",
            ),
            vec![
                (SM, |_, h| if h < 3.0 { 0.3 } else { 0.0 }),
                (ENGINE, |_, h| if h < 3.0 { 0.35 } else { 0.0 }),
                (DRAM, |_, _| 0.02),
                (FB, |_, _| 30_000.0),
            ],
            Some(("mig", "3g.40gb", 0.5)),
        ),
        // A bare pod without a memory series: not right-sized.
        with(
            pod("alice", "debug", 1, "h100-1", 10, None, "Pod", "other"),
            vec![(SM, |_, _| 0.01), (ENGINE, |_, _| 0.02)],
            None,
        ),
    ]
}

/// The one pod of the generated cluster that violates policies
/// (`gpu-privileged`, and the tier of its namespace); it is also idle.
const PRIVILEGED: &str = "debug";

fn rfc3339(seconds: u64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(seconds as i64)
        .unwrap()
        .to_string()
}

/// The dump: the GPU nodes, the controllers, the pods (and a finished pod
/// whose series must not count).
fn gen_cluster(now: u64, pods: &[GenPod]) -> Value {
    let mut items = Vec::new();
    let healthy = (NODES.iter()).map(|&(name, size, gpus)| (name, size, gpus, gpus, None));
    for (name, size, capacity, allocatable, problem) in healthy.chain(UNHEALTHY) {
        let conditions: Vec<Value> = problem
            .map(|(kind, message)| json!({"type": kind, "status": "True", "reason": kind, "message": message}))
            .into_iter()
            .collect();
        items.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": format!("uid-node-{name}"), "creationTimestamp": rfc3339(now - 100 * 3600),
                "labels": {"node.kubernetes.io/instance-type": size, "topology.kubernetes.io/region": "eastus",
                    "kubernetes.azure.com/agentpool": name.split('-').next().unwrap()}},
            "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "24", "nvidia.com/gpu": capacity.to_string()},
                "allocatable": {"cpu": "23", "nvidia.com/gpu": allocatable.to_string()},
                "conditions": conditions}}));
    }
    let reference = |kind: &str, name: &str| {
        let api = OWNERS
            .iter()
            .find(|o| o.0 == kind && o.2 == name)
            .map_or("apps/v1", |o| o.1);
        json!([{"apiVersion": api, "kind": kind, "name": name, "uid": format!("uid-{kind}-{name}"), "controller": true}])
    };
    let namespace_of = |owner: &str| match owner {
        "bert" | "etl" | "tune" | "tune-raycluster" => "research",
        "alice-nb" => "alice",
        _ => "serving",
    };
    for (kind, api, name, owner) in OWNERS {
        let mut o = json!({"apiVersion": api, "kind": kind,
            "metadata": {"name": name, "namespace": namespace_of(name), "uid": format!("uid-{kind}-{name}")},
            "spec": {}});
        if let Some((k, n)) = owner {
            o["metadata"]["ownerReferences"] = reference(k, n);
        }
        items.push(o);
    }
    // The Notebook's StatefulSet.
    items.push(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "alice-nb", "namespace": "alice", "uid": "uid-StatefulSet-alice-nb",
            "ownerReferences": reference("Notebook", "alice-nb")},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}}));
    let pod_object = |p: &GenPod, phase: &str| {
        let mut o = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": p.name, "namespace": p.namespace, "uid": format!("uid-pod-{}", p.name)},
            "spec": {"nodeName": p.node, "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                    "resources": {"requests": {"cpu": "4", "memory": "32Gi"},
                        "limits": {"nvidia.com/gpu": p.gpus.to_string(), "memory": "32Gi"}}}]},
            "status": {"phase": phase, "startTime": rfc3339(now - p.hours_ago * 3600)}});
        if let Some((kind, name)) = p.owner {
            o["metadata"]["ownerReferences"] = reference(kind, name);
        }
        o
    };
    for p in pods {
        let mut pod = pod_object(p, "Running");
        if p.name == PRIVILEGED {
            pod["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        }
        items.push(pod);
    }
    let (namespace, name, gpus) = QUEUED;
    items.push(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-pod-queued"},
        "spec": {"tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "resources": {"requests": {"cpu": "4", "memory": "32Gi"},
                    "limits": {"nvidia.com/gpu": gpus.to_string(), "memory": "32Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}));
    let finished = GenPod {
        name: "etl-done",
        ..gen_pods().remove(1)
    };
    items.push(pod_object(&finished, "Succeeded"));
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// The sample times of a pod's series: every 5 minutes back from a
/// minute ago to its start (at most 25 hours back).
fn sample_times(now: u64, p: &GenPod) -> Vec<u64> {
    let from = (now - p.hours_ago * 3600).max(now - 25 * 3600);
    (0..)
        .map(|k| now - 60 - 300 * k)
        .take_while(|t| *t >= from)
        .collect()
}

fn gen_history(now: u64, pods: &[GenPod]) -> String {
    let mut out = String::new();
    for metric in [SM, ENGINE, UTIL, DRAM, FB] {
        out.push_str(&format!("# TYPE {metric} gauge\n"));
        let mut lines = |p: &GenPod, signal: Signal| {
            for gpu in 0..p.gpus {
                let labels = gpu_labels(p.node, gpu, p.namespace, p.name);
                for t in sample_times(now, p).into_iter().rev() {
                    let hours_ago = (now - t) as f64 / 3600.0;
                    out.push_str(&format!(
                        "{metric}{{{labels}}} {} {t}\n",
                        signal(gpu, hours_ago)
                    ));
                }
            }
        };
        for p in pods {
            for (_, signal) in p.series.iter().filter(|(m, _)| *m == metric) {
                lines(p, *signal);
            }
        }
        // A finished pod's GPU, busy: not held, so not counted.
        if metric == SM {
            let finished = GenPod {
                name: "etl-done",
                ..gen_pods().remove(1)
            };
            lines(&finished, |_, _| 0.99);
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Peak and mean of `p`'s `metric` as Prometheus works them out at `at`
/// over the window: the peak over its GPUs and samples, the mean over its
/// GPUs of each GPU's mean over the samples.
fn truth(now: u64, at: u64, p: &GenPod, metric: &str) -> Option<(f64, f64)> {
    let (_, signal) = p.series.iter().find(|(m, _)| *m == metric)?;
    let times: Vec<u64> = sample_times(now, p)
        .into_iter()
        .filter(|t| *t + WINDOW >= at && *t <= at)
        .collect();
    let (mut peak, mut mean) = (f64::MIN, 0.0);
    for gpu in 0..p.gpus {
        let values: Vec<f64> = times
            .iter()
            .map(|t| signal(gpu, (now - t) as f64 / 3600.0))
            .collect();
        peak = values.iter().copied().fold(peak, f64::max);
        mean += values.iter().sum::<f64>() / values.len() as f64 / p.gpus as f64;
    }
    let scale = if matches!(metric, "DCGM_FI_DEV_GPU_UTIL" | "DCGM_FI_DEV_FB_USED") {
        1.0
    } else {
        100.0
    };
    Some((peak * scale, mean * scale))
}

/// One row of expected efficiency figures.
#[derive(Default, Debug)]
struct Row {
    pods: u64,
    gpus: u64,
    allocated: f64,
    used: f64,
    metrics: std::collections::BTreeMap<&'static str, f64>,
    dram_seconds: f64,
    dram_weighted: f64,
    without: (u64, u64, f64),
}

fn close(got: &Value, want: f64, what: &str) {
    let g = got
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {got} is not a number"));
    assert!(
        (g - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: got {g}, want {want}"
    );
}

fn check_row(got: &Value, want: &Row, what: &str) {
    assert_eq!(got["pods"], want.pods, "{what} pods: {got:#}");
    assert_eq!(got["gpus"], want.gpus, "{what} gpus");
    close(
        &got["gpuSecondsAllocated"],
        want.allocated,
        &format!("{what} allocated"),
    );
    close(&got["gpuSecondsUsed"], want.used, &format!("{what} used"));
    match want.allocated > 0.0 {
        true => close(
            &got["usedPercent"],
            want.used / want.allocated * 100.0,
            &format!("{what} used %"),
        ),
        false => assert!(got["usedPercent"].is_null(), "{what}: {got:#}"),
    }
    let metrics = got["metrics"].as_object().unwrap();
    assert_eq!(
        metrics.keys().collect::<Vec<_>>(),
        want.metrics.keys().collect::<Vec<_>>(),
        "{what} metrics"
    );
    for (metric, seconds) in &want.metrics {
        close(&metrics[*metric], *seconds, &format!("{what} {metric}"));
    }
    close(
        &got["dramGpuSeconds"],
        want.dram_seconds,
        &format!("{what} DRAM seconds"),
    );
    match want.dram_seconds > 0.0 {
        true => close(
            &got["dramActivePercent"],
            want.dram_weighted / want.dram_seconds,
            &format!("{what} DRAM %"),
        ),
        false => assert!(got["dramActivePercent"].is_null(), "{what}: {got:#}"),
    }
    assert_eq!(
        got["podsWithoutData"], want.without.0,
        "{what} without data"
    );
    assert_eq!(
        got["gpusWithoutData"], want.without.1,
        "{what} GPUs without data"
    );
    close(
        &got["gpuSecondsWithoutData"],
        want.without.2,
        &format!("{what} seconds without data"),
    );
}

/// Every efficiency and right-sizing figure of `u` (a report's
/// utilization) against the truth of `pods`, measured at `u.measuredAt`.
fn check_generated(u: &Value, now: u64, pods: &[GenPod], prices: &[(&str, f64)]) {
    assert!(u.get("missing").is_none(), "{u:#}");
    let at = u["measuredAt"]
        .as_str()
        .unwrap()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second() as u64;
    assert!(
        (now..now + 200).contains(&at),
        "measured at {at}, generated at {now}"
    );
    let mut rows: std::collections::BTreeMap<(&str, String), Row> = Default::default();
    for p in pods {
        let seconds = (at - (now - p.hours_ago * 3600)).min(WINDOW) as f64;
        let allocated = p.gpus as f64 * seconds;
        let activity = [SM, ENGINE, UTIL]
            .into_iter()
            .find_map(|m| Some((m, truth(now, at, p, m)?.1)));
        let dram = truth(now, at, p, DRAM).map(|(_, mean)| mean);
        for key in [
            ("cluster", String::new()),
            ("namespace", p.namespace.to_string()),
            ("class", p.class.to_string()),
            ("kind", p.root.to_string()),
        ] {
            let row = rows.entry(key).or_default();
            let Some((metric, mean)) = activity else {
                row.without.0 += 1;
                row.without.1 += p.gpus as u64;
                row.without.2 += allocated;
                continue;
            };
            row.pods += 1;
            row.gpus += p.gpus as u64;
            row.allocated += allocated;
            row.used += allocated * mean / 100.0;
            *row.metrics.entry(metric).or_default() += allocated;
            if let Some(dram) = dram {
                row.dram_seconds += allocated;
                row.dram_weighted += allocated * dram;
            }
        }
    }
    for ((by, name), want) in &rows {
        let got = match *by {
            "cluster" => &u["efficiency"],
            "namespace" => &u["byNamespace"][name],
            "class" => &u["byClass"][name],
            _ => &u["byKind"][name],
        };
        check_row(got, want, &format!("{by} {name}"));
    }
    for (by, field) in [
        ("namespace", "byNamespace"),
        ("class", "byClass"),
        ("kind", "byKind"),
    ] {
        let want: Vec<&String> = rows
            .keys()
            .filter(|(b, _)| *b == by)
            .map(|(_, n)| n)
            .collect();
        let got: Vec<&String> = u[field].as_object().unwrap().keys().collect();
        assert_eq!(got, want, "{field}");
    }
    // Right-sizing: the choices the generator built, with their reasoning
    // and savings at the example prices.
    let price = |size: &str| prices.iter().find(|(s, _)| *s == size).unwrap().1;
    let mut want: Vec<(&GenPod, &str, &str, f64)> = pods
        .iter()
        .filter_map(|p| p.right_size.map(|(c, to, after)| (p, c, to, after)))
        .collect();
    want.sort_by(|a, b| {
        (b.0.gpus as f64 - b.3)
            .total_cmp(&(a.0.gpus as f64 - a.3))
            .then((a.0.namespace, a.0.name).cmp(&(b.0.namespace, b.0.name)))
    });
    let got = u["rightSizing"].as_array().unwrap();
    let names = |v: Vec<&str>| v.join(", ");
    assert_eq!(
        names(got.iter().map(|r| r["pod"].as_str().unwrap()).collect()),
        names(want.iter().map(|w| w.0.name).collect()),
        "right-sized pods"
    );
    let mut total = 0.0;
    for (r, (p, choice, to, after)) in got.iter().zip(&want) {
        let what = format!("right-sizing {}", p.name);
        assert_eq!(r["namespace"], p.namespace, "{what}");
        assert_eq!(r["choice"], *choice, "{what}");
        assert_eq!(r["to"], *to, "{what}");
        assert_eq!(r["gpus"], p.gpus, "{what}");
        assert_eq!(r["workloadKind"], p.root, "{what}");
        close(&r["gpusAfter"], *after, &what);
        close(&r["gpusFreed"], p.gpus as f64 - after, &what);
        let (metric, (peak, _)) = [SM, ENGINE, UTIL]
            .into_iter()
            .find_map(|m| Some((m, truth(now, at, p, m)?)))
            .unwrap();
        assert_eq!(r["metric"], metric, "{what}");
        close(&r["peakPercent"], peak, &format!("{what} peak"));
        close(
            &r["peakMemoryMib"],
            truth(now, at, p, FB).unwrap().0,
            &format!("{what} memory"),
        );
        let size = NODES.iter().find(|n| n.0 == p.node).unwrap();
        let per_gpu = price(size.1) / size.2 as f64;
        let after_cost = match *choice {
            "smaller-size" => price(to),
            _ => per_gpu * after,
        };
        let per_day = 24.0 * (p.gpus as f64 * per_gpu - after_cost);
        close(&r["perDay"], per_day, &format!("{what} per day"));
        total += per_day;
    }
    close(&u["savings"]["perDay"], total, "savings per day");
    assert_eq!(u["savings"]["unpriced"], 0);
}

/// The rest of the report on the generated cluster against its truth:
/// GPUs held and not placed, in total and per namespace with the
/// violating and idle ones and the GPU-seconds of the efficiency section,
/// the one finding, unusable GPUs, and the money of violations, idle
/// pods, idle and unusable node GPUs.
fn check_cluster(report: &Value, pods: &[GenPod], prices: &[(&str, f64)]) {
    let price = |size: &str| prices.iter().find(|(s, _)| *s == size).unwrap().1;
    let node_price = |node: &str| {
        let (_, size, gpus) = NODES.iter().find(|n| n.0 == node).unwrap();
        price(size) / *gpus as f64
    };
    let idle = |p: &GenPod| p.name == PRIVILEGED;
    #[derive(Default, Debug, PartialEq)]
    struct Ns {
        held: i64,
        pending: i64,
        in_violation: i64,
        idle: i64,
        violations_per_day: f64,
        idle_per_day: f64,
    }
    let mut want: std::collections::BTreeMap<&str, Ns> = Default::default();
    for p in pods {
        let ns = want.entry(p.namespace).or_default();
        ns.held += p.gpus as i64;
        if p.name == PRIVILEGED {
            ns.in_violation += p.gpus as i64;
            ns.violations_per_day += p.gpus as f64 * node_price(p.node) * 24.0;
        }
        if idle(p) {
            ns.idle += p.gpus as i64;
            ns.idle_per_day += p.gpus as f64 * node_price(p.node) * 24.0;
        }
    }
    want.entry(QUEUED.0).or_default().pending += QUEUED.2 as i64;
    let total = |f: fn(&Ns) -> i64| want.values().map(f).sum::<i64>();
    assert_eq!(report["gpusHeld"], total(|n| n.held), "held");
    assert_eq!(report["gpusPending"], total(|n| n.pending), "not placed");
    assert_eq!(report["gpusInViolation"], total(|n| n.in_violation));
    let rows = report["namespaces"].as_object().unwrap();
    assert_eq!(
        rows.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    let efficiency = &report["utilization"]["byNamespace"];
    for (name, w) in &want {
        let got = &rows[*name];
        let what = format!("namespace {name}");
        for (field, n) in [
            ("gpusHeld", w.held),
            ("gpusPending", w.pending),
            ("gpusInViolation", w.in_violation),
            ("gpusIdle", w.idle),
        ] {
            assert_eq!(got[field], n, "{what} {field}: {got:#}");
        }
        close(&got["violationsPerDay"], w.violations_per_day, &what);
        close(&got["idlePodsPerDay"], w.idle_per_day, &what);
        for field in ["gpuSecondsAllocated", "gpuSecondsUsed"] {
            let seconds = efficiency[*name][field].as_f64().unwrap();
            close(&got[field], seconds, &format!("{what} {field}"));
        }
    }
    let findings: Vec<(&str, &str, &str)> = (report["findings"].as_array().unwrap().iter())
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap();
            (s("kind"), s("name"), s("policy"))
        })
        .collect();
    // Privileged, and bound to an H100 the namespace's tier does not
    // allow: one object, counted once.
    assert_eq!(
        findings,
        [
            ("Pod", PRIVILEGED, "gpu-privileged"),
            ("Pod", PRIVILEGED, "gpu-sku-allowlist")
        ]
    );

    let nodes = &report["nodes"];
    let unusable: Vec<(&str, i64)> = (nodes["unhealthyNodes"].as_array().unwrap().iter())
        .map(|n| {
            (
                n["node"].as_str().unwrap(),
                n["gpusUnusable"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(unusable, [("a100-1e", 1), ("a100-4b", 1)]);
    assert_eq!(nodes["gpusUnusable"], 2);
    assert_eq!(nodes["gpusIdle"], 3, "the 3 GPUs a100-4b still offers");

    let money = &report["money"];
    let sum = |f: fn(&Ns) -> f64| want.values().map(f).sum::<f64>();
    close(
        &money["violationsPerDay"],
        sum(|n| n.violations_per_day),
        "violations",
    );
    close(
        &money["idlePodsPerDay"],
        sum(|n| n.idle_per_day),
        "idle pods",
    );
    let a100_4 = price("Standard_NC96ads_A100_v4") / 4.0;
    close(
        &money["unusableNodesPerDay"],
        (price("Standard_NC24ads_A100_v4") + a100_4) * 24.0,
        "unusable node GPUs",
    );
    close(
        &money["idleNodesPerDay"],
        3.0 * a100_4 * 24.0,
        "idle node GPUs",
    );
    for field in [
        "unpricedGpus",
        "unpricedIdleGpus",
        "unpricedUnusableGpus",
        "unpricedIdlePodGpus",
    ] {
        assert_eq!(money[field], 0, "{field}");
    }
    assert_eq!(money["priceSource"], "test");
}

#[test]
fn every_figure_of_a_generated_cluster_matches_its_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (now, pods) = (now(), gen_pods());
    let history = gen_history(now, &pods);
    let Some((server, dump)) = serve(dir.path(), &history, &gen_cluster(now, &pods)) else {
        return;
    };
    let prices: [(&str, f64); 5] = [
        ("Standard_NC96ads_A100_v4", 14.692),
        ("Standard_NC48ads_A100_v4", 7.346),
        ("Standard_NC24ads_A100_v4", 3.673),
        ("Standard_NC4as_T4_v3", 0.526),
        ("Standard_NC40ads_H100_v5", 6.98),
    ];
    let price_file = dir.path().join("prices.yaml");
    let mut yaml = "date: \"2026-12-03\"\nsource: test\ncurrency: USD\nprices:\n".to_string();
    for (size, per_hour) in prices {
        yaml.push_str(&format!(
            "  - {{region: eastus, size: {size}, perHour: {per_hour}}}\n"
        ));
    }
    std::fs::write(&price_file, yaml).unwrap();
    let price_arg = price_file.to_str().unwrap();
    let url = server.url.clone();
    let live: Value = serde_json::from_str(&audit(
        &dump,
        &["--prometheus", &url, "--prices", price_arg],
        "json",
    ))
    .unwrap();
    let u = &live["utilization"];
    check_generated(u, now, &pods, &prices);
    assert_eq!(u["gpuPods"], 8, "the finished pod is not held");
    check_cluster(&live, &pods, &prices);

    // The answer recorded at the same time gives the same section.
    let at = u["measuredAt"]
        .as_str()
        .unwrap()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second();
    let query = gpu_admission::audit::utilization::query(Duration::from_secs(WINDOW));
    let path = format!(
        "/api/v1/query?{}",
        form_urlencoded::Serializer::new(String::new())
            .append_pair("query", &query)
            .append_pair("time", &at.to_string())
            .finish()
    );
    let (status, body) = get(server.port(), &path).unwrap();
    assert_eq!(status, 200, "{body}");
    let recorded = dir.path().join("utilization.json");
    std::fs::write(&recorded, body).unwrap();
    let args = [
        "--utilization",
        recorded.to_str().unwrap(),
        "--prices",
        price_arg,
    ];
    let from_file: Value = serde_json::from_str(&audit(&dump, &args, "json")).unwrap();
    let mut same = from_file["utilization"].clone();
    same["source"] = u["source"].clone();
    assert_eq!(&same, u, "the recorded answer gives the same section");

    // The page opens with the efficiency headline, its tables and the
    // right-sizing choices, before the totals and the idle GPU pods.
    let html = audit(&dump, &args, "html");
    let at_id = |id: &str| {
        html.find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no #{id} in the page"))
    };
    let order = [
        "efficiency",
        "total-gpu-used-share",
        "efficiency-by-class",
        "efficiency-by-namespace",
        "efficiency-by-kind",
        "right-sizing",
        "totals",
        "utilization",
    ];
    for pair in order.windows(2) {
        assert!(
            at_id(pair[0]) < at_id(pair[1]),
            "#{} after #{}",
            pair[0],
            pair[1]
        );
    }
    let share = format!("{:.3}", u["efficiency"]["usedPercent"].as_f64().unwrap());
    assert!(
        html.contains(&format!(
            r#"id="total-gpu-used-share" data-value="{share}""#
        )),
        "{share}"
    );
    for class in ["training", "inference", "notebook", "other"] {
        let row = &u["byClass"][class];
        let tr = format!(
            r#"<tr class="efficiency" data-by="class" data-name="{class}" data-pods="{}" data-allocated="{:.0}" data-used="{:.0}""#,
            row["pods"],
            row["gpuSecondsAllocated"].as_f64().unwrap(),
            row["gpuSecondsUsed"].as_f64().unwrap()
        );
        assert!(html.contains(&tr), "{tr}");
    }
    for r in u["rightSizing"].as_array().unwrap() {
        let tr = format!(
            r#"data-pod="{}" data-choice="{}" data-to="{}""#,
            r["pod"].as_str().unwrap(),
            r["choice"].as_str().unwrap(),
            r["to"].as_str().unwrap()
        );
        assert!(html.contains(&tr), "{tr}");
    }
    let text = audit(&dump, &args, "text");
    assert!(
        text.contains("GPU efficiency (GPU-seconds used of allocated over 24h):"),
        "{text}"
    );
    assert!(text.contains("  research/bert-master-0: 4 of Standard_NC96ads_A100_v4 -> smaller-size Standard_NC48ads_A100_v4"), "{text}");
}
