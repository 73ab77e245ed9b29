//! GPU utilization of the pods holding GPUs, from the series dcgm-exporter
//! exports and Prometheus keeps: GPU-seconds used against GPU-seconds
//! allocated over a window (cluster-wide, per namespace, per workload
//! class and kind), which pods stayed below a threshold for the whole
//! window and the GPU-hours they held meanwhile, and which would fit a MIG
//! profile, a shared GPU or a smaller size ([`sizing`]). Read from a
//! Prometheus (`--prometheus URL`) or from a recorded answer of the same
//! query (`--utilization FILE`). When neither answers, the report stays
//! complete without this section and says why; nothing is guessed from
//! CPU use.
mod efficiency;
pub mod sizing;

pub use efficiency::{class, Efficiency, CLASSES, INFERENCE, NOTEBOOK, OTHER, TRAINING};

use crate::audit::nodes::HeldPod;
use crate::audit::Report;
use crate::cluster::prometheus::{self, Endpoint, Sample};
use crate::gpu::catalog::Catalog;
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
/// The share of time at least one warp was resident on an SM, averaged
/// over the SMs, 0 to 1: how much of the GPU's compute the work occupies.
pub const SM_ACTIVE: &str = "DCGM_FI_PROF_SM_ACTIVE";
/// The share of cycles the memory interface was busy, 0 to 1.
pub const DRAM_ACTIVE: &str = "DCGM_FI_PROF_DRAM_ACTIVE";
/// Frame-buffer memory used, MiB (only its peak is asked).
pub const FB_USED: &str = "DCGM_FI_DEV_FB_USED";
/// The metrics asked, each with the statistics asked of it.
const ASKED: [(&str, &[&str]); 5] = [
    (ENGINE_ACTIVE, &["max", "mean"]),
    (GPU_UTIL, &["max", "mean"]),
    (SM_ACTIVE, &["max", "mean"]),
    (DRAM_ACTIVE, &["max", "mean"]),
    (FB_USED, &["max"]),
];
/// How a pod's GPU-seconds used are measured: the first of these it
/// exports (SM activity where the profiling metrics are on).
pub const ACTIVITY: [&str; 3] = [SM_ACTIVE, ENGINE_ACTIVE, GPU_UTIL];
/// How a pod is judged idle: engine activity, which counts any kernel
/// running (SM activity only where it alone is exported).
const IDLENESS: [&str; 3] = [ENGINE_ACTIVE, GPU_UTIL, SM_ACTIVE];
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
fn gpu_pods(held: &[HeldPod]) -> Vec<HeldPod> {
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
    /// How right-sizing judges a pod's peaks.
    pub sizing: sizing::Rules,
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
    /// How right-sizing fitted the pods' peaks.
    pub sizing: sizing::Rules,
    /// Why the section is missing (the query failed, timed out, or found no
    /// series); the rest of the report is complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    #[serde(flatten)]
    pub measured: Option<Measured>,
}

/// The join of the pods holding GPUs with their utilization.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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
    /// GPU-seconds used against allocated over the window, cluster-wide.
    pub efficiency: Efficiency,
    /// The same per namespace.
    pub by_namespace: BTreeMap<String, Efficiency>,
    /// The same per workload class ([`CLASSES`]).
    pub by_class: BTreeMap<&'static str, Efficiency>,
    /// The same per workload kind (`Pod` for a bare pod).
    pub by_kind: BTreeMap<String, Efficiency>,
    /// Pods whose peaks would fit a MIG profile, a shared GPU or a smaller
    /// size, most GPUs freed first.
    pub right_sizing: Vec<sizing::RightSize>,
    /// What right-sizing would save, with a price file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings: Option<sizing::Savings>,
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

/// The instant query that gives, per pod and metric ([`ASKED`]), the peak
/// (`stat="max"`, over the window and the pod's GPUs) and mean
/// (`stat="mean"`, over the window, then over the pod's GPUs) over
/// `window`; each series says its `metric`, `stat` and `window`.
/// dcgm-exporter sets the labels `namespace` and `pod` of the pod using a
/// GPU; a Prometheus that keeps its target's own labels names them
/// `exported_namespace` and `exported_pod`: both are kept.
pub fn query(window: Duration) -> String {
    let range = promql_duration(window);
    let per_metric = |(metric, stats): &(&str, &[&str])| {
        let stat = |name: &&str| {
            let function = if *name == "max" { "max" } else { "avg" };
            format!(
                "label_replace({function} by (namespace, pod, exported_namespace, exported_pod) ({function}_over_time({metric}[{range}])), \"stat\", \"{name}\", \"\", \"\")"
            )
        };
        let stats: Vec<String> = stats.iter().map(stat).collect();
        format!(
            "label_replace({}, \"metric\", \"{metric}\", \"\", \"\")",
            stats.join(" or ")
        )
    };
    let metrics: Vec<String> = ASKED.iter().map(per_metric).collect();
    format!(
        "label_replace({}, \"window\", \"{range}\", \"\", \"\")",
        metrics.join(" or ")
    )
}

/// Reads utilization as `settings` say and joins it with the pods holding
/// GPUs of `report` (right-sized against its GPU nodes' sizes in
/// `catalog`). Never fails: what goes wrong becomes the section's
/// `missing`.
pub async fn measure(
    settings: &Settings,
    report: &Report,
    catalog: &Catalog,
    now: SystemTime,
) -> Utilization {
    let pods = gpu_pods(&report.held_pods);
    let mut section = Utilization {
        source: match &settings.source {
            Source::Prometheus(endpoint) => format!("Prometheus at {}", endpoint.url),
            Source::File(path) => format!("file {}", path.display()),
        },
        window: promql_duration(settings.window),
        window_seconds: settings.window.as_secs(),
        threshold_percent: settings.threshold_percent,
        sizing: settings.sizing,
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
        let mut measured = join(&pods, &series, at, &section);
        let nodes = report.nodes.as_ref().map_or(&[][..], |n| &n.gpu_node_list);
        measured.right_sizing =
            sizing::right_size(&pods, &series, nodes, catalog, &settings.sizing);
        Ok(measured)
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
    let _ = writeln!(
        out,
        "\nGPU efficiency (GPU-seconds used of allocated over {}):",
        section.window
    );
    let rows = (m.by_class.iter().map(|(k, e)| (format!("class {k}"), e))).chain(
        m.by_namespace
            .iter()
            .map(|(k, e)| (format!("namespace {k}"), e)),
    );
    for (name, e) in std::iter::once(("cluster".to_string(), &m.efficiency)).chain(rows) {
        let _ = writeln!(
            out,
            "  {name}: {} used of {:.1} GPU-hours allocated ({}), DRAM active {}; {} pods without data ({:.1} GPU-hours)",
            e.used_percent.map_or("-".to_string(), |p| format!("{p:.1}%")),
            e.gpu_seconds_allocated / 3600.0,
            e.metrics.keys().copied().collect::<Vec<_>>().join(", "),
            e.dram_active_percent.map_or("-".to_string(), |p| format!("{p:.1}%")),
            e.pods_without_data,
            e.gpu_seconds_without_data / 3600.0,
        );
    }
    let _ = writeln!(
        out,
        "\nRight-sizing (peaks grown by {}%): {} pods",
        section.sizing.headroom_percent,
        m.right_sizing.len()
    );
    for r in &m.right_sizing {
        let _ =
            writeln!(
            out,
            "  {}/{}: {} of {} -> {} {} ({:.2} GPUs freed{}): peak {:.1}% {}, {:.0} of {:.0} MiB",
            r.namespace,
            r.pod,
            r.gpus,
            r.size,
            r.choice,
            r.to,
            r.gpus_freed,
            (r.per_day.zip(m.savings.as_ref()))
                .map_or(String::new(), |(d, s)| format!(", {d:.2} {}/day", s.currency)),
            r.peak_percent,
            r.metric,
            r.peak_memory_mib,
            r.gpu_memory_mib,
        );
    }
    out
}

/// Peak and mean of one pod under one metric, in percent (MiB for
/// [`FB_USED`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Use {
    pub(crate) peak: Option<f64>,
    pub(crate) mean: Option<f64>,
}

/// The query's answer, per pod and metric.
pub(crate) struct Series {
    by_pod: BTreeMap<(String, String), BTreeMap<&'static str, Use>>,
    window: Option<Duration>,
    at: Option<f64>,
}

impl Series {
    /// The first of `metrics` `pod` has a peak and a mean of: (metric,
    /// peak, mean).
    pub(crate) fn first(
        &self,
        pod: &HeldPod,
        metrics: &[&'static str],
    ) -> Option<(&'static str, f64, f64)> {
        let by_metric = self
            .by_pod
            .get(&(pod.namespace.clone(), pod.name.clone()))?;
        metrics.iter().find_map(|&metric| {
            let used = by_metric.get(metric)?;
            Some((metric, used.peak?, used.mean?))
        })
    }

    /// The peak of `metric` for `pod`.
    pub(crate) fn peak(&self, pod: &HeldPod, metric: &str) -> Option<f64> {
        self.by_pod
            .get(&(pod.namespace.clone(), pod.name.clone()))?
            .get(metric)?
            .peak
    }

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
            let metric = match (label("metric"), ASKED.iter().find(|(m, _)| *m == label("metric"))) {
                (_, Some((metric, _))) => *metric,
                ("", _) => return Err(not_ours("metric")),
                (other, None) => {
                    return Err(format!(
                        "a series of {other:?}, not of {ENGINE_ACTIVE}, {SM_ACTIVE} or another metric of the query"
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
                GPU_UTIL | FB_USED => s.value,
                _ => s.value * 100.0,
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

/// Judges each pod idle or not by [`IDLENESS`], and measures its
/// GPU-seconds by [`ACTIVITY`], cluster-wide, per namespace, class and
/// kind.
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
        efficiency: Efficiency::default(),
        by_namespace: BTreeMap::new(),
        by_class: BTreeMap::new(),
        by_kind: BTreeMap::new(),
        right_sizing: Vec::new(),
        savings: None,
    };
    let mut metrics = BTreeSet::new();
    for pod in pods {
        // Seconds it held its GPUs within the window.
        let seconds = pod.started_at.map_or(section.window_seconds as f64, |s| {
            (at - s as f64).clamp(0.0, section.window_seconds as f64)
        });
        let activity = series
            .first(pod, &ACTIVITY)
            .map(|(metric, _, mean)| (metric, mean));
        let dram = series.first(pod, &[DRAM_ACTIVE]).map(|(_, _, mean)| mean);
        let kind = pod.workload_kind.as_deref();
        for row in [
            &mut m.efficiency,
            m.by_namespace.entry(pod.namespace.clone()).or_default(),
            m.by_class.entry(class(kind)).or_default(),
            m.by_kind
                .entry(kind.unwrap_or("Pod").to_string())
                .or_default(),
        ] {
            row.add(pod, seconds, activity, dram);
        }
        let Some((metric, peak, mean)) = series.first(pod, &IDLENESS) else {
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
