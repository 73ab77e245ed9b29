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

pub use crate::certs::managed::*;
use crate::certs::material;
pub use crate::certs::material::{Lifetimes, Material, Pair, Step};
use crate::cluster::lease::{ClusterLease, LeaderElector};
use cluster::{SecretStore, WebhookConfigurations, WriteError};
use std::time::SystemTime;
use tokio::sync::watch;

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
                None => tokio::time::sleep(manager.settings.options.check_interval).await,
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
        let elector = settings.options.lease.as_ref().map(|lease| {
            LeaderElector::new(
                ClusterLease::new(client.clone(), &settings.namespace, lease),
                settings.identity.clone(),
                settings.lease_duration(),
            )
        });
        Manager {
            secret: SecretStore::new(
                client.clone(),
                &settings.namespace,
                &settings.options.secret,
            ),
            webhooks: WebhookConfigurations::new(
                client,
                settings.options.mutating_webhook.as_deref(),
                settings.options.validating_webhook.as_deref(),
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
                _ = tokio::time::sleep(self.settings.options.check_interval) => {}
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
                self.settings.namespace, self.settings.options.secret
            ));
        };
        let material = stored.material.map_err(|why| {
            format!(
                "Secret {}/{} is incomplete ({why}); waiting for the elected replica to fix it",
                self.settings.namespace, self.settings.options.secret
            )
        })?;
        let pair = material.serving.clone();
        self.last = Some(material);
        Ok(pair)
    }

    /// The elected replica: brings the Secret up to date, then caBundle.
    async fn keep(&mut self, now: SystemTime) -> Result<Pair, String> {
        let stored = self.secret.get().await.map_err(|e| self.read_error(e))?;
        let (read, resource_version) = match stored {
            Some(stored) => {
                if let Err(why) = &stored.material {
                    tracing::warn!(secret = %self.settings.options.secret, "the certificate Secret is incomplete ({why}); replacing it");
                }
                (stored.material.ok(), stored.resource_version)
            }
            None => (None, None),
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
            &self.settings.options.lifetimes,
            now,
        )
        .map_err(|e| format!("cannot make certificates: {e}"))?;
        let (target, steps) = match (planned, current) {
            (Some((target, steps)), _) => (target, steps),
            (None, Some(current)) => (current, Vec::new()),
            (None, None) => return Err("no certificates to serve".into()),
        };
        if read.as_ref() != Some(&target) {
            match self.secret.put(&target, resource_version).await {
                Ok(()) => {
                    let what: Vec<&str> = steps.iter().map(|s| s.as_str()).collect();
                    let what = if what.is_empty() {
                        "recreated".to_string()
                    } else {
                        what.join(", ")
                    };
                    tracing::info!(secret = %self.settings.options.secret, change = %what, "certificate Secret written");
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
            self.settings.namespace, self.settings.options.secret
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
    use std::time::Duration;

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
        slow.options.check_interval = Duration::from_secs(300);
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
        never.options.check_interval = Duration::ZERO;
        assert!(never.check().is_err());
    }
}
