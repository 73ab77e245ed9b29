//! `gpu-admission evaluate -f MANIFEST`: what the webhook would do to each
//! object of a manifest: the patch, the patched object, each denial and
//! warning, and what `GpuPolicyException`s (of the policy folder and of the
//! manifest) let through.
use super::policy_args::PolicyArgs;
use crate::admission::Admission;
use crate::budgets::{self, StaticBudgets};
use crate::bundle::Loaded;
use crate::exceptions::{self, StaticExceptions};
use crate::k8s::json::str_at;
use crate::k8s::namespaces::{with_name_label, StaticNamespaces};
use crate::k8s::StaticClaims;
use crate::offline::{self, Evaluation};
use crate::review::Operation;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Yaml,
}

#[derive(Clone, Debug, clap::Args)]
pub struct EvaluateArgs {
    /// Manifest file (multi-document YAML or JSON; `List`s are opened).
    #[arg(short = 'f', long = "filename", value_name = "MANIFEST")]
    pub file: PathBuf,
    #[command(flatten)]
    pub policies: PolicyArgs,
    /// Namespace for namespaced objects that name none.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Labels of the objects' namespaces, as the cluster would have them
    /// (a namespace of --cluster adds its own).
    #[arg(long, value_name = "k=v,...", value_parser = crate::k8s::namespaces::parse_labels)]
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// A dump of the cluster the manifest is for (`kubectl get
    /// nodes,nodepools,namespaces -o json`, as `audit -f` reads): where pods
    /// land (spec.nodeName, kubernetes.io/hostname, agent pool and any other
    /// node label) is judged against its Nodes, Karpenter NodePools and the
    /// GPUs its DeviceClasses and ResourceSlices serve on nodes, and
    /// its Namespaces give their labels (tiers), as `serve` judges them in
    /// that cluster; its GpuBudgets (and the manifest's) hold the GPUs of
    /// its Pods, and of the manifest's pods as each is admitted
    /// (docs/budgets.md). Repeatable.
    #[arg(long = "cluster", value_name = "FILE")]
    pub cluster: Vec<PathBuf>,
    /// The admission operation to simulate.
    #[arg(long, value_enum, default_value = "create")]
    pub operation: OperationArg,
    /// For UPDATE: a manifest of the objects as they are now (oldObject),
    /// matched to the objects of --filename by kind, namespace and name.
    /// Without it an UPDATE changes nothing (oldObject is the object).
    #[arg(long, value_name = "MANIFEST")]
    pub old_filename: Option<PathBuf>,
    /// The user making the requests (request.userInfo.username).
    #[arg(long = "as", value_name = "USER", default_value = "gpu-admission-cli")]
    pub user: String,
    /// A group of that user (request.userInfo.groups); repeatable.
    #[arg(long = "as-group", value_name = "GROUP")]
    pub groups: Vec<String>,
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: Format,
    /// Exit with status 2 when any object is denied.
    #[arg(long)]
    pub fail_on_deny: bool,
    /// Grants the policies' `authorizer` checks answer from (a YAML list of
    /// {user | userGroup, verb, apiGroup, resource, subresource, namespace,
    /// name, path}); without it every check is denied.
    #[arg(long, value_name = "FILE")]
    pub authz: Option<PathBuf>,
    /// The time exceptions are judged at (RFC 3339, e.g.
    /// 2026-12-31T00:00:00Z): an exception whose expiresAt is not after it
    /// lets nothing through. Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_at)]
    pub at: Option<SystemTime>,
}

/// `--at`: an RFC 3339 time.
pub fn parse_at(text: &str) -> Result<SystemTime, String> {
    exceptions::parse_time(text)
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time such as 2026-12-31T00:00:00Z"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OperationArg {
    Create,
    Update,
    Delete,
}

pub fn run(args: EvaluateArgs) -> anyhow::Result<ExitCode> {
    let results = evaluate(&args)?;
    match args.output {
        Format::Text => print!("{}", render_text(&results)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&results)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&results)?),
    }
    let denied = results.iter().any(|r| !r.allowed);
    Ok(if args.fail_on_deny && denied {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// What the webhook would do to each object of `args.file`: the answers
/// `run` prints (`args.output` and `args.fail_on_deny` are not used here).
pub fn evaluate(args: &EvaluateArgs) -> anyhow::Result<Vec<Evaluation>> {
    // Compiling, too, wants the evaluation stack (deeply nested sources).
    offline::with_evaluation_stack(|| evaluate_here(args, args.policies.load()?))?
}

/// [`evaluate`] with the policy folder already loaded (`args.policies` is
/// not read; load it as [`PolicyArgs::load`] inside
/// [`offline::with_evaluation_stack`]): what a caller judging many
/// manifests against one folder loads once.
pub fn evaluate_loaded(args: &EvaluateArgs, loaded: Loaded) -> anyhow::Result<Vec<Evaluation>> {
    offline::with_evaluation_stack(|| evaluate_here(args, loaded))?
}

fn evaluate_here(args: &EvaluateArgs, loaded: Loaded) -> anyhow::Result<Vec<Evaluation>> {
    let objects = offline::read_manifest(&args.file)?;
    // The manifest's ResourceClaims and templates are what its pods claim.
    let mut claims = StaticClaims::new();
    for obj in &objects {
        claims.insert(obj, args.namespace.as_deref().unwrap_or("default"));
    }
    // So are the cluster's, which its pods claim too.
    let dump = super::dump::ClusterDump::read(&args.cluster)?;
    for obj in &dump.budgets {
        claims.insert(obj, "default");
    }
    let operation = match args.operation {
        OperationArg::Create => Operation::Create,
        OperationArg::Update => Operation::Update,
        OperationArg::Delete => Operation::Delete,
    };
    let old_objects = match &args.old_filename {
        Some(path) => offline::read_manifest(path)?,
        None => Vec::new(),
    };
    // As kube-apiserver sends it: `groups` is left out when there are none.
    let mut user = serde_json::json!({"username": args.user});
    if !args.groups.is_empty() {
        user["groups"] = serde_json::json!(args.groups);
    }
    let mut requests = Vec::new();
    for obj in objects {
        let old = match (operation, &args.old_filename) {
            (Operation::Update, Some(path)) => Some(
                old_objects
                    .iter()
                    .find(|o| same_object(o, &obj, args.namespace.as_deref()))
                    .cloned()
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "{}: no {} {} to update",
                            path.display(),
                            str_at(&obj, "/kind"),
                            str_at(&obj, "/metadata/name")
                        )
                    })?,
            ),
            (Operation::Update, None) => Some(obj.clone()),
            _ => None,
        };
        let mut req = offline::build_request(obj, old, operation, args.namespace.as_deref());
        req.user_info = user.clone();
        requests.push(req);
    }
    let labels = args.namespace_labels.clone().unwrap_or_default();
    let namespaces: BTreeSet<String> = requests
        .iter()
        .filter_map(|r| r.namespace.clone())
        .collect();
    let mut lookup = StaticNamespaces::new();
    for ns in &namespaces {
        lookup.insert(ns, with_name_label(ns, labels.clone()));
    }
    // The cluster's namespaces carry their own labels.
    for (ns, own) in dump.namespace_labels(&labels) {
        lookup.insert(&ns, own);
    }
    // The manifest's readable exceptions let its other objects through; an
    // unreadable one is denied as an object, with its field errors.
    let mut found = Vec::new();
    for req in requests
        .iter()
        .filter(|r| exceptions::webhook::is_exception(r))
    {
        if let Some(object) = &req.object {
            if let Ok(exception) = loaded.bundle.policies.read_exception(object) {
                found.push(Arc::new(exception));
            }
        }
    }
    let mut manifest_exceptions = StaticExceptions::new(found);
    if let Some(at) = args.at {
        manifest_exceptions = manifest_exceptions.at(at);
    }
    // The budgets of the manifest and the dump, holding what the dump's
    // pods hold (by the size of the dump's node a pod is bound to); each
    // pod of the manifest admitted adds to it.
    let listed = (dump.budgets.iter().chain(&dump.nodes))
        .chain(objects_of(&requests).filter(|o| o["kind"] == budgets::KIND));
    let placement = &loaded.bundle.placement;
    let (catalog, resources) = (placement.catalog(), placement.gpu_resources());
    let listed = listed.collect::<Vec<_>>();
    let nodes = dump.node_lookup();
    let judged_by = nodes.as_ref().map(|n| n as &dyn crate::gpu::NodeLookup);
    let budgets =
        StaticBudgets::of_objects(&listed, &lookup, &claims, judged_by, catalog, resources);
    let mut admission = Admission::new(loaded.bundle, Arc::new(lookup))
        .with_budgets(Arc::new(budgets))
        .with_claims(Arc::new(claims))
        .with_authorizer(super::authorizer(args.authz.as_deref())?)
        .with_exceptions(Arc::new(manifest_exceptions));
    if let Some(nodes) = nodes {
        admission = admission.with_nodes(Arc::new(nodes));
    }
    Ok(requests
        .into_iter()
        .map(|req| offline::evaluate(&admission, req))
        .collect())
}

/// The objects of `requests`.
fn objects_of(requests: &[crate::review::Request]) -> impl Iterator<Item = &serde_json::Value> {
    requests.iter().filter_map(|r| r.object.as_ref())
}

/// Whether `a` and `b` are the same object: apiVersion group, kind,
/// namespace (defaulted as for the request) and name.
fn same_object(a: &serde_json::Value, b: &serde_json::Value, namespace: Option<&str>) -> bool {
    let group = |o| {
        str_at(o, "/apiVersion")
            .rsplit_once('/')
            .map_or("", |(g, _)| g)
    };
    let ns = |o| match str_at(o, "/metadata/namespace") {
        "" => namespace.unwrap_or_default(),
        n => n,
    };
    group(a) == group(b)
        && str_at(a, "/kind") == str_at(b, "/kind")
        && ns(a) == ns(b)
        && str_at(a, "/metadata/name") == str_at(b, "/metadata/name")
}

/// Human-readable report, one block per object.
pub fn render_text(results: &[Evaluation]) -> String {
    let mut out = String::new();
    for r in results {
        let verdict = if r.allowed { "allowed" } else { "DENIED" };
        let _ = writeln!(out, "{} {}: {verdict}", r.kind, r.name);
        if let Some(patch) = &r.patch {
            let by = match (r.profile.as_deref(), r.mutations.is_empty()) {
                (Some(p), false) => format!("placement profile {p} and mutating policies"),
                (None, false) => "mutating policies".to_string(),
                (Some(p), true) => format!("placement profile {p}"),
                (None, true) => "gpu-admission".to_string(),
            };
            let _ = writeln!(out, "  patched by {by}:");
            operations(&mut out, patch);
        }
        for m in &r.mutations {
            let _ = writeln!(
                out,
                "  mutating policy {} (binding {}):",
                m.policy, m.binding
            );
            operations(&mut out, &m.patch);
        }
        for d in &r.denials {
            let _ = writeln!(out, "  denied: {d}");
        }
        for w in &r.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
        for (k, v) in &r.audit_annotations {
            let _ = writeln!(out, "  audit: {k}={v}");
        }
        for e in &r.excepted {
            let _ = writeln!(
                out,
                "  excepted ({}): {}\n    {}",
                e.action.to_lowercase(),
                e.message,
                e.allowed_by()
            );
        }
    }
    let denied = results.iter().filter(|r| !r.allowed).count();
    let warned = results.iter().filter(|r| !r.warnings.is_empty()).count();
    let patched = results.iter().filter(|r| r.patch.is_some()).count();
    let excepted = results.iter().filter(|r| !r.excepted.is_empty()).count();
    let _ = write!(
        out,
        "{} objects: {denied} denied, {warned} warned, {patched} patched",
        results.len()
    );
    if excepted > 0 {
        let _ = write!(out, ", {excepted} let through by exceptions");
    }
    out.push('\n');
    out
}

/// A patch's operations, one a line.
fn operations(out: &mut String, patch: &json_patch::Patch) {
    for op in &patch.0 {
        let _ = writeln!(out, "    {}", serde_json::to_string(op).unwrap_or_default());
    }
}
