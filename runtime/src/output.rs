//! Printing for people and scripts: JSON when asked (`--json`), aligned tables otherwise.
//! The CLI, the bench and the demo all print through here.

use std::io::Write;

use serde::Serialize;

/// Print `value` as JSON, or run `text` to print it for people.
pub fn emit<T: Serialize + ?Sized>(
    out: &mut impl Write,
    json: bool,
    value: &T,
    text: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, value).map_err(std::io::Error::other)?;
        writeln!(out)?;
    } else {
        text(out)?;
    }
    Ok(())
}

/// Left-aligned columns.
pub fn table(
    o: &mut dyn Write,
    headers: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |o: &mut dyn Write, cells: Vec<&str>| -> std::io::Result<()> {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        writeln!(o, "{}", s.trim_end())
    };
    line(o, headers.to_vec())?;
    for r in &rows {
        line(o, r.iter().map(String::as_str).collect())?;
    }
    if rows.is_empty() {
        writeln!(o, "(none)")?;
    }
    Ok(())
}

/// A duration as a person reads it: `340 ms`, `12.3 s`, `1 min 53 s`, `3 h 05 min`,
/// `2 d 4 h` (not `113424.7`).
/// Run `work` with a spinner saying `what` and the time taken, on a terminal (stderr): a
/// command that changes thousands of rows in one transaction shows it is working, as
/// `archive`'s bar does, and prints its one-line summary when done. Nothing is drawn when
/// stderr is not a terminal.
pub async fn spinning<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    let bar = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_message(what.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let done = work.await;
    bar.finish_and_clear();
    done
}

/// `n` with its noun in the singular or the plural: `1 step`, `7 states`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub fn human_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return String::new();
    }
    if secs < 1.0 {
        return format!("{:.0} ms", secs * 1000.0);
    }
    if secs < 60.0 {
        return format!("{secs:.1} s");
    }
    let whole = secs.round() as u64;
    let (d, h, m, s) = (
        whole / 86_400,
        whole % 86_400 / 3600,
        whole % 3600 / 60,
        whole % 60,
    );
    if d > 0 {
        format!("{d} d {h} h")
    } else if h > 0 {
        format!("{h} h {m:02} min")
    } else {
        format!("{m} min {s} s")
    }
}

/// What a step's "note / error" column says: a step in `retrying` shows its error and when it
/// runs again; one that failed and is queued or running again keeps its last error in sight
/// (`last error: …`) until it completes; otherwise its error, else its note.
pub fn step_remark(
    status: &str,
    error: Option<&str>,
    note: Option<&str>,
    run_at: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    match (status, error) {
        ("retrying", Some(e)) => {
            let wait = (run_at - now).num_milliseconds() as f64 / 1000.0;
            if wait > 0.0 {
                format!("{e} — runs again in {}", human_duration(wait))
            } else {
                format!("{e} — runs again now")
            }
        }
        ("ready" | "started", Some(e)) => format!("last error: {e}"),
        (_, Some(e)) => e.to_string(),
        (_, None) => note.unwrap_or("").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{human_duration, step_remark};

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human_duration(0.34), "340 ms");
        assert_eq!(human_duration(12.34), "12.3 s");
        assert_eq!(human_duration(113.4247), "1 min 53 s");
        assert_eq!(human_duration(11_100.0), "3 h 05 min");
        assert_eq!(human_duration(187_200.0), "2 d 4 h");
        assert_eq!(human_duration(f64::NAN), "");
    }

    #[test]
    fn a_retry_keeps_its_error_in_sight() {
        let now = chrono::Utc::now();
        let later = now + chrono::Duration::seconds(90);
        assert_eq!(
            step_remark("retrying", Some("timeout"), None, later, now),
            "timeout — runs again in 1 min 30 s"
        );
        assert_eq!(
            step_remark("ready", Some("timeout"), Some("n"), now, now),
            "last error: timeout"
        );
        assert_eq!(step_remark("error", Some("bad"), None, now, now), "bad");
        assert_eq!(
            step_remark("completed", None, Some("done"), now, now),
            "done"
        );
    }
}
