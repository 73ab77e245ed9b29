//! Audit annotations: the keys a policy's `auditAnnotations` may use, the
//! values they write, and the keys the webhook returns them under.
//!
//! kube-apiserver records each key of a webhook's `auditAnnotations` as
//! `<webhook name>/<key>` and drops the annotation unless that is a
//! qualified name: so a key returned here has no `/` and is at most 63
//! characters. The `<policy>/<key>` and
//! `validation.policy.admission.k8s.io/validation_failure` that
//! kube-apiserver's own policies write would never reach the audit log.

/// The key of the JSON list of validation failures under the `Audit`
/// action (`validation.policy.admission.k8s.io/validation_failure` when
/// kube-apiserver evaluates a policy itself).
pub const VALIDATION_FAILURE_ANNOTATION: &str = "validation_failure";

/// Longest audit annotation value written, in bytes (kube-apiserver's
/// `maxAuditAnnotationValueLength`); a longer one is cut to it.
pub const MAX_VALUE_LEN: usize = 10 * 1024;

/// The key of the JSON list of what exceptions let through on a request:
/// each entry the policy, the exception (`namespace/name`), and what the
/// policy's binding would have done (recorded by kube-apiserver as
/// `<webhook name>/policy_exceptions`).
pub const EXCEPTIONS_ANNOTATION: &str = "policy_exceptions";

/// Writes [`EXCEPTIONS_ANNOTATION`] of `verdict` from its excepted
/// results, one entry per policy, exception and action, cut to
/// [`MAX_VALUE_LEN`] by whole entries.
pub(super) fn add_excepted(verdict: &mut super::Verdict) {
    if verdict.excepted.is_empty() {
        return;
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut list = String::from("[");
    for e in &verdict.excepted {
        if !seen.insert((&*e.policy, &e.exception, e.action)) {
            continue;
        }
        let entry = serde_json::json!({
            "policy": &*e.policy,
            "exception": e.exception,
            "action": e.action,
        })
        .to_string();
        if list.len() + entry.len() + 2 > MAX_VALUE_LEN {
            break;
        }
        if list.len() > 1 {
            list.push(',');
        }
        list.push_str(&entry);
    }
    list.push(']');
    verdict
        .audit_annotations
        .insert(EXCEPTIONS_ANNOTATION.to_string(), list);
}

/// Longest name part of a Kubernetes qualified name.
const MAX_NAME_LEN: usize = 63;

/// Why `key` cannot be an audit annotation key, if it cannot:
/// kube-apiserver refuses a policy unless `<policy name>/<key>` is a
/// qualified name, whose name part is at most 63 characters matching
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
pub(super) fn key_error(key: &str) -> Option<String> {
    const WHY: &str = "kube-apiserver checks <policy name>/<key> as a qualified name";
    if key.len() > MAX_NAME_LEN {
        return Some(format!(
            "must be at most {MAX_NAME_LEN} characters, not {} ({WHY})",
            key.len()
        ));
    }
    (!is_name(key)).then(|| {
        format!(
            "{key:?} must consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character ({WHY})"
        )
    })
}

/// The key the annotation `key` (valid: see [`key_error`]) of `policy` is
/// returned under: `<policy>.<key>` when that is a name part of at most
/// 63 characters; else `<hash>.<key>`, `<hash>` the first 8 hex digits of
/// the SHA-256 of the policy's name; else, the key being too long even
/// for that, the hash of `<policy>/<key>` (so two keys cut alike stay
/// apart) and the key cut to fit, ending in an alphanumeric.
pub(super) fn returned_key(policy: &str, key: &str) -> String {
    let joined = format!("{policy}.{key}");
    if is_name(&joined) {
        return joined;
    }
    let hashed = format!("{}.{key}", short_hash(policy));
    if is_name(&hashed) {
        return hashed;
    }
    let whole = format!("{}.{key}", short_hash(&format!("{policy}/{key}")));
    let mut cut: String = whole.chars().take(MAX_NAME_LEN).collect();
    while cut.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        cut.pop();
    }
    cut
}

/// The value a `valueExpression` that returned `s` writes, as
/// kube-apiserver's policies write it: without surrounding whitespace,
/// nothing when that leaves it empty, at most [`MAX_VALUE_LEN`] bytes.
/// kube-apiserver cuts at the byte; the cut here moves back to the
/// start of a character it would split, so the answer stays UTF-8.
pub(super) fn value(s: &str) -> Option<&str> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.len() <= MAX_VALUE_LEN {
        return Some(s);
    }
    let mut end = MAX_VALUE_LEN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(&s[..end])
}

/// The first 8 hex digits of the SHA-256 of `text`.
fn short_hash(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `s` is the name part of a qualified name.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            b.len() <= MAX_NAME_LEN
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(inner)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_kube_apiserver_accepts() {
        for key in [
            "sku",
            "a",
            "gpu-count",
            "GPU_count.v2",
            "0",
            &"k".repeat(63),
        ] {
            assert_eq!(key_error(key), None, "{key}");
        }
        for key in [
            "-sku",
            "sku-",
            "sku.",
            "_sku",
            "a/b",
            "gpu count",
            "gpus?",
            "ключ",
        ] {
            let error = key_error(key).unwrap_or_else(|| panic!("{key} accepted"));
            assert!(error.contains("must consist of"), "{error}");
        }
        let error = key_error(&"k".repeat(64)).unwrap();
        assert!(
            error.starts_with("must be at most 63 characters, not 64"),
            "{error}"
        );
    }

    /// What kube-apiserver's `checkKeyFormat` accepts of a webhook's key
    /// `k` once recorded as `<webhook name>/k`: two parts on `/`, the
    /// second a name part.
    fn survives(k: &str) -> bool {
        let recorded = format!("pods.validate.gpu-admission.io/{k}");
        let parts: Vec<&str> = recorded.split('/').collect();
        parts.len() == 2 && is_name(parts[1])
    }

    #[test]
    fn returned_keys_survive_kube_apiserver() {
        assert!(survives(VALIDATION_FAILURE_ANNOTATION));
        assert_eq!(
            returned_key("gpu-sku-allowlist", "sku"),
            "gpu-sku-allowlist.sku"
        );
        assert_eq!(
            returned_key("gpu-limits", "GPU_count.v2"),
            "gpu-limits.GPU_count.v2"
        );
        let long_policy = format!("gpu-{}.example.com", "x".repeat(60));
        let hashed = returned_key(&long_policy, "sku");
        assert_eq!(hashed, format!("{}.sku", short_hash(&long_policy)));
        assert_eq!(hashed.len(), 12);
        assert!(
            hashed[..8].chars().all(|c| c.is_ascii_hexdigit()),
            "{hashed}"
        );
        // The example of docs/policies.md.
        let documented = "gpu-sku-allowlist.inference-platform.machine-learning.example.com";
        assert_eq!(returned_key(documented, "sku"), "b7469a88.sku");
        // The same policy gives the same hash for all its keys.
        assert!(returned_key(&long_policy, "gpus").starts_with(&hashed[..9]));
        // A name that cannot start a name part (kube-apiserver would refuse
        // it) is hashed as well.
        assert_eq!(
            returned_key("Bad/Name", "sku"),
            format!("{}.sku", short_hash("Bad/Name"))
        );
        // Keys too long for `<hash>.<key>` (62 characters here): cut,
        // ending in an alphanumeric, and apart from another key cut alike.
        let key_a = format!("{}-a{}", "k".repeat(53), "k".repeat(7));
        let key_b = format!("{}-b{}", "k".repeat(53), "k".repeat(7));
        let (a, b) = (returned_key("p", &key_a), returned_key("p", &key_b));
        assert_eq!(a.len(), 8 + 1 + 53, "{a}");
        assert!(a.ends_with('k') && a != b, "{a} {b}");
        let max_key = "k".repeat(63);
        let cut = returned_key("p", &max_key);
        assert_eq!(cut.len(), 63);
        assert!(
            cut.starts_with(&short_hash(&format!("p/{max_key}"))),
            "{cut}"
        );
        for (policy, key) in [
            ("gpu-sku-allowlist", "sku"),
            (&*long_policy, "sku"),
            ("p", &*key_a),
            ("p", &*max_key),
            ("Bad/Name", "x"),
            (&*"a".repeat(253), &*"k".repeat(63)),
        ] {
            let returned = returned_key(policy, key);
            assert!(survives(&returned), "{policy} {key}: {returned}");
            assert_eq!(returned, returned_key(policy, key), "deterministic");
        }
    }

    #[test]
    fn values_are_trimmed_and_empty_ones_write_nothing() {
        assert_eq!(value("gpu-a100"), Some("gpu-a100"));
        assert_eq!(value("  4 GPUs\n"), Some("4 GPUs"));
        assert_eq!(value(""), None);
        assert_eq!(value(" \t\n"), None);
    }

    #[test]
    fn values_over_10_kib_are_cut_to_10_kib() {
        let exact = "a".repeat(MAX_VALUE_LEN);
        assert_eq!(value(&exact), Some(exact.as_str()));
        let long = "b".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(value(&long).map(str::len), Some(MAX_VALUE_LEN));
        // Trimmed first, then cut: leading blanks do not count.
        let padded = format!("{}{long}", " ".repeat(100));
        assert_eq!(value(&padded), Some(&long[..MAX_VALUE_LEN]));
        // A character the cut would split is left out whole.
        let wide = format!("{}é", "c".repeat(MAX_VALUE_LEN - 1));
        assert_eq!(value(&wide), Some(&wide[..MAX_VALUE_LEN - 1]));
    }
}
