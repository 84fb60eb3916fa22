//! The command line's help: the global options shown once.

use super::Cli;

impl Cli {
    /// The command line as given, with help that shows the global options once: `workdo
    /// --help` lists them; a subcommand's help lists its own options and points there, instead
    /// of repeating the same six in every one.
    pub fn parse_args() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let cmd = Cli::command();
        let globals: Vec<clap::Arg> = cmd
            .get_arguments()
            .filter(|a| a.is_global_set())
            .cloned()
            .collect();
        // Each subcommand gets the global options as hidden arguments of its own (clap does not
        // propagate a global into a command that already has an argument of that id), so they
        // parse everywhere and are listed once.
        fn hide(cmd: clap::Command, globals: &[clap::Arg]) -> clap::Command {
            let names: Vec<String> = cmd
                .get_subcommands()
                .map(|s| s.get_name().to_string())
                .collect();
            let mut cmd = cmd;
            for name in names {
                cmd = cmd.mut_subcommand(name, |sub| {
                    let after = sub
                        .get_after_help()
                        .map(|h| h.to_string())
                        .unwrap_or_default();
                    let mut sub = sub.after_help(format!(
                        "{after}\n\nGlobal options (--database-url, --data-dir, --json, --log-level, --log-format, …): see workdo --help"
                    ));
                    for g in globals {
                        sub = sub.arg(g.clone().hide(true));
                    }
                    hide(sub, globals)
                });
            }
            cmd
        }
        let matches = hide(cmd, &globals).get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}
