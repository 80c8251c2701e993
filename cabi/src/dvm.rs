//! What keeps a DVM usable with the defaults a site gets, wherever our components run in prte:
//!
//! - **Launches on the daemons' main threads.** PRRTE 3.0.8's launch threads
//!   (`odls_base_max_threads`, 16 by default in every DVM daemon) race with the main thread over a
//!   short-lived process's exit, and a short job then never ends (docs/prrte-short-job-hang.md).
//!   Unless the site set the parameter itself (command line, environment, a parameter file),
//!   [`launch_on_main_thread`] sets it to 0 in prte and tells the PLM to pass it to every prted.
//! - **No job outlives the tool that started it.** PRRTE 3.0.8 only forgets a tool whose
//!   connection is lost; a job whose `prun` was killed keeps running, holding its slots, and every
//!   later `prun` that needs them fails ("already filled"). [`watch_tools`] kills such a job in
//!   the DVM, as `pctrl --kill` would: its slots are free again once its daemons report it ended.
//!   A killed job whose end is still not reported after a few seconds (its processes had ended,
//!   but a daemon lost their end) is completed here, with a line naming it.
use crate::prrte::JobRef;
use crate::shim::{self, Framework};
use crate::{cstr, ffi, mainloop, prrte};
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The parameter (PRRTE's `odls_base_max_threads`).
pub(crate) const LAUNCH_THREADS: &str = "odls_base_max_threads";

/// Who decides the number of launch threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaunchThreads {
    /// PRRTE's default was in force: we set 0, in prte and for the prteds.
    OursZero,
    /// The site set it (named source); left alone.
    Site(&'static str),
    /// The parameter is not registered (yet): nothing set in prte, 0 for the prteds.
    Unregistered,
}

impl LaunchThreads {
    /// Whether prted's command line must carry `odls_base_max_threads 0`.
    pub(crate) fn for_prteds(self) -> bool {
        !matches!(self, LaunchThreads::Site(_))
    }
}

/// The decision from the parameter's source (a `PRRTE_K8S_VAR_SOURCE_*`, or -1: unregistered).
pub(crate) fn decide(source: c_int) -> LaunchThreads {
    let s = |v: u32| v as c_int;
    match source {
        x if x < 0 => LaunchThreads::Unregistered,
        x if x == s(ffi::PRRTE_K8S_VAR_SOURCE_DEFAULT) => LaunchThreads::OursZero,
        x if x == s(ffi::PRRTE_K8S_VAR_SOURCE_COMMAND_LINE) => LaunchThreads::Site("command line"),
        x if x == s(ffi::PRRTE_K8S_VAR_SOURCE_ENV) => {
            LaunchThreads::Site("environment (PRTE_MCA_odls_base_max_threads or --prtemca)")
        }
        x if x == s(ffi::PRRTE_K8S_VAR_SOURCE_FILE) => LaunchThreads::Site("parameter file"),
        x if x == s(ffi::PRRTE_K8S_VAR_SOURCE_OVERRIDE) => LaunchThreads::Site("override file"),
        _ => LaunchThreads::Site("set at run time"),
    }
}

static DECIDED: OnceLock<LaunchThreads> = OnceLock::new();

/// Makes prte launch on its main thread unless the site chose otherwise; what the prteds need.
/// Main thread, after PRRTE's init (the odls framework has registered its parameters) and
/// before prte's first local launch (the RAS allocation and the daemons' launch both are).
/// The decision is taken once.
pub(crate) fn launch_on_main_thread(fw: Framework) -> LaunchThreads {
    *DECIDED.get_or_init(|| {
        let (prte, odls, base, name) = (
            cstr::cstring("prte"),
            cstr::cstring("odls"),
            cstr::cstring("base"),
            cstr::cstring("max_threads"),
        );
        let mut storage: *mut c_int = std::ptr::null_mut();
        // SAFETY: main thread; NUL-terminated names that outlive the call; the shim fills
        // `storage` with the variable's backing store when it returns a source (>= 0).
        let source = unsafe {
            ffi::prrte_k8s_shim_int_var(
                prte.as_ptr(),
                odls.as_ptr(),
                base.as_ptr(),
                name.as_ptr(),
                &mut storage,
            )
        };
        let d = decide(source);
        match d {
            LaunchThreads::OursZero if !storage.is_null() => {
                // SAFETY: the backing store of PRRTE's registered int variable (the odls
                // framework's max_threads), read by PRRTE only on this thread when it first
                // launches local processes, which has not happened yet.
                let before = unsafe { std::ptr::replace(storage, 0) };
                shim::verbose(
                    fw,
                    1,
                    &format!(
                        "{}:k8s: {LAUNCH_THREADS} = 0 (was PRRTE's default {before}) for prte and \
                         its prteds: local processes start on each daemon's main thread; set \
                         {LAUNCH_THREADS} to choose otherwise",
                        fw.name()
                    ),
                );
            }
            LaunchThreads::Site(from) => shim::verbose(
                fw,
                1,
                &format!(
                    "{}:k8s: {LAUNCH_THREADS} set by the site ({from}); left as it is",
                    fw.name()
                ),
            ),
            _ => shim::verbose(
                fw,
                1,
                &format!(
                    "{}:k8s: {LAUNCH_THREADS} is not registered in prte; the prteds get 0",
                    fw.name()
                ),
            ),
        }
        d
    })
}

static WATCHING: AtomicBool = AtomicBool::new(false);

/// How often the jobs of departed tools are looked for.
const TOOL_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Ends the jobs of tools that go away before their jobs do (see the module documentation):
/// every `TOOL_CHECK_EVERY`, the running jobs spawned by a tool are compared with the tools
/// PMIx still has a connection to. (PMIx 5.0.5 reports a tool's lost connection to a server's
/// own event handlers only on some paths, so PRRTE's own handler for it never runs here; the
/// list of connected peers is what PMIx keeps exactly.) Main thread; idempotent.
pub(crate) fn watch_tools(fw: Framework) {
    if WATCHING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("prrte-k8s-tools".into())
        .spawn(|| loop {
            std::thread::sleep(TOOL_CHECK_EVERY);
            mainloop::post(check_tools);
        });
    if let Err(e) = spawned {
        WATCHING.store(false, Ordering::Release);
        shim::output(&format!(
            "{}:k8s: cannot start the thread that ends jobs of departed tools ({e}): a job whose \
             prun is killed keeps its slots until it is ended (prrte-k8s prun ends it)",
            fw.name()
        ));
    }
}

/// A running job that a tool spawned: (job nspace, tool nspace, tool rank).
type ToolJob = (String, String, u32);

/// A job of the DVM as read from PRRTE's table: the object, its nspace, its state, and the
/// process that asked for its spawn.
struct JobEntry {
    jdata: *mut ffi::prte_job_t,
    name: String,
    state: u32,
    proxy: Option<(String, u32)>,
}

/// The jobs of the DVM (not the daemons' job).
fn jobs_with_tools() -> Vec<JobEntry> {
    let daemons = prrte::daemons_job();
    // SAFETY: PRRTE's job table, live for the life of prte; main thread.
    let jobs: *mut ffi::pmix_pointer_array_t = unsafe { ffi::prrte_k8s_shim_jobs() }.cast();
    if jobs.is_null() {
        return Vec::new();
    }
    // SAFETY: as above.
    let size = unsafe { (*jobs).size };
    let mut out = Vec::new();
    for i in 0..size {
        // SAFETY: the job table holds prte_job_t objects; main thread.
        let jdata: *mut ffi::prte_job_t = unsafe { prrte::array_get(jobs, i) };
        // SAFETY: a live job object of the table (or NULL), used only during this call.
        let Some(job) = (unsafe { JobRef::new(jdata) }) else {
            continue;
        };
        if Some(job) == daemons {
            continue;
        }
        let mut ns = prrte::nspace_buffer();
        let mut rank: u32 = 0;
        // SAFETY: main thread; a live job; the shim writes at most PMIX_MAX_NSLEN + 1 bytes.
        let has = unsafe {
            ffi::prrte_k8s_shim_job_launch_proxy(jdata.cast(), ns.as_mut_ptr(), &mut rank)
        } == 1;
        // SAFETY: `ns` is NUL-terminated by the shim (or all zero).
        let proxy = has.then(|| unsafe { cstr::string(ns.as_ptr()) }.unwrap_or_default());
        // SAFETY: plain fields of a live job object; main thread.
        let (state, name) = unsafe {
            (
                (*jdata).state as u32,
                cstr::string((*jdata).nspace.as_ptr()).unwrap_or_default(),
            )
        };
        out.push(JobEntry {
            jdata,
            name,
            state,
            proxy: proxy.map(|p| (p, rank)),
        });
    }
    out
}

/// Whether `ns` names a job of this DVM (its processes are PRRTE's clients, not tools).
fn is_job(ns: &str) -> bool {
    let c = cstr::cstring(ns);
    // SAFETY: main thread; a NUL-terminated nspace; the lookup only reads PRRTE's job table.
    !unsafe { ffi::prte_get_job_data_object(c.as_ptr()) }.is_null()
}

/// The running jobs spawned by a tool.
fn tool_jobs() -> Vec<ToolJob> {
    jobs_with_tools()
        .into_iter()
        .filter(|j| orphan_action(j.state) == Orphan::Kill)
        .filter_map(|j| j.proxy.map(|(p, r)| (j.name, p, r)))
        .filter(|(_, tool, _)| !is_job(tool))
        .collect()
}

/// The tick (main thread): if a running job was spawned by a tool, ask PMIx which tools are
/// connected.
fn check_tools() {
    if tool_jobs().is_empty() {
        return;
    }
    // SAFETY: `on_connected_tools` is a plain function valid for the life of the process; the
    // argument is unused.
    let rc = unsafe {
        ffi::prrte_k8s_shim_connected_tools(Some(on_connected_tools), std::ptr::null_mut())
    };
    if rc != prrte::SUCCESS {
        shim::verbose(
            Framework::Plm,
            1,
            &format!("plm:k8s: cannot list PMIx's connected tools (PRRTE error {rc})"),
        );
    }
}

/// PMIx's answer (on PMIx's progress thread): handled on PRRTE's main thread.
///
/// # Safety
///
/// `tools` is a NUL-terminated string valid for the duration of the call.
unsafe extern "C" fn on_connected_tools(tools: *const c_char, _arg: *mut std::ffi::c_void) {
    // SAFETY: the shim passes a NUL-terminated string valid during this call.
    let text = unsafe { cstr::string(tools) }.unwrap_or_default();
    let connected = parse_tools(&text);
    mainloop::post(move || end_orphans(&connected));
}

/// "nspace:rank" lines.
pub(crate) fn parse_tools(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter_map(|l| {
            let (ns, r) = l.trim().rsplit_once(':')?;
            Some((ns.to_owned(), r.parse().ok()?))
        })
        .collect()
}

/// The jobs among `jobs` whose tool is not among `connected`.
pub(crate) fn orphans<'a>(jobs: &'a [ToolJob], connected: &[(String, u32)]) -> Vec<&'a ToolJob> {
    jobs.iter()
        .filter(|(_, tool, rank)| !connected.iter().any(|(t, r)| t == tool && r == rank))
        .collect()
}

thread_local! {
    /// Jobs already ordered killed (main thread), so that a kill in progress is not repeated.
    static KILLED: std::cell::RefCell<std::collections::BTreeSet<String>> =
        const { std::cell::RefCell::new(std::collections::BTreeSet::new()) };
}

/// Kills the running jobs whose tool is gone (main thread; the job list is read again now).
fn end_orphans(connected: &[(String, u32)]) {
    let jobs = tool_jobs();
    for (name, tool, rank) in orphans(&jobs, connected) {
        if KILLED.with(|k| !k.borrow_mut().insert(name.clone())) {
            continue;
        }
        let Some(jdata) = jobs_with_tools()
            .into_iter()
            .find(|j| &j.name == name)
            .map(|j| j.jdata)
        else {
            continue;
        };
        // SAFETY: a live job of PRRTE's table; PRRTE returns a static string for any state.
        let state =
            unsafe { cstr::string(ffi::prte_job_state_to_str((*jdata).state)).unwrap_or_default() };
        shim::output(&format!(
            "prrte-k8s: job {name} ({state}) lost its tool {tool}:{rank} (its prun ended or was \
             killed) before the job ended: killing the job to free its slots"
        ));
        // SAFETY: main thread; a live job of PRRTE's table; PRRTE's own kill of its processes.
        let rc = unsafe { ffi::prrte_k8s_shim_kill_job(jdata.cast()) };
        if rc != prrte::SUCCESS {
            shim::output(&format!(
                "prrte-k8s: killing job {name} failed (PRRTE error {rc}); end it with pctrl \
                 --kill or stop the DVM"
            ));
        }
        later(name.clone(), Completion::Procs);
    }
}

/// How long a killed job may take to be reported ended before we complete it ourselves.
const KILLED_JOB_ENDS_WITHIN: Duration = Duration::from_secs(5);

/// The steps that complete a killed job whose end is not reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Completion {
    /// Record its unended processes as ended, as their daemons would have.
    Procs,
    /// Then the job itself.
    Job,
}

/// Runs `step` for job `name` on the main thread after [`KILLED_JOB_ENDS_WITHIN`].
fn later(name: String, step: Completion) {
    let spawned = std::thread::Builder::new()
        .name("prrte-k8s-complete".into())
        .spawn(move || {
            std::thread::sleep(KILLED_JOB_ENDS_WITHIN);
            mainloop::post(move || complete_if_stuck(&name, step));
        });
    if spawned.is_err() {
        shim::output("prrte-k8s: cannot start a thread to check a killed job");
    }
}

/// A job we killed is still running after [`KILLED_JOB_ENDS_WITHIN`]: its processes are dead
/// (killed, or ended long before), but their end never reached prte — the short-job hang of
/// PRRTE's launch threads, where a daemon loses a process's end and so never reports the job.
/// Complete it here, as the daemons' reports would have, so that its slots are freed.
fn complete_if_stuck(name: &str, step: Completion) {
    let Some(job) = jobs_with_tools().into_iter().find(|j| j.name == name) else {
        return;
    };
    if orphan_action(job.state) != Orphan::Kill {
        return;
    }
    let jdata = job.jdata;
    match step {
        Completion::Procs => {
            // SAFETY: main thread; a live job; its procs array holds prte_proc_t by rank.
            let (procs, total) = unsafe { ((*jdata).procs, (*jdata).num_procs) };
            let size = if procs.is_null() {
                0
            } else {
                // SAFETY: the job's live procs array (not NULL); main thread.
                unsafe { (*procs).size }
            };
            let mut unended = Vec::new();
            for i in 0..size {
                // SAFETY: as above.
                let p: *mut ffi::prte_proc_t = unsafe { prrte::array_get(procs, i) };
                // SAFETY: a live proc of the job (or NULL).
                if !p.is_null() && unsafe { (*p).state } < ffi::PRTE_PROC_STATE_UNTERMINATED {
                    unended.push(p);
                }
            }
            shim::output(&format!(
                "prrte-k8s: job {name} was killed {} s ago but {} of its {total} processes were \
                 never reported ended (their end was lost): completing them",
                KILLED_JOB_ENDS_WITHIN.as_secs(),
                unended.len()
            ));
            for p in unended {
                // SAFETY: main thread; a live proc; the state machine copies the name.
                unsafe {
                    ffi::prrte_k8s_shim_activate_proc_state(
                        std::ptr::addr_of_mut!((*p).name).cast(),
                        ffi::PRTE_PROC_STATE_TERMINATED as c_int,
                    )
                };
            }
            later(name.to_owned(), Completion::Job);
        }
        Completion::Job => {
            shim::output(&format!(
                "prrte-k8s: job {name} still not ended after its processes were: completing the \
                 job"
            ));
            // SAFETY: `JobRef::new` of a live job of PRRTE's table on the main thread.
            if let Some(job) = unsafe { JobRef::new(jdata) } {
                job.activate(ffi::PRTE_JOB_STATE_TERMINATED);
            }
        }
    }
}

/// What to do with a running job whose tool is gone, by its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Orphan {
    /// Still being allocated or mapped: look again later.
    Launching,
    /// Running: kill it.
    Kill,
    /// Ended, or ending on its own.
    Leave,
}

/// A job is killable once its launch message went to the daemons: from then on it has (or may
/// have) processes, and a job whose launch reports were lost stays there.
pub(crate) fn orphan_action(state: u32) -> Orphan {
    if state < ffi::PRTE_JOB_STATE_SEND_LAUNCH_MSG {
        Orphan::Launching
    } else if state < ffi::PRTE_JOB_STATE_UNTERMINATED {
        Orphan::Kill
    } else {
        Orphan::Leave
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_prrtes_default_is_replaced() {
        assert_eq!(
            decide(ffi::PRRTE_K8S_VAR_SOURCE_DEFAULT as c_int),
            LaunchThreads::OursZero
        );
        for s in [
            ffi::PRRTE_K8S_VAR_SOURCE_COMMAND_LINE,
            ffi::PRRTE_K8S_VAR_SOURCE_ENV,
            ffi::PRRTE_K8S_VAR_SOURCE_FILE,
            ffi::PRRTE_K8S_VAR_SOURCE_SET,
            ffi::PRRTE_K8S_VAR_SOURCE_OVERRIDE,
        ] {
            let d = decide(s as c_int);
            assert!(matches!(d, LaunchThreads::Site(_)), "{s}: {d:?}");
            assert!(!d.for_prteds());
        }
        assert!(decide(ffi::PRRTE_K8S_VAR_SOURCE_DEFAULT as c_int).for_prteds());
        assert!(decide(-1).for_prteds());
    }

    #[test]
    fn jobs_whose_tool_is_not_connected_are_orphans() {
        let connected = parse_tools("prun.a.1:0\npterm.b.7:0\nbad\n x:y\n");
        assert_eq!(
            connected,
            vec![("prun.a.1".to_string(), 0), ("pterm.b.7".to_string(), 0)]
        );
        let jobs: Vec<ToolJob> = vec![
            ("vm@1".into(), "prun.a.1".into(), 0),
            ("vm@2".into(), "prun.a.2".into(), 0),
            ("vm@3".into(), "prun.a.1".into(), 1),
        ];
        let o: Vec<&str> = orphans(&jobs, &connected)
            .into_iter()
            .map(|j| j.0.as_str())
            .collect();
        assert_eq!(o, vec!["vm@2", "vm@3"]);
        assert!(orphans(&jobs[..1], &connected).is_empty());
    }

    #[test]
    fn only_running_jobs_of_a_departed_tool_are_killed() {
        assert_eq!(orphan_action(ffi::PRTE_JOB_STATE_MAP), Orphan::Launching);
        assert_eq!(
            orphan_action(ffi::PRTE_JOB_STATE_LAUNCH_APPS),
            Orphan::Launching
        );
        assert_eq!(
            orphan_action(ffi::PRTE_JOB_STATE_SEND_LAUNCH_MSG),
            Orphan::Kill
        );
        assert_eq!(orphan_action(ffi::PRTE_JOB_STATE_RUNNING), Orphan::Kill);
        assert_eq!(
            orphan_action(ffi::PRTE_JOB_STATE_LOCAL_LAUNCH_COMPLETE),
            Orphan::Kill
        );
        assert_eq!(orphan_action(ffi::PRTE_JOB_STATE_TERMINATED), Orphan::Leave);
        assert_eq!(orphan_action(ffi::PRTE_JOB_STATE_NOTIFIED), Orphan::Leave);
        assert_eq!(
            orphan_action(ffi::PRTE_JOB_STATE_KILLED_BY_CMD),
            Orphan::Leave
        );
    }
}
