//! The rows shipped in `data/azure-gpu-skus.csv` say what Azure, AKS and
//! Karpenter say of each size.
use super::Catalog;

fn catalog() -> Catalog {
    Catalog::embedded()
}

#[test]
fn ncv3_is_retired_on_2025_09_30() {
    let c = catalog();
    for name in [
        "Standard_NC6s_v3",
        "Standard_NC12s_v3",
        "Standard_NC24rs_v3",
    ] {
        let sku = c.get(name).unwrap();
        assert!(sku.retired, "{name}");
        assert_eq!(sku.retired_on.as_deref(), Some("2025-09-30"));
        assert_eq!(sku.family, "NCv3");
    }
}

/// Every size the NVv3 and NVv4 retirement notices name (Azure Updates
/// 500573 and 500578), the `h` variants by their alias.
#[test]
fn nvv3_and_nvv4_are_retired_on_2026_09_30() {
    let c = catalog();
    for name in [
        "Standard_NV12s_v3",
        "Standard_NV12hs_v3",
        "Standard_NV24s_v3",
        "Standard_NV48s_v3",
        "Standard_NV4as_v4",
        "Standard_NV4ahs_v4",
        "Standard_NV8as_v4",
        "Standard_NV8ahs_v4",
        "Standard_NV16as_v4",
        "Standard_NV16ahs_v4",
        "Standard_NV32as_v4",
        "Standard_NV32ahs_v4",
    ] {
        let sku = c
            .get(name)
            .unwrap_or_else(|| panic!("{name} not in the catalog"));
        assert!(sku.retired, "{name}");
        assert_eq!(sku.retired_on.as_deref(), Some("2026-09-30"), "{name}");
        assert!(
            sku.source.contains("-retirement.md"),
            "{name}: {}",
            sku.source
        );
    }
}

#[test]
fn nvv4_is_amd_and_not_supported_on_aks() {
    let c = catalog();
    let sku = c.get("Standard_NV4as_v4").unwrap();
    assert!(!sku.aks_supported);
    assert_eq!(sku.manufacturer, "amd");
    assert_eq!(sku.gpus, 0.125);
}

#[test]
fn fractional_vgpu_sizes_do_not_report_one_gpu() {
    let c = catalog();
    let nv6 = c.get("Standard_NV6ads_A10_v5").unwrap();
    assert!((nv6.gpus - 1.0 / 6.0).abs() < 0.001, "{}", nv6.gpus);
    assert!(nv6.is_fractional());
    // The node still advertises one device.
    assert_eq!(nv6.gpu_devices, 1);
    assert_eq!(c.get("Standard_NV18ads_A10_v5").unwrap().gpus, 0.5);
    assert!(!c.get("Standard_NV36ads_A10_v5").unwrap().is_fractional());
}

#[test]
fn gpu_memory_is_per_vm() {
    let c = catalog();
    for (name, memory) in [
        ("Standard_ND96amsr_A100_v4", 640.0),
        ("Standard_ND128isr_NDR_GB200_v6", 768.0),
        ("Standard_NC48ads_A100_v4", 160.0),
    ] {
        assert_eq!(c.get(name).unwrap().gpu_memory_gib, Some(memory), "{name}");
    }
}

#[test]
fn minimum_aks_size_is_current_and_not_premium() {
    let sku = catalog().get("Standard_NC4as_T4_v3").unwrap().clone();
    assert!(!sku.retired);
    assert!(sku.aks_supported);
    assert!(!sku.premium);
    assert_eq!((sku.vcpus, sku.gpus), (4, 1.0));
}

#[test]
fn mig_marks_the_a100_h100_and_h200_sizes() {
    let c = catalog();
    let mig = "NC24ads_A100_v4 ND96asr_v4 NC40ads_H100_v5 ND96isr_H200_v5";
    for name in mig.split(' ') {
        assert!(c.get(name).unwrap().mig, "{name}");
    }
    for name in "NC4as_T4_v3 NV36ads_A10_v5 ND96isr_MI300X_v5".split(' ') {
        assert!(!c.get(name).unwrap().mig, "{name}");
    }
    assert_eq!(c.sku_value("Standard_NC24ads_A100_v4")["mig"], true);
}

#[test]
fn premium_marks_high_end_gpus_only() {
    let c = catalog();
    let premium =
        "NC24ads_A100_v4 ND96isr_H100_v5 ND96isr_H200_v5 ND128isr_GB300_v6 ND96isr_MI300X_v5";
    for name in premium.split(' ') {
        assert!(c.get(name).unwrap().premium, "{name}");
    }
    for name in ["NC4as_T4_v3", "NV36ads_A10_v5"] {
        assert!(!c.get(name).unwrap().premium, "{name}");
    }
}

#[test]
fn every_row_is_consistent() {
    for sku in catalog().skus() {
        assert!(sku.gpu_devices as f64 >= sku.gpus.floor(), "{}", sku.name);
        let (name, dated) = (&sku.name, !sku.retired || sku.retired_on.is_some());
        assert!(dated, "{name} retired without a date");
    }
}

#[test]
fn host_memory_is_known_for_every_size() {
    let c = catalog();
    for (name, vcpus, memory) in [
        ("Standard_NC4as_T4_v3", 4, 28.0),
        ("Standard_NC24ads_A100_v4", 24, 220.0),
        ("Standard_ND96asr_v4", 96, 900.0),
        ("Standard_NC6", 6, 56.0),
    ] {
        let sku = c.get(name).unwrap();
        assert_eq!((sku.vcpus, sku.memory_gib), (vcpus, Some(memory)), "{name}");
    }
    for sku in c.skus() {
        assert!(sku.memory_gib.is_some_and(|m| m > 0.0), "{}", sku.name);
    }
}
