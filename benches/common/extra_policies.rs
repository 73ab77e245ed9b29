//! Generated policies of one variable and two simple validations each,
//! with their bindings: what the benches add to the shipped set to measure
//! what one more policy costs.
#![allow(dead_code)]

/// What the extra policies match.
#[derive(Clone, Copy)]
pub enum Target {
    Pods,
    Deployments,
}

/// `n` policies, each with a variable and two validations, and their
/// bindings.
pub fn extra_policies(n: usize, target: Target) -> String {
    let (group, resource, containers) = match target {
        Target::Pods => ("", "pods", "object.spec.containers"),
        Target::Deployments => (
            "apps",
            "deployments",
            "object.spec.template.spec.containers",
        ),
    };
    let mut yaml = String::new();
    for i in 0..n {
        yaml.push_str(&format!(
            r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: extra-{i}}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [{group:?}], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: [{resource:?}]}}
  variables:
  - name: c
    expression: {containers:?}
  validations:
  - expression: "variables.c.all(c, has(c.name))"
  - expression: "object.metadata.name.size() < 254"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: extra-{i}}}
spec: {{policyName: extra-{i}, validationActions: [Deny]}}
"#
        ));
    }
    yaml
}
