//! The server's answering threads: a fixed set of threads with the stack
//! the webhook asks for ([`super::Hints::stack`]), fed through a bounded
//! queue. Handlers hand here the work a webhook left to resume and await
//! its answer, so that work never holds one of the runtime's threads, and
//! the threads that run it always have the stack it needs.
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// A bounded pool of threads that run closures for async callers.
/// Dropping it lets the threads end once the work queued so far is done.
pub struct Executor {
    name: &'static str,
    shared: Arc<Shared>,
    threads: usize,
}

/// The queue between callers and threads.
struct Shared {
    state: Mutex<Queue>,
    /// Signalled when a job is queued or the executor is dropped.
    ready: Condvar,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// Jobs the queue holds at most.
    capacity: usize,
    /// The executor was dropped: threads end once the queue is empty.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Jobs run outside the lock and catch their panics: it is never
        // poisoned by them, and the queue is consistent whatever happened.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why [`Executor::run`] has no result.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// Every thread is busy and the queue is full: nothing was run.
    #[error("every {0} thread is busy and its queue is full")]
    Overloaded(&'static str),
    /// The closure panicked (the thread survives).
    #[error("the work panicked on a {0} thread")]
    Panicked(&'static str),
}

impl Executor {
    /// Starts `threads` threads (at least one) named `<name>-<i>`, each with
    /// a stack of `stack` bytes, and a queue holding up to `queue` (at least
    /// one) closures not yet started.
    pub fn new(
        name: &'static str,
        threads: usize,
        queue: usize,
        stack: usize,
    ) -> std::io::Result<Executor> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(Queue {
                jobs: VecDeque::with_capacity(queue),
                capacity: queue.max(1),
                closed: false,
            }),
            ready: Condvar::new(),
        });
        // Built first so that, should a thread fail to start, dropping it
        // ends those already started.
        let executor = Executor {
            name,
            shared,
            threads,
        };
        for i in 0..threads {
            let shared = Arc::clone(&executor.shared);
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .stack_size(stack)
                .spawn(move || work(&shared))?;
        }
        Ok(executor)
    }

    /// Threads started.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on one of the threads and waits for its result without
    /// blocking the caller's thread: [`Executor::submit`], then its answer.
    pub async fn run<F, R>(&self, f: F) -> Result<R, RunError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.submit(f)?.await
    }

    /// Queues `f` for one of the threads; the future answers with its
    /// result. Refused at once with [`RunError::Overloaded`] when the queue
    /// is full. Once queued, `f` runs to its end even if nobody awaits the
    /// answer (a timeout), holding whatever it owns until then.
    pub fn submit<F, R>(
        &self,
        f: F,
    ) -> Result<impl std::future::Future<Output = Result<R, RunError>>, RunError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        });
        {
            let mut queue = self.shared.lock();
            if queue.jobs.len() >= queue.capacity {
                return Err(RunError::Overloaded(self.name));
            }
            queue.jobs.push_back(job);
        }
        self.shared.ready.notify_one();
        let name = self.name;
        Ok(async move {
            match rx.await {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(_)) | Err(_) => Err(RunError::Panicked(name)),
            }
        })
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
    }
}

/// One thread's life: take the next closure, run it, until the executor
/// is dropped and nothing is left to run.
fn work(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.lock();
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    break job;
                }
                if queue.closed {
                    return;
                }
                queue = shared.ready.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
        };
        job();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::mpsc::{channel, Sender};
    use std::time::Duration;

    type Answers<R> = (Result<R, RunError>, Result<R, RunError>);

    /// Fills `executor` (one thread, a queue of one): its thread runs a job
    /// answering `busy` once the sender returned is sent to, and its queue
    /// holds one answering `queued`; the future gives both answers.
    pub(in crate::server) fn fill<R: Send + 'static>(
        executor: &Executor,
        (busy, queued): (R, R),
    ) -> (Sender<()>, impl std::future::Future<Output = Answers<R>>) {
        let (release, released) = channel::<()>();
        let (started_tx, started) = channel::<()>();
        let running = executor.submit(move || {
            started_tx.send(()).unwrap();
            released.recv().unwrap();
            busy
        });
        let running = running.unwrap();
        started.recv_timeout(Duration::from_secs(10)).unwrap();
        let queued = executor.submit(|| queued).unwrap();
        (release, async move { (running.await, queued.await) })
    }

    #[tokio::test]
    async fn runs_on_its_own_named_threads_with_the_stack_asked_for() {
        let executor = Executor::new("answer", 2, 2, 16 << 20).unwrap();
        assert_eq!(executor.threads(), 2);
        let name = executor
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(
            name.as_deref().unwrap_or("").starts_with("answer-"),
            "{name:?}"
        );
        // A recursion of 3,000 frames of over 1 KiB: more than a test
        // thread's 2 MiB, within the 16 MiB asked for.
        fn deep(n: usize) -> usize {
            let frame = std::hint::black_box([0u8; 1024]);
            if n == 0 {
                frame[0] as usize
            } else {
                deep(n - 1) + frame[n % 1024] as usize + 1
            }
        }
        assert_eq!(executor.run(|| deep(3000)).await.unwrap(), 3000);
    }

    #[tokio::test]
    async fn a_full_queue_is_refused_at_once_and_work_resumes_after() {
        let executor = Executor::new("answer", 1, 1, 1 << 20).unwrap();
        // The only thread is busy and the queue takes one more: the next
        // is refused without waiting.
        let (release_tx, answers) = fill(&executor, (1, 2));
        assert_eq!(
            executor.run(|| 3).await,
            Err(RunError::Overloaded("answer"))
        );
        release_tx.send(()).unwrap();
        assert_eq!(answers.await, (Ok(1), Ok(2)));
        assert_eq!(executor.run(|| 4).await, Ok(4), "room again");
    }

    #[tokio::test]
    async fn a_panic_is_reported_and_the_thread_keeps_serving() {
        let executor = Executor::new("answer", 1, 1, 1 << 20).unwrap();
        let panicked = executor.run(|| -> u8 { panic!("boom") }).await;
        assert_eq!(panicked, Err(RunError::Panicked("answer")));
        assert_eq!(executor.run(|| 7).await, Ok(7));
    }
}
