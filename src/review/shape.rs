//! Sizing a JSON document before it is decoded. A 7 MiB body of tiny
//! objects (`[{"a":0},...]`) expands to hundreds of MiB once it is a tree of
//! maps; walking its bytes first tells how many values it holds, how deep it
//! nests and about how much memory decoding it (and converting it to CEL
//! values) will take, without allocating any of it.

/// How much of a request the webhook agrees to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// JSON values (objects, arrays, strings, numbers, booleans, nulls) in
    /// the whole request, both objects of an UPDATE together.
    pub max_nodes: usize,
    /// Nesting of objects and arrays.
    pub max_depth: usize,
    /// The [`Shape::decoded_bytes`] estimate.
    pub max_decoded_bytes: usize,
}

impl Default for Limits {
    /// Room for real objects with a wide margin: a pod with 5,000 env
    /// entries is ~15,000 values and ~6 MiB decoded, a 1 MiB custom
    /// resource of 10,000 entries ~20,000 values.
    fn default() -> Limits {
        Limits {
            max_nodes: 250_000,
            max_depth: 100,
            max_decoded_bytes: 48 << 20,
        }
    }
}

/// What [`measure`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// JSON values, containers included.
    pub nodes: usize,
    /// Deepest nesting of containers.
    pub depth: usize,
    /// Upper estimate of the memory the decoded request takes while it is
    /// answered: the JSON tree, its copy as CEL values, and the pod built
    /// from a controller's template with its CEL copy.
    pub decoded_bytes: usize,
}

/// Why a request is refused before decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TooLarge {
    #[error("it holds more than {limit} JSON values")]
    Nodes { limit: usize },
    #[error("it nests objects and arrays more than {limit} levels deep")]
    Depth { limit: usize },
    #[error("decoding it would take about {estimate_mib} MiB, more than the {limit_mib} MiB allowed per request")]
    Memory {
        estimate_mib: usize,
        limit_mib: usize,
    },
}

// Allocation sizes behind the estimate (64-bit): a serde_json value is 32
// bytes, a B-tree leaf of up to 11 entries 632 (internal nodes 728), a
// String 24; a CEL value is 24 bytes, a CEL map key 16, and an `Arc` adds 16.
const JSON_VALUE: usize = 32;
const BTREE_NODE: usize = 728;
const BTREE_FANOUT: usize = 11;
const STRING: usize = 24;
const CEL_VALUE: usize = 24;
const CEL_KEY: usize = 16;
const ARC: usize = 16;
/// Every allocation also costs the allocator's header and rounding.
const MALLOC_OVERHEAD: usize = 16;
/// The JSON tree and its CEL copy exist twice for controllers (the pod
/// built from the template is a second tree with a second CEL copy).
const COPIES: usize = 2;

/// Walks `json` (one JSON value, assumed well-formed; malformed input gives
/// some shape and never panics) and stops as soon as a limit is passed.
pub fn measure(json: &[u8], limits: &Limits) -> Result<Shape, TooLarge> {
    let mut walker = Walker {
        limits,
        shape: Shape::default(),
        frames: Vec::with_capacity(32),
        json_bytes: 0,
        cel_bytes: 0,
    };
    walker.walk(json)?;
    let decoded = walker
        .json_bytes
        .saturating_add(walker.cel_bytes)
        .saturating_mul(COPIES);
    walker.shape.decoded_bytes = decoded;
    if decoded > limits.max_decoded_bytes {
        return Err(TooLarge::Memory {
            estimate_mib: decoded.div_ceil(1 << 20),
            limit_mib: limits.max_decoded_bytes >> 20,
        });
    }
    Ok(walker.shape)
}

struct Frame {
    object: bool,
    /// Values directly inside (an object's values, not its keys).
    children: usize,
    /// In an object: the next string is a key.
    expect_key: bool,
}

struct Walker<'a> {
    limits: &'a Limits,
    shape: Shape,
    frames: Vec<Frame>,
    json_bytes: usize,
    cel_bytes: usize,
}

impl Walker<'_> {
    fn walk(&mut self, json: &[u8]) -> Result<(), TooLarge> {
        let mut i = 0;
        while i < json.len() {
            match json[i] {
                b'"' => {
                    let end = skip_string(json, i);
                    // The escaped length is at least the decoded one.
                    let len = end.saturating_sub(i + 2);
                    if self.take_key() {
                        self.json_bytes += heap(len);
                        self.cel_bytes += heap(ARC + STRING) + heap(len);
                    } else {
                        self.value()?;
                        self.json_bytes += heap(len);
                        self.cel_bytes += heap(ARC + STRING) + heap(len);
                    }
                    i = end;
                    continue;
                }
                b'{' | b'[' => {
                    self.value()?;
                    if self.frames.len() >= self.limits.max_depth {
                        return Err(TooLarge::Depth {
                            limit: self.limits.max_depth,
                        });
                    }
                    let object = json[i] == b'{';
                    self.frames.push(Frame {
                        object,
                        children: 0,
                        expect_key: object,
                    });
                    self.shape.depth = self.shape.depth.max(self.frames.len());
                }
                b'}' | b']' => {
                    if let Some(frame) = self.frames.pop() {
                        self.close(&frame);
                    }
                }
                b',' => {
                    if let Some(frame) = self.frames.last_mut() {
                        frame.expect_key = frame.object;
                    }
                }
                b':' => {
                    if let Some(frame) = self.frames.last_mut() {
                        frame.expect_key = false;
                    }
                }
                b' ' | b'\t' | b'\n' | b'\r' => {}
                _ => {
                    // A number, true, false or null: one value, no heap.
                    self.value()?;
                    while i + 1 < json.len() && !is_delimiter(json[i + 1]) {
                        i += 1;
                    }
                }
            }
            i += 1;
        }
        // The outermost value's own slot.
        self.json_bytes += JSON_VALUE;
        self.cel_bytes += CEL_VALUE;
        Ok(())
    }

    /// Whether the string starting here is an object key.
    fn take_key(&mut self) -> bool {
        match self.frames.last_mut() {
            Some(frame) if frame.object && frame.expect_key => {
                frame.expect_key = false;
                true
            }
            _ => false,
        }
    }

    /// Counts one value and charges its place in the enclosing container.
    fn value(&mut self) -> Result<(), TooLarge> {
        self.shape.nodes += 1;
        if self.shape.nodes > self.limits.max_nodes {
            return Err(TooLarge::Nodes {
                limit: self.limits.max_nodes,
            });
        }
        if let Some(frame) = self.frames.last_mut() {
            frame.children += 1;
        }
        Ok(())
    }

    /// Charges a container's own allocations once its size is known.
    fn close(&mut self, frame: &Frame) {
        let n = frame.children;
        if frame.object {
            // B-tree nodes hold the keys' String headers and the values.
            self.json_bytes += heap(BTREE_NODE) * n.div_ceil(BTREE_FANOUT);
            // A hashbrown table: buckets of key + value, one control byte
            // each plus a group's worth; held by an Arc'd HashMap.
            let buckets = match n {
                0 => 0,
                1..=3 => 4,
                4..=7 => 8,
                _ => (n * 8 / 7).next_power_of_two(),
            };
            self.cel_bytes += heap(ARC + 48) + heap(buckets * (CEL_KEY + CEL_VALUE) + buckets + 16);
        } else {
            // Vec growth doubles from 4; the CEL list is collected exactly.
            let capacity = if n == 0 {
                0
            } else {
                n.next_power_of_two().max(4)
            };
            self.json_bytes += heap(capacity * JSON_VALUE);
            self.cel_bytes += heap(ARC + STRING) + heap(n * CEL_VALUE);
        }
    }
}

/// An allocation of `len` bytes as the allocator sees it.
fn heap(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + MALLOC_OVERHEAD).next_multiple_of(16)
    }
}

/// The index just past the string starting at `start` (a `"`).
pub(super) fn skip_string(json: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    // Strings are most of a review's bytes: find the next quote or
    // backslash a word at a time rather than a byte at a time.
    while let Some(found) = json
        .get(i..)
        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
    {
        i += found;
        if json[i] == b'"' {
            return i + 1;
        }
        i += 2;
    }
    json.len()
}

fn is_delimiter(b: u8) -> bool {
    matches!(
        b,
        b',' | b'}' | b']' | b':' | b'"' | b' ' | b'\t' | b'\n' | b'\r' | b'{' | b'['
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(json: &str) -> Shape {
        measure(json.as_bytes(), &Limits::default()).unwrap()
    }

    #[test]
    fn counts_every_value_and_the_nesting() {
        assert_eq!(shape("0").nodes, 1);
        assert_eq!(shape(r#""x""#).nodes, 1);
        assert_eq!(shape("{}").nodes, 1);
        let s = shape(r#"{"a": [1, -2.5e3, true, null, "s"], "b": {"c": {}}}"#);
        assert_eq!(s.nodes, 9, "outer, list, five scalars, b, c");
        assert_eq!(s.depth, 3);
    }

    #[test]
    fn a_string_ends_at_its_first_unescaped_quote() {
        let end = |s: &str| skip_string(s.as_bytes(), 0);
        assert_eq!(end(r#""abc" x"#), 5);
        assert_eq!(end(r#""a\"b" x"#), 6);
        assert_eq!(end(r#""a\\" x"#), 5);
        assert_eq!(end(r#""\\\"" x"#), 6);
        let long = format!("\"{}\\\"{}\" x", "a".repeat(100), "b".repeat(100));
        assert_eq!(end(&long), long.len() - 2);
        // Unterminated, or ending in a lone backslash: the end of the input.
        assert_eq!(end(r#""abc"#), 4);
        assert_eq!(end("\"abc\\"), 5);
        assert_eq!(end("\""), 1);
    }

    #[test]
    fn keys_are_not_values_and_escapes_do_not_confuse_it() {
        let s = shape(r#"{"a\"b": "c\\", "d:,}": "{["}"#);
        assert_eq!(s.nodes, 3);
        assert_eq!(s.depth, 1);
    }

    #[test]
    fn stops_at_the_node_limit() {
        let limits = Limits {
            max_nodes: 10,
            ..Limits::default()
        };
        let body = format!("[{}0]", "0,".repeat(10));
        assert_eq!(
            measure(body.as_bytes(), &limits),
            Err(TooLarge::Nodes { limit: 10 })
        );
        let body = format!("[{}0]", "0,".repeat(8));
        assert_eq!(measure(body.as_bytes(), &limits).unwrap().nodes, 10);
    }

    #[test]
    fn stops_at_the_depth_limit() {
        let limits = Limits {
            max_depth: 5,
            ..Limits::default()
        };
        let deep = format!("{}{}", "[".repeat(6), "]".repeat(6));
        assert_eq!(
            measure(deep.as_bytes(), &limits),
            Err(TooLarge::Depth { limit: 5 })
        );
        let ok = format!("{}{}", "[".repeat(5), "]".repeat(5));
        assert_eq!(measure(ok.as_bytes(), &limits).unwrap().depth, 5);
    }

    #[test]
    fn tiny_objects_cost_far_more_than_their_bytes() {
        let objects = format!("[{}{{\"a\":0}}]", "{\"a\":0},".repeat(9_999));
        let numbers = format!("[{}0]", "0,".repeat(9_999));
        let objects = shape(&objects);
        let numbers = shape(&numbers);
        assert_eq!(objects.nodes, 20_001);
        assert_eq!(numbers.nodes, 10_001);
        // A one-key map is a whole B-tree leaf and a hash table.
        assert!(
            objects.decoded_bytes > 10_000 * 1_000,
            "{}",
            objects.decoded_bytes
        );
        assert!(
            numbers.decoded_bytes < 10_000 * 200,
            "{}",
            numbers.decoded_bytes
        );
    }

    #[test]
    fn refuses_what_would_not_fit_in_memory() {
        let limits = Limits {
            max_decoded_bytes: 1 << 20,
            ..Limits::default()
        };
        let body = format!("[{}{{\"a\":0}}]", "{\"a\":0},".repeat(2_000));
        assert!(matches!(
            measure(body.as_bytes(), &limits),
            Err(TooLarge::Memory { limit_mib: 1, .. })
        ));
    }

    #[test]
    fn never_panics_on_malformed_input() {
        for text in [
            "", "\"", "\"\\", "]", "}}}", "{\"a\"", "[1,", ":", ",,,", "{\"a\":}", "tru",
        ] {
            let _ = measure(text.as_bytes(), &Limits::default());
        }
    }
}
