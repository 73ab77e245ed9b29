//! Just enough DER to read a certificate's validity.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One TLV: (tag, contents, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The `notBefore` and `notAfter` times of a DER certificate.
pub fn validity(cert: &[u8]) -> Option<(SystemTime, SystemTime)> {
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, cert, _) = tlv(cert)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = tlv(cert)? else {
        return None;
    };
    // [0] EXPLICIT version, optional.
    if tbs.first() == Some(&0xa0) {
        tbs = tlv(tbs)?.2;
    }
    let (_serial, _, rest) = tlv(tbs)?;
    let (_signature, _, rest) = tlv(rest)?;
    let (_issuer, _, rest) = tlv(rest)?;
    let (SEQUENCE, validity, _) = tlv(rest)? else {
        return None;
    };
    let (before_tag, before, rest) = tlv(validity)?;
    let (after_tag, after, _) = tlv(rest)?;
    Some((
        parse_time(before_tag, std::str::from_utf8(before).ok()?)?,
        parse_time(after_tag, std::str::from_utf8(after).ok()?)?,
    ))
}

/// A time as RFC 3339 UTC to the second (`2026-11-29T14:00:00Z`), for
/// messages about certificate validity.
pub fn format_utc(time: SystemTime) -> String {
    let secs = match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn parse_time(tag: u8, s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    // UTCTime reaches back to 1950: before the epoch is a valid time.
    Some(match u64::try_from(secs) {
        Ok(secs) => UNIX_EPOCH + Duration::from_secs(secs),
        Err(_) => UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()),
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 11, 29), 20_786);
        for days in [-7_305, -1, 0, 11_017, 20_786, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn times_format_as_rfc3339() {
        let t = parse_time(0x17, "261129140507Z").unwrap();
        assert_eq!(format_utc(t), "2026-11-29T14:05:07Z");
        let old = parse_time(0x17, "550101000000Z").unwrap();
        assert_eq!(format_utc(old), "1955-01-01T00:00:00Z");
    }

    #[test]
    fn both_time_forms() {
        let utc = parse_time(0x17, "261129140000Z").unwrap();
        let gen = parse_time(0x18, "20261129140000Z").unwrap();
        assert_eq!(utc, gen);
        assert_eq!(parse_time(0x17, "bad"), None);
        assert_eq!(tlv(&[0x30, 0x05, 0x00]), None, "length past the end");
    }
}
