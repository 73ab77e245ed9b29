//! Which extended resources, and which DRA device classes, count as GPUs.
use std::fmt;

/// The configurable set of GPU resource names: exact names (`nvidia.com/gpu`)
/// and prefix patterns ending in `*` (`nvidia.com/mig-*`); and the
/// DeviceClasses whose devices are GPUs when a pod claims them through
/// Dynamic Resource Allocation (`gpu.nvidia.com`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuResources {
    patterns: Vec<Pattern>,
    device_classes: Vec<String>,
}

/// The resource names detected when nothing else is configured.
/// `microsoft.com/directx` is what the DirectX device plugin of AKS
/// Windows GPU node pools advertises.
pub const DEFAULT_GPU_RESOURCES: [&str; 5] = [
    "nvidia.com/gpu",
    "nvidia.com/mig-*",
    "nvidia.com/gpu.shared",
    "amd.com/gpu",
    "microsoft.com/directx",
];

/// The DRA device classes detected when nothing else is configured: those
/// NVIDIA's DRA driver installs for whole GPUs and MIG devices.
pub const DEFAULT_GPU_DEVICE_CLASSES: [&str; 2] = ["gpu.nvidia.com", "mig.nvidia.com"];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    Prefix(String),
}

/// A resource pattern that cannot name an extended resource.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid GPU resource pattern {pattern:?}: {reason}")]
pub struct ResourcePatternError {
    pub pattern: String,
    pub reason: &'static str,
}

impl Default for GpuResources {
    fn default() -> Self {
        let mut set = GpuResources::new(DEFAULT_GPU_RESOURCES).unwrap_or(GpuResources {
            patterns: Vec::new(),
            device_classes: Vec::new(),
        });
        for class in DEFAULT_GPU_DEVICE_CLASSES {
            let _ = set.insert_device_class(class);
        }
        set
    }
}

impl GpuResources {
    /// Builds the set from names and `prefix*` patterns, with no device
    /// class. Each must be a domain-qualified extended resource name
    /// (`<domain>/<name>`); a `*` may only end the pattern, after the `/`.
    pub fn new<I, S>(patterns: I) -> Result<GpuResources, ResourcePatternError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set = GpuResources {
            patterns: Vec::new(),
            device_classes: Vec::new(),
        };
        for p in patterns {
            set.insert(p.as_ref())?;
        }
        Ok(set)
    }

    /// Adds one name or pattern (ignored if already present).
    pub fn insert(&mut self, pattern: &str) -> Result<(), ResourcePatternError> {
        let parsed = parse_pattern(pattern)?;
        if !self.patterns.contains(&parsed) {
            self.patterns.push(parsed);
        }
        Ok(())
    }

    /// Adds a DRA DeviceClass name (ignored if already present). Device
    /// class names are DNS subdomains: `gpu.nvidia.com`.
    pub fn insert_device_class(&mut self, class: &str) -> Result<(), ResourcePatternError> {
        let dns_subdomain = !class.is_empty()
            && class.len() <= 253
            && class.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            });
        if !dns_subdomain {
            return Err(ResourcePatternError {
                pattern: class.to_string(),
                reason: "a DeviceClass name is a DNS subdomain such as gpu.nvidia.com",
            });
        }
        if !self.device_classes.iter().any(|c| c == class) {
            self.device_classes.push(class.to_string());
        }
        Ok(())
    }

    /// This set plus every pattern and device class of `other`.
    pub fn union(&self, other: &GpuResources) -> GpuResources {
        let mut out = self.clone();
        super::extend_new(&mut out.patterns, &other.patterns);
        super::extend_new(&mut out.device_classes, &other.device_classes);
        out
    }

    /// Whether devices of DeviceClass `class` are GPUs.
    pub fn is_gpu_device_class(&self, class: &str) -> bool {
        self.device_classes.iter().any(|c| c == class)
    }

    /// The GPU device classes, as configured.
    pub fn device_classes(&self) -> &[String] {
        &self.device_classes
    }

    /// Whether `resource` (a key of `resources.limits`) is a GPU resource.
    pub fn matches(&self, resource: &str) -> bool {
        self.patterns.iter().any(|p| match p {
            Pattern::Exact(name) => name == resource,
            Pattern::Prefix(prefix) => {
                resource.len() > prefix.len() && resource.starts_with(prefix.as_str())
            }
        })
    }

    /// The patterns as written (`nvidia.com/mig-*`).
    pub fn patterns(&self) -> Vec<String> {
        self.patterns.iter().map(ToString::to_string).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(name) => f.write_str(name),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

impl fmt::Display for GpuResources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.patterns().join(", "))
    }
}

fn parse_pattern(pattern: &str) -> Result<Pattern, ResourcePatternError> {
    let err = |reason| ResourcePatternError {
        pattern: pattern.to_string(),
        reason,
    };
    let (body, prefix) = match pattern.strip_suffix('*') {
        Some(body) => (body, true),
        None => (pattern, false),
    };
    let Some((domain, name)) = body.split_once('/') else {
        return Err(err(
            "must be a domain-qualified name such as nvidia.com/gpu",
        ));
    };
    if domain.is_empty() || !domain.contains('.') {
        return Err(err("the domain before '/' must be a DNS name"));
    }
    if name.contains('/') {
        return Err(err("must contain exactly one '/'"));
    }
    if !prefix && name.is_empty() {
        return Err(err("the name after '/' is empty"));
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !domain
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        return Err(err(
            "the domain must be lower-case letters, digits, '-' and '.'",
        ));
    }
    if !name.chars().all(valid) {
        return Err(err(
            "the name may hold letters, digits, '-', '_', '.' and a final '*' only",
        ));
    }
    Ok(if prefix {
        Pattern::Prefix(body.to_string())
    } else {
        Pattern::Exact(body.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_set_covers_nvidia_mig_shared_amd_and_windows() {
        let r = GpuResources::default();
        for name in [
            "nvidia.com/gpu",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-3g.40gb",
            "nvidia.com/gpu.shared",
            // MIG slices shared by time-slicing (renameByDefault).
            "nvidia.com/mig-1g.10gb.shared",
            "amd.com/gpu",
            "microsoft.com/directx",
        ] {
            assert!(r.matches(name), "{name}");
        }
        let others = "cpu memory nvidia.com/gpumem nvidia.com/mig- example.com/gpu";
        for name in others.split(' ').chain(["microsoft.com/directx-other"]) {
            assert!(!r.matches(name), "{name}");
        }
        assert_eq!(r.patterns(), DEFAULT_GPU_RESOURCES.to_vec());
        for (class, gpu) in [
            ("gpu.nvidia.com", true),
            ("mig.nvidia.com", true),
            ("nvidia.com/gpu", false),
            ("cpu.example.com", false),
        ] {
            assert_eq!(r.is_gpu_device_class(class), gpu, "{class}");
        }
    }

    #[test]
    fn device_classes_are_dns_subdomains_and_union() {
        let mut r = GpuResources::new(["nvidia.com/gpu"]).unwrap();
        assert!(r.device_classes().is_empty());
        r.insert_device_class("gpu.amd.com").unwrap();
        for bad in [
            "",
            "GPU.example.com",
            "gpu..com",
            "-gpu.com",
            "nvidia.com/gpu",
        ] {
            assert!(r.insert_device_class(bad).is_err(), "{bad}");
        }
        let all = GpuResources::default().union(&r);
        let classes = ["gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com"];
        assert_eq!(all.device_classes(), classes);
    }

    #[test]
    fn prefix_patterns_match_only_longer_names() {
        let r = GpuResources::new(["example.com/fpga-*"]).unwrap();
        assert!(r.matches("example.com/fpga-a"));
        assert!(!r.matches("example.com/fpga-"));
        assert!(!r.matches("example.com/fpg"));
    }

    #[test]
    fn rejects_patterns_that_are_not_extended_resources() {
        let bad_patterns = "* gpu nvidia.com/*/x nvidia.com/ /gpu nvidia.com/g*u Nvidia.com/gpu";
        for bad in bad_patterns.split(' ').chain(["localhost/gpu"]) {
            assert!(GpuResources::new([bad]).is_err(), "{bad}");
        }
        let e = GpuResources::new(["gpu"]).unwrap_err();
        assert!(e.to_string().contains("\"gpu\""), "{e}");
    }

    #[test]
    fn union_keeps_order_and_drops_duplicates() {
        let a = GpuResources::new(["nvidia.com/gpu"]).unwrap();
        let b = GpuResources::new(["nvidia.com/gpu", "example.com/fpga"]).unwrap();
        let both = vec!["nvidia.com/gpu", "example.com/fpga"];
        assert_eq!(a.union(&b).patterns(), both);
    }
}
