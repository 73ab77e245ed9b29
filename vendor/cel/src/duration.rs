use chrono::Duration;

/// gpu-admission patch: CEL durations are limited to a single int64 count
/// of nanoseconds, about ±292 years (cel-spec language definition,
/// "Overflow"); chrono's `TimeDelta` holds far more.
pub(crate) fn in_range(d: &Duration) -> bool {
    d.num_nanoseconds().is_some()
}

/// Parses a duration string into a [`Duration`], as Go's
/// `time.ParseDuration` (which cel-go uses) does:
///
/// DurationString -> Sign? (Number Unit)+ | Sign? '0'
/// Sign           -> '-' | '+'
/// Number         -> Digit* ('.' Digit*)?  (at least one digit)
/// Unit           -> 'h' | 'm' | 's' | 'ms' | 'us' | 'µs' | 'μs' | 'ns'
///
/// # Examples
/// - `1h` parses as 1 hour
/// - `1.5h` parses as 1 hour and 30 minutes
/// - `1h30m1s` parses as 1 hour, 30 minutes, and 1 second
/// - `1.5ns` parses as 1 nanosecond (sub-nanosecond durations not supported)
///
/// gpu-admission patch: upstream read each number as a double and
/// multiplied it by its unit, so `123.321456789s` lost its last nanosecond,
/// a value beyond the range saturated instead of failing, and text after
/// the last unit (`1sx`) was ignored. The integer and fractional parts are
/// now read exactly, the total must fit an int64 count of nanoseconds, and
/// the whole text must be a duration.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?}");
    let out_of_range = || format!("duration {text:?} out of range");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::zero());
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    // The magnitude in nanoseconds; the negative end of the range is one
    // larger than the positive one.
    let limit: u128 = if negative { 1 << 63 } else { (1 << 63) - 1 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after) = rest.split_at(int_len);
        let (frac_digits, after) = match after.strip_prefix('.') {
            Some(after) => {
                let n = after.bytes().take_while(u8::is_ascii_digit).count();
                after.split_at(n)
            }
            None => ("", after),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let unit: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            _ => return Err(invalid()),
        };
        let mut value: u128 = 0;
        for d in int_digits.bytes() {
            value = value * 10 + u128::from(d - b'0');
            if value * unit > limit {
                return Err(out_of_range());
            }
        }
        value *= unit;
        // The fraction, truncated to whole nanoseconds.
        let mut scale: u128 = 1;
        let mut frac: u128 = 0;
        for d in frac_digits.bytes() {
            if scale > 1_000_000_000_000_000_000 {
                break; // beyond any unit's resolution
            }
            frac = frac * 10 + u128::from(d - b'0');
            scale *= 10;
        }
        value += frac * unit / scale;
        total += value;
        if total > limit {
            return Err(out_of_range());
        }
        rest = after;
    }
    let nanos = if negative {
        (total as i128).wrapping_neg() as i64
    } else {
        total as i64
    };
    Ok(Duration::nanoseconds(nanos))
}

/// Formats a [`Duration`] as cel-go's `string(duration)` does: seconds with
/// as many fractional digits as needed, and the suffix `s` (`1000000s`,
/// `1.5s`, `-0.000000001s`).
///
/// gpu-admission patch: upstream printed Go's `time.Duration.String()` form
/// (`72h3m0.5s`), which is not what CEL's `string()` gives.
pub fn format_duration(d: &Duration) -> String {
    let nanos = d
        .num_nanoseconds()
        .map_or_else(|| i128::from(d.num_seconds()) * 1_000_000_000, i128::from);
    let sign = if nanos < 0 { "-" } else { "" };
    let nanos = nanos.unsigned_abs();
    let (secs, frac) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if frac == 0 {
        format!("{sign}{secs}s")
    } else {
        let digits = format!("{frac:09}");
        format!("{sign}{secs}.{}s", digits.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use crate::duration::{format_duration, parse_duration};
    use chrono::Duration;

    fn assert_duration(input: &str, expected: Duration) {
        let duration = parse_duration(input).unwrap();
        assert_eq!(duration, expected, "{input}");
    }

    fn assert_print_duration(input: Duration, expected: &str) {
        let actual = format_duration(&input);
        assert_eq!(actual, expected, "{input}");
    }

    macro_rules! assert_durations {
        ($($str:expr => $duration:expr),*$(,)?) => {
            #[test]
            fn test_durations() {
                $(
                    assert_duration($str, $duration);
                )*
            }
        };
    }

    macro_rules! assert_duration_format {
        ($($duration:expr => $str:expr),*$(,)?) => {
            #[test]
            fn test_format_durations() {
                $(
                    assert_print_duration($duration, $str);
                )*
            }
        };
    }

    assert_durations! {
        "1s" => Duration::seconds(1),
        "-1s" => Duration::seconds(-1),
        "+1s" => Duration::seconds(1),
        "1.1s" => Duration::seconds(1) + Duration::milliseconds(100),
        "1.5m" => Duration::minutes(1) + Duration::seconds(30),
        "1m1s" => Duration::minutes(1) + Duration::seconds(1),
        "1h1m1s" => Duration::hours(1) + Duration::minutes(1) + Duration::seconds(1),
        "1ms" => Duration::milliseconds(1),
        "1us" => Duration::microseconds(1),
        "1\u{b5}s" => Duration::microseconds(1),
        "1ns" => Duration::nanoseconds(1),
        "1.1ns" => Duration::nanoseconds(1),
        "1.123us" => Duration::microseconds(1) + Duration::nanoseconds(123),
        "0s" => Duration::zero(),
        "0h0m0s" => Duration::zero(),
        "0h0m1s" => Duration::seconds(1),
        "0" => Duration::zero(),
        "-0" => Duration::zero(),
        ".5s" => Duration::milliseconds(500),
        "1.s" => Duration::seconds(1),
        // Exact: a double would give 123.321456788s.
        "123.321456789s" => Duration::nanoseconds(123_321_456_789),
        "9223372036.854775807s" => Duration::nanoseconds(i64::MAX),
        "-9223372036.854775808s" => Duration::nanoseconds(i64::MIN),
        "2562047h47m16.854775807s" => Duration::nanoseconds(i64::MAX),
    }

    /// gpu-admission patch: what Go's `time.ParseDuration` refuses, and
    /// durations beyond an int64 count of nanoseconds, are errors.
    #[test]
    fn invalid_and_out_of_range_durations_are_errors() {
        for text in [
            "",
            "-",
            "s",
            "1",
            "1x",
            "1sx",
            "1 s",
            "1e3s",
            "..5s",
            "1.5.s",
            "--1s",
            "9223372036.854775808s",
            "-9223372036.854775809s",
            "320000000000s",
            "-320000000000s",
            "2562048h",
            "99999999999999999999999999ns",
        ] {
            assert!(parse_duration(text).is_err(), "{text:?}");
        }
    }

    assert_duration_format! {
        Duration::zero() => "0s",
        Duration::nanoseconds(1) => "0.000000001s",
        Duration::nanoseconds(-1) => "-0.000000001s",
        Duration::nanoseconds(1100) => "0.0000011s",
        Duration::milliseconds(3300) => "3.3s",
        Duration::seconds(1_000_000) => "1000000s",
        Duration::minutes(4) + Duration::seconds(5) => "245s",
        Duration::nanoseconds(123_321_456_789) => "123.321456789s",
        Duration::nanoseconds(i64::MAX) => "9223372036.854775807s",
        Duration::nanoseconds(i64::MIN) => "-9223372036.854775808s",
    }
}
