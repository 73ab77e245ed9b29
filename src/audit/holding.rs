//! How many GPUs a workload holds now: *held* GPUs belong to pods bound
//! to a node and not finished; *requested, not placed* GPUs to pods not
//! bound yet, and to the pods a controller wants and has not created.
//! A controller is counted through its pods where the run read them
//! ([`through_pods`]), from its status only where it did not
//! ([`holding`]). This is the one definition the JSON, the page, the node
//! section, the PolicyReports and the `gpu_admission_audit_*` gauges use.
use crate::k8s::json::{str_at, str_field, Pointer as _};
use crate::k8s::workloads::pod_state;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};

/// GPUs of one object, by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// Of pods bound to a node and not finished.
    pub held: i64,
    /// Asked for by pods not placed on a node yet (Pending and unscheduled;
    /// for a controller, its desired pods that are not ready).
    pub pending: i64,
}

/// How an object's GPUs were counted.
pub mod counted {
    /// A Pod, by its own state.
    pub const POD: &str = "pod";
    /// A controller, through the pods of it the run read.
    pub const PODS: &str = "pods";
    /// A controller whose pods were not read, by its status (ready
    /// replicas, active pods).
    pub const STATUS: &str = "status";
    /// A workload custom resource whose pods were not read, by what its
    /// spec asks.
    pub const SPEC: &str = "spec";
}

/// How the GPUs were counted, in words: `2 pods by their own state, 1
/// controller through its pods read`.
pub fn counted_text(counted: &BTreeMap<&'static str, usize>) -> String {
    let ways = [
        (counted::POD, ["pod by its", "pods by their"], "own state"),
        (
            counted::PODS,
            ["controller through its", "controllers through their"],
            "pods read",
        ),
        (
            counted::STATUS,
            ["controller by its", "controllers by their"],
            "status (pods not read)",
        ),
        (
            counted::SPEC,
            ["workload resource by its", "workload resources by their"],
            "spec (pods not read)",
        ),
    ];
    let parts: Vec<String> = (ways.iter())
        .filter_map(|(way, [one, many], what)| {
            let n = *counted.get(way)?;
            Some(format!("{n} {} {what}", if n == 1 { one } else { many }))
        })
        .collect();
    parts.join(", ")
}

/// The pods read of the controllers a run judges: per controller, GPUs by
/// state and pods not finished; counters, never the pods.
#[derive(Clone, Debug, Default)]
pub struct PodsRead {
    /// Every namespace's pods were read (a cluster's Pod list).
    pub every_namespace: bool,
    /// Namespaces with a pod read.
    pub namespaces: HashSet<String>,
    /// By the uid of the controller judged.
    owners: HashMap<String, (Holding, i64)>,
}

impl PodsRead {
    /// Counts `pod`, asking for `gpus`, towards the controller `owner`.
    pub fn count(&mut self, owner: &str, pod: &Value, gpus: i64) {
        let (holding, pods) = self.owners.entry(owner.to_string()).or_default();
        let (held, pending) = pod_state(pod);
        holding.held += held * gpus;
        holding.pending += pending * gpus;
        *pods += held + pending;
    }

    /// The pods read of `object` (GPUs by state, pods not finished); none
    /// when its namespace's pods were not read, or it has no uid to own
    /// pods by.
    pub fn of(&self, object: &Value) -> Option<(Holding, i64)> {
        let uid = object.at("/metadata/uid").and_then(Value::as_str)?;
        let namespace = str_at(object, "/metadata/namespace");
        let read = self.every_namespace || self.namespaces.contains(namespace);
        read.then(|| self.owners.get(uid).copied().unwrap_or_default())
    }
}

/// What a controller holds, counted through its pods read (`seen`: GPUs by
/// state and pods not finished): its bound unfinished pods are held, its
/// unbound ones requested, and so are the pods it wants and has not
/// created yet (`per_pod` GPUs each; for a workload custom resource, what
/// its spec asks, `workload`, beyond its pods, unless suspended).
pub fn through_pods(object: &Value, per_pod: i64, workload: i64, seen: (Holding, i64)) -> Holding {
    let (Holding { held, pending }, pods) = seen;
    let missing = if crate::k8s::workloads::template_kind_of(object).is_some() {
        per_pod
            .max(0)
            .saturating_mul((desired_pods(object) - pods).max(0))
    } else if suspended(object) {
        0
    } else {
        (workload - held - pending).max(0)
    };
    Holding {
        held,
        pending: pending.saturating_add(missing),
    }
}

/// The pods a built-in controller wants running now: its replicas; a
/// running Job's parallelism, up to the completions left; a DaemonSet's
/// `desiredNumberScheduled`. A CronJob is counted through its Jobs' pods.
fn desired_pods(object: &Value) -> i64 {
    match str_field(object, "kind") {
        "Deployment" | "StatefulSet" | "ReplicaSet" | "ReplicationController" => {
            count(object, "/spec/replicas", 1)
        }
        "Job" if flag(object, "/spec/suspend") || job_finished(object) => 0,
        "Job" => {
            let parallelism = count(object, "/spec/parallelism", 1);
            let succeeded = count(object, "/status/succeeded", 0);
            match int(object, "/spec/completions") {
                Some(completions) => parallelism.min((completions - succeeded).max(0)),
                None if succeeded > 0 => 0,
                None => parallelism,
            }
        }
        "DaemonSet" => count(object, "/status/desiredNumberScheduled", 0),
        _ => 0,
    }
}

/// What `object` holds, given the GPUs of one of its pods (`per_pod`) and,
/// for a workload custom resource, what its spec asks over all its
/// templates (`workload`).
///
/// - Pod: Succeeded or Failed holds 0; Running, or bound to a node
///   (`spec.nodeName`), holds its GPUs; otherwise they are requested, not
///   placed.
/// - Deployment, StatefulSet, ReplicaSet: `status.readyReplicas` pods are
///   held, the rest of `spec.replicas` requested; an object with no status
///   (a manifest) has placed nothing.
/// - Job: suspended (Kueue queues Jobs this way) or finished holds 0;
///   otherwise `status.ready` of its `status.active` pods are held, the
///   other active ones requested.
/// - DaemonSet: `status.numberReady` held, the rest of
///   `desiredNumberScheduled` requested.
/// - CronJob: suspended holds 0; otherwise one pod per Job in
///   `status.active`.
/// - Workload custom resources: suspended (`spec.suspend` or
///   `spec.runPolicy.suspend`) holds 0; otherwise `workload`, what the
///   spec asks (the caller passes 0 for an object in a state its
///   `PodTemplateSource` says holds nothing: `holdsNothingWhen`).
pub fn holding(object: &Value, per_pod: i64, workload: i64) -> Holding {
    let kind = str_field(object, "kind");
    let built_in = kind == "Pod" || crate::k8s::workloads::template_kind_of(object).is_some();
    if !built_in {
        return Holding {
            held: if suspended(object) {
                0
            } else {
                workload.max(0)
            },
            pending: 0,
        };
    }
    let per_pod = per_pod.max(0);
    if per_pod == 0 {
        return Holding::default();
    }
    let (held, pending) = match kind {
        "Pod" => pod_state(object),
        "Deployment" | "StatefulSet" | "ReplicaSet" => {
            let desired = count(object, "/spec/replicas", 1);
            match object.get("status").filter(|s| s.is_object()) {
                None => (0, desired),
                Some(_) => {
                    let ready = count(object, "/status/readyReplicas", 0);
                    (ready, (desired - ready).max(0))
                }
            }
        }
        "Job" => job_state(object),
        "DaemonSet" => {
            let desired = count(object, "/status/desiredNumberScheduled", 0);
            let ready = count(object, "/status/numberReady", 0);
            (ready, (desired - ready).max(0))
        }
        "CronJob" if flag(object, "/spec/suspend") => (0, 0),
        "CronJob" => {
            let active = object
                .at("/status/active")
                .and_then(Value::as_array)
                .map_or(0, |a| a.len() as i64);
            (active, 0)
        }
        _ => (1, 0),
    };
    Holding {
        held: per_pod.saturating_mul(held),
        pending: per_pod.saturating_mul(pending),
    }
}

/// (pods held, pods requested) of a Job.
fn job_state(job: &Value) -> (i64, i64) {
    if flag(job, "/spec/suspend") || job_finished(job) {
        return (0, 0);
    }
    match job.get("status").filter(|s| s.is_object()) {
        None => (0, count(job, "/spec/parallelism", 1)),
        Some(_) => {
            let active = count(job, "/status/active", 0);
            let ready = int(job, "/status/ready").map_or(active, |r| r.clamp(0, active));
            (ready, active - ready)
        }
    }
}

/// A Job whose `Complete` or `Failed` condition is true, or that has a
/// completion time.
fn job_finished(job: &Value) -> bool {
    let done = job
        .at("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                matches!(
                    c.get("type").and_then(Value::as_str),
                    Some("Complete" | "Failed" | "SuccessCriteriaMet" | "FailureTarget")
                ) && c.get("status").and_then(Value::as_str) == Some("True")
            })
        });
    done || job
        .at("/status/completionTime")
        .is_some_and(|t| !t.is_null())
}

/// Whether Kueue keeps `object` queued: suspended, with a queue name.
pub fn queued(object: &Value) -> bool {
    suspended(object)
        && crate::k8s::json::labels_of(Some(object)).contains_key(crate::kueue::QUEUE_NAME_LABEL)
}

/// A workload custom resource suspended (`spec.suspend`, or
/// `spec.runPolicy.suspend` of the Kubeflow jobs).
fn suspended(object: &Value) -> bool {
    flag(object, "/spec/suspend") || flag(object, "/spec/runPolicy/suspend")
}

fn flag(object: &Value, pointer: &str) -> bool {
    object.at(pointer).and_then(Value::as_bool) == Some(true)
}

fn int(object: &Value, pointer: &str) -> Option<i64> {
    object.at(pointer).and_then(Value::as_i64)
}

/// The count at `pointer`, or `default`; never below 0.
fn count(object: &Value, pointer: &str, default: i64) -> i64 {
    int(object, pointer).unwrap_or(default).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(object: Value) -> Holding {
        holding(&object, 2, 0)
    }

    fn h(held: i64, pending: i64) -> Holding {
        Holding { held, pending }
    }

    #[test]
    fn pods_hold_while_running_or_bound_and_request_while_pending() {
        let pod = |status: Value, node: Option<&str>| {
            let mut p = json!({"kind": "Pod", "spec": {}, "status": status});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
            }
            of(p)
        };
        assert_eq!(pod(json!({"phase": "Running"}), Some("n")), h(2, 0));
        assert_eq!(pod(json!({"phase": "Pending"}), Some("n")), h(2, 0));
        assert_eq!(pod(json!({"phase": "Pending"}), None), h(0, 2));
        assert_eq!(pod(json!({"phase": "Succeeded"}), Some("n")), h(0, 0));
        assert_eq!(pod(json!({"phase": "Failed"}), Some("n")), h(0, 0));
        assert_eq!(pod(Value::Null, None), h(0, 2), "a manifest is not placed");
    }

    #[test]
    fn jobs_count_their_active_pods_and_nothing_once_suspended_or_finished() {
        let job = |spec: Value, status: Value| {
            of(json!({"kind": "Job", "apiVersion": "batch/v1", "spec": spec, "status": status}))
        };
        let spec = json!({"parallelism": 4, "template": {"spec": {}}});
        assert_eq!(job(spec.clone(), json!({"active": 4, "ready": 3})), h(6, 2));
        assert_eq!(job(spec.clone(), json!({"active": 4})), h(8, 0));
        let complete = json!({"active": 0, "succeeded": 4, "completionTime": "2026-11-30T10:00:00Z",
            "conditions": [{"type": "Complete", "status": "True"}]});
        assert_eq!(job(spec.clone(), complete), h(0, 0));
        let failed = json!({"failed": 6, "conditions": [{"type": "Failed", "status": "True"}]});
        assert_eq!(job(spec.clone(), failed), h(0, 0));
        let mut suspended = spec.clone();
        suspended["suspend"] = json!(true);
        assert_eq!(job(suspended, json!({"active": 0})), h(0, 0));
        assert_eq!(
            of(json!({"kind": "Job", "apiVersion": "batch/v1", "spec": spec})),
            h(0, 8),
            "a Job manifest asks for its parallelism"
        );
    }

    #[test]
    fn replica_controllers_hold_their_ready_replicas() {
        let deployment = |status: Option<Value>| {
            let mut d = json!({"kind": "Deployment", "apiVersion": "apps/v1",
                "spec": {"replicas": 3, "template": {"spec": {}}}});
            if let Some(s) = status {
                d["status"] = s;
            }
            of(d)
        };
        assert_eq!(deployment(Some(json!({"readyReplicas": 2}))), h(4, 2));
        assert_eq!(deployment(Some(json!({}))), h(0, 6));
        assert_eq!(deployment(None), h(0, 6));
        let ds = json!({"kind": "DaemonSet", "apiVersion": "apps/v1", "spec": {"template": {"spec": {}}},
            "status": {"desiredNumberScheduled": 5, "numberReady": 4}});
        assert_eq!(of(ds), h(8, 2));
    }

    /// Through its pods, a controller holds its bound unfinished pods
    /// (ready or not) and requests its unbound ones and those it wants and
    /// has not created.
    #[test]
    fn controllers_read_through_their_pods_hold_what_is_bound() {
        let mut read = PodsRead::default();
        let pod = |node: Option<&str>, phase: &str| json!({"kind": "Pod", "spec": {"nodeName": node}, "status": {"phase": phase}});
        let deployment = json!({"kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": {"uid": "d", "namespace": "serving"},
            "spec": {"replicas": 3, "template": {"spec": {}}}, "status": {"readyReplicas": 1}});
        assert_eq!(read.of(&deployment), None, "no pod read in serving");
        assert_eq!(holding(&deployment, 2, 0), h(2, 4), "by status");
        read.namespaces.insert("serving".into());
        read.count("d", &pod(Some("a10-0"), "Running"), 2);
        read.count("d", &pod(Some("a10-1"), "Pending"), 2);
        read.count("d", &pod(None, "Succeeded"), 2);
        let seen = read.of(&deployment).unwrap();
        assert_eq!(seen, (h(4, 0), 2));
        assert_eq!(
            through_pods(&deployment, 2, 0, seen),
            h(4, 2),
            "a third not created"
        );
        read.count("d", &pod(None, "Pending"), 2);
        let seen = read.of(&deployment).unwrap();
        assert_eq!(through_pods(&deployment, 2, 0, seen), h(4, 2));

        let job = |spec: Value, status: Value| json!({"kind": "Job", "apiVersion": "batch/v1", "spec": spec, "status": status});
        let spec = json!({"parallelism": 4, "completions": 6, "template": {"spec": {}}});
        let one_running = (h(1, 0), 1);
        let running = job(spec.clone(), json!({"active": 1, "succeeded": 4}));
        assert_eq!(
            through_pods(&running, 1, 0, one_running),
            h(1, 1),
            "2 completions left"
        );
        let done = job(
            spec,
            json!({"conditions": [{"type": "Complete", "status": "True"}]}),
        );
        assert_eq!(
            through_pods(&done, 1, 0, one_running),
            h(1, 0),
            "a bound pod still holds"
        );
        let ds = json!({"kind": "DaemonSet", "apiVersion": "apps/v1", "spec": {"template": {"spec": {}}},
            "status": {"desiredNumberScheduled": 3}});
        assert_eq!(through_pods(&ds, 1, 0, (h(1, 1), 2)), h(1, 2));
        let torch = json!({"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1", "spec": {}});
        assert_eq!(
            through_pods(&torch, 1, 8, (h(4, 2), 6)),
            h(4, 4),
            "2 workers not created"
        );
        let parked = json!({"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1",
            "spec": {"runPolicy": {"suspend": true}}});
        assert_eq!(through_pods(&parked, 1, 8, (h(0, 0), 0)), h(0, 0));
    }

    #[test]
    fn cron_jobs_and_custom_workloads_stop_holding_when_suspended() {
        let cron = |suspend: bool| {
            of(json!({"kind": "CronJob", "apiVersion": "batch/v1",
                "spec": {"suspend": suspend, "jobTemplate": {"spec": {"template": {"spec": {}}}}},
                "status": {"active": [{"name": "a"}]}}))
        };
        assert_eq!(cron(false), h(2, 0));
        assert_eq!(cron(true), h(0, 0));
        let ray = json!({"kind": "RayJob", "apiVersion": "ray.io/v1", "spec": {"suspend": true}});
        assert_eq!(holding(&ray, 1, 9), h(0, 0));
        let torch = json!({"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1", "spec": {}});
        assert_eq!(holding(&torch, 1, 9), h(9, 0));
    }
}
