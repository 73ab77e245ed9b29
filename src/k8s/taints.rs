//! Taints and tolerations: when a toleration lets a pod onto a tainted
//! node, and when one toleration already covers another.
use super::json::{str_field, FieldError};
use serde::Deserialize;
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

impl TolerationOperator {
    fn parse(operator: &str) -> TolerationOperator {
        match operator {
            "" | "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            other => TolerationOperator::Other(other.to_string()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            TolerationOperator::Equal => "Equal",
            TolerationOperator::Exists => "Exists",
            TolerationOperator::Other(o) => o,
        }
    }
}

impl Toleration {
    /// Reads a toleration of an object under admission, leniently.
    pub fn from_value(v: &Value) -> Toleration {
        let text = |name: &str| str_field(v, name).to_string();
        Toleration {
            key: text("key"),
            operator: TolerationOperator::parse(str_field(v, "operator")),
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
        let fields = [
            ("key", &self.key),
            ("value", &self.value),
            ("effect", &self.effect),
        ];
        let fields = fields.into_iter().filter(|(_, v)| !v.is_empty());
        let mut out: Map<String, Value> = fields.map(|(k, v)| (k.into(), json!(v))).collect();
        out.insert("operator".into(), json!(self.operator.as_str()));
        if let Some(seconds) = self.toleration_seconds {
            out.insert("tolerationSeconds".into(), json!(seconds));
        }
        Value::Object(out)
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

impl Taint {
    /// Reads a taint of an object under admission, leniently: `None`
    /// without a key or an effect.
    pub fn from_value(v: &Value) -> Option<Taint> {
        Some(Taint {
            key: v.get("key")?.as_str()?.to_string(),
            value: str_field(v, "value").to_string(),
            effect: v.get("effect")?.as_str()?.to_string(),
        })
    }

    /// Parses the `key=value:Effect` form (value optional: `key:Effect`) of
    /// `az aks nodepool --node-taints` and ASO's `nodeTaints`.
    pub fn parse(s: &str) -> Option<Taint> {
        let (kv, effect) = s.trim().rsplit_once(':')?;
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if key.is_empty() || effect.is_empty() {
            return None;
        }
        Some(Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
        })
    }

    /// The taint as Kubernetes writes it in a node's `spec.taints`.
    pub fn to_json(&self) -> Value {
        let mut out = json!({"key": self.key, "effect": self.effect});
        if !self.value.is_empty() {
            out["value"] = json!(self.value);
        }
        out
    }

    /// Does the taint keep pods that do not tolerate it off the node
    /// (NoSchedule or NoExecute; PreferNoSchedule only discourages)?
    pub fn repels(&self) -> bool {
        self.effect == "NoSchedule" || self.effect == "NoExecute"
    }
}

/// A `core/v1` Toleration as a document states it: the strict reader.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct TolerationDoc {
    key: String,
    operator: String,
    value: String,
    effect: String,
    toleration_seconds: Option<i64>,
}

/// A `core/v1` Taint (without `timeAdded`) as a document states it.
#[derive(Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaintDoc {
    key: String,
    value: String,
    effect: String,
}

const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

impl TolerationDoc {
    /// The toleration, rejecting what Kubernetes would reject.
    pub fn validate(self, field: &str) -> Result<Toleration, FieldError> {
        let error =
            |name: &str, message: String| Err(FieldError::new(format!("{field}.{name}"), message));
        let operator = TolerationOperator::parse(&self.operator);
        if let TolerationOperator::Other(other) = &operator {
            return error("operator", format!("{other:?}: must be Equal or Exists"));
        }
        let effect = self.effect;
        if !effect.is_empty() && !EFFECTS.contains(&effect.as_str()) {
            return error("effect", format!("{effect:?}: must be NoSchedule, PreferNoSchedule, NoExecute or empty (all effects)"));
        }
        if operator == TolerationOperator::Exists && !self.value.is_empty() {
            return error("value", "must be empty when operator is Exists".into());
        }
        if self.key.is_empty() && operator != TolerationOperator::Exists {
            return error("key", "required unless operator is Exists".into());
        }
        if self.toleration_seconds.is_some() && effect != "NoExecute" {
            return error(
                "tolerationSeconds",
                "only allowed with effect NoExecute".into(),
            );
        }
        Ok(Toleration {
            key: self.key,
            operator,
            value: self.value,
            effect,
            toleration_seconds: self.toleration_seconds,
        })
    }
}

impl TaintDoc {
    /// The taint, rejecting what Kubernetes would reject.
    pub fn validate(self, field: &str) -> Result<Taint, FieldError> {
        if self.key.is_empty() {
            return Err(FieldError::new(format!("{field}.key"), "required"));
        }
        if !EFFECTS.contains(&self.effect.as_str()) {
            return Err(FieldError::new(
                format!("{field}.effect"),
                "required: NoSchedule, PreferNoSchedule or NoExecute",
            ));
        }
        let (key, value, effect) = (self.key, self.value, self.effect);
        Ok(Taint { key, value, effect })
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
        Toleration::from_value(&v)
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
        assert_eq!(Taint::parse("sku=gpu:NoSchedule"), Some(taint.clone()));
        assert_eq!(Taint::parse(&taint.to_string()), Some(taint.clone()));
        assert_eq!(Taint::from_value(&taint.to_json()), Some(taint));
        let keyed = Taint::parse("nvidia.com/gpu:NoExecute").unwrap();
        assert_eq!((keyed.value.as_str(), keyed.repels()), ("", true));
        assert_eq!(Taint::parse("novalue"), None);
        assert_eq!(Taint::parse(":NoSchedule"), None);
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
