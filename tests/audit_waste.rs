//! The audit of a cluster dump with realistic statuses (tests/fixtures/
//! audit/waste/cluster.json): GPUs held and requested from each object's
//! status, GPU nodes per pool and their findings, and costs with a price
//! file. Every expected number is summed by hand from the fixture:
//!
//! | object | state | held | requested, not placed |
//! |---|---|---|---|
//! | Job ml/pretrain-done (4 × 4 GPUs) | Complete | 0 | 0 |
//! | Job ml/pretrain-failed (2 × 4) | Failed | 0 | 0 |
//! | Job research/pretrain-queued (4 × 4) | suspended by Kueue | 0 | 0 |
//! | Job ml/finetune (2 × 1, sleep infinity) | active 2, ready 1 | 1 | 1 |
//! | Deployment serving/chat (1 × 1) | 1 ready | 1 | 0 |
//! | Pod research/notebook (1, sleep infinity) | Running on the T4 node | 1 | 0 |
//! | Pod research/big-eval (4) | Pending, unscheduled | 0 | 4 |
//! | Pod ml/render (1 amd.com/gpu) | Running on the V620 node | 1 | 0 |
//! | Pod ml/old-eval (1, sleep infinity) | Succeeded on the V100 node | 0 | 0 |
//!
//! Nodes: two 1-GPU A100 nodes of pool a100 (one runs chat, one idle
//! since its creation), an untainted T4 node (pool t4, notebook), a
//! retired V100 node (pool v100, idle since old-eval ended), an AMD V620
//! node AKS does not support (pool v620, render), a 2-GPU A100 node of
//! Karpenter NodePool gpu-spot (finetune's running pod), a CPU node.
use gpu_admission::admission::Admission;
use gpu_admission::audit::{self, nodes, Prices, Report};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::offline::{read_manifest, with_evaluation_stack};
use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit")
        .join(path)
}

fn run() -> Report {
    with_evaluation_stack(|| {
        let loaded = bundle::load(&PolicySource::Dir(fixture("policies"))).unwrap();
        let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
        let objects = read_manifest(&fixture("waste/cluster.json")).unwrap();
        audit::audit(&admission, &objects)
    })
    .unwrap()
}

/// (held, requested) of the finding on `kind` `name`.
fn gpus_of(report: &Report, kind: &str, name: &str) -> (i64, i64) {
    let f = report
        .findings
        .iter()
        .find(|f| f.kind == kind && f.name == name)
        .unwrap_or_else(|| panic!("no finding on {kind} {name}: {:#?}", report.findings));
    (f.gpus, f.gpus_pending)
}

/// Runs `gpu-admission audit` on the fixture with `extra` arguments.
fn cli(format: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-f"])
        .arg(fixture("waste/cluster.json"))
        .arg("--policies")
        .arg(fixture("policies"))
        .args(["-o", format])
        .args(extra)
        .output()
        .expect("run gpu-admission");
    assert!(
        out.status.success(),
        "audit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn prices_arg() -> String {
    fixture("waste/prices.yaml").display().to_string()
}

/// `data-value` of the element with id `id`.
fn total(html: &str, id: &str) -> String {
    let re = Regex::new(&format!(r#"id="{id}" data-value="([^"]*)""#)).unwrap();
    re.captures(html)
        .unwrap_or_else(|| panic!("no #{id} in the page"))[1]
        .to_string()
}

#[test]
fn finished_failed_and_suspended_jobs_hold_nothing() {
    let report = run();
    for job in ["pretrain-done", "pretrain-failed", "pretrain-queued"] {
        assert_eq!(gpus_of(&report, "Job", job), (0, 0), "{job}");
    }
    let old = gpus_of(&report, "Pod", "old-eval");
    assert_eq!(old, (0, 0), "a Succeeded pod holds nothing");
}

#[test]
fn a_running_job_holds_its_ready_pods_and_requests_the_others() {
    let report = run();
    assert_eq!(gpus_of(&report, "Job", "finetune"), (1, 1));
}

#[test]
fn pending_pods_are_requested_not_placed() {
    let report = run();
    assert_eq!(gpus_of(&report, "Pod", "big-eval"), (0, 4));
}

#[test]
fn totals_are_the_hand_computed_sums_in_the_json_and_the_page() {
    let report = run();
    // finetune 1 + chat 1 + notebook 1 + render 1; finetune 1 + big-eval 4.
    assert_eq!((report.gpus_held, report.gpus_pending), (4, 5));
    // Violating: finetune and notebook hold 1 each; finetune and big-eval request 5.
    assert_eq!(
        (report.gpus_in_violation, report.gpus_pending_in_violation),
        (2, 5)
    );
    let json: Value = serde_json::from_str(&cli("json", &[])).unwrap();
    let html = cli("html", &[]);
    for (field, id, want) in [
        ("gpusHeld", "total-gpus-held", 4),
        ("gpusPending", "total-gpus-pending", 5),
        ("gpusInViolation", "total-gpus-in-violation", 2),
        (
            "gpusPendingInViolation",
            "total-gpus-pending-in-violation",
            5,
        ),
    ] {
        assert_eq!(json[field], want, "{field}");
        assert_eq!(total(&html, id), want.to_string(), "{id}");
    }
    let share: f64 = total(&html, "total-waste-share").parse().unwrap();
    assert!((share - 0.5).abs() < 1e-9, "{share}");
    assert!(
        html.contains("GPUs requested, not placed"),
        "the page names each figure"
    );
    assert!(html.contains("GPUs held by violating workloads"));
}

#[test]
fn pools_report_allocatable_requested_and_idle_per_size() {
    let report = run();
    let nodes = report.nodes.as_ref().expect("nodes were read");
    assert_eq!((nodes.nodes, nodes.gpu_nodes), (7, 6));
    assert_eq!(
        (
            nodes.gpus_allocatable,
            nodes.gpus_requested,
            nodes.gpus_idle
        ),
        (7, 4, 3)
    );
    let rows: Vec<(&str, &str, usize, i64, i64, i64, usize)> = nodes
        .pools
        .iter()
        .map(|p| {
            (
                p.pool.as_str(),
                p.size.as_str(),
                p.gpu_nodes,
                p.gpus_allocatable,
                p.gpus_requested,
                p.gpus_idle,
                p.untainted_nodes,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("a100", "Standard_NC24ads_A100_v4", 2, 2, 1, 1, 0),
            ("gpu-spot", "Standard_NC48ads_A100_v4", 1, 2, 1, 1, 0),
            ("t4", "Standard_NC4as_T4_v3", 1, 1, 1, 0, 1),
            ("v100", "Standard_NC6s_v3", 1, 1, 0, 1, 0),
            ("v620", "Standard_NG32ads_V620_v1", 1, 1, 1, 0, 0),
        ]
    );
    let html = cli("html", &[]);
    for (id, want) in [
        ("total-node-gpu-nodes", 6),
        ("total-node-gpus-allocatable", 7),
        ("total-node-gpus-requested", 4),
        ("total-node-gpus-idle", 3),
    ] {
        assert_eq!(total(&html, id), want.to_string(), "{id}");
    }
    let row = Regex::new(r#"<tr class="pool" data-pool="([^"]*)" data-size="([^"]*)" data-nodes="(\d+)" data-allocatable="(\d+)" data-requested="(\d+)" data-idle="(\d+)""#).unwrap();
    let page: Vec<String> = row
        .captures_iter(&html)
        .map(|c| {
            format!(
                "{} {} {} {} {} {}",
                &c[1], &c[2], &c[3], &c[4], &c[5], &c[6]
            )
        })
        .collect();
    let json: Vec<String> = nodes
        .pools
        .iter()
        .map(|p| {
            format!(
                "{} {} {} {} {} {}",
                p.pool, p.size, p.gpu_nodes, p.gpus_allocatable, p.gpus_requested, p.gpus_idle
            )
        })
        .collect();
    assert_eq!(page, json);
}

/// The nodes a node rule flags, in node order.
fn flagged(report: &Report, rule: &str) -> Vec<String> {
    let nodes = report.nodes.as_ref().unwrap();
    nodes
        .findings
        .iter()
        .filter(|f| f.rule == rule)
        .map(|f| f.node.clone())
        .collect()
}

#[test]
fn a_gpu_node_without_a_gpu_taint_is_a_finding() {
    let report = run();
    assert_eq!(
        flagged(&report, nodes::UNTAINTED),
        ["aks-t4-23456789-vmss000000"],
        "the Karpenter node's nvidia.com/gpu taint counts as a GPU taint"
    );
}

#[test]
fn retired_and_aks_unsupported_sizes_are_findings() {
    let report = run();
    assert_eq!(
        flagged(&report, nodes::RETIRED_SIZE),
        ["aks-v100-34567890-vmss000000"]
    );
    assert_eq!(
        flagged(&report, nodes::UNSUPPORTED_SIZE),
        ["aks-v620-45678901-vmss000000"]
    );
}

#[test]
fn gpu_nodes_nothing_requests_are_idle_since_their_creation_or_last_gpu_pod() {
    let report = run();
    assert_eq!(
        flagged(&report, nodes::IDLE),
        [
            "aks-a100-12345678-vmss000001",
            "aks-v100-34567890-vmss000000"
        ]
    );
    let nodes = report.nodes.as_ref().unwrap();
    let since: BTreeMap<&str, Option<&str>> = nodes
        .gpu_node_list
        .iter()
        .map(|n| (n.name.as_str(), n.idle_since.as_deref()))
        .collect();
    assert_eq!(
        since["aks-a100-12345678-vmss000001"],
        Some("2026-11-20T08:00:00Z")
    );
    assert_eq!(
        since["aks-v100-34567890-vmss000000"],
        Some("2026-11-29T06:00:00Z"),
        "old-eval ended after the node was created"
    );
    assert_eq!(since["gpu-spot-x7k2p"], None, "finetune runs there");
    let html = cli("html", &[]);
    let rows = Regex::new(
        r#"<tr class="node-finding" data-rule="([^"]*)" data-node="([^"]*)" data-gpus="(\d+)""#,
    )
    .unwrap();
    let page: Vec<(String, String)> = rows
        .captures_iter(&html)
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect();
    let json: Vec<(String, String)> = nodes
        .findings
        .iter()
        .map(|f| (f.rule.to_string(), f.node.clone()))
        .collect();
    assert_eq!(page, json);
}

#[test]
fn the_pods_holding_gpus_are_listed_with_their_nodes() {
    let report = run();
    let mut held: Vec<(String, Option<String>, i64)> = report
        .held_pods
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.namespace, p.name),
                p.node.clone(),
                p.gpus,
            )
        })
        .collect();
    held.sort();
    let on = |n: &str| Some(n.to_string());
    assert_eq!(
        held,
        [
            ("ml/finetune-a1b2c".into(), on("gpu-spot-x7k2p"), 1),
            ("ml/render".into(), on("aks-v620-45678901-vmss000000"), 1),
            (
                "research/notebook".into(),
                on("aks-t4-23456789-vmss000000"),
                1
            ),
            (
                "serving/chat-6d9f7-k8s2x".into(),
                on("aks-a100-12345678-vmss000000"),
                1
            ),
        ]
    );
}

#[test]
fn prices_turn_held_and_idle_gpus_into_a_cost_per_day() {
    let mut report = run();
    let prices = Prices::from_file(&fixture("waste/prices.yaml")).unwrap();
    audit::conclude(&mut report, Some(&prices));
    let money = report.money.as_ref().unwrap();
    // Per GPU-hour: A100 nodes 4 (the 2-GPU one 8 / 2), T4 0.5, V100 3;
    // V620 not priced. Mean over priced GPUs: (4 + 4 + 0.5 + 3 + 8) / 6.
    assert_eq!(money.mean_gpu_hour, Some(3.25));
    // finetune (a Job: the mean) 1 × 3.25 × 24 + notebook (on the T4) 1 × 0.5 × 24.
    assert_eq!(money.violations_per_day, 78.0 + 12.0);
    // Idle: an A100 of pool a100, an A100 of gpu-spot at 4, the V100 at 3.
    assert_eq!(money.idle_nodes_per_day, 96.0 + 96.0 + 72.0);
    let costs = |rows: &[audit::prices::Cost]| -> Vec<(String, f64)> {
        rows.iter().map(|c| (c.name.clone(), c.per_day)).collect()
    };
    assert_eq!(
        costs(&money.by_namespace),
        [("ml".into(), 78.0), ("research".into(), 12.0)]
    );
    assert_eq!(costs(&money.by_policy), [("no-keepalive".into(), 90.0)]);
    assert_eq!(
        costs(&money.by_pool),
        [
            ("a100".into(), 96.0),
            ("gpu-spot".into(), 96.0),
            ("v100".into(), 72.0)
        ]
    );
    assert_eq!((money.unpriced_gpus, money.unpriced_idle_gpus), (0, 0));

    let json: Value = serde_json::from_str(&cli("json", &["--prices", &prices_arg()])).unwrap();
    assert_eq!(json["money"]["violationsPerDay"], 90.0);
    assert_eq!(json["money"]["idleNodesPerDay"], 264.0);
    assert_eq!(json["money"]["priceDate"], "2026-11-01");
    let html = cli("html", &["--prices", &prices_arg()]);
    assert_eq!(total(&html, "total-cost-violations"), "90.00");
    assert_eq!(total(&html, "total-cost-idle-nodes"), "264.00");
    assert!(
        html.contains(r#"<time id="price-date" datetime="2026-11-01">"#),
        "the price date is on the page"
    );
    assert!(html.contains("Example prices, not a quote."));
    assert!(
        html.contains(r#"data-table="pool" data-name="v100" data-gpus="1" data-per-day="72.00""#)
    );
}

/// A recorded answer of the utilization query over 12 hours, read at
/// 2026-12-01T00:00:00Z: finetune's running pod (on the gpu-spot A100
/// node), the notebook (T4) and render (V620, not priced) idle; chat busy.
fn recorded_utilization(dir: &Path) -> String {
    let series = |namespace: &str, pod: &str, peak: f64| {
        ["max", "mean"].map(|stat| {
            serde_json::json!({"metric": {"namespace": namespace, "pod": pod, "stat": stat,
                "metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "window": "12h"},
                "value": [1_796_083_200.0, (if stat == "max" { peak } else { peak / 2.0 }).to_string()]})
        })
    };
    let result: Vec<Value> = [
        series("ml", "finetune-a1b2c", 0.01),
        series("research", "notebook", 0.0),
        series("ml", "render", 0.02),
        series("serving", "chat-6d9f7-k8s2x", 0.9),
    ]
    .into_iter()
    .flatten()
    .collect();
    let answer = serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}});
    let path = dir.join("utilization.json");
    std::fs::write(&path, answer.to_string()).unwrap();
    path.display().to_string()
}

/// Idle pods cost their GPUs at their node's price, per day and for the
/// GPU-hours of the window, in total and per namespace, beside the other
/// figures per namespace, with the prices' date and source.
#[test]
fn idle_pods_cost_their_gpus_at_their_nodes_price_per_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let answer = recorded_utilization(dir.path());
    let prices = prices_arg();
    let args = ["--prices", &prices, "--utilization", &answer];
    let json: Value = serde_json::from_str(&cli("json", &args)).unwrap();
    let money = &json["money"];
    // finetune's GPU at 8 / 2 = 4 an hour, the notebook's at 0.5; render's
    // V620 node has no price.
    assert_eq!(money["idlePodsPerDay"], 96.0 + 12.0);
    assert_eq!(money["idlePodsInWindow"], 12.0 * 4.0 + 12.0 * 0.5);
    assert_eq!(money["unpricedIdlePodGpus"], 1);
    assert_eq!(
        money["idlePodsByNamespace"],
        serde_json::json!([{"name": "ml", "gpus": 1, "perDay": 96.0},
            {"name": "research", "gpus": 1, "perDay": 12.0}])
    );
    // Held, not placed and in violation as the table at the top sums
    // them; idle from the answer; render's GPU unpriced leaves ml's idle
    // pods without a cost rather than a part of one. GPU-seconds: each
    // pod's GPU for the 12 hours, used at its mean engine activity (half
    // its peak in the answer): ml 43,200 × (0.5 % + 1 %), serving 45 %.
    assert_eq!(
        json["namespaces"],
        serde_json::json!({
            "ml": {"gpusHeld": 2, "gpusPending": 1, "gpusInViolation": 1, "gpusIdle": 2,
                "gpuSecondsAllocated": 86_400.0, "gpuSecondsUsed": 648.0,
                "violationsPerDay": 78.0},
            "research": {"gpusHeld": 1, "gpusPending": 4, "gpusInViolation": 1, "gpusIdle": 1,
                "gpuSecondsAllocated": 43_200.0, "gpuSecondsUsed": 0.0,
                "violationsPerDay": 12.0, "idlePodsPerDay": 12.0},
            "serving": {"gpusHeld": 1, "gpusPending": 0, "gpusInViolation": 0, "gpusIdle": 0,
                "gpuSecondsAllocated": 43_200.0, "gpuSecondsUsed": 19_440.0,
                "violationsPerDay": 0.0, "idlePodsPerDay": 0.0},
        })
    );
    let held: i64 = ["ml", "research", "serving"]
        .map(|ns| json["namespaces"][ns]["gpusHeld"].as_i64().unwrap())
        .iter()
        .sum();
    assert_eq!(json["gpusHeld"], held);

    let text = cli("text", &args);
    for line in [
        "Cost per day at the prices of 2026-11-01 (test prices (round numbers), example prices): 90.00 USD held by violating workloads, 264.00 USD in idle node GPUs, 0.00 USD in unusable node GPUs, 108.00 USD in idle GPU pods (54.00 USD for their GPU-hours within the window; 1 GPU on a node without a price)",
        "GPUs per namespace (idle: peak use under 5% over 12h; cost per day at the prices of 2026-11-01 (test prices (round numbers), USD), example prices):",
        "NAMESPACE   HELD  NOT PLACED  IN VIOLATION          IDLE  GPU-H ALLOCATED  GPU-H USED  VIOLATING/DAY  IDLE PODS/DAY",
        "ml             2           1             1             2             24.0         0.2          78.00     not priced",
        "research       1           4             1             1             12.0         0.0          12.00          12.00",
        "serving        1           0             0             0             12.0         5.4           0.00           0.00",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }

    let html = cli("html", &args);
    assert_eq!(total(&html, "total-cost-idle-pods"), "108.00");
    for row in [
        r#"<tr class="namespace" data-namespace="ml" data-held="2" data-pending="1" data-in-violation="1" data-idle="2" data-allocated="86400" data-used="648" data-violations-per-day="78.00">"#,
        r#"<tr class="namespace" data-namespace="research" data-held="1" data-pending="4" data-in-violation="1" data-idle="1" data-allocated="43200" data-used="0" data-violations-per-day="12.00" data-idle-pods-per-day="12.00">"#,
        r#"data-table="idle-pods" data-name="ml" data-gpus="1" data-per-day="96.00""#,
    ] {
        assert!(html.contains(row), "no {row} in the page");
    }
    let section = &html[html.find(r#"<section id="namespaces">"#).unwrap()..];
    assert!(
        section.contains(r#"at the prices of <time datetime="2026-11-01">2026-11-01</time> (test prices (round numbers))"#),
        "the namespace table names its prices"
    );
}

/// Without utilization, idle pods are "not measured", never 0.
#[test]
fn without_utilization_idle_pods_are_not_measured() {
    let json: Value = serde_json::from_str(&cli("json", &["--prices", &prices_arg()])).unwrap();
    assert!(json["money"].get("idlePodsPerDay").is_none(), "{json:#}");
    assert!(json["namespaces"]["ml"].get("gpusIdle").is_none());
    let text = cli("text", &["--prices", &prices_arg()]);
    assert!(
        text.contains("264.00 USD in idle node GPUs, 0.00 USD in unusable node GPUs, idle GPU pods not measured\n"),
        "{text}"
    );
    let html = cli("html", &["--prices", &prices_arg()]);
    assert!(html.contains(r#"id="cost-idle-pods-missing""#));
}

#[test]
fn without_a_price_file_the_report_has_no_costs() {
    let json: Value = serde_json::from_str(&cli("json", &[])).unwrap();
    assert!(json.get("money").is_none(), "{json:#}");
    let html = cli("html", &[]);
    assert!(!html.contains("id=\"money\""));
    assert!(!html.contains("per day"));
}

#[test]
fn a_bad_price_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("prices.yaml");
    std::fs::write(&bad, "date: soon\nsource: s\nprices: []\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-f"])
        .arg(fixture("waste/cluster.json"))
        .arg("--prices")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("prices.yaml") && err.contains("YYYY-MM-DD"),
        "{err}"
    );
}

#[test]
fn the_shipped_example_prices_parse_say_they_are_examples_and_name_catalog_sizes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/prices/azure-eastus-example.yaml");
    let prices = Prices::from_file(&path).unwrap();
    assert!(
        prices.example,
        "values not checked against Azure are labelled as examples"
    );
    assert!(!prices.source.is_empty() && prices.date.len() == 10);
    let catalog = gpu_admission::gpu::catalog::Catalog::embedded();
    for p in &prices.prices {
        assert!(
            catalog.get(&p.size).is_some(),
            "{} is not in the catalog",
            p.size
        );
    }
}

/// A workload custom resource holds what its spec asks until its
/// `PodTemplateSource` (policies/workload-kinds.yaml) says it is done.
#[test]
fn a_finished_custom_workload_holds_nothing() {
    let report = with_evaluation_stack(|| {
        let loaded = bundle::load(&PolicySource::Dir(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"),
        ))
        .unwrap();
        let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
        let job = |name: &str, status: Value| {
            serde_json::json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": name, "namespace": "ml", "uid": name},
                "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {
                    "containers": [{"name": "pytorch", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                        "command": ["sleep", "infinity"],
                        "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}}}},
                "status": status})
        };
        let running = serde_json::json!({"conditions": [{"type": "Running", "status": "True"}]});
        let done = serde_json::json!({"conditions": [{"type": "Running", "status": "False"},
            {"type": "Succeeded", "status": "True"}]});
        audit::audit(&admission, &[job("running", running), job("done", done)])
    })
    .unwrap();
    assert_eq!(gpus_of(&report, "PyTorchJob", "running"), (4, 0));
    assert_eq!(gpus_of(&report, "PyTorchJob", "done"), (0, 0));
    assert_eq!(report.gpus_held, 4);
}

/// `serve --report-prices` reads its file at start: a bad one, or one
/// without the periodic report, stops the server before it listens.
#[test]
fn serve_checks_its_price_file_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("prices.yaml");
    std::fs::write(&bad, "date: soon\nsource: s\nprices: []\n").unwrap();
    let serve = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
            .args(["serve", "--listen", "127.0.0.1:0", "--report-prices"])
            .arg(&bad)
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let alone = serve(&[]);
    assert!(
        alone.contains("--report-prices needs --report-interval"),
        "{alone}"
    );
    let with_report = serve(&[
        "--report-interval",
        "10m",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    assert!(
        with_report.contains("is not a YYYY-MM-DD date"),
        "{with_report}"
    );
}
