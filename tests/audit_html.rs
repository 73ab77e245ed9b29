//! `gpu-admission audit -o html`: the page's numbers are the JSON audit's
//! numbers, names and messages are escaped, and 10,000 objects stay a
//! page of a few MiB.
use regex::Regex;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report/cluster.json")
}

/// Runs `gpu-admission audit -f FILE -o FORMAT` and returns its stdout.
fn audit(file: &Path, format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-f"])
        .arg(file)
        .args(["-o", format])
        .output()
        .expect("run gpu-admission");
    assert!(
        out.status.success(),
        "audit -o {format} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// `data-value` of the element with id `id`.
fn total(html: &str, id: &str) -> String {
    let re = Regex::new(&format!(r#"id="{id}" data-value="([^"]*)""#)).unwrap();
    re.captures(html)
        .unwrap_or_else(|| panic!("no #{id} in the page"))[1]
        .to_string()
}

fn number(html: &str, id: &str) -> i64 {
    total(html, id).parse().unwrap()
}

/// Undoes the page's escaping of attribute values.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The bars of the chart with id `id`: label -> value.
fn bars(html: &str, id: &str) -> BTreeMap<String, i64> {
    let Some(start) = html.find(&format!(r#"<svg class="chart" id="{id}""#)) else {
        return BTreeMap::new();
    };
    let svg = &html[start..start + html[start..].find("</svg>").unwrap()];
    let re = Regex::new(r#"<g class="bar" data-label="([^"]*)" data-value="(\d+)">"#).unwrap();
    re.captures_iter(svg)
        .map(|c| (unescape(&c[1]), c[2].parse().unwrap()))
        .collect()
}

fn key(f: &Value) -> (String, String, String) {
    (
        f["kind"].as_str().unwrap().to_string(),
        f["namespace"].as_str().unwrap_or_default().to_string(),
        f["name"].as_str().unwrap().to_string(),
    )
}

#[test]
fn the_page_shows_the_numbers_of_the_json_audit() {
    let html = audit(&fixture(), "html");
    let report: Value = serde_json::from_str(&audit(&fixture(), "json")).unwrap();
    let findings = report["findings"].as_array().unwrap();
    assert!(!findings.is_empty(), "the fixture violates policies");

    // Totals.
    assert_eq!(
        number(&html, "total-objects"),
        report["objects"].as_i64().unwrap()
    );
    assert_eq!(
        number(&html, "total-evaluated"),
        report["evaluated"].as_i64().unwrap()
    );
    assert_eq!(number(&html, "total-findings"), findings.len() as i64);
    for (id, field) in [
        ("total-gpus-held", "gpusHeld"),
        ("total-gpus-pending", "gpusPending"),
        ("total-gpus-pending-in-violation", "gpusPendingInViolation"),
        ("total-gpus-in-violation", "gpusInViolation"),
        ("total-capacity-gpus", "capacityGpus"),
        (
            "total-capacity-gpus-in-violation",
            "capacityGpusInViolation",
        ),
    ] {
        assert_eq!(number(&html, id), report[field].as_i64().unwrap(), "{id}");
    }
    let requested = report["gpusHeld"].as_f64().unwrap();
    let held = report["gpusInViolation"].as_f64().unwrap();
    assert!(requested > held && held > 0.0, "{requested} {held}");
    let share: f64 = total(&html, "total-waste-share").parse().unwrap();
    assert!((share - held / requested).abs() < 1e-6, "{share}");

    // Each object once, and the capacity objects apart.
    let capacity: BTreeSet<_> = report["capacity"]
        .as_array()
        .unwrap()
        .iter()
        .map(key)
        .collect();
    let mut objects: BTreeMap<_, i64> = BTreeMap::new();
    for f in findings {
        objects.insert(key(f), f["gpus"].as_i64().unwrap());
    }
    let mut by_namespace: BTreeMap<String, i64> = BTreeMap::new();
    for (k, gpus) in &objects {
        if !capacity.contains(k) && *gpus > 0 {
            *by_namespace.entry(k.1.clone()).or_default() += gpus;
        }
    }
    assert_eq!(bars(&html, "chart-namespace"), by_namespace);
    assert_eq!(
        by_namespace.values().sum::<i64>(),
        report["gpusInViolation"].as_i64().unwrap()
    );
    let mut by_policy: BTreeMap<String, BTreeMap<_, i64>> = BTreeMap::new();
    for f in findings {
        by_policy
            .entry(f["policy"].as_str().unwrap().to_string())
            .or_default()
            .insert(key(f), f["gpus"].as_i64().unwrap());
    }
    let sum = |capacity_objects: bool| -> BTreeMap<String, i64> {
        by_policy
            .iter()
            .map(|(p, objects)| {
                let gpus = objects
                    .iter()
                    .filter(|(k, _)| capacity.contains(*k) == capacity_objects)
                    .map(|(_, g)| g)
                    .sum();
                (p.clone(), gpus)
            })
            .filter(|(_, g)| *g > 0)
            .collect()
    };
    assert_eq!(bars(&html, "chart-policy"), sum(false));
    assert_eq!(bars(&html, "chart-capacity"), sum(true));
    assert!(
        !sum(true).is_empty(),
        "the fixture has node pools with findings"
    );
    let mut by_kind: BTreeMap<String, i64> = BTreeMap::new();
    for c in report["capacity"].as_array().unwrap() {
        *by_kind
            .entry(c["kind"].as_str().unwrap().to_string())
            .or_default() += c["gpus"].as_i64().unwrap_or(0);
    }
    by_kind.retain(|_, g| *g > 0);
    assert_eq!(bars(&html, "chart-capacity-kind"), by_kind);

    // Per policy: objects, GPUs, one anchored row per finding.
    let section = Regex::new(
        r#"<section class="policy" id="policy-[^"]+" data-policy="([^"]+)" data-objects="(\d+)" data-gpus="(\d+)" data-findings="(\d+)">"#,
    )
    .unwrap();
    let sections: BTreeMap<String, (usize, i64, usize)> = section
        .captures_iter(&html)
        .map(|c| {
            (
                unescape(&c[1]),
                (
                    c[2].parse().unwrap(),
                    c[3].parse().unwrap(),
                    c[4].parse().unwrap(),
                ),
            )
        })
        .collect();
    let want: BTreeMap<String, (usize, i64, usize)> = by_policy
        .iter()
        .map(|(p, objects)| {
            let n = findings
                .iter()
                .filter(|f| f["policy"] == p.as_str())
                .count();
            (p.clone(), (objects.len(), objects.values().sum(), n))
        })
        .collect();
    assert_eq!(sections, want);
    for i in 0..findings.len() {
        assert!(html.contains(&format!(r#"id="f-{i}""#)), "anchor f-{i}");
    }

    // Top offenders: most GPUs first.
    let offender = Regex::new(r#"<tr class="offender" data-kind="([^"]*)" data-namespace="([^"]*)" data-name="([^"]*)" data-gpus="(\d+)">"#).unwrap();
    let rows: Vec<((String, String, String), i64)> = offender
        .captures_iter(&html)
        .map(|c| {
            (
                (c[1].to_string(), c[2].to_string(), c[3].to_string()),
                c[4].parse().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<i64> = objects.values().copied().filter(|g| *g > 0).collect();
    want.sort_by(|a, b| b.cmp(a));
    assert_eq!(rows.iter().map(|r| r.1).collect::<Vec<_>>(), want);
    for (k, gpus) in &rows {
        assert_eq!(objects.get(k), Some(gpus), "{k:?}");
    }

    // Capacity objects, with the GPUs they can bring up.
    let row = Regex::new(
        r#"<tr class="capacity" data-kind="([^"]*)" data-name="([^"]*)" data-gpus="([^"]*)""#,
    )
    .unwrap();
    let shown: BTreeSet<(String, String, String)> = row
        .captures_iter(&html)
        .map(|c| (c[1].to_string(), c[2].to_string(), c[3].to_string()))
        .collect();
    let want: BTreeSet<(String, String, String)> = report["capacity"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let gpus = c["gpus"]
                .as_i64()
                .map_or("unbounded".to_string(), |g| g.to_string());
            (
                c["kind"].as_str().unwrap().to_string(),
                c["name"].as_str().unwrap().to_string(),
                gpus,
            )
        })
        .collect();
    assert_eq!(shown, want);
    assert!(want.iter().any(|c| c.0 == "Workspace" && c.2 != "0"));
    assert!(want
        .iter()
        .any(|c| c.0 == "ManagedClustersAgentPool" && c.2 != "0"));
}

#[test]
fn the_page_is_self_contained_and_says_what_it_was_made_from() {
    let html = audit(&fixture(), "html");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        html.contains("default-src 'none'"),
        "a CSP that forbids fetching"
    );
    for external in ["src=\"http", "href=\"http", "url(", "@import", "<link"] {
        assert!(!html.contains(external), "{external}");
    }
    assert!(html.contains("tests/fixtures/report/cluster.json"));
    assert!(html.contains("built-in policies"));
    let digest = Regex::new(r#"title="([0-9a-f]{64})""#).unwrap();
    assert!(digest.is_match(&html), "the policy set's SHA-256");
    assert!(Regex::new(r"as of \d{4}-\d{2}-\d{2}")
        .unwrap()
        .is_match(&html));
    assert!(
        html.contains("Keeps GPU nodes for GPU work"),
        "policy descriptions"
    );
}

#[test]
fn names_and_messages_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostile.json");
    let pod = json!({"apiVersion": "v1", "kind": "List", "items": [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "<script>alert(1)</script>", "namespace": "a\"b&c"},
        "spec": {"containers": [{"name": "<img src=x onerror=alert(2)>", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["sleep", "infinity"],
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]},
        "status": {"phase": "Running"}
    }]});
    std::fs::write(&file, pod.to_string()).unwrap();
    let html = audit(&file, "html");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the name, escaped"
    );
    assert!(
        html.contains("&lt;img src=x onerror=alert(2)&gt;"),
        "the message, escaped"
    );
    assert!(html.contains("a&quot;b&amp;c"), "the namespace, escaped");
    assert!(!html.contains("<script>alert"));
    assert!(!html.contains("<img"));
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the page's own script"
    );
}

/// A cluster of `n` objects: pods, Deployments and Jobs across 40
/// namespaces, a third of them holding GPUs idle or without CPU requests,
/// plus NodePools, KAITO Workspaces and agent pools.
fn big_cluster(n: usize) -> Value {
    let tolerations =
        json!([{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]);
    let container = |i: usize| {
        let mut c = json!({"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "resources": {"limits": {"nvidia.com/gpu": (1 + i % 4).to_string()},
                          "requests": {"cpu": "4", "memory": "16Gi"}}});
        match i % 3 {
            0 => c["command"] = json!(["sleep", "infinity"]),
            1 => c["resources"]["requests"] = json!({}),
            _ => c["command"] = json!(["python", "serve.py"]),
        }
        c
    };
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let ns = format!("team-{:02}", i % 40);
            let name = format!("workload-{i:05}");
            let spec = json!({"containers": [container(i)], "tolerations": tolerations});
            match i % 10 {
                0..=5 => json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{i}")},
                    "spec": spec, "status": {"phase": "Running"}}),
                6 | 7 => json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{i}")},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                             "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}),
                8 => json!({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{i}")},
                    "spec": {"parallelism": 1, "activeDeadlineSeconds": 3600,
                             "template": {"spec": {"restartPolicy": "Never", "containers": spec["containers"], "tolerations": tolerations}}}}),
                _ => match (i / 10) % 3 {
                    0 => json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                        "metadata": {"name": name, "uid": format!("uid-{i}")},
                        "spec": {"template": {"spec": {"requirements": [
                            {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]}]}}}}),
                    1 => json!({"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
                        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{i}")},
                        "resource": {"instanceType": "Standard_NC24ads_A100_v4", "count": 1}}),
                    _ => json!({"apiVersion": "containerservice.azure.com/v1api20240901", "kind": "ManagedClustersAgentPool",
                        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{i}")},
                        "spec": {"vmSize": "Standard_NC8as_T4_v3", "count": 2}}),
                },
            }
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

#[test]
fn ten_thousand_objects_make_a_page_of_a_few_mib() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.json");
    std::fs::write(&file, big_cluster(10_000).to_string()).unwrap();
    let html = audit(&file, "html");
    let mib = html.len() as f64 / (1024.0 * 1024.0);
    assert!(mib < 3.0, "{mib:.2} MiB");
    assert_eq!(number(&html, "total-objects"), 10_000);
    // Long lists are cut to the rows holding the most GPUs, and say so.
    assert!(html.contains("<code>gpu-admission audit -o json</code> lists every finding"));
    // A NodePool that allows every GPU size lists a few of them.
    assert!(html.contains(" more</span></details>"));
    let rows = html.matches("<tr class=\"finding\"").count();
    assert!(rows > 1_000 && rows <= 1_000 * 24, "{rows} finding rows");
    // Charts stay a dozen bars, the rest summed in one.
    let namespaces = bars(&html, "chart-namespace");
    assert_eq!(namespaces.len(), 12, "{namespaces:?}");
    assert!(
        namespaces.keys().any(|k| k.ends_with(" others")),
        "{namespaces:?}"
    );
    assert_eq!(
        namespaces.values().sum::<i64>(),
        number(&html, "total-gpus-in-violation")
    );
}

#[test]
fn namespaces_in_the_files_give_their_labels_as_in_the_cluster() {
    let flagged = |file: &Path| -> Vec<String> {
        let report: Value = serde_json::from_str(&audit(file, "json")).unwrap();
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["name"] == "pretrain-llama-70b")
            .map(|f| f["policy"].as_str().unwrap().to_string())
            .collect()
    };
    // ml-research is labelled for premium GPUs: its A100 Job passes.
    assert_eq!(flagged(&fixture()), Vec::<String>::new());
    let mut dump: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    let items = dump["items"].as_array_mut().unwrap();
    let before = items.len();
    items.retain(|o| o["kind"] != "Namespace");
    assert!(items.len() < before, "the fixture lists its namespaces");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("no-namespaces.json");
    std::fs::write(&file, dump.to_string()).unwrap();
    assert_eq!(flagged(&file), ["gpu-sku-allowlist"]);
}

/// GpuPolicyExceptions in the dump: one ending within a week and an
/// expired one are named at the top; each has its section with what it
/// let through; the results let through are rows of their own, never
/// findings; the exception's text is escaped.
#[test]
fn exceptions_are_listed_with_what_they_let_through() {
    let soon =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(72);
    let soon = soon.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let privileged = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "research", "uid": name},
            "spec": {"nodeName": "n1", "containers": [{"name": "bench", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "securityContext": {"privileged": true},
                "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
                              "requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}}}]},
            "status": {"phase": "Running"}})
    };
    let dump = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
         "metadata": {"name": "nccl-bench", "namespace": "research"},
         "spec": {"policies": ["gpu-privileged"], "match": {"kinds": ["Pod"], "names": ["nccl-bench-*"]},
                  "reason": "<NCCL> benchmark & tuning", "expiresAt": soon, "requestedBy": "alice@example.com"}},
        {"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuPolicyException",
         "metadata": {"name": "old", "namespace": "research"},
         "spec": {"policies": ["gpu-privileged"], "match": {"names": ["other"]},
                  "reason": "last quarter", "expiresAt": "2020-01-01T00:00:00Z"}},
        privileged("nccl-bench-0"),
        privileged("other"),
    ]});
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("dump.json");
    std::fs::write(&file, dump.to_string()).unwrap();
    let html = audit(&file, "html");
    let report: Value = serde_json::from_str(&audit(&file, "json")).unwrap();
    assert_eq!(report["findings"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["findings"][0]["name"], "other");
    assert_eq!(report["excepted"][0]["name"], "nccl-bench-0");

    let attention = Regex::new(r#"(?s)<section id="exceptions-attention">(.*?)</section>"#)
        .unwrap()
        .captures(&html)
        .expect("an attention section")[1]
        .to_string();
    assert!(
        attention
            .contains(r#"<li class="exception-expiring" data-exception="research/nccl-bench">"#),
        "{attention}"
    );
    assert!(
        attention.contains(&format!("ends at <time>{soon}</time>")),
        "{attention}"
    );
    assert!(
        attention.contains(r#"<li class="exception-expired" data-exception="research/old">"#),
        "{attention}"
    );
    // At the top: before the totals.
    assert!(html.find("exceptions-attention").unwrap() < html.find("id=\"totals\"").unwrap());

    let section = Regex::new(r#"(?s)<section class="exception" id="exception-research-nccl-bench" data-exception="research/nccl-bench" data-state="active" data-let-through="1">(.*?)</section>"#)
        .unwrap()
        .captures(&html)
        .expect("a section for the exception")[1]
        .to_string();
    assert!(section.contains("expiring soon"), "{section}");
    assert!(
        section.contains("<dd>&lt;NCCL&gt; benchmark &amp; tuning</dd>"),
        "{section}"
    );
    assert!(section.contains("<dd>alice@example.com</dd>"), "{section}");
    assert!(
        section.contains("<code>kinds Pod; names nccl-bench-*</code>"),
        "{section}"
    );
    assert!(
        section.contains("<li>Pod research/nccl-bench-0 through gpu-privileged (deny)</li>"),
        "{section}"
    );
    assert!(!html.contains("<NCCL>"));
    assert!(
        html.contains(r#"data-exception="research/old" data-state="expired" data-let-through="0""#)
    );
    let rows = Regex::new(r#"<tr class="excepted" data-policy="gpu-privileged" data-exception="research/nccl-bench">"#)
        .unwrap()
        .find_iter(&html)
        .count();
    assert_eq!(rows, 1);
    assert!(html.contains(
        "allowed by exception research/nccl-bench (&lt;NCCL&gt; benchmark &amp; tuning, expires "
    ));
}
