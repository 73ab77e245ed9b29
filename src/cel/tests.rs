use super::*;
use kube_cel::cel as celrs;
use serde_json::json;

/// `source` compiled in the default environment.
fn compiled(source: &str) -> Result<Compiled, CompileError> {
    compile(&Env::default(), source)
}

/// The load error of `source`, which must say `message`.
fn refused(source: &str, message: &str) -> CompileError {
    let err = compiled(source).unwrap_err();
    assert!(err.message.contains(message), "{source}: {err}");
    err
}

fn eval_with(source: &str, object: serde_json::Value) -> Result<Value, EvalError> {
    let env = Env::default();
    let compiled = compile(&env, source).unwrap();
    let mut ctx = env.scope();
    ctx.add_variable_from_value("object", json_to_value(&object));
    evaluate(compiled.tree(), &ctx)
}

#[test]
fn json_integers_are_cel_ints() {
    let v = eval_with(
        "object.spec.replicas + 1 == 4",
        json!({"spec": {"replicas": 3}}),
    );
    assert_eq!(v, Ok(Value::Bool(true)));
    let v = eval_with("object.f * 2.0 == 3.0", json!({"f": 1.5}));
    assert_eq!(v, Ok(Value::Bool(true)));
}

#[test]
fn kubernetes_libraries_are_registered() {
    for expr in [
        "quantity('2Gi').isGreaterThan(quantity('1G'))",
        "[1, 2, 3].sum() == 6",
        "[1, 2, 3].isSorted()",
        "sets.contains([1, 2, 3], [2])",
        "'abc'.find('b') == 'b'",
        "'a,b'.split(',').size() == 2",
        "isURL('https://example.com')",
        "ip('10.0.0.1').family() == 4",
        "cidr('10.0.0.0/8').containsIP('10.1.2.3')",
        "semver('1.2.3').major() == 1",
    ] {
        assert_eq!(eval_with(expr, json!({})), Ok(Value::Bool(true)), "{expr}");
    }
}

/// Kubernetes' image library (1.33), beside the engine's own
/// `image.repository(s)`.
#[test]
fn kubernetes_image_library_is_registered() {
    let digest = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2";
    for expr in [
        "image('registry.k8s.io/kube-apiserver-arm64:latest').registry() == 'registry.k8s.io'".to_string(),
        "image('registry.k8s.io/kube-apiserver-arm64').repository() == 'kube-apiserver-arm64'".to_string(),
        "image('registry.k8s.io/kube-apiserver-arm64').tag() == 'latest'".to_string(),
        "image('kube-apiserver-arm64:testtag').registry() == 'index.docker.io'".to_string(),
        "image('registry.k8s.io/kube-apiserver-arm64:testtag').identifier() == 'testtag'".to_string(),
        format!("image('registry.k8s.io/kube-apiserver-arm64:latest@{digest}').identifier() == '{digest}'"),
        format!("image('registry.k8s.io/kube-apiserver-arm64@{digest}').containsDigest()"),
        format!("image('registry.k8s.io/kube-apiserver-arm64@{digest}').digest() == '{digest}'"),
        "!image('registry.k8s.io/kube-apiserver-arm64:latest').containsDigest()".to_string(),
        "isImage('nginx') && !isImage('registry.k8s.io//kube-apiserver-arm64')".to_string(),
        "image.repository('nginx') == 'docker.io/library/nginx'".to_string(),
    ] {
        assert_eq!(eval_with(&expr, json!({})), Ok(Value::Bool(true)), "{expr}");
    }
    assert!(eval_with("image('registry.k8s.io//x').tag() == ''", json!({})).is_err());
    assert!(eval_with("'nginx'.tag() == ''", json!({})).is_err());
}

#[test]
fn image_repository_compares_images_exactly() {
    let object = json!({"spec": {"containers": [
        {"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"},
        {"name": "miner", "image": "docker.io/someone/k8s-device-plugin-miner:latest"}
    ]}});
    for (expr, want) in [
        ("image.repository(object.spec.containers[0].image) == 'nvcr.io/nvidia/k8s-device-plugin'", true),
        ("image.repository('nvcr.io/nvidia/k8s-device-plugin@sha256:0ff8ee7a') == 'nvcr.io/nvidia/k8s-device-plugin'", true),
        ("image.repository('rocm/k8s-device-plugin') == 'docker.io/rocm/k8s-device-plugin'", true),
        (
            "object.spec.containers.all(c, image.repository(c.image) in \
               ['nvcr.io/nvidia/k8s-device-plugin'].map(r, image.repository(r)))",
            false,
        ),
        (
            "object.spec.containers.exists(c, image.repository(c.image) == 'nvcr.io/nvidia/k8s-device-plugin')",
            true,
        ),
    ] {
        assert_eq!(eval_with(expr, object.clone()), Ok(Value::Bool(want)), "{expr}");
    }
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let err = compiled("object.spec.replicas >\n  ").unwrap_err();
    assert!(err.line.is_some() && err.column.is_some(), "{err:?}");
    let err = compiled("object.a == 1 &&\n  object.b ==== 2").unwrap_err();
    assert_eq!(err.line, Some(2), "{err:?}");
}

/// Positions are 1-based and count characters, as kube-apiserver's are:
/// the line in the expression, and the column of the offending token in
/// that line.
#[test]
fn error_positions_are_kube_apiservers() {
    const SIMPLE: &str = "argument must be a simple name";
    const FOO: &str = "undeclared reference to 'foo'";
    for (source, line, column, message) in [
        // Syntax errors.
        (")", 1, 1, "Syntax error: mismatched input ')'"),
        ("1 + )", 1, 5, "Syntax error: mismatched input ')'"),
        (
            "object.spec.containers.all(c, c.name ==)",
            1,
            40,
            "Syntax error",
        ),
        ("object.a == 1 &&\n  object.b == )", 2, 15, "Syntax error"),
        ("'é' + )", 1, 7, "Syntax error"),
        // Macro errors, at the offending argument.
        ("[1].all(1, true)", 1, 9, SIMPLE),
        ("[1].all(x,\n  true) && [2].exists(2, true)", 2, 23, SIMPLE),
        ("'é'.size() == 1 && [1].all(1, true)", 1, 28, SIMPLE),
        ("has(object)", 1, 5, "invalid argument to has() macro"),
        // Call checks, at the function's name.
        ("1 +\n  foo(2)", 2, 3, FOO),
        (
            "object.a ||\n  object.b.startsWith('a', 'b')",
            2,
            12,
            "found no matching overload",
        ),
        ("'é' == 'e' || foo(1)", 1, 15, FOO),
    ] {
        let err = compiled(source).unwrap_err();
        assert!(err.message.starts_with(message), "{source}: {err}");
        assert_eq!(
            (err.line, err.column),
            (Some(line), Some(column)),
            "{source}: {err}"
        );
    }
    let err = compiled("1 + )").unwrap_err().to_string();
    assert!(
        err.starts_with("line 1, column 5: Syntax error: mismatched input ')' expecting "),
        "{err}"
    );
}

#[test]
fn unknown_variables_are_rejected_at_load() {
    refused("objekt.spec == null", "undeclared reference to 'objekt'");
    assert!(compiled("object.spec.containers.all(c, c.name != '')").is_ok());
    assert!(compiled("sets.contains([1], [1])").is_ok());
}

#[test]
fn message_literals_are_rejected_not_evaluated() {
    refused("Foo{a: 1} == null", "only available in the mutations");
}

#[test]
fn policy_variable_references_are_collected() {
    let c = compiled(
        "variables.a + variables['b'] > 0 && [1].all(variables, variables > 0) \
         && variables.?c.hasValue() && variables[?'d'].hasValue()",
    )
    .unwrap();
    assert_eq!(
        c.policy_variables().iter().cloned().collect::<Vec<_>>(),
        vec!["a", "b", "c", "d"]
    );
}

#[test]
fn oversized_expressions_are_rejected() {
    let long = vec!["1"; 3000].join(" + ");
    refused(&long, "bytes long");
    // Parentheses add no level to the tree: forty of them are accepted.
    let parens = format!("{}1{}", "(".repeat(40), ")".repeat(40));
    assert!(compiled(&parens).is_ok());
    let chain = format!("object{}", ".b".repeat(100));
    refused(&chain, "nested too deeply");
    let nested = "[1].all(a, [1].all(b, [1].all(c, [1].all(d, true))))";
    refused(nested, "comprehensions");
}

#[test]
fn runtime_errors_name_types_not_values() {
    let err = eval_with("object.secret + 1 == 2", json!({"secret": "hunter2"})).unwrap_err();
    let text = err.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("string") && text.contains("int"), "{text}");
    let err = eval_with("object.nope == 1", json!({})).unwrap_err();
    assert_eq!(err.to_string(), "no such key: nope");
}

#[test]
fn variables_used_only_as_call_targets_are_recorded() {
    let c = compiled("object.metadata.name.startsWith('a') || request.name.size() > 0").unwrap();
    assert!(c.reads("object") && c.reads("request"));
    let c = compiled("params.data.size() > 0 && sets.contains([1], [1])").unwrap();
    assert!(c.reads("params"));
    assert!(!c.reads("sets"));
}

#[test]
fn library_errors_read_cleanly() {
    for (expr, want) in [
        ("quantity('abc') == quantity('1')", "quantity"),
        ("'a'.find('[') == ''", "find"),
        ("[].min() == 0", "min"),
        ("ip('x').family() == 4", "ip"),
        ("int('x') == 1", "int"),
    ] {
        let err = eval_with(expr, json!({})).unwrap_err().to_string();
        assert!(err.contains(want), "{expr}: {err}");
        assert!(
            !err.contains("Value::") && !err.contains("Some(") && !err.contains('\n'),
            "{expr}: {err}"
        );
    }
}

#[test]
fn a_passed_deadline_stops_an_expression_midway() {
    let list: Vec<i64> = (0..100).collect();
    let object = json!({ "l": list });
    let expensive = "object.l.all(a, object.l.all(b, object.l.all(c, true)))";
    let past = std::time::Instant::now() - std::time::Duration::from_millis(1);
    let stopped = with_deadline(past, || eval_with(expensive, object.clone()));
    assert!(
        matches!(stopped, Err(EvalError::Deadline(_))),
        "{stopped:?}"
    );
    assert!(stopped.unwrap_err().to_string().contains("not a violation"));
    // Without a deadline the same expression runs into its cost limit.
    let limited = eval_with(expensive, object);
    assert!(
        matches!(limited, Err(EvalError::CostLimit(_))),
        "{limited:?}"
    );
}

#[test]
fn a_panic_inside_a_policy_budget_leaves_the_thread_clean() {
    let caught = std::panic::catch_unwind(|| {
        with_policy_budget(|| {
            // Spend almost all of the policy's budget, then fail.
            celrs::budget::charge(POLICY_COST_LIMIT - 1).unwrap();
            panic!("evaluation bug")
        })
    });
    assert!(caught.is_err());
    // The next evaluation on this thread has its whole budget back.
    let list: Vec<i64> = (0..200).collect();
    let ok = with_policy_budget(|| {
        eval_with(
            "object.l.all(a, object.l.all(b, true))",
            json!({ "l": list }),
        )
    });
    assert_eq!(ok, Ok(Value::Bool(true)));
}

/// Cost units `source` uses on `object`, measured without a limit.
fn cost_of(source: &str, object: &serde_json::Value) -> u64 {
    let env = Env::default();
    let compiled = compile(&env, source).unwrap();
    let mut ctx = env.scope();
    ctx.add_variable_from_value("object", json_to_value(object));
    let (result, used) =
        celrs::budget::with_budget(u64::MAX, || Value::resolve(compiled.tree(), &ctx));
    assert_eq!(result, Ok(Value::Bool(true)), "{source}");
    used
}

/// An expression that costs about `units`: a call on a string is charged
/// one unit per ten bytes of it, whatever the call does.
const SIZED: &str = "object.s.size() > 0";

fn sized(units: u64) -> serde_json::Value {
    json!({ "s": "x".repeat(units as usize * 10) })
}

#[test]
fn an_expression_over_its_limit_stops_with_the_cost_error() {
    let over = sized(EXPRESSION_COST_LIMIT);
    assert!(cost_of(SIZED, &over) > EXPRESSION_COST_LIMIT);
    assert_eq!(
        eval_with(SIZED, over),
        Err(EvalError::CostLimit(format!(
            "cost limit exceeded: the expression used more than {EXPRESSION_COST_LIMIT} cost units and was stopped (an evaluation error, not a violation)"
        )))
    );
    // Just under the limit, the same expression completes.
    let under = sized(EXPRESSION_COST_LIMIT - 100);
    assert!(cost_of(SIZED, &under) < EXPRESSION_COST_LIMIT);
    assert_eq!(eval_with(SIZED, under), Ok(Value::Bool(true)));
}

#[test]
fn the_eleventh_expression_of_a_binding_runs_out_of_the_policy_budget() {
    let object = sized(950_000);
    let cost = cost_of(SIZED, &object);
    // Each fits its own limit; ten fit the policy's budget, eleven do not.
    assert!(cost < EXPRESSION_COST_LIMIT, "{cost}");
    assert!(10 * cost <= POLICY_COST_LIMIT && 11 * cost > POLICY_COST_LIMIT);
    let results: Vec<Result<Value, EvalError>> =
        with_policy_budget(|| (0..11).map(|_| eval_with(SIZED, object.clone())).collect());
    for (i, result) in results[..10].iter().enumerate() {
        assert_eq!(result, &Ok(Value::Bool(true)), "expression {i}");
    }
    assert_eq!(
        results[10],
        Err(EvalError::CostLimit(format!(
            "cost limit exceeded: the policy used more than {POLICY_COST_LIMIT} cost units on this request and was stopped (an evaluation error, not a violation)"
        )))
    );
}

#[test]
fn after_a_cost_limit_error_the_next_evaluation_has_its_whole_budget() {
    let near = sized(950_000);
    assert!(matches!(
        eval_with(SIZED, sized(EXPRESSION_COST_LIMIT)),
        Err(EvalError::CostLimit(_))
    ));
    // No budget is left installed on the thread by the failed evaluation.
    assert_eq!(celrs::budget::charge(u64::MAX), Ok(()));
    assert_eq!(eval_with(SIZED, near.clone()), Ok(Value::Bool(true)));

    // The same for a policy's budget: a binding that ran out leaves the next
    // one its whole budget, ten near-limit expressions.
    let first = with_policy_budget(|| {
        (0..11)
            .map(|_| eval_with(SIZED, near.clone()))
            .collect::<Vec<_>>()
    });
    assert!(
        matches!(first[10], Err(EvalError::CostLimit(_))),
        "{first:?}"
    );
    let second = with_policy_budget(|| {
        (0..10)
            .map(|_| eval_with(SIZED, near.clone()))
            .collect::<Vec<_>>()
    });
    assert!(
        second.iter().all(|r| r == &Ok(Value::Bool(true))),
        "{second:?}"
    );
}

#[test]
fn a_deep_expression_stops_with_the_depth_error_not_a_stack_overflow() {
    // Deeper than the interpreter's frame limit; the default compile limits
    // (depth 48) refuse it at load, so they are lifted here.
    let env = Env::default().with_limits(Limits {
        max_source_len: 1 << 20,
        max_nodes: 1 << 20,
        max_depth: 10_000,
        max_comprehension_nesting: 3,
        ..Limits::default()
    });
    let depth = celrs::budget::MAX_EVAL_DEPTH as usize + 50;
    let source = format!("{}1{}", "(1 + ".repeat(depth), ")".repeat(depth));
    let compiled = compile(&env, &source).unwrap();
    // The stack policy evaluations run on (crate::policy::EVALUATION_STACK).
    let result = std::thread::Builder::new()
        .stack_size(crate::policy::EVALUATION_STACK)
        .spawn(move || {
            let ctx = env.scope();
            evaluate(compiled.tree(), &ctx)
        })
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert_eq!(
        result,
        Err(EvalError::Runtime(
            "expression nesting too deep".to_string()
        ))
    );
    // The depth count is restored: a shallow expression runs on this thread.
    assert_eq!(
        eval_with("(1 + (1 + 1)) == 3", json!({})),
        Ok(Value::Bool(true))
    );
}

#[test]
fn message_literals_build_maps_in_mutations_only() {
    let env = Env::default();
    let source = r#"[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/a~b"),
        value: Object.metadata.labels{?team: optional.of("ml"), ?none: optional.none()}}]"#;
    let (compiled, _) = on_compile_stack(|| compile_mutation_written(&env, source))
        .unwrap()
        .unwrap();
    let value = evaluate(compiled.tree(), &env.scope()).unwrap();
    assert_eq!(
        value.json().unwrap(),
        json!([{"op": "add", "path": "/metadata/labels/example.com~1a~0b", "value": {"team": "ml"}}])
    );
    // A validating expression gets a clear load error, not a panic.
    let err = compile(&env, r#"Object{spec: Object.spec{}} == object"#).unwrap_err();
    assert_eq!(
        err.message,
        "message literals (Object{...}) are only available in the mutations of a MutatingAdmissionPolicy"
    );
}

/// The examples of the Kubernetes CEL documentation ("Common Expression
/// Language in Kubernetes") and of cel-go's extension documentation it
/// points to, for optional types, two-variable comprehensions and
/// `cel.bind`.
#[test]
fn kubernetes_cel_documentation_examples() {
    let object = json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "containers": [
            {"name": "a", "image": "nginx"},
            {"name": "b", "image": "busybox"}
        ]}
    });
    for expr in [
        // Optional field selection and indexing.
        "object.?spec.?replicas.orValue(1) == 3",
        "object.?spec.?paused.orValue(false) == false",
        "!object.?spec.?selector.?matchLabels.hasValue()",
        "object.?metadata.?labels.?app.hasValue()",
        "object.metadata.labels[?'app'].orValue('none') == 'web'",
        "object.metadata.labels[?'tier'].orValue('none') == 'none'",
        "optional.of(1).hasValue() && !optional.none().hasValue()",
        "optional.none().or(optional.of(2)).value() == 2",
        "object.?spec.?containers.orValue([]).size() == 2",
        "optional.of(1).optMap(x, x + 1).value() == 2",
        "!optional.none().optMap(x, x + 1).hasValue()",
        "object.?metadata.?labels.optFlatMap(l, l[?'app']).value() == 'web'",
        "[?optional.none(), 1] == [1]",
        "{?'a': optional.of(1), ?'b': optional.none()} == {'a': 1}",
        // Two-variable comprehensions.
        "[1, 2, 3].all(i, j, i < j)",
        "!{'hello': 'world', 'taco': 'taco'}.all(k, v, k != v)",
        "[1, 2, 3].exists(i, v, i == 1 && v == 2)",
        "{'greeting': 'hello', 'farewell': 'goodbye'}.exists(k, v, k == 'farewell' && v == 'goodbye')",
        "[1, 2, 3].existsOne(i, v, i == 1 || v == 2)",
        "![1, 2, 3].existsOne(i, v, i == 1 || v == 3)",
        "[1, 2, 3].transformList(indexVar, valueVar, (indexVar * valueVar) + valueVar) == [1, 4, 9]",
        "[1, 2, 3].transformList(indexVar, valueVar, indexVar % 2 == 0, (indexVar * valueVar) + valueVar) == [1, 9]",
        "{'greeting': 'hello', 'farewell': 'goodbye'}.transformList(k, _, k).size() == 2",
        "{'greeting': 'hello', 'farewell': 'goodbye'}.transformMap(k, v, v + '!') == {'greeting': 'hello!', 'farewell': 'goodbye!'}",
        "{'greeting': 'hello', 'farewell': 'goodbye'}.transformMap(k, v, k != 'greeting', v + '!') == {'farewell': 'goodbye!'}",
        "{'greeting': 'hello'}.transformMapEntry(keyVar, valueVar, {valueVar: keyVar}) == {'hello': 'greeting'}",
        "[1, 2, 3].transformMapEntry(i, v, i > 0, {string(v): i}) == {'2': 1, '3': 2}",
        "object.spec.containers.all(i, c, c.name == ['a', 'b'][i])",
        "object.spec.containers.transformMap(i, c, c.image) == {0: 'nginx', 1: 'busybox'}",
        // cel.bind.
        "cel.bind(a, 'hello', cel.bind(b, 'world', a + b + b + a)) == 'helloworldworldhello'",
        "cel.bind(valid_values, ['nginx', 'busybox'], object.spec.containers.all(c, c.image in valid_values))",
        "cel.bind(x, object.spec.replicas, x * x) == 9",
    ] {
        assert_eq!(eval_with(expr, object.clone()), Ok(Value::Bool(true)), "{expr}");
    }
}

#[test]
fn two_variable_comprehension_errors_are_kubernetes_errors() {
    refused("[1, 2].all(i, i, i > 0)", "duplicate variable name: i");
    let err = eval_with(
        "{'a': 1, 'b': 1}.transformMapEntry(k, v, {'x': v}) == {}",
        json!({}),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("insert failed: key x already exists"),
        "{err}"
    );
    // A selection on a value that is not a map stays an error, as in cel-go.
    assert!(eval_with("object.spec.?x.hasValue()", json!({"spec": "text"})).is_err());
}

#[test]
fn comprehension_macros_are_charged_per_iteration() {
    let env = Env::default();
    let compiled = compile(&env, "object.items.transformList(i, a, object.items.transformList(j, b, i * j).size()).size() > 0",
    )
    .unwrap();
    let mut ctx = env.scope();
    let items: Vec<i64> = (0..2000).collect();
    ctx.add_variable_from_value("object", json_to_value(&json!({"items": items})));
    // Within a policy's remainder of 50,000 units (as a request's last
    // expression gets), so that a debug build stops as soon: uncharged
    // iterations would run all 4M.
    let (result, _) = celrs::budget::with_budget(50_000, || evaluate(compiled.tree(), &ctx));
    match result {
        Err(EvalError::CostLimit(_)) => {}
        other => panic!("a 4M-iteration comprehension must hit the cost limit: {other:?}"),
    }
}

#[test]
fn cel_bind_does_not_count_as_a_nested_comprehension() {
    let source = "cel.bind(a, 1, cel.bind(b, 2, cel.bind(c, 3, \
                  [[[1]]].all(x, x.all(y, y.all(z, z + a + b + c == 7))))))";
    assert_eq!(eval_with(source, json!({})), Ok(Value::Bool(true)));
}

#[test]
fn unknown_functions_and_wrong_argument_counts_are_load_errors() {
    for (source, message, column) in [
        ("foo(1)", "undeclared reference to 'foo': no such function", 1),
        ("object.metadata.name.strtsWith('a')", "undeclared reference to 'strtsWith'", 22),
        ("sets.containz([1], [1])", "undeclared reference to 'containz'", 6),
        (
            "object.metadata.name.startsWith('a', 'b')",
            "found no matching overload for 'startsWith': <target>.startsWith(..) takes 1 argument(s), not 2",
            22,
        ),
        (
            "object.spec.containers.all(c)",
            "found no matching overload for 'all': <target>.all(..) takes 2 or 3 argument(s), not 1",
            24,
        ),
        ("quantity('1', '2')", "'quantity': quantity(..) takes 1 argument(s), not 2", 1),
        ("sets.contains([1])", "'sets.contains': sets.contains(..) takes 2 argument(s), not 1", 6),
    ] {
        let err = refused(source, message);
        assert_eq!((err.line, err.column), (Some(1), Some(column)), "{source}: {err}");
    }
    // Functions that exist, with counts one of their overloads takes.
    for source in [
        "'a,b'.split(',', 1).size() == 1",
        "'abc'.indexOf('b', 1) == 1",
        "[1].indexOf(1) == 0",
        "['a'].join() == 'a'",
        "'a'.matches('a') && matches('a', 'a')",
        "dyn(1) == 1",
        "optional.none().orValue(1) == 1",
        "semver('1.2.3', true).major() == 1",
    ] {
        assert_eq!(
            eval_with(source, json!({})),
            Ok(Value::Bool(true)),
            "{source}"
        );
    }
}

#[test]
fn find_and_find_all_keep_kubernetes_semantics_with_compiled_patterns() {
    // The examples of the Kubernetes CEL documentation's regex library.
    for expr in [
        "'abc 123'.find('[0-9]+') == '123'",
        "'1, 2, 3, 4'.findAll('[0-9]+').map(x, int(x)).sum() < 100",
        "'abc'.find('[0-9]+') == ''",
        "'a1b2c3'.findAll('[0-9]', 2) == ['1', '2']",
        "'a1b2c3'.findAll('[0-9]', -1) == ['1', '2', '3']",
        "'a1b2c3'.findAll('[0-9]', 0) == []",
    ] {
        // Twice: the second run takes the compiled pattern.
        for _ in 0..2 {
            assert_eq!(eval_with(expr, json!({})), Ok(Value::Bool(true)), "{expr}");
        }
    }
    // More distinct patterns than a thread keeps compiled: answers do not
    // depend on the cache.
    for i in 0..300 {
        let expr = format!("'x{i}y'.find('x{i}') == 'x{i}' && 'x{i}'.findAll('y').size() == 0");
        assert_eq!(eval_with(&expr, json!({})), Ok(Value::Bool(true)), "{expr}");
    }
    let err = eval_with("'a'.find('(a')", json!({})).unwrap_err();
    assert!(err.to_string().contains("find: invalid regex"), "{err}");
    let err = eval_with("'a'.findAll('(a', 1)", json!({})).unwrap_err();
    assert!(err.to_string().contains("findAll: invalid regex"), "{err}");
}

/// The examples of the Kubernetes CEL documentation's list, regex, URL and
/// quantity libraries, and of its validation rules written for `object`.
#[test]
fn kubernetes_cel_library_documentation_examples() {
    let object = json!({
        "names": ["alpha", "should-be-first", "zeta"],
        "items": [{"weight": 0.25}, {"weight": 0.75}],
        "lowPriorities": [{"priority": 1}, {"priority": 2}],
        "highPriorities": [{"priority": 5}, {"priority": 9}],
        "spec": {"minReplicas": 1, "replicas": 3, "maxReplicas": 5,
                 "stateCounts": {"Available": 2},
                 "envars": [{"name": "MY_ENV", "value": "abc"}, {"name": "OTHER", "value": "1-2"}],
                 "health": "ok: all good",
                 "widgets": [{"key": "x", "foo": 3}],
                 "details": {"alpha": "a", "beta": "b"}}
    });
    for expr in [
        "object.names.isSorted()",
        "object.items.map(x, x.weight).sum() == 1.0",
        "object.lowPriorities.map(x, x.priority).max() < object.highPriorities.map(x, x.priority).min()",
        "object.names.indexOf('should-be-first') == 1",
        "'abc 123'.find('[0-9]*') == ''",
        "'abc 123'.find('[0-9]+') == '123'",
        "url('https://example.com:80/').getHost() == 'example.com:80'",
        "url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'",
        "quantity('500000G').isInteger()",
        "quantity('50k').asInteger() == 50000",
        "quantity('9999999999999999999999999999999999999G').asApproximateFloat() > 1.0e45",
        "quantity('50k').sub(20000) == quantity('30k')",
        "quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')",
        "quantity('200M').compareTo(quantity('0.2G')) == 0",
        "quantity('150Mi').isGreaterThan(quantity('100Mi'))",
        "quantity('50M').isLessThan(quantity('100M'))",
        "object.spec.minReplicas <= object.spec.replicas && object.spec.replicas <= object.spec.maxReplicas",
        "'Available' in object.spec.stateCounts",
        "object.spec.envars.filter(e, e.name == 'MY_ENV').all(e, e.value.matches('^[a-zA-Z]*$'))",
        "object.spec.health.startsWith('ok')",
        "object.spec.widgets.exists(w, w.key == 'x' && w.foo < 10)",
        "object.spec.details.all(key, key.matches('^[a-zA-Z]*$'))",
        "object.spec.details.all(key, object.spec.details[key].matches('^[a-zA-Z]*$'))",
    ] {
        assert_eq!(eval_with(expr, object.clone()), Ok(Value::Bool(true)), "{expr}");
    }
}

#[test]
fn qualified_type_names_denote_types() {
    let denoted = "type(ip('1.2.3.4')) == net.IP && type(cidr('10.0.0.0/8')) == net.CIDR \
         && type(duration('1s')) == google.protobuf.Duration \
         && type(timestamp('2009-02-13T23:31:30Z')) == google.protobuf.Timestamp";
    assert_eq!(eval_with(denoted, json!({})).unwrap(), Value::Bool(true));
    refused("net.IPv4 == int", "undeclared reference to 'net'");
    // A comprehension's variable is a variable, not a package.
    assert!(eval_with("[{'IP': 1}].all(net, net.IP == 1)", json!({})).is_ok());
}

/// kube-apiserver's type checker refuses a list literal whose elements
/// have different types, or a map literal whose keys or values do, at the
/// first that differs.
#[test]
fn heterogeneous_literals_are_refused_at_load() {
    for (source, line, column, message) in [
        ("[1, 'a']", 1, 5, "expected type 'int' but found 'string'"),
        (
            "object.x in [1,\n  2, 3.5]",
            2,
            6,
            "expected type 'int' but found 'double'",
        ),
        (
            "[[1], ['a']] == []",
            1,
            7,
            "expected type 'list(int)' but found 'list(string)'",
        ),
        (
            "[{'a': 1}, {'a': 'b'}] != []",
            1,
            12,
            "expected type 'map(string, int)' but found 'map(string, string)'",
        ),
        // A call is where its `(` is, as in cel-go.
        (
            "['x', size(object.a)]",
            1,
            11,
            "expected type 'string' but found 'int'",
        ),
        // `dyn()` of the list does not change its elements' types.
        (
            "type(dyn([1, 'one']))",
            1,
            14,
            "expected type 'int' but found 'string'",
        ),
        // Columns count characters.
        (
            "[object.a == 1, 'é'] == []",
            1,
            17,
            "expected type 'bool' but found 'string'",
        ),
        (
            "[object.a, 'é'] == [] && [1, 2u] == []",
            1,
            30,
            "expected type 'int' but found 'uint'",
        ),
        // Map literals: their values, then their keys.
        (
            "{'sizes': [], 'field': ''} != {}",
            1,
            24,
            "expected type 'list(dyn)' but found 'string'",
        ),
        (
            "{'a': 1, 2: 1} != {}",
            1,
            10,
            "expected type 'string' but found 'int'",
        ),
    ] {
        let err = refused(source, message);
        assert_eq!(
            (err.line, err.column),
            (Some(line), Some(column)),
            "{source}: {err}"
        );
    }
    // An element whose type only a checker would know (`dyn` here) joins
    // with any, as after it in cel-go.
    for source in [
        "[1, object.a, 'a'] == []",
        "[object.a, 1] == []",
        "[1, null] == [] && [dyn(1), 'a'] == []",
        "[[], [1]] == [] && [{}, {'a': 1}] == [] && [[1], [object.a]] == []",
        "[1, 2].map(x, x * 2) == [2, 4] && {'a': [1], 'b': []} != {}",
        "{'sizes': [], 'field': dyn('')} != {} && {'a': object.a, 'b': 1} != {}",
    ] {
        assert!(
            compiled(source).is_ok(),
            "{source}: {:?}",
            compiled(source).err()
        );
    }
}

/// A conversion that fails names the value's type, never its contents
/// (which may be a Secret's), and so says the same on every run: a map's
/// keys were written in their hash order.
#[test]
fn a_failed_conversion_names_the_type_not_the_value() {
    let object =
        json!({"data": {"password": "hunter2", "user": "admin"}, "list": ["hunter2"], "n": null});
    for (source, want) in [
        (
            "string(object.data)",
            "string: cannot convert map to string",
        ),
        (
            "string(object.list)",
            "string: cannot convert list to string",
        ),
        ("int(object.data)", "int: cannot convert map to int"),
        ("uint(object.list)", "uint: cannot convert list to uint"),
        ("double(object.n)", "double: cannot convert null to double"),
        ("bool(object.data)", "bool: cannot convert map to bool"),
        ("bytes(object.list)", "bytes: cannot convert list to bytes"),
        (
            "duration(object.data)",
            "duration: cannot convert map to duration",
        ),
        (
            "timestamp(object.list)",
            "timestamp: cannot convert list to timestamp",
        ),
    ] {
        let got = eval_with(source, object.clone());
        assert_eq!(got, Err(EvalError::Runtime(want.to_string())), "{source}");
    }
}

/// A function given an argument of a type it does not take names the
/// argument's type, not its value (a Secret's data would otherwise reach
/// the denial, its keys in hash order), and the type it takes by its CEL
/// name.
#[test]
fn an_argument_of_an_unexpected_type_is_named_by_its_type() {
    let object = json!({"data": {"password": "hunter2"}, "list": ["hunter2"], "name": "admin"});
    for (source, got) in [
        ("object.name.startsWith(object.data)", "map"),
        ("object.name.matches(object.list)", "list"),
    ] {
        let want = format!("unexpected type: got {got}, want string");
        let got = eval_with(source, object.clone());
        assert_eq!(got, Err(EvalError::Runtime(want)), "{source}");
    }
}

/// `size()` of a value that has none names its type, as a conversion
/// does, not the value in the interpreter's debug form.
#[test]
fn the_size_of_a_value_without_one_names_its_type() {
    let object = json!({"n": 5, "f": 1.5, "b": true, "z": null});
    for (source, of) in [
        ("size(object.n)", "int"),
        ("object.f.size()", "double"),
        ("size(object.b)", "bool"),
        ("size(object.z)", "null"),
    ] {
        let want = format!("size: cannot determine the size of {of}");
        let got = eval_with(source, object.clone());
        assert_eq!(got, Err(EvalError::Runtime(want)), "{source}");
    }
}

/// A kept value's cost charged straight is what a budget of its own,
/// drawn from the enclosing one, made of it: the same outcome, message
/// and units used, whatever the enclosing budget has left.
#[test]
fn a_replayed_cost_is_charged_as_a_budget_of_its_own_would_be() {
    use celrs::budget::{charge, with_budget};
    let limit = EXPRESSION_COST_LIMIT;
    for cost in [0, 1, 7, limit - 1, limit] {
        for outer in [0, 1, 6, 7, 8, limit - 1, limit, limit + 5, u64::MAX] {
            let nested = with_budget(outer, || {
                let (charged, used) = with_budget(limit, || charge(cost));
                charged.map_err(|e| evaluate::eval_error(e, used).to_string())
            });
            let straight = with_budget(outer, || replay(cost).map_err(|e| e.to_string()));
            assert_eq!(straight, nested, "cost {cost} within {outer}");
        }
    }
    assert!(replay(limit).is_ok(), "no budget installed");
}
