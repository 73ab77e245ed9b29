//! End-to-end load: the webhook server in-process on loopback, driven over
//! N keep-alive TLS connections with AdmissionReviews of a GPU pod, against
//! a bare TLS server with the same TLS stack that answers a fixed 200 (the
//! floor). Prints requests/s and latency percentiles for both, and the ratio.
//! The server logs as `serve` does by default (info, text), into a sink.
//! Only correct answers count: the fixture's uid echoed, the expected
//! `allowed`, and for `/mutate` a patch (the fixture needs the full
//! placement patch); anything else is printed as incorrect. Each run also
//! prints the CPU time this process spent per answer, client and server
//! together (from `/proc/self/stat`, 10 ms ticks; zero off Linux): when
//! paced, the gap to the floor's is the webhook's own work on cold caches.
//!
//! A second phase measures `/mutate` alone and then beside a flood of
//! expensive `/validate` requests (a policy that runs into its cost limit,
//! added to the shipped set), which must not delay placement.
//!
//! The floor, `/mutate` and `/validate` take turns in rounds (five by
//! default), in the saturation phase and the paced one alike, and each
//! prints what the rounds add up to: a machine whose speed drifts from
//! second to second (shared hosts do) then drifts under all three alike.
//! The spread of the per-round ratios is printed too.
//!
//! `cargo bench --bench e2e`; tune with GPU_ADMISSION_BENCH_CONNECTIONS
//! (default 16), GPU_ADMISSION_BENCH_REQUESTS (default 20000, over all
//! rounds), GPU_ADMISSION_BENCH_ROUNDS (default 5) and
//! GPU_ADMISSION_BENCH_RATE (paced requests/s, default 1000). Without
//! `--bench` (as under `cargo test --benches`) it runs a short smoke pass.
//!
//! GPU_ADMISSION_BENCH_EXTRA_POLICIES=N adds N generated policies that
//! match pods (one variable and two validations each, those of the
//! policy-count bench) to the shipped set: the difference of the CPU per
//! answer with N and with none, over N, is what one more policy costs a
//! review end to end.
//!
//! GPU_ADMISSION_BENCH_POLICIES=DIR serves the policy folder DIR instead
//! of the shipped one: a folder with only `placement/` (the profiles
//! `/mutate` places by, so that it still patches the fixture) measures
//! what the webhook costs a `/validate` with no policy to evaluate, the
//! edge's own share.
//!
//! GPU_ADMISSION_BENCH_ONLY=floor|mutate|validate runs only that target's
//! saturation run (after the warm-up) and stops: for profilers. Two runs
//! under `valgrind --tool=callgrind` with different request counts give
//! the instructions one request costs, client and server together: the
//! difference of their totals over the difference of their counts.

// The allocator the `gpu-admission` binary runs with.
gpu_admission::mimalloc_as_malloc!();
#[path = "common/extra_policies.rs"]
mod extra_policies;
#[allow(dead_code)]
#[path = "../tests/common/http.rs"]
mod http;

use gpu_admission::admission::Admission;
use gpu_admission::cli::serve::load_bundle;
use gpu_admission::daemon::{DaemonConfig, LogFormat};
use gpu_admission::k8s::NamespaceLookup;
use gpu_admission::server::{tls, Metrics, ServeConfig, Server, ShutdownHandle};
use http::HttpResponse;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// No run takes longer than this, whatever the request count.
const TIME_LIMIT: Duration = Duration::from_secs(60);

/// The uid of tests/fixtures/reviews/pod-create-gpu.json.
const FIXTURE_UID: &str = "3f1c2a9e-7b4d-4e1a-9c55-0d6e2b8f4a11";

/// What a correct answer is.
#[derive(Clone, Copy)]
enum Expect {
    /// The floor's fixed 200.
    Ok,
    /// An AdmissionReview for the fixture with this `allowed`, and a patch
    /// when `patch` is set.
    Review { allowed: bool, patch: bool },
}

const MUTATED: Expect = Expect::Review {
    allowed: true,
    patch: true,
};
const ALLOWED: Expect = Expect::Review {
    allowed: true,
    patch: false,
};

#[derive(serde::Deserialize)]
struct ReviewAnswer {
    response: Option<Answer>,
}

#[derive(serde::Deserialize)]
struct Answer {
    uid: String,
    allowed: bool,
    patch: Option<serde::de::IgnoredAny>,
}

impl Expect {
    fn check(self, r: &HttpResponse) -> bool {
        if r.status != 200 {
            return false;
        }
        let Expect::Review { allowed, patch } = self else {
            return true;
        };
        let Ok(ReviewAnswer {
            response: Some(answer),
        }) = serde_json::from_slice(&r.body)
        else {
            return false;
        };
        answer.uid == FIXTURE_UID && answer.allowed == allowed && (!patch || answer.patch.is_some())
    }
}

struct NoNamespaces;

impl NamespaceLookup for NoNamespaces {
    fn namespace(&self, _name: &str) -> Option<Arc<serde_json::Value>> {
        None
    }
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let (connections, requests) = if benching {
        (
            env_usize("GPU_ADMISSION_BENCH_CONNECTIONS", 16),
            env_usize("GPU_ADMISSION_BENCH_REQUESTS", 20_000),
        )
    } else {
        (2, 200)
    };
    // `serve`'s default logging (one line per review), written nowhere.
    gpu_admission::cli::serve::init_logging_to(LogFormat::Text, std::io::sink, false);
    // The runtime `serve` runs on.
    let runtime = gpu_admission::cli::serve::runtime().expect("runtime");
    runtime.block_on(run(connections, requests));
}

async fn run(connections: usize, requests: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let names = vec!["localhost".to_string()];
    let ensured = gpu_admission::certs::ensure(dir.path(), &names).expect("certificates");
    let client_tls = http::client_config(&ensured.ca_pem, &[b"http/1.1"]);

    // The webhook, with the shipped policy folder when there is one (or
    // the folder asked for), and any extra policies asked for beside it.
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let base = match std::env::var_os("GPU_ADMISSION_BENCH_POLICIES") {
        Some(folder) => {
            let folder = std::path::PathBuf::from(folder);
            println!("e2e: the policies of {}", folder.display());
            Some(folder)
        }
        None => shipped.is_dir().then_some(shipped),
    };
    let extra = env_usize("GPU_ADMISSION_BENCH_EXTRA_POLICIES", 0);
    let policies = match base {
        Some(base) if extra > 0 => {
            let folder = dir.path().join("policies");
            copy_policies(&base, &folder);
            std::fs::write(
                folder.join("bench-extra.yaml"),
                extra_policies::extra_policies(extra, extra_policies::Target::Pods),
            )
            .expect("extra policies");
            println!(
                "e2e: {extra} extra policies matching pods beside those of {}",
                base.display()
            );
            Some(folder)
        }
        None if extra > 0 => panic!("extra policies are added to a policy folder: none found"),
        base => base,
    };
    let (webhook_addr, shutdown, server_task) = start_webhook(&ensured, policies).await;

    let floor_addr = start_floor(&ensured.paths.cert, &ensured.paths.key).await;

    let review = gpu_pod_review();
    assert_eq!(review["request"]["uid"], FIXTURE_UID);
    let body = serde_json::to_vec(&review).expect("review");
    let request = http::request_bytes("POST", "/validate?timeout=10s", &body);
    let mutate_request = http::request_bytes("POST", "/mutate?timeout=10s", &body);
    println!(
        "e2e: {connections} keep-alive TLS connections, {requests} requests of {} bytes each",
        body.len()
    );
    if let Ok(only) = std::env::var("GPU_ADMISSION_BENCH_ONLY") {
        let (label, addr, req, expect) = match only.as_str() {
            "floor" => (
                "floor (bare TLS, fixed 200)",
                floor_addr,
                &request,
                Expect::Ok,
            ),
            "mutate" => ("webhook /mutate", webhook_addr, &mutate_request, MUTATED),
            "validate" => ("webhook /validate", webhook_addr, &request, ALLOWED),
            other => panic!("GPU_ADMISSION_BENCH_ONLY={other}: floor, mutate or validate"),
        };
        // A warm-up of a fixed size: runs of different sizes differ by
        // their measured requests alone.
        let warmed = drive(addr, &client_tls, req, expect, connections, 200).await;
        assert_eq!(warmed.incorrect + warmed.failed, 0, "{label} answers");
        let run = drive(addr, &client_tls, req, expect, connections, requests).await;
        run.print(label);
        assert_eq!(run.incorrect + run.failed, 0, "{label} answers");
        shutdown.trigger();
        let _ = tokio::time::timeout(Duration::from_secs(5), server_task).await;
        return;
    }

    // Warm both up (handshakes, allocator, caches).
    let warm = requests / 10 + 1;
    let warmed = drive(
        floor_addr,
        &client_tls,
        &request,
        Expect::Ok,
        connections,
        warm,
    )
    .await;
    assert_eq!(warmed.incorrect + warmed.failed, 0, "the floor answers");
    let warmed = drive(
        webhook_addr,
        &client_tls,
        &request,
        ALLOWED,
        connections,
        warm,
    )
    .await;
    assert_eq!(
        warmed.incorrect + warmed.failed,
        0,
        "/validate allows the fixture"
    );
    let warmed = drive(
        webhook_addr,
        &client_tls,
        &mutate_request,
        MUTATED,
        connections,
        warm,
    )
    .await;
    assert_eq!(
        warmed.incorrect + warmed.failed,
        0,
        "/mutate patches the fixture"
    );

    // The floor and the webhook take turns in short rounds, so that each
    // ratio compares the same state of a machine whose speed drifts.
    let rounds = env_usize("GPU_ADMISSION_BENCH_ROUNDS", 5).max(1);
    let per_round = requests.div_ceil(rounds);
    let (mut floor, mut mutate, mut webhook) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        floor.push(
            drive(
                floor_addr,
                &client_tls,
                &request,
                Expect::Ok,
                connections,
                per_round,
            )
            .await,
        );
        mutate.push(
            drive(
                webhook_addr,
                &client_tls,
                &mutate_request,
                MUTATED,
                connections,
                per_round,
            )
            .await,
        );
        webhook.push(
            drive(
                webhook_addr,
                &client_tls,
                &request,
                ALLOWED,
                connections,
                per_round,
            )
            .await,
        );
    }
    print_spread(
        "saturation, throughput ratio per round",
        &floor,
        &mutate,
        &webhook,
        |run, floor| run.rate / floor.rate,
    );
    let (floor, mutate, webhook) = (Run::merge(floor), Run::merge(mutate), Run::merge(webhook));
    floor.print("floor (bare TLS, fixed 200)");
    mutate.print("webhook /mutate");
    webhook.print("webhook /validate");
    println!(
        "ratio webhook/floor: throughput {:.2}, p50 {:.2}, p99 {:.2}",
        webhook.rate / floor.rate,
        ratio(webhook.p(50.0), floor.p(50.0)),
        ratio(webhook.p(99.0), floor.p(99.0)),
    );
    println!(
        "ratio mutate/floor: throughput {:.2}, p50 {:.2}, p99 {:.2}",
        mutate.rate / floor.rate,
        ratio(mutate.p(50.0), floor.p(50.0)),
        ratio(mutate.p(99.0), floor.p(99.0)),
    );
    println!(
        "incorrect answers: floor {}, mutate {}, validate {}",
        floor.incorrect, mutate.incorrect, webhook.incorrect
    );
    if webhook.failed + mutate.failed + floor.failed > 0 {
        println!(
            "failed requests: validate {}, mutate {}, floor {}",
            webhook.failed, mutate.failed, floor.failed
        );
    }

    // A steady load well below saturation: latency as the apiserver sees it
    // on a busy cluster, not at the limit.
    let rate = env_usize("GPU_ADMISSION_BENCH_RATE", 1000);
    let paced_for = if requests >= 1000 {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(300)
    };
    println!(
        "paced: {rate} requests/s for {:.1} s over {connections} connections (latency: round trip plus any backlog)",
        paced_for.as_secs_f64()
    );
    let slice = paced_for / rounds as u32;
    let (mut floor_paced, mut mutate_paced, mut validate_paced) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        floor_paced.push(
            paced(
                floor_addr,
                &client_tls,
                &request,
                Expect::Ok,
                connections,
                rate,
                slice,
            )
            .await,
        );
        mutate_paced.push(
            paced(
                webhook_addr,
                &client_tls,
                &mutate_request,
                MUTATED,
                connections,
                rate,
                slice,
            )
            .await,
        );
        validate_paced.push(
            paced(
                webhook_addr,
                &client_tls,
                &request,
                ALLOWED,
                connections,
                rate,
                slice,
            )
            .await,
        );
    }
    print_spread(
        "paced, p50 ratio per round",
        &floor_paced,
        &mutate_paced,
        &validate_paced,
        |run, floor| ratio(run.p(50.0), floor.p(50.0)),
    );
    let floor_paced = Run::merge(floor_paced);
    let mutate_paced = Run::merge(mutate_paced);
    let validate_paced = Run::merge(validate_paced);
    floor_paced.print("floor, paced");
    mutate_paced.print("webhook /mutate, paced");
    validate_paced.print("webhook /validate, paced");
    for (name, run) in [("mutate", &mutate_paced), ("validate", &validate_paced)] {
        println!(
            "paced ratio {name}/floor: p50 {:.2}, p99 {:.2}; incorrect {}, failed {}",
            ratio(run.p(50.0), floor_paced.p(50.0)),
            ratio(run.p(99.0), floor_paced.p(99.0)),
            run.incorrect,
            run.failed,
        );
    }
    shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(5), server_task).await;

    flood(&ensured, &client_tls, &body, requests).await;
}

/// A policy that walks a million-element comprehension in each of five
/// validations, so every `/validate` of a pod runs into its cost limits
/// (about 50 ms of CPU per validation in a release build).
const EXPENSIVE_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bench-expensive}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  variables:
    - name: l
      expression: "[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99]"
  validations:
    - expression: "variables.l.all(a, variables.l.all(b, variables.l.all(c, true)))"
    - expression: "variables.l.all(a, variables.l.all(b, variables.l.all(c, true)))"
    - expression: "variables.l.all(a, variables.l.all(b, variables.l.all(c, true)))"
    - expression: "variables.l.all(a, variables.l.all(b, variables.l.all(c, true)))"
    - expression: "variables.l.all(a, variables.l.all(b, variables.l.all(c, true)))"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: bench-expensive}
spec: {policyName: bench-expensive, validationActions: [Deny]}
"#;

/// `/mutate` latency over 4 connections alone, then while 16 connections
/// keep every `/validate` slot busy with expensive reviews.
async fn flood(
    ensured: &gpu_admission::certs::Ensured,
    client_tls: &Arc<rustls::ClientConfig>,
    body: &[u8],
    requests: usize,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let policies = dir.path().join("policies");
    copy_policies(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"),
        &policies,
    );
    std::fs::write(policies.join("bench-expensive.yaml"), EXPENSIVE_POLICY).expect("policy");
    let (addr, shutdown, server_task) = start_webhook(ensured, Some(policies)).await;
    let mutate = http::request_bytes("POST", "/mutate?timeout=10s", body);
    let validate = http::request_bytes("POST", "/validate?timeout=10s", body);

    drive(addr, client_tls, &mutate, MUTATED, 4, requests / 4 + 1).await;
    let quiet = drive(addr, client_tls, &mutate, MUTATED, 4, requests).await;

    let stop = Arc::new(AtomicBool::new(false));
    let validated = Arc::new(AtomicUsize::new(0));
    let wrong = Arc::new(AtomicUsize::new(0));
    let flooders: Vec<_> = (0..16)
        .map(|_| {
            let (stop, validated, wrong, tls, validate) = (
                stop.clone(),
                validated.clone(),
                wrong.clone(),
                client_tls.clone(),
                validate.clone(),
            );
            tokio::spawn(async move {
                let Ok(mut client) = http::Client::connect(addr, tls, "localhost").await else {
                    return;
                };
                // The expensive validations run into their cost limits and
                // are ignored (failurePolicy Ignore): correct is allowed.
                while !stop.load(Ordering::Relaxed) {
                    match client.send(&validate).await {
                        Ok(r) if ALLOWED.check(&r) => validated.fetch_add(1, Ordering::Relaxed),
                        Ok(_) => wrong.fetch_add(1, Ordering::Relaxed),
                        Err(_) => return,
                    };
                }
            })
        })
        .collect();
    // Let the flood fill every validation slot first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let flood_started = Instant::now();
    let flooded_before = validated.load(Ordering::Relaxed);
    let wrong_before = wrong.load(Ordering::Relaxed);
    let loud = drive(addr, client_tls, &mutate, MUTATED, 4, requests).await;
    let validations = validated.load(Ordering::Relaxed) - flooded_before;
    let wrong_validations = wrong.load(Ordering::Relaxed) - wrong_before;
    let window = flood_started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for task in flooders {
        let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
    }
    println!(
        "flood: /mutate over 4 connections, alone and beside 16 connections of expensive /validate"
    );
    quiet.print("/mutate alone");
    loud.print("/mutate during validate flood");
    println!(
        "expensive /validate answered while /mutate was measured: {validations} in {:.2} s ({:.1} req/s)",
        window.as_secs_f64(),
        validations as f64 / window.as_secs_f64()
    );
    println!(
        "incorrect answers: /mutate alone {}, /mutate during flood {}, expensive /validate meanwhile {wrong_validations}",
        quiet.incorrect, loud.incorrect
    );
    if quiet.failed + loud.failed > 0 {
        println!(
            "failed requests: mutate alone {}, mutate during flood {}",
            quiet.failed, loud.failed
        );
    }
    shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(5), server_task).await;
}

/// Copies the policy folder, leaving out its tests.
fn copy_policies(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("policy folder");
    for entry in std::fs::read_dir(from).expect("policies").flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            if entry.file_name() != "tests" {
                copy_policies(&path, &target);
            }
        } else {
            std::fs::copy(&path, &target).expect("copy policy");
        }
    }
}

/// The webhook server in-process on a loopback port, with the certificate
/// in `ensured` and the policies of `policies` (built in when none).
async fn start_webhook(
    ensured: &gpu_admission::certs::Ensured,
    policies: Option<std::path::PathBuf>,
) -> (
    SocketAddr,
    ShutdownHandle,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: None,
        health_listen: None,
        tls_cert: Some(ensured.paths.cert.clone()),
        tls_key: Some(ensured.paths.key.clone()),
        ..ServeConfig::default()
    };
    let policies = DaemonConfig {
        policies,
        ..DaemonConfig::default()
    };
    let bundle = load_bundle(&policies).expect("policy bundle");
    let admission = Arc::new(Admission::new(bundle, Arc::new(NoNamespaces)));
    let shutdown = ShutdownHandle::new();
    let server = Server::bind(config, admission, Metrics::new(), shutdown.clone())
        .await
        .expect("server binds");
    let addr = server.local_addr();
    (addr, shutdown, tokio::spawn(server.run()))
}

/// A bare TLS server with the webhook's TLS stack answering a fixed 200.
async fn start_floor(cert: &Path, key: &Path) -> SocketAddr {
    let certified = tls::load_certified_key(cert, key).expect("certificate");
    let resolver = Arc::new(tls::CertResolver::new(certified));
    let config = tls::server_config(resolver).expect("TLS config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let builder = Arc::new(hyper_util::server::conn::auto::Builder::new(
            TokioExecutor::new(),
        ));
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let builder = builder.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        use http_body_util::BodyExt as _;
                        let _ = req.into_body().collect().await;
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(axum::body::Bytes::from_static(
                                b"{\"ok\":true}",
                            )),
                        ))
                    },
                );
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

struct Run {
    /// Of correct answers only.
    latencies: Vec<Duration>,
    /// Correct answers per second.
    rate: f64,
    /// Answered, but not as expected (see [`Expect`]).
    incorrect: usize,
    /// No answer: connection or protocol errors.
    failed: usize,
    /// This process's CPU time (client and server together) per answer.
    cpu_per_answer: Duration,
    /// This process's minor page faults per answer (memory the kernel
    /// had to map, on first touch or after the allocator gave it back).
    faults_per_answer: f64,
}

impl Run {
    /// The runs of several rounds as one: every latency, and the rate, CPU
    /// time and faults over all of them.
    fn merge(runs: Vec<Run>) -> Run {
        let answers: usize = runs.iter().map(|r| r.latencies.len()).sum();
        let elapsed: f64 = runs
            .iter()
            .filter(|r| r.rate > 0.0)
            .map(|r| r.latencies.len() as f64 / r.rate)
            .sum();
        let cpu: Duration = runs
            .iter()
            .map(|r| r.cpu_per_answer * r.latencies.len() as u32)
            .sum();
        let faults: f64 = runs
            .iter()
            .map(|r| r.faults_per_answer * r.latencies.len() as f64)
            .sum();
        let mut merged = Run {
            latencies: Vec::with_capacity(answers),
            rate: if elapsed > 0.0 {
                answers as f64 / elapsed
            } else {
                0.0
            },
            incorrect: runs.iter().map(|r| r.incorrect).sum(),
            failed: runs.iter().map(|r| r.failed).sum(),
            cpu_per_answer: if answers > 0 {
                cpu / answers as u32
            } else {
                Duration::ZERO
            },
            faults_per_answer: if answers > 0 {
                faults / answers as f64
            } else {
                0.0
            },
        };
        for run in runs {
            merged.latencies.extend(run.latencies);
        }
        merged.latencies.sort_unstable();
        merged
    }

    fn p(&self, percentile: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((percentile / 100.0) * (self.latencies.len() - 1) as f64).round() as usize;
        self.latencies[rank.min(self.latencies.len() - 1)]
    }

    fn print(&self, label: &str) {
        println!(
            "{label:30} {:>9.0} req/s  p50 {:>8.3} ms  p90 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms  cpu {:>5.1} µs/answer  {:>5.2} faults/answer",
            self.rate,
            ms(self.p(50.0)),
            ms(self.p(90.0)),
            ms(self.p(99.0)),
            ms(self.latencies.last().copied().unwrap_or_default()),
            self.cpu_per_answer.as_secs_f64() * 1e6,
            self.faults_per_answer,
        );
    }
}

/// The lowest and highest of `measure(webhook round, floor round)` over the
/// rounds, for `/mutate` and `/validate`: how far the machine drifted.
fn print_spread(
    label: &str,
    floor: &[Run],
    mutate: &[Run],
    validate: &[Run],
    measure: impl Fn(&Run, &Run) -> f64,
) {
    let range = |runs: &[Run]| {
        let values: Vec<f64> = runs.iter().zip(floor).map(|(r, f)| measure(r, f)).collect();
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (low, high)
    };
    let (m, v) = (range(mutate), range(validate));
    println!(
        "{label} ({} rounds): /mutate {:.2} to {:.2}, /validate {:.2} to {:.2}",
        floor.len(),
        m.0,
        m.1,
        v.0,
        v.1
    );
}

/// `total` requests over `connections` keep-alive connections, each answer
/// checked against `expect`.
async fn drive(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    request: &[u8],
    expect: Expect,
    connections: usize,
    total: usize,
) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let incorrect = Arc::new(AtomicUsize::new(0));
    let request: Arc<[u8]> = request.into();
    let deadline = Instant::now() + TIME_LIMIT;
    let usage = Usage::now();
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (next, failed, incorrect, request, tls) = (
                next.clone(),
                failed.clone(),
                incorrect.clone(),
                request.clone(),
                tls.clone(),
            );
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut client = None;
                while next.fetch_add(1, Ordering::Relaxed) < total && Instant::now() < deadline {
                    if let Some(took) = round_trip(
                        &mut client,
                        addr,
                        &tls,
                        &request,
                        expect,
                        &failed,
                        &incorrect,
                    )
                    .await
                    {
                        latencies.push(took);
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(total);
    for task in tasks {
        latencies.extend(task.await.unwrap_or_default());
    }
    let elapsed = started.elapsed();
    let (cpu_per_answer, faults_per_answer) = usage.per_answer(latencies.len());
    latencies.sort_unstable();
    Run {
        rate: latencies.len() as f64 / elapsed.as_secs_f64(),
        cpu_per_answer,
        faults_per_answer,
        latencies,
        incorrect: incorrect.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
    }
}

/// An open-loop load: `rate` requests per second for `duration`, spread
/// over `connections` keep-alive connections (request k goes to connection
/// k mod N at start + k/rate). A request's latency is its own round trip
/// plus how late an earlier slow answer on its connection made it start
/// (so slowness is not hidden by sending less), but not the timer's own
/// lateness in waking the sender (about a millisecond in tokio).
#[allow(clippy::too_many_arguments)]
async fn paced(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    request: &[u8],
    expect: Expect,
    connections: usize,
    rate: usize,
    duration: Duration,
) -> Run {
    let total = (rate as f64 * duration.as_secs_f64()) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let failed = Arc::new(AtomicUsize::new(0));
    let incorrect = Arc::new(AtomicUsize::new(0));
    let request: Arc<[u8]> = request.into();
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let usage = Usage::now();
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let (failed, incorrect, request, tls) = (
                failed.clone(),
                incorrect.clone(),
                request.clone(),
                tls.clone(),
            );
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut client = http::Client::connect(addr, tls.clone(), "localhost")
                    .await
                    .ok();
                let mut previous_done = start;
                for k in (i..total).step_by(connections) {
                    let scheduled = start + interval * k as u32;
                    let backlog = previous_done.saturating_duration_since(scheduled);
                    tokio::time::sleep_until(scheduled).await;
                    let answer = round_trip(
                        &mut client,
                        addr,
                        &tls,
                        &request,
                        expect,
                        &failed,
                        &incorrect,
                    )
                    .await;
                    previous_done = tokio::time::Instant::now();
                    if let Some(took) = answer {
                        latencies.push(took + backlog);
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(total);
    for task in tasks {
        latencies.extend(task.await.unwrap_or_default());
    }
    let (cpu_per_answer, faults_per_answer) = usage.per_answer(latencies.len());
    latencies.sort_unstable();
    Run {
        rate: latencies.len() as f64 / duration.as_secs_f64(),
        cpu_per_answer,
        faults_per_answer,
        latencies,
        incorrect: incorrect.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
    }
}

/// One request on `client` (connecting first when it has none): the round
/// trip of a correct answer; an incorrect answer or a failure is counted
/// instead (a failure drops the connection).
async fn round_trip(
    client: &mut Option<http::Client>,
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    request: &[u8],
    expect: Expect,
    failed: &AtomicUsize,
    incorrect: &AtomicUsize,
) -> Option<Duration> {
    if client.is_none() {
        *client = http::Client::connect(addr, tls.clone(), "localhost")
            .await
            .ok();
    }
    let Some(c) = client.as_mut() else {
        failed.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    let sent = Instant::now();
    match c.send(request).await {
        // The round trip ends with the answer read; checking it is the
        // bench's own work (it parses a review's JSON, not the floor's).
        Ok(r) => {
            let took = sent.elapsed();
            if expect.check(&r) {
                Some(took)
            } else {
                incorrect.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
        Err(_) => {
            failed.fetch_add(1, Ordering::Relaxed);
            *client = None;
            None
        }
    }
}

fn gpu_pod_review() -> serde_json::Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reviews/pod-create-gpu.json");
    let text = std::fs::read_to_string(path).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

/// This process's CPU time (user and system) and minor page faults so
/// far, from `/proc/self/stat` (Linux; zero elsewhere).
#[derive(Clone, Copy, Default)]
struct Usage {
    cpu: Duration,
    minor_faults: u64,
}

impl Usage {
    fn now() -> Usage {
        let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
            return Usage::default();
        };
        // Fields after the command name (which may hold spaces), from
        // field 3: minflt is field 10; utime and stime are fields 14 and
        // 15, in clock ticks (USER_HZ, 100).
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return Usage::default();
        };
        let fields: Vec<u64> = rest
            .split_whitespace()
            .map(|f| f.parse::<u64>().unwrap_or(0))
            .collect();
        let field = |n: usize| fields.get(n - 3).copied().unwrap_or(0);
        Usage {
            cpu: Duration::from_millis((field(14) + field(15)) * 10),
            minor_faults: field(10),
        }
    }

    /// CPU time and minor faults since `self`, per answer.
    fn per_answer(self, answers: usize) -> (Duration, f64) {
        if answers == 0 {
            return (Duration::ZERO, 0.0);
        }
        let now = Usage::now();
        let cpu = now.cpu.saturating_sub(self.cpu);
        let faults = now.minor_faults.saturating_sub(self.minor_faults);
        (cpu / answers as u32, faults as f64 / answers as f64)
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ratio(a: Duration, b: Duration) -> f64 {
    if b.is_zero() {
        0.0
    } else {
        a.as_secs_f64() / b.as_secs_f64()
    }
}
