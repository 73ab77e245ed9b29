//! Watching a policy folder for changes, debounced.
use notify::{EventKind, RecursiveMode, Watcher};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// Quiet time after the last change before `on_change` runs: a ConfigMap
/// update or an editor's save is several events in a row.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Watches a folder; stops when dropped.
pub struct DirWatcher {
    _watcher: notify::RecommendedWatcher,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirWatcher")
    }
}

/// Calls `on_change` (on a background thread) after anything under `dir`
/// changes: file writes, creations, removals and renames, including the
/// rename that swaps a mounted ConfigMap's `..data` symlink. Reads are
/// ignored, so reloading does not trigger itself.
pub fn watch_dir(dir: &Path, on_change: impl Fn() + Send + 'static) -> notify::Result<DirWatcher> {
    let (tx, rx) = mpsc::channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            if !matches!(event.kind, EventKind::Access(_)) {
                let _ = tx.send(());
            }
        }
    })?;
    watcher.watch(dir, RecursiveMode::Recursive)?;
    std::thread::Builder::new()
        .name("policy-watch".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                loop {
                    match rx.recv_timeout(DEBOUNCE) {
                        Ok(()) => continue,
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                on_change();
            }
        })
        .map_err(notify::Error::io)?;
    Ok(DirWatcher { _watcher: watcher })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn wait_for(count: &AtomicUsize, n: usize) -> bool {
        for _ in 0..100 {
            if count.load(Ordering::SeqCst) >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    #[test]
    fn sees_configmap_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("..2026_01")).unwrap();
        std::fs::write(root.join("..2026_01/p.yaml"), "a: 1\n").unwrap();
        std::os::unix::fs::symlink("..2026_01", root.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/p.yaml", root.join("p.yaml")).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&count);
        let _w = watch_dir(root, move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        // What the kubelet does: new timestamped dir, new symlink, rename over ..data.
        std::fs::create_dir(root.join("..2026_02")).unwrap();
        std::fs::write(root.join("..2026_02/p.yaml"), "a: 2\n").unwrap();
        std::os::unix::fs::symlink("..2026_02", root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        assert!(wait_for(&count, 1), "no change seen");
        assert_eq!(
            std::fs::read_to_string(root.join("p.yaml")).unwrap(),
            "a: 2\n"
        );
        // Debounced: one burst, one call.
        std::thread::sleep(DEBOUNCE * 3);
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }
}
