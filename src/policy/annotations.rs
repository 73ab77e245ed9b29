//! Audit annotations as the webhook returns them: the values a policy's
//! `auditAnnotations` write, cut as kube-apiserver cuts them.

/// Longest audit annotation value written, in bytes (kube-apiserver's
/// `maxAuditAnnotationValueLength`); a longer one is cut to it.
pub const MAX_VALUE_LEN: usize = 10 * 1024;

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
