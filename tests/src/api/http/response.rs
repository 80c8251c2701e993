//! Response bodies and the responses the handlers send: JSON, text, errors, streams.

use crate::api::status::ApiError;
use bytes::Bytes;
use http::{header, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use serde_json::Value;
use std::convert::Infallible;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub(super) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

pub(super) fn json_response(code: u16, v: &Value) -> Response<Body> {
    bytes_response(code, serde_json::to_vec(v).expect("JSON values serialize"))
}

/// A response with a JSON body already serialized.
pub(super) fn bytes_response(code: u16, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .header("Cache-Control", "no-cache, private")
        .body(full(body))
        .expect("valid response")
}

pub(super) fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status())
}

pub(super) fn text_response(code: u16, s: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(s.into()))
        .expect("valid response")
}

/// A body that streams what `rx` receives.
pub(super) fn streamed(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(hyper::body::Frame::data(b)), rx))
    });
    StreamBody::new(stream).boxed_unsync()
}
