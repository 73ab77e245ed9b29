//! The fake's answers on one object or a namespaced collection: get, list
//! in a namespace, create (409 AlreadyExists), replace (409 Conflict on a
//! stale resourceVersion), delete, as kube-apiserver gives them.
use super::{key_of, list, status_object, Cluster, Recorded, Resource, Shared};
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Whether `path` names one object, or a collection in one namespace.
pub(super) fn is_item_or_namespaced(shared: &Shared, path: &str) -> bool {
    locate(&shared.lock().resources, path).is_some()
}

/// The resource, namespace and name (if any) of a path that names one
/// object or a namespaced collection; none for the collections across
/// namespaces and discovery.
fn locate(resources: &[Resource], path: &str) -> Option<(Resource, String, Option<String>)> {
    for resource in resources {
        if let Some(rest) = path.strip_prefix(&format!("{}/namespaces/", resource.discovery_path()))
        {
            if !resource.namespaced {
                continue;
            }
            let mut parts = rest.split('/');
            let (Some(namespace), Some(plural)) = (parts.next(), parts.next()) else {
                continue;
            };
            if plural != resource.plural {
                continue;
            }
            let name = parts.next().map(str::to_string);
            if parts.next().is_none() {
                return Some((resource.clone(), namespace.to_string(), name));
            }
        } else if let Some(name) = path.strip_prefix(&format!("{}/", resource.collection())) {
            if !resource.namespaced && !name.contains('/') {
                return Some((resource.clone(), String::new(), Some(name.to_string())));
            }
        }
    }
    None
}

/// Answers a request on one object or a namespaced collection: get, list
/// in a namespace, create, replace, delete.
pub(super) fn write(
    shared: &Shared,
    method: &Method,
    path: String,
    query: BTreeMap<String, String>,
    body: &[u8],
) -> (StatusCode, Value) {
    let mut cluster = shared.lock();
    let (status, answer) = match locate(&cluster.resources, &path) {
        None => (
            StatusCode::METHOD_NOT_ALLOWED,
            status_object(
                405,
                "MethodNotAllowed",
                "not a collection or object the fake serves",
            ),
        ),
        Some((resource, namespace, name)) => change(
            &mut cluster,
            method,
            &resource,
            &namespace,
            name.as_deref(),
            &query,
            body,
        ),
    };
    cluster.requests.push(Recorded {
        method: method.to_string(),
        path,
        query,
        status: status.as_u16(),
        expired: false,
    });
    (status, answer)
}

fn change(
    cluster: &mut Cluster,
    method: &Method,
    resource: &Resource,
    namespace: &str,
    name: Option<&str>,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> (StatusCode, Value) {
    let stored = |cluster: &Cluster, name: &str| {
        cluster
            .objects
            .get(&resource.collection())
            .and_then(|objects| objects.get(&(namespace.to_string(), name.to_string())))
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
    let parsed = || -> Result<Value, (StatusCode, Value)> {
        let mut object: Value = serde_json::from_slice(body).map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                status_object(400, "BadRequest", &e.to_string()),
            )
        })?;
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        if resource.namespaced {
            object["metadata"]["namespace"] = json!(namespace);
        }
        Ok(object)
    };
    match (method.as_str(), name) {
        ("GET", None) => {
            let mut page = list(cluster, resource, query);
            if let Some(items) = page["items"].as_array_mut() {
                items.retain(|item| item.pointer("/metadata/namespace") == Some(&json!(namespace)));
            }
            (StatusCode::OK, page)
        }
        ("GET", Some(name)) => match stored(cluster, name) {
            Some(object) => (StatusCode::OK, object),
            None => not_found(name),
        },
        ("POST", None) => {
            let mut object = match parsed() {
                Ok(object) => object,
                Err(answer) => return answer,
            };
            let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    status_object(422, "Invalid", "metadata.name: Required value"),
                );
            };
            if stored(cluster, name).is_some() {
                let message = format!("{} \"{name}\" already exists", resource.plural);
                return (
                    StatusCode::CONFLICT,
                    status_object(409, "AlreadyExists", &message),
                );
            }
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove("resourceVersion");
                meta.remove("uid");
            }
            let key = key_of(&object);
            cluster.apply(object);
            (
                StatusCode::CREATED,
                stored(cluster, &key.1).unwrap_or_default(),
            )
        }
        ("PUT", Some(name)) => {
            let object = match parsed() {
                Ok(object) => object,
                Err(answer) => return answer,
            };
            let Some(current) = stored(cluster, name) else {
                return not_found(name);
            };
            if object.pointer("/metadata/resourceVersion")
                != current.pointer("/metadata/resourceVersion")
            {
                let message = format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    resource.plural
                );
                return (
                    StatusCode::CONFLICT,
                    status_object(409, "Conflict", &message),
                );
            }
            let mut object = object;
            object["metadata"]["uid"] = current["metadata"]["uid"].clone();
            cluster.apply(object);
            (StatusCode::OK, stored(cluster, name).unwrap_or_default())
        }
        ("DELETE", Some(name)) => match stored(cluster, name) {
            Some(object) => {
                cluster.delete(resource, namespace, name);
                (StatusCode::OK, object)
            }
            None => not_found(name),
        },
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            status_object(405, "MethodNotAllowed", "the fake does not answer this"),
        ),
    }
}
