//! Leader election over a `coordination.k8s.io/v1` Lease, with the
//! semantics of client-go's `leaderelection`: the holder writes its
//! identity and renews `renewTime`; another candidate takes the lease over
//! only once it has seen the record unchanged for `leaseDurationSeconds`
//! (by its own clock, so clock skew between nodes does not matter); every
//! write carries the `resourceVersion` it read, so of two candidates
//! writing at once one wins and the other gets a conflict and stays a
//! follower.
use std::time::{Duration, SystemTime};

/// What a Lease says about its holder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `spec.holderIdentity`; none or empty: released.
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration: Duration,
    /// `spec.acquireTime`.
    pub acquire_time: Option<SystemTime>,
    /// `spec.renewTime`.
    pub renew_time: Option<SystemTime>,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// `metadata.resourceVersion` as read; an update must carry it.
    pub resource_version: Option<String>,
}

/// Why a lease read or write failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease changed since it was read (HTTP 409), or was created by
    /// someone else first.
    #[error("the lease was changed by another candidate")]
    Conflict,
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Where the lease is kept: the cluster, or memory in tests.
#[allow(async_fn_in_trait)]
pub trait LeaseStore {
    /// The lease, or none if it does not exist.
    async fn get(&self) -> Result<Option<LeaseRecord>, LeaseError>;
    /// Creates the lease; [`LeaseError::Conflict`] if it exists.
    async fn create(&self, record: &LeaseRecord) -> Result<LeaseRecord, LeaseError>;
    /// Replaces the lease if its resourceVersion is still
    /// `record.resource_version`, else [`LeaseError::Conflict`].
    async fn update(&self, record: &LeaseRecord) -> Result<LeaseRecord, LeaseError>;
}

/// One candidate for the lease.
pub struct LeaderElector<S> {
    store: S,
    identity: String,
    lease_duration: Duration,
    /// The record last read or written, and when (by this clock) it was
    /// first seen as it is.
    observed: Option<(LeaseRecord, SystemTime)>,
}

impl<S: LeaseStore> LeaderElector<S> {
    /// `identity` is what this candidate writes as holder (the pod name);
    /// `lease_duration` how long a lease not renewed stays valid.
    pub fn new(store: S, identity: impl Into<String>, lease_duration: Duration) -> Self {
        LeaderElector {
            store,
            identity: identity.into(),
            lease_duration,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Who held the lease when this candidate last looked, if anyone.
    pub fn holder(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .and_then(|(r, _)| r.holder.as_deref())
    }

    /// Whether this candidate held the lease when it last looked.
    pub fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|(r, _)| r.holder.as_deref() == Some(self.identity.as_str()))
    }

    /// Acquires the lease, or renews it if held: true if this candidate
    /// holds it now. False when another holder's lease is still valid or
    /// another candidate wrote first.
    pub async fn try_acquire_or_renew(&mut self, now: SystemTime) -> Result<bool, LeaseError> {
        let current = self.store.get().await?;
        let held_by_me =
            (current.as_ref()).is_some_and(|c| c.holder.as_deref() == Some(self.identity.as_str()));
        if let Some(current) = &current {
            self.observe(current, now);
            let held_by_other =
                !held_by_me && current.holder.as_deref().is_some_and(|h| !h.is_empty());
            if held_by_other && self.valid_at(now) {
                return Ok(false);
            }
        }
        let record = LeaseRecord {
            holder: Some(self.identity.clone()),
            lease_duration: self.lease_duration,
            acquire_time: (current.as_ref())
                .filter(|_| held_by_me)
                .and_then(|c| c.acquire_time)
                .or(Some(now)),
            renew_time: Some(now),
            transitions: match &current {
                None => 0,
                Some(c) if held_by_me => c.transitions,
                Some(c) => c.transitions.saturating_add(1),
            },
            resource_version: current.as_ref().and_then(|c| c.resource_version.clone()),
        };
        let written = match &current {
            None => self.store.create(&record).await,
            Some(_) => self.store.update(&record).await,
        };
        match written {
            Ok(written) => {
                self.observed = Some((written, now));
                Ok(true)
            }
            Err(LeaseError::Conflict) => {
                // Someone else wrote in between (or created it first): what
                // they wrote is read on the next try.
                if current.is_some() {
                    self.observed = None;
                }
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }

    /// Gives the lease up if held, so another candidate takes over at
    /// once instead of after the lease duration.
    pub async fn release(&mut self, now: SystemTime) -> Result<(), LeaseError> {
        if !self.is_leader() {
            return Ok(());
        }
        let Some(current) = self.store.get().await? else {
            return Ok(());
        };
        if current.holder.as_deref() != Some(self.identity.as_str()) {
            self.observed = None;
            return Ok(());
        }
        let record = LeaseRecord {
            holder: None,
            lease_duration: Duration::from_secs(1),
            acquire_time: current.acquire_time,
            renew_time: Some(now),
            transitions: current.transitions,
            resource_version: current.resource_version.clone(),
        };
        let written = self.store.update(&record).await;
        self.observed = None;
        written.map(|_| ())
    }

    /// Remembers `record`, restarting the validity clock when it changed.
    fn observe(&mut self, record: &LeaseRecord, now: SystemTime) {
        let same = self.observed.as_ref().is_some_and(|(seen, _)| {
            seen.holder == record.holder
                && seen.renew_time == record.renew_time
                && seen.resource_version == record.resource_version
        });
        if !same {
            self.observed = Some((record.clone(), now));
        }
    }

    /// Whether the observed record is still within its lease duration.
    fn valid_at(&self, now: SystemTime) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|(record, seen)| *seen + record.lease_duration > now)
    }
}

/// [`LeaseStore`] over a Lease object in the cluster.
pub struct ClusterLease {
    api: kube::Api<k8s_openapi::api::coordination::v1::Lease>,
    name: String,
}

impl ClusterLease {
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> ClusterLease {
        ClusterLease {
            api: kube::Api::namespaced(client, namespace),
            name: name.to_string(),
        }
    }

    fn to_object(&self, record: &LeaseRecord) -> k8s_openapi::api::coordination::v1::Lease {
        use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
        let micro = |t: Option<SystemTime>| {
            t.and_then(|t| k8s_openapi::jiff::Timestamp::try_from(t).ok())
                .map(MicroTime)
        };
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: record.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: record.holder.clone(),
                lease_duration_seconds: Some(
                    i32::try_from(record.lease_duration.as_secs()).unwrap_or(i32::MAX),
                ),
                acquire_time: micro(record.acquire_time),
                renew_time: micro(record.renew_time),
                lease_transitions: Some(record.transitions),
                ..LeaseSpec::default()
            }),
        }
    }
}

fn from_object(lease: k8s_openapi::api::coordination::v1::Lease) -> LeaseRecord {
    let spec = lease.spec.unwrap_or_default();
    let time = |t: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
        t.map(|t| SystemTime::from(t.0))
    };
    LeaseRecord {
        holder: spec.holder_identity.filter(|h| !h.is_empty()),
        lease_duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        acquire_time: time(spec.acquire_time),
        renew_time: time(spec.renew_time),
        transitions: spec.lease_transitions.unwrap_or(0),
        resource_version: lease.metadata.resource_version,
    }
}

fn store_error(err: kube::Error) -> LeaseError {
    match &err {
        kube::Error::Api(status) if status.code == 409 => LeaseError::Conflict,
        _ => LeaseError::Other(err.into()),
    }
}

impl LeaseStore for ClusterLease {
    async fn get(&self) -> Result<Option<LeaseRecord>, LeaseError> {
        match self.api.get_opt(&self.name).await {
            Ok(found) => Ok(found.map(from_object)),
            Err(err) => Err(store_error(err)),
        }
    }

    async fn create(&self, record: &LeaseRecord) -> Result<LeaseRecord, LeaseError> {
        let mut object = self.to_object(record);
        object.metadata.resource_version = None;
        self.api
            .create(&kube::api::PostParams::default(), &object)
            .await
            .map(from_object)
            .map_err(store_error)
    }

    async fn update(&self, record: &LeaseRecord) -> Result<LeaseRecord, LeaseError> {
        self.api
            .replace(
                &self.name,
                &kube::api::PostParams::default(),
                &self.to_object(record),
            )
            .await
            .map(from_object)
            .map_err(store_error)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    /// A lease in memory with the API server's optimistic concurrency:
    /// every write bumps the resourceVersion, a stale one is a conflict.
    #[derive(Clone, Default)]
    pub(crate) struct MemoryLease {
        stored: Rc<RefCell<Option<LeaseRecord>>>,
        version: Rc<RefCell<u64>>,
        /// Writes made by "someone else" just before the next update.
        interleave: Rc<RefCell<Option<String>>>,
        /// Reads fail while set.
        pub(crate) unreachable: Rc<RefCell<bool>>,
        /// The next read finds no lease, as if made just before a create.
        stale_read: Rc<RefCell<bool>>,
    }

    impl MemoryLease {
        fn write(&self, mut record: LeaseRecord) -> LeaseRecord {
            *self.version.borrow_mut() += 1;
            record.resource_version = Some(self.version.borrow().to_string());
            *self.stored.borrow_mut() = Some(record.clone());
            record
        }

        fn holder(&self) -> Option<String> {
            self.stored.borrow().as_ref().and_then(|r| r.holder.clone())
        }
    }

    impl LeaseStore for MemoryLease {
        async fn get(&self) -> Result<Option<LeaseRecord>, LeaseError> {
            if *self.unreachable.borrow() {
                return Err(LeaseError::Other(anyhow::anyhow!("connection refused")));
            }
            if self.stale_read.replace(false) {
                return Ok(None);
            }
            Ok(self.stored.borrow().clone())
        }

        async fn create(&self, record: &LeaseRecord) -> Result<LeaseRecord, LeaseError> {
            if self.stored.borrow().is_some() {
                return Err(LeaseError::Conflict);
            }
            Ok(self.write(record.clone()))
        }

        async fn update(&self, record: &LeaseRecord) -> Result<LeaseRecord, LeaseError> {
            if let Some(other) = self.interleave.borrow_mut().take() {
                let mut theirs = self.stored.borrow().clone().unwrap_or_default();
                theirs.holder = Some(other);
                self.write(theirs);
            }
            let current = self.stored.borrow().clone();
            match current {
                Some(c) if c.resource_version == record.resource_version => {
                    Ok(self.write(record.clone()))
                }
                _ => Err(LeaseError::Conflict),
            }
        }
    }

    const LEASE: Duration = Duration::from_secs(30);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn candidate(store: &MemoryLease, name: &str) -> LeaderElector<MemoryLease> {
        LeaderElector::new(store.clone(), name, LEASE)
    }

    /// A store whose lease pod-a took at 0 s, and pod-b, which has not
    /// tried yet.
    fn a_holds() -> (
        MemoryLease,
        LeaderElector<MemoryLease>,
        LeaderElector<MemoryLease>,
    ) {
        let store = MemoryLease::default();
        let mut a = candidate(&store, "pod-a");
        assert!(leads(&mut a, 0));
        let b = candidate(&store, "pod-b");
        (store, a, b)
    }

    /// Whether `elector` leads after trying at `secs`.
    fn leads(elector: &mut LeaderElector<impl LeaseStore>, secs: u64) -> bool {
        block_on(elector.try_acquire_or_renew(at(secs))).unwrap()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn the_first_candidate_creates_the_lease_and_renews_it() {
        let store = MemoryLease::default();
        let mut a = candidate(&store, "pod-a");
        assert!(leads(&mut a, 0));
        assert!(a.is_leader());
        let created = store.stored.borrow().clone().unwrap();
        assert_eq!(created.holder.as_deref(), Some("pod-a"));
        assert_eq!(created.lease_duration, LEASE);
        assert_eq!(created.acquire_time, Some(at(0)));
        assert_eq!(created.transitions, 0);

        assert!(leads(&mut a, 10));
        let renewed = store.stored.borrow().clone().unwrap();
        assert_eq!(renewed.renew_time, Some(at(10)));
        assert_eq!(
            renewed.acquire_time,
            Some(at(0)),
            "a renewal keeps acquireTime"
        );
        assert_eq!(renewed.transitions, 0);
        assert_ne!(renewed.resource_version, created.resource_version);
    }

    #[test]
    fn a_valid_lease_held_by_another_is_left_alone() {
        let (store, mut a, mut b) = a_holds();
        assert!(!leads(&mut b, 1));
        assert!(!b.is_leader());
        assert_eq!(b.holder(), Some("pod-a"));
        // a keeps renewing: b never sees the record unchanged for 30 s.
        for t in [20, 40, 60] {
            assert!(leads(&mut a, t));
            assert!(!leads(&mut b, t + 15));
        }
        assert_eq!(store.holder().as_deref(), Some("pod-a"));
    }

    #[test]
    fn an_expired_lease_is_taken_over() {
        let (store, mut a, mut b) = a_holds();
        // b first sees the record at 5 s; a stops renewing.
        assert!(!leads(&mut b, 5));
        assert!(!leads(&mut b, 34), "valid until 35 s by b's clock");
        assert!(leads(&mut b, 36));
        let taken = store.stored.borrow().clone().unwrap();
        assert_eq!(taken.holder.as_deref(), Some("pod-b"));
        assert_eq!(taken.acquire_time, Some(at(36)));
        assert_eq!(taken.transitions, 1);
        // a comes back: the lease is b's now and valid.
        assert!(!leads(&mut a, 37));
        assert!(!a.is_leader());
    }

    #[test]
    fn validity_is_judged_by_the_observers_clock_not_the_holders() {
        // The holder's clock is an hour behind: its renewTime looks long expired.
        let (_, _, mut b) = a_holds();
        assert!(!leads(&mut b, 3_600));
    }

    #[test]
    fn of_two_candidates_writing_at_once_the_one_with_a_stale_version_loses() {
        let (store, _a, mut b) = a_holds();
        assert!(!leads(&mut b, 1));
        // The lease expires; pod-c writes between b's read and b's update.
        *store.interleave.borrow_mut() = Some("pod-c".into());
        assert!(!leads(&mut b, 40));
        assert!(!b.is_leader());
        assert_eq!(store.holder().as_deref(), Some("pod-c"));
    }

    #[test]
    fn losing_the_race_to_create_is_not_an_error() {
        let (store, _a, mut b) = a_holds();
        // b read "no lease", then a created it: b's create conflicts.
        let mut late = candidate(&store, "pod-b");
        *store.stale_read.borrow_mut() = true;
        assert!(!leads(&mut late, 0));
        assert!(!leads(&mut b, 1));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let (store, mut a, mut b) = a_holds();
        assert!(!leads(&mut b, 1));
        block_on(a.release(at(2))).unwrap();
        assert!(!a.is_leader());
        assert_eq!(store.holder(), None);
        assert!(leads(&mut b, 3));
        assert_eq!(store.stored.borrow().as_ref().unwrap().transitions, 1);
    }

    #[test]
    fn a_candidate_that_lost_the_lease_cannot_release_it() {
        let (store, mut a, mut b) = a_holds();
        assert!(!leads(&mut b, 1));
        assert!(leads(&mut b, 40));
        // a still believes it leads; releasing must not clear b's lease.
        block_on(a.release(at(41))).unwrap();
        assert_eq!(store.holder().as_deref(), Some("pod-b"));
    }

    /// A Lease endpoint speaking the API server's protocol for one Lease:
    /// 404 before it exists, 409 AlreadyExists on a second create, 409
    /// Conflict on a replace with a stale resourceVersion.
    #[derive(Default)]
    struct LeaseApi {
        stored: Option<serde_json::Value>,
        version: u64,
        /// Someone else writes just before the next replace.
        interleave: bool,
    }

    const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/gpu-admission/leases";

    fn status(code: u16, reason: &str) -> (u16, serde_json::Value) {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": reason, "reason": reason, "code": code});
        (code, status)
    }

    impl LeaseApi {
        fn store(&mut self, mut object: serde_json::Value) -> serde_json::Value {
            self.version += 1;
            object["metadata"]["resourceVersion"] = self.version.to_string().into();
            object["metadata"]["namespace"] = "gpu-admission".into();
            self.stored = Some(object.clone());
            object
        }

        fn answer(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, serde_json::Value) {
            let named = format!("{PATH}/gpu-admission-report");
            match (method, path) {
                ("GET", p) if p == named => match &self.stored {
                    Some(object) => (200, object.clone()),
                    None => status(404, "NotFound"),
                },
                ("POST", PATH) if self.stored.is_some() => status(409, "AlreadyExists"),
                ("POST", PATH) => (201, self.store(serde_json::from_slice(body).unwrap())),
                ("PUT", p) if p == named => {
                    if std::mem::take(&mut self.interleave) {
                        let mut theirs = self.stored.clone().unwrap();
                        theirs["spec"]["holderIdentity"] = "pod-c".into();
                        self.store(theirs);
                    }
                    let object: serde_json::Value = serde_json::from_slice(body).unwrap();
                    let current = self
                        .stored
                        .as_ref()
                        .map(|s| s["metadata"]["resourceVersion"].clone());
                    if current != Some(object["metadata"]["resourceVersion"].clone()) {
                        return status(409, "Conflict");
                    }
                    (200, self.store(object))
                }
                _ => status(404, "NotFound"),
            }
        }
    }

    fn client(api: &Arc<std::sync::Mutex<LeaseApi>>) -> kube::Client {
        let api = api.clone();
        let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
            let api = api.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(axum::body::Body::new(body), 1 << 20)
                    .await
                    .unwrap();
                let (code, answer) =
                    api.lock()
                        .unwrap()
                        .answer(parts.method.as_str(), parts.uri.path(), &body);
                Ok::<_, std::convert::Infallible>(
                    axum::http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(axum::body::Body::from(answer.to_string()))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(service, "gpu-admission")
    }

    fn cluster_candidate(
        api: &Arc<std::sync::Mutex<LeaseApi>>,
        identity: &str,
    ) -> LeaderElector<ClusterLease> {
        LeaderElector::new(
            ClusterLease::new(client(api), "gpu-admission", "gpu-admission-report"),
            identity,
            LEASE,
        )
    }

    #[test]
    fn a_cluster_lease_is_created_renewed_taken_over_and_raced_over_the_api() {
        // The client starts a task of its own: made inside the runtime.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let api = Arc::new(std::sync::Mutex::new(LeaseApi::default()));
        runtime.block_on(async {
            let mut a = cluster_candidate(&api, "pod-a");
            let mut b = cluster_candidate(&api, "pod-b");
            assert!(a.try_acquire_or_renew(at(0)).await.unwrap());
            let lease = api.lock().unwrap().stored.clone().unwrap();
            assert_eq!(lease["apiVersion"], "coordination.k8s.io/v1");
            assert_eq!(lease["kind"], "Lease");
            assert_eq!(lease["spec"]["holderIdentity"], "pod-a");
            assert_eq!(lease["spec"]["leaseDurationSeconds"], 30);
            assert_eq!(lease["spec"]["leaseTransitions"], 0);
            assert_eq!(lease["spec"]["renewTime"], "2027-01-15T08:00:00.000000Z");
            assert!(a.try_acquire_or_renew(at(10)).await.unwrap());
            assert_eq!(
                api.lock().unwrap().stored.as_ref().unwrap()["spec"]["renewTime"],
                "2027-01-15T08:00:10.000000Z"
            );

            assert!(!b.try_acquire_or_renew(at(11)).await.unwrap());
            assert_eq!(b.holder(), Some("pod-a"));
            assert!(b.try_acquire_or_renew(at(42)).await.unwrap());
            let lease = api.lock().unwrap().stored.clone().unwrap();
            assert_eq!(lease["spec"]["holderIdentity"], "pod-b");
            assert_eq!(lease["spec"]["leaseTransitions"], 1);
            assert_eq!(lease["spec"]["acquireTime"], "2027-01-15T08:00:42.000000Z");

            // A renewal that races another writer gets a 409 and loses.
            api.lock().unwrap().interleave = true;
            assert!(!b.try_acquire_or_renew(at(50)).await.unwrap());
            assert!(!b.is_leader());
            let lease = api.lock().unwrap().stored.clone().unwrap();
            assert_eq!(lease["spec"]["holderIdentity"], "pod-c");

            // Releasing is a no-op for a candidate that does not hold it.
            b.release(at(51)).await.unwrap();
            assert_eq!(
                api.lock().unwrap().stored.as_ref().unwrap()["spec"]["holderIdentity"],
                "pod-c"
            );
        });
        // A create that loses the race is a follower, not an error.
        let fresh = Arc::new(std::sync::Mutex::new(LeaseApi::default()));
        runtime.block_on(async {
            let mut first = cluster_candidate(&fresh, "pod-a");
            assert!(first.try_acquire_or_renew(at(0)).await.unwrap());
            let late = ClusterLease::new(client(&fresh), "gpu-admission", "gpu-admission-report");
            let err = late
                .create(&LeaseRecord {
                    holder: Some("pod-b".into()),
                    ..LeaseRecord::default()
                })
                .await
                .unwrap_err();
            assert!(matches!(err, LeaseError::Conflict), "{err:?}");
        });
    }
}
