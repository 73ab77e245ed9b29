//! Type checking an expression against the schemas of what it reads, as
//! kube-apiserver's checker does when a policy is created
//! (`status.typeChecking`): a field selection on an object whose schema
//! does not have the field, a selection on a scalar, a comparison or
//! arithmetic of values of different types. Everything the schemas leave
//! open is `dyn` and never reported: unknown kinds, int-or-string
//! (quantities), formatted strings, objects that keep unknown fields.
//! The same walk, with no schema at all, finds aggregate literals whose
//! elements or values differ in type, which kube-apiserver refuses.
use kube_cel::cel::common::ast::{operators as op, EntryExpr, Expr, LiteralValue as L, SourceInfo};
use kube_cel::cel::parser::Expression;
use serde_json::value::RawValue;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The type a schema gives a value.
#[derive(Clone, Debug, PartialEq)]
pub enum Schema {
    /// Anything: not known, or left open by the schema.
    Dyn,
    /// `bool`, `int`, `uint`, `double`, `string` or `bytes`.
    Scalar(&'static str),
    List(Box<Schema>),
    Map(Box<Schema>, Box<Schema>),
    /// An object with these fields; `true` when it may have others, of
    /// any type (`x-kubernetes-preserve-unknown-fields`).
    Object(Arc<BTreeMap<String, Schema>>, bool),
    /// A type of the [`Types`] the check is given.
    Named(Arc<str>),
    Optional(Box<Schema>),
}

const SCALARS: [&str; 6] = ["bool", "int", "uint", "double", "string", "bytes"];

impl Schema {
    /// A schema in the compact form of `src/policy/schemas.json` (see
    /// `tests/schemas.rs`): a scalar's name, `dyn` or a type's name; `[T]`;
    /// `{"*": T}` a map of strings; `{field: T...}` a closed object.
    pub fn compact(v: &Value) -> Schema {
        match v {
            Value::String(s) if s == "dyn" => Schema::Dyn,
            Value::String(s) => match SCALARS.iter().find(|n| **n == s) {
                Some(n) => Schema::Scalar(n),
                None => Schema::Named(s.as_str().into()),
            },
            Value::Array(a) => {
                Schema::List(Box::new(a.first().map_or(Schema::Dyn, Schema::compact)))
            }
            Value::Object(o) => match o.get("*") {
                Some(values) => Schema::map_of(Schema::compact(values)),
                None => Schema::object(
                    o.iter().map(|(k, v)| (k.clone(), Schema::compact(v))),
                    false,
                ),
            },
            _ => Schema::Dyn,
        }
    }

    /// A CRD's `openAPIV3Schema`, as kube-apiserver types it for CEL.
    pub fn openapi(s: &Value) -> Schema {
        let open = s["x-kubernetes-preserve-unknown-fields"] == true;
        if s["x-kubernetes-int-or-string"] == true {
            return Schema::Dyn;
        }
        match s["type"].as_str().unwrap_or_default() {
            "boolean" => Schema::Scalar("bool"),
            "integer" => Schema::Scalar("int"),
            "number" => Schema::Scalar("double"),
            "string" if s.get("format").is_none() => Schema::Scalar("string"),
            "array" => Schema::List(Box::new(Schema::openapi(&s["items"]))),
            "object" => match (s["properties"].as_object(), &s["additionalProperties"]) {
                (Some(fields), _) => Schema::object(
                    fields.iter().map(|(k, v)| (k.clone(), Schema::openapi(v))),
                    open,
                ),
                (None, values) if values.is_object() => Schema::map_of(Schema::openapi(values)),
                _ => Schema::Dyn,
            },
            _ => Schema::Dyn,
        }
    }

    /// The type of values shaped like `sample` (a host variable's JSON):
    /// its fields closed at the top, open below, empty lists of `dyn`.
    pub fn of_sample(sample: &Value, open: bool) -> Schema {
        match sample {
            Value::Bool(_) => Schema::Scalar("bool"),
            Value::Number(n) if n.is_f64() => Schema::Scalar("double"),
            Value::Number(_) => Schema::Scalar("int"),
            Value::String(_) => Schema::Scalar("string"),
            Value::Array(a) => Schema::List(Box::new(
                a.first()
                    .map_or(Schema::Dyn, |v| Schema::of_sample(v, true)),
            )),
            Value::Object(o) => Schema::object(
                o.iter()
                    .map(|(k, v)| (k.clone(), Schema::of_sample(v, true))),
                open,
            ),
            Value::Null => Schema::Dyn,
        }
    }

    pub fn object(fields: impl IntoIterator<Item = (String, Schema)>, open: bool) -> Schema {
        Schema::Object(Arc::new(fields.into_iter().collect()), open)
    }

    fn map_of(values: Schema) -> Schema {
        Schema::Map(Box::new(Schema::Scalar("string")), Box::new(values))
    }

    /// The type that holds both, as cel-go joins an aggregate literal's
    /// element types: `dyn` takes anything.
    fn join(&self, other: &Schema) -> Option<Schema> {
        Some(match (self, other) {
            (Schema::Dyn, _) | (_, Schema::Dyn) => Schema::Dyn,
            (Schema::List(a), Schema::List(b)) => Schema::List(Box::new(a.join(b)?)),
            (Schema::Optional(a), Schema::Optional(b)) => Schema::Optional(Box::new(a.join(b)?)),
            (Schema::Map(k, v), Schema::Map(k2, v2)) => {
                Schema::Map(Box::new(k.join(k2)?), Box::new(v.join(v2)?))
            }
            (a, b) => return (a == b).then(|| a.clone()),
        })
    }
}

impl std::fmt::Display for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Schema::Dyn => f.write_str("dyn"),
            Schema::Scalar(name) => f.write_str(name),
            Schema::List(e) => write!(f, "list({e})"),
            Schema::Map(k, v) => write!(f, "map({k}, {v})"),
            Schema::Object(..) => f.write_str("object"),
            Schema::Named(name) => f.write_str(name),
            Schema::Optional(t) => write!(f, "optional_type({t})"),
        }
    }
}

/// Named types: [`Schema::Named`] resolves here, each read from its
/// compact form ([`Schema::compact`]) when first needed.
#[derive(Debug, Default)]
pub struct Types {
    compact: HashMap<&'static str, &'static RawValue>,
    read: RefCell<HashMap<&'static str, Schema>>,
}

impl Types {
    /// The types of a `{name: compact schema}` map (the `types` of
    /// `src/policy/schemas.json`).
    pub fn new(compact: HashMap<&'static str, &'static RawValue>) -> Types {
        Types {
            compact,
            read: RefCell::default(),
        }
    }

    fn resolve(&self, s: &Schema) -> Schema {
        let Schema::Named(name) = s else {
            return s.clone();
        };
        let Some((key, compact)) = self.compact.get_key_value(&**name) else {
            return Schema::Dyn;
        };
        if let Some(read) = self.read.borrow().get(key) {
            return read.clone();
        }
        let read = serde_json::from_str(compact.get()).map_or(Schema::Dyn, |v| Schema::compact(&v));
        self.read.borrow_mut().insert(key, read.clone());
        read
    }
}

/// What the check found, worded as kube-apiserver's checker words it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// 1-based line and column in the expression.
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// The field selected or compared (`object.spec.containers[*].image`),
    /// when it is one.
    pub field: Option<String>,
    /// An aggregate literal whose elements or values differ in type:
    /// refused at load even with no schema.
    pub literal: bool,
}

/// An expression parsed for checking, with the positions of its parts.
pub struct Parsed(Expression, std::sync::Arc<SourceInfo>);

impl Parsed {
    /// A tree as parsed, with the positions of its parts.
    pub(super) fn of(ast: Expression, positions: std::sync::Arc<SourceInfo>) -> Parsed {
        Parsed(ast, positions)
    }

    /// `source` parsed as [`super::compile`] parses it; `None` when it
    /// does not parse.
    #[cfg(test)]
    pub fn new(source: &str) -> Option<Parsed> {
        let parser = kube_cel::cel::parser::Parser::new().enable_optional_syntax(true);
        let (ast, positions) = parser.parse_with_positions(source).ok()?;
        Some(Parsed(ast, positions))
    }

    /// Checks the expression against the types of the variables in
    /// `roots`, which also give the result types of namespaced functions
    /// by qualified name (`azure.sku`: no variable's name has a dot);
    /// every other name is `dyn`. Returns its type and what was
    /// found, in source order.
    pub fn check(&self, types: &Types, roots: &BTreeMap<&str, Schema>) -> (Schema, Vec<Finding>) {
        check_tree(&self.0, &self.1, types, roots)
    }
}

pub(super) fn check_tree(
    ast: &Expression,
    positions: &SourceInfo,
    types: &Types,
    roots: &BTreeMap<&str, Schema>,
) -> (Schema, Vec<Finding>) {
    let mut checker = Checker {
        types,
        roots,
        positions,
        scope: Vec::new(),
        findings: Vec::new(),
    };
    let ty = checker.check(ast).ty;
    checker.findings.sort();
    (ty, checker.findings)
}

/// The type of an aggregate literal's element or value: of the optional's
/// value for one written `?x` (added only when present).
fn optional_value(ty: Schema, optional: bool) -> Schema {
    match (optional, ty) {
        (true, Schema::Optional(t)) => *t,
        (true, _) => Schema::Dyn,
        (false, t) => t,
    }
}

/// A type, and the field it is the value of.
struct Typed {
    ty: Schema,
    field: Option<String>,
}

impl Typed {
    fn of(ty: Schema) -> Typed {
        Typed { ty, field: None }
    }
}

struct Checker<'a> {
    types: &'a Types,
    roots: &'a BTreeMap<&'a str, Schema>,
    positions: &'a SourceInfo,
    /// Names comprehensions bind, innermost last.
    scope: Vec<(String, Typed)>,
    findings: Vec<Finding>,
}

impl Checker<'_> {
    fn report(&mut self, at: &Expression, message: String, field: Option<String>, literal: bool) {
        let (line, column) = self.positions.pos_for(at.id).unwrap_or((0, 0));
        self.findings.push(Finding {
            line: usize::try_from(line).unwrap_or(0),
            column: usize::try_from(column).unwrap_or(0),
            message,
            field,
            literal,
        });
    }

    fn check(&mut self, e: &Expression) -> Typed {
        match &e.expr {
            Expr::Literal(literal) => Typed::of(match literal {
                L::Boolean(_) => Schema::Scalar("bool"),
                L::Bytes(_) => Schema::Scalar("bytes"),
                L::Double(_) => Schema::Scalar("double"),
                L::Int(_) => Schema::Scalar("int"),
                L::UInt(_) => Schema::Scalar("uint"),
                L::String(_) => Schema::Scalar("string"),
                // `null` is assignable to more than its own type.
                L::Null => Schema::Dyn,
            }),
            Expr::Ident(name) => match self.scope.iter().rev().find(|(n, _)| n == name) {
                Some((_, t)) => Typed {
                    ty: t.ty.clone(),
                    field: t.field.clone(),
                },
                None => Typed {
                    ty: self
                        .roots
                        .get(name.as_str())
                        .cloned()
                        .unwrap_or(Schema::Dyn),
                    field: Some(name.clone()),
                },
            },
            Expr::Select(s) => {
                let operand = self.check(&s.operand);
                let field = self.select(e, operand, &s.field);
                match s.test {
                    true => Typed {
                        ty: Schema::Scalar("bool"),
                        ..field
                    },
                    false => field,
                }
            }
            Expr::Call(call) => {
                if call.func_name == op::OPT_SELECT {
                    if let [operand, field] = call.args.as_slice() {
                        if let Expr::Literal(L::String(name)) = &field.expr {
                            let operand = self.check(operand);
                            let t = self.select(e, operand, name.inner());
                            return Typed {
                                ty: Schema::Optional(Box::new(t.ty)),
                                ..t
                            };
                        }
                    }
                }
                let args: Vec<Typed> = call.args.iter().map(|a| self.check(a)).collect();
                // `azure.sku(x)`: a function of a namespace, typed by its
                // qualified name where the roots give it.
                if let Some(Expr::Ident(ns)) = call.target.as_deref().map(|t| &t.expr) {
                    let qualified = format!("{ns}.{}", call.func_name);
                    let bound = self.scope.iter().any(|(n, _)| n == ns);
                    match self.roots.get(qualified.as_str()) {
                        Some(ty) if !bound && !self.roots.contains_key(ns.as_str()) => {
                            return Typed {
                                ty: ty.clone(),
                                field: Some(format!("{qualified}()")),
                            };
                        }
                        _ => {}
                    }
                }
                let target = call.target.as_deref().map(|t| self.check(t));
                self.call(e, &call.func_name, target, args)
            }
            Expr::List(list) => {
                let items = (list.elements.iter().enumerate())
                    .map(|(n, i)| {
                        (
                            i,
                            optional_value(self.check(i).ty, list.optional_indices.contains(&n)),
                        )
                    })
                    .collect();
                Typed::of(Schema::List(Box::new(self.join(items))))
            }
            Expr::Map(map) => {
                let (mut keys, mut values) = (Vec::new(), Vec::new());
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        keys.push((&m.key, self.check(&m.key).ty));
                        values.push((
                            &m.value,
                            optional_value(self.check(&m.value).ty, m.optional),
                        ));
                    }
                }
                Typed::of(Schema::Map(
                    Box::new(self.join(keys)),
                    Box::new(self.join(values)),
                ))
            }
            Expr::Comprehension(c) => {
                let range = self.check(&c.iter_range);
                self.check(&c.accu_init);
                let field = range.field.map(|f| format!("{f}[*]"));
                let (first, second) = match self.types.resolve(&range.ty) {
                    Schema::List(e) if c.iter_var2.is_some() => (Schema::Scalar("int"), *e),
                    Schema::List(e) => (*e, Schema::Dyn),
                    Schema::Map(k, v) => (*k, *v),
                    _ => (Schema::Dyn, Schema::Dyn),
                };
                let before = self.scope.len();
                let bound = [(Some(&c.iter_var), first), (c.iter_var2.as_ref(), second)];
                for (name, ty) in bound.into_iter().filter_map(|(n, t)| Some((n?, t))) {
                    self.scope.push((
                        name.clone(),
                        Typed {
                            ty,
                            field: field.clone(),
                        },
                    ));
                }
                self.scope
                    .push((c.accu_var.clone(), Typed::of(Schema::Dyn)));
                self.check(&c.loop_cond);
                self.check(&c.loop_step);
                self.scope.truncate(before);
                self.scope
                    .push((c.accu_var.clone(), Typed::of(Schema::Dyn)));
                self.check(&c.result);
                self.scope.truncate(before);
                Typed::of(Schema::Dyn)
            }
            Expr::Struct(_) | Expr::Unspecified => {
                super::walk::children(e, |child| drop(self.check(child)));
                Typed::of(Schema::Dyn)
            }
        }
    }

    /// The type of `field` of `operand` (of an optional's value).
    fn select(&mut self, at: &Expression, operand: Typed, field: &str) -> Typed {
        let name = operand.field.as_ref().map(|f| format!("{f}.{field}"));
        let ty = match &operand.ty {
            Schema::Optional(t) => t,
            t => t,
        };
        let ty = match self.types.resolve(ty) {
            Schema::Object(fields, open) => match fields.get(field) {
                Some(t) => t.clone(),
                // Escaped names (`__dash__`...) are not worked out.
                None if open || field.contains("__") => Schema::Dyn,
                None => {
                    self.report(
                        at,
                        format!("undefined field '{field}'"),
                        name.clone(),
                        false,
                    );
                    Schema::Dyn
                }
            },
            Schema::Map(_, v) => *v,
            Schema::Dyn => Schema::Dyn,
            other => {
                let message = format!("type '{other}' does not support field selection");
                self.report(at, message, name.clone(), false);
                Schema::Dyn
            }
        };
        Typed { ty, field: name }
    }

    fn call(
        &mut self,
        at: &Expression,
        func: &str,
        target: Option<Typed>,
        args: Vec<Typed>,
    ) -> Typed {
        let bool_ = Typed::of(Schema::Scalar("bool"));
        let scalar = |t: &Typed| match self.types.resolve(&t.ty) {
            Schema::Scalar(name) => Some(name),
            _ => None,
        };
        match (func, target, args.as_slice()) {
            (op::INDEX | op::OPT_INDEX, None, [on, _]) => {
                let ty = match self.types.resolve(&on.ty) {
                    Schema::List(e) | Schema::Map(_, e) => *e,
                    _ => Schema::Dyn,
                };
                let field = on.field.as_ref().map(|f| format!("{f}[*]"));
                let ty = match func == op::OPT_INDEX {
                    true => Schema::Optional(Box::new(ty)),
                    false => ty,
                };
                Typed { ty, field }
            }
            (
                op::EQUALS
                | op::NOT_EQUALS
                | op::LESS
                | op::LESS_EQUALS
                | op::GREATER
                | op::GREATER_EQUALS
                | op::ADD
                | op::SUBSTRACT
                | op::MULTIPLY
                | op::DIVIDE
                | op::MODULO,
                None,
                [a, b],
            ) => {
                let class = |n: &'static str| match n {
                    "int" | "uint" | "double" => "number",
                    n => n,
                };
                let (x, y) = (scalar(a), scalar(b));
                if let (Some(x), Some(y)) = (x, y) {
                    if class(x) != class(y) {
                        let message = format!(
                            "found no matching overload for '{func}' applied to '({x}, {y})'"
                        );
                        let field = a.field.clone().or_else(|| b.field.clone());
                        self.report(at, message, field, false);
                    }
                }
                match func {
                    op::EQUALS
                    | op::NOT_EQUALS
                    | op::LESS
                    | op::LESS_EQUALS
                    | op::GREATER
                    | op::GREATER_EQUALS => bool_,
                    // `containers + initContainers` is a list of containers.
                    _ => Typed::of(match (x, y, &a.ty, &b.ty) {
                        (Some(x), Some(y), _, _) if x == y => Schema::Scalar(x),
                        (_, _, Schema::List(_), Schema::List(_)) if func == op::ADD => {
                            a.ty.join(&b.ty).unwrap_or(Schema::Dyn)
                        }
                        _ => Schema::Dyn,
                    }),
                }
            }
            (op::LOGICAL_NOT | op::LOGICAL_AND | op::LOGICAL_OR | op::IN, None, _) => bool_,
            ("hasValue", Some(_), []) => bool_,
            ("size", _, _) => Typed::of(Schema::Scalar("int")),
            (op::CONDITIONAL, None, [_, a, b]) => {
                Typed::of(a.ty.join(&b.ty).unwrap_or(Schema::Dyn))
            }
            (
                "value" | "orValue",
                Some(Typed {
                    ty: Schema::Optional(t),
                    field,
                }),
                _,
            ) => Typed { ty: *t, field },
            (f, None, [_]) if SCALARS.contains(&f) => Typed::of(Schema::Scalar(
                SCALARS.into_iter().find(|n| *n == f).unwrap_or("dyn"),
            )),
            _ => Typed::of(Schema::Dyn),
        }
    }

    /// The joined type of an aggregate literal's `items`; the first that
    /// does not join is reported at that item.
    fn join(&mut self, items: Vec<(&Expression, Schema)>) -> Schema {
        let mut joined: Option<Schema> = None;
        for (item, ty) in items {
            joined = Some(match joined {
                None => ty,
                Some(prev) => match prev.join(&ty) {
                    Some(t) => t,
                    None => {
                        let message = format!("expected type '{prev}' but found '{ty}'");
                        self.report(item, message, None, true);
                        Schema::Dyn
                    }
                },
            });
        }
        joined.unwrap_or(Schema::Dyn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod's schema in the compact form, cut down.
    fn types() -> Types {
        Types::new(serde_json::from_str(TYPES).unwrap())
    }

    const TYPES: &str = r#"{
        "Pod": {"apiVersion": "string", "metadata": "Meta", "spec": "PodSpec"},
        "Meta": {"name": "string", "labels": {"*": "string"}, "creationTimestamp": "dyn"},
        "PodSpec": {"hostNetwork": "bool", "priority": "int", "containers": ["Container"],
            "initContainers": ["Container"]},
        "Container": {"name": "string", "ports": [{"containerPort": "int"}],
            "resources": {"limits": {"*": "dyn"}}}
    }"#;

    /// What checking `source` with `object` a Pod finds, as
    /// `line:column message (field)`.
    fn found_with(source: &str, object: Schema) -> Vec<String> {
        let roots = BTreeMap::from([("object", object)]);
        let (_, found) = Parsed::new(source).unwrap().check(&types(), &roots);
        (found.into_iter())
            .map(|f| {
                let field = f.field.map(|f| format!(" ({f})")).unwrap_or_default();
                format!("{}:{} {}{field}", f.line, f.column, f.message)
            })
            .collect()
    }

    fn found(source: &str) -> Vec<String> {
        found_with(source, Schema::Named("Pod".into()))
    }

    #[test]
    fn a_field_no_schema_has_is_found_through_nested_macros() {
        assert_eq!(
            found("object.spec.containers.all(c, c.ports.exists(p, p.containerPortt == 80))"),
            ["1:50 undefined field 'containerPortt' (object.spec.containers[*].ports[*].containerPortt)"]
        );
        assert_eq!(
            found("object.spec.containers.exists(i, c, i > 0 && c.nmae == 'x')"),
            ["1:47 undefined field 'nmae' (object.spec.containers[*].nmae)"]
        );
        assert!(
            found("object.spec.containers.all(c, c.ports.all(p, p.containerPort > 0))").is_empty()
        );
        assert_eq!(
            found("(object.spec.containers + object.spec.?initContainers.orValue([])).all(c, c.nme != '')"),
            ["1:76 undefined field 'nme'"]
        );
    }

    #[test]
    fn presence_tests_and_optional_fields_are_checked_too() {
        assert_eq!(
            found("has(object.spec.hostNetwork.enabled) || has(object.spec.hostNetwrk)"),
            [
                "1:4 type 'bool' does not support field selection (object.spec.hostNetwork.enabled)",
                "1:44 undefined field 'hostNetwrk' (object.spec.hostNetwrk)",
            ]
        );
        assert_eq!(
            found("object.?spec.?priority.orValue(0) == 'high' || object.?spec.?priorty.hasValue()"),
            [
                "1:35 found no matching overload for '_==_' applied to '(int, string)' (object.spec.priority)",
                "1:60 undefined field 'priorty' (object.spec.priorty)",
            ]
        );
    }

    #[test]
    fn maps_take_any_key_and_give_their_values_type() {
        assert_eq!(
            found("object.metadata.labels.team == 1 || object.metadata.labels['a'] + 1 > 0"),
            [
                "1:29 found no matching overload for '_==_' applied to '(string, int)' (object.metadata.labels.team)",
                "1:65 found no matching overload for '_+_' applied to '(string, int)' (object.metadata.labels[*])",
            ]
        );
        assert!(found("object.metadata.labels.all(k, v, k.startsWith('a') && v != '')").is_empty());
    }

    #[test]
    fn what_the_schema_leaves_open_is_never_reported() {
        for source in [
            // A quantity (int-or-string), a timestamp.
            "object.spec.containers.all(c, c.resources.limits['nvidia.com/gpu'] > 0)",
            "object.metadata.creationTimestamp.anything == 1",
            // Numbers of different types compare; null is not a type here.
            "object.spec.priority > 1.5 && object.spec.hostNetwork != null",
            // Names the roots do not give, comprehension variables that
            // hide a root, escaped field names.
            "variables.x.y == 1 && [{'z': 1}].all(object, object.z == 1)",
            "object.metadata.__namespace__ == ''",
        ] {
            assert!(found(source).is_empty(), "{source}: {:?}", found(source));
        }
        // An object that keeps unknown fields, a kind with no schema.
        let open = Schema::object([("spec".to_string(), Schema::Scalar("string"))], true);
        assert!(found_with("object.status.x == 1", open).is_empty());
        assert!(found_with("object.spec.x.y == 1", Schema::Dyn).is_empty());
    }

    #[test]
    fn a_crd_schema_is_typed_as_kube_apiserver_types_it() {
        let crd = Schema::openapi(&serde_json::json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "workerGroupSpecs": {"type": "array", "items": {"type": "object", "properties": {
                    "replicas": {"type": "integer", "format": "int32"},
                    "rayStartParams": {"type": "object", "additionalProperties": {"type": "string"}},
                    "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "resources": {"x-kubernetes-int-or-string": true},
                }}},
            }}},
        }));
        assert_eq!(
            found_with(
                "object.spec.workerGroupSpecs.all(g, g.replica > 0 && g.replicas == '1' && g.rayStartParams.x == 'y' && g.template.spec.z && g.resources > 0)",
                crd
            ),
            [
                "1:38 undefined field 'replica' (object.spec.workerGroupSpecs[*].replica)",
                "1:65 found no matching overload for '_==_' applied to '(int, string)' (object.spec.workerGroupSpecs[*].replicas)",
            ]
        );
    }

    #[test]
    fn aggregate_literals_of_different_types_are_found_at_the_first_that_differs() {
        for (source, want) in [
            (
                "[1, 'a', 2.0]",
                "1:5 expected type 'int' but found 'string'",
            ),
            (
                "{'a': 1, 'b': 'c'}",
                "1:15 expected type 'int' but found 'string'",
            ),
            (
                "{'a': 1, 2: 1}",
                "1:10 expected type 'string' but found 'int'",
            ),
            (
                "[[1], ['a']]",
                "1:7 expected type 'list(int)' but found 'list(string)'",
            ),
            (
                "[object.spec.priority, 'a']",
                "1:24 expected type 'int' but found 'string'",
            ),
            (
                "[1, ?object.?spec.?priority, 'a']",
                "1:30 expected type 'int' but found 'string'",
            ),
        ] {
            assert_eq!(found(source), [want], "{source}");
        }
        assert!(found("[object.spec.x, 1, null] == [{'a': [1]}, {'b': []}]").len() == 1);
        // `?x` adds the optional's value, when it has one.
        let optional = "['a', ?object.?metadata.?name] == [] && {?'a': optional.of(1), 'b': 2} != {} && [variables.a.?x, object.?metadata.?name] != []";
        assert!(found(optional).is_empty(), "{:?}", found(optional));
    }
}
