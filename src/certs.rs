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
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Names the self-generated serving certificate covers when none are given:
/// local runs and the in-cluster Service of the shipped deployment.
pub const DEFAULT_NAMES: &[&str] = &[
    "localhost",
    "127.0.0.1",
    "gpu-admission.gpu-admission.svc",
    "gpu-admission.gpu-admission.svc.cluster.local",
];

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
    der::not_after(der)
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
    let Ok(key) = KeyPair::from_pem(&key) else {
        return false;
    };
    let Ok(der) = CertificateDer::from_pem_slice(cert.as_bytes()) else {
        return false;
    };
    // The key must belong to the certificate.
    let Ok(parsed) = ParsedCertificate::try_from(&der) else {
        return false;
    };
    if parsed.subject_public_key_info().as_ref() != key.subject_public_key_info().as_slice() {
        return false;
    }
    verify_serving_cert(&cert, ca_pem, names, now + RENEW_BEFORE).is_ok()
}

fn ca_params(now: SystemTime) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    dn.push(DnType::OrganizationName, "gpu-admission");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, now, CA_VALIDITY_DAYS);
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

/// Valid from one day before `now` (clock skew) to `days` after it.
fn set_validity(params: &mut CertificateParams, now: SystemTime, days: u32) {
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let day = Duration::from_secs(24 * 3600);
    params.not_before = epoch + since_epoch.saturating_sub(day);
    params.not_after = epoch + since_epoch + day * days;
}

fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    // Written aside and renamed, so a reader never sees half a file; keys
    // are created owner-only rather than narrowed after the fact.
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(if private { 0o600 } else { 0o644 });
        }
        #[cfg(not(unix))]
        let _ = private;
        let _ = std::fs::remove_file(&tmp);
        let mut file = options.open(&tmp)?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    };
    write().map_err(|error| CertError::Write {
        path: path.to_path_buf(),
        error,
    })
}

/// Just enough DER to read a certificate's validity.
mod der {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// One TLV: (tag, contents, rest).
    fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return None;
        }
        Some((tag, &rest[..len], &rest[len..]))
    }

    pub fn not_after(cert: &[u8]) -> Option<SystemTime> {
        const SEQUENCE: u8 = 0x30;
        let (SEQUENCE, cert, _) = tlv(cert)? else {
            return None;
        };
        let (SEQUENCE, mut tbs, _) = tlv(cert)? else {
            return None;
        };
        // [0] EXPLICIT version, optional.
        if tbs.first() == Some(&0xa0) {
            tbs = tlv(tbs)?.2;
        }
        let (_serial, _, rest) = tlv(tbs)?;
        let (_signature, _, rest) = tlv(rest)?;
        let (_issuer, _, rest) = tlv(rest)?;
        let (SEQUENCE, validity, _) = tlv(rest)? else {
            return None;
        };
        let (_, _, rest) = tlv(validity)?;
        let (tag, time, _) = tlv(rest)?;
        parse_time(tag, std::str::from_utf8(time).ok()?)
    }

    /// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
    fn parse_time(tag: u8, s: &str) -> Option<SystemTime> {
        let s = s.strip_suffix('Z')?;
        let (year, rest) = match tag {
            0x17 if s.len() == 12 => {
                let yy: i64 = s[..2].parse().ok()?;
                (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
            }
            0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
            _ => return None,
        };
        let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
        let (month, day) = (field(0)?, field(2)?);
        let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
        Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date.
    fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn civil_days() {
            assert_eq!(days_from_civil(1970, 1, 1), 0);
            assert_eq!(days_from_civil(2000, 3, 1), 11_017);
            assert_eq!(days_from_civil(2026, 11, 29), 20_786);
        }

        #[test]
        fn both_time_forms() {
            let utc = parse_time(0x17, "261129140000Z").unwrap();
            let gen = parse_time(0x18, "20261129140000Z").unwrap();
            assert_eq!(utc, gen);
            assert_eq!(parse_time(0x17, "bad"), None);
            assert_eq!(tlv(&[0x30, 0x05, 0x00]), None, "length past the end");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn creates_then_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let sans = names(DEFAULT_NAMES);
        let first = ensure(dir.path(), &sans).unwrap();
        assert!(first.created_ca && first.issued_cert);
        let cert = std::fs::read_to_string(&first.paths.cert).unwrap();
        verify_serving_cert(&cert, &first.ca_pem, &sans, SystemTime::now()).unwrap();

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
        let cert = std::fs::read_to_string(&second.paths.cert).unwrap();
        verify_serving_cert(&cert, &second.ca_pem, &wider, SystemTime::now()).unwrap();
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
        std::fs::write(
            &made.paths.key,
            KeyPair::generate().unwrap().serialize_pem(),
        )
        .unwrap();
        let again = ensure_for_serving(dir.path()).unwrap();
        assert!(again.issued_cert);
        let cert = std::fs::read_to_string(&again.paths.cert).unwrap();
        verify_serving_cert(
            &cert,
            &again.ca_pem,
            &names(DEFAULT_NAMES),
            SystemTime::now(),
        )
        .unwrap();
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
        let pem = std::fs::read_to_string(&out.paths.cert).unwrap();
        assert!(verify_serving_cert(&pem, &out.ca_pem, &names(&["localhost"]), later).is_err());
        assert!(not_after(&cert).unwrap() < later);
    }

    #[test]
    fn wrong_name_fails_verification() {
        let dir = tempfile::tempdir().unwrap();
        let out = ensure(dir.path(), &names(&["localhost"])).unwrap();
        let pem = std::fs::read_to_string(&out.paths.cert).unwrap();
        let err = verify_serving_cert(
            &pem,
            &out.ca_pem,
            &names(&["other.example"]),
            SystemTime::now(),
        )
        .unwrap_err();
        assert!(err.contains("other.example"), "{err}");
    }

    #[test]
    fn bad_name_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = ensure(dir.path(), &names(&["bad name with spaces"])).unwrap_err();
        assert!(matches!(err, CertError::Name(_)), "{err}");
        assert!(err.to_string().contains("bad name with spaces"));
    }
}
