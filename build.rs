//! Embeds the shipped policy folder, so that `gpu-admission serve` with no
//! flags serves the default policies.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let policies = root.join("policies");
    println!("cargo:rerun-if-changed=policies");
    let mut files = Vec::new();
    collect(&policies, &mut files);
    files.sort();
    let mut out = String::from(
        "/// Files of the shipped policy folder: (path inside policies/, contents).\n",
    );
    out.push_str("pub static EMBEDDED_POLICIES: &[(&str, &str)] = &[\n");
    for file in &files {
        let rel = file.strip_prefix(&policies).expect("under policies/");
        println!("cargo:rerun-if-changed={}", file.display());
        writeln!(
            out,
            "    ({:?}, include_str!({:?})),",
            rel.to_string_lossy().replace('\\', "/"),
            file.display().to_string()
        )
        .expect("write to string");
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("embedded_policies.rs");
    std::fs::write(dest, out).expect("write embedded_policies.rs");
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect(&path, files);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(path);
        }
    }
}
