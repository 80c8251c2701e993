//! `prrte-k8s-rsh [ssh options] HOST COMMAND...`: runs COMMAND in the job's pod HOST through
//! that pod's prrte-k8s agent, as ssh would through sshd. For launchers that start their
//! daemons with ssh: PRRTE (`--prtemca plm_ssh_agent prrte-k8s-rsh`), MPICH and Intel MPI's
//! Hydra (`-launcher ssh -launcher-exec prrte-k8s-rsh`). See the `prrte_k8s::rsh` docs.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A connection the agent dropped before authenticating it, tried again, is said on
    // stderr, as ssh reports its own retries; nothing else is logged (stderr is the remote
    // program's).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
            "off,{}=warn",
            prrte_k8s::launch::RETRY_LOG_TARGET
        )))
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .init();
    let runtime = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prrte-k8s-rsh: cannot start the runtime: {e}");
            return ExitCode::from(255);
        }
    };
    let code = runtime.block_on(prrte_k8s::rsh::main(args));
    // Do not wait for the thread blocked reading stdin.
    std::process::exit(code)
}
