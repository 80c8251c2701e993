//! Where a DVM start's seconds went, from the start times of prte and of every prted (the
//! kernel's `starttime` in /proc/PID/stat, clock ticks since boot: 10 ms resolution), and the
//! pods' memory (Pss from /proc/PID/smaps_rollup).

/// The phases of one DVM start, seconds; they add up to the DVM-ready time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Phases {
    /// prte started until the first prted started: prte's own start-up, discovery (ras k8s or
    /// the hostfile), the first connection and handshake (agent, sshd or nsenter) and the
    /// first prted's exec.
    pub to_first: f64,
    /// The first prted started until the last one did: the launcher's fan-out (connections
    /// and handshakes to every pod, or ssh's tree spawn) and the daemons' start.
    pub spread: f64,
    /// The last prted started until "DVM ready": PRRTE's wire-up (the last daemons' start-up
    /// and callback to prte, the routing tree).
    pub wire_up: f64,
}

/// Clock ticks per second of /proc's times.
fn tick() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// When `pid` started, clock ticks since boot.
fn start_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's ')': state is field 3, starttime field 22.
    let rest = &s[s.rfind(')')? + 2..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// When prte and its prteds started (clock ticks since boot), read while the DVM is up.
#[derive(Clone, Debug, Default)]
pub struct Starts {
    prte: u64,
    prteds: Vec<u64>,
}

impl Starts {
    /// The start times of `prte` and its daemons `prteds`; None when one cannot be read.
    pub fn read(prte: u32, prteds: &[u32]) -> Option<Starts> {
        let prteds: Option<Vec<u64>> = prteds.iter().map(|p| start_ticks(*p)).collect();
        Some(Starts {
            prte: start_ticks(prte)?,
            prteds: prteds.filter(|v| !v.is_empty())?,
        })
    }

    /// The phases of the DVM that became ready `ready` seconds after prte started.
    pub fn phases(&self, ready: f64) -> Phases {
        let first = self.prteds.iter().copied().min().unwrap_or(self.prte);
        let last = self.prteds.iter().copied().max().unwrap_or(self.prte);
        let t = tick();
        let to_first = first.saturating_sub(self.prte) as f64 / t;
        let spread = last.saturating_sub(first) as f64 / t;
        Phases {
            to_first,
            spread,
            wire_up: (ready - to_first - spread).max(0.0),
        }
    }
}

/// Proportional set size of `pid`, kB (its private memory plus its share of what it shares).
pub fn pss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix("Pss:")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_time_and_memory() {
        let me = std::process::id();
        assert!(start_ticks(me).unwrap() > 0);
        assert!(pss_kb(me).unwrap() > 100);
        // prte and its one prted are this process: nothing before wire-up, which is the rest.
        let p = Starts::read(me, &[me]).unwrap().phases(0.5);
        assert_eq!((p.to_first, p.spread), (0.0, 0.0));
        assert!((p.to_first + p.spread + p.wire_up - 0.5).abs() < 1e-9);
        assert!(Starts::read(me, &[u32::MAX]).is_none(), "no such prted");
        assert!(Starts::read(me, &[]).is_none(), "no prted");
    }

    #[test]
    fn the_phases_add_up_to_the_ready_time() {
        let s = Starts {
            prte: 1000,
            prteds: vec![1012, 1030, 1020],
        };
        let p = s.phases(0.5);
        let t = tick();
        assert!((p.to_first - 12.0 / t).abs() < 1e-9);
        assert!((p.spread - 18.0 / t).abs() < 1e-9);
        assert!((p.to_first + p.spread + p.wire_up - 0.5).abs() < 1e-9);
    }
}
