//! Evaluation threads with a large stack. The CEL interpreter recurses per
//! nesting level, and an unoptimised build needs tens of KiB per level: more
//! than the 2 MiB a tokio blocking thread or a test thread has. Evaluating
//! here keeps deep (but accepted) expressions from overflowing the caller.
use std::cell::Cell;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

/// Stack of each evaluation thread (reserved address space; pages are only
/// committed as used).
pub const STACK: usize = 64 << 20;

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

static POOL: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

/// Declares the current thread an evaluation thread: its stack must be at
/// least [`STACK`] bytes.
pub fn mark_current_thread() {
    WORKER.with(|w| w.set(true));
}

/// Whether the current thread is an evaluation thread.
pub fn on_worker() -> bool {
    WORKER.with(Cell::get)
}

/// Runs `f` on an evaluation thread and waits for it. `None` if `f`
/// panicked; runs `f` here if no thread could be started.
pub fn run<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    let Some(tx) = POOL.get_or_init(start) else {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
    };
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = reply_tx.send(result.ok());
    });
    tx.send(job).ok()?;
    reply_rx.recv().ok().flatten()
}

fn start() -> Option<mpsc::Sender<Job>> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut started = 0;
    for i in 0..threads {
        let rx = Arc::clone(&rx);
        let spawned = std::thread::Builder::new()
            .name(format!("policy-eval-{i}"))
            .stack_size(STACK)
            .spawn(move || {
                mark_current_thread();
                loop {
                    let job = match rx.lock() {
                        Ok(guard) => guard.recv(),
                        Err(_) => return,
                    };
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
            });
        if spawned.is_ok() {
            started += 1;
        }
    }
    (started > 0).then_some(tx)
}
