use crate::context::Context;
use crate::magic::{Arguments, This};
use crate::objects::{KeyRef, OptionalValue, Value, ValueType};
use crate::parser::Expression;
use crate::resolvers::Resolver;
use crate::ExecutionError;
use std::cmp::Ordering;
use std::convert::TryInto;
use std::sync::Arc;

type Result<T> = std::result::Result<T, ExecutionError>;

/// `FunctionContext` is a context object passed to functions when they are called.
///
/// It contains references to the target object (if the function is called as
/// a method), the program context ([`Context`]) which gives functions access
/// to variables, and the arguments to the function call.
#[derive(Clone)]
pub struct FunctionContext<'context, 'call: 'context> {
    pub name: &'call str,
    pub this: Option<Value>,
    pub ptx: &'context Context<'context>,
    pub args: &'call [Expression],
    pub arg_idx: usize,
}

impl<'context, 'call: 'context> FunctionContext<'context, 'call> {
    pub fn new(
        name: &'call str,
        this: Option<Value>,
        ptx: &'context Context<'context>,
        args: &'call [Expression],
    ) -> Self {
        Self {
            name,
            this,
            ptx,
            args,
            arg_idx: 0,
        }
    }

    /// Resolves the given expression using the program's [`Context`].
    pub fn resolve<R>(&self, resolver: R) -> Result<Value>
    where
        R: Resolver,
    {
        resolver.resolve(self)
    }

    /// Returns an execution error for the currently execution function.
    pub fn error<M: ToString>(&self, message: M) -> ExecutionError {
        ExecutionError::function_error(self.name, message)
    }
}

/// Calculates the size of either the target, or the provided args depending on how
/// the function is called.
///
/// If called as a method, the target will be used. If called as a function, the
/// first argument will be used.
///
/// The following [`Value`] variants are supported:
/// * [`Value::List`]
/// * [`Value::Map`]
/// * [`Value::String`]
/// * [`Value::Bytes`]
///
/// # Examples
/// ```skip
/// size([1, 2, 3]) == 3
/// ```
/// ```skip
/// 'foobar'.size() == 6
/// ```
pub fn size(ftx: &FunctionContext, This(this): This<Value>) -> Result<i64> {
    let size = match this {
        Value::List(l) => l.len(),
        Value::Map(m) => m.map.len(),
        // gpu-admission patch: code points, not bytes, as the spec says.
        Value::String(s) => s.chars().count(),
        Value::Bytes(b) => b.len(),
        value => {
            let of = cel_type_name(&value);
            return Err(ftx.error(format!("cannot determine the size of {of}")));
        }
    };
    Ok(size as i64)
}

/// Returns true if the target contains the provided argument. The actual behavior
/// depends mainly on the type of the target.
///
/// The following [`Value`] variants are supported:
/// * [`Value::List`] - Returns true if the list contains the provided value.
/// * [`Value::Map`] - Returns true if the map contains the provided key.
/// * [`Value::String`] - Returns true if the string contains the provided substring.
/// * [`Value::Bytes`] - Returns true if the bytes contain the provided byte.
///
/// # Example
///
/// ## List
/// ```cel
/// [1, 2, 3].contains(1) == true
/// ```
///
/// ## Map
/// ```cel
/// {"a": 1, "b": 2, "c": 3}.contains("a") == true
/// ```
///
/// ## String
/// ```cel
/// "abc".contains("b") == true
/// ```
///
/// ## Bytes
/// ```cel
/// b"abc".contains(b"c") == true
/// ```
pub fn contains(This(this): This<Value>, arg: Value) -> Result<Value> {
    Ok(match this {
        Value::List(v) => v.contains(&arg),
        Value::Map(v) => {
            v.contains_key(&KeyRef::try_from(&arg).map_err(ExecutionError::UnsupportedKeyType)?)
        }
        Value::String(s) => {
            if let Value::String(arg) = arg {
                s.contains(arg.as_str())
            } else {
                false
            }
        }
        Value::Bytes(b) => {
            if let Value::Bytes(arg) = arg {
                let s = arg.as_slice();
                b.windows(arg.len()).any(|w| w == s)
            } else {
                false
            }
        }
        _ => false,
    }
    .into())
}

// Performs a type conversion on the target. The following conversions are currently
// supported:
// * `string` - Returns a copy of the target string.
// * `timestamp` - Returns the timestamp in RFC3339 format, in UTC (`Z`), with
//   as many fractional digits as needed.
// * `duration` - Returns the duration in seconds, like "1000000s" or "1.5s".
// * `int` - Returns the integer value of the target.
// * `uint` - Returns the unsigned integer value of the target.
// * `float` - Returns the float value of the target.
// * `bool` - Returns "true" or "false".
// * `bytes` - Returns the bytes as text; an error unless they are UTF-8.
//
// gpu-admission patch: timestamps and durations are spelled as cel-go spells
// them (upstream gave `+00:00` and Go's `1h30m0s` form), `bool` converts, and
// bytes that are not UTF-8 are an error instead of being replaced by U+FFFD.
pub fn string(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
    Ok(match this {
        Value::String(v) => Value::String(v.clone()),
        #[cfg(feature = "chrono")]
        Value::Timestamp(t) => Value::String(time::format_timestamp(&t).into()),
        #[cfg(feature = "chrono")]
        Value::Duration(v) => Value::String(crate::duration::format_duration(&v).into()),
        Value::Int(v) => Value::String(v.to_string().into()),
        Value::UInt(v) => Value::String(v.to_string().into()),
        Value::Float(v) => Value::String(v.to_string().into()),
        Value::Bool(v) => Value::String(v.to_string().into()),
        Value::Bytes(v) => match std::str::from_utf8(v.as_slice()) {
            Ok(text) => Value::String(Arc::new(text.to_string())),
            Err(e) => return Err(ftx.error(format!("invalid UTF-8 in bytes: {e}"))),
        },
        v => return Err(cannot_convert(ftx, &v, "string")),
    })
}

/// gpu-admission patch: a conversion that fails names the value's type,
/// never the value: that may hold a Secret's data, and a map's keys came
/// out in hash order, so the message differed from run to run.
fn cannot_convert(ftx: &FunctionContext, v: &Value, to: &str) -> ExecutionError {
    let from = cel_type_name(v);
    ftx.error(format!("cannot convert {from} to {to}"))
}

/// The CEL name of `v`'s type (`double` for a float), for messages that
/// must not quote the value.
fn cel_type_name(v: &Value) -> String {
    match v.type_of() {
        ValueType::Float => "double".to_string(),
        other => other.to_string(),
    }
}

/// `bytes(string)` and `bytes(bytes)`.
///
/// gpu-admission patch: bytes convert to themselves (upstream took only a
/// string).
pub fn bytes(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
    Ok(match this {
        Value::String(v) => Value::Bytes(v.as_bytes().to_vec().into()),
        Value::Bytes(v) => Value::Bytes(v),
        v => return Err(cannot_convert(ftx, &v, "bytes")),
    })
}

/// `bool(bool)` and `bool(string)`: the strings Go's `strconv.ParseBool`
/// reads (`1`, `t`, `true`, `TRUE`, `True` and `0`, `f`, `false`, `FALSE`,
/// `False`); any other string is an error.
///
/// gpu-admission patch: a conversion upstream lacks (cel-spec conversions
/// `bool`, `identity/bool`).
pub fn bool(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
    Ok(match this {
        Value::Bool(v) => Value::Bool(v),
        Value::String(v) => match v.as_str() {
            "1" | "t" | "true" | "TRUE" | "True" => Value::Bool(true),
            "0" | "f" | "false" | "FALSE" | "False" => Value::Bool(false),
            other => {
                return Err(ftx.error(format!("type conversion error: {other:?} is not a bool")))
            }
        },
        v => return Err(cannot_convert(ftx, &v, "bool")),
    })
}

// Performs a type conversion on the target.
pub fn double(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
    Ok(match this {
        Value::String(v) => v
            .parse::<f64>()
            .map(Value::Float)
            .map_err(|e| ftx.error(format!("string parse error: {e}")))?,
        Value::Float(v) => Value::Float(v),
        Value::Int(v) => Value::Float(v as f64),
        Value::UInt(v) => Value::Float(v as f64),
        v => return Err(cannot_convert(ftx, &v, "double")),
    })
}

/// 2^63 and 2^64 as doubles: the first double beyond `i64::MAX` and
/// `u64::MAX` (which a double cannot hold).
const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;
const TWO_TO_64: f64 = 18_446_744_073_709_551_616.0;

// Performs a type conversion on the target.
//
// gpu-admission patch: a double converts only when its integer part fits,
// as in cel-go: NaN, infinities, negatives and 2^64 or more are range
// errors. Upstream compared with `u64::MAX as f64`, which is 2^64 itself,
// so 2^64 and NaN saturated instead of failing.
pub fn uint(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
    Ok(match this {
        Value::String(v) => v
            .parse::<u64>()
            .map(Value::UInt)
            .map_err(|e| ftx.error(format!("string parse error: {e}")))?,
        Value::Float(v) => {
            if !(v >= 0.0 && v < TWO_TO_64) {
                return Err(ftx.error("unsigned integer overflow: double out of range"));
            }
            Value::UInt(v as u64)
        }
        Value::Int(v) => Value::UInt(
            v.try_into()
                .map_err(|_| ftx.error("unsigned integer overflow"))?,
        ),
        Value::UInt(v) => Value::UInt(v),
        v => return Err(cannot_convert(ftx, &v, "uint")),
    })
}

// Performs a type conversion on the target.
//
// gpu-admission patch: a double converts only when strictly between
// -2^63 and 2^63 (cel-spec: "(minInt, maxInt) non-inclusive"); NaN and
// infinities are range errors. Upstream compared with `i64::MAX as f64`,
// which is 2^63 itself, so 2^63, -2^63 and NaN saturated instead of
// failing. A timestamp converts to its Unix time in seconds.
pub fn int(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
    Ok(match this {
        Value::String(v) => v
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|e| ftx.error(format!("string parse error: {e}")))?,
        Value::Float(v) => {
            if !(v > -TWO_TO_63 && v < TWO_TO_63) {
                return Err(ftx.error("integer overflow: double out of range"));
            }
            Value::Int(v as i64)
        }
        Value::Int(v) => Value::Int(v),
        Value::UInt(v) => Value::Int(v.try_into().map_err(|_| ftx.error("integer overflow"))?),
        #[cfg(feature = "chrono")]
        Value::Timestamp(t) => Value::Int(t.timestamp()),
        v => return Err(cannot_convert(ftx, &v, "int")),
    })
}

pub fn optional_none(ftx: &FunctionContext) -> Result<Value> {
    if ftx.this.is_some() || !ftx.args.is_empty() {
        return Err(ftx.error("unsupported function"));
    }
    Ok(Value::Opaque(Arc::new(OptionalValue::none())))
}

pub fn optional_of(ftx: &FunctionContext, value: Value) -> Result<Value> {
    if ftx.this.is_some() {
        return Err(ftx.error("unsupported function"));
    }
    Ok(Value::Opaque(Arc::new(OptionalValue::of(value))))
}

pub fn optional_of_non_zero_value(ftx: &FunctionContext, value: Value) -> Result<Value> {
    if ftx.this.is_some() {
        return Err(ftx.error("unsupported function"));
    }
    if value.is_zero() {
        Ok(Value::Opaque(Arc::new(OptionalValue::none())))
    } else {
        Ok(Value::Opaque(Arc::new(OptionalValue::of(value))))
    }
}
pub fn optional_value(This(this): This<Value>) -> Result<Value> {
    <&OptionalValue>::try_from(&this)?
        .value()
        .cloned()
        .ok_or_else(|| ExecutionError::function_error("value", "optional.none() dereference"))
}

pub fn optional_has_value(This(this): This<Value>) -> Result<bool> {
    Ok(<&OptionalValue>::try_from(&this)?.value().is_some())
}

pub fn optional_or_optional(This(this): This<Value>, other: Value) -> Result<Value> {
    let this_opt: &OptionalValue = (&this).try_into()?;
    match this_opt.value() {
        Some(_) => Ok(this),
        None => {
            let _: &OptionalValue = (&other).try_into()?;
            Ok(other)
        }
    }
}

pub fn optional_or_value(This(this): This<Value>, other: Value) -> Result<Value> {
    let this_opt: &OptionalValue = (&this).try_into()?;
    match this_opt.value() {
        Some(v) => Ok(v.clone()),
        None => Ok(other),
    }
}

/// Returns true if a string starts with another string.
///
/// # Example
/// ```cel
/// "abc".startsWith("a") == true
/// ```
pub fn starts_with(This(this): This<Arc<String>>, prefix: Arc<String>) -> bool {
    this.starts_with(prefix.as_str())
}

/// Returns true if a string ends with another string.
///
/// # Example
/// ```cel
/// "abc".endsWith("c") == true
/// ```
pub fn ends_with(This(this): This<Arc<String>>, suffix: Arc<String>) -> bool {
    this.ends_with(suffix.as_str())
}

/// Returns true if a string matches the regular expression.
///
/// # Example
/// ```cel
/// "abc".matches("^[a-z]*$") == true
/// ```
#[cfg(feature = "regex")]
pub fn matches(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    regex: Arc<String>,
) -> Result<bool> {
    match with_regex(&regex, |re| re.is_match(&this)) {
        Ok(matched) => Ok(matched),
        Err(err) => Err(ftx.error(format!("'{regex}' not a valid regex:\n{err}"))),
    }
}

/// gpu-admission patch: each thread keeps the patterns it compiled (up to
/// 256; all are dropped beyond that), since policies call `matches` with the
/// same constant pattern on every request and compiling dominates the call.
/// Per thread, so that no lock is taken on the way to a match. Public so
/// that a host's own regex functions (Kubernetes' `find`, `findAll`) share
/// the cache.
#[cfg(feature = "regex")]
pub fn with_regex<R>(
    pattern: &str,
    f: impl FnOnce(&regex::Regex) -> R,
) -> std::result::Result<R, regex::Error> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    const MAX: usize = 256;
    thread_local! {
        static REGEXES: RefCell<HashMap<String, regex::Regex>> = RefCell::new(HashMap::new());
    }
    REGEXES.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(re) = cache.get(pattern) {
            return Ok(f(re));
        }
        let re = regex::Regex::new(pattern)?;
        let result = f(&re);
        if cache.len() >= MAX {
            cache.clear();
        }
        cache.insert(pattern.to_string(), re);
        Ok(result)
    })
}

#[cfg(feature = "chrono")]
pub use time::duration;
#[cfg(feature = "chrono")]
pub use time::timestamp;

#[cfg(feature = "chrono")]
pub mod time {
    use super::{FunctionContext, Result};
    use crate::magic::{Arguments, This};
    use crate::{ExecutionError, Value};
    use chrono::{DateTime, Datelike, FixedOffset, NaiveDateTime, Timelike};

    /// Duration parses the provided argument into a [`Value::Duration`] value.
    ///
    /// The argument must be string, and must be in the format of a duration. See
    /// the [`crate::duration::parse_duration`] documentation for more
    /// information on the supported formats.
    ///
    /// # Examples
    /// - `1h` parses as 1 hour
    /// - `1.5h` parses as 1 hour and 30 minutes
    /// - `1h30m` parses as 1 hour and 30 minutes
    /// - `1h30m1s` parses as 1 hour, 30 minutes, and 1 second
    /// - `1ms` parses as 1 millisecond
    /// - `1.5ms` parses as 1 millisecond and 500 microseconds
    /// - `1ns` parses as 1 nanosecond
    /// - `1.5ns` parses as 1 nanosecond (sub-nanosecond durations not supported)
    ///
    /// gpu-admission patch: a duration converts to itself, and a duration
    /// beyond an int64 count of nanoseconds is an error.
    pub fn duration(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
        match this {
            Value::String(text) => crate::duration::parse_duration(&text)
                .map(Value::Duration)
                .map_err(|e| ftx.error(e)),
            Value::Duration(d) if crate::duration::in_range(&d) => Ok(Value::Duration(d)),
            Value::Duration(_) => Err(ftx.error("duration out of range")),
            v => Err(super::cannot_convert(ftx, &v, "duration")),
        }
    }

    /// Timestamp parses the provided argument into a [`Value::Timestamp`] value.
    ///
    /// gpu-admission patch: also `timestamp(timestamp)` (itself) and
    /// `timestamp(int)` (Unix time in seconds); a result outside
    /// 0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999999Z is an error
    /// (chrono reads the year 0000), and the value is kept in UTC.
    pub fn timestamp(ftx: &FunctionContext, This(this): This<Value>) -> Result<Value> {
        let ts = match this {
            Value::String(text) => {
                DateTime::parse_from_rfc3339(&text).map_err(|e| ftx.error(e.to_string()))?
            }
            Value::Timestamp(ts) => ts,
            Value::Int(secs) => DateTime::from_timestamp(secs, 0)
                .ok_or_else(|| ftx.error("timestamp out of range"))?
                .fixed_offset(),
            v => return Err(super::cannot_convert(ftx, &v, "timestamp")),
        };
        if !crate::common::types::timestamp::in_range(&ts) {
            return Err(ftx.error("timestamp out of range"));
        }
        Ok(Value::Timestamp(ts.to_utc().fixed_offset()))
    }

    /// gpu-admission patch: a timestamp as cel-go's `string()` gives it:
    /// RFC 3339 in UTC (`Z`), with as many fractional digits as needed
    /// (Go's `time.RFC3339Nano`): `2009-02-13T23:31:30Z`,
    /// `9999-12-31T23:59:59.999999999Z`.
    pub fn format_timestamp(ts: &DateTime<FixedOffset>) -> String {
        let utc = ts.naive_utc();
        let mut out = utc.format("%Y-%m-%dT%H:%M:%S").to_string();
        let nanos = utc.nanosecond() % 1_000_000_000;
        if nanos != 0 {
            let digits = format!("{nanos:09}");
            out.push('.');
            out.push_str(digits.trim_end_matches('0'));
        }
        out.push('Z');
        out
    }

    /// gpu-admission patch: a duration as cel-go's `string()` gives it:
    /// seconds with as many fractional digits as needed (`1000000s`,
    /// `1.5s`).
    pub fn format_duration(d: &chrono::Duration) -> String {
        crate::duration::format_duration(d)
    }

    /// gpu-admission patch: the offset from UTC of the time zone a
    /// timestamp getter's argument names at the instant `ts`: an IANA name
    /// (`Australia/Sydney`, `UTC`) or a fixed offset `[+|-]HH:MM`
    /// (`+11:00`, `-02:30`, `02:00`), as in cel-go. IANA names need the
    /// `tz` feature (a time zone database compiled in: a webhook image
    /// has no `/usr/share/zoneinfo`).
    fn zone_offset(ftx: &FunctionContext, ts: &DateTime<FixedOffset>, zone: &str) -> Result<i32> {
        if let Some((hours, minutes)) = zone.split_once(':') {
            let (negative, hours) = match hours.as_bytes().first() {
                Some(b'-') => (true, &hours[1..]),
                Some(b'+') => (false, &hours[1..]),
                _ => (false, hours),
            };
            let number = |text: &str| -> Option<i32> {
                (!text.is_empty() && text.len() <= 2 && text.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| text.parse().ok())
                    .flatten()
            };
            let (Some(hours), Some(minutes)) = (number(hours), number(minutes)) else {
                return Err(ftx.error(format!("invalid time zone offset {zone:?}")));
            };
            if hours > 23 || minutes > 59 {
                return Err(ftx.error(format!("invalid time zone offset {zone:?}")));
            }
            let seconds = hours * 3600 + minutes * 60;
            return Ok(if negative { -seconds } else { seconds });
        }
        if zone == "UTC" {
            return Ok(0);
        }
        named_zone_offset(ts, zone).map_err(|e| ftx.error(e))
    }

    #[cfg(feature = "tz")]
    fn named_zone_offset(
        ts: &DateTime<FixedOffset>,
        zone: &str,
    ) -> std::result::Result<i32, String> {
        let tz = jiff::tz::db()
            .get(zone)
            .map_err(|_| format!("unknown time zone {zone:?}"))?;
        let instant = jiff::Timestamp::new(ts.timestamp(), 0)
            .map_err(|e| format!("timestamp out of range: {e}"))?;
        Ok(tz.to_offset(instant).seconds())
    }

    #[cfg(not(feature = "tz"))]
    fn named_zone_offset(
        _: &DateTime<FixedOffset>,
        zone: &str,
    ) -> std::result::Result<i32, String> {
        Err(format!(
            "unknown time zone {zone:?} (built without a time zone database)"
        ))
    }

    /// gpu-admission patch: the date and time a getter reads: in UTC, or in
    /// the time zone of its one optional argument (cel-go's getters all
    /// take one). Upstream read the offset the timestamp was written with
    /// (`timestamp('...T23:00:00+02:00').getHours()` was 23, not 21) and
    /// took no time zone.
    fn local_time(
        ftx: &FunctionContext,
        ts: &DateTime<FixedOffset>,
        args: &[Value],
    ) -> Result<NaiveDateTime> {
        match args {
            [] => Ok(ts.naive_utc()),
            [Value::String(zone)] => {
                let offset = zone_offset(ftx, ts, zone)?;
                let offset = FixedOffset::east_opt(offset)
                    .ok_or_else(|| ftx.error(format!("invalid time zone {zone:?}")))?;
                Ok(ts.with_timezone(&offset).naive_local())
            }
            [_] => Err(ExecutionError::NoSuchOverload),
            _ => Err(ExecutionError::InvalidArgumentCount {
                expected: 1,
                actual: args.len(),
            }),
        }
    }

    /// A timestamp getter's receiver and its optional time zone, or a
    /// duration getter's receiver without arguments.
    fn timestamp_getter(
        ftx: &FunctionContext,
        this: &Value,
        args: &[Value],
        get: impl FnOnce(NaiveDateTime) -> i64,
    ) -> Result<Value> {
        match this {
            Value::Timestamp(ts) => Ok(Value::Int(get(local_time(ftx, ts, args)?))),
            _ => Err(ExecutionError::NoSuchOverload),
        }
    }

    fn duration_getter(
        this: &Value,
        args: &[Value],
        get: impl FnOnce(&chrono::Duration) -> i64,
    ) -> Option<Result<Value>> {
        match this {
            Value::Duration(d) if args.is_empty() => Some(Ok(Value::Int(get(d)))),
            Value::Duration(_) => Some(Err(ExecutionError::NoSuchOverload)),
            _ => None,
        }
    }

    pub fn timestamp_year(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        timestamp_getter(ftx, &this, &args, |t| t.year().into())
    }

    pub fn timestamp_month(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        timestamp_getter(ftx, &this, &args, |t| t.month0().into())
    }

    pub fn timestamp_year_day(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        timestamp_getter(ftx, &this, &args, |t| t.ordinal0().into())
    }

    pub fn timestamp_month_day(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        timestamp_getter(ftx, &this, &args, |t| t.day0().into())
    }

    pub fn timestamp_date(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        timestamp_getter(ftx, &this, &args, |t| t.day().into())
    }

    pub fn timestamp_weekday(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        timestamp_getter(ftx, &this, &args, |t| {
            t.weekday().num_days_from_sunday().into()
        })
    }

    pub fn get_hours(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        duration_getter(&this, &args, |d| d.num_hours())
            .unwrap_or_else(|| timestamp_getter(ftx, &this, &args, |t| t.hour().into()))
    }

    pub fn get_minutes(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        duration_getter(&this, &args, |d| d.num_minutes())
            .unwrap_or_else(|| timestamp_getter(ftx, &this, &args, |t| t.minute().into()))
    }

    pub fn get_seconds(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        duration_getter(&this, &args, |d| d.num_seconds())
            .unwrap_or_else(|| timestamp_getter(ftx, &this, &args, |t| t.second().into()))
    }

    /// gpu-admission patch: a duration's `getMilliseconds()` is its
    /// milliseconds component, as in cel-go (`123.321456789s` gives 321);
    /// upstream gave the whole duration in milliseconds.
    pub fn get_milliseconds(
        ftx: &FunctionContext,
        This(this): This<Value>,
        Arguments(args): Arguments,
    ) -> Result<Value> {
        duration_getter(&this, &args, |d| d.num_milliseconds() % 1000).unwrap_or_else(|| {
            timestamp_getter(ftx, &this, &args, |t| {
                (t.nanosecond() % 1_000_000_000 / 1_000_000).into()
            })
        })
    }
}

/// gpu-admission patch: `@mapInsert(map, key, value)` and
/// `@mapInsert(map, entries)`, the step of `transformMap` and
/// `transformMapEntry` (`parser::MAP_INSERT`): the map with the entries
/// added; a key it already has is an error, as in cel-go.
pub fn map_insert(Arguments(args): Arguments) -> Result<Value> {
    use crate::objects::{Key, Map};
    let macro_name = if args.len() == 2 {
        "transformMapEntry"
    } else {
        "transformMap"
    };
    let insert_failed = |key: &Key| {
        ExecutionError::function_error(
            macro_name,
            format!("insert failed: key {key} already exists"),
        )
    };
    let (accu, entries): (&Value, Vec<(Value, Value)>) = match &args[..] {
        [accu, key, value] => (accu, vec![(key.clone(), value.clone())]),
        [accu, Value::Map(entries)] => (
            accu,
            entries
                .map
                .iter()
                .map(|(k, v)| (Value::from(k.clone()), v.clone()))
                .collect(),
        ),
        [_, other] => {
            return Err(ExecutionError::function_error(
                "transformMapEntry",
                format!("the expression must give a map, not {:?}", other.type_of()),
            ))
        }
        _ => {
            return Err(ExecutionError::InvalidArgumentCount {
                expected: 3,
                actual: args.len(),
            })
        }
    };
    let Value::Map(accu) = accu else {
        return Err(ExecutionError::NoSuchOverload);
    };
    let mut map = (*accu.map).clone();
    for (key, value) in entries {
        let key: Key = key.try_into().map_err(ExecutionError::UnsupportedKeyType)?;
        if map.contains_key(&key) {
            return Err(insert_failed(&key));
        }
        map.insert(key, value);
    }
    Ok(Value::Map(Map { map: Arc::new(map) }))
}

pub fn max(Arguments(args): Arguments) -> Result<Value> {
    // If items is a list of values, then operate on the list
    let items = if args.len() == 1 {
        match &args[0] {
            Value::List(values) => values,
            _ => return Ok(args[0].clone()),
        }
    } else {
        &args
    };

    items
        .iter()
        .skip(1)
        .try_fold(items.first().unwrap_or(&Value::Null), |acc, x| {
            match acc.partial_cmp(x) {
                Some(Ordering::Greater) => Ok(acc),
                Some(_) => Ok(x),
                None => Err(ExecutionError::ValuesNotComparable(acc.clone(), x.clone())),
            }
        })
        .cloned()
}

pub fn min(Arguments(args): Arguments) -> Result<Value> {
    // If items is a list of values, then operate on the list
    let items = if args.len() == 1 {
        match &args[0] {
            Value::List(values) => values,
            _ => return Ok(args[0].clone()),
        }
    } else {
        &args
    };

    items
        .iter()
        .skip(1)
        .try_fold(items.first().unwrap_or(&Value::Null), |acc, x| {
            match acc.partial_cmp(x) {
                Some(Ordering::Less) => Ok(acc),
                Some(_) => Ok(x),
                None => Err(ExecutionError::ValuesNotComparable(acc.clone(), x.clone())),
            }
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use crate::context::Context;
    use crate::tests::test_script;

    fn assert_script(input: &(&str, &str)) {
        assert_eq!(test_script(input.1, None), Ok(true.into()), "{}", input.0);
    }

    fn assert_error(input: &(&str, &str, &str)) {
        assert_eq!(
            test_script(input.1, None).map_err(|e| e.to_string()),
            Err(input.2.to_string()),
            "{}",
            input.0
        );
    }

    #[test]
    fn test_size() {
        [
            ("size of list", "size([1, 2, 3]) == 3"),
            ("size of map", "size({'a': 1, 'b': 2, 'c': 3}) == 3"),
            ("size of string", "size('foo') == 3"),
            ("size of bytes", "size(b'foo') == 3"),
            ("size as a list method", "[1, 2, 3].size() == 3"),
            ("size as a string method", "'foobar'.size() == 6"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_has() {
        let tests = vec![
            ("map has", "has(foo.bar) == true"),
            ("map not has", "has(foo.baz) == false"),
        ];

        for (name, script) in tests {
            let mut ctx = Context::default();
            ctx.add_variable_from_value("foo", std::collections::HashMap::from([("bar", 1)]));
            assert_eq!(test_script(script, Some(ctx)), Ok(true.into()), "{name}");
        }
    }

    #[test]
    fn test_map() {
        [
            ("map list", "[1, 2, 3].map(x, x * 2) == [2, 4, 6]"),
            ("map list 2", "[1, 2, 3].map(y, y + 1) == [2, 3, 4]"),
            (
                "map list filter",
                "[1, 2, 3].map(y, y % 2 == 0, y + 1) == [3]",
            ),
            (
                "nested map",
                "[[1, 2], [2, 3]].map(x, x.map(x, x * 2)) == [[2, 4], [4, 6]]",
            ),
            (
                "map to list",
                r#"{'John': 'smart'}.map(key, key) == ['John']"#,
            ),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_filter() {
        [("filter list", "[1, 2, 3].filter(x, x > 2) == [3]")]
            .iter()
            .for_each(assert_script);
    }

    #[test]
    fn test_all() {
        [
            ("all list #1", "[0, 1, 2].all(x, x >= 0)"),
            ("all list #2", "[0, 1, 2].all(x, x > 0) == false"),
            ("all map", "{0: 0, 1:1, 2:2}.all(x, x >= 0) == true"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_exists() {
        [
            ("exist list #1", "[0, 1, 2].exists(x, x > 0)"),
            ("exist list #2", "[0, 1, 2].exists(x, x == 3) == false"),
            ("exist list #3", "[0, 1, 2, 2].exists(x, x == 2)"),
            ("exist map", "{0: 0, 1:1, 2:2}.exists(x, x > 0)"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_exists_one() {
        [
            ("exist list #1", "[0, 1, 2].exists_one(x, x > 0) == false"),
            ("exist list #2", "[0, 1, 2].exists_one(x, x == 0)"),
            ("exist map", "{0: 0, 1:1, 2:2}.exists_one(x, x == 2)"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_max() {
        [
            ("max single", "max(1) == 1"),
            ("max multiple", "max(1, 2, 3) == 3"),
            ("max negative", "max(-1, 0) == 0"),
            ("max float", "max(-1.0, 0.0) == 0.0"),
            ("max list", "max([1, 2, 3]) == 3"),
            ("max empty list", "max([]) == null"),
            ("max no args", "max() == null"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_min() {
        [
            ("min single", "min(1) == 1"),
            ("min multiple", "min(1, 2, 3) == 1"),
            ("min negative", "min(-1, 0) == -1"),
            ("min float", "min(-1.0, 0.0) == -1.0"),
            (
                "min float multiple",
                "min(1.61803, 3.1415, 2.71828, 1.41421) == 1.41421",
            ),
            ("min list", "min([1, 2, 3]) == 1"),
            ("min empty list", "min([]) == null"),
            ("min no args", "min() == null"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_starts_with() {
        [
            ("starts with true", "'foobar'.startsWith('foo') == true"),
            ("starts with false", "'foobar'.startsWith('bar') == false"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_ends_with() {
        [
            ("ends with true", "'foobar'.endsWith('bar') == true"),
            ("ends with false", "'foobar'.endsWith('foo') == false"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[cfg(feature = "chrono")]
    #[test]
    fn test_timestamp() {
        [(
                "comparison",
                "timestamp('2023-05-29T00:00:00Z') > timestamp('2023-05-28T00:00:00Z')",
            ),
            (
                "comparison",
                "timestamp('2023-05-29T00:00:00Z') < timestamp('2023-05-30T00:00:00Z')",
            ),
            (
                "subtracting duration",
                "timestamp('2023-05-29T00:00:00Z') - duration('24h') == timestamp('2023-05-28T00:00:00Z')",
            ),
            (
                "subtracting date",
                "timestamp('2023-05-29T00:00:00Z') - timestamp('2023-05-28T00:00:00Z') == duration('24h')",
            ),
            (
                "adding duration",
                "timestamp('2023-05-28T00:00:00Z') + duration('24h') == timestamp('2023-05-29T00:00:00Z')",
            ),
            (
                "timestamp string",
                // gpu-admission patch: RFC 3339 in UTC, as cel-go writes it.
                "timestamp('2023-05-28T00:00:00Z').string() == '2023-05-28T00:00:00Z'",
            ),
            (
                "timestamp getFullYear",
                "timestamp('2023-05-28T00:00:00Z').getFullYear() == 2023",
            ),
            (
                "timestamp getMonth",
                "timestamp('2023-05-28T00:00:00Z').getMonth() == 4",
            ),
            (
                "timestamp getDayOfMonth",
                "timestamp('2023-05-28T00:00:00Z').getDayOfMonth() == 27",
            ),
            (
                "timestamp getDayOfYear",
                "timestamp('2023-05-28T00:00:00Z').getDayOfYear() == 147",
            ),
            (
                "timestamp getDate",
                "timestamp('2023-05-28T00:00:00Z').getDate() == 28",
            ),
            (
                "timestamp getDayOfWeek",
                "timestamp('2023-05-28T00:00:00Z').getDayOfWeek() == 0",
            ),
            (
                "timestamp getHours",
                "timestamp('2023-05-28T02:00:00Z').getHours() == 2",
            ),
            (
                "timestamp getMinutes",
                " timestamp('2023-05-28T00:05:00Z').getMinutes() == 5",
            ),
            (
                "timestamp getSeconds",
                "timestamp('2023-05-28T00:00:06Z').getSeconds() == 6",
            ),
            (
                "timestamp getMilliseconds",
                "timestamp('2023-05-28T00:00:42.123Z').getMilliseconds() == 123",
            ),
        ]
        .iter()
        .for_each(assert_script);

        [
            (
                "timestamp out of range",
                "timestamp('0000-01-00T00:00:00Z')",
                "Error executing function 'timestamp': input is out of range",
            ),
            (
                "timestamp out of range",
                "timestamp('9999-12-32T23:59:59.999999999Z')",
                "Error executing function 'timestamp': input is out of range",
            ),
            (
                "timestamp overflow",
                "timestamp('9999-12-31T23:59:59Z') + duration('1s')",
                "Overflow from binary operator 'add': Timestamp(9999-12-31T23:59:59+00:00), Duration(TimeDelta { secs: 1, nanos: 0 })",
            ),
            (
                "timestamp underflow",
                "timestamp('0001-01-01T00:00:00Z') - duration('1s')",
                "Overflow from binary operator 'sub': Timestamp(0001-01-01T00:00:00+00:00), Duration(TimeDelta { secs: 1, nanos: 0 })",
            ),
            (
                "timestamp underflow",
                "timestamp('0001-01-01T00:00:00Z') + duration('-1s')",
                "Overflow from binary operator 'add': Timestamp(0001-01-01T00:00:00+00:00), Duration(TimeDelta { secs: -1, nanos: 0 })",
            )
        ]
        .iter()
        .for_each(assert_error)
    }

    #[cfg(feature = "chrono")]
    #[test]
    fn test_duration() {
        [
            ("duration equal 1", "duration('1s') == duration('1000ms')"),
            ("duration equal 2", "duration('1m') == duration('60s')"),
            ("duration equal 3", "duration('1h') == duration('60m')"),
            ("duration comparison 1", "duration('1m') > duration('1s')"),
            ("duration comparison 2", "duration('1m') < duration('1h')"),
            (
                "duration subtraction",
                "duration('1h') - duration('1m') == duration('59m')",
            ),
            (
                "duration addition",
                "duration('1h') + duration('1m') == duration('1h1m')",
            ),
            ("duration getHours", "duration('2h30m45s').getHours() == 2"),
            (
                "duration getMinutes",
                "duration('2h30m45s').getMinutes() == 150",
            ),
            (
                "duration getSeconds",
                "duration('2h30m45s').getSeconds() == 9045",
            ),
            (
                "duration getMilliseconds",
                // gpu-admission patch: the milliseconds component, as cel-go.
                "duration('1s500ms').getMilliseconds() == 500",
            ),
            (
                "duration getHours overflow",
                "duration('25h').getHours() == 25",
            ),
            (
                "duration getMinutes overflow",
                "duration('90m').getMinutes() == 90",
            ),
            (
                "duration getSeconds overflow",
                "duration('90s').getSeconds() == 90",
            ),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[cfg(feature = "chrono")]
    #[test]
    fn test_timestamp_variable() {
        let mut context = Context::default();
        let ts: chrono::DateTime<chrono::FixedOffset> =
            chrono::DateTime::parse_from_rfc3339("2023-05-29T00:00:00Z").unwrap();
        context
            .add_variable("ts", crate::Value::Timestamp(ts))
            .unwrap();

        let program = crate::Program::compile("ts == timestamp('2023-05-29T00:00:00Z')").unwrap();
        let result = program.execute(&context).unwrap();
        assert_eq!(result, true.into());
    }

    #[cfg(feature = "chrono")]
    #[test]
    fn test_chrono_string() {
        [
            // gpu-admission patch: seconds, and RFC 3339 in UTC, as cel-go.
            ("duration", "duration('1h30m').string() == '5400s'"),
            (
                "timestamp",
                "timestamp('2023-05-29T00:00:00Z').string() == '2023-05-29T00:00:00Z'",
            ),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_contains() {
        let tests = vec![
            ("list", "[1, 2, 3].contains(3) == true"),
            ("map", "{1: true, 2: true, 3: true}.contains(3) == true"),
            ("string", "'foobar'.contains('bar') == true"),
            ("bytes", "b'foobar'.contains(b'o') == true"),
        ];

        for (name, script) in tests {
            assert_eq!(test_script(script, None), Ok(true.into()), "{name}");
        }
    }

    #[cfg(feature = "regex")]
    #[test]
    fn test_matches() {
        let tests = vec![
            ("string", "'foobar'.matches('^[a-zA-Z]*$') == true"),
            (
                "map",
                "{'1': 'abc', '2': 'def', '3': 'ghi'}.all(key, key.matches('^[a-zA-Z]*$')) == false",
            ),
        ];

        for (name, script) in tests {
            assert_eq!(
                test_script(script, None),
                Ok(true.into()),
                ".matches failed for '{name}'"
            );
        }
    }

    #[cfg(feature = "regex")]
    #[test]
    fn test_matches_err() {
        assert_eq!(
            test_script(
                "'foobar'.matches('(foo') == true", None),
            Err(
                crate::ExecutionError::FunctionError {
                    function: "matches".to_string(),
                    message: "'(foo' not a valid regex:\nregex parse error:\n    (foo\n    ^\nerror: unclosed group".to_string()
                }
            )
        );
    }

    #[cfg(feature = "regex")]
    #[test]
    fn matches_past_the_cache_bound() {
        // More distinct patterns than a thread keeps, each used twice, and
        // an invalid one in between: answers do not depend on the cache.
        for round in 0..2 {
            for i in 0..300 {
                let script = format!("'x{i}y'.matches('^x{i}y$') && !'x{i}'.matches('^x{i}y$')");
                assert_eq!(
                    test_script(&script, None),
                    Ok(true.into()),
                    "{i} round {round}"
                );
            }
            assert!(test_script("'a'.matches('(a')", None).is_err());
        }
    }

    #[test]
    fn test_string() {
        [
            ("string", "'foo'.string() == 'foo'"),
            ("int", "10.string() == '10'"),
            ("float", "10.5.string() == '10.5'"),
            ("bytes", "b'foo'.string() == 'foo'"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_bytes() {
        [
            ("string", "bytes('abc') == b'abc'"),
            ("bytes", "bytes('abc') == b'\\x61b\\x63'"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_double() {
        [
            ("string", "'10'.double() == 10.0"),
            ("int", "10.double() == 10.0"),
            ("double", "10.0.double() == 10.0"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_uint() {
        [
            ("string", "'10'.uint() == 10.uint()"),
            ("double", "10.5.uint() == 10.uint()"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn test_int() {
        [
            ("string", "'10'.int() == 10"),
            ("int", "10.int() == 10"),
            ("uint", "10.uint().int() == 10"),
            ("double", "10.5.int() == 10"),
        ]
        .iter()
        .for_each(assert_script);
    }

    #[test]
    fn no_bool_coercion() {
        [
            ("string || bool", "'' || false", "No such overload"),
            ("int || bool", "1 || false", "No such overload"),
            ("int || bool", "1u || false", "No such overload"),
            ("float || bool", "0.1|| false", "No such overload"),
            ("list || bool", "[] || false", "No such overload"),
            ("map || bool", "{} || false", "No such overload"),
            ("null || bool", "null || false", "No such overload"),
        ]
        .iter()
        .for_each(assert_error)
    }

    /// gpu-admission patch: the conversions cel-spec's conformance suite
    /// checks (conversions.textproto, timestamps.textproto).
    #[test]
    fn conversions_follow_the_specification() {
        [
            ("bool('1')", "bool('1') && bool('t') && bool('true') && bool('TRUE') && bool('True')"),
            ("bool('0')", "!bool('0') && !bool('f') && !bool('false') && !bool('FALSE') && !bool('False')"),
            ("bool(bool)", "bool(true) && !bool(false)"),
            ("bytes(bytes)", "bytes(b'abc') == b'abc'"),
            ("string(bool)", "string(true) == 'true'"),
            ("string(bytes)", "string(b'\\303\\277') == '\\u00ff'"),
            ("int(timestamp)", "int(timestamp('2009-02-13T23:31:30Z')) == 1234567890"),
            ("int(double) below 2^63", "int(9223372036854774784.0) == 9223372036854774784"),
            ("uint(double) below 2^64", "uint(18446744073709549568.0) == 18446744073709549568u"),
            ("int(-0.5)", "int(-0.5) == 0"),
            ("timestamp(int)", "timestamp(1000000000) == timestamp('2001-09-09T01:46:40Z')"),
            ("timestamp(timestamp)", "timestamp(timestamp(0)) == timestamp(0)"),
            ("duration(duration)", "duration(duration('100s')) == duration('100s')"),
            ("string(timestamp)", "string(timestamp('2009-02-13T23:31:30Z')) == '2009-02-13T23:31:30Z'"),
            (
                "string(timestamp) nanos",
                "string(timestamp('9999-12-31T23:59:59.999999999Z')) == '9999-12-31T23:59:59.999999999Z'",
            ),
            (
                "string(timestamp) fraction trimmed, in UTC",
                "string(timestamp('2009-02-13T23:31:30.120+02:00')) == '2009-02-13T21:31:30.12Z'",
            ),
            ("string(timestamp) year 1", "string(timestamp('0001-01-01T00:00:00Z')) == '0001-01-01T00:00:00Z'"),
            ("string(duration)", "string(duration('1000000s')) == '1000000s'"),
            ("string(duration) fraction", "string(duration('-1.5ms')) == '-0.0015s'"),
        ]
        .iter()
        .for_each(assert_script);

        for expr in [
            "bool('TrUe')",
            "bool('')",
            "bool(1)",
            "string(b'\\000\\xff')",
            "int(9223372036854775807.0)",
            "int(-9223372036854775808.0)",
            "int(1e99)",
            "int(double('NaN'))",
            "int(double('Infinity'))",
            "uint(18446744073709551615.0)",
            "uint(6.022e23)",
            "uint(-0.5)",
            "uint(double('NaN'))",
            "uint(-1)",
            "timestamp('0000-01-01T00:00:00Z')",
            "timestamp('10000-01-01T00:00:00Z')",
            "timestamp(-62135596801)",
            "timestamp(253402300800)",
            "duration('320000000000s')",
            "duration('-320000000000s')",
            "duration('1sx')",
            "bytes(1)",
        ] {
            assert!(test_script(expr, None).is_err(), "{expr}");
        }
        assert_eq!(
            test_script("timestamp(-62135596800)", None).map(|v| format!("{v:?}")),
            Ok("Timestamp(0001-01-01T00:00:00+00:00)".to_string())
        );
    }

    /// gpu-admission patch: timestamp getters in a time zone (an IANA name
    /// or a fixed offset), and in UTC without one.
    #[test]
    fn timestamp_getters_take_a_time_zone() {
        [
            (
                "IANA",
                "timestamp('2009-02-13T23:31:30Z').getDate('Australia/Sydney') == 14",
            ),
            (
                "IANA link",
                "timestamp('2009-02-13T23:31:30Z').getDayOfMonth('US/Central') == 12",
            ),
            (
                "IANA negative half hour",
                "timestamp('2009-02-13T02:00:00Z').getDayOfMonth('America/St_Johns') == 11",
            ),
            (
                "IANA quarter hour",
                "timestamp('2009-02-13T23:31:30Z').getMinutes('Asia/Kathmandu') == 16",
            ),
            (
                "UTC",
                "timestamp('2009-02-13T23:31:30Z').getDayOfWeek('UTC') == 5",
            ),
            (
                "offset",
                "timestamp('2009-02-13T23:31:30Z').getDayOfMonth('+11:00') == 13",
            ),
            (
                "negative offset",
                "timestamp('2009-02-13T02:00:00Z').getDayOfMonth('-02:30') == 11",
            ),
            (
                "unsigned offset",
                "timestamp('2009-02-13T23:31:30Z').getHours('02:00') == 1",
            ),
            (
                "-00:00",
                "timestamp('2009-02-13T23:31:30Z').getSeconds('-00:00') == 30",
            ),
            (
                "year",
                "timestamp('2009-01-01T01:00:00Z').getFullYear('-09:30') == 2008",
            ),
            (
                "day of year",
                "timestamp('2009-01-01T01:00:00Z').getDayOfYear('-09:30') == 365",
            ),
            (
                "month",
                "timestamp('2009-01-01T01:00:00Z').getMonth('-09:30') == 11",
            ),
            (
                "milliseconds",
                "timestamp('2009-02-13T23:31:20.123456789Z').getMilliseconds('+01:00') == 123",
            ),
            (
                "summer time",
                "timestamp('2009-07-13T12:00:00Z').getHours('Europe/Paris') == 14",
            ),
            (
                "winter time",
                "timestamp('2009-01-13T12:00:00Z').getHours('Europe/Paris') == 13",
            ),
            // Without a zone: UTC, whatever offset the text had.
            (
                "UTC by default",
                "timestamp('2009-02-13T23:31:30+02:00').getHours() == 21",
            ),
        ]
        .iter()
        .for_each(assert_script);

        for expr in [
            "timestamp('2009-02-13T23:31:30Z').getHours('Mars/Olympus_Mons')",
            "timestamp('2009-02-13T23:31:30Z').getHours('+25:00')",
            "timestamp('2009-02-13T23:31:30Z').getHours('a:b')",
            "timestamp('2009-02-13T23:31:30Z').getHours(1)",
            "timestamp('2009-02-13T23:31:30Z').getHours('UTC', 'UTC')",
            "duration('1h').getHours('UTC')",
            "duration('1h').getFullYear()",
        ] {
            assert!(test_script(expr, None).is_err(), "{expr}");
        }
    }

    /// gpu-admission patch: duration getters, and arithmetic kept within
    /// the ranges of timestamps and durations.
    #[test]
    fn durations_and_timestamp_arithmetic_stay_in_range() {
        [
            ("getMilliseconds", "duration('123.321456789s').getMilliseconds() == 321"),
            ("getMilliseconds negative", "duration('-1.5s').getMilliseconds() == -500"),
            ("getSeconds", "duration('3730s').getSeconds() == 3730"),
            ("getMinutes", "duration('3730s').getMinutes() == 62"),
            ("getHours", "duration('10000s').getHours() == 2"),
            (
                "duration + timestamp",
                "duration('120s') + timestamp('2009-02-13T23:01:00Z') == timestamp('2009-02-13T23:03:00Z')",
            ),
            (
                "nanoseconds carried",
                "timestamp('0001-01-01T00:00:01.999999999Z') + duration('999999999ns') == timestamp('0001-01-01T00:00:02.999999998Z')",
            ),
            ("largest duration", "duration('9223372036.854775807s') - duration('1ns') < duration('9223372036.854775807s')"),
            (
                "timestamps 292 years apart",
                "timestamp('2262-04-11T23:47:16.854775807Z') - timestamp('1970-01-01T00:00:00Z') == duration('9223372036.854775807s')",
            ),
        ]
        .iter()
        .for_each(assert_script);

        for expr in [
            "timestamp('9999-12-31T23:59:59.999999999Z') + duration('1ns')",
            "duration('1ns') + timestamp('9999-12-31T23:59:59.999999999Z')",
            "timestamp('0001-01-01T00:00:00Z') - duration('1ns')",
            "timestamp('0001-01-01T00:00:00Z') + duration('-1ns')",
            "timestamp('9999-12-31T23:59:59Z') - timestamp('0001-01-01T00:00:00Z')",
            "timestamp('0001-01-01T00:00:00Z') - timestamp('9999-12-31T23:59:59Z')",
            "timestamp('2262-04-11T23:47:16.854775808Z') - timestamp('1970-01-01T00:00:00Z')",
            "duration('200000000000s') + duration('200000000000s')",
            "duration('-200000000000s') + duration('-200000000000s')",
            "duration('200000000000s') - duration('-200000000000s')",
            "duration('-200000000000s') - duration('200000000000s')",
            "duration('9223372036.854775807s') + duration('1ns')",
        ] {
            assert!(test_script(expr, None).is_err(), "{expr}");
        }
    }

    /// gpu-admission patch: unary minus takes an int or a double, and
    /// negating the smallest int overflows (upstream panicked in a debug
    /// build and wrapped in a release one).
    #[test]
    fn unary_minus_is_checked() {
        [
            ("int", "-(-42) == 42"),
            ("double", "-(1.5) == -1.5"),
            ("zero", "-(0) == 0"),
        ]
        .iter()
        .for_each(assert_script);
        for expr in ["-(-9223372036854775807 - 1)", "-false", "-(42u)", "-'a'"] {
            assert!(test_script(expr, None).is_err(), "{expr}");
        }
    }
}

/// gpu-admission patch: `type(x)`, the type of a value as a value
/// ([`crate::objects::TypeValue`]): `type(1) == int`, `type(type(1)) ==
/// type`.
pub fn type_of(Arguments(args): Arguments) -> Result<Value> {
    match args.as_slice() {
        [value] => Ok(crate::objects::TypeValue::of(value).into()),
        _ => Err(ExecutionError::InvalidArgumentCount {
            expected: 1,
            actual: args.len(),
        }),
    }
}
