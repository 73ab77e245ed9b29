//! The plan's passes (`policy::plan`) only make evaluation cheaper: with
//! any one of them turned off, every PolicyTest of the shipped set passes
//! alike and every object of the public corpus gets the same answer. (The
//! kubescape library's cases are compared the same way in
//! tests/kubescape_library.rs.)
use crate::common::shared_data;

use gpu_admission::admission::{Admission, Bundle};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::namespaces::with_name_label;
use gpu_admission::k8s::StaticNamespaces;
use gpu_admission::offline;
use gpu_admission::policy::Passes;
use gpu_admission::review::Operation;
use gpu_admission::testing;
use std::sync::Arc;

/// The shipped bundle with only the passes `passes`.
fn replanned(loaded: &bundle::Loaded, passes: Passes) -> Bundle {
    Bundle {
        policies: loaded.bundle.policies.replanned(passes).unwrap(),
        ..loaded.bundle.clone()
    }
}

#[test]
fn the_policy_tests_pass_alike_with_each_pass_turned_off() {
    offline::with_evaluation_stack(|| {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        let tests = bundle::embedded_tests().unwrap();
        let outcome = |bundle: &Bundle| -> Vec<(String, Vec<String>)> {
            (testing::run(bundle, &tests).unwrap().into_iter())
                .map(|c| (c.name, c.failures))
                .collect()
        };
        let planned = outcome(&loaded.bundle);
        assert!(planned.len() > 300, "{} cases", planned.len());
        assert!(planned.iter().all(|(_, failures)| failures.is_empty()));
        for name in Passes::NAMES {
            let without = outcome(&replanned(&loaded, Passes::without(name).unwrap()));
            assert_eq!(without, planned, "without {name}");
        }
    })
    .unwrap();
}

#[test]
fn the_corpus_gets_the_same_answers_with_each_pass_turned_off() {
    let Some(corpus) = shared_data::shared_data("corpus") else {
        return;
    };
    offline::with_evaluation_stack(move || {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        let mut requests = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(&corpus)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "json"))
            .collect();
        files.sort();
        for file in &files {
            for object in offline::read_manifest(file).unwrap() {
                requests.push(offline::build_request(
                    object,
                    None,
                    Operation::Create,
                    None,
                ));
            }
        }
        assert!(requests.len() >= 27, "{} objects", requests.len());
        let answers = |bundle: Bundle| -> Vec<serde_json::Value> {
            let mut lookup = StaticNamespaces::new();
            for ns in requests.iter().filter_map(|r| r.namespace.as_deref()) {
                lookup.insert(ns, with_name_label(ns, Default::default()));
            }
            let admission = Admission::new(bundle, Arc::new(lookup));
            (requests.iter())
                .map(|req| {
                    let e = offline::evaluate(&admission, req.clone());
                    serde_json::json!({
                        "object": e.name,
                        "allowed": e.allowed,
                        "denials": e.denials,
                        "warnings": e.warnings,
                        "audit": e.audit_annotations,
                        "patch": e.patch,
                        "mutations": e.mutations,
                    })
                })
                .collect()
        };
        let planned = answers(loaded.bundle.clone());
        assert!(planned.iter().any(|a| a["allowed"] == false));
        for name in Passes::NAMES {
            let without = answers(replanned(&loaded, Passes::without(name).unwrap()));
            assert_eq!(without, planned, "without {name}");
        }
    })
    .unwrap();
}
