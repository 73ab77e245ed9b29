//! Type checking a policy's expressions against the schemas of what they
//! read, as kube-apiserver does when the policy is created
//! (`status.typeChecking`): `object` and `oldObject` as each kind the
//! policy matches, `params` as its paramKind, `namespaceObject`,
//! `request`, the host variables, and `variables` as their expressions.
//!
//! The built-in kinds' schemas are `schemas.json`, generated from the
//! OpenAPI schemas k8s-openapi carries (`tests/schemas.rs`); a CRD's come
//! from its `openAPIV3Schema` when the policy folder holds the
//! CustomResourceDefinition. A kind with no known schema is `dyn`, as
//! kube-apiserver treats unknown types. What is found is a notice
//! ([`NoticeLevel::Typing`]) only when every kind the policy matches
//! gives it: a policy may guard a field of one kind by the kind.
use super::documents::Written;
use super::load::{Document, LoadError, LoadNotice, NoticeLevel, Source};
use super::matching::MatchResources;
use super::model::Policy;
use crate::cel::schema::{Finding, Schema, Types};
use crate::cel::Env;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// `schemas.json`: each built-in kind as `[apiVersion, kind, resource,
/// type]`, and the types by name, each read when first needed.
#[derive(Default, serde::Deserialize)]
struct Builtin {
    #[serde(borrow)]
    resources: Vec<[&'static str; 4]>,
    #[serde(borrow)]
    types: HashMap<&'static str, &'static RawValue>,
}

/// The built-in kinds and the CRDs of a folder, with their schemas.
pub(super) struct Schemas {
    types: Types,
    /// `(apiVersion, kind, resource, schema)`.
    kinds: Vec<(String, String, String, Schema)>,
    /// The roots every policy of the load sees alike: the host's variables
    /// and functions, and `request`.
    roots: BTreeMap<&'static str, Schema>,
}

impl Schemas {
    pub(super) fn new(env: &Env, docs: &[Document]) -> Schemas {
        let builtin: Builtin =
            serde_json::from_str(include_str!("schemas.json")).unwrap_or_default();
        let mut kinds: Vec<_> = (builtin.resources.iter())
            .map(|[api, kind, resource, ty]| {
                let schema = Schema::Named((*ty).into());
                (
                    api.to_string(),
                    kind.to_string(),
                    resource.to_string(),
                    schema,
                )
            })
            .collect();
        let crds = docs
            .iter()
            .filter(|d| d.type_meta() == ("apiextensions.k8s.io/v1", "CustomResourceDefinition"));
        for crd in crds {
            let spec = &crd.value["spec"];
            let (group, names) = (spec["group"].as_str().unwrap_or_default(), &spec["names"]);
            for version in spec["versions"].as_array().into_iter().flatten() {
                let mut schema = Schema::openapi(&version["schema"]["openAPIV3Schema"]);
                // kube-apiserver gives every custom resource these.
                if let Schema::Object(fields, open) = schema {
                    let meta = json!({"apiVersion": "string", "kind": "string", "metadata": "meta.v1.ObjectMeta"});
                    let meta = meta.as_object().into_iter().flatten();
                    let meta = meta.map(|(k, v)| (k.clone(), Schema::compact(v)));
                    schema = Schema::object(fields.as_ref().clone().into_iter().chain(meta), open);
                }
                let api = format!("{group}/{}", version["name"].as_str().unwrap_or_default());
                let [kind, plural] =
                    ["kind", "plural"].map(|k| names[k].as_str().unwrap_or_default().to_string());
                kinds.push((api, kind, plural, schema));
            }
        }
        let request: Value = serde_json::from_str(REQUEST).unwrap_or_default();
        let mut roots: BTreeMap<&str, Schema> = (env.variable_types().into_iter())
            .chain(env.function_types())
            .collect();
        roots.extend([
            ("namespaceObject", Schema::Named("core.v1.Namespace".into())),
            ("request", Schema::compact(&request)),
        ]);
        Schemas {
            types: Types::new(builtin.types),
            kinds,
            roots,
        }
    }

    /// `"<apiVersion>, Kind=<kind>"` and the schema of each kind the rules
    /// match; `dyn` for one not known (every kind of a wildcard).
    fn matched(&self, m: &MatchResources) -> Vec<(String, Schema)> {
        let mut out = Vec::new();
        let any = |list: &[String], x: &str| list.iter().any(|i| i == "*" || i == x);
        for rule in &m.resource_rules {
            for resource in &rule.resources {
                let found: Vec<_> = (self.kinds.iter())
                    .filter(|(api, _, r, _)| {
                        let (group, version) = api.rsplit_once('/').unwrap_or(("", api));
                        r == resource
                            && any(&rule.api_groups, group)
                            && any(&rule.api_versions, version)
                    })
                    .collect();
                let known =
                    !resource.contains(['*', '/']) && !rule.api_groups.iter().any(|g| g == "*");
                if found.is_empty() || !known {
                    out.push((String::new(), Schema::Dyn));
                }
                if known {
                    out.extend(
                        found
                            .into_iter()
                            .map(|(api, kind, _, s)| (format!("{api}, Kind={kind}"), s.clone())),
                    );
                }
            }
        }
        out.dedup();
        out
    }

    /// The schema of `kind` of `api_version`, `dyn` when not known.
    fn kind(&self, api_version: &str, kind: &str) -> Schema {
        let found = self
            .kinds
            .iter()
            .find(|(a, k, _, _)| a == api_version && k == kind);
        found.map_or(Schema::Dyn, |(_, _, _, s)| s.clone())
    }

    /// What type checking finds in `policy`'s expressions (read from the
    /// document at `source`), in `env`.
    pub(super) fn check(
        &self,
        policy: &Policy,
        written: &Written,
        source: &Source,
    ) -> Vec<LoadNotice> {
        let parsed: Vec<_> = policy
            .expressions()
            .filter_map(|e| Some((e, written.get(e.id)?)))
            .collect();
        let kinds = self.matched(&policy.match_constraints);
        let params = policy
            .param_kind
            .as_ref()
            .map_or(Schema::Dyn, |(a, k)| self.kind(a, k));
        let mut common: Option<BTreeSet<(&str, Finding)>> = None;
        for (_, object) in &kinds {
            let mut roots = self.roots.clone();
            roots.extend([
                ("object", object.clone()),
                ("oldObject", object.clone()),
                ("params", params.clone()),
            ]);
            let mut found = BTreeSet::new();
            // Each variable is typed by its expression, for those after it.
            let mut variables = BTreeMap::new();
            for named in &policy.variables {
                roots.insert("variables", Schema::object(variables.clone(), true));
                if let Some((_, p)) = parsed.iter().find(|(e, _)| e.id == named.expr.id) {
                    let (ty, findings) = p.check(&self.types, &roots);
                    variables.insert(named.name.clone(), ty);
                    found.extend(findings.into_iter().map(|f| (&*named.expr.field, f)));
                }
            }
            roots.insert("variables", Schema::object(variables, true));
            for (expr, p) in parsed
                .iter()
                .filter(|(e, _)| !policy.variables.iter().any(|v| v.expr.id == e.id))
            {
                found.extend(
                    p.check(&self.types, &roots)
                        .1
                        .into_iter()
                        .map(|f| (&*expr.field, f)),
                );
            }
            common = Some(match common {
                None => found,
                Some(before) => before.intersection(&found).cloned().collect(),
            });
        }
        let named: Vec<&str> = kinds
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !k.is_empty())
            .collect();
        let named = if named.is_empty() {
            String::new()
        } else {
            format!("{}: ", named.join("; "))
        };
        (common.into_iter().flatten())
            .map(|(field, f)| LoadNotice {
                level: NoticeLevel::Typing,
                at: LoadError {
                    line: Some(f.line).filter(|l| *l > 0),
                    column: Some(f.column).filter(|c| *c > 0),
                    ..LoadError::at(
                        source,
                        field,
                        match &f.field {
                            Some(at) => format!("{named}{} ({at})", f.message),
                            None => format!("{named}{}", f.message),
                        },
                    )
                },
            })
            .collect()
    }
}

/// The type kube-apiserver gives `request` (an `AdmissionRequest` as
/// admission policies see it).
const REQUEST: &str = r#"{
  "kind": {"group": "string", "version": "string", "kind": "string"},
  "resource": {"group": "string", "version": "string", "resource": "string"},
  "subResource": "string",
  "requestKind": {"group": "string", "version": "string", "kind": "string"},
  "requestResource": {"group": "string", "version": "string", "resource": "string"},
  "requestSubResource": "string",
  "name": "string",
  "namespace": "string",
  "operation": "string",
  "userInfo": {"username": "string", "uid": "string", "groups": ["string"], "extra": {"*": ["string"]}},
  "dryRun": "bool",
  "options": "dyn"
}"#;

#[cfg(test)]
mod tests {
    use super::super::{parse_documents, PolicySet};

    /// What type checking finds in a policy matching `rules` (flow YAML)
    /// with `spec` (more of its spec), as `field line:column message`.
    fn found(rules: &str, spec: &str) -> Vec<String> {
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {{name: p}}\nspec:\n  matchConstraints:\n    resourceRules: {rules}\n{spec}"
        );
        let docs = parse_documents("p.yaml".as_ref(), &yaml).unwrap();
        let set = PolicySet::compile(&docs).unwrap();
        (set.notices().iter())
            .filter(|n| n.level == super::NoticeLevel::Typing)
            .map(|n| {
                let at = &n.at;
                let (field, line, column) = (at.field.clone(), at.line, at.column);
                format!(
                    "{} {}:{} {}",
                    field.unwrap_or_default(),
                    line.unwrap_or(0),
                    column.unwrap_or(0),
                    at.message
                )
            })
            .collect()
    }

    const PODS: &str =
        r#"[{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]"#;
    const WORKLOADS: &str = r#"[{apiGroups: ["", "apps"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods", "deployments"]}]"#;

    #[test]
    fn a_finding_is_one_every_matched_kind_gives() {
        let spec = "  validations:\n    - expression: \"object.kind != 'Pod' ? object.spec.template.spec.hostNetwork : object.spec.hostNetwrk\"\n";
        assert_eq!(
            found(WORKLOADS, spec),
            ["spec.validations[0].expression 1:75 v1, Kind=Pod; apps/v1, Kind=Deployment: undefined field 'hostNetwrk' (object.spec.hostNetwrk)"]
        );
        // A kind with no schema (a wildcard, a CRD not in the folder)
        // types `object` as dyn.
        let any =
            r#"[{apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*"]}]"#;
        assert!(found(any, spec).is_empty());
        let custom = r#"[{apiGroups: ["ray.io"], apiVersions: ["v1"], operations: ["*"], resources: ["rayclusters"]}]"#;
        assert!(found(custom, spec).is_empty());
    }

    #[test]
    fn variables_params_and_request_are_typed_too() {
        let spec = r#"  paramKind: {apiVersion: v1, kind: ConfigMap}
  variables:
    - name: containers
      expression: object.spec.containers
  validations:
    - expression: "variables.containers.all(c, c.imagee != '')"
    - expression: "params.data.maxGpus == 1 || has(params.dat)"
    - expression: "request.userInfo.usernam == 'admin' || request.dryRun"
"#;
        assert_eq!(
            found(PODS, spec),
            [
                "spec.validations[0].expression 1:30 v1, Kind=Pod: undefined field 'imagee' (variables.containers[*].imagee)",
                "spec.validations[1].expression 1:21 v1, Kind=Pod: found no matching overload for '_==_' applied to '(string, int)' (params.data.maxGpus)",
                "spec.validations[1].expression 1:32 v1, Kind=Pod: undefined field 'dat' (params.dat)",
                "spec.validations[2].expression 1:17 v1, Kind=Pod: undefined field 'usernam' (request.userInfo.usernam)",
            ]
        );
    }
}
