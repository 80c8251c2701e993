//! The connection: loading `libpmix`, `PMIx_tool_init`, the event handlers, spawning, killing.

use std::ffi::c_void;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::callbacks::{self, Query};
use crate::dispatch::{Asker, Dispatcher, Msg};
use crate::ffi;
use crate::info::{c_string, proc_name, Argv, InfoList, Value};
use crate::{Ended, Error, Task, Update};

/// libpmix, loaded once and kept for the life of the process (its threads run its code).
static API: OnceLock<ffi::PmixApi> = OnceLock::new();
/// PMIx allows one tool initialization per process.
static CONNECTED: AtomicBool = AtomicBool::new(false);

struct PmixAsker(&'static ffi::PmixApi);

impl PmixAsker {
    /// Asks for the proc table of `nspace`; PMIx answers through `cb` with the box as cbdata.
    fn proc_table(&self, key: u64, nspace: &str, refresh: bool, cb: QueryCb) -> bool {
        let mut q = Box::new(Query {
            key,
            keys: Argv::new(&[crate::info::key_str(ffi::PMIX_QUERY_PROC_TABLE)]),
            qualifiers: InfoList::new(),
            query: ffi::pmix_query_t {
                keys: std::ptr::null_mut(),
                qualifiers: std::ptr::null_mut(),
                nqual: 0,
            },
        });
        q.qualifiers
            .push(ffi::PMIX_NSPACE, Value::Str(nspace.to_owned()));
        if refresh {
            // Ask the DVM, not what this process may have cached about the job.
            q.qualifiers
                .push(ffi::PMIX_QUERY_REFRESH_CACHE, Value::Bool(true));
        }
        q.query.keys = q.keys.as_mut_ptr();
        q.query.nqual = q.qualifiers.len();
        q.query.qualifiers = q.qualifiers.as_mut_ptr();
        let query: *mut ffi::pmix_query_t = &mut q.query;
        let raw = Box::into_raw(q);
        // SAFETY: `query` points into the leaked box, which stays alive until `cb` takes it
        // back (PMIx keeps the pointer until it answers); on an immediate error PMIx never calls
        // back and the box is reclaimed below.
        let rc = unsafe { self.0.PMIx_Query_info_nb(query, 1, Some(cb), raw.cast()) };
        if rc != ffi::PMIX_SUCCESS as i32 {
            // SAFETY: PMIx refused the call, so it holds no pointer into the box.
            drop(unsafe { Box::from_raw(raw) });
            return false;
        }
        true
    }
}

/// A `pmix_info_cbfunc_t` taking back a leaked `Box<Query>`.
type QueryCb = unsafe extern "C" fn(
    i32,
    *mut ffi::pmix_info_t,
    usize,
    *mut c_void,
    ffi::pmix_release_cbfunc_t,
    *mut c_void,
);

impl Asker for PmixAsker {
    fn ask_hosts(&self, key: u64, nspace: &str) -> bool {
        self.proc_table(key, nspace, false, callbacks::query_cb)
    }

    fn ask_state(&self, key: u64, nspace: &str) -> bool {
        self.proc_table(key, nspace, true, callbacks::probe_cb)
    }

    fn status_name(&self, status: i32) -> String {
        status_name(self.0, status)
    }

    fn warn(&self, text: &str) {
        eprintln!("prrte-k8s-pmix-tool: warning: {text}");
    }
}

fn status_name(api: &ffi::PmixApi, status: i32) -> String {
    // SAFETY: PMIx_Error_string returns a static NUL-terminated string for any status.
    unsafe { c_string(api.PMIx_Error_string(status)) }.unwrap_or_else(|| status.to_string())
}

fn check(api: &ffi::PmixApi, call: &'static str, rc: i32) -> Result<(), Error> {
    if rc == ffi::PMIX_SUCCESS as i32 || rc == ffi::PMIX_OPERATION_SUCCEEDED {
        Ok(())
    } else {
        Err(Error::Pmix {
            call,
            status: rc,
            name: status_name(api, rc),
        })
    }
}

/// A PMIx tool connection to a DVM (one per process). Dropping it finalizes PMIx.
pub struct Dvm {
    api: &'static ffi::PmixApi,
    tx: Sender<Msg>,
    next: AtomicU64,
    dispatcher: Mutex<Option<JoinHandle<()>>>,
}

impl Dvm {
    /// Loads `libpmix` from `libpmix` (the DVM's install's `lib/libpmix.so.2`) and connects to
    /// the DVM's PMIx server at `uri` (`<nspace>.<rank>;tcp4://<ip>:<port>`, what prte reports).
    pub fn connect(uri: &str, libpmix: &Path) -> Result<Dvm, Error> {
        Self::connect_with(uri, libpmix, false)
    }

    /// As [`Dvm::connect`]; with `capture_output` every job's output comes to its task as
    /// [`Update::Output`] (a PMIx IOF pull of every rank of every job) instead of this process's
    /// stdout/stderr.
    pub fn connect_with(uri: &str, libpmix: &Path, capture_output: bool) -> Result<Dvm, Error> {
        if CONNECTED.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyConnected);
        }
        let r = Self::connect_once(uri, libpmix, capture_output);
        if r.is_err() {
            callbacks::set_sink(None);
            CONNECTED.store(false, Ordering::SeqCst);
        }
        r
    }

    fn connect_once(uri: &str, libpmix: &Path, capture_output: bool) -> Result<Dvm, Error> {
        let api = load(libpmix)?;
        let (tx, rx): (Sender<Msg>, Receiver<Msg>) = channel();
        callbacks::set_sink(Some(tx.clone()));
        let mut me = proc_name("", 0);
        let mut info = InfoList::new();
        info.push(ffi::PMIX_SERVER_URI, Value::Str(uri.to_owned()));
        if capture_output {
            // Output no pull claims is not copied to our own stdout/stderr.
            info.push(ffi::PMIX_IOF_LOCAL_OUTPUT, Value::Bool(false));
        }
        // SAFETY: `me` and the info array are valid for the call; PMIx copies what it keeps.
        let rc = unsafe { api.PMIx_tool_init(&mut me, info.as_mut_ptr(), info.len()) };
        check(api, "PMIx_tool_init", rc)?;
        let dvm = Dvm {
            api,
            tx,
            next: AtomicU64::new(1),
            dispatcher: Mutex::new(None),
        };
        // From here on `dvm`'s Drop finalizes PMIx if a later step fails.
        let mut code = ffi::PMIX_EVENT_JOB_END;
        let mut names = InfoList::new();
        names.push(
            ffi::PMIX_EVENT_HDLR_NAME,
            Value::Str("prrte-k8s-job-end".into()),
        );
        // SAFETY: a blocking registration (no cbfunc): `code` and `names` outlive the call;
        // `event_cb` is a valid handler for the life of the process.
        let rc = unsafe {
            api.PMIx_Register_event_handler(
                &mut code,
                1,
                names.as_mut_ptr(),
                names.len(),
                Some(callbacks::event_cb),
                None,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            check(api, "PMIx_Register_event_handler(job end)", rc)?;
        }
        let mut names = InfoList::new();
        names.push(
            ffi::PMIX_EVENT_HDLR_NAME,
            Value::Str("prrte-k8s-default".into()),
        );
        // SAFETY: as above; no codes: the default handler (connection loss).
        let rc = unsafe {
            api.PMIx_Register_event_handler(
                std::ptr::null_mut(),
                0,
                names.as_mut_ptr(),
                names.len(),
                Some(callbacks::event_cb),
                None,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            check(api, "PMIx_Register_event_handler(default)", rc)?;
        }
        let asker = PmixAsker(api);
        let handle = std::thread::Builder::new()
            .name("pmix-dispatch".into())
            .spawn(move || Dispatcher::default().run(rx, &asker))
            .map_err(|_| Error::Lost)?;
        if let Ok(mut g) = dvm.dispatcher.lock() {
            *g = Some(handle);
        }
        if capture_output {
            dvm.capture_output()?;
        }
        Ok(dvm)
    }

    /// Spawns `task`; its updates (`Started`, then `Ended`, or a failure) go to `tx` with the
    /// returned id.
    pub fn submit_to(&self, task: &Task, tx: Sender<(u64, Update)>) -> Result<u64, Error> {
        if task.argv.is_empty() {
            return Err(Error::EmptyTask);
        }
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send(Msg::Register { key, tx })
            .map_err(|_| Error::Lost)?;
        let r = self.spawn(key, task);
        if r.is_err() {
            let _ = self.tx.send(Msg::Forget { key });
        }
        r.map(|()| key)
    }

    /// Spawns `task`; the [`Completion`] yields its end.
    pub fn submit(&self, task: &Task) -> Result<Completion, Error> {
        let (tx, rx) = channel();
        let id = self.submit_to(task, tx)?;
        Ok(Completion { id, rx })
    }

    fn spawn(&self, key: u64, task: &Task) -> Result<(), Error> {
        let mut job = InfoList::new();
        job.push(ffi::PMIX_NOTIFY_COMPLETION, Value::Bool(true));
        let mut app_info = InfoList::new();
        if let Some(h) = &task.hosts {
            app_info.push(ffi::PMIX_HOST, Value::Str(h.clone()));
        }
        let mut argv = Argv::new(&task.argv);
        let mut env = Argv::new(&task.env);
        let cmd = crate::info::cstring_lossy(&task.argv[0]);
        let cwd = task
            .cwd
            .as_ref()
            .map(|p| crate::info::cstring_lossy(&p.to_string_lossy()));
        let app = ffi::pmix_app_t {
            cmd: cmd.as_ptr().cast_mut(),
            argv: argv.as_mut_ptr(),
            env: env.as_mut_ptr(),
            cwd: cwd
                .as_ref()
                .map_or(std::ptr::null_mut(), |c| c.as_ptr().cast_mut()),
            maxprocs: i32::try_from(task.np).unwrap_or(i32::MAX),
            info: app_info.as_mut_ptr(),
            ninfo: app_info.len(),
        };
        // SAFETY: every pointer in `job` and `app` refers to storage alive for this call, and
        // PMIx_Spawn_nb copies the job info and the app before it returns (it thread-shifts only
        // its copies). `key` travels as the callback's cbdata value, never dereferenced.
        let rc = unsafe {
            self.api.PMIx_Spawn_nb(
                job.as_mut_ptr(),
                job.len(),
                &app,
                1,
                Some(callbacks::spawn_cb),
                key as usize as *mut c_void,
            )
        };
        check(self.api, "PMIx_Spawn_nb", rc)
    }

    /// Kills the job `nspace` (all its ranks) in the DVM; its `Ended` follows.
    pub fn kill(&self, nspace: &str) -> Result<(), Error> {
        let target = proc_name(nspace, ffi::PMIX_RANK_WILDCARD);
        let mut dirs = InfoList::new();
        dirs.push(ffi::PMIX_JOB_CTRL_KILL, Value::Bool(true));
        // SAFETY: `target` and `dirs` are valid for the call; a tool's job control packs them
        // into its request before returning.
        let rc = unsafe {
            self.api.PMIx_Job_control_nb(
                &target,
                1,
                dirs.as_mut_ptr(),
                dirs.len(),
                Some(callbacks::control_cb),
                std::ptr::null_mut(),
            )
        };
        check(self.api, "PMIx_Job_control_nb", rc)
    }

    /// Every job's output to its task: a PMIx IOF pull of every rank of every job.
    fn capture_output(&self) -> Result<(), Error> {
        let every = proc_name("", ffi::PMIX_RANK_WILDCARD);
        let channels = (ffi::PMIX_FWD_STDOUT_CHANNEL | ffi::PMIX_FWD_STDERR_CHANNEL) as u16;
        // SAFETY: `every` is valid for the call (PMIx copies it); `iof_cb` is valid for the life
        // of the process; without a registration callback the call blocks until registered.
        let rc = unsafe {
            self.api.PMIx_IOF_pull(
                &every,
                1,
                std::ptr::null(),
                0,
                channels,
                Some(callbacks::iof_cb),
                None,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            check(self.api, "PMIx_IOF_pull", rc)?;
        }
        Ok(())
    }

    /// PMIx's name for a status code.
    pub fn status_name(&self, status: i32) -> String {
        status_name(self.api, status)
    }
}

impl Drop for Dvm {
    fn drop(&mut self) {
        // SAFETY: finalizing the connection made in `connect`; no PMIx call of ours is running
        // (we hold `&mut self`), and PMIx stops its progress thread before returning.
        unsafe { self.api.PMIx_tool_finalize() };
        callbacks::set_sink(None);
        let _ = self.tx.send(Msg::Stop);
        if let Some(h) = self.dispatcher.lock().ok().and_then(|mut g| g.take()) {
            let _ = h.join();
        }
        CONNECTED.store(false, Ordering::SeqCst);
    }
}

fn load(path: &Path) -> Result<&'static ffi::PmixApi, Error> {
    if let Some(api) = API.get() {
        return Ok(api);
    }
    let err = |source| Error::Load {
        path: path.to_path_buf(),
        source,
    };
    // SAFETY: loading libpmix runs its initializers, which have no preconditions; RTLD_GLOBAL
    // lets the PMIx plugins it loads later resolve against it.
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
    }
    .map_err(err)?;
    // SAFETY: the symbols' types are bindgen's, from the same PMIx's headers.
    let api = unsafe { ffi::PmixApi::from_library(lib) }.map_err(err)?;
    Ok(API.get_or_init(|| api))
}

/// The end of one submitted task.
pub struct Completion {
    id: u64,
    rx: Receiver<(u64, Update)>,
}

impl Completion {
    /// The task's id (as `Dvm::submit_to` would return).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Waits for the task's end.
    pub fn wait(self) -> Result<Ended, Error> {
        loop {
            match self.rx.recv() {
                Ok((_, Update::Started { .. } | Update::Output { .. })) => continue,
                Ok((_, Update::Ended(e))) => return Ok(e),
                Ok((_, Update::SpawnFailed { status, message })) => {
                    return Err(Error::Pmix {
                        call: "PMIx_Spawn_nb",
                        status,
                        name: message,
                    })
                }
                Ok((_, Update::Lost { .. })) | Err(_) => return Err(Error::Lost),
            }
        }
    }
}
