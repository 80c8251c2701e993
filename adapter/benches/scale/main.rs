//! prrte-k8s scale benchmarks, without a thousand real daemons (`make bench-scale`, or
//! `cargo bench -p prrte-k8s --bench scale -- --help`; release profile):
//!
//! * `discovery`: `ras k8s` discovery (the code `prrte-k8s pods` and the RAS component run) of N
//!   Running+Ready pods of an Indexed Job in the sandbox API server: time, API requests (lists,
//!   pages, gets, watches, bytes), and the peak RSS of a `prrte-k8s pods` process.
//! * `fanout`: the launcher (`prrte_k8s::launch`, what the PLM runs) sends authenticated launch
//!   requests to N real agent processes, each on its own loopback address with a stub prted
//!   that exits at once, and collects every `started` and `exited`: wall time and the launcher's
//!   CPU time per daemon.
//! * `footprint`: RSS of one release agent, idle and while a launch runs.
//! * `channel`: the CPU the agent channel's cryptography takes per connection (the HMAC
//!   challenge-response, the Noise handshake on each side, a launch's sealed frames), and what
//!   the encryption adds to a DVM's start.
//!
//! Prints medians with [min-max]; `--json FILE` writes the numbers too. Not a timed test.
//!
//! One module per benchmark (`discovery` with `breakdown`, `fanout`, `footprint`, `channel`),
//! beside what they share: `stats`, `host`, and the fan-out harness `support` (also the
//! `fanout_auth` test's).
#![forbid(unsafe_code)]

mod breakdown;
mod channel;
mod discovery;
mod fanout;
mod footprint;
mod host;
mod stats;
#[path = "../support/fanout.rs"]
#[allow(dead_code)] // shared with tests/fanout_auth.rs, which reads more of it
mod support;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde_json::json;

use breakdown::breakdown;
use channel::bench_channel;
use discovery::{bench_discovery, max_rss};
use fanout::bench_fanout;
use footprint::bench_footprint;
use host::{load, profile};

#[derive(Parser, Debug)]
#[command(
    name = "scale",
    about = "prrte-k8s scale benchmarks (discovery, fan-out, agent footprint, channel cost)"
)]
struct Cli {
    #[command(subcommand)]
    what: Option<What>,
    /// Write the results as JSON to this file too.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Timed runs per size (the median is reported).
    #[arg(long, global = true, default_value_t = 5)]
    runs: usize,
    /// The agent whose footprint is measured (default: the one built with this bench, of its
    /// profile); `make bench-scale` gives the build of the `agent` profile, which the runtime
    /// image carries.
    #[arg(long, global = true, value_name = "PATH")]
    footprint_agent: Option<PathBuf>,
    /// Cargo passes --bench to bench targets; ignored.
    #[arg(long, hide = true, global = true)]
    bench: bool,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Discovery of N ready pods through the sandbox API server.
    Discovery {
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        pods: Vec<usize>,
    },
    /// The launcher against N agents on loopback addresses.
    Fanout {
        #[arg(long, value_delimiter = ',', default_value = "256,1024")]
        agents: Vec<usize>,
        /// After the timed runs, profile one more round of the largest size with `perf record
        /// -a` and print where the CPU went (by process, then the top symbols).
        #[arg(long)]
        perf: bool,
    },
    /// RSS of one agent, idle and during a launch.
    Footprint,
    /// CPU per connection of the agent channel's cryptography.
    Channel {
        /// Connections per timed run.
        #[arg(long, default_value_t = 2000)]
        connections: usize,
    },
    /// All of the above with their defaults.
    All,
    /// (internal) where a list's time goes.
    #[command(hide = true)]
    Breakdown {
        #[arg(long, default_value_t = 10000)]
        pods: usize,
    },
    /// (internal) run COMMAND, print its exit status and peak RSS in KiB.
    #[command(hide = true)]
    MaxRss {
        #[arg(last = true)]
        command: Vec<String>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let what = cli.what.unwrap_or(What::All);
    if let What::MaxRss { command } = &what {
        return max_rss(command);
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "# prrte-k8s scale benchmarks ({cores} cores, {} build)\n",
        profile()
    );
    let mut out = json!({"cores": cores, "profile": profile(), "load_before": load()});
    match what {
        What::Discovery { pods } => out["discovery"] = bench_discovery(&pods, cli.runs)?,
        What::Fanout { agents, perf } => out["fanout"] = bench_fanout(&agents, cli.runs, perf)?,
        What::Footprint => out["footprint"] = bench_footprint(cli.footprint_agent.as_deref())?,
        What::Channel { connections } => out["channel"] = bench_channel(cli.runs, connections),
        What::All => {
            out["discovery"] = bench_discovery(&[1000, 10000], cli.runs)?;
            println!();
            out["fanout"] = bench_fanout(&[256, 1024], cli.runs, false)?;
            println!();
            out["footprint"] = bench_footprint(cli.footprint_agent.as_deref())?;
            println!();
            out["channel"] = bench_channel(cli.runs, 2000);
        }
        What::Breakdown { pods } => breakdown(pods)?,
        What::MaxRss { .. } => unreachable!(),
    }
    out["load_after"] = json!(load());
    if let Some(p) = cli.json {
        std::fs::write(&p, serde_json::to_string_pretty(&out)? + "\n")
            .with_context(|| format!("writing {}", p.display()))?;
        println!("\nwrote {}", p.display());
    }
    Ok(())
}
