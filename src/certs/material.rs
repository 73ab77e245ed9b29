//! What the certificate Secret holds, and the decision the elected replica
//! makes on every check: what the Secret should hold now.
//!
//! A rotation of the CA goes through three states, each at least `overlap`
//! long, so that every party has caught up before the next step:
//!
//! 1. staged: a new CA sits beside the current one; both are trusted
//!    (caBundle holds both) and the serving certificate is still the old
//!    CA's;
//! 2. promoted: the new CA issues the serving certificate; the old CA is
//!    still trusted, for replicas that have not reloaded yet;
//! 3. the old CA is dropped from the trusted set.
use super::{
    ca_params_named, serving_params, set_validity_between, verify_serving_cert, CertError,
};
use rcgen::{Issuer, KeyPair, PublicKeyData};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::ParsedCertificate;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Secret keys. `tls.crt`, `tls.key` and `ca.crt` are the names of a
/// `kubernetes.io/tls` Secret, so the Secret also reads as one.
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const NEXT_CA_CERT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
pub const PREVIOUS_CA_CERT: &str = "previous-ca.crt";
pub const SERVING_CERT: &str = "tls.crt";
pub const SERVING_KEY: &str = "tls.key";
/// When the current rotation step began (RFC 3339).
pub const STEP_SINCE: &str = "rotation-step-since";

/// How long certificates live and how long each rotation step lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    pub ca: Duration,
    pub serving: Duration,
    /// Both CAs are trusted this long before the new one issues the
    /// serving certificate, and this long after.
    pub overlap: Duration,
}

/// Certificates are valid from this long before they are made: clocks of
/// the apiserver and the replicas may lag the elected replica's.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);

impl Lifetimes {
    /// Checks that renewals cannot chase each other: a serving certificate
    /// fits in the third of the CA's life left when a rotation starts, and
    /// a rotation's two steps end well before the old CA expires.
    pub fn check(&self) -> Result<(), String> {
        if self.serving.is_zero() || self.ca.is_zero() || self.overlap.is_zero() {
            return Err("certificate lifetimes and the overlap must be longer than zero".into());
        }
        if self.serving * 3 > self.ca {
            return Err(format!(
                "the serving certificate's lifetime ({}s) must be at most a third of the CA's ({}s)",
                self.serving.as_secs_f64(),
                self.ca.as_secs_f64()
            ));
        }
        if self.overlap * 5 > self.ca {
            return Err(format!(
                "the CA overlap ({}s) must be at most a fifth of the CA's lifetime ({}s)",
                self.overlap.as_secs_f64(),
                self.ca.as_secs_f64()
            ));
        }
        Ok(())
    }
}

/// A certificate and its private key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// The content of the certificate Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Material {
    /// The CA that issues the serving certificate.
    pub ca: Pair,
    /// A new CA, trusted but not issuing yet (rotation step 1).
    pub next_ca: Option<Pair>,
    /// CA certificates still trusted after a rotation (step 2), PEM.
    pub previous_ca: Option<String>,
    /// When the current rotation step began.
    pub since: Option<SystemTime>,
    /// The serving certificate and key.
    pub serving: Pair,
}

/// What [`plan`] changed, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A new CA and serving certificate (nothing usable was there).
    Created,
    /// A new CA added beside the current one.
    StagedCa,
    /// The new CA now issues the serving certificate.
    PromotedCa,
    /// The CA replaced in a rotation is no longer trusted.
    DroppedPreviousCa,
    /// A new serving certificate from the current CA.
    RenewedServing,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Created => "created",
            Step::StagedCa => "staged a new CA",
            Step::PromotedCa => "promoted the new CA",
            Step::DroppedPreviousCa => "dropped the previous CA",
            Step::RenewedServing => "renewed the serving certificate",
        }
    }
}

impl Material {
    /// Every CA certificate to trust now, PEM, concatenated: the caBundle.
    pub fn trusted_pem(&self) -> String {
        let mut out = String::new();
        for pem in [
            Some(self.ca.cert.as_str()),
            self.next_ca.as_ref().map(|p| p.cert.as_str()),
            self.previous_ca.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            out.push_str(pem.trim_end());
            out.push('\n');
        }
        out
    }

    /// Reads the Secret's data. Errors name the key that is missing or
    /// unreadable.
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Material, String> {
        let text = |key: &str| -> Result<Option<String>, String> {
            match data.get(key) {
                None => Ok(None),
                Some(bytes) if bytes.is_empty() => Ok(None),
                Some(bytes) => String::from_utf8(bytes.clone())
                    .map(Some)
                    .map_err(|_| format!("{key} is not text")),
            }
        };
        let required = |key: &str| text(key)?.ok_or_else(|| format!("{key} is missing"));
        let next_ca = match (text(NEXT_CA_CERT)?, text(NEXT_CA_KEY)?) {
            (Some(cert), Some(key)) => Some(Pair { cert, key }),
            _ => None,
        };
        let since = match text(STEP_SINCE)? {
            None => None,
            Some(t) => Some(
                parse_time(&t)
                    .ok_or_else(|| format!("{STEP_SINCE}: {t:?} is not an RFC 3339 time"))?,
            ),
        };
        Ok(Material {
            ca: Pair {
                cert: required(CA_CERT)?,
                key: required(CA_KEY)?,
            },
            next_ca,
            previous_ca: text(PREVIOUS_CA_CERT)?,
            since,
            serving: Pair {
                cert: required(SERVING_CERT)?,
                key: required(SERVING_KEY)?,
            },
        })
    }

    /// The Secret's data.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_string(), value.as_bytes().to_vec());
        };
        put(CA_CERT, &self.ca.cert);
        put(CA_KEY, &self.ca.key);
        put(SERVING_CERT, &self.serving.cert);
        put(SERVING_KEY, &self.serving.key);
        if let Some(next) = &self.next_ca {
            put(NEXT_CA_CERT, &next.cert);
            put(NEXT_CA_KEY, &next.key);
        }
        if let Some(previous) = &self.previous_ca {
            put(PREVIOUS_CA_CERT, previous);
        }
        if let Some(since) = self.since {
            put(STEP_SINCE, &format_time(since));
        }
        data
    }
}

/// What the Secret should hold at `now`, if not `current`.
///
/// `current` is what the Secret holds (or, if it was deleted, what it last
/// held). Without a usable CA a new one is made, and `kept_bundle` (the
/// caBundle the webhook configurations had) stays trusted for one overlap,
/// so replicas still serving a certificate it verifies keep working.
/// `bundle_confirmed` says the webhook configurations trust every CA of
/// `current`: until they do, a rotation waits.
pub fn plan(
    current: Option<&Material>,
    kept_bundle: Option<&str>,
    bundle_confirmed: bool,
    names: &[String],
    lifetimes: &Lifetimes,
    now: SystemTime,
) -> Result<Option<(Material, Vec<Step>)>, CertError> {
    let Some(current) = current.filter(|m| ca_usable(&m.ca, now)) else {
        return fresh(kept_bundle, names, lifetimes, now).map(Some);
    };
    let mut next = current.clone();
    let mut steps = Vec::new();
    if next.next_ca.as_ref().is_some_and(|ca| !ca_usable(ca, now)) {
        next.next_ca = None;
        next.since = None;
    }
    let step_over = bundle_confirmed
        && next
            .since
            .is_none_or(|since| now >= since + lifetimes.overlap);
    if next.previous_ca.is_some() && step_over {
        next.previous_ca = None;
        next.since = None;
        steps.push(Step::DroppedPreviousCa);
    } else if let (Some(new_ca), true) = (next.next_ca.clone(), step_over) {
        next.previous_ca = Some(next.ca.cert.clone());
        next.ca = new_ca;
        next.next_ca = None;
        next.since = Some(now);
        steps.push(Step::PromotedCa);
    } else if next.next_ca.is_none()
        && next.previous_ca.is_none()
        && remaining(&next.ca.cert, now) < lifetimes.ca / 3
    {
        next.next_ca = Some(new_ca(lifetimes, now)?);
        next.since = Some(now);
        steps.push(Step::StagedCa);
    }
    if !serving_good(&next, names, lifetimes, now) {
        next.serving = issue(&next.ca, names, lifetimes, now)?;
        if !steps.contains(&Step::PromotedCa) {
            steps.push(Step::RenewedServing);
        }
    }
    Ok((!steps.is_empty()).then_some((next, steps)))
}

fn fresh(
    kept_bundle: Option<&str>,
    names: &[String],
    lifetimes: &Lifetimes,
    now: SystemTime,
) -> Result<(Material, Vec<Step>), CertError> {
    let ca = new_ca(lifetimes, now)?;
    let serving = issue(&ca, names, lifetimes, now)?;
    let kept = kept_bundle
        .filter(|pem| CertificateDer::pem_slice_iter(pem.as_bytes()).any(|c| c.is_ok()))
        .map(str::to_string);
    Ok((
        Material {
            ca,
            next_ca: None,
            since: kept.as_ref().map(|_| now),
            previous_ca: kept,
            serving,
        },
        vec![Step::Created],
    ))
}

/// A new CA valid for `lifetimes.ca`. Its common name carries a digest of
/// its key, so two CAs trusted at once are told apart by name.
fn new_ca(lifetimes: &Lifetimes, now: SystemTime) -> Result<Pair, CertError> {
    let key = KeyPair::generate().map_err(CertError::Generate)?;
    let mut params = ca_params_named(&ca_name(&key));
    set_validity_between(&mut params, now - CLOCK_SKEW, now + lifetimes.ca);
    let cert = params.self_signed(&key).map_err(CertError::Generate)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn ca_name(key: &KeyPair) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        key.subject_public_key_info().as_slice(),
    );
    let hex: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("gpu-admission CA {hex}")
}

/// A serving certificate for `names` from `ca`, ending no later than it.
fn issue(
    ca: &Pair,
    names: &[String],
    lifetimes: &Lifetimes,
    now: SystemTime,
) -> Result<Pair, CertError> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(CertError::Generate)?;
    let ca_end = cert_der(&ca.cert).and_then(|d| super::not_after(&d));
    let mut end = now + lifetimes.serving;
    if let Some(ca_end) = ca_end {
        end = end.min(ca_end);
    }
    let issuer = Issuer::new(ca_params_named(&ca_name(&ca_key)), ca_key);
    let key = KeyPair::generate().map_err(CertError::Generate)?;
    let mut params = serving_params(names, now)?;
    set_validity_between(&mut params, now - CLOCK_SKEW, end);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(CertError::Generate)?;
    Ok(Pair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A CA whose key matches and which has not expired.
fn ca_usable(ca: &Pair, now: SystemTime) -> bool {
    key_matches(ca) && remaining(&ca.cert, now) > Duration::ZERO
}

/// The serving certificate matches its key, chains to the issuing CA,
/// covers `names` and has more than a third of its lifetime left.
fn serving_good(
    material: &Material,
    names: &[String],
    lifetimes: &Lifetimes,
    now: SystemTime,
) -> bool {
    key_matches(&material.serving)
        && verify_serving_cert(&material.serving.cert, &material.ca.cert, names, now).is_ok()
        && remaining(&material.serving.cert, now) >= lifetimes.serving / 3
}

/// The key belongs to the certificate.
pub(super) fn key_matches(pair: &Pair) -> bool {
    let (Some(der), Ok(key)) = (cert_der(&pair.cert), KeyPair::from_pem(&pair.key)) else {
        return false;
    };
    ParsedCertificate::try_from(&der).is_ok_and(|parsed| {
        parsed.subject_public_key_info().as_ref() == key.subject_public_key_info().as_slice()
    })
}

fn cert_der(pem: &str) -> Option<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes()).ok()
}

/// Time left until the (first) certificate in `pem` expires; zero if it
/// has, or cannot be read.
fn remaining(pem: &str, now: SystemTime) -> Duration {
    cert_der(pem)
        .and_then(|der| super::not_after(&der))
        .and_then(|end| end.duration_since(now).ok())
        .unwrap_or_default()
}

fn format_time(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| {
            let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
            format!("{secs}")
        })
}

fn parse_time(text: &str) -> Option<SystemTime> {
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec![
            "gpu-admission.gpu-admission.svc".to_string(),
            "localhost".to_string(),
        ]
    }

    fn lifetimes() -> Lifetimes {
        Lifetimes {
            ca: day(300),
            serving: day(90),
            overlap: Duration::from_secs(3600),
        }
    }

    fn day(n: u64) -> Duration {
        Duration::from_secs(n * 86_400)
    }

    /// `plan` with the test names and lifetimes.
    fn at(
        current: Option<&Material>,
        kept: Option<&str>,
        confirmed: bool,
        now: SystemTime,
    ) -> Option<(Material, Vec<Step>)> {
        plan(current, kept, confirmed, &names(), &lifetimes(), now).unwrap()
    }

    fn verifies(material: &Material, trusted: &str, at: SystemTime) -> bool {
        verify_serving_cert(&material.serving.cert, trusted, &names(), at).is_ok()
    }

    #[test]
    fn first_plan_creates_a_ca_and_a_serving_certificate_then_keeps_them() {
        let now = SystemTime::now();
        let (made, steps) = at(None, None, false, now).unwrap();
        assert_eq!(steps, [Step::Created]);
        assert!(made.next_ca.is_none() && made.previous_ca.is_none() && made.since.is_none());
        assert!(verifies(&made, &made.trusted_pem(), now));
        assert!(
            made.ca.cert.len() > 100
                && made.trusted_pem().matches("BEGIN CERTIFICATE").count() == 1
        );
        let read = Material::from_data(&made.to_data()).unwrap();
        assert_eq!(read, made);
        assert_eq!(at(Some(&made), None, true, now + day(1)), None);
    }

    #[test]
    fn the_serving_certificate_is_renewed_when_a_third_of_its_life_is_left() {
        let now = SystemTime::now();
        let (made, _) = at(None, None, true, now).unwrap();
        assert_eq!(at(Some(&made), None, true, now + day(59)), None);
        let (renewed, steps) = at(Some(&made), None, true, now + day(61)).unwrap();
        assert_eq!(steps, [Step::RenewedServing]);
        assert_eq!(renewed.ca, made.ca, "same CA");
        assert_ne!(renewed.serving, made.serving);
        assert!(verifies(&renewed, &made.trusted_pem(), now + day(100)));
        // A name the certificate lacks also renews it.
        let wider = [names(), vec!["webhook.example.svc".to_string()]].concat();
        let (_, steps) = plan(Some(&made), None, true, &wider, &lifetimes(), now)
            .unwrap()
            .unwrap();
        assert_eq!(steps, [Step::RenewedServing]);
    }

    #[test]
    fn the_ca_rotates_with_both_trusted_on_either_side_of_the_switch() {
        let lt = lifetimes();
        let t0 = SystemTime::now();
        let (first, _) = at(None, None, true, t0).unwrap();
        let old_ca = first.ca.cert.clone();
        // Two thirds in: a new CA is staged; the old one still issues.
        let t1 = t0 + day(201);
        let (staged, steps) = at(Some(&first), None, true, t1).unwrap();
        assert!(steps.contains(&Step::StagedCa), "{steps:?}");
        let new_ca = staged.next_ca.clone().unwrap().cert;
        assert_eq!(staged.ca.cert, old_ca);
        assert!(staged.trusted_pem().contains(&old_ca) && staged.trusted_pem().contains(&new_ca));
        assert!(verifies(&staged, &old_ca, t1));
        // Not before the overlap has passed, nor before caBundle has it.
        assert_eq!(at(Some(&staged), None, true, t1 + lt.overlap / 2), None);
        let t2 = t1 + lt.overlap;
        assert_eq!(at(Some(&staged), None, false, t2), None);
        let (promoted, steps) = at(Some(&staged), None, true, t2).unwrap();
        assert_eq!(steps, [Step::PromotedCa]);
        assert_eq!(promoted.ca.cert, new_ca);
        assert_eq!(promoted.previous_ca.as_deref(), Some(old_ca.as_str()));
        assert!(verifies(&promoted, &new_ca, t2));
        assert!(!verifies(&promoted, &old_ca, t2), "issued by the new CA");
        // A replica still serving the old CA's certificate stays trusted.
        assert!(verifies(&staged, &promoted.trusted_pem(), t2));
        let t3 = t2 + lt.overlap;
        let (dropped, steps) = at(Some(&promoted), None, true, t3).unwrap();
        assert_eq!(steps, [Step::DroppedPreviousCa]);
        assert_eq!(
            dropped.trusted_pem().matches("BEGIN CERTIFICATE").count(),
            1
        );
        assert!(dropped.trusted_pem().contains(&new_ca));
        assert_eq!(at(Some(&dropped), None, true, t3 + day(1)), None);
    }

    #[test]
    fn a_new_ca_keeps_the_bundle_it_replaces_trusted_for_one_overlap() {
        let now = SystemTime::now();
        let (old, _) = at(None, None, true, now).unwrap();
        let mut broken = old.clone();
        broken.ca.key = KeyPair::generate().unwrap().serialize_pem();
        let bundle = old.trusted_pem();
        let (made, steps) = at(Some(&broken), Some(&bundle), true, now).unwrap();
        assert_eq!(steps, [Step::Created]);
        assert_ne!(made.ca, old.ca);
        assert!(
            verifies(&old, &made.trusted_pem(), now),
            "the old serving certificate still verifies"
        );
        let (dropped, _) = at(Some(&made), None, true, now + lifetimes().overlap).unwrap();
        assert!(!verifies(&old, &dropped.trusted_pem(), now));
        // Garbage in the old caBundle is not kept.
        let (made, _) = at(None, Some("not pem"), true, now).unwrap();
        assert_eq!(made.previous_ca, None);
    }

    #[test]
    fn unreadable_secret_data_names_the_key() {
        let (made, _) = at(None, None, true, SystemTime::now()).unwrap();
        let mut data = made.to_data();
        data.remove(SERVING_KEY);
        assert_eq!(
            Material::from_data(&data).unwrap_err(),
            "tls.key is missing"
        );
        data.insert(SERVING_KEY.into(), vec![0xff, 0xfe]);
        assert_eq!(
            Material::from_data(&data).unwrap_err(),
            "tls.key is not text"
        );
        let mut data = made.to_data();
        data.insert(STEP_SINCE.into(), b"yesterday".to_vec());
        assert!(Material::from_data(&data)
            .unwrap_err()
            .contains("rotation-step-since"));
    }

    #[test]
    fn lifetimes_that_would_chase_each_other_are_refused() {
        let mut lt = lifetimes();
        lt.check().unwrap();
        lt.serving = day(101);
        assert!(lt.check().unwrap_err().contains("a third of the CA's"));
        lt = lifetimes();
        lt.overlap = day(61);
        assert!(lt.check().unwrap_err().contains("a fifth"));
        lt.overlap = Duration::ZERO;
        assert!(lt.check().is_err());
    }
}
