//! One holding rule for every figure, on a generated cluster that knows
//! its own truth: *held* GPUs belong to pods bound to a node and not
//! finished, *requested, not placed* ones to pods not bound and to pods a
//! controller wants and has not created. Controllers whose pods were read
//! are counted through them (a Deployment's pod bound to an A10 node and
//! still pulling its image is held, though not ready); a Deployment whose
//! namespace's pods are not in the dump is counted by its status, and the
//! report says which way each was counted. The node section agrees, and
//! so do the figures per namespace.
use gpu_admission::admission::Admission;
use gpu_admission::audit::{self, Report};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::offline::with_evaluation_stack;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// What the generator knows the cluster holds.
#[derive(Debug, Default, PartialEq)]
struct Truth {
    held: i64,
    pending: i64,
    /// GPUs requested on the nodes the dump has (by the pods it has).
    on_nodes: i64,
    by_pod: usize,
    through_pods: usize,
    by_status: usize,
    /// (held, not placed) per namespace; every generated workload
    /// violates a policy, so all its held GPUs are in violation.
    namespaces: BTreeMap<String, (i64, i64)>,
}

/// `teams` namespaces, each with: Deployment chat (2 × 1 GPU, 1 ready)
/// whose pods run on one A10 node and are bound to another still pulling
/// the image; Job train (2 × 1 GPU, 1 ready), one pod running, one
/// unschedulable; a Pending pod eval of 2 GPUs on no node. Namespace
/// legacy: Deployment old (3 × 1 GPU, 2 ready) whose pods are not in the
/// dump. One A10 node per bound pod.
fn generate(teams: usize) -> (Vec<Value>, Truth) {
    let mut objects = Vec::new();
    let mut truth = Truth::default();
    let spec = |gpus: i64| {
        json!({"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.8.5",
            "command": ["sleep", "infinity"], "resources": {"limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "8", "memory": "64Gi"}}}]})
    };
    let meta = |ns: &str, name: &str, owner: Option<(&str, &str, &str)>| {
        let mut m = json!({"name": name, "namespace": ns, "uid": format!("{ns}-{name}")});
        if let Some((api, kind, owner)) = owner {
            m["ownerReferences"] = json!([{"apiVersion": api, "kind": kind, "name": owner,
                "uid": format!("{ns}-{owner}"), "controller": true}]);
        }
        m
    };
    let running = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
    let pulling = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False"}], "containerStatuses": [{"name": "main", "ready": false,
        "restartCount": 0, "image": "vllm/vllm-openai:v0.8.5", "imageID": "",
        "state": {"waiting": {"reason": "ContainerCreating"}}}]});
    let unschedulable = json!({"phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
    let mut nodes = 0;
    let mut pod = |objects: &mut Vec<Value>,
                   truth: &mut Truth,
                   ns: &str,
                   name: &str,
                   owner,
                   bound: bool,
                   status: &Value| {
        let mut spec = spec(1);
        if bound {
            spec["nodeName"] = json!(format!("aks-a10-{nodes}"));
            objects.push(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("aks-a10-{nodes}"), "labels": {
                    "kubernetes.azure.com/agentpool": "a10", "kubernetes.azure.com/accelerator": "nvidia",
                    "node.kubernetes.io/instance-type": "Standard_NV36ads_A10_v5"}},
                "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": "35", "memory": "420Gi", "nvidia.com/gpu": "1"}}}));
            nodes += 1;
            truth.held += 1;
            truth.on_nodes += 1;
            truth.namespaces.entry(ns.to_string()).or_default().0 += 1;
        } else {
            truth.pending += 1;
            truth.namespaces.entry(ns.to_string()).or_default().1 += 1;
        }
        objects.push(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta(ns, name, owner),
            "spec": spec, "status": status}),
        );
    };
    for team in 0..teams {
        let ns = format!("team-{team}");
        let ns = ns.as_str();
        objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(ns, "chat", None),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}},
                "template": {"metadata": {"labels": {"app": "chat"}}, "spec": spec(1)}},
            "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1}}));
        let rs = Some(("apps/v1", "Deployment", "chat"));
        objects.push(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta(ns, "chat-7c9", rs),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}},
                "template": {"metadata": {"labels": {"app": "chat"}}, "spec": spec(1)}},
            "status": {"replicas": 2, "readyReplicas": 1}}));
        let of_rs = Some(("apps/v1", "ReplicaSet", "chat-7c9"));
        objects.push(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(ns, "train", None),
            "spec": {"parallelism": 2, "completions": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": spec(1)["containers"]}}},
            "status": {"active": 2, "ready": 1}}));
        let of_job = Some(("batch/v1", "Job", "train"));
        let pods = [
            ("chat-7c9-a", of_rs, true, &running),
            ("chat-7c9-b", of_rs, true, &pulling),
            ("train-a", of_job, true, &running),
            ("train-b", of_job, false, &unschedulable),
        ];
        for (name, owner, bound, status) in pods {
            pod(&mut objects, &mut truth, ns, name, owner, bound, status);
        }
        objects.push(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta(ns, "eval", None),
            "spec": spec(2), "status": unschedulable}),
        );
        truth.pending += 2;
        truth.namespaces.get_mut(ns).unwrap().1 += 2;
        truth.by_pod += 1;
        truth.through_pods += 2;
    }
    objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("legacy", "old", None),
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "old"}},
            "template": {"metadata": {"labels": {"app": "old"}}, "spec": spec(1)}},
        "status": {"replicas": 3, "readyReplicas": 2, "availableReplicas": 2}}));
    truth.held += 2;
    truth.pending += 1;
    truth.namespaces.insert("legacy".into(), (2, 1));
    truth.by_status += 1;
    (objects, truth)
}

fn policies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policies")
}

fn run(objects: &[Value]) -> Report {
    with_evaluation_stack(|| {
        let loaded = bundle::load(&PolicySource::Dir(policies())).unwrap();
        let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
        audit::audit(&admission, objects)
    })
    .unwrap()
}

/// `gpu-admission audit -f DUMP -o FORMAT`.
fn cli(dump: &Path, format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-f"])
        .arg(dump)
        .arg("--policies")
        .arg(policies())
        .args(["-o", format])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// (held, not placed) of `name` in `namespace`, from its findings (every
/// generated workload sleeps forever: a keep-alive finding).
fn of(report: &Report, namespace: &str, name: &str) -> (i64, i64) {
    (report.findings.iter())
        .find(|f| f.namespace.as_deref() == Some(namespace) && f.name == name)
        .map(|f| (f.gpus, f.gpus_pending))
        .unwrap_or_else(|| panic!("no finding on {namespace}/{name}"))
}

#[test]
fn held_and_not_placed_match_the_truth_and_the_node_section() {
    for teams in [1, 3] {
        let (objects, truth) = generate(teams);
        let report = run(&objects);
        let counted = |way: &str| report.gpus_counted.get(way).copied().unwrap_or(0);
        let seen = Truth {
            held: report.gpus_held,
            pending: report.gpus_pending,
            on_nodes: report.nodes.as_ref().unwrap().gpus_requested,
            by_pod: counted("pod"),
            through_pods: counted("pods"),
            by_status: counted("status"),
            namespaces: (report.namespaces.iter())
                .map(|(ns, r)| (ns.clone(), (r.gpus_held, r.gpus_pending)))
                .collect(),
        };
        assert_eq!(seen, truth, "{teams} teams");
        for (ns, row) in &report.namespaces {
            assert_eq!(row.gpus_in_violation, row.gpus_held, "{ns}");
            assert_eq!(row.gpus_idle, None, "{ns}: utilization not measured");
        }
        let nodes = report.nodes.as_ref().unwrap();
        assert_eq!(nodes.pools.len(), 1);
        assert_eq!(nodes.pools[0].gpus_requested, truth.on_nodes);
        // The objects carry the same numbers: chat's pod pulling its image
        // is held, not "not placed" as its readyReplicas would say.
        for (name, want) in [("chat", (2, 0)), ("train", (1, 1)), ("eval", (0, 2))] {
            assert_eq!(of(&report, "team-0", name), want, "{name}");
        }
        let old = of(&report, "legacy", "old");
        assert_eq!(old, (2, 1), "by its status: its pods were not read");
        // Every generated workload violates the keep-alive policy.
        assert_eq!(
            (report.gpus_in_violation, report.gpus_pending_in_violation),
            (truth.held, truth.pending)
        );
    }
}

#[test]
fn audit_of_the_dump_says_the_same_and_how_it_counted() {
    let (objects, truth) = generate(2);
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("dump.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(&dump, serde_json::to_vec(&list).unwrap()).unwrap();

    let json: Value = serde_json::from_str(&cli(&dump, "json")).unwrap();
    assert_eq!(
        (&json["gpusHeld"], &json["gpusPending"]),
        (&json!(truth.held), &json!(truth.pending))
    );
    assert_eq!(json["nodes"]["gpusRequested"], json!(truth.on_nodes));
    let counted =
        json!({"pod": truth.by_pod, "pods": truth.through_pods, "status": truth.by_status});
    assert_eq!(json["gpusCounted"], counted);
    let rows: BTreeMap<&str, Value> = (truth.namespaces.iter())
        .map(|(ns, (held, pending))| {
            let row = json!({"gpusHeld": held, "gpusPending": pending, "gpusInViolation": held});
            (ns.as_str(), row)
        })
        .collect();
    assert_eq!(json["namespaces"], json!(rows));

    let text = cli(&dump, "text");
    let many = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let line = format!(
        "GPUs counted: {} own state, {} pods read, {} status (pods not read)",
        many(truth.by_pod, "pod by its", "pods by their"),
        many(
            truth.through_pods,
            "controller through its",
            "controllers through their"
        ),
        many(truth.by_status, "controller by its", "controllers by their"),
    );
    assert!(text.contains(&line), "{text}");
    assert!(
        text.contains(&format!(
            "GPUs held (pods bound to a node, not finished): {}",
            truth.held
        )),
        "{text}"
    );
    // The table: NAMESPACE HELD NOT PLACED IN VIOLATION IDLE.
    let table = text
        .split("\nGPUs per namespace (idle: not measured (no --prometheus or --utilization)):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no namespace table in\n{text}"));
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .split("  ")
        .filter(|c| !c.is_empty())
        .collect();
    let header: Vec<&str> = header.iter().map(|c| c.trim()).collect();
    assert_eq!(
        header,
        ["NAMESPACE", "HELD", "NOT PLACED", "IN VIOLATION", "IDLE"]
    );
    let seen: BTreeMap<String, (i64, i64)> = lines
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cells[3], cells[1], "all held GPUs are in violation: {l}");
            assert_eq!(cells[4..], ["not", "measured"], "{l}");
            let n = |i: usize| cells[i].parse::<i64>().unwrap();
            (cells[0].to_string(), (n(1), n(2)))
        })
        .collect();
    assert_eq!(seen, truth.namespaces);
    let html = cli(&dump, "html");
    assert!(html.contains(&format!(
        r#"id="total-gpus-held" data-value="{}""#,
        truth.held
    )));
    assert!(html.contains(&format!(
        r#"id="total-gpus-pending" data-value="{}""#,
        truth.pending
    )));
    assert!(
        html.contains(&format!(
            "<p class=\"hint\" id=\"gpus-counted\">{line}.</p>"
        )),
        "no counted line"
    );
    let row = regex::Regex::new(r#"<tr class="namespace" data-namespace="([^"]*)" data-held="(\d+)" data-pending="(\d+)" data-in-violation="(\d+)">"#).unwrap();
    let page: BTreeMap<String, (i64, i64)> = row
        .captures_iter(&html)
        .map(|c| {
            assert_eq!(c[4], c[2], "all held GPUs are in violation");
            (
                c[1].to_string(),
                (c[2].parse().unwrap(), c[3].parse().unwrap()),
            )
        })
        .collect();
    assert_eq!(page, truth.namespaces);
}
