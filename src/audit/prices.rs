//! Money: a dated price file (`--prices FILE`, one hourly price per region
//! and VM size) turns the GPUs held by violating workloads, the idle GPUs
//! of nodes and the GPUs of idle pods into a cost per day, per namespace,
//! policy and pool. The
//! file's date, source and currency are shown with every figure.
use super::nodes::{GpuNode, NodeReport};
use super::Report;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// A price file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prices {
    /// When the prices were read (`YYYY-MM-DD`).
    pub date: String,
    /// Where they come from.
    pub source: String,
    /// `USD` unless the file says otherwise.
    #[serde(default = "usd")]
    pub currency: String,
    /// The prices are examples, not a quote: the page says so.
    #[serde(default)]
    pub example: bool,
    pub prices: Vec<Price>,
}

/// The hourly price of one VM size in one region.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    /// Azure region name (`eastus`), as nodes carry it in
    /// `topology.kubernetes.io/region`.
    pub region: String,
    /// VM size (`Standard_NC24ads_A100_v4`).
    pub size: String,
    /// Price of the whole VM per hour.
    pub per_hour: f64,
}

fn usd() -> String {
    "USD".to_string()
}

/// Why a price file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PricesError {
    #[error("cannot read price file {file}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("price file {file}: {message}")]
    Invalid { file: String, message: String },
}

impl Prices {
    pub fn from_file(path: &Path) -> Result<Prices, PricesError> {
        let file = path.display().to_string();
        match std::fs::read_to_string(path) {
            Ok(text) => Prices::from_str(&text, &file),
            Err(source) => Err(PricesError::Read { file, source }),
        }
    }

    /// Parses and checks a price file's text (`file` names it in errors).
    pub fn from_str(text: &str, file: &str) -> Result<Prices, PricesError> {
        let invalid = |message: String| PricesError::Invalid {
            file: file.to_string(),
            message,
        };
        let prices: Prices = serde_yaml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let date_ok = prices.date.len() == 10
            && prices
                .date
                .parse::<k8s_openapi::jiff::civil::Date>()
                .is_ok();
        if !date_ok {
            return Err(invalid(format!(
                "date {:?} is not a YYYY-MM-DD date",
                prices.date
            )));
        }
        if prices.source.trim().is_empty() {
            return Err(invalid(
                "source is empty: say where the prices come from".into(),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, p) in prices.prices.iter().enumerate() {
            if p.region.trim().is_empty() || p.size.trim().is_empty() {
                return Err(invalid(format!(
                    "prices[{i}]: region and size are required"
                )));
            }
            if !p.per_hour.is_finite() || p.per_hour < 0.0 {
                return Err(invalid(format!(
                    "prices[{i}] ({} in {}): perHour {} is not a price",
                    p.size, p.region, p.per_hour
                )));
            }
            if !seen.insert((key(&p.region), key(&p.size))) {
                return Err(invalid(format!(
                    "prices[{i}]: {} in {} is priced twice",
                    p.size, p.region
                )));
            }
        }
        if prices.prices.is_empty() {
            return Err(invalid("no prices".into()));
        }
        Ok(prices)
    }

    /// The hourly price of `size` in `region`; with no region known, the
    /// price of the size when the file has it in one region only.
    pub fn per_hour(&self, region: Option<&str>, size: &str) -> Option<f64> {
        let size = key(size);
        let mut of_size = self.prices.iter().filter(|p| key(&p.size) == size);
        match region {
            Some(region) => of_size
                .find(|p| key(&p.region) == key(region))
                .map(|p| p.per_hour),
            None => {
                let first = of_size.next()?;
                of_size.next().is_none().then_some(first.per_hour)
            }
        }
    }

    /// The price of one GPU of `node` per hour: the VM's price over the
    /// GPUs it has (offered or reported unhealthy).
    pub fn per_gpu_hour(&self, node: &GpuNode) -> Option<f64> {
        let gpus = node.gpus_allocatable.max(node.gpus_capacity);
        if gpus <= 0 {
            return None;
        }
        self.per_hour(node.region.as_deref(), &node.size)
            .map(|p| p / gpus as f64)
    }
}

/// Region and size names compare without case, spaces or dashes
/// (`East US` is `eastus`).
fn key(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// What waste costs per day.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Money {
    pub currency: String,
    /// The price file's date and source.
    pub price_date: String,
    pub price_source: String,
    pub example: bool,
    /// GPUs held by violating workloads, per day (each object once).
    pub violations_per_day: f64,
    pub idle_nodes_per_day: f64,
    /// Node GPUs reported unhealthy (unusable), per day.
    pub unusable_nodes_per_day: f64,
    /// Violations per namespace (each object once), most first.
    pub by_namespace: Vec<Cost>,
    /// Violations per policy (an object violating two counts under both).
    pub by_policy: Vec<Cost>,
    pub by_pool: Vec<Cost>,
    /// Held GPUs of violating workloads that could not be priced (no node
    /// of a priced size to take the price from).
    pub unpriced_gpus: i64,
    /// Idle node GPUs of sizes the file does not price.
    pub unpriced_idle_gpus: i64,
    /// The GPUs of idle pods (the utilization section), each at its
    /// node's price, per day; absent when utilization was not measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_pods_per_day: Option<f64>,
    /// What the GPU-hours the idle pods held within the utilization
    /// window cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_pods_in_window: Option<f64>,
    /// Idle pods per namespace, per day, most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub idle_pods_by_namespace: Vec<Cost>,
    /// GPUs of idle pods whose node has no price (a size the file does
    /// not price, or a node not read).
    pub unpriced_idle_pod_gpus: i64,
    pub unpriced_unusable_gpus: i64,
    /// How a workload's GPU is priced: the node its pod runs on, else the
    /// mean price of a GPU over the cluster's priced GPU nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_gpu_hour: Option<f64>,
}

/// One line of a cost table: what, and how much per day.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    pub name: String,
    pub gpus: i64,
    pub per_day: f64,
}

/// The price of a GPU per hour in a report's cluster: a held pod's at its
/// node's price, anything else at the mean over the priced GPU nodes.
/// Sections that find waste in pods (idle GPU pods...) price it here.
pub struct GpuPricer<'r> {
    node_price: BTreeMap<&'r str, f64>,
    pod_node: BTreeMap<(&'r str, &'r str), &'r str>,
    /// The mean price of a GPU-hour over the priced GPU nodes.
    pub mean: Option<f64>,
}

impl<'r> GpuPricer<'r> {
    pub fn new(report: &'r Report, prices: &Prices) -> GpuPricer<'r> {
        let gpu_nodes = report
            .nodes
            .as_ref()
            .map_or(&[][..], |n| n.gpu_node_list.as_slice());
        let node_price: BTreeMap<&str, f64> = gpu_nodes
            .iter()
            .filter_map(|n| Some((n.name.as_str(), prices.per_gpu_hour(n)?)))
            .collect();
        let (sum, gpus) = gpu_nodes
            .iter()
            .filter_map(|n| Some((node_price.get(n.name.as_str())?, n.gpus_allocatable)))
            .fold((0.0, 0i64), |(s, g), (p, n)| (s + p * n as f64, g + n));
        let pod_node = report
            .held_pods
            .iter()
            .filter_map(|p| Some(((p.namespace.as_str(), p.name.as_str()), p.node.as_deref()?)))
            .collect();
        GpuPricer {
            node_price,
            pod_node,
            mean: (gpus > 0).then(|| sum / gpus as f64),
        }
    }

    /// The price of one GPU-hour of the pod `namespace/name`.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<f64> {
        self.pod_node
            .get(&(namespace, name))
            .and_then(|node| self.node(node))
            .or(self.mean)
    }

    /// The price of one GPU-hour of the GPU node `name`.
    pub fn node(&self, name: &str) -> Option<f64> {
        self.node_price.get(name).copied()
    }
}

/// What the report's waste costs at `prices`. A violating pod's GPUs are
/// priced at its node's price per GPU; a controller's (whose pods may run
/// anywhere) at the mean over the cluster's priced GPU nodes.
pub fn cost(report: &Report, prices: &Prices) -> Money {
    let empty = NodeReport::default();
    let nodes = report.nodes.as_ref().unwrap_or(&empty);
    let pricer = GpuPricer::new(report, prices);
    let mean = pricer.mean;
    let mut money = Money {
        currency: prices.currency.clone(),
        price_date: prices.date.clone(),
        price_source: prices.source.clone(),
        example: prices.example,
        mean_gpu_hour: mean,
        ..Money::default()
    };
    let mut namespaces: BTreeMap<String, (i64, f64)> = BTreeMap::new();
    let mut policies: BTreeMap<String, (i64, f64)> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let capacity: BTreeSet<_> = report.capacity.iter().map(|c| c.object()).collect();
    for f in &report.findings {
        if f.gpus <= 0 || capacity.contains(&f.object()) {
            continue;
        }
        let price = if f.kind == "Pod" {
            pricer.pod(f.namespace.as_deref().unwrap_or_default(), &f.name)
        } else {
            mean
        };
        let Some(per_gpu_hour) = price else {
            if seen.insert(f.object()) {
                money.unpriced_gpus += f.gpus;
            }
            continue;
        };
        let per_day = f.gpus as f64 * per_gpu_hour * 24.0;
        add(&mut policies, &f.policy, f.gpus, per_day);
        if seen.insert(f.object()) {
            add(
                &mut namespaces,
                f.namespace.as_deref().unwrap_or_default(),
                f.gpus,
                per_day,
            );
            money.violations_per_day += per_day;
        }
    }
    let mut pools: BTreeMap<String, (i64, f64)> = BTreeMap::new();
    for n in &nodes.gpu_node_list {
        if n.gpus_idle == 0 {
            continue;
        }
        match prices.per_gpu_hour(n) {
            Some(p) => {
                let per_day = n.gpus_idle as f64 * p * 24.0;
                add(&mut pools, &n.pool, n.gpus_idle, per_day);
                money.idle_nodes_per_day += per_day;
            }
            None => money.unpriced_idle_gpus += n.gpus_idle,
        }
    }
    for n in &nodes.gpu_node_list {
        match prices.per_gpu_hour(n) {
            Some(p) => money.unusable_nodes_per_day += n.gpus_unusable as f64 * p * 24.0,
            None => money.unpriced_unusable_gpus += n.gpus_unusable,
        }
    }
    if let Some(m) = (report.utilization.as_ref()).and_then(|u| u.measured.as_ref()) {
        let (mut per_day, mut in_window) = (0.0, 0.0);
        let mut idle: BTreeMap<String, (i64, f64)> = BTreeMap::new();
        for p in &m.idle_pods {
            let Some(price) = p.node.as_deref().and_then(|n| pricer.node(n)) else {
                money.unpriced_idle_pod_gpus += p.gpus;
                continue;
            };
            let day = p.gpus as f64 * price * 24.0;
            add(&mut idle, &p.namespace, p.gpus, day);
            per_day += day;
            in_window += p.gpu_hours * price;
        }
        money.idle_pods_per_day = Some(per_day);
        money.idle_pods_in_window = Some(in_window);
        money.idle_pods_by_namespace = sorted(idle);
    }
    money.by_namespace = sorted(namespaces);
    money.by_policy = sorted(policies);
    money.by_pool = sorted(pools);
    money
}

impl Money {
    /// What idle pods cost, in words, for the text report's cost line.
    pub fn idle_pods_text(&self) -> String {
        let (Some(per_day), Some(in_window)) = (self.idle_pods_per_day, self.idle_pods_in_window)
        else {
            return "idle GPU pods not measured".to_string();
        };
        let currency = &self.currency;
        let mut text = format!("{per_day:.2} {currency} in idle GPU pods ({in_window:.2} {currency} for their GPU-hours within the window");
        match self.unpriced_idle_pod_gpus {
            0 => {}
            1 => text.push_str("; 1 GPU on a node without a price"),
            n => _ = write!(text, "; {n} GPUs on nodes without a price"),
        }
        text.push(')');
        text
    }
}

/// Counts `gpus` costing `per_day` under `name`.
fn add(map: &mut BTreeMap<String, (i64, f64)>, name: &str, gpus: i64, per_day: f64) {
    let entry = map.entry(name.to_string()).or_default();
    entry.0 += gpus;
    entry.1 += per_day;
}

fn sorted(map: BTreeMap<String, (i64, f64)>) -> Vec<Cost> {
    let mut out: Vec<Cost> = map
        .into_iter()
        .map(|(name, (gpus, per_day))| Cost {
            name,
            gpus,
            per_day,
        })
        .collect();
    out.sort_by(|a, b| {
        b.per_day
            .total_cmp(&a.per_day)
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const FILE: &str = r#"
date: "2026-11-01"
source: "test prices"
example: true
prices:
  - {region: eastus, size: Standard_NC24ads_A100_v4, perHour: 3.6}
  - {region: westeurope, size: Standard_NC24ads_A100_v4, perHour: 4.0}
  - {region: eastus, size: Standard_NC4as_T4_v3, perHour: 0.5}
"#;

    #[test]
    fn prices_are_looked_up_by_region_and_size() {
        let prices = Prices::from_str(FILE, "p.yaml").unwrap();
        assert_eq!(prices.currency, "USD");
        assert_eq!(
            prices.per_hour(Some("East US"), "standard_nc24ads_a100_v4"),
            Some(3.6)
        );
        assert_eq!(
            prices.per_hour(Some("westeurope"), "Standard_NC24ads_A100_v4"),
            Some(4.0)
        );
        assert_eq!(
            prices.per_hour(None, "Standard_NC24ads_A100_v4"),
            None,
            "two regions"
        );
        assert_eq!(prices.per_hour(None, "Standard_NC4as_T4_v3"), Some(0.5));
        assert_eq!(prices.per_hour(Some("eastus"), "Standard_ND96asr_v4"), None);
    }

    #[test]
    fn a_pod_is_priced_at_its_node_and_anything_else_at_the_mean() {
        use crate::audit::nodes::HeldPod;
        let prices = test_prices();
        let report = Report {
            nodes: Some(priced_nodes()),
            held_pods: vec![HeldPod {
                namespace: "ml".into(),
                name: "nb".into(),
                node: Some("t4".into()),
                gpus: 1,
                ..HeldPod::default()
            }],
            ..Report::default()
        };
        let pricer = GpuPricer::new(&report, &prices);
        assert_eq!(
            pricer.mean,
            Some((3.6 + 0.5) / 2.0),
            "unpriced nodes left out"
        );
        assert_eq!(pricer.pod("ml", "nb"), Some(0.5));
        assert_eq!(pricer.pod("ml", "elsewhere"), pricer.mean);
        assert_eq!(
            GpuPricer::new(&Report::default(), &prices).pod("ml", "nb"),
            None
        );
    }

    /// An idle pod found by a utilization section of `window_hours`, on
    /// `node`, idle for the whole window.
    pub(crate) fn idle_pod(
        namespace: &str,
        pod: &str,
        node: &str,
        gpus: i64,
        hours: f64,
    ) -> crate::audit::utilization::IdlePod {
        crate::audit::utilization::IdlePod {
            namespace: namespace.into(),
            pod: pod.into(),
            node: Some(node.into()),
            gpus,
            metric: crate::audit::utilization::ENGINE_ACTIVE,
            peak_percent: 1.0,
            mean_percent: 0.5,
            hours,
            gpu_hours: gpus as f64 * hours,
        }
    }

    /// A utilization section that found `idle_pods`.
    pub(crate) fn measured(
        idle_pods: Vec<crate::audit::utilization::IdlePod>,
    ) -> crate::audit::utilization::Utilization {
        use crate::audit::utilization::{Measured, Utilization};
        Utilization {
            source: "file answer.json".into(),
            window: "12h".into(),
            window_seconds: 12 * 3600,
            threshold_percent: 5.0,
            sizing: crate::audit::utilization::sizing::DEFAULT_RULES,
            missing: None,
            measured: Some(Measured {
                measured_at: "2026-12-01T00:00:00Z".into(),
                metrics: vec![crate::audit::utilization::ENGINE_ACTIVE.into()],
                gpu_pods: idle_pods.len(),
                busy_pods: 0,
                recent_pods: 0,
                idle_gpus: idle_pods.iter().map(|p| p.gpus).sum(),
                gpu_hours_wasted: idle_pods.iter().map(|p| p.gpu_hours).sum(),
                idle_pods,
                ..Measured::default()
            }),
        }
    }

    /// Priced GPU nodes: `a100` (3.6 an hour, 1 GPU), `t4` (0.5, 1 GPU);
    /// `nd` is of a size the file does not price.
    pub(crate) fn priced_nodes() -> NodeReport {
        let node = |name: &str, size: &str, gpus: i64| GpuNode {
            name: name.into(),
            size: size.into(),
            region: Some("eastus".into()),
            gpus_allocatable: gpus,
            ..GpuNode::default()
        };
        NodeReport {
            gpu_node_list: vec![
                node("a100", "Standard_NC24ads_A100_v4", 1),
                node("t4", "Standard_NC4as_T4_v3", 1),
                node("nd", "Standard_ND96asr_v4", 8),
            ],
            ..NodeReport::default()
        }
    }

    pub(crate) fn test_prices() -> Prices {
        Prices::from_str(FILE, "p.yaml").unwrap()
    }

    #[test]
    fn idle_pods_cost_their_gpus_at_their_nodes_price() {
        let mut report = Report {
            nodes: Some(priced_nodes()),
            ..Report::default()
        };
        let prices = test_prices();
        let money = cost(&report, &prices);
        assert_eq!(
            (money.idle_pods_per_day, money.idle_pods_in_window),
            (None, None),
            "no utilization section: not measured, not 0"
        );
        assert!(money.idle_pods_text().contains("not measured"));
        report.utilization = Some(measured(vec![
            idle_pod("ml", "nb", "a100", 1, 12.0),
            idle_pod("ml", "eval", "t4", 1, 6.0),
            idle_pod("research", "big", "nd", 8, 12.0),
            idle_pod("research", "small", "t4", 1, 12.0),
        ]));
        let money = cost(&report, &prices);
        // Per day: a100 3.6 × 24, t4 0.5 × 24 twice; nd not priced.
        assert_eq!(money.idle_pods_per_day, Some(86.4 + 12.0 + 12.0));
        // Within the window: 12 GPU-hours at 3.6, 6 and 12 at 0.5.
        assert_eq!(money.idle_pods_in_window, Some(43.2 + 3.0 + 6.0));
        assert_eq!(money.unpriced_idle_pod_gpus, 8);
        let by_namespace: Vec<(&str, i64, f64)> = (money.idle_pods_by_namespace.iter())
            .map(|c| (c.name.as_str(), c.gpus, c.per_day))
            .collect();
        assert_eq!(
            by_namespace,
            [("ml", 2, 86.4 + 12.0), ("research", 1, 12.0)]
        );
        assert_eq!(
            money.idle_pods_text(),
            "110.40 USD in idle GPU pods (52.20 USD for their GPU-hours within the window; 8 GPUs on nodes without a price)"
        );
        // Neither the violations nor the idle nodes change.
        assert_eq!(
            (money.violations_per_day, money.idle_nodes_per_day),
            (0.0, 0.0)
        );
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let err = |text: &str| Prices::from_str(text, "p.yaml").unwrap_err().to_string();
        assert!(err("date: 2026\nsource: s\nprices: []").contains("not a YYYY-MM-DD"));
        let no_date = err("source: s\nprices: []");
        assert!(
            no_date.contains("p.yaml") && no_date.contains("date"),
            "{no_date}"
        );
        let twice = "date: \"2026-01-01\"\nsource: s\nprices:\n- {region: eastus, size: A, perHour: 1}\n- {region: East US, size: a, perHour: 2}";
        assert!(err(twice).contains("priced twice"), "{}", err(twice));
        let negative =
            "date: \"2026-01-01\"\nsource: s\nprices:\n- {region: eastus, size: A, perHour: -1}";
        assert!(err(negative).contains("is not a price"));
        let unknown = "date: \"2026-01-01\"\nsource: s\nprice: []";
        assert!(err(unknown).contains("unknown field"), "{}", err(unknown));
    }
}
