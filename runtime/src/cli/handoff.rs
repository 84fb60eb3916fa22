//! `workdo handoff`: whether ready robot steps are handed off (to Sidekiq), a setting stored in
//! the database so that `serve`, `up` and `worker` agree on what the workflow service's routes
//! call a ready step: `queued` with the hand-off, `waiting` without (issue 48).

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

use crate::output::emit;
use crate::store::Store;

#[derive(Debug, Subcommand)]
pub enum HandoffCmd {
    /// Hand ready robot steps off to TARGET: the workflow service's routes then call a ready
    /// step `queued`, as the service does once it pushed it (a `workdo up` with
    /// --sidekiq-redis pushes them; starting one turns this on).
    #[command(after_help = "Example: workdo handoff enable sidekiq")]
    Enable {
        /// Where the steps go.
        #[arg(value_parser = ["sidekiq"])]
        target: String,
    },
    /// No hand-off: a ready robot step reads `waiting` and is listed by `?waiting=` for robots
    /// that poll, which set it `queued` themselves before working it.
    #[command(after_help = "Example: workdo handoff disable")]
    Disable,
    /// Say whether a hand-off is in use.
    #[command(after_help = "Example: workdo handoff show --json")]
    Show,
}

#[derive(serde::Serialize)]
struct Setting {
    handoff: Option<String>,
    changed: bool,
}

pub(super) async fn handoff(
    store: &Store,
    cmd: HandoffCmd,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let actor = super::actor();
    let changed = match &cmd {
        HandoffCmd::Enable { target } => store.handoff_set(Some(target), &actor).await?,
        HandoffCmd::Disable => store.handoff_set(None, &actor).await?,
        HandoffCmd::Show => false,
    };
    let now = Setting {
        handoff: store.handoff_target().await?,
        changed,
    };
    Ok(emit(out, json, &now, |o| match &now.handoff {
        Some(t) => writeln!(
            o,
            "hand-off: {t}{} (the workflow service's routes call a ready robot step `queued`)",
            if changed { ", enabled now" } else { "" }
        ),
        None => writeln!(
            o,
            "hand-off: none{} (a ready robot step reads `waiting` and is listed by ?waiting=)",
            if changed { ", disabled now" } else { "" }
        ),
    })?)
}
