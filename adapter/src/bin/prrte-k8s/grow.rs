//! `prrte-k8s grow N`: N more pods for the running job, added to its DVM.
//!
//! The workload is raised and the new pods awaited by [`prrte_k8s::elastic::grow`]; then the DVM gets
//! them through `prun --add-host HOST:SLOTS,...` with a trivial job (`true`), which makes prte
//! add the hosts to its pool and its k8s PLM start a daemon in each new pod only (the running
//! daemons are untouched). The new pods' host names are printed, one a line; the next
//! `prrte-k8s prun` maps onto them.

use std::ffi::OsString;
use std::path::PathBuf;

use prrte_k8s::discovery::{DiscoveryConfig, Environment};
use prrte_k8s::elastic::grow::{add_host_arg, grow, GrowError};

use crate::prun;
use crate::tools::{read_dvm_uri, ToolArgs};

/// Grows the job by `by` pods and adds them to the DVM whose URI is in `file`.
pub fn run(cfg: DiscoveryConfig, by: u32, file: PathBuf) -> i32 {
    // Refused before anything changes when there is no DVM to add the pods to.
    if let Err(e) = read_dvm_uri(&file) {
        eprintln!("prrte-k8s grow: error: {e}");
        return 1;
    }
    let runtime = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prrte-k8s grow: error: cannot start: {e}");
            return 1;
        }
    };
    let env = Environment::from_process();
    let grown = match runtime.block_on(grow(&cfg, &env, by)) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("prrte-k8s grow: error: {e}");
            return match e {
                GrowError::Discovery(d) => d.exit_code(),
                _ => 1,
            };
        }
    };
    drop(runtime);
    let w = &grown.workload;
    eprintln!(
        "prrte-k8s grow: {} {}/{} raised from {} to {} pods; adding {} to the DVM",
        w.kind,
        w.namespace,
        w.name,
        w.pods,
        grown.pods,
        grown
            .new
            .iter()
            .map(|n| format!(
                "{} (pod {}, {}, {} slots)",
                n.hostname, n.pod, n.ip, n.slots
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if grown.new.is_empty() {
        eprintln!("prrte-k8s grow: error: the job has {} pods but none is new: another grow may have raised it at the same time", grown.pods);
        return 1;
    }
    let args: Vec<OsString> = ["--add-host", &add_host_arg(&grown.new), "-n", "1", "true"]
        .iter()
        .map(OsString::from)
        .collect();
    let code = prun::run(prun::PrunArgs {
        timeout: None,
        tool: ToolArgs { file, args },
    });
    if code != 0 {
        eprintln!(
            "prrte-k8s grow: error: the new pods are Ready, but prun --add-host failed (exit {code}); the workload keeps its {} pods",
            grown.pods
        );
        return code;
    }
    for n in &grown.new {
        println!("{}", n.hostname);
    }
    0
}
