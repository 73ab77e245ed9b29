//! The flags of `serve --manage-certs` and its start: certificates kept by
//! the server itself in a Secret (docs/certificates.md).
use super::flags::{parse_duration, parse_optional_name, OptionalName};
use crate::cluster::certs as managed;
use crate::daemon::{Daemon, Service};
use crate::periodic::LeaseSettings;
use crate::server::tls::CertFeed;
use std::time::Duration;

/// Certificates kept by the server itself (docs/certificates.md).
#[derive(Debug, clap::Args)]
pub struct ManagedCertArgs {
    /// Keep the CA and serving certificate in a Secret in the pod's
    /// namespace: one replica (elected by --cert-lease) creates them,
    /// renews them, rotates the CA and writes it into the caBundle of the
    /// webhook configurations; every replica serves the Secret's
    /// certificate.
    #[arg(long)]
    pub manage_certs: bool,
    /// The Secret holding the certificates and keys.
    #[arg(long, value_name = "NAME", default_value = managed::DEFAULT_SECRET, value_parser = parse_object_name)]
    pub cert_secret: String,
    /// Lease electing the replica that writes the Secret and caBundle, or
    /// `off` when one replica runs.
    #[arg(long, value_name = "NAME", default_value = managed::DEFAULT_LEASE, value_parser = parse_optional_name)]
    pub cert_lease: OptionalName,
    /// The MutatingWebhookConfiguration whose caBundle is kept, or `off`.
    #[arg(long, value_name = "NAME", default_value = managed::DEFAULT_WEBHOOK_CONFIGURATION, value_parser = parse_optional_name)]
    pub mutating_webhook_configuration: OptionalName,
    /// The ValidatingWebhookConfiguration whose caBundle is kept, or `off`.
    #[arg(long, value_name = "NAME", default_value = managed::DEFAULT_WEBHOOK_CONFIGURATION, value_parser = parse_optional_name)]
    pub validating_webhook_configuration: OptionalName,
    /// The Service the apiserver calls: the certificate covers
    /// SERVICE.NAMESPACE.svc and SERVICE.NAMESPACE.svc.cluster.local.
    #[arg(long, value_name = "NAME", default_value = managed::DEFAULT_SERVICE, value_parser = parse_object_name)]
    pub cert_service: String,
    /// Lifetime of each CA; a new one is staged when a third is left.
    #[arg(long, value_name = "DURATION", default_value = "43800h", value_parser = parse_duration)]
    pub ca_lifetime: Duration,
    /// Lifetime of each serving certificate; renewed when a third is left.
    #[arg(long, value_name = "DURATION", default_value = "2160h", value_parser = parse_duration)]
    pub cert_lifetime: Duration,
    /// How long both CAs are trusted before the new one issues the serving
    /// certificate, and again after.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub ca_overlap: Duration,
    /// How often the Secret is read (and kept by the elected replica).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub cert_check_interval: Duration,
}

impl ManagedCertArgs {
    /// The options, if --manage-certs is on.
    pub fn options(&self) -> Option<managed::Options> {
        let ManagedCertArgs {
            manage_certs,
            cert_secret,
            cert_lease,
            mutating_webhook_configuration,
            validating_webhook_configuration,
            cert_service,
            ca_lifetime,
            cert_lifetime,
            ca_overlap,
            cert_check_interval,
        } = self;
        manage_certs.then(|| managed::Options {
            secret: cert_secret.clone(),
            lease: cert_lease.0.clone(),
            mutating_webhook: mutating_webhook_configuration.0.clone(),
            validating_webhook: validating_webhook_configuration.0.clone(),
            service: cert_service.clone(),
            lifetimes: managed::Lifetimes {
                ca: *ca_lifetime,
                serving: *cert_lifetime,
                overlap: *ca_overlap,
            },
            check_interval: *cert_check_interval,
        })
    }
}

/// A Kubernetes object name (a DNS subdomain).
fn parse_object_name(text: &str) -> Result<String, String> {
    match parse_optional_name(text)? {
        OptionalName(Some(name)) => Ok(name),
        OptionalName(None) => Err(format!("{text:?} is not an object name")),
    }
}

/// With `options`, starts keeping the certificates in the cluster of the
/// in-cluster service account (or kubeconfig), and waits for the first
/// serving certificate: what the edge serves.
pub(super) async fn managed_certs(
    options: Option<&managed::Options>,
    daemon: &mut Daemon,
) -> anyhow::Result<Option<CertFeed>> {
    let Some(options) = options else {
        return Ok(None);
    };
    let client = kube::Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("--manage-certs needs a cluster client: {e}"))?;
    let pod = LeaseSettings::from_environment(options.lease.as_deref().unwrap_or(""));
    let settings = options.settings(&pod.namespace, &pod.identity);
    tracing::info!(
        secret = %format!("{}/{}", settings.namespace, settings.options.secret),
        lease = settings.options.lease.as_deref().unwrap_or("off"),
        identity = %settings.identity,
        names = %settings.names.join(","),
        "self-managed certificates: waiting for the serving certificate"
    );
    let certs = managed::ManagedCerts::start(client, settings).await?;
    let feed = certs.serving();
    // Releases the certificate lease, so another replica takes over.
    daemon.start([Service::new("certificates", certs.stop())]);
    Ok(Some(feed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::serve::tests::parse;

    #[test]
    fn managed_certificate_flags() {
        assert_eq!(parse("").unwrap().manage_certs, None, "off by default");
        let options = parse("--manage-certs").unwrap().manage_certs.unwrap();
        assert_eq!(options, managed::Options::default());
        options.lifetimes.check().unwrap();
        let options = parse(
            "--manage-certs --cert-secret webhook-tls --cert-lease off \
            --mutating-webhook-configuration off \
            --validating-webhook-configuration gpu-admission-validate \
            --cert-service webhook --ca-lifetime 8760h --cert-lifetime 720h \
            --ca-overlap 1h --cert-check-interval 10s",
        )
        .unwrap()
        .manage_certs
        .unwrap();
        assert_eq!(options.secret, "webhook-tls");
        assert_eq!(options.lease, None);
        assert_eq!(options.mutating_webhook, None);
        assert_eq!(
            options.validating_webhook.as_deref(),
            Some("gpu-admission-validate")
        );
        assert_eq!(options.lifetimes.serving, Duration::from_secs(720 * 3600));
        assert_eq!(options.check_interval, Duration::from_secs(10));
        let settings = options.settings("platform", "pod-a");
        assert_eq!(
            settings.names,
            ["webhook.platform.svc", "webhook.platform.svc.cluster.local"]
        );
        let err = parse("--manage-certs --tls-cert c.pem --tls-key k.pem").unwrap_err();
        assert!(err.to_string().contains("cannot be used with"), "{err}");
        assert!(parse("--manage-certs --cert-secret Bad_Name").is_err());
    }
}
