//! The `authorizer` checks of policies answered by the cluster: one
//! SubjectAccessReview per distinct check, against an in-process API
//! server, with a bounded wait.
use axum::routing::post;
use axum::Json;
use gpu_admission::authz::{Attributes, Authorizer, ResourceTarget, Target, User};
use gpu_admission::cluster::access_review::ClusterAuthorizer;
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, PolicySet};
use gpu_admission::review::{Operation, Request};
use gpu_admission::subject::Subject;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An API server answering SubjectAccessReviews: `alice` may do anything
/// on pods, anyone may get `/healthz`, `slow` gets an answer after two
/// seconds. Every review received is kept.
async fn start_api_server(received: Arc<Mutex<Vec<Value>>>) -> String {
    let app = axum::Router::new().route(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        post(move |Json(review): Json<Value>| {
            let received = received.clone();
            async move {
                received.lock().unwrap().push(review.clone());
                let spec = &review["spec"];
                if spec["user"] == "slow" {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                let allowed = (spec["user"] == "alice"
                    && spec["resourceAttributes"]["resource"] == "pods")
                    || spec["nonResourceAttributes"]["path"] == "/healthz";
                let mut answer = review.clone();
                answer["status"] = json!({
                    "allowed": allowed,
                    "reason": if allowed { "RBAC: allowed by ClusterRole \"pods\"" } else { "no RBAC policy matched" },
                });
                Json(answer)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn authorizer(url: &str, timeout: Duration) -> Arc<ClusterAuthorizer> {
    let config = kube::Config::new(url.parse().unwrap());
    Arc::new(ClusterAuthorizer::start(Some(config), timeout).unwrap())
}

fn check(user: &str, groups: &[&str], verb: &str, target: Target) -> Attributes {
    Attributes {
        user: User {
            username: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..User::default()
        },
        verb: verb.into(),
        target,
    }
}

fn pods(namespace: &str) -> Target {
    Target::Resource(ResourceTarget {
        group: String::new(),
        resource: "pods".into(),
        subresource: "status".into(),
        namespace: namespace.into(),
        name: "web".into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_are_subject_access_reviews() {
    let received = Arc::new(Mutex::new(Vec::new()));
    let url = start_api_server(received.clone()).await;
    let authz = authorizer(&url, Duration::from_secs(5));
    let (a, b, c) = {
        let authz = authz.clone();
        tokio::task::spawn_blocking(move || {
            (
                authz.authorize(&check("alice", &["dev"], "update", pods("ml"))),
                authz.authorize(&check("bob", &[], "update", pods("ml"))),
                authz.authorize(&check("bob", &[], "get", Target::Path("/healthz".into()))),
            )
        })
        .await
        .unwrap()
    };
    assert!(a.allowed && a.error.is_none(), "{a:?}");
    assert_eq!(a.reason, "RBAC: allowed by ClusterRole \"pods\"");
    assert!(!b.allowed && b.error.is_none(), "{b:?}");
    assert_eq!(b.reason, "no RBAC policy matched");
    assert!(c.allowed, "{c:?}");
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 3);
    assert_eq!(received[0]["apiVersion"], "authorization.k8s.io/v1");
    assert_eq!(received[0]["kind"], "SubjectAccessReview");
    assert_eq!(
        received[0]["spec"],
        json!({"user": "alice", "groups": ["dev"], "resourceAttributes": {
            "group": "", "resource": "pods", "subresource": "status", "namespace": "ml",
            "name": "web", "verb": "update", "version": "*"}})
    );
    assert_eq!(
        received[2]["spec"]["nonResourceAttributes"],
        json!({"path": "/healthz", "verb": "get"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_missing_answer_is_an_error_not_a_hang() {
    let received = Arc::new(Mutex::new(Vec::new()));
    let url = start_api_server(received).await;
    let authz = authorizer(&url, Duration::from_millis(200));
    let started = std::time::Instant::now();
    let slow = tokio::task::spawn_blocking(move || {
        authz.authorize(&check("slow", &[], "get", pods("ml")))
    })
    .await
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(!slow.allowed);
    assert_eq!(
        slow.error.as_deref(),
        Some("no SubjectAccessReview answer within 200 ms")
    );
    // Nobody listening: an error too.
    let nowhere = authorizer("http://127.0.0.1:9", Duration::from_secs(5));
    let refused = tokio::task::spawn_blocking(move || {
        nowhere.authorize(&check("alice", &[], "get", pods("ml")))
    })
    .await
    .unwrap();
    assert!(!refused.allowed);
    assert!(
        refused
            .error
            .as_deref()
            .unwrap_or_default()
            .starts_with("SubjectAccessReview failed"),
        "{refused:?}"
    );
}

/// Through the policy engine: a policy's checks are asked of the cluster,
/// each distinct one once per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_ask_the_cluster_once_per_distinct_check() {
    let received = Arc::new(Mutex::new(Vec::new()));
    let url = start_api_server(received.clone()).await;
    let authz = authorizer(&url, Duration::from_secs(5));
    let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: may-update-pods}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  validations:
  - expression: "authorizer.requestResource.check('update').allowed()"
    messageExpression: "'no: ' + authorizer.requestResource.check('update').reason()"
  - expression: "object.spec.containers.all(c, authorizer.group('').resource('pods').namespace('ml').check('update').allowed())"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: may-update-pods}
spec: {policyName: may-update-pods, validationActions: [Deny]}
"#;
    let set = PolicySet::compile(&parse_documents(Path::new("p.yaml"), yaml).unwrap()).unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]}});
    let denials = tokio::task::spawn_blocking(move || {
        let evaluate = |user: &str| {
            let mut req = Request::for_object(pod.clone(), Operation::Create, None);
            req.user_info = json!({"username": user});
            let subject = Subject::new(&req, &StaticNamespaces::new(), &Default::default())
                .with_authorizer(authz.clone());
            set.evaluate_subject(&subject, None).denials
        };
        (evaluate("alice"), evaluate("bob"))
    })
    .await
    .unwrap();
    assert_eq!(denials.0, Vec::<String>::new());
    assert_eq!(denials.1.len(), 2, "{:?}", denials.1);
    assert_eq!(denials.1[0], "may-update-pods: no: no RBAC policy matched");
    // Two distinct checks per request (the request's own resource, and
    // pods in ml), for two requests.
    assert_eq!(received.lock().unwrap().len(), 4);
}
