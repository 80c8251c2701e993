//! `prrte-k8s shrink N`: the running job gives its N highest pods back, through the path a
//! rank's `PMIx_Allocation_request(PMIX_ALLOC_RELEASE)` takes: PMIx's `palloc` sends the request
//! to prte, whose `ras k8s` ends the daemons of those pods, takes their nodes out of the DVM and
//! lowers the workload (docs/pmix-allocation-requests.md). Needs a PRRTE with our patch 0003;
//! another one refuses every request (`PMIX_ERR_NOT_SUPPORTED`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::tools::{read_dvm_uri, tool_path, tool_remedy};

/// What `palloc` said: granted, or the PMIx status it was refused with.
pub fn outcome(text: &str) -> Result<(), String> {
    if text
        .lines()
        .any(|l| l.starts_with("Allocation") && l.ends_with("granted"))
    {
        return Ok(());
    }
    Err(text
        .lines()
        .find_map(|l| l.strip_prefix("Allocation request failed: "))
        .map_or_else(|| text.trim().to_string(), |s| s.trim().to_string()))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palloc_s_answer_is_read() {
        assert_eq!(outcome("Allocation (null) granted\n"), Ok(()));
        assert_eq!(
            outcome("Allocation request failed: PMIX_ERR_BAD_PARAM\n"),
            Err("PMIX_ERR_BAD_PARAM".into())
        );
        assert_eq!(
            outcome("PMIx_tool_init failed: PMIX_ERR_UNREACH\n"),
            Err("PMIx_tool_init failed: PMIX_ERR_UNREACH".into())
        );
    }
}
