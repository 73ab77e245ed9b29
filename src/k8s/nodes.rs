//! Node selectors: requirements (every operator, Karpenter's `Gte`/`Lte`
//! included), terms, and a pod's selection (the nodeSelector ANDed with its
//! ORed required terms), with the reasoning placement and SKU questions
//! need: does a label value meet a requirement, does one requirement imply
//! another, can a set of requirements be met at all.
use super::json::{items, scalar_string, FieldError};
use crate::k8s::json::Pointer as _;
use serde::Deserialize;
use serde_json::Value;
use smallvec::SmallVec;
use std::collections::BTreeSet;
use std::fmt;

/// A node-selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    /// Karpenter: the value is at least the bound.
    Gte,
    /// Karpenter: the value is at most the bound.
    Lte,
}

/// One node-selector requirement (`key`, `operator`, `values`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

/// A node-selector term: requirements that must all hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSelectorTerm {
    pub requirements: Vec<Requirement>,
    /// A term with neither matchExpressions nor matchFields: Kubernetes
    /// matches no node with it.
    pub matches_nothing: bool,
}

type Operator = NodeSelectorOperator;
type Requirement = NodeSelectorRequirement;
type Term = NodeSelectorTerm;

impl NodeSelectorOperator {
    const NAMES: [(Operator, &'static str); 8] = [
        (Operator::In, "In"),
        (Operator::NotIn, "NotIn"),
        (Operator::Exists, "Exists"),
        (Operator::DoesNotExist, "DoesNotExist"),
        (Operator::Gt, "Gt"),
        (Operator::Lt, "Lt"),
        (Operator::Gte, "Gte"),
        (Operator::Lte, "Lte"),
    ];

    pub fn parse(s: &str) -> Option<Operator> {
        Self::NAMES
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(op, _)| *op)
    }

    pub fn as_str(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(op, _)| *op == self)
            .map_or("", |(_, name)| name)
    }
}

impl NodeSelectorRequirement {
    /// `key In [value]`, the meaning of a `nodeSelector` entry.
    pub fn equals(key: &str, value: &str) -> Requirement {
        Requirement {
            key: key.to_string(),
            operator: Operator::In,
            values: vec![value.to_string()],
        }
    }

    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// Reads a requirement of an object under admission, leniently: `None`
    /// without a key or with an operator this version does not know (it
    /// then constrains nothing we can judge); scalar values are taken as
    /// written, other values left out.
    pub fn from_value(v: &Value) -> Option<Requirement> {
        let key = v.get("key")?.as_str()?.to_string();
        let operator = Operator::parse(v.get("operator")?.as_str()?)?;
        let values = items(v.get("values")).filter_map(scalar_string).collect();
        Some(Requirement {
            key,
            operator,
            values,
        })
    }

    /// A requirement the API accepts: values for `In`/`NotIn`, none for
    /// `Exists`/`DoesNotExist`, one integer for the comparisons.
    pub fn is_well_formed(&self) -> bool {
        match self.operator {
            Operator::In | Operator::NotIn => !self.values.is_empty(),
            Operator::Exists | Operator::DoesNotExist => self.values.is_empty(),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                self.values.len() == 1 && self.values[0].parse::<i64>().is_ok()
            }
        }
    }

    /// [`NodeSelectorRequirement::from_value`], well-formed only.
    pub fn well_formed(v: &Value) -> Option<Requirement> {
        Requirement::from_value(v).filter(Requirement::is_well_formed)
    }

    /// Does a node label value (`None`: label absent) meet the requirement?
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match (self.operator, value) {
            (Operator::In, Some(v)) => self.values.iter().any(|x| x == v),
            (Operator::In, None) => false,
            (Operator::NotIn, Some(v)) => !self.values.iter().any(|x| x == v),
            (Operator::NotIn, None) => true,
            (Operator::Exists, v) => v.is_some(),
            (Operator::DoesNotExist, v) => v.is_none(),
            (op, Some(v)) => {
                let (Ok(have), Some(bound)) = (v.parse::<i64>(), self.bound()) else {
                    return false;
                };
                match op {
                    Operator::Gt => have > bound,
                    Operator::Lt => have < bound,
                    Operator::Gte => have >= bound,
                    _ => have <= bound,
                }
            }
            (_, None) => false,
        }
    }

    /// The integer bound of a comparison.
    fn bound(&self) -> Option<i64> {
        self.values.first().and_then(|b| b.parse::<i64>().ok())
    }

    /// A comparison as an exclusive lower or upper bound: `Gte n` is
    /// `Gt n-1`, `Lte n` is `Lt n+1` (label values are integers).
    fn exclusive_bound(&self) -> Option<(bool, i128)> {
        let n = i128::from(self.bound()?);
        match self.operator {
            Operator::Gt => Some((true, n)),
            Operator::Gte => Some((true, n - 1)),
            Operator::Lt => Some((false, n)),
            Operator::Lte => Some((false, n + 1)),
            _ => None,
        }
    }

    /// Written as the API writes it (`values` left out when empty).
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        out.insert("key".into(), Value::String(self.key.clone()));
        out.insert("operator".into(), self.operator.as_str().into());
        if !self.values.is_empty() {
            let values = self.values.iter().cloned().map(Value::String).collect();
            out.insert("values".into(), Value::Array(values));
        }
        Value::Object(out)
    }

    /// Whether every node meeting `self` also meets `other`.
    pub fn implies(&self, other: &Requirement) -> bool {
        use NodeSelectorOperator::*;
        if self.key != other.key {
            return false;
        }
        let mine: BTreeSet<&str> = self.values.iter().map(String::as_str).collect();
        let theirs: BTreeSet<&str> = other.values.iter().map(String::as_str).collect();
        let ints = |v: &[String]| -> Option<Vec<i128>> {
            v.iter()
                .map(|s| s.parse::<i64>().ok().map(i128::from))
                .collect()
        };
        match (self.operator, other.operator) {
            (In, In) => mine.is_subset(&theirs),
            (In, NotIn) => mine.is_disjoint(&theirs),
            (NotIn, NotIn) => theirs.is_subset(&mine),
            (DoesNotExist, NotIn | DoesNotExist) => true,
            (In | Exists | Gt | Lt | Gte | Lte, Exists) => true,
            (In, Gt | Lt | Gte | Lte) => {
                let (Some(v), Some((lower, b))) = (ints(&self.values), other.exclusive_bound())
                else {
                    return false;
                };
                v.iter().all(|x| if lower { *x > b } else { *x < b })
            }
            (Gt | Lt | Gte | Lte, Gt | Lt | Gte | Lte) => {
                match (self.exclusive_bound(), other.exclusive_bound()) {
                    (Some((true, a)), Some((true, b))) => a >= b,
                    (Some((false, a)), Some((false, b))) => a <= b,
                    _ => false,
                }
            }
            _ => false,
        }
    }

    /// Kubernetes-style text: `key In [a, b]`, `key Exists`.
    pub fn describe(&self) -> String {
        let (key, operator) = (&self.key, self.operator.as_str());
        match self.values.is_empty() {
            true => format!("{key} {operator}"),
            false => format!("{key} {operator} [{}]", self.values.join(", ")),
        }
    }
}

impl fmt::Display for NodeSelectorRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl NodeSelectorTerm {
    pub fn new(requirements: Vec<Requirement>) -> Term {
        Term {
            requirements,
            matches_nothing: false,
        }
    }

    /// Reads a term of an object under admission, leniently (see
    /// [`NodeSelectorRequirement::from_value`]).
    pub fn from_value(v: &Value) -> Term {
        let non_empty = |key: &str| items(v.get(key)).next().is_some();
        Term {
            requirements: items(v.get("matchExpressions"))
                .filter_map(Requirement::from_value)
                .collect(),
            matches_nothing: !non_empty("matchExpressions") && !non_empty("matchFields"),
        }
    }

    /// Can a node with `labels` (looked up by key) meet every requirement?
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.matches_nothing
            && self
                .requirements
                .iter()
                .all(|r| r.matches_value(label(&r.key)))
    }

    /// Whether `have` (requirements ANDed) implies every requirement of the term.
    pub fn implied_by(&self, have: &[Requirement]) -> bool {
        self.requirements
            .iter()
            .all(|r| have.iter().any(|h| h.implies(r)))
    }

    /// The requirements of the term `have` does not already imply.
    pub fn missing_from<'a>(&'a self, have: &[Requirement]) -> Vec<&'a Requirement> {
        self.requirements
            .iter()
            .filter(|r| !have.iter().any(|h| h.implies(r)))
            .collect()
    }

    /// The same requirements, in any order.
    pub fn same_as(&self, other: &[Requirement]) -> bool {
        self.requirements.len() == other.len()
            && self.requirements.iter().all(|r| other.contains(r))
            && other.iter().all(|r| self.requirements.contains(r))
    }

    /// Its requirements as `matchExpressions`, built in place (the
    /// `json!` macro would serialize each one again).
    pub fn to_json(&self) -> Value {
        let expressions = self.requirements.iter().map(Requirement::to_json).collect();
        let mut out = serde_json::Map::new();
        out.insert("matchExpressions".into(), Value::Array(expressions));
        Value::Object(out)
    }

    pub fn describe(&self) -> String {
        self.requirements
            .iter()
            .map(Requirement::describe)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A `NodeSelectorRequirement` of a pod as a document states it: the
/// strict reader (the six core operators; Karpenter's `Gte`/`Lte` are not
/// valid on pods).
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeSelectorRequirementDoc {
    key: String,
    operator: String,
    values: Vec<String>,
}

impl NodeSelectorRequirementDoc {
    pub fn validate(self, field: &str) -> Result<Requirement, FieldError> {
        if self.key.is_empty() {
            return Err(FieldError::new(format!("{field}.key"), "required"));
        }
        let operator = Operator::parse(&self.operator)
            .filter(|op| !matches!(op, Operator::Gte | Operator::Lte))
            .ok_or_else(|| {
                FieldError::new(
                    format!("{field}.operator"),
                    format!(
                        "{:?}: must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt",
                        self.operator
                    ),
                )
            })?;
        let values = self.values;
        let rule = match operator {
            Operator::In | Operator::NotIn if values.is_empty() => "needs at least one value",
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => "takes no values",
            Operator::Gt | Operator::Lt
                if values.len() != 1 || values[0].parse::<i64>().is_err() =>
            {
                "takes exactly one integer value"
            }
            _ => {
                let key = self.key;
                return Ok(Requirement {
                    key,
                    operator,
                    values,
                });
            }
        };
        Err(FieldError::new(
            format!("{field}.values"),
            format!("{} {rule}", operator.as_str()),
        ))
    }
}

/// The first key on which `requirements` (ANDed) can never all hold, or
/// `None` when some node labelling meets them all.
pub fn contradiction(requirements: &[&Requirement]) -> Option<String> {
    // Grouped by key in key order (a stable sort keeps each key's own
    // order); most keys have one requirement.
    let mut sorted: SmallVec<[&Requirement; 8]> = requirements.iter().copied().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    sorted
        .chunk_by(|a, b| a.key == b.key)
        .find(|reqs| !satisfiable(reqs))
        .map(|reqs| reqs[0].key.clone())
}

/// Whether one label key can meet all of `reqs`.
pub fn satisfiable(reqs: &[&Requirement]) -> bool {
    match reqs {
        // Alone, only `In` with no values excludes every node.
        [r] => !(r.operator == Operator::In && r.values.is_empty()),
        _ => satisfiable_together(reqs),
    }
}

/// [`satisfiable`], worked out in full.
fn satisfiable_together(reqs: &[&Requirement]) -> bool {
    let mut exists: Option<bool> = None;
    let mut allowed: Option<BTreeSet<&str>> = None;
    let mut forbidden: BTreeSet<&str> = BTreeSet::new();
    let mut above: Option<i128> = None;
    let mut below: Option<i128> = None;
    let need_exists = |exists: &mut Option<bool>, want: bool| -> bool {
        match *exists {
            Some(e) if e != want => false,
            _ => {
                *exists = Some(want);
                true
            }
        }
    };
    for r in reqs {
        let ok = match r.operator {
            Operator::In => {
                let set: BTreeSet<&str> = r.values.iter().map(String::as_str).collect();
                allowed = Some(match allowed.take() {
                    Some(a) => a.intersection(&set).copied().collect(),
                    None => set,
                });
                need_exists(&mut exists, true)
            }
            Operator::NotIn => {
                forbidden.extend(r.values.iter().map(String::as_str));
                true
            }
            Operator::Exists => need_exists(&mut exists, true),
            Operator::DoesNotExist => need_exists(&mut exists, false),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let Some((lower, n)) = r.exclusive_bound() else {
                    continue;
                };
                if lower {
                    above = Some(above.map_or(n, |a| a.max(n)));
                } else {
                    below = Some(below.map_or(n, |b| b.min(n)));
                }
                need_exists(&mut exists, true)
            }
        };
        if !ok {
            return false;
        }
    }
    let in_range = |v: &str| {
        if above.is_none() && below.is_none() {
            return true;
        }
        match v.parse::<i64>() {
            Ok(n) => {
                let n = i128::from(n);
                above.is_none_or(|a| n > a) && below.is_none_or(|b| n < b)
            }
            Err(_) => false,
        }
    };
    match allowed {
        Some(a) => a.iter().any(|v| !forbidden.contains(v) && in_range(v)),
        None => match (above, below) {
            (Some(a), Some(b)) => b - a > 1,
            _ => true,
        },
    }
}

/// Where something can be scheduled: requirements that always apply (a
/// pod's nodeSelector, a Karpenter NodePool's requirements), ANDed with one
/// of the alternative required terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSelection {
    pub required: Vec<Requirement>,
    /// Required node-affinity terms, ORed. `None`: no affinity given.
    pub terms: Option<Vec<Term>>,
}

impl NodeSelection {
    /// From a pod spec, leniently: `nodeSelector` and
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub fn from_pod_spec(spec: &Value) -> NodeSelection {
        let required = spec
            .get("nodeSelector")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some(Requirement::equals(k, &scalar_string(v)?)))
                    .collect()
            })
            .unwrap_or_default();
        let terms = spec
            .at("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
            .and_then(Value::as_array)
            .map(|terms| terms.iter().map(Term::from_value).collect());
        NodeSelection { required, terms }
    }

    /// From a list of requirements, all ANDed (Karpenter NodePool
    /// `spec.template.spec.requirements`).
    pub fn from_requirements(reqs: &Value) -> NodeSelection {
        NodeSelection {
            required: items(Some(reqs))
                .filter_map(Requirement::from_value)
                .collect(),
            terms: None,
        }
    }

    /// Is anything said about where to schedule?
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.terms.is_none()
    }

    /// Every requirement, of the ANDed list and of every term.
    pub fn all_requirements(&self) -> impl Iterator<Item = &Requirement> {
        self.required.iter().chain(
            self.terms
                .iter()
                .flatten()
                .flat_map(|t| t.requirements.iter()),
        )
    }

    /// Does a node whose labels `label` looks up meet the selection?
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.required.iter().all(|r| r.matches_value(label(&r.key)))
            && match &self.terms {
                None => true,
                Some(terms) => terms.iter().any(|t| t.matches(&label)),
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: Operator::parse(op).unwrap(),
            values: values.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn one_requirement_alone_is_judged_as_in_full() {
        let values: [&[&str]; 4] = [&[], &["x"], &["4"], &["x", "4"]];
        for (_, op) in Operator::NAMES {
            for v in values {
                let req = r("a", op, v);
                assert_eq!(satisfiable(&[&req]), satisfiable_together(&[&req]), "{req}");
            }
        }
    }

    #[test]
    fn contradiction_names_the_first_key_in_order() {
        let reqs = [
            r("z", "In", &[]),
            r("b", "In", &["x"]),
            r("b", "NotIn", &["x"]),
            r("a", "Exists", &[]),
            r("b", "Exists", &[]),
        ];
        let all: Vec<&Requirement> = reqs.iter().collect();
        assert_eq!(contradiction(&all).as_deref(), Some("b"));
        assert_eq!(contradiction(&[&reqs[0], &reqs[3]]).as_deref(), Some("z"));
        assert_eq!(contradiction(&[&reqs[1], &reqs[3], &reqs[4]]), None);
        assert_eq!(contradiction(&[]), None);
        // A key whose requirements clash only together.
        let range = [
            r("n", "Gt", &["3"]),
            r("n", "Lt", &["4"]),
            r("m", "Exists", &[]),
        ];
        let range: Vec<&Requirement> = range.iter().collect();
        assert_eq!(contradiction(&range).as_deref(), Some("n"));
    }

    #[test]
    fn implication_between_requirements() {
        let yes = [
            (r("a", "In", &["x"]), r("a", "In", &["x", "y"])),
            (r("a", "In", &["x"]), r("a", "Exists", &[])),
            (r("a", "In", &["x"]), r("a", "NotIn", &["z"])),
            (r("a", "NotIn", &["x", "y"]), r("a", "NotIn", &["x"])),
            (r("a", "DoesNotExist", &[]), r("a", "NotIn", &["x"])),
            (r("a", "Gt", &["4"]), r("a", "Gt", &["2"])),
            (r("a", "Lt", &["2"]), r("a", "Lt", &["4"])),
            (r("a", "In", &["8"]), r("a", "Gt", &["2"])),
            (r("a", "Gte", &["4"]), r("a", "Gt", &["3"])),
            (r("a", "Gt", &["3"]), r("a", "Gte", &["4"])),
            (r("a", "Lte", &["4"]), r("a", "Lt", &["5"])),
            (r("a", "In", &["4"]), r("a", "Gte", &["4"])),
            (r("a", "Gte", &["1"]), r("a", "Exists", &[])),
        ];
        for (a, b) in yes {
            assert!(a.implies(&b), "{a} => {b}");
        }
        let no = [
            (r("a", "In", &["x", "y"]), r("a", "In", &["x"])),
            (r("a", "In", &["x"]), r("b", "In", &["x"])),
            (r("a", "Exists", &[]), r("a", "In", &["x"])),
            (r("a", "NotIn", &["x"]), r("a", "NotIn", &["x", "y"])),
            (r("a", "Gt", &["2"]), r("a", "Gt", &["4"])),
            (r("a", "In", &["gpu"]), r("a", "Gt", &["2"])),
            (r("a", "Gte", &["3"]), r("a", "Gt", &["3"])),
            (r("a", "In", &["3"]), r("a", "Gte", &["4"])),
        ];
        for (a, b) in no {
            assert!(!a.implies(&b), "{a} =/=> {b}");
        }
    }

    #[test]
    fn finds_contradictions_per_key() {
        let accel = || r("accel", "In", &["nvidia"]);
        let cases = [
            ([r("accel", "In", &["none"]), accel()], Some("accel")),
            ([accel(), r("accel", "NotIn", &["nvidia"])], Some("accel")),
            ([accel(), r("accel", "DoesNotExist", &[])], Some("accel")),
            ([r("n", "Gt", &["3"]), r("n", "Lt", &["4"])], Some("n")),
            ([r("n", "In", &["2", "8"]), r("n", "Gt", &["4"])], None),
            ([r("n", "Gt", &["3"]), r("n", "Lt", &["5"])], None),
            ([accel(), r("pool", "In", &["cpu"])], None),
            ([r("a", "NotIn", &["x"]), r("a", "DoesNotExist", &[])], None),
            ([r("n", "Gte", &["4"]), r("n", "Lte", &["4"])], None),
            ([r("n", "Gte", &["5"]), r("n", "Lte", &["4"])], Some("n")),
        ];
        for ([a, b], want) in cases {
            assert_eq!(contradiction(&[&a, &b]).as_deref(), want, "{a}, {b}");
        }
    }

    #[test]
    fn values_meet_requirements() {
        assert!(r("n", "Gte", &["4"]).matches_value(Some("4")));
        assert!(!r("n", "Gt", &["4"]).matches_value(Some("4")));
        assert!(r("n", "Lte", &["4"]).matches_value(Some("4")));
        assert!(!r("n", "Lt", &["4"]).matches_value(Some("x")));
        assert!(!r("n", "Gt", &["4"]).matches_value(None));
        assert!(r("z", "NotIn", &["a"]).matches_value(None));
        assert!(!r("z", "In", &["a"]).matches_value(None));
        assert!(r("z", "DoesNotExist", &[]).matches_value(None));
    }

    #[test]
    fn pod_selection_is_the_node_selector_and_one_term() {
        let spec = json!({
            "nodeSelector": {"pool": "gpu"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["1"]}]},
                {},
                {"matchExpressions": [{"key": "n", "operator": "Gte", "values": ["2"]}, {"key": "x", "operator": "Bogus"}]}
            ]}}}
        });
        let sel = NodeSelection::from_pod_spec(&spec);
        assert_eq!(sel.required, vec![Requirement::equals("pool", "gpu")]);
        let terms = sel.terms.as_ref().unwrap();
        assert!(terms[1].matches_nothing);
        assert_eq!(terms[2].requirements.len(), 1);
        let node = |labels: &'static [(&'static str, &'static str)]| {
            move |k: &str| labels.iter().find(|(lk, _)| *lk == k).map(|(_, v)| *v)
        };
        assert!(sel.matches(node(&[("pool", "gpu"), ("zone", "1")])));
        assert!(sel.matches(node(&[("pool", "gpu"), ("n", "2")])));
        assert!(!sel.matches(node(&[("pool", "gpu"), ("n", "1")])));
        assert!(!sel.matches(node(&[("zone", "1")])));
        let bad = json!({"key": "a", "operator": "In", "values": []});
        assert!(Requirement::from_value(&bad).is_some());
        assert!(Requirement::well_formed(&bad).is_none());
    }
}
