//! Flags of the GPU utilization section, shared by `audit` and the
//! periodic report of `serve`.
use crate::audit::utilization::{self, parse_window, sizing, Settings, Source};
use crate::cluster::prometheus::Endpoint;
use std::path::PathBuf;
use std::time::Duration;

/// Where GPU utilization is read from, and what counts as idle.
#[derive(Clone, Debug, clap::Args)]
pub struct PrometheusArgs {
    /// Prometheus query API (http:// or https://; `/api/v1/query` is
    /// appended) holding dcgm-exporter's series: the report then lists the
    /// GPU pods idle over the window. A query that fails or times out
    /// leaves the report without that section, saying why.
    #[arg(long, value_name = "URL", value_parser = parse_url)]
    pub prometheus: Option<String>,
    /// File holding a bearer token for --prometheus (read again for each
    /// query). Without it, no Authorization header is sent.
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub prometheus_token_file: Option<PathBuf>,
    /// Longest wait for Prometheus' answer.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout)]
    pub prometheus_timeout: Duration,
    /// History judged: a pod is idle when its GPUs stay under
    /// --idle-threshold for all of it (PromQL durations: 24h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_window)]
    pub utilization_window: Duration,
    /// Peak GPU use, in percent, under which a pod is idle.
    #[arg(long, value_name = "PERCENT", default_value_t = utilization::DEFAULT_THRESHOLD_PERCENT, value_parser = parse_percent)]
    pub idle_threshold: f64,
    /// Right-sizing grows a pod's peak activity and memory by this share
    /// before fitting them to a MIG profile, a shared GPU or a smaller size.
    #[arg(long, value_name = "PERCENT", default_value_t = sizing::DEFAULT_RULES.headroom_percent, value_parser = parse_percent)]
    pub sizing_headroom: f64,
    /// The share of a GPU one pod gets on a time-sliced GPU: a one-GPU pod
    /// whose grown peaks stay within it (activity, and memory of the GPU's)
    /// could share its GPU.
    #[arg(long, value_name = "PERCENT", default_value_t = sizing::DEFAULT_RULES.shared_percent, value_parser = parse_percent)]
    pub shared_gpu_share: f64,
}

impl PrometheusArgs {
    /// The settings of the section: from `--prometheus`, else from
    /// `recorded` (a file), else none.
    pub fn settings(&self, recorded: Option<&PathBuf>) -> Option<Settings> {
        let source = match (&self.prometheus, recorded) {
            (Some(url), _) => Source::Prometheus(Endpoint {
                url: url.clone(),
                token_file: self.prometheus_token_file.clone(),
                timeout: self.prometheus_timeout,
            }),
            (None, Some(file)) => Source::File(file.clone()),
            (None, None) => return None,
        };
        Some(Settings {
            source,
            window: self.utilization_window,
            threshold_percent: self.idle_threshold,
            sizing: sizing::Rules {
                headroom_percent: self.sizing_headroom,
                shared_percent: self.shared_gpu_share,
            },
        })
    }
}

/// Measures on a runtime of its own (the offline subcommands have none).
pub fn measure(
    settings: &Settings,
    report: &crate::audit::Report,
    catalog: &crate::gpu::catalog::Catalog,
) -> anyhow::Result<utilization::Utilization> {
    let now = std::time::SystemTime::now();
    Ok(crate::offline::block_on(utilization::measure(
        settings, report, catalog, now,
    ))?)
}

/// An http:// or https:// URL with a host, and no query or fragment (the
/// query API's path and parameters are added to it).
fn parse_url(text: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    match (rest, text.parse::<hyper::Uri>()) {
        (Some(rest), Ok(uri))
            if !rest.is_empty()
                && uri.host().is_some()
                && uri.query().is_none()
                && !text.contains('#') =>
        {
            Ok(text.to_string())
        }
        _ => Err(format!(
            "{text:?} is not the URL of a Prometheus (http://HOST[:PORT][/PATH] or https://...)"
        )),
    }
}

fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{text:?} is not a percentage from 0 to 100")),
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    crate::server::parse_duration(text)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{text:?} is not a duration (examples: 30s, 2m)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: PrometheusArgs,
    }

    fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<PrometheusArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("x").chain(args)).map(|c| c.args)
    }

    #[test]
    fn flags_make_the_settings() {
        let none = parse([]).unwrap();
        assert_eq!(none.settings(None), None);
        let file = PathBuf::from("answer.json");
        assert_eq!(
            none.settings(Some(&file)),
            Some(Settings {
                source: Source::File(file.clone()),
                window: utilization::DEFAULT_WINDOW,
                threshold_percent: 5.0,
                sizing: sizing::DEFAULT_RULES,
            })
        );
        let args = parse(
            "--prometheus https://amw.eastus.prometheus.monitor.azure.com \
             --prometheus-token-file /var/run/token --utilization-window 7d \
             --idle-threshold 1% --prometheus-timeout 10s \
             --sizing-headroom 10 --shared-gpu-share 25%"
                .split_whitespace(),
        )
        .unwrap();
        assert_eq!(
            args.settings(Some(&file)),
            Some(Settings {
                source: Source::Prometheus(Endpoint {
                    url: "https://amw.eastus.prometheus.monitor.azure.com".into(),
                    token_file: Some("/var/run/token".into()),
                    timeout: Duration::from_secs(10),
                }),
                window: Duration::from_secs(7 * 86_400),
                threshold_percent: 1.0,
                sizing: sizing::Rules {
                    headroom_percent: 10.0,
                    shared_percent: 25.0,
                },
            }),
            "a live Prometheus wins over a recorded answer"
        );
        assert!(parse(["--idle-threshold", "120"]).is_err());
        assert!(parse(["--shared-gpu-share", "101"]).is_err());
        assert!(parse(["--utilization-window", "10m"]).is_err());
        assert!(
            parse(["--prometheus-token-file", "t"]).is_err(),
            "a token without a URL"
        );
        assert!(parse(["--prometheus-timeout", "0s"]).is_err());
        for bad in [
            "localhost:9090",
            "ftp://x",
            "http://",
            "http://x/?q=1",
            "http://x/#a",
            "http://a b",
        ] {
            let err = parse(["--prometheus", bad]).unwrap_err();
            assert!(
                err.to_string().contains("is not the URL of a Prometheus"),
                "{bad}: {err}"
            );
        }
        assert!(parse([
            "--prometheus",
            "http://prometheus-server.monitoring:80/prom"
        ])
        .is_ok());
    }
}
