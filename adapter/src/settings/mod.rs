//! Every setting of prrte-k8s, each named once: its MCA parameter (for the settings PRRTE's
//! components read), environment variables, command-line flag, default, help text and the
//! values it accepts.
//!
//! - [`mca`]: the `ras_k8s_*` and `plm_k8s_*` parameters. The components register them with
//!   PMIx from their tables ([`McaParams`]; `prte_info --param ras k8s` shows this help); the
//!   `prrte-k8s` CLI, the agent and `prrte-k8s-rsh` read the same settings from
//!   `PRTE_MCA_<name>` (and, for the agent's port and the secret file, the `PRRTE_K8S_*` names
//!   the agents have always read).
//! - [`agent`]: the flags of `prrte-k8s-agent`.
//! - [`tools`]: the settings of `prrte-k8s` and `prrte-k8s-rsh` that are no MCA parameter.
//!
//! The programs build their clap arguments from here ([`ArgExt::setting`]), the tables of the
//! MCA parameters and of the agent's options in `docs/admin-guide.md` and `docs/user-guide.md`
//! are rendered from [`mca`] and [`agent`] (`readme.rs`, built for its tests, which keep the
//! docs equal), and every value with a unit or a range is checked by [`Setting::parse`] and its
//! typed wrappers, whose errors name the setting, the bad value and what it accepts.
//!
//! A setting read under two environment variables is one setting: when both are set they must
//! agree ([`Setting::lookup`]).

/// Builds an [`Mca`] from the framework and the name, spelling the full name and variable once.
macro_rules! mca_param {
    ($framework:literal, $name:literal) => {
        Some($crate::settings::Mca {
            framework: $framework,
            name: $name,
            full: concat!($framework, "_k8s_", $name),
            env: concat!("PRTE_MCA_", $framework, "_k8s_", $name),
        })
    };
}

#[macro_use]
mod table;
pub mod agent;
pub mod mca;
pub mod mpijob;
#[cfg(test)]
mod readme;
mod setting;
pub mod tools;

pub(crate) use setting::Mca;
pub use setting::{Kind, Setting, SettingError, Value};
pub use table::{Field, McaParams, Param};

/// Builds a clap argument from a [`Setting`]: `#[arg(setting = &settings::agent::PRTED)]` on a
/// derived field (clap calls the method after its own, so the field's type still decides the
/// parser).
pub trait ArgExt {
    /// The flag, value name, help, default and environment variable of `s`. Of its variables,
    /// clap reads the one that is set (with two set, [`Setting::lookup`] checks they agree),
    /// else the documented one.
    fn setting(self, s: &Setting) -> Self;
}

impl ArgExt for clap::Arg {
    fn setting(self, s: &Setting) -> clap::Arg {
        let mut arg = self.help(s.help_with_default());
        if !s.flag.is_empty() {
            arg = arg.long(s.flag);
        }
        if !s.value_name.is_empty() {
            arg = arg.value_name(s.value_name);
        }
        let set = s
            .env_names()
            .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
        if let Some(var) = set.or_else(|| s.env_names().next()) {
            arg = arg.env(var);
        }
        if !s.default.is_empty() {
            arg = arg.default_value(s.default).required(false);
        }
        arg
    }
}

/// Every setting of the registry, for checks across all of them.
pub fn all() -> impl Iterator<Item = &'static Setting> {
    mca::RAS
        .iter()
        .chain(mca::PLM.iter())
        .chain(agent::ALL.iter())
        .chain(tools::ALL.iter())
        .copied()
}

#[cfg(test)]
mod tests;
