//! Numbers kept exactly as written, or refused.
//!
//! workdo reads JSON into `serde_json::Value`, whose numbers are 64-bit integers or doubles: an
//! integer beyond 64 bits (a 20-digit barcode) or a decimal with more digits than a double
//! holds would be stored silently changed (`36105010362304123456` as `3.6105010362304123e19`).
//! serde_json's `arbitrary_precision` would keep them, but it changes how every untagged and
//! flattened type deserializes; so instead every way JSON enters (API bodies, CLI options and
//! files, a function's result) is scanned first, and a number that would change is refused,
//! naming it, where it is, and the fix: write it as a string.

/// A number in JSON text that a double or a 64-bit integer would not keep exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the number {literal} at line {line}, column {column} cannot be kept exactly (it would be stored as {stored}); write it as a string (\"{literal}\") to keep every digit"
)]
pub struct InexactNumber {
    pub literal: String,
    pub stored: String,
    pub line: usize,
    pub column: usize,
}

/// The first number in `text` (JSON, possibly malformed: the parser reports that) that would not
/// survive a round trip through `serde_json::Value` unchanged in value.
pub fn check_exact(text: &str) -> Result<(), InexactNumber> {
    let bytes = text.as_bytes();
    let (mut i, mut line, mut line_start) = (0, 1, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                line += 1;
                line_start = i + 1;
                i += 1;
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let literal = &text[start..i];
                if let Some(stored) = changed(literal) {
                    return Err(InexactNumber {
                        literal: literal.to_string(),
                        stored,
                        line,
                        column: text[line_start..start].chars().count() + 1,
                    });
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// What `literal` would be stored as, when that differs from its value.
fn changed(literal: &str) -> Option<String> {
    let integer = !literal.contains(['.', 'e', 'E']);
    if integer && (literal.parse::<i64>().is_ok() || literal.parse::<u64>().is_ok()) {
        return None;
    }
    let value: f64 = literal.parse().ok()?;
    if !value.is_finite() {
        return None; // the parser refuses it with its own message
    }
    let stored = serde_json::Number::from_f64(value)?.to_string();
    match (decimal(literal), decimal(&stored)) {
        (Some(written), Some(kept)) => (written != kept).then_some(stored),
        // An exponent beyond any machine number (`1e-99999999999999999999999999999999999999999`):
        // what is kept is not what was written.
        _ => Some(stored),
    }
}

/// A decimal literal's value as (negative, significant digits, exponent of the last digit),
/// with zeros trimmed, so two literals compare equal exactly when their values are. `None`
/// when its exponent is beyond 128 bits.
fn decimal(literal: &str) -> Option<(bool, String, i128)> {
    let (negative, rest) = match literal.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, literal),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i128>().ok()?),
        None => (rest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits = format!("{whole}{fraction}");
    let trailing = digits.len() - digits.trim_end_matches('0').len();
    digits.truncate(digits.len() - trailing);
    let exponent = exponent
        .saturating_sub(fraction.len() as i128)
        .saturating_add(trailing as i128);
    let digits = digits.trim_start_matches('0').to_string();
    if digits.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, digits, exponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_a_double_keeps_pass() {
        for ok in [
            r#"{"a": 1, "b": -2, "c": 1.5, "d": 0.1, "e": 1e3, "f": 1.10, "g": -0.0}"#,
            "18446744073709551615",
            "-9223372036854775808",
            r#"{"s": "36105010362304123456", "t": "1.000000000000000000001"}"#,
            r#"["\"36105010362304123456\"", 2.5e-3, 123456789.125]"#,
            "1e999",
            "not json 12",
        ] {
            assert_eq!(check_exact(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn numbers_a_double_would_change_are_named() {
        let e = check_exact("{\n  \"barcode\": 36105010362304123456\n}").unwrap_err();
        assert_eq!(e.literal, "36105010362304123456");
        assert_eq!((e.line, e.column), (2, 14));
        assert_eq!(e.stored, "3.6105010362304123e+19");
        assert!(e.to_string().contains("\"36105010362304123456\""), "{e}");
        for bad in [
            "18446744073709551616",
            "-9223372036854775809",
            "0.1000000000000000055511151231257827",
            "3.14159265358979323846",
            "1e-99999999999999999999",
            "1.5e-9223372036854775808",
            "1.5e-170141183460469231731687303715884105728000",
        ] {
            assert!(check_exact(bad).is_err(), "{bad}");
        }
        // Columns count characters, not bytes.
        let e = check_exact("[\"é\", 99999999999999999999]").unwrap_err();
        assert_eq!(e.column, 7);
    }
}
