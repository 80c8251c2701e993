//! The `prrte-k8s-sandbox` command line: start a sandbox cluster in the background, run
//! commands in its pods, evict pods, and tear it down.
//!
//! This file runs the command line `args` defines; `up` starts a sandbox, `serve` is the
//! server it starts (`ready`: the wait for the workload), `client` the commands for a running
//! sandbox (and the control socket's client), `state` the state directory's files, `host` the
//! checks on the host (root, a live process).

use anyhow::{Context, Result};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod args;
mod client;
mod host;
mod ready;
mod serve;
mod state;
mod up;

pub use args::{Cli, Cmd, UpArgs};
use client::{down, exec, kill, status};
use serve::{api_only, serve};
pub use state::{PodLine, StateFile};
use up::up;

pub fn main() -> i32 {
    let cli = Cli::parse();
    let state = match absolute(&cli.state) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("prrte-k8s-sandbox: {e:#}");
            return 2;
        }
    };
    let r = match cli.cmd {
        Cmd::Up(a) => up(&state, a),
        Cmd::Exec { pod, command } => exec(&state, &pod, &command),
        Cmd::Kill { pod } => kill(&state, &pod).map(|_| 0),
        Cmd::Status => status(&state).map(|_| 0),
        Cmd::Down => down(&state).map(|_| 0),
        Cmd::Sweep => sweep().map(|_| 0),
        Cmd::Serve {
            apply,
            ready_timeout,
            max_pods,
        } => serve(&state, &apply, Duration::from_secs(ready_timeout), max_pods),
        Cmd::Api { port } => api_only(&state, port),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("prrte-k8s-sandbox: {e:#}");
            1
        }
    }
}

fn sweep() -> Result<()> {
    let removed = crate::runtime::podnet::cleanup_dead_networks()?;
    if removed.is_empty() {
        println!("prrte-k8s-sandbox sweep: nothing left by a dead sandbox or test run");
    }
    for (prefix, what) in removed {
        println!("prrte-k8s-sandbox sweep: removed what {prefix} (owner gone) left: {what}");
    }
    Ok(())
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()
            .context("reading the current directory")?
            .join(p))
    }
}
