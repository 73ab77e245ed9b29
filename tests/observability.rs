//! The shipped Grafana dashboard and PrometheusRule alerts
//! (deploy/observability/) against what a running server exports: their
//! structure, and every metric name their PromQL uses present in the
//! `/metrics` of the real server after a few reviews (the audit families
//! included, as the periodic report leaves them). And the shipped
//! ServiceMonitor as Prometheus Operator turns it into a scrape
//! configuration, run by a real Prometheus against `serve` in a cluster:
//! the namespace a series describes survives the target's labels.
use crate::common;

use common::{admission_review, config, fixture, TestServer};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::k8s::StaticNamespaces;
use gpu_admission::periodic::{AuditMetrics, RunMeta};
use gpu_admission::server::Metrics;
use regex::Regex;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

fn repo_file(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Series Prometheus makes itself for every target.
const SCRAPE_SERIES: &[&str] = &["up"];

/// What a `/metrics` page declares: each family's type, every sample
/// name, and every label name.
struct Exposition {
    families: BTreeMap<String, String>,
    samples: BTreeSet<String>,
    labels: BTreeSet<String>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut families = BTreeMap::new();
        let mut samples = BTreeSet::new();
        let mut labels = BTreeSet::new();
        let label = Regex::new(r#"([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*""#).unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split_whitespace();
                let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                    panic!("malformed TYPE line {line:?}");
                };
                families.insert(name.to_string(), kind.to_string());
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let end = line.find(['{', ' ']).unwrap_or(line.len());
                samples.insert(line[..end].to_string());
                let set = line[end..].rsplit_once('}').map_or("", |(set, _)| set);
                labels.extend(label.captures_iter(set).map(|c| c[1].to_string()));
            }
        }
        Exposition {
            families,
            samples,
            labels,
        }
    }

    /// Whether a query naming `name` can find it: a sample exported now,
    /// or a series of a declared family not yet observed (a counter's
    /// `_total`, a gauge's own name, a histogram's `_bucket`, `_sum` and
    /// `_count`).
    fn has(&self, name: &str) -> bool {
        if self.samples.contains(name) || SCRAPE_SERIES.contains(&name) {
            return true;
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                if self.families.get(base).map(String::as_str) == Some("histogram") {
                    return true;
                }
            }
        }
        if let Some(base) = name.strip_suffix("_total") {
            if self.families.get(base).map(String::as_str) == Some("counter") {
                return true;
            }
        }
        matches!(
            self.families.get(name).map(String::as_str),
            Some("gauge" | "unknown")
        )
    }
}

/// The metric names a PromQL expression reads: label matchers, ranges,
/// strings, grouping clauses, functions, keywords and numbers left out.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let strip = [
        r#""(?:[^"\\]|\\.)*""#,
        r"'(?:[^'\\]|\\.)*'",
        r"\{[^}]*\}",
        r"\[[^\]]*\]",
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)",
        r"\$\{?\w+\}?",
    ];
    let mut text = expr.to_string();
    for pattern in strip {
        text = Regex::new(pattern)
            .unwrap()
            .replace_all(&text, " ")
            .into_owned();
    }
    let keywords = [
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "inf",
        "nan",
        "by",
        "without",
        "group_left",
        "group_right",
        "on",
        "ignoring",
    ];
    let token = Regex::new(r"[0-9][0-9A-Za-z_.]*|[A-Za-z_:][A-Za-z0-9_:]*").unwrap();
    let mut names = BTreeSet::new();
    for m in token.find_iter(&text) {
        let word = m.as_str();
        if word.starts_with(|c: char| c.is_ascii_digit()) || keywords.contains(&word) {
            continue;
        }
        if text[m.end()..].trim_start().starts_with('(') {
            continue; // a function or aggregation
        }
        names.insert(word.to_string());
    }
    names
}

/// The metric names in `queries` (where, PromQL) that `exported` lacks.
fn missing(queries: &[(String, String)], exported: &Exposition) -> Vec<String> {
    let mut out = Vec::new();
    for (place, expr) in queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{place}: no metric in {expr:?}");
        for name in names {
            if !exported.has(&name) {
                out.push(format!("{place}: {name}"));
            }
        }
    }
    out
}

/// The dashboard's queries, after checking its structure: a datasource
/// variable every panel and target uses, unique panel ids, each panel
/// placed on the 24-column grid with at least one target with an
/// expression and unique refIds.
fn dashboard_queries(dashboard: &Value) -> Result<Vec<(String, String)>, Vec<String>> {
    let mut problems = Vec::new();
    let mut queries = Vec::new();
    for field in ["title", "uid", "schemaVersion"] {
        if dashboard.get(field).is_none() {
            problems.push(format!("no {field}"));
        }
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let datasource = variables
        .iter()
        .find(|v| v["type"] == "datasource" && v["query"] == "prometheus");
    let Some(datasource) = datasource.and_then(|v| v["name"].as_str()) else {
        return Err(vec!["no Prometheus datasource variable".into()]);
    };
    let uses_variable = |ds: &Value| {
        ds["uid"] == format!("${{{datasource}}}") || ds["uid"] == format!("${datasource}")
    };
    let inner = Regex::new(r"^label_values\((.*?)(?:,\s*\w+)?\)$").unwrap();
    for variable in &variables {
        if variable["type"] == "query" {
            let query = variable["query"]["query"]
                .as_str()
                .or(variable["query"].as_str())
                .unwrap_or_default();
            match inner.captures(query) {
                Some(c) => {
                    queries.push((format!("variable {}", variable["name"]), c[1].to_string()))
                }
                None => problems.push(format!(
                    "variable {}: not a label_values query: {query:?}",
                    variable["name"]
                )),
            }
            if !uses_variable(&variable["datasource"]) {
                problems.push(format!(
                    "variable {} does not use ${datasource}",
                    variable["name"]
                ));
            }
        }
    }
    let Some(panels) = dashboard["panels"].as_array().filter(|p| !p.is_empty()) else {
        return Err(vec!["no panels".into()]);
    };
    let mut all = Vec::new();
    for panel in panels {
        all.push(panel);
        all.extend(panel["panels"].as_array().into_iter().flatten());
    }
    let mut ids = BTreeSet::new();
    let mut charts = 0;
    for panel in all {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        match panel["id"].as_u64() {
            Some(id) if ids.insert(id) => {}
            Some(id) => problems.push(format!("panel {title:?}: id {id} is not unique")),
            None => problems.push(format!("panel {title:?}: no id")),
        }
        let pos = &panel["gridPos"];
        let (x, w) = (pos["x"].as_u64(), pos["w"].as_u64());
        if pos["h"].as_u64().is_none()
            || pos["y"].as_u64().is_none()
            || !matches!((x, w), (Some(x), Some(w)) if w > 0 && x + w <= 24)
        {
            problems.push(format!("panel {title:?}: gridPos {pos} is off the grid"));
        }
        if panel["type"] == "row" {
            continue;
        }
        charts += 1;
        if !uses_variable(&panel["datasource"]) {
            problems.push(format!("panel {title:?}: datasource is not ${datasource}"));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title:?}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for target in targets {
            let ref_id = target["refId"].as_str().unwrap_or_default().to_string();
            if ref_id.is_empty() || !refs.insert(ref_id.clone()) {
                problems.push(format!(
                    "panel {title:?}: refId {ref_id:?} missing or repeated"
                ));
            }
            if !uses_variable(&target["datasource"]) {
                problems.push(format!(
                    "panel {title:?} {ref_id}: datasource is not ${datasource}"
                ));
            }
            match target["expr"].as_str().filter(|e| !e.trim().is_empty()) {
                Some(expr) => queries.push((format!("panel {title:?} {ref_id}"), expr.to_string())),
                None => problems.push(format!("panel {title:?} {ref_id}: no expr")),
            }
        }
    }
    if charts == 0 {
        problems.push("no panel with queries".into());
    }
    if problems.is_empty() {
        Ok(queries)
    } else {
        Err(problems)
    }
}

/// Headings of docs/operations.md as GitHub anchors them (comments in
/// code blocks are not headings).
fn doc_anchors() -> BTreeSet<String> {
    let mut in_code = false;
    repo_file("docs/operations.md")
        .lines()
        .filter(|l| {
            if l.starts_with("```") {
                in_code = !in_code;
            }
            !in_code && l.starts_with('#')
        })
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

fn is_duration(text: &str) -> bool {
    Regex::new(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
        .unwrap()
        .is_match(text)
}

/// The rules' queries (alert name, PromQL), after checking the
/// PrometheusRule's structure: groups of rules, each alert with an
/// expression, a valid `for` when it has one, a severity, and a summary,
/// description and runbook whose docs/operations.md anchor exists.
fn rule_queries(rules: &Value) -> Result<Vec<(String, String)>, Vec<String>> {
    let mut problems = Vec::new();
    if rules["apiVersion"] != "monitoring.coreos.com/v1" || rules["kind"] != "PrometheusRule" {
        problems.push("not a monitoring.coreos.com/v1 PrometheusRule".to_string());
    }
    if rules["metadata"]["name"].as_str().is_none() {
        problems.push("no metadata.name".into());
    }
    let anchors = doc_anchors();
    let runbook_link = Regex::new(r"docs/operations\.md#([a-z0-9_-]+)").unwrap();
    let mut queries = Vec::new();
    let mut alerts = BTreeSet::new();
    let groups = rules["spec"]["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if groups.is_empty() {
        problems.push("no spec.groups".into());
    }
    for group in groups {
        let group_name = group["name"].as_str().unwrap_or_default().to_string();
        if group_name.is_empty() {
            problems.push("a group without a name".into());
        }
        let list = group["rules"].as_array().cloned().unwrap_or_default();
        if list.is_empty() {
            problems.push(format!("group {group_name:?}: no rules"));
        }
        for rule in list {
            let Some(alert) = rule["alert"].as_str() else {
                problems.push(format!("group {group_name:?}: a rule that is not an alert"));
                continue;
            };
            if !alerts.insert(alert.to_string()) {
                problems.push(format!("{alert}: defined twice"));
            }
            match rule["expr"].as_str().filter(|e| !e.trim().is_empty()) {
                Some(expr) => queries.push((alert.to_string(), expr.to_string())),
                None => problems.push(format!("{alert}: no expr")),
            }
            if let Some(value) = rule.get("for") {
                if !value.as_str().is_some_and(is_duration) {
                    problems.push(format!("{alert}: for {value} is not a duration"));
                }
            }
            if !matches!(
                rule["labels"]["severity"].as_str(),
                Some("critical" | "warning" | "info")
            ) {
                problems.push(format!(
                    "{alert}: labels.severity is not critical, warning or info"
                ));
            }
            for annotation in ["summary", "description", "runbook"] {
                if rule["annotations"][annotation]
                    .as_str()
                    .is_none_or(|t| t.trim().len() < 10)
                {
                    problems.push(format!("{alert}: no {annotation} annotation"));
                }
            }
            let runbook = rule["annotations"]["runbook"].as_str().unwrap_or_default();
            match runbook_link.captures(runbook) {
                Some(c) if anchors.contains(&c[1]) => {}
                Some(c) => problems.push(format!(
                    "{alert}: runbook links docs/operations.md#{} , which has no such heading",
                    &c[1]
                )),
                None => problems.push(format!(
                    "{alert}: runbook names no docs/operations.md section"
                )),
            }
        }
    }
    if problems.is_empty() {
        Ok(queries)
    } else {
        Err(problems)
    }
}

fn dashboard() -> Value {
    serde_json::from_str(&repo_file("deploy/observability/grafana-dashboard.json"))
        .expect("the dashboard is JSON")
}

fn rules() -> Value {
    serde_yaml::from_str(&repo_file("deploy/observability/prometheus-rules.yaml"))
        .expect("the rules are YAML")
}

/// The report with what the fixture dump cannot give: a pool with a GPU
/// reported unhealthy, a utilization section with GPU-seconds per
/// namespace and class, and idle pods priced.
fn with_efficiency_and_health(
    mut report: gpu_admission::audit::Report,
) -> gpu_admission::audit::Report {
    use gpu_admission::audit::{nodes::PoolRow, utilization, Money, NamespaceRow};
    let pool = PoolRow {
        pool: "a100".into(),
        size: "Standard_NC24ads_A100_v4".into(),
        gpus_allocatable: 3,
        gpus_unusable: 1,
        ..PoolRow::default()
    };
    report
        .nodes
        .get_or_insert_with(Default::default)
        .pools
        .push(pool);
    let mut training = utilization::Efficiency::default();
    (training.gpu_seconds_allocated, training.gpu_seconds_used) = (7200.0, 1800.0);
    report.utilization = Some(utilization::Utilization {
        source: "file answer.json".into(),
        window: "1h".into(),
        window_seconds: 3600,
        threshold_percent: 5.0,
        sizing: utilization::sizing::DEFAULT_RULES,
        missing: None,
        measured: Some(utilization::Measured {
            by_class: [(utilization::TRAINING, training)].into(),
            ..Default::default()
        }),
    });
    let ml = NamespaceRow {
        gpu_seconds_allocated: Some(7200.0),
        gpu_seconds_used: Some(1800.0),
        ..Default::default()
    };
    report.namespaces.insert("ml".into(), ml);
    report.money = Some(Money {
        currency: "USD".into(),
        idle_pods_per_day: Some(86.4),
        ..Default::default()
    });
    report
}

/// `/metrics` of the real server, over the shipped policies, after a GPU
/// pod was placed and validated and a privileged one denied, with the
/// audit families as a periodic report run leaves them.
async fn scrape() -> Exposition {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let admission = Arc::new(Admission::new(
        loaded.bundle,
        Arc::new(StaticNamespaces::new()),
    ));
    let mut audit_metrics = None;
    // The families serve registers beside the server's own.
    let metrics = Metrics::with_families(|registry| {
        audit_metrics = Some(AuditMetrics::register(registry));
        gpu_admission::cluster::exceptions::metrics::ExceptionMetrics::register(registry);
        gpu_admission::cluster::budgets::metrics::BudgetMetrics::register(registry);
        // A watched cache's series exist once it starts.
        let caches = gpu_admission::cluster::watch::CacheMetrics::register(registry);
        caches.failures("nodes");
        caches.skipped("nodes");
    });
    let objects = gpu_admission::offline::read_manifest(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit/cluster-list.json"),
    )
    .unwrap();
    let judge = admission.clone();
    let report = gpu_admission::offline::with_evaluation_stack(move || {
        gpu_admission::audit::audit(&judge, &objects)
    })
    .unwrap();
    assert!(!report.findings.is_empty());
    let report = with_efficiency_and_health(report);
    let audit_metrics = audit_metrics.unwrap();
    audit_metrics.record(
        &report,
        &RunMeta {
            generated_at: SystemTime::now(),
            duration: Duration::from_millis(40),
            about: gpu_admission::audit::ReportMeta::now(
                gpu_admission::audit::ReportSource::Cluster("https://aks.example:443".into()),
                "built-in policies".into(),
                String::new(),
                &admission.bundle(),
                "built-in".into(),
            ),
        },
    );
    audit_metrics.set_leader(true);
    audit_metrics.set_report_conflicts(&[("ml".to_string(), "kubewarden".to_string())].into());

    let server = TestServer::start_with_metrics(config(), admission, metrics).await;
    let placed = fixture("pod-create-gpu.json");
    for path in ["/mutate", "/validate"] {
        let (status, answer) = server.post_review(path, &placed).await;
        assert_eq!(status, 200, "{answer}");
    }
    let privileged = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "jupyter", "namespace": "ml"},
        "spec": {"containers": [{"name": "jupyter", "image": "jupyter/base-notebook",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "securityContext": {"privileged": true}}]},
    });
    let review = admission_review("6c2a", "CREATE", &privileged, None, "alice");
    let (_, answer) = server.post_review("/validate", &review).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let (status, text) = server.get_metrics_listener("/metrics").await;
    assert_eq!(status, 200);
    server.stop().await;
    Exposition::parse(&text)
}

#[test]
fn metric_names_leave_out_everything_but_metrics() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, endpoint) (rate(gpu_admission_request_duration_seconds_bucket{job=~"$job", endpoint="mutate"}[$__rate_interval]))) > 2.4
           or sum(rate(gpu_admission_requests_total{decision="denied"}[1d] offset 10m)) > 3 * up unless on (instance) x_y:z
           and time() - max(gpu_admission_audit_last_run_timestamp_seconds > 0) < 7 * 86400 + 1e3"#,
    );
    let expected: BTreeSet<String> = [
        "gpu_admission_request_duration_seconds_bucket",
        "gpu_admission_requests_total",
        "up",
        "x_y:z",
        "gpu_admission_audit_last_run_timestamp_seconds",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(names, expected);
}

#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_query_is_exported() {
    let exported = scrape().await;
    // The audit families and the rest, with samples where observed.
    for name in [
        "gpu_admission_requests_total",
        "gpu_admission_policy_evaluations_total",
        "gpu_admission_audit_gpus_held",
        "gpu_admission_audit_violations",
    ] {
        assert!(exported.samples.contains(name), "no {name} samples");
    }
    let dashboard = dashboard_queries(&dashboard()).unwrap_or_else(|p| panic!("{p:#?}"));
    assert!(dashboard.len() >= 20, "{dashboard:#?}");
    let alerts = rule_queries(&rules()).unwrap_or_else(|p| panic!("{p:#?}"));
    let missing_names: Vec<String> = missing(&dashboard, &exported)
        .into_iter()
        .chain(missing(&alerts, &exported))
        .collect();
    assert!(
        missing_names.is_empty(),
        "queried but not exported:\n{}",
        missing_names.join("\n")
    );

    // The dashboard covers what operators look for.
    let text: String = dashboard.iter().map(|(_, e)| e.as_str()).collect();
    for wanted in [
        "gpu_admission_request_duration_seconds_bucket",
        "result=\"deny\"",
        "result=\"warn\"",
        "gpu_admission_audit_gpus_held",
        "gpu_admission_policy_reload_failures_total",
        "gpu_admission_certificate_expiry_seconds",
        "gpu_admission_evaluation_slots_in_use",
        "gpu_admission_queue_wait_seconds_bucket",
    ] {
        assert!(
            text.contains(wanted),
            "the dashboard never queries {wanted}"
        );
    }
}

#[tokio::test]
async fn a_misspelt_metric_in_a_copy_of_the_dashboard_or_the_rules_is_caught() {
    let exported = scrape().await;
    let original = repo_file("deploy/observability/grafana-dashboard.json");
    for (right, wrong) in [
        (
            "gpu_admission_requests_total",
            "gpu_admission_request_total",
        ),
        // A counter's family name is not a series.
        ("gpu_admission_requests_total", "gpu_admission_requests"),
        // Only histograms have _count.
        (
            "gpu_admission_policies_loaded",
            "gpu_admission_policies_loaded_count",
        ),
        (
            "gpu_admission_audit_gpus_held",
            "gpu_admission_audit_gpu_held",
        ),
    ] {
        assert!(original.contains(right), "{right}");
        let copy: Value = serde_json::from_str(&original.replacen(right, wrong, 1)).unwrap();
        let queries = dashboard_queries(&copy).unwrap_or_else(|p| panic!("{p:#?}"));
        let found = missing(&queries, &exported);
        assert_eq!(found.len(), 1, "{wrong}: {found:?}");
        assert!(found[0].ends_with(&format!(": {wrong}")), "{found:?}");
    }

    let original = repo_file("deploy/observability/prometheus-rules.yaml");
    let right = "gpu_admission_certificate_expiry_seconds";
    let copy: Value =
        serde_yaml::from_str(&original.replace(right, "gpu_admission_certificate_expiry")).unwrap();
    let queries = rule_queries(&copy).unwrap_or_else(|p| panic!("{p:#?}"));
    let found = missing(&queries, &exported);
    assert_eq!(
        found,
        ["GpuAdmissionCertificateExpiringSoon: gpu_admission_certificate_expiry"]
    );
}

#[test]
fn structural_mistakes_in_the_dashboard_are_caught() {
    let mut copy = dashboard();
    copy["panels"][2]["id"] = copy["panels"][1]["id"].clone();
    copy["panels"][3]["datasource"] = json!({"type": "prometheus", "uid": "prometheus-prod"});
    copy["panels"][4]["targets"][0]
        .as_object_mut()
        .unwrap()
        .remove("expr");
    copy["panels"][5]["gridPos"]["x"] = json!(20);
    let problems = dashboard_queries(&copy).unwrap_err();
    assert_eq!(problems.len(), 4, "{problems:#?}");
    for wanted in [
        "is not unique",
        "datasource is not",
        "no expr",
        "off the grid",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(wanted)),
            "{wanted}: {problems:#?}"
        );
    }
    let mut copy = dashboard();
    copy["templating"]["list"] = json!([]);
    assert_eq!(
        dashboard_queries(&copy).unwrap_err(),
        ["no Prometheus datasource variable"]
    );
}

#[test]
fn structural_mistakes_in_the_rules_are_caught() {
    let mut copy = rules();
    let rule = &mut copy["spec"]["groups"][0]["rules"][0];
    rule["for"] = json!("two minutes");
    rule["labels"] = json!({});
    // A comment in a code block of the page is not a section.
    rule["annotations"]["runbook"] =
        json!("see docs/operations.md#reviews-per-second-by-endpoint-and-decision");
    copy["spec"]["groups"][0]["rules"][1]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("description");
    let problems = rule_queries(&copy).unwrap_err();
    assert_eq!(problems.len(), 4, "{problems:#?}");
    for wanted in [
        "is not a duration",
        "severity",
        "no such heading",
        "no description",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(wanted)),
            "{wanted}: {problems:#?}"
        );
    }
}

/// The alerts the operations guide promises, with the thresholds it names:
/// the p99 alert at 80% of each webhook's timeoutSeconds in deploy/base.
#[test]
fn the_alerts_cover_the_failure_modes_at_the_shipped_budgets() {
    let alerts: BTreeMap<String, String> = rule_queries(&rules())
        .unwrap_or_else(|p| panic!("{p:#?}"))
        .into_iter()
        .collect();
    for name in [
        "GpuAdmissionDown",
        "GpuAdmissionLatencyNearTimeout",
        "GpuAdmissionCertificateExpiringSoon",
        "GpuAdmissionPolicyReloadFailing",
        "GpuAdmissionDenialsSpiking",
    ] {
        assert!(alerts.contains_key(name), "no alert {name}");
    }
    assert!(alerts["GpuAdmissionDown"].contains("absent(up{"));
    assert!(alerts["GpuAdmissionCertificateExpiringSoon"].contains("< 7 * 86400"));

    let mut timeouts: BTreeMap<&str, f64> = BTreeMap::new();
    for (file, endpoint) in [
        ("deploy/base/mutating-webhook.yaml", "mutate"),
        ("deploy/base/validating-webhook.yaml", "validate"),
    ] {
        for doc in serde_yaml::Deserializer::from_str(&repo_file(file)) {
            let doc: Value = serde::Deserialize::deserialize(doc).unwrap();
            for webhook in doc["webhooks"].as_array().into_iter().flatten() {
                let seconds = webhook["timeoutSeconds"].as_f64().unwrap_or(10.0);
                let entry = timeouts.entry(endpoint).or_insert(f64::MAX);
                *entry = entry.min(seconds);
            }
        }
    }
    let threshold = Regex::new(r#"endpoint="(\w+)"\}\[5m\]\)\)\)\s*>\s*([0-9.]+)"#).unwrap();
    let found: BTreeMap<String, f64> = threshold
        .captures_iter(&alerts["GpuAdmissionLatencyNearTimeout"])
        .map(|c| (c[1].to_string(), c[2].parse().unwrap()))
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    for (endpoint, timeout) in timeouts {
        let at = found[endpoint];
        assert!(
            (at - 0.8 * timeout).abs() < 1e-9,
            "{endpoint}: p99 alert at {at} s, 80% of timeoutSeconds {timeout} is {}",
            0.8 * timeout
        );
    }
}

/// The target labels Prometheus Operator gives every series it scrapes
/// through a ServiceMonitor (and `instance`, Prometheus' own).
const TARGET_LABELS: [&str; 7] = [
    "namespace",
    "service",
    "pod",
    "container",
    "endpoint",
    "job",
    "instance",
];

/// The scrape configuration Prometheus Operator generates for endpoint 0
/// of `monitor` (a ServiceMonitor), with the Service and Deployment in
/// `objects` it selects, as a static target at `address`: the labels its
/// relabeling gives a target of the endpoints role (namespace, service,
/// pod, container, endpoint, and job: the Service's label `jobLabel`
/// names when the Service has it, else the Service's name) and
/// `honor_labels` from `honorLabels`. A field this translation does not
/// know is refused, so that an edit to the ServiceMonitor cannot change
/// the scrape unseen.
fn scrape_config(monitor: &Value, objects: &[Value], address: &str) -> Result<Value, String> {
    let known = |at: &str, value: &Value, fields: &[&str]| -> Result<(), String> {
        let map = value.as_object().ok_or(format!("{at} is not a map"))?;
        match map.keys().find(|k| !fields.contains(&k.as_str())) {
            Some(k) => Err(format!("{at}.{k}: not known to the translation")),
            None => Ok(()),
        }
    };
    if monitor["apiVersion"] != "monitoring.coreos.com/v1" || monitor["kind"] != "ServiceMonitor" {
        return Err("not a monitoring.coreos.com/v1 ServiceMonitor".into());
    }
    let spec = &monitor["spec"];
    known("spec", spec, &["jobLabel", "selector", "endpoints"])?;
    known("spec.selector", &spec["selector"], &["matchLabels"])?;
    let [endpoint] = spec["endpoints"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    else {
        return Err("spec.endpoints: not exactly one".into());
    };
    known(
        "spec.endpoints[0]",
        endpoint,
        &["port", "path", "interval", "honorLabels"],
    )?;
    let namespace = monitor["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let port = endpoint["port"]
        .as_str()
        .ok_or("no spec.endpoints[0].port")?;
    let has_labels = |labels: &Value, wanted: &Value| {
        let wanted = wanted.as_object().cloned().unwrap_or_default();
        wanted.iter().all(|(k, v)| labels[k] == *v)
    };
    let of_kind = |kind: &'static str| {
        objects
            .iter()
            .filter(move |o| o["kind"] == kind && o["metadata"]["namespace"] == namespace)
    };
    let services: Vec<&Value> = of_kind("Service")
        .filter(|s| has_labels(&s["metadata"]["labels"], &spec["selector"]["matchLabels"]))
        .collect();
    let [service] = services.as_slice() else {
        return Err(format!("{} Services selected, not one", services.len()));
    };
    let service_port = (service["spec"]["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"] == port)
        .ok_or(format!("the Service has no port {port}"))?;
    let deployment = of_kind("Deployment")
        .find(|d| {
            has_labels(
                &d["spec"]["template"]["metadata"]["labels"],
                &service["spec"]["selector"],
            )
        })
        .ok_or("no Deployment behind the Service")?;
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array();
    let container = (containers.into_iter().flatten())
        .find(|c| {
            (c["ports"].as_array().into_iter().flatten())
                .any(|p| p["name"] == service_port["targetPort"])
        })
        .ok_or("no container serves the port")?;
    let honor_labels = (endpoint.get("honorLabels"))
        .map_or(Some(false), Value::as_bool)
        .ok_or("spec.endpoints[0].honorLabels is not a boolean")?;
    let service_name = &service["metadata"]["name"];
    let job = (spec["jobLabel"].as_str())
        .and_then(|label| service["metadata"]["labels"][label].as_str())
        .filter(|value| !value.is_empty())
        .map_or(service_name.clone(), |value| json!(value));
    let labels = json!({
        "namespace": namespace,
        "service": service_name,
        "pod": format!("{}-5d8c7b9f6-x2k9q", deployment["metadata"]["name"].as_str().unwrap_or_default()),
        "container": container["name"],
        "endpoint": port,
        "job": job,
    });
    let mut config = json!({
        "job_name": format!("serviceMonitor/{namespace}/{}/0", monitor["metadata"]["name"].as_str().unwrap_or_default()),
        "honor_labels": honor_labels,
        "metrics_path": endpoint["path"].as_str().unwrap_or("/metrics"),
        "static_configs": [{"targets": [address], "labels": labels}],
    });
    if let Some(interval) = endpoint.get("interval") {
        config["scrape_interval"] = interval.clone();
    }
    Ok(config)
}

fn service_monitor() -> Value {
    serde_yaml::from_str(&repo_file("deploy/observability/servicemonitor.yaml"))
        .expect("the ServiceMonitor is YAML")
}

/// The Service and Deployment the ServiceMonitor selects, as deploy/base
/// ships them.
fn scraped_objects() -> Vec<Value> {
    ["deploy/base/service.yaml", "deploy/base/deployment.yaml"]
        .iter()
        .map(|f| serde_yaml::from_str(&repo_file(f)).unwrap())
        .collect()
}

#[test]
fn the_service_monitor_translates_and_an_unknown_field_is_refused() {
    let config = scrape_config(&service_monitor(), &scraped_objects(), "10.0.0.7:9090").unwrap();
    assert_eq!(
        config["static_configs"][0]["labels"],
        json!({"namespace": "gpu-admission", "service": "gpu-admission",
               "pod": "gpu-admission-5d8c7b9f6-x2k9q", "container": "gpu-admission",
               "endpoint": "metrics", "job": "gpu-admission"})
    );
    for (place, field) in [
        ("/spec", "namespaceSelector"),
        ("/spec", "targetLabels"),
        ("/spec/selector", "matchExpressions"),
        ("/spec/endpoints/0", "metricRelabelings"),
        ("/spec/endpoints/0", "relabelings"),
        ("/spec/endpoints/0", "scheme"),
    ] {
        let mut copy = service_monitor();
        copy.pointer_mut(place).unwrap()[field] = json!({});
        let refused = scrape_config(&copy, &scraped_objects(), "10.0.0.7:9090").unwrap_err();
        assert!(
            refused.ends_with(&format!(".{field}: not known to the translation")),
            "{refused}"
        );
    }
    let mut copy = service_monitor();
    copy["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = json!("other");
    assert_eq!(
        scrape_config(&copy, &scraped_objects(), "10.0.0.7:9090").unwrap_err(),
        "0 Services selected, not one"
    );
    // A Service another name calls (a chart's fullnameOverride) still
    // gives the job the dashboard and the alerts select, by jobLabel.
    let mut objects = scraped_objects();
    objects[0]["metadata"]["name"] = json!("gpa");
    let config = scrape_config(&service_monitor(), &objects, "10.0.0.7:9090").unwrap();
    let labels = &config["static_configs"][0]["labels"];
    assert_eq!(
        (&labels["service"], &labels["job"]),
        (&json!("gpa"), &json!("gpu-admission"))
    );
    let mut copy = service_monitor();
    copy["spec"].as_object_mut().unwrap().remove("jobLabel");
    let config = scrape_config(&copy, &objects, "10.0.0.7:9090").unwrap();
    assert_eq!(config["static_configs"][0]["labels"]["job"], "gpa");
}

/// Our label names that are also target labels: with `honorLabels` ours
/// win for these, and a series of ours that has one of them is shown as
/// it describes it. None of ours may be a label that says which replica
/// was scraped (job, instance, pod, service, container): honoring it
/// would merge the replicas' series and break the `job` selectors.
#[tokio::test]
async fn only_namespace_and_endpoint_of_our_labels_are_target_labels() {
    let exported = scrape().await;
    let shared: Vec<&str> = TARGET_LABELS
        .into_iter()
        .filter(|l| exported.labels.contains(*l))
        .collect();
    assert_eq!(shared, ["namespace", "endpoint"], "{:?}", exported.labels);
}

/// The shipped ServiceMonitor, translated as Prometheus Operator would,
/// scraping a real `serve` in a cluster (the fake API server) with a
/// GpuBudget at its limit and a pending pod; a real Prometheus queried
/// through its HTTP API. The chart renders the same ServiceMonitor
/// (ci/chart-checks.sh compares them). Skipped, saying so, without the
/// `prometheus` binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_as_prometheus_operator_does_our_namespace_label_is_kept() {
    use common::fake_apiserver::{FakeApiServer, Resource, NAMESPACES};
    use common::in_cluster::InCluster;
    use common::prometheus::{tool, Prometheus};
    let Some(binary) = tool("prometheus") else {
        return;
    };
    let budgets = Resource::new(
        "gpu-admission.io",
        "v1alpha1",
        "GpuBudget",
        "gpubudgets",
        true,
    );
    let pods = Resource::new("", "v1", "Pod", "pods", true);
    let fake = FakeApiServer::start(vec![NAMESPACES, budgets, pods]).await;
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "nlp", "uid": format!("uid-{name}")},
               "spec": {"containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    };
    fake.change(|c| {
        c.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp"}}));
        c.apply(
            json!({"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
                       "metadata": {"name": "team-nlp", "namespace": "nlp"},
                       "spec": {"total": 2}}),
        );
        let mut running = pod("running");
        running["spec"]["nodeName"] = json!("aks-a100-1");
        running["status"] = json!({"phase": "Running"});
        c.apply(running);
        let mut pending = pod("pending");
        pending["status"] = json!({"phase": "Pending"});
        c.apply(pending);
    });
    let server = InCluster::serve_with(&fake, &["--metrics-listen", "127.0.0.1:0"]);
    server.wait_until_ready().await;
    let review = common::webhooks::Review::create(pod("next"))
        .request("6f0c1d2e-8a52-4e0c-9b7e-1a9c52d45f1d");
    let review = serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview", "request": review}))
    .unwrap();
    for path in ["/mutate", "/validate"] {
        assert_eq!(server.request("POST", path, &review).await.0, 200);
    }

    let address = server.metrics_addr.unwrap().to_string();
    let mut job = scrape_config(&service_monitor(), &scraped_objects(), &address).unwrap();
    // Scraped every second, not every 30 s: timing only.
    job["scrape_interval"] = json!("1s");
    job["scrape_timeout"] = json!("1s");
    let dir = tempfile::tempdir().unwrap();
    let config = json!({"scrape_configs": [job]}).to_string();
    let prometheus = Prometheus::start(&binary, dir.path(), &dir.path().join("data"), &config);
    let used = r#"gpu_admission_budget_used{job="gpu-admission"}"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while prometheus.query(used).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never scraped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The budget's series: our namespace, the target's identity beside it.
    let target = json!({"job": "gpu-admission", "service": "gpu-admission",
        "pod": "gpu-admission-5d8c7b9f6-x2k9q", "container": "gpu-admission",
        "endpoint": "metrics", "instance": address});
    let mut want = target.clone();
    want["__name__"] = json!("gpu_admission_budget_used");
    for (k, v) in [
        ("namespace", "nlp"),
        ("budget", "team-nlp"),
        ("model", "total"),
    ] {
        want[k] = json!(v);
    }
    let series = prometheus.query(used);
    assert_eq!(series.len(), 1, "{series:#?}");
    assert_eq!(series[0]["metric"], want);
    assert_eq!(series[0]["value"][1], "2");

    // The shipped alert names the team's namespace.
    let alerts: BTreeMap<String, String> = rule_queries(&rules()).unwrap().into_iter().collect();
    let firing = prometheus.query(&alerts["GpuAdmissionBudgetFullWithPendingPods"]);
    let labels: Vec<&Value> = firing.iter().map(|s| &s["metric"]).collect();
    assert_eq!(
        labels,
        [&json!({"namespace": "nlp", "budget": "team-nlp", "model": "total"})]
    );

    // Our endpoint label (what the latency alert and the dashboard group
    // by) is kept too; the server's own series stay in its namespace.
    let by_endpoint = prometheus.query(
        r#"sum by (endpoint, namespace) (gpu_admission_request_duration_seconds_count{job="gpu-admission"})"#,
    );
    let found: BTreeSet<String> = by_endpoint
        .iter()
        .map(|s| s["metric"].to_string())
        .collect();
    let expected: BTreeSet<String> = ["mutate", "validate"]
        .iter()
        .map(|e| json!({"endpoint": e, "namespace": "gpu-admission"}).to_string())
        .collect();
    assert_eq!(found, expected);

    // The target's identity is whole, and nothing was renamed exported_*.
    let up = prometheus.query(r#"up{job="gpu-admission"}"#);
    let mut want = target;
    want["__name__"] = json!("up");
    want["namespace"] = json!("gpu-admission");
    assert_eq!(up.len(), 1, "{up:#?}");
    assert_eq!((&up[0]["metric"], &up[0]["value"][1]), (&want, &json!("1")));
    let names = prometheus.api("labels", &[("match[]", r#"{job="gpu-admission"}"#)]);
    let renamed: Vec<&Value> = (names.as_array().into_iter().flatten())
        .filter(|n| n.as_str().is_some_and(|n| n.starts_with("exported_")))
        .collect();
    assert!(renamed.is_empty(), "{renamed:?}");
    prometheus.stop();
}
