//! The cluster's answers to the CEL `authorizer` checks: a
//! SubjectAccessReview per check, as kube-apiserver asks its own
//! authorizer.
//!
//! Policies are evaluated on the server's answering threads, which must not
//! wait on the runtime they belong to; so the reviews are made by a client
//! on a thread of its own, and an evaluation waits for each answer at most
//! [`ClusterAuthorizer::timeout`]. A check that gets no answer in time (or
//! an error) is denied and `errored()`. Answers are cached for the rest of
//! the request by the CEL library.
use crate::authz::{Attributes, Authorizer, Decision, Target};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use std::sync::mpsc;
use std::time::Duration;

/// How long an evaluation waits for one SubjectAccessReview by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1500);

/// Reviews waiting for the client thread; beyond this a check is refused
/// at once (errored) rather than queued.
const QUEUE: usize = 256;

type Job = (Attributes, mpsc::SyncSender<Decision>);

/// Answers checks with SubjectAccessReviews (RBAC: `create` on
/// `subjectaccessreviews.authorization.k8s.io`).
pub struct ClusterAuthorizer {
    jobs: tokio::sync::mpsc::Sender<Job>,
    timeout: Duration,
}

impl ClusterAuthorizer {
    /// Starts the client thread: a client for `config`, or for the
    /// in-cluster / kubeconfig configuration when `None`.
    pub fn start(
        config: Option<kube::Config>,
        timeout: Duration,
    ) -> std::io::Result<ClusterAuthorizer> {
        let (jobs, mut queue) = tokio::sync::mpsc::channel::<Job>(QUEUE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("access-review".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let client = match config {
                        Some(config) => kube::Client::try_from(config),
                        None => kube::Client::try_default().await,
                    };
                    let client = match client {
                        Ok(client) => client,
                        Err(err) => {
                            tracing::error!(error = %err, "no cluster client: every authorizer check in policies errors");
                            let message = format!("no cluster client: {err}");
                            while let Some((_, reply)) = queue.recv().await {
                                let _ = reply.send(Decision::error(message.clone()));
                            }
                            return;
                        }
                    };
                    while let Some((attributes, reply)) = queue.recv().await {
                        let client = client.clone();
                        tokio::spawn(async move {
                            let _ = reply.send(review(client, &attributes).await);
                        });
                    }
                })
            })?;
        Ok(ClusterAuthorizer { jobs, timeout })
    }

    /// How long an evaluation waits for one answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Authorizer for ClusterAuthorizer {
    fn authorize(&self, attributes: &Attributes) -> Decision {
        let (reply, answer) = mpsc::sync_channel(1);
        if self.jobs.try_send((attributes.clone(), reply)).is_err() {
            return Decision::error("too many SubjectAccessReviews waiting");
        }
        answer.recv_timeout(self.timeout).unwrap_or_else(|_| {
            Decision::error(format!(
                "no SubjectAccessReview answer within {} ms",
                self.timeout.as_millis()
            ))
        })
    }
}

/// The SubjectAccessReview of one check.
pub fn access_review(a: &Attributes) -> SubjectAccessReview {
    let (resource_attributes, non_resource_attributes) = match &a.target {
        Target::Path(path) => (
            None,
            Some(NonResourceAttributes {
                path: Some(path.clone()),
                verb: Some(a.verb.clone()),
            }),
        ),
        Target::Resource(r) => (
            Some(ResourceAttributes {
                group: Some(r.group.clone()),
                resource: Some(r.resource.clone()),
                subresource: Some(r.subresource.clone()),
                namespace: Some(r.namespace.clone()),
                name: Some(r.name.clone()),
                verb: Some(a.verb.clone()),
                version: Some("*".to_string()),
                ..ResourceAttributes::default()
            }),
            None,
        ),
    };
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(a.user.username.clone()),
            uid: Some(a.user.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(a.user.groups.clone()),
            extra: Some(a.user.extra.clone()).filter(|e| !e.is_empty()),
            resource_attributes,
            non_resource_attributes,
        },
        ..SubjectAccessReview::default()
    }
}

async fn review(client: kube::Client, a: &Attributes) -> Decision {
    let api: kube::Api<SubjectAccessReview> = kube::Api::all(client);
    match api
        .create(&kube::api::PostParams::default(), &access_review(a))
        .await
    {
        Ok(answer) => match answer.status {
            Some(status) => Decision {
                allowed: status.allowed && !status.denied.unwrap_or(false),
                reason: status.reason.unwrap_or_default(),
                error: status.evaluation_error.filter(|e| !e.is_empty()),
            },
            None => Decision::error("the SubjectAccessReview came back without a status"),
        },
        Err(err) => Decision::error(format!("SubjectAccessReview failed: {err}")),
    }
}
