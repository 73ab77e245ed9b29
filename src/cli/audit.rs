//! `gpu-admission audit`: evaluates objects that already exist, from files
//! (`kubectl get ... -A -o json`) or straight from the cluster, and reports
//! per policy and namespace the violations and the GPUs they hold, the GPU
//! nodes per pool, and (with `--prices`) what the waste costs.
use super::policy_args::PolicyArgs;
use crate::admission::Admission;
use crate::audit::{self, InvalidException};
use crate::cluster::ClusterLister;
use crate::exceptions::{self, StaticExceptions};
use crate::inventory;
use crate::k8s::json::Pointer as _;
use crate::k8s::namespaces::{with_name_label, StaticNamespaces};
use crate::k8s::workloads::is_pod;
use crate::k8s::StaticClaims;
use crate::offline;
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
    /// openreports.io/v1alpha1 Report / ClusterReport YAML: the same results.
    Openreports,
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
    /// A dated price file (region, VM size, price per hour; see
    /// docs/prices.md): adds what the waste costs per day, per namespace,
    /// policy and pool. Without it the report has no costs.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    #[command(flatten)]
    pub prometheus: super::utilization_args::PrometheusArgs,
    /// A recorded answer of the utilization query (docs/utilization.md),
    /// read instead of asking --prometheus.
    #[arg(long, value_name = "FILE", conflicts_with = "prometheus")]
    pub utilization: Option<PathBuf>,
    /// The time GpuPolicyExceptions are judged at (RFC 3339, e.g.
    /// 2026-12-31T00:00:00Z): an exception whose expiresAt is not after it
    /// lets nothing through and is listed as expired. Default: now.
    #[arg(long, value_name = "TIME", value_parser = super::evaluate::parse_at)]
    pub at: Option<std::time::SystemTime>,
}

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    offline::with_evaluation_stack(|| audit_here(&args))?
}

fn audit_here(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    let loaded = args.policies.load()?;
    let prices = args
        .prices
        .as_deref()
        .map(audit::Prices::from_file)
        .transpose()?;
    let mut notes = Vec::new();
    // Everything but Pods is held (as the periodic report holds it); Pods
    // are judged a page at a time.
    let (held, pods, namespaces, source) = if args.files.is_empty() {
        let (objects, namespaces, url, listed) =
            from_cluster(loaded.bundle.policies.template_sources(), &mut notes)?;
        let (pods, held) = objects.into_iter().partition(is_pod);
        (
            held,
            Pods::Read(pods, listed),
            namespaces,
            audit::ReportSource::Cluster(url),
        )
    } else {
        // A first pass holds all but the Pods, noting their namespaces;
        // the second reads the Pods again, a page at a time.
        let (mut held, mut pod_namespaces) = (Vec::new(), BTreeSet::new());
        for file in &args.files {
            offline::read_objects(file, &mut |object| {
                if is_pod(&object) {
                    pod_namespaces.extend(namespace_of(&object));
                } else {
                    held.push(object);
                }
                Ok(())
            })?;
        }
        // Namespaces in the files (`kubectl get namespaces,pods,... -A -o
        // json`) give their own labels, as in the cluster; they are not audited.
        let (namespace_objects, held): (Vec<Value>, Vec<Value>) =
            held.into_iter().partition(super::dump::is_namespace);
        let labels = args.namespace_labels.clone().unwrap_or_default();
        let names: BTreeSet<String> = (held.iter().filter_map(namespace_of))
            .chain(pod_namespaces)
            .chain(std::iter::once("default".to_string()))
            .collect();
        let mut namespaces: BTreeMap<String, BTreeMap<String, String>> = names
            .iter()
            .map(|n| (n.clone(), with_name_label(n, labels.clone())))
            .collect();
        namespaces.extend(
            namespace_objects
                .iter()
                .filter_map(|ns| super::dump::namespace_labels(ns, &labels)),
        );
        let namespaces = namespaces.into_iter().collect();
        let files = args.files.iter().map(|f| f.display().to_string());
        let source = audit::ReportSource::Files(files.collect());
        (held, Pods::InFiles(&args.files), namespaces, source)
    };
    let mut lookup = StaticNamespaces::new();
    for (name, labels) in namespaces {
        lookup.insert(&name, labels);
    }
    // Pods' DRA claims resolve against the claims read with them.
    let mut claims = StaticClaims::new();
    for object in &held {
        claims.insert(object, "default");
    }
    // The GpuPolicyExceptions read with the objects are honoured; one that
    // does not read is listed as invalid and lets nothing through.
    let (mut found, mut invalid) = (Vec::new(), Vec::new());
    for object in held.iter().filter(|o| audit::exceptions::is_exception(o)) {
        match loaded.bundle.policies.read_exception(object) {
            Ok(exception) => found.push(Arc::new(exception)),
            Err(errors) => invalid.push(InvalidException::new(object, &errors)),
        }
    }
    let meta = report_meta(args, source, &loaded.bundle)?;
    let admission = Admission::new(loaded.bundle, Arc::new(lookup))
        .with_claims(Arc::new(claims))
        .with_exceptions(Arc::new(match args.at {
            Some(at) => StaticExceptions::new(found).at(at),
            None => StaticExceptions::new(found),
        }));
    let mut run = audit::run::Run::new(&admission);
    let (nodes, held): (Vec<Value>, Vec<Value>) = held.into_iter().partition(audit::is_node);
    if !nodes.is_empty() {
        run.nodes(nodes);
    }
    run.objects(held);
    if let Pods::Read(_, true) = pods {
        // The cluster's Pod list: a controller with no pod has created none.
        run.pods_of_cluster(Vec::new());
    }
    pods.each_page(&mut |page| run.pods(page))?;
    let mut report = run.finish(&invalid);
    report.exception_notes = notes;
    if let Some(settings) = args.prometheus.settings(args.utilization.as_ref()) {
        let bundle = admission.bundle();
        let measured =
            super::utilization_args::measure(&settings, &report, bundle.placement.catalog())?;
        report.utilization = Some(measured);
    }
    audit::conclude(&mut report, prices.as_ref());
    match args.output {
        AuditFormat::Text => print!("{}", audit::render_text(&report)),
        AuditFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        AuditFormat::Policyreport | AuditFormat::Openreports => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            let schema = match args.output {
                AuditFormat::Openreports => audit::policy_reports::Schema::OpenReports,
                _ => audit::policy_reports::Schema::PolicyReport,
            };
            for doc in audit::policy_reports(&report, now, schema) {
                print!("---\n{}", serde_yaml::to_string(&doc)?);
            }
        }
        AuditFormat::Html => print!("{}", audit::render(&report, &meta)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the Pods to judge are.
enum Pods<'a> {
    /// Already read (from the cluster), and whether the cluster let them
    /// be listed.
    Read(Vec<Value>, bool),
    /// In these files, read again a page at a time.
    InFiles(&'a [PathBuf]),
}

impl Pods<'_> {
    /// Hands the Pods over in pages of [`inventory::PAGE_SIZE`].
    fn each_page(self, judge: &mut dyn FnMut(Vec<Value>)) -> anyhow::Result<()> {
        let size = inventory::PAGE_SIZE as usize;
        match self {
            Pods::Read(mut pods, _) => {
                while !pods.is_empty() {
                    let rest = pods.split_off(pods.len().min(size));
                    judge(std::mem::replace(&mut pods, rest));
                }
            }
            Pods::InFiles(files) => {
                let mut page = Vec::with_capacity(size);
                for file in files {
                    offline::read_objects(file, &mut |object| {
                        if is_pod(&object) {
                            page.push(object);
                            if page.len() == size {
                                judge(std::mem::take(&mut page));
                            }
                        }
                        Ok(())
                    })?;
                }
                judge(page);
            }
        }
        Ok(())
    }
}

fn namespace_of(object: &Value) -> Option<String> {
    object
        .at("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// When and against what the report is made: the policy set and its
/// digest, the catalog and its date.
fn report_meta(
    args: &AuditArgs,
    source: audit::ReportSource,
    bundle: &crate::admission::Bundle,
) -> anyhow::Result<audit::ReportMeta> {
    let policy_source = args.policies.source();
    let digest =
        crate::bundle::policy_digest(&policy_source).map_err(|e| policy_source.failed(e))?;
    let catalog = crate::bundle::catalog_name(args.policies.catalog.as_deref());
    let policies = policy_source.describe();
    Ok(audit::ReportMeta::now(
        source, policies, digest, bundle, catalog,
    ))
}

/// Objects to audit, each namespace's labels, the API server's URL, and
/// whether Pods could be listed.
type Inputs = (
    Vec<Value>,
    Vec<(String, BTreeMap<String, String>)>,
    String,
    bool,
);

/// The audited kinds of a cluster ([`inventory::audited_kinds`] of
/// `sources`), and its namespaces.
fn from_cluster(
    sources: &crate::k8s::TemplateSources,
    notes: &mut Vec<String>,
) -> anyhow::Result<Inputs> {
    offline::block_on(async {
        let no_cluster = |e: String| {
            anyhow::anyhow!("no cluster to audit ({e}); pass objects with -f FILE instead")
        };
        let (client, url) = crate::cluster::connect().await.map_err(no_cluster)?;
        let lister = ClusterLister::new(client);
        let pods_listed = std::cell::Cell::new(true);
        let warn = |message: String| {
            pods_listed.set(pods_listed.get() && !message.starts_with("skipping Pod:"));
            eprintln!("warning: {message}")
        };
        let mut kinds = inventory::audited_kinds(sources);
        // Nodes are reported per pool, not judged.
        kinds.push(("", "Node"));
        let mut objects = inventory::list_all(&lister, &kinds, &warn).await?;
        // No GpuPolicyException kind, or no right to list it: no exception
        // is honoured, said once in the report.
        let skipped = std::cell::RefCell::new(Vec::new());
        let exception_kind = [(exceptions::GROUP, exceptions::KIND)];
        let note = |message: String| {
            skipped.borrow_mut().push(format!(
                "{message}: no GpuPolicyException was read, so none is honoured"
            ))
        };
        objects.extend(inventory::list_all(&lister, &exception_kind, &note).await?);
        notes.extend(skipped.into_inner());
        let namespaces = inventory::list_all(&lister, &[("", "Namespace")], &|message| {
            warn(format!(
                "{message}; namespaceSelector and namespaceObject see no namespace labels"
            ))
        })
        .await?
        .iter()
        .filter_map(|ns| {
            let name = ns.at("/metadata/name")?.as_str()?.to_string();
            let labels = ns
                .at("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default();
            Some((name, labels))
        })
        .collect();
        Ok((objects, namespaces, url, pods_listed.get()))
    })?
}
