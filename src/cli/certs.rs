//! `gpu-admission certs`: a local CA and a serving certificate, and the
//! base64 caBundle that the webhook configurations need.
use crate::certs;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CertsArgs {
    /// Directory for ca.crt, ca.key, tls.crt and tls.key; files already
    /// there are reused while valid.
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub out: PathBuf,
    /// DNS name or IP address the serving certificate covers (repeatable).
    /// Default: localhost, 127.0.0.1 and the in-cluster Service names.
    #[arg(long = "dns", value_name = "NAME")]
    pub dns: Vec<String>,
}

/// Writes the files and prints the caBundle (alone, on stdout) so that
/// `CA_BUNDLE=$(gpu-admission certs ...)` works; notes go to stderr.
pub fn run(args: CertsArgs) -> anyhow::Result<ExitCode> {
    let CertsArgs { out, dns } = args;
    let names = if dns.is_empty() {
        certs::DEFAULT_NAMES.iter().map(|s| s.to_string()).collect()
    } else {
        dns
    };
    let ensured = certs::ensure(&out, &names)?;
    let paths = &ensured.paths;
    eprintln!(
        "{} {}",
        if ensured.created_ca {
            "created CA"
        } else {
            "reused CA"
        },
        paths.ca_cert.display()
    );
    eprintln!(
        "{} serving certificate {} (key {}) for {}",
        if ensured.issued_cert {
            "issued"
        } else {
            "kept"
        },
        paths.cert.display(),
        paths.key.display(),
        names.join(", ")
    );
    eprintln!("caBundle for the webhook configurations:");
    println!("{}", ensured.ca_bundle());
    Ok(ExitCode::SUCCESS)
}
