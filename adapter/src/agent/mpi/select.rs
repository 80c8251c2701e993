//! The agent's start with `--mpi`: detection, then the arguments the rest of the agent reads
//! filled in from what was found (`--prted`, `--prte`, `--exec-allow`), then the agent's files
//! for the MPI's launcher.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::detect::{detect, DetectEnv};
use super::error::MpiError;
use super::plan::{Launch, Plan};
use crate::agent::config::{AgentArgs, DvmHead, MpiChoice};

/// Whether the arguments ask for detection: `--mpi` given, or no `--prted` (then `--mpi auto`).
pub fn wants_detection(args: &AgentArgs) -> bool {
    args.mpi.is_some() || args.prted.is_none() || args.detect_only
}

/// The injected runtime the agent runs from: the parent of the directory of `exe` (the agent's
/// own executable, `<runtime>/bin/prrte-k8s-agent`).
pub(crate) fn runtime_of(exe: &Path) -> Option<PathBuf> {
    Some(exe.parent()?.parent()?.to_owned())
}

/// Detects the image's MPI (as `--mpi` asks; `auto` when not given) and fills in the
/// arguments: `--prted` (unless given) is the MPI's daemon, `--prte` (unless given) the
/// image's prte where the components are used, and `--exec-allow` gets the daemon where the
/// MPI starts it through `prrte-k8s-rsh`. A DVM head (`--dvm-head auto|always`) needs an MPI
/// the components serve.
pub async fn resolve(args: &mut AgentArgs, env: &DetectEnv) -> Result<Plan, MpiError> {
    let runtime = match &args.runtime_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| runtime_of(&e))
            .ok_or_else(|| {
                MpiError::Setup(
                    "cannot tell where the injected runtime is (the agent's own path is unknown); give --runtime-dir".into(),
                )
            })?,
    };
    let mut env = env.clone();
    env.skip.push(runtime.join("bin"));
    let choice = args.mpi.unwrap_or(MpiChoice::Auto);
    let found = detect(choice, &env).await?;
    let plan = Plan::decide(found, &runtime)?;
    if args.dvm_head != DvmHead::Never && plan.launch != Launch::Components {
        return Err(MpiError::Head(format!(
            "the DVM head runs the image's prte with the k8s components, which needs Open MPI 5 on PRRTE {}; this image has {} ({}); run the job in batch mode (--run -- mpirun ...) instead",
            crate::profile::COMPONENTS_RELEASE.prrte,
            plan.found.version.clone().unwrap_or_else(|| plan.found.kind.describe().into()),
            plan.fallback.clone().unwrap_or_else(|| plan.launch.describe().into()),
        )));
    }
    if args.prted.is_none() {
        args.prted = Some(plan.daemon().to_owned());
    }
    if args.prte.is_none() {
        args.prte = plan.prte();
    }
    for p in plan.exec_allow() {
        let p = p.display().to_string();
        if !args.exec.allow.contains(&p) {
            args.exec.allow.push(p);
        }
    }
    Ok(plan)
}

/// The pod's address the MPI's callbacks use: `POD_IP`, else the listen address if specific.
pub fn pod_ip(env: &impl Fn(&str) -> Option<String>, listen: IpAddr) -> Option<IpAddr> {
    env("POD_IP")
        .and_then(|s| s.trim().parse().ok())
        .or_else(|| (!listen.is_unspecified()).then_some(listen))
}
