//! `src/policy/schemas.json`, the field tree policy expressions are type
//! checked against, is generated from the OpenAPI schemas k8s-openapi
//! carries for every built-in kind (the `schemars` impls of its sources,
//! themselves generated from Kubernetes' published OpenAPI definitions).
//! This test regenerates it from the k8s-openapi sources cargo unpacked
//! and checks the committed file is the same; with `UPDATE_SCHEMAS=1`
//! (`ci/update-schemas.sh`) it writes the file instead. Skipped when the
//! sources are not on this machine.
use regex::Regex;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const OUTPUT: &str = "src/policy/schemas.json";

/// The unpacked sources of the k8s-openapi version Cargo.lock names.
fn k8s_openapi_sources() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).ok()?;
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"k8s-openapi\""))?
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))?
        .trim_end_matches('"')
        .to_string();
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))?;
    std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(format!("k8s-openapi-{version}")))
        .find(|p| p.is_dir())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A type's short name: `api::core::v1::PodSpec` is `core.v1.PodSpec`.
fn short(path: &str) -> String {
    let path = ["api::", "apimachinery::pkg::apis::", "apimachinery::pkg::"]
        .iter()
        .find_map(|p| path.strip_prefix(p))
        .unwrap_or(path);
    path.replace("::", ".")
}

/// Every schema k8s-openapi declares (by short name), and its resources
/// as `[apiVersion, kind, resource, type]`.
fn read_sources(dir: &Path) -> (BTreeMap<String, Value>, Vec<[String; 4]>) {
    let block = Regex::new(
        r"(?s)\(\{\s*let mut schema_obj = __gen\.subschema_for::<crate::([\w:]+)>\(\);.*?schema_obj\s*\}\)",
    )
    .unwrap();
    let inline = Regex::new(r"\(?__gen\.subschema_for::<crate::([\w:]+)>\(\)\)?([,\n])").unwrap();
    let trailing = Regex::new(r",(\s*[}\]])").unwrap();
    let implementer = Regex::new(r"impl crate::schemars::JsonSchema for (\w+) \{").unwrap();
    let constant = |text: &str, name: &str| {
        let pattern = format!("const {name}: &'static str = \"");
        let start = text.find(&pattern)? + pattern.len();
        Some(text[start..start + text[start..].find('"')?].to_string())
    };
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let (mut schemas, mut resources) = (BTreeMap::new(), Vec::new());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let Some(ty) = implementer.captures(&text).map(|c| c[1].to_string()) else {
            continue;
        };
        let module = file.parent().unwrap().strip_prefix(dir).unwrap();
        let module = module.to_str().unwrap().replace('/', "::");
        let name = short(&format!("{module}::{ty}"));
        let start = text.find("json_schema!(").unwrap() + "json_schema!(".len();
        let end = start + text[start..].find("\n        })\n").unwrap() + 10;
        let body = block.replace_all(&text[start..end], r#"{"$$ref": "$1"}"#);
        let body = inline.replace_all(&body, r#"{"$$ref": "$1"}$2"#);
        let body = trailing.replace_all(&body, "$1");
        let schema: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if let (Some(api), Some(kind), Some(resource)) = (
            constant(&text, "API_VERSION"),
            constant(&text, "KIND"),
            constant(&text, "URL_PATH_SEGMENT"),
        ) {
            resources.push([api, kind, resource, name.clone()]);
        }
        schemas.insert(name, schema);
    }
    resources.sort();
    (schemas, resources)
}

/// A schema in the compact form `src/policy/schemas.json` holds: `"bool"`,
/// `"int"`, `"double"`, `"string"`, `"dyn"` or a type's name; `[T]` a
/// list; `{"*": T}` a map of strings to T; `{field: T...}` an object of
/// those fields and no others. What kube-apiserver leaves open is `dyn`:
/// int-or-string (quantities), formatted strings, objects of unknown
/// fields.
fn compact(schema: &Value, schemas: &BTreeMap<String, Value>, used: &mut Vec<String>) -> Value {
    if let Some(target) = schema["$ref"].as_str() {
        let name = short(target);
        let target = &schemas[&name];
        if target.get("properties").is_none() && target.get("additionalProperties").is_none() {
            // Scalars (Quantity, Time...) are written in place.
            return compact(target, schemas, used);
        }
        used.push(name.clone());
        return Value::String(name);
    }
    if schema["x-kubernetes-int-or-string"] == true
        || schema["x-kubernetes-preserve-unknown-fields"] == true
    {
        return json!("dyn");
    }
    match schema["type"].as_str().unwrap_or_default() {
        "boolean" => json!("bool"),
        "integer" => json!("int"),
        "number" => json!("double"),
        "string" if schema.get("format").is_none() => json!("string"),
        "array" => json!([compact(&schema["items"], schemas, used)]),
        "object" => match (
            schema["properties"].as_object(),
            schema.get("additionalProperties"),
        ) {
            (Some(fields), _) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.clone(), compact(v, schemas, used)))
                    .collect::<Map<_, _>>(),
            ),
            (None, Some(values)) => json!({"*": compact(values, schemas, used)}),
            (None, None) => json!("dyn"),
        },
        _ => json!("dyn"),
    }
}

fn generate(dir: &Path, version: &str) -> String {
    let (schemas, resources) = read_sources(dir);
    let mut types = BTreeMap::new();
    let mut todo: Vec<String> = resources.iter().map(|r| r[3].clone()).collect();
    while let Some(name) = todo.pop() {
        if !types.contains_key(&name) {
            let mut used = Vec::new();
            types.insert(name.clone(), compact(&schemas[&name], &schemas, &mut used));
            todo.extend(used);
        }
    }
    let mut out = format!(
        "{{\n\"source\": {},\n\"resources\": [\n",
        json!(format!(
            "k8s-openapi {version} ({}), generated by tests/schemas.rs",
            dir.file_name().unwrap().to_str().unwrap()
        ))
    );
    let rows: Vec<String> = resources.iter().map(|r| json!(r).to_string()).collect();
    out += &rows.join(",\n");
    out += "\n],\n\"types\": {\n";
    let rows: Vec<String> = types
        .iter()
        .map(|(k, v)| format!("{}: {}", json!(k), v))
        .collect();
    out += &rows.join(",\n");
    out + "\n}\n}\n"
}

#[test]
fn schemas_json_is_generated_from_k8s_openapi() {
    let Some(sources) = k8s_openapi_sources() else {
        eprintln!("skipped: the k8s-openapi sources are not unpacked on this machine");
        return;
    };
    // The version the crate's `latest` feature builds.
    let newest = std::fs::read_dir(sources.join("src"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("v1_"))
        .max_by_key(|n| n[3..].parse::<u32>().unwrap_or(0))
        .unwrap();
    let version = sources.file_name().unwrap().to_str().unwrap();
    let version = version.trim_start_matches("k8s-openapi-");
    let generated = generate(&sources.join("src").join(&newest), version);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(OUTPUT);
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{OUTPUT} is not what k8s-openapi's schemas give: run ci/update-schemas.sh"
    );
}
