//! The callbacks PMIx calls on its progress thread. Each copies what it needs out of PMIx's
//! memory, posts it to the dispatcher's channel (an unbounded send, never blocking) and returns;
//! none calls back into PMIx except to hand PMIx's own completion functions back.

use std::ffi::{c_char, c_void};
use std::sync::mpsc::Sender;
use std::sync::Mutex;

use crate::dispatch::Msg;
use crate::ffi;
use crate::info::{buf_str, c_string, has_key, Argv, InfoList};

/// What a callback reports to the dispatcher.
#[derive(Debug)]
pub(crate) enum Raw {
    /// A spawn's answer: the job's namespace, or why it did not start.
    Spawned {
        key: u64,
        status: i32,
        nspace: String,
    },
    /// A job ended (`PMIX_EVENT_JOB_END`).
    JobEnd {
        nspace: String,
        status: i32,
        rank: Option<u32>,
        message: Option<String>,
    },
    /// A proc table query's answer: the hosts of the job's ranks (rank order).
    Hosts {
        key: u64,
        hosts: Option<Vec<String>>,
    },
    /// The answer to a quiet job's state probe (a proc table query).
    Probe { key: u64, answer: ProbeAnswer },
    /// The connection to the DVM is gone.
    Lost { status: i32 },
    /// Output of a rank, forwarded by the DVM.
    Output {
        nspace: String,
        rank: u32,
        stderr: bool,
        bytes: Vec<u8>,
    },
}

/// What the DVM said about a job it was asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeAnswer {
    /// The DVM still holds the job: its ranks' hosts (rank order), and how many of its
    /// processes it reports neither ended nor in an undefined state.
    Known { hosts: Vec<String>, running: usize },
    /// The DVM does not know the job (`PMIX_ERR_NOT_FOUND`): it ended and was cleaned up.
    Unknown,
    /// The question failed otherwise (PMIx's status).
    Failed(i32),
}

/// Where callbacks post. One tool connection per process (PMIx's rule), so one sink.
static SINK: Mutex<Option<Sender<Msg>>> = Mutex::new(None);

pub(crate) fn set_sink(tx: Option<Sender<Msg>>) {
    if let Ok(mut g) = SINK.lock() {
        *g = tx;
    }
}

fn post(raw: Raw) {
    if let Ok(g) = SINK.lock() {
        if let Some(tx) = g.as_ref() {
            let _ = tx.send(Msg::Raw(raw));
        }
    }
}

/// `pmix_spawn_cbfunc_t`: `cbdata` carries the task's key as its value.
pub(crate) unsafe extern "C" fn spawn_cb(status: i32, nspace: *mut c_char, cbdata: *mut c_void) {
    // SAFETY: PMIx passes the job's NUL-terminated namespace (or NULL on failure), valid for
    // the duration of the callback.
    let nspace = unsafe { c_string(nspace) }.unwrap_or_default();
    post(Raw::Spawned {
        key: cbdata as usize as u64,
        status,
        nspace,
    });
}

/// `pmix_notification_fn_t` for `PMIX_EVENT_JOB_END` and for the default handler.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn event_cb(
    _id: usize,
    status: i32,
    source: *const ffi::pmix_proc_t,
    info: *mut ffi::pmix_info_t,
    ninfo: usize,
    _results: *mut ffi::pmix_info_t,
    _nresults: usize,
    cbfunc: ffi::pmix_event_notification_cbfunc_fn_t,
    cbdata: *mut c_void,
) {
    let infos: &[ffi::pmix_info_t] = if info.is_null() || ninfo == 0 {
        &[]
    } else {
        // SAFETY: PMIx passes an array of `ninfo` entries valid for the callback.
        unsafe { std::slice::from_raw_parts(info, ninfo) }
    };
    if status == ffi::PMIX_EVENT_JOB_END {
        let mut nspace = String::new();
        let (mut term, mut rank, mut message) = (0, None, None);
        for i in infos {
            if has_key(i, ffi::PMIX_JOB_TERM_STATUS) {
                // SAFETY: PRRTE loads the termination status as PMIX_STATUS.
                term = unsafe { i.value.data.status };
            } else if has_key(i, ffi::PMIX_EVENT_AFFECTED_PROC)
                && i.value.type_ == ffi::PMIX_PROC as u16
            {
                // SAFETY: the value is a PMIX_PROC (checked), a pointer PMIx keeps valid here.
                if let Some(p) = unsafe { i.value.data.proc_.as_ref() } {
                    nspace = buf_str(&p.nspace);
                    rank = (p.rank < ffi::PMIX_RANK_WILDCARD).then_some(p.rank);
                }
            } else if has_key(i, ffi::PMIX_EVENT_TEXT_MESSAGE)
                && i.value.type_ == ffi::PMIX_STRING as u16
            {
                // SAFETY: the value is a PMIX_STRING (checked), NUL-terminated or NULL.
                message = unsafe { c_string(i.value.data.string) };
            }
        }
        if nspace.is_empty() {
            // PRRTE names the job as the event's source too (its rank 0).
            // SAFETY: PMIx passes the source proc valid for the callback, or NULL.
            if let Some(p) = unsafe { source.as_ref() } {
                nspace = buf_str(&p.nspace);
            }
        }
        if !nspace.is_empty() {
            post(Raw::JobEnd {
                nspace,
                status: term,
                rank,
                message,
            });
        }
    } else if status == ffi::PMIX_ERR_LOST_CONNECTION || status == ffi::PMIX_ERR_UNREACH {
        post(Raw::Lost { status });
    }
    if let Some(f) = cbfunc {
        // SAFETY: PMIx requires every handler to report completion through `cbfunc` with its
        // `cbdata`, or its event chain stalls.
        unsafe {
            f(
                ffi::PMIX_EVENT_ACTION_COMPLETE,
                std::ptr::null_mut(),
                0,
                None,
                std::ptr::null_mut(),
                cbdata,
            )
        };
    }
}

/// What a proc table query keeps alive until PMIx answers (PMIx holds pointers into it).
pub(crate) struct Query {
    pub(crate) key: u64,
    pub(crate) keys: Argv,
    pub(crate) qualifiers: InfoList,
    pub(crate) query: ffi::pmix_query_t,
}

// SAFETY: the raw pointers in `query` point into `keys` and `qualifiers`, which are owned by the
// same value (heap storage that does not move with it).
unsafe impl Send for Query {}

/// `pmix_info_cbfunc_t` for the proc table query: `cbdata` is a `Box<Query>` leaked by the
/// caller, taken back here.
pub(crate) unsafe extern "C" fn query_cb(
    status: i32,
    info: *mut ffi::pmix_info_t,
    ninfo: usize,
    cbdata: *mut c_void,
    release: ffi::pmix_release_cbfunc_t,
    release_cbdata: *mut c_void,
) {
    // SAFETY: `cbdata` is the `Box<Query>` leaked by `Dvm::query_hosts` for this one call.
    let q = unsafe { Box::from_raw(cbdata.cast::<Query>()) };
    let mut hosts = None;
    if status == ffi::PMIX_SUCCESS as i32 && !info.is_null() {
        // SAFETY: PMIx passes `ninfo` entries valid until `release` is called.
        let infos = unsafe { std::slice::from_raw_parts(info, ninfo) };
        for i in infos {
            if has_key(i, ffi::PMIX_QUERY_PROC_TABLE)
                && i.value.type_ == ffi::PMIX_DATA_ARRAY as u16
            {
                // SAFETY: the value is a PMIX_DATA_ARRAY (checked); its array holds `size`
                // `pmix_proc_info_t` when its type says so (checked below).
                hosts = unsafe { proc_infos(i.value.data.darray) }
                    .map(|v| v.into_iter().map(|p| p.host).collect());
            }
        }
    }
    post(Raw::Hosts { key: q.key, hosts });
    drop(q);
    if let Some(f) = release {
        // SAFETY: PMIx's release function for the info it passed, with its own cbdata.
        unsafe { f(release_cbdata) };
    }
}

/// `pmix_info_cbfunc_t` for a quiet job's state probe: `cbdata` is a `Box<Query>` leaked by
/// the caller, taken back here.
pub(crate) unsafe extern "C" fn probe_cb(
    status: i32,
    info: *mut ffi::pmix_info_t,
    ninfo: usize,
    cbdata: *mut c_void,
    release: ffi::pmix_release_cbfunc_t,
    release_cbdata: *mut c_void,
) {
    // SAFETY: `cbdata` is the `Box<Query>` leaked by the probe for this one call.
    let q = unsafe { Box::from_raw(cbdata.cast::<Query>()) };
    let mut answer = ProbeAnswer::Failed(status);
    if status == ffi::PMIX_ERR_NOT_FOUND {
        answer = ProbeAnswer::Unknown;
    } else if status == ffi::PMIX_SUCCESS as i32 && !info.is_null() {
        // SAFETY: PMIx passes `ninfo` entries valid until `release` is called.
        let infos = unsafe { std::slice::from_raw_parts(info, ninfo) };
        for i in infos {
            if has_key(i, ffi::PMIX_QUERY_PROC_TABLE)
                && i.value.type_ == ffi::PMIX_DATA_ARRAY as u16
            {
                // SAFETY: as in `query_cb`.
                if let Some(procs) = unsafe { proc_infos(i.value.data.darray) } {
                    answer = known(procs);
                }
            }
        }
    }
    post(Raw::Probe { key: q.key, answer });
    drop(q);
    if let Some(f) = release {
        // SAFETY: PMIx's release function for the info it passed, with its own cbdata.
        unsafe { f(release_cbdata) };
    }
}

/// One rank of a proc table answer.
pub(crate) struct ProcInfo {
    pub(crate) rank: u32,
    pub(crate) host: String,
    /// PMIx's `pmix_proc_state_t`.
    pub(crate) state: u8,
}

/// The probe answer for a job the DVM still holds. PRRTE 3.0.8 reports a normally ended
/// process (and one whose exit was seen but not yet processed) as `PMIX_PROC_STATE_UNDEF`,
/// so only states strictly between undefined and unterminated count as running.
pub(crate) fn known(procs: Vec<ProcInfo>) -> ProbeAnswer {
    let running = procs
        .iter()
        .filter(|p| {
            u32::from(p.state) > ffi::PMIX_PROC_STATE_UNDEF
                && u32::from(p.state) < ffi::PMIX_PROC_STATE_UNTERMINATED
        })
        .count();
    ProbeAnswer::Known {
        hosts: procs.into_iter().map(|p| p.host).collect(),
        running,
    }
}

/// The ranks in a `pmix_proc_info_t` data array, in rank order.
///
/// # Safety
/// `d` is NULL or a valid `pmix_data_array_t` whose `array` holds `size` elements of `type_`.
unsafe fn proc_infos(d: *const ffi::pmix_data_array_t) -> Option<Vec<ProcInfo>> {
    // SAFETY: the caller's contract.
    let d = unsafe { d.as_ref() }?;
    if d.type_ != ffi::PMIX_PROC_INFO as u16 || d.array.is_null() {
        return None;
    }
    // SAFETY: the array holds `size` proc infos (type checked above).
    let procs =
        unsafe { std::slice::from_raw_parts(d.array.cast::<ffi::pmix_proc_info_t>(), d.size) };
    let mut v: Vec<ProcInfo> = procs
        .iter()
        .map(|p| ProcInfo {
            rank: p.proc_.rank,
            // SAFETY: hostname is NULL or a NUL-terminated string PMIx owns.
            host: unsafe { c_string(p.hostname) }.unwrap_or_default(),
            state: p.state,
        })
        .collect();
    v.sort_by_key(|p| p.rank);
    Some(v)
}

/// `pmix_info_cbfunc_t` for job control: nothing to report (the job's end event follows);
/// releases PMIx's data.
pub(crate) unsafe extern "C" fn control_cb(
    _status: i32,
    _info: *mut ffi::pmix_info_t,
    _ninfo: usize,
    _cbdata: *mut c_void,
    release: ffi::pmix_release_cbfunc_t,
    release_cbdata: *mut c_void,
) {
    if let Some(f) = release {
        // SAFETY: PMIx's release function for the info it passed, with its own cbdata.
        unsafe { f(release_cbdata) };
    }
}

/// `pmix_iof_cbfunc_t` for the output pull: copies the bytes and who wrote them.
pub(crate) unsafe extern "C" fn iof_cb(
    _id: usize,
    channel: ffi::pmix_iof_channel_t,
    source: *mut ffi::pmix_proc_t,
    payload: *mut ffi::pmix_byte_object_t,
    _info: *mut ffi::pmix_info_t,
    _ninfo: usize,
) {
    // SAFETY: PMIx passes the source proc and the payload valid for the callback (or NULL).
    let (Some(src), Some(bo)) = (unsafe { source.as_ref() }, unsafe { payload.as_ref() }) else {
        return;
    };
    if bo.bytes.is_null() || bo.size == 0 {
        return;
    }
    // SAFETY: the byte object holds `size` bytes at `bytes` (checked non-NULL above).
    let bytes = unsafe { std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size) }.to_vec();
    post(Raw::Output {
        nspace: buf_str(&src.nspace),
        rank: src.rank,
        stderr: u32::from(channel) & ffi::PMIX_FWD_STDERR_CHANNEL != 0,
        bytes,
    });
}
