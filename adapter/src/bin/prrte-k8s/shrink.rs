//! `prrte-k8s shrink N`: runs `palloc --shrink` against the job's DVM; what the release does
//! and what `palloc`'s answer means are [`prrte_k8s::elastic::shrink`]'s.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use prrte_k8s::elastic::shrink::outcome;

use crate::tools::{read_dvm_uri, tool_path, tool_remedy};

/// Releases `by` pods of the job whose DVM URI is in `file`.
pub fn run(by: u32, file: PathBuf) -> i32 {
    let uri = match read_dvm_uri(&file) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("prrte-k8s shrink: error: {e}");
            return 1;
        }
    };
    let palloc = tool_path("palloc");
    let out = Command::new(&palloc)
        .args(["--uri", uri.trim(), "--shrink", "--nodes", &by.to_string()])
        .stdin(Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "prrte-k8s shrink: error: cannot run {}: {e}; {}",
                palloc.display(),
                tool_remedy("palloc")
            );
            return 1;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match outcome(&text) {
        Ok(()) => {
            eprintln!("prrte-k8s shrink: the job's {by} highest pod(s) left the DVM and the workload was lowered");
            0
        }
        Err(status) => {
            eprintln!(
                "prrte-k8s shrink: error: the DVM refused to release {by} pod(s): {status}; the reason is in the DVM's output (the log of the pod running prte, e.g. `kubectl logs` of pod 0)"
            );
            1
        }
    }
}
