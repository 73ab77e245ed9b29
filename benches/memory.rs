//! Peak resident memory of a `gpu-admission serve` process for hostile
//! AdmissionReview bodies: 7 MiB of tiny JSON objects (env entries, one-key
//! objects) to `/mutate` and `/validate`, one at a time and four at once, and
//! the largest body the default limits still decode (a CREATE, and an
//! UPDATE carrying that object twice). Each case runs its own
//! process; the figures are its VmHWM (peak RSS) from /proc.
//!
//! `cargo bench --bench memory` measures the binary cargo builds with the
//! bench; `GPU_ADMISSION_BIN=path/to/gpu-admission cargo bench --bench memory`
//! measures another one (an older build, to compare).

#[allow(dead_code)]
#[path = "../tests/common/http.rs"]
mod http;

#[path = "../tests/common/hostile.rs"]
mod hostile;

use hostile::{hostile_review, measure_body, near_limit_review, near_limit_update, Figures, Shape};
use std::path::PathBuf;

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let binary = std::env::var_os("GPU_ADMISSION_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_gpu-admission")));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut cases = vec![
        (
            "/mutate",
            Shape::EnvEntries.name(),
            hostile_review(Shape::EnvEntries),
        ),
        (
            "/mutate",
            Shape::OneKeyObjects.name(),
            hostile_review(Shape::OneKeyObjects),
        ),
        (
            "/validate",
            Shape::EnvEntries.name(),
            hostile_review(Shape::EnvEntries),
        ),
        (
            "/validate",
            Shape::OneKeyObjects.name(),
            hostile_review(Shape::OneKeyObjects),
        ),
    ];
    if benching {
        cases.push(("/mutate", "largest decodable", near_limit_review()));
        cases.push(("/validate", "largest decodable", near_limit_review()));
        cases.push(("/mutate", "largest decodable UPDATE", near_limit_update()));
        cases.push(("/validate", "largest decodable UPDATE", near_limit_update()));
    } else {
        cases.truncate(1);
    }
    println!("binary: {}", binary.display());
    println!(
        "| endpoint | body | size | peak RSS at rest | after one | after four at once | answer |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (path, name, body) in cases {
        let (figures, answers) = runtime.block_on(measure_body(&binary, path, &body));
        let (status, answer) = &answers[0];
        let verdict = match answer["response"]["status"]["code"].as_u64() {
            _ if *status != 200 => format!("HTTP {status}"),
            Some(code) => format!("denied ({code})"),
            None => format!("allowed: {}", answer["response"]["allowed"]),
        };
        println!(
            "| `{path}` | {name} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {verdict} |",
            body.len() as f64 / (1024.0 * 1024.0),
            Figures::mib(figures.baseline),
            Figures::mib(figures.one),
            Figures::mib(figures.four),
        );
    }
}
