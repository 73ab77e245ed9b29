//! `GET /report` on the metrics listener: the latest periodic report, as
//! whoever produces it rendered it. The edge only picks the format and
//! maps "no report" to a status; what a report says is not its business.
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// The format asked for with `?format=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    /// The page people read (the default).
    Page,
    /// The machine-readable report.
    Json,
}

/// What the provider has for a format.
#[derive(Clone, Debug)]
pub enum ReportAnswer {
    Ready {
        content_type: &'static str,
        body: Bytes,
    },
    /// No report to serve yet, and why (sent as a 503 with this text).
    NotYet(String),
}

/// Provides the latest report body; called on the reactor, so it must
/// only hand over what is already rendered.
pub trait ReportPages: Send + Sync + 'static {
    fn latest(&self, format: ReportFormat) -> ReportAnswer;
}

/// The `/report` route; with no provider it answers 404, saying how to
/// turn the report on.
pub(crate) fn router(pages: Option<Arc<dyn ReportPages>>) -> Router {
    Router::new()
        .route("/report", get(report))
        .with_state(pages)
}

async fn report(State(pages): State<Option<Arc<dyn ReportPages>>>, uri: Uri) -> Response {
    let Some(pages) = pages else {
        return text(
            StatusCode::NOT_FOUND,
            "the periodic report is off: start serve with --report-interval (the deploy/overlays/report overlay does)\n"
                .to_string(),
        );
    };
    let format = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == "format")
        .map(|(_, value)| value);
    let format = match format {
        None | Some("html" | "page") => ReportFormat::Page,
        Some("json") => ReportFormat::Json,
        Some(other) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("unknown report format {other:?}: use format=html or format=json\n"),
            )
        }
    };
    match pages.latest(format) {
        ReportAnswer::Ready { content_type, body } => {
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        ReportAnswer::NotYet(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// A plain-text answer.
pub(super) fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use std::sync::Mutex;
    use tower::ServiceExt as _;

    struct Fixed(Mutex<Option<&'static str>>);

    impl ReportPages for Fixed {
        fn latest(&self, format: ReportFormat) -> ReportAnswer {
            match *self.0.lock().unwrap() {
                None => ReportAnswer::NotYet("no report yet: the first audit runs soon".into()),
                Some(body) => ReportAnswer::Ready {
                    content_type: match format {
                        ReportFormat::Page => "text/html; charset=utf-8",
                        ReportFormat::Json => "application/json",
                    },
                    body: Bytes::from(format!("{format:?}:{body}")),
                },
            }
        }
    }

    async fn get(router: Router, uri: &str) -> (StatusCode, String, String) {
        let response = router
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let content_type = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_string();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn off_is_a_404_that_says_how_to_turn_it_on() {
        let (status, _, body) = get(router(None), "/report").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("--report-interval"), "{body}");
    }

    #[tokio::test]
    async fn before_the_first_run_is_a_503_with_the_reason_then_each_format() {
        let pages = Arc::new(Fixed(Mutex::new(None)));
        let app = router(Some(pages.clone()));
        let (status, content_type, body) = get(app.clone(), "/report").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(content_type.starts_with("text/plain"));
        assert_eq!(body, "no report yet: the first audit runs soon\n");

        *pages.0.lock().unwrap() = Some("r1");
        let (status, content_type, body) = get(app.clone(), "/report").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type, "text/html; charset=utf-8");
        assert_eq!(body, "Page:r1");
        let (_, content_type, body) = get(app.clone(), "/report?format=json").await;
        assert_eq!(content_type, "application/json");
        assert_eq!(body, "Json:r1");
        let (status, _, body) = get(app, "/report?format=xml").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("\"xml\""), "{body}");
    }
}
