//! The names a filter may take (templates, their steps, statuses and milestones), so that a
//! mistyped filter is named on the page ("no template accesionWF — did you mean accessionWF?")
//! instead of answering with an empty table that reads as "none", and offered as suggestions in
//! the filter fields.

use std::collections::BTreeSet;

use maud::{Markup, html};

use crate::model::status::Status;
use crate::store::{Facet, TemplateRow};

/// The names the loaded templates and the counted steps know.
#[derive(Default)]
pub(super) struct Known {
    pub(super) templates: BTreeSet<String>,
    pub(super) steps: BTreeSet<String>,
    pub(super) statuses: BTreeSet<String>,
    pub(super) milestones: BTreeSet<String>,
}

impl Known {
    /// From the loaded templates and the facets counted before narrowing by step and status
    /// (generated step names, `BRICKLET/STEP`, exist only there).
    pub(super) fn of(templates: &[TemplateRow], facets: &[Facet]) -> Known {
        let mut k = Known::default();
        k.statuses
            .extend(Status::BUILTIN.iter().map(|s| s.to_string()));
        k.milestones.insert("registered".into());
        for t in templates {
            k.templates.insert(t.name.clone());
            for st in &t.spec.steps {
                k.steps.insert(st.name.clone());
                k.statuses.extend(st.statuses.iter().cloned());
                k.milestones.extend(st.lifecycle.iter().cloned());
            }
        }
        for f in facets {
            k.steps.insert(f.step.clone());
            k.statuses.insert(f.status.clone());
        }
        k
    }

    /// What is wrong with the filters given, one sentence each; empty when every name is known.
    pub(super) fn unknown(
        &self,
        template: Option<&str>,
        step: Option<&str>,
        status: Option<&str>,
        milestone: Option<&str>,
    ) -> Vec<String> {
        [
            ("template", template, &self.templates),
            ("step", step, &self.steps),
            ("status", status, &self.statuses),
            ("milestone", milestone, &self.milestones),
        ]
        .into_iter()
        .filter_map(|(what, given, known)| {
            let given = given?;
            (!known.contains(given)).then(|| match closest(given, known) {
                Some(m) => format!("no {what} {given} — did you mean {m}?"),
                None => format!("no {what} {given}"),
            })
        })
        .collect()
    }

    /// `<datalist>`s for the filter fields (`list="known-template"` and so on).
    pub(super) fn datalists(&self) -> Markup {
        html! {
            @for (id, names) in [
                ("known-template", &self.templates),
                ("known-step", &self.steps),
                ("known-status", &self.statuses),
                ("known-milestone", &self.milestones),
            ] {
                datalist id=(id) {
                    @for n in names.iter().take(500) { option value=(n) {} }
                }
            }
        }
    }
}

/// The known name nearest `given`, when one is near enough to be what was meant.
fn closest<'a>(given: &str, known: &'a BTreeSet<String>) -> Option<&'a str> {
    let lower = given.to_lowercase();
    known
        .iter()
        .map(|k| (strsim::levenshtein(&lower, &k.to_lowercase()), k))
        .filter(|(d, k)| *d <= (k.chars().count() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_name_is_offered_and_a_far_one_is_not() {
        let known: BTreeSet<String> = ["accessionWF", "shelve", "error"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(closest("accesionWF", &known), Some("accessionWF"));
        assert_eq!(closest("shelv", &known), Some("shelve"));
        assert_eq!(closest("eror", &known), Some("error"));
        assert_eq!(closest("zzzzzzzz", &known), None);
    }
}
