//! A local certificate authority and a serving certificate for the webhook,
//! so that `serve` runs with no set-up and `certs` prints the caBundle that
//! the webhook configurations need.
//!
//! Files in the directory: `ca.crt`, `ca.key`, `tls.crt`, `tls.key` (PEM).
//! Existing files are reused while they are valid; a serving certificate
//! that expires soon or lacks a requested name is issued again from the same
//! CA, so the caBundle already registered with the cluster keeps working.
use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod der;
pub mod managed;
pub mod material;

/// Names the self-generated serving certificate covers when none are given:
/// local runs and the in-cluster Service of the shipped deployment.
pub const DEFAULT_NAMES: &[&str] = &[
    "localhost",
    "127.0.0.1",
    "gpu-admission.gpu-admission.svc",
    "gpu-admission.gpu-admission.svc.cluster.local",
];

pub use der::{format_utc, validity};

/// Common name of the generated CA; also how a reused CA key is turned back
/// into an issuer (the issuer name of a certificate is the CA's subject).
const CA_COMMON_NAME: &str = "gpu-admission local CA";
const CA_VALIDITY_DAYS: u32 = 3650;
const SERVING_VALIDITY_DAYS: u32 = 365;
/// Certificates that expire within this margin are replaced.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Paths of the four files in a certificate directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertPaths {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertPaths {
    pub fn in_dir(dir: &Path) -> CertPaths {
        CertPaths {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }
}

/// What [`ensure`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ensured {
    pub paths: CertPaths,
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// A new CA was created (any caBundle registered before is now stale).
    pub created_ca: bool,
    /// A new serving certificate was issued.
    pub issued_cert: bool,
}

impl Ensured {
    /// The CA certificate as the base64 `caBundle` of a webhook configuration.
    pub fn ca_bundle(&self) -> String {
        ca_bundle(&self.ca_pem)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot create certificate directory {path}: {error}")]
    CreateDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} is a symbolic link; refusing to write a certificate or key through it (remove it, or choose another folder)")]
    Symlink { path: PathBuf },
    #[error("invalid certificate name {0:?}: expected a DNS name or an IP address")]
    Name(String),
    #[error("cannot generate certificate: {0}")]
    Generate(rcgen::Error),
}

/// The base64 `caBundle` for a PEM CA certificate.
pub fn ca_bundle(ca_pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes())
}

/// Makes sure `dir` holds a valid CA and a serving certificate for `names`
/// (DNS names or IP addresses), reusing what is there when it is still good.
pub fn ensure(dir: &Path, names: &[String]) -> Result<Ensured, CertError> {
    ensure_inner(dir, names, true)
}

/// What `serve` uses: like [`ensure`], but a valid serving certificate is
/// kept whatever names it covers (it may come from `certs --dns ...`); a
/// new one is issued for [`DEFAULT_NAMES`].
pub fn ensure_for_serving(dir: &Path) -> Result<Ensured, CertError> {
    let names: Vec<String> = DEFAULT_NAMES.iter().map(|s| s.to_string()).collect();
    ensure_inner(dir, &names, false)
}

fn ensure_inner(dir: &Path, names: &[String], require_names: bool) -> Result<Ensured, CertError> {
    let now = SystemTime::now();
    // Check the names before touching any file.
    serving_params(names, now)?;
    let paths = CertPaths::in_dir(dir);
    std::fs::create_dir_all(dir).map_err(|error| CertError::CreateDir {
        path: dir.to_path_buf(),
        error,
    })?;
    let (ca_pem, ca_key, created_ca) = match reusable_ca(&paths, now) {
        Some((pem, key)) => (pem, key, false),
        None => {
            let key = KeyPair::generate().map_err(CertError::Generate)?;
            let cert = ca_params(now)
                .self_signed(&key)
                .map_err(CertError::Generate)?;
            refuse_symlinks(&[&paths.ca_key, &paths.ca_cert])?;
            write_file(&paths.ca_key, &key.serialize_pem(), true)?;
            write_file(&paths.ca_cert, &cert.pem(), false)?;
            (cert.pem(), key, true)
        }
    };
    let required: &[String] = if require_names { names } else { &[] };
    let issued_cert = created_ca || !serving_cert_valid(&paths, &ca_pem, required, now);
    if issued_cert {
        let issuer = Issuer::new(ca_params(now), ca_key);
        let key = KeyPair::generate().map_err(CertError::Generate)?;
        let cert = serving_params(names, now)?
            .signed_by(&key, &issuer)
            .map_err(CertError::Generate)?;
        // Key first: a reader that sees the new certificate finds its key.
        refuse_symlinks(&[&paths.key, &paths.cert])?;
        write_file(&paths.key, &key.serialize_pem(), true)?;
        write_file(&paths.cert, &cert.pem(), false)?;
    }
    Ok(Ensured {
        paths,
        ca_pem,
        created_ca,
        issued_cert,
    })
}

/// Checks that `cert_pem` chains to `ca_pem`, is valid for server
/// authentication at `at`, and covers every name in `names`.
pub fn verify_serving_cert(
    cert_pem: &str,
    ca_pem: &str,
    names: &[String],
    at: SystemTime,
) -> Result<(), String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("serving certificate: {e}"))?;
    let (end_entity, intermediates) = chain
        .split_first()
        .ok_or("serving certificate file holds no certificate")?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let ca = ca.map_err(|e| format!("CA certificate: {e}"))?;
        roots.add(ca).map_err(|e| format!("CA certificate: {e}"))?;
    }
    let parsed = ParsedCertificate::try_from(end_entity).map_err(|e| e.to_string())?;
    let at = UnixTime::since_unix_epoch(at.duration_since(UNIX_EPOCH).unwrap_or_default());
    let algorithms = rustls::crypto::ring::default_provider()
        .signature_verification_algorithms
        .all;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &parsed,
        &roots,
        intermediates,
        at,
        algorithms,
    )
    .map_err(|e| e.to_string())?;
    for name in names {
        let server_name =
            ServerName::try_from(name.as_str()).map_err(|e| format!("{name:?}: {e}"))?;
        rustls::client::verify_server_name(&parsed, &server_name)
            .map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// The `notAfter` time of a DER certificate.
pub fn not_after(der: &[u8]) -> Option<SystemTime> {
    validity(der).map(|(_, not_after)| not_after)
}

fn reusable_ca(paths: &CertPaths, now: SystemTime) -> Option<(String, KeyPair)> {
    let pem = std::fs::read_to_string(&paths.ca_cert).ok()?;
    let key = KeyPair::from_pem(&std::fs::read_to_string(&paths.ca_key).ok()?).ok()?;
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
    if not_after(&der)? < now + RENEW_BEFORE {
        return None;
    }
    // The key must be the CA's: a certificate it signs must verify.
    let probe = CertificateParams::new(vec!["probe.invalid".to_string()]).ok()?;
    let probe_key = KeyPair::generate().ok()?;
    let issuer = Issuer::new(ca_params(now), &key);
    let cert = probe.signed_by(&probe_key, &issuer).ok()?;
    verify_serving_cert(&cert.pem(), &pem, &["probe.invalid".to_string()], now).ok()?;
    Some((pem, key))
}

fn serving_cert_valid(paths: &CertPaths, ca_pem: &str, names: &[String], now: SystemTime) -> bool {
    let (Ok(cert), Ok(key)) = (
        std::fs::read_to_string(&paths.cert),
        std::fs::read_to_string(&paths.key),
    ) else {
        return false;
    };
    let pair = material::Pair { cert, key };
    material::key_matches(&pair)
        && verify_serving_cert(&pair.cert, ca_pem, names, now + RENEW_BEFORE).is_ok()
}

fn ca_params(now: SystemTime) -> CertificateParams {
    let mut params = ca_params_named(CA_COMMON_NAME);
    set_validity(&mut params, now, CA_VALIDITY_DAYS);
    params
}

/// A CA's parameters under the common name `common_name`, validity unset.
fn ca_params_named(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "gpu-admission");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn serving_params(names: &[String], now: SystemTime) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().map(String::as_str).unwrap_or("gpu-admission"),
    );
    params.distinguished_name = dn;
    for name in names {
        let san = match ServerName::try_from(name.as_str()) {
            Ok(ServerName::IpAddress(ip)) => SanType::IpAddress(std::net::IpAddr::from(ip)),
            Ok(ServerName::DnsName(_)) => SanType::DnsName(
                name.clone()
                    .try_into()
                    .map_err(|_| CertError::Name(name.clone()))?,
            ),
            _ => return Err(CertError::Name(name.clone())),
        };
        params.subject_alt_names.push(san);
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, now, SERVING_VALIDITY_DAYS);
    Ok(params)
}

/// Sets a certificate's validity to `not_before`..`not_after`.
fn set_validity_between(
    params: &mut CertificateParams,
    not_before: SystemTime,
    not_after: SystemTime,
) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let since = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default();
    params.not_before = epoch + since(not_before);
    params.not_after = epoch + since(not_after);
}

/// Valid from one day before `now` (clock skew) to `days` after it.
fn set_validity(params: &mut CertificateParams, now: SystemTime, days: u32) {
    let day = Duration::from_secs(24 * 3600);
    let before = now.checked_sub(day).unwrap_or(UNIX_EPOCH);
    set_validity_between(params, before, now + day * days);
}

/// Writes `contents` to `path` without ever writing through a link
/// planted there or at a guessable name next to it: the text goes into a
/// new file created exclusively (`O_CREAT|O_EXCL`, which does not follow a
/// symlink) under a fresh name in the same folder, owner-only from the
/// start for keys, and is then renamed over `path` (a rename replaces the
/// directory entry, never what a link points to). A reader sees the old
/// file or the new one, never half of one. A symlink already at `path` is
/// refused rather than silently replaced: someone put it there.
fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    refuse_symlinks(&[path])?;
    let write_error = |error| CertError::Write {
        path: path.to_path_buf(),
        error,
    };
    let (tmp, mut file) = create_new_beside(path, private).map_err(write_error)?;
    let written = (|| {
        use std::io::Write as _;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(write_error)
}

/// Fails on the first of `paths` that is a symlink, so a pair (key and
/// certificate) is checked before either half is written.
fn refuse_symlinks(paths: &[&Path]) -> Result<(), CertError> {
    for path in paths {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(CertError::Symlink {
                path: path.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// A new, empty file in `path`'s folder under an unused name.
fn create_new_beside(path: &Path, private: bool) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let mut last_error = None;
    for _ in 0..16 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{nanos}.{n}.tmp", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(if private { 0o600 } else { 0o644 });
        }
        #[cfg(not(unix))]
        let _ = private;
        match options.open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// Verifies the serving certificate `out` wrote against its CA.
    fn verify(out: &Ensured, names: &[String], at: SystemTime) -> Result<(), String> {
        let pem = std::fs::read_to_string(&out.paths.cert).unwrap();
        verify_serving_cert(&pem, &out.ca_pem, names, at)
    }

    #[test]
    fn creates_then_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let sans = names(DEFAULT_NAMES);
        let first = ensure(dir.path(), &sans).unwrap();
        assert!(first.created_ca && first.issued_cert);
        let cert = std::fs::read_to_string(&first.paths.cert).unwrap();
        verify(&first, &sans, SystemTime::now()).unwrap();

        let second = ensure(dir.path(), &sans).unwrap();
        assert!(!second.created_ca && !second.issued_cert);
        assert_eq!(second.ca_pem, first.ca_pem);
        assert_eq!(std::fs::read_to_string(&first.paths.cert).unwrap(), cert);
    }

    #[test]
    fn new_name_reissues_from_the_same_ca() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure(dir.path(), &names(&["localhost"])).unwrap();
        let wider = names(&["localhost", "webhook.example.svc"]);
        let second = ensure(dir.path(), &wider).unwrap();
        assert!(!second.created_ca && second.issued_cert);
        assert_eq!(second.ca_pem, first.ca_pem);
        verify(&second, &wider, SystemTime::now()).unwrap();
    }

    #[test]
    fn serving_keeps_a_certificate_made_for_other_names() {
        let dir = tempfile::tempdir().unwrap();
        let custom = names(&["webhook.team-a.svc"]);
        let made = ensure(dir.path(), &custom).unwrap();
        let cert = std::fs::read_to_string(&made.paths.cert).unwrap();
        let served = ensure_for_serving(dir.path()).unwrap();
        assert!(!served.created_ca && !served.issued_cert);
        assert_eq!(std::fs::read_to_string(&made.paths.cert).unwrap(), cert);

        // But an unusable one is replaced, with the default names.
        let other_key = KeyPair::generate().unwrap().serialize_pem();
        std::fs::write(&made.paths.key, other_key).unwrap();
        let again = ensure_for_serving(dir.path()).unwrap();
        assert!(again.issued_cert);
        verify(&again, &names(DEFAULT_NAMES), SystemTime::now()).unwrap();
    }

    #[test]
    fn replaces_a_ca_whose_key_does_not_match() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure(dir.path(), &names(&["localhost"])).unwrap();
        let other = KeyPair::generate().unwrap();
        std::fs::write(&first.paths.ca_key, other.serialize_pem()).unwrap();
        let second = ensure(dir.path(), &names(&["localhost"])).unwrap();
        assert!(second.created_ca);
        assert_ne!(second.ca_pem, first.ca_pem);
    }

    #[test]
    fn replaces_garbage_files() {
        let dir = tempfile::tempdir().unwrap();
        let paths = CertPaths::in_dir(dir.path());
        for p in [&paths.ca_cert, &paths.ca_key, &paths.cert, &paths.key] {
            std::fs::write(p, "not pem").unwrap();
        }
        let out = ensure(dir.path(), &names(&["localhost"])).unwrap();
        assert!(out.created_ca && out.issued_cert);
    }

    #[test]
    fn expiry_is_read_from_the_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let out = ensure(dir.path(), &names(&["localhost"])).unwrap();
        let ca = CertificateDer::from_pem_slice(out.ca_pem.as_bytes()).unwrap();
        let expires = not_after(&ca).unwrap();
        let years = expires.duration_since(SystemTime::now()).unwrap().as_secs() / (365 * 86_400);
        assert!((9..=10).contains(&years), "{years}");
        let cert = std::fs::read(&out.paths.cert).unwrap();
        let cert = CertificateDer::from_pem_slice(&cert).unwrap();
        // Serving certificate near expiry: verification a year on fails.
        let later = SystemTime::now() + Duration::from_secs(400 * 86_400);
        assert!(verify(&out, &names(&["localhost"]), later).is_err());
        assert!(not_after(&cert).unwrap() < later);
    }

    #[test]
    fn wrong_name_fails_verification() {
        let dir = tempfile::tempdir().unwrap();
        let out = ensure(dir.path(), &names(&["localhost"])).unwrap();
        let err = verify(&out, &names(&["other.example"]), SystemTime::now()).unwrap_err();
        assert!(err.contains("other.example"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_planted_at_a_key_path_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        std::fs::create_dir(&certs).unwrap();
        let elsewhere = dir.path().join("authorized_keys");
        std::fs::write(&elsewhere, "precious\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, certs.join("ca.key")).unwrap();
        let err = ensure(&certs, &names(&["localhost"])).unwrap_err();
        assert!(matches!(err, CertError::Symlink { .. }), "{err}");
        assert!(err.to_string().contains("ca.key"), "{err}");
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "precious\n");
        assert!(
            !certs.join("ca.crt").exists(),
            "neither half of the pair written"
        );

        // Dangling, at the serving key: not created through either.
        std::fs::remove_file(certs.join("ca.key")).unwrap();
        let target = dir.path().join("planted.key");
        std::os::unix::fs::symlink(&target, certs.join("tls.key")).unwrap();
        let err = ensure(&certs, &names(&["localhost"])).unwrap_err();
        assert!(err.to_string().contains("tls.key"), "{err}");
        assert!(!target.exists());
        let leftovers: Vec<_> = std::fs::read_dir(&certs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[cfg(unix)]
    #[test]
    fn keys_are_replaced_by_rename_and_owner_only() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let dir = tempfile::tempdir().unwrap();
        let paths = CertPaths::in_dir(dir.path());
        std::fs::write(&paths.key, "old key, not pem\n").unwrap();
        // A second name for the old file: an in-place rewrite would show
        // through it, a rename leaves it alone.
        let alias = dir.path().join("old-key-alias");
        std::fs::hard_link(&paths.key, &alias).unwrap();
        let before = std::fs::metadata(&paths.key).unwrap().ino();
        let out = ensure(dir.path(), &names(&["localhost"])).unwrap();
        assert!(out.issued_cert);
        assert_eq!(
            std::fs::read_to_string(&alias).unwrap(),
            "old key, not pem\n"
        );
        let key = std::fs::metadata(&paths.key).unwrap();
        assert_ne!(key.ino(), before, "a new file, not the old one rewritten");
        for private in [&paths.key, &paths.ca_key] {
            let mode = std::fs::metadata(private).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", private.display());
        }
        KeyPair::from_pem(&std::fs::read_to_string(&paths.key).unwrap()).unwrap();
        let names_left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names_left.iter().any(|n| n.ends_with(".tmp")),
            "{names_left:?}"
        );
    }

    #[test]
    fn bad_name_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = ensure(dir.path(), &names(&["bad name with spaces"])).unwrap_err();
        assert!(matches!(err, CertError::Name(_)), "{err}");
        assert!(err.to_string().contains("bad name with spaces"));
    }
}
