//! Node-selector requirements, and the reasoning over
//! them that placement needs: does one requirement imply another, can a set
//! of requirements be met at all.
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A node-selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One node-selector requirement (`key`, `operator`, `values`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

/// A node-selector term: requirements that must all hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub requirements: Vec<Requirement>,
}

impl Operator {
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }
}

impl Requirement {
    /// `key In [value]`, the meaning of a `nodeSelector` entry.
    pub fn equals(key: &str, value: &str) -> Requirement {
        Requirement {
            key: key.to_string(),
            operator: Operator::In,
            values: vec![value.to_string()],
        }
    }

    /// Reads a requirement from a pod, leniently: `None` for anything that
    /// is not a well-formed requirement (it is then left to the apiserver).
    pub fn from_pod(v: &Value) -> Option<Requirement> {
        let key = v.get("key")?.as_str()?;
        let operator = Operator::parse(v.get("operator")?.as_str()?)?;
        let values = match v.get("values") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?,
            Some(_) => return None,
        };
        let well_formed = match operator {
            Operator::In | Operator::NotIn => !values.is_empty(),
            Operator::Exists | Operator::DoesNotExist => values.is_empty(),
            Operator::Gt | Operator::Lt => values.len() == 1 && values[0].parse::<i64>().is_ok(),
        };
        well_formed.then(|| Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("key".into(), json!(self.key));
        m.insert("operator".into(), json!(self.operator.as_str()));
        if !self.values.is_empty() {
            m.insert("values".into(), json!(self.values));
        }
        Value::Object(m)
    }

    /// Whether every node meeting `self` also meets `other`.
    pub fn implies(&self, other: &Requirement) -> bool {
        use Operator::*;
        if self.key != other.key {
            return false;
        }
        let mine: BTreeSet<&str> = self.values.iter().map(String::as_str).collect();
        let theirs: BTreeSet<&str> = other.values.iter().map(String::as_str).collect();
        let int = |v: &[String]| v.first().and_then(|s| s.parse::<i64>().ok());
        let ints = |v: &[String]| -> Option<Vec<i64>> {
            v.iter().map(|s| s.parse::<i64>().ok()).collect()
        };
        match (self.operator, other.operator) {
            (In, In) => mine.is_subset(&theirs),
            (In, NotIn) => mine.is_disjoint(&theirs),
            (NotIn, NotIn) => theirs.is_subset(&mine),
            (DoesNotExist, NotIn | DoesNotExist) => true,
            (In | Exists | Gt | Lt, Exists) => true,
            (Gt, Gt) => {
                matches!((int(&self.values), int(&other.values)), (Some(a), Some(b)) if a >= b)
            }
            (Lt, Lt) => {
                matches!((int(&self.values), int(&other.values)), (Some(a), Some(b)) if a <= b)
            }
            (In, Gt) => {
                matches!((ints(&self.values), int(&other.values)), (Some(v), Some(b)) if v.iter().all(|x| *x > b))
            }
            (In, Lt) => {
                matches!((ints(&self.values), int(&other.values)), (Some(v), Some(b)) if v.iter().all(|x| *x < b))
            }
            _ => false,
        }
    }

    /// Kubernetes-style text: `key In [a, b]`, `key Exists`.
    pub fn describe(&self) -> String {
        if self.values.is_empty() {
            format!("{} {}", self.key, self.operator.as_str())
        } else {
            format!(
                "{} {} [{}]",
                self.key,
                self.operator.as_str(),
                self.values.join(", ")
            )
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Term {
    pub fn new(requirements: Vec<Requirement>) -> Term {
        Term { requirements }
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

    pub fn to_json(&self) -> Value {
        json!({"matchExpressions": self.requirements.iter().map(Requirement::to_json).collect::<Vec<_>>()})
    }

    pub fn describe(&self) -> String {
        self.requirements
            .iter()
            .map(Requirement::describe)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The first key on which `requirements` (ANDed) can never all hold, or
/// `None` when some node labelling meets them all.
pub fn contradiction(requirements: &[&Requirement]) -> Option<String> {
    let mut by_key: BTreeMap<&str, Vec<&Requirement>> = BTreeMap::new();
    for r in requirements {
        by_key.entry(r.key.as_str()).or_default().push(r);
    }
    by_key
        .into_iter()
        .find(|(_, reqs)| !satisfiable(reqs))
        .map(|(k, _)| k.to_string())
}

/// Whether one label key can meet all of `reqs`.
fn satisfiable(reqs: &[&Requirement]) -> bool {
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
            Operator::Gt | Operator::Lt => {
                let Some(n) = r.values.first().and_then(|v| v.parse::<i64>().ok()) else {
                    continue;
                };
                let n = i128::from(n);
                if r.operator == Operator::Gt {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn r(key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: Operator::parse(op).unwrap(),
            values: values.iter().map(|s| s.to_string()).collect(),
        }
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
        ];
        for (a, b) in no {
            assert!(!a.implies(&b), "{a} =/=> {b}");
        }
    }

    #[test]
    fn finds_contradictions_per_key() {
        let accel_none = r("accel", "In", &["none"]);
        let accel_nvidia = r("accel", "In", &["nvidia"]);
        assert_eq!(
            contradiction(&[&accel_none, &accel_nvidia]),
            Some("accel".into())
        );
        assert_eq!(
            contradiction(&[&accel_nvidia, &r("accel", "NotIn", &["nvidia"])]),
            Some("accel".into())
        );
        assert_eq!(
            contradiction(&[&accel_nvidia, &r("accel", "DoesNotExist", &[])]),
            Some("accel".into())
        );
        assert_eq!(
            contradiction(&[&r("n", "Gt", &["3"]), &r("n", "Lt", &["4"])]),
            Some("n".into())
        );
        assert_eq!(
            contradiction(&[&r("n", "In", &["2", "8"]), &r("n", "Gt", &["4"])]),
            None
        );
        assert_eq!(
            contradiction(&[&r("n", "Gt", &["3"]), &r("n", "Lt", &["5"])]),
            None
        );
        assert_eq!(
            contradiction(&[&accel_nvidia, &r("pool", "In", &["cpu"])]),
            None
        );
        assert_eq!(
            contradiction(&[&r("a", "NotIn", &["x"]), &r("a", "DoesNotExist", &[])]),
            None
        );
    }
}
