//! GPU-seconds used against GPU-seconds allocated, as AKS's GPU
//! observability guidance makes it the shared platform-and-finance
//! figure, and the workload classes it is given per.
use crate::audit::nodes::HeldPod;
use serde::Serialize;
use std::collections::BTreeMap;

/// Workload classes, by the kind of a pod's workload (its root
/// controller); any other kind, and a bare pod, is [`OTHER`].
pub const CLASSES: [(&str, &str); 19] = [
    ("Job", TRAINING),
    ("CronJob", TRAINING),
    ("PyTorchJob", TRAINING),
    ("TFJob", TRAINING),
    ("MPIJob", TRAINING),
    ("XGBoostJob", TRAINING),
    ("PaddleJob", TRAINING),
    ("JAXJob", TRAINING),
    ("TrainJob", TRAINING),
    ("JobSet", TRAINING),
    ("RayJob", TRAINING),
    ("Deployment", INFERENCE),
    ("ReplicaSet", INFERENCE),
    ("InferenceService", INFERENCE),
    ("LeaderWorkerSet", INFERENCE),
    ("RayService", INFERENCE),
    ("Workspace", INFERENCE),
    ("InferenceSet", INFERENCE),
    ("Notebook", NOTEBOOK),
];
pub const TRAINING: &str = "training";
pub const INFERENCE: &str = "inference";
pub const NOTEBOOK: &str = "notebook";
pub const OTHER: &str = "other";

/// GPU-seconds used against GPU-seconds allocated, over the pods of a
/// namespace, class or kind. Allocated: each pod's GPUs times the seconds
/// it held them within the window (since its start, or the whole window);
/// used: allocated times its mean activity ([`super::ACTIVITY`]). Pods with no
/// activity series are counted apart, never guessed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Efficiency {
    /// Pods with an activity series.
    pub pods: usize,
    pub gpus: i64,
    pub gpu_seconds_allocated: f64,
    pub gpu_seconds_used: f64,
    /// `used / allocated`, percent; none when nothing was allocated.
    pub used_percent: Option<f64>,
    /// GPU-seconds allocated measured by each activity metric.
    pub metrics: BTreeMap<&'static str, f64>,
    /// Mean DRAM activity, percent, weighted by GPU-seconds allocated,
    /// over the pods exporting it.
    pub dram_active_percent: Option<f64>,
    /// GPU-seconds allocated to pods exporting DRAM activity.
    pub dram_gpu_seconds: f64,
    /// Their sum of GPU-seconds allocated times DRAM activity.
    #[serde(skip)]
    dram_weighted: f64,
    /// Pods holding GPUs with no activity series, not in the figures above.
    pub pods_without_data: usize,
    pub gpus_without_data: i64,
    pub gpu_seconds_without_data: f64,
}

impl Efficiency {
    /// Adds a pod measured (`activity` its mean activity and `dram` its
    /// mean DRAM activity, percent), or not.
    pub(super) fn add(
        &mut self,
        pod: &HeldPod,
        seconds: f64,
        activity: Option<(&'static str, f64)>,
        dram: Option<f64>,
    ) {
        let allocated = pod.gpus as f64 * seconds;
        let Some((metric, mean)) = activity else {
            self.pods_without_data += 1;
            self.gpus_without_data += pod.gpus;
            self.gpu_seconds_without_data += allocated;
            return;
        };
        self.pods += 1;
        self.gpus += pod.gpus;
        self.gpu_seconds_allocated += allocated;
        self.gpu_seconds_used += allocated * mean / 100.0;
        *self.metrics.entry(metric).or_default() += allocated;
        if let Some(dram) = dram {
            self.dram_gpu_seconds += allocated;
            self.dram_weighted += allocated * dram;
            self.dram_active_percent =
                (self.dram_gpu_seconds > 0.0).then(|| self.dram_weighted / self.dram_gpu_seconds);
        }
        self.used_percent = (self.gpu_seconds_allocated > 0.0)
            .then(|| self.gpu_seconds_used / self.gpu_seconds_allocated * 100.0);
    }
}

/// The class of a workload kind ([`CLASSES`]).
pub fn class(kind: Option<&str>) -> &'static str {
    (CLASSES.iter())
        .find(|(k, _)| Some(*k) == kind)
        .map_or(OTHER, |(_, class)| class)
}
