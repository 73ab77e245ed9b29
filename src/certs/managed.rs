//! What the certificates the server manages itself are told (`serve
//! --manage-certs`): where they live, their lifetimes, the flags'
//! defaults. The manager that keeps them in the cluster is
//! `cluster::certs`.
use super::material::Lifetimes;
use std::time::{Duration, SystemTime};

/// Where the certificates live and how they are kept: what `serve
/// --manage-certs` is told, and where the pod runs and who it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub options: Options,
    /// The server's namespace: the Secret's and the Lease's.
    pub namespace: String,
    /// This replica's Lease holder identity (its pod name).
    pub identity: String,
    /// DNS names (and addresses) the serving certificate covers.
    pub names: Vec<String>,
}

/// Defaults of the flags.
pub const DEFAULT_SECRET: &str = "gpu-admission-certs";
pub const DEFAULT_LEASE: &str = "gpu-admission-certs";
pub const DEFAULT_WEBHOOK_CONFIGURATION: &str = "gpu-admission";
pub const DEFAULT_SERVICE: &str = "gpu-admission";
pub const DEFAULT_CA_LIFETIME: Duration = Duration::from_secs(5 * 365 * 86_400);
pub const DEFAULT_CERT_LIFETIME: Duration = Duration::from_secs(90 * 86_400);
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(10 * 60);
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// What `serve --manage-certs` is told; [`Options::settings`] adds where
/// the pod runs and who it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The Secret holding CA, serving certificate and keys.
    pub secret: String,
    /// The Lease electing the replica that writes; none: this one does.
    pub lease: Option<String>,
    /// The project's MutatingWebhookConfiguration, if its caBundle is kept.
    pub mutating_webhook: Option<String>,
    /// The project's ValidatingWebhookConfiguration, likewise.
    pub validating_webhook: Option<String>,
    /// The Service the apiserver calls, in the pod's namespace.
    pub service: String,
    pub lifetimes: Lifetimes,
    /// How often the Secret is read (and, by the elected replica, kept).
    pub check_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            secret: DEFAULT_SECRET.to_string(),
            lease: Some(DEFAULT_LEASE.to_string()),
            mutating_webhook: Some(DEFAULT_WEBHOOK_CONFIGURATION.to_string()),
            validating_webhook: Some(DEFAULT_WEBHOOK_CONFIGURATION.to_string()),
            service: DEFAULT_SERVICE.to_string(),
            lifetimes: Lifetimes {
                ca: DEFAULT_CA_LIFETIME,
                serving: DEFAULT_CERT_LIFETIME,
                overlap: DEFAULT_OVERLAP,
            },
            check_interval: DEFAULT_CHECK_INTERVAL,
        }
    }
}

impl Options {
    /// The settings for a pod named `identity` in `namespace`.
    pub fn settings(&self, namespace: &str, identity: &str) -> Settings {
        Settings {
            options: self.clone(),
            namespace: namespace.to_string(),
            identity: identity.to_string(),
            names: Settings::service_names(&self.service, namespace),
        }
    }
}

impl Settings {
    /// The serving certificate's names for Service `service` in
    /// `namespace`: what the apiserver dials.
    pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
        vec![
            format!("{service}.{namespace}.svc"),
            format!("{service}.{namespace}.svc.cluster.local"),
        ]
    }

    /// Refuses settings that cannot work: lifetimes that would chase each
    /// other, an overlap too short for every replica to read the Secret
    /// within it, names a certificate cannot carry.
    pub fn check(&self) -> Result<(), String> {
        self.options.lifetimes.check()?;
        if self.options.check_interval.is_zero() {
            return Err("the certificate check interval must be longer than zero".into());
        }
        if self.options.lifetimes.overlap < self.options.check_interval * 3 {
            return Err(format!(
                "the CA overlap ({}s) must be at least three certificate check intervals ({}s): every replica reads the Secret within it",
                self.options.lifetimes.overlap.as_secs_f64(),
                self.options.check_interval.as_secs_f64()
            ));
        }
        if self.names.is_empty() {
            return Err("the serving certificate needs at least one name".into());
        }
        crate::certs::serving_params(&self.names, SystemTime::now())
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// How long the Lease stays valid without renewal: a few checks, and
    /// never less than 15 s (client-go's default).
    pub(crate) fn lease_duration(&self) -> Duration {
        (self.options.check_interval * 3).max(Duration::from_secs(15))
    }
}
