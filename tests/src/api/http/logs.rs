//! Pod logs (`pods/log`), whole, tailed or followed.

use super::request::flag;
use super::{text_response, Body, State};
use crate::api::resources;
use crate::api::status::ApiError;
use bytes::Bytes;
use http::{header, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub(super) async fn pod_log(
    st: &Arc<State>,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let pod = st.store.get(&resources::PODS, ns, name)?;
    let src = st.logs.read().unwrap_or_else(|p| p.into_inner()).clone();
    let path = src.and_then(|f| f(ns, name)).ok_or_else(|| {
        ApiError::bad_request(format!(
            "no log is available for pod \"{name}\": only pods the sandbox kubelet runs have logs"
        ))
    })?;
    let data = tokio::fs::read(&path).await.unwrap_or_default();
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
    let store = st.store.clone();
    let mut shutdown = st.shutdown.clone();
    let (ns, name, uid) = (
        ns.to_string(),
        name.to_string(),
        pod["metadata"]["uid"].clone(),
    );
    let mut offset = tokio::fs::metadata(&path)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    let _ = tx.send(Bytes::from(text)).await;
    tokio::spawn(async move {
        let mut feed = store.subscribe();
        loop {
            let done = match store.get(&resources::PODS, &ns, &name) {
                Ok(p) => {
                    p["metadata"]["uid"] != uid
                        || matches!(
                            p.pointer("/status/phase").and_then(Value::as_str),
                            Some("Succeeded") | Some("Failed")
                        )
                }
                Err(_) => true,
            };
            if let Ok(data) = tokio::fs::read(&path).await {
                if (data.len() as u64) > offset {
                    if tx
                        .send(Bytes::copy_from_slice(&data[offset as usize..]))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    offset = data.len() as u64;
                }
            }
            if done {
                return;
            }
            // Re-check on any pod change, or every 200ms for appended output.
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
                _ = feed.recv() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(StreamBody::new(stream).boxed_unsync())
        .expect("valid response"))
}
