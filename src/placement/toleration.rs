//! Tolerations and taints, and when one toleration already covers another.
use serde_json::{json, Map, Value};
use std::fmt;

/// A pod toleration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toleration {
    /// Empty with `Exists`: every key.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// Empty: every effect.
    pub effect: String,
    pub toleration_seconds: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TolerationOperator {
    Equal,
    Exists,
    /// An operator this version does not reason about (never covers anything).
    Other(String),
}

/// A node taint (`key=value:Effect`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl Toleration {
    /// Reads a toleration from a pod, leniently.
    pub fn from_pod(v: &Value) -> Toleration {
        let text = |name: &str| {
            v.get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let operator = match text("operator").as_str() {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            other => TolerationOperator::Other(other.to_string()),
        };
        Toleration {
            key: text("key"),
            operator,
            value: text("value"),
            effect: text("effect"),
            toleration_seconds: v.get("tolerationSeconds").and_then(Value::as_i64),
        }
    }

    /// Whether `self` tolerates at least every taint `other` tolerates, for
    /// at least as long.
    pub fn covers(&self, other: &Toleration) -> bool {
        let effect = self.effect.is_empty() || self.effect == other.effect;
        let key_and_value = match &self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == other.key,
            TolerationOperator::Equal => {
                self.key == other.key
                    && other.operator == TolerationOperator::Equal
                    && self.value == other.value
            }
            TolerationOperator::Other(_) => false,
        };
        let seconds = match (self.toleration_seconds, other.toleration_seconds) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(mine), Some(theirs)) => mine >= theirs,
        };
        effect && key_and_value && seconds
    }

    /// Whether the toleration lets a pod onto a node with `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        let effect = self.effect.is_empty() || self.effect == taint.effect;
        let key = self.key.is_empty() || self.key == taint.key;
        let value = match &self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
            TolerationOperator::Other(_) => false,
        };
        effect
            && key
            && value
            && !(self.key.is_empty() && self.operator != TolerationOperator::Exists)
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.key.is_empty() {
            m.insert("key".into(), json!(self.key));
        }
        let op = match &self.operator {
            TolerationOperator::Equal => "Equal",
            TolerationOperator::Exists => "Exists",
            TolerationOperator::Other(o) => o.as_str(),
        };
        m.insert("operator".into(), json!(op));
        if !self.value.is_empty() {
            m.insert("value".into(), json!(self.value));
        }
        if !self.effect.is_empty() {
            m.insert("effect".into(), json!(self.effect));
        }
        if let Some(s) = self.toleration_seconds {
            m.insert("tolerationSeconds".into(), json!(s));
        }
        Value::Object(m)
    }
}

impl fmt::Display for Toleration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.key.is_empty() { "*" } else { &self.key };
        match &self.operator {
            TolerationOperator::Exists => write!(f, "{key} Exists")?,
            _ => write!(f, "{key}={}", self.value)?,
        }
        if !self.effect.is_empty() {
            write!(f, ":{}", self.effect)?;
        }
        Ok(())
    }
}

impl fmt::Display for Taint {
    /// The `key=value:Effect` form used by `az aks nodepool --node-taints`
    /// and ASO's `nodeTaints`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: Value) -> Toleration {
        Toleration::from_pod(&v)
    }

    fn sku_gpu() -> Toleration {
        t(json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}))
    }

    #[test]
    fn same_key_value_effect_covers() {
        assert!(sku_gpu().covers(&sku_gpu()));
        // operator defaults to Equal
        assert!(
            t(json!({"key": "sku", "value": "gpu", "effect": "NoSchedule"})).covers(&sku_gpu())
        );
        assert!(
            !t(json!({"key": "sku", "value": "cpu", "effect": "NoSchedule"})).covers(&sku_gpu())
        );
        assert!(
            !t(json!({"key": "sku", "value": "gpu", "effect": "NoExecute"})).covers(&sku_gpu())
        );
    }

    #[test]
    fn empty_effect_covers_every_effect() {
        assert!(t(json!({"key": "sku", "operator": "Equal", "value": "gpu"})).covers(&sku_gpu()));
    }

    #[test]
    fn exists_with_the_same_key_covers_any_value() {
        assert!(
            t(json!({"key": "sku", "operator": "Exists", "effect": "NoSchedule"}))
                .covers(&sku_gpu())
        );
        assert!(t(json!({"key": "sku", "operator": "Exists"})).covers(&sku_gpu()));
        assert!(!t(json!({"key": "gpu", "operator": "Exists"})).covers(&sku_gpu()));
    }

    #[test]
    fn exists_with_empty_key_tolerates_everything() {
        assert!(t(json!({"operator": "Exists"})).covers(&sku_gpu()));
        assert!(!t(json!({"operator": "Exists", "effect": "NoExecute"})).covers(&sku_gpu()));
        // Equal with an empty key tolerates nothing useful
        assert!(!t(json!({"operator": "Equal", "value": "gpu"})).covers(&sku_gpu()));
    }

    #[test]
    fn equal_does_not_cover_exists_and_bounded_does_not_cover_unbounded() {
        let exists = t(json!({"key": "sku", "operator": "Exists", "effect": "NoSchedule"}));
        assert!(!sku_gpu().covers(&exists));
        let forever = t(json!({"key": "sku", "operator": "Exists", "effect": "NoExecute"}));
        let five_min = t(
            json!({"key": "sku", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
        );
        assert!(forever.covers(&five_min));
        assert!(!five_min.covers(&forever));
        assert!(!t(json!({"key": "sku", "operator": "Lt", "value": "5"})).covers(&sku_gpu()));
    }

    #[test]
    fn tolerations_tolerate_taints() {
        let taint = Taint {
            key: "sku".into(),
            value: "gpu".into(),
            effect: "NoSchedule".into(),
        };
        assert!(sku_gpu().tolerates(&taint));
        assert!(t(json!({"operator": "Exists"})).tolerates(&taint));
        assert!(!t(json!({"key": "sku", "value": "gpu", "effect": "NoExecute"})).tolerates(&taint));
        assert_eq!(taint.to_string(), "sku=gpu:NoSchedule");
    }

    #[test]
    fn renders_kubernetes_json() {
        assert_eq!(
            sku_gpu().to_json(),
            json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
        );
        assert_eq!(
            t(json!({"operator": "Exists"})).to_json(),
            json!({"operator": "Exists"})
        );
    }
}
