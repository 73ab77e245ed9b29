//! Reading policy folders: multi-document YAML and JSON files, recursively,
//! in a stable order, each document tagged with where it came from.
use crate::k8s::doc::Unique;
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
            ..LoadError::new(message)
        }
    }

    /// A file or folder that could not be read.
    fn io(path: &Path, e: std::io::Error) -> LoadError {
        LoadError::new(format!("{}: {e}", path.display()))
    }

    /// `doc` is of a kind the loader reads but under another apiVersion:
    /// an error at `apiVersion` listing the `accepted` ones, rather than a
    /// skipped document (a policy switched off by a typo).
    pub fn unknown_api_version(doc: &Document, accepted: &[&str]) -> LoadError {
        let kind = doc.type_meta().1;
        let accepted = accepted.join(", ");
        let message = match doc.value.get("apiVersion") {
            None | Some(serde_json::Value::Null) => {
                format!("required for kind {kind}; accepted: {accepted}")
            }
            Some(given) => {
                format!("{given} is not an apiVersion of kind {kind}; accepted: {accepted}")
            }
        };
        LoadError::at(&doc.source, "apiVersion", message)
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

/// Something a policy folder does that kube-apiserver accepts and that
/// changes nothing, or changes less than its author may think: reported by
/// `lint`, logged by `serve`, never a reason to refuse the folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadNotice {
    pub level: NoticeLevel,
    pub at: LoadError,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeLevel {
    /// Probably a mistake: a document that is ignored.
    Warning,
    /// A field Kubernetes documents as ignored in this case.
    Note,
    /// What type checking an expression against the schemas of what it
    /// reads found (see [`super::schemas`]): a warning, an error in
    /// `lint --strict`.
    Typing,
}

impl fmt::Display for LoadNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.level {
            NoticeLevel::Warning | NoticeLevel::Typing => "warning",
            NoticeLevel::Note => "note",
        };
        write!(f, "{level}: {}", self.at)
    }
}

/// Every problem found while loading, in file order, and what type
/// checking found in the policies that did load ([`NoticeLevel::Typing`]),
/// which `lint` still reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadErrors(pub Vec<LoadError>, pub Vec<LoadNotice>);

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
        LoadErrors(vec![e], Vec::new())
    }
}

/// Deepest folder nesting followed, so that symlink loops end.
const MAX_DIR_DEPTH: usize = 16;

/// Reads every `*.yaml`, `*.yml` and `*.json` file under `dir` (or `dir`
/// itself when it is a file), recursively and sorted by path; see
/// [`read_files`] for what is read.
pub fn read_documents(dir: &Path) -> Result<Vec<Document>, LoadErrors> {
    parse_files(&read_files(dir)?)
}

/// One policy file as read: the path it is known by, and its text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyFile {
    pub path: PathBuf,
    pub text: String,
}

/// Reads the text of every policy file under `dir` (or `dir` itself when
/// it is a file), sorted by path. Entries whose name starts with a dot are
/// skipped. A mounted ConfigMap keeps its files in a timestamped folder
/// that the `..data` symlink points to, and an update swaps `..data` in one
/// rename: `..data` is resolved once and every file read from the folder
/// it names, so a swap during the read cannot mix two versions. Files are
/// still named as `dir/<key>`.
pub fn read_files(dir: &Path) -> Result<Vec<PolicyFile>, LoadErrors> {
    let meta = std::fs::metadata(dir).map_err(|e| LoadError::io(dir, e))?;
    if meta.is_file() {
        let text = std::fs::read_to_string(dir).map_err(|e| LoadError::io(dir, e))?;
        return Ok(vec![PolicyFile {
            path: dir.to_path_buf(),
            text,
        }]);
    }
    let root = configmap_payload(dir)?.unwrap_or_else(|| dir.to_path_buf());
    let mut paths = Vec::new();
    collect_files(&root, 0, &mut paths)?;
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        let shown = match path.strip_prefix(&root) {
            Ok(relative) => dir.join(relative),
            Err(_) => path.clone(),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => files.push(PolicyFile { path: shown, text }),
            Err(e) => errors.push(LoadError::io(&shown, e)),
        }
    }
    all_or_errors(files, errors)
}

/// `value`, or the errors found making it.
fn all_or_errors<T>(value: T, errors: Vec<LoadError>) -> Result<T, LoadErrors> {
    match errors.is_empty() {
        true => Ok(value),
        false => Err(LoadErrors(errors, Vec::new())),
    }
}

/// Parses files read by [`read_files`], every error collected.
pub fn parse_files(files: &[PolicyFile]) -> Result<Vec<Document>, LoadErrors> {
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for file in files {
        match parse_documents(&file.path, &file.text) {
            Ok(mut d) => docs.append(&mut d),
            Err(mut e) => errors.append(&mut e.0),
        }
    }
    all_or_errors(docs, errors)
}

/// The folder a mounted ConfigMap's `..data` symlink points to right now,
/// or `None` when `dir` is a plain folder.
fn configmap_payload(dir: &Path) -> Result<Option<PathBuf>, LoadErrors> {
    let data = dir.join("..data");
    match std::fs::symlink_metadata(&data) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(&data).map_err(|e| LoadError::io(&data, e))?;
            // The kubelet's target is relative (`..2026_11_29_14_00_00.123`).
            Ok(Some(dir.join(target)))
        }
        _ => Ok(None),
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
    let entries = std::fs::read_dir(dir).map_err(|e| LoadError::io(dir, e))?;
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
        let Unique(value) = serde_json::from_str(text).map_err(|e| {
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
        match serde_yaml::from_str::<Unique>(chunk) {
            Ok(Unique(serde_json::Value::Null)) => {}
            Ok(Unique(value)) => docs.push(Document { source, value }),
            Err(e) => {
                // serde_yaml's message without its own " at line L column C".
                let text = e.to_string();
                let message = text.split(" at line ").next().unwrap_or(&text);
                let at = (e.location()).map_or(String::new(), |loc| {
                    let (line, column) = (start + loc.line() - 1, loc.column());
                    format!(" at file line {line}, column {column}")
                });
                let message = format!("invalid YAML{at}: {message}");
                errors.push(LoadError::at(&source, "", message));
            }
        }
    }
    all_or_errors(docs, errors)
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

    /// A key written twice is refused, as `kubectl apply` refuses it,
    /// not read as its last value.
    #[test]
    fn a_key_written_twice_is_an_error_naming_its_mapping() {
        let text = "a: 1\n---\nkind: X\nmetadata:\n  name: a\n  name: b\n";
        let msg = parse_documents(Path::new("p.yaml"), text)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "p.yaml: document 2 (line 3): invalid YAML at file line 5, column 3: metadata: mapping key \"name\" already defined"
        );
        let err = parse_documents(Path::new("p.json"), r#"{"kind": "X", "kind": "Y"}"#);
        assert_eq!(
            err.unwrap_err().to_string(),
            "p.json: document 1 (line 1): invalid JSON at line 1, column 20: mapping key \"kind\" already defined"
        );
    }

    #[test]
    fn a_mounted_configmap_is_read_from_the_folder_data_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let payload = root.join("..2026_11_29_14_00_00.1");
        std::fs::create_dir(&payload).unwrap();
        std::fs::write(payload.join("a.yaml"), "a: 1\n").unwrap();
        std::fs::write(payload.join("b.yaml"), "b: 1\n").unwrap();
        std::os::unix::fs::symlink("..2026_11_29_14_00_00.1", root.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/a.yaml", root.join("a.yaml")).unwrap();
        // Mid-update states the kubelet passes through: a key whose top-level
        // link is not made yet (b), a link left for a removed key (c), and
        // a file that is not in the payload at all.
        std::os::unix::fs::symlink("..data/c.yaml", root.join("c.yaml")).unwrap();
        std::fs::write(root.join("stale.yaml"), "stale: 1\n").unwrap();
        let files = read_files(root).unwrap();
        let names: Vec<_> = files.iter().map(|f| f.path.clone()).collect();
        assert_eq!(names, [root.join("a.yaml"), root.join("b.yaml")]);
        assert_eq!(files[1].text, "b: 1\n");

        // After a swap, the new payload only.
        let next = root.join("..2026_11_29_14_05_00.2");
        std::fs::create_dir(&next).unwrap();
        std::fs::write(next.join("a.yaml"), "a: 2\n").unwrap();
        std::os::unix::fs::symlink("..2026_11_29_14_05_00.2", root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        let files = read_files(root).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, root.join("a.yaml"));
        assert_eq!(files[0].text, "a: 2\n");
    }

    #[test]
    fn an_unknown_api_version_is_named_with_the_accepted_ones() {
        let text = "a: 1\n---\napiVersion: admissionregistration.k8s.io/v2\nkind: ValidatingAdmissionPolicy\n---\nkind: ValidatingAdmissionPolicy\n";
        let docs = parse_documents(Path::new("p.yaml"), text).unwrap();
        let accepted = [
            "admissionregistration.k8s.io/v1",
            "admissionregistration.k8s.io/v1beta1",
        ];
        assert_eq!(
            LoadError::unknown_api_version(&docs[1], &accepted).to_string(),
            "p.yaml: document 2 (line 3): apiVersion: \"admissionregistration.k8s.io/v2\" is not an apiVersion of kind ValidatingAdmissionPolicy; accepted: admissionregistration.k8s.io/v1, admissionregistration.k8s.io/v1beta1"
        );
        assert_eq!(
            LoadError::unknown_api_version(&docs[2], &accepted).to_string(),
            "p.yaml: document 3 (line 6): apiVersion: required for kind ValidatingAdmissionPolicy; accepted: admissionregistration.k8s.io/v1, admissionregistration.k8s.io/v1beta1"
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
