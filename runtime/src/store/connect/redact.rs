//! Connection strings without their passwords, for messages, logs and `workdo db url --redact`.

/// A connection string without its passwords, for messages and logs: the URL's `user:password@`,
/// its `password=` and `sslpassword=` query parameters, and the same keys of a libpq key-value
/// string (`host=db password='a b'`), quoted or not. Over-masks rather than leaks: whatever
/// cannot be told apart from a password is masked with it.
pub fn redact(url: &str) -> String {
    let Some(scheme) = url.find("://") else {
        return redact_key_values(url);
    };
    let start = scheme + 3;
    let rest = &url[start..];
    // The user information ends at the last `@` before the query: a password may hold an
    // unencoded `@`, and a query may too (`?user=svc@tenant`). A password holding an unencoded
    // `?` puts its `@` after it, before any `=`: that `@` ends it too.
    let query_at = rest.find('?').unwrap_or(rest.len());
    let at = rest[..query_at].rfind('@').or_else(|| {
        let eq = rest.find('=').unwrap_or(rest.len());
        rest[..eq].rfind('@')
    });
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..start]);
    let after = match at {
        Some(at) => {
            let creds = &rest[..at];
            match creds.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(creds),
            }
            &rest[at..]
        }
        None => rest,
    };
    match after.split_once('?') {
        Some((before, query)) => {
            out.push_str(before);
            out.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if is_password_key(k) => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            out.push_str(&params.join("&"));
        }
        None => out.push_str(after),
    }
    out
}

fn is_password_key(key: &str) -> bool {
    let key = key.trim();
    key.eq_ignore_ascii_case("password") || key.eq_ignore_ascii_case("sslpassword")
}

/// [`redact`] of a libpq key-value string: `key = value` pairs, a value either bare (up to the
/// next space) or single-quoted with backslash escapes.
fn redact_key_values(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(eq) = rest.find('=') {
        let key_part = &rest[..eq];
        let key = key_part.split_whitespace().last().unwrap_or("");
        out.push_str(key_part);
        out.push('=');
        let after = &rest[eq + 1..];
        let spaces = after.len() - after.trim_start().len();
        let value = &after[spaces..];
        let value_len = if value.starts_with('\'') {
            let mut escaped = false;
            let mut end = value.len();
            for (i, c) in value.char_indices().skip(1) {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '\'' => {
                        end = i + 1;
                        break;
                    }
                    _ => {}
                }
            }
            end
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        out.push_str(&after[..spaces]);
        if is_password_key(key) {
            out.push_str("***");
        } else {
            out.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_password() {
        assert_eq!(
            super::redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
    }

    /// Every form a password can take in a connection string is masked (issue 45).
    #[test]
    fn redacts_every_form_of_password() {
        let cases = [
            ("postgres://u:s3cret@h/db", "postgres://u:***@h/db"),
            ("postgres://u:s3@cret@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u@h/db?password=s3cret&sslmode=disable",
                "postgres://u@h/db?password=***&sslmode=disable",
            ),
            (
                "postgresql://h/db?sslmode=require&PASSWORD=s3cret",
                "postgresql://h/db?sslmode=require&PASSWORD=***",
            ),
            (
                "postgres://u@h/db?sslpassword=s3cret",
                "postgres://u@h/db?sslpassword=***",
            ),
            (
                "host=h user=u password=s3cret dbname=db",
                "host=h user=u password=*** dbname=db",
            ),
            (
                "host=h password = 's3 \\'cret' dbname=db",
                "host=h password = *** dbname=db",
            ),
            ("password=s3cret", "password=***"),
            // An `@` in the query, with and without user information before it.
            (
                "postgres://u@h/db?password=s3@cret",
                "postgres://u@h/db?password=***",
            ),
            (
                "postgres://h/db?user=svc@tenant&password=s3cret",
                "postgres://h/db?user=svc@tenant&password=***",
            ),
            (
                "postgres://u:s3pw@h/db?application_name=a@b&password=s3x",
                "postgres://u:***@h/db?application_name=a@b&password=***",
            ),
            // A password holding an unencoded `?`.
            ("postgres://u:s3?cret@h/db", "postgres://u:***@h/db"),
        ];
        for (given, masked) in cases {
            let got = super::redact(given);
            assert_eq!(got, masked, "{given}");
            assert!(!got.contains("s3"), "{got}");
        }
    }
}
