//! `gpu-admission certs`: the caBundle it prints is the CA, and the serving
//! certificate verifies against it for the names asked for. A served
//! certificate outside its validity period is refused, at start-up and on
//! reload, and the expiry gauge follows the certificate served.
use crate::common;

use base64::Engine as _;
use common::http::{client_config, Client};
use common::{config, TestServer};
use gpu_admission::server::ServeConfig;
use std::process::Command;
use std::sync::Arc;

fn certs_command(out: &std::path::Path, names: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpu-admission"));
    cmd.arg("certs").arg("--out").arg(out);
    for name in names {
        cmd.args(["--dns", name]);
    }
    cmd.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_bundle_and_serving_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let out = certs_command(
        dir.path(),
        &["gpu-admission.gpu-system.svc", "10.0.0.7", "localhost"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "only the caBundle on stdout");
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(stdout.trim())
        .unwrap();
    let ca = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
    assert_eq!(
        String::from_utf8(bundle).unwrap(),
        ca,
        "caBundle decodes to ca.crt"
    );
    for file in ["ca.key", "tls.crt", "tls.key"] {
        assert!(dir.path().join(file).is_file(), "{file}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "private key readable by owner only");
    }

    // Serve the pair and verify it over TLS against the caBundle only.
    let server = TestServer::start_with(
        ServeConfig {
            tls_cert: Some(dir.path().join("tls.crt")),
            tls_key: Some(dir.path().join("tls.key")),
            certs_dir: dir.path().to_path_buf(),
            ..config()
        },
        Arc::new(common::empty_admission()),
    )
    .await;
    let tls = client_config(&ca, &[b"http/1.1"]);
    for name in ["gpu-admission.gpu-system.svc", "10.0.0.7", "localhost"] {
        Client::connect(server.addr, tls.clone(), name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let err = Client::connect(server.addr, tls, "gpu-admission.default.svc").await;
    assert!(err.is_err(), "a name not asked for does not verify");
    server.stop().await;

    // A second run keeps the CA, so a registered caBundle stays valid.
    let again = certs_command(
        dir.path(),
        &["gpu-admission.gpu-system.svc", "10.0.0.7", "localhost"],
    );
    assert!(again.status.success());
    assert_eq!(String::from_utf8(again.stdout).unwrap(), stdout);
}

#[test]
fn bad_name_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = certs_command(dir.path(), &["not a name"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("not a name"), "{stderr}");
    assert!(!stderr.contains("Error {"), "no Debug output: {stderr}");
    assert!(!dir.path().join("ca.crt").exists(), "nothing written");
}

/// A self-signed pair for `localhost` valid between the two dates, written
/// as `tls.crt` and `tls.key` into `dir`.
fn write_pair(dir: &std::path::Path, from: (i32, u8, u8), to: (i32, u8, u8)) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
}

/// notAfter of the PEM certificate at `path`, in Unix seconds.
fn not_after_secs(path: &std::path::Path) -> i64 {
    use rustls::pki_types::pem::PemObject as _;
    let der = rustls::pki_types::CertificateDer::from_pem_file(path).unwrap();
    let at = gpu_admission::certs::not_after(&der).unwrap();
    at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

async fn expiry_gauge(server: &TestServer) -> i64 {
    let (_, text) = server.get_metrics_listener("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix("gpu_admission_certificate_expiry_seconds "))
        .unwrap_or_else(|| panic!("no expiry gauge in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

const REFUSED: &str = r#"gpu_admission_certificate_reloads_total{result="refused"}"#;
const RELOADED: &str = r#"gpu_admission_certificate_reloads_total{result="reloaded"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_certificate_is_not_reloaded_and_the_expiry_gauge_follows() {
    let server = TestServer::start(config()).await;
    let served = server.certs_dir.join("tls.crt");
    let first = not_after_secs(&served);
    assert_eq!(expiry_gauge(&server).await, first);
    let old = server.connect().await.peer_certificate();

    // An expired pair lands in the served files: once the reloader has
    // read and refused it, the old one is still served.
    let refused = server.metric(REFUSED).await;
    write_pair(&server.certs_dir, (2020, 1, 1), (2021, 1, 1));
    server.wait_for_metric_above(REFUSED, refused).await;
    assert_eq!(server.metric(RELOADED).await, 0.0);
    assert_eq!(server.connect().await.peer_certificate(), old);
    assert_eq!(expiry_gauge(&server).await, first);

    // A valid one is taken, and the gauge says when it ends.
    write_pair(&server.certs_dir, (2020, 1, 1), (2090, 1, 1));
    let expected = not_after_secs(&served);
    server.wait_for_metric_above(RELOADED, 0.0).await;
    assert_eq!(expiry_gauge(&server).await, expected);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_stops_start_up_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    write_pair(dir.path(), (2020, 1, 1), (2021, 1, 1));
    let result = gpu_admission::server::Server::bind(
        ServeConfig {
            tls_cert: Some(dir.path().join("tls.crt")),
            tls_key: Some(dir.path().join("tls.key")),
            ..config()
        },
        Arc::new(common::empty_admission()),
        gpu_admission::server::Metrics::new(),
        gpu_admission::server::ShutdownHandle::new(),
    )
    .await;
    let err = result.err().expect("an expired certificate is refused");
    let text = format!("{err:#}");
    assert!(text.contains("tls.crt"), "{text}");
    assert!(text.contains("expired at 2021-01-01T00:00:00Z"), "{text}");
}
