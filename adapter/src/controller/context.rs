//! What every reconcile of the controller shares ([`Context`]) and how it writes: server-side
//! apply under one field manager, [`MANAGER`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::api::PatchParams;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::Client;

use super::desired::Settings;
use super::metrics::Metrics;
use super::retry::Failures;

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub recorder: Recorder,
    pub(crate) metrics: Arc<Metrics>,
    /// The pods of every prrte-k8s job, as the controller's pod watch keeps them.
    pub pods: Store<Pod>,
    /// The pods whose end was posted, by MPIJob (`namespace/name`): each is posted once while
    /// this controller leads (one that restarts mid-job may post a pod's end once more).
    pub posted: Mutex<HashMap<String, HashSet<String>>>,
    /// The failed reconciles in a row of each MPIJob (its retries' backoff).
    pub(crate) failures: Failures,
}

impl Context {
    /// Whether the end of pod `uid` of MPIJob `key` is news (and now it is not).
    pub(super) fn first_post(&self, key: &str, uid: &str) -> bool {
        let mut posted = self.posted.lock().unwrap_or_else(|p| p.into_inner());
        posted
            .entry(key.to_string())
            .or_default()
            .insert(uid.to_string())
    }

    /// MPIJob `key` is done (or gone): its pods are forgotten.
    pub(super) fn forget(&self, key: &str) {
        let mut posted = self.posted.lock().unwrap_or_else(|p| p.into_inner());
        posted.remove(key);
    }
}

/// The field manager of every object the controller writes (its server-side applies): the
/// controller's name.
pub(crate) const MANAGER: &str = "prrte-k8s-controller";

/// The parameters of an apply: forced where the controller owns the fields it writes.
pub(super) fn apply_params(force: bool) -> PatchParams {
    let p = PatchParams::apply(MANAGER);
    if force {
        p.force()
    } else {
        p
    }
}
