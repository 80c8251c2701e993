//! `prrte-k8s-agent`: the in-pod agent that starts PRRTE's prted for `prterun --prtemca plm k8s`.
//! See `prrte-k8s-agent --help` and the `prrte_k8s::agent` and `prrte_k8s::protocol` docs.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use prrte_k8s::agent::{self, mpi, AgentArgs, AgentConfig, LogFormat};
use tracing::{error, info, warn};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The agent's log filter: `PRRTE_K8S_LOG` as levels per target (`debug`,
/// `prrte_k8s=debug,warn`), else `info`. A [`Targets`] filter rather than an `EnvFilter`, whose
/// parser builds regular expressions at start: the agent has no use for span or field filters.
fn log_filter() -> Targets {
    std::env::var(prrte_k8s::settings::tools::LOG.var())
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO))
}

fn init_logging(format: LogFormat) {
    let registry = tracing_subscriber::registry().with(log_filter());
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => registry.with(layer.with_ansi(false)).init(),
        LogFormat::Json => registry
            .with(layer.json().flatten_event(true).with_current_span(false))
            .init(),
    }
}

fn main() -> ExitCode {
    let mut args = AgentArgs::parse();
    init_logging(args.log_format);
    let runtime = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            error!("cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // First of all: a pod deleted while the agent starts must not lose its SIGTERM.
    let signals = {
        let _in = runtime.enter();
        match agent::Signals::install() {
            Ok(s) => s,
            Err(e) => {
                error!("{e}");
                return ExitCode::from(1);
            }
        }
    };
    let env = |k: &str| std::env::var(k).ok();
    // --mpi (or no --prted): find the image's MPI before the arguments are checked, since it
    // decides --prted, --prte and --exec-allow.
    let plan = if mpi::wants_detection(&args) {
        let detect_env = mpi::DetectEnv::from_process(Vec::new());
        match runtime.block_on(mpi::resolve(&mut args, &detect_env)) {
            Ok(plan) => Some(plan),
            Err(e) => {
                if args.detect_only {
                    println!("launch: none");
                    println!("error: {e}");
                } else {
                    error!("refusing to start: {e}");
                }
                return ExitCode::from(2);
            }
        }
    } else {
        None
    };
    if args.detect_only {
        return detect_only(&args, plan);
    }
    let mut config = match AgentConfig::from_args(&args, env) {
        Ok(c) => c,
        Err(e) => {
            error!("refusing to start: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(plan) = plan {
        if let Some(why) = &plan.fallback {
            warn!(mpi = %plan.found.summary(), "the k8s components are not used: {why}; the launcher starts its daemons through prrte-k8s-rsh instead");
        }
        let pod_ip = mpi::select::pod_ip(&env, config.listen.ip());
        match mpi::Prepared::new(plan, &config.tmpdir, pod_ip) {
            Ok(p) => {
                info!(launch = p.plan.launch.name(), mpi = %p.plan.found.summary(), how = p.plan.launch.describe(), "serving the image's MPI");
                for w in &p.warnings {
                    warn!("{w}");
                }
                config.mpi = Some(std::sync::Arc::new(p));
            }
            Err(e) => {
                error!("refusing to start: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let mut exec_policy = match agent::exec::ExecPolicy::from_args(&args.exec, &config.prted) {
        Ok(p) => p,
        Err(e) => {
            error!("refusing to start: {e}");
            return ExitCode::from(2);
        }
    };
    // An exec'd prted is checked against what its own PRRTE's launcher sends.
    if let Some(profile) = config.mpi.as_ref().and_then(|m| m.plan.prrte_profile()) {
        exec_policy.prrte = profile;
    }
    match runtime.block_on(agent::run_until_signalled_with_exec(
        config,
        exec_policy,
        signals,
        prrte_k8s::launch::AGENT_LAUNCHES,
    )) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            error!("{e}");
            ExitCode::from(1)
        }
    }
}

/// `--detect-only`: prints what was found and what the launcher would get, then exits.
fn detect_only(args: &AgentArgs, plan: Option<mpi::Plan>) -> ExitCode {
    let Some(plan) = plan else {
        println!("launch: none");
        return ExitCode::from(2);
    };
    let tmpdir = args
        .tmpdir
        .clone()
        .or_else(|| {
            std::env::var_os("TMPDIR")
                .filter(|v| !v.is_empty())
                .map(Into::into)
        })
        .unwrap_or_else(|| "/tmp".into());
    let listen = args.listen.map(|l| l.ip()).unwrap_or([0, 0, 0, 0].into());
    let pod_ip = mpi::select::pod_ip(&|k: &str| std::env::var(k).ok(), listen);
    match mpi::Prepared::new(plan, &tmpdir, pod_ip) {
        Ok(p) => {
            for line in p.report() {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("launch: none");
            println!("error: {e}");
            ExitCode::from(2)
        }
    }
}
