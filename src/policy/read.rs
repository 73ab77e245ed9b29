//! Reading a set of documents as kube-apiserver would take them: the
//! Validating and MutatingAdmissionPolicies ([`super::documents`] reads
//! each), their bindings matched to their policies, and the params
//! objects some policy's `paramKind` names. What kube-apiserver ignores is
//! kept as a notice; what it refuses is an error with file and position.
use super::documents;
use super::load::{Document, LoadError, LoadErrors, LoadNotice, NoticeLevel, Source};
use super::model::{Binding, Param, Policy};
use super::schemas::Schemas;
use super::{API_VERSIONS, MUTATING_API_VERSIONS, POD_TEMPLATES_ANNOTATION};
use crate::cel::{self, Env};
use crate::exceptions::{self, Exception};
use crate::k8s::json::Pointer as _;
use crate::k8s::template_sources::{self, TemplateSource};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The policies, bindings and params of a set of documents.
pub(super) struct Loaded {
    pub(super) policies: Vec<Policy>,
    /// Bindings with the index of their policy, in file order.
    pub(super) bindings: Vec<(Binding, usize)>,
    pub(super) mutating: Vec<Policy>,
    /// Mutating bindings in the order they run: by policy name, each
    /// policy's bindings in file order.
    pub(super) mutating_bindings: Vec<(Binding, usize)>,
    pub(super) params: Vec<Param>,
    /// What loading ignored, as kube-apiserver does.
    pub(super) notices: Vec<LoadNotice>,
    /// One note per policy run on controllers' pod templates.
    pub(super) template_notes: Vec<LoadNotice>,
    /// The workload kinds of the `PodTemplateSource` documents.
    pub(super) template_sources: Vec<TemplateSource>,
    /// The `GpuPolicyException` documents.
    pub(super) exceptions: Vec<Arc<Exception>>,
}

/// Reads `docs`: every error of every document, or what they hold.
pub(super) fn read(env: &Env, docs: &[Document]) -> Result<Loaded, LoadErrors> {
    let mut errors = Vec::new();
    let mut notices = Vec::new();
    let schemas = Schemas::new(env, docs);
    let mut validating = Family::read(Family::VALIDATING, env, docs, &schemas, &mut errors);
    let mut mutating = Family::read(Family::MUTATING, env, docs, &schemas, &mut errors);
    notices.append(&mut validating.key_notices);
    notices.append(&mut mutating.key_notices);
    let param_kinds: BTreeSet<(String, String)> = (validating.policies.iter())
        .chain(&mutating.policies)
        .filter_map(|p| p.param_kind.clone())
        .collect();
    let mut bindings = Vec::new();
    let mut mutating_bindings = Vec::new();
    let (mut binding_names, mut mutating_names) = (BTreeSet::new(), BTreeSet::new());
    let mut params = Vec::new();
    let mut template_sources: Vec<TemplateSource> = Vec::new();
    let mut exceptions = Vec::new();
    for doc in docs {
        let (api, kind) = doc.type_meta();
        // The engine's own kinds, each of one apiVersion.
        let own = [
            (template_sources::KIND, template_sources::API_VERSION),
            (exceptions::KIND, exceptions::API_VERSION),
        ];
        if let Some((_, own_api)) = own.iter().find(|(k, a)| *k == kind && *a != api) {
            errors.push(LoadError::unknown_api_version(doc, &[own_api]));
            continue;
        }
        if kind == template_sources::KIND {
            read_template_source(doc, &mut template_sources, &mut errors);
            continue;
        }
        if kind == exceptions::KIND {
            read_exception(env, doc, &mut exceptions, &mut errors);
            continue;
        }
        let mut handled = false;
        for (family, out, names) in [
            (&validating, &mut bindings, &mut binding_names),
            (&mutating, &mut mutating_bindings, &mut mutating_names),
        ] {
            if family.owns(doc) {
                handled = true;
                if let Some(bound) = family.bind(doc, names, &mut errors, &mut notices) {
                    out.push(bound);
                }
            }
        }
        if handled {
            continue;
        }
        if param_kinds.contains(&(api.to_string(), kind.to_string())) {
            if let Some(meta) = documents::read_params(doc, &mut errors) {
                params.push(Param {
                    api_version: api.to_string(),
                    kind: kind.to_string(),
                    name: meta.name,
                    namespace: meta.namespace,
                    labels: meta.labels,
                    // Converted to the interpreter's form here, once:
                    // each evaluation then binds it in O(1).
                    value: {
                        let value = cel::json_to_value(&doc.value);
                        value.clone().preconverted().unwrap_or(value)
                    },
                });
            }
            continue;
        }
        // A policy or binding under an apiVersion the engine does not
        // read (a typo of the group, a version not served) would
        // otherwise be skipped, silently switching it off.
        if let Some(accepted) = Family::api_versions_of(kind) {
            errors.push(LoadError::unknown_api_version(doc, accepted));
            continue;
        }
        // Read by `Schemas::new` for the types of its kinds.
        if (api, kind) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition") {
            continue;
        }
        // A Deployment kept next to its policy: not the engine's, skipped.
        notices.push(LoadNotice {
                level: NoticeLevel::Warning,
                at: LoadError::at(
                    &doc.source,
                    "",
                    format!(
                        "skipped: kind {:?} (apiVersion {:?}) is not a ValidatingAdmissionPolicy, a MutatingAdmissionPolicy, one of their bindings, a PodTemplateSource, a GpuPolicyException, or a params kind named by a policy's paramKind",
                        kind, api
                    ),
                ),
            });
    }
    if !errors.is_empty() {
        let typing = notices
            .into_iter()
            .filter(|n| n.level == NoticeLevel::Typing);
        return Err(LoadErrors(errors, typing.collect()));
    }
    // Mutating policies run in the order of their names (each binding
    // of one policy in file order), each seeing the previous result.
    let mutating = mutating.policies;
    mutating_bindings.sort_by(|(_, a), (_, b)| mutating[*a].name.cmp(&mutating[*b].name));
    Ok(Loaded {
        policies: validating.policies,
        bindings,
        mutating,
        mutating_bindings,
        params,
        notices,
        template_notes: validating.template_notes,
        template_sources,
        exceptions,
    })
}

/// Reads a `GpuPolicyException` document into `out`: an error at each
/// field at fault (with the position inside its expression), and at a
/// name another document of the same namespace already has.
fn read_exception(
    env: &Env,
    doc: &Document,
    out: &mut Vec<Arc<Exception>>,
    errors: &mut Vec<LoadError>,
) {
    match exceptions::read_here(&doc.value, env) {
        Ok(exception) => {
            if out
                .iter()
                .any(|e| e.namespace == exception.namespace && e.name == exception.name)
            {
                errors.push(LoadError::at(
                    &doc.source,
                    "metadata.name",
                    format!("GpuPolicyException {} is defined twice", exception.id()),
                ));
            } else {
                out.push(Arc::new(exception));
            }
        }
        Err(found) => errors.extend(found.into_iter().map(|e| LoadError {
            line: e.line,
            column: e.column,
            ..LoadError::at(&doc.source, e.field, e.message)
        })),
    }
}

/// Reads a `PodTemplateSource` document into `out`: an error at each
/// field at fault, and at a kind another document already names.
fn read_template_source(
    doc: &Document,
    out: &mut Vec<TemplateSource>,
    errors: &mut Vec<LoadError>,
) {
    match template_sources::read(&doc.value) {
        Ok(sources) => {
            for (i, source) in sources.into_iter().enumerate() {
                let named = out
                    .iter()
                    .find(|s| s.group == source.group && s.kind == source.kind);
                if let Some(first) = named {
                    errors.push(LoadError::at(
                        &doc.source,
                        format!("spec.kinds[{i}].kind"),
                        format!(
                            "{}/{} is already named by PodTemplateSource {}",
                            source.group, source.kind, first.document
                        ),
                    ));
                } else {
                    out.push(source);
                }
            }
        }
        Err(field_errors) => errors.extend(
            field_errors
                .into_iter()
                .map(|e| LoadError::at(&doc.source, e.field, e.message)),
        ),
    }
}

/// Validating or mutating policies and their bindings: read the same way,
/// with their own kinds.
struct Family<'d> {
    kinds: &'static FamilyKinds,
    policies: Vec<Policy>,
    /// Names of every policy document, including those with errors, so
    /// that their bindings are not reported again.
    declared: BTreeSet<&'d str>,
    /// One note per policy also run on controllers' pod templates (only
    /// validating policies are).
    template_notes: Vec<LoadNotice>,
    /// What `lint` says of audit annotation keys (one returned under
    /// another key than `<policy>.<key>`, two policies that return the
    /// same) and of the expressions' types ([`Schemas::check`]).
    key_notices: Vec<LoadNotice>,
}

struct FamilyKinds {
    api_versions: &'static [&'static str],
    policy: &'static str,
    binding: &'static str,
    read_policy: documents::ReadPolicy,
    read_binding: fn(&Document, &mut Vec<LoadError>) -> Option<Binding>,
    /// Whether a binding without `paramRef` of a policy with `paramKind`
    /// is evaluated with null params (Kubernetes' documented mutating
    /// example does this) instead of being an error.
    params_optional: bool,
    /// Whether its policies are also run on controllers' pod templates.
    judges_templates: bool,
}

impl<'d> Family<'d> {
    const VALIDATING: &'static FamilyKinds = &FamilyKinds {
        api_versions: API_VERSIONS,
        policy: "ValidatingAdmissionPolicy",
        binding: "ValidatingAdmissionPolicyBinding",
        read_policy: documents::read_policy,
        read_binding: documents::read_binding,
        params_optional: false,
        judges_templates: true,
    };
    const MUTATING: &'static FamilyKinds = &FamilyKinds {
        api_versions: MUTATING_API_VERSIONS,
        policy: "MutatingAdmissionPolicy",
        binding: "MutatingAdmissionPolicyBinding",
        read_policy: documents::read_mutating_policy,
        read_binding: documents::read_mutating_binding,
        params_optional: true,
        judges_templates: false,
    };

    /// The apiVersions of `kind` when it is a policy or binding kind of a
    /// family.
    fn api_versions_of(kind: &str) -> Option<&'static [&'static str]> {
        [Family::VALIDATING, Family::MUTATING]
            .into_iter()
            .find(|k| kind == k.policy || kind == k.binding)
            .map(|k| k.api_versions)
    }

    /// Reads the family's policy documents; names must be unique.
    fn read(
        kinds: &'static FamilyKinds,
        env: &Env,
        docs: &'d [Document],
        schemas: &Schemas,
        errors: &mut Vec<LoadError>,
    ) -> Family<'d> {
        let is_policy = |d: &Document| {
            let (api, kind) = d.type_meta();
            kinds.api_versions.contains(&api) && kind == kinds.policy
        };
        let declared = docs
            .iter()
            .filter(|d| is_policy(d))
            .filter_map(|d| d.value.at("/metadata/name").and_then(|n| n.as_str()))
            .collect();
        let mut policies: Vec<Policy> = Vec::new();
        let mut template_notes = Vec::new();
        let mut notes_on_keys = Vec::new();
        let mut returned_keys = BTreeMap::new();
        let mut sources: BTreeMap<String, &Source> = BTreeMap::new();
        for doc in docs.iter().filter(|d| is_policy(d)) {
            let Some((p, written)) = (kinds.read_policy)(env, doc, errors) else {
                continue;
            };
            notes_on_keys.extend(key_notices(&p, doc, &mut returned_keys));
            notes_on_keys.extend(schemas.check(&p, &written, &doc.source));
            if kinds.judges_templates && p.judges_pod_templates() {
                template_notes.push(pod_template_notice(&p, doc));
            }
            if let Some(first) = sources.insert(p.name.to_string(), &doc.source) {
                errors.push(LoadError::at(
                    &doc.source,
                    "metadata.name",
                    format!(
                        "policy {} is already defined in {} document {}",
                        p.name,
                        first.file.display(),
                        first.document
                    ),
                ));
                continue;
            }
            policies.push(p);
        }
        Family {
            kinds,
            policies,
            declared,
            template_notes,
            key_notices: notes_on_keys,
        }
    }

    /// Whether `doc` is one of the family's policies or bindings.
    fn owns(&self, doc: &Document) -> bool {
        let (api, kind) = doc.type_meta();
        self.kinds.api_versions.contains(&api)
            && (kind == self.kinds.policy || kind == self.kinds.binding)
    }

    /// Reads a binding document and finds its policy, as kube-apiserver
    /// does: a binding of a missing policy does nothing (a warning), a
    /// `paramRef` for a policy without `paramKind` is ignored (a note).
    /// `None` for policy documents, read already.
    fn bind(
        &self,
        doc: &Document,
        names: &mut BTreeSet<String>,
        errors: &mut Vec<LoadError>,
        notices: &mut Vec<LoadNotice>,
    ) -> Option<(Binding, usize)> {
        if doc.type_meta().1 != self.kinds.binding {
            return None;
        }
        let mut notice = |level, field: &str, message: String| {
            notices.push(LoadNotice {
                level,
                at: LoadError::at(&doc.source, field, message),
            })
        };
        let mut b = (self.kinds.read_binding)(doc, errors)?;
        if !names.insert(b.name.clone()) {
            errors.push(LoadError::at(
                &doc.source,
                "metadata.name",
                format!("binding {} is defined twice", b.name),
            ));
            return None;
        }
        let Some(i) = self.policies.iter().position(|p| *p.name == *b.policy_name) else {
            if !self.declared.contains(b.policy_name.as_str()) {
                notice(
                    NoticeLevel::Warning,
                    "spec.policyName",
                    format!(
                        "no {} named {}: binding {} is ignored",
                        self.kinds.policy, b.policy_name, b.name
                    ),
                );
            }
            return None;
        };
        let policy = &self.policies[i];
        match (&policy.param_kind, &b.param_ref) {
            (Some(_), None) if self.kinds.params_optional => notice(
                NoticeLevel::Note,
                "spec.paramRef",
                format!(
                    "absent: policy {} has a paramKind, so it is evaluated with params null",
                    policy.name
                ),
            ),
            (Some(_), None) => {
                errors.push(LoadError::at(
                    &doc.source,
                    "spec.paramRef",
                    format!("required: policy {} has a paramKind", policy.name),
                ));
                return None;
            }
            // Kubernetes: "If the policy does not specify a ParamKind then
            // this field is ignored, and the rules are evaluated without a
            // param."
            (None, Some(_)) => {
                tracing::debug!(
                    binding = %b.name,
                    "paramRef ignored: policy {} has no paramKind",
                    policy.name
                );
                notice(
                    NoticeLevel::Note,
                    "spec.paramRef",
                    format!(
                        "ignored: policy {} has no paramKind, so it is evaluated without params",
                        policy.name
                    ),
                );
                b.param_ref = None;
            }
            _ => {}
        }
        Some((b, i))
    }
}

/// The note `lint` prints for a policy run on controllers' pod templates:
/// which controller kinds, and how to turn it off.
fn pod_template_notice(policy: &Policy, doc: &Document) -> LoadNotice {
    let kinds: Vec<&str> = crate::k8s::workloads::TEMPLATE_KINDS
        .iter()
        .filter(|k| k.makes_pods)
        .filter(|k| {
            let resource = format!("{}s", k.kind.to_ascii_lowercase());
            !k.groups
                .iter()
                .any(|g| policy.match_constraints.names_resource(g, &resource))
        })
        .map(|k| k.kind)
        .collect();
    let message = if kinds.is_empty() {
        format!(
            "policy {} matches Pod CREATE and names every controller kind itself, so it is run on no pod template",
            policy.name
        )
    } else {
        format!(
            "policy {} matches Pod CREATE, so it is also run on the pod templates of {} (annotation {}: \"false\" turns that off)",
            policy.name,
            kinds.join(", "),
            POD_TEMPLATES_ANNOTATION
        )
    };
    LoadNotice {
        level: NoticeLevel::Note,
        at: LoadError::at(&doc.source, "spec.matchConstraints", message),
    }
}

/// Notes for the audit annotations of `policy` not returned as
/// `<policy>.<key>`, and a warning for each returned under a key another
/// policy's annotation already has (`returned`: by whom, so far).
fn key_notices(
    policy: &Policy,
    doc: &Document,
    returned: &mut BTreeMap<String, (String, String)>,
) -> Vec<LoadNotice> {
    let mut notices = Vec::new();
    for (i, a) in policy.audit_annotations.iter().enumerate() {
        let field = format!("spec.auditAnnotations[{i}].key");
        let mut notice = |level, message| {
            notices.push(LoadNotice {
                level,
                at: LoadError::at(&doc.source, &field, message),
            })
        };
        let joined = format!("{}.{}", policy.name, a.key);
        if a.returned_key != joined {
            notice(
                NoticeLevel::Note,
                format!(
                    "returned as {} ({joined} is not a name of at most 63 characters)",
                    a.returned_key
                ),
            );
        }
        let owner = (policy.name.to_string(), a.key.clone());
        match returned.get(&a.returned_key) {
            Some((other, key)) if *other != owner.0 => notice(
                NoticeLevel::Warning,
                format!(
                    "returned as {}, like key {key} of policy {other}: on a request both policies match, one value replaces the other",
                    a.returned_key
                ),
            ),
            Some(_) => {}
            None => {
                returned.insert(a.returned_key.clone(), owner);
            }
        }
    }
    notices
}
