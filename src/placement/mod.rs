//! Mutation of GPU pods: tolerations and node affinity from placement
//! profiles, as an RFC 6902 patch against the raw object.
use crate::review::Request;

/// The placement profiles loaded from the policy folder.
#[derive(Clone, Debug, Default)]
pub struct ProfileSet {}

/// What placement does to one request.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Name of the profile that applied, if any.
    pub profile: Option<String>,
    pub patch: json_patch::Patch,
}

/// Plans the mutation of `req` (placeholder until placement lands).
pub fn plan(_profiles: &ProfileSet, _req: &Request) -> Plan {
    Plan::default()
}
