//! The hand-off to Sidekiq robots: which queue and which job class a ready step is pushed as.
//! The defaults are the workflow service's own rules (its `QueueService`), so robot suites
//! written for it read the same queues; a deployment can change every part of them in a YAML
//! file (`--sidekiq-rules`).
//!
//! - class: `Robots::{Repo}Repo::{Workflow}::{Process}`: `Repo` is `Sdr` for the workflows
//!   listed under `sdr_workflows`, else `Dor`; `Workflow` is the workflow's name without its
//!   first `WF`, camelized as ActiveSupport does; `Process` the step's name with `-` as `_`,
//!   camelized.
//! - queue: the class's entry in `special`, else `{workflow}_{lane}_dsa` for a class listed in
//!   `dsa`, else `{workflow}_{lane}`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// How ready steps become Sidekiq jobs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rules {
    /// Workflows whose robots live in the `Sdr` repository namespace.
    pub sdr_workflows: Vec<String>,
    /// Job classes read from `{workflow}_{lane}_dsa` queues.
    pub dsa: Vec<String>,
    /// Job classes with a queue of their own.
    pub special: BTreeMap<String, String>,
}

impl Default for Rules {
    /// The workflow service's `QueueService` rules.
    fn default() -> Self {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Rules {
            sdr_workflows: s(&["preservationIngestWF", "sdrIngestWF"]),
            dsa: s(&[
                "Robots::DorRepo::Accession::Publish",
                "Robots::DorRepo::Accession::Shelve",
                "Robots::DorRepo::Accession::ResetWorkspace",
                "Robots::DorRepo::Accession::SdrIngestTransfer",
                "Robots::DorRepo::Accession::UpdateDoi",
                "Robots::DorRepo::Accession::UpdateOrcidWork",
                "Robots::DorRepo::Goobi::GoobiNotify",
            ]),
            special: [
                ("Robots::DorRepo::Assembly::Jp2Create", "assemblyWF_jp2"),
                (
                    "Robots::DorRepo::Release::UpdateMarc",
                    "releaseWF_update-marc_dsa",
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }
    }
}

/// ActiveSupport's `camelize`: the leading lowercase run capitalized, then each run after `_`
/// (or `/`, which becomes `::`) capitalized (first letter up, the rest down), the `_` dropped.
pub fn camelize(text: &str) -> String {
    let lead = text
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .unwrap_or(text.len());
    let mut out = capitalize(&text[..lead]);
    let mut rest = &text[lead..];
    while !rest.is_empty() {
        let sep = rest.find(['_', '/']).unwrap_or(rest.len());
        out.push_str(&rest[..sep]);
        rest = &rest[sep..];
        let Some(c) = rest.chars().next() else { break };
        rest = &rest[1..];
        if c == '/' {
            out.push_str("::");
        }
        let run = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        out.push_str(&capitalize(&rest[..run]));
        rest = &rest[run..];
    }
    out
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

impl Rules {
    /// The job class of `workflow`'s `process`.
    pub fn class_name(&self, workflow: &str, process: &str) -> String {
        let repo = if self.sdr_workflows.iter().any(|w| w == workflow) {
            "Sdr"
        } else {
            "Dor"
        };
        let wf = workflow.replacen("WF", "", 1);
        format!(
            "Robots::{repo}Repo::{}::{}",
            camelize(&wf),
            camelize(&process.replace('-', "_"))
        )
    }

    /// The queue a job of `class` for `workflow` in `lane` goes to.
    pub fn queue_name(&self, class: &str, workflow: &str, lane: &str) -> String {
        if let Some(q) = self.special.get(class) {
            q.clone()
        } else if self.dsa.iter().any(|c| c == class) {
            format!("{workflow}_{lane}_dsa")
        } else {
            format!("{workflow}_{lane}")
        }
    }

    /// Rules from a YAML file's text (every key optional; an absent one keeps the default).
    ///
    /// # Errors
    /// Malformed YAML or an unknown key, with its line.
    pub fn parse(origin: &str, text: &str) -> Result<Rules, String> {
        serde_norway::from_str(text).map_err(|e| match e.location() {
            Some(l) => format!("{origin}:{}: {e}", l.line()),
            None => format!("{origin}: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workflow service's own examples (its queue_service_spec) and ActiveSupport's.
    #[test]
    fn the_services_names() {
        let r = Rules::default();
        for (wf, step, class, queue) in [
            (
                "assemblyWF",
                "jp2-create",
                "Robots::DorRepo::Assembly::Jp2Create",
                "assemblyWF_jp2",
            ),
            (
                "accessionWF",
                "publish",
                "Robots::DorRepo::Accession::Publish",
                "accessionWF_default_dsa",
            ),
            (
                "accessionWF",
                "technical-metadata",
                "Robots::DorRepo::Accession::TechnicalMetadata",
                "accessionWF_default",
            ),
            (
                "preservationIngestWF",
                "transfer-object",
                "Robots::SdrRepo::PreservationIngest::TransferObject",
                "preservationIngestWF_default",
            ),
            (
                "releaseWF",
                "update-marc",
                "Robots::DorRepo::Release::UpdateMarc",
                "releaseWF_update-marc_dsa",
            ),
            (
                "wasSeedPreassemblyWF",
                "md5_gen",
                "Robots::DorRepo::WasSeedPreassembly::Md5Gen",
                "wasSeedPreassemblyWF_default",
            ),
            (
                "accession2WF",
                "sdr-ingest-transfer",
                "Robots::DorRepo::Accession2::SdrIngestTransfer",
                "accession2WF_default",
            ),
        ] {
            let c = r.class_name(wf, step);
            assert_eq!(c, class);
            assert_eq!(r.queue_name(&c, wf, "default"), queue, "{wf}:{step}");
        }
        assert_eq!(camelize("update_DOI"), "UpdateDoi");
        assert_eq!(camelize("a/b_c"), "A::BC");
    }

    #[test]
    fn rules_files_override_and_refuse_unknown_keys() {
        let r = Rules::parse(
            "r.yaml",
            "dsa: []\nspecial: { \"Robots::DorRepo::X::Y\": only_y }\n",
        )
        .expect("rules");
        assert!(r.dsa.is_empty());
        assert_eq!(r.sdr_workflows, Rules::default().sdr_workflows);
        assert_eq!(
            r.queue_name("Robots::DorRepo::X::Y", "xWF", "default"),
            "only_y"
        );
        let e = Rules::parse("r.yaml", "dsa: []\nqueues: x\n").expect_err("unknown key");
        assert!(e.starts_with("r.yaml:2"), "{e}");
    }
}
