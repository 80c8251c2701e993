//! The `DaemonsUp` event on the MPIJob a job was made for: when PRRTE's daemons have all
//! reported, the launcher (prte under the PLM component) records a `core/v1` Event on the MPIJob,
//! so that `kubectl describe mpijob` shows when the DVM was up, with how many daemons and how
//! long their launch took.
//!
//! Only jobs the controller made carry [`MPIJOB_ENV`] (the MPIJob's name and uid, see
//! [`MpiJobRef`], both in [`crate::settings::mpijob`]); their Role lets the launcher `create` Events, nothing more. Posting runs on a
//! thread of its own ([`post`]), never on PRRTE's event loop, and is best effort: every request
//! is bounded by [`POST_TIMEOUT`], and a failure is logged, never fails the job. A launcher
//! that ends soon after may give a post under way a bounded time ([`Posting::wait`]).

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use crate::discovery::client::{self, Environment};
use crate::settings::mpijob::{MpiJobRef, MPIJOB_ENV};

/// The Event's reason.
pub const REASON: &str = "DaemonsUp";

/// Who records the Event (its `source.component` and `reportingComponent`).
pub const COMPONENT: &str = "prrte-k8s-launcher";

/// The bound of the whole post: configuration, connection and the request.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// The MPIJob's API version and kind, as the Event's `involvedObject` names them.
const API_VERSION: &str = "kubeflow.org/v2beta1";
const KIND: &str = "MPIJob";

/// What the Event says: `daemons` reported (prte's own among them), `seconds` after their
/// launch began.
pub fn message(daemons: u32, seconds: f64) -> String {
    let launched = daemons.saturating_sub(1);
    format!(
        "all {daemons} of PRRTE's daemons are up (prte and {launched} prted started by the pods' agents), {seconds:.2} s after their launch began"
    )
}

/// The Event on `owner` in `namespace`, recorded at `now` by the pod `pod` (if known).
pub(crate) fn event(
    owner: &MpiJobRef,
    namespace: &str,
    pod: Option<&str>,
    text: String,
    now: Timestamp,
) -> Event {
    let nanos = now.as_nanosecond();
    Event {
        metadata: ObjectMeta {
            // As client-go names them: the object's name and the time, in hex.
            name: Some(format!("{}.{:x}", owner.name, nanos)),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(API_VERSION.into()),
            kind: Some(KIND.into()),
            name: Some(owner.name.clone()),
            namespace: Some(namespace.to_string()),
            uid: Some(owner.uid.clone()),
            ..Default::default()
        },
        reason: Some(REASON.into()),
        message: Some(text),
        type_: Some("Normal".into()),
        action: Some("Launch".into()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: pod.map(String::from),
        }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: pod.map(String::from),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    }
}

/// Where the Event goes: the MPIJob, the client configuration (`kubeconfig`: the explicit one
/// of `ras_k8s_kubeconfig`, if set) and the namespace (`ras_k8s_namespace`, if set; else the
/// pod's, as discovery finds it).
#[derive(Debug, Clone)]
pub struct Target {
    pub owner: MpiJobRef,
    pub kubeconfig: Option<PathBuf>,
    pub namespace: Option<String>,
}

impl Target {
    /// The target from `env` (the launcher's environment): None unless [`MPIJOB_ENV`] names an
    /// MPIJob (a job the controller did not make posts nothing). A malformed value is logged.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        kubeconfig: Option<PathBuf>,
        namespace: Option<String>,
    ) -> Option<Target> {
        let value = env(MPIJOB_ENV)?;
        let Some(owner) = MpiJobRef::parse(&value) else {
            tracing::warn!(
                "{MPIJOB_ENV}={value:?} is not NAME:UID: no {REASON} event is recorded \
                 (the variable is set by prrte-k8s controller; remove it from the job's environment)"
            );
            return None;
        };
        Some(Target {
            owner,
            kubeconfig: kubeconfig.filter(|p| !p.as_os_str().is_empty()),
            namespace: namespace.filter(|n| !n.trim().is_empty()),
        })
    }
}

/// Records the Event (on the caller's runtime), bounded by [`POST_TIMEOUT`].
pub async fn record(target: &Target, text: String, env: &Environment) -> Result<(), String> {
    let work = async {
        let resolved = client::resolve_config(target.kubeconfig.as_deref(), env)
            .await
            .map_err(|e| e.to_string())?;
        let api = client::client_from_config(resolved, POST_TIMEOUT).map_err(|e| e.to_string())?;
        let namespace = crate::discovery::pods_namespace(target.namespace.as_deref(), env, &api);
        let ev = event(
            &target.owner,
            &namespace,
            env.pod_name.as_deref().or(env.hostname.as_deref()),
            text,
            Timestamp::now(),
        );
        Api::<Event>::namespaced(api.client, &namespace)
            .create(&PostParams::default(), &ev)
            .await
            .map(|_| ())
            .map_err(|e| client::error_chain(&e))
    };
    tokio::time::timeout(POST_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {POST_TIMEOUT:?}")))
}

/// A post under way: [`Posting::wait`] lets a process about to exit give it a bounded time.
#[derive(Debug)]
pub struct Posting(mpsc::Receiver<()>);

impl Posting {
    /// Waits until the post has ended or `timeout` has passed; whether it ended.
    pub fn wait(&self, timeout: Duration) -> bool {
        !matches!(
            self.0.recv_timeout(timeout),
            Err(mpsc::RecvTimeoutError::Timeout)
        )
    }
}

/// Records the Event on a thread of its own and returns at once; the outcome is logged (a
/// failure as a warning naming the MPIJob and the cause).
pub fn post(target: Target, text: String) -> Posting {
    let (done, posting) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("prrte-k8s-daemons-up".into())
        .spawn(move || {
            let result = crate::runtime::current_thread()
                .map_err(|e| format!("cannot start its runtime: {e}"))
                .and_then(|rt| rt.block_on(record(&target, text, &Environment::from_process())));
            match result {
                Ok(()) => tracing::debug!(
                    "recorded the {REASON} event on MPIJob {}",
                    target.owner.name
                ),
                Err(e) => tracing::warn!(
                    "cannot record the {REASON} event on MPIJob {}: {e} (the job goes on; the \
                     launcher's Role needs `create` on `events`)",
                    target.owner.name
                ),
            }
            let _ = done.send(());
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the thread recording the {REASON} event: {e}");
    }
    Posting(posting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_job_naming_its_mpijob_posts() {
        let none = |_: &str| None;
        assert!(Target::from_env(&none, None, None).is_none());
        let bad = |k: &str| (k == MPIJOB_ENV).then(|| "pi".to_string());
        assert!(Target::from_env(&bad, None, None).is_none());
        let good = |k: &str| (k == MPIJOB_ENV).then(|| "pi:u-1".to_string());
        let t = Target::from_env(&good, Some(PathBuf::new()), Some(" ".into())).unwrap();
        assert_eq!(t.owner.name, "pi");
        assert!(t.kubeconfig.is_none() && t.namespace.is_none());
    }

    #[test]
    fn the_event_names_the_mpijob_and_says_count_and_seconds() {
        let owner = MpiJobRef {
            name: "pi".into(),
            uid: "u-1".into(),
        };
        let now: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let ev = event(&owner, "ns", Some("pi-0-x"), message(5, 1.234), now);
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["involvedObject"]["apiVersion"], "kubeflow.org/v2beta1");
        assert_eq!(v["involvedObject"]["kind"], "MPIJob");
        assert_eq!(v["involvedObject"]["uid"], "u-1");
        assert_eq!(v["involvedObject"]["namespace"], "ns");
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert!(v["metadata"]["name"].as_str().unwrap().starts_with("pi."));
        assert_eq!(v["reason"], "DaemonsUp");
        assert_eq!(v["type"], "Normal");
        assert_eq!(v["source"]["host"], "pi-0-x");
        assert_eq!(v["firstTimestamp"], "2026-01-02T03:04:05Z");
        let m = v["message"].as_str().unwrap();
        assert!(
            m.contains("all 5 of PRRTE's daemons") && m.contains("4 prted"),
            "{m}"
        );
        assert!(m.contains("1.23 s"), "{m}");
    }
}
