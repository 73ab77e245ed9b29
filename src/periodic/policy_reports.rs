//! The periodic report's findings as namespaced policy reports in the
//! [`Schema`] chosen (`wgpolicyk8s.io/v1alpha2` PolicyReports or
//! `openreports.io/v1alpha1` Reports), so `kubectl get policyreports -A`
//! (or `reports`) and Policy Reporter show them beside Kyverno's and
//! Kubewarden's: one report named [`REPORT_NAME`] per namespace with
//! findings, at most [`PolicyReportSettings::max_results`] entries (most
//! GPUs first), written only when its content changed, deleted once its
//! namespace has none. A report of that name another owner holds is
//! never overwritten: the sync names the namespace and the owner.
//!
//! The reports themselves are the state: each sync lists the ones labelled
//! as ours, so a replica that becomes leader updates what the previous one
//! wrote instead of writing them again. Writes are spaced to at most
//! [`PolicyReportSettings::writes_per_second`].
use crate::audit::policy_reports::{self, Schema, LEFT_OUT_ANNOTATION, MANAGER, REPORT_NAME};
use crate::audit::Report;
use crate::cluster::policy_reports::{managed_by, PolicyReportStore, ReportStoreError, MANAGED_BY};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Default of [`PolicyReportSettings::max_results`]: with messages capped
/// (at [`policy_reports::MAX_MESSAGE`] characters) a report stays far below
/// etcd's 1.5 MiB object limit.
pub const DEFAULT_MAX_RESULTS: usize = 1000;
/// Default of [`PolicyReportSettings::writes_per_second`].
pub const DEFAULT_WRITES_PER_SECOND: u32 = 5;

/// How the periodic report writes policy reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyReportSettings {
    /// The API the reports are written in.
    pub schema: Schema,
    /// Results in one namespace's report; the rest are counted in its
    /// summary and [`LEFT_OUT_ANNOTATION`].
    pub max_results: usize,
    /// Creates, replaces and deletes per second, at most.
    pub writes_per_second: u32,
}

impl Default for PolicyReportSettings {
    fn default() -> Self {
        PolicyReportSettings {
            schema: Schema::default(),
            max_results: DEFAULT_MAX_RESULTS,
            writes_per_second: DEFAULT_WRITES_PER_SECOND,
        }
    }
}

/// The report each namespace with findings (or with what exceptions let
/// through) should have, by namespace, as made at `at` (the timestamp of
/// results not seen before): the one writer's reports
/// ([`policy_reports::by_namespace`]) less the cluster-scoped one (there is
/// no namespace to write it in) and those of namespaces with nothing to
/// say.
pub fn desired_reports(
    report: &Report,
    at: SystemTime,
    max_results: usize,
    schema: Schema,
) -> BTreeMap<String, Value> {
    let mut reports = policy_reports::by_namespace(report, at, max_results, schema);
    reports.retain(|namespace, object| {
        let summary = &object["summary"];
        let said = ["fail", "warn", "skip"]
            .iter()
            .any(|k| summary[*k].as_u64().unwrap_or(0) > 0);
        !namespace.is_empty() && said
    });
    reports
}

/// What identifies a result from one run to the next.
fn result_key(result: &Value) -> String {
    let resource = &result["resources"][0];
    let object = match resource["uid"].as_str() {
        Some(uid) => uid.to_string(),
        None => format!(
            "{}/{}/{}",
            resource["kind"].as_str().unwrap_or_default(),
            resource["namespace"].as_str().unwrap_or_default(),
            resource["name"].as_str().unwrap_or_default()
        ),
    };
    format!(
        "{}\n{}\n{}\n{}",
        result["policy"].as_str().unwrap_or_default(),
        result["rule"].as_str().unwrap_or_default(),
        result["result"].as_str().unwrap_or_default(),
        object
    )
}

/// `desired` with the timestamps of the results `existing` already has:
/// a result's timestamp says when it was first reported.
fn keep_first_seen(desired: &mut Value, existing: &Value) {
    let results = crate::k8s::json::items(existing.get("results"));
    let seen: BTreeMap<String, &Value> =
        results.map(|r| (result_key(r), &r["timestamp"])).collect();
    if let Some(results) = desired["results"].as_array_mut() {
        for result in results {
            if let Some(first) = seen.get(&result_key(result)) {
                if first.is_object() {
                    result["timestamp"] = (*first).clone();
                }
            }
        }
    }
}

/// The replacement of `existing` by `desired`: `existing`'s metadata
/// (resourceVersion, other tools' labels and annotations) with ours set.
/// None when nothing we write differs.
fn replacement(existing: &Value, desired: &Value) -> Option<Value> {
    let entry = |report: &Value, field: &str, key: &str| {
        Some(report["metadata"][field][key].clone()).filter(|v| !v.is_null())
    };
    let left_out = |report: &Value| entry(report, "annotations", LEFT_OUT_ANNOTATION);
    let ours = |report: &Value| {
        let labelled = entry(report, "labels", MANAGED_BY);
        let (summary, results) = (report["summary"].clone(), report["results"].clone());
        (summary, results, left_out(report), labelled)
    };
    if ours(existing) == ours(desired) {
        return None;
    }
    let mut metadata = existing["metadata"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    set_entry(&mut metadata, "labels", MANAGED_BY, Some(json!(MANAGER)));
    let annotation = left_out(desired);
    set_entry(
        &mut metadata,
        "annotations",
        LEFT_OUT_ANNOTATION,
        annotation,
    );
    let mut object = desired.clone();
    object["metadata"] = Value::Object(metadata);
    Some(object)
}

/// Sets (or, with none, removes) `key` in the map `field` of `metadata`.
fn set_entry(metadata: &mut Map<String, Value>, field: &str, key: &str, value: Option<Value>) {
    let map = metadata
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if !map.is_object() {
        *map = Value::Object(Map::new());
    }
    let Some(map) = map.as_object_mut() else {
        return;
    };
    match value {
        Some(value) => {
            map.insert(key.to_string(), value);
        }
        None => {
            map.remove(key);
            if map.is_empty() {
                metadata.remove(field);
            }
        }
    }
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub deleted: usize,
    /// Writes lost to another writer (or a report deleted meanwhile): the
    /// next sync sees what they left and tries again.
    pub conflicts: usize,
    /// Namespaces whose report name another owner holds, with that owner
    /// ([`holder`]): nothing was written there.
    pub held_elsewhere: BTreeMap<String, String>,
    /// A `stop()` ended the sync before every write was made.
    pub stopped: bool,
}

/// Spaces writes to at most `per_second`.
struct WriteLimiter {
    spacing: Duration,
    next: Option<tokio::time::Instant>,
}

impl WriteLimiter {
    fn new(per_second: u32) -> WriteLimiter {
        WriteLimiter {
            spacing: Duration::from_secs(1) / per_second.max(1),
            next: None,
        }
    }

    /// When the next write may go, asked at `now`; books that slot.
    fn slot(&mut self, now: tokio::time::Instant) -> tokio::time::Instant {
        let at = self.next.map_or(now, |next| next.max(now));
        self.next = Some(at + self.spacing);
        at
    }

    async fn wait(&mut self) {
        let at = self.slot(tokio::time::Instant::now());
        tokio::time::sleep_until(at).await;
    }
}

/// Makes the PolicyReports in `store` say what `report` (made at `at`)
/// found: creates and updates the reports of namespaces with findings,
/// deletes ours in namespaces that have none. A `stop()` that says true
/// ends it between two writes.
pub async fn sync(
    store: &impl PolicyReportStore,
    report: &Report,
    at: SystemTime,
    settings: &PolicyReportSettings,
    stop: &dyn Fn() -> bool,
) -> Result<SyncOutcome, ReportStoreError> {
    // Only the report of our name in each namespace is ours to change:
    // the cluster role grants update and delete on that name alone.
    let mut existing: BTreeMap<String, Value> = store
        .list(MANAGER)
        .await?
        .into_iter()
        .filter(|found| crate::k8s::json::str_at(found, "/metadata/name") == REPORT_NAME)
        .map(|found| {
            let namespace = crate::k8s::json::str_at(&found, "/metadata/namespace").to_string();
            (namespace, found)
        })
        .collect();
    let desired = desired_reports(report, at, settings.max_results, settings.schema);
    let mut limiter = WriteLimiter::new(settings.writes_per_second);
    let mut outcome = SyncOutcome::default();
    for (namespace, mut wanted) in desired {
        let write = match existing.remove(&namespace) {
            Some(current) => {
                keep_first_seen(&mut wanted, &current);
                match replacement(&current, &wanted) {
                    Some(object) => Some((object, true)),
                    None => {
                        outcome.unchanged += 1;
                        None
                    }
                }
            }
            None => Some((wanted, false)),
        };
        let Some((object, replace)) = write else {
            continue;
        };
        if stop() {
            outcome.stopped = true;
            return Ok(outcome);
        }
        limiter.wait().await;
        let written = if replace {
            store.replace(&object).await
        } else {
            store.create(&object).await
        };
        match written {
            Ok(_) if replace => outcome.updated += 1,
            Ok(_) => outcome.created += 1,
            // Our name exists, and was not among ours when listed.
            Err(ReportStoreError::Conflict) if !replace => {
                match store.get(&namespace, REPORT_NAME).await {
                    Ok(Some(found)) if managed_by(&found, MANAGER) => outcome.conflicts += 1,
                    Ok(None) => outcome.conflicts += 1,
                    found => {
                        let owner = found.ok().flatten().map_or_else(
                            || "unknown (the report could not be read)".to_string(),
                            |found| holder(&found),
                        );
                        outcome.held_elsewhere.insert(namespace, owner);
                    }
                }
            }
            Err(ReportStoreError::Conflict) => outcome.conflicts += 1,
            Err(err) => return Err(err),
        }
    }
    for namespace in existing.into_keys() {
        if stop() {
            outcome.stopped = true;
            return Ok(outcome);
        }
        limiter.wait().await;
        store.delete(&namespace, REPORT_NAME).await?;
        outcome.deleted += 1;
    }
    Ok(outcome)
}

/// Who holds `found`, a report of our name that is not ours: its
/// managed-by label, else its first owner reference (`Kind/name`), else
/// the first field manager that wrote it.
pub fn holder(found: &Value) -> String {
    let metadata = &found["metadata"];
    let owner = &metadata["ownerReferences"][0];
    let label = metadata["labels"][MANAGED_BY].as_str();
    let reference = (owner["kind"].as_str())
        .map(|kind| format!("{kind}/{}", owner["name"].as_str().unwrap_or_default()));
    let manager = || metadata["managedFields"][0]["manager"].as_str();
    (label.map(str::to_string).or(reference))
        .or_else(|| manager().map(str::to_string))
        .unwrap_or_else(|| "unknown (no managed-by label, owner or field manager)".to_string())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::audit::policy_reports::MAX_MESSAGE;
    use crate::audit::{ExceptedFinding, Finding};
    use crate::periodic::metrics::tests::finding;
    use std::cell::RefCell;

    /// Reports in memory, with the API server's resourceVersions and
    /// conflicts; every write is recorded.
    #[derive(Default)]
    pub(crate) struct MemoryReports {
        pub(crate) stored: RefCell<BTreeMap<(String, String), Value>>,
        version: RefCell<u64>,
        pub(crate) writes: RefCell<Vec<String>>,
    }

    impl MemoryReports {
        fn key(report: &Value) -> (String, String) {
            (
                crate::k8s::json::str_at(report, "/metadata/namespace").to_string(),
                crate::k8s::json::str_at(report, "/metadata/name").to_string(),
            )
        }

        fn store(&self, mut report: Value) -> Value {
            *self.version.borrow_mut() += 1;
            report["metadata"]["resourceVersion"] = json!(self.version.borrow().to_string());
            self.stored
                .borrow_mut()
                .insert(Self::key(&report), report.clone());
            report
        }

        pub(crate) fn get(&self, namespace: &str) -> Option<Value> {
            self.stored
                .borrow()
                .get(&(namespace.to_string(), REPORT_NAME.to_string()))
                .cloned()
        }
    }

    impl PolicyReportStore for MemoryReports {
        async fn list(&self, manager: &str) -> Result<Vec<Value>, ReportStoreError> {
            Ok(self
                .stored
                .borrow()
                .values()
                .filter(|r| managed_by(r, manager))
                .cloned()
                .collect())
        }

        async fn get(
            &self,
            namespace: &str,
            name: &str,
        ) -> Result<Option<Value>, ReportStoreError> {
            let key = (namespace.to_string(), name.to_string());
            Ok(self.stored.borrow().get(&key).cloned())
        }

        async fn create(&self, report: &Value) -> Result<Value, ReportStoreError> {
            if self.stored.borrow().contains_key(&Self::key(report)) {
                return Err(ReportStoreError::Conflict);
            }
            self.writes
                .borrow_mut()
                .push(format!("create {}", Self::key(report).0));
            Ok(self.store(report.clone()))
        }

        async fn replace(&self, report: &Value) -> Result<Value, ReportStoreError> {
            let current = self.stored.borrow().get(&Self::key(report)).cloned();
            match current {
                Some(c)
                    if c["metadata"]["resourceVersion"]
                        == report["metadata"]["resourceVersion"] =>
                {
                    self.writes
                        .borrow_mut()
                        .push(format!("replace {}", Self::key(report).0));
                    Ok(self.store(report.clone()))
                }
                _ => Err(ReportStoreError::Conflict),
            }
        }

        async fn delete(&self, namespace: &str, name: &str) -> Result<(), ReportStoreError> {
            self.writes.borrow_mut().push(format!("delete {namespace}"));
            self.stored
                .borrow_mut()
                .remove(&(namespace.to_string(), name.to_string()));
            Ok(())
        }
    }

    fn report_of(findings: Vec<Finding>) -> Report {
        Report {
            findings,
            passed: BTreeMap::from([("ml".to_string(), 3)]),
            ..Report::default()
        }
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build();
        runtime.unwrap().block_on(future)
    }

    fn run(store: &MemoryReports, report: &Report, when: SystemTime, max: usize) -> SyncOutcome {
        let settings = PolicyReportSettings {
            max_results: max,
            writes_per_second: 1000,
            ..PolicyReportSettings::default()
        };
        block_on(sync(store, report, when, &settings, &|| false)).unwrap()
    }

    #[test]
    fn one_report_per_namespace_in_the_schema_policy_reporter_reads() {
        let mut denied = finding("gpu-privileged", Some("ml"), "deny", 8);
        denied.uid = Some("uid-1".into());
        let warned = finding("gpu-keep-alive", Some("ml"), "warn", 1);
        let audited = finding("gpu-sku-allowlist", Some("research"), "audit", 2);
        let cluster_scoped = finding("gpu-nodepool-taint", None, "deny", 16);
        let report = report_of(vec![warned, denied, audited, cluster_scoped]);
        let reports = desired_reports(&report, at(1_800_000_000), 10, Schema::PolicyReport);
        assert_eq!(reports.keys().collect::<Vec<_>>(), ["ml", "research"]);
        let ml = &reports["ml"];
        assert_eq!(ml["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(ml["kind"], "PolicyReport");
        assert_eq!(ml["metadata"]["name"], "gpu-admission");
        assert_eq!(ml["metadata"]["namespace"], "ml");
        assert_eq!(
            ml["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "gpu-admission"
        );
        assert!(ml["metadata"].get("annotations").is_none());
        assert_eq!(
            ml["summary"],
            json!({"pass": 3, "fail": 1, "warn": 1, "error": 0, "skip": 0})
        );
        let results = ml["results"].as_array().unwrap();
        // Most GPUs first.
        assert_eq!(
            results[0],
            json!({
                "source": "gpu-admission",
                "policy": "gpu-privileged",
                "rule": "gpu-privileged",
                "result": "fail",
                "scored": true,
                "severity": "high",
                "category": "GPU",
                "message": "m",
                "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ml", "uid": "uid-1"}],
                "properties": {"action": "deny", "gpus": "8"},
                "timestamp": {"seconds": 1_800_000_000u64, "nanos": 0},
            })
        );
        assert_eq!(results[1]["result"], "warn");
        assert_eq!(results[1]["severity"], "medium");
        assert_eq!(results[1]["properties"]["gpus"], "1");
        let research = &reports["research"]["results"][0];
        assert_eq!(research["result"], "warn", "an audited violation warns");
        assert_eq!(research["severity"], "medium");
        assert_eq!(reports["research"]["summary"]["pass"], 0);
    }

    #[test]
    fn what_exceptions_let_through_is_skipped_with_the_exception_named() {
        let excepted = |namespace: &str, gpus: i64| ExceptedFinding {
            policy: "gpu-privileged".into(),
            action: "deny",
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some(namespace.into()),
            name: "nccl-bench".into(),
            message: "container bench is privileged".into(),
            exception: format!("{namespace}/nccl-bench"),
            reason: "NCCL benchmark, one day".into(),
            expires_at: Some("2026-12-31T00:00:00Z".into()),
            gpus,
        };
        let mut report = report_of(vec![finding("gpu-keep-alive", Some("research"), "warn", 1)]);
        report.excepted = vec![excepted("research", 8), excepted("bench", 1)];
        let reports = desired_reports(&report, at(1_800_000_000), 10, Schema::PolicyReport);
        // A namespace with only excepted results still has its report.
        assert_eq!(reports.keys().collect::<Vec<_>>(), ["bench", "research"]);
        let research = &reports["research"];
        assert_eq!(
            research["summary"],
            json!({"pass": 0, "fail": 0, "warn": 1, "error": 0, "skip": 1})
        );
        // Findings first, whatever the GPUs of what was let through.
        assert_eq!(research["results"][0]["result"], "warn");
        assert_eq!(
            research["results"][1],
            json!({
                "source": "gpu-admission",
                "policy": "gpu-privileged",
                "rule": "gpu-privileged",
                "result": "skip",
                "scored": true,
                "severity": "info",
                "category": "GPU",
                "message": "container bench is privileged (allowed by exception research/nccl-bench (NCCL benchmark, one day, expires 2026-12-31T00:00:00Z))",
                "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "nccl-bench", "namespace": "research"}],
                "properties": {
                    "action": "deny",
                    "gpus": "8",
                    "exception": "research/nccl-bench",
                    "exceptionReason": "NCCL benchmark, one day",
                    "exceptionExpiresAt": "2026-12-31T00:00:00Z",
                },
                "timestamp": {"seconds": 1_800_000_000u64, "nanos": 0},
            })
        );
        // The bound counts skipped results too.
        let bounded = desired_reports(&report, at(1_800_000_000), 1, Schema::PolicyReport);
        let research = &bounded["research"];
        assert_eq!(research["results"].as_array().unwrap().len(), 1);
        assert_eq!(research["results"][0]["result"], "warn");
        assert_eq!(
            research["metadata"]["annotations"][LEFT_OUT_ANNOTATION],
            "1"
        );
    }

    #[test]
    fn a_namespace_beyond_the_bound_keeps_its_costliest_results_and_counts_the_rest() {
        let findings: Vec<Finding> = (0..7)
            .map(|i| {
                let mut f = finding("gpu-privileged", Some("ml"), "deny", i);
                f.name = format!("w-{i}");
                f
            })
            .collect();
        let reports = desired_reports(&report_of(findings), at(0), 3, Schema::PolicyReport);
        let ml = &reports["ml"];
        let gpus: Vec<&str> = ml["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["properties"]["gpus"].as_str().unwrap())
            .collect();
        assert_eq!(gpus, ["6", "5", "4"]);
        assert_eq!(ml["summary"]["fail"], 7, "the summary counts every finding");
        assert_eq!(
            ml["metadata"]["annotations"]["gpu-admission.io/results-left-out"],
            "4"
        );
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let mut f = finding("gpu-privileged", Some("ml"), "deny", 1);
        f.message = "é".repeat(MAX_MESSAGE + 10);
        let reports = desired_reports(&report_of(vec![f]), at(0), 10, Schema::PolicyReport);
        let message = reports["ml"]["results"][0]["message"].as_str().unwrap();
        assert_eq!(message.chars().count(), MAX_MESSAGE + 1);
        assert!(message.ends_with('…'));
    }

    #[test]
    fn reports_are_created_updated_only_on_change_and_deleted_with_their_findings() {
        let store = MemoryReports::default();
        let a = finding("gpu-privileged", Some("ml"), "deny", 2);
        let b = finding("gpu-keep-alive", Some("batch"), "warn", 1);
        let first = run(&store, &report_of(vec![a.clone(), b.clone()]), at(100), 10);
        assert_eq!((first.created, first.updated, first.deleted), (2, 0, 0));

        // The same findings later: nothing is written.
        let again = run(&store, &report_of(vec![a.clone(), b.clone()]), at(200), 10);
        assert_eq!(again.unchanged, 2);
        assert_eq!(store.writes.borrow().len(), 2);

        // A new finding in ml: its report is replaced; the old result
        // keeps the time it was first seen.
        let c = finding("gpu-sku-allowlist", Some("ml"), "audit", 4);
        let third = run(&store, &report_of(vec![a, b, c]), at(300), 10);
        assert_eq!((third.updated, third.unchanged), (1, 1));
        let ml = store.get("ml").unwrap();
        let seconds: Vec<(String, u64)> = ml["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["policy"].as_str().unwrap().to_string(),
                    r["timestamp"]["seconds"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            seconds,
            [
                ("gpu-sku-allowlist".to_string(), 300),
                ("gpu-privileged".to_string(), 100)
            ]
        );

        // No finding left anywhere: both reports go.
        let last = run(&store, &report_of(vec![]), at(400), 10);
        assert_eq!(last.deleted, 2);
        assert!(store.stored.borrow().is_empty());
    }

    #[test]
    fn reports_of_other_tools_are_left_alone_and_their_labels_on_ours_kept() {
        let store = MemoryReports::default();
        let kyverno = json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": "cpol-require-labels", "namespace": "ml",
                         "labels": {MANAGED_BY: "kyverno"}},
            "results": [],
        });
        store.store(kyverno.clone());
        run(
            &store,
            &report_of(vec![finding("gpu-privileged", Some("ml"), "deny", 2)]),
            at(1),
            10,
        );
        // Someone labels our report (a GitOps tool, a person).
        let mut ours = store.get("ml").unwrap();
        ours["metadata"]["labels"]["team"] = json!("ml-platform");
        store.store(ours);
        run(
            &store,
            &report_of(vec![finding("gpu-privileged", Some("ml"), "deny", 3)]),
            at(2),
            10,
        );
        let ours = store.get("ml").unwrap();
        assert_eq!(ours["metadata"]["labels"]["team"], "ml-platform");
        assert_eq!(ours["results"][0]["properties"]["gpus"], "3");
        run(&store, &report_of(vec![]), at(3), 10);
        let left: Vec<Value> = store.stored.borrow().values().cloned().collect();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0]["metadata"]["name"], "cpol-require-labels");
    }

    #[test]
    fn a_conflicting_write_is_counted_and_the_next_sync_catches_up() {
        let store = MemoryReports::default();
        run(
            &store,
            &report_of(vec![finding("gpu-privileged", Some("ml"), "deny", 2)]),
            at(1),
            10,
        );
        // Another writer changes it between our list and our replace.
        struct Racing<'a>(&'a MemoryReports);
        impl PolicyReportStore for Racing<'_> {
            async fn list(&self, manager: &str) -> Result<Vec<Value>, ReportStoreError> {
                let listed = self.0.list(manager).await;
                let current = self.0.get("ml").unwrap();
                self.0.store(current);
                listed
            }
            async fn get(&self, ns: &str, name: &str) -> Result<Option<Value>, ReportStoreError> {
                PolicyReportStore::get(self.0, ns, name).await
            }
            async fn create(&self, r: &Value) -> Result<Value, ReportStoreError> {
                self.0.create(r).await
            }
            async fn replace(&self, r: &Value) -> Result<Value, ReportStoreError> {
                self.0.replace(r).await
            }
            async fn delete(&self, ns: &str, name: &str) -> Result<(), ReportStoreError> {
                self.0.delete(ns, name).await
            }
        }
        let report = report_of(vec![finding("gpu-privileged", Some("ml"), "deny", 5)]);
        let settings = PolicyReportSettings::default();
        let raced = block_on(sync(&Racing(&store), &report, at(2), &settings, &|| false)).unwrap();
        assert_eq!(raced.conflicts, 1);
        let caught_up = run(&store, &report, at(3), 10);
        assert_eq!(caught_up.updated, 1);
        assert_eq!(
            store.get("ml").unwrap()["results"][0]["properties"]["gpus"],
            "5"
        );
    }

    #[test]
    fn a_report_name_another_owner_holds_is_left_alone_and_named_with_its_owner() {
        let store = MemoryReports::default();
        let theirs = |namespace: &str, metadata: Value| {
            let mut object = json!({
                "apiVersion": "openreports.io/v1alpha1", "kind": "Report",
                "metadata": {"name": REPORT_NAME, "namespace": namespace}, "results": [],
            });
            object["metadata"]
                .as_object_mut()
                .unwrap()
                .extend(metadata.as_object().unwrap().clone());
            store.store(object)
        };
        let kubewarden = theirs("ml", json!({"labels": {MANAGED_BY: "kubewarden"}}));
        theirs(
            "batch",
            json!({"ownerReferences": [{"kind": "ClusterPolicy", "name": "require-labels"}]}),
        );
        theirs(
            "serving",
            json!({"managedFields": [{"manager": "kubectl-create", "operation": "Update"}]}),
        );
        let findings = ["ml", "batch", "serving", "research"]
            .iter()
            .map(|ns| finding("gpu-privileged", Some(ns), "deny", 1))
            .collect();
        let settings = PolicyReportSettings {
            schema: Schema::OpenReports,
            writes_per_second: 1000,
            ..PolicyReportSettings::default()
        };
        let done = block_on(sync(
            &store,
            &report_of(findings),
            at(1),
            &settings,
            &|| false,
        ));
        let done = done.unwrap();
        assert_eq!(
            done.held_elsewhere,
            BTreeMap::from([
                (
                    "batch".to_string(),
                    "ClusterPolicy/require-labels".to_string()
                ),
                ("ml".to_string(), "kubewarden".to_string()),
                ("serving".to_string(), "kubectl-create".to_string()),
            ])
        );
        assert_eq!(
            (done.created, done.conflicts),
            (1, 0),
            "research is written"
        );
        assert_eq!(
            store.get("ml").unwrap(),
            kubewarden,
            "theirs is not touched"
        );
        assert_eq!(store.get("research").unwrap()["kind"], "Report");
        assert_eq!(
            holder(&json!({"metadata": {}})),
            "unknown (no managed-by label, owner or field manager)"
        );
    }

    #[test]
    fn reports_in_either_schema_hold_the_same_results() {
        let mut report = report_of(vec![
            finding("gpu-privileged", Some("ml"), "deny", 8),
            finding("gpu-keep-alive", Some("ml"), "warn", 1),
        ]);
        report.passed.insert(String::new(), 2);
        let by = |schema| policy_reports::by_namespace(&report, at(1_800_000_000), 10, schema);
        let (policy, open) = (by(Schema::PolicyReport), by(Schema::OpenReports));
        for namespace in ["", "ml"] {
            for field in ["summary", "results"] {
                assert_eq!(
                    policy[namespace][field], open[namespace][field],
                    "{namespace} {field}"
                );
            }
            assert_eq!(policy[namespace]["metadata"], open[namespace]["metadata"]);
        }
        let ml = &open["ml"];
        assert_eq!(
            (&ml["apiVersion"], &ml["kind"]),
            (&json!("openreports.io/v1alpha1"), &json!("Report"))
        );
        assert_eq!(ml["source"], "gpu-admission");
        assert_eq!(
            ml["scope"],
            json!({"apiVersion": "v1", "kind": "Namespace", "name": "ml"})
        );
        assert_eq!(open[""]["kind"], "ClusterReport");
        assert!(open[""].get("scope").is_none());
        assert_eq!(policy[""]["kind"], "ClusterPolicyReport");
        // The PolicyReports are today's: no field of the other schema.
        assert!(policy["ml"].get("source").is_none() && policy["ml"].get("scope").is_none());
        assert_eq!(policy["ml"]["kind"], "PolicyReport");
    }

    #[test]
    fn a_stop_ends_the_sync_between_writes() {
        let store = MemoryReports::default();
        let findings = ["a", "b", "c"]
            .iter()
            .map(|ns| finding("gpu-privileged", Some(ns), "deny", 1))
            .collect();
        let writes = std::cell::Cell::new(0);
        let outcome = block_on(sync(
            &store,
            &report_of(findings),
            at(1),
            &PolicyReportSettings::default(),
            &|| {
                writes.set(writes.get() + 1);
                writes.get() > 1
            },
        ))
        .unwrap();
        assert!(outcome.stopped);
        assert_eq!(outcome.created, 1);
    }

    #[test]
    fn writes_are_spaced_to_the_rate() {
        let mut limiter = WriteLimiter::new(4);
        let start = tokio::time::Instant::now();
        let slots: Vec<Duration> = (0..3).map(|_| limiter.slot(start) - start).collect();
        assert_eq!(
            slots,
            [
                Duration::ZERO,
                Duration::from_millis(250),
                Duration::from_millis(500)
            ]
        );
        // After a pause the next write goes at once, then the spacing again.
        let later = start + Duration::from_secs(10);
        assert_eq!(limiter.slot(later), later);
        assert_eq!(limiter.slot(later), later + Duration::from_millis(250));
    }
}
