//! What an expression uses beyond kube-apiserver's CEL environment, so that
//! `lint` can tell which policies would also load in kube-apiserver.
//!
//! The environment is Kubernetes' base environment
//! (`staging/src/k8s.io/apiserver/pkg/cel/environment/base.go`) as of
//! [`KUBERNETES_VERSION`], plus what admission policies add (the
//! `authorizer` library and, in mutations, `jsonpatch.escapeKey`). The
//! engine's own additions (the `gpu` and `azure` extensions, `math`,
//! `base64`, `cel.bind`, `image.repository`) are what this reports.
use super::Compiled;
use kube_cel::cel::common::ast::Expr;
use kube_cel::cel::parser::Expression;
use std::collections::BTreeSet;

/// The Kubernetes version whose base environment [`beyond_kubernetes`]
/// compares with.
pub const KUBERNETES_VERSION: &str = "1.33";

/// Functions, methods and operators kube-apiserver declares, separated by
/// blanks: the CEL standard library, optional types, strings extension v2,
/// sets, two-variable comprehensions (macros), and Kubernetes' own
/// libraries (lists, regex, URLs, authorizer, quantity, IP, CIDR, format,
/// semver, image, jsonpatch).
const KUBERNETES_FUNCTIONS: &str = concat!(
    // the standard library
    "size contains startsWith endsWith matches int uint double string bytes bool dyn ",
    "type duration timestamp getFullYear getMonth getDayOfYear getDayOfMonth getDate ",
    "getDayOfWeek getHours getMinutes getSeconds getMilliseconds ",
    // optional types
    "optional.none optional.of optional.ofNonZeroValue value hasValue or orValue ",
    // strings extension, version 2
    "charAt indexOf lastIndexOf lowerAscii upperAscii replace split substring trim join ",
    "format strings.quote ",
    // sets
    "sets.contains sets.equivalent sets.intersects ",
    // Kubernetes lists and regex
    "isSorted sum min max find findAll ",
    // URLs
    "url isURL getScheme getHost getHostname getPort getEscapedPath getQuery ",
    // authorizer
    "path group serviceAccount resource subresource namespace name check allowed reason ",
    "errored error fieldSelector labelSelector ",
    // quantity
    "quantity isQuantity sign isGreaterThan isLessThan compareTo add sub asInteger ",
    "isInteger asApproximateFloat ",
    // IP and CIDR
    "ip isIP ip.isCanonical family isUnspecified isLoopback isLinkLocalMulticast ",
    "isLinkLocalUnicast isGlobalUnicast cidr isCIDR containsIP containsCIDR masked ",
    "prefixLength ",
    // format
    "format.named format.dns1123Label format.dns1123Subdomain format.dns1035Label ",
    "format.qualifiedName format.dns1123LabelPrefix format.dns1123SubdomainPrefix ",
    "format.dns1035LabelPrefix format.labelValue format.uri format.uuid format.byte ",
    "format.date format.datetime validate ",
    // semver
    "semver isSemver major minor patch ",
    // image
    "image isImage containsDigest registry repository identifier tag digest ",
    // MutatingAdmissionPolicy
    "jsonpatch.escapeKey ",
);

/// Namespaces whose `prefix.name(...)` calls are functions, not methods of
/// a variable, separated by blanks.
const NAMESPACES: &str =
    "optional strings sets ip format jsonpatch math base64 image azure cel lists";

/// What `expr` uses that kube-apiserver's environment does not have:
/// variables beyond admission's own, and functions by name. Empty when the
/// expression would load there as written.
pub fn beyond_kubernetes(expr: &Compiled) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = expr
        .variables()
        .iter()
        .filter(|v| !super::BUILTIN_VARIABLES.contains(&v.as_str()))
        .cloned()
        .collect();
    walk(expr.tree(), &mut out);
    out
}

fn walk(e: &Expression, out: &mut BTreeSet<String>) {
    match &e.expr {
        Expr::Call(call) => {
            let operator = call
                .func_name
                .as_bytes()
                .first()
                .is_some_and(|b| !b.is_ascii_alphabetic());
            let qualified = match call.target.as_deref().map(|t| &t.expr) {
                Some(Expr::Ident(prefix)) if NAMESPACES.split_whitespace().any(|n| n == prefix) => {
                    Some(format!("{prefix}.{}", call.func_name))
                }
                _ => None,
            };
            if !operator {
                let name = qualified.clone().unwrap_or_else(|| call.func_name.clone());
                // `@mapInsert` steps the transformMap macros.
                if !name.starts_with('@')
                    && !KUBERNETES_FUNCTIONS.split_whitespace().any(|f| f == name)
                {
                    out.insert(name);
                }
            }
            if qualified.is_none() {
                if let Some(target) = &call.target {
                    walk(target, out);
                }
            }
            for arg in &call.args {
                walk(arg, out);
            }
        }
        Expr::Comprehension(c) => {
            // `cel.bind(x, init, e)` is a comprehension over nothing whose
            // iteration variable is `#unused` (cel-go's expansion).
            if c.iter_var == "#unused" {
                out.insert("cel.bind".to_string());
            }
            super::walk::children(e, |part| walk(part, out));
        }
        _ => super::walk::children(e, |child| walk(child, out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{compile, Env};

    fn beyond(source: &str) -> Vec<String> {
        let env = Env::default();
        beyond_kubernetes(&compile(&env, source).unwrap())
            .into_iter()
            .collect()
    }

    #[test]
    fn kubernetes_expressions_use_nothing_beyond() {
        for source in [
            "object.spec.containers.all(c, c.image.startsWith('mcr.microsoft.com/'))",
            "object.metadata.?labels.team.orValue('') != ''",
            "quantity(object.spec.containers[0].resources.limits['nvidia.com/gpu']).isGreaterThan(quantity('1'))",
            "sets.contains(['a', 'b'], ['a']) && 'x'.indexOf('x') == 0 && strings.quote('a') != ''",
            "object.spec.containers.exists(i, c, i > 0 && c.name.matches('^a'))",
            "{'a': 1}.transformMap(k, v, v + 1).size() == 1",
            "type(object) == map && ip('10.0.0.1').family() == 4",
            "authorizer.group('').resource('pods').check('create').allowed()",
        ] {
            assert_eq!(beyond(source), Vec::<String>::new(), "{source}");
        }
    }

    #[test]
    fn the_engines_additions_are_named() {
        assert_eq!(beyond("math.greatest(1, 2) == 2"), ["math.greatest"]);
        assert_eq!(beyond("base64.encode(b'a') != ''"), ["base64.encode"]);
        assert_eq!(beyond("cel.bind(x, 1, x + 1) == 2"), ["cel.bind"]);
        assert_eq!(
            beyond("lists.range(3).reverse().slice(0, 1).size() == 1"),
            ["lists.range", "reverse", "slice"]
        );
        assert_eq!(
            beyond("image.repository(object.spec.containers[0].image) != ''"),
            ["image.repository"]
        );
    }
}
