//! Reading a catalog file: the columns of `data/azure-gpu-skus.csv`, each
//! row checked, every mistake named by file, line and column.
use super::{normalize, Sku};
use std::collections::{HashMap, HashSet};

/// Columns a catalog file must have. Other columns are ignored; the
/// optional ones (`aliases`, `gpu_devices`, `memory_gib`, `karpenter_gpu`,
/// `mig`, `source`) take their defaults when absent.
const REQUIRED_COLUMNS: &[&str] = &[
    "name",
    "gpu_model",
    "manufacturer",
    "gpus",
    "gpu_memory_gib",
    "vcpus",
    "family",
    "series",
    "retired",
    "retired_on",
    "aks_supported",
    "premium",
];

/// A bad catalog file. The message names the file, line and column.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("{file}: cannot read: {error}")]
    Io {
        file: String,
        #[source]
        error: std::io::Error,
    },
    #[error("{file}: line {line}: {message}")]
    Line {
        file: String,
        line: u64,
        message: String,
    },
    #[error("{file}: line {line}, column {column} ({field}): {message}")]
    Field {
        file: String,
        line: u64,
        column: usize,
        field: String,
        message: String,
    },
}

/// The SKUs of catalog CSV text, in file order, and the date of its
/// `# as-of:` line; `file` names the text in errors. A name or alias
/// listed twice (case and `Standard_` aside) is an error.
pub(super) fn read(text: &str, file: &str) -> Result<(Vec<Sku>, Option<String>), CatalogError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let line_err = |line: u64, message: String| CatalogError::Line {
        file: file.to_string(),
        line,
        message,
    };
    let as_of = as_of_line(text).map_err(|(line, message)| line_err(line, message))?;
    let headers = reader
        .headers()
        .map_err(|e| line_err(csv_line(&e).unwrap_or(1), e.to_string()))?
        .clone();
    let columns: HashMap<String, usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| (h.to_ascii_lowercase(), i))
        .collect();
    let missing: Vec<&str> = REQUIRED_COLUMNS
        .iter()
        .copied()
        .filter(|c| !columns.contains_key(*c))
        .collect();
    if !missing.is_empty() {
        return Err(line_err(
            1,
            format!("header lacks column(s): {}", missing.join(", ")),
        ));
    }
    let mut skus = Vec::new();
    let mut names = HashSet::new();
    for record in reader.records() {
        let record = record.map_err(|e| line_err(csv_line(&e).unwrap_or(0), e.to_string()))?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let row = Row {
            file,
            line,
            record: &record,
            columns: &columns,
        };
        let sku = row.sku()?;
        for key in std::iter::once(&sku.name).chain(&sku.aliases) {
            if !names.insert(normalize(key)) {
                return Err(row.error("name", format!("{key} is listed twice")));
            }
        }
        skus.push(sku);
    }
    Ok((skus, as_of))
}

fn csv_line(e: &csv::Error) -> Option<u64> {
    e.position().map(|p| p.line())
}

/// One data row, with what is needed to name a bad field.
struct Row<'a> {
    file: &'a str,
    line: u64,
    record: &'a csv::StringRecord,
    columns: &'a HashMap<String, usize>,
}

impl Row<'_> {
    fn error(&self, field: &str, message: String) -> CatalogError {
        CatalogError::Field {
            file: self.file.to_string(),
            line: self.line,
            column: self.columns.get(field).map_or(0, |i| i + 1),
            field: field.to_string(),
            message,
        }
    }

    fn text(&self, field: &str) -> &str {
        self.columns
            .get(field)
            .and_then(|&i| self.record.get(i))
            .unwrap_or("")
    }

    fn required(&self, field: &str) -> Result<String, CatalogError> {
        let v = self.text(field);
        if v.is_empty() {
            return Err(self.error(field, "is empty".to_string()));
        }
        Ok(v.to_string())
    }

    fn optional(&self, field: &str) -> Option<String> {
        let v = self.text(field);
        (!v.is_empty()).then(|| v.to_string())
    }

    fn number(&self, field: &str) -> Result<Option<f64>, CatalogError> {
        let v = self.text(field);
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<f64>() {
            Ok(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
            _ => Err(self.error(field, format!("{v:?} is not a non-negative number"))),
        }
    }

    fn count(&self, field: &str) -> Result<Option<u32>, CatalogError> {
        let v = self.text(field);
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<u32>()
            .map(Some)
            .map_err(|_| self.error(field, format!("{v:?} is not a whole number")))
    }

    fn flag(&self, field: &str, default: Option<bool>) -> Result<bool, CatalogError> {
        match self.text(field).to_ascii_lowercase().as_str() {
            "true" | "yes" => Ok(true),
            "false" | "no" => Ok(false),
            "" if default.is_some() => Ok(default.unwrap_or_default()),
            other => Err(self.error(field, format!("{other:?} is not true or false"))),
        }
    }

    fn sku(&self) -> Result<Sku, CatalogError> {
        let name = self.required("name")?;
        if !name.to_ascii_lowercase().starts_with("standard_") || name.contains(char::is_whitespace)
        {
            return Err(self.error(
                "name",
                format!("{name:?} is not an Azure VM size name (Standard_...)"),
            ));
        }
        let manufacturer = self.required("manufacturer")?.to_ascii_lowercase();
        if manufacturer != "nvidia" && manufacturer != "amd" {
            return Err(self.error(
                "manufacturer",
                format!("{manufacturer:?} is not nvidia or amd"),
            ));
        }
        let gpus = match self.number("gpus")? {
            Some(g) if g > 0.0 => g,
            _ => return Err(self.error("gpus", "must be a number above 0".to_string())),
        };
        let gpu_devices = match self.count("gpu_devices")? {
            Some(0) => {
                return Err(self.error("gpu_devices", "must be at least 1".to_string()));
            }
            Some(d) => d,
            // A vGPU slice shows as one device; whole GPUs as themselves.
            None => (gpus.floor() as u32).max(1),
        };
        let vcpus = match self.count("vcpus")? {
            Some(v) if v > 0 => v,
            _ => return Err(self.error("vcpus", "must be a whole number above 0".to_string())),
        };
        let retired_on = self.optional("retired_on");
        if let Some(date) = &retired_on {
            if !is_date(date) {
                return Err(
                    self.error("retired_on", format!("{date:?} is not a date (YYYY-MM-DD)"))
                );
            }
        }
        let aliases = self
            .text("aliases")
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        let mut sku = Sku {
            room: super::Allocatable::default(),
            series: self.required("series")?,
            family: self.required("family")?,
            gpu_model: self.required("gpu_model")?,
            gpu_memory_gib: self.number("gpu_memory_gib")?,
            retired: self.flag("retired", None)?,
            aks_supported: self.flag("aks_supported", None)?,
            premium: self.flag("premium", None)?,
            karpenter_gpu: self.flag("karpenter_gpu", Some(true))?,
            mig: self.flag("mig", Some(false))?,
            mig_gpu: None,
            source: self.text("source").to_string(),
            name,
            aliases,
            manufacturer,
            gpus,
            gpu_devices,
            vcpus,
            memory_gib: self.number("memory_gib")?,
            retired_on,
        };
        sku.room = super::Allocatable::of_size(sku.vcpus, sku.memory_gib);
        Ok(sku)
    }
}

/// The date of a `# as-of: YYYY-MM-DD` comment among the comment lines
/// that open the file; `Err((line, message))` when it is not a date.
fn as_of_line(text: &str) -> Result<Option<String>, (u64, String)> {
    for (i, line) in text.lines().enumerate() {
        let Some(comment) = line.trim().strip_prefix('#') else {
            break;
        };
        if let Some(date) = comment.trim().strip_prefix("as-of:") {
            let date = date.trim();
            if !is_date(date) {
                return Err((
                    i as u64 + 1,
                    format!("as-of {date:?} is not a date (YYYY-MM-DD)"),
                ));
            }
            return Ok(Some(date.to_string()));
        }
    }
    Ok(None)
}

pub(super) fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::super::Catalog;
    use super::*;

    #[test]
    fn catalog_date_from_the_as_of_comment() {
        assert!(Catalog::embedded().as_of().is_some_and(is_date));
        let header = "name,gpu_model,manufacturer,gpus,gpu_memory_gib,vcpus,family,series,retired,retired_on,aks_supported,premium,source";
        let dated = format!("# Azure GPU sizes\n# as-of: 2026-01-31\n{header}\n");
        let c = Catalog::from_csv_str(&dated, "dated.csv").unwrap();
        assert_eq!(c.as_of(), Some("2026-01-31"));
        let c = Catalog::from_csv_str(&format!("{header}\n"), "undated.csv").unwrap();
        assert_eq!(c.as_of(), None);
        let err = error(&format!("# as-of: last week\n{header}\n"), "bad.csv");
        let named = err.contains("bad.csv: line 1") && err.contains("not a date");
        assert!(named, "{err}");
    }

    /// The error reading `text` as the catalog file `name`, as shown.
    fn error(text: &str, name: &str) -> String {
        Catalog::from_csv_str(text, name).unwrap_err().to_string()
    }

    const HEADER: &str = "name,gpu_model,manufacturer,gpus,gpu_memory_gib,vcpus,family,series,retired,retired_on,aks_supported,premium\n";

    #[test]
    fn bad_number_names_line_and_column() {
        let text = format!(
            "{HEADER}Standard_NC4as_T4_v3,T4,nvidia,1,16,4,NCasT4_v3,NCas_T4_v3,false,,true,false\nStandard_X,T4,nvidia,one,16,4,F,S,false,,true,false\n"
        );
        let want = "skus.csv: line 3, column 4 (gpus): \"one\" is not a non-negative number";
        assert_eq!(error(&text, "skus.csv"), want);
    }

    #[test]
    fn missing_column_is_named() {
        let err = error("name,gpus\nStandard_X,1\n", "skus.csv");
        let want = "skus.csv: line 1: header lacks column(s): gpu_model";
        assert!(err.starts_with(want), "{err}");
    }

    #[test]
    fn bad_flag_date_and_duplicate_are_errors() {
        let row = |r: &str, d: &str| {
            format!("{HEADER}Standard_A,T4,nvidia,1,16,4,F,S,{r},{d},true,false\n")
        };
        let err = error(&row("maybe", ""), "f");
        assert!(err.contains("line 2, column 9 (retired)"), "{err}");
        let err = error(&row("true", "30/09/2025"), "f");
        assert!(err.contains("column 10 (retired_on)"), "{err}");
        let dup = format!(
            "{HEADER}Standard_A,T4,nvidia,1,16,4,F,S,false,,true,false\nstandard_a,T4,nvidia,1,16,4,F,S,false,,true,false\n"
        );
        let err = error(&dup, "f");
        let want = "line 3, column 1 (name): standard_a is listed twice";
        assert!(err.contains(want), "{err}");
    }

    #[test]
    fn host_memory_is_optional_and_empty_is_unknown() {
        let header = "name,gpu_model,manufacturer,gpus,gpu_memory_gib,vcpus,memory_gib,family,series,retired,retired_on,aks_supported,premium\n";
        let text = format!(
            "{header}Standard_A,T4,nvidia,1,16,4,28,F,S,false,,true,false\nStandard_B,T4,nvidia,1,16,4,,F,S,false,,true,false\n"
        );
        let c = Catalog::from_csv_str(&text, "f").unwrap();
        assert_eq!(c.get("Standard_A").unwrap().memory_gib, Some(28.0));
        assert_eq!(c.get("Standard_B").unwrap().memory_gib, None);
        let without = format!("{HEADER}Standard_A,T4,nvidia,1,16,4,F,S,false,,true,false\n");
        let c = Catalog::from_csv_str(&without, "f").unwrap();
        assert_eq!(c.get("Standard_A").unwrap().memory_gib, None);
        let bad = text.replace(",28,", ",lots,");
        let err = error(&bad, "f");
        assert!(err.contains("column 7 (memory_gib)"), "{err}");
    }

    #[test]
    fn ragged_row_is_an_error_not_a_panic() {
        let text = format!("{HEADER}Standard_A,T4\n");
        let err = error(&text, "f");
        assert!(err.starts_with("f: line 2:"), "{err}");
    }

    #[test]
    fn file_override_reads_from_disk_and_reports_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skus.csv");
        let row = "Standard_Custom_GPU_v1,L4,nvidia,1,24,8,NL4,NL4_v1,false,,true,false";
        std::fs::write(&path, format!("{HEADER}{row}\n")).unwrap();
        let c = Catalog::from_csv_file(&path).unwrap();
        assert_eq!(c.len(), 1);
        assert!(c.is_gpu_sku("standard_custom_gpu_v1"));
        let err = Catalog::from_csv_file(&dir.path().join("nope.csv")).unwrap_err();
        assert!(err.to_string().contains("nope.csv: cannot read"), "{err}");
    }
}
