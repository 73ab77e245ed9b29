//! Values of `serve`'s flags and their parsers: names or `off`, socket
//! addresses or `off`, durations, sizes, usernames.
use std::net::SocketAddr;
use std::time::Duration;

use crate::server;

/// A username as `request.userInfo.username` spells it: not empty (a
/// request without a user must never pass for Kueue's controller).
pub fn parse_username(text: &str) -> Result<String, String> {
    match text.trim() {
        "" => Err("a username cannot be empty".to_string()),
        name => Ok(name.to_string()),
    }
}

/// On or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// A name, or none (`off`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionalName(pub Option<String>);

pub fn parse_optional_name(text: &str) -> Result<OptionalName, String> {
    match text {
        "off" | "none" => Ok(OptionalName(None)),
        _ if !text.is_empty()
            && text.len() <= 253
            && text
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.') =>
        {
            Ok(OptionalName(Some(text.to_string())))
        }
        _ => Err(format!(
            "{text:?} is not an object name (lower-case letters, digits, '-' and '.') or `off`"
        )),
    }
}

/// At least a minute: each run lists the whole cluster.
pub fn parse_report_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if interval < Duration::from_secs(60) {
        return Err(format!(
            "{text:?} is too short: each run lists the whole cluster; use 1m or more"
        ));
    }
    Ok(interval)
}

/// A socket address, or none (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionalAddr(pub Option<SocketAddr>);

pub fn parse_optional_addr(text: &str) -> Result<OptionalAddr, String> {
    match text {
        "off" | "none" | "" => Ok(OptionalAddr(None)),
        _ => text
            .parse()
            .map(|a| OptionalAddr(Some(a)))
            .map_err(|e| format!("{e} (expected HOST:PORT or `off`)")),
    }
}

/// A byte size, written as a Kubernetes quantity (`128Mi`, `1Gi`, `65536`).
pub fn parse_size(text: &str) -> Result<usize, String> {
    crate::gpu::request::parse_count(text)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{text:?} is not a size (examples: 128Mi, 1Gi, 65536)"))
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    server::parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration (examples: 500ms, 5s, 1m30s)"))
}
