//! `gpu-admission certs`: the caBundle it prints is the CA, and the serving
//! certificate verifies against it for the names asked for.
mod common;

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
