//! Watching a policy folder for changes, debounced, with a periodic
//! rescan for the events a watcher can miss.
use notify::{EventKind, RecursiveMode, Watcher};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Quiet time after the last change before `on_change` runs: a ConfigMap
/// update or an editor's save is several events in a row.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// How often the folder is checked without any event.
pub const DEFAULT_RESCAN: Duration = Duration::from_secs(60);

/// How a folder is watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    /// Run `on_change` this often even without events: inotify drops
    /// events when its queue overflows, and some volume types send none.
    pub rescan: Duration,
    /// Subscribe to file events; without them only the rescan runs.
    pub events: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            rescan: DEFAULT_RESCAN,
            events: true,
        }
    }
}

/// Watches a folder; stops when dropped.
pub struct DirWatcher {
    _watcher: Option<notify::RecommendedWatcher>,
    // Dropping it wakes and ends the thread even when events are off.
    _stop: mpsc::Sender<()>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirWatcher")
    }
}

/// Calls `on_change` (on a background thread) after anything under `dir`
/// changes: file writes, creations, removals and renames, including the
/// rename that swaps a mounted ConfigMap's `..data` symlink. Reads are
/// ignored, so reloading does not trigger itself. A watcher error is
/// logged and treated as a change (events may have been lost), and
/// `on_change` also runs every `options.rescan`, so it must be cheap when
/// nothing changed.
pub fn watch_dir(
    dir: &Path,
    options: WatchOptions,
    on_change: impl Fn() + Send + 'static,
) -> notify::Result<DirWatcher> {
    let (tx, rx) = mpsc::channel::<()>();
    let watcher = if options.events {
        let events = tx.clone();
        let shown = dir.display().to_string();
        let mut watcher = notify::recommended_watcher(
            move |event: notify::Result<notify::Event>| match event {
                Ok(event) if matches!(event.kind, EventKind::Access(_)) => {}
                Ok(_) => {
                    let _ = events.send(());
                }
                Err(error) => {
                    tracing::warn!(dir = %shown, %error, "policy folder watch error; checking the folder now");
                    let _ = events.send(());
                }
            },
        )?;
        watcher.watch(dir, RecursiveMode::Recursive)?;
        Some(watcher)
    } else {
        None
    };
    let rescan = options.rescan;
    std::thread::Builder::new()
        .name("policy-watch".into())
        .spawn(move || {
            let mut next_rescan = Instant::now() + rescan;
            loop {
                let wait = next_rescan.saturating_duration_since(Instant::now());
                match rx.recv_timeout(wait) {
                    Ok(()) => loop {
                        match rx.recv_timeout(DEBOUNCE) {
                            Ok(()) => continue,
                            Err(mpsc::RecvTimeoutError::Timeout) => break,
                            Err(mpsc::RecvTimeoutError::Disconnected) => return,
                        }
                    },
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
                on_change();
                next_rescan = Instant::now() + rescan;
            }
        })
        .map_err(notify::Error::io)?;
    Ok(DirWatcher {
        _watcher: watcher,
        _stop: tx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Whether `done` holds within 5 s, asked every 50 ms.
    fn eventually(done: impl Fn() -> bool) -> bool {
        for _ in 0..100 {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// What the kubelet does on a ConfigMap update: new timestamped dir, new
    /// symlink, rename over ..data.
    fn swap(root: &Path, version: &str, text: &str) {
        std::fs::create_dir(root.join(version)).unwrap();
        std::fs::write(root.join(version).join("p.yaml"), text).unwrap();
        std::os::unix::fs::symlink(version, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    }

    #[test]
    fn sees_configmap_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir(root.join("..2026_01")).unwrap();
        std::fs::write(root.join("..2026_01/p.yaml"), "a: 1\n").unwrap();
        std::os::unix::fs::symlink("..2026_01", root.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/p.yaml", root.join("p.yaml")).unwrap();
        // Each call records what the file says when it runs.
        let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (s, file) = (Arc::clone(&seen), root.join("p.yaml"));
        let options = WatchOptions {
            rescan: Duration::from_secs(3600),
            events: true,
        };
        let _w = watch_dir(&root, options, move || {
            s.lock()
                .unwrap()
                .push(std::fs::read_to_string(&file).unwrap());
        })
        .unwrap();
        let calls = || seen.lock().unwrap().clone();
        let wait_until_seen = |text: &str| {
            let seen = eventually(|| calls().iter().any(|t| t == text));
            assert!(seen, "{text:?} never seen: {:?}", calls());
        };
        swap(&root, "..2026_02", "a: 2\n");
        wait_until_seen("a: 2\n");
        // Debounced: one burst, one call. A second swap is seen after the
        // first burst's calls, so by then all of them are recorded.
        swap(&root, "..2026_03", "a: 3\n");
        wait_until_seen("a: 3\n");
        assert_eq!(calls(), ["a: 2\n", "a: 3\n"]);
    }

    #[test]
    fn rescans_without_events_and_stops_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&count);
        let options = WatchOptions {
            rescan: Duration::from_millis(50),
            events: false,
        };
        let watcher = watch_dir(dir.path(), options, move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        assert!(
            eventually(|| count.load(Ordering::SeqCst) >= 3),
            "no periodic rescan"
        );
        drop(watcher);
        // The thread ends (no more rescans): its callback, and with it its
        // clone of `count`, is dropped.
        let ended = eventually(|| Arc::strong_count(&count) == 1);
        assert!(ended, "the watcher thread is still running");
    }
}
