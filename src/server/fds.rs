//! File descriptors: the process's soft limit raised to its hard limit at
//! start (as Go programs do), and the connection cap fitted to it.
use anyhow::Context as _;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors kept for everything but webhook connections under the cap:
/// the metrics and probe listeners' connections (with those leaving beyond
/// their caps), webhook connections leaving beyond the cap, and 128 for
/// policy files and watches, the certificate files, the cluster client,
/// logs.
const RESERVED: u64 = 64 + 16 + 16 + 4 + 64 + 128;

/// The webhook connections `wanted` that the descriptor limit allows,
/// after raising the soft limit to the hard one. Logs when it is fewer.
pub(super) fn connections_allowed(wanted: usize) -> anyhow::Result<u32> {
    let soft = raise_soft_limit();
    let allowed = fit(wanted as u64, soft);
    if allowed == 0 {
        anyhow::bail!(
            "the open-file limit ({}) leaves no room for webhook connections; raise it (ulimit -n)",
            soft.unwrap_or(0)
        );
    }
    if allowed < wanted as u64 {
        tracing::warn!(
            max_connections = allowed,
            asked = wanted,
            open_file_limit = soft,
            "--max-connections lowered to what the open-file limit allows"
        );
    }
    u32::try_from(allowed).context("--max-connections")
}

/// Connections that fit `soft` descriptors (none: unlimited).
fn fit(wanted: u64, soft: Option<u64>) -> u64 {
    match soft {
        Some(soft) => wanted.min(soft.saturating_sub(RESERVED)),
        None => wanted,
    }
}

/// Raises the soft open-file limit to the hard one; returns the soft limit
/// in force after (`None`: unlimited).
fn raise_soft_limit() -> Option<u64> {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current != maximum {
        match setrlimit(
            Resource::Nofile,
            Rlimit {
                current: maximum,
                maximum,
            },
        ) {
            Ok(()) => {
                tracing::debug!(from = current, to = maximum, "raised the open-file limit");
                return maximum;
            }
            Err(err) => tracing::warn!("cannot raise the open-file limit: {err}"),
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_everything_else() {
        assert_eq!(fit(1000, Some(1024)), 1024 - RESERVED);
        assert_eq!(fit(1000, Some(65536)), 1000);
        assert_eq!(fit(1000, None), 1000);
        assert_eq!(fit(1000, Some(100)), 0);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let after = raise_soft_limit();
        let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
        assert_eq!(current, maximum);
        assert_eq!(after, current);
    }
}
