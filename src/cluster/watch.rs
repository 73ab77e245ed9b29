//! One watched cache for every kind the server keeps (Namespaces, Nodes,
//! NodePools, DRA claims, DeviceClasses and ResourceSlices,
//! GpuPolicyExceptions): a paged list, then a watch
//! from the list's resourceVersion, with the same start, relist and
//! readiness rules for each.
//!
//! - A kind is **not served** only when the cluster answers 404 for it; the
//!   cache is then empty and counts as synced, and the question is asked
//!   again every [`Backoff::max`] (a CRD installed later is picked up, one
//!   deleted is let go).
//! - **Forbidden** is a 403 and nothing else. Whether the server can work
//!   without the kind is the kind's own rule ([`Kind::forbidden_is_empty`]);
//!   the list is retried every [`Settings::forbidden_retry`] either way,
//!   since RBAC can be granted later.
//! - Everything else (connection refused, 5xx, timeouts, 429, a body that
//!   does not read) is **transient**: retried with client-go's backoff
//!   (0.8 s doubling to 30 s, jittered), reset only once a watch has stayed
//!   open for [`Backoff::reset_after`]. The cache keeps what it had.
//! - A watch answered `410 Gone` relists at once; a watch that ends is
//!   resumed from the last resourceVersion seen.
//! - An object that does not decode as its kind is **skipped**, counted in
//!   `gpu_admission_cache_skipped_total{kind}` and logged once per object
//!   and resourceVersion; the rest of the list or watch goes on.
//!
//! What the cache holds is up to its sink, which receives kube's watcher
//! [`Event`]s (a relist as `Init`, `InitApply`…, `InitDone`), so each kind
//! keeps only what it reads. [`Watched`] tells whether the first list is
//! in, and why not.
use crate::k8s::json::{str_field, Pointer};
use futures_util::stream::BoxStream;
use futures_util::StreamExt as _;
use kube::core::params::{ListParams, WatchParams};
use kube::core::WatchEvent;
pub use kube::runtime::watcher::Event;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// A kind as the cache watches it.
#[derive(Clone, Debug)]
pub struct Kind {
    /// How logs, metrics and `/readyz` name it: "nodes".
    pub name: &'static str,
    /// Its collection across namespaces: "/api/v1/nodes".
    pub path: String,
    /// Its group/version and plural, for the log: "karpenter.sh/v1 nodepools".
    pub served_as: String,
    /// A 403 leaves the cache empty and synced (the server works on
    /// without the kind and the log says what to grant) instead of keeping
    /// the server not ready.
    pub forbidden_is_empty: bool,
    /// What the server's ClusterRole needs, for the log.
    pub rbac: &'static str,
}

impl Kind {
    /// The kind served at `group`/`version` as `plural` ("" for core).
    pub fn new(name: &'static str, group: &str, version: &str, plural: &str) -> Kind {
        let path = if group.is_empty() {
            format!("/api/{version}/{plural}")
        } else {
            format!("/apis/{group}/{version}/{plural}")
        };
        let served_as = if group.is_empty() {
            format!("{version} {plural}")
        } else {
            format!("{group}/{version} {plural}")
        };
        Kind {
            name,
            path,
            served_as,
            forbidden_is_empty: false,
            rbac: "get, list and watch on it (deploy/base/rbac.yaml)",
        }
    }

    /// See [`Kind::forbidden_is_empty`].
    pub fn forbidden_is_empty(mut self, rbac: &'static str) -> Kind {
        self.forbidden_is_empty = true;
        self.rbac = rbac;
        self
    }
}

/// Retry timing, as client-go's reflector has it by default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    /// Up to this fraction added at random to each wait (then capped at
    /// `max`), so replicas do not retry in step.
    pub jitter: f64,
    /// A watch open this long resets the backoff.
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            jitter: 1.0,
            reset_after: Duration::from_secs(60),
        }
    }
}

/// How a cache lists and watches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    pub backoff: Backoff,
    /// Objects per list page.
    pub page: u32,
    /// The watch's `timeoutSeconds`: the server ends it after this long and
    /// the cache resumes it.
    pub watch_timeout: u32,
    /// How often a refused list (403) is asked again.
    pub forbidden_retry: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            backoff: Backoff::default(),
            page: 500,
            watch_timeout: 290,
            forbidden_retry: Duration::from_secs(60),
        }
    }
}

/// Where the cache stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum State {
    /// The first list is under way.
    #[default]
    Starting,
    /// Listed; the watch follows changes.
    Watching,
    /// The cluster does not serve the kind (404): nothing to hold.
    NotServed,
    /// The cluster refuses the server the list (403).
    Forbidden(String),
    /// The last list or watch failed; retrying.
    Failing(String),
}

/// A cache's state and whether it has had its first list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// A whole list is in (or the kind is not served, or refused where
    /// that means empty): requests may rely on the cache. Stays true.
    pub synced: bool,
    pub state: State,
}

impl Status {
    /// What went wrong while the cache is not synced, in words, for
    /// `/readyz`; none while the first list is simply under way.
    pub fn why_not_synced(&self) -> Option<String> {
        match &self.state {
            State::Starting | State::Watching | State::NotServed => None,
            State::Forbidden(e) => Some(format!("forbidden: {e}")),
            State::Failing(e) => Some(format!("retrying: {e}")),
        }
    }
}

/// The watch of one kind, seen from outside: its [`Status`].
#[derive(Clone, Debug)]
pub struct Watched {
    status: tokio::sync::watch::Receiver<Status>,
}

impl Watched {
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Whether the cache holds the cluster's objects: listed whole, and
    /// neither refused since nor found not served. Read per request, so it
    /// copies nothing.
    pub fn holds_list(&self) -> bool {
        let status = self.status.borrow();
        status.synced && !matches!(status.state, State::Forbidden(_) | State::NotServed)
    }

    /// Resolves once the first list is in: true, or false if the watch
    /// stopped before.
    pub async fn synced(&self) -> bool {
        let mut status = self.status.clone();
        let synced = status.wait_for(|s| s.synced).await.is_ok();
        synced
    }

    /// Changes of the status, for whoever reports it (readiness).
    pub fn updates(&self) -> tokio::sync::watch::Receiver<Status> {
        self.status.clone()
    }
}

impl From<tokio::sync::watch::Receiver<Status>> for Watched {
    fn from(status: tokio::sync::watch::Receiver<Status>) -> Watched {
        Watched { status }
    }
}

/// `gpu_admission_cache_skipped_total{kind}` and
/// `gpu_admission_cache_failures_total{kind}`; cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct CacheMetrics {
    skipped: Family<KindLabel, Counter>,
    failures: Family<KindLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

impl CacheMetrics {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> CacheMetrics {
        let metrics = CacheMetrics::default();
        registry.register(
            "gpu_admission_cache_skipped",
            "Objects a watched cache could not read as their kind and left out, by kind",
            metrics.skipped.clone(),
        );
        registry.register(
            "gpu_admission_cache_failures",
            "Lists and watches of a watched cache that failed (any cause but 410 Gone), by kind",
            metrics.failures.clone(),
        );
        metrics
    }

    pub fn skipped(&self, kind: &'static str) -> u64 {
        self.skipped.get_or_create(&KindLabel { kind }).get()
    }

    pub fn failures(&self, kind: &'static str) -> u64 {
        self.failures.get_or_create(&KindLabel { kind }).get()
    }
}

/// Where lists and watches of the collection at `path` are answered: the
/// cluster (a `kube::Client`), or a script in tests.
pub trait Source: Send + Sync + 'static {
    /// One page of the collection, as JSON.
    fn list(
        &self,
        path: &str,
        params: ListParams,
    ) -> impl Future<Output = Result<Value, kube::Error>> + Send;
    /// The collection's changes from `version`.
    fn watch(
        &self,
        path: &str,
        params: WatchParams,
        version: String,
    ) -> impl Future<Output = Result<EventStream, kube::Error>> + Send;
}

/// A watch's events as they arrive.
pub type EventStream = BoxStream<'static, Result<WatchEvent<Value>, kube::Error>>;

impl Source for kube::Client {
    async fn list(&self, path: &str, params: ListParams) -> Result<Value, kube::Error> {
        let request = kube::core::Request::new(path)
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        self.request::<Value>(request).await
    }

    async fn watch(
        &self,
        path: &str,
        params: WatchParams,
        version: String,
    ) -> Result<EventStream, kube::Error> {
        let request = kube::core::Request::new(path)
            .watch(&params, &version)
            .map_err(kube::Error::BuildRequest)?;
        let events = self.request_events::<Value>(request).await?;
        Ok(events.boxed())
    }
}

/// What takes a cache's events: any `FnMut(Event<K>) -> impl Future`, so a
/// sink can do its work off the runtime's threads ([`sink`] makes one of a
/// plain function).
pub trait Sink<K>: Send + 'static {
    fn take(&mut self, event: Event<K>) -> impl Future<Output = ()> + Send;
}

impl<K, F, Fut> Sink<K> for F
where
    F: FnMut(Event<K>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    fn take(&mut self, event: Event<K>) -> impl Future<Output = ()> + Send {
        self(event)
    }
}

/// A sink of a function that takes each event at once.
pub fn sink<K>(
    mut take: impl FnMut(Event<K>) + Send + 'static,
) -> impl FnMut(Event<K>) -> std::future::Ready<()> + Send + 'static {
    move |event| {
        take(event);
        std::future::ready(())
    }
}

/// Objects by name, as the watch last listed and changed them.
pub struct Relisted<V> {
    pub held: std::collections::BTreeMap<String, V>,
    /// While a (re)list is under way: what it has seen so far.
    relisting: Option<std::collections::BTreeMap<String, V>>,
}

impl<V> Default for Relisted<V> {
    fn default() -> Self {
        Relisted {
            held: std::collections::BTreeMap::new(),
            relisting: None,
        }
    }
}

impl<V: PartialEq> Relisted<V> {
    /// Takes one watch event, each object read into its name and value;
    /// whether what is held changed.
    pub fn take<K>(&mut self, event: Event<K>, read: impl Fn(&K) -> Option<(String, V)>) -> bool {
        match event {
            Event::Init => {
                self.relisting = Some(std::collections::BTreeMap::new());
                false
            }
            Event::InitApply(object) => {
                if let (Some((name, value)), Some(list)) = (read(&object), self.relisting.as_mut())
                {
                    list.insert(name, value);
                }
                false
            }
            Event::InitDone => {
                let list = self.relisting.take().unwrap_or_default();
                let changed = list != self.held;
                self.held = list;
                changed
            }
            Event::Apply(object) => match read(&object) {
                Some((name, value)) if self.held.get(&name) != Some(&value) => {
                    self.held.insert(name, value);
                    true
                }
                _ => false,
            },
            Event::Delete(object) => {
                read(&object).is_some_and(|(name, _)| self.held.remove(&name).is_some())
            }
        }
    }
}

/// A kube reflector store of every `K`, trimmed by `trim` (and of its
/// managed fields) before it is stored, filled by [`start`].
pub fn reflect<K>(
    client: kube::Client,
    kind: Kind,
    settings: Settings,
    metrics: CacheMetrics,
    trim: fn(&mut K),
) -> (
    kube::runtime::reflector::Store<K>,
    Watched,
    tokio::task::JoinHandle<()>,
)
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Send + Sync + 'static,
{
    let (store, mut writer) = kube::runtime::reflector::store::<K>();
    let (watched, task) = start(
        client,
        kind,
        settings,
        metrics,
        sink(move |mut event: Event<K>| {
            if let Event::InitApply(object) | Event::Apply(object) = &mut event {
                object.meta_mut().managed_fields = None;
                trim(object);
            }
            writer.apply_watcher_event(&event);
        }),
    );
    (store, watched, task)
}

/// Starts watching `kind` at `source` (the cluster a client talks to),
/// feeding `sink`. The returned task runs until aborted.
pub fn start<K, S: Source>(
    source: S,
    kind: Kind,
    settings: Settings,
    metrics: CacheMetrics,
    sink: impl Sink<K>,
) -> (Watched, tokio::task::JoinHandle<()>)
where
    K: DeserializeOwned + Send + 'static,
{
    let (status, receiver) = tokio::sync::watch::channel(Status::default());
    // Exported at 0 from the start, so that rate() sees the first one.
    let label = KindLabel { kind: kind.name };
    let _ = metrics.skipped.get_or_create(&label);
    let _ = metrics.failures.get_or_create(&label);
    let mut cache = Loop {
        kind,
        settings,
        metrics,
        status,
        sink,
        source,
        delay: Delay::new(settings.backoff),
        skipped_logged: HashSet::new(),
        last_logged: None,
        _kind: std::marker::PhantomData,
    };
    let task = tokio::spawn(async move { cache.run().await });
    (Watched { status: receiver }, task)
}

/// Why a list or watch failed, as the cache treats it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Failure {
    NotServed(String),
    Forbidden(String),
    Gone,
    Transient(String),
}

fn classify(error: &kube::Error) -> Failure {
    match error {
        kube::Error::Api(status) => status_failure(status),
        other => Failure::Transient(other.to_string()),
    }
}

fn status_failure(status: &kube::core::Status) -> Failure {
    let said = if status.message.is_empty() {
        format!("{} {}", status.code, status.reason)
    } else {
        format!("{} {}", status.code, status.message)
    };
    match status.code {
        404 => Failure::NotServed(said),
        403 => Failure::Forbidden(said),
        410 => Failure::Gone,
        _ => Failure::Transient(said),
    }
}

/// client-go's exponential backoff with jitter.
struct Delay {
    backoff: Backoff,
    next: Duration,
    /// A cheap random source for the jitter.
    seed: u64,
}

impl Delay {
    fn new(backoff: Backoff) -> Delay {
        use std::hash::{BuildHasher as _, Hasher as _};
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Delay {
            backoff,
            next: backoff.initial,
            seed: seed | 1,
        }
    }

    /// The next wait: the current step, jittered and capped; the step then
    /// doubles up to the maximum.
    fn next(&mut self) -> Duration {
        // xorshift64
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let unit = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
        let step = self.next;
        self.next = (self.next * 2).min(self.backoff.max);
        step.mul_f64(1.0 + self.backoff.jitter * unit)
            .min(self.backoff.max)
    }

    fn reset(&mut self) {
        self.next = self.backoff.initial;
    }
}

/// The task's side.
struct Loop<K, S, F> {
    kind: Kind,
    settings: Settings,
    metrics: CacheMetrics,
    status: tokio::sync::watch::Sender<Status>,
    sink: F,
    source: S,
    delay: Delay,
    /// Objects skipped and logged (namespace/name@resourceVersion), so that
    /// each is logged once; forgotten past 10,000.
    skipped_logged: HashSet<String>,
    /// The last failure logged, so that a repeated one is logged once.
    last_logged: Option<Failure>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

/// What the watch needs next.
enum Next {
    /// Resume the watch from the resourceVersion kept.
    Rewatch,
    /// Relist after this wait.
    Relist(Duration),
}

impl<K, S, F> Loop<K, S, F>
where
    K: DeserializeOwned + Send + 'static,
    S: Source,
    F: Sink<K>,
{
    async fn run(&mut self) {
        loop {
            let Some(mut version) = self.list().await else {
                continue;
            };
            loop {
                match self.watch(&mut version).await {
                    Next::Rewatch => continue,
                    Next::Relist(wait) => {
                        tokio::time::sleep(wait).await;
                        break;
                    }
                }
            }
        }
    }

    /// One whole list into the sink; its resourceVersion, or none after
    /// waiting as the failure asks.
    async fn list(&mut self) -> Option<String> {
        match self.list_pages().await {
            Ok(version) => {
                self.last_logged = None;
                self.set(true, State::Watching);
                Some(version)
            }
            Err(failure) => {
                let wait = self.failed(failure).await;
                tokio::time::sleep(wait).await;
                None
            }
        }
    }

    async fn list_pages(&mut self) -> Result<String, Failure> {
        let mut params = ListParams::default().limit(self.settings.page);
        let mut started = false;
        loop {
            let page = self.source.list(&self.kind.path, params.clone()).await;
            let mut page = page.map_err(|e| classify(&e))?;
            if page.get("kind").and_then(Value::as_str) == Some("Status") {
                let status: kube::core::Status = serde_json::from_value(page)
                    .map_err(|e| Failure::Transient(format!("unreadable answer: {e}")))?;
                return Err(status_failure(&status));
            }
            let items = match page.get_mut("items").map(Value::take) {
                Some(Value::Array(items)) => items,
                Some(Value::Null) | None => Vec::new(),
                Some(_) => {
                    return Err(Failure::Transient(
                        "a list whose items are not a list".into(),
                    ))
                }
            };
            if !started {
                self.sink.take(Event::Init).await;
                started = true;
            }
            for item in items {
                if let Some(object) = self.decode(item) {
                    self.sink.take(Event::InitApply(object)).await;
                }
            }
            let meta = &page["metadata"];
            match meta.get("continue").and_then(Value::as_str) {
                Some(token) if !token.is_empty() => {
                    params = params.continue_token(token);
                }
                _ => {
                    self.sink.take(Event::InitDone).await;
                    return Ok(str_field(meta, "resourceVersion").to_string());
                }
            }
        }
    }

    /// Follows changes from `version` (kept current) until the watch ends
    /// or fails.
    async fn watch(&mut self, version: &mut String) -> Next {
        let params = WatchParams::default().timeout(self.settings.watch_timeout);
        let opened = Instant::now();
        let path = &self.kind.path;
        let mut events = match self.source.watch(path, params, version.clone()).await {
            Ok(events) => events,
            Err(e) => {
                return match classify(&e) {
                    Failure::Gone => Next::Relist(Duration::ZERO),
                    // Resumed from the same resourceVersion after the
                    // backoff (a 410 then if it is too old), sparing a
                    // failing apiserver a full list.
                    failure @ Failure::Transient(_) => {
                        let wait = self.failed(failure).await;
                        tokio::time::sleep(wait).await;
                        Next::Rewatch
                    }
                    // Not served or refused since the list: the list asks
                    // again.
                    failure => Next::Relist(self.failed(failure).await),
                };
            }
        };
        if self.status.borrow().state != State::Watching {
            self.last_logged = None;
            self.set(true, State::Watching);
        }
        let mut seen = 0usize;
        while let Some(event) = events.next().await {
            seen += usize::from(event.is_ok());
            let object = match event {
                Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
                    Some((object, false))
                }
                Ok(WatchEvent::Deleted(object)) => Some((object, true)),
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    *version = bookmark.metadata.resource_version;
                    None
                }
                Ok(WatchEvent::Error(status)) => {
                    return match status_failure(&status) {
                        Failure::Gone => Next::Relist(Duration::ZERO),
                        failure => Next::Relist(self.failed(failure).await),
                    };
                }
                // The stream broke: resume from what was seen.
                Err(e) => {
                    tracing::debug!(kind = self.kind.name, error = %e, "watch stream broke; resuming");
                    break;
                }
            };
            if let Some((object, deleted)) = object {
                if let Some(v) = object
                    .at("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                {
                    *version = v.to_string();
                }
                if let Some(object) = self.decode(object) {
                    let event = if deleted {
                        Event::Delete(object)
                    } else {
                        Event::Apply(object)
                    };
                    self.sink.take(event).await;
                }
            }
        }
        let lasted = opened.elapsed();
        if lasted >= self.settings.backoff.reset_after {
            self.delay.reset();
        }
        if seen == 0 && lasted < Duration::from_secs(1) {
            // Ended (or broke) at once with nothing: not a watch to hammer.
            tokio::time::sleep(self.delay.next()).await;
        }
        Next::Rewatch
    }

    /// Reads one object as `K`; skips, counts and logs (once) what does not
    /// read.
    fn decode(&mut self, object: Value) -> Option<K> {
        let id = || {
            let part = |k: &str| str_field(&object["metadata"], k);
            let (namespace, name) = (part("namespace"), part("name"));
            let version = part("resourceVersion");
            if namespace.is_empty() {
                format!("{name}@{version}")
            } else {
                format!("{namespace}/{name}@{version}")
            }
        };
        match K::deserialize(&object) {
            Ok(decoded) => Some(decoded),
            Err(e) => {
                self.metrics
                    .skipped
                    .get_or_create(&KindLabel {
                        kind: self.kind.name,
                    })
                    .inc();
                let id = id();
                if self.skipped_logged.len() > 10_000 {
                    self.skipped_logged.clear();
                }
                if self.skipped_logged.insert(id.clone()) {
                    tracing::warn!(kind = self.kind.name, object = %id, error = %e, "object does not read as its kind: skipped");
                }
                None
            }
        }
    }

    /// Records `failure` and returns how long to wait before the next list.
    async fn failed(&mut self, failure: Failure) -> Duration {
        if failure != Failure::Gone {
            self.metrics
                .failures
                .get_or_create(&KindLabel {
                    kind: self.kind.name,
                })
                .inc();
        }
        let repeated = self.last_logged.as_ref() == Some(&failure);
        let kind = self.kind.name;
        let wait = match &failure {
            Failure::NotServed(said) => {
                if !repeated {
                    tracing::info!(kind, error = %said, "the cluster does not serve {}: nothing to hold; asking again every {}s", self.kind.served_as, self.settings.backoff.max.as_secs());
                }
                self.clear().await;
                self.set(true, State::NotServed);
                self.settings.backoff.max
            }
            Failure::Forbidden(said) => {
                let empty = self.kind.forbidden_is_empty;
                if !repeated {
                    tracing::error!(kind, error = %said, "the cluster refuses the server the list of {}: grant {}; asking again every {}s", self.kind.served_as, self.kind.rbac, self.settings.forbidden_retry.as_secs());
                }
                if empty {
                    self.clear().await;
                }
                let synced = self.status.borrow().synced || empty;
                self.set(synced, State::Forbidden(said.clone()));
                self.settings.forbidden_retry
            }
            // A list's continue token expired: list again, not at once
            // should the cluster keep answering so.
            Failure::Gone => self.delay.next(),
            Failure::Transient(said) => {
                let wait = self.delay.next();
                tracing::warn!(kind, error = %said, retry_in_ms = wait.as_millis() as u64, "list or watch failed; keeping what the cache holds and retrying");
                let synced = self.status.borrow().synced;
                self.set(synced, State::Failing(said.clone()));
                wait
            }
        };
        self.last_logged = Some(failure);
        wait
    }

    /// Empties the cache (an empty relist), so the sink forgets the kind.
    async fn clear(&mut self) {
        self.sink.take(Event::Init).await;
        self.sink.take(Event::InitDone).await;
    }

    fn set(&self, synced: bool, state: State) {
        self.status.send_if_modified(|status| {
            let next = Status {
                synced: status.synced || synced,
                state,
            };
            let changed = *status != next;
            *status = next;
            changed
        });
    }
}

#[cfg(test)]
pub(crate) mod tests;
