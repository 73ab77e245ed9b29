//! TLS for the webhook: rustls (TLS 1.2 and 1.3, ring), a certificate
//! resolver whose key can be swapped while serving, and a watcher that
//! re-reads the certificate and key when their files change, including a
//! Kubernetes Secret volume's `..data` symlink swap.
use super::Metrics;
use crate::certs;
use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher as _};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
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
    #[error("{path}: the certificate expired at {not_after} (it is now {now}); renew it")]
    Expired {
        path: PathBuf,
        not_after: String,
        now: String,
    },
    #[error("{path}: the certificate is not valid before {not_before} (it is now {now}); check the issuer's and this node's clocks")]
    NotYetValid {
        path: PathBuf,
        not_before: String,
        now: String,
    },
    #[error("{path}: cannot read the certificate's validity period")]
    NoValidity { path: PathBuf },
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

/// Loads a PEM certificate chain (leaf first) and its private key. A leaf
/// that is expired or not yet valid is refused: the apiserver would refuse
/// it too, so keeping (or failing to start with) something else is better.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, CertLoadError> {
    load_certified_key_at(cert, key, SystemTime::now())
}

/// [`load_certified_key`], checking validity at `now`.
pub fn load_certified_key_at(
    cert: &Path,
    key: &Path,
    now: SystemTime,
) -> Result<CertifiedKey, CertLoadError> {
    let read = |path: &Path| {
        let path = path.to_path_buf();
        std::fs::read(&path).map_err(|error| CertLoadError::Read { path, error })
    };
    certified_key_from_pem(&read(cert)?, &read(key)?, cert, key, now)
}

/// [`load_certified_key_at`] for PEM already read; `cert` and `key` name
/// where it came from, in errors.
pub fn certified_key_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert: &Path,
    key: &Path,
    now: SystemTime,
) -> Result<CertifiedKey, CertLoadError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| CertLoadError::BadCertificate {
            path: cert.to_path_buf(),
            message: e.to_string(),
        })?;
    let Some(leaf) = chain.first() else {
        return Err(CertLoadError::NoCertificate {
            path: cert.to_path_buf(),
        });
    };
    check_validity(cert, leaf, now)?;
    let bad_key = |e: &dyn std::fmt::Display| CertLoadError::BadKey {
        path: key.to_path_buf(),
        message: e.to_string(),
    };
    let private_key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad_key(&e))?;
    let signing_key = (provider().key_provider)
        .load_private_key(private_key)
        .map_err(|e| bad_key(&e))?;
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

/// When the served leaf certificate expires.
pub fn not_after(key: &CertifiedKey) -> Option<SystemTime> {
    certs::not_after(key.cert.first()?)
}

// The validity comes from the crate's own DER reader (`certs::validity`):
// rustls-webpki checks it only while verifying a chain against trust
// anchors, which a server holding just its own chain does not have, and
// x509-parser would be a new dependency for two fields.
fn check_validity(path: &Path, leaf: &[u8], now: SystemTime) -> Result<(), CertLoadError> {
    let Some((not_before, not_after)) = certs::validity(leaf) else {
        return Err(CertLoadError::NoValidity {
            path: path.to_path_buf(),
        });
    };
    if now > not_after {
        return Err(CertLoadError::Expired {
            path: path.to_path_buf(),
            not_after: certs::format_utc(not_after),
            now: certs::format_utc(now),
        });
    }
    if now < not_before {
        return Err(CertLoadError::NotYetValid {
            path: path.to_path_buf(),
            not_before: certs::format_utc(not_before),
            now: certs::format_utc(now),
        });
    }
    Ok(())
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

    /// Serves `new` if it is another certificate than the current one,
    /// counted as reloaded or unchanged in `metrics`, whose expiry gauge
    /// follows it. Says whether it was another.
    fn offer(&self, new: CertifiedKey, metrics: &Metrics) -> bool {
        if let Some(expiry) = not_after(&new) {
            metrics.set_certificate_expiry(expiry);
        }
        let changed = new.cert != self.current().cert;
        if changed {
            self.set(new);
        }
        metrics.inc_certificate_reloads(if changed { "reloaded" } else { "unchanged" });
        changed
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
/// change, and sets the certificate expiry gauge on every successful load.
/// Dropping it stops watching.
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
    pub fn spawn(
        resolver: Arc<CertResolver>,
        cert: PathBuf,
        key: PathBuf,
        metrics: Metrics,
    ) -> CertReloader {
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = watch_dirs(&[&cert, &key], tx);
        let task = tokio::spawn(reload_loop(resolver, cert, key, metrics, rx));
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
    metrics: Metrics,
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
                if resolver.offer(new, &metrics) {
                    tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                }
            }
            Ok(Err(err)) => {
                metrics.inc_certificate_reloads("refused");
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

/// Where a served certificate comes from other than files: the serving
/// pair the managed certificates (`serve --manage-certs`) publish from
/// their Secret.
pub type CertFeed = tokio::sync::watch::Receiver<certs::material::Pair>;

/// How errors name a certificate from a feed.
pub const FEED_CERT: &str = "the certificate Secret's tls.crt";
pub const FEED_KEY: &str = "the certificate Secret's tls.key";

/// Loads the feed's current pair.
pub fn load_from_feed(feed: &CertFeed) -> Result<CertifiedKey, CertLoadError> {
    let pair = feed.borrow().clone();
    certified_key_from_pem(
        pair.cert.as_bytes(),
        pair.key.as_bytes(),
        Path::new(FEED_CERT),
        Path::new(FEED_KEY),
        SystemTime::now(),
    )
}

/// Serves each new pair of `feed` as it comes, keeping the current one
/// when a new one does not load; counted and gauged like file reloads.
/// Ends when the feed does.
pub fn follow_feed(
    resolver: Arc<CertResolver>,
    mut feed: CertFeed,
    metrics: Metrics,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while feed.changed().await.is_ok() {
            match load_from_feed(&feed) {
                Ok(new) => {
                    if resolver.offer(new, &metrics) {
                        tracing::info!("serving certificate reloaded from the certificate Secret");
                    }
                }
                Err(err) => {
                    metrics.inc_certificate_reloads("refused");
                    tracing::warn!("keeping the current serving certificate: {err}");
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    /// Loads a pair kept in `testdata/`.
    fn load_testdata(cert: &str, key: &str) -> Result<CertifiedKey, CertLoadError> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/testdata");
        load_certified_key(&dir.join(cert), &dir.join(key))
    }

    type Day = (i32, u8, u8);

    /// `tls.crt` and `tls.key` in `dir`: a self-signed pair for localhost,
    /// valid between the two days if given (else as rcgen makes it).
    fn write_pair(dir: &Path, valid: Option<(Day, Day)>) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        if let Some((from, to)) = valid {
            params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
            params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
        }
        let cert = params.self_signed(&key).unwrap();
        let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn loads_ecdsa_pkcs8() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), None);
        let loaded = load_certified_key(&c, &k).unwrap();
        assert_eq!(loaded.cert.len(), 1);
    }

    #[test]
    fn loads_sec1_ec_key() {
        // openssl's `ecparam -genkey` output: "BEGIN EC PRIVATE KEY".
        load_testdata("ec-sec1.crt", "ec-sec1.key").unwrap();
    }

    #[test]
    fn loads_rsa_pkcs1_key_and_chain() {
        let loaded = load_testdata("rsa-chain.crt", "rsa-pkcs1.key").unwrap();
        assert_eq!(loaded.cert.len(), 2, "leaf and intermediate");
    }

    #[test]
    fn mismatched_pair_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), None);
        std::fs::write(&k, KeyPair::generate().unwrap().serialize_pem()).unwrap();
        let err = load_certified_key(&c, &k).unwrap_err();
        assert!(matches!(err, CertLoadError::Mismatch { .. }), "{err}");
    }

    #[test]
    fn expired_and_future_certificates_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), Some(((2020, 1, 1), (2021, 1, 1))));
        let err = load_certified_key(&c, &k).unwrap_err();
        assert!(matches!(err, CertLoadError::Expired { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("expired at 2021-01-01T00:00:00Z"), "{text}");
        assert!(text.contains("tls.crt"), "{text}");

        let (c, k) = write_pair(dir.path(), Some(((2090, 1, 1), (2091, 1, 1))));
        let err = load_certified_key(&c, &k).unwrap_err();
        assert!(matches!(err, CertLoadError::NotYetValid { .. }), "{err}");
        assert!(err.to_string().contains("2090-01-01T00:00:00Z"), "{err}");

        // Inside the window it loads, and its end is what the gauge shows.
        let inside = certs::validity(&CertificateDer::from_pem_file(&c).unwrap()).unwrap();
        let loaded = load_certified_key_at(&c, &k, inside.0 + Duration::from_secs(1)).unwrap();
        assert_eq!(not_after(&loaded), Some(inside.1));
    }

    #[test]
    fn garbage_is_refused_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_pair(dir.path(), None);
        std::fs::write(&c, "half a certificate").unwrap();
        let err = load_certified_key(&c, &k).unwrap_err();
        assert!(err.to_string().contains("tls.crt"), "{err}");
        let missing = load_certified_key(&dir.path().join("nope.crt"), &k).unwrap_err();
        assert!(matches!(missing, CertLoadError::Read { .. }));
    }
}
