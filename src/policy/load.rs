//! Reading policy folders: multi-document YAML and JSON files, recursively,
//! in a stable order, each document tagged with where it came from.
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a document came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub file: PathBuf,
    /// 1-based index of the document in its file.
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
}

/// One YAML or JSON document.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub source: Source,
    pub value: serde_json::Value,
}

impl Document {
    /// `apiVersion` and `kind`, empty when absent.
    pub fn type_meta(&self) -> (&str, &str) {
        let get = |k: &str| self.value.get(k).and_then(|v| v.as_str()).unwrap_or("");
        (get("apiVersion"), get("kind"))
    }
}

/// A problem in a policy folder, located as precisely as known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub source: Option<Source>,
    /// Path of the offending field, e.g. `spec.validations[0].expression`.
    pub field: Option<String>,
    /// 1-based line and column inside a CEL expression (or inside the file
    /// for a YAML syntax error without a document).
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl LoadError {
    pub fn new(message: impl Into<String>) -> LoadError {
        LoadError {
            source: None,
            field: None,
            line: None,
            column: None,
            message: message.into(),
        }
    }

    pub fn at(source: &Source, field: impl Into<String>, message: impl Into<String>) -> LoadError {
        LoadError {
            source: Some(source.clone()),
            field: Some(field.into()).filter(|f: &String| !f.is_empty()),
            line: None,
            column: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = &self.source {
            write!(
                f,
                "{}: document {} (line {}): ",
                s.file.display(),
                s.document,
                s.line
            )?;
        }
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, "line {l}, column {c}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoadError {}

/// Every problem found while loading, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadErrors(pub Vec<LoadError>);

impl fmt::Display for LoadErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadErrors {}

impl From<LoadError> for LoadErrors {
    fn from(e: LoadError) -> LoadErrors {
        LoadErrors(vec![e])
    }
}

/// Deepest folder nesting followed, so that symlink loops end.
const MAX_DIR_DEPTH: usize = 16;

/// Reads every `*.yaml`, `*.yml` and `*.json` file under `dir` (or `dir`
/// itself when it is a file), recursively and sorted by path. Entries whose
/// name starts with a dot are skipped: a mounted ConfigMap keeps its files in
/// `..data` and friends and exposes them through top-level symlinks, so each
/// file is read once.
pub fn read_documents(dir: &Path) -> Result<Vec<Document>, LoadErrors> {
    let mut files = Vec::new();
    let meta =
        std::fs::metadata(dir).map_err(|e| LoadError::new(format!("{}: {e}", dir.display())))?;
    if meta.is_file() {
        files.push(dir.to_path_buf());
    } else {
        collect_files(dir, 0, &mut files)?;
    }
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => match parse_documents(&file, &text) {
                Ok(mut d) => docs.append(&mut d),
                Err(mut e) => errors.append(&mut e.0),
            },
            Err(e) => errors.push(LoadError::new(format!("{}: {e}", file.display()))),
        }
    }
    if errors.is_empty() {
        Ok(docs)
    } else {
        Err(LoadErrors(errors))
    }
}

fn collect_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), LoadErrors> {
    if depth > MAX_DIR_DEPTH {
        return Err(LoadError::new(format!(
            "{}: folders nested more than {MAX_DIR_DEPTH} deep (a symlink loop?)",
            dir.display()
        ))
        .into());
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| LoadError::new(format!("{}: {e}", dir.display())))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.'))
        })
        .collect();
    paths.sort();
    for path in paths {
        // Follows symlinks, as the ConfigMap layout needs.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            collect_files(&path, depth + 1, out)?;
        } else if is_policy_file(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_policy_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Parses one file's text: a JSON document for `*.json`, otherwise YAML with
/// any number of `---`-separated documents. Empty documents are skipped and
/// not counted.
pub fn parse_documents(file: &Path, text: &str) -> Result<Vec<Document>, LoadErrors> {
    let is_json = file.extension().and_then(|e| e.to_str()) == Some("json");
    if is_json {
        let source = Source {
            file: file.to_path_buf(),
            document: 1,
            line: 1,
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            let text = e.to_string();
            let message = text.split(" at line ").next().unwrap_or(&text);
            LoadError::at(
                &source,
                "",
                format!(
                    "invalid JSON at line {}, column {}: {message}",
                    e.line(),
                    e.column()
                ),
            )
        })?;
        return Ok(vec![Document { source, value }]);
    }
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for (start, chunk) in split_yaml(text) {
        if chunk
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        let source = Source {
            file: file.to_path_buf(),
            document: docs.len() + errors.len() + 1,
            line: start,
        };
        match serde_yaml::from_str::<serde_json::Value>(chunk) {
            Ok(serde_json::Value::Null) => {}
            Ok(value) => docs.push(Document { source, value }),
            Err(e) => {
                let location = e.location();
                let mut err =
                    LoadError::at(&source, "", format!("invalid YAML: {}", yaml_message(&e)));
                if let Some(loc) = location {
                    err.message = format!(
                        "invalid YAML at file line {}, column {}: {}",
                        start + loc.line() - 1,
                        loc.column(),
                        yaml_message(&e)
                    );
                }
                errors.push(err);
            }
        }
    }
    if errors.is_empty() {
        Ok(docs)
    } else {
        Err(LoadErrors(errors))
    }
}

/// serde_yaml's message without its own " at line L column C" suffix.
fn yaml_message(e: &serde_yaml::Error) -> String {
    let text = e.to_string();
    match text.find(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Splits YAML text at `---` lines, returning each chunk with the 1-based
/// line it starts on.
fn split_yaml(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start_byte = 0;
    let mut start_line = 1;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_end();
        let is_separator = trimmed == "---" || trimmed.starts_with("--- ");
        if is_separator {
            out.push((start_line, &text[start_byte..offset]));
            start_byte = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    out.push((start_line, &text[start_byte..]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_yaml_numbers_documents_and_lines() {
        let text = "---\na: 1\n---\n# only a comment\n---\nb: 2\nc: 3\n";
        let docs = parse_documents(Path::new("p.yaml"), text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].source.document, 1);
        assert_eq!(docs[0].source.line, 2);
        assert_eq!(docs[1].source.document, 2);
        assert_eq!(docs[1].source.line, 6);
        assert_eq!(docs[1].value["c"], 3);
    }

    #[test]
    fn yaml_errors_name_file_document_and_line() {
        let text = "a: 1\n---\nb: [1,\n";
        let errs = parse_documents(Path::new("p.yaml"), text).unwrap_err();
        let msg = errs.to_string();
        assert!(
            msg.starts_with("p.yaml: document 2 (line 3): invalid YAML"),
            "{msg}"
        );
    }

    #[test]
    fn json_files_are_one_document() {
        let docs = parse_documents(Path::new("p.json"), r#"{"kind": "X"}"#).unwrap();
        assert_eq!(docs[0].type_meta(), ("", "X"));
        let err = parse_documents(Path::new("p.json"), "{\n  \"a\": }").unwrap_err();
        assert_eq!(
            err.to_string(),
            "p.json: document 1 (line 1): invalid JSON at line 2, column 8: expected value"
        );
    }
}
