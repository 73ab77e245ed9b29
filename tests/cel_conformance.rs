//! The CEL specification's conformance suite (google/cel-spec
//! `tests/simple/testdata`), run through the compile and evaluate path
//! policies use: each case evaluated by the interpreter and by its
//! compiled form (`cel::Program`), which must answer alike.
//!
//! The cases are public data and are not part of the project: they are read
//! from `../shared/cel-spec/simple/*.json` (see its `SOURCE.md` for the
//! commit and the shape). Without that directory the test says it was
//! skipped.
//!
//! A case that cannot apply to Kubernetes' CEL is excluded by one rule of
//! [`exclusion`], with its reason; every other case must give the answer the
//! suite expects. The runner prints passed / failed / excluded per file.
//! `CEL_CONFORMANCE_SHOW=1` prints every failure in full,
//! `CEL_CONFORMANCE_SHOW=excluded` every excluded case.
use base64::Engine as _;
use gpu_admission::cel::{
    compile_here, evaluate, on_compile_stack, Context, Env, Extension, Extensions, Value,
};
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::shared_data;

/// Cases whose expected value the JSON conversion got wrong, with the
/// reason; the runner expects the value the textproto means. The textproto
/// writes these bytes as `" \? \" \' ` "`, and protobuf's text format reads
/// `\?` as `?`; the JSON kept the backslash.
const ERRATA: &[&str] = &[
    "parse/bytes_literals/triple_single_quoted_unescaped_punctuation",
    "parse/bytes_literals/triple_double_quoted_unescaped_punctuation",
];

/// The value the textproto means for an [`ERRATA`] case: bytes without the
/// backslash before `?`.
fn corrected(value: Value) -> Value {
    match value {
        Value::Bytes(b) => {
            let mut out = Vec::with_capacity(b.len());
            for (i, byte) in b.iter().enumerate() {
                if *byte == b'\\' && b.get(i + 1) == Some(&b'?') {
                    continue;
                }
                out.push(*byte);
            }
            Value::Bytes(Arc::new(out))
        }
        other => other,
    }
}

/// Cases known to differ from the specification, each with why it stays.
/// Kept empty unless a divergence is deliberate; docs/policies.md lists the
/// same names.
const KNOWN_DIVERGENCES: &[(&str, &str)] = &[];

/// The applicable cases that passed at the last measurement: an exclusion
/// rule that grows, or a case that stops applying, shows here.
const PASSING: usize = 1343;

#[test]
fn the_cel_spec_conformance_suite_passes() {
    let Some(dir) = shared_data::shared_data("cel-spec/simple") else {
        return;
    };
    let report = on_compile_stack(|| run_suite(&dir)).expect("the suite ran");
    println!("{}", report.table());
    let show = std::env::var("CEL_CONFORMANCE_SHOW").unwrap_or_default();
    if show == "excluded" {
        for (case, why) in &report.excluded {
            println!("excluded {case}: {why}");
        }
    }
    let unexpected: Vec<&(String, String)> = report
        .failed
        .iter()
        .filter(|(case, _)| !KNOWN_DIVERGENCES.iter().any(|(name, _)| name == case))
        .collect();
    if show == "1" {
        for (case, why) in &unexpected {
            println!("FAILED {case}: {why}");
        }
    }
    let fixed: Vec<&str> = KNOWN_DIVERGENCES
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !report.failed.iter().any(|(case, _)| case == name))
        .collect();
    let passed: usize = report.files.values().map(|counts| counts[0]).sum();
    assert!(
        passed >= PASSING,
        "{passed} cases pass, fewer than the {PASSING} measured (docs/policies.md)"
    );
    assert!(
        fixed.is_empty(),
        "listed as divergences but passing now: {fixed:?}"
    );
    assert!(
        unexpected.is_empty(),
        "{} conformance cases fail:\n{}",
        unexpected.len(),
        unexpected
            .iter()
            .take(60)
            .map(|(case, why)| format!("  {case}: {why}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[derive(Default)]
struct Report {
    /// Per file: passed, failed, excluded.
    files: BTreeMap<String, [usize; 3]>,
    failed: Vec<(String, String)>,
    excluded: Vec<(String, String)>,
}

impl Report {
    fn table(&self) -> String {
        let mut out = format!(
            "{:<18} {:>7} {:>7} {:>9}\n",
            "file", "passed", "failed", "excluded"
        );
        let mut total = [0; 3];
        for (file, counts) in &self.files {
            out.push_str(&format!(
                "{file:<18} {:>7} {:>7} {:>9}\n",
                counts[0], counts[1], counts[2]
            ));
            for i in 0..3 {
                total[i] += counts[i];
            }
        }
        let applicable = total[0] + total[1];
        out.push_str(&format!(
            "{:<18} {:>7} {:>7} {:>9}   ({:.1} % of {applicable} applicable cases pass)",
            "total",
            total[0],
            total[1],
            total[2],
            100.0 * total[0] as f64 / applicable.max(1) as f64
        ));
        out
    }
}

fn run_suite(dir: &Path) -> Report {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the suite's directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut report = Report::default();
    let mut envs: HashMap<Vec<String>, Env> = HashMap::new();
    for path in files {
        let file: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file_name = file["name"].as_str().unwrap_or_default().to_string();
        let counts = report.files.entry(file_name.clone()).or_default();
        for section in file["section"].as_array().into_iter().flatten() {
            let section_name = section["name"].as_str().unwrap_or_default();
            for case in section["test"].as_array().into_iter().flatten() {
                let name = format!(
                    "{file_name}/{section_name}/{}",
                    case["name"].as_str().unwrap_or_default()
                );
                if let Some(why) = exclusion(&file_name, section_name, case) {
                    counts[2] += 1;
                    report.excluded.push((name, why.to_string()));
                    continue;
                }
                let erratum = ERRATA.contains(&name.as_str());
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_case(&mut envs, case, erratum)
                }))
                .unwrap_or_else(|_| Err(Outcome::Failed("the interpreter panicked".into())));
                match run {
                    Ok(()) => counts[0] += 1,
                    Err(Outcome::Excluded(why)) => {
                        counts[2] += 1;
                        report.excluded.push((name, why));
                    }
                    Err(Outcome::Failed(why)) => {
                        counts[1] += 1;
                        report.failed.push((name, why));
                    }
                }
            }
        }
    }
    report
}

enum Outcome {
    Excluded(String),
    Failed(String),
}

/// Libraries of cel-go the Kubernetes base environment does not declare
/// (staging/src/k8s.io/apiserver/pkg/cel/environment/base.go).
const UNDECLARED_LIBRARIES: &[(&str, &str)] = &[
    (
        "block_ext",
        "cel.block is an optimiser's form; Kubernetes does not declare it",
    ),
    (
        "bindings_ext",
        "cel.bind (ext.Bindings) is not in Kubernetes' base environment",
    ),
    (
        "encoders_ext",
        "base64 (ext.Encoders) is not in Kubernetes' base environment",
    ),
    (
        "math_ext",
        "math (ext.Math) is not in Kubernetes' base environment",
    ),
    (
        "network_ext",
        "cel-go's network extension is not Kubernetes' ip/cidr library (its own tests cover that)",
    ),
];

/// Files whose cases all need protobuf messages, which Kubernetes' CEL does
/// not have: its objects are JSON.
const PROTO_FILES: &[&str] = &["proto2", "proto2_ext", "proto3", "enums", "wrappers"];

/// Why a case cannot apply to Kubernetes' CEL, if it cannot.
fn exclusion(file: &str, _section: &str, case: &Json) -> Option<String> {
    let expr = case["expr"].as_str().unwrap_or_default();
    if let Some((_, why)) = UNDECLARED_LIBRARIES.iter().find(|(f, _)| *f == file) {
        // The types of `ip()` and `cidr()` values are the same in both
        // libraries, and kube-apiserver's declares their names.
        if !(file == "network_ext" && ["net.IP", "net.CIDR"].iter().any(|t| expr.contains(t))) {
            return Some(why.to_string());
        }
    }
    if PROTO_FILES.contains(&file) {
        return Some("needs protobuf messages".to_string());
    }
    if file == "unknowns" {
        return Some("partial evaluation with unknowns: Kubernetes evaluates whole objects".into());
    }
    if case.get("check_only").and_then(Json::as_bool) == Some(true) {
        return Some("a type-checker case with nothing to evaluate".to_string());
    }
    if case.get("container").is_some() {
        return Some(
            "evaluated in a container (a protobuf package); Kubernetes sets none".to_string(),
        );
    }
    if let Some(decls) = case.get("type_env").and_then(Json::as_array) {
        for decl in decls {
            if decl.get("function").is_some() {
                return Some("declares its own functions".to_string());
            }
            if let Some(ty) = decl.pointer("/ident/type") {
                if mentions_message(ty) {
                    return Some("needs protobuf messages (a variable of a message type)".into());
                }
            }
        }
    }
    if let Some(decls) = case.get("type_env").and_then(Json::as_array) {
        if decls
            .iter()
            .any(|d| d["name"].as_str().is_some_and(|n| n.contains('.')))
        {
            return Some(
                "declares a qualified variable name (`a.b`): protobuf package resolution; Kubernetes declares `object`, `request`..."
                    .into(),
            );
        }
    }
    if REFUSED_AT_CREATION.contains(&case["name"].as_str().unwrap_or_default())
        || section_refused_at_creation(_section)
    {
        return Some(
            "refers to a variable or function no environment declares: kube-apiserver refuses it at creation"
                .into(),
        );
    }
    let name = format!(
        "{file}/{_section}/{}",
        case["name"].as_str().unwrap_or_default()
    );
    if HETEROGENEOUS_LISTS.contains(&name.as_str()) {
        return Some(
            "a list literal whose elements differ in type: kube-apiserver's type checker refuses it at creation (so does `gpu-admission` at load)"
                .into(),
        );
    }
    if HETEROGENEOUS_MAPS.contains(&name.as_str()) {
        return Some(
            "a map literal whose keys or values differ in type: kube-apiserver's type checker refuses it at creation (so does `gpu-admission` at load)"
                .into(),
        );
    }
    if uses_message_names(expr) {
        return Some("needs protobuf messages (message types named in the expression)".into());
    }
    None
}

/// Cases that evaluate an undeclared name without the type checker
/// (`disable_check`): kube-apiserver checks every expression when a policy
/// is created and refuses them (so does `gpu-admission` at load).
const REFUSED_AT_CREATION: &[&str] = &["unbound_is_runtime_error"];

/// Cases with a list literal whose elements differ in type (`[1, 'one']`),
/// which cel-go evaluates unchecked; kube-apiserver checks with
/// homogeneous aggregate literals and refuses them. Those expecting an
/// error are here too: refused at load, they do not measure evaluation.
const HETEROGENEOUS_LISTS: &[&str] = &[
    "comparisons/eq_literal/eq_list_mixed_type_numbers",
    "comparisons/eq_literal/not_eq_list_mixed_type_numbers",
    "comparisons/eq_literal/not_eq_list_false_vs_types",
    "comparisons/in_list_literal/elem_in_mixed_type_list",
    "comparisons/in_list_literal/elem_in_mixed_type_list_cross_type",
    "conversions/dyn/dyn_heterogeneous_list",
    "macros/exists/list_elem_type_shortcircuit",
    "macros/exists/list_elem_type_exhaustive",
    "macros/all/list_elem_type_shortcircuit",
    "macros/all/list_elem_type_exhaustive",
    "macros2/exists/list_elem_type_shortcircuit",
    "macros2/exists/list_elem_type_exhaustive",
    "macros2/all/list_elem_type_shortcircuit",
    "macros2/all/list_elem_type_exhaustive",
    "macros2/all/list_elem_type_error_exhaustive",
    "plumbing/check_inputs/skip_check",
    "string_ext/format/multiple substitutions",
    "string_ext/format/list support for string",
    "string_ext/format/dyntype support for lists",
    "string_ext/format/multiple substitutions in a string variable",
];

/// Cases with a map literal whose keys or values differ in type
/// (`{'k': 1, 'l': 'v'}`, `{1: 'a', 2u: 'b'}`), refused by kube-apiserver
/// as the lists above are.
const HETEROGENEOUS_MAPS: &[&str] = &[
    "comparisons/eq_literal/eq_map_mixed_type_numbers",
    "comparisons/eq_literal/not_eq_map_false_vs_types",
    "comparisons/eq_literal/eq_map_value_mixed_types",
    "comparisons/in_map_literal/key_in_mixed_key_type_map",
    "comparisons/in_map_literal/key_in_mixed_key_type_map_cross_type",
    "fields/map_fields/map_key_int64",
    "fields/map_fields/map_key_uint64",
    "fields/map_fields/map_key_mixed_type",
    "fields/map_fields/map_key_mixed_numbers_double_key",
    "fields/map_fields/map_key_mixed_numbers_uint_key",
    "fields/map_fields/map_key_mixed_numbers_int_key",
    "fields/map_fields/map_value_mix_type",
    "fields/quoted_map_fields/field_access_dash",
    "fields/quoted_map_fields/has_field_dash",
    "fields/in/mixed_numbers_and_keys_present",
    "fields/in/mixed_numbers_and_keys_absent",
    "macros/exists/map_key_type_shortcircuit",
    "macros/exists/map_key_type_exhaustive",
    "macros2/exists/map_key_type_shortcircuit",
    "macros2/exists/map_key_type_exhaustive",
    "optionals/optionals/map_key_mixed_type_optindex_value",
    "optionals/optionals/map_key_mixed_numbers_double_key_optindex_value",
    "optionals/optionals/map_key_mixed_numbers_uint_key_optindex_value",
    "optionals/optionals/map_key_mixed_numbers_int_key_optindex_value",
    "string_ext/format/map support (all key types)",
    "string_ext/format/dyntype support for maps",
];

/// Sections whose cases call functions no library declares (`a.as()`,
/// `a.while()`: reserved words as method names).
fn section_refused_at_creation(section: &str) -> bool {
    section == "receiver_function_names"
}

/// Whether a `cel.expr.Type` names a protobuf message other than the
/// well-known ones CEL maps to its own values.
fn mentions_message(ty: &Json) -> bool {
    match ty {
        Json::Object(fields) => fields.iter().any(|(k, v)| {
            (k == "message_type"
                && !matches!(
                    v.as_str(),
                    Some("google.protobuf.Duration" | "google.protobuf.Timestamp")
                ))
                || mentions_message(v)
        }),
        Json::Array(items) => items.iter().any(mentions_message),
        _ => false,
    }
}

/// Whether an expression names protobuf message types (`google.protobuf.*`,
/// `cel.expr.conformance.*`), which Kubernetes' CEL does not know. The
/// names of the timestamp and duration types are no message but as
/// message literals (`google.protobuf.Duration{...}`).
fn uses_message_names(expr: &str) -> bool {
    let mut rest = expr.to_string();
    for t in ["google.protobuf.Duration", "google.protobuf.Timestamp"] {
        let denotes = |r: &str| {
            r.match_indices(t)
                .all(|(i, _)| !r[i + t.len()..].starts_with('{'))
        };
        if denotes(&rest) {
            rest = rest.replace(t, "");
        }
    }
    rest.contains("google.protobuf.")
        || expr.contains("cel.expr.conformance")
        || expr.contains("TestAllTypes")
        || expr.contains("NestedTestAllTypes")
}

/// An environment declaring `names` as variables, as policies declare
/// `object`, `request`...
struct Declared(Vec<&'static str>);

impl Extension for Declared {
    fn variable_names(&self) -> &[&'static str] {
        &self.0
    }
}

fn run_case(
    envs: &mut HashMap<Vec<String>, Env>,
    case: &Json,
    erratum: bool,
) -> Result<(), Outcome> {
    let expr = case["expr"].as_str().unwrap_or_default();
    let mut bindings: Vec<(String, Value)> = Vec::new();
    if let Some(b) = case.get("bindings").and_then(Json::as_object) {
        for (name, v) in b {
            let value = v
                .get("value")
                .ok_or_else(|| Outcome::Excluded("a binding that is not a value".to_string()))?;
            bindings.push((name.clone(), expected_value(value)?));
        }
    }
    let mut names: Vec<String> = bindings.iter().map(|(n, _)| n.clone()).collect();
    for decl in case
        .get("type_env")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(n) = decl["name"].as_str() {
            if decl.get("ident").is_some() && !names.iter().any(|m| m == n) {
                names.push(n.to_string());
            }
        }
    }
    names.sort();
    let env = envs.entry(names.clone()).or_insert_with(|| {
        let leaked: Vec<&'static str> = names
            .iter()
            .map(|n| &*Box::leak(n.clone().into_boxed_str()))
            .collect();
        Env::new(Extensions::new().with(Declared(leaked)))
    });
    let want = if let Some(v) = case.get("value") {
        Want::Value(expected_value(v)?)
    } else if let Some(v) = case.pointer("/typed_result/result") {
        Want::Value(expected_value(v)?)
    } else if case.get("eval_error").is_some() {
        Want::Error
    } else if case.get("typed_result").is_some() {
        return Err(Outcome::Excluded(
            "a type-checker case with nothing to evaluate".into(),
        ));
    } else {
        Want::Value(Value::Bool(true))
    };
    let want = match want {
        Want::Value(v) if erratum => Want::Value(corrected(v)),
        other => other,
    };
    let compiled = match compile_here(env, expr) {
        Ok(c) => c,
        Err(e) => {
            return match want {
                Want::Error => Ok(()),
                Want::Value(_) => Err(Outcome::Failed(format!("`{expr}` did not compile: {e}"))),
            }
        }
    };
    let mut scope: Context = env.scope();
    for (name, value) in bindings {
        scope.add_variable_from_value(name, value);
    }
    let got = evaluate(compiled.tree(), &scope);
    // The expression's compiled form, which the policy engine evaluates,
    // answers as the interpreter does: the same value or the same error.
    if let Some(program) = env.program(compiled.tree()) {
        let by_program = program.evaluate(&scope, &gpu_admission::cel::Roots::SCOPE);
        let alike = match (&got, &by_program) {
            (Ok(a), Ok(b)) => a == b || same(a, b),
            (Err(a), Err(b)) => a == b,
            _ => false,
        };
        if !alike {
            return Err(Outcome::Failed(format!(
                "`{expr}`: the interpreter gives {got:?}, the program {by_program:?}"
            )));
        }
    }
    match (want, got) {
        (Want::Error, Err(_)) => Ok(()),
        (Want::Error, Ok(v)) => Err(Outcome::Failed(format!(
            "`{expr}`: want an error, got {v:?}"
        ))),
        (Want::Value(w), Ok(v)) if same(&w, &v) => Ok(()),
        (Want::Value(w), Ok(v)) => Err(Outcome::Failed(format!("`{expr}`: want {w:?}, got {v:?}"))),
        (Want::Value(w), Err(e)) => Err(Outcome::Failed(format!(
            "`{expr}`: want {w:?}, got error {e}"
        ))),
    }
}

enum Want {
    Value(Value),
    Error,
}

/// A `cel.expr.Value` of the suite as the interpreter's value.
fn expected_value(v: &Json) -> Result<Value, Outcome> {
    let (kind, inner) = v
        .as_object()
        .and_then(|o| o.iter().next())
        .ok_or_else(|| Outcome::Failed(format!("unreadable value {v}")))?;
    Ok(match kind.as_str() {
        "null" => Value::Null,
        "bool" => Value::Bool(inner.as_bool().unwrap()),
        "int64" => Value::Int(inner.as_i64().unwrap()),
        "uint64" => Value::UInt(inner.as_u64().unwrap()),
        "double" => Value::Float(match inner {
            Json::String(s) if s == "NaN" => f64::NAN,
            Json::String(s) if s == "Infinity" => f64::INFINITY,
            Json::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
            n => n.as_f64().unwrap(),
        }),
        "string" => Value::String(Arc::new(inner.as_str().unwrap().to_string())),
        "bytes" => Value::Bytes(Arc::new(
            base64::engine::general_purpose::STANDARD
                .decode(inner.as_str().unwrap())
                .unwrap(),
        )),
        "list" => Value::List(Arc::new(
            inner
                .as_array()
                .unwrap()
                .iter()
                .map(expected_value)
                .collect::<Result<_, _>>()?,
        )),
        "map" => {
            let mut map = HashMap::new();
            for entry in inner.as_array().unwrap() {
                let key = match expected_value(&entry["key"])? {
                    Value::Int(i) => cel::objects::Key::Int(i),
                    Value::UInt(u) => cel::objects::Key::Uint(u),
                    Value::Bool(b) => cel::objects::Key::Bool(b),
                    Value::String(s) => cel::objects::Key::String(s),
                    other => return Err(Outcome::Failed(format!("map key {other:?}"))),
                };
                map.insert(key, expected_value(&entry["value"])?);
            }
            Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
        "type" => cel::objects::TypeValue::named(inner.as_str().unwrap().to_string()).into(),
        "enum" => return Err(Outcome::Excluded("needs protobuf enums".to_string())),
        "object" => well_known(inner)?,
        other => return Err(Outcome::Failed(format!("unknown value kind {other}"))),
    })
}

/// A `google.protobuf.Any` of a well-known type CEL maps to its own values.
fn well_known(any: &Json) -> Result<Value, Outcome> {
    let url = any["@type"].as_str().unwrap_or_default();
    let ty = url.rsplit('/').next().unwrap_or_default();
    let value = &any["value"];
    Ok(match ty {
        "google.protobuf.Duration" => Value::Duration(parse_duration(value.as_str().unwrap())),
        "google.protobuf.Timestamp" => {
            Value::Timestamp(chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap()).unwrap())
        }
        "google.protobuf.Value" | "google.protobuf.Struct" | "google.protobuf.ListValue" => {
            gpu_admission::cel::json_to_value(value)
        }
        _ => return Err(Outcome::Excluded(format!("needs protobuf messages ({ty})"))),
    })
}

/// A duration in protobuf's JSON form (`"123.321456789s"`).
fn parse_duration(text: &str) -> chrono::Duration {
    let secs = text.trim_end_matches('s');
    let (negative, secs) = match secs.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, secs),
    };
    let (whole, frac) = secs.split_once('.').unwrap_or((secs, ""));
    let nanos: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}")[..9].parse().unwrap()
    };
    let d =
        chrono::Duration::seconds(whole.parse().unwrap()) + chrono::Duration::nanoseconds(nanos);
    if negative {
        -d
    } else {
        d
    }
}

/// Whether `got` is the value the suite expects: the same type and value
/// (NaN equals NaN here, as protobuf compares the suite's values).
fn same(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Float(a), Value::Float(b)) => (a.is_nan() && b.is_nan()) || a == b,
        (Value::List(a), Value::List(b)) => {
            a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| same(x, y))
        }
        (Value::Map(a), Value::Map(b)) => {
            a.map.len() == b.map.len()
                && a.map
                    .iter()
                    .all(|(k, v)| b.map.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Int(a), Value::Int(b)) => a == b,
        (Value::UInt(a), Value::UInt(b)) => a == b,
        (Value::String(a), Value::String(b)) => a == b,
        (Value::Bytes(a), Value::Bytes(b)) => a == b,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Null, Value::Null) => true,
        (Value::Duration(a), Value::Duration(b)) => a == b,
        (Value::Timestamp(a), Value::Timestamp(b)) => a == b,
        (Value::Opaque(_), Value::Opaque(_)) => want == got,
        _ => false,
    }
}
