//! `workdo functions deploy|list|show|rollback|delete`: step functions stored in Postgres, each
//! deployment a version, each workflow running the versions current when it started.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use crate::artifact::{self, DEFAULT_MAX_BYTES};
use crate::output::{emit, table};
use crate::store::Store;
use crate::store::functions::{FunctionInfo, NewArtifact};

#[derive(Debug, Subcommand)]
pub enum FunctionsCmd {
    /// Deploy PATH as the next version of NAME, current for workflows started from now on:
    /// one executable file (a static binary, or a script with a shebang), or a folder with
    /// --entry naming the file in it to run. Deploying the same bytes again makes no new version.
    #[command(
        after_help = "Examples:\n  workdo functions deploy shelve functions/bin/shelve --note 'shelve to the new stacks'\n  workdo functions deploy extract-text ./extract/ --entry main.py"
    )]
    Deploy {
        /// The function's name, as templates name it (`function: { deployed: NAME }`).
        name: String,
        /// An executable file, or a folder (with --entry).
        path: PathBuf,
        /// For a folder: the file in it that runs (its modules beside it).
        #[arg(long, value_name = "FILE")]
        entry: Option<String>,
        /// Why this version, kept with it.
        #[arg(long)]
        note: Option<String>,
        /// The largest function taken, in bytes (a folder: its archive).
        #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BYTES)]
        max_size: u64,
    },
    /// Deployed functions: each with its current version, hash and how many unfinished workflows
    /// pin it.
    #[command(after_help = "Example: workdo functions list")]
    List,
    /// One function's versions: hash, size, who deployed each and when, its note, and how many
    /// unfinished workflows pin it.
    #[command(after_help = "Example: workdo functions show shelve")]
    Show {
        /// The function's name.
        name: String,
    },
    /// Make version N current again, for workflows started from now on (running workflows keep
    /// their pins; `workdo retry … --current-functions` moves failed ones).
    #[command(after_help = "Example: workdo functions rollback shelve --to 1")]
    Rollback {
        /// The function's name.
        name: String,
        /// The version to make current.
        #[arg(long, value_name = "N")]
        to: i32,
    },
    /// Delete every version of a function: refused while an unfinished workflow pins one, or a
    /// current template names it.
    #[command(after_help = "Example: workdo functions delete shelve")]
    Delete {
        /// The function's name.
        name: String,
    },
}

pub(super) async fn run(
    store: &Store,
    cmd: FunctionsCmd,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    match cmd {
        FunctionsCmd::Deploy {
            name,
            path,
            entry,
            note,
            max_size,
        } => {
            let (bytes, archive) = read_artifact(&path, entry.as_deref(), max_size)?;
            let art = NewArtifact {
                bytes: &bytes,
                archive,
                entry: entry.as_deref().map(|e| e.trim_start_matches("./")),
                note: note.as_deref(),
                max: max_size,
            };
            let d = store.function_deploy(&name, &art, &super::actor()).await?;
            emit(out, json, &d, |o| {
                let short = &d.sha256[..12];
                match (d.new, d.replaced) {
                    (true, _) => writeln!(
                        o,
                        "deployed {} version {} (sha256 {short})",
                        d.name, d.version
                    ),
                    (false, Some(_)) => writeln!(
                        o,
                        "deployed {} version {} (sha256 {short}) again: these bytes were that version, now current once more",
                        d.name, d.version
                    ),
                    (false, None) => writeln!(
                        o,
                        "{} version {} (sha256 {short}) is already current: nothing deployed",
                        d.name, d.version
                    ),
                }
            })?;
        }
        FunctionsCmd::List => {
            let all = store.function_list().await?;
            emit(out, json, &all, |o| {
                if all.is_empty() {
                    return writeln!(
                        o,
                        "(no functions deployed: workdo functions deploy NAME PATH)"
                    );
                }
                let rows: Vec<Vec<String>> = all
                    .iter()
                    .map(|f| {
                        let cur = f.versions.iter().find(|v| v.current);
                        vec![
                            f.name.clone(),
                            f.current.to_string(),
                            f.versions.len().to_string(),
                            cur.map(|v| v.sha256[..12].to_string()).unwrap_or_default(),
                            cur.map(|v| v.size.to_string()).unwrap_or_default(),
                            f.versions.iter().map(|v| v.pinned).sum::<i64>().to_string(),
                            cur.map(|v| v.deployed_at.format("%Y-%m-%d %H:%M:%S").to_string())
                                .unwrap_or_default(),
                        ]
                    })
                    .collect();
                table(
                    o,
                    &[
                        "function", "current", "versions", "sha256", "bytes", "pinned", "deployed",
                    ],
                    rows.into_iter(),
                )
            })?;
        }
        FunctionsCmd::Show { name } => {
            let f = store.function_show(&name).await?;
            emit(out, json, &f, |o| show(o, &f))?;
        }
        FunctionsCmd::Rollback { name, to } => {
            let from = store.function_rollback(&name, to, &super::actor()).await?;
            let said = serde_json::json!({"function": name, "from": from, "to": to});
            emit(out, json, &said, |o| {
                if from == to {
                    writeln!(o, "{name} version {to} is already current: nothing changed")
                } else {
                    writeln!(
                        o,
                        "{name}: version {to} is current again (was {from}); workflows started from now on run it"
                    )
                }
            })?;
        }
        FunctionsCmd::Delete { name } => {
            let n = store.function_delete(&name, &super::actor()).await?;
            let said = serde_json::json!({"function": name, "versions_deleted": n});
            emit(out, json, &said, |o| {
                writeln!(o, "deleted {name} ({n} version(s))")
            })?;
        }
    }
    Ok(())
}

fn show(o: &mut dyn Write, f: &FunctionInfo) -> std::io::Result<()> {
    writeln!(o, "{} (current: version {})", f.name, f.current)?;
    let rows: Vec<Vec<String>> = f
        .versions
        .iter()
        .map(|v| {
            vec![
                format!("{}{}", v.version, if v.current { " *" } else { "" }),
                v.sha256.clone(),
                v.size.to_string(),
                match (&v.entry, v.archive) {
                    (Some(e), true) => format!("folder, runs {e}"),
                    _ => "file".into(),
                },
                v.pinned.to_string(),
                v.deployed_by.clone(),
                v.deployed_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                v.note.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        o,
        &[
            "version", "sha256", "bytes", "kind", "pinned", "by", "deployed", "note",
        ],
        rows.into_iter(),
    )
}

/// The bytes to deploy from `path`: a regular file as it is, or a folder packed (with `entry`).
fn read_artifact(path: &Path, entry: Option<&str>, max: u64) -> Result<(Vec<u8>, bool)> {
    use std::io::Read;
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    if meta.is_dir() {
        let Some(entry) = entry else {
            bail!(
                "{} is a folder: say which file in it runs with --entry FILE",
                path.display()
            );
        };
        let bytes = artifact::pack_folder(path, entry, max)
            .with_context(|| format!("packing {}", path.display()))?;
        return Ok((bytes, true));
    }
    if entry.is_some() {
        bail!(
            "--entry is for a folder; {} is one file, which runs as it is",
            path.display()
        );
    }
    if meta.is_file() && meta.len() > max {
        bail!(
            "{} is {} bytes, over the limit of {max} bytes (--max-size)",
            path.display(),
            meta.len()
        );
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > max {
        bail!(
            "{} is over the limit of {max} bytes (--max-size)",
            path.display()
        );
    }
    Ok((bytes, false))
}
