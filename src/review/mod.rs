//! AdmissionReview `admission.k8s.io/v1` in and out: the only place that
//! knows the wire format. Objects are kept as raw JSON so that patches are
//! computed against exactly what the apiserver sent.
mod json_text;
mod shape;

pub use shape::{measure, Limits, Shape, TooLarge};

use crate::k8s::json::{generated_name, str_at, str_field, Pointer as _};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Group, version and kind of an object (`request.kind`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

/// Group, version and resource (`request.resource`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

/// The admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// One admission request, decoded once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    pub kind: GroupVersionKind,
    pub resource: GroupVersionResource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<GroupVersionKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<GroupVersionResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default)]
    pub user_info: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
}

impl Request {
    /// `namespace/name` (or `name`) for logs and messages; falls back to the
    /// object's `generateName` for pods not yet named.
    pub fn display_name(&self) -> String {
        let name = self.name_or_generated();
        match &self.namespace {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name,
        }
    }

    /// The request's name, or for an object not yet named its
    /// `generateName` (`web-*`).
    pub fn name_or_generated(&self) -> String {
        match self.name.as_str() {
            "" => generated_name(self.object.as_ref()),
            name => name.to_string(),
        }
    }

    /// A request for `object` as kube-apiserver would send it on `operation`,
    /// derived from the object's apiVersion and kind. Used by the CLI and
    /// tests, which start from manifests rather than AdmissionReviews.
    pub fn for_object(object: Value, operation: Operation, namespace: Option<&str>) -> Request {
        let api_version = object.get("apiVersion").and_then(Value::as_str);
        let api_version = api_version.unwrap_or("v1");
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.to_string()),
        };
        let kind = str_field(&object, "kind").to_string();
        let name = str_at(&object, "/metadata/name").to_string();
        let namespace =
            namespace.or_else(|| object.at("/metadata/namespace").and_then(Value::as_str));
        let namespace = namespace.map(str::to_string);
        let gvk = GroupVersionKind {
            group: group.clone(),
            version: version.clone(),
            kind: kind.clone(),
        };
        let gvr = GroupVersionResource {
            group,
            version,
            resource: plural_resource(&kind),
        };
        let (obj, old) = match operation {
            Operation::Delete => (None, Some(object)),
            _ => (Some(object), None),
        };
        Request {
            uid: "00000000-0000-0000-0000-000000000000".to_string(),
            kind: gvk.clone(),
            resource: gvr.clone(),
            sub_resource: None,
            request_kind: Some(gvk),
            request_resource: Some(gvr),
            request_sub_resource: None,
            name,
            namespace,
            operation,
            user_info: json!({"username": "gpu-admission-cli"}),
            object: obj,
            old_object: old,
            dry_run: false,
            options: None,
        }
    }
}

/// The lower-case plural resource name kube-apiserver uses for a kind.
pub fn plural_resource(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.as_str() {
        "" => String::new(),
        "endpoints" => lower,
        l if l.ends_with('s') || l.ends_with("sh") || l.ends_with("ch") || l.ends_with('x') => {
            format!("{l}es")
        }
        l if l.ends_with('y') && !l.ends_with("ay") && !l.ends_with("ey") && !l.ends_with("oy") => {
            format!("{}ies", &l[..l.len() - 1])
        }
        _ => format!("{lower}s"),
    }
}

/// Whether objects of this kind live outside namespaces. Covers the
/// built-in kinds, the node-pool kinds the webhook sees and Kueue's
/// cluster-wide kinds; anything else is taken as namespaced.
pub fn is_cluster_scoped(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("", "Namespace" | "Node" | "PersistentVolume")
            | (
                "rbac.authorization.k8s.io",
                "ClusterRole" | "ClusterRoleBinding"
            )
            | (
                "storage.k8s.io",
                "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment"
            )
            | ("scheduling.k8s.io", "PriorityClass")
            | ("node.k8s.io", "RuntimeClass")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | (
                "admissionregistration.k8s.io",
                "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
                    | "MutatingWebhookConfiguration"
                    | "ValidatingWebhookConfiguration"
            )
            | ("karpenter.sh", "NodePool" | "NodeClaim")
            | ("trainer.kubeflow.org", "ClusterTrainingRuntime")
            | ("serving.kserve.io", "ClusterServingRuntime")
            | ("argoproj.io", "ClusterWorkflowTemplate")
            | ("karpenter.azure.com", "AKSNodeClass")
            | (
                "kueue.x-k8s.io",
                "ResourceFlavor"
                    | "ClusterQueue"
                    | "Cohort"
                    | "Topology"
                    | "AdmissionCheck"
                    | "WorkloadPriorityClass"
            )
    )
}

/// The answer to one request, before it is put on the wire.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    pub allowed: bool,
    /// Shown to the user by kubectl when the request is denied.
    pub message: Option<String>,
    /// A `metav1.StatusReason` such as `Forbidden` or `Invalid`.
    pub reason: Option<String>,
    /// HTTP-style status code for a denial (403 by default).
    pub code: Option<u16>,
    pub patch: Option<json_patch::Patch>,
    pub warnings: Vec<String>,
    pub audit_annotations: BTreeMap<String, String>,
}

impl Response {
    pub fn allow() -> Response {
        Response {
            allowed: true,
            ..Response::default()
        }
    }

    pub fn deny(message: impl Into<String>) -> Response {
        Response {
            allowed: false,
            message: Some(message.into()),
            reason: Some("Forbidden".to_string()),
            code: Some(403),
            ..Response::default()
        }
    }

    /// Patch operations, or none for an empty patch.
    pub fn with_patch(mut self, patch: json_patch::Patch) -> Response {
        self.patch = if patch.0.is_empty() {
            None
        } else {
            Some(patch)
        };
        self
    }

    /// The decision as a bounded label: `allowed`, `denied` or `patched`.
    pub fn decision(&self) -> &'static str {
        match (self.allowed, &self.patch) {
            (false, _) => "denied",
            (true, Some(_)) => "patched",
            (true, None) => "allowed",
        }
    }
}

/// Why a body could not be read as an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("body is not JSON: {0}")]
    Json(serde_json::Error),
    #[error("expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got {0}")]
    WrongKind(String),
    #[error("AdmissionReview has no request")]
    MissingRequest,
    #[error("AdmissionReview request is malformed: {0}")]
    BadRequest(serde_json::Error),
    #[error("the object is too large to evaluate: {0}")]
    TooLarge(#[from] TooLarge),
    #[error("AdmissionReview request uid is {0} bytes long; at most {MAX_UID_BYTES} are echoed")]
    UidTooLong(usize),
    /// `request.object` or `request.oldObject` is JSON but no object (a
    /// string, number, boolean or array): nothing can be judged of it. The
    /// request is otherwise readable, so its uid is known.
    #[error("AdmissionReview request.{field} is {found}, not an object")]
    NotAnObject {
        uid: String,
        field: &'static str,
        found: &'static str,
    },
}

/// Longest `request.uid` answered. kube-apiserver's are UUIDs (36 bytes);
/// a longer one is refused as unreadable, so that no answer, which echoes
/// it, is large (answers a client leaves unread are held per connection).
pub const MAX_UID_BYTES: usize = 128;

fn checked_uid(uid: &str) -> Result<(), DecodeError> {
    if uid.len() > MAX_UID_BYTES {
        return Err(DecodeError::UidTooLong(uid.len()));
    }
    Ok(())
}

/// An AdmissionReview v1 whose envelope has been checked and whose request
/// is still the raw JSON of the body: nothing of it is decoded yet but its
/// uid, so that even a request refused for its size gets an answer.
#[derive(Debug)]
pub struct Envelope<'a> {
    request: &'a RawValue,
    /// `request.uid`, to echo in the answer.
    pub uid: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawReview<'a> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, borrow)]
    request: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RequestHead {
    uid: String,
}

/// Checks the envelope of an AdmissionReview v1 body and finds its request
/// without building a tree of it (unknown fields are skipped unread).
pub fn open(body: &[u8]) -> Result<Envelope<'_>, DecodeError> {
    let review: RawReview<'_> = serde_json::from_slice(body).map_err(DecodeError::Json)?;
    let api_version = review.api_version.as_deref();
    let kind = review.kind.as_deref();
    if api_version != Some("admission.k8s.io/v1") || kind != Some("AdmissionReview") {
        return Err(DecodeError::WrongKind(format!(
            "{}/{}",
            api_version.unwrap_or("<none>"),
            kind.unwrap_or("<none>")
        )));
    }
    let request = match review.request {
        Some(raw) if raw.get() != "null" => raw,
        _ => return Err(DecodeError::MissingRequest),
    };
    let head: RequestHead = serde_json::from_str(request.get()).map_err(DecodeError::BadRequest)?;
    checked_uid(&head.uid)?;
    Ok(Envelope {
        request,
        uid: head.uid,
    })
}

impl Envelope<'_> {
    /// Sizes the request without decoding it; refuses it past `limits`.
    pub fn measure(&self, limits: &Limits) -> Result<Shape, TooLarge> {
        shape::measure(self.request.get().as_bytes(), limits)
    }

    /// Decodes the request. Call [`Envelope::measure`] first: this builds
    /// the whole tree.
    pub fn decode(&self) -> Result<Request, DecodeError> {
        let request: Request =
            serde_json::from_str(self.request.get()).map_err(DecodeError::BadRequest)?;
        request.checked_objects()
    }
}

impl Request {
    /// The apiserver sends `null` rather than omitting absent objects; an
    /// object that is anything else but a JSON object cannot be judged and
    /// is refused, never taken for "no object".
    fn checked_objects(mut self) -> Result<Request, DecodeError> {
        for object in [&mut self.object, &mut self.old_object] {
            *object = object.take().filter(|o| !o.is_null());
        }
        for (field, value) in [("object", &self.object), ("oldObject", &self.old_object)] {
            let found = match value {
                None | Some(Value::Object(_)) => continue,
                Some(Value::String(_)) => "a string",
                Some(Value::Number(_)) => "a number",
                Some(Value::Bool(_)) => "a boolean",
                Some(Value::Array(_)) => "an array",
                Some(Value::Null) => unreachable!("null objects are absent"),
            };
            return Err(DecodeError::NotAnObject {
                uid: self.uid,
                field,
                found,
            });
        }
        Ok(self)
    }
}

/// Decodes an AdmissionReview v1 body into its request, refusing one past
/// the default [`Limits`] before building it, as the webhook does: the body
/// sized with [`measure_request`], then [`decode_review`].
pub fn decode(body: &[u8]) -> Result<Request, DecodeError> {
    if let Err(too_large) = measure_request(body, &Limits::default()) {
        // That it is no review at all is said first.
        open(body)?;
        return Err(too_large.into());
    }
    decode_review(body)
}

/// Sizes the request of an AdmissionReview body, in the same pass that
/// walks past the rest of the body (which is not counted: decoding skips it
/// without building it). `limits` hold for each of the request's objects
/// (`object`, `oldObject`): the request as a whole may take twice as much,
/// so that an UPDATE of an object that was admitted when it was created is
/// never refused for carrying it twice.
pub fn measure_request(body: &[u8], limits: &Limits) -> Result<Shape, TooLarge> {
    shape::measure_request(body, limits)
}

/// Decodes a whole AdmissionReview v1 body in one pass: the envelope
/// checked and the request built together. Size the body with
/// [`measure_request`] first: this builds the whole tree. A body that is
/// not a readable review gets the error [`open`] and then
/// [`Envelope::decode`] give (read again that way to say which part is
/// wrong).
pub fn decode_review(body: &[u8]) -> Result<Request, DecodeError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Review<'a> {
        #[serde(default, borrow)]
        api_version: Option<std::borrow::Cow<'a, str>>,
        #[serde(default, borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
        #[serde(default)]
        request: Option<Request>,
    }
    // Checked as UTF-8 once, then read as text: reading the bytes would
    // check each string again as it goes.
    let parsed = std::str::from_utf8(body)
        .ok()
        .and_then(|text| serde_json::from_str::<Review<'_>>(text).ok());
    match parsed {
        Some(Review {
            api_version: Some(api_version),
            kind: Some(kind),
            request: Some(request),
        }) if api_version == "admission.k8s.io/v1" && kind == "AdmissionReview" => {
            checked_uid(&request.uid)?;
            request.checked_objects()
        }
        _ => open(body)?.decode(),
    }
}

/// Encodes the answer to request `uid` as an AdmissionReview v1, with the
/// patch as a base64 string and `patchType: JSONPatch` as the API documents.
pub fn encode(uid: &str, response: &Response) -> Value {
    serde_json::to_value(Answer::new(uid, response)).unwrap_or(Value::Null)
}

/// [`encode`] written as JSON, as the webhook sends it: the text
/// `serde_json` writes for it, byte for byte, written straight into one
/// buffer (no tree built, the patch base64-encoded in place).
pub fn encode_json(uid: &str, response: &Response) -> Vec<u8> {
    use json_text::{separated, string};
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
    );
    string(&mut out, uid);
    out.extend_from_slice(if response.allowed {
        b",\"allowed\":true"
    } else {
        b",\"allowed\":false"
    });
    let denied = !response.allowed;
    if denied || response.message.is_some() {
        out.extend_from_slice(b",\"status\":{");
        if let Some(message) = &response.message {
            out.extend_from_slice(b"\"message\":");
            string(&mut out, message);
            if denied {
                out.push(b',');
            }
        }
        if denied {
            out.extend_from_slice(b"\"status\":\"Failure\",\"reason\":");
            string(&mut out, response.reason.as_deref().unwrap_or("Forbidden"));
            out.extend_from_slice(b",\"code\":");
            out.extend_from_slice(response.code.unwrap_or(403).to_string().as_bytes());
        }
        out.push(b'}');
    }
    if let Some(patch) = &response.patch {
        out.extend_from_slice(b",\"patch\":\"");
        base64_into(&mut out, &json_text::patch(patch));
        out.extend_from_slice(b"\",\"patchType\":\"JSONPatch\"");
    }
    if !response.warnings.is_empty() {
        out.extend_from_slice(b",\"warnings\":[");
        separated(&mut out, &response.warnings, |out, w| string(out, w));
        out.push(b']');
    }
    if !response.audit_annotations.is_empty() {
        out.extend_from_slice(b",\"auditAnnotations\":{");
        separated(
            &mut out,
            &response.audit_annotations,
            |out, (key, value)| {
                string(out, key);
                out.push(b':');
                string(out, value);
            },
        );
        out.push(b'}');
    }
    out.extend_from_slice(b"}}");
    out
}

/// Appends `bytes` base64-encoded (standard alphabet, padded) to `out`,
/// encoded in one pass into room of its exact size.
fn base64_into(out: &mut Vec<u8>, bytes: &[u8]) {
    use base64::engine::general_purpose::STANDARD;
    let at = out.len();
    out.resize(at + bytes.len().div_ceil(3) * 4, 0);
    let written = STANDARD.encode_slice(bytes, &mut out[at..]).unwrap_or(0);
    out.truncate(at + written);
}

/// An AdmissionReview v1 answer, borrowing from the [`Response`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Answer<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: AnswerResponse<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AnswerResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<AnswerStatus<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: &'a BTreeMap<String, String>,
}

/// `metav1.Status`: the message of any answer that has one, and for a
/// denial its status, reason and code.
#[derive(Serialize)]
struct AnswerStatus<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

impl<'a> Answer<'a> {
    fn new(uid: &'a str, response: &'a Response) -> Answer<'a> {
        let denied = !response.allowed;
        let status = (denied || response.message.is_some()).then(|| AnswerStatus {
            message: response.message.as_deref(),
            status: denied.then_some("Failure"),
            reason: denied.then(|| response.reason.as_deref().unwrap_or("Forbidden")),
            code: denied.then(|| response.code.unwrap_or(403)),
        });
        let patch = response.patch.as_ref().map(base64_string);
        Answer {
            api_version: "admission.k8s.io/v1",
            kind: "AdmissionReview",
            response: AnswerResponse {
                uid,
                allowed: response.allowed,
                status,
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch,
                warnings: &response.warnings,
                audit_annotations: &response.audit_annotations,
            },
        }
    }
}

/// `patch` as JSON ([`json_text::patch`]), base64-encoded, as a JSON
/// string. Base64 text needs no escaping, so the string is written as it
/// is instead of being scanned for characters to escape like any other
/// string.
fn base64_string(patch: &json_patch::Patch) -> Box<RawValue> {
    let mut quoted = vec![b'"'];
    base64_into(&mut quoted, &json_text::patch(patch));
    quoted.push(b'"');
    // Quoted base64 text is always a JSON string: the default (`null`) is
    // never taken.
    String::from_utf8(quoted)
        .ok()
        .and_then(|quoted| RawValue::from_string(quoted).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An AdmissionReview v1 body with `fields` (its request...) set.
    fn envelope(fields: Value) -> Vec<u8> {
        let mut review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
        review
            .as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::to_vec(&review).unwrap()
    }

    fn review(request: Value) -> Vec<u8> {
        envelope(json!({ "request": request }))
    }

    fn pod_request() -> Value {
        json!({
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "trainer",
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"}},
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        })
    }

    #[test]
    fn decodes_a_pod_create() {
        let req = decode(&review(pod_request())).unwrap();
        assert_eq!(req.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(req.kind.kind, "Pod");
        assert_eq!(req.operation, Operation::Create);
        assert_eq!(req.namespace.as_deref(), Some("ml"));
        assert_eq!(req.old_object, None, "null oldObject is absent");
        assert_eq!(req.display_name(), "ml/trainer");
    }

    #[test]
    fn rejects_what_is_not_a_v1_review() {
        assert!(matches!(decode(b"{"), Err(DecodeError::Json(_))));
        let v1beta1 =
            envelope(json!({"apiVersion": "admission.k8s.io/v1beta1", "request": pod_request()}));
        assert!(matches!(decode(&v1beta1), Err(DecodeError::WrongKind(_))));
        let no_request = envelope(json!({}));
        assert!(matches!(
            decode(&no_request),
            Err(DecodeError::MissingRequest)
        ));
        let mut bad = pod_request();
        bad["operation"] = json!("PATCH");
        assert!(matches!(
            decode(&review(bad)),
            Err(DecodeError::BadRequest(_))
        ));
    }

    #[test]
    fn a_uid_longer_than_any_apiserver_sends_is_unreadable() {
        let review = |uid: &str| {
            review(
                json!({"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE", "userInfo": {"username": "alice"},
                "object": {"kind": "Pod"}}),
            )
        };
        let long = "u".repeat(MAX_UID_BYTES + 1);
        assert!(matches!(
            decode_review(&review(&long)),
            Err(DecodeError::UidTooLong(n)) if n == MAX_UID_BYTES + 1
        ));
        assert!(matches!(
            open(&review(&long)),
            Err(DecodeError::UidTooLong(_))
        ));
        let longest = "u".repeat(MAX_UID_BYTES);
        assert_eq!(decode_review(&review(&longest)).unwrap().uid, longest);
    }

    #[test]
    fn refuses_a_request_too_large_to_decode_but_knows_its_uid() {
        let mut request = pod_request();
        let env: Vec<Value> = (0..300_000).map(|_| json!({"a": 0})).collect();
        request["object"]["spec"] = json!({"containers": [{"name": "c", "env": env}]});
        let body = review(request);
        assert!(matches!(
            decode(&body),
            Err(DecodeError::TooLarge(TooLarge::Nodes { limit: 250_000 }))
        ));
        let envelope = open(&body).unwrap();
        assert_eq!(envelope.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert!(envelope.measure(&Limits::default()).is_err());
    }

    #[test]
    fn an_update_may_carry_two_objects_each_as_large_as_one_create() {
        let limits = Limits {
            max_nodes: 5_000,
            max_depth: 100,
            max_decoded_bytes: 4 << 20,
        };
        let pod_with_env = |entries: usize| {
            let env: Vec<Value> = (0..entries)
                .map(|i| json!({"name": format!("V{i}"), "value": "x"}))
                .collect();
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "trainer", "namespace": "ml"},
                   "spec": {"containers": [{"name": "c", "image": "i", "env": env}]}})
        };
        // About 3,000 values: one fits, two together do not fit one
        // object's limit.
        let pod = pod_with_env(1_000);
        let mut create = pod_request();
        create["object"] = pod.clone();
        let created = measure_request(&review(create), &limits).unwrap();
        assert!(created.nodes > limits.max_nodes / 2, "{created:?}");
        let mut update = pod_request();
        update["operation"] = json!("UPDATE");
        update["object"] = pod.clone();
        update["oldObject"] = pod;
        let updated = measure_request(&review(update.clone()), &limits).unwrap();
        assert!(updated.nodes > limits.max_nodes, "{updated:?}");
        // Either object past one object's limit is refused, alone or beside
        // a small other one.
        let big = pod_with_env(2_000);
        let mut create = pod_request();
        create["object"] = big.clone();
        assert_eq!(
            measure_request(&review(create), &limits),
            Err(TooLarge::Nodes { limit: 5_000 })
        );
        for (field, other) in [("object", "oldObject"), ("oldObject", "object")] {
            let mut one_big = update.clone();
            one_big[field] = big.clone();
            one_big[other] = pod_with_env(1);
            assert_eq!(
                measure_request(&review(one_big), &limits),
                Err(TooLarge::Nodes { limit: 5_000 }),
                "{field}"
            );
        }
        // The memory estimate is held per object the same way.
        let memory = Limits {
            max_nodes: 1_000_000,
            max_depth: 100,
            max_decoded_bytes: 1 << 20,
        };
        let annotated = |bytes: usize| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "t", "annotations": {"note": "x".repeat(bytes)}}})
        };
        let mut two = pod_request();
        two["operation"] = json!("UPDATE");
        two["object"] = annotated(150_000);
        two["oldObject"] = annotated(150_000);
        let shape = measure_request(&review(two.clone()), &memory).unwrap();
        assert!(shape.decoded_bytes > memory.max_decoded_bytes, "{shape:?}");
        two["object"] = annotated(600_000);
        assert!(matches!(
            measure_request(&review(two), &memory),
            Err(TooLarge::Memory { limit_mib: 1, .. })
        ));
        // The request as a whole never takes more than two objects' worth.
        let mut padded = update;
        padded["options"] = json!(vec![json!({"a": 0}); 2_000]);
        assert!(matches!(
            measure_request(&review(padded), &limits),
            Err(TooLarge::Nodes { limit: 10_000 } | TooLarge::Memory { .. })
        ));
    }

    #[test]
    fn envelope_fields_outside_the_request_are_skipped_unread() {
        let body = envelope(json!({
            "padding": vec![json!({"a": 0}); 300_000],
            "request": pod_request(),
        }));
        assert_eq!(decode(&body).unwrap().name, "trainer");
    }

    #[test]
    fn deep_nesting_is_refused_without_recursing_through_it() {
        for depth in [101, 1_000, 200_000] {
            let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let text = serde_json::to_string(&pod_request()).unwrap().replacen(
                r#""dryRun":false"#,
                &format!(r#""dryRun":false,"deep":{nested}"#),
                1,
            );
            let review = format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{text}}}"#
            );
            match decode(review.as_bytes()) {
                Err(DecodeError::TooLarge(TooLarge::Depth { limit: 100 })) => {}
                // serde_json's own recursion limit (128) may stop it first.
                Err(DecodeError::Json(_) | DecodeError::BadRequest(_)) => {}
                other => panic!("depth {depth}: {other:?}"),
            }
        }
    }

    #[test]
    fn deep_nesting_beside_the_request_is_skipped_without_recursing_through_it() {
        // Walked past by the sizing without being counted and skipped by
        // the parser without recursion, as the two-pass reading did: the
        // review is the one without it, and no stack overflows.
        let request = serde_json::to_string(&pod_request()).unwrap();
        let plain = decode(&review(pod_request())).unwrap();
        let shape = measure(request.as_bytes(), &Limits::default()).unwrap();
        for depth in [129, 200_000] {
            let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let review = format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","pad":{nested},"request":{request}}}"#
            );
            assert_eq!(
                measure_request(review.as_bytes(), &Limits::default()),
                Ok(shape)
            );
            assert_eq!(decode(review.as_bytes()).unwrap(), plain, "depth {depth}");
        }
    }

    #[test]
    fn a_request_without_uid_is_malformed() {
        let mut request = pod_request();
        request.as_object_mut().unwrap().remove("uid");
        assert!(matches!(
            decode(&review(request)),
            Err(DecodeError::BadRequest(_))
        ));
        let null_request = envelope(json!({ "request": null }));
        assert!(matches!(
            decode(&null_request),
            Err(DecodeError::MissingRequest)
        ));
    }

    #[test]
    fn encodes_patch_as_base64_json_patch() {
        let patch: json_patch::Patch = serde_json::from_value(
            json!([{"op": "add", "path": "/spec/tolerations", "value": []}]),
        )
        .unwrap();
        let out = encode("abc", &Response::allow().with_patch(patch));
        let response = &out["response"];
        assert_eq!(response["uid"], "abc");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(response["patch"].as_str().unwrap())
            .unwrap();
        let ops: Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(ops[0]["path"], "/spec/tolerations");
    }

    #[test]
    fn the_patch_is_written_as_the_base64_string_of_its_json() {
        for ops in [
            json!([]),
            json!([{"op": "add", "path": "/metadata/annotations/a~1b", "value": "é \" \\ \n ✓"}]),
            json!([{"op": "add", "path": "/spec/x", "value": {"k": [1, 2.5, null, true]}}]),
        ] {
            let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
            let expected = base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(&patch).unwrap());
            let written = base64_string(&patch);
            let read: String = serde_json::from_str(written.get()).unwrap();
            assert_eq!(read, expected);
        }
    }

    #[test]
    fn encodes_denials_with_status_and_warnings() {
        let mut response = Response::deny("gpu-limits: container \"train\" asks for 9 GPUs");
        response
            .warnings
            .push("gpu-keepalive: container \"train\" runs sleep infinity".into());
        let out = encode("abc", &response);
        let r = &out["response"];
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 403);
        assert_eq!(r["status"]["reason"], "Forbidden");
        assert!(r["status"]["message"].as_str().unwrap().contains("9 GPUs"));
        assert_eq!(
            r["warnings"][0],
            "gpu-keepalive: container \"train\" runs sleep infinity"
        );
        assert!(r.get("patch").is_none());
    }

    #[test]
    fn the_sent_answer_is_the_encoded_one_with_only_the_fields_that_apply() {
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "remove", "path": "/spec/x"}])).unwrap();
        let mut warned = Response::allow().with_patch(patch);
        warned.warnings.push("w".into());
        warned.audit_annotations.insert("k".into(), "v".into());
        let mut invalid = Response::deny("bad");
        invalid.reason = Some("Invalid".into());
        invalid.code = Some(422);
        let mut bare_denial = Response::deny("no");
        bare_denial.reason = None;
        bare_denial.code = None;
        let mut allowed_with_message = Response::allow();
        allowed_with_message.message = Some("note".into());
        let cases = [
            (Response::allow(), json!({"uid": "u", "allowed": true})),
            (
                allowed_with_message,
                json!({"uid": "u", "allowed": true, "status": {"message": "note"}}),
            ),
            (
                invalid,
                json!({"uid": "u", "allowed": false, "status": {"message": "bad",
                    "status": "Failure", "reason": "Invalid", "code": 422}}),
            ),
            (
                bare_denial,
                json!({"uid": "u", "allowed": false, "status": {"message": "no",
                    "status": "Failure", "reason": "Forbidden", "code": 403}}),
            ),
            (
                warned,
                json!({"uid": "u", "allowed": true,
                    "patch": base64::engine::general_purpose::STANDARD
                        .encode(br#"[{"op":"remove","path":"/spec/x"}]"#),
                    "patchType": "JSONPatch", "warnings": ["w"],
                    "auditAnnotations": {"k": "v"}}),
            ),
        ];
        for (response, want) in cases {
            let want = json!({"apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview", "response": want});
            assert_eq!(encode("u", &response), want);
            let sent: Value = serde_json::from_slice(&encode_json("u", &response)).unwrap();
            assert_eq!(sent, want);
        }
    }

    /// The answer written by hand is the text serde_json writes for the
    /// answer's declared shape, for every combination of fields and for
    /// text that needs escaping anywhere.
    #[test]
    fn the_sent_answer_is_what_serde_json_writes() {
        let odd = "quote \" backslash \\ new line \n tab \t nul \u{0} é 🚀";
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/metadata/annotations/a~1b", "value": {"k": odd}},
            {"op": "remove", "path": "/spec/x"}
        ]))
        .unwrap();
        let mut responses = Vec::new();
        for allowed in [true, false] {
            for message in [None, Some("plain"), Some(odd)] {
                for with_patch in [false, true] {
                    for (warnings, annotations) in [(0, 0), (1, 0), (0, 2), (2, 1)] {
                        for (reason, code) in [(None, None), (Some(odd), Some(422))] {
                            let mut r = if allowed {
                                Response::allow()
                            } else {
                                Response::deny("denied")
                            };
                            r.message = message.map(str::to_string);
                            r.reason = reason.map(str::to_string);
                            r.code = code;
                            if with_patch {
                                r.patch = Some(patch.clone());
                            }
                            r.warnings = (0..warnings).map(|i| format!("{odd} {i}")).collect();
                            r.audit_annotations = (0..annotations)
                                .map(|i| (format!("{odd}/{i}"), format!("{i} {odd}")))
                                .collect();
                            responses.push(r);
                        }
                    }
                }
            }
        }
        for uid in ["705ab4f5-6393-11e8-b7cc-42010a800002", odd] {
            for response in &responses {
                let by_serde = serde_json::to_vec(&Answer::new(uid, response)).unwrap();
                assert_eq!(
                    String::from_utf8(encode_json(uid, response)).unwrap(),
                    String::from_utf8(by_serde).unwrap()
                );
            }
        }
    }

    #[test]
    fn the_envelope_names_the_uid_wherever_it_is() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
            "request":{"kind":{},"uid":"later"}}"#;
        assert_eq!(open(body).unwrap().uid, "later");
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
            "request":{"name":"x","u\u0069d":"escaped-key"}}"#;
        assert_eq!(open(body).unwrap().uid, "escaped-key");
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
            "request":{"uid":7}}"#;
        assert!(matches!(open(body), Err(DecodeError::BadRequest(_))));
    }

    #[test]
    fn empty_patch_is_no_patch() {
        let r = Response::allow().with_patch(json_patch::Patch(vec![]));
        assert_eq!(r.patch, None);
        assert_eq!(r.decision(), "allowed");
    }

    #[test]
    fn request_for_manifest_object() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team-a"}});
        let req = Request::for_object(obj, Operation::Create, None);
        assert_eq!(req.kind.group, "apps");
        assert_eq!(req.resource.resource, "deployments");
        assert_eq!(req.namespace.as_deref(), Some("team-a"));
        assert_eq!(plural_resource("NodePool"), "nodepools");
        assert_eq!(plural_resource("Policy"), "policies");
        assert_eq!(plural_resource("Ingress"), "ingresses");
    }
}
