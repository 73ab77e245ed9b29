//! Single objects: get, create, replace, patch (JSON patch and merge
//! patch) and delete, with the API server's optimistic concurrency (a
//! replace carrying a stale resourceVersion is 409 Conflict) and its
//! Status answers. The fake sends PATCH here (webhook configurations'
//! caBundle, Leases); its other writes are answered by [`super::writes`].
use super::{status_object, Cluster, Resource};
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

/// Where a request points: a resource, its namespace (for namespaced
/// kinds) and, for an object path, the object's name.
pub(super) struct Target {
    pub resource: Resource,
    pub namespace: String,
    pub name: Option<String>,
}

/// The object path or namespaced collection `path` names, if any.
pub(super) fn target(resources: &[Resource], path: &str) -> Option<Target> {
    resources.iter().find_map(|r| {
        let rest = path.strip_prefix(&r.discovery_path())?.strip_prefix('/')?;
        let parts: Vec<&str> = rest.split('/').collect();
        let (namespace, name) = match (r.namespaced, parts.as_slice()) {
            (true, ["namespaces", ns, plural]) if *plural == r.plural => (ns.to_string(), None),
            (true, ["namespaces", ns, plural, name]) if *plural == r.plural => {
                (ns.to_string(), Some(name.to_string()))
            }
            (false, [plural, name]) if *plural == r.plural => {
                (String::new(), Some(name.to_string()))
            }
            _ => return None,
        };
        Some(Target {
            resource: r.clone(),
            namespace,
            name,
        })
    })
}

/// Answers `method` on `target`; `body` is the request body,
/// `content_type` its type.
pub(super) fn answer(
    cluster: &mut Cluster,
    method: &Method,
    target: Target,
    content_type: &str,
    body: &[u8],
) -> (StatusCode, Value) {
    let Target {
        resource,
        namespace,
        name,
    } = target;
    let collection = resource.collection();
    let stored = |cluster: &Cluster, name: &str| {
        cluster
            .objects
            .get(&collection)
            .and_then(|objects| objects.get(&(namespace.clone(), name.to_string())))
            .cloned()
    };
    let not_found = |name: &str| {
        (
            StatusCode::NOT_FOUND,
            status_object(
                404,
                "NotFound",
                &format!("{} \"{name}\" not found", resource.plural),
            ),
        )
    };
    let parsed = || serde_json::from_slice::<Value>(body).map_err(|e| e.to_string());
    match (method.clone(), name) {
        (Method::GET, Some(name)) => match stored(cluster, &name) {
            Some(object) => (StatusCode::OK, object),
            None => not_found(&name),
        },
        (Method::POST, None) => {
            let Ok(mut object) = parsed() else {
                return bad_request("the body is not JSON");
            };
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if name.is_empty() {
                return bad_request("metadata.name is required");
            }
            if stored(cluster, &name).is_some() {
                return (
                    StatusCode::CONFLICT,
                    status_object(
                        409,
                        "AlreadyExists",
                        &format!("{} \"{name}\" already exists", resource.plural),
                    ),
                );
            }
            normalise(&mut object, &resource, &namespace);
            cluster.apply(object);
            (
                StatusCode::CREATED,
                stored(cluster, &name).expect("just created"),
            )
        }
        (Method::PUT, Some(name)) => {
            let Ok(mut object) = parsed() else {
                return bad_request("the body is not JSON");
            };
            let Some(current) = stored(cluster, &name) else {
                return not_found(&name);
            };
            let sent = object["metadata"]["resourceVersion"].as_str();
            if sent.is_some() && sent != current["metadata"]["resourceVersion"].as_str() {
                return conflict(&resource, &name);
            }
            object["metadata"]["uid"] = current["metadata"]["uid"].clone();
            normalise(&mut object, &resource, &namespace);
            cluster.apply(object);
            (
                StatusCode::OK,
                stored(cluster, &name).expect("just replaced"),
            )
        }
        (Method::PATCH, Some(name)) => {
            let Some(mut object) = stored(cluster, &name) else {
                return not_found(&name);
            };
            let Ok(patch) = parsed() else {
                return bad_request("the body is not JSON");
            };
            if content_type.starts_with("application/json-patch+json") {
                let Ok(patch) = serde_json::from_value::<json_patch::Patch>(patch) else {
                    return bad_request("not a JSON patch");
                };
                if let Err(e) = json_patch::patch(&mut object, &patch) {
                    return (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        status_object(422, "Invalid", &format!("the patch does not apply: {e}")),
                    );
                }
            } else if content_type.starts_with("application/merge-patch+json") {
                json_patch::merge(&mut object, &patch);
            } else {
                return (
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    status_object(415, "UnsupportedMediaType", content_type),
                );
            }
            normalise(&mut object, &resource, &namespace);
            cluster.apply(object);
            (
                StatusCode::OK,
                stored(cluster, &name).expect("just patched"),
            )
        }
        (Method::DELETE, Some(name)) => {
            if stored(cluster, &name).is_none() {
                return not_found(&name);
            }
            cluster.delete(&resource, &namespace, &name);
            (
                StatusCode::OK,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
            )
        }
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            status_object(405, "MethodNotAllowed", "not served by the fake"),
        ),
    }
}

/// Sets what the API server sets from the path and the kind.
fn normalise(object: &mut Value, resource: &Resource, namespace: &str) {
    object["apiVersion"] = json!(resource.api_version());
    object["kind"] = json!(resource.kind);
    if resource.namespaced {
        object["metadata"]["namespace"] = json!(namespace);
    }
}

fn conflict(resource: &Resource, name: &str) -> (StatusCode, Value) {
    (
        StatusCode::CONFLICT,
        status_object(
            409,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                resource.plural
            ),
        ),
    )
}

fn bad_request(message: &str) -> (StatusCode, Value) {
    (
        StatusCode::BAD_REQUEST,
        status_object(400, "BadRequest", message),
    )
}
