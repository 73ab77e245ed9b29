//! TLS for the webhook: rustls (TLS 1.2 and 1.3, ring), a certificate
//! resolver whose key can be swapped while serving, and a watcher that
//! re-reads the certificate and key when their files change, including a
//! Kubernetes Secret volume's `..data` symlink swap.
use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher as _};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Why a certificate and key pair could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CertLoadError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: PathBuf },
    #[error("{path}: not a PEM certificate chain: {message}")]
    BadCertificate { path: PathBuf, message: String },
    #[error("{path}: no usable private key (PKCS#8, RSA or SEC1 PEM expected): {message}")]
    BadKey { path: PathBuf, message: String },
    #[error("certificate {cert} does not match key {key}: {message}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
}

/// The ring provider, the only one this crate builds with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads a PEM certificate chain (leaf first) and its private key.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, CertLoadError> {
    let cert_pem = std::fs::read(cert).map_err(|error| CertLoadError::Read {
        path: cert.to_path_buf(),
        error,
    })?;
    let key_pem = std::fs::read(key).map_err(|error| CertLoadError::Read {
        path: key.to_path_buf(),
        error,
    })?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| CertLoadError::BadCertificate {
            path: cert.to_path_buf(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(CertLoadError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let private_key =
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| CertLoadError::BadKey {
            path: key.to_path_buf(),
            message: e.to_string(),
        })?;
    let signing_key = provider()
        .key_provider
        .load_private_key(private_key)
        .map_err(|e| CertLoadError::BadKey {
            path: key.to_path_buf(),
            message: e.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    certified
        .keys_match()
        .map_err(|e| CertLoadError::Mismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok(certified)
}

/// Serves whatever certificate is current; [`CertResolver::set`] swaps it
/// for new handshakes without touching open connections.
#[derive(Debug)]
pub struct CertResolver {
    current: ArcSwap<CertifiedKey>,
}

impl CertResolver {
    pub fn new(key: CertifiedKey) -> CertResolver {
        CertResolver {
            current: ArcSwap::from_pointee(key),
        }
    }

    pub fn set(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A rustls server configuration over `resolver`, offering h2 and HTTP/1.1.
pub fn server_config(resolver: Arc<CertResolver>) -> anyhow::Result<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Re-reads the certificate and key into a resolver when their files
/// change. Dropping it stops watching.
pub struct CertReloader {
    _watcher: Option<notify::RecommendedWatcher>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CertReloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long to let a burst of file events settle before re-reading.
const SETTLE: Duration = Duration::from_millis(100);
/// Re-read this often even without events (missed events, odd mounts).
const POLL: Duration = Duration::from_secs(30);

impl CertReloader {
    /// Watches the directories holding `cert` and `key`. Must be called
    /// inside a Tokio runtime.
    pub fn spawn(resolver: Arc<CertResolver>, cert: PathBuf, key: PathBuf) -> CertReloader {
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = watch_dirs(&[&cert, &key], tx);
        let task = tokio::spawn(reload_loop(resolver, cert, key, rx));
        CertReloader {
            _watcher: watcher,
            task,
        }
    }
}

fn watch_dirs(
    files: &[&Path],
    tx: mpsc::UnboundedSender<()>,
) -> Option<notify::RecommendedWatcher> {
    let mut watcher =
        match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok() {
                let _ = tx.send(());
            }
        }) {
            Ok(w) => w,
            Err(err) => {
                tracing::warn!("cannot watch certificate files, re-reading every {POLL:?}: {err}");
                return None;
            }
        };
    let mut dirs: Vec<PathBuf> = files
        .iter()
        .map(|f| match f.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect();
    dirs.dedup();
    // The directory, not the file: a Secret volume swaps the `..data`
    // symlink next to the file and never writes the file itself.
    for dir in dirs {
        if let Err(err) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
            tracing::warn!(
                "cannot watch {}, re-reading every {POLL:?}: {err}",
                dir.display()
            );
        }
    }
    Some(watcher)
}

async fn reload_loop(
    resolver: Arc<CertResolver>,
    cert: PathBuf,
    key: PathBuf,
    events: mpsc::UnboundedReceiver<()>,
) {
    let mut poll = tokio::time::interval(POLL);
    poll.tick().await;
    let mut last_error: Option<String> = None;
    // None once the watcher is gone (or never started): polling only.
    let mut events = Some(events);
    loop {
        let event = async {
            match events.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = event => {
                match event {
                    Some(()) => {
                        tokio::time::sleep(SETTLE).await;
                        if let Some(rx) = events.as_mut() {
                            while rx.try_recv().is_ok() {}
                        }
                    }
                    None => {
                        events = None;
                        continue;
                    }
                }
            }
            _ = poll.tick() => {}
        }
        let (c, k) = (cert.clone(), key.clone());
        let loaded = tokio::task::spawn_blocking(move || load_certified_key(&c, &k)).await;
        match loaded {
            Ok(Ok(new)) => {
                last_error = None;
                if new.cert != resolver.current().cert {
                    resolver.set(new);
                    tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                }
            }
            Ok(Err(err)) => {
                let message = err.to_string();
                if last_error.as_deref() != Some(message.as_str()) {
                    tracing::warn!("keeping the current serving certificate: {message}");
                    last_error = Some(message);
                }
            }
            Err(err) => tracing::error!("certificate reload task failed: {err}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    fn write_pair(dir: &Path, key: &KeyPair) -> (PathBuf, PathBuf) {
        let cert = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(key)
            .unwrap();
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn loads_ecdsa_pkcs8() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), &KeyPair::generate().unwrap());
        let loaded = load_certified_key(&c, &k).unwrap();
        assert_eq!(loaded.cert.len(), 1);
    }

    #[test]
    fn loads_sec1_ec_key() {
        // openssl's `ecparam -genkey` output: "BEGIN EC PRIVATE KEY".
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("tls.crt");
        let k = dir.path().join("tls.key");
        std::fs::write(&c, include_str!("testdata/ec-sec1.crt")).unwrap();
        std::fs::write(&k, include_str!("testdata/ec-sec1.key")).unwrap();
        load_certified_key(&c, &k).unwrap();
    }

    #[test]
    fn loads_rsa_pkcs1_key_and_chain() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("tls.crt");
        let k = dir.path().join("tls.key");
        std::fs::write(&c, include_str!("testdata/rsa-chain.crt")).unwrap();
        std::fs::write(&k, include_str!("testdata/rsa-pkcs1.key")).unwrap();
        let loaded = load_certified_key(&c, &k).unwrap();
        assert_eq!(loaded.cert.len(), 2, "leaf and intermediate");
    }

    #[test]
    fn mismatched_pair_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), &KeyPair::generate().unwrap());
        std::fs::write(&k, KeyPair::generate().unwrap().serialize_pem()).unwrap();
        let err = load_certified_key(&c, &k).unwrap_err();
        assert!(matches!(err, CertLoadError::Mismatch { .. }), "{err}");
    }

    #[test]
    fn garbage_is_refused_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), &KeyPair::generate().unwrap());
        std::fs::write(&c, "half a certificate").unwrap();
        let err = load_certified_key(&c, &k).unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
        let missing = load_certified_key(&dir.path().join("nope.crt"), &k).unwrap_err();
        assert!(matches!(missing, CertLoadError::Read { .. }));
    }
}
