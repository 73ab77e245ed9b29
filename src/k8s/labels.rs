//! Label selectors (`metav1.LabelSelector`), as Kubernetes matches them.
use super::json::{list, object, unknown_fields, FieldError};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A `metav1.LabelSelector`. The default selects everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: SelectorOp,
    pub values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    /// Reads a selector strictly: unknown fields, unknown operators and
    /// values that do not fit the operator are errors naming the field.
    pub fn parse_strict(
        obj: &Map<String, Value>,
        field: &str,
    ) -> Result<LabelSelector, FieldError> {
        unknown_fields(obj, field, &["matchLabels", "matchExpressions"])?;
        let mut sel = LabelSelector::default();
        let labels_field = format!("{field}.matchLabels");
        if let Some(labels) = object(obj.get("matchLabels"), &labels_field)? {
            for (k, v) in labels {
                let v = v.as_str().ok_or_else(|| {
                    FieldError::new(format!("{labels_field}.{k}"), "must be a string")
                })?;
                sel.match_labels.insert(k.clone(), v.to_string());
            }
        }
        let exprs_field = format!("{field}.matchExpressions");
        for (i, e) in list(obj.get("matchExpressions"), &exprs_field)?
            .iter()
            .enumerate()
        {
            let f = format!("{exprs_field}[{i}]");
            let req = LabelRequirement::from_value(e).ok_or_else(|| {
                FieldError::new(
                    &f,
                    "needs key, operator In/NotIn (with values) or Exists/DoesNotExist (without)",
                )
            })?;
            if let Some(m) = e.as_object() {
                unknown_fields(m, &f, &["key", "operator", "values"])?;
            }
            sel.match_expressions.push(req);
        }
        Ok(sel)
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
        let well_formed = match operator {
            SelectorOp::In | SelectorOp::NotIn => !values.is_empty(),
            SelectorOp::Exists | SelectorOp::DoesNotExist => values.is_empty(),
        };
        well_formed.then(|| LabelRequirement {
            key: key.to_string(),
            operator,
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_match_like_kubernetes() {
        let labels = BTreeMap::from([
            ("team".to_string(), "ml".to_string()),
            ("tier".to_string(), "gold".to_string()),
        ]);
        let sel = |v: Value| {
            LabelSelector::parse_strict(v.as_object().unwrap(), "spec.namespaceSelector").unwrap()
        };
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
        let e =
            LabelSelector::parse_strict(bad.as_object().unwrap(), "spec.podSelector").unwrap_err();
        assert_eq!(e.field, "spec.podSelector.matchExpressions[0]");
        let typo = json!({"matchLabel": {"a": "b"}});
        let e = LabelSelector::parse_strict(typo.as_object().unwrap(), "s").unwrap_err();
        assert_eq!(e.field, "s.matchLabel");
    }
}
