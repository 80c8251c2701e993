//! `prrte-k8s shrink N`: the running job gives its N highest pods back, through the path a
//! rank's `PMIx_Allocation_request(PMIX_ALLOC_RELEASE)` takes: PMIx's `palloc` sends the request
//! to prte, whose `ras k8s` ends the daemons of those pods, takes their nodes out of the DVM and
//! lowers the workload (docs/pmix-allocation-requests.md, [`super::allocreq::release`]). Needs
//! a PRRTE with our patch 0003; another one refuses every request (`PMIX_ERR_NOT_SUPPORTED`).
//! The command's glue (running `palloc`) is the binary's.

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
