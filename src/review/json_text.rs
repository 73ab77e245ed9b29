//! JSON text of an answer's patch and strings, written straight from
//! them: byte for byte what `serde_json::to_vec` writes, without its
//! generic serializer. Most of a placement patch is strings (label keys, SKU
//! names) that need no escaping: each is checked for a byte that does,
//! then copied whole, where serde_json writes it in runs between the
//! bytes it escapes.
use json_patch::{Patch, PatchOperation};
use serde_json::Value;

/// `patch` as JSON text (an array of operations, each `op` first, then
/// `from`, `path` and `value` as json-patch declares them).
pub(super) fn patch(patch: &Patch) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.push(b'[');
    separated(&mut out, &patch.0, |out, op| {
        let (name, from, path, value) = match op {
            PatchOperation::Add(o) => ("add", None, &o.path, Some(&o.value)),
            PatchOperation::Remove(o) => ("remove", None, &o.path, None),
            PatchOperation::Replace(o) => ("replace", None, &o.path, Some(&o.value)),
            PatchOperation::Move(o) => ("move", Some(&o.from), &o.path, None),
            PatchOperation::Copy(o) => ("copy", Some(&o.from), &o.path, None),
            PatchOperation::Test(o) => ("test", None, &o.path, Some(&o.value)),
        };
        out.extend_from_slice(b"{\"op\":\"");
        out.extend_from_slice(name.as_bytes());
        out.push(b'"');
        if let Some(from) = from {
            out.extend_from_slice(b",\"from\":");
            string(out, from.as_str());
        }
        out.extend_from_slice(b",\"path\":");
        string(out, path.as_str());
        if let Some(value) = value {
            out.extend_from_slice(b",\"value\":");
            self::value(out, value);
        }
        out.push(b'}');
    });
    out.push(b']');
    out
}

/// Writes each of `items` with `write`, a comma between two.
pub(super) fn separated<T>(
    out: &mut Vec<u8>,
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut Vec<u8>, T),
) {
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, item);
    }
}

/// `v` as compact JSON text, as serde_json writes it.
fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Numbers are rare in a patch: serde_json's own formatting.
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            separated(out, items, value);
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            separated(out, map, |out, (k, item)| {
                string(out, k);
                out.push(b':');
                value(out, item);
            });
            out.push(b'}');
        }
    }
}

/// `s` as a JSON string with serde_json's escapes: `\"`, `\\`, the short
/// forms `\b \f \n \r \t`, `\u00XX` for other control characters, and
/// nothing else (not `/`, DEL or non-ASCII text).
pub(super) fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    if clean(bytes) {
        out.extend_from_slice(bytes);
    } else {
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if !needs_escape(b) {
                continue;
            }
            out.extend_from_slice(&bytes[start..i]);
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
            }
            start = i + 1;
        }
        out.extend_from_slice(&bytes[start..]);
    }
    out.push(b'"');
}

/// Whether no byte of `bytes` is escaped: eight bytes at a time, each word
/// tested at once for a byte below 0x20, a quote and a backslash.
fn clean(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `x` is below `n` (exact for n <= 0x80).
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS != 0;
    let has = |x: u64, b: u8| below(x ^ (ONES * u64::from(b)), 1);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let x = u64::from_ne_bytes(eight);
        if below(x, 0x20) || has(x, b'"') || has(x, b'\\') {
            return false;
        }
    }
    !words.remainder().iter().any(|&b| needs_escape(b))
}

#[inline(always)]
fn needs_escape(b: u8) -> bool {
    ESCAPED[usize::from(b)]
}

/// The bytes a JSON string escapes: control characters, the quote and
/// the backslash.
static ESCAPED: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn text_of(v: &Value) -> String {
        let mut out = Vec::new();
        value(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_operation_is_written_as_serde_json_writes_it() {
        let patch: Patch = serde_json::from_value(json!([
            {"op": "add", "path": "/spec/tolerations/-",
             "value": {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}},
            {"op": "remove", "path": "/metadata/labels/a~1b"},
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "move", "from": "/a", "path": "/b"},
            {"op": "copy", "from": "/c", "path": "/d"},
            {"op": "test", "path": "/e", "value": [null, true, false, -1, 2.5, 18446744073709551615u64, "", {}, []]},
        ]))
        .unwrap();
        assert_eq!(
            String::from_utf8(super::patch(&patch)).unwrap(),
            serde_json::to_string(&patch).unwrap()
        );
        assert_eq!(super::patch(&Patch(Vec::new())), b"[]");
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let every_byte: String = (0u8..0x80).map(char::from).collect();
        for s in [
            "",
            "plain",
            "quote \" and backslash \\",
            "tab\tnew line\ncarriage\rbell\u{7}nul\u{0}",
            "back\u{8}space form\u{c}feed unit\u{1f}sep",
            "slash / and del \u{7f}",
            "non-ASCII: é ü ÿ — 中文 🚀",
            "a\"",
            "\\",
            &every_byte,
        ] {
            let v = json!({ s: [s, {s: s}] });
            assert_eq!(text_of(&v), serde_json::to_string(&v).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn a_byte_to_escape_is_found_wherever_it_stands() {
        for len in 0..24 {
            assert!(clean(&vec![b'a'; len]), "{len}");
            for at in 0..len {
                for b in (0u8..=255).filter(|&b| needs_escape(b)) {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = b;
                    assert!(!clean(&bytes), "{b:#x} at {at} of {len}");
                }
                // Bytes next to those escaped are not.
                for b in [0x20, b'!', b'#', b'[', b']', 0x7f, 0x80, 0xa2, 0xdc, 0xff] {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = b;
                    assert!(clean(&bytes), "{b:#x} at {at} of {len}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn any_value_is_written_as_serde_json_writes_it(
            strings in proptest::collection::vec(any::<String>(), 0..6),
            n in any::<i64>(),
            f in any::<f64>().prop_filter("finite", |f| f.is_finite()),
        ) {
            let v = json!({
                "strings": strings,
                "keys": strings.iter().map(|s| (s.clone(), json!(s))).collect::<serde_json::Map<_, _>>(),
                "numbers": [n, f, n as u64],
                "flags": [true, false, null],
            });
            prop_assert_eq!(text_of(&v), serde_json::to_string(&v).unwrap());
        }
    }
}
