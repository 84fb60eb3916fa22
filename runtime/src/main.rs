fn main() -> std::process::ExitCode {
    // `workdo __noop-function`: a no-op step function (exec or warm), for `workdo bench`.
    if std::env::args().nth(1).as_deref() == Some("__noop-function") {
        workdo_function::run(|_| Ok(workdo_function::Outcome::completed()));
        return std::process::ExitCode::SUCCESS;
    }
    match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(run()),
        Err(e) => {
            eprintln!("workdo: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::process::ExitCode {
    let cli = workdo::cli::Cli::parse_args();
    let telemetry = match workdo::telemetry::init(&cli.log_options()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("workdo: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    let result = workdo::cli::run(cli, &mut stdout).await;
    // Every span and metric is exported before the process exits.
    telemetry.shutdown().await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A reader that stopped reading (`workdo … | head`) is not an error of ours: whatever
        // the command changed is done, and the shell's convention for it is SIGPIPE's 141.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            std::process::ExitCode::from(141)
        }
        Err(e) => {
            // A name that names nothing (a template, step, object, workflow or queue) exits 2,
            // so a script tells a typo from a failure.
            let unknown = e.chain().any(|c| {
                c.downcast_ref::<workdo::store::StoreError>()
                    .is_some_and(|s| {
                        matches!(
                            s,
                            workdo::store::StoreError::UnknownTemplate(_)
                                | workdo::store::StoreError::UnknownStep { .. }
                                | workdo::store::StoreError::UnknownObject(_)
                                | workdo::store::StoreError::UnknownWorkflow { .. }
                                | workdo::store::StoreError::UnknownQueue(_)
                                | workdo::store::StoreError::UnknownFunction(_)
                                | workdo::store::StoreError::UnknownWorkflowId(_)
                        )
                    })
            });
            // With --json, the error is JSON too, so that scripts read one format.
            if std::env::args().any(|a| a == "--json") {
                eprintln!("{}", serde_json::json!({"error": format!("{e:#}")}));
            } else {
                eprintln!("workdo: {e:#}");
            }
            if unknown {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}
