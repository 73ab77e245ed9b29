//! Kubernetes' strings library (cel-go `ext.Strings`), where kube-cel's
//! version differs from cel-go's: these functions are registered after
//! kube-cel's and replace them.
//!
//! - `indexOf(s, i)` and `lastIndexOf(s, i)`: an offset outside the string
//!   is an error (kube-cel clamped it); lists still go to kube-cel.
//! - `replace`, `split`, `substring`: an argument of the wrong type, or one
//!   too many, is an error (kube-cel ignored it); a negative `replace` limit
//!   replaces every occurrence, and `split('')` splits into characters, as
//!   Go does.
//! - `format`: the formatter of cel-go's strings extension version 4, which
//!   the CEL specification's conformance suite checks (kube-apiserver
//!   declares version 2, whose `%s` prints lists and maps as CEL literals:
//!   message texts differ, see docs/policies.md). `%s` prints bytes as text, timestamps and
//!   durations as `string()` gives them, lists and maps as
//!   `[a, 1]` and `{k: v}` with map entries sorted by their printed key;
//!   `%d`, `%f` and `%e` print NaN and infinities as `NaN`, `Infinity` and
//!   `-Infinity`; `%b`, `%o`, `%x` print a negative int with a minus sign.
//! - `string(x)`: the interpreter's conversion (timestamps in RFC 3339 UTC,
//!   durations in seconds, invalid UTF-8 an error), and kube-cel's for its
//!   IP and CIDR values.
//!
//! Indexes count code points, as cel-go's do. The interpreter charges every
//! call for the size of its receiver and result, as it does kube-cel's.
use kube_cel::cel::extractors::{Arguments, Function, This};
use kube_cel::cel::objects::{Key, TypeValue};
use kube_cel::cel::{Context, ExecutionError, FunctionContext, ResolveResult, Value};
use std::sync::Arc;

/// The largest precision `format` accepts (`%.100f`): a larger one would
/// only build a longer string of zeros.
const MAX_PRECISION: usize = 100;

pub(crate) fn register(ctx: &mut Context<'static>) {
    replace_with_fallback(ctx, "string", string);
    replace_with_fallback(ctx, "indexOf", index_of);
    replace_with_fallback(ctx, "lastIndexOf", last_index_of);
    ctx.add_function("replace", replace);
    ctx.add_function("split", split);
    ctx.add_function("substring", substring);
    ctx.add_function("format", format);
}

type Own = fn(&mut FunctionContext, Option<&Function>) -> ResolveResult;

/// Registers `own` under `name`, handing it the function registered there
/// before (kube-cel's), for the receivers it leaves to that one.
fn replace_with_fallback(ctx: &mut Context<'static>, name: &str, own: Own) {
    let previous = ctx.take_function(name);
    let function: Function = Box::new(move |ftx: &mut FunctionContext| own(ftx, previous.as_ref()));
    ctx.add_function(name, function);
}

fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn resolve_args(ftx: &FunctionContext) -> Result<Vec<Value>, ExecutionError> {
    ftx.args.iter().map(|arg| ftx.ptx.resolve(arg)).collect()
}

/// `string(x)` and `x.string()`.
fn string(ftx: &mut FunctionContext, previous: Option<&Function>) -> ResolveResult {
    let value = match (ftx.this.take(), ftx.args.len()) {
        (Some(value), 0) => value,
        (None, 1) => ftx.ptx.resolve(&ftx.args[0])?,
        (_, n) => {
            return Err(ExecutionError::InvalidArgumentCount {
                expected: 1,
                actual: n,
            })
        }
    };
    match (value, previous) {
        (value @ Value::Opaque(_), Some(previous)) => {
            ftx.this = Some(value);
            previous(ftx)
        }
        (value, _) => kube_cel::cel::functions::string(ftx, This(value)),
    }
}

/// The offset argument of `indexOf` and `lastIndexOf`, if given.
fn offset_arg(
    function: &str,
    args: &[Value],
) -> Result<(Arc<String>, Option<i64>), ExecutionError> {
    match args {
        [Value::String(sub)] => Ok((sub.clone(), None)),
        [Value::String(sub), Value::Int(offset)] => Ok((sub.clone(), Some(*offset))),
        [_] | [_, _] => Err(ExecutionError::NoSuchOverload),
        _ => Err(arg_count(function, "1 or 2", args)),
    }
}

/// A call with `args` where `counts` arguments are taken.
fn arg_count(function: &str, counts: &str, args: &[Value]) -> ExecutionError {
    error(
        function,
        format!("expected {counts} arguments, got {}", args.len()),
    )
}

fn out_of_range(function: &str, index: i64) -> ExecutionError {
    error(function, format!("index out of range: {index}"))
}

/// The string a method is called on, or, when it is called on something
/// else, the answer of `previous` (kube-cel's, which has the lists).
fn string_receiver(
    ftx: &mut FunctionContext,
    previous: Option<&Function>,
) -> Result<Arc<String>, ResolveResult> {
    match ftx.this.take() {
        Some(Value::String(text)) => Ok(text),
        other => {
            ftx.this = other;
            Err(match previous {
                Some(previous) if ftx.this.is_some() => previous(ftx),
                _ => Err(ExecutionError::NoSuchOverload),
            })
        }
    }
}

/// `s.indexOf(sub)`, `s.indexOf(sub, offset)`; lists go to kube-cel.
fn index_of(ftx: &mut FunctionContext, previous: Option<&Function>) -> ResolveResult {
    let text = match string_receiver(ftx, previous) {
        Ok(text) => text,
        Err(answer) => return answer,
    };
    let (sub, offset) = offset_arg("indexOf", &resolve_args(ftx)?)?;
    let offset = offset.unwrap_or(0);
    if sub.is_empty() {
        return Ok(Value::Int(offset));
    }
    let chars: Vec<char> = text.chars().collect();
    let sub: Vec<char> = sub.chars().collect();
    if offset < 0 || offset as usize >= chars.len() {
        return Err(out_of_range("indexOf", offset));
    }
    let found = (offset as usize..chars.len())
        .find(|&i| chars[i..].starts_with(&sub))
        .map_or(-1, |i| i as i64);
    Ok(Value::Int(found))
}

/// `s.lastIndexOf(sub)`, `s.lastIndexOf(sub, offset)` (the last index a
/// match may start at); lists go to kube-cel.
fn last_index_of(ftx: &mut FunctionContext, previous: Option<&Function>) -> ResolveResult {
    let text = match string_receiver(ftx, previous) {
        Ok(text) => text,
        Err(answer) => return answer,
    };
    let (sub, offset) = offset_arg("lastIndexOf", &resolve_args(ftx)?)?;
    let chars: Vec<char> = text.chars().collect();
    let len = chars.len() as i64;
    if sub.is_empty() {
        return Ok(Value::Int(offset.unwrap_or(len)));
    }
    let sub: Vec<char> = sub.chars().collect();
    // Without an offset every start is allowed (an empty string has none).
    let offset = match offset {
        Some(offset) if offset < 0 || offset >= len => {
            return Err(out_of_range("lastIndexOf", offset))
        }
        Some(offset) => offset,
        None => len - 1,
    };
    let last_start = offset.min(len - sub.len() as i64);
    let found = (0..=last_start)
        .rev()
        .find(|&i| chars[i as usize..].starts_with(&sub))
        .unwrap_or(-1);
    Ok(Value::Int(found))
}

/// `s.replace(old, new)`, `s.replace(old, new, n)`: at most `n`
/// replacements, all of them when `n` is negative.
fn replace(This(text): This<Arc<String>>, Arguments(args): Arguments) -> ResolveResult {
    let (old, new, limit) = match &args[..] {
        [Value::String(old), Value::String(new)] => (old, new, -1),
        [Value::String(old), Value::String(new), Value::Int(n)] => (old, new, *n),
        [_, _] | [_, _, _] => return Err(ExecutionError::NoSuchOverload),
        _ => return Err(arg_count("replace", "2 or 3", &args)),
    };
    let replaced = if limit < 0 {
        text.replace(old.as_str(), new)
    } else {
        text.replacen(old.as_str(), new, limit as usize)
    };
    Ok(Value::String(Arc::new(replaced)))
}

/// `s.split(sep)`, `s.split(sep, n)`: Go's `strings.SplitN` (at most `n`
/// parts, none when `n` is 0, all when negative; an empty separator splits
/// into characters).
fn split(This(text): This<Arc<String>>, Arguments(args): Arguments) -> ResolveResult {
    let (sep, limit) = match &args[..] {
        [Value::String(sep)] => (sep, -1),
        [Value::String(sep), Value::Int(n)] => (sep, *n),
        [_] | [_, _] => return Err(ExecutionError::NoSuchOverload),
        _ => return Err(arg_count("split", "1 or 2", &args)),
    };
    let parts: Vec<&str> = match (limit, sep.is_empty()) {
        (0, _) => Vec::new(),
        (n, true) => {
            let mut parts: Vec<&str> = Vec::new();
            let mut rest = text.as_str();
            while let Some(c) = rest.chars().next() {
                if n > 0 && parts.len() as i64 == n - 1 {
                    break;
                }
                parts.push(&rest[..c.len_utf8()]);
                rest = &rest[c.len_utf8()..];
            }
            if !rest.is_empty() {
                parts.push(rest);
            }
            parts
        }
        (n, false) if n < 0 => text.split(sep.as_str()).collect(),
        (n, false) => text.splitn(n as usize, sep.as_str()).collect(),
    };
    Ok(Value::List(Arc::new(
        parts
            .into_iter()
            .map(|p| Value::String(Arc::new(p.to_string())))
            .collect(),
    )))
}

/// `s.substring(start)`, `s.substring(start, end)`, in code points.
fn substring(This(text): This<Arc<String>>, Arguments(args): Arguments) -> ResolveResult {
    let chars: Vec<char> = text.chars().collect();
    let len = chars.len() as i64;
    let (start, end) = match &args[..] {
        [Value::Int(start)] => (*start, len),
        [Value::Int(start), Value::Int(end)] => (*start, *end),
        [_] | [_, _] => return Err(ExecutionError::NoSuchOverload),
        _ => return Err(arg_count("substring", "1 or 2", &args)),
    };
    if start > end {
        return Err(error(
            "substring",
            format!("invalid substring range. start: {start}, end: {end}"),
        ));
    }
    for index in [start, end] {
        if index < 0 || index > len {
            return Err(out_of_range("substring", index));
        }
    }
    Ok(Value::String(Arc::new(
        chars[start as usize..end as usize].iter().collect(),
    )))
}

/// `s.format(args)`.
fn format(This(template): This<Arc<String>>, args: Value) -> ResolveResult {
    let Value::List(args) = args else {
        return Err(ExecutionError::NoSuchOverload);
    };
    let fail = |message: String| error("format", message);
    let mut out = String::with_capacity(template.len());
    let mut rest = template.as_str();
    let mut next_arg = 0;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(after) = rest.strip_prefix('%') {
            out.push('%');
            rest = after;
            continue;
        }
        let arg = args
            .get(next_arg)
            .ok_or_else(|| fail(format!("index {next_arg} out of range")))?;
        next_arg += 1;
        if rest.is_empty() {
            return Err(fail("unexpected end of string".to_string()));
        }
        let mut precision = 6;
        if let Some(after) = rest.strip_prefix('.') {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            if digits == after.len() {
                return Err(fail(
                    "could not parse formatting clause: could not find end of precision specifier"
                        .to_string(),
                ));
            }
            precision = after[..digits]
                .parse()
                .ok()
                .filter(|p| *p <= MAX_PRECISION)
                .ok_or_else(|| {
                    fail(format!(
                        "could not parse formatting clause: invalid precision {:?}",
                        &after[..digits]
                    ))
                })?;
            rest = &after[digits..];
        }
        let verb = rest.chars().next().expect("checked not empty");
        rest = &rest[verb.len_utf8()..];
        let formatted = match verb {
            's' => format_string(arg),
            'd' => format_decimal(arg),
            'f' => format_float(arg, precision, false),
            'e' => format_float(arg, precision, true),
            'b' => format_radix(arg, 2),
            'o' => format_radix(arg, 8),
            'x' => format_hex(arg, false),
            'X' => format_hex(arg, true),
            _ => {
                return Err(fail(format!(
                    "could not parse formatting clause: unrecognized formatting clause \"{verb}\""
                )))
            }
        };
        out.push_str(&formatted.map_err(|e| fail(format!("error during formatting: {e}")))?);
    }
    out.push_str(rest);
    Ok(Value::String(Arc::new(out)))
}

/// The name cel-go gives a value's type in its error messages.
fn type_name(value: &Value) -> String {
    match value {
        Value::Null => "null_type".to_string(),
        Value::Float(_) => "double".to_string(),
        Value::Duration(_) => "google.protobuf.Duration".to_string(),
        Value::Timestamp(_) => "google.protobuf.Timestamp".to_string(),
        Value::Opaque(o) => o.runtime_type_name().to_string(),
        other => other.type_of().to_string(),
    }
}

/// NaN and the infinities as cel-go spells them, or `None`.
fn special_float(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("NaN")
    } else if f == f64::INFINITY {
        Some("Infinity")
    } else if f == f64::NEG_INFINITY {
        Some("-Infinity")
    } else {
        None
    }
}

/// `%s`.
fn format_string(value: &Value) -> Result<String, String> {
    let mut out = String::new();
    write_string(value, &mut out)?;
    Ok(out)
}

fn write_string(value: &Value, out: &mut String) -> Result<(), String> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(n) => out.push_str(&n.to_string()),
        Value::UInt(n) => out.push_str(&n.to_string()),
        // Go's `FormatFloat(f, 'f', -1, 64)`: the shortest digits that read
        // back as `f`, never an exponent; Rust's `Display` is the same.
        Value::Float(f) => match special_float(*f) {
            Some(name) => out.push_str(name),
            None => out.push_str(&f.to_string()),
        },
        Value::String(s) => out.push_str(s),
        Value::Bytes(b) => out.push_str(&String::from_utf8_lossy(b)),
        Value::Timestamp(t) => out.push_str(&kube_cel::cel::functions::time::format_timestamp(t)),
        Value::Duration(d) => out.push_str(&kube_cel::cel::functions::time::format_duration(d)),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(item, out)?;
            }
            out.push(']');
        }
        Value::Map(map) => {
            let mut entries = map
                .map
                .iter()
                .map(|(key, value)| {
                    let key = match key {
                        Key::Int(n) => n.to_string(),
                        Key::Uint(n) => n.to_string(),
                        Key::Bool(b) => b.to_string(),
                        Key::String(s) => s.to_string(),
                    };
                    Ok((key, format_string(value)?))
                })
                .collect::<Result<Vec<(String, String)>, String>>()?;
            entries.sort();
            out.push('{');
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(key);
                out.push_str(": ");
                out.push_str(value);
            }
            out.push('}');
        }
        Value::Opaque(o) if o.downcast_ref::<TypeValue>().is_some() => {
            if let Some(t) = o.downcast_ref::<TypeValue>() {
                out.push_str(t.name());
            }
        }
        other => {
            return Err(format!(
                "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given {}",
                type_name(other)
            ))
        }
    }
    Ok(())
}

/// `%d`.
fn format_decimal(value: &Value) -> Result<String, String> {
    match value {
        Value::Int(n) => Ok(n.to_string()),
        Value::UInt(n) => Ok(n.to_string()),
        Value::Float(f) => Ok(special_float(*f).map_or_else(|| f.to_string(), str::to_string)),
        other => Err(format!(
            "decimal clause can only be used on ints, uints, and doubles, was given {}",
            type_name(other)
        )),
    }
}

/// `%f` and `%e` (Go's `%.Nf` and `%1.Ne`: the exponent signed and of at
/// least two digits).
fn format_float(value: &Value, precision: usize, scientific: bool) -> Result<String, String> {
    let f = match value {
        Value::Int(n) => *n as f64,
        Value::UInt(n) => *n as f64,
        Value::Float(f) => *f,
        other => {
            let clause = if scientific {
                "scientific"
            } else {
                "fixed-point"
            };
            return Err(format!(
                "{clause} clause can only be used on ints, uints, and doubles, was given {}",
                type_name(other)
            ));
        }
    };
    if let Some(name) = special_float(f) {
        return Ok(name.to_string());
    }
    if !scientific {
        return Ok(format!("{f:.precision$}"));
    }
    let rust = format!("{f:.precision$e}");
    let (mantissa, exponent) = rust.split_once('e').unwrap_or((&rust, "0"));
    let (sign, digits) = match exponent.strip_prefix('-') {
        Some(digits) => ('-', digits),
        None => ('+', exponent),
    };
    Ok(format!("{mantissa}e{sign}{digits:0>2}"))
}

/// `%b` and `%o`.
fn format_radix(value: &Value, radix: u32) -> Result<String, String> {
    let digits = |n: u64| {
        if radix == 2 {
            format!("{n:b}")
        } else {
            format!("{n:o}")
        }
    };
    match value {
        Value::Int(n) if *n < 0 => Ok(format!("-{}", digits(n.unsigned_abs()))),
        Value::Int(n) => Ok(digits(*n as u64)),
        Value::UInt(n) => Ok(digits(*n)),
        Value::Bool(b) if radix == 2 => Ok(if *b { "1" } else { "0" }.to_string()),
        other if radix == 2 => Err(format!(
            "only integers and bools can be formatted as binary, was given {}",
            type_name(other)
        )),
        other => Err(format!(
            "octal clause can only be used on integers, was given {}",
            type_name(other)
        )),
    }
}

/// `%x` and `%X`.
fn format_hex(value: &Value, upper: bool) -> Result<String, String> {
    let hex = |n: u64| {
        if upper {
            format!("{n:X}")
        } else {
            format!("{n:x}")
        }
    };
    let bytes = |b: &[u8]| -> String {
        b.iter()
            .map(|byte| {
                if upper {
                    format!("{byte:02X}")
                } else {
                    format!("{byte:02x}")
                }
            })
            .collect()
    };
    match value {
        Value::Int(n) if *n < 0 => Ok(format!("-{}", hex(n.unsigned_abs()))),
        Value::Int(n) => Ok(hex(*n as u64)),
        Value::UInt(n) => Ok(hex(*n)),
        Value::String(s) => Ok(bytes(s.as_bytes())),
        Value::Bytes(b) => Ok(bytes(b)),
        other => Err(format!(
            "only integers, byte buffers, and strings can be formatted as hex, was given {}",
            type_name(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_cel::cel::Program;
    use kube_cel::KubeCelExt;

    fn eval(expr: &str) -> Result<Value, ExecutionError> {
        let mut ctx = Context::default().with_all();
        register(&mut ctx);
        Program::compile(expr).expect("compiles").execute(&ctx)
    }

    fn string_of(expr: &str) -> String {
        match eval(expr) {
            Ok(Value::String(s)) => s.to_string(),
            other => panic!("{expr}: {other:?}"),
        }
    }

    #[test]
    fn index_of_counts_code_points_and_refuses_offsets_outside() {
        for (expr, want) in [
            ("'hello mellow'.indexOf('')", 0),
            ("'hello mellow'.indexOf('ello')", 1),
            ("'hello mellow'.indexOf('jello')", -1),
            ("'hello mellow'.indexOf('', 2)", 2),
            ("'hello mellow'.indexOf('ello', 2)", 7),
            ("'ta©o©αT'.indexOf('©α', 2)", 4),
            ("'hello mellow'.lastIndexOf('')", 12),
            ("'hello mellow'.lastIndexOf('ello')", 7),
            ("'hello mellow'.lastIndexOf('ello', 6)", 1),
            ("'hello mellow'.lastIndexOf('ello', 7)", 7),
            ("'ta©o©αT'.lastIndexOf('©', 3)", 2),
            ("'abc'.lastIndexOf('abcd')", -1),
            ("''.lastIndexOf('@@')", -1),
            ("[1, 2, 3, 2].indexOf(2)", 1),
            ("[1, 2, 3, 2].lastIndexOf(2)", 3),
        ] {
            assert_eq!(eval(expr), Ok(Value::Int(want)), "{expr}");
        }
        for expr in [
            "'tacocat'.indexOf('a', 30)",
            "'tacocat'.indexOf('a', -1)",
            "'tacocat'.lastIndexOf('a', -1)",
            "'tacocat'.lastIndexOf('a', 30)",
            "'42'.indexOf('4', '0')",
            "'42'.indexOf(4)",
            "'42'.indexOf('4', 0, 1)",
            "42.indexOf('4')",
            "'42'.lastIndexOf('4', '0')",
        ] {
            assert!(eval(expr).is_err(), "{expr}");
        }
    }

    #[test]
    fn replace_split_substring_check_their_arguments() {
        for (expr, want) in [
            ("'hello hello'.replace('he', 'we')", "wello wello"),
            ("'hello hello'.replace('he', 'we', -1)", "wello wello"),
            ("'hello hello'.replace('he', 'we', 1)", "wello hello"),
            ("'hello hello'.replace('he', 'we', 0)", "hello hello"),
            ("'tacocat'.substring(4)", "cat"),
            ("'tacocat'.substring(0, 4)", "taco"),
            ("'ta©o©αT'.substring(2, 6)", "©o©α"),
            ("'tacocat'.substring(7)", ""),
        ] {
            assert_eq!(string_of(expr), want, "{expr}");
        }
        for (expr, want) in [
            ("'a b c'.split(' ')", vec!["a", "b", "c"]),
            ("'a b c'.split(' ', 0)", vec![]),
            ("'a b c'.split(' ', 1)", vec!["a b c"]),
            ("'a b c'.split(' ', 2)", vec!["a", "b c"]),
            ("'a b c'.split(' ', -1)", vec!["a", "b", "c"]),
            ("'a©c'.split('')", vec!["a", "©", "c"]),
            ("'a©c'.split('', 2)", vec!["a", "©c"]),
            ("''.split('')", vec![]),
            ("''.split(',')", vec![""]),
        ] {
            let want: Vec<Value> = want
                .into_iter()
                .map(|s| Value::String(Arc::new(s.to_string())))
                .collect();
            assert_eq!(eval(expr), Ok(Value::List(Arc::new(want))), "{expr}");
        }
        for expr in [
            "'42'.replace('2', '1', '1')",
            "'42'.replace(2, '1')",
            "'42'.replace('2', '1', 1, false)",
            "42.replace('2', '1')",
            "'42'.split('2', '1')",
            "'42'.split(2)",
            "'42'.split('2', 1, 1)",
            "42.split('2')",
            "'tacocat'.substring(0, false)",
            "'tacocat'.substring(true, 3)",
            "'hello'.substring(1, 2, 3)",
            "'tacocat'.substring(40)",
            "'tacocat'.substring(-1)",
            "'tacocat'.substring(1, 50)",
            "'tacocat'.substring(4, 3)",
        ] {
            assert!(eval(expr).is_err(), "{expr}");
        }
    }

    #[test]
    fn format_is_cel_gos() {
        for (expr, want) in [
            (r#""%s %d %%".format(["a", 1])"#, "a 1 %"),
            (r#""%e".format([double("NaN")])"#, "NaN"),
            (r#""%e".format([double("-Infinity")])"#, "-Infinity"),
            (r#""%d".format([double("Infinity")])"#, "Infinity"),
            (r#""%f".format([double("-Infinity")])"#, "-Infinity"),
            (r#""%d".format([2.5])"#, "2.5"),
            (r#""%.6e".format([1052.032911275])"#, "1.052033e+03"),
            (r#""%e".format([2])"#, "2.000000e+00"),
            (r#""%.2e".format([1.5e-300])"#, "1.50e-300"),
            (r#""%.3f".format([1.2345])"#, "1.234"),
            (r#""%.0f".format([2.5])"#, "2"),
            (r#""%.0f".format([1.5])"#, "2"),
            (r#""%.3f".format([-123.4999])"#, "-123.500"),
            (r#""%s".format([b"xyz"])"#, "xyz"),
            (
                r#""%s".format([timestamp("2023-02-03T23:31:20+00:00")])"#,
                "2023-02-03T23:31:20Z",
            ),
            (r#""%s".format([duration("1h45m47s")])"#, "6347s"),
            (
                r#""%s".format([["abc", 3.14, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20Z")]])"#,
                "[abc, 3.14, null, [9, 8, 7, 6], 2023-02-03T23:31:20Z]",
            ),
            (
                r#""%s".format([{"key1": b"xyz", "key5": null, "key2": duration("2h"), "key4": true, "key3": 2.71828}])"#,
                "{key1: xyz, key2: 7200s, key3: 2.71828, key4: true, key5: null}",
            ),
            (
                r#""%s".format([{1: "value1", uint(2): "value2", true: double("NaN")}])"#,
                "{1: value1, 2: value2, true: NaN}",
            ),
            (
                r#""%s".format([[double("NaN"), double("Infinity"), 1.0]])"#,
                "[NaN, Infinity, 1]",
            ),
            (
                r#""%b %o %x %X".format([-5, -8, -255, 255u])"#,
                "-101 -10 -ff FF",
            ),
            (r#""%b".format([true])"#, "1"),
            (r#""%x".format(["Hello"])"#, "48656c6c6f"),
            ("'ta©o'.format([])", "ta©o"),
        ] {
            assert_eq!(string_of(expr), want, "{expr}");
        }
        for expr in [
            r#""%a".format([1])"#,
            r#""%d %d %d".format([0, 1])"#,
            r#""%b".format(["abc"])"#,
            r#""%d".format([duration("30m2s")])"#,
            r#""%o".format(["a string"])"#,
            r#""%x".format([0.5])"#,
            r#""%E".format([0.5])"#,
            r#""%d".format([null])"#,
            r#""%f".format([null])"#,
            r#""%e".format([null])"#,
            r#""%".format([1])"#,
            r#""%.3".format([1.0])"#,
            r#""%.1000f".format([1.0])"#,
            r#""%s".format("x")"#,
        ] {
            assert!(eval(expr).is_err(), "{expr}");
        }
    }

    #[test]
    fn string_converts_as_the_interpreter_and_keeps_kube_cels_ip_values() {
        for (expr, want) in [
            (
                "string(timestamp('2009-02-13T23:31:30Z'))",
                "2009-02-13T23:31:30Z",
            ),
            ("string(duration('1000000s'))", "1000000s"),
            ("string(true)", "true"),
            ("string(b'abc')", "abc"),
            ("'x'.string()", "x"),
            ("string(ip('10.0.0.1'))", "10.0.0.1"),
            ("cidr('10.0.0.0/8').string()", "10.0.0.0/8"),
        ] {
            assert_eq!(string_of(expr), want, "{expr}");
        }
        assert!(eval(r"string(b'\000\xff')").is_err());
    }
}
