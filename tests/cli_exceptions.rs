//! GpuPolicyExceptions in the offline subcommands, as a platform team runs
//! them: `evaluate` with exceptions from the manifest and the policy
//! folder, judged at a given time, and `audit` of a dump holding them.
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
}

fn policies() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policies")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const EXCEPTION: &str = r#"apiVersion: gpu-admission.io/v1alpha1
kind: GpuPolicyException
metadata: {name: nccl-bench, namespace: research}
spec:
  policies: [gpu-privileged]
  match:
    kinds: [Pod]
    names: ["nccl-bench-*"]
  reason: NCCL bandwidth benchmark needs privileged for one day; OPS-1234
  expiresAt: "2026-12-31T00:00:00Z"
"#;

/// A privileged GPU pod, which the shipped gpu-privileged policy denies.
fn privileged_pod(name: &str, namespace: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  containers:
    - name: bench
      image: nvcr.io/nvidia/pytorch:24.05-py3
      securityContext: {{privileged: true}}
      resources:
        limits: {{nvidia.com/gpu: "1", cpu: "4", memory: 16Gi}}
        requests: {{nvidia.com/gpu: "1", cpu: "4", memory: 16Gi}}
"#
    )
}

fn evaluate(manifest: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("evaluate")
        .arg("-f")
        .arg(manifest)
        .arg("--policies")
        .arg(policies())
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn evaluate_lets_through_what_an_exception_of_the_manifest_covers_until_it_expires() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = write(
        tmp.path(),
        "bench.yaml",
        &format!(
            "{EXCEPTION}---\n{}---\n{}---\n{}",
            privileged_pod("nccl-bench-0", "research"),
            privileged_pod("other", "research"),
            privileged_pod("nccl-bench-0", "ml"),
        ),
    );
    let at = ["--at", "2026-12-01T00:00:00Z"];
    let out = evaluate(&manifest, &at);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("GpuPolicyException research/nccl-bench: allowed\n"),
        "{text}"
    );
    assert!(
        text.contains("Pod research/nccl-bench-0: allowed\n"),
        "{text}"
    );
    assert!(
        text.contains("  excepted (deny): gpu-privileged: container bench is privileged"),
        "{text}"
    );
    assert!(
        text.contains("    allowed by exception research/nccl-bench (NCCL bandwidth benchmark needs privileged for one day; OPS-1234; expires 2026-12-31T00:00:00Z)\n"),
        "{text}"
    );
    // Another name, another namespace: not covered.
    assert!(text.contains("Pod research/other: DENIED\n"), "{text}");
    assert!(text.contains("Pod ml/nccl-bench-0: DENIED\n"), "{text}");
    assert!(
        text.ends_with("4 objects: 2 denied, 1 warned, 4 patched, 1 let through by exceptions\n"),
        "{text}"
    );

    let out = evaluate(&manifest, &[&at[..], &["-o", "json"]].concat());
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results[1]["allowed"], true);
    let excepted = &results[1]["excepted"];
    assert_eq!(excepted.as_array().unwrap().len(), 1, "{excepted}");
    assert_eq!(excepted[0]["policy"], "gpu-privileged");
    assert_eq!(excepted[0]["exception"], "research/nccl-bench");
    assert_eq!(excepted[0]["expiresAt"], "2026-12-31T00:00:00Z");
    assert_eq!(excepted[0]["action"], "Deny");
    assert!(excepted[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("NCCL bandwidth"));
    assert!(excepted[0]["message"]
        .as_str()
        .unwrap()
        .starts_with("gpu-privileged: container bench is privileged"));
    assert!(results[2].get("excepted").is_none(), "{}", results[2]);
    // The exception object itself gets its requester recorded.
    assert_eq!(
        results[0]["patched"]["spec"]["requestedBy"],
        "gpu-admission-cli"
    );

    let out = evaluate(&manifest, &[&at[..], &["-o", "yaml"]].concat());
    let yaml: Value = serde_yaml::from_slice(&out.stdout).unwrap();
    assert_eq!(yaml[1]["excepted"][0]["exception"], "research/nccl-bench");

    // At its end the exception lets nothing through.
    let out = evaluate(&manifest, &["--at", "2026-12-31T00:00:00Z"]);
    let text = stdout(&out);
    assert!(
        text.contains("Pod research/nccl-bench-0: DENIED\n"),
        "{text}"
    );
    assert!(!text.contains("allowed by exception"), "{text}");
    assert!(
        text.ends_with("4 objects: 3 denied, 0 warned, 4 patched\n"),
        "{text}"
    );

    let out = evaluate(&manifest, &["--at", "next tuesday"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"next tuesday\" is not an RFC 3339 time such as 2026-12-31T00:00:00Z"),
        "{err}"
    );
}

#[test]
fn evaluate_judges_an_unreadable_exception_of_the_manifest_and_takes_nothing_from_it() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = EXCEPTION
        .replace(
            "names: [\"nccl-bench-*\"]",
            "expression: \"object.metadata.name.startsWith(\"",
        )
        .replace(
            "reason: NCCL bandwidth benchmark needs privileged for one day; OPS-1234",
            "reason: \"  \"",
        );
    let manifest = write(
        tmp.path(),
        "bench.yaml",
        &format!(
            "{broken}---\n{}",
            privileged_pod("nccl-bench-0", "research")
        ),
    );
    let out = evaluate(
        &manifest,
        &["--at", "2026-12-01T00:00:00Z", "--fail-on-deny"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("GpuPolicyException research/nccl-bench: DENIED\n"),
        "{text}"
    );
    assert!(
        text.contains("  denied: GpuPolicyException research/nccl-bench: spec.reason: required: say why the objects need the exception"),
        "{text}"
    );
    assert!(
        text.contains("  denied: GpuPolicyException research/nccl-bench: spec.match.expression: line 1, column 33: Syntax error"),
        "{text}"
    );
    assert!(
        text.contains("Pod research/nccl-bench-0: DENIED\n"),
        "{text}"
    );
}

#[test]
fn evaluate_honours_the_exceptions_of_the_policy_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("policies");
    std::fs::create_dir(&folder).unwrap();
    let file = "gpu-privileged.yaml";
    std::fs::copy(policies().join(file), folder.join(file)).unwrap();
    write(&folder, "exceptions.yaml", EXCEPTION);
    let manifest = write(
        tmp.path(),
        "pod.yaml",
        &privileged_pod("nccl-bench-0", "research"),
    );
    let out = bin()
        .arg("evaluate")
        .arg("-f")
        .arg(&manifest)
        .arg("--policies")
        .arg(&folder)
        .args(["--at", "2026-12-30T23:59:59Z"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("Pod research/nccl-bench-0: allowed\n"),
        "{text}"
    );
    assert!(
        text.contains("allowed by exception research/nccl-bench (NCCL bandwidth"),
        "{text}"
    );
    assert!(
        text.contains(
            r#"  audit: policy_exceptions=[{"action":"Deny","exception":"research/nccl-bench","policy":"gpu-privileged"}]"#
        ),
        "{text}"
    );
}

/// `audit` of a dump holding a GpuPolicyException: what it lets through is
/// not a finding while it runs (`--at` before its end), and is one again,
/// the exception listed as expired, at its end.
#[test]
fn audit_of_a_dump_honours_its_exceptions_until_they_expire() {
    let tmp = tempfile::tempdir().unwrap();
    let dump = write(
        tmp.path(),
        "dump.yaml",
        &format!(
            "{EXCEPTION}---\n{}",
            privileged_pod("nccl-bench-0", "research")
        ),
    );
    let audit = |at: &str| -> Value {
        let out = bin()
            .arg("audit")
            .arg("-f")
            .arg(&dump)
            .arg("--policies")
            .arg(policies())
            .args(["-o", "json", "--at", at])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let during = audit("2026-12-30T00:00:00Z");
    let excepted = during["excepted"].as_array().unwrap();
    assert_eq!(excepted.len(), 1, "{during:#}");
    assert_eq!(excepted[0]["policy"], "gpu-privileged");
    assert_eq!(excepted[0]["exception"], "research/nccl-bench");
    let privileged = |report: &Value| {
        (report["findings"].as_array().unwrap().iter())
            .filter(|f| f["policy"] == "gpu-privileged")
            .count()
    };
    assert_eq!(privileged(&during), 0);
    assert_eq!(during["exceptions"][0]["state"], "active");
    assert_eq!(during["exceptions"][0]["expiringSoon"], true);

    let after = audit("2026-12-31T00:00:00Z");
    assert!(
        after["excepted"].as_array().is_none_or(|e| e.is_empty()),
        "{after:#}"
    );
    assert_eq!(privileged(&after), 1);
    assert_eq!(after["exceptions"][0]["state"], "expired");

    let out = bin()
        .args(["audit", "-f"])
        .arg(&dump)
        .args(["--at", "tomorrow"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not an RFC 3339 time"),
        "{out:?}"
    );
}
