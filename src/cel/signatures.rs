//! The call checks kube-apiserver's type checker makes when a policy is
//! created, for what an untyped interpreter can know without types: every
//! function called exists, and is given a number of arguments one of its
//! overloads takes.
use super::limits::Call;
use super::CompileError;

/// Functions whose argument counts are checked: name (namespace included),
/// whether it is called on a target (`x.f(..)`) or not (`f(..)`), and the
/// argument counts its overloads take (the target not counted). Functions
/// not listed are only checked to exist.
const ARITIES: &[(&str, bool, &[usize])] = &[
    // Macros ([`MACRO_COUNT`] of them): a call left with one of these
    // names had the wrong count.
    ("has", false, &[1]),
    ("all", true, &[2, 3]),
    ("exists", true, &[2, 3]),
    ("existsOne", true, &[2, 3]),
    ("exists_one", true, &[2, 3]),
    ("map", true, &[2, 3]),
    ("filter", true, &[2]),
    ("transformList", true, &[3, 4]),
    ("transformMap", true, &[3, 4]),
    ("transformMapEntry", true, &[3, 4]),
    ("cel.bind", false, &[3]),
    ("optMap", true, &[2]),
    ("optFlatMap", true, &[2]),
    // Standard library.
    ("size", false, &[1]),
    ("size", true, &[0]),
    ("contains", true, &[1]),
    ("startsWith", true, &[1]),
    ("endsWith", true, &[1]),
    ("matches", true, &[1]),
    ("matches", false, &[2]),
    ("int", false, &[1]),
    ("uint", false, &[1]),
    ("double", false, &[1]),
    ("string", false, &[1]),
    ("bytes", false, &[1]),
    ("duration", false, &[1]),
    ("timestamp", false, &[1]),
    ("optional.of", false, &[1]),
    ("optional.none", false, &[0]),
    ("optional.ofNonZeroValue", false, &[1]),
    ("hasValue", true, &[0]),
    ("value", true, &[0]),
    ("or", true, &[1]),
    ("orValue", true, &[1]),
    // Kubernetes strings (ext.Strings v2), lists and regex libraries.
    ("charAt", true, &[1]),
    ("indexOf", true, &[1, 2]),
    ("lastIndexOf", true, &[1, 2]),
    ("lowerAscii", true, &[0]),
    ("upperAscii", true, &[0]),
    ("replace", true, &[2, 3]),
    ("split", true, &[1, 2]),
    ("substring", true, &[1, 2]),
    ("trim", true, &[0]),
    ("join", true, &[0, 1]),
    ("isSorted", true, &[0]),
    ("sum", true, &[0]),
    ("min", true, &[0]),
    ("max", true, &[0]),
    ("find", true, &[1]),
    ("findAll", true, &[1, 2]),
    ("sets.contains", false, &[2]),
    ("sets.equivalent", false, &[2]),
    ("sets.intersects", false, &[2]),
    // Quantity, URL, IP, CIDR, semver.
    ("quantity", false, &[1]),
    ("isQuantity", false, &[1]),
    ("isGreaterThan", true, &[1]),
    ("isLessThan", true, &[1]),
    ("compareTo", true, &[1]),
    ("asInteger", true, &[0]),
    ("isInteger", true, &[0]),
    ("asApproximateFloat", true, &[0]),
    ("url", false, &[1]),
    ("isURL", false, &[1]),
    ("getScheme", true, &[0]),
    ("getHost", true, &[0]),
    ("getHostname", true, &[0]),
    ("getPort", true, &[0]),
    ("getEscapedPath", true, &[0]),
    ("getQuery", true, &[0]),
    ("ip", false, &[1]),
    ("isIP", false, &[1]),
    ("ip.isCanonical", false, &[1]),
    ("cidr", false, &[1]),
    ("isCIDR", false, &[1]),
    ("containsIP", true, &[1]),
    ("containsCIDR", true, &[1]),
    ("semver", false, &[1, 2]),
    ("isSemver", false, &[1, 2]),
];

/// Macros (the first [`MACRO_COUNT`] entries of [`ARITIES`]): expanded by
/// the parser, never registered as functions, so a call left with such a
/// name had a wrong argument count.
const MACRO_COUNT: usize = 13;

fn is_macro(name: &str) -> bool {
    ARITIES[..MACRO_COUNT].iter().any(|(n, _, _)| *n == name)
}

/// Checks every call of `calls` (from the expression `source`): the
/// function exists (`has_function`) and takes that many arguments.
pub(super) fn check_calls(
    calls: &[Call],
    source: &str,
    has_function: &dyn Fn(&str) -> bool,
) -> Result<(), CompileError> {
    for call in calls {
        // `ns.f(..)` is the function `ns.f` when there is one, else `f`
        // called on the variable `ns`, as the interpreter resolves it.
        let qualified = call
            .namespace
            .as_ref()
            .map(|ns| format!("{ns}.{}", call.function))
            .filter(|q| has_function(q) || is_macro(q));
        let (name, has_target) = match &qualified {
            Some(q) => (q.as_str(), false),
            None => (call.function.as_str(), call.has_target),
        };
        let arities = ARITIES
            .iter()
            .find(|(n, t, _)| *n == name && *t == has_target)
            .map(|(_, _, a)| *a);
        let at = |message: String| {
            let (line, column) = position(source, &call.function, call.has_target);
            CompileError {
                message,
                line,
                column,
            }
        };
        if !is_macro(name) && !has_function(name) {
            return Err(at(format!(
                "undeclared reference to '{name}': no such function"
            )));
        }
        if let Some(arities) = arities.filter(|a| !a.contains(&call.args)) {
            let counts = arities
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" or ");
            let form = if has_target {
                format!("<target>.{name}(..)")
            } else {
                format!("{name}(..)")
            };
            return Err(at(format!(
                "found no matching overload for '{name}': {form} takes {counts} argument(s), not {}",
                call.args
            )));
        }
    }
    Ok(())
}

/// 1-based line and column of the first call of `function` in `source`
/// (`.function(` when called on a target), if it can be found.
fn position(source: &str, function: &str, has_target: bool) -> (Option<usize>, Option<usize>) {
    let bytes = source.as_bytes();
    let found = source.match_indices(function).find(|(i, _)| {
        let before = source[..*i].trim_end();
        let after = source[i + function.len()..].trim_start();
        let boundary = i.checked_sub(1).is_none_or(|p| {
            let c = bytes[p];
            !(c.is_ascii_alphanumeric() || c == b'_')
        });
        boundary && after.starts_with('(') && (!has_target || before.ends_with('.'))
    });
    let Some((offset, _)) = found else {
        return (None, None);
    };
    let line_start = source[..offset].rfind('\n').map_or(0, |p| p + 1);
    let line = source[..offset].matches('\n').count() + 1;
    let column = source[line_start..offset].chars().count() + 1;
    (Some(line), Some(column))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_macros_are_the_first_entries() {
        let last_macro = (ARITIES[MACRO_COUNT - 1].0, ARITIES[MACRO_COUNT].0);
        assert_eq!(last_macro, ("optFlatMap", "size"));
    }

    #[test]
    fn positions_point_at_the_call() {
        assert_eq!(
            position("a.startsWith('x')", "startsWith", true),
            (Some(1), Some(3))
        );
        assert_eq!(position("x ||\n  foo(1)", "foo", false), (Some(2), Some(3)));
        assert_eq!(
            position("afoo(1) || foo(2)", "foo", false),
            (Some(1), Some(12))
        );
    }
}
