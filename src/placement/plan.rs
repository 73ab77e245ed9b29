//! The patch one profile makes to one pod.
use super::Profile;
use crate::k8s::json::Pointer as _;
use crate::k8s::nodes::contradiction;
use crate::k8s::patch::{array_field, object_field};
use crate::k8s::{
    NodeSelectorOperator as Operator, NodeSelectorRequirement as Requirement,
    NodeSelectorTerm as Term, Patch, ShapeError, Toleration,
};
use json_patch::PatchOperation;
use serde_json::{Map, Value};

const AFFINITY: &str = "affinity";
const NODE_AFFINITY: &str = "nodeAffinity";
const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";
const TERMS: &str = "nodeSelectorTerms";
const EXPRESSIONS: &str = "matchExpressions";

/// Records on a patched pod which profile placed it.
pub const PROFILE_ANNOTATION: &str = "gpu-admission.io/placement-profile";

pub(super) enum Placed {
    /// Operations to apply (empty: the pod already says everything).
    Patch(Vec<PatchOperation>),
    /// The pod's own node selection excludes every node the profile allows
    /// (the validating side says why: [`conflict_of`]).
    Conflict,
}

/// The patch that places `pod` by `profile`, with `required` as the node
/// requirements to add (the profile's own, or those narrowed to the
/// namespace's SKU tier). Conflicts are judged on the profile's own terms.
pub(super) fn plan_profile(
    profile: &Profile,
    required: &[Term],
    pod: &Value,
) -> Result<Placed, ShapeError> {
    let spec = object_field(pod.as_object(), "spec", "/spec")?.ok_or(ShapeError {
        path: "/spec".into(),
        expected: "an object",
    })?;
    let view = PodView::read(spec)?;
    if conflict(profile, &view).is_some() {
        return Ok(Placed::Conflict);
    }
    let mut patch = Patch::new(pod);
    add_tolerations(profile, spec, &mut patch)?;
    if let Some(change) = required_changes(required, &view) {
        emit_required(&mut patch, &view, change)?;
    }
    patch.append(
        &["spec", AFFINITY, NODE_AFFINITY, PREFERRED],
        preferred_changes(profile, &view),
    )?;
    if !patch.is_empty() {
        object_field(pod.as_object(), "metadata", "/metadata")?;
        patch.set(
            &["metadata", "annotations", PROFILE_ANNOTATION],
            Value::String(profile.name.clone()),
        )?;
    }
    Ok(Placed::Patch(patch.into_operations()))
}

/// Why `pod`'s own node selection excludes every node `profile` allows,
/// if it does: [`plan_profile`]'s conflict, without building the patch (a
/// pod of an unexpected shape has none, as it gets no patch).
pub(super) fn conflict_of(profile: &Profile, pod: &Value) -> Option<String> {
    let spec = object_field(pod.as_object(), "spec", "/spec").ok()??;
    let view = PodView::read(spec).ok()?;
    conflict(profile, &view)
}

/// What the pod says about node selection, read once.
struct PodView<'a> {
    /// Existing required terms (raw), absent or empty as `[]`.
    terms: Vec<&'a Value>,
    /// The parsed requirements of each term (unparseable ones left out).
    term_requirements: Vec<Vec<Requirement>>,
    /// Terms with neither expressions nor fields: Kubernetes matches no
    /// node with them, and adding requirements must not revive them.
    matches_nothing: Vec<bool>,
    preferred: Option<&'a Vec<Value>>,
    /// `spec.nodeSelector` as `key In [value]` requirements.
    node_selector: Vec<Requirement>,
}

impl<'a> PodView<'a> {
    fn read(spec: &'a Map<String, Value>) -> Result<PodView<'a>, ShapeError> {
        let affinity = object_field(Some(spec), AFFINITY, "/spec/affinity")?;
        let node_affinity = object_field(affinity, NODE_AFFINITY, "/spec/affinity/nodeAffinity")?;
        let required = object_field(
            node_affinity,
            REQUIRED,
            "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
        )?;
        let terms: Vec<&Value> = array_field(required, TERMS, "nodeSelectorTerms")?
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let mut term_requirements = Vec::new();
        let mut matches_nothing = Vec::new();
        for (i, term) in terms.iter().enumerate() {
            if !term.is_object() {
                return Err(ShapeError {
                    path: format!("nodeSelectorTerms[{i}]"),
                    expected: "an object",
                });
            }
            array_field(term.as_object(), EXPRESSIONS, "matchExpressions").map_err(|_| {
                ShapeError {
                    path: format!("nodeSelectorTerms[{i}].matchExpressions"),
                    expected: "a list",
                }
            })?;
            let mut parsed = Term::from_value(term);
            parsed.requirements.retain(Requirement::is_well_formed);
            term_requirements.push(parsed.requirements);
            matches_nothing.push(parsed.matches_nothing);
        }
        let preferred = array_field(
            node_affinity,
            PREFERRED,
            "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
        )?;
        let node_selector = object_field(Some(spec), "nodeSelector", "/spec/nodeSelector")?
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some(Requirement::equals(k, v.as_str()?)))
            .collect();
        Ok(PodView {
            terms,
            term_requirements,
            matches_nothing,
            preferred,
            node_selector,
        })
    }

    /// The pod's ORed alternatives: nodeSelector ANDed with each required
    /// term that can match a node, or the nodeSelector alone when there are
    /// no terms.
    fn alternatives(&self) -> Vec<Vec<(&Requirement, Origin)>> {
        let selector = self.node_selector.iter().map(|r| (r, Origin::NodeSelector));
        if self.terms.is_empty() {
            return vec![selector.collect()];
        }
        self.term_requirements
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.matches_nothing[*i])
            .map(|(i, reqs)| {
                selector
                    .clone()
                    .chain(reqs.iter().map(move |r| (r, Origin::Term(i))))
                    .collect()
            })
            .collect()
    }
}

#[derive(Clone, Copy)]
enum Origin {
    NodeSelector,
    Term(usize),
}

fn describe_pod_requirement(r: &Requirement, origin: Origin) -> String {
    match origin {
        Origin::NodeSelector => format!(
            "nodeSelector {}={}",
            r.key,
            r.values.first().map(String::as_str).unwrap_or_default()
        ),
        Origin::Term(i) => format!("required node affinity term {i} ({})", r.describe()),
    }
}

/// A message when every alternative the pod allows excludes every node the
/// profile requires.
fn conflict(profile: &Profile, view: &PodView) -> Option<String> {
    if let Some(never) = never_met(view) {
        return Some(never);
    }
    if profile.required.is_empty() {
        return None;
    }
    // Values the profile accepts for a key it selects with `In`: a pod
    // pinning such a key to other values selects non-GPU nodes (a node
    // labelled kubernetes.azure.com/accelerator=none is no NVIDIA node,
    // whichever alternative of the profile would have admitted it).
    let profile_reqs = || profile.required.iter().flat_map(|t| t.requirements.iter());
    let selects_in = || profile_reqs().filter(|r| r.operator == Operator::In);
    let accepted = |key: &str, value: &str| {
        selects_in().any(|r| r.key == key && r.values.iter().any(|v| v == value))
    };
    let profile_on = |key: &str| -> String {
        profile_reqs()
            .filter(|r| r.key == key)
            .map(Requirement::describe)
            .collect::<Vec<_>>()
            .join(" or ")
    };

    let mut reasons = Vec::new();
    for alt in view.alternatives() {
        let own: Vec<&Requirement> = alt.iter().map(|(r, _)| *r).collect();
        if contradiction(&own).is_some() {
            // Unsatisfiable on its own: not ours to judge.
            continue;
        }
        let pinned = alt.iter().find_map(|(r, origin)| {
            (r.operator == Operator::In
                && selects_in().any(|p| p.key == r.key)
                && r.values.iter().all(|v| !accepted(&r.key, v)))
            .then_some((r, *origin))
        });
        if let Some((r, origin)) = pinned {
            reasons.push(format!(
                "{} contradicts {}",
                describe_pod_requirement(r, origin),
                profile_on(&r.key)
            ));
            continue;
        }
        let mut per_term = Vec::new();
        for term in &profile.required {
            let mut all = own.clone();
            all.extend(term.requirements.iter());
            let Some(key) = contradiction(&all) else {
                break;
            };
            let pod_side = alt
                .iter()
                .filter(|(r, _)| r.key == key)
                .map(|(r, o)| describe_pod_requirement(r, *o))
                .collect::<Vec<_>>()
                .join(" and ");
            let profile_side = term
                .requirements
                .iter()
                .filter(|r| r.key == key)
                .map(Requirement::describe)
                .collect::<Vec<_>>()
                .join(" and ");
            per_term.push(format!("{pod_side} contradicts {profile_side}"));
        }
        if per_term.len() < profile.required.len() {
            return None;
        }
        reasons.push(per_term.join(" and "));
    }
    if reasons.is_empty() {
        return None;
    }
    Some(format!(
        "GPU pod selects nodes that placement profile {} does not allow: {}; \
         remove that selector or make it select GPU nodes",
        profile.name,
        reasons.join("; ")
    ))
}

/// Why no node can ever meet the pod's own selection, when none can: each
/// alternative (the nodeSelector ANDed with one required term; terms are
/// ORed) requires of one label what no value meets, as a merge of two
/// Kueue flavors does (the nodeSelector one size, the affinity another).
fn never_met(view: &PodView) -> Option<String> {
    let alternatives = view.alternatives();
    let mut reasons = Vec::new();
    for alt in &alternatives {
        let own: Vec<&Requirement> = alt.iter().map(|(r, _)| *r).collect();
        let key = contradiction(&own)?;
        let clash: Vec<String> = (alt.iter().filter(|(r, _)| r.key == key))
            .map(|(r, origin)| describe_pod_requirement(r, *origin))
            .collect();
        reasons.push(clash.join(" and "));
    }
    let several = alternatives.len() > 1;
    (!reasons.is_empty()).then(|| {
        format!(
            "GPU pod's own node selection contradicts itself: {}{}; no node can meet it, so it \
             would never schedule; keep one of them (a workload that merges node selections, such \
             as two Kueue flavors, must not name two sizes)",
            reasons.join("; "),
            if several {
                " (each of its ORed required terms)"
            } else {
                ""
            }
        )
    })
}

fn add_tolerations(
    profile: &Profile,
    spec: &Map<String, Value>,
    patch: &mut Patch,
) -> Result<(), ShapeError> {
    let existing = array_field(Some(spec), "tolerations", "/spec/tolerations")?;
    let mut have: Vec<Toleration> = existing
        .into_iter()
        .flatten()
        .map(Toleration::from_value)
        .collect();
    let mut new = Vec::new();
    for t in &profile.tolerations {
        if have.iter().any(|h| h.covers(t)) {
            continue;
        }
        have.push(t.clone());
        new.push(t.to_json());
    }
    patch.append(&["spec", "tolerations"], new)
}

/// How the required terms change.
enum RequiredChange {
    /// No terms yet: the profile's alternatives become the terms.
    Create(Vec<Value>),
    /// Requirements added to existing terms, and terms appended.
    Extend {
        in_place: Vec<(usize, Vec<Value>)>,
        appended: Vec<Value>,
    },
}

/// The combination keeps the meaning (existing terms) AND (profile terms):
/// an existing term that already implies one of the profile's alternatives
/// is left alone; any other term T becomes T AND P1 in place, and T AND P2,
/// ..., T AND Pn are appended, since (T1 or T2) and (P1 or P2) is
/// (T1 and P1) or (T1 and P2) or (T2 and P1) or (T2 and P2).
fn required_changes(required: &[Term], view: &PodView) -> Option<RequiredChange> {
    if required.is_empty() {
        return None;
    }
    if view.terms.is_empty() {
        if required.iter().any(|p| p.implied_by(&view.node_selector)) {
            return None;
        }
        return Some(RequiredChange::Create(
            required.iter().map(Term::to_json).collect(),
        ));
    }
    let mut in_place = Vec::new();
    let mut appended = Vec::new();
    for (i, term) in view.terms.iter().enumerate() {
        if view.matches_nothing[i] {
            continue;
        }
        let mut have = view.term_requirements[i].clone();
        have.extend(view.node_selector.iter().cloned());
        if required.iter().any(|p| p.implied_by(&have)) {
            continue;
        }
        for (j, p) in required.iter().enumerate() {
            let missing: Vec<Value> = p
                .missing_from(&have)
                .into_iter()
                .map(Requirement::to_json)
                .collect();
            if j == 0 {
                in_place.push((i, missing));
            } else {
                appended.push(with_expressions(term, missing));
            }
        }
    }
    if in_place.is_empty() && appended.is_empty() {
        return None;
    }
    Some(RequiredChange::Extend { in_place, appended })
}

/// A copy of `term` (unknown fields and all) with `extra` requirements added.
fn with_expressions(term: &Value, extra: Vec<Value>) -> Value {
    let mut out = term.as_object().cloned().unwrap_or_default();
    let mut exprs = out
        .get(EXPRESSIONS)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    exprs.extend(extra);
    out.insert(EXPRESSIONS.into(), Value::Array(exprs));
    Value::Object(out)
}

fn emit_required(
    patch: &mut Patch,
    view: &PodView,
    change: RequiredChange,
) -> Result<(), ShapeError> {
    let terms = ["spec", AFFINITY, NODE_AFFINITY, REQUIRED, TERMS];
    match change {
        RequiredChange::Create(new) => patch.set(&terms, Value::Array(new)),
        RequiredChange::Extend { in_place, appended } => {
            for (i, missing) in in_place {
                let index = i.to_string();
                let mut path = terms.to_vec();
                path.extend([index.as_str(), EXPRESSIONS]);
                if view.terms[i].get(EXPRESSIONS).is_some_and(Value::is_array) {
                    patch.append(&path, missing)?;
                } else {
                    patch.set(&path, Value::Array(missing))?;
                }
            }
            patch.append(&terms, appended)
        }
    }
}

/// Profile preferences the pod does not already state (whatever its weight).
fn preferred_changes(profile: &Profile, view: &PodView) -> Vec<Value> {
    let existing: Vec<Vec<Requirement>> = view
        .preferred
        .into_iter()
        .flatten()
        .map(|p| {
            p.at("/preference/matchExpressions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Requirement::well_formed)
                .collect()
        })
        .collect();
    profile
        .preferred
        .iter()
        .filter(|p| !existing.iter().any(|e| p.preference.same_as(e)))
        .map(|p| {
            let mut term = Map::new();
            term.insert("weight".into(), p.weight.into());
            term.insert("preference".into(), p.preference.to_json());
            Value::Object(term)
        })
        .collect()
}
