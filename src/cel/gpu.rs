//! The GPU extensions of the CEL environment: the `gpu` variable (what the
//! evaluated object asks for) and the `azure.sku` / `azure.isGpuSku`
//! functions over the SKU catalog. Documented in docs/cel-extensions.md.
use super::schema::Schema;
use super::{json_to_value, Context, Extension, Value};
use crate::gpu::catalog::Catalog;
use crate::gpu::facts::GpuFacts;
use crate::gpu::{GpuResources, SkuList, SKU_LIST};
use kube_cel::cel::ResolveResult;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `gpu` and `azure.*` for policies.
pub struct GpuExtension {
    catalog: Arc<Catalog>,
    resources: GpuResources,
    /// `azure.sku()` of each catalog SKU, in catalog order, converted once:
    /// policies call it inside comprehensions over dozens of SKUs.
    sku_values: Arc<SkuValues>,
    /// The SKU-set functions over the catalog, by name.
    sku_sets: Vec<(&'static str, super::sku_sets::SkuSetFn)>,
    /// The SKU lists the `gpu` variable shares ([`gpu_tree`]).
    lists: Arc<super::SharedLists>,
}

/// The catalog's `azure.sku()` records, each held with its conversion to the
/// interpreter's form ([`Value::preconverted`]): a call hands out a clone.
struct SkuValues(Vec<Value>);

impl GpuExtension {
    pub fn new(catalog: Arc<Catalog>, resources: GpuResources) -> GpuExtension {
        let values = catalog.skus().iter().map(|sku| {
            let value = json_to_value(&sku.to_json());
            // Records of plain JSON always convert; were one not to, it
            // would only be converted on each call instead.
            value.clone().preconverted().unwrap_or(value)
        });
        let sku_values = Arc::new(SkuValues(values.collect()));
        let sku_sets = super::sku_sets::SkuSetFn::all(&catalog);
        GpuExtension {
            catalog,
            resources,
            sku_values,
            sku_sets,
            lists: Arc::new(super::SharedLists::new(SKU_LIST, [])),
        }
    }

    /// With `lists`, the SKU lists that outlive a request (the catalog's,
    /// the placement profiles'), converted once for the `gpu` variable of
    /// every request that shows one.
    pub fn sharing(mut self, lists: impl IntoIterator<Item = SkuList>) -> GpuExtension {
        self.lists = Arc::new(super::SharedLists::new(SKU_LIST, lists));
        self
    }
}

/// The `gpu` variable of `facts`, in CEL form, through the facts' JSON
/// (integers as `int`).
pub fn gpu_value(facts: &GpuFacts) -> Value {
    // Plain data (strings, integers, booleans, lists, maps with string
    // keys) always serializes.
    json_to_value(&serde_json::to_value(facts).unwrap_or(serde_json::Value::Null))
}

/// [`gpu_value`] as a tree, which programs read in place and whose
/// interpreter's form ([`super::Tree::to_val`]) is the same value:
/// written straight from the facts, by the same rules as their JSON,
/// each SKU list of `shared` given as it is kept there.
pub fn gpu_tree(facts: &GpuFacts, shared: &super::SharedLists) -> super::Tree {
    debug_assert_eq!(
        facts.detail,
        crate::gpu::facts::Detail::Policies,
        "facts worked out for placement alone are not the `gpu` variable"
    );
    // Plain data (strings, integers, booleans, lists, maps with string
    // keys) always converts.
    super::to_tree(facts, shared).unwrap_or(super::Tree::Null)
}

/// The cached `azure.sku()` value for `name`, or null.
fn sku_value(catalog: &Catalog, values: &[Value], name: &str) -> Value {
    catalog
        .position_of(name)
        .and_then(|i| values.get(i).cloned())
        .unwrap_or(Value::Null)
}

impl Extension for GpuExtension {
    /// The catalog functions answer from the catalog alone, which is fixed
    /// for the life of the policy set.
    fn pure(&self) -> bool {
        true
    }

    fn register_functions(&self, ctx: &mut Context<'static>) {
        let catalog = self.catalog.clone();
        let values = self.sku_values.clone();
        ctx.add_function("azure.sku", move |name: Arc<String>| -> ResolveResult {
            Ok(sku_value(&catalog, &values.0, &name))
        });
        let catalog = self.catalog.clone();
        ctx.add_function("azure.isGpuSku", move |name: Arc<String>| -> bool {
            catalog.is_gpu_sku(&name)
        });
        super::sku_sets::register(ctx, &self.sku_sets);
    }

    /// The SKU-set functions: a program reads their lists where they
    /// stand (`gpu.skus`, a policy's variables) instead of the
    /// interpreter's copy of each.
    fn natives(&self) -> Vec<(&'static str, super::program::Native)> {
        (self.sku_sets.iter())
            .map(|(name, f)| (*name, super::program::Native::SkuSet(f.clone())))
            .collect()
    }

    fn variable_names(&self) -> &[&'static str] {
        &["gpu"]
    }

    fn shared_lists(&self) -> Option<&super::SharedLists> {
        Some(&self.lists)
    }

    /// Every object gets every key of the facts (`pool` only capacity
    /// objects): their names are closed, what they hold open.
    fn variable_types(&self) -> Vec<(&'static str, Schema)> {
        let facts = serde_json::to_value(GpuFacts::default()).unwrap_or_default();
        match Schema::of_sample(&facts, false) {
            Schema::Object(fields, open) => {
                let pool = [("pool".to_string(), Schema::Dyn)];
                vec![(
                    "gpu",
                    Schema::object(fields.as_ref().clone().into_iter().chain(pool), open),
                )]
            }
            _ => Vec::new(),
        }
    }

    /// `azure.sku(name)` gives the catalog's record (or null): its keys
    /// closed, each typed by the first SKU that gives it a value; the
    /// SKU-set functions give lists of names.
    fn function_types(&self) -> Vec<(&'static str, Schema)> {
        let mut fields = BTreeMap::new();
        for sku in self.catalog.skus() {
            if let serde_json::Value::Object(record) = sku.to_json() {
                for (key, value) in record {
                    let known = fields.entry(key).or_insert(Schema::Dyn);
                    if *known == Schema::Dyn && !value.is_null() {
                        *known = Schema::of_sample(&value, true);
                    }
                }
            }
        }
        let names = || Schema::List(Box::new(Schema::Scalar("string")));
        let mut types = vec![
            ("azure.sku", Schema::object(fields, false)),
            ("azure.isGpuSku", Schema::Scalar("bool")),
        ];
        types.extend(super::sku_sets::NAMES.iter().map(|n| (*n, names())));
        types
    }

    fn variables(&self, object: Option<&serde_json::Value>) -> Vec<(String, Value)> {
        let object = object.unwrap_or(&serde_json::Value::Null);
        let facts = GpuFacts::of(object, &self.catalog, &self.resources);
        vec![("gpu".to_string(), gpu_value(&facts))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{compile, evaluate, Env, Extensions};
    use serde_json::json;

    fn eval(expr: &str, object: serde_json::Value) -> Value {
        let ext = GpuExtension::new(Arc::new(Catalog::embedded()), GpuResources::default());
        let env = Env::new(Extensions::new().with(ext));
        let compiled = compile(&env, expr).unwrap();
        let mut ctx = env.scope();
        env.bind_host_variables(&mut ctx, Some(&object), crate::cel::Hosts::NONE, |n| {
            n == "gpu"
        });
        evaluate(compiled.tree(), &ctx).unwrap()
    }

    #[test]
    fn azure_functions_read_the_catalog() {
        for (expr, want) in [
            ("azure.isGpuSku('Standard_NC4as_T4_v3')", true),
            ("azure.isGpuSku('Standard_D4s_v5')", false),
            ("azure.sku('Standard_NC6s_v3').retired", true),
            ("azure.sku('Standard_D4s_v5') == null", true),
            ("azure.sku('Standard_NC24ads_A100_v4').premium", true),
        ] {
            assert_eq!(eval(expr, json!({})), Value::Bool(want), "{expr}");
        }
    }

    #[test]
    fn cached_sku_values_match_the_catalog() {
        let catalog = Catalog::embedded();
        let ext = GpuExtension::new(Arc::new(Catalog::embedded()), GpuResources::default());
        for sku in catalog.skus() {
            let want = json_to_value(&catalog.sku_value(&sku.name));
            assert!(
                matches!(
                    sku_value(&catalog, &ext.sku_values.0, &sku.name),
                    Value::Opaque(_)
                ),
                "{} is held converted",
                sku.name
            );
            assert_eq!(
                sku_value(&catalog, &ext.sku_values.0, &sku.name),
                want,
                "{}",
                sku.name
            );
            for alias in &sku.aliases {
                assert_eq!(
                    sku_value(&catalog, &ext.sku_values.0, alias),
                    want,
                    "{alias}"
                );
            }
        }
        assert_eq!(
            sku_value(&catalog, &ext.sku_values.0, "standard_nc4as_t4_v3"),
            json_to_value(&catalog.sku_value("Standard_NC4as_T4_v3"))
        );
        assert_eq!(
            sku_value(&catalog, &ext.sku_values.0, "Standard_D4s_v5"),
            Value::Null
        );
    }

    #[test]
    fn both_forms_of_the_gpu_variable_agree() {
        let catalog = Catalog::embedded();
        let resources = GpuResources::default();
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t",
                "annotations": {"gpu-fraction": "0.5"}},
                "spec": {"schedulerName": "kai-scheduler",
                    "nodeSelector": {"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"},
                    "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                    "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                    "containers": [
                        {"name": "train", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                        {"name": "log"}],
                    "ephemeralContainers": [{"name": "debug"}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]}}),
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
                "spec": {"template": {"spec": {
                    "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                    "requirements": [{"key": "karpenter.azure.com/sku-gpu-manufacturer",
                        "operator": "In", "values": ["nvidia"]}]}},
                    "limits": {"nvidia.com/gpu": "16"}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        ];
        // The pool's facts (flattened, with fields of their own
        // serializers) are among those compared.
        assert!(GpuFacts::of(&objects[1], &catalog, &resources)
            .pool
            .is_some());
        for object in &objects {
            let mut facts = GpuFacts::of(object, &catalog, &resources);
            facts.placement.profile = "aks-nvidia".into();
            facts.placement.skus = vec!["Standard_NC4as_T4_v3".to_string()].into();
            // Alone, and sharing the SKU lists of the catalog and of the
            // placement profile converted once.
            let lists = [catalog.names().clone(), facts.placement.skus.clone()];
            let shared = crate::cel::SharedLists::new(SKU_LIST, lists);
            for lists in [crate::cel::SharedLists::none(), &shared] {
                let val = gpu_tree(&facts, lists).to_val();
                let direct = Value::try_from(val.as_ref()).expect("plain data");
                assert_eq!(direct, gpu_value(&facts), "{object}");
            }
        }
    }

    #[test]
    fn the_gpu_variable_is_typed_by_its_keys() {
        let ext = GpuExtension::new(Arc::new(Catalog::embedded()), GpuResources::default());
        let roots = ext.variable_types().into_iter().collect();
        let found = |source: &str| {
            let parsed = crate::cel::schema::Parsed::new(source).unwrap();
            let found = parsed.check(&Default::default(), &roots).1;
            found.into_iter().map(|f| f.message).collect::<Vec<_>>()
        };
        assert_eq!(
            found("gpu.totl > 0 || gpu.total == '2' || gpu.requested.x"),
            [
                "undefined field 'totl'",
                "found no matching overload for '_==_' applied to '(int, string)'",
                "type 'bool' does not support field selection",
            ]
        );
        // Capacity objects' `pool`; what the keys hold is open.
        assert!(
            found("has(gpu.pool) && gpu.pool.pools.size() > 0 && gpu.placement.x == 1").is_empty()
        );
    }

    #[test]
    fn the_azure_functions_are_typed_by_what_they_give() {
        let ext = GpuExtension::new(Arc::new(Catalog::embedded()), GpuResources::default());
        let roots: BTreeMap<&str, Schema> = (ext.variable_types().into_iter())
            .chain(ext.function_types())
            .collect();
        let found = |source: &str| {
            let parsed = crate::cel::schema::Parsed::new(source).unwrap();
            let found = parsed.check(&Default::default(), &roots).1;
            found
                .into_iter()
                .map(|f| format!("{} ({})", f.message, f.field.unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            found(
                "azure.sku(gpu.skus[0]).premum || azure.sku('x').gpus == 'two' \
                 || azure.isGpuSku('x').y || azure.skusIn(gpu.skus, ['*'])[0] > 1"
            ),
            [
                "undefined field 'premum' (azure.sku().premum)",
                "found no matching overload for '_==_' applied to '(double, string)' (azure.sku().gpus)",
                "type 'bool' does not support field selection (azure.isGpuSku().y)",
                "found no matching overload for '_>_' applied to '(string, int)' (azure.skusIn()[*])",
            ]
        );
        // Every field the record has, `null` for an unknown size, and what
        // the record holds open (a size's MIG profiles by name).
        assert!(found(
            "azure.sku('x') == null || azure.sku('x').retiredOn == '' \
             || azure.sku('x').migProfiles['1g.10gb'] > 0 || azure.sku('x').vcpus > 2 \
             || azure.skusWhere(gpu.skus, ['mig']).exists(s, azure.sku(s).gpuModel == 'A100')"
        )
        .is_empty());
        // A comprehension variable named like the namespace is its own.
        assert!(found("['x'].exists(azure, azure.sku('y').nope == 1)").is_empty());
    }

    #[test]
    fn gpu_variable_counts_what_a_pod_asks_for() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"},
            "spec": {"containers": [
                {"name": "train", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                {"name": "log", "image": "fluent-bit"}
            ]}
        });
        assert_eq!(eval("gpu.total", pod.clone()), Value::Int(2));
        assert_eq!(eval("gpu.requested", pod.clone()), Value::Bool(true));
        assert_eq!(
            eval("gpu.containers.filter(c, c.total > 0).map(c, c.name)", pod),
            eval("['train']", json!({}))
        );
    }
}
