//! Serving certificate reload: rewritten files and a Secret volume's
//! `..data` symlink swap are picked up with no restart and no failed request.
use crate::common;

use common::http::client_config;
use common::{config, fixture, TestServer};
use gpu_admission::certs;
use gpu_admission::server::ServeConfig;
use rustls::pki_types::pem::PemObject as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn names(extra: &[&str]) -> Vec<String> {
    certs::DEFAULT_NAMES
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

async fn served_cert(server: &TestServer) -> Vec<u8> {
    server.connect().await.peer_certificate()
}

/// Waits until the server presents a certificate other than `old`.
async fn wait_for_new_cert(server: &TestServer, old: &[u8]) -> Vec<u8> {
    for _ in 0..100 {
        let now = served_cert(server).await;
        if now != old {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the new certificate was never served");
}

/// Requests in a loop on fresh connections (new handshakes) and on one
/// keep-alive connection until stopped; counts successes and failures.
struct Traffic {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Traffic {
    fn start(server: &Arc<TestServer>) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let body = serde_json::to_vec(&fixture("pod-create-gpu.json")).unwrap();
        let mut tasks = Vec::new();
        for keep_alive in [false, true] {
            let (server, stop, ok, failed, body) = (
                server.clone(),
                stop.clone(),
                ok.clone(),
                failed.clone(),
                body.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut client = None;
                while !stop.load(Ordering::SeqCst) {
                    if client.is_none() || !keep_alive {
                        client = server.try_connect().await.ok();
                    }
                    let result = match client.as_mut() {
                        Some(c) => c.request("POST", "/validate", &body).await.ok(),
                        None => None,
                    };
                    match result {
                        Some(r) if r.status == 200 => ok.fetch_add(1, Ordering::SeqCst),
                        _ => {
                            client = None;
                            failed.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                }
            }));
        }
        Traffic {
            stop,
            ok,
            failed,
            tasks,
        }
    }

    /// Waits (at most 30 s) until `n` more requests have succeeded.
    async fn wait_for_more(&self, n: usize) {
        let target = self.ok.load(Ordering::SeqCst) + n;
        for _ in 0..300 {
            if self.ok.load(Ordering::SeqCst) >= target {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("fewer than {n} requests succeeded in 30 s");
    }

    async fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.unwrap();
        }
        (
            self.ok.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewritten_certificate_files_are_served_without_restart() {
    let server = Arc::new(TestServer::start(config()).await);
    let old = served_cert(&server).await;
    let traffic = Traffic::start(&server);
    traffic.wait_for_more(5).await;

    // Issue a certificate with one more name into the files being served.
    let ensured = certs::ensure(&server.certs_dir, &names(&["reload.example"])).unwrap();
    assert!(ensured.issued_cert && !ensured.created_ca);
    wait_for_new_cert(&server, &old).await;
    // Requests keep succeeding once the new certificate is served.
    traffic.wait_for_more(5).await;

    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} failed requests of {}", ok + failed);
    assert!(ok > 10, "only {ok} requests ran");
    // The new certificate covers the new name.
    let tls = client_config(&server.ca_pem, &[b"http/1.1"]);
    let client = common::http::Client::connect(server.addr, tls, "reload.example").await;
    assert!(
        client.is_ok(),
        "new certificate verifies for reload.example"
    );
}

fn symlink(target: &str, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Lays out a directory the way the kubelet mounts a Secret.
fn secret_volume(dir: &Path, version: &str, from: &Path) {
    let data = dir.join(version);
    std::fs::create_dir_all(&data).unwrap();
    for file in ["tls.crt", "tls.key"] {
        std::fs::copy(from.join(file), data.join(file)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_volume_data_symlink_swap_is_picked_up() {
    let tmp = tempfile::tempdir().unwrap();
    let issue = tmp.path().join("issue");
    let volume = tmp.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    certs::ensure(&issue, &names(&[])).unwrap();
    secret_volume(&volume, "..2026_11_29_10_00_00.1", &issue);
    symlink("..2026_11_29_10_00_00.1", &volume.join("..data"));
    symlink("..data/tls.crt", &volume.join("tls.crt"));
    symlink("..data/tls.key", &volume.join("tls.key"));

    let server = Arc::new(
        TestServer::start_with(
            ServeConfig {
                tls_cert: Some(volume.join("tls.crt")),
                tls_key: Some(volume.join("tls.key")),
                certs_dir: issue.clone(),
                ..config()
            },
            Arc::new(common::empty_admission()),
        )
        .await,
    );
    let old = served_cert(&server).await;
    let traffic = Traffic::start(&server);
    traffic.wait_for_more(5).await;

    // The kubelet's swap: new timestamped dir, `..data_tmp` link renamed
    // over `..data`, old dir removed. tls.crt itself is never written.
    certs::ensure(&issue, &names(&["rotated.example"])).unwrap();
    secret_volume(&volume, "..2026_11_29_11_00_00.2", &issue);
    symlink("..2026_11_29_11_00_00.2", &volume.join("..data_tmp"));
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).unwrap();
    std::fs::remove_dir_all(volume.join("..2026_11_29_10_00_00.1")).unwrap();

    wait_for_new_cert(&server, &old).await;
    // Requests keep succeeding once the new certificate is served.
    traffic.wait_for_more(5).await;
    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} failed requests of {}", ok + failed);
    assert!(ok > 10, "only {ok} requests ran");
}

const REFUSED: &str = r#"gpu_admission_certificate_reloads_total{result="refused"}"#;
const RELOADED: &str = r#"gpu_admission_certificate_reloads_total{result="reloaded"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_written_pair_keeps_the_current_certificate() {
    let server = TestServer::start(config()).await;
    let old = served_cert(&server).await;
    let cert_path = server.certs_dir.join("tls.crt");
    let key_path = server.certs_dir.join("tls.key");

    // A new certificate whose key has not arrived yet: once the reloader
    // has read and refused it, the old one is still served.
    let refused = server.metric(REFUSED).await;
    let staging = tempfile::tempdir().unwrap();
    certs::ensure(staging.path(), &names(&[])).unwrap();
    std::fs::copy(staging.path().join("tls.crt"), &cert_path).unwrap();
    let refused = server.wait_for_metric_above(REFUSED, refused).await;
    assert_eq!(served_cert(&server).await, old, "mismatched pair not used");

    // A truncated certificate file.
    std::fs::write(&cert_path, "-----BEGIN CERTIFICATE-----\nMIIB").unwrap();
    server.wait_for_metric_above(REFUSED, refused).await;
    assert_eq!(served_cert(&server).await, old);
    let (status, _) = server.get("/healthz").await;
    assert_eq!(status, axum::http::StatusCode::OK);
    assert_eq!(server.metric(RELOADED).await, 0.0);

    // Once both halves are there, the pair is served. (Its CA is the
    // staging one, so trust it by checking the raw certificate bytes.)
    std::fs::copy(staging.path().join("tls.key"), &key_path).unwrap();
    std::fs::copy(staging.path().join("tls.crt"), &cert_path).unwrap();
    let staged_pem = std::fs::read(staging.path().join("tls.crt")).unwrap();
    let staged = rustls::pki_types::CertificateDer::pem_slice_iter(&staged_pem)
        .next()
        .unwrap()
        .unwrap()
        .to_vec();
    server.wait_for_metric_above(RELOADED, 0.0).await;
    let tls = client_config(
        &std::fs::read_to_string(staging.path().join("ca.crt")).unwrap(),
        &[b"http/1.1"],
    );
    let client = common::http::Client::connect(server.addr, tls, "localhost")
        .await
        .expect("the staged pair is served");
    assert_eq!(client.peer_certificate(), staged);
}
