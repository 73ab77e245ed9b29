//! `gpu-admission audit` over Kueue's queues: the ResourceFlavors a
//! ClusterQueue gives the namespaces it serves, against their SKU tiers, in
//! the JSON, text and HTML reports.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit/kueue-queues.yaml")
}

fn audit(format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-f"])
        .arg(fixture())
        .arg("--policies")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
        .args(["-o", format])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn flavors_outside_the_tiers_of_the_namespaces_they_serve() {
    let report: Value = serde_json::from_str(&audit("json")).unwrap();
    let kueue = report["kueue"].as_array().expect("a kueue section");
    // team-a (default tier) is given the A100 flavor; team-b's H100 flavor
    // is inside its premium tier; the AKS-wide NVIDIA flavor leaves sizes
    // to placement; team-c's LocalQueue is not admitted by the selector.
    assert_eq!(kueue.len(), 1, "{kueue:?}");
    let a100 = &kueue[0];
    assert_eq!(a100["clusterQueue"], "team-a-gpu");
    assert_eq!(a100["flavor"], "a100");
    assert_eq!(a100["namespace"], "team-a");
    assert_eq!(a100["tier"], "default");
    assert_eq!(
        a100["sizes"],
        serde_json::json!(["Standard_NC24ads_A100_v4"])
    );
    let message = a100["message"].as_str().unwrap();
    assert!(
        message.starts_with("ResourceFlavor a100 selects Standard_NC24ads_A100_v4, outside tier default of namespace team-a (ClusterQueue team-a-gpu)"),
        "{message}"
    );
    // The flavors themselves pass their admission policies.
    assert_eq!(report["findings"], serde_json::json!([]));

    let text = audit("text");
    assert!(text.contains(message), "{text}");

    let html = audit("html");
    let section = &html[html
        .find(r#"<section id="kueue">"#)
        .expect("a Kueue section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(
        section.contains(r#"<tr class="kueue" data-flavor="a100" data-namespace="team-a">"#),
        "{section}"
    );
    assert!(section.contains("Standard_NC24ads_A100_v4"), "{section}");
}

#[test]
fn no_kueue_section_without_queues() {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit/cluster-list.json");
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-o", "json", "-f"])
        .arg(list)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.get("kueue").is_none(), "{report}");
}
