//! Extended resources served by DRA (KEP-5004): a DeviceClass that names
//! an extended resource (`spec.extendedResourceName: nvidia.com/gpu`) lets
//! pods ask for that resource and get the class's devices, which drivers
//! publish in ResourceSlices. A node whose GPUs are served this way may
//! have no `nvidia.com/gpu` in its allocatable resources; read with the
//! slices, it offers as many as the class selects there.
use crate::k8s::json::{items, str_at, Pointer};
use crate::k8s::{NodeInfo, NodeSelectorTerm};
use kube_cel::cel::common::ast::{operators, Expr, LiteralValue};
use kube_cel::cel::parser::{Expression, Parser};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Drivers a DeviceClass may select devices of; `None`: any driver.
type Drivers = Option<BTreeSet<String>>;

/// The extended resources DeviceClasses serve and the devices of the
/// ResourceSlices, as the node snapshot reads them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DraDevices {
    /// Per extended resource name, the drivers of the class serving it.
    served: BTreeMap<String, Drivers>,
    /// Drivers of the devices that one node can use, by node name.
    on_node: BTreeMap<String, Vec<String>>,
    /// Devices of slices for all nodes, or nodes a selector picks.
    shared: Vec<(String, Option<Vec<NodeSelectorTerm>>)>,
}

/// A `resource.k8s.io` DeviceClass or ResourceSlice.
pub fn is_dra_device_object(object: &Value) -> bool {
    str_at(object, "/apiVersion").starts_with("resource.k8s.io/")
        && matches!(str_at(object, "/kind"), "DeviceClass" | "ResourceSlice")
}

impl DraDevices {
    /// The DeviceClasses and ResourceSlices among `objects` (others are
    /// left out). A name two classes serve goes to the one created last
    /// (ties: the first name), as the scheduler picks; slices of an older
    /// generation of their pool are stale and left out.
    pub fn read<'a>(objects: impl IntoIterator<Item = &'a Value>) -> DraDevices {
        let (mut classes, mut slices) = (Vec::new(), Vec::new());
        for object in objects.into_iter().filter(|o| is_dra_device_object(o)) {
            match str_at(object, "/kind") {
                "DeviceClass" => classes.push(object),
                _ => slices.push(object),
            }
        }
        let created = |c: &Value| str_at(c, "/metadata/creationTimestamp").to_string();
        classes.sort_by_key(|c| (std::cmp::Reverse(created(c)), str_at(c, "/metadata/name")));
        let mut out = DraDevices::default();
        for class in classes {
            let name = str_at(class, "/spec/extendedResourceName");
            if !name.is_empty() && !out.served.contains_key(name) {
                out.served.insert(name.to_string(), class_drivers(class));
            }
        }
        fn pool(s: &Value) -> (&str, &str) {
            (str_at(s, "/spec/driver"), str_at(s, "/spec/pool/name"))
        }
        let generation =
            |s: &Value| (s.at("/spec/pool/generation").and_then(Value::as_i64)).unwrap_or(0);
        let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for slice in &slices {
            let g = newest.entry(pool(slice)).or_insert(i64::MIN);
            *g = (*g).max(generation(slice));
        }
        for slice in slices.iter().filter(|s| generation(s) == newest[&pool(s)]) {
            let driver = str_at(slice, "/spec/driver").to_string();
            let per_device = slice.at("/spec/perDeviceNodeSelection") == Some(&Value::Bool(true));
            for device in items(slice.at("/spec/devices")) {
                let at = if per_device {
                    device.get("basic").unwrap_or(device)
                } else {
                    &slice["spec"]
                };
                let node = str_at(at, "/nodeName");
                if !node.is_empty() {
                    out.on_node
                        .entry(node.to_string())
                        .or_default()
                        .push(driver.clone());
                } else if at.get("allNodes") == Some(&Value::Bool(true)) {
                    out.shared.push((driver.clone(), None));
                } else if let Some(selector) = at.get("nodeSelector") {
                    let terms = items(selector.get("nodeSelectorTerms"));
                    let terms = terms.map(NodeSelectorTerm::from_value).collect();
                    out.shared.push((driver.clone(), Some(terms)));
                }
            }
        }
        out
    }

    /// Adds to `node`'s allocatable resources each extended resource DRA
    /// serves there that its own allocatable does not name (a device
    /// plugin's count wins, as in the scheduler): as many as the serving
    /// class's drivers have devices the node can use.
    pub fn add_to(&self, node: &mut NodeInfo) {
        let own = self.on_node.get(&node.name).into_iter().flatten();
        let shared = (self.shared.iter())
            .filter(|(_, terms)| {
                terms
                    .as_ref()
                    .is_none_or(|terms| terms.iter().any(|t| t.matches(|k| node.label(k))))
            })
            .map(|(driver, _)| driver);
        let usable: Vec<&String> = own.chain(shared).collect();
        for (resource, drivers) in &self.served {
            let count = (usable.iter())
                .filter(|d| drivers.as_ref().is_none_or(|set| set.contains(**d)))
                .count();
            if count > 0 && !node.allocatable.contains_key(resource) {
                node.allocatable.insert(resource.clone(), count.to_string());
            }
        }
    }
}

/// The drivers a DeviceClass may select devices of, read from its CEL
/// selectors (all must hold): `device.driver == "x"` (either way round)
/// and `device.driver in ["x", "y"]`, under `&&` and `||`. Anything else
/// (attributes, capacity, a selector that does not parse) narrows nothing:
/// the class is taken to select every device of the drivers it names, or
/// of any driver when it names none, which counts more GPUs and more GPU
/// nodes, the safe side of the boundary.
fn class_drivers(class: &Value) -> Drivers {
    items(class.at("/spec/selectors"))
        .map(|s| Parser::new().parse(str_at(s, "/cel/expression")).ok())
        .map(|e| e.as_ref().and_then(drivers))
        .fold(None, both)
}

/// Drivers both `a` and `b` allow.
fn both(a: Drivers, b: Drivers) -> Drivers {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.intersection(&b).cloned().collect()),
        (a, None) | (None, a) => a,
    }
}

/// The drivers expression `e` allows a device of, when it says.
fn drivers(e: &Expression) -> Drivers {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    let is_driver = |e: &Expression| {
        matches!(&e.expr, Expr::Select(s) if !s.test && s.field == "driver"
            && matches!(&s.operand.expr, Expr::Ident(name) if name == "device"))
    };
    let string = |e: &Expression| match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
        _ => None,
    };
    match (call.func_name.as_str(), call.args.as_slice()) {
        (_, _) if call.target.is_some() => None,
        (operators::LOGICAL_AND, [a, b]) => both(drivers(a), drivers(b)),
        (operators::LOGICAL_OR, [a, b]) => Some(&drivers(a)? | &drivers(b)?),
        (operators::EQUALS, [a, b] | [b, a]) if is_driver(a) => string(b).map(|s| [s].into()),
        (operators::IN, [a, list]) if is_driver(a) => match &list.expr {
            Expr::List(list) => list.elements.iter().map(string).collect(),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, resource: &str, expressions: &[&str]) -> Value {
        let selectors: Vec<Value> = (expressions.iter())
            .map(|e| json!({"cel": {"expression": e}}))
            .collect();
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "creationTimestamp": "2026-09-01T10:00:00Z"},
            "spec": {"extendedResourceName": resource, "selectors": selectors}})
    }

    fn slice(driver: &str, node: &str, devices: usize) -> Value {
        let device = |i| json!({"name": format!("gpu-{i}"), "attributes": {"type": {"string": "gpu"}}, "capacity": {"memory": {"value": "80Gi"}}});
        let devices: Vec<Value> = (0..devices).map(device).collect();
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-{driver}")},
            "spec": {"driver": driver, "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
    }

    fn node(name: &str, allocatable: Value) -> NodeInfo {
        let node = json!({"metadata": {"name": name, "labels": {"pool": "gpu"}}, "status": {"allocatable": allocatable}});
        NodeInfo::from_value(&node)
    }

    fn served(objects: &[Value], node_name: &str) -> BTreeMap<String, String> {
        let mut n = node(node_name, json!({"cpu": "4"}));
        DraDevices::read(objects).add_to(&mut n);
        n.allocatable.remove("cpu");
        n.allocatable
    }

    #[test]
    fn a_class_serving_an_extended_resource_counts_its_drivers_devices_per_node() {
        let objects = [
            class("gpu.nvidia.com", "nvidia.com/gpu",
                &["device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"]),
            // A class with no extended resource serves none.
            class("nic.example.com", "", &["device.driver == 'nic.example.com'"]),
            slice("gpu.nvidia.com", "gpu-1", 4),
            slice("nic.example.com", "gpu-1", 2),
            slice("gpu.nvidia.com", "gpu-2", 8),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
        ];
        let four = BTreeMap::from([("nvidia.com/gpu".into(), "4".into())]);
        assert_eq!(served(&objects, "gpu-1"), four);
        assert_eq!(served(&objects, "gpu-2")["nvidia.com/gpu"], "8");
        assert!(served(&objects, "cpu-1").is_empty());
        // A device plugin's own count wins.
        let mut n = node("gpu-1", json!({"nvidia.com/gpu": "2"}));
        DraDevices::read(&objects).add_to(&mut n);
        assert_eq!(n.allocatable["nvidia.com/gpu"], "2");
        // No class serving an extended resource: nothing is served.
        assert!(served(&objects[2..], "gpu-1").is_empty());
    }

    #[test]
    fn drivers_are_read_from_the_selectors_and_anything_else_narrows_nothing() {
        let read = |expressions: &[&str]| class_drivers(&class("c", "nvidia.com/gpu", expressions));
        let set = |names: &[&str]| Some(names.iter().map(|s| s.to_string()).collect());
        for (expressions, want) in [
            (
                vec!["device.driver == \"gpu.nvidia.com\""],
                vec!["gpu.nvidia.com"],
            ),
            (vec!["'gpu.amd.com' == device.driver"], vec!["gpu.amd.com"]),
            (
                vec!["device.driver == 'a' || device.driver in ['b', 'c']"],
                vec!["a", "b", "c"],
            ),
            // Selectors are ANDed.
            (
                vec!["device.driver in ['a', 'b']", "device.driver == 'b'"],
                vec!["b"],
            ),
            (vec!["device.driver == 'a'", "device.driver == 'b'"], vec![]),
        ] {
            assert_eq!(read(&expressions), set(&want), "{expressions:?}");
        }
        // Not understood, or not about the driver: any driver.
        for unread in [
            "device.attributes['gpu.nvidia.com'].productName == 'H100'",
            "device.driver.startsWith('gpu.')",
            "device.driver == 'a' || device.capacity['x'].memory > quantity('1Gi')",
            "device.driver != 'a'",
            "device.driver ==",
        ] {
            assert_eq!(read(&[unread]), None, "{unread}");
        }
        assert_eq!(read(&[]), None, "no selector selects every device");
        // An unreadable class counts every device of the node.
        let objects = [
            class("any", "nvidia.com/gpu", &["device.attributes['x'].y == 1"]),
            slice("gpu.nvidia.com", "n", 2),
            slice("nic.example.com", "n", 1),
        ];
        assert_eq!(served(&objects, "n")["nvidia.com/gpu"], "3");
    }

    #[test]
    fn the_newest_class_serves_a_name_and_stale_slices_are_left_out() {
        let gpu = |name, driver: &str| {
            class(
                name,
                "nvidia.com/gpu",
                &[&format!("device.driver == '{driver}'")],
            )
        };
        let mut old = gpu("old", "old.example.com");
        old["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        let new = gpu("new", "gpu.nvidia.com");
        let mut stale = slice("gpu.nvidia.com", "n", 8);
        stale["spec"]["pool"]["generation"] = json!(0);
        let objects = [
            old,
            new,
            stale,
            slice("gpu.nvidia.com", "n", 2),
            slice("old.example.com", "n", 5),
        ];
        assert_eq!(served(&objects, "n")["nvidia.com/gpu"], "2");
    }

    #[test]
    fn slices_for_all_nodes_or_selected_nodes_count_on_each_node_they_reach() {
        let only_gpus = ["device.driver == 'gpu.nvidia.com'"];
        let gpu = class("gpu.nvidia.com", "nvidia.com/gpu", &only_gpus);
        let mut all = slice("gpu.nvidia.com", "fabric", 2);
        all["spec"].as_object_mut().unwrap().remove("nodeName");
        all["spec"]["allNodes"] = json!(true);
        let mut selected = slice("gpu.nvidia.com", "rack", 1);
        selected["spec"].as_object_mut().unwrap().remove("nodeName");
        selected["spec"]["nodeSelector"] = json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["gpu"]}]}]});
        let per_device = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "per-device"},
            "spec": {"driver": "gpu.nvidia.com", "perDeviceNodeSelection": true,
                "pool": {"name": "per-device", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "a", "nodeName": "n"}, {"name": "b", "nodeName": "m"}]}});
        let objects = [gpu, all, selected, per_device];
        assert_eq!(served(&objects, "n")["nvidia.com/gpu"], "4");
        let mut elsewhere = NodeInfo::default();
        DraDevices::read(&objects).add_to(&mut elsewhere);
        let why = "only the slice for all nodes";
        assert_eq!(elsewhere.allocatable["nvidia.com/gpu"], "2", "{why}");
    }
}
