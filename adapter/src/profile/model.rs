//! What a profile says of a PRRTE release line (the lines themselves are the sibling modules).

use crate::protocol::grammar::Grammar;
use crate::protocol::params::{self, Origin, Param, Project};

/// One PRRTE release line.
#[derive(Debug)]
pub struct Profile {
    /// `major.minor`: every release of the line is described by this profile.
    pub line: &'static str,
    /// prted as the k8s PLM starts it; `None` where the components do not run.
    pub(crate) prted_launch: Option<&'static Grammar>,
    /// prted as PRRTE's ssh launcher starts it (through `prrte-k8s-rsh`).
    pub(crate) prted_exec: &'static Grammar,
    /// The MCA parameters this line's launchers forward to prted (both grammars draw on them).
    pub params: &'static [Param],
    /// The release of the line the k8s components are built for, if any.
    pub components: Option<Components>,
    pub(crate) features: Features,
    /// Parameters the pods set under PRRTE 3.0's name (`PRTE_MCA_<old>`, in every rendered pod)
    /// that this line reads only under another, as `(old, new)`: the agent gives this line's
    /// launcher both.
    pub(crate) renamed: &'static [(&'static str, &'static str)],
}

/// The release the k8s components are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Components {
    /// The exact PRRTE release.
    pub prrte: &'static str,
    /// The PMIx `major.minor` (PMIx keeps its ABI across patch releases).
    pub pmix: &'static str,
    /// Our patch level (the suffix of the install prefix).
    pub(crate) patch_level: &'static str,
    /// Our patches, in `prrte-config/patches/`, in order.
    pub patches: &'static [&'static str],
    /// prted's process states as PRRTE's headers number them.
    pub proc_states: ProcStates,
}

/// The numbers of the process states the k8s PLM tells daemons apart by (`prte_proc_state_t`):
/// states before `running` are a daemon still starting, from `unterminated` on it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStates {
    pub running: u32,
    pub unterminated: u32,
    pub failed_to_start: u32,
    pub comm_failed: u32,
}

/// What the builds of a line have or lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Features {
    /// prted's launch threads can lose the exit of a proc that ends right after its fork (the
    /// short-job hang): upstream builds need `odls_base_max_threads=0`.
    pub(crate) launch_thread_race: bool,
}

impl Profile {
    /// The parameter lists a launch request (the k8s PLM) draws on: the line's, and Open MPI's
    /// own in its environment.
    pub(crate) fn launch_lists(&self) -> [&'static [Param]; 2] {
        [self.params, params::OMPI]
    }

    /// The line's parameter `name` of `project` that the k8s PLM may send.
    pub(crate) fn launch_param(&self, project: Project, name: &str) -> Option<Param> {
        params::lookup(&self.launch_lists(), project, name).filter(|p| p.from(Origin::Launch))
    }
}

impl PartialEq for Profile {
    fn eq(&self, other: &Profile) -> bool {
        self.line == other.line
    }
}

impl Eq for Profile {}
