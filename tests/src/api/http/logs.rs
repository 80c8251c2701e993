//! Pod logs (`pods/log`), whole, tailed or followed.

use super::request::flag;
use super::response::{streamed, text_response, Body};
use super::state::State;
use crate::api::resources;
use crate::api::status::ApiError;
use crate::api::store::Store;
use bytes::Bytes;
use http::{header, Response};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The log of pod `ns`/`name`: whole or its last `tailLines`, then (`follow`) what is
/// appended while the pod runs.
pub(super) async fn pod_log(
    st: &Arc<State>,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let pod = st.store.get(&resources::PODS, ns, name)?;
    let container = log_container(&pod, q.get("container").map(String::as_str))?;
    let src = st.logs.read().unwrap_or_else(|p| p.into_inner()).clone();
    let path = src.and_then(|f| f(ns, name, &container)).ok_or_else(|| {
        ApiError::bad_request(format!(
            "no log is available for pod \"{name}\": only pods the sandbox kubelet runs have logs"
        ))
    })?;
    let data = match tokio::fs::read(&path).await {
        Ok(d) => d,
        Err(_) => match waiting_reason(&pod, &container) {
            Some(r) => {
                return Err(ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: {r}"
                )))
            }
            None => Vec::new(),
        },
    };
    let tail = q.get("tailLines").and_then(|s| s.parse::<usize>().ok());
    let mut text = data;
    if let Some(n) = tail {
        let lines: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
        let start = lines.len().saturating_sub(n);
        text = lines[start..].concat();
    }
    if !flag(q, "follow") {
        return Ok(text_response(200, text));
    }
    // follow: stream what is there, then what gets appended while the pod runs.
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let offset = tokio::fs::metadata(&path)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    let _ = tx.send(Bytes::from(text)).await;
    let follow = Follow {
        store: st.store.clone(),
        shutdown: st.shutdown.clone(),
        ns: ns.to_string(),
        name: name.to_string(),
        uid: pod["metadata"]["uid"].clone(),
        path,
        offset,
        tx,
    };
    tokio::spawn(follow.run());
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(streamed(rx))
        .expect("valid response"))
}

/// The container whose log is asked for (`container`), as the API server checks it: one of the
/// pod's, or the only one when none is named.
fn log_container(pod: &Value, container: Option<&str>) -> Result<String, ApiError> {
    let names = |k: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{k}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    };
    let (init, regular) = (names("initContainers"), names("containers"));
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("");
    match container.filter(|c| !c.is_empty()) {
        Some(c) if init.iter().chain(&regular).any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {pod_name}"
        ))),
        None if regular.len() == 1 => Ok(regular[0].clone()),
        None => {
            let all: Vec<String> = init.into_iter().chain(regular).collect();
            Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                all.join(" ")
            )))
        }
    }
}

/// Why `container` of `pod` has not started, if it waits and never ran.
fn waiting_reason(pod: &Value, container: &str) -> Option<String> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|k| {
            pod.pointer(&format!("/status/{k}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .find(|c| c["name"] == container && c["restartCount"].as_i64().unwrap_or(0) == 0)
        .and_then(|c| c.pointer("/state/waiting/reason").and_then(Value::as_str))
        .map(String::from)
}

/// A followed log: what gets appended to `path` after `offset` goes to `tx`.
struct Follow {
    store: Store,
    shutdown: tokio::sync::watch::Receiver<bool>,
    ns: String,
    name: String,
    /// The pod's uid: a new pod of the same name ends the log.
    uid: Value,
    path: PathBuf,
    offset: u64,
    tx: mpsc::Sender<Bytes>,
}

impl Follow {
    /// Until the pod has ended (and its last output is sent), is gone, or the client goes.
    async fn run(mut self) {
        let mut feed = self.store.subscribe();
        loop {
            let done = self.pod_ended();
            if let Ok(data) = tokio::fs::read(&self.path).await {
                if (data.len() as u64) > self.offset {
                    let new = Bytes::copy_from_slice(&data[self.offset as usize..]);
                    if self.tx.send(new).await.is_err() {
                        return;
                    }
                    self.offset = data.len() as u64;
                }
            }
            if done {
                return;
            }
            // Re-check on any pod change, or every 200ms for appended output.
            tokio::select! {
                _ = self.shutdown.changed() => return,
                _ = self.tx.closed() => return,
                _ = feed.recv() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }

    /// Whether the pod succeeded, failed, or is no longer this pod.
    fn pod_ended(&self) -> bool {
        match self.store.get(&resources::PODS, &self.ns, &self.name) {
            Ok(p) => {
                p["metadata"]["uid"] != self.uid
                    || matches!(
                        p.pointer("/status/phase").and_then(Value::as_str),
                        Some("Succeeded") | Some("Failed")
                    )
            }
            Err(_) => true,
        }
    }
}
