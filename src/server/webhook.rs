//! The contract between the server and what answers its reviews.
//!
//! For each review the server calls [`Webhook::answer`] on the thread that
//! serves the connection (one of the async runtime's), and the webhook may
//! work there until a short slice ends. It gives back either the answer
//! ([`Step::Done`]) or the work left to do ([`Step::Resume`]), which the
//! server hands, unchanged, to one of the endpoint's answering threads,
//! where it runs with the request's deadline.
use crate::review::{Request, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which of the two admission endpoints a review was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Mutate,
    Validate,
}

impl Endpoint {
    /// The endpoint's `endpoint` metrics label and log field.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
        }
    }
}

/// What the server reads of a webhook once, when it starts.
#[derive(Clone, Copy, Debug)]
pub struct Hints {
    /// Stack each answering thread starts with. A connection's thread with
    /// less than this free is given no slice.
    pub stack: usize,
    /// How long [`Webhook::answer`] may work on a connection's thread;
    /// zero: no longer than it takes to see that the work must be resumed.
    pub inline_slice: Duration,
    /// Request kinds that get a `kind` metrics label of their own; every
    /// other kind is counted as `other`.
    pub metric_kinds: &'static [&'static str],
}

impl Default for Hints {
    fn default() -> Self {
        Hints {
            stack: super::DEFAULT_STACK,
            inline_slice: Duration::ZERO,
            metric_kinds: &[],
        }
    }
}

/// The answer to one review, with what the server records of it.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    pub response: Response,
    /// The placement profile that patched the object, if any: the
    /// mutations metric's label and the log line's `profile`.
    pub profile: Option<String>,
    /// Each policy evaluated, for the policy metrics and the log line.
    pub policies: Vec<PolicyResult>,
}

impl From<Response> for Answer {
    fn from(response: Response) -> Answer {
        Answer {
            response,
            ..Answer::default()
        }
    }
}

/// One policy's evaluation, as the server records it.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyResult {
    /// The policy's name, shared with the loaded policies: recording it
    /// copies no text.
    pub policy: Arc<str>,
    /// A word from a small fixed set (`pass`, `deny`, ...): a metrics label.
    pub result: &'static str,
    pub duration: Duration,
}

/// Work [`Webhook::answer`] left for an answering thread, called there
/// with the request's deadline.
pub type Resume = Box<dyn FnOnce(Instant) -> Answer + Send>;

/// What [`Webhook::answer`] gives back.
pub enum Step {
    Done(Answer),
    Resume(Resume),
}

/// Answers decoded admission requests.
pub trait Webhook: Send + Sync + 'static {
    /// Read once, when the server starts.
    fn hints(&self) -> Hints {
        Hints::default()
    }

    /// Starts answering `request`, sent to `endpoint`, on a connection's
    /// thread: [`Step::Done`] with what it finished by `slice_end` (already
    /// past when the server gives no slice), else [`Step::Resume`] with the
    /// rest. Work that may block, or recurse deeper than the runtime's
    /// threads allow, belongs in the [`Resume`].
    fn answer(
        self: Arc<Self>,
        endpoint: Endpoint,
        request: &Arc<Request>,
        slice_end: Instant,
    ) -> Step;
}
