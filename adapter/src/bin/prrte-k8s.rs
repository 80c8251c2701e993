//! `prrte-k8s`: command-line tools around PRRTE's Kubernetes components.
//!
//! `prrte-k8s pods` shows the allocation PRRTE's `ras k8s` component would get: the same
//! discovery code, the same parameters (also read from the `PRTE_MCA_ras_k8s_*` environment
//! variables PRRTE itself reads).
//!
//! `prrte-k8s prun ARGS...` / `prrte-k8s pterm ARGS...` run PRRTE's tools against the job's DVM
//! from any pod: the DVM URI comes from the file the agent publishes (`dvm-uri` prints it). An
//! interrupted or timed-out `prrte-k8s prun` kills its job in the DVM (PRRTE's own prun leaves it
//! running).
//! `prrte-k8s submit --tasks FILE --results FILE` runs many tasks through one PMIx tool
//! connection to the DVM, one JSON result line per task.
//! `prrte-k8s grow N` adds N pods to a running elastic job and its DVM; `prrte-k8s shrink N`
//! gives its N highest pods back.
//! `prrte-k8s doctor` checks what PRRTE's k8s components need, one line per check.
//! `prrte-k8s manifest [OPTIONS] [-- COMMAND...]` prints a complete job for `kubectl apply -f -`.
//! `prrte-k8s controller` reconciles kubeflow.org/v2beta1 MPIJobs; `prrte-k8s crd` prints their
//! CustomResourceDefinition.
#![forbid(unsafe_code)]

#[path = "prrte-k8s/doctor.rs"]
mod doctor;
#[path = "prrte-k8s/grow.rs"]
mod grow;
#[path = "prrte-k8s/prun.rs"]
mod prun;
#[path = "prrte-k8s/shrink.rs"]
mod shrink;
#[path = "prrte-k8s/submit.rs"]
mod submit;
#[path = "prrte-k8s/tools.rs"]
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use prrte_k8s::discovery::client::Environment;
use prrte_k8s::discovery::{self, render, DiscoveryConfig, Progress, SlotsPolicy};
use prrte_k8s::settings::{self, mca, tools as settings_tools, ArgExt};
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
    /// Run PRRTE's prun against the job's DVM: `prrte-k8s prun [--timeout SECS] -n 12 ./app`.
    /// Interrupted (SIGINT, SIGTERM, SIGHUP) or out of time, it kills its job in the DVM, so the
    /// job's slots are freed.
    Prun(prun::PrunArgs),
    /// Run many tasks through one PMIx tool connection to the job's DVM: `prrte-k8s submit
    /// --tasks FILE --results FILE` (one command line a task, one JSON result line each).
    Submit(submit::SubmitArgs),
    /// Add N pods to the running job and its DVM (a job rendered with `manifest --elastic
    /// --max-pods M`): raises the workload, waits for the new pods to be Ready, adds them to
    /// the DVM and prints their host names.
    Grow(GrowArgs),
    /// Give the job's N highest pods back (a job rendered with `manifest --elastic`): their
    /// daemons end, their nodes leave the DVM and the workload is lowered, through the DVM's
    /// PMIx allocation request path (PMIx's palloc; needs PRRTE with prrte-k8s's patches).
    Shrink(ShrinkArgs),
    /// Run PRRTE's pterm against the job's DVM (stops the DVM).
    Pterm(tools::ToolArgs),
    /// Check cluster access, RBAC, the job's pods and agents, and the PRRTE install.
    Doctor(doctor::DoctorArgs),
    /// Print a complete MPI job for `kubectl apply -f -`: RBAC, a fresh Secret, the Job
    /// (batch with a command after `--`, else interactive), the NetworkPolicy.
    Manifest(Box<prrte_k8s::manifest::ManifestArgs>),
    /// Reconcile kubeflow.org/v2beta1 MPIJobs (spec.runPolicy.managedBy:
    /// prrte-k8s.io/controller, or none with --manage-all) through prrte-k8s: the objects
    /// `manifest --from-mpijob` renders, owned by the MPIJob, and mpi-operator's status.
    Controller(Box<prrte_k8s::controller::ControllerArgs>),
    /// Print the MPIJob CustomResourceDefinition (kubeflow.org/v2beta1) for `kubectl apply -f -`.
    Crd,
    /// Copy the injected runtime this program belongs to (its bundle: bin/, lib/prte/, etc/)
    /// into DIR: the init container of the inject image, into the pod's emptyDir.
    InstallRuntime(InstallRuntimeArgs),
}

#[derive(Args, Debug)]
struct InstallRuntimeArgs {
    /// Where to copy the runtime (the application container mounts it at /opt/prrte-k8s)
    #[arg(long, value_name = "DIR")]
    to: PathBuf,
    /// The bundle to copy [default: the parent of this program's bin/ directory]
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
}

fn install_runtime(args: InstallRuntimeArgs) -> i32 {
    use prrte_k8s::bundle;
    let from = match args.from.clone().or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|e| bundle::bundle_of(&e))
    }) {
        Some(f) => f,
        None => {
            eprintln!("prrte-k8s install-runtime: error: cannot tell where this program's bundle is; give --from DIR");
            return 1;
        }
    };
    match bundle::install(&from, &args.to) {
        Ok(done) => {
            println!(
                "prrte-k8s install-runtime: installed {} into {} ({} files, {} links, {:.1} MiB from {})",
                done.version.as_deref().unwrap_or("the runtime (no VERSION)"),
                args.to.display(),
                done.files,
                done.links,
                done.bytes as f64 / (1024.0 * 1024.0),
                from.display()
            );
            0
        }
        Err(e) => {
            eprintln!("prrte-k8s install-runtime: error: {e}");
            1
        }
    }
}

/// Which pods make up the job (the `ras_k8s_*` parameters of the same names), for every
/// subcommand that discovers them. (No `-n` for the namespace: in prrte-k8s, as in PRRTE's
/// tools, `-n` is a process count.)
#[derive(Args, Debug, Clone)]
pub(crate) struct JobArgs {
    #[arg(long, setting = &mca::NAMESPACE)]
    pub namespace: Option<String>,
    #[arg(long, short = 'l', setting = &mca::SELECTOR)]
    pub selector: Option<String>,
    #[arg(long, setting = &mca::EXPECTED_PODS, value_parser = count)]
    pub expected: Option<u32>,
}

/// How `pods` and `hostfile` discover the job's pods: the job's selection and the other
/// `ras_k8s_*` parameters, with the same names, variables and defaults as the RAS component.
#[derive(Args, Debug)]
struct DiscoverArgs {
    #[command(flatten)]
    job: JobArgs,
    #[arg(long, setting = &mca::TIMEOUT, value_parser = seconds_of(&mca::TIMEOUT))]
    timeout: Seconds,
    #[arg(long, setting = &mca::SLOTS)]
    slots: SlotsPolicy,
    #[arg(long, setting = &mca::KUBECONFIG)]
    kubeconfig: Option<PathBuf>,
    #[arg(long, setting = &mca::SELF_POD)]
    self_pod: Option<String>,
    #[arg(long, setting = &mca::EXCLUDE_SELF)]
    exclude_self: bool,
    /// Report progress (ready counts, watch restarts) on stderr.
    #[arg(long, short = 'v')]
    verbose: bool,
}

impl DiscoverArgs {
    fn config(&self) -> DiscoveryConfig {
        DiscoveryConfig {
            namespace: self.job.namespace.clone(),
            selector: self.job.selector.clone(),
            expected_pods: self.job.expected.filter(|n| *n > 0),
            timeout: self.timeout.0,
            slots: self.slots,
            kubeconfig: self.kubeconfig.clone(),
            self_pod: self.self_pod.clone(),
            exclude_self: self.exclude_self,
        }
    }
}

#[derive(Args, Debug)]
struct GrowArgs {
    /// How many pods to add
    #[arg(value_parser = clap::value_parser!(u32).range(1..=10000))]
    pods: u32,
    #[command(flatten)]
    discover: DiscoverArgs,
    #[arg(long, setting = &prrte_k8s::settings::agent::DVM_URI_FILE)]
    file: PathBuf,
}

#[derive(Args, Debug)]
struct ShrinkArgs {
    /// How many pods to give back (the highest indexes or ordinals; never pod 0's DVM head)
    #[arg(value_parser = clap::value_parser!(u32).range(1..=10000))]
    pods: u32,
    #[arg(long, setting = &prrte_k8s::settings::agent::DVM_URI_FILE)]
    file: PathBuf,
}

#[derive(Args, Debug)]
struct PodsArgs {
    #[command(flatten)]
    discover: DiscoverArgs,
    /// Print a PRRTE hostfile: one `IP slots=N` line per pod (IPs, since pod hostnames need not resolve).
    #[arg(long, conflicts_with = "json")]
    hostfile: bool,
    /// Print the allocation as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct HostfileArgs {
    #[command(flatten)]
    discover: DiscoverArgs,
    /// Which launcher reads the file
    #[arg(long, value_enum, default_value = "openmpi")]
    format: prrte_k8s::hostfile::Format,
    /// Name pods by IP address or by host name
    #[arg(long = "use", value_enum, default_value = "ips")]
    name_by: prrte_k8s::hostfile::Use,
}

/// A number of seconds on the command line (fractions allowed), checked by its setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Seconds(pub Duration);

/// The command-line parser of a [`settings::Kind::Seconds`] setting.
pub(crate) fn seconds_of(
    s: &'static settings::Setting,
) -> impl Fn(&str) -> Result<Seconds, settings::SettingError> + Clone + Send + Sync + 'static {
    move |text| s.seconds(text).map(Seconds)
}

/// `--expected`: a count in `ras_k8s_expected_pods`'s range.
fn count(text: &str) -> Result<u32, settings::SettingError> {
    mca::EXPECTED_PODS
        .int(text)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

fn hostfile(args: HostfileArgs) -> i32 {
    let format = (args.format, args.name_by);
    let what = Output::Hostfile(format.0, format.1);
    discover(&args.discover, what)
}

/// What `pods`/`hostfile` print.
enum Output {
    Table,
    Json,
    PrrteHostfile,
    Hostfile(prrte_k8s::hostfile::Format, prrte_k8s::hostfile::Use),
}

fn pods(args: PodsArgs) -> i32 {
    let what = if args.json {
        Output::Json
    } else if args.hostfile {
        Output::PrrteHostfile
    } else {
        Output::Table
    };
    discover(&args.discover, what)
}

fn discover(args: &DiscoverArgs, what: Output) -> i32 {
    let cfg = args.config();
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
            let text = match what {
                Output::Hostfile(format, name_by) => {
                    prrte_k8s::hostfile::render(&alloc.hosts(), format, name_by)
                }
                Output::Json => render::json(&alloc) + "\n",
                Output::PrrteHostfile => render::hostfile(&alloc),
                Output::Table => render::table(&alloc),
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

fn manifest(mut args: prrte_k8s::manifest::ManifestArgs) -> i32 {
    use prrte_k8s::manifest;
    if args.controller {
        return match prrte_k8s::controller::install::yaml() {
            Ok(text) => {
                print!("{text}");
                0
            }
            Err(e) => {
                eprintln!("prrte-k8s manifest --controller: error: {e}");
                1
            }
        };
    }
    if args.api_server_from_cluster {
        let found = prrte_k8s::runtime::current_thread()
            .map_err(|e| format!("cannot start the async runtime: {e}"))
            .and_then(|rt| {
                rt.block_on(manifest::api_server::lookup(Duration::from_secs(10)))
                    .map_err(|e| e.to_string())
            });
        match found {
            Ok(api) => {
                args.api_server_cidr = api.cidrs;
                args.api_server_port = api.ports;
            }
            Err(e) => {
                eprintln!(
                    "prrte-k8s manifest: error: --api-server-from-cluster: {e}; give the API \
                     server's endpoints with --api-server-cidr and --api-server-port instead"
                );
                return 2;
            }
        }
    }
    // The command line as given, for the header.
    let argv: Vec<String> = std::env::args()
        .skip_while(|a| a != "manifest")
        .skip(1)
        .map(|a| manifest::quote(&a))
        .collect();
    let key = (!args.no_secret).then(manifest::fresh_key);
    // Nothing on stdout unless the whole manifest rendered.
    let rendered =
        manifest::prepare(&args, &mut std::io::stdin().lock()).and_then(|(plan, notes)| {
            manifest::render(&plan, &argv.join(" "), key.as_deref()).map(|t| (t, notes))
        });
    match rendered {
        Ok((text, notes)) => {
            for n in notes {
                eprintln!("prrte-k8s manifest: {n}");
            }
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("prrte-k8s manifest: error: {e}");
            2
        }
    }
}

fn controller(args: prrte_k8s::controller::ControllerArgs) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prrte-k8s controller: error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(prrte_k8s::controller::run(args)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("prrte-k8s controller: error: {e}");
            1
        }
    }
}

fn crd() -> i32 {
    use std::io::Write;
    let written = prrte_k8s::controller::crd_yaml()
        .map_err(|e| e.to_string())
        .and_then(|text| {
            std::io::stdout()
                .lock()
                .write_all(text.as_bytes())
                .map_err(|e| format!("cannot write the CRD to stdout: {e}"))
        });
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("prrte-k8s crd: error: {e}");
            1
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_env(settings_tools::LOG.var())
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let code = match cli.command {
        Command::Pods(args) => pods(args),
        Command::Hostfile(args) => hostfile(args),
        Command::DvmUri(args) => tools::dvm_uri(args),
        Command::Prun(args) => prun::run(args),
        Command::Submit(args) => submit::run(args),
        Command::Grow(args) => grow::run(args.discover.config(), args.pods, args.file),
        Command::Shrink(args) => shrink::run(args.pods, args.file),
        Command::Pterm(args) => tools::exec_tool("pterm", args),
        Command::Doctor(args) => doctor::run(args),
        Command::Manifest(args) => manifest(*args),
        Command::InstallRuntime(args) => install_runtime(args),
        Command::Controller(args) => controller(*args),
        Command::Crd => crd(),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
