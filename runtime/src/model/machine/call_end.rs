//! The signal a machine's function call sends its job when its step ends (`done`, or `error`):
//! its data, bounded to what a signal may carry.

use serde_json::{Value, json};

/// The largest a signal's data may be, as JSON (64 KiB): a larger one is refused.
pub const MAX_SIGNAL_DATA_BYTES: usize = 64 * 1024;

/// The data of the signal a machine's function call sends its job when it ends: its step, note
/// and message. Note and message are each up to 64 KiB on the step, the signal's data 64 KiB in
/// all (a call's end refused for its size left the job waiting for ever): each is cut to a
/// quarter of that, saying so; the step keeps them whole.
pub fn call_end_data(step: &str, note: Option<&str>, message: Option<&str>) -> Value {
    let part = MAX_SIGNAL_DATA_BYTES / 4;
    // Measured as JSON, the form the limit applies to: a quote or an ANSI escape takes two or
    // six bytes there.
    let json_len = |t: &str| serde_json::to_string(t).map_or(usize::MAX, |j| j.len());
    let cut = |text: Option<&str>| {
        let text = text?;
        if json_len(text) <= part {
            return Some(text.to_string());
        }
        let mut end = text.len().min(part);
        loop {
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            if json_len(&text[..end]) <= part {
                break;
            }
            end = end * 3 / 4;
        }
        Some(format!(
            "{}… (cut at {part} bytes; the step's own note and message hold it whole)",
            &text[..end]
        ))
    };
    json!({"step": step, "note": cut(note), "message": cut(message)})
}

#[cfg(test)]
mod call_end_tests {
    use super::{MAX_SIGNAL_DATA_BYTES, call_end_data};

    #[test]
    fn a_calls_end_fits_the_signal_it_becomes() {
        let note = "é".repeat(40_000); // 80,000 bytes, two to a character
        let data = call_end_data("call/f#1", Some(&note), Some(&note));
        let size = serde_json::to_vec(&data).map_or(usize::MAX, |v| v.len());
        assert!(size <= MAX_SIGNAL_DATA_BYTES, "{size}");
        let kept = data["note"].as_str().unwrap_or_default();
        assert!(
            kept.starts_with("éé") && kept.contains("cut at 16384 bytes"),
            "{kept}"
        );
        // Escapes count: quotes take two bytes as JSON, an ESC six.
        let noisy = "\"\u{1b}".repeat(20_000);
        let data = call_end_data("call/f#1", Some(&noisy), Some(&noisy));
        let size = serde_json::to_vec(&data).map_or(usize::MAX, |v| v.len());
        assert!(size <= MAX_SIGNAL_DATA_BYTES, "{size}");
        let small = call_end_data("call/f#1", Some("short"), None);
        assert_eq!(small["note"], "short");
        assert!(small["message"].is_null());
    }
}
