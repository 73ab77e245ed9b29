//! Routes and handlers. A readable review always gets HTTP 200 and an
//! AdmissionReview; the work itself runs off the reactor behind a
//! semaphore and must finish before the apiserver's `?timeout=`.
use super::health::Readiness;
use super::metrics::{kind_label, Metrics};
use super::shutdown::ShutdownHandle;
use super::Webhook;
use crate::admission::Outcome;
use crate::review::{self, Request, Response};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tracing::field::Empty;
use tracing::Instrument;

/// Largest body read: an UPDATE carries two objects of up to ~1.5 MiB each.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
/// An oversized body is read and discarded up to this size so the client
/// sees the 413 instead of a reset connection; beyond it the connection
/// is simply closed.
const DISCARD_LIMIT_BYTES: usize = 32 * 1024 * 1024;
/// The apiserver's default webhook timeout, used when `?timeout=` is absent.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The apiserver never waits longer than this.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// Shared by every request.
pub(crate) struct AppState {
    pub webhook: Arc<dyn Webhook>,
    pub metrics: Metrics,
    pub permits: Arc<Semaphore>,
    pub shutdown: ShutdownHandle,
    pub readiness: Readiness,
    pub exempt_namespaces: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
    fn as_str(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
        }
    }
}

/// The webhook listener's routes.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// The metrics listener's routes.
pub(crate) fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Arc<AppState>>) -> (StatusCode, &'static str) {
    if !state.shutdown.is_running() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n");
    }
    match state.readiness.not_ready_reason() {
        None => (StatusCode::OK, "ok\n"),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn mutate(
    State(state): State<Arc<AppState>>,
    uri: Uri,
    body: Body,
) -> axum::response::Response {
    review_request(state, Endpoint::Mutate, uri, body).await
}

async fn validate(
    State(state): State<Arc<AppState>>,
    uri: Uri,
    body: Body,
) -> axum::response::Response {
    review_request(state, Endpoint::Validate, uri, body).await
}

async fn review_request(
    state: Arc<AppState>,
    endpoint: Endpoint,
    uri: Uri,
    body: Body,
) -> axum::response::Response {
    let started = Instant::now();
    let budget = answer_budget(uri.query());
    let span = tracing::info_span!(
        "admission",
        endpoint = endpoint.as_str(),
        uid = Empty,
        kind = Empty,
        object = Empty,
        operation = Empty,
    );
    let deadline = tokio::time::Instant::from_std(started) + budget;
    async move {
        let read = tokio::time::timeout_at(deadline, read_body(body, MAX_BODY_BYTES)).await;
        let bytes = match read.unwrap_or(Err(BodyError::Slow)) {
            Ok(bytes) => bytes,
            Err(err) => {
                let status = match err {
                    BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                    BodyError::Slow => StatusCode::REQUEST_TIMEOUT,
                    BodyError::Read(_) => StatusCode::BAD_REQUEST,
                };
                return reject(&state, endpoint, started, status, err.to_string());
            }
        };
        let request = match review::decode(&bytes) {
            Ok(r) => Arc::new(r),
            Err(err) => {
                return reject(
                    &state,
                    endpoint,
                    started,
                    StatusCode::BAD_REQUEST,
                    err.to_string(),
                )
            }
        };
        let span = tracing::Span::current();
        span.record("uid", request.uid.as_str());
        span.record("kind", request.kind.kind.as_str());
        span.record("object", request.display_name());
        span.record("operation", request.operation.as_str());

        let (outcome, decision) = answer(&state, endpoint, &request, deadline, budget).await;
        let elapsed = started.elapsed();
        let kind = kind_label(&request.kind.kind);
        state.metrics.observe_request(
            endpoint.as_str(),
            kind,
            request.operation.as_str(),
            decision,
            elapsed,
        );
        state.metrics.observe_policies(&outcome.evaluations);
        if decision == "patched" {
            state
                .metrics
                .inc_mutations(outcome.profile.as_deref().unwrap_or("none"));
        }
        let policies = outcome
            .evaluations
            .iter()
            .map(|e| format!("{}={}", e.policy, e.result.as_str()))
            .collect::<Vec<_>>()
            .join(",");
        tracing::info!(
            decision,
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            profile = outcome.profile.as_deref().unwrap_or(""),
            policies = policies.as_str(),
            "admission review answered"
        );
        axum::Json(review::encode(&request.uid, &outcome.response)).into_response()
    }
    .instrument(span)
    .await
}

/// Runs the webhook for one request within `budget`; returns the outcome
/// and its decision label.
async fn answer(
    state: &AppState,
    endpoint: Endpoint,
    request: &Arc<Request>,
    deadline: tokio::time::Instant,
    budget: Duration,
) -> (Outcome, &'static str) {
    if let Some(ns) = request.namespace.as_deref() {
        if state.exempt_namespaces.iter().any(|e| e == ns) {
            return (outcome(Response::allow()), "exempt");
        }
    }
    let work = async {
        // The semaphore is never closed, so acquiring only waits.
        let permit = state.permits.clone().acquire_owned().await;
        let webhook = state.webhook.clone();
        let request = request.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            span.in_scope(|| match endpoint {
                Endpoint::Mutate => webhook.mutate(&request),
                Endpoint::Validate => webhook.validate(&request),
            })
        })
        .await
    };
    match tokio::time::timeout_at(deadline, work).await {
        Ok(Ok(outcome)) => {
            let decision = outcome.response.decision();
            (outcome, decision)
        }
        Ok(Err(err)) => {
            tracing::error!("admission handler failed: {err}");
            let response = match endpoint {
                Endpoint::Validate => {
                    let mut r = Response::deny(
                        "gpu-admission: internal error while evaluating policies; see the webhook logs",
                    );
                    r.reason = Some("InternalError".into());
                    r.code = Some(500);
                    r
                }
                Endpoint::Mutate => {
                    let mut r = Response::allow();
                    r.warnings.push(
                        "gpu-admission: internal error during placement; admitted without changes"
                            .into(),
                    );
                    r
                }
            };
            (outcome(response), "error")
        }
        Err(_) => {
            let secs = budget.as_secs_f64();
            tracing::warn!(budget_s = secs, "admission review timed out");
            let response = match endpoint {
                Endpoint::Validate => {
                    let mut r = Response::deny(format!(
                        "gpu-admission: policy evaluation timed out after {secs:.1}s; the request was not evaluated"
                    ));
                    r.reason = Some("Timeout".into());
                    r.code = Some(504);
                    r
                }
                Endpoint::Mutate => {
                    let mut r = Response::allow();
                    r.warnings.push(format!(
                        "gpu-admission: placement timed out after {secs:.1}s; admitted without changes"
                    ));
                    r
                }
            };
            (outcome(response), "timeout")
        }
    }
}

fn outcome(response: Response) -> Outcome {
    Outcome {
        response,
        ..Outcome::default()
    }
}

/// A 400, 408 or 413 with a plain-text message.
fn reject(
    state: &AppState,
    endpoint: Endpoint,
    started: Instant,
    status: StatusCode,
    message: String,
) -> axum::response::Response {
    state.metrics.observe_request(
        endpoint.as_str(),
        "other",
        "other",
        "invalid",
        started.elapsed(),
    );
    tracing::warn!(
        status = status.as_u16(),
        "unreadable admission review: {message}"
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("request body is larger than {} MiB", MAX_BODY_BYTES / (1024 * 1024))]
    TooLarge,
    #[error("request body not received in time")]
    Slow,
    #[error("cannot read request body: {0}")]
    Read(String),
}

async fn read_body(mut body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > limit {
            discard(
                body,
                DISCARD_LIMIT_BYTES.saturating_sub(buf.len() + data.len()),
            )
            .await;
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&data);
    }
    Ok(Bytes::from(buf))
}

async fn discard(mut body: Body, mut remaining: usize) {
    while let Some(Ok(frame)) = body.frame().await {
        let len = frame.data_ref().map_or(0, |d| d.len());
        if len > remaining {
            return;
        }
        remaining -= len;
    }
}

/// How long we have to answer: the apiserver's `?timeout=` (Go duration,
/// default 10s, at most 30s) less a margin for the trip back.
fn answer_budget(query: Option<&str>) -> Duration {
    let timeout = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("timeout="))
        .and_then(parse_duration)
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_TIMEOUT)
        .min(MAX_TIMEOUT);
    let margin = (timeout / 5).min(Duration::from_secs(1));
    timeout - margin
}

/// Parses Go's `time.Duration` text: `10s`, `1m30s`, `1.5s`, `500ms`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m0s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("ten s"), None);
    }

    #[test]
    fn budget_answers_before_the_apiserver_gives_up() {
        assert_eq!(answer_budget(Some("timeout=10s")), Duration::from_secs(9));
        assert_eq!(
            answer_budget(Some("a=b&timeout=1s")),
            Duration::from_millis(800)
        );
        assert_eq!(answer_budget(None), Duration::from_secs(9));
        assert_eq!(answer_budget(Some("timeout=bogus")), Duration::from_secs(9));
        assert_eq!(answer_budget(Some("timeout=5m")), Duration::from_secs(29));
    }

    #[tokio::test]
    async fn body_limit() {
        let small = read_body(Body::from(vec![b'x'; 10]), 10).await.unwrap();
        assert_eq!(small.len(), 10);
        let big = read_body(Body::from(vec![b'x'; 11]), 10).await;
        assert!(matches!(big, Err(BodyError::TooLarge)));
    }
}
