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
        ..HeldPod::default()
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
        sizing: sizing::DEFAULT_RULES,
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
        "avg by (namespace, pod, exported_namespace, exported_pod) (avg_over_time(DCGM_FI_PROF_SM_ACTIVE[7d]))",
        "max by (namespace, pod, exported_namespace, exported_pod) (max_over_time(DCGM_FI_PROF_DRAM_ACTIVE[7d]))",
        "max by (namespace, pod, exported_namespace, exported_pod) (max_over_time(DCGM_FI_DEV_FB_USED[7d]))",
    ] {
        assert_has(&q, part);
    }
    assert!(!q.contains("avg_over_time(DCGM_FI_DEV_FB_USED"), "{q}");
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
        sizing: sizing::DEFAULT_RULES,
    }
}

fn measure_now(settings: &Settings, pods: &[HeldPod]) -> Utilization {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(NOW as u64);
    let report = crate::audit::Report {
        held_pods: pods.to_vec(),
        ..Default::default()
    };
    let catalog = crate::gpu::catalog::Catalog::embedded_shared();
    crate::offline::block_on(measure(settings, &report, catalog, now)).unwrap()
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
    let html = crate::audit::html::utilization::efficiency(&none).into_string();
    assert_has(&html, r#"<section id="efficiency" data-status="missing">"#);
    assert_has(&html, &format!("Not measured: {why}"));
    assert!(!html.contains("total-gpu-used-share"), "{html}");
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

fn kind_pod(namespace: &str, name: &str, gpus: i64, hours_ago: i64, kind: Option<&str>) -> HeldPod {
    HeldPod {
        workload_kind: kind.map(str::to_string),
        ..pod(namespace, name, gpus, hours_ago)
    }
}

/// Allocated: GPUs × the seconds held within the window; used: allocated ×
/// mean SM activity, else engine activity, else GPU_UTIL; DRAM activity
/// weighted by allocation; pods without series apart.
#[test]
fn efficiency_is_gpu_seconds_used_of_allocated_per_namespace_class_and_kind() {
    let mut samples = Vec::new();
    samples.extend(series("ml", "train-0", SM_ACTIVE, 0.9, 0.5));
    samples.extend(series("ml", "train-0", ENGINE_ACTIVE, 0.95, 0.8));
    samples.extend(series("ml", "train-0", DRAM_ACTIVE, 0.4, 0.25));
    samples.extend(series("ml", "nb-0", ENGINE_ACTIVE, 0.5, 0.125));
    samples.extend(series("serving", "llm", GPU_UTIL, 90.0, 30.0));
    samples.extend(series("serving", "bare", SM_ACTIVE, 0.0, 0.0));
    samples.extend(series("serving", "bare", DRAM_ACTIVE, 0.5, 0.5));
    let pods = [
        kind_pod("ml", "train-0", 4, 48, Some("PyTorchJob")),
        kind_pod("ml", "nb-0", 1, 6, Some("Notebook")),
        kind_pod("serving", "llm", 2, 48, Some("Deployment")),
        kind_pod("serving", "gone", 1, 10, Some("InferenceService")),
        kind_pod("serving", "bare", 1, 24, None),
    ];
    let m = join(
        &pods,
        &Series::read(&samples).unwrap(),
        NOW as f64,
        &section(),
    );
    let e = &m.efficiency;
    let allocated = 4.0 * 86_400.0 + 21_600.0 + 2.0 * 86_400.0 + 86_400.0;
    let used = 4.0 * 86_400.0 * 0.5 + 21_600.0 * 0.125 + 2.0 * 86_400.0 * 0.3;
    assert_eq!((e.pods, e.gpus), (4, 8));
    assert_eq!(e.gpu_seconds_allocated, allocated);
    assert_eq!(e.gpu_seconds_used, used);
    assert_eq!(e.used_percent, Some(used / allocated * 100.0));
    assert_eq!(
        e.metrics,
        BTreeMap::from([
            (SM_ACTIVE, 5.0 * 86_400.0),
            (ENGINE_ACTIVE, 21_600.0),
            (GPU_UTIL, 2.0 * 86_400.0)
        ])
    );
    // (4 × 86,400 s × 25 % + 86,400 s × 50 %) / 5 × 86,400 s.
    assert_eq!(e.dram_active_percent, Some(30.0));
    assert_eq!(
        (
            e.pods_without_data,
            e.gpus_without_data,
            e.gpu_seconds_without_data
        ),
        (1, 1, 36_000.0)
    );
    let figures = |e: &Efficiency| {
        (
            e.pods,
            e.gpu_seconds_allocated,
            e.gpu_seconds_used,
            e.pods_without_data,
        )
    };
    let classes: Vec<_> = m.by_class.iter().map(|(k, e)| (*k, figures(e))).collect();
    assert_eq!(
        classes,
        [
            (INFERENCE, (1, 172_800.0, 51_840.0, 1)),
            (NOTEBOOK, (1, 21_600.0, 2_700.0, 0)),
            (OTHER, (1, 86_400.0, 0.0, 0)),
            (TRAINING, (1, 345_600.0, 172_800.0, 0)),
        ]
    );
    let kinds: Vec<_> = m
        .by_kind
        .iter()
        .map(|(k, e)| (k.as_str(), figures(e)))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Deployment", (1, 172_800.0, 51_840.0, 0)),
            ("InferenceService", (0, 0.0, 0.0, 1)),
            ("Notebook", (1, 21_600.0, 2_700.0, 0)),
            ("Pod", (1, 86_400.0, 0.0, 0)),
            ("PyTorchJob", (1, 345_600.0, 172_800.0, 0)),
        ]
    );
    assert_eq!(m.by_class[INFERENCE].used_percent, Some(30.0));
    assert_eq!(m.by_class[INFERENCE].dram_active_percent, None);
    assert_eq!(m.by_class[OTHER].dram_active_percent, Some(50.0));
    assert_eq!(m.by_class[OTHER].used_percent, Some(0.0));
    assert_eq!(m.by_kind["InferenceService"].used_percent, None);
    assert_eq!(figures(&m.by_namespace["ml"]), (2, 367_200.0, 175_500.0, 0));
    assert_eq!(
        figures(&m.by_namespace["serving"]),
        (2, 259_200.0, 51_840.0, 1)
    );
    let text = render_text(&Utilization {
        measured: Some(m.clone()),
        ..section()
    });
    assert_has(&text, "  class training: 50.0% used of 96.0 GPU-hours allocated (DCGM_FI_PROF_SM_ACTIVE), DRAM active 25.0%; 0 pods without data (0.0 GPU-hours)\n");
    assert_has(
        &text,
        "  namespace serving: 20.0% used of 72.0 GPU-hours allocated",
    );
}

#[test]
fn workload_kinds_fall_in_classes() {
    for (kind, want) in [
        (Some("PyTorchJob"), TRAINING),
        (Some("Job"), TRAINING),
        (Some("RayJob"), TRAINING),
        (Some("Deployment"), INFERENCE),
        (Some("InferenceService"), INFERENCE),
        (Some("Notebook"), NOTEBOOK),
        (Some("StatefulSet"), OTHER),
        (Some("RayCluster"), OTHER),
        (None, OTHER),
    ] {
        assert_eq!(class(kind), want, "{kind:?}");
    }
}

fn gpu_node(name: &str, size: &str, gpus: i64) -> crate::audit::nodes::GpuNode {
    crate::audit::nodes::GpuNode {
        name: name.into(),
        size: size.into(),
        region: Some("eastus".into()),
        gpus_allocatable: gpus,
        ..Default::default()
    }
}

/// A one-GPU pod fits the MIG profile with the smallest share of its GPU
/// that holds its grown peaks, else a time-sliced share; a multi-GPU pod
/// a smaller size of its family; priced against its node.
#[test]
fn right_sizing_fits_peaks_to_a_mig_profile_a_shared_gpu_or_a_smaller_size() {
    let fb = |ns: &str, p: &str, mib: f64| {
        sample(
            &[
                ("namespace", ns),
                ("pod", p),
                ("metric", FB_USED),
                ("stat", "max"),
            ],
            mib,
        )
    };
    let mut samples = Vec::new();
    samples.extend(series("ml", "small", SM_ACTIVE, 0.08, 0.02));
    samples.push(fb("ml", "small", 6000.0));
    samples.extend(series("ml", "mid", SM_ACTIVE, 0.3, 0.1));
    samples.push(fb("ml", "mid", 30_000.0));
    samples.extend(series("serving", "t4", ENGINE_ACTIVE, 0.2, 0.1));
    samples.push(fb("serving", "t4", 4000.0));
    samples.extend(series("serving", "busy-t4", ENGINE_ACTIVE, 0.6, 0.3));
    samples.push(fb("serving", "busy-t4", 1000.0));
    samples.extend(series("ml", "wide", SM_ACTIVE, 0.15, 0.05));
    samples.push(fb("ml", "wide", 20_000.0));
    samples.extend(series("ml", "no-memory", SM_ACTIVE, 0.01, 0.01));
    samples.extend(series("ml", "elsewhere", SM_ACTIVE, 0.01, 0.01));
    samples.push(fb("ml", "elsewhere", 100.0));
    let on = |ns: &str, name: &str, gpus: i64, node: &str| HeldPod {
        node: Some(node.into()),
        ..pod(ns, name, gpus, 30)
    };
    let pods = [
        on("ml", "small", 1, "a100-1"),
        on("ml", "mid", 1, "a100-1"),
        on("serving", "t4", 1, "t4-1"),
        on("serving", "busy-t4", 1, "t4-1"),
        on("ml", "wide", 4, "a100-4"),
        on("ml", "no-memory", 1, "a100-1"),
        on("ml", "elsewhere", 1, "unknown"),
    ];
    let nodes = [
        gpu_node("a100-1", "Standard_NC24ads_A100_v4", 1),
        gpu_node("t4-1", "Standard_NC4as_T4_v3", 1),
        gpu_node("a100-4", "Standard_NC96ads_A100_v4", 4),
    ];
    let read = Series::read(&samples).unwrap();
    let catalog = crate::gpu::catalog::Catalog::embedded_shared();
    let found = sizing::right_size(&pods, &read, &nodes, catalog, &sizing::DEFAULT_RULES);
    let choices: Vec<_> = (found.iter())
        .map(|r| (r.pod.as_str(), r.choice, r.to.as_str(), r.gpus_after))
        .collect();
    assert_eq!(
        choices,
        [
            // ⌈4 × 18.75 %⌉ = 1 GPU of compute, ⌈4 × 25,000 / 81,920⌉ = 2 of memory.
            (
                "wide",
                sizing::SMALLER_SIZE,
                "Standard_NC48ads_A100_v4",
                2.0
            ),
            // 10 % and 7,500 MiB fit 1g.10gb: a seventh of the GPU.
            ("small", sizing::MIG, "1g.10gb", 1.0 / 7.0),
            // 37.5 % and 37,500 MiB: 3g.40gb, half the GPU's memory.
            ("mid", sizing::MIG, "3g.40gb", 0.5),
            // No MIG on a T4: 25 % and 5,000 MiB fit half of it.
            ("t4", sizing::SHARED_GPU, "50%", 0.5),
        ]
    );
    let wide = &found[0];
    assert_eq!(
        (
            wide.metric,
            wide.peak_percent,
            wide.peak_memory_mib,
            wide.gpu_memory_mib,
            wide.gpus_freed
        ),
        (SM_ACTIVE, 15.0, 20_000.0, 81_920.0, 2.0)
    );
    assert_eq!(found[3].metric, ENGINE_ACTIVE);

    let prices = crate::audit::Prices::from_str(
        "date: \"2026-12-01\"\nsource: test\ncurrency: USD\nprices:\n\
         - {region: eastus, size: Standard_NC24ads_A100_v4, perHour: 3.5}\n\
         - {region: eastus, size: Standard_NC48ads_A100_v4, perHour: 7.0}\n\
         - {region: eastus, size: Standard_NC96ads_A100_v4, perHour: 14.0}\n",
        "prices.yaml",
    )
    .unwrap();
    let mut s = section();
    let mut measured = join(&pods, &read, NOW as f64, &s);
    measured.right_sizing = found;
    s.measured = Some(measured);
    let mut report = crate::audit::Report {
        nodes: Some(crate::audit::NodeReport {
            gpu_node_list: nodes.to_vec(),
            ..Default::default()
        }),
        utilization: Some(s),
        ..Default::default()
    };
    sizing::price(&mut report, &prices);
    let m = report
        .utilization
        .as_ref()
        .unwrap()
        .measured
        .as_ref()
        .unwrap();
    let per_day: Vec<_> = m.right_sizing.iter().map(|r| r.per_day).collect();
    // 24 h × (4 × 3.5 − 7.0); 24 × 3.5 × 6/7; 24 × 3.5 / 2; the T4 unpriced.
    assert_eq!(per_day, [Some(168.0), Some(72.0), Some(42.0), None]);
    let savings = m.savings.as_ref().unwrap();
    assert_eq!((savings.per_day, savings.unpriced), (282.0, 1));
    assert_eq!(savings.currency, "USD");
    let json = serde_json::to_value(report.utilization.as_ref().unwrap()).unwrap();
    assert_eq!(json["rightSizing"][1]["to"], "1g.10gb");
    assert_eq!(json["rightSizing"][1]["perDay"], 72.0);
    assert_eq!(json["sizing"]["headroomPercent"], 25.0);
    let text = render_text(report.utilization.as_ref().unwrap());
    assert_has(&text, "  ml/small: 1 of Standard_NC24ads_A100_v4 -> mig 1g.10gb (0.86 GPUs freed, 72.00 USD/day): peak 8.0% DCGM_FI_PROF_SM_ACTIVE, 6000 of 81920 MiB\n");
    let html = crate::audit::html::utilization::efficiency(report.utilization.as_ref().unwrap())
        .into_string();
    assert_has(
        &html,
        r#"<tr class="right-size" data-namespace="ml" data-pod="small" data-choice="mig" data-to="1g.10gb" data-gpus-freed="0.857" data-per-day="72.00">"#,
    );
    assert_has(
        &html,
        r#"data-choice="shared-gpu" data-to="50%" data-gpus-freed="0.500" data-per-day="">"#,
    );
}
