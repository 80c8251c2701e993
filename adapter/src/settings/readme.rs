//! The docs' tables of settings, rendered from the registry: the MCA parameters
//! ([`super::mca`]) and the agent's options ([`super::agent`]) in three tables: what site
//! administrators set (both in `docs/admin-guide.md`), the DVM head and batch mode, and `exec`
//! requests (both in `docs/user-guide.md`). Tests keep each table in its file equal to its
//! rendering, and every agent option in exactly one table.

use super::agent;
use super::mca;
use super::setting::{Kind, Setting};

/// The file that holds the MCA parameter table, relative to the repository's root.
pub(crate) const MCA_DOC: &str = "docs/admin-guide.md";
/// The line before the MCA parameter table in [`MCA_DOC`].
pub(crate) const BEGIN: &str =
    "<!-- MCA parameter table: rendered from adapter/src/settings/mca.rs, kept equal by its test -->";
/// The line after it.
pub(crate) const END: &str = "<!-- end of the MCA parameter table -->";

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn row(s: &Setting) -> String {
    let name = s.mca.map(|m| m.full).unwrap_or_default();
    let default = if s.default_doc.is_empty() {
        format!("`{}`", s.default)
    } else {
        cell(s.default_doc)
    };
    let mut meaning = cell(s.help);
    if !s.env.is_empty() {
        let vars: Vec<String> = s.env_names().map(|v| format!("`{v}`")).collect();
        meaning.push_str(&format!(
            "; in the environment {}, read by the launcher and the agents alike",
            vars.join(" or ")
        ));
    }
    format!("| `{name}` | {default} | {meaning} |\n")
}

/// The MCA parameter table, between its [`BEGIN`] and [`END`] lines.
pub(crate) fn mca_table() -> String {
    let mut out = format!("{BEGIN}\n\n| parameter | default | meaning |\n| --- | --- | --- |\n");
    for s in mca::RAS.iter().chain(mca::PLM.iter()) {
        out.push_str(&row(s));
    }
    out.push('\n');
    out.push_str(END);
    out.push('\n');
    out
}

/// A table of agent options in the docs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AgentTable {
    /// What it lists, as its marker lines name it.
    pub what: &'static str,
    /// The file that holds it, relative to the repository's root.
    pub doc: &'static str,
    pub settings: &'static [&'static Setting],
}

/// What site administrators set in the pod template ("Agent options for site administrators").
pub(crate) const AGENT_SITE: AgentTable = AgentTable {
    what: "agent options for site administrators",
    doc: "docs/admin-guide.md",
    settings: &[
        &agent::PRTED,
        &agent::MPI,
        &agent::RUNTIME_DIR,
        &agent::DETECT_ONLY,
        &agent::LISTEN,
        &agent::PORT,
        &agent::HEALTH_LISTEN,
        &agent::METRICS_LISTEN,
        &agent::SECRET_FILE,
        &agent::INSECURE_NO_AUTH,
        &agent::TMPDIR,
        &agent::PASS_ENV,
        &agent::KILL_GRACE,
        &agent::PREEMPT_GRACE,
        &agent::CGROUP,
        &agent::MAX_PENDING,
        &agent::MAX_PENDING_PER_PEER,
        &agent::HANDSHAKE_TIMEOUT,
        &agent::HEARTBEAT_TIMEOUT,
        &agent::MAX_FRAME,
        &agent::LOG_FORMAT,
    ],
};

/// The DVM head and batch mode ("prun from any pod").
pub(crate) const AGENT_HEAD_AND_BATCH: AgentTable = AgentTable {
    what: "agent options of the DVM head and batch mode",
    doc: "docs/user-guide.md",
    settings: &[
        &agent::DVM_HEAD,
        &agent::PRTE,
        &agent::TOOL_PORT,
        &agent::PRTE_ARG,
        &agent::DVM_URI_FILE,
        &agent::RUN,
        &agent::RUN_SHELL,
        &agent::BATCH_ROLE,
        &agent::LAUNCHER_WAIT,
        &agent::WORKERS_STAY,
        &agent::RANK_OUTPUT,
        &agent::PODS_TIMEOUT,
    ],
};

/// What `exec` requests (`prrte-k8s-rsh`) may run ("Every MPI without sshd").
pub(crate) const AGENT_EXEC: AgentTable = AgentTable {
    what: "agent options for exec requests",
    doc: "docs/user-guide.md",
    settings: &[&agent::EXEC_ALLOW, &agent::EXEC_DIR, &agent::MAX_EXEC],
};

/// Every agent table.
pub(crate) const AGENT_TABLES: &[AgentTable] = &[AGENT_SITE, AGENT_HEAD_AND_BATCH, AGENT_EXEC];

/// The flag as it is written: `--flag VALUE`, the choices for a value that is one of a few
/// words (`--cgroup auto|off`), nothing for a setting without a flag.
fn flag_cell(s: &Setting) -> String {
    if s.flag.is_empty() {
        return String::new();
    }
    let value = match s.kind {
        Kind::Choice(words) => words.join("|"),
        Kind::ChoiceOrCount { words, .. } => format!("{}|N", words.join("|")),
        _ => s.value_name.to_owned(),
    };
    if value.is_empty() {
        format!("`--{}`", s.flag)
    } else {
        format!("`--{} {}`", s.flag, cell(&value))
    }
}

fn agent_row(s: &Setting) -> String {
    let vars: Vec<String> = s.env_names().map(|v| format!("`{v}`")).collect();
    let default = if !s.default_doc.is_empty() {
        cell(s.default_doc)
    } else if !s.default.is_empty() {
        format!("`{}`", s.default)
    } else {
        String::new()
    };
    format!(
        "| {} | {} | {default} | {} |\n",
        flag_cell(s),
        vars.join(" or "),
        cell(s.help)
    )
}

impl AgentTable {
    /// The line before the table in its [`Self::doc`].
    pub fn begin(&self) -> String {
        format!(
            "<!-- {}: rendered from adapter/src/settings/agent.rs, kept equal by its test -->",
            self.what
        )
    }

    /// The line after it.
    pub fn end(&self) -> String {
        format!("<!-- end of the {} -->", self.what)
    }

    /// The table, between its [`Self::begin`] and [`Self::end`] lines.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{}\n\n| flag | env | default | meaning |\n| --- | --- | --- | --- |\n",
            self.begin()
        );
        for s in self.settings {
            out.push_str(&agent_row(s));
        }
        out.push('\n');
        out.push_str(&self.end());
        out.push('\n');
        out
    }
}
