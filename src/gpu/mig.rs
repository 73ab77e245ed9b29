//! Whether a pod's MIG slices (`nvidia.com/mig-<profile>`) fit the sizes
//! it may land on: each size's GPU must offer every profile the pod asks
//! for, and hold its count (instances per GPU × GPUs of the size). A pod
//! that asks for more never schedules. `gpu.mig` shows it.
use serde::Serialize;
use std::collections::BTreeMap;

use super::catalog::{Catalog, Sku};
use super::request::{int, PodGpuRequest};

/// Resource names of MIG slices start with this.
pub const MIG_PREFIX: &str = "nvidia.com/mig-";
/// Slices shared by time-slicing (`renameByDefault`) end with this; their
/// count says nothing of the slices a node has.
const SHARED_SUFFIX: &str = ".shared";
/// At most this many sizes are named in `sizesThatFit`.
pub const SIZES_SHOWN: usize = 3;

/// `gpu.mig` (see docs/cel-extensions.md). Integers are `i64` for CEL.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigFacts {
    /// MIG slices per resource the pod asks for, shared ones included.
    pub slices: BTreeMap<String, i64>,
    /// The same as text: `8 nvidia.com/mig-1g.10gb`.
    pub asked: String,
    /// Some size the pod may land on offers every profile it asks for and
    /// holds its counts; true when it asks for no slice or no size is
    /// known to it.
    pub fits: bool,
    /// How many sizes it may land on (its node selection, before MIG
    /// narrows it to sizes with MIG).
    pub sizes: i64,
    /// Its node selection narrows the catalog.
    pub constrained: bool,
    /// When it does not fit: the size that comes nearest.
    pub size: Option<MigSize>,
    /// Why that size does not hold the slices, and what to change.
    pub problem: String,
    pub fix: String,
    /// Catalog sizes that would hold the slices (at most [`SIZES_SHOWN`]).
    pub sizes_that_fit: Vec<String>,
}

impl Default for MigFacts {
    fn default() -> MigFacts {
        MigFacts {
            slices: BTreeMap::new(),
            asked: String::new(),
            fits: true,
            sizes: 0,
            constrained: false,
            size: None,
            problem: String::new(),
            fix: String::new(),
            sizes_that_fit: Vec::new(),
        }
    }
}

/// One size, as `gpu.mig.size` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigSize {
    pub name: String,
    /// `A100 80GB` (the model alone for GPUs without MIG).
    pub gpu: String,
    /// GPU devices of the size.
    pub gpus: i64,
    /// What one GPU offers: `1g.10gb ×7` (instances per GPU); empty
    /// without MIG.
    pub offers: Vec<String>,
}

/// One MIG resource the pod asks for.
struct Asked<'a> {
    resource: &'a str,
    profile: &'a str,
    shared: bool,
    count: u64,
}

/// How one size meets the pod's slices.
#[derive(Debug, PartialEq)]
enum Verdict {
    Holds,
    /// Its GPUs have no MIG.
    NoMig,
    /// Its GPU does not offer this profile.
    NotOffered(String),
    /// It holds at most `max` of `resource` (`per_gpu` × its GPUs).
    TooMany {
        resource: String,
        asked: u64,
        per_gpu: u32,
        max: u64,
        /// The least share of a count it holds (for the nearest size).
        share: f64,
    },
}

impl Verdict {
    /// Nearer to holding is larger.
    fn rank(&self) -> (u8, f64) {
        match self {
            Verdict::Holds => (3, 0.0),
            Verdict::TooMany { share, .. } => (2, *share),
            Verdict::NotOffered(_) => (1, 0.0),
            Verdict::NoMig => (0, 0.0),
        }
    }
}

fn judge(sku: &Sku, asked: &[Asked]) -> Verdict {
    if !sku.mig {
        return Verdict::NoMig;
    }
    // A size with MIG whose GPU the table does not know is not judged.
    let Some(gpu) = &sku.mig_gpu else {
        return Verdict::Holds;
    };
    let gpus = u64::from(sku.gpu_devices);
    let mut worst: Option<Verdict> = None;
    for a in asked {
        let Some(per_gpu) = gpu.per_gpu(a.profile) else {
            return Verdict::NotOffered(a.profile.to_string());
        };
        let max = u64::from(per_gpu).saturating_mul(gpus);
        if !a.shared && a.count > max {
            let share = max as f64 / a.count as f64;
            if worst.as_ref().is_none_or(|w| w.rank().1 > share) {
                worst = Some(Verdict::TooMany {
                    resource: a.resource.to_string(),
                    asked: a.count,
                    per_gpu,
                    max,
                    share,
                });
            }
        }
    }
    worst.unwrap_or(Verdict::Holds)
}

impl MigFacts {
    /// The MIG facts of a pod asking `request`, that may land on `skus`
    /// (its node selection, `constrained` when that narrows the catalog).
    pub fn of(
        request: &PodGpuRequest,
        skus: &[&Sku],
        constrained: bool,
        catalog: &Catalog,
    ) -> MigFacts {
        let asked: Vec<Asked> = request
            .effective
            .iter()
            .filter_map(|(resource, count)| {
                let profile = resource.strip_prefix(MIG_PREFIX)?;
                let (profile, shared) = match profile.strip_suffix(SHARED_SUFFIX) {
                    Some(p) => (p, true),
                    None => (profile, false),
                };
                Some(Asked {
                    resource,
                    profile,
                    shared,
                    count: *count,
                })
            })
            .collect();
        if asked.is_empty() {
            return MigFacts::default();
        }
        let mut facts = MigFacts {
            slices: asked
                .iter()
                .map(|a| (a.resource.to_string(), int(a.count)))
                .collect(),
            asked: asked
                .iter()
                .map(|a| format!("{} {}", a.count, a.resource))
                .collect::<Vec<_>>()
                .join(" and "),
            sizes: skus.len() as i64,
            constrained,
            ..MigFacts::default()
        };
        let judged: Vec<(&Sku, Verdict)> = skus.iter().map(|s| (*s, judge(s, &asked))).collect();
        if judged.is_empty() || judged.iter().any(|(_, v)| *v == Verdict::Holds) {
            return facts;
        }
        facts.fits = false;
        facts.sizes_that_fit = catalog
            .skus()
            .iter()
            .filter(|s| s.mig_gpu.is_some() && judge(s, &asked) == Verdict::Holds)
            .take(SIZES_SHOWN)
            .map(|s| s.name.clone())
            .collect();
        let nearest = judged.iter().max_by(|(a, va), (b, vb)| {
            let (ra, rb) = (va.rank(), vb.rank());
            ra.0.cmp(&rb.0)
                .then(ra.1.total_cmp(&rb.1))
                .then(a.gpu_devices.cmp(&b.gpu_devices))
        });
        if let Some((sku, verdict)) = nearest {
            let gpu = sku.mig_gpu.as_ref();
            facts.size = Some(MigSize {
                name: sku.name.clone(),
                gpu: gpu.map_or_else(|| sku.gpu_model.clone(), |g| g.label()),
                gpus: i64::from(sku.gpu_devices),
                offers: gpu
                    .iter()
                    .flat_map(|g| g.profiles.iter())
                    .map(|(p, n)| format!("{p} ×{n}"))
                    .collect(),
            });
            let plural = |n: u64| if n == 1 { "" } else { "s" };
            (facts.problem, facts.fix) = match verdict {
                Verdict::NoMig => (
                    format!(
                        "has no Multi-Instance GPU: its {} GPUs offer no MIG profile",
                        sku.gpu_model
                    ),
                    "ask for whole GPUs (nvidia.com/gpu) instead".to_string(),
                ),
                Verdict::NotOffered(profile) => (
                    format!("does not offer MIG profile {profile}"),
                    "ask for a profile it offers (nvidia.com/mig-<profile>)".to_string(),
                ),
                Verdict::TooMany {
                    resource,
                    asked,
                    per_gpu,
                    max,
                    ..
                } => {
                    let gpus = u64::from(sku.gpu_devices);
                    (
                        format!(
                            "holds at most {max} {resource} ({per_gpu} per GPU × {gpus} GPU{}), not {asked}",
                            plural(gpus)
                        ),
                        format!("ask for at most {max} {resource} per pod (split the work across pods)"),
                    )
                }
                Verdict::Holds => (String::new(), String::new()),
            };
        }
        facts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{pod_gpu_request, GpuResources};
    use serde_json::json;

    /// The MIG facts of a pod asking `count` of `resource`, on `sizes` (on
    /// any size of the catalog when empty).
    fn facts(resource: &str, count: &str, sizes: &[&str]) -> MigFacts {
        let c = Catalog::embedded_shared();
        let skus: Vec<&Sku> = if sizes.is_empty() {
            c.skus().iter().collect()
        } else {
            sizes.iter().map(|s| c.get(s).unwrap()).collect()
        };
        MigFacts::of(&request(resource, count), &skus, !sizes.is_empty(), c)
    }

    fn request(resource: &str, count: &str) -> PodGpuRequest {
        let limits = json!({resource: count});
        let spec = json!({"containers": [{"name": "c", "resources": {"limits": limits}}]});
        pod_gpu_request(&spec, &GpuResources::default())
    }

    /// Whether `count` of `nvidia.com/<slice>` fits one node of `size`, per
    /// case.
    #[track_caller]
    fn assert_fits(cases: &[(&str, &str, &str, bool)]) {
        for &(slice, count, size, fits) in cases {
            let f = facts(&format!("nvidia.com/{slice}"), count, &[size]);
            assert_eq!(f.fits, fits, "{count} {slice} on {size}");
        }
    }

    #[test]
    fn eight_slices_of_seven_per_gpu_do_not_fit_one_a100() {
        let f = facts("nvidia.com/mig-1g.10gb", "8", &["Standard_NC24ads_A100_v4"]);
        assert!(!f.fits);
        assert_eq!(f.asked, "8 nvidia.com/mig-1g.10gb");
        let size = f.size.unwrap();
        let want = ("Standard_NC24ads_A100_v4", "A100 80GB", 1);
        assert_eq!((size.name.as_str(), size.gpu.as_str(), size.gpus), want);
        assert_eq!(size.offers[0], "1g.10gb ×7");
        let problem = "holds at most 7 nvidia.com/mig-1g.10gb (7 per GPU × 1 GPU), not 8";
        assert_eq!(f.problem, problem);
        assert!(f.fix.contains("at most 7"), "{}", f.fix);
        // In catalog order; eight A100 40GB hold 4 × 8 of 1g.10gb.
        let fit = [
            "Standard_NC48ads_A100_v4",
            "Standard_NC96ads_A100_v4",
            "Standard_ND96asr_v4",
        ];
        assert_eq!(f.sizes_that_fit, fit);
        // Seven fit; two A100s hold fourteen.
        assert_fits(&[
            ("mig-1g.10gb", "7", "NC24ads_A100_v4", true),
            ("mig-1g.10gb", "14", "NC48ads_A100_v4", true),
            ("mig-3g.40gb", "3", "NC24ads_A100_v4", false),
        ]);
    }

    #[test]
    fn a_profile_the_gpu_does_not_offer_never_fits() {
        let f = facts("nvidia.com/mig-1g.5gb", "1", &["Standard_ND96isr_H100_v5"]);
        assert!(!f.fits);
        assert_eq!(f.problem, "does not offer MIG profile 1g.5gb");
        assert_eq!(f.size.as_ref().unwrap().gpu, "H100 80GB");
        assert_eq!(f.sizes_that_fit, ["Standard_ND96asr_v4"]);
        // H100 NVL has its own profiles.
        assert_fits(&[
            ("mig-2g.24gb", "3", "NC40ads_H100_v5", true),
            ("mig-1g.10gb", "1", "NC40ads_H100_v5", false),
            ("mig-1g.18gb", "56", "ND96isr_H200_v5", true),
        ]);
    }

    #[test]
    fn sizes_without_mig_offer_nothing() {
        let f = facts("nvidia.com/mig-1g.10gb", "1", &["Standard_NC4as_T4_v3"]);
        assert!(!f.fits);
        let problem = "has no Multi-Instance GPU: its T4 GPUs offer no MIG profile";
        assert_eq!(f.problem, problem);
        let size = f.size.unwrap();
        assert_eq!((size.gpu.as_str(), size.offers.len()), ("T4", 0));
        assert!(f.fix.contains("nvidia.com/gpu"));
    }

    #[test]
    fn the_nearest_of_several_sizes_is_named() {
        // A T4 and one A100: the A100 comes nearer.
        let sizes = ["Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4"];
        let f = facts("nvidia.com/mig-1g.10gb", "9", &sizes);
        assert!(!f.fits);
        assert_eq!(f.sizes, 2);
        assert_eq!(f.size.unwrap().name, "Standard_NC24ads_A100_v4");
        // Any size of the catalog: one holds it.
        assert!(facts("nvidia.com/mig-1g.10gb", "8", &[]).fits);
        // No size of the catalog holds 57 one-slice instances.
        let f = facts("nvidia.com/mig-1g.10gb", "57", &[]);
        assert!(!f.fits && !f.constrained);
        assert!(f.size.unwrap().gpus == 8);
        assert!(f.sizes_that_fit.is_empty());
    }

    #[test]
    fn shared_slices_need_the_profile_but_not_the_count() {
        assert_fits(&[
            ("mig-1g.10gb.shared", "9", "NC24ads_A100_v4", true),
            ("mig-1g.5gb.shared", "1", "NC24ads_A100_v4", false),
        ]);
    }

    #[test]
    fn no_slices_or_no_size_fits() {
        let f = facts("nvidia.com/gpu", "9", &["Standard_NC24ads_A100_v4"]);
        assert_eq!(f, MigFacts::default());
        assert!(f.fits);
        let c = Catalog::embedded_shared();
        assert!(MigFacts::of(&request("nvidia.com/mig-1g.10gb", "99"), &[], true, c).fits);
    }
}
