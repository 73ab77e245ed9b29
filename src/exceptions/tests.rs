use super::*;
use crate::cel::Extensions;
use crate::review::Operation;
use serde_json::json;

fn env() -> Env {
    Env::new(Extensions::default())
}

fn exception(spec: Value) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "nccl-bench", "namespace": "research"},
        "spec": spec,
    })
}

fn valid_spec() -> Value {
    json!({
        "policies": ["gpu-privileged"],
        "match": {"kinds": ["Pod"], "names": ["nccl-bench-*"]},
        "reason": "NCCL benchmark needs privileged for a day",
        "expiresAt": "2026-12-31T00:00:00Z",
        "requestedBy": "alice@example.com",
    })
}

fn errors(spec: Value) -> Vec<String> {
    match read(&exception(spec), &env()) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn object(kind: &str, name: &str, namespace: &str, labels: Value) -> Request {
    let api = if kind == "Pod" { "v1" } else { "batch/v1" };
    Request::for_object(
        json!({"apiVersion": api, "kind": kind,
               "metadata": {"name": name, "namespace": namespace, "labels": labels},
               "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        Operation::Create,
        Some(namespace),
    )
}

fn pod(name: &str, namespace: &str, labels: Value) -> Request {
    object("Pod", name, namespace, labels)
}

#[test]
fn a_valid_exception_is_read_whole() {
    let e = read(&exception(valid_spec()), &env()).unwrap();
    assert_eq!(e.id(), "research/nccl-bench");
    assert_eq!(e.policies, ["gpu-privileged"]);
    assert_eq!(e.kinds, ["Pod"]);
    assert_eq!(e.requested_by.as_deref(), Some("alice@example.com"));
    let (at, text) = e.expires_at.clone().unwrap();
    assert_eq!(text, "2026-12-31T00:00:00Z");
    assert_eq!(at, parse_time("2026-12-31T00:00:00+00:00").unwrap());
    assert_eq!(
        e.describe(),
        "GpuPolicyException research/nccl-bench (NCCL benchmark needs privileged for a day; expires 2026-12-31T00:00:00Z)"
    );
}

#[test]
fn each_malformed_field_is_reported_at_its_path() {
    type Edit = fn(&mut Value);
    let cases: [(Edit, &str); 8] = [
        (
            |s| s["reason"] = json!("  "),
            "spec.reason: required: say why the objects need the exception (it is shown with every request it allows)",
        ),
        (
            |s| drop(s.as_object_mut().unwrap().remove("reason")),
            "spec.reason: required",
        ),
        (
            |s| s["expiresAt"] = json!("next tuesday"),
            "spec.expiresAt: \"next tuesday\" is not an RFC 3339 time such as 2026-12-31T00:00:00Z",
        ),
        (
            |s| s["match"] = json!({"kinds": ["Pod"]}),
            "spec.match: set at least one of names, selector or expression: an exception names the objects it lets through",
        ),
        (
            |s| s["match"]["selector"] = json!({"matchExpressions": [{"key": "app", "operator": "In"}]}),
            "spec.match.selector.matchExpressions[0].values: required with In and NotIn, and must be empty with Exists and DoesNotExist",
        ),
        (
            |s| s["policies"] = json!(["gpu-admission-exempt-label"]),
            "spec.policies[0]: gpu-admission-exempt-label guards exemptions and exceptions themselves and cannot be excepted",
        ),
        (
            |s| s["policies"] = json!([]),
            "spec.policies: name at least one policy (or \"*\" for every policy)",
        ),
        (
            |s| s["match"]["name"] = json!("typo"),
            "spec.match.name: unknown field, expected one of kinds, names, selector, expression",
        ),
    ];
    for (edit, want) in cases {
        let mut spec = valid_spec();
        edit(&mut spec);
        assert_eq!(errors(spec), [want]);
    }
    let mut spec = valid_spec();
    spec["match"] = json!({"expression": "object.metadata.name.startsWith("});
    let found = errors(spec);
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("spec.match.expression: line 1, column"),
        "{found:?}"
    );
}

#[test]
fn names_match_exactly_or_by_wildcards() {
    for (pattern, name, matches) in [
        ("bench", "bench", true),
        ("bench", "bench-1", false),
        ("bench-*", "bench-1", true),
        ("bench-*", "bench-", true),
        ("bench-*", "bench", false),
        ("*-bench", "nccl-bench", true),
        ("*", "anything", true),
        ("a*b*c", "abc", true),
        ("a*b*c", "a-x-b-y-c", true),
        ("a*b*c", "a-x-c-y-b", false),
        ("ab*ba", "aba", false),
        ("é*", "ébench", true),
        ("*é", "bench", false),
    ] {
        assert_eq!(glob_matches(pattern, name), matches, "{pattern} ~ {name}");
    }
}

#[test]
fn an_exception_takes_only_objects_of_its_namespace_kinds_names_and_labels() {
    let mut spec = valid_spec();
    spec["match"]["selector"] = json!({"matchLabels": {"app": "nccl"}});
    let e = read(&exception(spec), &env()).unwrap();
    let labels = json!({"app": "nccl"});
    assert!(e.matches_object(&pod("nccl-bench-1", "research", labels.clone()), "research"));
    assert!(!e.matches_object(&pod("nccl-bench-1", "other", labels.clone()), "other"));
    assert!(!e.matches_object(&pod("train-1", "research", labels.clone()), "research"));
    assert!(!e.matches_object(
        &pod("nccl-bench-1", "research", json!({"app": "x"})),
        "research"
    ));
    let job = object("Job", "nccl-bench-1", "research", labels);
    assert!(!e.matches_object(&job, "research"));
}

#[test]
fn policies_are_covered_by_name_or_star_but_never_the_guards() {
    let mut spec = valid_spec();
    spec["policies"] = json!(["*"]);
    let all = read(&exception(spec), &env()).unwrap();
    assert!(all.covers("gpu-privileged"));
    assert!(all.covers("gpu-count-limits"));
    for guard in NEVER_EXCEPTED {
        assert!(!all.covers(guard));
    }
    let one = read(&exception(valid_spec()), &env()).unwrap();
    assert!(one.covers("gpu-privileged"));
    assert!(!one.covers("gpu-count-limits"));
}

#[test]
fn an_exception_expires_at_its_time_and_is_listed_a_week_before() {
    let e = read(&exception(valid_spec()), &env()).unwrap();
    let end = parse_time("2026-12-31T00:00:00Z").unwrap();
    let second = Duration::from_secs(1);
    assert_eq!(e.state(end - second), State::Active);
    assert_eq!(e.state(end), State::Expired);
    assert!(e.expiring_soon(end - Duration::from_secs(6 * 86_400)));
    assert!(!e.expiring_soon(end - Duration::from_secs(8 * 86_400)));
    assert!(!e.expiring_soon(end));
    let lookup = StaticExceptions::new(vec![Arc::new(e)]);
    let req = pod("nccl-bench-1", "research", json!({}));
    assert_eq!(
        candidates(&lookup, &[], &req, "research", end - second).len(),
        1
    );
    assert!(candidates(&lookup, &[], &req, "research", end).is_empty());
    assert!(candidates(&lookup, &[], &req, "other", end - second).is_empty());
}

#[test]
fn the_requester_is_recorded_from_the_request_not_the_object() {
    let mut object = exception(valid_spec());
    object["spec"]["requestedBy"] = json!("admin@example.com");
    let mut req = Request::for_object(object.clone(), Operation::Create, None);
    req.user_info = json!({"username": "alice@example.com", "groups": ["system:authenticated"]});
    let patch = webhook::record_requester(&req);
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["spec"]["requestedBy"], "alice@example.com");
    // Written already as the user: nothing to change.
    let mut req = Request::for_object(patched.clone(), Operation::Create, None);
    req.user_info = json!({"username": "alice@example.com"});
    assert!(webhook::record_requester(&req).0.is_empty());
    // An UPDATE keeps the first requester, whoever sends it.
    let mut req = Request::for_object(object, Operation::Update, None);
    req.old_object = Some(patched);
    req.user_info = json!({"username": "admin@example.com"});
    let patch = webhook::record_requester(&req);
    let mut updated = req.object.clone().unwrap();
    json_patch::patch(&mut updated, &patch).unwrap();
    assert_eq!(updated["spec"]["requestedBy"], "alice@example.com");
}

#[test]
fn validate_refuses_a_requester_other_than_the_creator() {
    let judge = |req: &Request| webhook::judge(req, |v| read(v, &env()), |p| p == "gpu-privileged");
    let mut req = Request::for_object(exception(valid_spec()), Operation::Create, None);
    req.user_info = json!({"username": "alice@example.com"});
    assert_eq!(judge(&req), (Vec::new(), Vec::new()));
    req.user_info = json!({"username": "mallory@example.com"});
    assert_eq!(
        judge(&req).0,
        ["GpuPolicyException research/nccl-bench: spec.requestedBy: must be the creating user \"mallory@example.com\", not \"alice@example.com\": leave it out, gpu-admission records it"]
    );
    let mut changed = exception(valid_spec());
    changed["spec"]["requestedBy"] = json!("admin@example.com");
    let mut update = Request::for_object(changed, Operation::Update, None);
    update.old_object = Some(exception(valid_spec()));
    assert_eq!(
        judge(&update).0,
        ["GpuPolicyException research/nccl-bench: spec.requestedBy: cannot change (it was \"alice@example.com\"): it records who created the exception"]
    );
    let mut spec = valid_spec();
    spec["policies"] = json!(["gpu-privileged", "gpu-unknown"]);
    let mut unknown = Request::for_object(exception(spec), Operation::Create, None);
    unknown.user_info = json!({"username": "alice@example.com"});
    assert_eq!(
        judge(&unknown).1,
        ["GpuPolicyException research/nccl-bench: spec.policies[1]: no policy gpu-unknown is loaded; the exception lets nothing through until one is"]
    );
}
