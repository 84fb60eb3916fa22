//! Object ids: one rule, the same in the CLI, the JSON API, the workflow-service routes and SQL
//! (`workdo.object_id`, migrations/engine/05_object_ids.sql, kept equal by a property test).
//!
//! An id is `scheme:value`: a scheme of a lowercase letter then up to 31 lowercase letters,
//! digits or `+.-`, a colon, and a value; 1–200 bytes of UTF-8, none of them whitespace or
//! control characters. The `druid` scheme's value must be a druid (`bb123cd4567`: two letters, three
//! digits, two letters, four digits), and a bare druid means `druid:` + it, so
//! `bc123df4567` and `druid:bc123df4567` are one object.

/// `^[a-z]{2}[0-9]{3}[a-z]{2}[0-9]{4}$`, as the SQL twin writes it.
fn is_druid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 11
        && b[..2].iter().all(u8::is_ascii_lowercase)
        && b[2..5].iter().all(u8::is_ascii_digit)
        && b[5..7].iter().all(u8::is_ascii_lowercase)
        && b[7..].iter().all(u8::is_ascii_digit)
}

/// `^[a-z][a-z0-9+.-]{0,31}$`.
fn is_scheme(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=32).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"+.-".contains(c))
}

/// The longest object id.
pub const MAX_LEN: usize = 200;

/// `id` in its one spelling (a bare druid gains `druid:`), or why it is not an object id.
///
/// # Errors
/// A message naming the id and the rule it breaks.
pub fn normalize(id: &str) -> Result<String, String> {
    let shown: String = id.chars().take(80).collect();
    if is_druid(id) {
        return Ok(format!("druid:{id}"));
    }
    // Counted in bytes (UTF-8), as SQL's twin counts them: a character outside ASCII takes 2-4.
    if id.is_empty() || id.len() > MAX_LEN {
        return Err(format!(
            "invalid object id {shown:?}: 1-{MAX_LEN} bytes (UTF-8; a character outside ASCII takes 2 to 4)"
        ));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "invalid object id {shown:?}: no spaces or control characters"
        ));
    }
    let Some((scheme, value)) = id
        .split_once(':')
        .filter(|(scheme, value)| is_scheme(scheme) && !value.is_empty())
    else {
        return Err(format!(
            "invalid object id {shown:?}: expected SCHEME:VALUE, e.g. druid:bb123cd4567 or ark:/13030/tf5p30086k"
        ));
    };
    if scheme == "druid" && !is_druid(value) {
        return Err(format!(
            "invalid druid {shown:?}: expected druid:bb123cd4567 (two letters, three digits, two letters, four digits)"
        ));
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn druids_have_one_spelling() {
        assert_eq!(normalize("bc123df4567").as_deref(), Ok("druid:bc123df4567"));
        assert_eq!(
            normalize("druid:ap111ap1111").as_deref(),
            Ok("druid:ap111ap1111")
        );
        for bad in [
            "druid:xyz",
            "druid:1234",
            "druid:bb123cd456",
            "druid:",
            "druid:BB123CD4567",
        ] {
            assert!(normalize(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn other_schemes_need_a_scheme_and_a_value() {
        assert!(normalize("ark:/13030/tf5p30086k").is_ok());
        assert!(normalize("obj:1").is_ok());
        for bad in [
            "",
            "none",
            ":x",
            "Obj:1",
            "obj:",
            "has space:x",
            "a:b\u{0}",
            "a:b c",
        ] {
            assert!(normalize(bad).is_err(), "{bad:?}");
        }
        assert!(normalize(&format!("x:{}", "a".repeat(300))).is_err());
    }
}
