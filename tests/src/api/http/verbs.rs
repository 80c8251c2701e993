//! The answers to resource requests, verb by verb: list, watch, get, create, update, patch,
//! delete and deletecollection, in the shape the client accepts.

use super::eviction::evict;
use super::fields::{self, Write};
use super::logs::pod_log;
use super::request::{
    delete_options_from, dry_run, field_selector, flag, list_query, parse_body, read_body, Shape,
};
use super::response::{bytes_response, json_response, Body};
use super::reviews::review;
use super::scale::{scale_of, write_scale, ScaleChange};
use super::state::State;
use super::tokens::token_request;
use super::watch::start_watch;
use crate::api::admission;
use crate::api::auth::Identity;
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use crate::api::store::{DeleteOptions, FieldOwner, ListResult, Part, Patch};
use crate::api::table::{self, IncludeObject};
use http::{header, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

type Answer = Result<Response<Body>, ApiError>;

/// One authorized request for a resource.
pub(super) struct Call<'a> {
    pub(super) st: &'a Arc<State>,
    pub(super) id: &'a Identity,
    pub(super) rt: &'static ResourceType,
    pub(super) ns: Option<String>,
    pub(super) name: Option<String>,
    pub(super) sub: String,
    pub(super) query: HashMap<String, String>,
    pub(super) shape: Shape,
    pub(super) parts: http::request::Parts,
}

impl Call<'_> {
    fn ns_str(&self) -> String {
        self.ns.clone().unwrap_or_default()
    }

    fn name_str(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    fn include(&self) -> IncludeObject {
        IncludeObject::parse(self.query.get("includeObject").map(String::as_str))
    }

    /// The main part, or the status subresource.
    fn part(&self) -> Part {
        if self.sub == "status" {
            Part::Status
        } else {
            Part::Main
        }
    }

    pub(super) fn list(&self) -> Answer {
        let (st, rt) = (self.st, self.rt);
        let q = list_query(rt, &self.query)?;
        let r = st.store.list(rt, self.ns.as_deref(), &q)?;
        let mut meta = json!({"resourceVersion": r.resource_version.to_string()});
        if let Some(c) = &r.continue_token {
            meta["continue"] = json!(c);
        }
        if let Some(n) = r.remaining {
            meta["remainingItemCount"] = json!(n);
        }
        let out = match self.shape {
            Shape::Table(tv) => {
                let objs: Vec<&Value> = r.items.iter().map(|o| o.as_ref()).collect();
                table::table(rt, &objs, self.include(), tv, meta)
            }
            Shape::Partial(pv) => json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": pv,
                "metadata": meta,
                "items": r.items.iter().map(|o| table::partial_metadata(o, pv)).collect::<Vec<_>>(),
            }),
            Shape::Full => return Ok(bytes_response(200, self.full_list(&r, meta))),
        };
        Ok(json_response(200, &out))
    }

    /// The list as JSON: the objects' kept encodings, joined (what serializing the list
    /// gives).
    fn full_list(&self, r: &ListResult, meta: Value) -> Vec<u8> {
        let items = self.st.encoded.array(&r.items);
        let head = serde_json::to_vec(&json!({
            "kind": self.rt.list_kind(),
            "apiVersion": self.rt.api_version(),
            "metadata": meta,
        }))
        .expect("JSON values serialize");
        let mut body = Vec::with_capacity(head.len() + items.len() + 16);
        body.extend_from_slice(&head[..head.len() - 1]);
        body.extend_from_slice(b",\"items\":");
        body.extend_from_slice(&items);
        body.push(b'}');
        body
    }

    pub(super) fn watch(self) -> Answer {
        let mut q = list_query(self.rt, &self.query)?;
        if let Some(n) = &self.name {
            let fs = match self.query.get("fieldSelector").filter(|s| !s.is_empty()) {
                Some(f) => format!("{f},metadata.name={n}"),
                None => format!("metadata.name={n}"),
            };
            q.fields = field_selector(self.rt, &fs).map_err(ApiError::bad_request)?;
        }
        start_watch(self.st, self.rt, self.ns, q, &self.query, self.shape)
    }

    pub(super) async fn get(&self) -> Answer {
        let (st, rt) = (self.st, self.rt);
        if self.sub == "log" {
            return pod_log(st, &self.ns_str(), self.name_str(), &self.query).await;
        }
        let obj = st.store.get(rt, &self.ns_str(), self.name_str())?;
        if self.sub == "scale" {
            return Ok(json_response(200, &scale_of(&obj)));
        }
        let out = match self.shape {
            Shape::Table(tv) => {
                let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                table::table(rt, &[obj.as_ref()], self.include(), tv, meta)
            }
            Shape::Partial(pv) => table::partial_metadata(&obj, pv),
            Shape::Full => (*obj).clone(),
        };
        Ok(json_response(200, &out))
    }

    pub(super) async fn create(&self, body: Incoming) -> Answer {
        let (st, rt) = (self.st, self.rt);
        let bytes = read_body(body).await?;
        let v = parse_body(&self.parts.headers, &bytes)?;
        if self.sub == "token" {
            return token_request(st, &self.ns_str(), self.name_str(), v);
        }
        if self.sub == "eviction" {
            return evict(st, &self.ns_str(), self.name_str(), &v);
        }
        if !rt.stored {
            return review(st, self.id, rt, v);
        }
        let mut warnings = self.check_fields(Write::Object, &v, "CreateOptions")?;
        let (obj, admitted) =
            self.admitted(|| st.store.create(rt, &self.ns_str(), v, dry_run(&self.query)));
        warnings.extend(admitted);
        Ok(with_warnings(json_response(201, &*obj?), &warnings))
    }

    pub(super) async fn update(&self, body: Incoming) -> Answer {
        let bytes = read_body(body).await?;
        let v = parse_body(&self.parts.headers, &bytes)?;
        if self.sub == "scale" {
            return self.scale(ScaleChange::Replace(v));
        }
        let mut warnings = self.check_fields(Write::Object, &v, "UpdateOptions")?;
        let (obj, admitted) = self.admitted(|| {
            self.st.store.update(
                self.rt,
                &self.ns_str(),
                self.name_str(),
                v,
                self.part(),
                dry_run(&self.query),
            )
        });
        warnings.extend(admitted);
        Ok(with_warnings(json_response(200, &*obj?), &warnings))
    }

    pub(super) async fn patch(&self, body: Incoming) -> Answer {
        let bytes = read_body(body).await?;
        let ct = self
            .parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let patch = parse_patch(ct.split(';').next().unwrap_or("").trim(), &bytes)?;
        if self.sub == "scale" {
            return self.scale(ScaleChange::Patch(patch));
        }
        let mut warnings = match &patch {
            Patch::Merge(v) => self.check_fields(Write::MergePatch, v, "PatchOptions")?,
            Patch::Apply(v) => self.check_fields(Write::Apply, v, "PatchOptions")?,
            // A JSON patch's unknown fields are pruned unchecked.
            Patch::Json(_) => {
                fields::directive(&self.query, "PatchOptions")?;
                Vec::new()
            }
        };
        let (obj, admitted) = self.admitted(|| {
            self.st.store.patch_as(
                self.rt,
                &self.ns_str(),
                self.name_str(),
                patch,
                self.part(),
                dry_run(&self.query),
                Some(&self.field_owner()),
            )
        });
        warnings.extend(admitted);
        Ok(with_warnings(json_response(200, &*obj?), &warnings))
    }

    /// Runs the store write `f` as this request ([`admission::during`]): the objects it
    /// writes are admitted. Returns `f`'s result and the admission's warnings.
    fn admitted<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<String>) {
        admission::during(self.user_info(), &self.sub, dry_run(&self.query), f)
    }

    /// The requester as admission sees it.
    fn user_info(&self) -> admission::UserInfo {
        admission::UserInfo {
            username: self.id.user.clone(),
            uid: self.id.uid.clone(),
            groups: self.id.groups.clone(),
        }
    }

    /// The unknown fields of the write's body `v`, by its `fieldValidation` ([`fields`]): the
    /// warnings to send, or the error that refuses it.
    fn check_fields(
        &self,
        write: Write,
        v: &Value,
        options: &str,
    ) -> Result<Vec<String>, ApiError> {
        let directive = fields::directive(&self.query, options)?;
        let name = match &self.name {
            Some(n) => n.clone(),
            None => v["metadata"]["name"].as_str().unwrap_or("").to_string(),
        };
        fields::check(self.rt, &self.ns_str(), &name, directive, write, v)
    }

    /// Who writes: the `fieldManager` parameter, else the client's name from its User-Agent
    /// (as the API server names managers); `force` for an apply.
    fn field_owner(&self) -> FieldOwner {
        let agent = self
            .parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown");
        FieldOwner {
            manager: self
                .query
                .get("fieldManager")
                .cloned()
                .unwrap_or_else(|| agent.to_string()),
            force: flag(&self.query, "force"),
        }
    }

    /// A write of the scale subresource (admitted as a write of the Scale).
    fn scale(&self, change: ScaleChange) -> Answer {
        let (ns, name) = (self.ns_str(), self.name_str());
        let dry = dry_run(&self.query);
        let user = self.user_info();
        let (scale, warnings) =
            write_scale(&self.st.store, self.rt, &ns, name, change, dry, &user)?;
        Ok(with_warnings(json_response(200, &scale), &warnings))
    }

    /// `delete` of one object (`one`), or `deletecollection`.
    pub(super) async fn delete(&self, body: Incoming, one: bool) -> Answer {
        let (st, rt) = (self.st, self.rt);
        let bytes = read_body(body).await?;
        let opts = self.delete_options(&bytes)?;
        if one {
            let obj = st
                .store
                .delete(rt, &self.ns_str(), self.name_str(), &opts)?;
            return Ok(json_response(200, &obj));
        }
        let q = list_query(rt, &self.query)?;
        let items = st
            .store
            .delete_collection(rt, self.ns.as_deref(), &q, &opts)?;
        Ok(json_response(
            200,
            &json!({
                "kind": rt.list_kind(),
                "apiVersion": rt.api_version(),
                "metadata": {"resourceVersion": st.store.resource_version().to_string()},
                "items": items.iter().map(|o| o.as_ref()).collect::<Vec<_>>(),
            }),
        ))
    }

    /// The DeleteOptions of the query and of the body (`bytes`, which win).
    fn delete_options(&self, bytes: &[u8]) -> Result<DeleteOptions, ApiError> {
        let mut opts = DeleteOptions {
            dry_run: dry_run(&self.query),
            propagation: self.query.get("propagationPolicy").cloned(),
            ..Default::default()
        };
        if let Some(g) = self.query.get("gracePeriodSeconds") {
            opts.grace_period = Some(g.parse().map_err(|_| {
                ApiError::bad_request(format!(
                    "gracePeriodSeconds {g:?} is not a whole number of seconds"
                ))
            })?);
        }
        if !bytes.is_empty() {
            let v: Value = serde_json::from_slice(bytes).map_err(|e| {
                ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
            })?;
            delete_options_from(&v, &mut opts)?;
        }
        Ok(opts)
    }
}

/// `r` with a `Warning` header per warning.
fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    for h in fields::warning_headers(warnings) {
        r.headers_mut().append(header::WARNING, h);
    }
    r
}

/// A patch body of media type `media`.
fn parse_patch(media: &str, bytes: &[u8]) -> Result<Patch, ApiError> {
    let invalid_json =
        |e: serde_json::Error| ApiError::bad_request(format!("the patch is not valid JSON: {e}"));
    match media {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => Ok(
            Patch::Merge(serde_json::from_slice(bytes).map_err(invalid_json)?),
        ),
        "application/json-patch+json" => Ok(Patch::Json(
            serde_json::from_slice(bytes).map_err(invalid_json)?,
        )),
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            Ok(Patch::Apply(serde_yaml::from_slice(bytes).map_err(
                |e| ApiError::bad_request(format!("the apply patch is not valid YAML: {e}")),
            )?))
        }
        other => Err(ApiError::unsupported_media_type(other)),
    }
}
