//! Audit annotations: the keys a policy's `auditAnnotations` may use and
//! the values they write, as kube-apiserver checks and cuts them.

/// Longest audit annotation value written, in bytes (kube-apiserver's
/// `maxAuditAnnotationValueLength`); a longer one is cut to it.
pub const MAX_VALUE_LEN: usize = 10 * 1024;

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
