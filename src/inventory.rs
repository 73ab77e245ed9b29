//! Reading the objects an audit judges from a cluster: every kind the
//! webhook judges, a page at a time, through API discovery. Shared by
//! `gpu-admission audit` and the periodic report of `serve`.
use serde_json::Value;

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
    ("containerservice.azure.com", "ManagedCluster"),
    ("infrastructure.cluster.x-k8s.io", "AzureManagedMachinePool"),
    (
        "infrastructure.cluster.x-k8s.io",
        "AzureASOManagedMachinePool",
    ),
    (
        "infrastructure.cluster.x-k8s.io",
        "AzureASOManagedControlPlane",
    ),
    ("kueue.x-k8s.io", "ResourceFlavor"),
    ("kueue.x-k8s.io", "ClusterQueue"),
    ("kueue.x-k8s.io", "LocalQueue"),
    ("resource.k8s.io", "ResourceClaim"),
    ("resource.k8s.io", "ResourceClaimTemplate"),
];

/// Kinds the audit reads beside the judged ones, held with them: the GPUs
/// DRA serves on nodes as an extended resource (counted, not judged).
pub const DRA_DEVICES: [(&str, &str); 2] = [
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceSlice"),
];

/// GpuBudgets, read beside the judged kinds: what namespaces hold
/// against them is reported, and checked against Kueue's ClusterQueues.
pub const BUDGETS: (&str, &str) = ("gpu-admission.io", "GpuBudget");

/// The kinds an audit reads: [`AUDITED`], [`DRA_DEVICES`], [`BUDGETS`]
/// and the workload custom resources of the policy set's
/// `PodTemplateSource` documents.
pub fn audited_kinds(sources: &crate::k8s::TemplateSources) -> Vec<(&str, &str)> {
    let mut kinds: Vec<(&str, &str)> = [AUDITED, &DRA_DEVICES[..], &[BUDGETS]].concat();
    for source in sources.custom() {
        let kind = (source.group.as_str(), source.kind.as_str());
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

/// Objects per list call: big clusters are read in pages, so no single
/// answer (or the apiserver's work for it) grows with the cluster.
pub const PAGE_SIZE: u32 = 500;

/// One page of a list call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// Objects with `apiVersion` and `kind` set.
    pub items: Vec<Value>,
    /// Where the next page starts; none on the last page.
    pub continue_token: Option<String>,
}

/// Why a list call failed.
#[derive(Debug)]
pub enum ListError {
    /// 403: the caller may not list this kind.
    Forbidden(String),
    /// 404, or no such group or kind: the cluster does not serve it.
    NotServed(String),
    Other(anyhow::Error),
}

/// One page asked of a [`Lister`]: at most `limit` objects of `kind` in
/// `group`, from `continue_token`.
#[derive(Clone, Copy, Debug)]
pub struct PageAsk<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub limit: u32,
    pub continue_token: Option<&'a str>,
}

/// Lists objects a page at a time: the cluster, or a fake in tests.
#[allow(async_fn_in_trait)]
pub trait Lister {
    async fn list_page(&self, ask: PageAsk<'_>) -> Result<Page, ListError>;
}

/// Every object of `kinds`, [`PAGE_SIZE`] at a time, in memory. A kind
/// that is forbidden or not served is skipped with a `warn`ing; any other
/// error ends the listing, since a partial read would under-report.
pub async fn list_all(
    lister: &impl Lister,
    kinds: &[(&str, &str)],
    warn: &dyn Fn(String),
) -> anyhow::Result<Vec<Value>> {
    let mut objects = Vec::new();
    list_pages(lister, kinds, warn, &mut |page| {
        objects.extend(page);
        Ok(())
    })
    .await?;
    Ok(objects)
}

/// Hands every object of `kinds` to `on_page`, one page at a time, so
/// that the caller holds no more than it keeps. Forbidden and not-served
/// kinds are skipped with a `warn`ing when their first page says so; any
/// other error, an error later in a kind (its first pages are already
/// handed over), or an error from `on_page`, ends the listing.
pub async fn list_pages(
    lister: &impl Lister,
    kinds: &[(&str, &str)],
    warn: &dyn Fn(String),
    on_page: &mut dyn FnMut(Vec<Value>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for (group, kind) in kinds {
        let name = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut token: Option<String> = None;
        loop {
            let first = token.is_none();
            let ask = PageAsk {
                group,
                kind,
                limit: PAGE_SIZE,
                continue_token: token.as_deref(),
            };
            match lister.list_page(ask).await {
                Ok(page) => {
                    let mut items = page.items;
                    items.iter_mut().for_each(slim);
                    on_page(items)?;
                    match page.continue_token {
                        Some(next) => token = Some(next),
                        None => break,
                    }
                }
                Err(ListError::Forbidden(why)) if first => {
                    warn(format!("skipping {name}: not allowed to list it ({why})"));
                    break;
                }
                Err(ListError::NotServed(why)) if first => {
                    warn(format!(
                        "skipping {name}: the cluster does not serve it ({why})"
                    ));
                    break;
                }
                Err(ListError::Forbidden(why) | ListError::NotServed(why)) => {
                    anyhow::bail!("cannot list {name}: it went away while being read ({why})");
                }
                Err(ListError::Other(err)) => {
                    return Err(err.context(format!("cannot list {name}")));
                }
            }
        }
    }
    Ok(())
}

/// Drops what no policy judges and only costs memory: the server-side
/// apply bookkeeping (`metadata.managedFields`), often the largest part of
/// an object as the API returns it.
fn slim(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// A cluster serving `objects` by kind, in pages of at most the
    /// requested limit; any other kind not served (with `faults`, Jobs
    /// forbidden and CronJobs failing). Every call is recorded.
    pub(crate) struct FakeCluster {
        pub(crate) objects: BTreeMap<&'static str, Vec<Value>>,
        faults: bool,
        calls: Mutex<Vec<(String, u32, Option<String>)>>,
    }

    impl FakeCluster {
        pub(crate) fn new(objects: BTreeMap<&'static str, Vec<Value>>) -> FakeCluster {
            FakeCluster {
                objects,
                faults: false,
                calls: Mutex::default(),
            }
        }

        /// `per_kind` objects of each of `kinds` (group, kind).
        fn synthetic(per_kind: usize, kinds: &[(&str, &'static str)]) -> FakeCluster {
            let objects = kinds.iter().map(|&(group, kind)| {
                let api_version = match group {
                    "" => "v1".to_string(),
                    _ => format!("{group}/v1"),
                };
                let objects = (0..per_kind)
                    .map(|i| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": format!("{kind}-{i}")}}))
                    .collect();
                (kind, objects)
            });
            FakeCluster {
                faults: true,
                ..FakeCluster::new(objects.collect())
            }
        }

        /// How many pages of `kind` were asked for.
        pub(crate) fn pages_of(&self, kind: &str) -> usize {
            let calls = self.calls.lock().unwrap();
            calls.iter().filter(|c| c.0 == kind).count()
        }
    }

    impl Lister for FakeCluster {
        async fn list_page(&self, ask: PageAsk<'_>) -> Result<Page, ListError> {
            let (kind, continue_token) = (ask.kind, ask.continue_token);
            let call = (
                kind.to_string(),
                ask.limit,
                continue_token.map(str::to_string),
            );
            self.calls.lock().unwrap().push(call);
            let all = match (kind, self.objects.get(kind), self.faults) {
                (_, Some(all), _) => all,
                ("Job", _, true) => {
                    return Err(ListError::Forbidden("jobs.batch is forbidden".into()))
                }
                ("CronJob", _, true) => {
                    return Err(ListError::Other(anyhow::anyhow!("connection reset")))
                }
                _ => return Err(ListError::NotServed("Missing Api Group".into())),
            };
            let start: usize = continue_token.map_or(0, |t| t.parse().unwrap());
            let end = (start + ask.limit as usize).min(all.len());
            Ok(Page {
                items: all[start..end].to_vec(),
                continue_token: (end < all.len()).then(|| end.to_string()),
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
        let cluster = FakeCluster::synthetic(1_203, &[("", "Pod"), ("apps", "Deployment")]);
        let (objects, warnings) = run(&cluster, &[("", "Pod"), ("apps", "Deployment")]);
        let objects = objects.unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(objects.len(), 2 * 1_203);
        assert_eq!(objects[1_202]["metadata"]["name"], "Pod-1202");
        assert_eq!(objects[1_203]["metadata"]["name"], "Deployment-0");
        let calls = cluster.calls.into_inner().unwrap();
        let pods: Vec<_> = calls.iter().filter(|c| c.0 == "Pod").collect();
        assert_eq!(pods.len(), 3, "1203 objects in pages of 500");
        assert!(calls.iter().all(|c| c.1 == PAGE_SIZE));
        assert_eq!(pods[0].2, None);
        assert_eq!(pods[1].2.as_deref(), Some("500"));
        assert_eq!(pods[2].2.as_deref(), Some("1000"));
    }

    #[test]
    fn forbidden_and_absent_kinds_are_skipped_with_a_warning() {
        let cluster = FakeCluster::synthetic(3, &[("", "Pod"), ("kaito.sh", "Workspace")]);
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
        let cluster = FakeCluster::synthetic(3, &[("", "Pod")]);
        let (result, _) = run(&cluster, &[("", "Pod"), ("batch", "CronJob")]);
        let err = format!("{:#}", result.unwrap_err());
        assert!(err.contains("cannot list CronJob.batch"), "{err}");
        assert!(err.contains("connection reset"), "{err}");
    }

    /// Pods with server-side-apply bookkeeping, forbidden from the second page on.
    struct RevokedMidway;

    impl Lister for RevokedMidway {
        async fn list_page(&self, ask: PageAsk<'_>) -> Result<Page, ListError> {
            match (ask.kind, ask.continue_token) {
                ("Pod", None) => Ok(Page {
                    items: vec![json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                        "name": "p", "managedFields": [{"manager": "kubectl", "fieldsV1": {}}]}})],
                    continue_token: Some("1".into()),
                }),
                _ => Err(ListError::Forbidden("pods is forbidden".into())),
            }
        }
    }

    #[test]
    fn pages_are_handed_over_without_managed_fields_and_a_kind_lost_midway_is_an_error() {
        let mut pages = Vec::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let result = runtime.block_on(list_pages(
            &RevokedMidway,
            &[("", "Pod")],
            &|w| panic!("unexpected warning {w}"),
            &mut |page| {
                pages.push(page);
                Ok(())
            },
        ));
        assert_eq!(pages.len(), 1);
        assert_eq!(pages[0][0]["metadata"], json!({"name": "p"}));
        let err = format!("{:#}", result.unwrap_err());
        assert!(
            err.contains("cannot list Pod: it went away while being read"),
            "{err}"
        );
    }
}
