//! Flags shared by the offline subcommands.
use crate::bundle::{self, Loaded, PolicySource};
use std::path::PathBuf;

/// Where the offline subcommands take policies from.
#[derive(Clone, Debug, clap::Args)]
pub struct PolicyArgs {
    /// Policy folder (recursive). Default: the policies built into the binary.
    #[arg(long, value_name = "DIR")]
    pub policies: Option<PathBuf>,
    /// SKU catalog CSV replacing the built-in one (columns of data/azure-gpu-skus.csv).
    #[arg(long, value_name = "CSV")]
    pub catalog: Option<PathBuf>,
}

impl PolicyArgs {
    pub fn source(&self) -> PolicySource {
        PolicySource::of(self.policies.as_deref())
    }

    /// Loads the policies with the catalog of `--catalog` (or the built-in
    /// one), or an error listing every problem found.
    pub fn load(&self) -> anyhow::Result<Loaded> {
        let source = self.source();
        let catalog = bundle::catalog(self.catalog.as_deref())?;
        bundle::load_with(&source, catalog).map_err(|errors| source.failed(errors))
    }
}
