//! A public ValidatingAdmissionPolicy library run unchanged: three policies
//! of kubescape's cel-admission-library (Apache-2.0; see
//! tests/fixtures/kubescape/README.md), with the library's own binding (a
//! `paramRef`), params and test cases, through the code `gpu-admission
//! evaluate -f OBJECT --policies DIR` runs. Each case gives the library's
//! expected outcome: `fail` is denied by that policy, once, and `pass` is
//! allowed. As the library's own runner does, each case is run with its
//! control's policy alone.
use gpu_admission::cli::evaluate::{self, EvaluateArgs, Format, OperationArg};
use gpu_admission::cli::policy_args::PolicyArgs;
use serde::Deserialize;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubescape")
}

#[derive(Deserialize)]
struct Case {
    control: String,
    policy: String,
    name: String,
    object: String,
    expected: String,
}

#[test]
fn the_library_cases_get_the_library_outcomes() {
    let cases: Vec<Case> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("cases.json")).unwrap())
            .unwrap();
    assert_eq!(cases.len(), 21);
    let mut wrong = Vec::new();
    for case in &cases {
        let args = EvaluateArgs {
            file: fixtures().join("objects").join(&case.object),
            policies: PolicyArgs {
                policies: Some(fixtures().join("policies").join(&case.control)),
                catalog: None,
            },
            namespace: None,
            namespace_labels: None,
            operation: OperationArg::Create,
            old_filename: None,
            user: "kubernetes-admin".to_string(),
            groups: vec!["system:masters".to_string()],
            output: Format::Json,
            fail_on_deny: false,
            authz: None,
        };
        let results = evaluate::evaluate(&args).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(results.len(), 1, "{}", case.name);
        let result = &results[0];
        let ok = match case.expected.as_str() {
            "pass" => result.allowed && result.denials.is_empty(),
            "fail" => {
                // Denied by the policy, once (not also through the
                // template of a kind the policy matches itself), and by a
                // violation, not an evaluation error.
                !result.allowed
                    && result.denials.len() == 1
                    && result.denials[0].starts_with(&format!("{}: ", case.policy))
                    && !result.denials[0].contains("policy error")
            }
            other => panic!("{}: unknown expectation {other}", case.name),
        };
        if !ok {
            wrong.push(format!(
                "{} ({}): expected {}, got {:?}",
                case.name, case.object, case.expected, result.denials
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
