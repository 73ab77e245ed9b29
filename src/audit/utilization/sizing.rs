//! Right-sizing, as AKS advises for under-used GPUs: a pod whose peaks
//! over the window (activity by [`super::ACTIVITY`], memory by
//! [`super::FB_USED`]), grown by a headroom, would fit a MIG profile of its
//! GPU, a share of a time-sliced GPU, or a smaller size of its node's
//! family. A pod without a memory series, or on a node whose size the
//! catalog does not know, is not judged: nothing is guessed.
use super::{Series, ACTIVITY, FB_USED};
use crate::audit::nodes::{GpuNode, HeldPod};
use crate::audit::{Prices, Report};
use crate::gpu::catalog::{Catalog, MigGpu, Sku};
use serde::Serialize;

pub const MIG: &str = "mig";
pub const SHARED_GPU: &str = "shared-gpu";
pub const SMALLER_SIZE: &str = "smaller-size";

/// How peaks are fitted.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rules {
    /// Peaks are grown by this share (percent) before they are fitted.
    pub headroom_percent: f64,
    /// The share of a GPU (percent) one pod gets on a time-sliced GPU.
    pub shared_percent: f64,
}

pub const DEFAULT_RULES: Rules = Rules {
    headroom_percent: 25.0,
    shared_percent: 50.0,
};

/// A pod that would fit less than it holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RightSize {
    pub namespace: String,
    pub pod: String,
    pub node: String,
    /// The node's size.
    pub size: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_kind: Option<String>,
    pub gpus: i64,
    /// [`MIG`], [`SHARED_GPU`] or [`SMALLER_SIZE`].
    pub choice: &'static str,
    /// The MIG profile (`1g.10gb`), the share (`50%`), or the size.
    pub to: String,
    /// GPUs it would hold: the MIG instance's share of its GPU (the larger
    /// of its compute slices and its memory over the GPU's), the share of
    /// a time-sliced GPU, or all the GPUs of the smaller size.
    pub gpus_after: f64,
    pub gpus_freed: f64,
    /// The reasoning: the peak activity (percent) and its metric, the peak
    /// memory used on any of its GPUs and the memory of one GPU (MiB).
    pub metric: &'static str,
    pub peak_percent: f64,
    pub peak_memory_mib: f64,
    pub gpu_memory_mib: f64,
    /// What it would save per day at the price file's prices: its GPUs at
    /// its node's price per GPU, less what it would hold (the smaller size
    /// at its own price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_day: Option<f64>,
}

/// What the right-sizing choices would save per day.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Savings {
    pub currency: String,
    pub price_date: String,
    pub price_source: String,
    pub example: bool,
    pub per_day: f64,
    /// Choices whose node or smaller size the price file does not price.
    pub unpriced: usize,
}

/// The choices for `pods`, most GPUs freed first.
pub(crate) fn right_size(
    pods: &[HeldPod],
    series: &Series,
    nodes: &[GpuNode],
    catalog: &Catalog,
    rules: &Rules,
) -> Vec<RightSize> {
    let mut out: Vec<RightSize> = (pods.iter())
        .filter_map(|pod| {
            let node = nodes.iter().find(|n| Some(&n.name) == pod.node.as_ref())?;
            let sku = catalog.get(&node.size).filter(|s| s.gpus >= 1.0)?;
            let gpu_memory_mib = sku.gpu_memory_gib? / sku.gpus * 1024.0;
            let (metric, peak_percent, _) = series.first(pod, &ACTIVITY)?;
            let peak_memory_mib = series.peak(pod, FB_USED)?;
            let grow = 1.0 + rules.headroom_percent / 100.0;
            let (activity, memory) = (peak_percent * grow, peak_memory_mib * grow);
            let (choice, to, gpus_after) = if pod.gpus == 1 {
                let share = rules.shared_percent;
                (sku.mig_gpu.as_deref())
                    .and_then(|gpu| mig_profile(gpu, activity, memory))
                    .map(|(profile, share)| (MIG, profile, share))
                    .or_else(|| {
                        (activity <= share && memory <= gpu_memory_mib * share / 100.0)
                            .then(|| (SHARED_GPU, format!("{share}%"), share / 100.0))
                    })?
            } else {
                let smaller = smaller_size(catalog, sku, pod.gpus, activity, memory)?;
                (SMALLER_SIZE, smaller.name.clone(), smaller.gpus)
            };
            Some(RightSize {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                node: node.name.clone(),
                size: node.size.clone(),
                workload_kind: pod.workload_kind.clone(),
                gpus: pod.gpus,
                choice,
                to,
                gpus_after,
                gpus_freed: pod.gpus as f64 - gpus_after,
                metric,
                peak_percent,
                peak_memory_mib,
                gpu_memory_mib,
                per_day: None,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        (b.gpus_freed.total_cmp(&a.gpus_freed))
            .then_with(|| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)))
    });
    out
}

/// Prices the right-sizing choices of `report` at `prices`.
pub fn price(report: &mut Report, prices: &Prices) {
    let Report {
        nodes, utilization, ..
    } = report;
    let nodes = nodes.as_ref().map_or(&[][..], |n| &n.gpu_node_list);
    let Some(m) = utilization.as_mut().and_then(|u| u.measured.as_mut()) else {
        return;
    };
    let mut savings = Savings {
        currency: prices.currency.clone(),
        price_date: prices.date.clone(),
        price_source: prices.source.clone(),
        example: prices.example,
        per_day: 0.0,
        unpriced: 0,
    };
    for r in &mut m.right_sizing {
        r.per_day = nodes.iter().find(|n| n.name == r.node).and_then(|node| {
            let per_gpu = prices.per_gpu_hour(node)?;
            let after = match r.choice {
                SMALLER_SIZE => prices.per_hour(node.region.as_deref(), &r.to)?,
                _ => per_gpu * r.gpus_after,
            };
            Some(24.0 * (r.gpus as f64 * per_gpu - after))
        });
        match r.per_day {
            Some(per_day) => savings.per_day += per_day,
            None => savings.unpriced += 1,
        }
    }
    m.savings = Some(savings);
}

/// The MIG profile of `gpu` with the smallest share of it that holds
/// `activity` (percent of the whole GPU's compute) and `memory` (MiB),
/// and that share; none when only the whole GPU does. A profile's memory
/// is read from its name in GB (10⁹ bytes), a little under what the
/// instance has.
fn mig_profile(gpu: &MigGpu, activity: f64, memory: f64) -> Option<(String, f64)> {
    let parse = |profile: &str| -> Option<(u32, f64)> {
        let (slices, rest) = profile.split_once("g.")?;
        let gb = rest.strip_suffix("gb")?.parse::<f64>().ok()?;
        Some((slices.parse().ok()?, gb))
    };
    let parsed: Vec<(&str, u32, f64)> = (gpu.profiles.iter())
        .filter_map(|(p, _)| Some((p.as_str(), parse(p)?.0, parse(p)?.1)))
        .collect();
    let slices = parsed.iter().map(|p| p.1).max()? as f64;
    (parsed.iter())
        .map(|&(p, n, gb)| (p, n as f64 / slices, gb * 1e9 / 1_048_576.0, gb))
        .filter(|&(_, compute, mib, _)| activity <= compute * 100.0 && memory <= mib)
        .map(|(p, compute, _, gb)| (p, compute.max(gb / gpu.memory_gib)))
        .filter(|&(_, share)| share < 1.0)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(p, share)| (p.to_string(), share))
}

/// The size of `sku`'s family, GPU and memory per GPU with the fewest
/// GPUs, fewer than `gpus`, that holds `gpus` GPUs' worth of `activity`
/// and `memory` (each GPU's peak), with at least its share of `sku`'s
/// vCPUs; none when there is none.
fn smaller_size<'c>(
    catalog: &'c Catalog,
    sku: &Sku,
    gpus: i64,
    activity: f64,
    memory: f64,
) -> Option<&'c Sku> {
    let per_gpu = sku.gpu_memory_gib? / sku.gpus;
    let held = gpus as f64;
    let needed = (held * activity / 100.0)
        .ceil()
        .max((held * memory / (per_gpu * 1024.0)).ceil())
        .max(1.0);
    (catalog.skus().iter())
        .filter(|c| {
            c.family == sku.family
                && c.gpu_model == sku.gpu_model
                && !c.retired
                && c.aks_supported
                && c.gpus >= needed
                && c.gpus < held
                && c.gpus.fract() == 0.0
                && c.gpu_memory_gib.is_some_and(|m| m / c.gpus == per_gpu)
                && c.vcpus as f64 >= sku.vcpus as f64 * c.gpus / sku.gpus
        })
        .min_by(|a, b| (a.gpus.total_cmp(&b.gpus)).then(a.vcpus.cmp(&b.vcpus)))
}
