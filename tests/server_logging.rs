//! Request logs: one line per review with uid, kind, name, operation,
//! decision, latency and policies, never the object; the request's span
//! reaches the answering thread.

// Tests read fixtures with `Value::pointer`: clippy.toml keeps it out of
// the crate itself, where objects under admission are read per request.
#![allow(clippy::disallowed_methods)]
mod common;

use common::{config, fixture, TestServer};
use gpu_admission::review::{Request, Response};
use gpu_admission::server::{Answer, Endpoint, PolicyResult, Step, Webhook};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Records the span it runs in and denies with one policy evaluation.
#[derive(Default)]
struct SpanRecorder {
    span_names: Mutex<Vec<String>>,
}

impl SpanRecorder {
    fn record(&self) -> Answer {
        let name = tracing::Span::current()
            .metadata()
            .map(|m| m.name().to_string())
            .unwrap_or_default();
        self.span_names.lock().unwrap().push(name);
        Answer {
            response: Response::deny("gpu-limits: container \"train\" asks for 1 GPU"),
            profile: None,
            policies: vec![PolicyResult {
                policy: "gpu-limits".into(),
                result: "deny",
                duration: Duration::from_micros(20),
            }],
        }
    }
}

/// Answers on an answering thread.
impl Webhook for SpanRecorder {
    fn answer(self: Arc<Self>, _: Endpoint, _: &Arc<Request>, _: Instant) -> Step {
        Step::Resume(Box::new(move |_| self.record()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_json_line_per_review_without_the_object() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // The same events in JSON (what is checked field by field) and in the
    // default text format (what `serve` prints unless told otherwise).
    let captured = Captured::default();
    let writer = captured.clone();
    let text_captured = Captured::default();
    let text_writer = text_captured.clone();
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(move || writer.clone()),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || text_writer.clone()),
        )
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .init();

    let webhook = Arc::new(SpanRecorder::default());
    let server = TestServer::start_with(config(), webhook.clone()).await;
    let (_, body) = server
        .post_review("/validate", &fixture("pod-create-gpu.json"))
        .await;
    assert_eq!(body["response"]["allowed"], false);
    // A review whose envelope is sound but whose request is malformed: HTTP
    // 400, logged with the uid it has.
    let malformed = server
        .post_raw(
            "/validate",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
                "request":{"uid":"malformed-1","operation":7}}"#,
        )
        .await;
    assert_eq!(malformed.status, 400);
    server.stop().await;

    assert_eq!(*webhook.span_names.lock().unwrap(), ["admission"]);
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        !text.contains("s3cr3t-value-never-logged") && !text.contains("pytorch"),
        "object content leaked into logs:\n{text}"
    );
    let line: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["fields"]["message"] == "admission review answered")
        .unwrap_or_else(|| panic!("no review line in:\n{text}"));
    // Each span field once in the text line too (recording one twice
    // prints it twice there).
    let text = String::from_utf8(text_captured.0.lock().unwrap().clone()).unwrap();
    let text_line = text
        .lines()
        .find(|l| l.contains("admission review answered"))
        .unwrap_or_else(|| panic!("no review line in:\n{text}"));
    assert_eq!(
        text_line.matches("uid=").count(),
        1,
        "the uid once: {text_line}"
    );
    assert!(
        text_line.contains(" policies=gpu-limits=deny"),
        "the policies' results, unquoted: {text_line}"
    );
    let fields = &line["fields"];
    let span = &line["span"];
    assert_eq!(
        span["uid"], "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11",
        "{line}"
    );
    assert_eq!(span["kind"], "Pod");
    assert_eq!(span["object"], "ml/trainer-0");
    assert_eq!(span["operation"], "CREATE");
    assert_eq!(span["endpoint"], "validate");
    assert_eq!(fields["decision"], "denied");
    assert_eq!(fields["policies"], "gpu-limits=deny");
    assert!(fields["latency_ms"].as_f64().is_some(), "{line}");
    let refused = text
        .lines()
        .find(|l| l.contains("unreadable admission review"))
        .unwrap_or_else(|| panic!("no line for the malformed review in:\n{text}"));
    assert!(
        refused.matches("uid=").count() == 1 && refused.contains("malformed-1"),
        "the uid once: {refused}"
    );
}
