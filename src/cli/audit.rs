//! `gpu-admission audit`: evaluates objects that already exist, from files
//! (`kubectl get ... -A -o json`) or straight from the cluster, and reports
//! per policy and namespace the violations and the GPUs they hold.
use super::policy_args::PolicyArgs;
use crate::admission::Admission;
use crate::audit;
use crate::k8s::namespaces::StaticNamespaces;
use crate::k8s::StaticClaims;
use crate::offline;
use crate::testing::namespace_labels;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditFormat {
    /// A summary table, one sentence per policy, then every finding.
    Text,
    Json,
    /// wgpolicyk8s.io/v1alpha2 PolicyReport / ClusterPolicyReport YAML.
    Policyreport,
    /// One self-contained HTML page: totals, charts, top offenders, every
    /// policy's findings and the GPU capacity objects.
    Html,
}

#[derive(Clone, Debug, clap::Args)]
pub struct AuditArgs {
    /// Files of objects (a List from `kubectl get ... -o json`, or manifests).
    /// Without any, the objects are read from the cluster of the current
    /// kubeconfig (or the in-cluster service account).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub policies: PolicyArgs,
    /// Labels of every namespace, when reading files; the Namespace objects
    /// among the files (and, from the cluster, the cluster's) add their own.
    #[arg(long, value_name = "k=v,...", value_parser = crate::k8s::namespaces::parse_labels)]
    pub namespace_labels: Option<BTreeMap<String, String>>,
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: AuditFormat,
}

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    offline::with_evaluation_stack(|| audit_here(&args))?
}

fn audit_here(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    let loaded = args.policies.load()?;
    let (objects, namespaces, source) = if args.files.is_empty() {
        let (objects, namespaces, url) = from_cluster()?;
        (objects, namespaces, audit::ReportSource::Cluster(url))
    } else {
        let mut read = Vec::new();
        for file in &args.files {
            read.extend(offline::read_manifest(file)?);
        }
        // Namespaces in the files (`kubectl get namespaces,pods,... -A -o
        // json`) give their own labels, as in the cluster; they are not audited.
        let (namespace_objects, objects): (Vec<Value>, Vec<Value>) =
            read.into_iter().partition(is_namespace);
        let labels = args.namespace_labels.clone().unwrap_or_default();
        let names: BTreeSet<String> = objects
            .iter()
            .filter_map(|o| o.pointer("/metadata/namespace").and_then(Value::as_str))
            .map(str::to_string)
            .chain(std::iter::once("default".to_string()))
            .collect();
        let mut namespaces: BTreeMap<String, BTreeMap<String, String>> = names
            .iter()
            .map(|n| (n.clone(), namespace_labels(n, &labels)))
            .collect();
        for ns in &namespace_objects {
            let Some(name) = ns.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let own: BTreeMap<String, String> = ns
                .pointer("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default();
            let mut merged = labels.clone();
            merged.extend(own);
            namespaces.insert(name.to_string(), namespace_labels(name, &merged));
        }
        let namespaces = namespaces.into_iter().collect();
        let files = args.files.iter().map(|f| f.display().to_string());
        (
            objects,
            namespaces,
            audit::ReportSource::Files(files.collect()),
        )
    };
    let mut lookup = StaticNamespaces::new();
    for (name, labels) in namespaces {
        lookup.insert(&name, labels);
    }
    // Pods' DRA claims resolve against the claims read with them.
    let mut claims = StaticClaims::new();
    for object in &objects {
        claims.insert(object, "default");
    }
    let meta = report_meta(args, source, &loaded.bundle)?;
    let admission = Admission::new(loaded.bundle, Arc::new(lookup)).with_claims(Arc::new(claims));
    let report = audit::audit(&admission, &objects);
    match args.output {
        AuditFormat::Text => print!("{}", audit::render_text(&report)),
        AuditFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        AuditFormat::Policyreport => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            for doc in audit::policy_reports(&report, now) {
                print!("---\n{}", serde_yaml::to_string(&doc)?);
            }
        }
        AuditFormat::Html => print!("{}", audit::render(&report, &meta)),
    }
    Ok(ExitCode::SUCCESS)
}

/// A core/v1 Namespace.
fn is_namespace(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Namespace")
}

/// When and against what the report is made: the policy set and its
/// digest, the catalog and its date.
fn report_meta(
    args: &AuditArgs,
    source: audit::ReportSource,
    bundle: &crate::admission::Bundle,
) -> anyhow::Result<audit::ReportMeta> {
    let policy_source = args.policies.source();
    let digest = crate::bundle::policy_digest(&policy_source).map_err(|errors| {
        anyhow::anyhow!("{} has errors:\n{}", policy_source.describe(), errors)
    })?;
    let catalog = match &args.policies.catalog {
        Some(path) => path.display().to_string(),
        None => "built-in".to_string(),
    };
    Ok(audit::ReportMeta::now(
        source,
        policy_source.describe(),
        digest,
        bundle,
        catalog,
    ))
}

/// Kinds the audit reads from a cluster: (group, kind). A kind the cluster
/// does not serve (CRD not installed) or that the caller may not list is
/// skipped with a warning.
pub const AUDITED: &[(&str, &str)] = &[
    ("", "Pod"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("karpenter.sh", "NodePool"),
    ("kaito.sh", "Workspace"),
    ("kaito.sh", "InferenceSet"),
    ("kaito.sh", "RAGEngine"),
    ("containerservice.azure.com", "ManagedClustersAgentPool"),
    ("resource.k8s.io", "ResourceClaim"),
    ("resource.k8s.io", "ResourceClaimTemplate"),
];

/// Objects per list call: big clusters are read in pages, so no single
/// answer (or the apiserver's work for it) grows with the cluster.
const PAGE_SIZE: u32 = 500;

/// Objects to audit, each namespace's labels, and the API server's URL.
type Inputs = (Vec<Value>, Vec<(String, BTreeMap<String, String>)>, String);

fn from_cluster() -> anyhow::Result<Inputs> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let no_cluster = |e: String| {
            anyhow::anyhow!("no cluster to audit ({e}); pass objects with -f FILE instead")
        };
        let config = kube::Config::infer()
            .await
            .map_err(|e| no_cluster(e.to_string()))?;
        let url = config.cluster_url.to_string();
        let client = kube::Client::try_from(config).map_err(|e| no_cluster(e.to_string()))?;
        let lister = ClusterLister {
            client,
            resources: Default::default(),
        };
        let warn = |message: String| eprintln!("warning: {message}");
        let objects = list_all(&lister, AUDITED, &warn).await?;
        let namespaces = list_all(&lister, &[("", "Namespace")], &|message| {
            warn(format!(
                "{message}; namespaceSelector and namespaceObject see no namespace labels"
            ))
        })
        .await?
        .iter()
        .filter_map(|ns| {
            let name = ns.pointer("/metadata/name")?.as_str()?.to_string();
            let labels = ns
                .pointer("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default();
            Some((name, labels))
        })
        .collect();
        Ok((objects, namespaces, url))
    })
}

/// One page of a list call.
#[derive(Clone, Debug, Default, PartialEq)]
struct Page {
    /// Objects with `apiVersion` and `kind` set.
    items: Vec<Value>,
    /// Where the next page starts; none on the last page.
    continue_token: Option<String>,
}

/// Why a list call failed.
#[derive(Debug)]
enum ListError {
    /// 403: the caller may not list this kind.
    Forbidden(String),
    /// 404, or no such group or kind: the cluster does not serve it.
    NotServed(String),
    Other(anyhow::Error),
}

/// Lists objects a page at a time: the cluster, or a fake in tests.
trait Lister {
    async fn list_page(
        &self,
        group: &str,
        kind: &str,
        limit: u32,
        continue_token: Option<&str>,
    ) -> Result<Page, ListError>;
}

/// Every object of `kinds`, [`PAGE_SIZE`] at a time. A kind that is
/// forbidden or not served is skipped with a `warn`ing; any other error
/// ends the audit, since a partial read would under-report.
async fn list_all(
    lister: &impl Lister,
    kinds: &[(&str, &str)],
    warn: &dyn Fn(String),
) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    'kinds: for (group, kind) in kinds {
        let name = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut read = Vec::new();
        let mut token: Option<String> = None;
        loop {
            match lister
                .list_page(group, kind, PAGE_SIZE, token.as_deref())
                .await
            {
                Ok(page) => {
                    read.extend(page.items);
                    match page.continue_token {
                        Some(next) => token = Some(next),
                        None => break,
                    }
                }
                Err(ListError::Forbidden(why)) => {
                    warn(format!("skipping {name}: not allowed to list it ({why})"));
                    continue 'kinds;
                }
                Err(ListError::NotServed(why)) => {
                    warn(format!(
                        "skipping {name}: the cluster does not serve it ({why})"
                    ));
                    continue 'kinds;
                }
                Err(ListError::Other(err)) => {
                    return Err(err.context(format!("cannot list {name}")));
                }
            }
        }
        objects.append(&mut read);
    }
    Ok(objects)
}

/// [`Lister`] over a cluster, through API discovery (once per kind).
struct ClusterLister {
    client: kube::Client,
    resources: std::sync::Mutex<BTreeMap<(String, String), kube::discovery::ApiResource>>,
}

impl ClusterLister {
    async fn resource(
        &self,
        group: &str,
        kind: &str,
    ) -> Result<kube::discovery::ApiResource, ListError> {
        let key = (group.to_string(), kind.to_string());
        if let Some(found) = self.cache().get(&key) {
            return Ok(found.clone());
        }
        let api_group = kube::discovery::group(&self.client, group)
            .await
            .map_err(classify)?;
        let Some((resource, _caps)) = api_group.recommended_kind(kind) else {
            return Err(ListError::NotServed(format!("no kind {kind} in the group")));
        };
        self.cache().insert(key, resource.clone());
        Ok(resource)
    }

    fn cache(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), kube::discovery::ApiResource>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Lister for ClusterLister {
    async fn list_page(
        &self,
        group: &str,
        kind: &str,
        limit: u32,
        continue_token: Option<&str>,
    ) -> Result<Page, ListError> {
        let resource = self.resource(group, kind).await?;
        let api: kube::Api<kube::core::DynamicObject> =
            kube::Api::all_with(self.client.clone(), &resource);
        let mut params = kube::api::ListParams::default().limit(limit);
        if let Some(token) = continue_token {
            params = params.continue_token(token);
        }
        let list = api.list(&params).await.map_err(classify)?;
        let mut items = Vec::with_capacity(list.items.len());
        for item in list.items {
            let mut value = serde_json::to_value(&item).map_err(|e| ListError::Other(e.into()))?;
            value["apiVersion"] = Value::String(resource.api_version.clone());
            value["kind"] = Value::String(resource.kind.clone());
            items.push(value);
        }
        Ok(Page {
            items,
            continue_token: list.metadata.continue_.filter(|t| !t.is_empty()),
        })
    }
}

fn classify(err: kube::Error) -> ListError {
    match &err {
        kube::Error::Api(status) if status.is_forbidden() || status.code == 403 => {
            ListError::Forbidden(status.message.clone())
        }
        kube::Error::Api(status) if status.is_not_found() || status.code == 404 => {
            ListError::NotServed(status.message.clone())
        }
        kube::Error::Discovery(
            kube::error::DiscoveryError::MissingApiGroup(_)
            | kube::error::DiscoveryError::MissingKind(_)
            | kube::error::DiscoveryError::MissingResource(_),
        ) => ListError::NotServed(err.to_string()),
        _ => ListError::Other(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::RefCell;

    /// A cluster of `per_kind` objects per served kind, answered in pages
    /// of at most the requested limit; Jobs forbidden, NodePools absent.
    struct FakeCluster {
        per_kind: usize,
        calls: RefCell<Vec<(String, u32, Option<String>)>>,
    }

    impl Lister for FakeCluster {
        async fn list_page(
            &self,
            group: &str,
            kind: &str,
            limit: u32,
            continue_token: Option<&str>,
        ) -> Result<Page, ListError> {
            self.calls.borrow_mut().push((
                kind.to_string(),
                limit,
                continue_token.map(str::to_string),
            ));
            match kind {
                "Job" => return Err(ListError::Forbidden("jobs.batch is forbidden".into())),
                "NodePool" => return Err(ListError::NotServed("Missing Api Group".into())),
                "CronJob" => return Err(ListError::Other(anyhow::anyhow!("connection reset"))),
                _ => {}
            }
            let start: usize = continue_token.map_or(0, |t| t.parse().unwrap());
            let end = (start + limit as usize).min(self.per_kind);
            let api_version = if group.is_empty() {
                "v1".to_string()
            } else {
                format!("{group}/v1")
            };
            let items = (start..end)
                .map(|i| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": format!("{kind}-{i}")}}))
                .collect();
            Ok(Page {
                items,
                continue_token: (end < self.per_kind).then(|| end.to_string()),
            })
        }
    }

    fn run(
        cluster: &FakeCluster,
        kinds: &[(&str, &str)],
    ) -> (anyhow::Result<Vec<Value>>, Vec<String>) {
        let warnings = RefCell::new(Vec::new());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let result = runtime.block_on(list_all(cluster, kinds, &|w| warnings.borrow_mut().push(w)));
        (result, warnings.into_inner())
    }

    #[test]
    fn pages_through_every_kind_following_continue_tokens() {
        let cluster = FakeCluster {
            per_kind: 1_203,
            calls: RefCell::default(),
        };
        let (objects, warnings) = run(&cluster, &[("", "Pod"), ("apps", "Deployment")]);
        let objects = objects.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(objects.len(), 2 * 1_203);
        assert_eq!(objects[1_202]["metadata"]["name"], "Pod-1202");
        assert_eq!(objects[1_203]["metadata"]["name"], "Deployment-0");
        let calls = cluster.calls.into_inner();
        let pods: Vec<_> = calls.iter().filter(|c| c.0 == "Pod").collect();
        assert_eq!(pods.len(), 3, "1203 objects in pages of 500");
        assert!(calls.iter().all(|c| c.1 == PAGE_SIZE));
        assert_eq!(pods[0].2, None);
        assert_eq!(pods[1].2.as_deref(), Some("500"));
        assert_eq!(pods[2].2.as_deref(), Some("1000"));
    }

    #[test]
    fn forbidden_and_absent_kinds_are_skipped_with_a_warning() {
        let cluster = FakeCluster {
            per_kind: 3,
            calls: RefCell::default(),
        };
        let (objects, warnings) = run(
            &cluster,
            &[
                ("", "Pod"),
                ("batch", "Job"),
                ("karpenter.sh", "NodePool"),
                ("kaito.sh", "Workspace"),
            ],
        );
        let kinds: Vec<_> = objects
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            kinds,
            ["Pod", "Pod", "Pod", "Workspace", "Workspace", "Workspace"]
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("skipping Job.batch: not allowed"),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].contains("forbidden"), "{}", warnings[0]);
        assert!(
            warnings[1]
                .starts_with("skipping NodePool.karpenter.sh: the cluster does not serve it"),
            "{}",
            warnings[1]
        );
    }

    #[test]
    fn other_errors_end_the_audit() {
        let cluster = FakeCluster {
            per_kind: 3,
            calls: RefCell::default(),
        };
        let (result, _) = run(&cluster, &[("", "Pod"), ("batch", "CronJob")]);
        let err = format!("{:#}", result.unwrap_err());
        assert!(err.contains("cannot list CronJob.batch"), "{err}");
        assert!(err.contains("connection reset"), "{err}");
    }
}
