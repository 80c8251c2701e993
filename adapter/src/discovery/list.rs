//! Listing the selected pods: in pages, decoding only what discovery reads.
//!
//! A job of thousands of pods makes one unpaginated list a response of tens of megabytes that
//! both the API server and the client hold whole; and a full `Pod` carries the containers'
//! commands, environment, probes, volumes and managed fields, none of which discovery needs.
//! `list_pods` asks for [`PAGE_SIZE`] pods at a time (following `continue` tokens, so the
//! pages are one consistent snapshot) and decodes each item straight into a [`PodRecord`]
//! holding only the fields discovery reads (see [`super::record`]). Everything else
//! (timestamps, images, probes, volumes, managed fields, the other labels) is skipped while
//! parsing.
//!
//! Pages are pipelined: as soon as a page's body is in, its `continue` token is read and the
//! next page is requested while the page is decoded on a blocking-pool thread, so decoding
//! overlaps the API server's work and the transfer of the next page.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::ListParams;
use kube::core::{ObjectList, Request};
use kube::Resource;
use serde::Deserialize;

use super::api::{Ctx, Operation};
use super::error::DiscoveryError;
use super::record::PodRecord;

/// Pods per list request (what kube-runtime's watcher uses for its lists as well).
pub const PAGE_SIZE: u32 = 500;

/// How often a paginated list starts over when its snapshot expired between pages (410).
const RESTARTS: usize = 3;

#[derive(Deserialize)]
struct SlimList {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<PodRecord>,
}

#[derive(Deserialize)]
struct ListMetaOnly {
    #[serde(default)]
    metadata: ListMeta,
}

/// Reads only a page's list metadata (its `continue` token), skipping the items unparsed.
pub(crate) fn decode_page_meta(body: &[u8]) -> Result<ListMeta, serde_json::Error> {
    serde_json::from_slice::<ListMetaOnly>(body).map(|l| l.metadata)
}

/// Decodes one page of a pod list (a `PodList` JSON document) the way `list_pods` does.
pub fn decode_page(body: &[u8]) -> Result<(ListMeta, Vec<PodRecord>), serde_json::Error> {
    let list: SlimList = serde_json::from_slice(body)?;
    Ok((list.metadata, list.items))
}

/// One list request's outcome.
enum Page {
    /// The body, and its list metadata (read ahead of the items).
    Body(Vec<u8>, ListMeta),
    /// The continue token's snapshot is gone (410): list again.
    Expired,
}

type Decoding = tokio::task::JoinHandle<Result<Vec<PodRecord>, serde_json::Error>>;

fn is_expired(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

/// Lists the pods of `namespace` matching `selector` in pages of [`PAGE_SIZE`]; the result's
/// metadata (resource version) is the first page's. Bounded by the context's deadline.
pub(crate) async fn list_pods(
    ctx: &Ctx,
    namespace: &str,
    selector: &str,
) -> Result<ObjectList<PodRecord>, DiscoveryError> {
    let op = Operation::pods("list", namespace).selecting(selector);
    let request = Request::new(Pod::url_path(&(), Some(namespace)));
    let mut restarts = 0;
    'list: loop {
        let mut items = Vec::new();
        let mut first_meta: Option<ListMeta> = None;
        let mut token: Option<String> = None;
        // The previous page, decoding on a blocking-pool thread while the next one is fetched.
        let mut decoding: Option<Decoding> = None;
        loop {
            let mut lp = ListParams::default().labels(selector).limit(PAGE_SIZE);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let req = request.list(&lp).map_err(|e| DiscoveryError::Internal {
                detail: format!("cannot build the pod list request: {e}"),
            })?;
            let fetch = || {
                let req = req.clone();
                async move {
                    let body = ctx.api.client.request_text(req).await?.into_bytes();
                    let meta = decode_page_meta(&body).map_err(kube::Error::SerdeError)?;
                    Ok(Page::Body(body, meta))
                }
            };
            // Transient failures are retried by the context; a snapshot that expired between
            // pages (410) starts the list over.
            let expired_ok = token.is_some() && restarts < RESTARTS;
            let page = ctx
                .retrying(&op, fetch, |e| match e {
                    e if expired_ok && is_expired(&e) => Ok(Page::Expired),
                    e => Err(ctx.map_error(&op, e)),
                })
                .await?;
            let (body, meta) = match page {
                Page::Body(b, m) => (b, m),
                Page::Expired => {
                    restarts += 1;
                    tracing::info!("the pod list's snapshot expired between pages; listing again");
                    if let Some(d) = decoding.take() {
                        d.abort();
                    }
                    continue 'list;
                }
            };
            if let Some(d) = decoding.take() {
                items.extend(joined(ctx, &op, d).await?);
            }
            decoding = Some(tokio::task::spawn_blocking(move || {
                decode_page(&body).map(|(_, pods)| pods)
            }));
            token = meta.continue_.clone().filter(|t| !t.is_empty());
            first_meta.get_or_insert(meta);
            if token.is_none() {
                break;
            }
        }
        if let Some(d) = decoding.take() {
            items.extend(joined(ctx, &op, d).await?);
        }
        let mut metadata = first_meta.unwrap_or_default();
        metadata.continue_ = None;
        metadata.remaining_item_count = None;
        return Ok(ObjectList {
            types: Default::default(),
            metadata,
            items,
        });
    }
}

/// The pods of a page decoding in the background.
async fn joined(ctx: &Ctx, op: &Operation, d: Decoding) -> Result<Vec<PodRecord>, DiscoveryError> {
    match d.await {
        Ok(Ok(pods)) => Ok(pods),
        Ok(Err(e)) => Err(ctx.map_error(op, kube::Error::SerdeError(e))),
        Err(e) => Err(DiscoveryError::Internal {
            detail: format!("decoding a page of the pod list failed: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_page_decodes_what_discovery_reads_and_skips_the_rest() {
        let body = json!({
            "kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "42", "continue": "abc", "remainingItemCount": 3},
            "items": [{
                "metadata": {
                    "name": "w-1", "namespace": "ns", "uid": "u1", "resourceVersion": "40",
                    "labels": {"batch.kubernetes.io/job-completion-index": "1"},
                    "annotations": {"prrte-k8s.io/slots": "3"},
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju", "controller": true}],
                    "deletionTimestamp": "2026-01-01T00:00:00Z",
                    "managedFields": [{"manager": "kubectl", "operation": "Update"}],
                },
                "spec": {
                    "hostname": "h-1",
                    "containers": [{
                        "name": "mpi", "image": "x", "command": ["a"], "env": [{"name": "A", "value": "b"}],
                        "resources": {"requests": {"cpu": "2"}},
                    }],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "volumes": [{"name": "v", "emptyDir": {}}],
                },
                "status": {"phase": "Running", "podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.2"}],
                           "startTime": "2026-01-01T00:00:00Z", "qosClass": "Guaranteed",
                           "conditions": [{"type": "Ready", "status": "True",
                                           "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
            }, {"metadata": {"name": "w-2"}}, {
                "metadata": {"name": "w-3"},
                "status": {"phase": "Pending", "reason": "Unschedulable", "message": "no node",
                           "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "m"}],
                           "containerStatuses": [
                               {"name": "a", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                                "state": {"waiting": {"reason": "ContainerCreating", "message": "pulling"}}},
                               {"name": "b", "ready": false, "restartCount": 1, "image": "x", "imageID": "",
                                "state": {"terminated": {"exitCode": 3, "reason": "Error",
                                                         "finishedAt": "2026-01-01T00:00:00Z"}}}]},
            }],
        });
        let bytes = serde_json::to_vec(&body).unwrap();
        let (meta, pods) = decode_page(&bytes).unwrap();
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(meta.continue_.as_deref(), Some("abc"));
        assert_eq!(decode_page_meta(&bytes).unwrap(), meta);
        assert_eq!(pods.len(), 3);
        let p = &pods[0];
        assert_eq!(p.metadata.name.as_deref(), Some("w-1"));
        assert_eq!(p.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(p.metadata.labels.as_ref().unwrap().len(), 1);
        assert_eq!(
            p.metadata.annotations.as_ref().unwrap()["prrte-k8s.io/slots"],
            "3"
        );
        assert_eq!(p.metadata.owner_references.as_ref().unwrap()[0].name, "j");
        assert!(p.metadata.deletion_timestamp.is_some());
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("h-1"));
        assert_eq!(spec.containers[0].name, "mpi");
        assert!(spec.resources.is_some());
        assert_eq!(super::super::slots::cpus(p), Some(2));
        assert_eq!(super::super::slots::gpus(p), 1);
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(
            super::super::readiness::pod_ipv4(p).unwrap().to_string(),
            "10.0.0.2"
        );
        let ready = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(pods[1].spec.is_none() && pods[1].status.is_none());
        // What a not-ready pod's message is made of survives the slim decoding.
        let why = super::super::readiness::describe(&pods[2]);
        assert_eq!(
            why,
            "phase Pending; reason Unschedulable; message \"no node\"; conditions Ready=False \
             (ContainersNotReady: m); container a waiting: ContainerCreating; container b \
             terminated: Error (exit 3)"
        );
        assert!(decode_page(b"{\"items\": [{\"spec\": 3}]}").is_err());
    }

    /// A page of pods as varied as a cluster hands out: init containers (whose resources
    /// never count), GPUs of two vendors, CPU quantities in millicores and limits only,
    /// pod-level resources, pods not ready, without an IP, with only an IPv6 address,
    /// terminating, finished, JobSet pairs, no index at all, and fields discovery has never
    /// heard of at every level.
    fn varied_page() -> serde_json::Value {
        let ready = json!([{"type": "Initialized", "status": "True"},
                           {"type": "Ready", "status": "True", "lastProbeTime": null,
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        let c = |name: &str, res: serde_json::Value| {
            json!({"name": name, "image": "img", "command": ["sh"], "args": ["-c", "x"],
                   "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                   "ports": [{"containerPort": 22}], "resources": res,
                   "readinessProbe": {"tcpSocket": {"port": 22}, "periodSeconds": 1},
                   "securityContext": {"runAsNonRoot": true}, "futureContainerField": {"x": [1]}})
        };
        let meta = |name: &str, labels: serde_json::Value| {
            json!({"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                   "resourceVersion": "7", "generateName": "w-", "creationTimestamp": "2026-01-01T00:00:00Z",
                   "labels": labels, "finalizers": ["f"],
                   "managedFields": [{"manager": "kubelet", "operation": "Update",
                                      "fieldsV1": {"f:status": {"f:podIP": {}}}}]})
        };
        let running = |ips: serde_json::Value, ip: serde_json::Value| {
            json!({"phase": "Running", "conditions": ready.clone(), "podIP": ip, "podIPs": ips,
                   "hostIP": "192.168.0.1", "qosClass": "Burstable", "startTime": "2026-01-01T00:00:00Z",
                   "initContainerStatuses": [{"name": "init", "ready": true, "restartCount": 0,
                       "image": "i", "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                   "containerStatuses": [{"name": "mpi", "ready": true, "restartCount": 0, "image": "i",
                       "imageID": "", "started": true, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}],
                   "futureStatusField": 1})
        };
        let idx = |i: &str| {
            json!({"batch.kubernetes.io/job-completion-index": i, "app": "mpi",
                                   "controller-uid": "c", "job-name": "j"})
        };
        let init = c(
            "init",
            json!({"requests": {"cpu": "64", "nvidia.com/gpu": "8"}}),
        );
        json!({
            "kind": "PodList", "apiVersion": "v1", "futureListField": [1, 2],
            "metadata": {"resourceVersion": "99", "continue": "next", "remainingItemCount": 10},
            "items": [
                {"metadata": meta("w-2", idx("2")), "futureTopLevel": {"a": null},
                 "spec": {"initContainers": [init.clone()], "hostname": "w-2", "subdomain": "s",
                          "containers": [c("mpi", json!({"limits": {"nvidia.com/gpu": "2", "amd.com/gpu": "1",
                                                                    "cpu": "8", "memory": "1Gi"}})),
                                         c("side", json!({}))],
                          "tolerations": [{"key": "k", "operator": "Exists"}],
                          "affinity": {"nodeAffinity": {}}, "volumes": [{"name": "v", "emptyDir": {}}]},
                 "status": running(json!([{"ip": "fd00::2"}, {"ip": "10.0.0.2"}]), json!("fd00::2"))},
                {"metadata": meta("w-10", idx("10")),
                 "spec": {"initContainers": [init], "containers": [c("mpi", json!({"requests": {"cpu": "1500m"}, "limits": {"cpu": "4"}}))]},
                 "status": {"phase": "Running", "podIP": "10.0.0.10", "podIPs": [{"ip": "10.0.0.10"}],
                            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                                            "message": "containers with unready status: [mpi]"}],
                            "containerStatuses": [{"name": "mpi", "ready": false, "restartCount": 4, "image": "i", "imageID": "",
                                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}},
                {"metadata": meta("w-1", idx("1")),
                 "spec": {"containers": [c("mpi", json!({"limits": {"cpu": "2500m"}}))]},
                 "status": running(json!(null), json!(null))},
                {"metadata": meta("w-4", idx("4")),
                 "spec": {"containers": [c("mpi", json!({"requests": {"cpu": "3"}}))]},
                 "status": running(json!([{"ip": "fd00::4"}]), json!("fd00::4"))},
                {"metadata": {"name": "w-0", "labels": idx("0"),
                              "annotations": {"prrte-k8s.io/slots": "4", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
                 "spec": {"containers": [c("mpi", json!(null))], "resources": {"requests": {"cpu": "2"}}},
                 "status": {"phase": "Pending", "reason": "Unschedulable", "message": "0/3 nodes",
                            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}},
                {"metadata": {"name": "w-3", "labels": idx("3"), "deletionTimestamp": "2026-01-01T00:00:00Z",
                              "deletionGracePeriodSeconds": 30,
                              "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "c",
                                                   "controller": true, "blockOwnerDeletion": true}]},
                 "spec": {"containers": [c("mpi", json!({"requests": {"amd.com/gpu": "1"}}))]},
                 "status": running(json!([{"ip": "10.0.0.3"}]), json!("10.0.0.3"))},
                {"metadata": {"name": "w-5", "labels": idx("5")},
                 "status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory",
                            "containerStatuses": [{"name": "mpi", "ready": false, "restartCount": 0, "image": "i",
                                "imageID": "", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}},
                {"metadata": {"name": "js-b-0-1", "labels": {"jobset.sigs.k8s.io/job-index": "1",
                              "jobset.sigs.k8s.io/jobset-name": "js", "batch.kubernetes.io/job-completion-index": "1"}},
                 "spec": {"containers": [c("mpi", json!({"requests": {"cpu": "0.5"}}))]},
                 "status": running(json!([{"ip": "10.0.1.1"}]), json!("10.0.1.1"))},
                {"metadata": {"name": "extra-10", "annotations": {"prrte-k8s.io/slots": "many"}},
                 "spec": {"containers": []}, "status": {}},
                {"metadata": {"name": "extra-9", "labels": {"apps.kubernetes.io/pod-index": "x"}}},
            ],
        })
    }

    #[test]
    fn a_varied_page_decodes_to_the_records_full_pods_convert_to() {
        use super::super::order::{pod_index, sort_pods};
        use super::super::readiness::{classify, describe, pod_ipv4, PodReadiness};
        use super::super::slots::{pod_slots, SlotsPolicy};
        let bytes = serde_json::to_vec(&varied_page()).unwrap();
        let (meta, records) = decode_page(&bytes).unwrap();
        // What list requests decoded before: whole k8s_openapi Pods, each then made a record.
        let full: ObjectList<Pod> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(meta, full.metadata);
        let converted: Vec<PodRecord> = full.items.iter().map(PodRecord::from).collect();
        assert_eq!(records.len(), 10);
        assert_eq!(records, converted);
        let policies = [
            SlotsPolicy::Auto,
            SlotsPolicy::Annotation,
            SlotsPolicy::Gpu,
            SlotsPolicy::Cpu,
            SlotsPolicy::One,
        ];
        for (r, c) in records.iter().zip(&converted) {
            assert_eq!(classify(r), classify(c));
            assert_eq!(describe(r), describe(c));
            assert_eq!(pod_ipv4(r), pod_ipv4(c));
            assert_eq!(pod_index(r), pod_index(c));
            for p in policies {
                assert_eq!(pod_slots(r, p), pod_slots(c, p));
            }
        }
        // The values themselves, so an equal mistake on both paths fails too.
        let by = |n: &str| {
            records
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(n))
                .unwrap()
        };
        let auto = |n: &str| pod_slots(by(n), SlotsPolicy::Auto);
        assert_eq!(
            classify(by("w-2")),
            PodReadiness::Ready("10.0.0.2".parse().unwrap())
        );
        assert_eq!(
            (auto("w-2"), auto("w-10"), auto("w-1")),
            (Ok(3), Ok(1), Ok(2))
        );
        assert_eq!(
            (auto("w-0"), auto("w-3"), auto("js-b-0-1")),
            (Ok(4), Ok(1), Ok(1))
        );
        assert!(auto("extra-10").is_err());
        assert_eq!(pod_slots(by("w-0"), SlotsPolicy::Cpu), Ok(2));
        assert_eq!(pod_slots(by("w-3"), SlotsPolicy::Gpu), Ok(1));
        let not_ready = |n: &str| match classify(by(n)) {
            PodReadiness::NotReady(why) => why,
            other => panic!("{n}: {other:?}"),
        };
        assert!(not_ready("w-10").contains("container mpi waiting: CrashLoopBackOff"));
        assert!(not_ready("w-1").contains("no IPv4 pod IP yet (pod IPs: none)"));
        assert!(not_ready("w-4").contains("(pod IPs: fd00::4)"));
        assert!(not_ready("w-0").contains("reason Unschedulable"));
        assert!(matches!(classify(by("w-3")), PodReadiness::Excluded(_)));
        assert!(matches!(classify(by("w-5")), PodReadiness::Excluded(_)));
        let labels = by("w-2").metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            ["batch.kubernetes.io/job-completion-index"]
        );
        let (mut a, mut b) = (records.clone(), converted);
        sort_pods(&mut a);
        sort_pods(&mut b);
        let names: Vec<_> = a.iter().map(|r| r.metadata.name.clone().unwrap()).collect();
        assert_eq!(a, b);
        assert_eq!(
            names,
            ["w-0", "w-1", "w-2", "w-3", "w-4", "w-5", "w-10", "js-b-0-1", "extra-9", "extra-10"]
        );
    }
}
