//! What a node of one size leaves for pods: its vCPUs and memory less
//! AKS's node reserve. A fact of the size alone, worked out once when the
//! catalog row is read ([`super::Sku::room`]); `gpu.fit` judges pods
//! against it.

/// AKS's kube-reserved CPU in millicores by the cores of the host, the
/// table of "Node resource reservations" (learn.microsoft.com, AKS docs,
/// `node-resource-reservations`). A size between two columns takes the
/// smaller one's, and one above 64 cores the 64-core figure: the reserve
/// only grows with cores, so no pod is judged against less CPU than the
/// node leaves.
const CPU_RESERVE_MILLIS: [(u32, u64); 7] = [
    (1, 60),
    (2, 100),
    (4, 140),
    (8, 180),
    (16, 260),
    (32, 420),
    (64, 740),
];

/// The memory AKS (1.29 and later) keeps from pods: the kubelet's
/// `memory.available<100Mi` eviction threshold, plus kube-reserved, the
/// lesser of 20 MB per pod the node may hold plus 50 MB, and a quarter of
/// the VM's memory. Pods per node are taken as [`MIN_MAX_PODS`], so the
/// reserve is the least any AKS node of the size keeps.
const EVICTION_BYTES: u64 = 100 << 20;
const RESERVED_BYTES_PER_POD: u64 = 20_000_000;
const RESERVED_BYTES_BASE: u64 = 50_000_000;
/// The smallest `maxPods` AKS accepts for a node pool.
const MIN_MAX_PODS: u64 = 10;

const GIB: f64 = (1u64 << 30) as f64;

/// What a node of one size leaves for pods.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Allocatable {
    pub cpu_millis: u64,
    pub reserved_cpu_millis: u64,
    /// `None` when the catalog does not know the size's memory.
    pub memory_bytes: Option<u64>,
    pub reserved_memory_bytes: Option<u64>,
}

impl Allocatable {
    /// A size of `vcpus` and `memory_gib` less AKS's node reserve (see
    /// [`CPU_RESERVE_MILLIS`] and [`EVICTION_BYTES`]).
    pub fn of_size(vcpus: u32, memory_gib: Option<f64>) -> Allocatable {
        let cpu = u64::from(vcpus) * 1000;
        let reserved_cpu = CPU_RESERVE_MILLIS
            .iter()
            .rev()
            .find(|(cores, _)| *cores <= vcpus)
            .map_or(0, |(_, millis)| *millis);
        let memory = memory_gib.map(|g| (g * GIB) as u64);
        let reserved_memory = memory.map(|m| {
            let kube = (RESERVED_BYTES_PER_POD * MIN_MAX_PODS + RESERVED_BYTES_BASE).min(m / 4);
            kube + EVICTION_BYTES
        });
        Allocatable {
            cpu_millis: cpu.saturating_sub(reserved_cpu),
            reserved_cpu_millis: reserved_cpu,
            memory_bytes: memory
                .zip(reserved_memory)
                .map(|(m, r)| m.saturating_sub(r)),
            reserved_memory_bytes: reserved_memory,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Catalog;
    use super::*;

    #[test]
    fn reserve_follows_the_aks_tables() {
        let c = Catalog::embedded();
        let t4 = c.get("Standard_NC4as_T4_v3").unwrap().room;
        assert_eq!((t4.cpu_millis, t4.reserved_cpu_millis), (3860, 140));
        assert_eq!(t4.reserved_memory_bytes, Some(250_000_000 + (100 << 20)));
        let allocatable = (28 << 30) - 250_000_000 - (100 << 20);
        assert_eq!(t4.memory_bytes, Some(allocatable));
        // 24 cores: the 16-core figure; 96 cores: the 64-core one.
        let a100 = c.get("Standard_NC24ads_A100_v4").unwrap().room;
        assert_eq!(a100.reserved_cpu_millis, 260);
        let nd = c.get("Standard_ND96asr_v4").unwrap().room;
        assert_eq!(nd.reserved_cpu_millis, 740);
        // A quarter of the memory when that is less.
        let reserved = Allocatable::of_size(4, Some(0.5)).reserved_memory_bytes;
        assert_eq!(reserved, Some((128 << 20) + (100 << 20)));
        assert_eq!(Allocatable::of_size(4, None).memory_bytes, None);
        // Every row's room is its size's.
        for sku in c.skus() {
            assert_eq!(
                sku.room,
                Allocatable::of_size(sku.vcpus, sku.memory_gib),
                "{}",
                sku.name
            );
        }
    }
}
