use super::*;
use crate::gpu::GpuResources;
use serde_json::{json, Value};

/// 2026-12-01T00:00:00Z.
const NOW: i64 = 1_796_083_200;

fn resources() -> GpuResources {
    GpuResources::default()
}

fn pod(namespace: &str, name: &str, gpus: i64, hours_ago: i64) -> HeldPod {
    HeldPod {
        namespace: namespace.into(),
        name: name.into(),
        node: Some("aks-gpu-0".into()),
        gpus,
        started_at: Some(NOW - hours_ago * 3600),
    }
}

fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        value,
        at: NOW as f64,
    }
}

/// The peak and mean series of one pod under `metric`.
fn series(namespace: &str, pod: &str, metric: &str, peak: f64, mean: f64) -> Vec<Sample> {
    ["max", "mean"]
        .iter()
        .zip([peak, mean])
        .map(|(stat, v)| {
            sample(
                &[
                    ("namespace", namespace),
                    ("pod", pod),
                    ("metric", metric),
                    ("stat", stat),
                    ("window", "24h"),
                ],
                v,
            )
        })
        .collect()
}

/// `text` holds `part`, else the assertion shows all of `text`.
fn assert_has(text: &str, part: &str) {
    assert!(text.contains(part), "{part} not in {text}");
}

fn section() -> Utilization {
    Utilization {
        source: "file x".into(),
        window: "24h".into(),
        window_seconds: 86_400,
        threshold_percent: DEFAULT_THRESHOLD_PERCENT,
        missing: None,
        measured: None,
    }
}

/// The pods holding GPUs as the audit counts them: running or bound to a
/// node, not finished, each once.
#[test]
fn the_pods_holding_gpus_are_joined() {
    let p = |name: &str, phase: &str, gpus: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": "aks-gpu-0", "containers": [{"name": "c", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": phase, "startTime": "2026-11-30T00:00:00Z"}})
    };
    let mut unbound = p("unbound", "Pending", "1");
    unbound["spec"].as_object_mut().unwrap().remove("nodeName");
    unbound["status"]
        .as_object_mut()
        .unwrap()
        .remove("startTime");
    let objects = vec![
        p("running", "Running", "2"),
        p("starting", "Pending", "1"),
        unbound,
        p("done", "Succeeded", "1"),
        p("cpu", "Running", "0"),
        p("running", "Running", "2"),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"}}),
    ];
    let mut ledger = crate::audit::PodLedger::default();
    for object in &objects {
        ledger.add(object, &resources());
    }
    assert_eq!(
        gpu_pods(&ledger.into_held()),
        vec![pod("ml", "running", 2, 24), pod("ml", "starting", 1, 24)]
    );
}

#[test]
fn idle_pods_are_those_under_the_threshold_for_the_window() {
    let mut samples = Vec::new();
    // Engine activity is a ratio: 0.02 is 2 %.
    samples.extend(series("ml", "idle", ENGINE_ACTIVE, 0.02, 0.001));
    samples.extend(series("ml", "busy", ENGINE_ACTIVE, 0.9, 0.4));
    // GPU_UTIL is a percentage: 3 is 3 %; used where engine activity is absent.
    samples.extend(series("ml", "old-gpu", GPU_UTIL, 3.0, 1.0));
    // Both metrics: engine activity wins.
    samples.extend(series("ml", "both", ENGINE_ACTIVE, 0.5, 0.2));
    samples.extend(series("ml", "both", GPU_UTIL, 0.0, 0.0));
    samples.extend(series("ml", "young", ENGINE_ACTIVE, 0.0, 0.0));
    samples.extend(series("ml", "gone", ENGINE_ACTIVE, 0.0, 0.0));
    let pods = vec![
        pod("ml", "idle", 4, 48),
        pod("ml", "busy", 8, 48),
        pod("ml", "old-gpu", 1, 6),
        pod("ml", "both", 2, 48),
        HeldPod {
            started_at: Some(NOW - 600),
            ..pod("ml", "young", 1, 0)
        },
        pod("ml", "unseen", 2, 48),
    ];
    let read = Series::read(&samples).unwrap();
    assert_eq!(read.window, Some(DEFAULT_WINDOW));
    let m = join(&pods, &read, NOW as f64, &section());
    let idle: Vec<(&str, i64, f64, &str)> = m
        .idle_pods
        .iter()
        .map(|p| (p.pod.as_str(), p.gpus, p.gpu_hours, p.metric))
        .collect();
    // 4 GPUs × 24 h (the window, not the 48 h it ran); 1 GPU × 6 h.
    assert_eq!(
        idle,
        vec![
            ("idle", 4, 96.0, ENGINE_ACTIVE),
            ("old-gpu", 1, 6.0, GPU_UTIL)
        ]
    );
    assert_eq!(m.idle_pods[0].peak_percent, 2.0);
    assert_eq!(m.idle_pods[0].mean_percent, 0.1);
    assert_eq!(m.idle_gpus, 5);
    assert_eq!(m.gpu_hours_wasted, 102.0);
    assert_eq!(m.busy_pods, 2, "busy, and both by its engine activity");
    assert_eq!(m.recent_pods, 1);
    assert_eq!(m.gpu_pods, 6);
    assert_eq!(
        m.without_data
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["unseen"]
    );
    assert_eq!(m.metrics, [GPU_UTIL, ENGINE_ACTIVE]);
    assert_eq!(m.measured_at, "2026-12-01T00:00:00Z");
}

#[test]
fn exported_labels_name_the_pod_when_prometheus_kept_the_exporters_own() {
    let labels = |stat: &'static str| {
        vec![
            ("namespace", "gpu-operator"),
            ("pod", "nvidia-dcgm-exporter-x2k9q"),
            ("exported_namespace", "ml"),
            ("exported_pod", "notebook-0"),
            ("metric", ENGINE_ACTIVE),
            ("stat", stat),
        ]
    };
    let samples = vec![sample(&labels("max"), 0.0), sample(&labels("mean"), 0.0)];
    let read = Series::read(&samples).unwrap();
    assert!(read
        .by_pod
        .contains_key(&("ml".to_string(), "notebook-0".to_string())));
    assert_eq!(read.by_pod.len(), 1);
    let m = join(
        &[pod("ml", "notebook-0", 1, 30)],
        &read,
        NOW as f64,
        &section(),
    );
    assert_eq!(m.idle_pods.len(), 1);
}

#[test]
fn series_of_another_query_are_refused_with_the_reason() {
    let err = Series::read(&[sample(&[("pod", "a"), ("namespace", "ml")], 0.0)])
        .err()
        .unwrap();
    assert_has(&err, "without the `metric` label");
    assert_has(&err, "docs/utilization.md");
    let err = Series::read(&[sample(&[("metric", "up"), ("stat", "max")], 0.0)])
        .err()
        .unwrap();
    assert_has(&err, "a series of \"up\"");
    let err = Series::read(&[sample(&[("metric", GPU_UTIL)], 0.0)])
        .err()
        .unwrap();
    assert_has(&err, "`stat`");
    // GPUs no pod holds (empty pod label) and NaN are left out.
    let mut samples = series("", "", GPU_UTIL, 0.0, 0.0);
    samples.extend(series("ml", "a", GPU_UTIL, f64::NAN, f64::NAN));
    assert!(Series::read(&samples).unwrap().by_pod.is_empty());
}

#[test]
fn the_query_asks_peak_and_mean_of_both_metrics_over_the_window() {
    let q = query(Duration::from_secs(7 * 86_400));
    for part in [
        "max by (namespace, pod, exported_namespace, exported_pod) (max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[7d]))",
        "avg by (namespace, pod, exported_namespace, exported_pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[7d]))",
        "\"metric\", \"DCGM_FI_DEV_GPU_UTIL\"",
        "\"stat\", \"mean\"",
        "\"window\", \"7d\", \"\", \"\")",
    ] {
        assert_has(&q, part);
    }
}

#[test]
fn windows_read_as_promql_writes_them() {
    assert_eq!(parse_window("24h"), Ok(DEFAULT_WINDOW));
    assert_eq!(parse_window("7d"), Ok(Duration::from_secs(7 * 86_400)));
    assert_eq!(parse_window("1h30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_window("3600s"), Ok(Duration::from_secs(3600)));
    for bad in ["", "24", "h", "1.5h", "24x", "-1h"] {
        let err = parse_window(bad).unwrap_err();
        assert!(err.contains("is not a window"), "{bad}: {err}");
    }
    assert!(parse_window("30m").unwrap_err().contains("from 1h to 90d"));
    assert!(parse_window("91d").unwrap_err().contains("from 1h to 90d"));
    assert!(parse_window("99999999999999999d").is_err());
    for (secs, text) in [
        (86_400, "24h"),
        (7 * 86_400, "7d"),
        (5400, "90m"),
        (3601, "3601s"),
    ] {
        assert_eq!(promql_duration(Duration::from_secs(secs)), text);
    }
}

fn settings(source: Source) -> Settings {
    Settings {
        source,
        window: DEFAULT_WINDOW,
        threshold_percent: DEFAULT_THRESHOLD_PERCENT,
    }
}

fn measure_now(settings: &Settings, pods: &[HeldPod]) -> Utilization {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(NOW as u64);
    crate::offline::block_on(measure(settings, pods, now)).unwrap()
}

#[test]
fn a_recorded_answer_gives_the_section_with_its_own_window() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("answer.json");
    let mut samples = series("ml", "idle", ENGINE_ACTIVE, 0.0, 0.0);
    for s in &mut samples {
        s.labels.insert("window".into(), "2d".into());
    }
    let result: Vec<Value> = samples
        .iter()
        .map(|s| json!({"metric": s.labels, "value": [s.at, s.value.to_string()]}))
        .collect();
    std::fs::write(
        &file,
        json!({"status": "success", "data": {"resultType": "vector", "result": result}})
            .to_string(),
    )
    .unwrap();
    let section = measure_now(
        &settings(Source::File(file.clone())),
        &[pod("ml", "idle", 2, 72)],
    );
    assert_eq!(section.missing, None);
    assert_eq!(section.window, "48h");
    assert_eq!(section.window_seconds, 2 * 86_400);
    let m = section.measured.as_ref().unwrap();
    assert_eq!(m.gpu_hours_wasted, 96.0, "2 GPUs × 48 h");
    let json = serde_json::to_value(&section).unwrap();
    assert_eq!(json["idlePods"][0]["pod"], "idle");
    assert_eq!(json["idlePods"][0]["gpuHours"], 96.0);
    assert_eq!(json["source"], format!("file {}", file.display()));
    assert!(json.get("missing").is_none());
    let text = render_text(&section);
    assert_has(
        &text,
        "1 of 1 GPU pods idle, holding 2 GPUs: 96.0 GPU-hours wasted",
    );
    assert_has(&text, "  ml/idle: 2 GPUs, peak 0.0%, 96.0 GPU-hours\n");
}

#[test]
fn what_goes_wrong_leaves_the_section_missing_and_says_why() {
    let pods = [pod("ml", "a", 1, 30)];
    let gone = measure_now(
        &settings(Source::File("/nonexistent/answer.json".into())),
        &pods,
    );
    assert!(gone.measured.is_none());
    let why = gone.missing.as_deref().unwrap();
    assert!(
        why.starts_with("cannot read /nonexistent/answer.json: "),
        "{why}"
    );

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(
        &empty,
        r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
    )
    .unwrap();
    let none = measure_now(&settings(Source::File(empty)), &pods);
    let why = none.missing.as_deref().unwrap();
    assert!(why.starts_with("no DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL series with a pod label over the last 24h"), "{why}");
    let json = serde_json::to_value(&none).unwrap();
    assert_eq!(json["missing"], why);
    assert!(json.get("idlePods").is_none());
    assert!(render_text(&none).contains(&format!("missing: {why}")));

    let html = crate::audit::html::utilization::section(&none).into_string();
    assert_has(&html, r#"<section id="utilization" data-status="missing">"#);
    assert_has(&html, "id=\"utilization-missing\"");
    assert!(!html.contains("total-idle-gpus"), "{html}");
}

#[test]
fn the_page_lists_idle_pods_with_their_numbers_escaped() {
    let mut samples = series("ml", "<b>idle</b>", ENGINE_ACTIVE, 0.0, 0.0);
    samples.extend(series("ml", "busy", GPU_UTIL, 80.0, 40.0));
    let read = Series::read(&samples).unwrap();
    let pods = [
        pod("ml", "<b>idle</b>", 3, 10),
        pod("ml", "busy", 1, 10),
        pod("ml", "unseen", 1, 10),
    ];
    let mut s = section();
    s.measured = Some(join(&pods, &read, NOW as f64, &s));
    let html = crate::audit::html::utilization::section(&s).into_string();
    assert_has(&html, r#"data-status="measured""#);
    assert_has(&html, r#"id="total-idle-gpu-pods" data-value="1""#);
    assert_has(&html, r#"id="total-idle-gpus" data-value="3""#);
    assert_has(&html, r#"id="total-idle-gpu-hours" data-value="30.0""#);
    assert_has(
        &html,
        r#"<tr class="idle-pod" data-namespace="ml" data-pod="&lt;b&gt;idle&lt;/b&gt;" data-gpus="3" data-gpu-hours="30.000">"#,
    );
    assert!(!html.contains("<b>idle"), "{html}");
    assert_eq!(html.matches("<tr class=\"idle-pod\"").count(), 1);
    assert_has(&html, "1 pods holding GPUs have no utilization series");
    assert_has(&html, "<code>ml/unseen</code>");
}
