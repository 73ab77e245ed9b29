use std::borrow::Cow;

// gpu-admission patch: string and bytes literals are read as cel-spec's
// lexical grammar (doc/langdef.md) and cel-go's `parser/unescape.go` read
// them. Upstream toggled "inside quotes" on every quote character, so a
// triple-quoted literal was refused (`MissingOpeningQuote`), `\'` inside
// double quotes (and `\"` inside single quotes) kept its backslash, raw
// strings dropped the backslash of `\"` and `\'`, and `\X` was unknown;
// bytes literals had their first and last two characters cut off by the
// caller (wrong for triple-quoted and raw ones) and knew only `\x` and octal
// escapes. Now the delimiters are recognised first (`'`, `"`, `'''`,
// `"""`, after an optional `r`/`R`), a raw literal is the text between them
// verbatim, and every other literal has its escapes read by one function for
// strings and bytes alike. As in cel-go, a carriage return or CR LF written
// in the literal (only possible in a triple-quoted one) reads as a line feed.

/// Error type of [unescape](unescape).
#[derive(Debug, PartialEq)]
pub enum ParseSequenceError {
    // #[error("invalid escape {escape} at {index} in {string}")]
    InvalidEscape {
        escape: String,
        index: usize,
        string: String,
    },
    // #[error("\\u could not be parsed at {index} in {string}: {source}")]
    InvalidUnicode {
        // #[source]
        source: ParseUnicodeError,
        index: usize,
        string: String,
    },
    MissingOpeningQuote,
    MissingClosingQuote,
}

/// Source error type of [ParseError::InvalidUnicode](ParseError::InvalidUnicode).
// gpu-admission patch: the escape's digits are checked before they are
// converted (upstream's `from_str_radix` accepted a sign, as in `\x+1`, and
// fewer digits than the escape needs), so an escape with wrong digits is an
// `InvalidEscape` and only a code point that is not a character (a surrogate,
// or above U+10FFFF) is left here.
#[derive(Debug, PartialEq, Clone)]
pub enum ParseUnicodeError {
    // #[error("could not parse {value} as a unicode char")]
    Unicode { value: u32 },
}

/// Whether escapes are read for a string literal or a bytes literal.
#[derive(Clone, Copy, PartialEq)]
enum Target {
    String,
    Bytes,
}

/// One unit of a literal's value.
enum Piece {
    Char(char),
    /// An octet given by a `\x`, `\X` or octal escape in a bytes literal.
    Byte(u8),
}

/// Parses a bytes literal given without its `b` or `B` prefix: a quoted
/// string literal as [parse_string] takes it (raw or not, quoted once or
/// three times). Its characters stand for their UTF-8 encoding, and the
/// `\xDD`, `\XDD` and octal `\DDD` escapes for one octet each; `\u` and `\U`
/// are not allowed.
pub fn parse_bytes(s: &str) -> Result<Vec<u8>, ParseSequenceError> {
    let (raw, prefix, body) = split_quoted(s)?;
    let body = normalize_newlines(body);
    if raw {
        return Ok(body.into_owned().into_bytes());
    }
    let mut res: Vec<u8> = Vec::with_capacity(body.len());
    unescape(s, &body, prefix, Target::Bytes, |piece| {
        push_byte(&mut res, piece)
    })?;
    Ok(res)
}

fn push_byte(res: &mut Vec<u8>, piece: Piece) {
    match piece {
        Piece::Char(c) => {
            let mut buffer = [0; 4];
            res.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
        }
        Piece::Byte(b) => res.push(b),
    }
}

/// Parse the provided quoted string.
/// This function was adopted from [snailquote](https://docs.rs/snailquote/latest/snailquote/).
///
/// # Details
///
/// Parses a string quoted with `'`, `"`, `'''` or `"""` and interprets escape
/// sequences such as '\n', '\r', '\'', etc.
///
/// Supports raw strings prefixed with `r` or `R` in which case all escape sequences are ignored.
///
/// The full set of supported escapes between quotes may be found below:
///
/// | Escape     | Code       | Description                              |
/// |------------|------------|------------------------------------------|
/// | \a         | 0x07       | Bell                                     |
/// | \b         | 0x08       | Backspace                                |
/// | \v         | 0x0B       | Vertical tab                             |
/// | \f         | 0x0C       | Form feed                                |
/// | \n         | 0x0A       | Newline                                  |
/// | \r         | 0x0D       | Carriage return                          |
/// | \t         | 0x09       | Tab                                      |
/// | \\         | 0x5C       | Backslash                                |
/// | \?         | 0x3F       | Question mark                            |
/// | \"         | 0x22       | Double quote                             |
/// | \'         | 0x27       | Single quote                             |
/// | \`         | 0x60       | Backtick                                 |
/// | \xDD, \XDD | 0xDD       | Unicode character with hex code DD       |
/// | \uDDDD     | 0xDDDD     | Unicode character with hex code DDDD     |
/// | \UDDDDDDDD | 0xDDDDDDDD | Unicode character with hex code DDDDDDDD |
/// | \DDD       | 0DDD       | Unicode character with octal code DDD (000 to 377) |
///
/// Hexadecimal digits may be upper or lower case.
///
/// # Errors
///
/// The returned result can display a human readable error if the string cannot be parsed as a
/// valid quoted string.
pub fn parse_string(s: &str) -> Result<String, ParseSequenceError> {
    let (raw, prefix, body) = split_quoted(s)?;
    let body = normalize_newlines(body);
    if raw {
        return Ok(body.into_owned());
    }
    let mut res = String::with_capacity(body.len());
    unescape(s, &body, prefix, Target::String, |piece| match piece {
        Piece::Char(c) => res.push(c),
        // Not produced for strings: their `\x` and octal escapes are code points.
        Piece::Byte(b) => res.push(char::from(b)),
    })?;
    Ok(res)
}

/// Splits a quoted literal (after any `b` prefix) into whether it is raw,
/// the number of characters before its content, and its content.
fn split_quoted(s: &str) -> Result<(bool, usize, &str), ParseSequenceError> {
    let (raw, quoted) = match s.strip_prefix(['r', 'R']) {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let delimiter = if quoted.starts_with("'''") || quoted.starts_with("\"\"\"") {
        &quoted[..3]
    } else if quoted.starts_with(['\'', '"']) {
        &quoted[..1]
    } else {
        return Err(ParseSequenceError::MissingOpeningQuote);
    };
    if quoted.len() < 2 * delimiter.len() || !quoted.ends_with(delimiter) {
        return Err(ParseSequenceError::MissingClosingQuote);
    }
    let prefix = s.len() - quoted.len() + delimiter.len();
    Ok((
        raw,
        prefix,
        &quoted[delimiter.len()..quoted.len() - delimiter.len()],
    ))
}

/// A CR LF or a CR written in a literal reads as an LF (cel-go does the same).
fn normalize_newlines(body: &str) -> Cow<'_, str> {
    if body.contains('\r') {
        Cow::Owned(body.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        Cow::Borrowed(body)
    }
}

/// Reads `body` (the content of the literal `literal`, starting `offset`
/// characters into it: error indices count the literal's characters) and
/// hands each character or escaped value to `push`.
fn unescape<F>(
    literal: &str,
    body: &str,
    offset: usize,
    target: Target,
    mut push: F,
) -> Result<(), ParseSequenceError>
where
    F: FnMut(Piece),
{
    let mut chars = body.chars().enumerate().map(|(i, c)| (i + offset, c));
    while let Some((idx, c)) = chars.next() {
        if c != '\\' {
            push(Piece::Char(c));
            continue;
        }
        let invalid = |escape: String, index: usize| ParseSequenceError::InvalidEscape {
            escape,
            index,
            string: String::from(literal),
        };
        let Some((idx, c2)) = chars.next() else {
            return Err(invalid(String::from("\\"), idx));
        };
        let piece = match c2 {
            'a' => Piece::Char('\u{07}'),
            'b' => Piece::Char('\u{08}'),
            'f' => Piece::Char('\u{0C}'),
            'n' => Piece::Char('\n'),
            'r' => Piece::Char('\r'),
            't' => Piece::Char('\t'),
            'v' => Piece::Char('\u{0B}'),
            '\\' | '?' | '"' | '\'' | '`' => Piece::Char(c2),
            'x' | 'X' | 'u' | 'U' | '0'..='3' => {
                let (digits, radix) = match c2 {
                    'x' | 'X' => (2, 16),
                    'u' if target == Target::String => (4, 16),
                    'U' if target == Target::String => (8, 16),
                    // `\u` and `\U` are only for strings.
                    'u' | 'U' => return Err(invalid(format!("\\{c2}"), idx)),
                    _ => (2, 8),
                };
                let mut escape = format!("\\{c2}");
                let mut value = c2.to_digit(8).unwrap_or(0);
                for _ in 0..digits {
                    let digit = chars.next().map(|(_, d)| d);
                    escape.extend(digit);
                    match digit.and_then(|d| d.to_digit(radix)) {
                        Some(d) => value = value * radix + d,
                        None => return Err(invalid(escape, idx)),
                    }
                }
                match target {
                    // At most 0xFF: two hexadecimal digits, or `\377`.
                    Target::Bytes => Piece::Byte(value as u8),
                    Target::String => Piece::Char(char::from_u32(value).ok_or(
                        ParseSequenceError::InvalidUnicode {
                            source: ParseUnicodeError::Unicode { value },
                            index: idx,
                            string: String::from(literal),
                        },
                    )?),
                }
            }
            _ => return Err(invalid(format!("\\{c2}"), idx)),
        };
        push(piece);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_string, ParseSequenceError, ParseUnicodeError};

    #[test]
    fn single_quotes_interprets_escapes() {
        let tests: Vec<(&str, Result<String, ParseSequenceError>)> = vec![
            ("'Hello \\a'", Ok(String::from("Hello \u{07}"))),
            ("'Hello \\b'", Ok(String::from("Hello \u{08}"))),
            ("'Hello \\v'", Ok(String::from("Hello \u{0b}"))),
            ("'Hello \\f'", Ok(String::from("Hello \u{0c}"))),
            ("'Hello \\n'", Ok(String::from("Hello \u{0a}"))),
            ("'Hello \\r'", Ok(String::from("Hello \u{0d}"))),
            ("'Hello \\t'", Ok(String::from("Hello \u{09}"))),
            ("'Hello \\\\'", Ok(String::from("Hello \\"))),
            ("'Hello \\?'", Ok(String::from("Hello ?"))),
            ("'Hello \"'", Ok(String::from("Hello \""))),
            ("'Hello \\''", Ok(String::from("Hello '"))),
            ("'Hello \\`'", Ok(String::from("Hello `"))),
            ("'Hello \\x20'", Ok(String::from("Hello  "))),
            ("'Hello \\u270c'", Ok(String::from("Hello ✌"))),
            ("'Hello \\U0001f431'", Ok(String::from("Hello 🐱"))),
            ("'Hello \\040'", Ok(String::from("Hello  "))),
            (
                "Missing closing quote'",
                Err(ParseSequenceError::MissingOpeningQuote),
            ),
            (
                "'Missing closing quote",
                Err(ParseSequenceError::MissingClosingQuote),
            ),
            // Testing octal value is out of range
            (
                "'\\440'",
                Err(ParseSequenceError::InvalidEscape {
                    escape: String::from("\\4"),
                    index: 2,
                    string: String::from("'\\440'"),
                }),
            ),
        ];

        for (s, expected) in tests {
            let result = parse_string(s);
            assert_eq!(result, expected);
        }
    }

    #[test]
    fn double_quotes_interprets_escapes() {
        let tests: Vec<(&str, Result<String, ParseSequenceError>)> = vec![
            ("\"Hello \\a\"", Ok(String::from("Hello \u{07}"))),
            ("\"Hello \\b\"", Ok(String::from("Hello \u{08}"))),
            ("\"Hello \\v\"", Ok(String::from("Hello \u{0b}"))),
            ("\"Hello \\f\"", Ok(String::from("Hello \u{0c}"))),
            ("\"Hello \\n\"", Ok(String::from("Hello \u{0a}"))),
            ("\"Hello \\r\"", Ok(String::from("Hello \u{0d}"))),
            ("\"Hello \\t\"", Ok(String::from("Hello \u{09}"))),
            ("\"Hello \\\\\"", Ok(String::from("Hello \\"))),
            ("\"Hello \\?\"", Ok(String::from("Hello ?"))),
            ("\"Hello \\\"\"", Ok(String::from("Hello \""))),
            // gpu-admission patch: an escaped quote of the other kind is the
            // quote alone, as cel-spec says (upstream kept the backslash).
            ("\"Hello \\'\"", Ok(String::from("Hello '"))),
            ("\"Hello \\`\"", Ok(String::from("Hello `"))),
            ("\"Hello \\x20 \"", Ok(String::from("Hello   "))),
            ("\"Hello \\x60\"", Ok(String::from("Hello `"))),
            ("\"Hello \\u270c\"", Ok(String::from("Hello ✌"))),
            ("\"Hello \\U0001f431\"", Ok(String::from("Hello 🐱"))),
            ("\"Hello \\040\"", Ok(String::from("Hello  "))),
            (
                "Missing closing quote\"",
                Err(ParseSequenceError::MissingOpeningQuote),
            ),
            (
                "\"Missing closing quote",
                Err(ParseSequenceError::MissingClosingQuote),
            ),
            // Testing octal value is out of range
            (
                "\"\\440\"",
                Err(ParseSequenceError::InvalidEscape {
                    escape: String::from("\\4"),
                    index: 2,
                    string: String::from("\"\\440\""),
                }),
            ),
        ];

        for (s, expected) in tests {
            let result = parse_string(s);
            assert_eq!(result, expected, "Testing {s}");
        }
    }

    #[test]
    fn raw_string_does_not_interpret_escapes() {
        // gpu-admission patch: a raw string is the text between its quotes,
        // every backslash kept. Upstream's cases put the delimiter itself
        // after a backslash (`r"... \" ..."`), which no CEL lexer reads as
        // one literal (a raw literal has no escapes, so the literal ends
        // there), and expected that backslash dropped; the cases below keep
        // the other quote after a backslash instead.
        let tests: Vec<(&str, Result<String, ParseSequenceError>)> = vec![
            // Raw string in double quotes
            // r"Hello \a \' ' \U0001f431 " => Hello \a \' ' \U0001f431
            // R"Hello \a \' ' \U0001f431 " => Hello \a \' ' \U0001f431
            (
                "r\"Hello \\a \\' ' \\U0001f431 \"",
                Ok(String::from("Hello \\a \\' ' \\U0001f431 ")),
            ),
            (
                "R\"Hello \\a \\' ' \\U0001f431 \"",
                Ok(String::from("Hello \\a \\' ' \\U0001f431 ")),
            ),
            // Raw string in single quotes
            // r'Hello \a \" " \U0001f431 ' => Hello \a \" " \U0001f431
            // R'Hello \a \" " \U0001f431 ' => Hello \a \" " \U0001f431
            (
                "r'Hello \\a \\\" \" \\U0001f431 '",
                Ok(String::from("Hello \\a \\\" \" \\U0001f431 ")),
            ),
            (
                "R'Hello \\a \\\" \" \\U0001f431 '",
                Ok(String::from("Hello \\a \\\" \" \\U0001f431 ")),
            ),
        ];

        for (s, expected) in tests {
            let result = parse_string(s);
            assert_eq!(result, expected, "Testing {s}");
        }
    }

    #[test]
    fn parses_bytes() {
        // gpu-admission patch: `parse_bytes` takes the quoted literal (after
        // its `b` prefix), as `parse_string` does.
        let bytes = parse_bytes("'abc💖\\xFF\\376'").expect("Must parse!");
        assert_eq!([97, 98, 99, 240, 159, 146, 150, 255, 254], *bytes)
    }

    // gpu-admission patch: the tests below follow cel-spec's string and
    // bytes literals (doc/langdef.md, and its conformance tests
    // `parse/string_literals`, `parse/bytes_literals`, `basic/*`).

    fn string(s: &str) -> String {
        parse_string(s).unwrap_or_else(|e| panic!("{s}: {e:?}"))
    }

    fn bytes(s: &str) -> Vec<u8> {
        parse_bytes(s).unwrap_or_else(|e| panic!("{s}: {e:?}"))
    }

    #[test]
    fn every_quote_form_delimits_a_string() {
        for s in [
            "'hello'",
            "\"hello\"",
            "'''hello'''",
            "\"\"\"hello\"\"\"",
            "r'hello'",
            "R\"hello\"",
            "r'''hello'''",
            "R\"\"\"hello\"\"\"",
        ] {
            assert_eq!(string(s), "hello", "{s}");
        }
        for s in [
            "''",
            "\"\"",
            "''''''",
            "\"\"\"\"\"\"",
            "r''",
            "r''''''",
            "R\"\"\"\"\"\"",
        ] {
            assert_eq!(string(s), "", "{s}");
        }
        // The quotes of the other kind, and single quotes of the same kind
        // in a triple-quoted string, are plain characters.
        assert_eq!(string("''' ? \" ' ` '''"), " ? \" ' ` ");
        assert_eq!(string("\"\"\" ? \" ' ` \"\"\""), " ? \" ' ` ");
        assert_eq!(string("'''x''x'''"), "x''x");
        assert_eq!(string("'\"\"'"), "\"\"");
    }

    #[test]
    fn a_string_without_its_quotes_is_refused() {
        for s in ["", "hello", "r", "rhello", "b'x'"] {
            assert_eq!(
                parse_string(s),
                Err(ParseSequenceError::MissingOpeningQuote),
                "{s}"
            );
        }
        for s in [
            "'",
            "'hello",
            "'hello\"",
            "'''hello'",
            "'''",
            "\"\"\"hello\"",
            "r'x",
        ] {
            assert_eq!(
                parse_string(s),
                Err(ParseSequenceError::MissingClosingQuote),
                "{s}"
            );
        }
    }

    #[test]
    fn punctuation_escapes_are_the_character_in_every_quote_form() {
        for q in ["'", "\"", "'''", "\"\"\""] {
            let s = format!("{q} \\\\ \\? \\\" \\' \\` {q}");
            assert_eq!(string(&s), " \\ ? \" ' ` ", "{s}");
        }
        assert_eq!(
            string("\"\\a\\b\\f\\n\\r\\t\\v\\\"\\'\\\\\""),
            "\u{7}\u{8}\u{c}\n\r\t\u{b}\"'\\"
        );
    }

    #[test]
    fn hexadecimal_escapes_take_either_case() {
        assert_eq!(
            string("' \\x4a \\x4B \\X4c \\X4D \\u01aB \\U000001aB '"),
            " J K L M \u{1ab} \u{1ab} "
        );
        assert_eq!(string("' \\X00 \\X0A \\X7F '"), " \0 \n \u{7f} ");
        assert_eq!(string("'\\xFF'"), "\u{ff}");
        assert_eq!(string("'\\uFFFB \\U0001F62C'"), "\u{fffb} \u{1f62c}");
        // An unassigned code point is a character all the same.
        assert_eq!(string("'\\U00088888'"), "\u{88888}");
    }

    #[test]
    fn octal_escapes_are_code_points_in_strings() {
        assert_eq!(string("' \\000 \\012 \\177 '"), " \0 \n \u{7f} ");
        assert_eq!(string("'\\303\\277'"), "\u{c3}\u{bf}");
        assert_eq!(string("'\\377'"), "\u{ff}");
    }

    #[test]
    fn raw_strings_keep_every_backslash() {
        let escapes = " \\\\ \\\\? \\\" \\' \\` \\a \\b \\f \\t \\v \\n \\r \\000 \\x00 \\X00 \\u0000 \\U00000000 ";
        for q in ["'''", "\"\"\""] {
            for r in ["r", "R"] {
                let s = format!("{r}{q}{escapes}{q}");
                assert_eq!(string(&s), escapes, "{s}");
            }
        }
        assert_eq!(string("r'\\\\'"), "\\\\");
        assert_eq!(string("r\"\\\\\""), "\\\\");
        assert_eq!(string("r'\\'"), "\\");
    }

    #[test]
    fn line_ends_in_triple_quoted_strings_read_as_line_feeds() {
        assert_eq!(string("''' \n '''"), " \n ");
        assert_eq!(string("''' \r\n '''"), " \n ");
        assert_eq!(string("\"\"\" \r \"\"\""), " \n ");
        assert_eq!(string("r''' \r\n '''"), " \n ");
        // Escaped, they are what they say.
        assert_eq!(string("' \\r\\n '"), " \r\n ");
        assert_eq!(bytes("''' \r\n '''"), b" \n ");
    }

    #[test]
    fn malformed_escapes_are_refused() {
        let invalid = |s: &str, escape: &str, index: usize| {
            assert_eq!(
                parse_string(s),
                Err(ParseSequenceError::InvalidEscape {
                    escape: escape.to_string(),
                    index,
                    string: s.to_string(),
                }),
                "{s}"
            );
        };
        invalid("'\\q'", "\\q", 2);
        invalid("'\\8'", "\\8", 2);
        invalid("'ab\\'", "\\", 3);
        invalid("'\\x4'", "\\x4", 2);
        invalid("'\\x+1'", "\\x+", 2);
        invalid("'\\u12g4'", "\\u12g", 2);
        invalid("'\\U0001F62'", "\\U0001F62", 2);
        invalid("'\\38'", "\\38", 2);
        invalid("'''\\q'''", "\\q", 4);
    }

    #[test]
    fn escapes_of_code_points_that_are_not_characters_are_refused() {
        for (s, value) in [("'\\uD800'", 0xD800), ("'\\U00110000'", 0x110000)] {
            assert_eq!(
                parse_string(s),
                Err(ParseSequenceError::InvalidUnicode {
                    source: ParseUnicodeError::Unicode { value },
                    index: 2,
                    string: s.to_string(),
                }),
                "{s}"
            );
        }
    }

    #[test]
    fn bytes_literals_in_every_quote_form() {
        for s in [
            "'hello'",
            "\"hello\"",
            "'''hello'''",
            "\"\"\"hello\"\"\"",
            "r'hello'",
            "R\"\"\"hello\"\"\"",
        ] {
            assert_eq!(bytes(s), b"hello", "{s}");
        }
        assert_eq!(bytes("''' ? \" ' ` '''"), b" ? \" ' ` ");
        assert_eq!(bytes("\"\"\" \n \"\"\""), b" \n ");
    }

    #[test]
    fn bytes_escapes() {
        assert_eq!(bytes("' \\\\ \\? \\\" \\' \\` '"), b" \\ ? \" ' ` ");
        assert_eq!(
            bytes("' \\a \\b \\f \\t \\v \\n \\r '"),
            b" \x07 \x08 \x0c \t \x0b \n \r "
        );
        assert_eq!(bytes("' \\000 \\012 \\177 \\377 '"), b" \0 \n \x7f \xff ");
        assert_eq!(bytes("' \\x00 \\x0A \\x7F \\xFF '"), b" \0 \n \x7f \xff ");
        assert_eq!(bytes("' \\X00 \\X0a \\X7f \\XFF '"), b" \0 \n \x7f \xff ");
        // Characters stand for their UTF-8 encoding; escapes for octets.
        assert_eq!(bytes("'\u{ff}'"), b"\xc3\xbf");
        assert_eq!(bytes("'\\303\\277'"), b"\xc3\xbf");
        assert_eq!(bytes("'\\000\\xff'"), b"\0\xff");
    }

    #[test]
    fn unicode_escapes_are_refused_in_bytes() {
        for (s, escape) in [("'\\u0000'", "\\u"), ("'\\U00000000'", "\\U")] {
            assert_eq!(
                parse_bytes(s),
                Err(ParseSequenceError::InvalidEscape {
                    escape: escape.to_string(),
                    index: 2,
                    string: s.to_string(),
                }),
                "{s}"
            );
        }
    }

    #[test]
    fn raw_bytes_keep_every_backslash() {
        let escapes =
            " \\\\ \\? \\\" \\` \\a \\b \\f \\t \\v \\n \\r \\000 \\x00 \\X00 \\u0000 \\U00000000 ";
        for s in [
            format!("r'{escapes}'"),
            format!("R'{escapes}'"),
            format!("r'''{escapes}'''"),
            format!("R\"\"\"{escapes}\"\"\""),
        ] {
            assert_eq!(bytes(&s), escapes.as_bytes(), "{s}");
        }
    }
}
