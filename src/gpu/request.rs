//! What a pod asks for: GPUs per container and per pod, counted the way
//! kube-scheduler counts them.
use super::claims::ClaimGpuRequest;
use super::GpuResources;
use crate::k8s::json::Pointer as _;
use serde_json::Value;
use std::collections::BTreeMap;

/// What a pod spec asks for, per container and in total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodGpuRequest {
    /// Every container and init container (not ephemeral containers), in
    /// spec order: `spec.initContainers` first, then `spec.containers`.
    pub containers: Vec<ContainerGpuRequest>,
    /// GPUs per resource as the scheduler reserves them for the pod; only
    /// resources with a count above zero. Devices of the pod's DRA claims
    /// count here too, keyed by device class (`gpu.nvidia.com`).
    pub effective: BTreeMap<String, u64>,
    /// The pod's DRA claims (`spec.resourceClaims`), once resolved
    /// ([`PodGpuRequest::add_claims`]).
    pub claims: Vec<ClaimGpuRequest>,
}

/// One container's GPU resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerGpuRequest {
    pub name: String,
    pub kind: ContainerKind,
    /// Every GPU resource named in `limits` or `requests`, including `"0"`
    /// and malformed quantities.
    pub resources: BTreeMap<String, GpuQuantity>,
}

/// Where a container sits in the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerKind {
    /// `spec.containers[*]`.
    Container,
    /// `spec.initContainers[*]` that runs to completion before the app starts.
    InitContainer,
    /// `spec.initContainers[*]` with `restartPolicy: Always`: runs beside the app.
    Sidecar,
    /// `spec.ephemeralContainers[*]`: added to a running pod (`kubectl
    /// debug`); never part of what the pod asks for.
    Ephemeral,
}

/// One GPU resource of one container, as written and as counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuQuantity {
    /// The text in `resources.limits`, if any (numbers as JSON renders them).
    pub limit: Option<String>,
    /// The text in `resources.requests`, if any.
    pub request: Option<String>,
    /// The count the container gets: the limit when set, else the request.
    pub count: Result<u64, QuantityError>,
}

/// Why a GPU quantity is not a whole, non-negative number of devices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity")]
    Invalid(String),
    #[error("{0:?} is not a whole number of devices")]
    Fraction(String),
    #[error("{0:?} is negative")]
    Negative(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

impl ContainerKind {
    /// The name used in the `gpu` CEL variable: `container`,
    /// `initContainer`, `sidecar`, `ephemeralContainer`.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerKind::Container => "container",
            ContainerKind::InitContainer => "initContainer",
            ContainerKind::Sidecar => "sidecar",
            ContainerKind::Ephemeral => "ephemeralContainer",
        }
    }
}

impl GpuQuantity {
    pub fn is_malformed(&self) -> bool {
        self.count.is_err()
    }
}

impl ContainerGpuRequest {
    /// Well-formed GPU counts above zero, per resource.
    pub fn gpus(&self) -> BTreeMap<String, u64> {
        self.resources
            .iter()
            .filter_map(|(name, q)| match q.count {
                Ok(n) if n > 0 => Some((name.clone(), n)),
                _ => None,
            })
            .collect()
    }

    /// Sum of the well-formed GPU counts.
    pub fn total(&self) -> u64 {
        self.gpus().values().fold(0, |a, n| a.saturating_add(*n))
    }

    /// Whether any GPU quantity of this container is malformed.
    pub fn has_malformed(&self) -> bool {
        self.resources.values().any(GpuQuantity::is_malformed)
    }
}

impl PodGpuRequest {
    /// Adds the pod's DRA claims: each claim's GPU devices count once for
    /// the pod, however many containers share it.
    pub fn add_claims(&mut self, claims: Vec<ClaimGpuRequest>) {
        for claim in &claims {
            add_into(&mut self.effective, &claim.devices());
        }
        self.effective.retain(|_, n| *n > 0);
        self.claims.extend(claims);
    }

    /// Whether the pod asks for a GPU: a count above zero, or a malformed
    /// quantity (someone meant to ask; the policies say what is wrong).
    pub fn requested(&self) -> bool {
        !self.effective.is_empty() || self.has_malformed()
    }

    /// Sum over resources of the effective counts.
    pub fn total(&self) -> u64 {
        self.effective.values().fold(0, |a, n| a.saturating_add(*n))
    }

    pub fn has_malformed(&self) -> bool {
        self.containers
            .iter()
            .any(ContainerGpuRequest::has_malformed)
    }

    /// Whether the pod asks for MIG slices (`nvidia.com/mig-<profile>`),
    /// which only sizes whose GPUs support MIG can serve.
    pub fn asks_for_mig(&self) -> bool {
        self.resources()
            .iter()
            .any(|r| r.starts_with("nvidia.com/mig-"))
    }

    /// The GPU resources the pod asks for: effective counts above zero and
    /// malformed quantities.
    pub fn resources(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.effective.keys().map(String::as_str).collect();
        for c in &self.containers {
            for (name, q) in &c.resources {
                if q.is_malformed() && !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        names.sort_unstable();
        names
    }
}

/// Reads the GPU resources of every container and init container of
/// `pod_spec` (a Pod's `spec` or a template's `spec`). Lenient: fields of the
/// wrong shape are skipped, quantities that are not whole counts are kept as
/// malformed.
pub fn pod_gpu_request(pod_spec: &Value, resources: &GpuResources) -> PodGpuRequest {
    let mut containers = Vec::new();
    for c in array(pod_spec, "initContainers") {
        let kind = if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            ContainerKind::Sidecar
        } else {
            ContainerKind::InitContainer
        };
        containers.push(container_request(c, kind, resources));
    }
    for c in array(pod_spec, "containers") {
        containers.push(container_request(c, ContainerKind::Container, resources));
    }
    let effective = effective_counts(&containers);
    PodGpuRequest {
        containers,
        effective,
        claims: Vec::new(),
    }
}

/// The GPU resources of each ephemeral container of `pod_spec`, in spec
/// order. Kubernetes rejects resources on ephemeral containers, so these are
/// normally empty; they are read so that nothing written there goes unseen.
pub fn ephemeral_container_requests(
    pod_spec: &Value,
    resources: &GpuResources,
) -> Vec<ContainerGpuRequest> {
    array(pod_spec, "ephemeralContainers")
        .map(|c| container_request(c, ContainerKind::Ephemeral, resources))
        .collect()
}

/// Parses a quantity as a whole, non-negative count, with Kubernetes'
/// quantity grammar: `<sign><digits>[.<digits>]<suffix>` where the suffix is
/// binary (`Ki`..`Ei`), decimal (`n`, `u`, `m`, `k`, `M`..`E`) or an exponent
/// (`e3`, `E-2`). So `"2"`, `"2000m"`, `"1e1"` are counts; `"500m"`, `"1.5"`
/// are fractions.
pub fn parse_count(raw: &str) -> Result<u64, QuantityError> {
    parse_quantity(raw, 0, false)
}

/// Parses a resource amount as Kubernetes does, in units of `10^-scale`
/// (3 for CPU millicores, 0 for memory bytes), with the grammar of
/// [`parse_count`]; a remainder rounds up, as `Quantity.MilliValue` and
/// `Quantity.Value` round it (`"0.5m"` CPU is 1 millicore).
pub fn parse_amount(raw: &str, scale: u32) -> Result<u64, QuantityError> {
    parse_quantity(raw, i64::from(scale), true)
}

/// `raw` times `10^shift`, a fraction rounded up when `round_up`, else
/// an error.
fn parse_quantity(raw: &str, shift: i64, round_up: bool) -> Result<u64, QuantityError> {
    let invalid = || QuantityError::Invalid(raw.to_string());
    let (negative, rest) = match raw.as_bytes().first() {
        Some(b'-') => (true, &raw[1..]),
        Some(b'+') => (false, &raw[1..]),
        _ => (false, raw),
    };
    let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (int_part, rest) = rest.split_at(int_len);
    let (frac_part, suffix) = match rest.strip_prefix('.') {
        Some(after) => {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            after.split_at(n)
        }
        None => ("", rest),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(invalid());
    }
    let (suffix_exp10, exp2) = parse_suffix(suffix).ok_or_else(invalid)?;
    // Whole numbers, what GPU counts are, are read in place.
    let digits: std::borrow::Cow<str> = if frac_part.is_empty() {
        int_part.into()
    } else {
        [int_part, frac_part].concat().into()
    };
    let mut significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative(raw.to_string()));
    }
    let frac_len = i64::try_from(frac_part.len()).map_err(|_| invalid())?;
    let mut exp10 = suffix_exp10.saturating_add(shift).saturating_sub(frac_len);
    while exp10 < 0 && significant.ends_with('0') {
        significant = &significant[..significant.len() - 1];
        exp10 += 1;
    }
    let too_large = || QuantityError::TooLarge(raw.to_string());
    let fraction = || QuantityError::Fraction(raw.to_string());
    let Ok(mantissa) = significant.parse::<u128>() else {
        return Err(if exp10 < 0 { fraction() } else { too_large() });
    };
    let scaled = mantissa.checked_shl(exp2).ok_or_else(too_large)?;
    if scaled >> exp2 != mantissa {
        return Err(too_large());
    }
    let value = if exp10 >= 0 {
        let pow = u32::try_from(exp10)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .ok_or_else(too_large)?;
        scaled.checked_mul(pow).ok_or_else(too_large)?
    } else {
        // A divisor beyond u128 exceeds any mantissa we hold: a fraction.
        let pow = u32::try_from(-exp10)
            .ok()
            .and_then(|e| 10u128.checked_pow(e));
        match pow {
            Some(pow) if scaled % pow == 0 => scaled / pow,
            Some(pow) if round_up => scaled / pow + 1,
            None if round_up => 1,
            _ => return Err(fraction()),
        }
    };
    // CEL ints are i64: keep counts within that.
    match u64::try_from(value) {
        Ok(v) if v <= i64::MAX as u64 => Ok(v),
        _ => Err(too_large()),
    }
}

/// Decimal exponent and binary exponent of a quantity suffix.
fn parse_suffix(suffix: &str) -> Option<(i64, u32)> {
    const BINARY: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [&str; 9] = ["n", "u", "m", "k", "M", "G", "T", "P", "E"];
    if let Some(i) = BINARY.iter().position(|s| *s == suffix) {
        return Some((0, 10 * i as u32));
    }
    if let Some(i) = DECIMAL.iter().position(|s| *s == suffix) {
        // n, u, m are 10^-9, 10^-6, 10^-3; k, M, ... 10^3, 10^6, ...
        let i = i as i64;
        return Some((if i < 3 { 3 * i - 9 } else { 3 * i - 6 }, 0));
    }
    let exp = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Saturate huge exponents: they end as "too large" or "fraction".
    let n = exp.parse::<i64>().unwrap_or(if exp.starts_with('-') {
        i64::MIN / 2
    } else {
        i64::MAX / 2
    });
    Some((n.clamp(i64::MIN / 2, i64::MAX / 2), 0))
}

fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    crate::k8s::json::items(v.get(key)).filter(|c| c.is_object())
}

fn container_request(c: &Value, kind: ContainerKind, gpus: &GpuResources) -> ContainerGpuRequest {
    let name = crate::k8s::json::str_field(c, "name").to_string();
    let limits = c.at("/resources/limits").and_then(Value::as_object);
    let requests = c.at("/resources/requests").and_then(Value::as_object);
    let mut resources = BTreeMap::new();
    let names = limits
        .into_iter()
        .chain(requests)
        .flat_map(|m| m.keys())
        .filter(|k| gpus.matches(k));
    for resource in names {
        if resources.contains_key(resource) {
            continue;
        }
        let limit = limits.and_then(|m| m.get(resource)).map(raw_quantity);
        let request = requests.and_then(|m| m.get(resource)).map(raw_quantity);
        let count = match (&limit, &request) {
            (Some(raw), _) | (None, Some(raw)) => raw.1.clone(),
            (None, None) => Ok(0),
        };
        resources.insert(
            resource.clone(),
            GpuQuantity {
                limit: limit.map(|r| r.0),
                request: request.map(|r| r.0),
                count,
            },
        );
    }
    ContainerGpuRequest {
        name,
        kind,
        resources,
    }
}

/// The text of a quantity and its count.
fn raw_quantity(v: &Value) -> (String, Result<u64, QuantityError>) {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            return (
                other.to_string(),
                Err(QuantityError::Invalid(other.to_string())),
            )
        }
    };
    let count = parse_count(&text);
    (text, count)
}

/// kube-scheduler's pod request: the larger of (app containers + sidecars)
/// and, for each init container in order, its own request plus the sidecars
/// started before it.
fn effective_counts(containers: &[ContainerGpuRequest]) -> BTreeMap<String, u64> {
    let mut running: BTreeMap<String, u64> = BTreeMap::new();
    let mut sidecars: BTreeMap<String, u64> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, u64> = BTreeMap::new();
    for c in containers {
        let gpus = c.gpus();
        match c.kind {
            ContainerKind::Container => add_into(&mut running, &gpus),
            ContainerKind::Sidecar => {
                add_into(&mut running, &gpus);
                add_into(&mut sidecars, &gpus);
            }
            // Not in a pod's request (see `ephemeral_container_requests`).
            ContainerKind::Ephemeral => {}
            ContainerKind::InitContainer => {
                let mut during = sidecars.clone();
                add_into(&mut during, &gpus);
                for (r, n) in during {
                    let peak = init_peak.entry(r).or_insert(0);
                    *peak = (*peak).max(n);
                }
            }
        }
    }
    for (r, n) in init_peak {
        let total = running.entry(r).or_insert(0);
        *total = (*total).max(n);
    }
    running.retain(|_, n| *n > 0);
    running
}

/// Adds `add` into `total`, per resource (saturating).
pub(super) fn add_into(total: &mut BTreeMap<String, u64>, add: &BTreeMap<String, u64>) {
    for (r, n) in add {
        let t = total.entry(r.clone()).or_insert(0);
        *t = t.saturating_add(*n);
    }
}

/// A count as CEL's `int` (counts beyond i64 saturate).
pub(super) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(spec: Value) -> PodGpuRequest {
        pod_gpu_request(&spec, &GpuResources::default())
    }

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    fn gpu_container(name: &str, limits: Value) -> Value {
        json!({"name": name, "image": "cuda:12", "resources": {"limits": limits}})
    }

    #[test]
    fn string_and_number_quantities_ask_for_gpus() {
        let r = req(json!({"containers": [
            gpu_container("a", json!({"nvidia.com/gpu": "2"})),
            gpu_container("b", json!({"nvidia.com/gpu": 1})),
        ]}));
        assert!(r.requested());
        assert_eq!(r.effective, counts(&[("nvidia.com/gpu", 3)]));
        assert_eq!(r.total(), 3);
        let limits: Vec<_> = (r.containers.iter())
            .map(|c| c.resources["nvidia.com/gpu"].limit.as_deref())
            .collect();
        assert_eq!(limits, [Some("2"), Some("1")]);
    }

    #[test]
    fn zero_asks_for_nothing_but_is_kept() {
        let r = req(json!({"containers": [gpu_container("a", json!({"nvidia.com/gpu": "0"}))]}));
        assert!(!r.requested());
        assert!(r.effective.is_empty());
        assert_eq!(r.containers[0].resources["nvidia.com/gpu"].count, Ok(0));
        assert!(r.containers[0].gpus().is_empty());
    }

    #[test]
    fn pods_without_gpu_resources_ask_for_nothing() {
        let r = req(json!({"containers": [
            {"name": "web", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
            {"name": "bare"}
        ]}));
        assert!(!r.requested());
        assert_eq!(r.containers.len(), 2);
        assert!(r.containers.iter().all(|c| c.resources.is_empty()));
        assert!(!req(json!({})).requested());
        assert!(!req(json!({"containers": "nope"})).requested());
    }

    #[test]
    fn requests_count_when_no_limit_is_given() {
        let r = req(json!({"containers": [
            {"name": "a", "resources": {"requests": {"amd.com/gpu": "1"}}}
        ]}));
        assert_eq!(r.effective, counts(&[("amd.com/gpu", 1)]));
    }

    #[test]
    fn limit_wins_over_request() {
        let r = req(json!({"containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}}
        ]}));
        let q = &r.containers[0].resources["nvidia.com/gpu"];
        assert_eq!(q.count, Ok(2));
        assert_eq!(q.request.as_deref(), Some("1"));
        assert_eq!(r.total(), 2);
    }

    #[test]
    fn only_configured_resources_count() {
        let spec = json!({"containers": [gpu_container("a", json!({
            "nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu.shared": "1", "example.com/fpga": "1", "cpu": "4"
        }))]});
        let shipped = ["nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"];
        assert_eq!(req(spec.clone()).resources(), shipped);
        let custom = pod_gpu_request(&spec, &GpuResources::new(["example.com/fpga"]).unwrap());
        assert_eq!(custom.resources(), vec!["example.com/fpga"]);
    }

    #[test]
    fn init_containers_and_sidecars_are_typed() {
        let r = req(json!({
            "initContainers": [
                {"name": "fetch", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "proxy", "restartPolicy": "Always"}
            ],
            "containers": [{"name": "main"}]
        }));
        let kinds: Vec<_> = (r.containers.iter())
            .map(|c| format!("{} {}", c.name, c.kind.as_str()))
            .collect();
        let want = ["fetch initContainer", "proxy sidecar", "main container"];
        assert_eq!(kinds, want);
        assert!(r.requested(), "an init container alone asks for a GPU");
    }

    #[test]
    fn ephemeral_containers_are_ignored() {
        let spec = json!({
            "containers": [{"name": "main"}],
            "ephemeralContainers": [gpu_container("debug", json!({"nvidia.com/gpu": "1"}))]
        });
        let r = req(spec.clone());
        assert!(!r.requested());
        assert_eq!(r.containers.len(), 1);
        let ephemeral = ephemeral_container_requests(&spec, &GpuResources::default());
        assert_eq!(ephemeral.len(), 1);
        assert_eq!(ephemeral[0].name, "debug");
        assert_eq!(ephemeral[0].kind.as_str(), "ephemeralContainer");
        assert_eq!(ephemeral[0].total(), 1);
    }

    #[test]
    fn init_containers_take_the_max_not_the_sum() {
        let r = req(json!({
            "initContainers": [gpu_container("warm", json!({"nvidia.com/gpu": "4"}))],
            "containers": [
                gpu_container("a", json!({"nvidia.com/gpu": "1"})),
                gpu_container("b", json!({"nvidia.com/gpu": "1"}))
            ]
        }));
        assert_eq!(r.effective["nvidia.com/gpu"], 4);
        let r = req(json!({
            "initContainers": [gpu_container("warm", json!({"nvidia.com/gpu": "1"}))],
            "containers": [gpu_container("a", json!({"nvidia.com/gpu": "3"}))]
        }));
        assert_eq!(r.effective["nvidia.com/gpu"], 3);
    }

    #[test]
    fn sidecars_add_to_the_app_and_to_later_init_containers() {
        let sidecar = |n: &str| json!({"name": "side", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": n}}});
        // app 1 + sidecar 1 = 2 beats init 1 (started before the sidecar).
        let r = req(json!({
            "initContainers": [gpu_container("early", json!({"nvidia.com/gpu": "1"})), sidecar("1")],
            "containers": [gpu_container("a", json!({"nvidia.com/gpu": "1"}))]
        }));
        assert_eq!(r.effective["nvidia.com/gpu"], 2);
        // init 2 after the sidecar runs beside it: 2 + 1 = 3 beats app 1 + sidecar 1.
        let r = req(json!({
            "initContainers": [sidecar("1"), gpu_container("late", json!({"nvidia.com/gpu": "2"}))],
            "containers": [gpu_container("a", json!({"nvidia.com/gpu": "1"}))]
        }));
        assert_eq!(r.effective["nvidia.com/gpu"], 3);
        // the same init container before the sidecar: max(2, 1 + 1) = 2.
        let r = req(json!({
            "initContainers": [gpu_container("early", json!({"nvidia.com/gpu": "2"})), sidecar("1")],
            "containers": [gpu_container("a", json!({"nvidia.com/gpu": "1"}))]
        }));
        assert_eq!(r.effective["nvidia.com/gpu"], 2);
    }

    #[test]
    fn effective_counts_are_per_resource() {
        let r = req(json!({
            "initContainers": [gpu_container("i", json!({"amd.com/gpu": "2"}))],
            "containers": [gpu_container("a", json!({"nvidia.com/gpu": "1"}))]
        }));
        let want = counts(&[("amd.com/gpu", 2), ("nvidia.com/gpu", 1)]);
        assert_eq!(r.effective, want);
    }

    #[test]
    fn malformed_quantities_are_kept_raw_and_still_ask() {
        let r = req(json!({"containers": [gpu_container("a", json!({
            "nvidia.com/gpu": "0.5", "amd.com/gpu": "lots", "nvidia.com/gpu.shared": true
        }))]}));
        let q = &r.containers[0].resources;
        let fraction = Err(QuantityError::Fraction("0.5".into()));
        assert_eq!(q["nvidia.com/gpu"].count, fraction);
        assert_eq!(q["nvidia.com/gpu"].limit.as_deref(), Some("0.5"));
        let invalid = Err(QuantityError::Invalid("lots".into()));
        assert_eq!(q["amd.com/gpu"].count, invalid);
        assert_eq!(q["nvidia.com/gpu.shared"].limit.as_deref(), Some("true"));
        let c = &r.containers[0];
        assert!(c.has_malformed());
        assert!(r.requested());
        assert!(r.effective.is_empty());
        let all = ["amd.com/gpu", "nvidia.com/gpu", "nvidia.com/gpu.shared"];
        assert_eq!(r.resources(), all);
    }

    #[test]
    fn parses_kubernetes_quantities_as_counts() {
        for (raw, n) in [
            ("1", 1),
            ("+2", 2),
            ("0", 0),
            ("-0", 0),
            ("007", 7),
            ("2000m", 2),
            ("1k", 1000),
            ("1Ki", 1024),
            ("0.5Ki", 512),
            ("1e2", 100),
            ("1E1", 10),
            ("10e-1", 1),
            ("1.0", 1),
            ("1.", 1),
            ("3000000000n", 3),
            ("1E", 1_000_000_000_000_000_000),
        ] {
            assert_eq!(parse_count(raw), Ok(n), "{raw}");
        }
    }

    #[test]
    fn rejects_fractions_negatives_and_garbage() {
        use QuantityError::*;
        const HUGE_EXPONENT: &str = "1e999999999999999999999";
        const HUGE: &str = "99999999999999999999999999999999999999999";
        for (raw, want) in [
            ("0.5", Fraction("0.5".into())),
            ("500m", Fraction("500m".into())),
            ("1.5", Fraction("1.5".into())),
            ("1e-1", Fraction("1e-1".into())),
            ("-1", Negative("-1".into())),
            ("", Invalid(String::new())),
            ("one", Invalid("one".into())),
            (" 1", Invalid(" 1".into())),
            ("1 ", Invalid("1 ".into())),
            ("1K", Invalid("1K".into())),
            ("1e", Invalid("1e".into())),
            ("1Gb", Invalid("1Gb".into())),
            (".", Invalid(".".into())),
            ("1..0", Invalid("1..0".into())),
            ("10Ei", TooLarge("10Ei".into())),
            (HUGE_EXPONENT, TooLarge(HUGE_EXPONENT.into())),
            (HUGE, TooLarge(HUGE.into())),
            ("1e-99999999999", Fraction("1e-99999999999".into())),
        ] {
            assert_eq!(parse_count(raw), Err(want), "{raw:?}");
        }
    }

    #[test]
    fn amounts_scale_and_round_up() {
        for (raw, scale, n) in [
            ("500m", 3, 500),
            ("2", 3, 2000),
            ("1.5", 3, 1500),
            ("0.5m", 3, 1),
            ("100u", 3, 1),
            ("32", 3, 32_000),
            ("500Gi", 0, 500 << 30),
            ("1.5Gi", 0, 3 << 29),
            ("128974848", 0, 128_974_848),
            ("129e6", 0, 129_000_000),
            ("1e-99999999999", 0, 1),
            ("0", 3, 0),
        ] {
            assert_eq!(parse_amount(raw, scale), Ok(n), "{raw}");
        }
        assert!(parse_amount("-1", 3).is_err());
        assert!(parse_amount("lots", 0).is_err());
    }

    #[test]
    fn json_numbers_follow_the_same_rules() {
        let limits = json!({"nvidia.com/gpu": 1.5, "amd.com/gpu": -1});
        let r = req(json!({"containers": [gpu_container("a", limits)]}));
        let q = &r.containers[0].resources;
        let fraction = Err(QuantityError::Fraction("1.5".into()));
        assert_eq!(q["nvidia.com/gpu"].count, fraction);
        let negative = Err(QuantityError::Negative("-1".into()));
        assert_eq!(q["amd.com/gpu"].count, negative);
        let r = req(json!({"containers": [gpu_container("a", json!({"nvidia.com/gpu": 2.0}))]}));
        assert_eq!(r.effective["nvidia.com/gpu"], 2);
    }
}
