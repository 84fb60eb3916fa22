//! The workflow service's XML, written as the real service writes it, and its status
//! vocabulary: the one place where workdo's statuses become the service's words and back.
//!
//! workdo's `ready` (prerequisites done, start time come, in a queue) is the service's
//! `queued`: what its robots (lyber-core) check before they work a step. A step the template
//! keeps out of queues (`skip-queue`) reads `waiting`, as it does there, and so does a step
//! `scheduled` for later. Every other status keeps its name. The JSON API keeps workdo's own
//! words.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::model::status::Status;
use crate::model::template::Template;
use crate::store::{StepRow, WorkflowView};

/// A status as the workflow service says it ([`Status::service_name`]).
pub(super) fn wire_status(status: &str, skip_queue: bool, handoff: bool) -> String {
    match Status::parse(status) {
        Some(s) => s.service_name(skip_queue, handoff).to_string(),
        None => status.to_string(),
    }
}

/// Escape text for an XML attribute or element (for [`Tag`]; nothing else writes XML text).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 cannot carry at all, not even as a reference (C0 controls but
            // tab and line ends, U+FFFE, U+FFFF): a note or a function's stderr with ANSI colour
            // codes made the document one a strict parser refuses.
            c if is_xml_char(c) => out.push(c),
            _ => out.push(char::REPLACEMENT_CHARACTER),
        }
    }
    out
}

/// Whether XML 1.0 allows `c` in a document (its production `Char`; Rust's `char` has no
/// surrogates).
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{FFFD}' | '\u{10000}'..)
}

/// An XML element being written, its attribute values and text escaped by construction: a
/// caller gives raw values, never escaped text, so no value can be written unescaped (the
/// page's maud templates hold the same rule).
pub(super) struct Tag<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl<'a> Tag<'a> {
    /// `<name` opened on `out`.
    pub(super) fn open(out: &'a mut String, name: &'static str) -> Self {
        out.push('<');
        out.push_str(name);
        Tag { out, name }
    }

    /// ` key="value"`, the value escaped.
    pub(super) fn attr(self, key: &str, value: impl std::fmt::Display) -> Self {
        let _ = write!(self.out, r#" {key}=""#);
        self.out.push_str(&esc(&value.to_string()));
        self.out.push('"');
        self
    }

    /// The attribute when there is a value.
    pub(super) fn attr_if(self, key: &str, value: Option<impl std::fmt::Display>) -> Self {
        match value {
            Some(v) => self.attr(key, v),
            None => self,
        }
    }

    /// `/>`: an element without content.
    pub(super) fn empty(self) {
        self.out.push_str("/>");
    }

    /// `>text</name>`, the text escaped.
    pub(super) fn text(self, text: &str) {
        self.out.push('>');
        self.out.push_str(&esc(text));
        let _ = write!(self.out, "</{}>", self.name);
    }

    /// `>`, and the element's end to write with [`close`] once its content is written.
    pub(super) fn start(self) -> &'static str {
        self.out.push('>');
        self.name
    }
}

/// `</name>`.
pub(super) fn close(out: &mut String, name: &'static str) {
    let _ = write!(out, "</{name}>");
}

pub(super) fn xml(body: String) -> Response {
    (
        [(header::CONTENT_TYPE, "application/xml; charset=utf-8")],
        body,
    )
        .into_response()
}

/// What the XML of the workflows shown depends on: their templates by id (which steps skip
/// queues) and whether the hand-off is in use.
#[derive(Default)]
pub(super) struct Specs {
    pub templates: HashMap<i64, Template>,
    pub handoff: bool,
}

/// A workflow's context as the service writes it in each `<process context=…>`: compact JSON,
/// or nothing when there is none.
fn context_text(context: &serde_json::Value) -> String {
    match context {
        serde_json::Value::Object(m) if m.is_empty() => String::new(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A time as the service writes it (Ruby's `iso8601`): whole seconds, `+00:00`.
pub(super) fn service_time(at: &chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

/// `elapsed` as the service writes it: a Ruby float (`2.5`, `3.0`, `0.0` for an update that gave
/// none), or nothing for a step no one has updated yet (still waiting for its turn).
fn elapsed_text(elapsed: Option<f64>, status: &str) -> String {
    let untouched = matches!(
        Status::parse(status),
        Some(Status::Waiting | Status::Ready | Status::Scheduled) | None
    );
    match elapsed {
        None if untouched => String::new(),
        None => "0.0".into(),
        Some(e) if e.fract() == 0.0 && e.abs() < 1e15 => format!("{e:.1}"),
        Some(e) => format!("{e}"),
    }
}

/// `<process …/>` with the service's attributes in its order: version, note, lifecycle, laneId,
/// elapsed, attempts, datetime, context, status, name, then errorMessage and errorText when
/// there are. workdo's own fields (priority, its count of attempts, microseconds) are on its
/// JSON API: here `attempts` is the service's, which nothing but a client's PUT sets (0).
fn process_xml(out: &mut String, s: &StepRow, context: &str, status: &str) {
    // A step queued or running again keeps its last error for workdo's own views; the
    // service's clients see errors on steps in error only, as the service shows them.
    let again = matches!(
        Status::parse(&s.status),
        Some(Status::Ready | Status::Started)
    );
    Tag::open(out, "process")
        .attr("version", s.version)
        .attr("note", s.note.as_deref().unwrap_or(""))
        .attr("lifecycle", s.lifecycle.as_deref().unwrap_or(""))
        .attr("laneId", &s.lane)
        .attr("elapsed", elapsed_text(s.elapsed, &s.status))
        .attr("attempts", 0)
        .attr("datetime", service_time(&s.updated_at))
        .attr("context", context)
        .attr("status", status)
        .attr("name", &s.name)
        .attr_if("errorMessage", s.error_message.as_ref().filter(|_| !again))
        .attr_if("errorText", s.error_text.as_ref().filter(|_| !again))
        .empty();
}

/// `<workflow objectId id>` with every step of `views` (all versions, oldest first).
pub(super) fn workflow_xml(
    out: &mut String,
    object: &str,
    template: &str,
    views: &[&WorkflowView],
    specs: &Specs,
) {
    let end = Tag::open(out, "workflow")
        .attr("repository", "dor")
        .attr("objectId", object)
        .attr("id", template)
        .start();
    for v in views {
        let context = context_text(&v.workflow.context);
        let spec = specs.templates.get(&v.workflow.template_id);
        for s in &v.steps {
            let skip_queue = spec
                .and_then(|t| t.step(&s.name))
                .is_some_and(|st| st.skip_queue);
            let status = wire_status(&s.status, skip_queue, specs.handoff);
            process_xml(out, s, &context, &status);
        }
    }
    close(out, end);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_escape_what_they_are_given() {
        let mut out = String::new();
        let end = Tag::open(&mut out, "a").attr("b", "<\"&'>").start();
        Tag::open(&mut out, "c").text("x < y");
        Tag::open(&mut out, "d").attr_if("e", None::<&str>).empty();
        close(&mut out, end);
        assert_eq!(
            out,
            r#"<a b="&lt;&quot;&amp;&apos;&gt;"><c>x &lt; y</c><d/></a>"#
        );
    }

    #[test]
    fn characters_xml_cannot_carry_are_replaced() {
        assert_eq!(
            esc("a\u{1}b\u{1b}[31mc\td\ne\u{FFFE}<"),
            "a\u{FFFD}b\u{FFFD}[31mc\td\ne\u{FFFD}&lt;"
        );
        assert_eq!(esc("ü 😀"), "ü 😀");
    }

    #[test]
    fn elapsed_and_times_are_written_as_ruby_writes_them() {
        assert_eq!(elapsed_text(Some(2.5), "completed"), "2.5");
        assert_eq!(elapsed_text(Some(3.0), "completed"), "3.0");
        assert_eq!(elapsed_text(Some(0.125), "completed"), "0.125");
        assert_eq!(elapsed_text(None, "completed"), "0.0");
        assert_eq!(elapsed_text(None, "error"), "0.0");
        assert_eq!(elapsed_text(None, "waiting"), "");
        assert_eq!(elapsed_text(None, "ready"), "");
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-29T08:30:01.123456Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .expect("time");
        assert_eq!(service_time(&at), "2026-11-29T08:30:01+00:00");
    }

    #[test]
    fn ready_is_queued_on_the_wire_with_the_hand_off_and_waiting_without() {
        assert_eq!(wire_status("ready", false, true), "queued");
        assert_eq!(wire_status("ready", false, false), "waiting");
        assert_eq!(wire_status("ready", true, true), "waiting");
        assert_eq!(wire_status("scheduled", false, true), "waiting");
        assert_eq!(wire_status("retrying", false, true), "retrying");
        assert_eq!(wire_status("IN PROCESS", false, true), "IN PROCESS");
        assert_eq!(wire_status("queued", false, false), "queued");
    }
}
