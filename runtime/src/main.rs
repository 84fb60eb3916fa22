use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let telemetry = match workdo::telemetry::init() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("workdo: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let cli = workdo::cli::Cli::parse();
    let mut stdout = std::io::stdout().lock();
    let result = workdo::cli::run(cli, &mut stdout).await;
    // Every span and metric is exported before the process exits.
    telemetry.shutdown().await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("workdo: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
