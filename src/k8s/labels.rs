//! Label selectors (`metav1.LabelSelector`), as Kubernetes matches them.
use super::json::FieldError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// A `metav1.LabelSelector`. The default selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: SelectorOp,
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
pub enum SelectorOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl SelectorOp {
    pub fn parse(s: &str) -> Option<SelectorOp> {
        Some(match s {
            "In" => SelectorOp::In,
            "NotIn" => SelectorOp::NotIn,
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            _ => return None,
        })
    }

    /// Whether `values` fit the operator: some for `In`/`NotIn`, none for
    /// `Exists`/`DoesNotExist`.
    fn fits(self, values: &[String]) -> bool {
        match self {
            SelectorOp::In | SelectorOp::NotIn => !values.is_empty(),
            SelectorOp::Exists | SelectorOp::DoesNotExist => values.is_empty(),
        }
    }
}

impl LabelSelector {
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl LabelRequirement {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOp::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOp::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOp::Exists => value.is_some(),
            SelectorOp::DoesNotExist => value.is_none(),
        }
    }

    /// A well-formed requirement (`In`/`NotIn` with values,
    /// `Exists`/`DoesNotExist` without), or `None`.
    pub fn from_value(v: &Value) -> Option<LabelRequirement> {
        let key = v.get("key")?.as_str()?;
        let operator = SelectorOp::parse(v.get("operator")?.as_str()?)?;
        let values = match v.get("values") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?,
            Some(_) => return None,
        };
        operator.fits(&values).then(|| LabelRequirement {
            key: key.to_string(),
            operator,
            values,
        })
    }
}

/// `metav1.LabelSelector` as a document states it: the strict reader.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorDoc {
    match_labels: BTreeMap<String, String>,
    match_expressions: Vec<LabelRequirementDoc>,
}

/// `metav1.LabelSelectorRequirement`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelRequirementDoc {
    key: String,
    operator: SelectorOp,
    #[serde(default)]
    values: Vec<String>,
}

impl LabelSelectorDoc {
    /// The selector, or the field and the reason it is not a valid one.
    pub fn validate(self, field: &str) -> Result<LabelSelector, FieldError> {
        let mut match_expressions = Vec::new();
        for (i, r) in self.match_expressions.into_iter().enumerate() {
            let operator = r.operator;
            let error = |key: &str, message: &str| FieldError {
                field: format!("{field}.matchExpressions[{i}].{key}"),
                message: message.to_string(),
            };
            if r.key.is_empty() {
                return Err(error("key", "required"));
            }
            if !operator.fits(&r.values) {
                return Err(error(
                    "values",
                    "required with In and NotIn, and must be empty with Exists and DoesNotExist",
                ));
            }
            let (key, values) = (r.key, r.values);
            match_expressions.push(LabelRequirement {
                key,
                operator,
                values,
            });
        }
        Ok(LabelSelector {
            match_labels: self.match_labels,
            match_expressions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::doc::from_value;
    use serde_json::json;

    #[test]
    fn label_selectors_match_like_kubernetes() {
        let labels = BTreeMap::from([
            ("team".to_string(), "ml".to_string()),
            ("tier".to_string(), "gold".to_string()),
        ]);
        let read = |v: Value, field: &str| {
            from_value::<LabelSelectorDoc>(&v).and_then(|d| d.validate(field))
        };
        let sel = |v: Value| read(v, "spec.namespaceSelector").unwrap();
        assert!(sel(json!({})).matches(&labels));
        assert!(sel(json!({"matchLabels": {"team": "ml"}})).matches(&labels));
        assert!(!sel(json!({"matchLabels": {"team": "web"}})).matches(&labels));
        assert!(sel(json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]})).matches(&labels));
        assert!(sel(
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]})
        )
        .matches(&labels));
        assert!(
            !sel(json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}))
                .matches(&labels)
        );
        assert!(
            sel(json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]}))
                .matches(&labels)
        );
        let bad = json!({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1"]}]});
        let e = from_value::<LabelSelectorDoc>(&bad).unwrap_err();
        assert_eq!(e.field, "matchExpressions[0].operator");
        let empty = json!({"matchExpressions": [{"key": "n", "operator": "In", "values": []}]});
        let e = read(empty, "spec.podSelector").unwrap_err();
        assert_eq!(e.field, "spec.podSelector.matchExpressions[0].values");
        let typo = json!({"matchLabel": {"a": "b"}});
        let e = from_value::<LabelSelectorDoc>(&typo).unwrap_err();
        assert_eq!(e.field, "matchLabel");
    }
}
