//! Certificates the server manages itself in the cluster (`serve
//! --manage-certs`), as Gatekeeper's cert-controller and Kyverno do.
//!
//! One replica, elected with a Lease, owns a Secret holding the CA, the
//! serving certificate and, during a CA rotation, the other CA. It creates
//! the Secret (again, if deleted), renews the serving certificate when a
//! third of its lifetime is left, rotates the CA with an overlap in which
//! both CAs are trusted (see [`material`]), and keeps the caBundle of the
//! project's own two webhook configurations equal to the CAs to trust
//! (restoring it when an apply empties it). Every replica, the elected one
//! included, serves the certificate the Secret holds: each check publishes
//! it on [`ManagedCerts::serving`].
pub mod cluster;
pub mod material;

use crate::k8s::lease::{ClusterLease, LeaderElector};
use cluster::{SecretStore, WebhookConfigurations, WriteError};
pub use material::{Lifetimes, Material, Pair, Step};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Where the certificates live and how they are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The server's namespace: the Secret's and the Lease's.
    pub namespace: String,
    /// The Secret holding CA, serving certificate and keys.
    pub secret: String,
    /// The Lease electing the replica that writes; none: this one does.
    pub lease: Option<String>,
    /// This replica's Lease holder identity (its pod name).
    pub identity: String,
    /// The project's MutatingWebhookConfiguration, if its caBundle is kept.
    pub mutating_webhook: Option<String>,
    /// The project's ValidatingWebhookConfiguration, likewise.
    pub validating_webhook: Option<String>,
    /// DNS names (and addresses) the serving certificate covers.
    pub names: Vec<String>,
    pub lifetimes: Lifetimes,
    /// How often the Secret is read (and, by the elected replica, kept).
    pub check_interval: Duration,
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
    pub secret: String,
    pub lease: Option<String>,
    pub mutating_webhook: Option<String>,
    pub validating_webhook: Option<String>,
    /// The Service the apiserver calls, in the pod's namespace.
    pub service: String,
    pub lifetimes: Lifetimes,
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
            namespace: namespace.to_string(),
            secret: self.secret.clone(),
            lease: self.lease.clone(),
            identity: identity.to_string(),
            mutating_webhook: self.mutating_webhook.clone(),
            validating_webhook: self.validating_webhook.clone(),
            names: Settings::service_names(&self.service, namespace),
            lifetimes: self.lifetimes,
            check_interval: self.check_interval,
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
        self.lifetimes.check()?;
        if self.check_interval.is_zero() {
            return Err("the certificate check interval must be longer than zero".into());
        }
        if self.lifetimes.overlap < self.check_interval * 3 {
            return Err(format!(
                "the CA overlap ({}s) must be at least three certificate check intervals ({}s): every replica reads the Secret within it",
                self.lifetimes.overlap.as_secs_f64(),
                self.check_interval.as_secs_f64()
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
    fn lease_duration(&self) -> Duration {
        (self.check_interval * 3).max(Duration::from_secs(15))
    }
}

/// The running manager. Dropping it stops it too (the stop channel
/// closes); [`ManagedCerts::stop`] also waits for the Lease's release.
pub struct ManagedCerts {
    serving: watch::Receiver<Pair>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ManagedCerts {
    /// Starts managing, and returns once a serving certificate is at hand:
    /// from the Secret, or made by this replica when it is elected and
    /// none is usable. Until then it checks again every `check_interval`,
    /// logging why it waits.
    pub async fn start(client: kube::Client, settings: Settings) -> anyhow::Result<ManagedCerts> {
        settings.check().map_err(anyhow::Error::msg)?;
        let mut manager = Manager::new(client, settings);
        let first = loop {
            match manager.check(SystemTime::now()).await {
                Some(pair) => break pair,
                None => tokio::time::sleep(manager.settings.check_interval).await,
            }
        };
        let (publish, serving) = watch::channel(first);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(manager.run(publish, stopped));
        Ok(ManagedCerts {
            serving,
            stop,
            task,
        })
    }

    /// The serving certificate and key to serve; changes when the Secret's do.
    pub fn serving(&self) -> watch::Receiver<Pair> {
        self.serving.clone()
    }

    /// Stops checking and releases the Lease, so another replica takes
    /// over at once.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

struct Manager {
    settings: Settings,
    secret: SecretStore,
    webhooks: WebhookConfigurations,
    elector: Option<LeaderElector<ClusterLease>>,
    /// What this replica last wrote or read: recreates a deleted Secret
    /// with the CA the caBundle already trusts.
    last: Option<Material>,
    /// The last message logged for a failing check, not repeated.
    last_problem: Option<String>,
    leading: bool,
}

impl Manager {
    fn new(client: kube::Client, settings: Settings) -> Manager {
        let elector = settings.lease.as_ref().map(|lease| {
            LeaderElector::new(
                ClusterLease::new(client.clone(), &settings.namespace, lease),
                settings.identity.clone(),
                settings.lease_duration(),
            )
        });
        Manager {
            secret: SecretStore::new(client.clone(), &settings.namespace, &settings.secret),
            webhooks: WebhookConfigurations::new(
                client,
                settings.mutating_webhook.as_deref(),
                settings.validating_webhook.as_deref(),
            ),
            elector,
            settings,
            last: None,
            last_problem: None,
            leading: false,
        }
    }

    async fn run(mut self, publish: watch::Sender<Pair>, mut stopped: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.settings.check_interval) => {}
                _ = stopped.wait_for(|s| *s) => break,
            }
            if let Some(pair) = self.check(SystemTime::now()).await {
                publish.send_if_modified(|current| {
                    let changed = *current != pair;
                    *current = pair;
                    changed
                });
            }
        }
        if let Some(elector) = self.elector.as_mut() {
            if let Err(err) = elector.release(SystemTime::now()).await {
                tracing::warn!(error = %err, "could not release the certificate lease; another replica takes over once it expires");
            }
        }
    }

    /// One check: lead (or not), keep the Secret and caBundle (if
    /// leading), and return the serving pair to serve, if there is one.
    async fn check(&mut self, now: SystemTime) -> Option<Pair> {
        let leading = match self.elector.as_mut() {
            None => true,
            Some(elector) => match elector.try_acquire_or_renew(now).await {
                Ok(leading) => leading,
                Err(err) => {
                    self.problem(format!("cannot read or renew the certificate lease: {err}"));
                    false
                }
            },
        };
        if leading != self.leading {
            self.leading = leading;
            if leading {
                tracing::info!(secret = %self.secret.name(), "this replica now keeps the webhook certificates");
            }
        }
        let outcome = if leading {
            self.keep(now).await
        } else {
            self.follow().await
        };
        match outcome {
            Ok(pair) => {
                self.last_problem = None;
                Some(pair)
            }
            Err(message) => {
                self.problem(message);
                self.last.as_ref().map(|m| m.serving.clone())
            }
        }
    }

    /// A follower serves what the Secret holds.
    async fn follow(&mut self) -> Result<Pair, String> {
        let stored = self.secret.get().await.map_err(|e| self.read_error(e))?;
        let Some(stored) = stored else {
            return Err(format!(
                "waiting for the elected replica to create Secret {}/{}",
                self.settings.namespace, self.settings.secret
            ));
        };
        let material = stored.material.map_err(|why| {
            format!(
                "Secret {}/{} is incomplete ({why}); waiting for the elected replica to fix it",
                self.settings.namespace, self.settings.secret
            )
        })?;
        let pair = material.serving.clone();
        self.last = Some(material);
        Ok(pair)
    }

    /// The elected replica: brings the Secret up to date, then caBundle.
    async fn keep(&mut self, now: SystemTime) -> Result<Pair, String> {
        let stored = self.secret.get().await.map_err(|e| self.read_error(e))?;
        let (read, resource_version, exists) = match stored {
            Some(stored) => {
                if let Err(why) = &stored.material {
                    tracing::warn!(secret = %self.settings.secret, "the certificate Secret is incomplete ({why}); replacing it");
                }
                (stored.material.ok(), stored.resource_version, true)
            }
            None => (None, None, false),
        };
        let current = read.clone().or_else(|| self.last.clone());
        let bundle = self
            .webhooks
            .current_bundle()
            .await
            .map_err(|e| format!("cannot read the webhook configurations: {e}"))?;
        let confirmed = match &current {
            Some(material) => self.trust(material).await?,
            None => false,
        };
        let planned = material::plan(
            current.as_ref(),
            bundle.as_deref(),
            confirmed,
            &self.settings.names,
            &self.settings.lifetimes,
            now,
        )
        .map_err(|e| format!("cannot make certificates: {e}"))?;
        let (target, steps) = match (planned, current) {
            (Some((target, steps)), _) => (target, steps),
            (None, Some(current)) => (current, Vec::new()),
            (None, None) => return Err("no certificates to serve".into()),
        };
        if read.as_ref() != Some(&target) {
            let version = if exists { resource_version } else { None };
            match self.secret.put(&target, version).await {
                Ok(()) => {
                    let what: Vec<&str> = steps.iter().map(|s| s.as_str()).collect();
                    let what = if what.is_empty() {
                        "recreated".to_string()
                    } else {
                        what.join(", ")
                    };
                    tracing::info!(secret = %self.settings.secret, change = %what, "certificate Secret written");
                }
                Err(WriteError::Conflict) => {
                    return Err(
                        "the certificate Secret changed while it was written; checking again"
                            .into(),
                    );
                }
                Err(WriteError::Other(e)) => {
                    return Err(format!("cannot write the certificate Secret: {e}"));
                }
            }
        }
        let pair = target.serving.clone();
        let trusted = target.trusted_pem();
        self.last = Some(target);
        match self.webhooks.ensure(&trusted).await {
            Ok(state) if state.written > 0 => {
                tracing::info!(
                    webhooks = state.written,
                    "caBundle written to the webhook configurations"
                );
            }
            Ok(_) => {}
            Err(err) => return Err(format!("cannot write caBundle: {err}")),
        }
        Ok(pair)
    }

    /// Makes both webhook configurations trust exactly `material`'s CAs;
    /// true if they already did (a rotation step may then go ahead).
    async fn trust(&self, material: &Material) -> Result<bool, String> {
        self.webhooks
            .ensure(&material.trusted_pem())
            .await
            .map(|state| state.confirmed)
            .map_err(|e| format!("cannot write caBundle: {e}"))
    }

    fn read_error(&self, err: kube::Error) -> String {
        format!(
            "cannot read Secret {}/{}: {err}",
            self.settings.namespace, self.settings.secret
        )
    }

    fn problem(&mut self, message: String) {
        if self.last_problem.as_deref() != Some(message.as_str()) {
            tracing::warn!("certificates: {message}");
            self.last_problem = Some(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_work_are_refused_before_anything_is_written() {
        let settings = Options::default().settings("gpu-admission", "pod-a");
        settings.check().unwrap();
        assert_eq!(
            settings.names,
            [
                "gpu-admission.gpu-admission.svc",
                "gpu-admission.gpu-admission.svc.cluster.local"
            ]
        );
        let mut slow = settings.clone();
        slow.check_interval = Duration::from_secs(300);
        assert!(slow
            .check()
            .unwrap_err()
            .contains("three certificate check intervals"));
        let mut nameless = settings.clone();
        nameless.names.clear();
        assert!(nameless.check().unwrap_err().contains("at least one name"));
        let mut bad = settings.clone();
        bad.names = vec!["not a name".into()];
        assert!(bad.check().unwrap_err().contains("not a name"));
        let mut never = settings;
        never.check_interval = Duration::ZERO;
        assert!(never.check().is_err());
    }
}
