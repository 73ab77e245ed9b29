//! The `GpuPolicyException`s of a live cluster, kept current by a watch of
//! `gpu-admission.io/v1alpha1 gpupolicyexceptions` in all namespaces
//! (needs only get/list/watch on them).
//!
//! Each object is read once per resourceVersion (its expression compiled
//! with the reader given at start, the policies' CEL environment), and the
//! exceptions of a namespace are kept as one shared slice rebuilt when one
//! of them changes, so a request's lookup is a map lookup and an `Arc`
//! clone. What is held is bounded ([`MAX_HELD`], [`MAX_PER_NAMESPACE`]);
//! an object beyond the bounds, or one that does not read, is not held,
//! logged once (namespace/name and why, never the object) and counted as
//! invalid. Expiry needs no event: exceptions are judged at [`ExceptionLookup::now`].
use super::watch::{self, CacheMetrics, Event, Kind, Settings, Watched};
use crate::exceptions::{Exception, ExceptionError, ExceptionLookup, State, GROUP, KIND, RESOURCE};
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

/// Most exceptions held in the whole cluster.
pub const MAX_HELD: usize = 10_000;
/// Most exceptions held in one namespace.
pub const MAX_PER_NAMESPACE: usize = 256;
/// The version the cluster serves them at.
pub const VERSION: &str = "v1alpha1";
/// The rule the server's ClusterRole needs for the watch.
pub const RBAC_RULE: &str =
    "get, list and watch on gpupolicyexceptions.gpu-admission.io (deploy/base/rbac.yaml)";

/// Reads one object into an exception (serve's reads it with the current
/// policy set's CEL environment). Called on a blocking thread.
pub type Reader = Arc<dyn Fn(&Value) -> Result<Exception, Vec<ExceptionError>> + Send + Sync>;

/// The time exceptions are judged at.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The exceptions of a live cluster. Cloning shares the cache.
#[derive(Clone)]
pub struct ClusterExceptions {
    shared: Arc<Shared>,
    clock: Option<Clock>,
}

/// How many exceptions the cache knows, by state, at its clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub active: usize,
    pub expired: usize,
    /// Not held: unreadable, or beyond the bounds.
    pub invalid: usize,
}

struct Shared {
    published: RwLock<Published>,
    status: tokio::sync::watch::Sender<Status>,
}

/// What requests see: the held exceptions by namespace.
#[derive(Default)]
struct Published {
    by_namespace: HashMap<String, Arc<[Arc<Exception>]>>,
    invalid: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// The first list is under way.
    Listing,
    /// Listed once (or known to be unavailable: nothing to wait for).
    Synced,
}

impl ClusterExceptions {
    /// A cache that knows no exception and has nothing to wait for.
    pub fn empty() -> ClusterExceptions {
        let lookup = ClusterExceptions::waiting();
        lookup.shared.status.send_replace(Status::Synced);
        lookup
    }

    /// A cache not synced yet, that [`ClusterExceptions::watch`] fills.
    pub fn waiting() -> ClusterExceptions {
        ClusterExceptions {
            shared: Arc::new(Shared {
                published: RwLock::default(),
                status: tokio::sync::watch::Sender::new(Status::Listing),
            }),
            clock: None,
        }
    }

    /// [`ClusterExceptions::waiting`] filled by [`ClusterExceptions::watch`].
    pub fn start(
        client: kube::Client,
        read: Reader,
    ) -> (ClusterExceptions, tokio::task::JoinHandle<()>) {
        let lookup = ClusterExceptions::waiting();
        let (_, task) = lookup.watch(client, read, Settings::default(), CacheMetrics::default());
        (lookup, task)
    }

    /// The kind: a cluster that does not serve it (no CRD) or refuses the
    /// server the list (RBAC) leaves the cache synced and empty, so that
    /// nothing is excepted and readiness does not wait; the watch keeps
    /// asking and fills the cache once it can.
    pub fn kind() -> Kind {
        Kind::new("policy exceptions", GROUP, VERSION, RESOURCE).forbidden_is_empty(RBAC_RULE)
    }

    /// Watches the exceptions of every namespace with `client` into this
    /// cache, reading each with `read` (off the runtime's threads: it
    /// compiles CEL). The returned task runs until aborted; call it once
    /// per cache.
    pub fn watch(
        &self,
        client: kube::Client,
        read: Reader,
        settings: Settings,
        metrics: CacheMetrics,
    ) -> (Watched, tokio::task::JoinHandle<()>) {
        let cache = Arc::new(std::sync::Mutex::new(Cache::new(read, self.shared.clone())));
        watch::start(
            client,
            ClusterExceptions::kind(),
            settings,
            metrics,
            move |event: Event<DynamicObject>| {
                let cache = cache.clone();
                async move {
                    let handled = tokio::task::spawn_blocking(move || {
                        cache
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .handle(event)
                    });
                    if let Err(e) = handled.await {
                        tracing::error!(error = %e, "reading a GpuPolicyException failed; it is not held");
                    }
                }
            },
        )
    }

    /// Judged at `clock` instead of the wall clock (for tests).
    pub fn with_clock(mut self, clock: Clock) -> ClusterExceptions {
        self.clock = Some(clock);
        self
    }

    /// Resolves once the first list is in (or the kind is known to be
    /// unavailable). Returns false if the watch ended before that, in
    /// which case the cache never syncs.
    pub async fn wait_until_synced(&self) -> bool {
        let mut status = self.shared.status.subscribe();
        let synced = status.wait_for(|s| *s == Status::Synced).await.is_ok();
        synced
    }

    /// Whether the first list is in.
    pub fn is_synced(&self) -> bool {
        *self.shared.status.borrow() == Status::Synced
    }

    /// The exceptions held, by state at [`ExceptionLookup::now`], and
    /// those not held.
    pub fn counts(&self) -> Counts {
        let now = self.now();
        let published = self.published();
        let mut counts = Counts {
            invalid: published.invalid,
            ..Counts::default()
        };
        for exception in published.by_namespace.values().flat_map(|e| e.iter()) {
            match exception.state(now) {
                State::Active => counts.active += 1,
                State::Expired => counts.expired += 1,
            }
        }
        counts
    }

    fn published(&self) -> std::sync::RwLockReadGuard<'_, Published> {
        self.shared
            .published
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for ClusterExceptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterExceptions")
            .field("status", &*self.shared.status.borrow())
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl ExceptionLookup for ClusterExceptions {
    fn in_namespace(&self, namespace: &str) -> Arc<[Arc<Exception>]> {
        match self.published().by_namespace.get(namespace) {
            Some(held) => held.clone(),
            None => Arc::from([]),
        }
    }

    fn all(&self) -> Vec<Arc<Exception>> {
        let published = self.published();
        let mut all: Vec<Arc<Exception>> = published
            .by_namespace
            .values()
            .flat_map(|e| e.iter().cloned())
            .collect();
        all.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        all
    }

    fn now(&self) -> SystemTime {
        match &self.clock {
            Some(clock) => clock(),
            None => SystemTime::now(),
        }
    }
}

/// namespace, name.
type Key = (String, String);

/// The watch's side: every object seen, with what became of it. Owned by
/// the task driving the watch; what requests see is published from it.
struct Cache {
    read: Reader,
    shared: Arc<Shared>,
    live: Entries,
    /// Being filled by a (re)list, replacing `live` when it completes.
    relist: Option<Entries>,
}

#[derive(Default)]
struct Entries {
    map: BTreeMap<Key, Entry>,
    held: usize,
    held_in: HashMap<String, usize>,
    not_held: usize,
}

#[derive(Clone)]
struct Entry {
    version: Option<String>,
    kept: Kept,
}

#[derive(Clone)]
enum Kept {
    Held(Arc<Exception>),
    /// Read with errors (logged).
    Unreadable,
    /// Beyond the bounds (logged); read again when it changes, or on a
    /// relist once there is room.
    Ignored,
}

impl Entries {
    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let entry = self.map.remove(key)?;
        match entry.kept {
            Kept::Held(_) => {
                self.held -= 1;
                if let Some(n) = self.held_in.get_mut(&key.0) {
                    *n -= 1;
                    if *n == 0 {
                        self.held_in.remove(&key.0);
                    }
                }
            }
            Kept::Unreadable | Kept::Ignored => self.not_held -= 1,
        }
        Some(entry)
    }

    fn insert(&mut self, key: Key, entry: Entry) {
        self.remove(&key);
        match entry.kept {
            Kept::Held(_) => {
                self.held += 1;
                *self.held_in.entry(key.0.clone()).or_default() += 1;
            }
            Kept::Unreadable | Kept::Ignored => self.not_held += 1,
        }
        self.map.insert(key, entry);
    }

    /// Why one more exception cannot be held in `namespace`, if it cannot.
    fn full(&self, namespace: &str) -> Option<String> {
        if self.held >= MAX_HELD {
            Some(format!(
                "the server already holds {MAX_HELD} GpuPolicyExceptions, its most"
            ))
        } else if self.held_in.get(namespace).copied().unwrap_or(0) >= MAX_PER_NAMESPACE {
            Some(format!(
                "namespace {namespace} already has {MAX_PER_NAMESPACE} GpuPolicyExceptions held, the most one namespace may have"
            ))
        } else {
            None
        }
    }

    /// The held exceptions of `namespace`, by name.
    fn held_in(&self, namespace: &str) -> Vec<Arc<Exception>> {
        let from = (namespace.to_string(), String::new());
        self.map
            .range(from..)
            .take_while(|((ns, _), _)| ns == namespace)
            .filter_map(|(_, entry)| match &entry.kept {
                Kept::Held(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    }
}

impl Cache {
    fn new(read: Reader, shared: Arc<Shared>) -> Cache {
        Cache {
            read,
            shared,
            live: Entries::default(),
            relist: None,
        }
    }

    fn handle(&mut self, event: Event<DynamicObject>) {
        match event {
            Event::Init => self.relist = Some(Entries::default()),
            Event::InitApply(object) => {
                let previous = self.live.map.get(&key_of(&object)).cloned();
                let relist = self.relist.get_or_insert_with(Entries::default);
                take(&self.read, previous, relist, object);
            }
            Event::InitDone => {
                self.live = self.relist.take().unwrap_or_default();
                self.publish_all();
                self.shared.status.send_replace(Status::Synced);
            }
            Event::Apply(object) => {
                let previous = self.live.map.get(&key_of(&object)).cloned();
                let namespace = take(&self.read, previous, &mut self.live, object);
                self.publish(&namespace);
            }
            Event::Delete(object) => {
                let (namespace, name) = key_of(&object);
                self.live.remove(&(namespace.clone(), name));
                self.publish(&namespace);
            }
        }
    }

    fn publish(&self, namespace: &str) {
        let held = self.live.held_in(namespace);
        let mut published = self.write();
        if held.is_empty() {
            published.by_namespace.remove(namespace);
        } else {
            published
                .by_namespace
                .insert(namespace.to_string(), Arc::from(held));
        }
        published.invalid = self.live.not_held;
    }

    fn publish_all(&self) {
        let mut by_namespace: HashMap<String, Vec<Arc<Exception>>> = HashMap::new();
        for ((namespace, _), entry) in &self.live.map {
            if let Kept::Held(e) = &entry.kept {
                by_namespace
                    .entry(namespace.clone())
                    .or_default()
                    .push(e.clone());
            }
        }
        let mut published = self.write();
        published.by_namespace = by_namespace
            .into_iter()
            .map(|(ns, held)| (ns, Arc::from(held)))
            .collect();
        published.invalid = self.live.not_held;
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Published> {
        self.shared
            .published
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reads `object` into `into` (unless `previous`, the live entry, is of the
/// same version and can be kept); returns its namespace.
fn take(
    read: &Reader,
    previous: Option<Entry>,
    into: &mut Entries,
    object: DynamicObject,
) -> String {
    let key = key_of(&object);
    let (namespace, name) = (key.0.as_str(), key.1.as_str());
    let version = object.metadata.resource_version.clone();
    let was_ignored = matches!(
        previous,
        Some(Entry {
            kept: Kept::Ignored,
            ..
        })
    );
    let same = previous.filter(|p| version.is_some() && p.version == version);
    into.remove(&key);
    let kept = match same.map(|p| p.kept) {
        Some(Kept::Unreadable) => Kept::Unreadable,
        Some(Kept::Held(held)) => match into.full(namespace) {
            None => Kept::Held(held),
            Some(why) => ignored(namespace, name, &why, false),
        },
        Some(Kept::Ignored) | None => match into.full(namespace) {
            Some(why) => ignored(namespace, name, &why, was_ignored),
            None => match read(&as_value(object)) {
                Ok(exception) => Kept::Held(Arc::new(exception)),
                Err(errors) => {
                    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    tracing::warn!(
                        namespace,
                        name,
                        errors = %errors.join("; "),
                        "GpuPolicyException not read: it lets nothing through until fixed"
                    );
                    Kept::Unreadable
                }
            },
        },
    };
    into.insert(key.clone(), Entry { version, kept });
    key.0
}

/// An object beyond the bounds: logged unless it already was.
fn ignored(namespace: &str, name: &str, why: &str, logged: bool) -> Kept {
    if !logged {
        tracing::warn!(
            namespace,
            name,
            "GpuPolicyException ignored: {why}; it lets nothing through (delete exceptions no longer needed)"
        );
    }
    Kept::Ignored
}

fn key_of(object: &DynamicObject) -> Key {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// The object as the API gives it (lists may leave out apiVersion and kind).
fn as_value(object: DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(fields) = value.as_object_mut() {
        fields.insert("apiVersion".into(), crate::exceptions::API_VERSION.into());
        fields.insert("kind".into(), KIND.into());
    }
    value
}

pub mod metrics;

#[cfg(test)]
mod tests;
