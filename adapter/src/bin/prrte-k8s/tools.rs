//! `prrte-k8s dvm-uri`, `prrte-k8s prun`, `prrte-k8s pterm`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use clap::Args;
use prrte_k8s::settings::{agent, tools, ArgExt};
pub use prrte_k8s::workflow::{configured_prefix, read_dvm_uri};

#[derive(Args, Debug)]
pub struct DvmUriArgs {
    // `--file`: this subcommand's name for `--dvm-uri-file`.
    #[arg(setting = &agent::DVM_URI_FILE, long = "file")]
    pub file: PathBuf,
}

#[derive(Args, Debug)]
pub struct ToolArgs {
    #[arg(long, setting = &agent::DVM_URI_FILE)]
    pub file: PathBuf,
    /// Arguments for the PRRTE tool (everything after the subcommand).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

pub fn dvm_uri(args: DvmUriArgs) -> i32 {
    match read_dvm_uri(&args.file) {
        Ok(uri) => {
            println!("{uri}");
            0
        }
        Err(e) => {
            eprintln!("prrte-k8s: error: {e}");
            1
        }
    }
}

/// The value of a path setting's variable, if set and not empty.
fn env_path(s: &prrte_k8s::settings::Setting) -> Option<PathBuf> {
    std::env::var_os(s.var())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// Where a PRRTE tool is: `$PRRTE_K8S_PREFIX/bin/TOOL`, else next to `$PRRTE_K8S_PRTED`, else
/// the bare name (found through PATH).
pub fn tool_path(tool: &str) -> PathBuf {
    if let Some(p) = env_path(&tools::PREFIX) {
        return p.join("bin").join(tool);
    }
    if let Some(prted) = env_path(&agent::PRTED) {
        return prted.with_file_name(tool);
    }
    PathBuf::from(tool)
}

/// The remedy when a PRRTE tool cannot be run.
pub fn tool_remedy(tool: &str) -> String {
    format!(
        "set {} to the PRRTE install prefix (or {} to its prted, or put {tool} on PATH)",
        tools::PREFIX.var(),
        agent::PRTED.var()
    )
}

/// The tool's argument list: `--dvm-uri file:<file>` first (a PRRTE 3.0 prted must never receive a
/// tool connection, so the tool is always pointed at prte), `--allow-run-as-root` for prun as
/// root (pterm refuses that flag), then the user's arguments.
pub fn tool_argv(tool: &str, file: &Path, root: bool, user: &[OsString]) -> Vec<OsString> {
    let mut uri = OsString::from("file:");
    uri.push(file.as_os_str());
    let mut argv = vec![OsString::from("--dvm-uri"), uri];
    if root && tool == "prun" {
        argv.push("--allow-run-as-root".into());
    }
    argv.extend(user.iter().cloned());
    argv
}

/// Replaces this process with the PRRTE tool; returns only on failure.
pub fn exec_tool(tool: &str, args: ToolArgs) -> i32 {
    if let Err(e) = read_dvm_uri(&args.file) {
        eprintln!("prrte-k8s {tool}: error: {e}");
        return 1;
    }
    let path = tool_path(tool);
    let root = nix::unistd::geteuid().is_root();
    let argv = tool_argv(tool, &args.file, root, &args.args);
    let e = std::process::Command::new(&path).args(&argv).exec();
    eprintln!(
        "prrte-k8s {tool}: error: cannot run {}: {e}; {}",
        path.display(),
        tool_remedy(tool)
    );
    127
}
