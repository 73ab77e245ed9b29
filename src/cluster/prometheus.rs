//! A client of Prometheus' HTTP query API: one instant query
//! (`/api/v1/query`) with a deadline and, when asked, a bearer token; and
//! the reader of its answer, which also reads an answer recorded in a file.
//! It knows PromQL as text only; what is asked, and why, is the caller's.
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The largest answer read; a vector of a sample per GPU pod stays far below.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Where a Prometheus (or a service speaking its query API, such as Azure
/// Monitor's managed Prometheus) answers, and how to ask it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Base URL: `/api/v1/query` is appended to its path.
    pub url: String,
    /// A file holding the bearer token, read again for each query (tokens
    /// are rotated); none: no `Authorization` header.
    pub token_file: Option<PathBuf>,
    /// Longest wait for a whole answer; Prometheus is told the same.
    pub timeout: Duration,
}

/// One series of an instant vector: its labels and its value at the
/// evaluation time.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
    /// The evaluation time, in seconds since the Unix epoch.
    pub at: f64,
}

/// Why a query has no answer.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{url:?} is not an http:// or https:// URL")]
    BadUrl { url: String },
    #[error("cannot read the bearer token from {path}: {source}")]
    Token {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot use https: {0}")]
    Tls(#[source] std::io::Error),
    #[error("no answer from {url} within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("cannot reach {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("{url} answered HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    #[error("Prometheus refused the query ({kind}): {message}")]
    Refused { kind: String, message: String },
    #[error("not an answer of the Prometheus query API: {0}")]
    Malformed(String),
}

/// Runs the instant query `promql` at `time` (seconds since the epoch) and
/// returns its vector.
pub async fn query(
    endpoint: &Endpoint,
    promql: &str,
    time: f64,
) -> Result<Vec<Sample>, QueryError> {
    let url = query_url(&endpoint.url, promql, time, endpoint.timeout)?;
    let mut request = hyper::Request::get(url.as_str()).header("accept", "application/json");
    if let Some(path) = &endpoint.token_file {
        let token = std::fs::read_to_string(path).map_err(|source| QueryError::Token {
            path: path.display().to_string(),
            source,
        })?;
        request = request.header("authorization", format!("Bearer {}", token.trim()));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|_| QueryError::BadUrl {
            url: endpoint.url.clone(),
        })?;
    let client = http_client(url.starts_with("https://"))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| QueryError::Unreachable {
                url: endpoint.url.clone(),
                message: error_chain(&e),
            })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    QueryError::TooLarge
                } else {
                    QueryError::Unreachable {
                        url: endpoint.url.clone(),
                        message: e.to_string(),
                    }
                }
            })?
            .to_bytes();
        Ok::<_, QueryError>((status, body))
    };
    let (status, body) = tokio::time::timeout(endpoint.timeout, exchange)
        .await
        .map_err(|_| QueryError::Timeout {
            url: endpoint.url.clone(),
            timeout: endpoint.timeout,
        })??;
    match read_answer(&body) {
        // Prometheus answers its errors with a JSON body (400, 422, 503).
        Err(err @ QueryError::Refused { .. }) => Err(err),
        _ if !status.is_success() => Err(QueryError::Status {
            url: endpoint.url.clone(),
            status: status.as_u16(),
            message: snippet(&body),
        }),
        answer => answer,
    }
}

/// Reads an answer of `/api/v1/query` (as Prometheus sends it, or as
/// recorded with `curl`): the samples of its instant vector.
pub fn read_answer(body: &[u8]) -> Result<Vec<Sample>, QueryError> {
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| QueryError::Malformed(e.to_string()))?;
    if answer.status != "success" {
        return Err(QueryError::Refused {
            kind: answer.error_type.unwrap_or_else(|| answer.status.clone()),
            message: answer.error.unwrap_or_default(),
        });
    }
    let data = answer
        .data
        .ok_or_else(|| QueryError::Malformed("no `data`".into()))?;
    if data.result_type != "vector" {
        return Err(QueryError::Malformed(format!(
            "a {} where an instant vector was expected",
            data.result_type
        )));
    }
    let series: Vec<Series> = serde_json::from_value(data.result)
        .map_err(|e| QueryError::Malformed(format!("result: {e}")))?;
    series
        .into_iter()
        .map(|s| {
            let (at, value) = s.value;
            let value: f64 = value
                .parse()
                .map_err(|_| QueryError::Malformed(format!("{value:?} is not a sample value")))?;
            Ok(Sample {
                labels: s.metric,
                value,
                at,
            })
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    status: String,
    data: Option<Data>,
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct Series {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    /// `[time, "value"]`: Prometheus sends values as strings (`"NaN"`, `"+Inf"`).
    value: (f64, String),
}

/// `<url>/api/v1/query?query=..&time=..&timeout=..`.
fn query_url(base: &str, promql: &str, time: f64, timeout: Duration) -> Result<String, QueryError> {
    let bad = || QueryError::BadUrl {
        url: base.to_string(),
    };
    let (scheme, rest) = base.split_once("://").ok_or_else(bad)?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.contains(['?', '#', ' ']) {
        return Err(bad());
    }
    let params = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", promql)
        .append_pair("time", &format!("{time:.3}"))
        .append_pair("timeout", &format!("{}s", timeout.as_secs().max(1)))
        .finish();
    let url = format!("{}/api/v1/query?{params}", base.trim_end_matches('/'));
    url.parse::<hyper::Uri>().map_err(|_| bad())?;
    Ok(url)
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// A client for one query: https with the machine's trusted CAs, or plain http.
fn http_client(https: bool) -> Result<HttpClient<Connector, Empty<Bytes>>, QueryError> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = if https {
        builder
            .with_provider_and_native_roots(provider)
            .map_err(QueryError::Tls)?
    } else {
        // No TLS is spoken; the connector still wants a configuration.
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| QueryError::Tls(std::io::Error::other(e)))?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        builder.with_tls_config(config)
    };
    let connector = builder.https_or_http().enable_http1().build();
    Ok(HttpClient::builder(hyper_util::rt::TokioExecutor::new()).build(connector))
}

/// An error and its sources, on one line (the connector's own message is
/// a bare "client error (Connect)").
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The start of a body, as one line of text.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        "(empty body)".to_string()
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[test]
    fn reads_an_instant_vector() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"namespace":"ml","pod":"a"},"value":[1800000000.5,"0.25"]},
            {"metric":{},"value":[1800000000.5,"NaN"]}]}}"#;
        let samples = read_answer(body).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].labels["pod"], "a");
        assert_eq!(samples[0].value, 0.25);
        assert_eq!(samples[0].at, 1_800_000_000.5);
        assert!(samples[1].value.is_nan());
    }

    #[test]
    fn says_what_is_wrong_with_an_answer() {
        let refused = read_answer(
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
        )
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Prometheus refused the query (bad_data): parse error at char 3"
        );
        let matrix =
            read_answer(br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#)
                .unwrap_err();
        assert!(
            matrix
                .to_string()
                .contains("a matrix where an instant vector"),
            "{matrix}"
        );
        let html = read_answer(b"<html>login</html>").unwrap_err();
        assert!(
            html.to_string()
                .starts_with("not an answer of the Prometheus query API"),
            "{html}"
        );
        let value = read_answer(
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}"#,
        )
        .unwrap_err();
        assert!(
            value.to_string().contains("\"x\" is not a sample value"),
            "{value}"
        );
    }

    #[test]
    fn the_query_goes_in_the_url_encoded() {
        let url = query_url(
            "https://prom.example/prefix/",
            "max by (pod) (x[1h]) or y{a=\"b\"}",
            1_800_000_000.0,
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(
            url,
            "https://prom.example/prefix/api/v1/query?query=max+by+%28pod%29+%28x%5B1h%5D%29+or+y%7Ba%3D%22b%22%7D&time=1800000000.000&timeout=30s"
        );
        for bad in [
            "prom.example",
            "ftp://x",
            "http://",
            "http://a b",
            "http://x?y=1",
        ] {
            assert!(
                matches!(
                    query_url(bad, "x", 0.0, Duration::from_secs(1)),
                    Err(QueryError::BadUrl { .. })
                ),
                "{bad}"
            );
        }
    }

    /// A one-connection HTTP server on loopback: hands the request head to
    /// `check` and answers with `answer` (or never, when `None`).
    async fn serve_once(answer: Option<&'static str>) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            match answer {
                Some(answer) => socket.write_all(answer.as_bytes()).await.unwrap(),
                // Holds the connection open, answering nothing.
                None => {
                    let _ = socket.read(&mut buf).await;
                }
            }
            String::from_utf8(head).unwrap()
        });
        (url, task)
    }

    const SECS_30: Duration = Duration::from_secs(30);

    /// Asks `up` at time 1 of the server at `url`.
    async fn ask_up(
        url: &str,
        token_file: Option<PathBuf>,
        timeout: Duration,
    ) -> Result<Vec<Sample>, QueryError> {
        let url = url.to_string();
        let endpoint = Endpoint {
            url,
            token_file,
            timeout,
        };
        query(&endpoint, "up", 1.0).await
    }

    /// An HTTP/1.1 answer with `head` lines and `body`, then closes.
    fn http_answer(head: &str, body: &str) -> &'static str {
        let len = body.len();
        let text = format!("{head}\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n{body}");
        Box::leak(text.into_boxed_str())
    }

    #[tokio::test]
    async fn sends_the_bearer_token_from_its_file() {
        let body = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        let answer = http_answer("HTTP/1.1 200 OK\r\ncontent-type: application/json", body);
        let (url, server) = serve_once(Some(answer)).await;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let samples = ask_up(&url, Some(token), SECS_30).await.unwrap();
        assert!(samples.is_empty());
        let head = server.await.unwrap().to_ascii_lowercase();
        assert!(
            head.starts_with("get /api/v1/query?query=up&time=1.000"),
            "{head}"
        );
        assert!(head.contains("authorization: bearer s3cret\r\n"), "{head}");
    }

    #[tokio::test]
    async fn no_token_file_sends_no_authorization_and_a_missing_one_is_an_error() {
        let answer = http_answer("HTTP/1.1 401 Unauthorized", "Unauthorized");
        let (url, server) = serve_once(Some(answer)).await;
        let err = ask_up(&url, None, SECS_30).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{url} answered HTTP 401: Unauthorized")
        );
        let head = server.await.unwrap().to_ascii_lowercase();
        assert!(!head.contains("authorization"), "{head}");

        let missing = PathBuf::from("/nonexistent/token");
        let err = ask_up(&url, Some(missing), SECS_30).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot read the bearer token from /nonexistent/token"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_prometheus_error_body_is_reported_as_its_message() {
        let body = r#"{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}"#;
        let answer = http_answer("HTTP/1.1 503 Service Unavailable", body);
        let (url, _server) = serve_once(Some(answer)).await;
        let err = ask_up(&url, None, SECS_30).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "Prometheus refused the query (timeout): query timed out in expression evaluation"
        );
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        let (url, _server) = serve_once(None).await;
        let err = ask_up(&url, None, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("no answer from {url} within 300ms")
        );
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let err = ask_up(&url, None, SECS_30).await.unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with(&format!("cannot reach {url}: ")), "{text}");
        assert!(text.to_lowercase().contains("refused"), "{text}");
    }
}
