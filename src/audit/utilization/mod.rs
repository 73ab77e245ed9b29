//! GPU utilization of the pods holding GPUs, from the series dcgm-exporter
//! exports and Prometheus keeps: which pods stayed below a threshold for a
//! whole window, and the GPU-hours they held meanwhile. Read from a
//! Prometheus (`--prometheus URL`) or from a recorded answer of the same
//! query (`--utilization FILE`). When neither answers, the report stays
//! complete without this section and says why; nothing is guessed from
//! CPU use.
use crate::audit::nodes::HeldPod;
use crate::cluster::prometheus::{self, Endpoint, Sample};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// DCGM's graphics-engine activity: the share of time any kernel ran,
/// 0 to 1; exported where profiling metrics are on (and for MIG slices).
pub const ENGINE_ACTIVE: &str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE";
/// The driver's GPU utilization, 0 to 100: the fallback for GPUs or
/// set-ups without profiling metrics.
pub const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
/// The window when none is given.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Peak use (percent) under which a pod is idle, when none is given.
pub const DEFAULT_THRESHOLD_PERCENT: f64 = 5.0;
/// Longest wait for Prometheus' answer, when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Pods started more recently are not judged: loading a model or pulling
/// an image leaves a GPU idle for a while.
pub const MIN_AGE: Duration = Duration::from_secs(3600);

/// The pods holding GPUs (`audit::holding`: running, or bound to a node,
/// and not finished; as [`crate::audit::PodLedger`] collects them), each
/// once: the pods whose GPU use is asked.
pub fn gpu_pods(held: &[HeldPod]) -> Vec<HeldPod> {
    let mut seen = BTreeSet::new();
    held.iter()
        .filter(|p| p.gpus > 0 && seen.insert((p.namespace.as_str(), p.name.as_str())))
        .cloned()
        .collect()
}

/// Where utilization is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A Prometheus query API.
    Prometheus(Endpoint),
    /// A recorded answer of [`query`] (`curl .../api/v1/query`).
    File(PathBuf),
}

/// What to measure, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub source: Source,
    /// Span of history judged (a recorded answer says its own).
    pub window: Duration,
    /// Peak use, in percent, under which a pod is idle.
    pub threshold_percent: f64,
}

/// The report's utilization section.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Utilization {
    /// `Prometheus at URL`, or `file PATH`.
    pub source: String,
    /// The window, as PromQL writes a duration (`24h`).
    pub window: String,
    pub window_seconds: u64,
    /// A pod is idle when its peak use over the window stays below this.
    pub threshold_percent: f64,
    /// Why the section is missing (the query failed, timed out, or found no
    /// series); the rest of the report is complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    #[serde(flatten)]
    pub measured: Option<Measured>,
}

/// The join of the pods holding GPUs with their utilization.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Measured {
    /// When the series were read (RFC 3339).
    pub measured_at: String,
    /// The metrics the judged pods were measured with.
    pub metrics: Vec<String>,
    pub gpu_pods: usize,
    /// Pods at or above the threshold at some point of the window.
    pub busy_pods: usize,
    /// Pods started less than [`MIN_AGE`] before, not judged.
    pub recent_pods: usize,
    /// Idle pods, most GPU-hours first.
    pub idle_pods: Vec<IdlePod>,
    pub idle_gpus: i64,
    /// GPU-hours the idle pods held within the window.
    pub gpu_hours_wasted: f64,
    /// Pods holding GPUs with no series in the window (dcgm-exporter not on
    /// their node, or without its Kubernetes mapping): not judged.
    pub without_data: Vec<HeldPod>,
}

/// A pod that held its GPUs without using them for the whole window (or
/// since it started, within the window).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdlePod {
    pub namespace: String,
    pub pod: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub gpus: i64,
    pub metric: &'static str,
    /// Highest use of any of its GPUs over the window, percent.
    pub peak_percent: f64,
    /// Mean use of its GPUs over the window, percent.
    pub mean_percent: f64,
    /// Hours it ran within the window.
    pub hours: f64,
    /// `gpus × hours`.
    pub gpu_hours: f64,
}

/// The instant query that gives, per pod and metric, the peak (`stat="max"`)
/// and mean (`stat="mean"`) over `window`; each series says its `metric`,
/// `stat` and `window`. dcgm-exporter sets the labels `namespace` and `pod`
/// of the pod using a GPU; a Prometheus that keeps its target's own labels
/// names them `exported_namespace` and `exported_pod`: both are kept.
pub fn query(window: Duration) -> String {
    let range = promql_duration(window);
    let per_metric = |metric: &str| {
        let stat = |function: &str, over: &str, name: &str| {
            format!(
                "label_replace({function} by (namespace, pod, exported_namespace, exported_pod) ({over}_over_time({metric}[{range}])), \"stat\", \"{name}\", \"\", \"\")"
            )
        };
        format!(
            "label_replace({} or {}, \"metric\", \"{metric}\", \"\", \"\")",
            stat("max", "max", "max"),
            stat("avg", "avg", "mean")
        )
    };
    format!(
        "label_replace({} or {}, \"window\", \"{range}\", \"\", \"\")",
        per_metric(ENGINE_ACTIVE),
        per_metric(GPU_UTIL)
    )
}

/// Reads utilization as `settings` say and joins it with `pods`. Never
/// fails: what goes wrong becomes the section's `missing`.
pub async fn measure(settings: &Settings, pods: &[HeldPod], now: SystemTime) -> Utilization {
    let mut section = Utilization {
        source: match &settings.source {
            Source::Prometheus(endpoint) => format!("Prometheus at {}", endpoint.url),
            Source::File(path) => format!("file {}", path.display()),
        },
        window: promql_duration(settings.window),
        window_seconds: settings.window.as_secs(),
        threshold_percent: settings.threshold_percent,
        missing: None,
        measured: None,
    };
    let now_seconds = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let samples = match &settings.source {
        Source::Prometheus(endpoint) => {
            prometheus::query(endpoint, &query(settings.window), now_seconds.floor())
                .await
                .map_err(|e| e.to_string())
        }
        Source::File(path) => std::fs::read(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|body| prometheus::read_answer(&body).map_err(|e| e.to_string())),
    };
    let joined = samples.and_then(|samples| {
        let series = Series::read(&samples)?;
        if let Some(window) = series.window {
            section.window = promql_duration(window);
            section.window_seconds = window.as_secs();
        }
        if series.by_pod.is_empty() {
            return Err(format!(
                "no {ENGINE_ACTIVE} or {GPU_UTIL} series with a pod label over the last {}: is dcgm-exporter scraped, with its Kubernetes mapping on?",
                section.window
            ));
        }
        let at = series.at.unwrap_or(now_seconds);
        Ok(join(pods, &series, at, &section))
    });
    match joined {
        Ok(measured) => section.measured = Some(measured),
        Err(why) => section.missing = Some(why),
    }
    section
}

/// The lines of the text report.
pub fn render_text(section: &Utilization) -> String {
    let mut out = format!(
        "\nIdle GPU pods (peak use under {}% over {}, {}):\n",
        section.threshold_percent, section.window, section.source
    );
    let Some(m) = &section.measured else {
        let _ = writeln!(
            out,
            "  missing: {}",
            section.missing.as_deref().unwrap_or("not measured")
        );
        return out;
    };
    let _ = writeln!(
        out,
        "  {} of {} GPU pods idle, holding {} GPUs: {:.1} GPU-hours wasted ({}; {} without data, {} too recent)",
        m.idle_pods.len(),
        m.gpu_pods,
        m.idle_gpus,
        m.gpu_hours_wasted,
        m.metrics.join(", "),
        m.without_data.len(),
        m.recent_pods
    );
    for p in &m.idle_pods {
        let _ = writeln!(
            out,
            "  {}/{}: {} GPU{}, peak {:.1}%, {:.1} GPU-hours",
            p.namespace,
            p.pod,
            p.gpus,
            if p.gpus == 1 { "" } else { "s" },
            p.peak_percent,
            p.gpu_hours
        );
    }
    out
}

/// Peak and mean of one pod under one metric, in percent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Use {
    peak: Option<f64>,
    mean: Option<f64>,
}

/// The query's answer, per pod and metric.
struct Series {
    by_pod: BTreeMap<(String, String), BTreeMap<&'static str, Use>>,
    window: Option<Duration>,
    at: Option<f64>,
}

impl Series {
    fn read(samples: &[Sample]) -> Result<Series, String> {
        let mut series = Series {
            by_pod: BTreeMap::new(),
            window: None,
            at: None,
        };
        for s in samples {
            let label = |name: &str| s.labels.get(name).map(String::as_str).unwrap_or_default();
            let not_ours = |missing: &str| {
                format!(
                    "a series without the `{missing}` label ({:?}): not an answer of the utilization query (docs/utilization.md)",
                    s.labels
                )
            };
            let metric = match label("metric") {
                ENGINE_ACTIVE => ENGINE_ACTIVE,
                GPU_UTIL => GPU_UTIL,
                "" => return Err(not_ours("metric")),
                other => {
                    return Err(format!(
                        "a series of {other:?}, not of {ENGINE_ACTIVE} or {GPU_UTIL}"
                    ))
                }
            };
            let stat = label("stat");
            if !matches!(stat, "max" | "mean") {
                return Err(not_ours("stat"));
            }
            series.at = Some(s.at);
            if series.window.is_none() {
                series.window = parse_window(label("window")).ok();
            }
            // With the exporter's own labels kept, `pod` names the exporter.
            let pick = |exported: &str, own: &str| {
                Some(label(exported))
                    .filter(|v| !v.is_empty())
                    .unwrap_or(label(own))
                    .to_string()
            };
            let (namespace, pod) = (
                pick("exported_namespace", "namespace"),
                pick("exported_pod", "pod"),
            );
            if pod.is_empty() || namespace.is_empty() || !s.value.is_finite() {
                continue;
            }
            let percent = match metric {
                ENGINE_ACTIVE => s.value * 100.0,
                _ => s.value,
            };
            let entry = (series.by_pod.entry((namespace, pod)).or_default())
                .entry(metric)
                .or_default();
            let slot = if stat == "max" {
                &mut entry.peak
            } else {
                &mut entry.mean
            };
            *slot = Some(slot.map_or(percent, |v| v.max(percent)));
        }
        Ok(series)
    }
}

/// Judges each pod by its engine activity where exported, else its GPU
/// utilization.
fn join(pods: &[HeldPod], series: &Series, at: f64, section: &Utilization) -> Measured {
    let window_hours = section.window_seconds as f64 / 3600.0;
    let mut m = Measured {
        measured_at: k8s_openapi::jiff::Timestamp::from_second(at as i64)
            .map(|t| t.to_string())
            .unwrap_or_default(),
        metrics: Vec::new(),
        gpu_pods: pods.len(),
        busy_pods: 0,
        recent_pods: 0,
        idle_pods: Vec::new(),
        idle_gpus: 0,
        gpu_hours_wasted: 0.0,
        without_data: Vec::new(),
    };
    let mut metrics = BTreeSet::new();
    for pod in pods {
        let found = series
            .by_pod
            .get(&(pod.namespace.clone(), pod.name.clone()))
            .and_then(|by_metric| {
                [ENGINE_ACTIVE, GPU_UTIL].into_iter().find_map(|metric| {
                    let used = by_metric.get(metric)?;
                    Some((metric, used.peak?, used.mean.unwrap_or(0.0)))
                })
            });
        let Some((metric, peak, mean)) = found else {
            m.without_data.push(pod.clone());
            continue;
        };
        metrics.insert(metric);
        let age_hours = pod
            .started_at
            .map_or(window_hours, |s| (at - s as f64).max(0.0) / 3600.0);
        if age_hours < MIN_AGE.as_secs_f64() / 3600.0 {
            m.recent_pods += 1;
        } else if peak >= section.threshold_percent {
            m.busy_pods += 1;
        } else {
            let hours = age_hours.min(window_hours);
            m.idle_gpus += pod.gpus;
            m.gpu_hours_wasted += pod.gpus as f64 * hours;
            m.idle_pods.push(IdlePod {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                node: pod.node.clone(),
                gpus: pod.gpus,
                metric,
                peak_percent: peak,
                mean_percent: mean,
                hours,
                gpu_hours: pod.gpus as f64 * hours,
            });
        }
    }
    m.idle_pods.sort_by(|a, b| {
        b.gpu_hours
            .total_cmp(&a.gpu_hours)
            .then_with(|| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)))
    });
    m.metrics = metrics.into_iter().map(str::to_string).collect();
    m
}

/// Reads a window as PromQL writes durations: whole numbers of `d`, `h`,
/// `m` or `s` (`24h`, `7d`, `1h30m`), from an hour to 90 days.
pub fn parse_window(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a window (examples: 24h, 7d, 90m)");
    let mut seconds: u64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        let unit = match rest[digits..].chars().next() {
            Some('d') => 86_400,
            Some('h') => 3600,
            Some('m') => 60,
            Some('s') => 1,
            _ => return Err(bad()),
        };
        seconds = n
            .checked_mul(unit)
            .and_then(|v| seconds.checked_add(v))
            .ok_or_else(bad)?;
        rest = &rest[digits + 1..];
    }
    let window = Duration::from_secs(seconds);
    if window < MIN_AGE || window > Duration::from_secs(90 * 86_400) {
        return Err(format!("{text:?}: a window is from 1h to 90d"));
    }
    Ok(window)
}

/// A duration as PromQL writes it, in the largest whole unit.
fn promql_duration(d: Duration) -> String {
    let s = d.as_secs().max(1);
    match s {
        _ if s.is_multiple_of(86_400) && s >= 7 * 86_400 => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests;
