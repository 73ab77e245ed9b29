//! Sizing a JSON document before it is decoded. A 7 MiB body of tiny
//! objects (`[{"a":0},...]`) expands to hundreds of MiB once it is a tree of
//! maps; walking its bytes first tells how many values it holds, how deep it
//! nests and about how much memory decoding it (and converting it to CEL
//! values) will take, without allocating any of it.

/// How much of a request the webhook agrees to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// JSON values (objects, arrays, strings, numbers, booleans, nulls) in
    /// one object of the request: an UPDATE's `object` and `oldObject` may
    /// each hold this many, so that whatever was admitted when it was
    /// created can still be updated. The request as a whole may hold twice
    /// as many.
    pub max_nodes: usize,
    /// Nesting of objects and arrays.
    pub max_depth: usize,
    /// The [`Shape::decoded_bytes`] estimate, per object as `max_nodes`.
    pub max_decoded_bytes: usize,
}

impl Limits {
    /// The limits of a whole request: room for two objects.
    pub fn for_two_objects(&self) -> Limits {
        Limits {
            max_nodes: self.max_nodes.saturating_mul(2),
            max_depth: self.max_depth,
            max_decoded_bytes: self.max_decoded_bytes.saturating_mul(2),
        }
    }
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
    #[error(
        "decoding it would take about {estimate_mib} MiB, more than the {limit_mib} MiB allowed"
    )]
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
    let mut walker = Walker::new(limits);
    walker.walk(json, 0, false)?;
    walker.slot();
    walker.finish()
}

/// [`measure`] of the value of the outermost object's member `name` (of
/// every such member together: a body that repeats it is refused when it
/// is decoded, but never sized short), walking past the rest of `json`
/// without counting it, as decoding skips it without building it. The
/// shape of `{"name": V, ...}` is the shape of `V` alone.
#[cfg(test)]
pub fn measure_member(json: &[u8], name: &str, limits: &Limits) -> Result<Shape, TooLarge> {
    measure_member_as(json, name, Walker::new(limits))
}

/// The shape of an AdmissionReview's `request` member (as `measure_member`
/// gives it), with
/// `limits` holding for each of its objects (`object`, `oldObject`) and
/// the request as a whole allowed twice as much: an UPDATE carries its
/// object twice, and whatever was admitted when it was created must stay
/// updatable. A refusal names the limit that was passed (an object's, or
/// the whole request's).
pub fn measure_request(json: &[u8], limits: &Limits) -> Result<Shape, TooLarge> {
    let whole = limits.for_two_objects();
    let mut walker = Walker::new(&whole);
    walker.per_object = Some(PerObject {
        limits: *limits,
        watched: None,
        next_is_object: false,
    });
    measure_member_as(json, "request", walker)
}

fn measure_member_as(json: &[u8], name: &str, mut walker: Walker<'_>) -> Result<Shape, TooLarge> {
    each_member(json, name, |start| {
        let end = walker.walk(json, start, true)?;
        walker.slot();
        Ok(end)
    })?;
    walker.finish()
}

/// Calls `value` with the position of the value of each member `name` of
/// the outermost object of `json`; `value` returns where that value ends.
/// The rest of `json` is walked past without recursion.
fn each_member(
    json: &[u8],
    name: &str,
    mut value: impl FnMut(usize) -> Result<usize, TooLarge>,
) -> Result<(), TooLarge> {
    // Containers open around the cursor outside the member, and whether
    // the outermost is an object whose next string is a key.
    let mut depth = 0usize;
    let mut outer_object = false;
    let mut expect_key = false;
    let mut member_next = false;
    let mut i = 0;
    while i < json.len() {
        let b = json[i];
        if member_next && !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b':') {
            member_next = false;
            i = value(i)?;
            continue;
        }
        match b {
            b'"' => {
                let end = skip_string(json, i);
                if depth == 1 && outer_object && expect_key {
                    expect_key = false;
                    member_next = key_is(&json[i..end], name);
                }
                i = end;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth == 1 {
                    outer_object = b == b'{';
                    expect_key = outer_object;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expect_key = outer_object,
            b':' if depth == 1 => expect_key = false,
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Whether the JSON string literal `literal` (quotes included) is `name`.
fn key_is(literal: &[u8], name: &str) -> bool {
    let inner = literal
        .get(1..literal.len().saturating_sub(1))
        .unwrap_or_default();
    if !inner.contains(&b'\\') {
        return inner == name.as_bytes();
    }
    serde_json::from_slice::<String>(literal).is_ok_and(|key| key == name)
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
    /// Limits each object of a request's members is also held to.
    per_object: Option<PerObject>,
}

/// The request's `object` or `oldObject` being walked, held to one
/// object's limits as it is walked.
struct PerObject {
    limits: Limits,
    /// Where its value began: the nodes and bytes counted before it.
    watched: Option<(usize, usize)>,
    /// The key just read (directly in the walked object) names an object.
    next_is_object: bool,
}

impl<'a> Walker<'a> {
    fn new(limits: &'a Limits) -> Walker<'a> {
        Walker {
            limits,
            shape: Shape::default(),
            frames: Vec::with_capacity(32),
            json_bytes: 0,
            cel_bytes: 0,
            per_object: None,
        }
    }

    /// Starts holding the value that begins now to one object's limits,
    /// when the key before it named an object of the request.
    fn watch(&mut self) {
        let (nodes, bytes) = (self.shape.nodes, self.json_bytes + self.cel_bytes);
        if let Some(per) = self.per_object.as_mut() {
            if std::mem::take(&mut per.next_is_object) {
                per.watched = Some((nodes, bytes));
            }
        }
    }

    /// The watched object's value has ended: its memory estimate against
    /// one object's limit.
    fn unwatch(&mut self) -> Result<(), TooLarge> {
        let bytes = self.json_bytes + self.cel_bytes;
        let Some(per) = self.per_object.as_mut() else {
            return Ok(());
        };
        let Some((_, start)) = per.watched.take() else {
            return Ok(());
        };
        let decoded = bytes.saturating_sub(start).saturating_mul(COPIES);
        within_memory(decoded, &per.limits)
    }

    /// A measured value's own slot (its container holds it by value).
    fn slot(&mut self) {
        self.json_bytes += JSON_VALUE;
        self.cel_bytes += CEL_VALUE;
    }

    /// The shape so far, refused past the memory limit.
    fn finish(mut self) -> Result<Shape, TooLarge> {
        let decoded = self
            .json_bytes
            .saturating_add(self.cel_bytes)
            .saturating_mul(COPIES);
        self.shape.decoded_bytes = decoded;
        within_memory(decoded, self.limits)?;
        Ok(self.shape)
    }

    /// Walks `json` from `start`: to its end, or with `one_value` to the
    /// end of the value starting there. Returns where it stopped.
    fn walk(&mut self, json: &[u8], start: usize, one_value: bool) -> Result<usize, TooLarge> {
        let mut i = start;
        while i < json.len() {
            if one_value && i > start && self.frames.is_empty() {
                return Ok(i);
            }
            match json[i] {
                b'"' => {
                    let end = skip_string(json, i);
                    // The escaped length is at least the decoded one.
                    let len = end.saturating_sub(i + 2);
                    if self.take_key() {
                        if self.frames.len() == 1 {
                            if let Some(per) = self.per_object.as_mut() {
                                let key = &json[i..end];
                                per.next_is_object =
                                    key_is(key, "object") || key_is(key, "oldObject");
                            }
                        }
                    } else {
                        self.value()?;
                    }
                    self.json_bytes += heap(len);
                    self.cel_bytes += heap(ARC + STRING) + heap(len);
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
                    if self.frames.len() == 1 {
                        self.unwatch()?;
                    }
                    if let Some(frame) = self.frames.pop() {
                        self.close(&frame);
                    }
                }
                b',' => {
                    if self.frames.len() == 1 {
                        self.unwatch()?;
                    }
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
        Ok(i)
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
        if self.frames.len() == 1 {
            self.watch();
        }
        self.shape.nodes += 1;
        if self.shape.nodes > self.limits.max_nodes {
            return Err(TooLarge::Nodes {
                limit: self.limits.max_nodes,
            });
        }
        if let Some(PerObject {
            limits,
            watched: Some((start, _)),
            ..
        }) = &self.per_object
        {
            if self.shape.nodes - start > limits.max_nodes {
                return Err(TooLarge::Nodes {
                    limit: limits.max_nodes,
                });
            }
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

/// `decoded` bytes against the memory limit of `limits`.
fn within_memory(decoded: usize, limits: &Limits) -> Result<(), TooLarge> {
    if decoded > limits.max_decoded_bytes {
        return Err(TooLarge::Memory {
            estimate_mib: decoded.div_ceil(1 << 20),
            limit_mib: limits.max_decoded_bytes >> 20,
        });
    }
    Ok(())
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
fn skip_string(json: &[u8], start: usize) -> usize {
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
    fn a_member_is_sized_as_its_value_alone() {
        let limits = Limits::default();
        let member = |doc: &str| measure_member(doc.as_bytes(), "request", &limits).unwrap();
        let value = r#"{"uid": "u", "object": {"a": [1, "x\"y", {"b": null}], "c": true}}"#;
        let alone = measure(value.as_bytes(), &limits).unwrap();
        for doc in [
            format!(r#"{{"request": {value}}}"#),
            format!(r#"{{"apiVersion": "v", "kind": "k", "request": {value}}}"#),
            format!(
                " {{ \"pad\" : [{{\"request\": 1}}, \"request\"], \"request\"\n:\t{value} , \"z\": {{}} }} "
            ),
            format!(r#"{{"requ\u0065st": {value}, "other": [[[]]]}}"#),
        ] {
            assert_eq!(member(&doc), alone, "{doc}");
        }
        // No such member: nothing sized; a member of an inner object or
        // a string value that reads "request" is not it.
        let none = Shape::default();
        assert_eq!(
            member(r#"{"kind": "request", "x": {"request": [1, 2]}}"#),
            none
        );
        assert_eq!(member(r#"["request", {"request": 1}]"#), none);
        assert_eq!(member("null"), none);
        // A scalar member, and a member given twice (counted together).
        assert_eq!(member(r#"{"request": 7}"#), measure(b"7", &limits).unwrap());
        let twice = member(&format!(r#"{{"request": {value}, "request": {value}}}"#));
        assert_eq!(twice.nodes, 2 * alone.nodes);
        assert_eq!(twice.decoded_bytes, 2 * alone.decoded_bytes);
        // Limits count the member only, and stop it as they stop the value.
        let tight = Limits {
            max_nodes: alone.nodes,
            ..Limits::default()
        };
        let padded = format!(r#"{{"pad": [{}0], "request": {value}}}"#, "0,".repeat(100));
        assert_eq!(
            measure_member(padded.as_bytes(), "request", &tight),
            Ok(alone)
        );
        let tighter = Limits {
            max_nodes: alone.nodes - 1,
            ..Limits::default()
        };
        assert!(measure_member(padded.as_bytes(), "request", &tighter).is_err());
        // Malformed input gives some shape and never panics.
        for doc in [
            r#"{"request": }"#,
            r#"{"request""#,
            r#"{"request": [1,"#,
            "}{",
            "",
        ] {
            let _ = measure_member(doc.as_bytes(), "request", &limits);
        }
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
