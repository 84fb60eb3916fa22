//! `workdo schedules load|list`.

use std::io::Write;

use anyhow::Result;

use super::args::SchedulesCmd;
use crate::model::schedule;
use crate::output::{emit, table};
use crate::store::Store;

pub(super) async fn run(
    store: &Store,
    cmd: SchedulesCmd,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    match cmd {
        SchedulesCmd::Load { files } => {
            let mut n = 0;
            for f in &files {
                let text = super::files::read_text(f)?;
                let origin = f.display().to_string();
                let specs = schedule::parse_file(&origin, &text)?;
                n += store.schedules_put(&specs, &origin).await?;
            }
            emit(out, json, &serde_json::json!({"schedules": n}), |o| {
                writeln!(o, "{n} schedules loaded")
            })?;
        }
        SchedulesCmd::Enable { name } => {
            store.schedule_enable(&name, true).await?;
            writeln!(out, "schedule {name} enabled")?;
        }
        SchedulesCmd::Disable { name } => {
            store.schedule_enable(&name, false).await?;
            writeln!(out, "schedule {name} disabled")?;
        }
        SchedulesCmd::Fire { name } => {
            let fired = store.schedule_fire_now(&name).await?;
            let mine = fired.iter().find(|f| f.schedule == name);
            emit(out, json, &fired, |o| match mine {
                Some(f) => writeln!(
                    o,
                    "schedule {name} fired: {} workflows started, {} jobs signalled",
                    f.started, f.signalled
                ),
                None => writeln!(o, "schedule {name} fired by a running runtime"),
            })?;
        }
        SchedulesCmd::Delete { name } => {
            store.schedule_delete(&name).await?;
            writeln!(out, "schedule {name} deleted")?;
        }
        SchedulesCmd::List => {
            let rows = store.schedules_list().await?;
            emit(out, json, &rows, |o| {
                table(
                    o,
                    &[
                        "schedule",
                        "cron",
                        "time zone",
                        "starts",
                        "next fire (UTC)",
                        "last fired",
                    ],
                    rows.iter().map(|r| {
                        vec![
                            r.name.clone(),
                            r.cron.clone(),
                            r.timezone.clone(),
                            r.does(),
                            if r.enabled {
                                r.next_fire_at.format("%Y-%m-%d %H:%M:%S").to_string()
                            } else {
                                "never".into()
                            },
                            r.last_fired_at
                                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                                .unwrap_or_else(|| "-".into()),
                        ]
                    }),
                )
            })?;
        }
    }
    Ok(())
}
