//! Routes and handlers. A readable review always gets HTTP 200 and an
//! AdmissionReview: it is sized before it is decoded and waits for
//! in-flight memory; the webhook starts its answer on the connection's
//! thread, and what it leaves to resume waits for its endpoint's
//! evaluation slot and runs on one of the endpoint's answering threads. It
//! is answered before the apiserver's `?timeout=` whatever happens.
use super::body::{read_body, BodyError, BodyPace, BodyRules, MAX_BODY_BYTES};
use super::budget::{BodyMemory, Client, MemoryPool, Reserved, Slots};
use super::executor::{Executor, RunError};
use super::health::Readiness;
use super::metrics::{kind_label, Metrics};
use super::shutdown::ShutdownHandle;
use super::webhook::{Answer, Endpoint, Hints, PolicyResult, Step, Webhook};
use super::OnError;
use crate::review::{self, Request, Response};
use axum::extract::{Request as HttpRequest, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::field::Empty;
use tracing::Instrument;

/// The apiserver's default webhook timeout, used when `?timeout=` is absent.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The apiserver never waits longer than this.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// Shared by every request.
pub(crate) struct AppState {
    pub webhook: Arc<dyn Webhook>,
    /// The webhook's, read once at start.
    pub hints: Hints,
    pub metrics: Metrics,
    /// Memory for bodies being read.
    pub bodies: BodyMemory,
    /// The pace a body must arrive at.
    pub body_pace: BodyPace,
    /// Memory for decoded requests, until their answer is sent.
    pub decoded: MemoryPool,
    pub mutate_slots: Slots,
    pub validate_slots: Slots,
    /// Threads that run `/mutate`'s webhook calls, one per mutate slot.
    pub mutate_threads: Executor,
    /// Threads that run `/validate`'s webhook calls, one per validate slot.
    pub validate_threads: Executor,
    pub limits: review::Limits,
    pub mutate_on_error: OnError,
    pub shutdown: ShutdownHandle,
    pub readiness: Readiness,
    pub exempt_namespaces: Vec<String>,
}

/// `/healthz` and `/readyz`, served on every listener.
fn probes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// The webhook listener's routes.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    probes()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .with_state(state)
}

/// The probe listener's routes: the kubelet's, and nothing else.
pub(crate) fn health_router(state: Arc<AppState>) -> Router {
    probes().with_state(state)
}

/// The metrics listener's routes; `/report` serves the periodic audit's latest
/// report, or answers 404 without one.
pub(crate) fn metrics_router(
    state: Arc<AppState>,
    report: Option<Arc<dyn super::ReportPages>>,
) -> Router {
    probes()
        .route("/metrics", get(metrics))
        .with_state(state)
        .merge(super::report::router(report))
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Arc<AppState>>) -> (StatusCode, Cow<'static, str>) {
    if !state.shutdown.is_running() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into());
    }
    match state.readiness.not_ready_reason() {
        None => (StatusCode::OK, "ok\n".into()),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason.into()),
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
    request: HttpRequest,
) -> axum::response::Response {
    review_request(state, Endpoint::Mutate, request).await
}

async fn validate(
    State(state): State<Arc<AppState>>,
    request: HttpRequest,
) -> axum::response::Response {
    review_request(state, Endpoint::Validate, request).await
}

/// The declared body length, if the client sent one.
fn content_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Whether the client waits for `100 Continue` before sending the body.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
}

async fn review_request(
    state: Arc<AppState>,
    endpoint: Endpoint,
    request: HttpRequest,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let uri: Uri = parts.uri;
    let declared = content_length(&parts.headers);
    let expects_continue = expects_continue(&parts.headers);
    // Set by the connection; a router called directly has none.
    let client = parts
        .extensions
        .get::<Client>()
        .cloned()
        .unwrap_or_else(Client::unknown);
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
        let rules = BodyRules {
            memory: &state.bodies,
            client: &client,
            validate: endpoint == Endpoint::Validate,
            limit: MAX_BODY_BYTES,
            pace: state.body_pace,
            deadline,
        };
        let (bytes, body_memory) = match read_body(body, declared, expects_continue, rules).await {
            Ok(read) => read,
            Err(err) => {
                let (status, shed) = match &err {
                    BodyError::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, None),
                    BodyError::Slow | BodyError::BelowPace(_) => {
                        (StatusCode::REQUEST_TIMEOUT, Some("body_timeout"))
                    }
                    BodyError::NoMemory(short) if short.is_clients() => {
                        (StatusCode::TOO_MANY_REQUESTS, Some("client_share"))
                    }
                    BodyError::NoMemory(_) => {
                        (StatusCode::SERVICE_UNAVAILABLE, Some("body_memory"))
                    }
                    BodyError::Read(_) => (StatusCode::BAD_REQUEST, None),
                };
                if let Some(reason) = shed {
                    state.metrics.inc_rejections(endpoint.as_str(), reason);
                }
                return reject(&state, endpoint, started, status, err.to_string(), &client);
            }
        };
        let admitted = admit(&state, endpoint, &bytes, deadline, budget).await;
        // The decoded request owns its data: the body's memory goes back now.
        drop((bytes, body_memory));
        let (request, memory) = match admitted {
            Ok(admitted) => admitted,
            Err(Refusal::Unreadable(message)) => {
                return reject(
                    &state,
                    endpoint,
                    started,
                    StatusCode::BAD_REQUEST,
                    message,
                    &client,
                )
            }
            Err(Refusal::Answered {
                uid,
                response,
                decision,
            }) => {
                observe_unread(&state, endpoint, decision, started);
                tracing::warn!(
                    decision,
                    latency_ms = started.elapsed().as_secs_f64() * 1000.0,
                    "admission review answered without evaluation: {}",
                    response.message.as_deref().unwrap_or("")
                );
                return answer_review(&uid, &response);
            }
        };
        // `uid` was recorded when the review was decoded: recording a
        // field twice would print it twice.
        let span = tracing::Span::current();
        span.record("kind", request.kind.kind.as_str());
        span.record("object", request.display_name());
        span.record("operation", request.operation.as_str());

        let (answer, decision) = answer(&state, endpoint, &request, memory, deadline, budget).await;
        let elapsed = started.elapsed();
        let kind = kind_label(state.hints.metric_kinds, &request.kind.kind);
        state.metrics.observe_request(
            endpoint.as_str(),
            kind,
            request.operation.as_str(),
            decision,
            elapsed,
        );
        state.metrics.observe_policies(&answer.policies);
        if decision == "patched" {
            state
                .metrics
                .inc_mutations(answer.profile.as_deref().unwrap_or("none"));
        }
        // What someone will read (denials, warnings, errors, slow reviews)
        // at INFO; an allowed review, the common case, at DEBUG.
        macro_rules! review_line {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    decision,
                    latency_ms = elapsed.as_secs_f64() * 1000.0,
                    profile = answer.profile.as_deref().unwrap_or(""),
                    policies = %PolicyResults(&answer.policies),
                    "admission review answered"
                )
            };
        }
        if worth_reading(decision, &answer.response, elapsed) {
            review_line!(tracing::Level::INFO);
        } else {
            review_line!(tracing::Level::DEBUG);
        }
        answer_review(&request.uid, &answer.response)
    }
    .instrument(span)
    .await
}

/// A review that took this long is logged at INFO whatever it decided.
pub const SLOW_REVIEW: Duration = Duration::from_millis(100);

/// Whether a review's log line is for people (INFO): it was denied or
/// failed, warned the requester, or was slow. Allowed and patched reviews
/// that warn nobody are DEBUG.
fn worth_reading(decision: &str, response: &Response, elapsed: Duration) -> bool {
    !matches!(decision, "allowed" | "patched")
        || !response.warnings.is_empty()
        || elapsed >= SLOW_REVIEW
}

/// The HTTP answer carrying the review's answer.
fn answer_review(uid: &str, response: &Response) -> axum::response::Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        review::encode_json(uid, response),
    )
        .into_response()
}

/// `policy=result,...` for the request log line, formatted only when the
/// line is written.
struct PolicyResults<'a>(&'a [PolicyResult]);

impl std::fmt::Display for PolicyResults<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Pieces written as they are: `write!` would run the formatting
        // machinery for each of the ten or twenty entries of a line.
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&e.policy)?;
            f.write_str("=")?;
            f.write_str(e.result)?;
        }
        Ok(())
    }
}

/// Why a body did not become a request to evaluate.
enum Refusal {
    /// Not an AdmissionReview at all: HTTP 400.
    Unreadable(String),
    /// A review refused without evaluation, answered as a review.
    Answered {
        uid: String,
        response: Response,
        decision: &'static str,
    },
}

/// Sizes the review in `bytes` and decodes it once the memory it needs is
/// reserved (waiting for it within the deadline). What is too large to
/// decode is denied without building any of it. A review that is sized and
/// decoded is read twice (its shape, then its values); only a refused one
/// is also opened on its own, for the uid its answer echoes.
async fn admit(
    state: &AppState,
    endpoint: Endpoint,
    bytes: &[u8],
    deadline: tokio::time::Instant,
    budget: Duration,
) -> Result<(Arc<Request>, Reserved), Refusal> {
    // The uid of a review refused before it is decoded; a body that is no
    // review at all is refused as unreadable instead.
    let uid_of = |bytes: &[u8]| -> Result<String, String> {
        let envelope = review::open(bytes).map_err(|e| e.to_string())?;
        tracing::Span::current().record("uid", envelope.uid.as_str());
        Ok(envelope.uid)
    };
    let too_large = |uid: String, reason: String| {
        state.metrics.inc_rejections(endpoint.as_str(), "too_large");
        let mut response = Response::deny(format!(
            "gpu-admission: the object is too large to evaluate: {reason}"
        ));
        response.reason = Some("RequestEntityTooLarge".into());
        response.code = Some(413);
        Refusal::Answered {
            uid,
            response,
            decision: "too_large",
        }
    };
    let shape = match review::measure_request(bytes, &state.limits) {
        Ok(shape) => shape,
        Err(e) => {
            return Err(too_large(
                uid_of(bytes).map_err(Refusal::Unreadable)?,
                e.to_string(),
            ))
        }
    };
    let waiting = Instant::now();
    let memory = match tokio::time::timeout_at(
        deadline,
        state
            .decoded
            .reserve_for(shape.decoded_bytes, endpoint == Endpoint::Validate),
    )
    .await
    {
        Ok(Ok(memory)) => memory,
        Ok(Err(e)) => {
            return Err(too_large(
                uid_of(bytes).map_err(Refusal::Unreadable)?,
                e.to_string(),
            ))
        }
        Err(_) => {
            let uid = uid_of(bytes).map_err(Refusal::Unreadable)?;
            state
                .metrics
                .inc_rejections(endpoint.as_str(), "memory_wait");
            return Err(Refusal::Answered {
                uid,
                response: unanswered(state, endpoint, Unanswered::Timeout(budget)),
                decision: "timeout",
            });
        }
    };
    state
        .metrics
        .observe_queue_wait(endpoint.as_str(), "memory", waiting.elapsed());
    let request = match review::decode_review(bytes) {
        Ok(request) => request,
        // Readable but impossible to judge: denied with its uid, so that
        // no failurePolicy (`Ignore` included) can admit it.
        Err(e @ review::DecodeError::NotAnObject { .. }) => {
            let review::DecodeError::NotAnObject { uid, .. } = &e else {
                unreachable!()
            };
            tracing::Span::current().record("uid", uid.as_str());
            let mut response = Response::deny(format!("gpu-admission: {e}"));
            response.reason = Some("BadRequest".into());
            response.code = Some(400);
            return Err(Refusal::Answered {
                uid: uid.clone(),
                response,
                decision: "invalid",
            });
        }
        Err(e) => {
            // A review whose request is malformed is still logged with its
            // uid when it has one.
            let _ = uid_of(bytes);
            return Err(Refusal::Unreadable(e.to_string()));
        }
    };
    tracing::Span::current().record("uid", request.uid.as_str());
    Ok((Arc::new(request), memory))
}

/// Answers one request within `budget`, and says its decision label: the
/// webhook starts on this thread, within its slice; what it leaves to
/// resume waits for an evaluation slot and runs on an answering thread,
/// which holds the slot and the request's memory until it ends (the
/// deadline also ends it).
async fn answer(
    state: &AppState,
    endpoint: Endpoint,
    request: &Arc<Request>,
    memory: Reserved,
    deadline: tokio::time::Instant,
    budget: Duration,
) -> (Answer, &'static str) {
    if let Some(ns) = request.namespace.as_deref() {
        if state.exempt_namespaces.iter().any(|e| e == ns) {
            return (Response::allow().into(), "exempt");
        }
    }
    let slice_end = slice_end(&state.hints, deadline.into_std());
    let webhook = state.webhook.clone();
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        webhook.answer(endpoint, request, slice_end)
    }));
    let resume = match started {
        Ok(Step::Done(answer)) if tokio::time::Instant::now() <= deadline => {
            let decision = answer.response.decision();
            return (answer, decision);
        }
        Ok(Step::Done(_)) => return timed_out(state, endpoint, budget),
        Ok(Step::Resume(resume)) => resume,
        Err(_) => {
            tracing::error!("admission handler failed: the webhook panicked");
            return failed(state, endpoint);
        }
    };
    let (slots, threads) = match endpoint {
        Endpoint::Mutate => (&state.mutate_slots, &state.mutate_threads),
        Endpoint::Validate => (&state.validate_slots, &state.validate_threads),
    };
    let waiting = Instant::now();
    let Ok(slot) = tokio::time::timeout_at(deadline, slots.acquire()).await else {
        state.metrics.inc_rejections(endpoint.as_str(), "slot_wait");
        let response = unanswered(state, endpoint, Unanswered::Timeout(budget));
        return (response.into(), "timeout");
    };
    state
        .metrics
        .observe_queue_wait(endpoint.as_str(), "slot", waiting.elapsed());
    let span = tracing::Span::current();
    let until = deadline.into_std();
    let run = threads.run(move || {
        let _held = (slot, memory);
        span.in_scope(|| resume(until))
    });
    match tokio::time::timeout_at(deadline, run).await {
        Ok(Ok(answer)) => {
            let decision = answer.response.decision();
            (answer, decision)
        }
        Ok(Err(err @ RunError::Overloaded(_))) => {
            tracing::warn!("admission review refused: {err}");
            state
                .metrics
                .inc_rejections(endpoint.as_str(), "overloaded");
            let response = unanswered(state, endpoint, Unanswered::Overloaded);
            (response.into(), "overloaded")
        }
        Ok(Err(err @ RunError::Panicked(_))) => {
            tracing::error!("admission handler failed: {err}");
            failed(state, endpoint)
        }
        Err(_) => {
            tracing::warn!(
                budget_s = budget.as_secs_f64(),
                "admission review timed out"
            );
            timed_out(state, endpoint, budget)
        }
    }
}

/// Until when the webhook may work on this thread: its slice when it asks
/// for one and this thread has the stack it needs, else now. Answering
/// there saves the two thread wake-ups of a hand-off, most of a cheap
/// request's latency.
fn slice_end(hints: &Hints, deadline: Instant) -> Instant {
    let now = Instant::now();
    if hints.inline_slice.is_zero() || !stack_free_at_least(hints.stack) {
        return now;
    }
    (now + hints.inline_slice).min(deadline)
}

/// Whether the calling thread has `bytes` of stack left, less a margin for
/// the frames already on it (the server's own, a few KiB). Unknown: no.
fn stack_free_at_least(bytes: usize) -> bool {
    const MARGIN: usize = 1 << 20;
    stacker::remaining_stack().is_some_and(|left| left + MARGIN >= bytes)
}

/// The answer for a request whose deadline passed before its answer.
fn timed_out(state: &AppState, endpoint: Endpoint, budget: Duration) -> (Answer, &'static str) {
    state.metrics.inc_rejections(endpoint.as_str(), "deadline");
    let response = unanswered(state, endpoint, Unanswered::Timeout(budget));
    (response.into(), "timeout")
}

/// The answer for a request whose webhook call panicked.
fn failed(state: &AppState, endpoint: Endpoint) -> (Answer, &'static str) {
    state.metrics.inc_rejections(endpoint.as_str(), "error");
    let response = unanswered(state, endpoint, Unanswered::Error);
    (response.into(), "error")
}

/// Why a request got no answer from the webhook itself.
#[derive(Clone, Copy)]
enum Unanswered {
    Timeout(Duration),
    Error,
    /// The answering threads and their queue were all taken.
    Overloaded,
}

/// The answer for a request that could not be evaluated. `/validate`
/// always denies; `/mutate` denies too unless `--mutate-on-error allow`,
/// since admitting a GPU pod unplaced leaves it unschedulable. Both say the
/// request can be retried.
fn unanswered(state: &AppState, endpoint: Endpoint, why: Unanswered) -> Response {
    let (what, reason, code) = match why {
        Unanswered::Timeout(budget) => (
            format!("timed out after {:.1}s", budget.as_secs_f64()),
            "Timeout",
            504,
        ),
        Unanswered::Error => (
            "failed with an internal error (see the webhook logs)".to_string(),
            "InternalError",
            500,
        ),
        Unanswered::Overloaded => (
            "could not start: the webhook is overloaded".to_string(),
            "TooManyRequests",
            429,
        ),
    };
    let mut response = match (endpoint, state.mutate_on_error) {
        (Endpoint::Validate, _) => Response::deny(format!(
            "gpu-admission: policy evaluation {what}; the request was not evaluated and can be retried"
        )),
        (Endpoint::Mutate, OnError::Deny) => Response::deny(format!(
            "gpu-admission could not place this object: placement {what}; nothing was admitted and the request can be retried"
        )),
        (Endpoint::Mutate, OnError::Allow) => {
            let mut allowed = Response::allow();
            allowed.warnings.push(format!(
                "gpu-admission: placement {what}; admitted without changes"
            ));
            return allowed;
        }
    };
    response.reason = Some(reason.into());
    response.code = Some(code);
    response
}

/// Counts a request answered without being read: its kind and
/// operation are `other`.
fn observe_unread(state: &AppState, endpoint: Endpoint, decision: &'static str, started: Instant) {
    let elapsed = started.elapsed();
    (state.metrics).observe_request(endpoint.as_str(), "other", "other", decision, elapsed);
}

/// A 400, 408, 413, 429 or 503 with a plain-text message.
fn reject(
    state: &AppState,
    endpoint: Endpoint,
    started: Instant,
    status: StatusCode,
    message: String,
    client: &Client,
) -> axum::response::Response {
    let decision = match status {
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => "overloaded",
        _ => "invalid",
    };
    observe_unread(state, endpoint, decision, started);
    if decision == "invalid" {
        tracing::warn!(
            status = status.as_u16(),
            "unreadable admission review: {message}"
        );
    } else {
        // Refused for how it was sent: who sent it says whether it is
        // the apiserver or someone else on the port.
        tracing::warn!(
            status = status.as_u16(),
            client = %client.address,
            "admission review refused before it was read: {message}"
        );
    }
    super::report::text(status, format!("{message}\n"))
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
    use crate::review::Operation;
    use serde_json::json;

    #[test]
    fn only_reviews_worth_reading_are_logged_at_info() {
        let quick = Duration::from_millis(2);
        let allowed = Response::allow();
        assert!(!worth_reading("allowed", &allowed, quick));
        assert!(!worth_reading("patched", &allowed, quick));
        assert!(worth_reading("allowed", &allowed, SLOW_REVIEW));
        let mut warned = Response::allow();
        warned
            .warnings
            .push("gpu-requests: no memory request".into());
        assert!(worth_reading("allowed", &warned, quick));
        let denied = Response::deny("gpu-limits: asks for 9 GPUs");
        assert!(worth_reading("denied", &denied, quick));
        for refused in ["error", "timeout", "overloaded", "invalid"] {
            assert!(worth_reading(refused, &denied, quick), "{refused}");
        }
    }

    /// Allows everything, on an answering thread.
    struct AllowAll;

    impl Webhook for AllowAll {
        fn answer(self: Arc<Self>, _: Endpoint, _: &Arc<Request>, _: Instant) -> Step {
            Step::Resume(Box::new(|_| Response::allow().into()))
        }
    }

    /// Shared state whose endpoints each have one answering thread and a
    /// queue of one.
    fn one_thread_each() -> AppState {
        let metrics = Metrics::new();
        let threads = |name| Executor::new(name, 1, 1, crate::server::DEFAULT_STACK).unwrap();
        AppState {
            webhook: Arc::new(AllowAll),
            hints: Hints::default(),
            bodies: BodyMemory::new(
                crate::server::budget::BodyShares::of(1 << 20, 1 << 20),
                metrics.clone(),
            ),
            body_pace: BodyPace::default(),
            decoded: MemoryPool::new("decoded", 1 << 20, metrics.clone()),
            mutate_slots: Slots::new("mutate", 10, metrics.clone()),
            validate_slots: Slots::new("validate", 10, metrics.clone()),
            mutate_threads: threads("mutate"),
            validate_threads: threads("validate"),
            limits: review::Limits::default(),
            mutate_on_error: OnError::Deny,
            metrics,
            shutdown: ShutdownHandle::new(),
            readiness: Readiness::ready(),
            exempt_namespaces: Vec::new(),
        }
    }

    /// A pod CREATE with an hour to answer it, through [`answer`].
    async fn answer_once(state: &AppState, endpoint: Endpoint) -> (Answer, &'static str) {
        let request = Arc::new(Request::for_object(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            Operation::Create,
            Some("ml"),
        ));
        let budget = Duration::from_secs(3600);
        let deadline = tokio::time::Instant::now() + budget;
        let memory = state.decoded.reserve(1024).await.unwrap();
        answer(state, endpoint, &request, memory, deadline, budget).await
    }

    #[tokio::test]
    async fn a_review_finding_every_thread_and_queue_place_taken_is_answered_at_once() {
        let state = one_thread_each();
        for (endpoint, threads) in [
            (Endpoint::Validate, &state.validate_threads),
            (Endpoint::Mutate, &state.mutate_threads),
        ] {
            // The endpoint's thread is busy and its queue full.
            let (release, answers) = crate::server::executor::tests::fill(threads, ((), ()));

            let (got, decision) = answer_once(&state, endpoint).await;
            assert_eq!(decision, "overloaded", "{endpoint:?}");
            assert!(!got.response.allowed);
            assert_eq!(got.response.code, Some(429));
            assert_eq!(got.response.reason.as_deref(), Some("TooManyRequests"));
            assert_eq!(state.decoded.in_use(), 0, "the memory went back");

            release.send(()).unwrap();
            assert!(matches!(answers.await, (Ok(()), Ok(()))));
            let (got, decision) = answer_once(&state, endpoint).await;
            assert_eq!(decision, "allowed", "room again");
            assert!(got.response.allowed);
        }
        assert!(state.metrics.encode().contains(
            r#"gpu_admission_rejected_requests_total{endpoint="validate",reason="overloaded"} 1"#
        ));
    }

    /// Answers on the connection's thread, and panics there on `/mutate`.
    struct PanicsInline;

    impl Webhook for PanicsInline {
        fn answer(self: Arc<Self>, endpoint: Endpoint, _: &Arc<Request>, _: Instant) -> Step {
            match endpoint {
                Endpoint::Mutate => panic!("placement bug"),
                Endpoint::Validate => Step::Done(Response::allow().into()),
            }
        }
    }

    #[tokio::test]
    async fn an_inline_mutate_that_panics_gets_the_error_answer_and_frees_its_memory() {
        let mut state = one_thread_each();
        state.webhook = Arc::new(PanicsInline);
        let (got, decision) = answer_once(&state, Endpoint::Mutate).await;
        assert_eq!(decision, "error");
        assert!(
            !got.response.allowed,
            "denied, retryable: never admitted unplaced"
        );
        assert_eq!(got.response.code, Some(500));
        assert_eq!(state.decoded.in_use(), 0, "the memory went back");
        // The thread it panicked on still answers.
        let (got, decision) = answer_once(&state, Endpoint::Validate).await;
        assert_eq!(decision, "allowed");
        assert!(got.response.allowed);
    }

    /// `/validate` that may run on the connection's thread: answers there
    /// when given a slice (if `quick`), else leaves it to an answering
    /// thread; records which thread ran each part, and whether the first
    /// was given a slice.
    struct InlineValidate {
        quick: bool,
        panics: bool,
        stack: usize,
        ran_on: std::sync::Mutex<Vec<(&'static str, Option<String>)>>,
    }

    impl InlineValidate {
        fn new(quick: bool, panics: bool, stack: usize) -> InlineValidate {
            InlineValidate {
                quick,
                panics,
                stack,
                ran_on: std::sync::Mutex::new(Vec::new()),
            }
        }

        fn record(&self, call: &'static str) {
            let thread = std::thread::current().name().map(str::to_string);
            self.ran_on.lock().unwrap().push((call, thread));
        }
    }

    impl Webhook for InlineValidate {
        fn hints(&self) -> Hints {
            Hints {
                stack: self.stack,
                inline_slice: Duration::from_millis(50),
                ..Hints::default()
            }
        }

        fn answer(self: Arc<Self>, _: Endpoint, _: &Arc<Request>, slice_end: Instant) -> Step {
            let sliced = slice_end > Instant::now();
            self.record(if sliced { "sliced" } else { "no slice" });
            assert!(
                slice_end <= Instant::now() + Duration::from_millis(50),
                "never more than the slice"
            );
            if self.panics {
                panic!("policy engine bug");
            }
            if self.quick && sliced {
                return Step::Done(Response::deny("inline").into());
            }
            Step::Resume(Box::new(move |_| {
                self.record("resumed");
                Response::deny("from an answering thread").into()
            }))
        }
    }

    /// Runs `f` on a current-thread runtime whose thread has `stack` bytes
    /// of stack and is named `connection`.
    fn on_connection_thread<F>(stack: usize, f: impl FnOnce() -> F + Send + 'static)
    where
        F: std::future::Future<Output = ()>,
    {
        std::thread::Builder::new()
            .name("connection".into())
            .stack_size(stack)
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(f())
            })
            .unwrap()
            .join()
            .expect("the test passed");
    }

    const BIG: usize = 16 << 20;

    fn state_with(webhook: Arc<InlineValidate>, stack: usize) -> AppState {
        let mut state = one_thread_each();
        state.validate_threads = Executor::new("validate", 1, 1, stack).unwrap();
        state.hints = webhook.hints();
        state.webhook = webhook;
        state
    }

    #[test]
    fn a_validate_done_within_the_slice_is_answered_on_the_connections_thread() {
        let webhook = Arc::new(InlineValidate::new(true, false, BIG));
        let seen = webhook.clone();
        on_connection_thread(BIG + (2 << 20), move || async move {
            let state = state_with(webhook, BIG);
            let (got, decision) = answer_once(&state, Endpoint::Validate).await;
            assert_eq!(decision, "denied");
            assert_eq!(got.response.message.as_deref(), Some("inline"));
            assert_eq!(state.decoded.in_use(), 0, "the memory went back");
            assert_eq!(state.validate_slots.free(), 10, "the slot went back");
        });
        let ran_on = seen.ran_on.lock().unwrap().clone();
        assert_eq!(ran_on, vec![("sliced", Some("connection".to_string()))]);
    }

    /// A validate on a connection thread of `stack` bytes, whose webhook
    /// is done within the slice when `done_inline`, is answered by the
    /// answering thread, after `first` ran on the connection's.
    fn answered_on_an_answering_thread(done_inline: bool, stack: usize, first: &'static str) {
        let webhook = Arc::new(InlineValidate::new(done_inline, false, BIG));
        let seen = webhook.clone();
        on_connection_thread(stack, move || async move {
            let state = state_with(webhook, BIG);
            let (got, _) = answer_once(&state, Endpoint::Validate).await;
            assert_eq!(
                got.response.message.as_deref(),
                Some("from an answering thread")
            );
        });
        let ran_on = seen.ran_on.lock().unwrap().clone();
        assert_eq!(
            ran_on,
            vec![
                (first, Some("connection".to_string())),
                ("resumed", Some("validate-0".to_string())),
            ]
        );
    }

    #[test]
    fn a_validate_not_done_within_the_slice_goes_to_an_answering_thread() {
        answered_on_an_answering_thread(false, BIG + (2 << 20), "sliced");
    }

    #[test]
    fn a_thread_without_the_evaluation_stack_never_validates_inline() {
        answered_on_an_answering_thread(true, 2 << 20, "no slice");
    }

    #[test]
    fn an_inline_validate_that_panics_gets_the_error_answer_and_frees_its_memory() {
        let webhook = Arc::new(InlineValidate::new(true, true, BIG));
        on_connection_thread(BIG + (2 << 20), move || async move {
            let state = state_with(webhook, BIG);
            let (got, decision) = answer_once(&state, Endpoint::Validate).await;
            assert_eq!(decision, "error");
            assert!(!got.response.allowed);
            assert_eq!(got.response.code, Some(500));
            assert_eq!(state.decoded.in_use(), 0, "the memory went back");
            assert_eq!(state.validate_slots.free(), 10, "the slot went back");
        });
    }

    #[test]
    fn the_log_line_lists_each_policy_with_its_result() {
        let evaluation = |policy: &str, result| PolicyResult {
            policy: policy.into(),
            result,
            duration: Duration::from_micros(3),
        };
        assert_eq!(PolicyResults(&[]).to_string(), "");
        assert_eq!(
            PolicyResults(&[
                evaluation("gpu-a", "pass"),
                evaluation("gpu-b", "deny"),
                evaluation("gpu-c", "error")
            ])
            .to_string(),
            "gpu-a=pass,gpu-b=deny,gpu-c=error"
        );
    }

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
}
