//! Programs against the interpreter: the same value or error, and the
//! same cost units, for expressions that reach every kind of node.
use super::super::{compile, json_to_val, Env, EvalError};
use super::Roots;
use kube_cel::cel::budget;
use kube_cel::cel::common::value::Val;
use serde_json::json;

/// An answer: the value or the error's text, and the cost units used.
type Answer = (Result<Box<dyn Val>, String>, u64);

/// The interpreter's and the program's answers for `source` with
/// `object`, under `limit` units, the program reading `object` from the
/// scope as the interpreter does and in place from its JSON; `None` when
/// `source` does not compile.
fn both(source: &str, object: &serde_json::Value, limit: u64) -> Option<[Answer; 3]> {
    let env = Env::default();
    let compiled = compile(&env, source).ok()?;
    let program = env
        .program(compiled.tree())
        .unwrap_or_else(|| panic!("{source}: no program"));
    let mut ctx = env.scope();
    ctx.add_variable_as_val("object", json_to_val(object));
    let text = |r: Result<Box<dyn Val>, EvalError>| r.map_err(|e| e.to_string());
    let theirs = budget::with_budget(limit, || {
        super::super::evaluate_val(compiled.tree(), &ctx).0
    });
    let ours = budget::with_budget(limit, || program.evaluate_val(&ctx, &Roots::SCOPE).0);
    let roots = Roots {
        object: Some(object),
        ..Roots::SCOPE
    };
    let in_place = budget::with_budget(limit, || program.evaluate_val(&ctx, &roots).0);
    Some([
        (text(theirs.0), theirs.1),
        (text(ours.0), ours.1),
        (text(in_place.0), in_place.1),
    ])
}

/// The interpreter's and the program's answers for `source` with the
/// object as a host variable's tree ([`crate::cel::to_tree`], held as
/// `params` here): the interpreter reads it converted through the scope's
/// resolver, the program in place.
fn as_tree(source: &str, object: &serde_json::Value, limit: u64) -> Option<[Answer; 2]> {
    let env = Env::default();
    let tree = crate::cel::to_tree(object, crate::cel::SharedLists::none()).expect("plain JSON");
    let mut hosts = crate::cel::Hosts::default();
    hosts.push("params", std::sync::Arc::new(tree));
    let text = |r: Result<Box<dyn Val>, EvalError>| r.map_err(|e| e.to_string());
    let renamed = source.replace("object", "params");
    let compiled = compile(&env, &renamed).ok()?;
    let program = env
        .program(compiled.tree())
        .unwrap_or_else(|| panic!("{renamed}: no program"));
    let mut ctx = env.scope();
    ctx.set_variable_resolver(&hosts);
    let theirs = budget::with_budget(limit, || {
        super::super::evaluate_val(compiled.tree(), &ctx).0
    });
    let roots = Roots {
        hosts: &hosts,
        ..Roots::SCOPE
    };
    let ours = budget::with_budget(limit, || program.evaluate_val(&ctx, &roots).0);
    Some([(text(theirs.0), theirs.1), (text(ours.0), ours.1)])
}

/// Whether two answers are the same: equal values (maps in any order) or
/// the same error, and the same units.
fn same(a: &Answer, b: &Answer) -> bool {
    a.1 == b.1
        && match (&a.0, &b.0) {
            (Ok(x), Ok(y)) => x.equals(y.as_ref()),
            (Err(x), Err(y)) => x == y,
            _ => false,
        }
}

fn object() -> serde_json::Value {
    json!({
        "metadata": {"name": "trainer-0", "labels": {"team": "vision", "tier": "a100"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01",
                 "resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "4"}}},
                {"name": "metrics", "image": "busybox",
                 "resources": {"requests": {"memory": "1Gi"}}}
            ],
            "replicas": 3,
            "ratio": 1.5,
            "flag": true,
            "none": null,
            "bytes": "aGk="
        }
    })
}

/// Expressions reaching every kind of node, with values and errors.
const CASES: &[&str] = &[
    "1 + 2 * 3 - 4 / 2 % 3",
    "9223372036854775807 + 1",
    "-(-9223372036854775807 - 1)",
    "1 / 0",
    "1 % 0",
    "1.5 + 2.0 == 3.5 && 2.0 > 1 && 1 < 2.5 && 1u == 1 && 1 == 1.0",
    "'a' + 'b' == 'ab' && 'a' < 'b' && 'b' >= 'a'",
    "[1, 2] + [3] == [1, 2, 3] && [1] != [1.0, 2.0] && [1] == [1.0]",
    "'a' + 1",
    "1 < 'a'",
    "true < false",
    "object.spec.replicas > 2 ? 'many' : 'few'",
    "object.spec.ratio * 2.0",
    "object.spec.missing",
    "object.spec.replicas.x",
    "object.spec.containers.x",
    "has(object.spec.missing) || has(object.spec.replicas)",
    "has(object.metadata.labels.team)",
    "object.metadata.labels['team'] + object.metadata.labels['tier']",
    "object.metadata.labels['nope']",
    "object.spec.containers[1].name",
    "object.spec.containers[5]",
    "object.spec.containers[-1]",
    "object.spec.containers[1.0].name",
    "object.spec.containers['a']",
    "object.spec.replicas[0]",
    "'team' in object.metadata.labels && !('x' in object.metadata.labels)",
    "'main' in object.spec.containers.map(c, c.name)",
    "2 in [1.0, 2.0, 3.0] && !(2 in [1.5])",
    "1 in 'abc'",
    "object.spec.containers.all(c, has(c.resources))",
    "object.spec.containers.exists(c, c.resources.limits['nvidia.com/gpu'] > 0)",
    "object.spec.containers.all(c, c.resources.limits['nvidia.com/gpu'] > 0)",
    "object.spec.containers.exists(c, 1 / 0 == 1)",
    "[1, 2, 3].all(e, 6 / (2 - e) == 6)",
    "[1, 2, 3].exists(e, 6 / (2 - e) == 6)",
    "[1, 2, 3].exists_one(e, e > 2)",
    "[1, 2, 3].filter(e, e > 1).map(e, e * 2)",
    "[1, 2, 3].map(e, e > 1, e * 10)",
    "object.metadata.labels.filter(k, k.startsWith('t')).size()",
    "object.metadata.labels.exists(k, k == 'nope') || object.metadata.labels.map(k, k.size()).size() == 2",
    "object.metadata.labels.exists_one(k, v, v == 'vision')",
    "object.spec.containers.exists(c, i, c.name == 'metrics' && i == 1)",
    "object.spec.containers[0] == object.spec.containers[0]",
    "object.metadata.labels == {'team': 'vision', 'tier': 'a100'}",
    "object.spec.containers + [1]",
    "[1] + object.spec.containers",
    "object.spec.containers.size() + object.metadata.size()",
    "'main' in object.spec.containers.map(c, c.name) && !(1 in object.spec.containers)",
    "object.metadata.labels[1]",
    "object.spec.containers[0]['name']",
    "object.metadata.labels.all(k, v, v.size() > 1)",
    "[10, 20].all(i, v, i < v)",
    "object.spec.containers.map(c, {'name': c.name, 'gpu': has(c.resources.limits)})",
    "object.spec.containers.map(c, {'name': c.name, 'gpu': has(c.resources.limits)})[1].gpu",
    "{'a': 1, 'a': 2}",
    "{1: 'a', 2: 'b'}[2]",
    "size(object.spec.missing)",
    "size(object.spec.containers.map(c, c.nope))",
    "{'a': 1}.b",
    "{'a': {'b': [1, 2]}}.a.b.size()",
    "size(object.spec.containers) + object.spec.containers.size() + size('héllo') + 'abc'.size()",
    "size(object.metadata.labels) + object.metadata.labels.size()",
    "size(1)",
    "object.spec.replicas.size()",
    "object.metadata.name.startsWith('train') && object.metadata.name.endsWith('-0')",
    "object.spec.replicas.startsWith('a')",
    "object.metadata.name.startsWith(1)",
    "object.spec.containers.all(c, c.image.startsWith(c.name))",
    "object.spec.containers.exists(c, c.name.endsWith(object.metadata.name))",
    "object.metadata.name.matches('^train(er)?-[0-9]+$') && !object.metadata.name.matches('x')",
    "object.spec.containers.filter(c, c.image.matches('(?i)PYTORCH:[0-9.]+')).size()",
    "object.spec.containers.exists(c, c.name.matches(c.image))",
    "object.spec.replicas.matches('3')",
    "object.metadata.name.matches('([a-z')",
    "object.metadata.name.matches(1)",
    "object.metadata.labels.all(k, v, (k + '=' + v).matches('^[a-z]+=[a-z0-9]+$'))",
    "object.spec.containers.map(c, c.name).join(', ')",
    "object.spec.containers.map(c, c.name).join() + [1, 2].join('-') + ['a'].join(1)",
    "object.metadata.labels.join(',')",
    "object.spec.containers.map(c, c.name).join(object.spec.missing)",
    "object.spec.containers.all(c, [c.name, c.image].join(c.name) != '')",
    "string(1) + string(2u) + string(true) + string('s') + string(1.5) + string(b'ab')",
    "string(object.spec.missing)",
    "string([1])",
    "object.spec.containers.map(c, c.image.split(':')[0])",
    "object.spec.containers.filter(c, c.name.matches('^m')).size()",
    "string(object.spec.replicas) + string(object.spec.ratio)",
    "int('12') + int(object.spec.ratio)",
    "double(object.spec.replicas) / 2.0",
    "quantity(object.spec.containers[0].resources.limits.cpu).isGreaterThan(quantity('1'))",
    "object.spec.containers.map(c, quantity(has(c.resources.limits) && has(c.resources.limits.cpu) ? c.resources.limits.cpu : '0').asApproximateFloat())",
    "object.?spec.?replicas.orValue(0)",
    "[1, ?optional.of(2)]",
    "optional.of({'a': 1}).a",
    "optional.of({'a': 1})['a']",
    "optional.none()['a']",
    "has(optional.of({'a': 1}).a)",
    "int == type(1)",
    "google.protobuf.Timestamp",
    "cel.bind(x, object.spec.replicas, x * x)",
    "cel.bind(xs, [1, 2], xs.map(x, x + xs.size()))",
    "object.spec.flag && object.spec.none == null && !object.spec.flag == false",
    "!object.spec.replicas",
    "object.spec.replicas || true",
    "object.spec.replicas && false",
    "true || object.spec.missing",
    "object.spec.missing || true",
    "object.spec.missing && false",
    "false || object.spec.replicas",
    "object.spec.missing ? 1 : 2",
    "object.spec.replicas ? 1 : 2",
    "[1, 2].map(x, [x, x]).map(p, p[0] + p[1])",
    "object.spec.containers.map(c, c).exists(c, c.name == 'metrics')",
    "[[1, 2], [3]].exists(l, l.exists(e, e == 3))",
    "[1, 2, 3].map(x, x).filter(x, x > 1).size() == 2",
    "-object.spec.replicas + -object.spec.ratio",
    "-'a'",
    "object.spec.bytes.size()",
    "b'abc'.size() + size(b'ab')",
    "object.spec.containers.exists(c, c.resources.requests.memory == '1Gi')",
    "dyn(1) + 1",
    "object.spec.containers.all(c, c.name.size() < 10) == true",
    "[1, 0, -1].all(x, 6 / x > 0)",
    "[1, 0, 2].all(x, 6 / x > 0)",
    "[0, 1].exists(x, 6 / x > 0)",
    "[0, -1].exists(x, 6 / x > 0)",
    "[1, 2].all(x, x)",
    "[1, 2].exists(x, 'yes')",
    "[].all(x, x > 0) && ![].exists(x, x > 0)",
    "object.metadata.labels.exists(k, v, k.size() > 9 || v.startsWith('zz'))",
    "[[1, 0], [2]].all(l, l.exists(e, e == 2) || l.all(e, 2 / e > 0))",
    "[1, 2].all(x, [x].exists(y, y == x && [y].all(z, z == x)))",
];

/// Read from the scope, in place from the JSON, and in place from a
/// host's tree: the interpreter's answer each time.
#[test]
fn programs_answer_as_the_interpreter() {
    let object = object();
    let differ: Vec<String> = CASES
        .iter()
        .filter_map(|source| {
            let (Some([theirs, ours, in_place]), Some([tree_theirs, tree_ours])) = (
                both(source, &object, 1_000_000),
                as_tree(source, &object, 1_000_000),
            ) else {
                return Some(format!("{source}: does not compile"));
            };
            let alike = same(&theirs, &ours) && same(&theirs, &in_place);
            (!alike || !same(&tree_theirs, &tree_ours)).then(|| {
                format!(
                    "{source}\n  interpreter {theirs:?}\n  program     {ours:?}\n  in place    {in_place:?}\n  tree: interpreter {tree_theirs:?}, program {tree_ours:?}"
                )
            })
        })
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// A host's tree holding a list that [`crate::cel::SharedLists`] keeps:
/// the program reads the kept list as the interpreter does.
#[test]
fn programs_read_the_shared_lists_of_a_tree() {
    #[derive(serde::Serialize)]
    struct Facts {
        #[serde(serialize_with = "kept")]
        skus: std::sync::Arc<[String]>,
    }
    fn kept<S: serde::Serializer>(l: &std::sync::Arc<[String]>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_struct("Kept", &**l)
    }
    let skus: std::sync::Arc<[String]> = ["a", "b", "c"].map(String::from).into();
    let shared = crate::cel::SharedLists::new("Kept", [skus.clone()]);
    let tree = crate::cel::to_tree(&Facts { skus }, &shared).unwrap();
    assert!(matches!(
        tree.get("skus"),
        Some(crate::cel::Tree::Shared(_))
    ));
    let mut hosts = crate::cel::Hosts::default();
    hosts.push("params", std::sync::Arc::new(tree));
    let env = Env::default();
    let mut ctx = env.scope();
    ctx.set_variable_resolver(&hosts);
    let roots = Roots {
        hosts: &hosts,
        ..Roots::SCOPE
    };
    for source in [
        "params.skus.size() == 3 && 'b' in params.skus && params.skus[2] == 'c'",
        "params.skus.map(s, s + s).join(',')",
        "params.skus.filter(s, s != 'a') == ['b', 'c']",
        "params.skus[3]",
    ] {
        let compiled = compile(&env, source).unwrap();
        let program = env.program(compiled.tree()).unwrap();
        let text = |r: Result<Box<dyn Val>, EvalError>| r.map_err(|e| e.to_string());
        let theirs =
            budget::with_budget(1_000, || super::super::evaluate_val(compiled.tree(), &ctx));
        let ours = budget::with_budget(1_000, || program.evaluate_val(&ctx, &roots).0);
        let (theirs, ours) = ((text(theirs.0 .0), theirs.1), (text(ours.0), ours.1));
        assert!(
            same(&theirs, &ours),
            "{source}: {theirs:?} against {ours:?}"
        );
    }
}

/// Cut short at every budget up to what each expression needs: the same
/// answer (a value, or the cost limit at the same node) every time.
#[test]
fn programs_run_out_of_budget_where_the_interpreter_does() {
    let object = object();
    let mut differ = Vec::new();
    for source in CASES {
        let Some([(_, needed), _, _]) = both(source, &object, 1_000_000) else {
            continue;
        };
        for limit in 0..=needed.min(200) {
            let Some([theirs, ours, in_place]) = both(source, &object, limit) else {
                continue;
            };
            if !same(&theirs, &ours) || !same(&theirs, &in_place) {
                differ.push(format!(
                    "{source} within {limit}: {theirs:?} against {ours:?} and {in_place:?}"
                ));
                break;
            }
            let Some([theirs, ours]) = as_tree(source, &object, limit) else {
                continue;
            };
            if !same(&theirs, &ours) {
                differ.push(format!(
                    "{source} within {limit} as a tree: {theirs:?} against {ours:?}"
                ));
                break;
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// Nesting as deep as the interpreter allows, and one level deeper.
#[test]
fn programs_nest_as_deep_as_the_interpreter() {
    let object = object();
    for depth in [100, 240, 248, 249, 250, 251, 260] {
        let source = format!("{}1{}", "(".repeat(depth), " + 1)".repeat(depth));
        let Ok(compiled) = super::super::compile(&Env::default(), &source) else {
            continue;
        };
        let env = Env::default();
        let program = env.program(compiled.tree()).expect("a program");
        let mut ctx = env.scope();
        ctx.add_variable_as_val("object", json_to_val(&object));
        let theirs = super::super::evaluate_val(compiled.tree(), &ctx)
            .0
            .map(|v| format!("{v:?}"));
        let ours = (program.evaluate_val(&ctx, &Roots::SCOPE).0).map(|v| format!("{v:?}"));
        assert_eq!(ours, theirs, "depth {depth}");
    }
    // An `all` and an `exists` whose condition and step nodes the program
    // does not evaluate, placed so that each of their levels is the one
    // past the limit in turn.
    for quantifier in ["[1].all(x, x > 0)", "[1].exists(x, x > 0)"] {
        for depth in 243..=250 {
            let source = format!(
                "{}({quantifier} ? 1 : 0){}",
                "(".repeat(depth),
                " + 1)".repeat(depth)
            );
            let Ok(compiled) = super::super::compile(&Env::default(), &source) else {
                continue;
            };
            let env = Env::default();
            let program = env.program(compiled.tree()).expect("a program");
            let ctx = env.scope();
            let theirs = budget::with_budget(1_000_000, || {
                super::super::evaluate_val(compiled.tree(), &ctx).0
            });
            let ours =
                budget::with_budget(1_000_000, || program.evaluate_val(&ctx, &Roots::SCOPE).0);
            let text = |(r, used): (Result<Box<dyn Val>, EvalError>, u64)| {
                (r.map(|v| format!("{v:?}")).map_err(|e| e.to_string()), used)
            };
            assert_eq!(text(ours), text(theirs), "{quantifier} at depth {depth}");
        }
    }
}

/// What a program does itself and what it leaves to the interpreter.
#[test]
fn programs_leave_only_other_functions_to_the_interpreter() {
    let env = Env::default();
    let count = |source: &str| {
        let compiled = compile(&env, source).unwrap();
        env.program(compiled.tree()).map(|p| p.interpreted())
    };
    assert_eq!(
        count("object.spec.containers.all(c, has(c.name) && c.name.size() < 64 && c.name.startsWith('a'))"),
        Some(0)
    );
    assert_eq!(
        count("object.spec.containers.map(c, c.name).join(', ')"),
        Some(0)
    );
    assert_eq!(count("string(object.spec.replicas) + 'x'"), Some(0));
    // A literal pattern is compiled at load; any other is the function's.
    assert_eq!(
        count("object.spec.containers.exists(c, c.image.matches('^nvcr[.]io/'))"),
        Some(0)
    );
    assert_eq!(
        count("object.spec.containers.exists(c, c.name.matches(c.image))"),
        Some(1)
    );
    assert_eq!(
        count("object.spec.containers.exists(c, c.image.split(':')[0] == c.name)"),
        Some(1)
    );
}
