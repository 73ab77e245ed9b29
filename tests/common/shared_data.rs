//! Public data the tests read but the repository does not carry: CI puts
//! it in `shared/` beside the clone.
use std::path::PathBuf;

/// `../shared/<name>` beside the clone, or `None` (after printing why the
/// calling test is skipped) when it is not there.
pub fn shared_data(name: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(name);
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipped: ../shared/{name} not found (the public data sits beside the clone in CI)"
        );
        None
    }
}
