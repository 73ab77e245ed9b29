//! `gpu-admission audit -f DUMP` of a large cluster's dump: its time and
//! peak resident memory (as GNU time reports them). The dump is made here,
//! as `kubectl get namespaces,nodes,pods -A -o json` writes one: 5,000
//! nodes (1,000 of them A100 GPU nodes) and 150,000 pods (15,000 GPU pods
//! bound by `nodeName`, half of them in a standard-tier namespace) in 50
//! namespaces, about 51 MB.
//!
//! `cargo bench --bench audit_dump` measures the binary cargo builds with
//! the bench; `GPU_ADMISSION_BIN=path/to/gpu-admission` measures another
//! (an older build, to compare). `GPU_ADMISSION_BENCH_PODS` and
//! `GPU_ADMISSION_BENCH_NODES` change the size. Without `--bench` (as
//! `cargo test --benches` runs it) a dump a hundredth of the size is audited
//! once, to show the bench still works.
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let size = |var: &str, full: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if benching { full } else { full / 100 })
    };
    let (pods, nodes) = (
        size("GPU_ADMISSION_BENCH_PODS", 150_000),
        size("GPU_ADMISSION_BENCH_NODES", 5_000),
    );
    let binary = std::env::var_os("GPU_ADMISSION_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpu-admission")));
    let dir = tempfile::tempdir().expect("temp dir");
    let dump = dir.path().join("cluster.json");
    let bytes = write_dump(&dump, nodes, pods);
    println!("binary: {}", binary.display());
    println!(
        "dump: {nodes} nodes, {pods} pods, {:.1} MB",
        bytes as f64 / 1e6
    );
    println!("| output | seconds | peak RSS | findings |");
    println!("|---|---|---|---|");
    for output in ["json", "text"] {
        let (seconds, peak, out) = run(&binary, &dump, output);
        let findings = match output {
            "json" => serde_json::from_slice::<Value>(&out)
                .ok()
                .and_then(|r| r["findings"].as_array().map(Vec::len))
                .map_or("?".to_string(), |n| n.to_string()),
            _ => String::from_utf8_lossy(&out)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        println!(
            "| {output} | {seconds:.2} | {:.0} MiB | {findings} |",
            peak as f64 / 1024.0
        );
    }
}

/// Runs `audit -f dump -o output` under GNU time (Debian's `time`
/// package): seconds, peak RSS in KiB, stdout.
fn run(binary: &Path, dump: &Path, output: &str) -> (f64, i64, Vec<u8>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let figures = dir.path().join("time");
    let out = std::process::Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&figures)
        .args(["-f", "%M %e"])
        .arg(binary)
        .args(["audit", "-o", output, "-f"])
        .arg(dump)
        .output()
        .expect("runs /usr/bin/time (Debian package `time`)");
    assert!(
        out.status.success(),
        "audit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&figures).expect("time's figures");
    let mut words = text.split_whitespace();
    let peak = words.next().and_then(|w| w.parse().ok()).expect("peak RSS");
    let seconds = words.next().and_then(|w| w.parse().ok()).expect("seconds");
    (seconds, peak, out.stdout)
}

/// Writes the dump; its size in bytes.
fn write_dump(path: &Path, nodes: usize, pods: usize) -> u64 {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("dump"));
    let mut first = true;
    let mut item = |file: &mut std::io::BufWriter<std::fs::File>, v: Value| {
        if !first {
            file.write_all(b",\n").unwrap();
        }
        first = false;
        serde_json::to_writer(file, &v).unwrap();
    };
    file.write_all(b"{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n")
        .unwrap();
    let namespaces = 50;
    for n in 0..namespaces {
        let tier = if n % 2 == 0 { "standard" } else { "premium" };
        item(
            &mut file,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": format!("team-{n:02}"),
                                "labels": {"gpu-admission.io/tier": tier}}}),
        );
    }
    let gpu_nodes = nodes / 5;
    for i in 0..nodes {
        let gpu = i < gpu_nodes;
        let (size, pool) = if gpu {
            ("Standard_NC24ads_A100_v4", "gpua100")
        } else {
            ("Standard_D16s_v5", "cpu")
        };
        let mut node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("aks-{pool}-{i:05}"), "labels": {
                "kubernetes.azure.com/agentpool": pool,
                "node.kubernetes.io/instance-type": size,
                "topology.kubernetes.io/region": "eastus"}},
            "spec": {},
            "status": {"allocatable": {"cpu": "15740m", "memory": "57Gi", "pods": "110"}}});
        if gpu {
            node["metadata"]["labels"]["kubernetes.azure.com/accelerator"] = json!("nvidia");
            node["spec"]["taints"] =
                json!([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]);
            node["status"]["allocatable"]["nvidia.com/gpu"] = json!("1");
        }
        item(&mut file, node);
    }
    let gpu_pods = pods / 10;
    for i in 0..pods {
        let namespace = format!("team-{:02}", i % namespaces);
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("worker-{i:06}"), "namespace": namespace,
                         "uid": format!("00000000-0000-4000-8000-{i:012}")},
            "spec": {"containers": [{"name": "main", "image": "mcr.microsoft.com/azureml/curated/acpt:42",
                                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "startTime": "2026-11-30T08:00:00Z"}});
        if i < gpu_pods {
            pod["spec"]["nodeName"] = json!(format!("aks-gpua100-{:05}", i % gpu_nodes.max(1)));
            pod["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "1"});
        } else {
            pod["spec"]["nodeName"] = json!(format!(
                "aks-cpu-{:05}",
                gpu_nodes + i % (nodes - gpu_nodes).max(1)
            ));
        }
        item(&mut file, pod);
    }
    file.write_all(b"\n]}\n").unwrap();
    file.flush().unwrap();
    std::fs::metadata(path).expect("dump").len()
}
