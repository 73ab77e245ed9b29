//! `serve --manage-certs` against the fake API server: two replicas share
//! one Secret and one Lease; the elected one creates the certificates,
//! renews them, rotates the CA and keeps the caBundle of the shipped
//! webhook configurations. Meanwhile an apiserver-like client sends
//! AdmissionReviews to both replicas over new TLS connections, trusting
//! only what the webhook configuration's caBundle said a moment before
//! (the apiserver learns of changes through a watch), and counts what it
//! sent and what failed: nothing may fail.
use crate::common;

use base64::Engine as _;
use common::fake_apiserver::{wait_until, FakeApiServer, Resource};
use common::http::{client_config, Client};
use gpu_admission::cluster::certs::{Lifetimes, ManagedCerts, Options, Settings};
use gpu_admission::server::{Metrics, Readiness, Server, ShutdownHandle};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRETS: Resource = Resource::new("", "v1", "Secret", "secrets", true);
const LEASES: Resource = Resource::new("coordination.k8s.io", "v1", "Lease", "leases", true);
const MUTATING: Resource = Resource::new(
    "admissionregistration.k8s.io",
    "v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    false,
);
const VALIDATING: Resource = Resource::new(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
    false,
);
const NAMESPACE: &str = "gpu-admission";
const SECRET: &str = "gpu-admission-certs";
/// The name the apiserver dials: the Service's.
const SERVICE_NAME: &str = "gpu-admission.gpu-admission.svc";

/// A webhook configuration as shipped in deploy/base (no caBundle).
fn shipped(file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/base")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut object: Value = serde_yaml::from_str(&text).unwrap();
    // kustomize sets the namespace of the Service reference.
    for webhook in object["webhooks"].as_array_mut().unwrap() {
        webhook["clientConfig"]["service"]["namespace"] = NAMESPACE.into();
    }
    object
}

async fn cluster() -> FakeApiServer {
    let fake = FakeApiServer::start(vec![SECRETS, LEASES, MUTATING, VALIDATING]).await;
    fake.change(|c| {
        c.apply(shipped("mutating-webhook.yaml"));
        c.apply(shipped("validating-webhook.yaml"));
    });
    fake
}

fn settings(identity: &str, lifetimes: Lifetimes) -> Settings {
    Settings {
        options: Options {
            secret: SECRET.to_string(),
            lease: Some("gpu-admission-certs".to_string()),
            mutating_webhook: Some("gpu-admission".to_string()),
            validating_webhook: Some("gpu-admission".to_string()),
            service: "gpu-admission".to_string(),
            lifetimes,
            check_interval: Duration::from_millis(100),
        },
        namespace: NAMESPACE.to_string(),
        identity: identity.to_string(),
        names: Settings::service_names("gpu-admission", NAMESPACE),
    }
}

fn year() -> Lifetimes {
    Lifetimes {
        ca: Duration::from_secs(3 * 365 * 86_400),
        serving: Duration::from_secs(365 * 86_400),
        overlap: Duration::from_secs(600),
    }
}

/// One replica: its certificate manager and its server.
struct Replica {
    identity: String,
    addr: SocketAddr,
    certs: ManagedCerts,
    shutdown: ShutdownHandle,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Replica {
    async fn start(fake: &FakeApiServer, identity: &str, lifetimes: Lifetimes) -> Replica {
        let certs = ManagedCerts::start(fake.client(), settings(identity, lifetimes))
            .await
            .expect("a serving certificate");
        let shutdown = ShutdownHandle::new();
        let server = Server::bind_with_feed(
            common::config(),
            Arc::new(common::empty_admission()),
            Metrics::new(),
            shutdown.clone(),
            Readiness::ready(),
            certs.serving(),
        )
        .await
        .expect("server binds");
        let addr = server.local_addr();
        let task = tokio::spawn(server.run());
        Replica {
            identity: identity.to_string(),
            addr,
            certs,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("server stops")
            .unwrap()
            .unwrap();
        self.certs.stop().await;
    }
}

/// Starts two replicas at once, as a Deployment's rollout does.
async fn two_replicas(fake: &FakeApiServer, lifetimes: Lifetimes) -> Vec<Replica> {
    let (a, b) = tokio::join!(
        Replica::start(fake, "gpu-admission-a", lifetimes),
        Replica::start(fake, "gpu-admission-b", lifetimes)
    );
    vec![a, b]
}

/// The caBundle of webhook `index` of the configuration `resource`, PEM.
fn ca_bundle(fake: &FakeApiServer, resource: &Resource, index: usize) -> String {
    let object = fake
        .read(|c| c.object(resource, "", "gpu-admission"))
        .expect("the configuration");
    let bundle = object["webhooks"][index]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap_or("");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .unwrap(),
    )
    .unwrap()
}

/// Every caBundle of both configurations, PEM.
fn all_bundles(fake: &FakeApiServer) -> Vec<String> {
    let mut out = Vec::new();
    for resource in [&MUTATING, &VALIDATING] {
        let count = fake
            .read(|c| c.object(resource, "", "gpu-admission"))
            .unwrap()["webhooks"]
            .as_array()
            .unwrap()
            .len();
        for i in 0..count {
            out.push(ca_bundle(fake, resource, i));
        }
    }
    out
}

/// The Secret's data, decoded; empty when it does not exist.
fn secret(fake: &FakeApiServer) -> (Option<String>, std::collections::BTreeMap<String, String>) {
    let Some(object) = fake.read(|c| c.object(&SECRETS, NAMESPACE, SECRET)) else {
        return (None, Default::default());
    };
    let data = object["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap();
            (k.clone(), String::from_utf8(bytes).unwrap())
        })
        .collect();
    (object["metadata"]["uid"].as_str().map(str::to_string), data)
}

/// What the apiserver-like client did.
#[derive(Default)]
struct Counts {
    sent: AtomicUsize,
    failed: AtomicUsize,
    /// Not sent: the caBundle was empty (the apiserver would have failed
    /// the call too; that is an outage of the configuration, not of TLS).
    unsent: AtomicUsize,
    failures: Mutex<Vec<String>>,
    /// Leaf certificates seen, in order of first sight.
    leaves: Mutex<Vec<Vec<u8>>>,
}

impl Counts {
    fn report(&self, test: &str) -> (usize, usize) {
        let sent = self.sent.load(Ordering::SeqCst);
        let failed = self.failed.load(Ordering::SeqCst);
        let unsent = self.unsent.load(Ordering::SeqCst);
        println!("{test}: {sent} requests sent, {failed} failed, {unsent} not sent while caBundle was empty");
        (sent, failed)
    }
}

/// How far behind the webhook configurations the client's trust runs: the
/// apiserver learns of a new caBundle through a watch, not at once. A
/// rotation step shorter than this would fail requests.
const TRUST_LAG: Duration = Duration::from_secs(1);

/// The apiserver-like client: alternates /mutate and /validate between
/// the replicas, each request on a new TLS connection trusting the
/// caBundle of its webhook as it was [`TRUST_LAG`] ago.
struct Apiserver {
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Apiserver {
    fn start(fake: &Arc<FakeApiServer>, replicas: &[SocketAddr]) -> Apiserver {
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (fake, replicas, counts, stop) = (
                fake.clone(),
                replicas.to_vec(),
                counts.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let review = common::fixture("pod-create-gpu.json");
                let mut seen = [TrustHistory::default(), TrustHistory::default()];
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let (path, resource, history) = if n.is_multiple_of(2) {
                        ("/mutate", &MUTATING, &mut seen[0])
                    } else {
                        ("/validate", &VALIDATING, &mut seen[1])
                    };
                    let trusted = history.trusted(ca_bundle(&fake, resource, 0));
                    if trusted.is_empty() {
                        counts.unsent.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    let addr = replicas[n % replicas.len()];
                    counts.sent.fetch_add(1, Ordering::SeqCst);
                    let mut review = review.clone();
                    let uid = format!("req-{n}");
                    review["request"]["uid"] = uid.clone().into();
                    if let Err(why) = call(addr, &trusted, path, &review, &uid, &counts).await {
                        counts.failed.fetch_add(1, Ordering::SeqCst);
                        counts
                            .failures
                            .lock()
                            .unwrap()
                            .push(format!("{path} to {addr}: {why}"));
                    }
                }
            })
        };
        Apiserver { counts, stop, task }
    }

    /// Waits until `more` requests beyond those sent so far were sent.
    async fn wait_for_more(&self, more: usize) {
        let floor = self.counts.sent.load(Ordering::SeqCst) + more;
        wait_until("requests sent", || {
            self.counts.sent.load(Ordering::SeqCst) >= floor
        })
        .await;
    }

    /// Stops, prints the counts and asserts that none failed.
    async fn finish(self, test: &str) -> Arc<Counts> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        let (sent, failed) = self.counts.report(test);
        assert!(sent > 0, "{test}: nothing sent");
        assert_eq!(
            failed,
            0,
            "{test}: failures: {:?}",
            self.counts.failures.lock().unwrap()
        );
        self.counts
    }
}

/// The caBundles a webhook had, and when each was first seen.
#[derive(Default)]
struct TrustHistory(std::collections::VecDeque<(tokio::time::Instant, String)>);

impl TrustHistory {
    /// Records `now_bundle` and returns the bundle in force [`TRUST_LAG`]
    /// ago (the first one seen, at the start).
    fn trusted(&mut self, now_bundle: String) -> String {
        let now = tokio::time::Instant::now();
        if self.0.back().is_none_or(|(_, b)| *b != now_bundle) {
            self.0.push_back((now, now_bundle));
        }
        while self.0.len() > 1 && self.0[1].0 + TRUST_LAG <= now {
            self.0.pop_front();
        }
        self.0[0].1.clone()
    }
}

async fn call(
    addr: SocketAddr,
    trusted: &str,
    path: &str,
    review: &Value,
    uid: &str,
    counts: &Counts,
) -> Result<(), String> {
    let tls = client_config(trusted, &[b"http/1.1"]);
    let mut client = Client::connect(addr, tls, SERVICE_NAME)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let leaf = client.peer_certificate();
    {
        let mut leaves = counts.leaves.lock().unwrap();
        if !leaves.contains(&leaf) {
            leaves.push(leaf);
        }
    }
    let response = client
        .request("POST", path, &serde_json::to_vec(review).unwrap())
        .await
        .map_err(|e| format!("request: {e}"))?;
    if response.status != 200 {
        return Err(format!("HTTP {}: {}", response.status, response.text()));
    }
    let body: Value = serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    if body["response"]["uid"] != uid {
        return Err(format!("answer for another uid: {body}"));
    }
    Ok(())
}

/// The certificate the replica at `addr` serves now, verified against
/// `trusted` alone.
async fn served_leaf(addr: SocketAddr, trusted: &str) -> Result<Vec<u8>, String> {
    Client::connect(addr, client_config(trusted, &[b"http/1.1"]), SERVICE_NAME)
        .await
        .map(|c| c.peer_certificate())
        .map_err(|e| e.to_string())
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_install_creates_one_secret_and_fills_every_ca_bundle() {
    let fake = Arc::new(cluster().await);
    let replicas = two_replicas(&fake, year()).await;
    let (_, data) = secret(&fake);
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(data.contains_key(key), "{key} in {:?}", data.keys());
    }
    assert!(!data.contains_key("next-ca.crt") && !data.contains_key("previous-ca.crt"));
    wait_until("caBundle in every webhook", || {
        all_bundles(&fake).iter().all(|b| *b == data["ca.crt"])
    })
    .await;
    let bundles = all_bundles(&fake);
    let shipped_webhooks = ["mutating-webhook.yaml", "validating-webhook.yaml"]
        .map(|f| shipped(f)["webhooks"].as_array().unwrap().len());
    assert_eq!(
        bundles.len(),
        shipped_webhooks.iter().sum::<usize>(),
        "every webhook"
    );
    // One holder of the Lease; one Secret create, whoever won.
    let lease = fake
        .read(|c| c.object(&LEASES, NAMESPACE, "gpu-admission-certs"))
        .unwrap();
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        holder == "gpu-admission-a" || holder == "gpu-admission-b",
        "{holder}"
    );
    let creates = fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/secrets") && r.status == 201)
        .count();
    assert_eq!(creates, 1);
    // Both replicas serve the Secret's certificate.
    for replica in &replicas {
        let leaf = served_leaf(replica.addr, &data["ca.crt"]).await.unwrap();
        assert_eq!(leaf, pem_to_der(&data["tls.crt"]));
    }
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let apiserver = Apiserver::start(&fake, &addrs);
    apiserver.wait_for_more(40).await;
    apiserver.finish("first install").await;
    // Nothing but the project's own configurations, Secret and Lease was written.
    for request in fake.requests().iter().filter(|r| r.method != "GET") {
        let allowed = [
            format!("/api/v1/namespaces/{NAMESPACE}/secrets"),
            format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"),
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpu-admission"
                .to_string(),
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-admission"
                .to_string(),
        ];
        assert!(
            allowed.iter().any(|p| request.path.starts_with(p.as_str())),
            "{} {}",
            request.method,
            request.path
        );
    }
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serving_certificate_is_renewed_before_expiry_without_a_failed_request() {
    let fake = Arc::new(cluster().await);
    let lifetimes = Lifetimes {
        ca: Duration::from_secs(3600),
        serving: Duration::from_secs(6),
        overlap: Duration::from_secs(60),
    };
    let replicas = two_replicas(&fake, lifetimes).await;
    let (_, first) = secret(&fake);
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let apiserver = Apiserver::start(&fake, &addrs);
    // Two renewals: the serving certificate changes, the CA does not.
    let mut seen = vec![first["tls.crt"].clone()];
    wait_until("two renewals of the serving certificate", || {
        let (_, data) = secret(&fake);
        if let Some(cert) = data.get("tls.crt") {
            assert_eq!(data["ca.crt"], first["ca.crt"], "the CA stays");
            if !seen.contains(cert) {
                seen.push(cert.clone());
            }
        }
        seen.len() >= 3
    })
    .await;
    // Every replica picks the renewed certificate up from the Secret
    // (which may renew again meanwhile: compared with it as it is).
    for replica in &replicas {
        let mut caught_up = false;
        for _ in 0..300 {
            let (_, now) = secret(&fake);
            let served = served_leaf(replica.addr, &now["ca.crt"]).await.unwrap();
            if served == pem_to_der(&now["tls.crt"]) {
                caught_up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            caught_up,
            "{} serves the Secret's certificate",
            replica.addr
        );
    }
    apiserver.wait_for_more(20).await;
    let counts = apiserver.finish("renewal").await;
    assert!(
        counts.leaves.lock().unwrap().len() >= 2,
        "the client saw the renewal"
    );
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_rotates_with_an_overlap_and_no_request_fails() {
    let fake = Arc::new(cluster().await);
    // A rotation is staged 10 s in, promoted 3 s later and finished 3 s
    // after that; serving certificates renew every few seconds meanwhile.
    let lifetimes = Lifetimes {
        ca: Duration::from_secs(15),
        serving: Duration::from_secs(5),
        overlap: Duration::from_secs(3),
    };
    let replicas = two_replicas(&fake, lifetimes).await;
    let (_, first) = secret(&fake);
    let old_ca = first["ca.crt"].clone();
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let apiserver = Apiserver::start(&fake, &addrs);
    let mut saw_both_trusted = false;
    let mut new_ca = String::new();
    wait_until("a finished CA rotation", || {
        let (_, data) = secret(&fake);
        let bundle = ca_bundle(&fake, &VALIDATING, 0);
        if bundle.matches("BEGIN CERTIFICATE").count() == 2 && bundle.contains(&old_ca) {
            saw_both_trusted = true;
        }
        match data.get("ca.crt") {
            Some(ca)
                if *ca != old_ca
                    && !data.contains_key("previous-ca.crt")
                    && !data.contains_key("next-ca.crt")
                    && all_bundles(&fake).iter().all(|b| b == ca) =>
            {
                new_ca = ca.clone();
                true
            }
            _ => false,
        }
    })
    .await;
    assert!(
        saw_both_trusted,
        "both CAs were trusted during the rotation"
    );
    // Both replicas now serve certificates of the new CA alone.
    for replica in &replicas {
        served_leaf(replica.addr, &new_ca)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", replica.addr));
    }
    apiserver.wait_for_more(20).await;
    apiserver.finish("CA rotation").await;
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_bundle_emptied_by_an_apply_is_restored() {
    let fake = Arc::new(cluster().await);
    let replicas = two_replicas(&fake, year()).await;
    let (_, data) = secret(&fake);
    wait_until("caBundle in every webhook", || {
        all_bundles(&fake).iter().all(|b| *b == data["ca.crt"])
    })
    .await;
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let apiserver = Apiserver::start(&fake, &addrs);
    apiserver.wait_for_more(10).await;
    // `kubectl apply` of the shipped manifests, which carry no caBundle.
    let reset_at = fake.change(|c| {
        c.apply(shipped("mutating-webhook.yaml"));
        c.apply(shipped("validating-webhook.yaml"))
    });
    wait_until("caBundle restored", || {
        let configuration = fake
            .read(|c| c.object(&VALIDATING, "", "gpu-admission"))
            .unwrap();
        let version: u64 = configuration["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        version > reset_at && all_bundles(&fake).iter().all(|b| *b == data["ca.crt"])
    })
    .await;
    apiserver.wait_for_more(10).await;
    apiserver.finish("caBundle reset").await;
    let (_, after) = secret(&fake);
    assert_eq!(after, data, "the Secret is untouched");
    for replica in replicas {
        replica.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_secret_is_recreated_with_the_same_ca() {
    let fake = Arc::new(cluster().await);
    let replicas = two_replicas(&fake, year()).await;
    let (uid, data) = secret(&fake);
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    let apiserver = Apiserver::start(&fake, &addrs);
    apiserver.wait_for_more(10).await;
    fake.change(|c| c.delete(&SECRETS, NAMESPACE, SECRET));
    wait_until("the Secret recreated", || {
        let (new_uid, _) = secret(&fake);
        new_uid.is_some() && new_uid != uid
    })
    .await;
    let (_, again) = secret(&fake);
    assert_eq!(again["ca.crt"], data["ca.crt"], "the CA caBundle trusts");
    assert_eq!(again["tls.crt"], data["tls.crt"]);
    apiserver.wait_for_more(10).await;
    apiserver.finish("Secret deleted").await;
    for replica in replicas {
        replica.stop().await;
    }
}

/// Who holds the certificate Lease.
fn lease_holder(fake: &FakeApiServer) -> Option<String> {
    fake.read(|c| c.object(&LEASES, NAMESPACE, "gpu-admission-certs"))
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_elected_replica_stops_the_other_takes_over_and_renews() {
    let fake = Arc::new(cluster().await);
    let lifetimes = Lifetimes {
        ca: Duration::from_secs(3600),
        serving: Duration::from_secs(6),
        overlap: Duration::from_secs(60),
    };
    let mut replicas = two_replicas(&fake, lifetimes).await;
    let leader = lease_holder(&fake).expect("a holder");
    let index = replicas.iter().position(|r| r.identity == leader).unwrap();
    replicas.remove(index).stop().await;
    let survivor = replicas.pop().unwrap();
    // Stopping released the Lease: the survivor takes it at its next check.
    wait_until("the survivor holds the Lease", || {
        lease_holder(&fake).as_deref() == Some(survivor.identity.as_str())
    })
    .await;
    let apiserver = Apiserver::start(&fake, &[survivor.addr]);
    let (_, before) = secret(&fake);
    wait_until("a renewal by the survivor", || {
        secret(&fake)
            .1
            .get("tls.crt")
            .is_some_and(|c| *c != before["tls.crt"])
    })
    .await;
    let (_, after) = secret(&fake);
    assert_eq!(after["ca.crt"], before["ca.crt"]);
    apiserver.wait_for_more(20).await;
    apiserver.finish("leader stopped").await;
    survivor.stop().await;
}

/// The binary as the overlay runs it: `serve --manage-certs` with the pod's
/// name and namespace from the environment. It makes the Secret, fills
/// caBundle, answers over TLS with the Secret's certificate, and on SIGTERM
/// exits cleanly and releases the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_manage_certs_runs_from_the_command_line() {
    use std::io::BufRead as _;
    let fake = Arc::new(cluster().await);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(dir.path());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["serve", "--manage-certs", "--cert-check-interval", "200ms"])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--health-listen",
            "off",
        ])
        .args(["--log-format", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("POD_NAMESPACE", NAMESPACE)
        .env("POD_NAME", "gpu-admission-7d9f-x2x4q")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Keeps draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let entry: Value = serde_json::from_str(&line).unwrap_or_default();
            if let Some(addr) = entry["fields"]["addr"].as_str() {
                let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
            }
        }
    });
    let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("serve logs its address");
    let (_, data) = secret(&fake);
    wait_until("caBundle in every webhook", || {
        all_bundles(&fake).iter().all(|b| *b == data["ca.crt"])
    })
    .await;
    assert_eq!(
        lease_holder(&fake).as_deref(),
        Some("gpu-admission-7d9f-x2x4q")
    );
    let apiserver = Apiserver::start(&fake, &[addr]);
    apiserver.wait_for_more(10).await;
    apiserver.finish("serve --manage-certs").await;

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut exited = None;
    for _ in 0..300 {
        exited = child.try_wait().unwrap();
        if exited.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(status) = exited else {
        child.kill().unwrap();
        panic!("serve did not exit within 30 s of SIGTERM");
    };
    assert!(status.success(), "{status}");
    assert_eq!(lease_holder(&fake), None, "the Lease is released");
}
