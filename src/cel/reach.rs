//! What of `object` (or `oldObject`) a set of expressions can reach. Most
//! of an admitted object is never read by any policy: `metadata.
//! managedFields` (often as large as the spec), `status`, `uid`,
//! `resourceVersion`... Converting only what some expression can reach
//! into the interpreter's values saves that work on every request, and
//! changes nothing any expression can see.
//!
//! The walk is conservative. A chain of field selections from the root
//! (`object.spec.containers`, `object.?spec.?x`) reaches the value at its
//! end whole; the fields on the way are only looked into. A presence test
//! of such a chain (`has(object.spec)`) only looks for its last field: the
//! field is kept, and what it holds converted as far as other expressions
//! reach into it. So does a comparison of such a chain with `null`
//! (`namespaceObject != null`): whether the value is null does not depend
//! on what it holds. Anything else the root takes part in (passed
//! to a function, compared, indexed, iterated, or the root alone) reaches
//! the root whole. A comprehension variable of the root's name hides it:
//! what such a variable reads is the comprehension's own.
use kube_cel::cel::common::ast::{operators, Expr, LiteralValue};
use kube_cel::cel::parser::Expression;
use std::collections::BTreeMap;

/// The part of a value expressions can reach: all of it, or some of its
/// fields (each with the part of it they reach). Nothing at all is the
/// default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    whole: bool,
    fields: BTreeMap<String, Reach>,
}

impl Reach {
    /// Everything.
    pub fn whole() -> Reach {
        Reach {
            whole: true,
            fields: BTreeMap::new(),
        }
    }

    /// Whether all of the value is reached.
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// What is reached of field `name`; `None` when nothing is.
    pub fn field(&self, name: &str) -> Option<&Reach> {
        self.fields.get(name)
    }

    /// Adds what `ast` reaches of the variable `root`.
    pub fn add(&mut self, ast: &Expression, root: &str) {
        Walk {
            root,
            hidden: 0,
            reach: self,
        }
        .walk(ast);
    }

    /// Adds what `other` reaches.
    pub fn merge(&mut self, other: &Reach) {
        if self.whole {
            return;
        }
        if other.whole {
            *self = Reach::whole();
            return;
        }
        for (name, reach) in &other.fields {
            self.fields.entry(name.clone()).or_default().merge(reach);
        }
    }

    /// Adds the field at `path` (and the fields on the way), without
    /// adding anything it holds; `None` when something on the way is
    /// already reached whole.
    fn add_presence(&mut self, path: &[&str]) -> Option<&mut Reach> {
        let mut at = self;
        for field in path {
            if at.whole {
                return None;
            }
            at = at.fields.entry((*field).to_string()).or_default();
        }
        Some(at)
    }

    /// Adds the value at `path` whole.
    fn add_path(&mut self, path: &[&str]) {
        if let Some(at) = self.add_presence(path) {
            *at = Reach::whole();
        }
    }
}

struct Walk<'a> {
    root: &'a str,
    /// Comprehensions around the walk that bind the root's name.
    hidden: usize,
    reach: &'a mut Reach,
}

impl Walk<'_> {
    /// The fields `e` selects from the root, in order, if `e` is a chain
    /// of field selections from it.
    fn chain<'e>(&self, e: &'e Expression, path: &mut Vec<&'e str>) -> bool {
        match &e.expr {
            Expr::Ident(name) => self.hidden == 0 && name == self.root,
            Expr::Select(select) => {
                let found = self.chain(&select.operand, path);
                path.push(&select.field);
                found
            }
            Expr::Call(call)
                if call.func_name == operators::OPT_SELECT && call.target.is_none() =>
            {
                match call.args.as_slice() {
                    [operand, field] => match &field.expr {
                        Expr::Literal(LiteralValue::String(name)) => {
                            let found = self.chain(operand, path);
                            path.push(name.inner());
                            found
                        }
                        _ => false,
                    },
                    _ => false,
                }
            }
            _ => false,
        }
    }

    fn walk(&mut self, e: &Expression) {
        let mut path = Vec::new();
        if let Expr::Select(select) = &e.expr {
            if select.test && self.chain(&select.operand, &mut path) {
                path.push(&select.field);
                self.reach.add_presence(&path);
                return;
            }
            path.clear();
        }
        if let Some(operand) = compared_with_null(e) {
            if self.chain(operand, &mut path) {
                self.reach.add_presence(&path);
                return;
            }
            path.clear();
        }
        if self.chain(e, &mut path) {
            self.reach.add_path(&path);
            return;
        }
        match &e.expr {
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range);
                self.walk(&c.accu_init);
                // The iteration variables are bound in the loop, the
                // accumulator in the loop and the result.
                let in_loop = [Some(&c.iter_var), c.iter_var2.as_ref(), Some(&c.accu_var)]
                    .into_iter()
                    .flatten()
                    .any(|name| name == self.root);
                let in_result = c.accu_var == self.root;
                self.hidden += usize::from(in_loop);
                self.walk(&c.loop_cond);
                self.walk(&c.loop_step);
                self.hidden -= usize::from(in_loop);
                self.hidden += usize::from(in_result);
                self.walk(&c.result);
                self.hidden -= usize::from(in_result);
            }
            _ => super::walk::children(e, |child| self.walk(child)),
        }
    }
}

/// The other operand of `e` when `e` is `x == null` or `x != null` (either
/// way round).
fn compared_with_null(e: &Expression) -> Option<&Expression> {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    if call.target.is_some()
        || !(call.func_name == operators::EQUALS || call.func_name == operators::NOT_EQUALS)
    {
        return None;
    }
    let is_null = |e: &Expression| matches!(e.expr, Expr::Literal(LiteralValue::Null));
    match call.args.as_slice() {
        [x, n] | [n, x] if is_null(n) => Some(x),
        _ => None,
    }
}

/// `json` converted into the interpreter's values as far as `reach` goes:
/// an object keeps only the fields reached (each converted as far as its
/// own reach goes); anything else, and whatever is reached whole, is
/// converted whole.
pub fn json_to_val_within(json: &serde_json::Value, reach: &Reach) -> Box<dyn super::Val> {
    use kube_cel::cel::common::types::{CelMap, CelMapEntries, CelMapKey};
    match json {
        serde_json::Value::Object(map) if !reach.whole => {
            let entry = |name: &String, value, reach| {
                (
                    CelMapKey::from(name.as_str()),
                    json_to_val_within(value, reach),
                )
            };
            // Whichever side has fewer names is walked, the other looked
            // up: the same entries either way.
            let entries: CelMapEntries = if map.len() <= reach.fields.len() {
                map.iter()
                    .filter_map(|(name, value)| Some(entry(name, value, reach.fields.get(name)?)))
                    .collect()
            } else {
                reach
                    .fields
                    .iter()
                    .filter_map(|(name, reach)| Some(entry(name, map.get(name)?, reach)))
                    .collect()
            };
            Box::new(CelMap::from(entries))
        }
        _ => super::json_to_val(json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_cel::cel::parser::Parser;

    fn reach(sources: &[&str], root: &str) -> Reach {
        let mut reach = Reach::default();
        for source in sources {
            let ast = Parser::new()
                .enable_optional_syntax(true)
                .parse(source)
                .expect("parses");
            reach.add(&ast, root);
        }
        reach
    }

    /// The reach as `path` strings, `*` marking what is reached whole.
    fn paths(reach: &Reach) -> Vec<String> {
        fn walk(reach: &Reach, at: String, out: &mut Vec<String>) {
            if reach.whole {
                out.push(format!("{at}*"));
            } else if reach.fields.is_empty() && !at.is_empty() {
                // Only looked for.
                out.push(at.trim_end_matches('.').to_string());
            }
            for (name, field) in &reach.fields {
                walk(field, format!("{at}{name}."), out);
            }
        }
        let mut out = Vec::new();
        walk(reach, String::new(), &mut out);
        out
    }

    /// Merging reaches is adding the expressions of both.
    #[test]
    fn merged_reaches_reach_what_both_expressions_reach() {
        let sets: [&[&str]; 5] = [
            &[
                "object.spec.containers.size() > 0",
                "object.metadata.name != ''",
            ],
            &[
                "has(object.spec.affinity.nodeAffinity)",
                "object.kind == 'Pod'",
            ],
            &["object.spec.containers[0].image != ''"],
            &["f(object.spec)"],
            &["object == null"],
        ];
        for a in sets {
            for b in sets {
                let mut merged = reach(a, "object");
                merged.merge(&reach(b, "object"));
                let both: Vec<&str> = a.iter().chain(b).copied().collect();
                assert_eq!(
                    paths(&merged),
                    paths(&reach(&both, "object")),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn a_chain_of_selections_reaches_its_end_whole() {
        let r = reach(
            &[
                "object.spec.containers.all(c, has(c.image))",
                "has(object.metadata.labels) && object.metadata.name != ''",
                "object.?spec.?nodeSelector.orValue({}).size() == 0",
                "object.metadata.annotations['a'] == 'b'",
            ],
            "object",
        );
        assert_eq!(
            paths(&r),
            [
                "metadata.annotations.*",
                "metadata.labels",
                "metadata.name.*",
                "spec.containers.*",
                "spec.nodeSelector.*"
            ]
        );
        assert!(r.field("status").is_none());
    }

    /// `has()` looks for a field: it is kept, its contents are not,
    /// unless another expression reads them.
    #[test]
    fn a_presence_test_keeps_the_field_not_its_contents() {
        let r = reach(&["has(object.spec) && has(object.spec.affinity)"], "object");
        assert_eq!(paths(&r), ["spec.affinity"]);
        let r = reach(
            &["has(object.spec)", "object.spec.containers.size() > 0"],
            "object",
        );
        assert_eq!(paths(&r), ["spec.containers.*"]);
        let r = reach(&["has(object.spec.x)", "object.spec == {}"], "object");
        assert_eq!(paths(&r), ["spec.*"]);
        // Not a chain from the root: the operand is walked as usual.
        let r = reach(&["has(f(object).spec)"], "object");
        assert!(r.is_whole());

        use crate::cel::{Context, Value};
        let object = serde_json::json!({
            "spec": {"affinity": {"nodeAffinity": {"a": 1}}, "volumes": [{"name": "v"}], "n": null},
            "status": {}
        });
        for (source, want) in [
            ("has(object.spec)", true),
            ("has(object.spec.affinity)", true),
            ("has(object.spec.volumes)", true),
            ("has(object.spec.n)", true),
            ("has(object.spec.nodeSelector)", false),
            ("has(object.status)", true),
            ("has(object.metadata)", false),
        ] {
            let r = reach(&[source], "object");
            let mut ctx = Context::default();
            ctx.add_variable_as_val("object", json_to_val_within(&object, &r));
            let ast = Parser::new().parse(source).unwrap();
            let got = Value::resolve(&ast, &ctx).expect("evaluates");
            assert_eq!(got, Value::Bool(want), "{source}");
        }
        let projected =
            json_to_val_within(&object, &reach(&["has(object.spec.affinity)"], "object"));
        let projected = Value::try_from(projected.as_ref()).unwrap();
        let expected = serde_json::json!({"spec": {"affinity": {}}});
        assert_eq!(projected, crate::cel::json_to_value(&expected));
    }

    /// Comparing with `null` looks for the value, as `has()` does.
    #[test]
    fn a_comparison_with_null_keeps_the_value_not_its_contents() {
        let r = reach(&["namespaceObject != null"], "namespaceObject");
        assert_eq!(r, Reach::default());
        let r = reach(
            &["namespaceObject != null && has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {}"],
            "namespaceObject",
        );
        assert_eq!(paths(&r), ["metadata.labels.*"]);
        let r = reach(
            &["null == object.spec.x", "object.spec.y != null"],
            "object",
        );
        assert_eq!(paths(&r), ["spec.x", "spec.y"]);
        // Compared with anything else: reached whole.
        assert!(reach(&["object != {}"], "object").is_whole());

        use crate::cel::{Context, Value};
        let namespace = serde_json::json!({
            "metadata": {"name": "ml", "labels": {"a": "b"}, "managedFields": [{"manager": "m"}]},
            "spec": {"x": {"y": 1}, "s": "text", "n": null}
        });
        for (source, want) in [
            ("object != null", true),
            ("object == null", false),
            ("null != object.spec.x", true),
            ("object.spec.s != null", true),
            ("object.spec.n == null", true),
            ("object.spec.x == null", false),
        ] {
            let r = reach(&[source], "object");
            for json in [&namespace, &serde_json::Value::Null] {
                let mut ctx = Context::default();
                ctx.add_variable_as_val("object", json_to_val_within(json, &r));
                let ast = Parser::new().parse(source).unwrap();
                let got = Value::resolve(&ast, &ctx);
                let mut whole = Context::default();
                whole.add_variable_as_val("object", crate::cel::json_to_val(json));
                let expected = Value::resolve(&ast, &whole);
                assert_eq!(got, expected, "{source} on {json}");
                if json == &namespace {
                    assert_eq!(got, Ok(Value::Bool(want)), "{source}");
                }
            }
        }
    }

    #[test]
    fn the_root_used_otherwise_is_reached_whole() {
        for source in [
            "object == oldObject",
            "size(object) > 0",
            "object['spec'].containers.size() > 0",
            "object.all(k, k != 'status')",
            "[object][0].spec.x == 1",
            "string(object) != ''",
            "cel.bind(o, object, o.spec.x == 1)",
            "(true ? object : oldObject).spec.x == 1",
        ] {
            assert!(reach(&[source], "object").is_whole(), "{source}");
        }
    }

    #[test]
    fn a_whole_field_absorbs_its_parts() {
        let r = reach(&["object.spec.x.y == 1", "object.spec == {}"], "object");
        assert_eq!(paths(&r), ["spec.*"]);
        let r = reach(&["object.spec == {}", "object.spec.x.y == 1"], "object");
        assert_eq!(paths(&r), ["spec.*"]);
    }

    #[test]
    fn a_comprehension_variable_of_the_same_name_hides_the_root() {
        let r = reach(&["[{'a': 1}].all(object, object.a == 1)"], "object");
        assert_eq!(paths(&r), Vec::<String>::new());
        let r = reach(
            &["object.spec.items.exists(object, object == 1) && object.kind == 'Pod'"],
            "object",
        );
        assert_eq!(paths(&r), ["kind.*", "spec.items.*"]);
        let r = reach(&["cel.bind(object, {'a': 1}, object.a) == 1"], "object");
        assert_eq!(paths(&r), Vec::<String>::new(), "bound by cel.bind");
        let r = reach(&["cel.bind(x, object.metadata.name, x) == 'p'"], "object");
        assert_eq!(paths(&r), ["metadata.name.*"]);
        // A comprehension whose iteration variable is named like the root
        // and whose result reads the root (no macro writes one; the walk
        // must not depend on it): the loop's variable is out of scope
        // there, so the result reads the root itself.
        let mut ast = Parser::new().parse("[1].all(object, true)").unwrap();
        let Expr::Comprehension(c) = &mut ast.expr else {
            panic!("all() is a comprehension")
        };
        assert_eq!(c.iter_var, "object");
        c.result = Parser::new().parse("object").unwrap();
        let mut r = Reach::default();
        r.add(&ast, "object");
        assert!(r.is_whole(), "the result reads the root");
        let r = reach(&["oldObject.spec.x == object.spec.y"], "oldObject");
        assert_eq!(paths(&r), ["spec.x.*"]);
    }

    #[test]
    fn conversion_keeps_what_is_reached() {
        use crate::cel::{json_to_val, Value};
        let object = serde_json::json!({
            "kind": "Pod",
            "metadata": {"name": "p", "managedFields": [{"manager": "kubectl"}], "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "env": [{"name": "X"}]}]},
            "status": {"phase": "Pending"}
        });
        let as_value = |v: Box<dyn crate::cel::Val>| Value::try_from(v.as_ref()).expect("converts");
        let r = reach(
            &["object.spec.containers.size() > 0 && object.metadata.name == 'p' && has(object.metadata.uid)"],
            "object",
        );
        let projected = as_value(json_to_val_within(&object, &r));
        let expected = serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "env": [{"name": "X"}]}]}
        });
        assert_eq!(projected, as_value(json_to_val(&expected)));
        // A map with fewer names than are reached gives the same.
        let few = serde_json::json!({"metadata": {"name": "p"}, "status": {}});
        assert_eq!(
            as_value(json_to_val_within(&few, &r)),
            as_value(json_to_val(&serde_json::json!({"metadata": {"name": "p"}})))
        );
        // Reached whole, or not an object where fields are looked into:
        // converted whole.
        let whole = as_value(json_to_val(&object));
        assert_eq!(
            as_value(json_to_val_within(&object, &Reach::whole())),
            whole
        );
        let list = serde_json::json!([1, {"a": 2}]);
        assert_eq!(
            as_value(json_to_val_within(&list, &r)),
            as_value(json_to_val(&list))
        );
    }
}
