//! docs/exceptions.md is tested: every YAML block parses, each
//! GpuPolicyException in it reads without error and names policies the
//! shipped set has, and its PolicyTest passes against the shipped policies.
use crate::common;

use common::yaml_documents;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::cli::test::{run_tests, TestArgs};
use serde_json::Value;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

#[test]
fn every_yaml_example_of_the_exceptions_page_holds() {
    let page = std::fs::read_to_string(root().join("docs/exceptions.md")).unwrap();
    let documents = yaml_documents(&page);
    let loaded = bundle::load(&PolicySource::Dir(root().join("policies"))).unwrap();
    let policies = &loaded.bundle.policies;

    let exceptions: Vec<&Value> = documents
        .iter()
        .filter(|d| kind(d) == "GpuPolicyException")
        .collect();
    assert!(exceptions.len() >= 3, "{} examples", exceptions.len());
    for doc in &exceptions {
        let exception = policies
            .read_exception(doc)
            .unwrap_or_else(|e| panic!("{doc}: {e:?}"));
        for policy in &exception.policies {
            assert!(
                policies.has_policy(policy),
                "{}: no policy {policy}",
                exception.id()
            );
        }
    }

    let tests: Vec<&Value> = documents
        .iter()
        .filter(|d| kind(d) == "PolicyTest")
        .collect();
    assert_eq!(tests.len(), 1);
    // Its exceptions read too.
    for doc in tests[0]["spec"]["exceptions"].as_array().unwrap() {
        policies.read_exception(doc).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("exceptions-test.yaml"),
        serde_yaml::to_string(tests[0]).unwrap(),
    )
    .unwrap();
    let summary = run_tests(&TestArgs {
        dir: tmp.path().to_path_buf(),
        policies: Some(root().join("policies")),
        catalog: None,
        verbose: true,
        authz: None,
    })
    .unwrap();
    assert_eq!(
        (summary.passed, summary.failed),
        (3, 0),
        "{}",
        summary.report
    );

    // Every other example is a Kubernetes object.
    for doc in documents
        .iter()
        .filter(|d| !["GpuPolicyException", "PolicyTest"].contains(&kind(d)))
    {
        assert!(
            doc["apiVersion"].is_string() && doc["metadata"]["name"].is_string(),
            "{doc}"
        );
    }
}
