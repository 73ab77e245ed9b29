//! An in-process Kubernetes API server on 127.0.0.1 (plain HTTP) that
//! speaks the protocol kube's client, discovery and watcher use: discovery
//! documents, paged lists (`limit`, `continue`, `metadata.resourceVersion`),
//! watches streamed as JSON lines from a `resourceVersion` (ADDED,
//! MODIFIED, DELETED, BOOKMARK when asked), `410 Expired` for a watch from
//! a compacted `resourceVersion` (sent, as kube-apiserver does, as an ERROR
//! event on a 200 stream), `403 Forbidden` and `404 NotFound` as Status
//! objects. Writes of a served kind are answered as kube-apiserver does:
//! create (POST, 409 AlreadyExists), get, replace (PUT with the
//! `resourceVersion` read, 409 Conflict when stale) and delete, namespaced
//! or not, and patch (JSON and merge patch, [`objects`]); lists filter by an equality `labelSelector`. Every request is
//! recorded for tests to inspect.
use axum::body::{Body, Bytes};
use axum::extract::State as Extract;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

mod objects;
mod outage;
mod writes;
use writes::{is_item_or_namespaced, write};

/// A kind the fake serves.
#[derive(Clone, Debug)]
pub struct Resource {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
}

impl Resource {
    pub const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        namespaced: bool,
    ) -> Resource {
        Resource {
            group,
            version,
            kind,
            plural,
            namespaced,
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The path of the collection across all namespaces.
    pub fn collection(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}/{}", self.version, self.plural)
        } else {
            format!("/apis/{}/{}/{}", self.group, self.version, self.plural)
        }
    }

    /// The path of the collection in `namespace`.
    pub fn namespaced_collection(&self, namespace: &str) -> String {
        format!(
            "{}/namespaces/{namespace}/{}",
            self.discovery_path(),
            self.plural
        )
    }

    fn discovery_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

/// The Namespace kind.
pub const NAMESPACES: Resource = Resource::new("", "v1", "Namespace", "namespaces", false);
pub const NODES: Resource = Resource::new("", "v1", "Node", "nodes", false);
/// Karpenter's NodePools.
pub const NODEPOOLS: Resource = Resource::new("karpenter.sh", "v1", "NodePool", "nodepools", false);
/// DRA claims, served from Kubernetes 1.34.
pub const RESOURCE_CLAIMS: Resource = Resource::new(
    "resource.k8s.io",
    "v1",
    "ResourceClaim",
    "resourceclaims",
    true,
);
pub const RESOURCE_CLAIM_TEMPLATES: Resource = Resource::new(
    "resource.k8s.io",
    "v1",
    "ResourceClaimTemplate",
    "resourceclaimtemplates",
    true,
);
/// DRA DeviceClasses and ResourceSlices (cluster-scoped): a class may
/// serve an extended resource from the slices' devices (KEP-5004).
pub const DEVICE_CLASSES: Resource = Resource::new(
    "resource.k8s.io",
    "v1",
    "DeviceClass",
    "deviceclasses",
    false,
);
pub const RESOURCE_SLICES: Resource = Resource::new(
    "resource.k8s.io",
    "v1",
    "ResourceSlice",
    "resourceslices",
    false,
);

/// One request the fake received, and how it answered.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    /// The HTTP status of the answer.
    pub status: u16,
    /// For a watch: whether it was answered with a 410 Expired event.
    pub expired: bool,
}

impl Recorded {
    /// A create, replace, patch or delete.
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }

    pub fn is_watch(&self) -> bool {
        self.query.get("watch").map(String::as_str) == Some("true")
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.get(name).map(String::as_str)
    }
}

/// The objects and history of the fake cluster; tests change it through
/// [`FakeApiServer::change`].
pub struct Cluster {
    resources: Vec<Resource>,
    /// Collection path -> (namespace, name) -> object.
    objects: BTreeMap<String, BTreeMap<(String, String), Value>>,
    resource_version: u64,
    /// (resourceVersion, collection path, event type, object), oldest first.
    events: Vec<(u64, String, &'static str, Value)>,
    /// A watch from a resourceVersion below this is answered 410 Expired.
    oldest_watchable: u64,
    /// Bumped to end every open watch.
    watch_generation: u64,
    /// Collections whose list and watch answer 403.
    forbidden: BTreeSet<String>,
    /// Group versions listed in `/apis` whose resource list answers 404.
    vanished: BTreeSet<String>,
    /// Collections whose next lists and watches answer an error: the HTTP
    /// status and how many more times.
    failing: BTreeMap<String, (u16, usize)>,
    requests: Vec<Recorded>,
}

impl Cluster {
    /// Creates or replaces `object` (its kind must be served), recording
    /// an ADDED or MODIFIED event. Returns the new resourceVersion.
    pub fn apply(&mut self, mut object: Value) -> u64 {
        let resource = self.resource_of(&object);
        let key = key_of(&object);
        self.resource_version += 1;
        let rv = self.resource_version;
        let meta = &mut object["metadata"];
        meta["resourceVersion"] = json!(rv.to_string());
        if meta.get("uid").is_none() {
            meta["uid"] = json!(format!("uid-{}-{}", resource.plural, rv));
        }
        if resource.kind == "Namespace" {
            meta["labels"]["kubernetes.io/metadata.name"] = json!(key.1);
        }
        let collection = resource.collection();
        let previous = self
            .objects
            .entry(collection.clone())
            .or_default()
            .insert(key, object.clone());
        let kind = if previous.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.events.push((rv, collection, kind, object));
        rv
    }

    /// Deletes the object of `resource` named `name` (in `namespace`),
    /// recording a DELETED event. Returns the new resourceVersion.
    pub fn delete(&mut self, resource: &Resource, namespace: &str, name: &str) -> u64 {
        let collection = resource.collection();
        let mut object = self
            .objects
            .get_mut(&collection)
            .and_then(|objects| objects.remove(&(namespace.to_string(), name.to_string())))
            .unwrap_or_else(|| panic!("no {} {namespace}/{name} to delete", resource.kind));
        self.resource_version += 1;
        let rv = self.resource_version;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.events.push((rv, collection, "DELETED", object));
        rv
    }

    /// Sends a BOOKMARK at a new resourceVersion to every watch of
    /// `resource` that asked for bookmarks. Returns that resourceVersion.
    pub fn bookmark(&mut self, resource: &Resource) -> u64 {
        self.resource_version += 1;
        let rv = self.resource_version;
        let object = json!({
            "apiVersion": resource.api_version(),
            "kind": resource.kind,
            "metadata": {"resourceVersion": rv.to_string()},
        });
        self.events
            .push((rv, resource.collection(), "BOOKMARK", object));
        rv
    }

    /// Ends every open watch; clients reconnect from the last
    /// resourceVersion they saw.
    pub fn end_watches(&mut self) {
        self.watch_generation += 1;
    }

    /// Forgets history up to now, as etcd compaction does: a watch from
    /// any earlier resourceVersion is answered 410 Expired.
    pub fn compact(&mut self) {
        self.oldest_watchable = self.resource_version;
        self.events.clear();
    }

    /// The list and watch of `resource` answer 403 Forbidden.
    pub fn forbid(&mut self, resource: &Resource) {
        self.forbidden.insert(resource.collection());
    }

    /// The next `times` lists and watches of `resource` answer `code` (a
    /// Status, as kube-apiserver sends for a 500 or 503); `usize::MAX`:
    /// until [`Cluster::heal`].
    pub fn fail(&mut self, resource: &Resource, code: u16, times: usize) {
        self.failing.insert(resource.collection(), (code, times));
    }

    /// Lists and watches of `resource` answer again.
    pub fn heal(&mut self, resource: &Resource) {
        self.failing.remove(&resource.collection());
    }

    /// `group_version` stays listed in `/apis` but its resource list
    /// answers 404, as when a CRD is deleted during discovery.
    pub fn vanish(&mut self, group_version: &str) {
        self.vanished.insert(group_version.to_string());
    }

    /// The object of `resource` named `name` (in `namespace`, "" for a
    /// cluster-scoped kind), if it exists.
    pub fn object(&self, resource: &Resource, namespace: &str, name: &str) -> Option<Value> {
        self.objects
            .get(&resource.collection())?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The objects of `resource`, by namespace and name, with `apiVersion`
    /// and `kind` set.
    pub fn objects(&self, resource: &Resource) -> Vec<Value> {
        self.objects
            .get(&resource.collection())
            .map(|objects| objects.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    fn resource_of(&self, object: &Value) -> Resource {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        self.resources
            .iter()
            .find(|r| r.api_version() == api_version && r.kind == kind)
            .unwrap_or_else(|| panic!("the fake does not serve {api_version} {kind}"))
            .clone()
    }
}

/// A fake API server running on the current tokio runtime.
pub struct FakeApiServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    cluster: Mutex<Cluster>,
    /// Bumped on every change, to wake open watches.
    changed: tokio::sync::watch::Sender<u64>,
    /// While true, list requests for a continued page wait.
    hold_continued: tokio::sync::watch::Sender<bool>,
    /// While true, the server is down: connections are closed as they are
    /// accepted and open ones fail on their next read or write.
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FakeApiServer {
    /// Serves `resources` (discovery, list, watch) on 127.0.0.1, empty.
    pub async fn start(resources: Vec<Resource>) -> FakeApiServer {
        let shared = Arc::new(Shared {
            cluster: Mutex::new(Cluster {
                resources,
                objects: BTreeMap::new(),
                resource_version: 1,
                events: Vec::new(),
                oldest_watchable: 0,
                watch_generation: 0,
                forbidden: BTreeSet::new(),
                vanished: BTreeSet::new(),
                failing: BTreeMap::new(),
                requests: Vec::new(),
            }),
            changed: tokio::sync::watch::Sender::new(0),
            hold_continued: tokio::sync::watch::Sender::new(false),
            down: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        });
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = outage::Gated {
            inner: listener,
            down: shared.down.clone(),
        };
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeApiServer { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Takes the server down (`true`): every connection, open or new, is
    /// cut, as when kube-apiserver is restarted or unreachable; back up
    /// with `false`.
    pub fn outage(&self, down: bool) {
        self.shared
            .down
            .store(down, std::sync::atomic::Ordering::SeqCst);
        if down {
            // Open watches end, so their connections see the outage.
            self.change(Cluster::end_watches);
        }
    }

    /// A client for this server, with no credentials.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url().parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// Writes a kubeconfig for this server into `dir`; returns its path.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: fake, cluster: {{server: \"{}\"}}}}]\n\
             users: [{{name: fake, user: {{}}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n\
             current-context: fake\n",
            self.url()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Changes the cluster under one lock (so no request sees half of
    /// it), then wakes open watches.
    pub fn change<T>(&self, f: impl FnOnce(&mut Cluster) -> T) -> T {
        let out = f(&mut self.shared.lock());
        self.shared.changed.send_modify(|n| *n += 1);
        out
    }

    /// Reads the cluster.
    pub fn read<T>(&self, f: impl FnOnce(&Cluster) -> T) -> T {
        f(&self.shared.lock())
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// While `held`, a list request with a `continue` token is recorded
    /// and then waits until released.
    pub fn hold_continued_lists(&self, held: bool) {
        self.shared.hold_continued.send_replace(held);
    }

    /// Polls (every 10 ms, for at most 30 s) until `done` holds for the
    /// requests received; panics naming `what` otherwise.
    pub async fn wait_for_requests(&self, what: &str, done: impl Fn(&[Recorded]) -> bool) {
        wait_until(what, || done(&self.shared.lock().requests)).await;
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls `done` every 10 ms for at most 30 s; panics naming `what` if it
/// never holds. The bound is for a hung test, not a timing assumption.
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What to do with a request, decided under the lock.
enum Answer {
    Now(StatusCode, Value),
    /// An object was read or written: open watches may have news.
    Wrote(StatusCode, Value),
    /// A page of a list; `continued` pages wait while lists are held.
    Page {
        page: Value,
        continued: bool,
    },
    Watch(String, BTreeMap<String, String>),
}

async fn answer(
    Extract(shared): Extract<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/').to_string();
    let query = parse_query(uri.query().unwrap_or(""));
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let patch = method == Method::PATCH;
    if !patch && (method != Method::GET || is_item_or_namespaced(&shared, &path)) {
        let (status, body) = write(&shared, &method, path, query, &body);
        shared.changed.send_modify(|n| *n += 1);
        return json_response(status, &body);
    }
    match decide(&shared, &method, path, query, content_type, &body) {
        Answer::Now(status, body) => json_response(status, &body),
        Answer::Wrote(status, body) => {
            shared.changed.send_modify(|n| *n += 1);
            json_response(status, &body)
        }
        Answer::Page { page, continued } => {
            if continued {
                let mut held = shared.hold_continued.subscribe();
                // Only fails once the server is gone.
                let _ = held.wait_for(|held| !*held).await;
            }
            json_response(StatusCode::OK, &page)
        }
        Answer::Watch(path, query) => watch(shared, path, query),
    }
}

fn decide(
    shared: &Shared,
    method: &Method,
    path: String,
    query: BTreeMap<String, String>,
    content_type: &str,
    body: &[u8],
) -> Answer {
    let mut cluster = shared.lock();
    if let Some(target) = objects::target(&cluster.resources, &path) {
        let (status, answer) = objects::answer(&mut cluster, method, target, content_type, body);
        cluster.requests.push(Recorded {
            method: method.to_string(),
            path,
            query,
            status: status.as_u16(),
            expired: false,
        });
        return Answer::Wrote(status, answer);
    }
    let resource = cluster
        .resources
        .iter()
        .find(|r| r.collection() == path)
        .cloned();
    let (status, body) = if *method != Method::GET {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            status_object(405, "MethodNotAllowed", "collections are only read"),
        )
    } else if let Some(doc) = discovery(&cluster, &path) {
        doc
    } else if let Some(code) = failing(&mut cluster, &path) {
        (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            status_object(code, "InternalError", "injected failure"),
        )
    } else if let Some(resource) = resource {
        if cluster.forbidden.contains(&path) {
            let group = if resource.group.is_empty() {
                String::new()
            } else {
                format!(".{}", resource.group)
            };
            let message = format!(
                "{plural}{group} is forbidden: User \"system:anonymous\" cannot list resource \"{plural}\" in API group \"{}\" at the cluster scope",
                resource.group,
                plural = resource.plural,
            );
            (
                StatusCode::FORBIDDEN,
                status_object(403, "Forbidden", &message),
            )
        } else if query.get("watch").map(String::as_str) == Some("true") {
            return Answer::Watch(path, query);
        } else {
            let continued = query.contains_key("continue");
            let page = list(&cluster, &resource, &query);
            cluster.requests.push(Recorded {
                method: method.to_string(),
                path,
                query,
                status: 200,
                expired: false,
            });
            return Answer::Page { page, continued };
        }
    } else {
        (
            StatusCode::NOT_FOUND,
            status_object(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        )
    };
    cluster.requests.push(Recorded {
        method: method.to_string(),
        path,
        query,
        status: status.as_u16(),
        expired: false,
    });
    Answer::Now(status, body)
}

/// The status a failing collection answers now, counting it.
fn failing(cluster: &mut Cluster, path: &str) -> Option<u16> {
    let (code, times) = cluster.failing.get_mut(path)?;
    if *times == 0 {
        return None;
    }
    if *times != usize::MAX {
        *times -= 1;
    }
    Some(*code)
}

/// `/api`, `/apis`, and the resource list of each group version.
fn discovery(cluster: &Cluster, path: &str) -> Option<(StatusCode, Value)> {
    let resources = &cluster.resources;
    if path == "/api" {
        return Some((
            StatusCode::OK,
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
        ));
    }
    if path == "/apis" {
        let mut groups: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for r in resources.iter().filter(|r| !r.group.is_empty()) {
            groups.entry(r.group).or_default().insert(r.version);
        }
        let groups: Vec<Value> = groups
            .iter()
            .map(|(group, versions)| {
                let versions: Vec<Value> = versions
                    .iter()
                    .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
                    .collect();
                json!({"name": group, "versions": versions, "preferredVersion": versions[0]})
            })
            .collect();
        return Some((
            StatusCode::OK,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
        ));
    }
    let served: Vec<&Resource> = resources
        .iter()
        .filter(|r| r.discovery_path() == path)
        .collect();
    let first = served.first()?;
    let group_version = first.api_version();
    if cluster.vanished.contains(&group_version) {
        return Some((
            StatusCode::NOT_FOUND,
            status_object(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        ));
    }
    let list: Vec<Value> = served
        .iter()
        .map(|r| {
            json!({
                "name": r.plural,
                "singularName": r.kind.to_lowercase(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "list", "watch"],
            })
        })
        .collect();
    Some((
        StatusCode::OK,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list}),
    ))
}

/// One page of `resource`, by namespace and name. The continue token
/// carries the list's resourceVersion and the key of the last object sent;
/// a continued page reads the objects after that key as they are now (not
/// a snapshot). An equality `labelSelector` filters; field selectors and
/// a requested resourceVersion are ignored.
fn list(cluster: &Cluster, resource: &Resource, query: &BTreeMap<String, String>) -> Value {
    let empty = BTreeMap::new();
    let objects = cluster
        .objects
        .get(&resource.collection())
        .unwrap_or(&empty);
    let (resource_version, after) = match query.get("continue") {
        Some(token) => {
            let mut parts = token.splitn(3, '/');
            let rv: u64 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .expect("a continue token from this server");
            let namespace = parts.next().unwrap_or_default().to_string();
            let name = parts.next().unwrap_or_default().to_string();
            (rv, Some((namespace, name)))
        }
        None => (cluster.resource_version, None),
    };
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let rest: Vec<(&(String, String), &Value)> = match &after {
        Some(after) => objects
            .range::<(String, String), _>((
                std::ops::Bound::Excluded(after),
                std::ops::Bound::Unbounded,
            ))
            .collect(),
        None => objects.iter().collect(),
    };
    let rest: Vec<(&(String, String), &Value)> = rest
        .into_iter()
        .filter(|(_, object)| selected(object, query.get("labelSelector").map(String::as_str)))
        .collect();
    let page: Vec<Value> = rest
        .iter()
        .take(limit)
        .map(|(_, object)| {
            let mut item = (*object).clone();
            // kube-apiserver sets apiVersion and kind on the items of CRD
            // lists (dotted groups), and only on the list for built-in kinds.
            if let (Some(item), false) = (item.as_object_mut(), resource.group.contains('.')) {
                item.remove("apiVersion");
                item.remove("kind");
            }
            item
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if rest.len() > limit {
        let (namespace, name) = rest[limit - 1].0;
        metadata["continue"] = json!(format!("{resource_version}/{namespace}/{name}"));
        metadata["remainingItemCount"] = json!(rest.len() - limit);
    }
    json!({
        "apiVersion": resource.api_version(),
        "kind": format!("{}List", resource.kind),
        "metadata": metadata,
        "items": page,
    })
}

/// A watch of the collection at `path` from the query's resourceVersion: a chunked
/// stream of JSON lines, one event each, until the client goes away or
/// the test ends open watches.
fn watch(shared: Arc<Shared>, path: String, query: BTreeMap<String, String>) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    let bookmarks = query.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let mut changed = shared.changed.subscribe();
    changed.borrow_and_update();
    let (generation, expired) = {
        let mut cluster = shared.lock();
        let expired = from < cluster.oldest_watchable;
        cluster.requests.push(Recorded {
            method: "GET".into(),
            path: path.clone(),
            query,
            status: 200,
            expired,
        });
        (cluster.watch_generation, expired)
    };
    tokio::spawn(async move {
        if expired {
            let status = status_object(
                410,
                "Expired",
                &format!(
                    "too old resource version: {from} ({})",
                    shared.lock().oldest_watchable
                ),
            );
            let _ = tx.send(event_line("ERROR", &status)).await;
            return;
        }
        let mut seen = from;
        loop {
            let batch: Option<Vec<Bytes>> = {
                let cluster = shared.lock();
                (cluster.watch_generation == generation).then(|| {
                    let after = seen;
                    cluster
                        .events
                        .iter()
                        .filter(|(rv, collection, kind, _)| {
                            *rv > after && *collection == path && (bookmarks || *kind != "BOOKMARK")
                        })
                        .map(|(rv, _, kind, object)| {
                            seen = *rv;
                            event_line(kind, object)
                        })
                        .collect()
                })
            };
            let Some(batch) = batch else { return };
            for line in batch {
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                changed = changed.changed() => if changed.is_err() { return },
                () = tx.closed() => return,
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|line| (Ok::<_, Infallible>(line), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(body))
        .unwrap()
}

/// Whether `object` has every `key=value` (or `key==value`) of `selector`.
fn selected(object: &Value, selector: Option<&str>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    selector.split(',').all(|requirement| {
        let (key, value) = requirement
            .split_once("==")
            .or_else(|| requirement.split_once('='))
            .unwrap_or_else(|| panic!("the fake only knows equality selectors: {requirement}"));
        object
            .pointer("/metadata/labels")
            .and_then(|labels| labels.get(key.trim()))
            .and_then(Value::as_str)
            == Some(value.trim())
    })
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        serde_json::to_vec(body).unwrap(),
    )
        .into_response()
}

fn key_of(object: &Value) -> (String, String) {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (text("/metadata/namespace"), text("/metadata/name"))
}

/// `a=1&b=x%2Fy` into its pairs, percent-decoded.
fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
