//! The launch benchmark's lower bound: PRRTE's ssh PLM with a `plm_ssh_agent` that runs the
//! daemon's command directly in the target pod's network and UTS namespaces (no network hop, no
//! authentication, no sshd), so what is left is PRRTE's own cost.
//!
//! prte runs in pod 0, whose own PID namespace and /proc cannot name other pods' processes; so
//! the namespaces are pinned as files (bind mounts of `/proc/PID/ns/*`) in a directory made a
//! shared mount *before* the pods start: each pod's mount namespace is a slave copy of the
//! host's, so the pins made later appear in every pod, and the agent script in pod 0 enters
//! pod i with `nsenter --net=DIR/i.net --uts=DIR/i.uts`. A PID namespace cannot be entered
//! sideways, so the daemons stay in pod 0's (they are found there); a mount namespace cannot be
//! pinned in a shared mount, so they keep pod 0's (the paths they use are the host's, the same
//! in every pod).
use crate::harness::mpijob::{Job, NS};
use anyhow::{bail, Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The shared directory of namespace pins; unmounted (pins included) on drop.
pub struct NsPins {
    dir: PathBuf,
    mounted: bool,
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl NsPins {
    /// Makes `dir` a shared mount; call before the pods start.
    pub fn prepare(dir: &Path) -> Result<NsPins> {
        std::fs::create_dir_all(dir)?;
        run(Command::new("mount").arg("--bind").arg(dir).arg(dir))?;
        let mut pins = NsPins {
            dir: dir.to_path_buf(),
            mounted: true,
        };
        if let Err(e) = run(Command::new("mount").arg("--make-shared").arg(dir)) {
            pins.unmount();
            return Err(e);
        }
        Ok(pins)
    }

    fn unmount(&mut self) {
        if std::mem::take(&mut self.mounted) {
            let _ = Command::new("umount")
                .arg("--recursive")
                .arg("--lazy")
                .arg(&self.dir)
                .status();
        }
    }

    /// Pins every pod's namespaces and writes the `plm_ssh_agent` script: `SCRIPT HOST CMD...`
    /// with HOST a pod IP or hostname. Returns the script's path.
    pub fn write_agent(&self, job: &Job, script: &Path) -> Result<PathBuf> {
        let mut cases = String::new();
        for (i, pod) in job.pods.iter().enumerate() {
            let info = job
                .cluster
                .pod_exec_info(NS, pod)
                .with_context(|| format!("no exec information for pod {pod}"))?;
            for ns in ["net", "uts"] {
                let pin = self.dir.join(format!("{i}.{ns}"));
                std::fs::write(&pin, b"")?;
                run(Command::new("mount")
                    .arg("--bind")
                    .arg(format!("/proc/{}/ns/{ns}", info.pid))
                    .arg(&pin))?;
            }
            // The pod's environment, as `prrte-k8s-sandbox exec` gives it, and HOME as the
            // ssh baseline's sshd sets it.
            let probe = job.cluster.pod_exec(pod, &["/bin/true"])?;
            let mut env: Vec<String> = probe
                .get_envs()
                .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?)))
                .filter(|kv| !kv.starts_with("HOME="))
                .map(|kv| quote(&kv))
                .collect();
            let tmp = info
                .env
                .iter()
                .find(|(k, _)| k == "TMPDIR")
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| "/tmp".into());
            env.push(quote(&format!("HOME={tmp}")));
            let d = self.dir.display();
            cases.push_str(&format!(
                "  {}|{}) exec /usr/bin/nsenter --net={d}/{i}.net --uts={d}/{i}.uts -- /usr/bin/env -i {} /bin/sh -c \"$*\" ;;\n",
                quote(&info.ip),
                quote(&job.hostnames[i]),
                env.join(" ")
            ));
        }
        let text = format!(
            "#!/bin/sh\n# plm_ssh_agent of the lower bound: HOST COMMAND... runs COMMAND in HOST's pod namespaces.\nh=$1\nshift\ncase \"$h\" in\n{cases}  *) echo \"nsexec: unknown host $h\" >&2; exit 255 ;;\nesac\n"
        );
        std::fs::write(script, text)?;
        std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755))?;
        Ok(script.to_path_buf())
    }
}

impl Drop for NsPins {
    fn drop(&mut self) {
        self.unmount();
    }
}
