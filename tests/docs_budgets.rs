//! docs/budgets.md is tested: every GpuBudget of the page reads and is
//! accepted by the CRD's schema, the Kueue example agrees with the budget
//! it pairs with, and the denial the page shows (and the narrowing, with
//! `serve --budget-narrowing`) is what the shipped webhooks answer for its
//! pod.
use crate::common;

use common::webhooks::{Cluster, Outcome, Review};
use common::yaml_documents;
use gpu_admission::budgets::{self, Charge, Standing, StaticBudgets, Usage};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/budgets.md")).unwrap()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

fn crd_schema() -> Value {
    let text = std::fs::read_to_string(root().join("deploy/budgets/crd.yaml")).unwrap();
    let crd: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(crd["metadata"]["name"], "gpubudgets.gpu-admission.io");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn every_budget_of_the_page_reads_and_the_crd_accepts_it() {
    let documents = yaml_documents(&page());
    let examples = of_kind(&documents, "GpuBudget");
    assert_eq!(examples.len(), 3);
    let schema = crd_schema();
    for example in &examples {
        budgets::read(example).unwrap_or_else(|e| panic!("{example}: {e:?}"));
        let errors = common::crd_schema::with_cel(&schema, example);
        assert_eq!(errors, Vec::<String>::new(), "{example}");
    }
    // What the reader refuses, kube-apiserver refuses first.
    let mut broken = examples[0].clone();
    for spec in [
        json!({}),
        json!({"models": {"A100": -1}}),
        json!({"total": "8"}),
    ] {
        broken["spec"] = spec;
        assert!(budgets::read(&broken).is_err(), "{broken}");
        assert!(
            !common::crd_schema::with_cel(&schema, &broken).is_empty(),
            "{broken}"
        );
    }
}

#[test]
fn the_kueue_example_agrees_with_the_budget_it_pairs_with() {
    let documents = yaml_documents(&page());
    let budget = of_kind(&documents, "GpuBudget")[0];
    let budget = budgets::read(budget).unwrap();
    let flavors: BTreeMap<&str, &str> = of_kind(&documents, "ResourceFlavor")
        .into_iter()
        .map(|f| {
            let model = &f["spec"]["nodeLabels"]["karpenter.azure.com/sku-gpu-name"];
            (
                f["metadata"]["name"].as_str().unwrap(),
                model.as_str().unwrap(),
            )
        })
        .collect();
    let queue = of_kind(&documents, "ClusterQueue")[0];
    let selected =
        &queue["spec"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"];
    assert_eq!(selected, budget.namespace.as_str());
    let mut quotas = BTreeMap::new();
    for flavor in queue["spec"]["resourceGroups"][0]["flavors"]
        .as_array()
        .unwrap()
    {
        let model = flavors[flavor["name"].as_str().unwrap()];
        let quota = &flavor["resources"][0];
        assert_eq!(quota["name"], "nvidia.com/gpu");
        quotas.insert(model.to_string(), quota["nominalQuota"].as_i64().unwrap());
    }
    assert_eq!(
        quotas, budget.models,
        "a flavor per model, its quota the budget's limit"
    );
    let local = of_kind(&documents, "LocalQueue")[0];
    assert_eq!(local["spec"]["clusterQueue"], queue["metadata"]["name"]);
    // The audit's check agrees; a quota above the budget's limit does not.
    let loaded =
        gpu_admission::bundle::load(&gpu_admission::bundle::PolicySource::Embedded).unwrap();
    let mut namespaces = gpu_admission::k8s::StaticNamespaces::new();
    namespaces.insert(&budget.namespace, BTreeMap::new());
    let check = |objects: &[Value]| {
        let placement = &loaded.bundle.placement;
        let found = gpu_admission::audit::budgets::budget_mismatches(
            objects,
            std::slice::from_ref(&budget),
            placement,
            &namespaces,
        );
        found.into_iter().map(|f| f.message).collect::<Vec<_>>()
    };
    assert_eq!(check(&documents), Vec::<String>::new());
    let mut raised = documents.clone();
    let queue = raised
        .iter_mut()
        .find(|d| d["kind"] == "ClusterQueue")
        .unwrap();
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = json!(9);
    let found = check(&raised);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("ClusterQueue team-nlp gives namespace nlp 9 GPUs of ResourceFlavor a100 (A100), GpuBudget nlp/"),
        "{found:?}"
    );
}

/// Through the real binary: `lint -f` with every object of the page finds
/// the Kueue example in step with its budget under `--strict`, and warns,
/// at the ClusterQueue, of a quota of 9 A100s.
#[test]
fn the_kueue_example_lints_clean() {
    let mut documents = yaml_documents(&page());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.yaml");
    let policies = root().join("policies");
    let lint = |documents: &[Value], strict: bool| {
        let texts: Vec<String> = (documents.iter())
            .map(|d| serde_yaml::to_string(d).unwrap())
            .collect();
        std::fs::write(&file, texts.join("---\n")).unwrap();
        let mut args = vec!["lint".into(), policies.clone().into_os_string()];
        args.extend(strict.then(|| "--strict".into()));
        common::run_cli(
            args.into_iter()
                .chain(["-f".into(), file.clone().into_os_string()]),
        )
    };
    let out = lint(&documents, true);
    assert!(
        out.contains("\n3 GpuBudget(s), 1 ClusterQueue(s): 0 disagreement(s)\n"),
        "{out}"
    );
    assert!(!out.contains("warning:"), "{out}");
    let queue = (documents.iter())
        .position(|d| d["kind"] == "ClusterQueue")
        .unwrap();
    documents[queue]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] =
        json!(9);
    let out = lint(&documents, false);
    let want = format!("warning: {}: document {} (line ", file.display(), queue + 1);
    let found: Vec<&str> = (out.lines())
        .filter(|l| l.contains("[gpu-budget-kueue-mismatch] ClusterQueue team-nlp gives namespace nlp 9 GPUs of ResourceFlavor a100 (A100), GpuBudget nlp/team-nlp allows 8 A100 GPUs"))
        .collect();
    assert_eq!(found.len(), 1, "{out}");
    assert!(found[0].starts_with(&want), "{out}");
}

/// The `lint -f` run the page shows is the binary's: its command, run
/// from the project's root, prints every line shown.
#[test]
fn the_lint_run_the_page_shows_is_the_binarys() {
    let text = page();
    let start = text
        .find("$ gpu-admission lint ")
        .expect("the page shows lint");
    let block = text[start..].split("```").next().unwrap();
    let mut lines = block.lines();
    let command = lines.next().unwrap().split_whitespace().skip(2);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .current_dir(root())
        .args(command)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}");
    let shown: Vec<&str> = lines.filter(|l| *l != "...").collect();
    assert_eq!(shown.len(), 4, "{block}");
    for line in shown {
        assert!(printed.lines().any(|l| l == line), "{line}\n{printed}");
    }
}

/// What the shipped webhooks answer for the page's pod, with seven of the
/// eight A100s of its budget held (`narrowing`: `serve --budget-narrowing`).
async fn the_pods_answer(narrowing: bool) -> Outcome {
    let documents = yaml_documents(&page());
    let budget = budgets::read(of_kind(&documents, "GpuBudget")[0]).unwrap();
    let mut used = Usage::default();
    let held = Charge {
        model: "A100".into(),
        size: "Standard_NC24ads_A100_v4".into(),
        gpus: 7,
    };
    used.add(&held, 1);
    let standing = Standing {
        budget: Arc::new(budget),
        used,
    };
    let budgets = Arc::new(StaticBudgets::new(vec![standing]));
    let cluster = Cluster::start_with_budgets(budgets, narrowing).await;
    let pod = of_kind(&documents, "Pod")[0].clone();
    let review = Review::create(pod).namespace_labels(&[
        ("gpu-admission.io/tier", "standard"),
        ("gpu-admission.io/premium-gpus", "true"),
    ]);
    let outcome = cluster.admit(&review).await;
    cluster.stop().await;
    outcome
}

#[tokio::test]
async fn the_denial_the_page_shows_is_the_webhooks_answer() {
    let outcome = the_pods_answer(false).await;
    let text = page();
    let shown = (text.lines())
        .find(|l| l.starts_with("Error from server (Forbidden)"))
        .expect("the page shows a denial");
    let (webhook, message) = shown
        .split_once(" denied the request: ")
        .and_then(|(head, message)| Some((head.split('"').nth(3)?, message)))
        .unwrap();
    assert!(!outcome.allowed);
    assert_eq!(outcome.denied_by.as_deref(), Some(webhook));
    assert_eq!(outcome.message(), message);
}

/// With narrowing, the same pod is placed on the T4 sizes, with the
/// warning the page shows, and admitted.
#[tokio::test]
async fn the_narrowing_the_page_shows_is_the_webhooks_answer() {
    let outcome = the_pods_answer(true).await;
    let text = page();
    let shown: Vec<&str> = (text.lines())
        .filter_map(|l| l.strip_prefix("Warning: GpuBudget "))
        .collect();
    assert_eq!(shown.len(), 1, "the page shows one narrowing");
    assert!(outcome.allowed, "{outcome:?}");
    assert_eq!(outcome.warnings, [format!("GpuBudget {}", shown[0])]);
    let term = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions";
    let object = outcome.object.expect("the pod");
    let sizes = (object
        .pointer(term)
        .and_then(Value::as_array)
        .unwrap()
        .iter())
    .find(|e| e["key"] == "node.kubernetes.io/instance-type")
    .map(|e| e["values"].clone());
    let t4 = [
        "Standard_NC4as_T4_v3",
        "Standard_NC8as_T4_v3",
        "Standard_NC16as_T4_v3",
        "Standard_NC64as_T4_v3",
    ];
    assert_eq!(sizes, Some(json!(t4)));
    assert!(shown[0].ends_with(&format!("T4 ({})", t4.join(", "))));
}

/// `evaluate` counts the pods of a dump of the cluster (a pod bound to a
/// node of the dump by the node's size) and the manifest's own pods, in
/// order, against the budgets of both.
#[test]
fn evaluate_judges_a_manifest_against_its_budgets_and_what_a_dump_holds() {
    let documents = yaml_documents(&page());
    let budget = of_kind(&documents, "GpuBudget")[0].clone();
    let pod = |name: &str, gpus: &str, phase: &str| {
        let mut pod = of_kind(&documents, "Pod")[0].clone();
        pod["metadata"]["name"] = json!(name);
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus);
        pod["status"] = json!({"phase": phase});
        pod
    };
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, objects: &[Value]| {
        let path = dir.path().join(name);
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        std::fs::write(&path, list.to_string()).unwrap();
        path
    };
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp",
        "labels": {"gpu-admission.io/tier": "standard", "gpu-admission.io/premium-gpus": "true"}}});
    // Allowed on an A100 or a T4, running on a T4 node: 2 T4s held.
    let mut on_t4 = pod("on-t4", "2", "Running");
    on_t4["spec"]["nodeName"] = json!("aks-t4-1");
    let t4_node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "aks-t4-1",
        "labels": {"node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"}}});
    let dump = write(
        "dump.json",
        &[
            namespace,
            t4_node,
            pod("running", "2", "Running"),
            pod("done", "8", "Succeeded"),
            on_t4,
        ],
    );
    let manifest = write(
        "manifest.json",
        &[
            budget,
            pod("first", "4", "Pending"),
            pod("second", "3", "Pending"),
        ],
    );
    let out = common::run_cli([
        "evaluate".as_ref(),
        "-f".as_ref(),
        manifest.as_os_str(),
        "--cluster".as_ref(),
        dump.as_os_str(),
        "-o".as_ref(),
        "json".as_ref(),
    ]);
    let results: Vec<Value> = serde_json::from_str(&out).unwrap();
    let verdict = |name: &str| {
        (results
            .iter()
            .find(|r| r["name"] == format!("nlp/{name}"))
            .cloned())
        .unwrap_or_else(|| panic!("{name}: {out}"))
    };
    assert_eq!(verdict("first")["allowed"], true, "{out}");
    let second = verdict("second");
    assert_eq!(second["allowed"], false, "{out}");
    let denial = second["denials"][0].as_str().unwrap();
    assert!(
        denial.starts_with("GpuBudget nlp/team-nlp allows 8 A100 GPUs held at once; 6/8 are held and this pod asks for 3 more"),
        "{denial}"
    );
}

/// The PolicyTest of the page is the fixture's, and it passes under the
/// shipped policies with the fixture's dump beside it.
#[test]
fn the_policy_test_of_the_page_passes() {
    let documents = yaml_documents(&page());
    let shown = of_kind(&documents, "PolicyTest");
    assert_eq!(shown.len(), 1);
    let fixture = root().join("tests/fixtures/budgets");
    let text = std::fs::read_to_string(fixture.join("tests.yaml")).unwrap();
    assert_eq!(
        *shown[0],
        yaml_documents(&format!("```yaml\n{text}```\n"))[0]
    );
    let dir = tempfile::tempdir().unwrap();
    let tests = dir.path().join("tests.yaml");
    std::fs::write(&tests, serde_yaml::to_string(shown[0]).unwrap()).unwrap();
    std::fs::copy(fixture.join("dump.json"), dir.path().join("dump.json")).unwrap();
    let policies = root().join("policies");
    let out = common::run_cli([
        "test".as_ref(),
        dir.path().as_os_str(),
        "--policies".as_ref(),
        policies.as_os_str(),
    ]);
    assert_eq!(out.lines().last(), Some("3 passed, 0 failed"), "{out}");
}
