//! The text log line, written faster. `serve` logs one line per review;
//! `tracing-subscriber`'s default field formatter and clock spend most of
//! that line's cost (about 13,000 instructions a line, some 40% of what
//! placing a GPU pod costs) on formatting machinery: every field name painted
//! with an empty terminal style, the message streamed through its escaper
//! one character at a time, every quoted string escaped one character at a
//! time, the date worked out from the calendar on each line.
//!
//! [`Fields`] and [`Clock`] write the same bytes as `DefaultFields` and
//! `SystemTime` for a log without colours (the tests compare them over
//! every kind of field, escapes included); to a terminal, with colours,
//! they hand over to the defaults.
use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{DefaultFields, DefaultVisitor, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::FormatFields;

/// Formats event and span fields as `DefaultFields` does.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fields;

impl<'writer> FormatFields<'writer> for Fields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        if writer.has_ansi_escapes() {
            return DefaultFields::new().format_fields(writer, fields);
        }
        let mut visitor = Visitor {
            writer: writer.by_ref(),
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// What `DefaultVisitor` writes before a field: a space after the first.
    fn pad(&mut self) -> fmt::Result {
        if self.is_empty {
            self.is_empty = false;
            Ok(())
        } else {
            self.writer.write_char(' ')
        }
    }

    /// Fields `tracing-log` carries for its own use are not shown.
    fn skipped(&self, field: &Field) -> bool {
        self.result.is_err() || field.name().starts_with("log.")
    }

    /// `name=` as the default writes it (a raw identifier without `r#`).
    fn name(&mut self, field: &Field) -> fmt::Result {
        let name = field.name();
        self.writer
            .write_str(name.strip_prefix("r#").unwrap_or(name))?;
        self.writer.write_char('=')
    }

    fn debug_field(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.skipped(field) {
            return;
        }
        self.result = (|| {
            self.pad()?;
            if field.name() == "message" {
                return self.message(value);
            }
            self.name(field)?;
            write!(self.writer, "{value:?}")
        })();
    }

    /// The message, its terminal control characters escaped.
    fn message(&mut self, value: &dyn fmt::Debug) -> fmt::Result {
        if !self.writer.sanitizes_ansi_escapes() {
            return write!(self.writer, "{value:?}");
        }
        MESSAGE.with(|text| {
            let Ok(mut text) = text.try_borrow_mut() else {
                // A message whose formatting logs: the slow way.
                return write!(self.writer, "{:?}", Escaped(value));
            };
            text.clear();
            write!(text, "{value:?}")?;
            let written = write_escaped(&mut self.writer, &text);
            if text.capacity() > MAX_KEPT_MESSAGE {
                // A rare huge message does not stay pinned to the thread.
                *text = String::new();
            }
            written
        })
    }
}

/// The largest message buffer a thread keeps between lines.
const MAX_KEPT_MESSAGE: usize = 16 * 1024;

thread_local! {
    /// Where a message is formatted before its escapes are written.
    static MESSAGE: RefCell<String> = const { RefCell::new(String::new()) };
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.skipped(field) {
            return;
        }
        self.result = (|| {
            self.pad()?;
            if field.name() == "message" {
                if !self.writer.sanitizes_ansi_escapes() {
                    return self.writer.write_str(value);
                }
                return write_escaped(&mut self.writer, value);
            }
            self.name(field)?;
            write_quoted(&mut self.writer, value)
        })();
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.skipped(field) {
            return;
        }
        // Rare: the default's own form, sources and all.
        let mut default = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        default.record_error(field, value);
        self.is_empty = false;
        self.result = tracing_subscriber::field::VisitOutput::finish(default);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.debug_field(field, value)
    }
}

/// A string as `{:?}` writes it: quoted, and escaped only when it holds
/// something to escape.
fn write_quoted(w: &mut Writer<'_>, value: &str) -> fmt::Result {
    let plain = value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
    if plain {
        w.write_char('"')?;
        w.write_str(value)?;
        w.write_char('"')
    } else {
        write!(w, "{value:?}")
    }
}

/// `text` with the terminal control characters the default escapes in a
/// message (ESC, BEL, BS, FF, DEL and the C1 controls) written as escapes,
/// the rest written in runs.
fn write_escaped(w: &mut Writer<'_>, text: &str) -> fmt::Result {
    let mut run = 0;
    for (at, ch) in text.char_indices() {
        let escape = match ch {
            '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}' => ch as u32,
            _ => continue,
        };
        w.write_str(&text[run..at])?;
        if escape < 0x80 {
            write!(w, "\\x{escape:02x}")?;
        } else {
            write!(w, "\\u{{{escape:x}}}")?;
        }
        run = at + ch.len_utf8();
    }
    w.write_str(&text[run..])
}

/// A value whose `{:?}` is escaped as a message is (for the rare message
/// formatted while another is).
struct Escaped<'a>(&'a dyn fmt::Debug);

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{:?}", self.0);
        write_escaped(&mut Writer::new(f), &text)
    }
}

/// The time as `SystemTime` writes it (`2026-12-01T00:47:00.123456Z`, UTC),
/// the date and time of day written once per second per thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct Clock;

thread_local! {
    /// The second last written, and its text up to the fraction.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        write_time(w, SystemTime::now())
    }
}

fn write_time(w: &mut Writer<'_>, at: SystemTime) -> fmt::Result {
    let Ok(since) = at.duration_since(UNIX_EPOCH) else {
        // Before 1970: the default's own form.
        return tracing_subscriber::fmt::time::SystemTime.format_time(w);
    };
    let seconds = since.as_secs();
    SECOND.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != seconds {
            cached.1.clear();
            write_second(&mut cached.1, seconds)?;
            cached.0 = seconds;
        }
        w.write_str(&cached.1)
    })?;
    write!(w, ".{:06}Z", since.subsec_micros())
}

/// `YYYY-MM-DDTHH:MM:SS` of a second since the epoch, as the default writes
/// it (a year past 9999 with a `+`).
fn write_second(out: &mut String, seconds: u64) -> fmt::Result {
    let days = seconds / 86_400;
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    if year > 9999 {
        write!(out, "+{year}")?;
    } else {
        write!(out, "{year:04}")?;
    }
    write!(
        out,
        "-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date of a day counted from 1970-01-01
/// (the days-to-civil algorithm: eras of 400 years beginning in March).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Seek as _};
    use std::sync::Arc;
    use std::time::Duration;

    /// A log written to a file of its own (`&File` is a writer, so an
    /// `Arc<File>` makes writers) and read back.
    #[derive(Clone)]
    struct Buffer(Arc<std::fs::File>);

    impl Buffer {
        fn new() -> Buffer {
            Buffer(Arc::new(tempfile::tempfile().unwrap()))
        }

        fn text(&self) -> String {
            let mut file: &std::fs::File = &self.0;
            file.rewind().unwrap();
            let mut text = String::new();
            file.read_to_string(&mut text).unwrap();
            text
        }
    }

    #[derive(Debug)]
    struct Failure {
        source: Option<Box<Failure>>,
    }
    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let depth = if self.source.is_some() {
                "outer"
            } else {
                "inner \x1b[31m"
            };
            write!(f, "failed: {depth}")
        }
    }
    impl std::error::Error for Failure {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.source.as_deref().map(|e| e as _)
        }
    }

    struct Shown(&'static str);
    impl fmt::Display for Shown {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    /// Every kind of field and span the webhook logs, and the awkward ones.
    fn log_everything() {
        let span = tracing::info_span!(
            "admission",
            endpoint = "validate",
            uid = tracing::field::Empty,
            kind = tracing::field::Empty,
        );
        let _entered = span.enter();
        span.record("uid", "7f0c5b8e-2d4c-4c1e-9a51-0f3c8e2b1a77");
        span.record("kind", "Pod \"quoted\" \u{1b}[2J");
        tracing::info!(
            decision = "patched",
            latency_ms = 0.123_456_f64,
            count = 42_u64,
            delta = -7_i64,
            big = 1_u128 << 100,
            on = true,
            profile = "",
            policies = %Shown("a=allow,b=deny"),
            shape = ?vec!["x", "y\n"],
            "admission review answered"
        );
        tracing::warn!(
            r#type = "raw",
            unicode = "Größe ✓ \u{200b} \u{85} tab\there",
            "answered without evaluation: {} \x07 \u{9b}31m {}",
            "\u{1b}]0;title\x07",
            Shown("\x08\x0c\x7f end")
        );
        tracing::info!(message = "message as a str \x1b[1m and \u{90}", after = 1);
        tracing::info!(message = %Shown("message as Display \x1b"));
        let error = Failure {
            source: Some(Box::new(Failure { source: None })),
        };
        let alone = Failure { source: None };
        tracing::error!(
            error = &error as &(dyn std::error::Error + 'static),
            "first"
        );
        tracing::error!(
            first = 1,
            alone = &alone as &(dyn std::error::Error + 'static)
        );
        tracing::info!(answer = "no message at all");
        // Longer than a thread keeps between lines.
        tracing::info!("{}\x1b{}", "x".repeat(MAX_KEPT_MESSAGE), "y");
        tracing::info!("after the long one \x1b");
        tracing::info!("");
        let nested = tracing::info_span!("inner", path = "/validate?timeout=10s");
        nested.in_scope(|| tracing::info!(n = 1, "nested"));
    }

    fn capture(fields: bool) -> String {
        let buffer = Buffer::new();
        let builder = tracing_subscriber::fmt()
            .with_writer(buffer.0.clone())
            .with_ansi(false)
            .without_time();
        if fields {
            tracing::subscriber::with_default(builder.fmt_fields(Fields).finish(), log_everything);
        } else {
            tracing::subscriber::with_default(builder.finish(), log_everything);
        }
        buffer.text()
    }

    #[test]
    fn fields_are_written_as_the_default_writes_them() {
        let default = capture(false);
        let ours = capture(true);
        assert!(default.contains("\\x1b"), "{default}");
        assert!(default.contains("failed: outer"), "{default}");
        assert_eq!(ours.lines().count(), 11, "{ours}");
        for (d, o) in default.lines().zip(ours.lines()) {
            assert_eq!(o, d);
        }
        assert_eq!(ours, default);
    }

    #[test]
    fn to_a_terminal_the_default_paints_them() {
        let buffer = Buffer::new();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buffer.0.clone())
            .with_ansi(true)
            .without_time()
            .fmt_fields(Fields)
            .finish();
        tracing::subscriber::with_default(subscriber, || tracing::info!(a = "b", "c"));
        let painted = buffer.text();
        assert!(
            painted.contains("\x1b[3ma\x1b[0m\x1b[2m=\x1b[0m\"b\""),
            "{painted:?}"
        );
    }

    fn time_text(at: SystemTime) -> String {
        let mut out = String::new();
        write_time(&mut Writer::new(&mut out), at).unwrap();
        out
    }

    #[test]
    fn the_clock_writes_utc_as_the_default_does() {
        let at = |secs: u64, micros: u64| {
            UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros)
        };
        let cases = [
            (at(0, 0), "1970-01-01T00:00:00.000000Z"),
            (at(951_782_400, 1), "2000-02-29T00:00:00.000001Z"),
            (at(951_868_799, 999_999), "2000-02-29T23:59:59.999999Z"),
            (at(1_709_164_800, 500_000), "2024-02-29T00:00:00.500000Z"),
            (at(1_764_549_000, 123_456), "2025-12-01T00:30:00.123456Z"),
            (at(4_102_444_799, 42), "2099-12-31T23:59:59.000042Z"),
            (at(4_107_542_400, 0), "2100-03-01T00:00:00.000000Z"),
            (at(253_402_300_799, 0), "9999-12-31T23:59:59.000000Z"),
            (at(253_402_300_800, 0), "+10000-01-01T00:00:00.000000Z"),
        ];
        for (time, want) in cases {
            assert_eq!(time_text(time), want);
            // Written again from the second kept for the thread.
            assert_eq!(time_text(time), want);
        }
    }

    #[test]
    fn the_clock_agrees_with_the_default_now() {
        // Both read the clock: compare to the second, retrying across a
        // second's edge.
        for _ in 0..5 {
            let mut default = String::new();
            tracing_subscriber::fmt::time::SystemTime
                .format_time(&mut Writer::new(&mut default))
                .unwrap();
            let mut ours = String::new();
            Clock.format_time(&mut Writer::new(&mut ours)).unwrap();
            assert_eq!(ours.len(), default.len(), "{ours} {default}");
            if ours[..19] == default[..19] {
                return;
            }
        }
        panic!("the clock disagrees with the default");
    }
}
