//! `prrte-k8s-agent`: the in-pod agent that starts PRRTE's prted for `prterun --prtemca plm k8s`.
//! See `prrte-k8s-agent --help` and the `prrte_k8s::agent` and `prrte_k8s::protocol` docs.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use prrte_k8s::agent::{self, AgentArgs, AgentConfig, LogFormat};
use tracing::error;
use tracing_subscriber::EnvFilter;

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_env(prrte_k8s::settings::tools::LOG.var())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(false).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}

fn main() -> ExitCode {
    let args = AgentArgs::parse();
    init_logging(args.log_format);
    let config = match AgentConfig::from_args(&args, |k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            error!("refusing to start: {e}");
            return ExitCode::from(2);
        }
    };
    let exec_policy = match agent::exec::ExecPolicy::from_args(&args.exec, &config.prted) {
        Ok(p) => p,
        Err(e) => {
            error!("refusing to start: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            error!("cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(agent::run_until_signalled_with_exec(config, exec_policy)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            error!("{e}");
            ExitCode::from(1)
        }
    }
}
