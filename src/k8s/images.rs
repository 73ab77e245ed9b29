//! Container image references: the repository an image is pulled from,
//! as a container runtime resolves it, so that an image can be compared
//! with a list of repositories exactly (never by substring).

/// Docker Hub, the registry of a reference that names none.
pub const DOCKER_HUB: &str = "docker.io";

/// The repository of an image reference: registry and path, without tag
/// or digest, with Docker Hub's short forms spelled out the way container
/// runtimes resolve them.
///
/// - `nvcr.io/nvidia/k8s-device-plugin:v0.17.0` and
///   `nvcr.io/nvidia/k8s-device-plugin@sha256:...` are
///   `nvcr.io/nvidia/k8s-device-plugin`;
/// - `rocm/k8s-device-plugin` is `docker.io/rocm/k8s-device-plugin`,
///   `busybox` is `docker.io/library/busybox`, and `index.docker.io` is
///   `docker.io`;
/// - `localhost:5000/tools/agent:1` keeps its registry and port.
///
/// The registry is lower-cased (host names are case-insensitive); the path
/// is kept as written (repository paths are lower-case by the reference
/// grammar, so a path in capitals matches nothing). Blank input gives an
/// empty string.
pub fn repository(image: &str) -> String {
    let image = image.trim();
    let without_digest = image.split_once('@').map_or(image, |(name, _)| name);
    let (registry, path) = match without_digest.split_once('/') {
        Some((first, rest)) if is_registry(first) => (first.to_ascii_lowercase(), rest),
        _ => (DOCKER_HUB.to_string(), without_digest),
    };
    // A tag follows the last ':' of the last path component; a ':' before
    // the last '/' belongs to the registry's port, handled above.
    let last_slash = path.rfind('/').map_or(0, |i| i + 1);
    let path = match path[last_slash..].find(':') {
        Some(colon) => &path[..last_slash + colon],
        None => path,
    };
    if path.is_empty() {
        return String::new();
    }
    let registry = match registry.as_str() {
        "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
        _ => registry,
    };
    if registry == DOCKER_HUB && !path.contains('/') {
        return format!("{DOCKER_HUB}/library/{path}");
    }
    format!("{registry}/{path}")
}

/// Whether the first component of a reference names a registry: it holds
/// a '.' (a domain) or a ':' (a port), or is `localhost`; otherwise it is
/// a Docker Hub namespace (`rocm` in `rocm/k8s-device-plugin`).
pub(crate) fn is_registry(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost"
}

#[cfg(test)]
mod tests {
    use super::repository;

    #[test]
    fn tags_and_digests_are_not_part_of_the_repository() {
        let plugin = "nvcr.io/nvidia/k8s-device-plugin";
        assert_eq!(
            repository("nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),
            plugin
        );
        assert_eq!(
            repository(
                "nvcr.io/nvidia/k8s-device-plugin@sha256:0ff8ee7a0a2a9b6e1f1d0bd3c6c4e5f8b31b8e4f2a6f4b0d7f7e2b1c3d4e5f6a"
            ),
            plugin
        );
        assert_eq!(
            repository("nvcr.io/nvidia/k8s-device-plugin:v0.17.0@sha256:0ff8ee7a"),
            plugin
        );
        assert_eq!(repository(plugin), plugin);
        assert_eq!(repository(" nvcr.io/nvidia/k8s-device-plugin "), plugin);
    }

    #[test]
    fn docker_hub_short_forms_are_spelled_out() {
        assert_eq!(
            repository("rocm/k8s-device-plugin:1.31.0.6"),
            "docker.io/rocm/k8s-device-plugin"
        );
        assert_eq!(
            repository("docker.io/rocm/k8s-device-plugin"),
            "docker.io/rocm/k8s-device-plugin"
        );
        assert_eq!(
            repository("index.docker.io/rocm/k8s-device-plugin:latest"),
            "docker.io/rocm/k8s-device-plugin"
        );
        assert_eq!(repository("busybox:1.36"), "docker.io/library/busybox");
        assert_eq!(repository("docker.io/busybox"), "docker.io/library/busybox");
    }

    #[test]
    fn registries_keep_their_ports_and_lose_their_case() {
        assert_eq!(
            repository("localhost:5000/tools/agent:1"),
            "localhost:5000/tools/agent"
        );
        assert_eq!(repository("localhost/agent"), "localhost/agent");
        assert_eq!(
            repository("MCR.Microsoft.com/aks/aks-windows-gpu-device-plugin:0.0.17"),
            "mcr.microsoft.com/aks/aks-windows-gpu-device-plugin"
        );
    }

    #[test]
    fn look_alike_names_are_other_repositories() {
        let plugin = "nvcr.io/nvidia/k8s-device-plugin";
        for other in [
            "docker.io/someone/k8s-device-plugin-miner",
            "someone/k8s-device-plugin",
            "nvcr.io/nvidia/k8s-device-plugin-miner:v0.17.0",
            "evil.example.com/nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
            "nvcr.io.evil.example.com/nvidia/k8s-device-plugin",
            "k8s-device-plugin",
        ] {
            assert_ne!(repository(other), plugin, "{other}");
        }
        assert_eq!(
            repository("k8s-device-plugin"),
            "docker.io/library/k8s-device-plugin"
        );
    }

    #[test]
    fn blank_references_have_no_repository() {
        assert_eq!(repository(""), "");
        assert_eq!(repository("   "), "");
        assert_eq!(repository("@sha256:abc"), "");
        assert_eq!(repository(":latest"), "");
    }
}
