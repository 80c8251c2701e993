//! Who is served, when: one request at a time; a cancel is its requester's alone; each
//! requesting job or tool (a PMIx namespace) has a budget of requests per minute
//! (`ras_k8s_alloc_requests_per_minute`); and the namespace whose request was just served waits
//! while another one that asked meanwhile has not had its turn.
//!
//! The requester is the process PRRTE hands the request with (`req->tproc`): a rank of a job
//! (its namespace is the job's) or a tool (PRRTE gives each tool connection a namespace of its
//! own). The budget is the namespace's, so that the ranks of one job share one, as they share
//! one workload; a cancel must come from the very process that made the request.
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use super::rules::{refuse, Refusal, Status};
use crate::settings::mca::{RasParams, ALLOC_REQUESTS_PER_MINUTE};
use crate::settings::SettingError;

/// PMIx's `PMIX_RANK_WILDCARD`.
const RANK_WILDCARD: u32 = u32::MAX - 1;

/// How long a namespace refused while another one's request was served keeps its turn: the
/// namespace served last is refused meanwhile, unless the other one has asked again.
pub const TURN: Duration = Duration::from_secs(10);

/// The most namespaces remembered as waiting for their turn (the oldest are forgotten first).
const MAX_WAITING: usize = 64;

/// The process that made a request: its namespace and rank (`pmix_proc_t`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requester {
    pub nspace: String,
    pub rank: u32,
}

impl fmt::Display for Requester {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rank == RANK_WILDCARD {
            write!(f, "{}:*", self.nspace)
        } else {
            write!(f, "{}:{}", self.nspace, self.rank)
        }
    }
}

/// The requests one namespace may have served: `per_minute` at once, then one every
/// 60 s / `per_minute` (a token bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    per_minute: u32,
}

impl RateLimit {
    /// `per_minute` requests a minute; `None` for 0.
    pub fn new(per_minute: u32) -> Option<RateLimit> {
        (per_minute > 0).then_some(RateLimit { per_minute })
    }

    /// `ras_k8s_alloc_requests_per_minute`, checked (a value out of range is refused naming the
    /// parameter and what it takes).
    pub fn from_params(p: &RasParams) -> Result<RateLimit, SettingError> {
        let n = ALLOC_REQUESTS_PER_MINUTE.int(&p.alloc_requests_per_minute.to_string())?;
        u32::try_from(n)
            .ok()
            .and_then(RateLimit::new)
            .ok_or_else(|| ALLOC_REQUESTS_PER_MINUTE.invalid(n))
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    fn capacity(&self) -> f64 {
        f64::from(self.per_minute)
    }

    /// Tokens gained in `elapsed`.
    fn gained(&self, elapsed: Duration) -> f64 {
        elapsed.as_secs_f64() * self.capacity() / 60.0
    }
}

/// A namespace's budget: its tokens at `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn now(&self, limit: RateLimit, now: Instant) -> f64 {
        (self.tokens + limit.gained(now.saturating_duration_since(self.at))).min(limit.capacity())
    }
}

/// The request being served.
#[derive(Debug)]
struct Admitted {
    seq: u64,
    req_id: Option<String>,
    by: Requester,
}

/// Admits the requests (see the module docs).
#[derive(Debug, Default)]
pub struct Gate {
    next: u64,
    current: Option<Admitted>,
    /// The namespaces whose budget is not full (a full one is forgotten: it is as new).
    buckets: HashMap<String, Bucket>,
    /// The namespace of the request served last.
    last_served: Option<String>,
    /// Namespaces refused while another one's request was served, and when.
    waiting: Vec<(String, Instant)>,
}

impl Gate {
    /// Admits a request of `by` with its `PMIX_ALLOC_REQ_ID` at `now`: its sequence number. It
    /// uses one of its namespace's tokens under `limit`.
    pub fn begin(
        &mut self,
        by: &Requester,
        req_id: Option<&str>,
        limit: RateLimit,
        now: Instant,
    ) -> Result<u64, Refusal> {
        self.waiting
            .retain(|(_, t)| now.saturating_duration_since(*t) < TURN);
        if let Some(c) = &self.current {
            let busy = refuse(
                Status::ResourceBusy,
                format!(
                    "allocation request {} is being served: one at a time; ask again when it is answered",
                    c.req_id.clone().unwrap_or_else(|| format!("#{}", c.seq))
                ),
            );
            if c.by.nspace != by.nspace {
                self.wait(&by.nspace, now);
            }
            return Err(busy);
        }
        if self.last_served.as_deref() == Some(by.nspace.as_str())
            && self.waiting.iter().any(|(n, _)| *n != by.nspace)
        {
            return Err(refuse(
                Status::ResourceBusy,
                format!(
                    "a request of {} was just served while another job or tool waited: its turn comes first; ask again in a few seconds (at most {} s)",
                    by.nspace,
                    TURN.as_secs()
                ),
            ));
        }
        self.buckets
            .retain(|_, b| b.now(limit, now) < limit.capacity());
        let tokens = self
            .buckets
            .get(&by.nspace)
            .map_or(limit.capacity(), |b| b.now(limit, now));
        if tokens < 1.0 {
            let wait = (1.0 - tokens) * 60.0 / limit.capacity();
            return Err(refuse(
                Status::RateLimited,
                format!(
                    "{} had {} allocation requests served within the last minute, its budget (ras_k8s_alloc_requests_per_minute); ask again in {} s",
                    by.nspace,
                    limit.per_minute,
                    wait.ceil().max(1.0)
                ),
            ));
        }
        self.buckets.insert(
            by.nspace.clone(),
            Bucket {
                tokens: tokens - 1.0,
                at: now,
            },
        );
        self.waiting.retain(|(n, _)| *n != by.nspace);
        self.last_served = Some(by.nspace.clone());
        self.next += 1;
        self.current = Some(Admitted {
            seq: self.next,
            req_id: req_id.map(String::from),
            by: by.clone(),
        });
        Ok(self.next)
    }

    /// `nspace` was refused while another namespace's request was served.
    fn wait(&mut self, nspace: &str, now: Instant) {
        self.waiting.retain(|(n, _)| n != nspace);
        if self.waiting.len() >= MAX_WAITING {
            self.waiting.remove(0);
        }
        self.waiting.push((nspace.to_string(), now));
    }

    /// The request `seq` is answered.
    pub fn finish(&mut self, seq: u64) {
        if matches!(&self.current, Some(c) if c.seq == seq) {
            self.current = None;
        }
    }

    /// The sequence number of the request in flight whose id is `req_id`, for `by` to cancel:
    /// only the process that made it may.
    pub fn find(&self, req_id: &str, by: &Requester) -> Result<u64, Refusal> {
        match &self.current {
            Some(c) if c.req_id.as_deref() == Some(req_id) => {
                if c.by == *by {
                    Ok(c.seq)
                } else {
                    Err(refuse(
                        Status::NoPermissions,
                        format!(
                            "allocation request {req_id:?} was made by another process: only the process that made it may cancel it ({by} may not)"
                        ),
                    ))
                }
            }
            _ => Err(refuse(
                Status::NotFound,
                format!("no allocation request {req_id:?} is waiting: it was answered already, or never made"),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
