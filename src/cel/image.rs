//! Kubernetes' image library (Kubernetes 1.33): `image(s)`, `isImage(s)`
//! and the methods of an image, `containsDigest()`, `registry()`,
//! `repository()`, `identifier()`, `tag()`, `digest()`.
//!
//! References are read as kube-apiserver reads them (go-containerregistry's
//! `name.ParseReference` with its default options): a reference is a
//! repository with a tag (`latest` when none is given) or a digest
//! (`sha256:` and 64 hex digits; a tag written before it is dropped); the
//! registry is the first component when it holds a `.` or a `:` or is
//! `localhost`, and `index.docker.io` otherwise, where a one-component
//! repository is under `library/`.
use kube_cel::cel::extractors::This;
use kube_cel::cel::objects::Opaque;
use kube_cel::cel::{Context, ExecutionError, Value};
use std::sync::Arc;

/// The registry of a reference that names none.
const DEFAULT_REGISTRY: &str = "index.docker.io";

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    registry: String,
    repository: String,
    tag: String,
    digest: String,
}

impl Opaque for Image {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Image"
    }
}

/// A string part of an image.
type Part = fn(&Image) -> &str;

pub(crate) fn register(ctx: &mut Context<'static>) {
    ctx.add_function(
        "image",
        |text: Arc<String>| -> Result<Value, ExecutionError> {
            parse(&text)
                .map(|image| Value::Opaque(Arc::new(image)))
                .map_err(|e| ExecutionError::function_error("image", e))
        },
    );
    ctx.add_function("isImage", |text: Arc<String>| parse(&text).is_ok());
    ctx.add_function(
        "containsDigest",
        |This(v): This<Value>| -> Result<bool, ExecutionError> {
            image_of(&v, "containsDigest").map(|i| !i.digest.is_empty())
        },
    );
    // The string parts of an image, each a method.
    let parts: [(&'static str, Part); 5] = [
        ("registry", |i| &i.registry),
        ("repository", |i| &i.repository),
        ("tag", |i| &i.tag),
        ("digest", |i| &i.digest),
        // The digest when there is one, else the tag.
        ("identifier", |i| {
            if i.digest.is_empty() {
                &i.tag
            } else {
                &i.digest
            }
        }),
    ];
    for (name, part) in parts {
        ctx.add_function(
            name,
            move |This(v): This<Value>| -> Result<Value, ExecutionError> {
                image_of(&v, name).map(|i| text(part(i)))
            },
        );
    }
}

fn text(s: &str) -> Value {
    Value::String(Arc::new(s.to_string()))
}

fn image_of<'v>(value: &'v Value, function: &str) -> Result<&'v Image, ExecutionError> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Image>(),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::function_error(function, "the receiver is not an image"))
}

/// Parses a reference; the error says what is wrong.
pub fn parse(text: &str) -> Result<Image, String> {
    let (name, digest) = match text.split_once('@') {
        Some((name, digest)) => {
            check_digest(digest)?;
            (name, digest.to_string())
        }
        None => (text, String::new()),
    };
    // A tag follows a ':' after the last '/' (a ':' before it is a port).
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[last_slash..].rfind(':') {
        Some(colon) => {
            let tag = &name[last_slash + colon + 1..];
            check_tag(tag)?;
            (&name[..last_slash + colon], tag)
        }
        None => (name, "latest"),
    };
    let (registry, repository) = match repo.split_once('/') {
        Some((first, rest)) if crate::k8s::images::is_registry(first) => {
            check_registry(first)?;
            (first.to_string(), rest.to_string())
        }
        _ => (DEFAULT_REGISTRY.to_string(), repo.to_string()),
    };
    check_repository(&repository)?;
    let repository = if registry == DEFAULT_REGISTRY && !repository.contains('/') {
        format!("library/{repository}")
    } else {
        repository
    };
    Ok(Image {
        registry,
        repository,
        // A reference with a digest is a digest reference: a tag written
        // before it is not kept.
        tag: if digest.is_empty() {
            tag.to_string()
        } else {
            String::new()
        },
        digest,
    })
}

fn check_digest(digest: &str) -> Result<(), String> {
    match digest.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "digest {digest:?} must be sha256: and 64 lower-case hex digits"
        )),
    }
}

fn check_tag(tag: &str) -> Result<(), String> {
    if (1..=127).contains(&tag.len())
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} must be 1 to 127 letters, digits, '_', '-' or '.'"
        ))
    }
}

fn check_registry(registry: &str) -> Result<(), String> {
    if registry
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
    {
        Ok(())
    } else {
        Err(format!("registry {registry:?} is not a host name"))
    }
}

fn check_repository(repository: &str) -> Result<(), String> {
    let chars_ok = repository.bytes().all(|b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'/')
    });
    if chars_ok
        && (2..=255).contains(&repository.len())
        && repository.split('/').all(|part| !part.is_empty())
    {
        Ok(())
    } else {
        Err(format!(
            "repository {repository:?} must be 2 to 255 of `a-z0-9_-./`, without empty components"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    const DIGEST: &str = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2";

    #[test]
    fn references_read_as_kube_apiserver_reads_them() {
        let i = parse("registry.k8s.io/kube-apiserver-arm64:latest").unwrap();
        assert_eq!(
            (
                i.registry.as_str(),
                i.repository.as_str(),
                i.tag.as_str(),
                i.digest.as_str()
            ),
            ("registry.k8s.io", "kube-apiserver-arm64", "latest", "")
        );
        let i = parse("kube-apiserver-arm64:testtag").unwrap();
        assert_eq!(i.registry, "index.docker.io");
        assert_eq!(i.repository, "library/kube-apiserver-arm64");
        assert_eq!(i.tag, "testtag");
        let i = parse("nginx").unwrap();
        assert_eq!(
            (i.repository.as_str(), i.tag.as_str()),
            ("library/nginx", "latest")
        );
        let i = parse(&format!(
            "registry.k8s.io/kube-apiserver-arm64:latest@{DIGEST}"
        ))
        .unwrap();
        assert_eq!((i.tag.as_str(), i.digest.as_str()), ("", DIGEST));
        let i = parse("localhost:5000/tools/agent:1").unwrap();
        assert_eq!(
            (i.registry.as_str(), i.repository.as_str(), i.tag.as_str()),
            ("localhost:5000", "tools/agent", "1")
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        for bad in [
            "registry.k8s.io//kube-apiserver-arm64",
            "Nginx",
            "nginx:",
            "nginx@sha256:abc",
            "",
            "a",
            "registry.k8s.io/x y",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
