//! `prrte-k8s`: command-line tools around PRRTE's Kubernetes components.
//!
//! `prrte-k8s pods` shows the allocation PRRTE's `ras k8s` component would get: the same
//! discovery code, the same parameters (also read from the `PRTE_MCA_ras_k8s_*` environment
//! variables PRRTE itself reads).
//!
//! `prrte-k8s prun ARGS...` / `prrte-k8s pterm ARGS...` run PRRTE's tools against the job's DVM
//! from any pod: the DVM URI comes from the file the agent publishes (`dvm-uri` prints it). An
//! interrupted `prrte-k8s prun` kills its job in the DVM (PRRTE's own prun leaves it running).
//! `prrte-k8s doctor` checks what PRRTE's k8s components need, one line per check.
//! `prrte-k8s manifest [OPTIONS] [-- COMMAND...]` prints a complete job for `kubectl apply -f -`.
#![forbid(unsafe_code)]

#[path = "prrte-k8s/doctor.rs"]
mod doctor;
#[path = "prrte-k8s/prun.rs"]
mod prun;
#[path = "prrte-k8s/tools.rs"]
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use prrte_k8s::discovery::client::Environment;
use prrte_k8s::discovery::{self, render, DiscoveryConfig, Progress, SlotsPolicy};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "prrte-k8s",
    version,
    about = "Kubernetes tools for PRRTE (prte --prtemca ras k8s)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Discover the job's pods and print the allocation as PRRTE would see it.
    Pods(PodsArgs),
    /// The allocation as a hostfile (Open MPI) or machinefile (MPICH, Intel MPI), for
    /// launchers that start their daemons with prrte-k8s-rsh
    Hostfile(HostfileArgs),
    /// Print the URI of the job's DVM (published in every pod by the prrte-k8s agent).
    DvmUri(tools::DvmUriArgs),
    /// Run PRRTE's prun against the job's DVM: `prrte-k8s prun -n 12 ./app`. Interrupted
    /// (SIGINT, SIGTERM, SIGHUP), it kills its job in the DVM, so the job's slots are freed.
    Prun(tools::ToolArgs),
    /// Run PRRTE's pterm against the job's DVM (stops the DVM).
    Pterm(tools::ToolArgs),
    /// Check cluster access, RBAC, the job's pods and agents, and the PRRTE install.
    Doctor(doctor::DoctorArgs),
    /// Print a complete MPI job for `kubectl apply -f -`: RBAC, a fresh Secret, the Job
    /// (batch with a command after `--`, else interactive), the NetworkPolicy.
    Manifest(Box<prrte_k8s::manifest::ManifestArgs>),
}

/// Which pods make up the job (the `ras_k8s_*` parameters of the same names), for every
/// subcommand that discovers them.
#[derive(Args, Debug, Clone)]
pub(crate) struct JobArgs {
    /// Namespace of the pods [default: our pod's namespace, else the kubeconfig context's, else "default"].
    /// (No `-n`: in prrte-k8s, as in PRRTE's tools, `-n` is a process count.)
    #[arg(long, env = "PRTE_MCA_ras_k8s_namespace")]
    pub namespace: Option<String>,
    /// Label selector of the job's pods [default: inferred from our own pod's labels].
    #[arg(long, short = 'l', env = "PRTE_MCA_ras_k8s_selector")]
    pub selector: Option<String>,
    /// Number of pods to wait for; 0 = infer [default: from the owning Job/StatefulSet/JobSet, else the pods found].
    #[arg(long, env = "PRTE_MCA_ras_k8s_expected_pods")]
    pub expected: Option<u32>,
}

#[derive(Args, Debug)]
struct PodsArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Seconds to wait for the pods to be ready (bounds the whole discovery); the same variable and
    /// default as ras_k8s_timeout.
    #[arg(long, value_name = "SECS", default_value_t = Seconds(discovery::DEFAULT_TIMEOUT), env = "PRTE_MCA_ras_k8s_timeout")]
    timeout: Seconds,
    /// Slots per pod: auto (annotation prrte-k8s.io/slots, else GPUs, else CPUs, else 1), annotation, gpu, cpu, one.
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "auto",
        env = "PRTE_MCA_ras_k8s_slots"
    )]
    slots: SlotsPolicy,
    /// Kubeconfig file [default: $KUBECONFIG, else the in-cluster service account, else ~/.kube/config].
    #[arg(long, value_name = "PATH", env = "PRTE_MCA_ras_k8s_kubeconfig")]
    kubeconfig: Option<PathBuf>,
    /// Name of the pod this runs in [default: $POD_NAME, else $HOSTNAME, else the host name].
    #[arg(long, value_name = "POD", env = "PRTE_MCA_ras_k8s_self_pod")]
    self_pod: Option<String>,
    /// Print a PRRTE hostfile: one `IP slots=N` line per pod (IPs, since pod hostnames need not resolve).
    #[arg(long, conflicts_with = "json")]
    hostfile: bool,
    /// Print the allocation as JSON.
    #[arg(long)]
    json: bool,
    /// Report progress (ready counts, watch restarts) on stderr.
    #[arg(long, short = 'v')]
    verbose: bool,
}

/// A positive number of seconds on the command line (fractions allowed).
#[derive(Args, Debug)]
struct HostfileArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Bound of the whole discovery, waiting for readiness included
    #[arg(long, value_name = "SECS", default_value_t = Seconds(discovery::DEFAULT_TIMEOUT), env = "PRTE_MCA_ras_k8s_timeout")]
    timeout: Seconds,
    /// Where slot counts come from (as ras_k8s_slots)
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "auto",
        env = "PRTE_MCA_ras_k8s_slots"
    )]
    slots: SlotsPolicy,
    #[arg(long, value_name = "PATH", env = "PRTE_MCA_ras_k8s_kubeconfig")]
    kubeconfig: Option<PathBuf>,
    #[arg(long, value_name = "POD", env = "PRTE_MCA_ras_k8s_self_pod")]
    self_pod: Option<String>,
    /// Which launcher reads the file
    #[arg(long, value_enum, default_value = "openmpi")]
    format: prrte_k8s::hostfile::Format,
    /// Name pods by IP address or by host name
    #[arg(long = "use", value_enum, default_value = "ips")]
    name_by: prrte_k8s::hostfile::Use,
    #[arg(long, short = 'v')]
    verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seconds(pub Duration);

impl std::str::FromStr for Seconds {
    type Err = String;
    fn from_str(s: &str) -> Result<Seconds, String> {
        parse_seconds(s).map(Seconds)
    }
}

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.as_secs_f64())
    }
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 * 365.0 {
        return Err(format!("{s:?} must be a positive number of seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn hostfile(args: HostfileArgs) -> i32 {
    let format = (args.format, args.name_by);
    pods(
        PodsArgs {
            job: args.job,
            timeout: args.timeout,
            slots: args.slots,
            kubeconfig: args.kubeconfig,
            self_pod: args.self_pod,
            hostfile: false,
            json: false,
            verbose: args.verbose,
        },
        Some(format),
    )
}

fn pods(
    args: PodsArgs,
    as_hostfile: Option<(prrte_k8s::hostfile::Format, prrte_k8s::hostfile::Use)>,
) -> i32 {
    let cfg = DiscoveryConfig {
        namespace: args.job.namespace,
        selector: args.job.selector,
        expected_pods: args.job.expected.filter(|n| *n > 0),
        timeout: args.timeout.0,
        slots: args.slots,
        kubeconfig: args.kubeconfig,
        self_pod: args.self_pod,
    };
    let verbose = args.verbose;
    let mut report = |p: &Progress| {
        if !verbose {
            return;
        }
        match p {
            Progress::Resolved { namespace, selector, selector_source, expected, expected_source } => eprintln!(
                "prrte-k8s: namespace {namespace}, selector {selector:?} ({selector_source}), expecting {expected} pods ({expected_source})"
            ),
            Progress::Ready { ready, expected, waiting_for, .. } if waiting_for.is_empty() => {
                eprintln!("prrte-k8s: {ready} of {expected} pods ready")
            }
            Progress::Ready { ready, expected, not_ready, waiting_for } => {
                let more = (*not_ready as usize).saturating_sub(waiting_for.len());
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                eprintln!("prrte-k8s: {ready} of {expected} pods ready; waiting for {}{more}", waiting_for.join(", "))
            }
            Progress::Watching { listed } => eprintln!("prrte-k8s: listed {listed} pods, watching for changes"),
        }
    };
    let runtime = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prrte-k8s: error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let env = Environment::from_process();
    match runtime.block_on(discovery::discover_with(&cfg, &env, &mut report)) {
        Ok(alloc) => {
            let text = if let Some((format, name_by)) = as_hostfile {
                prrte_k8s::hostfile::render(&alloc, format, name_by)
            } else if args.json {
                render::json(&alloc) + "\n"
            } else if args.hostfile {
                render::hostfile(&alloc)
            } else {
                render::table(&alloc)
            };
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("prrte-k8s: error: {e}");
            e.exit_code()
        }
    }
}

fn manifest(args: prrte_k8s::manifest::ManifestArgs) -> i32 {
    use prrte_k8s::manifest;
    // The command line as given, for the header.
    let argv: Vec<String> = std::env::args()
        .skip_while(|a| a != "manifest")
        .skip(1)
        .map(|a| manifest::quote(&a))
        .collect();
    let key = (!args.no_secret).then(manifest::fresh_key);
    match manifest::render(&args, &argv.join(" "), key.as_deref()) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("prrte-k8s manifest: error: {e}");
            2
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter =
        EnvFilter::try_from_env("PRRTE_K8S_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let code = match cli.command {
        Command::Pods(args) => pods(args, None),
        Command::Hostfile(args) => hostfile(args),
        Command::DvmUri(args) => tools::dvm_uri(args),
        Command::Prun(args) => prun::run(args),
        Command::Pterm(args) => tools::exec_tool("pterm", args),
        Command::Doctor(args) => doctor::run(args),
        Command::Manifest(args) => manifest(*args),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
