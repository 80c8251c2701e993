//! The baseline the k8s PLM replaces: a real sshd in every pod (the mpi-operator way), and prte
//! with `plm ssh` reaching each pod at its IP (the node's rawname, which `ras k8s` sets). Used by
//! the launch benchmark and its smoke test.
//!
//! Every pod's entrypoint becomes a small wrapper: it generates the pod's own host key, writes
//! an sshd configuration in the pod's TMPDIR (listening on the pod IP, root login with one
//! generated key, no PAM), starts `sshd -D` in the background, waits until it listens, and
//! runs the agent next to it. The sshd dies with the pod's PID namespace.
use crate::harness;
use crate::harness::mpijob::{Job, JobSpec};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const SSHD: &str = "/usr/sbin/sshd";
pub const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";
/// The port every pod's sshd listens on (at the pod IP).
pub const PORT: u16 = 22;
/// sshd's privilege-separation directory; an emptyDir in every pod, so the host's /run is
/// never touched.
pub const PRIVSEP_DIR: &str = "/run/sshd";

const WRAPPER: &str = r#"#!/bin/sh
# Pod entrypoint for the ssh baseline: the pod's own sshd, then the agent ("$@").
set -eu
d="$TMPDIR/sshd"
mkdir -p "$d"
chmod 0755 /run/sshd
rm -f "$d/host_key" "$d/host_key.pub" "$d/sshd.pid"
@KEYGEN@ -q -t ed25519 -N '' -C "$POD_NAME" -f "$d/host_key" </dev/null >/dev/null
cat >"$d/sshd_config" <<CFG
Port @PORT@
ListenAddress $POD_IP
HostKey $d/host_key
PidFile $d/sshd.pid
PermitRootLogin yes
PubkeyAuthentication yes
AuthorizedKeysFile $SSHD_AUTHORIZED_KEYS
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
SetEnv HOME=$TMPDIR TMPDIR=$TMPDIR PRTE_PKGLIBDIR=$PRTE_PKGLIBDIR
CFG
@SSHD@ -D -e -f "$d/sshd_config" 2>>"$d/sshd.log" &
i=0
while [ ! -s "$d/sshd.pid" ]; do
    i=$((i + 1))
    if [ "$i" -gt 100 ]; then
        echo "sshd did not start within 10s:" >&2
        cat "$d/sshd.log" >&2
        exit 1
    fi
    sleep 0.1
done
# The agent runs as a child, not exec'd: after each prted it stops every child of its own that
# is left (prted's strays), which would take sshd along.
"$@" &
agent=$!
trap 'kill -TERM "$agent" 2>/dev/null' TERM INT
rc=0
wait "$agent" || rc=$?
while kill -0 "$agent" 2>/dev/null; do
    rc=0
    wait "$agent" || rc=$?
done
exit "$rc"
"#;

/// The generated client key, the client's configuration and the pod wrapper of one job.
pub struct SshBaseline {
    /// Private key prte's ssh uses; its `.pub` is every sshd's AuthorizedKeysFile.
    pub key: PathBuf,
    /// ssh client configuration (`ssh -F`): the key, port, no host-key checking, batch mode.
    pub config: PathBuf,
    pub wrapper: PathBuf,
}

/// How prte starts the daemons over ssh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spawn {
    /// PRRTE's default: prte ssh's to its children in the routing tree; each prted stays
    /// attached to its ssh session.
    Tree,
    /// `plm_ssh_no_tree_spawn 1`: prte ssh's to every node itself; prteds daemonize.
    NoTree,
}

impl SshBaseline {
    /// Generate the client key (ssh-keygen) and write the pod wrapper into `dir`.
    pub fn prepare(dir: &Path) -> Result<SshBaseline> {
        use std::os::unix::fs::PermissionsExt;
        for p in [SSHD, SSH_KEYGEN, "/usr/bin/ssh"] {
            if !Path::new(p).is_file() {
                bail!("{p} not found: the ssh baseline needs Debian's openssh-server and openssh-client");
            }
        }
        let key = dir.join("ssh_client_key");
        let _ = std::fs::remove_file(&key);
        let _ = std::fs::remove_file(key.with_extension("pub"));
        let out = harness::run_with_timeout(
            {
                let mut c = Command::new(SSH_KEYGEN);
                c.args([
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "prrte-k8s-bench",
                    "-f",
                ])
                .arg(&key);
                c
            },
            Duration::from_secs(20),
        )?;
        if !out.status.success() {
            bail!(
                "ssh-keygen failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The options live in a file: prte hands its MCA parameters on to the prteds with
        // everything after a '=' in `plm_ssh_agent` cut off, so `-o Key=value` would not survive.
        let config = dir.join("ssh_config");
        std::fs::write(
            &config,
            format!(
                "Host *\n  Port {PORT}\n  IdentityFile {}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
                 GlobalKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n",
                key.display()
            ),
        )?;
        let wrapper = dir.join("sshd-entrypoint.sh");
        let body = WRAPPER
            .replace("@KEYGEN@", SSH_KEYGEN)
            .replace("@SSHD@", SSHD)
            .replace("@PORT@", &PORT.to_string());
        std::fs::write(&wrapper, body)?;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
        Ok(SshBaseline {
            key,
            config,
            wrapper,
        })
    }

    /// Make every pod of `spec` run its own sshd next to the agent.
    pub fn apply(&self, spec: &mut JobSpec) {
        spec.entrypoint_prefix = vec![
            "/bin/sh".into(),
            self.wrapper.to_string_lossy().into_owned(),
        ];
        spec.empty_dirs.push(PRIVSEP_DIR.into());
        spec.env.push((
            "SSHD_AUTHORIZED_KEYS".into(),
            self.key
                .with_extension("pub")
                .to_string_lossy()
                .into_owned(),
        ));
        // What an image would have installed: the components, for the prteds sshd starts.
        spec.env
            .push(("PRTE_PKGLIBDIR".into(), "@COMPONENTS@".into()));
    }

    /// The `plm_ssh_agent` value (PRRTE splits it at spaces and ':', and prteds get it cut at
    /// the first '=').
    pub fn ssh_agent(&self) -> String {
        format!("ssh -F {}", self.config.display())
    }

    /// prte's arguments for the ssh baseline (allocation still from `ras k8s`).
    pub fn prte_args(&self, spawn: Spawn) -> Vec<String> {
        let prted = harness::prefix().join("bin/prted");
        let mut a: Vec<String> = [
            "--allow-run-as-root",
            "--prtemca",
            "ras",
            "k8s",
            "--prtemca",
            "plm",
            "ssh",
            "--prtemca",
            "plm_ssh_agent",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(self.ssh_agent());
        // Tree-spawned daemons run a bare `prted` otherwise, which sshd's PATH lacks.
        a.extend([
            "--prtemca".into(),
            "prte_launch_agent".into(),
            prted.to_string_lossy().into_owned(),
        ]);
        // Each launch's ssh client (nsenter for the lower bound) stays until its prted ends
        // (prted's parent waits for a "DVM ready" that only prte writes), and PRRTE's ssh
        // launcher runs at most plm_ssh_num_concurrent (128) of them at once: with more daemons
        // than that the DVM never becomes ready. Raised past the sandbox's pod limit.
        a.extend([
            "--prtemca".into(),
            "plm_ssh_num_concurrent".into(),
            "1024".into(),
        ]);
        // As plm k8s's prteds: processes started on the daemons' main threads (PRRTE 3.0's
        // launch threads can lose a short job's end: docs/prrte-short-job-hang.md). ras k8s
        // sets it inside prte, which PRRTE's ssh launcher does not pass on.
        a.extend([
            "--prtemca".into(),
            "odls_base_max_threads".into(),
            "0".into(),
        ]);
        if spawn == Spawn::NoTree {
            a.extend([
                "--prtemca".into(),
                "plm_ssh_no_tree_spawn".into(),
                "1".into(),
            ]);
        }
        a
    }
}

/// Read a `/proc/<pid>/status` field in kB (e.g. "VmHWM").
pub fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// Host pids of processes in pod `index` whose command name starts with `comm`.
pub fn pids_like(job: &Job, index: usize, comm: &str) -> Result<Vec<u32>> {
    let pids = job.cluster.pod_host_pids(&job.pods[index])?;
    Ok(pids
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .map(|c| c.trim_end().starts_with(comm))
                .unwrap_or(false)
        })
        .collect())
}

/// Wait until every pod's sshd is back to its listener alone (no session left) and prte's pod
/// runs no ssh client, or fail naming what is left.
pub fn wait_sessions_closed(job: &Job, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let mut left = Vec::new();
        for i in 0..job.pods.len() {
            let n = pids_like(job, i, "sshd")?.len();
            if n != 1 {
                left.push(format!("pod {i}: {n} sshd processes"));
            }
        }
        let clients = job.pids_in_pod(0, "ssh")?;
        if !clients.is_empty() {
            left.push(format!("pod 0: ssh clients {clients:?}"));
        }
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("after {limit:?}: {}", left.join("; "));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sshd log of pod `index` (for error reports).
pub fn sshd_log(job: &Job, index: usize) -> String {
    std::fs::read_to_string(job.pod_tmp(index).join("sshd/sshd.log")).unwrap_or_default()
}
