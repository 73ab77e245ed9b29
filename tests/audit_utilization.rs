//! `gpu-admission audit --prometheus URL`: a real Prometheus (Debian's
//! `prometheus`), loaded with a day of dcgm-exporter series written as a
//! TSDB by `promtool tsdb create-blocks-from openmetrics`, joined with the
//! pods of a cluster dump: idle GPU pods found, busy ones not. The same
//! answer recorded to a file gives the same section through
//! `--utilization FILE`; with Prometheus stopped the report still renders
//! and says why the section is missing. Skipped, saying so, when the
//! `prometheus` or `promtool` binary is absent (`.ci/run` installs them).
use serde_json::{json, Value};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const ENGINE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
const UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";

fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        println!("skipped: no `{name}` on PATH (Debian's prometheus package; .ci/run installs it)");
    }
    found
}

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

/// A Prometheus on a loopback port, serving the TSDB in `data`.
struct Prometheus {
    child: Child,
    url: String,
}

impl Prometheus {
    fn start(binary: &Path, dir: &Path, data: &Path) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            "global:\n  evaluation_interval: 1m\nscrape_configs: []\n",
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg("--storage.tsdb.retention.time=30d")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let mut prometheus = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        // A bound on the wait, not an assertion on speed.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok((200, _)) = get(port, "/-/ready") {
                break;
            }
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!(
                    "prometheus exited ({status}): {}",
                    std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "prometheus never got ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    fn stop(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` on loopback: (status, body).
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
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
    let (Some(prometheus), Some(promtool)) = (tool("prometheus"), tool("promtool")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let om = dir.path().join("dcgm.om");
    std::fs::write(&om, history(now)).unwrap();
    let data = dir.path().join("data");
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
    let dump = dir.path().join("cluster.json");
    std::fs::write(&dump, cluster(now).to_string()).unwrap();

    let server = Prometheus::start(&prometheus, dir.path(), &data);
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
