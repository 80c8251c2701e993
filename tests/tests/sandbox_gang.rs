//! `prrte-k8s controller --gang-scheduler`: the PodGroup an MPIJob gets, as mpi-operator makes
//! it, through a sandbox API server serving the PodGroup CRDs (cut down to the fields the
//! controller writes) and running the Job controller and the garbage collector, without a
//! kubelet: no scheduler of that name runs, so the pods stay unscheduled, as they would in a
//! cluster without it; what is asserted is the objects. The PodGroup is made before the Job,
//! controlled by the MPIJob, sized by it; the pods carry the scheduler's name and their group;
//! deleting the MPIJob deletes the PodGroup.
#![forbid(unsafe_code)]

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use sandbox::api::{ApiOptions, ApiServer};
use sandbox::harness::controller::{
    controller_kubeconfig, controller_requests, create_mpijob, mpijob, register_crd, verb,
    ControllerProcess, MANAGED_BY,
};
use sandbox::harness::TestDir;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(60);

/// A CRD of a PodGroup of `group`/`version`, cut down to what the controller writes (the
/// upstream CRDs hold more fields; none of them is required).
fn pod_group_crd(group: &str, version: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("podgroups.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "listKind": "PodGroupList"},
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": spec},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
            }],
        },
    })
}

/// A resource list's schema, as Kubernetes' CRDs give it.
fn resource_list() -> Value {
    json!({"type": "object", "additionalProperties": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": true,
        "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
    }})
}

/// scheduler-plugins' `podgroups.scheduling.x-k8s.io` and Volcano's
/// `podgroups.scheduling.volcano.sh`.
fn crds() -> String {
    let plugins = pod_group_crd(
        "scheduling.x-k8s.io",
        "v1alpha1",
        json!({
            "minMember": {"type": "integer", "format": "int32", "minimum": 1},
            "minResources": resource_list(),
            "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"},
        }),
    );
    let volcano = pod_group_crd(
        "scheduling.volcano.sh",
        "v1beta1",
        json!({
            "minMember": {"type": "integer", "format": "int32"},
            "minResources": resource_list(),
            "queue": {"type": "string"},
            "priorityClassName": {"type": "string"},
        }),
    );
    [plugins, volcano]
        .iter()
        .map(|c| serde_yaml::to_string(c).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// An MPIJob `name` of a launcher asking 500m CPUs and 3 workers asking 2 CPUs and 1Gi each,
/// `schedulingPolicy` as given.
fn job(name: &str, policy: Value) -> Value {
    let mut v = mpijob(NS, name, Some(MANAGED_BY), false, 0);
    let specs = &mut v["spec"]["mpiReplicaSpecs"];
    specs["Worker"]["replicas"] = json!(3);
    specs["Launcher"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "500m"}});
    specs["Worker"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "2", "memory": "1Gi"}});
    v["spec"]["runPolicy"]["schedulingPolicy"] = policy;
    v
}

/// Polls `what` until it gives a value, up to [`WAIT`], the controller's log in the failure.
async fn until<T, F, Fut>(proc: &mut ControllerProcess, what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if !proc.running() {
            bail!("the controller exited:\n{}", proc.log_tail(30));
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {WAIT:?}:\n{}", proc.log_tail(30));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The controller with `--gang-scheduler gang` against an API server serving the PodGroup CRDs
/// and the MPIJob `name` (`policy` its schedulingPolicy): the PodGroup of `api_version` made
/// before the Job and controlled by the MPIJob (returned, with the pods), the pods unscheduled
/// and stamped, the PodGroup gone with the MPIJob.
async fn gang_run(
    test: &str,
    gang: &str,
    api_version: &str,
    name: &str,
    policy: Value,
) -> Result<(Value, Vec<Pod>)> {
    let dir = TestDir::new(test)?;
    let api = ApiServer::start(ApiOptions {
        dir: Some(dir.path().join("api")),
        ..Default::default()
    })
    .await?;
    let store = api.store();
    register_crd(&store)?;
    sandbox::cluster::apply_yaml(&store, &crds())?;
    // The Job controller (the pods) and the garbage collector's sweep; no kubelet.
    let controllers = sandbox::cluster::controllers::spawn(store.clone());
    let kubeconfig = controller_kubeconfig(&api, dir.path())?;
    let mut proc =
        ControllerProcess::start(dir.path(), &kubeconfig, test, &["--gang-scheduler", gang])?;
    proc.await_leading(&store, test, WAIT)?;
    let made = create_mpijob(&store, job(name, policy))?;
    let uid = made["metadata"]["uid"].clone();

    let kc = kube::config::Kubeconfig::read_from(api.admin_kubeconfig())?;
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?,
    )?;
    let (group, version) = api_version.split_once('/').unwrap_or_default();
    let groups: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, "PodGroup")),
    );
    let mpijobs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("kubeflow.org", "v2beta1", "MPIJob")),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("prrte-k8s.io/job={name}"));

    let all = until(&mut proc, "the Job's four pods", || async {
        let p = pods.list(&selector).await?.items;
        Ok((p.len() == 4).then_some(p))
    })
    .await?;
    let pg = serde_json::to_value(groups.get(name).await?)?;
    assert_eq!(
        pg["metadata"]["ownerReferences"],
        json!([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": name,
            "uid": uid, "controller": true, "blockOwnerDeletion": true}]),
        "{pg}"
    );
    // Made before the Job, in the controller's requests.
    let requests = api.requests();
    let ours = controller_requests(&requests);
    let first = |path: &str| {
        ours.iter()
            .position(|r| verb(r) == "patch" && r.path.ends_with(path) && r.status < 300)
    };
    // The child: a JobSet where the API server serves them (`--launcher-pod auto`), else the Job.
    let (made_pg, made_job) = (
        first(&format!("/podgroups/{name}")),
        first(&format!("/jobsets/{name}")).or_else(|| first(&format!("/jobs/{name}"))),
    );
    assert!(
        made_pg.is_some() && made_pg < made_job,
        "the PodGroup (request {made_pg:?}) is not made before the Job (request {made_job:?})"
    );
    // The MPIJob runs as far as a cluster without that scheduler lets it: nothing failed.
    let status = serde_json::to_value(mpijobs.get(name).await?)?["status"].clone();
    assert!(
        !status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Failed"),
        "{status}"
    );
    for p in &all {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.scheduler_name.as_deref(),
            Some(gang),
            "{:?}",
            p.metadata.name
        );
        assert!(
            spec.node_name.is_none(),
            "no scheduler bound {:?}",
            p.metadata.name
        );
    }

    mpijobs.delete(name, &DeleteParams::default()).await?;
    until(&mut proc, "the PodGroup gone with the MPIJob", || async {
        Ok(groups.get_opt(name).await?.is_none().then_some(()))
    })
    .await?;
    until(&mut proc, "the pods gone with the MPIJob", || async {
        Ok(pods.list(&selector).await?.items.is_empty().then_some(()))
    })
    .await?;
    controllers.abort();
    Ok((pg, all))
}

/// scheduler-plugins' coscheduling: minMember the launcher and the workers, minResources their
/// requests summed, the timeout given; the pods labelled with their group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_plugins_podgroup_made_before_the_job_and_collected_with_the_mpijob() {
    let (pg, pods) = gang_run(
        "gang-plugins",
        "scheduler-plugins",
        "scheduling.x-k8s.io/v1alpha1",
        "pi",
        json!({"scheduleTimeoutSeconds": 120}),
    )
    .await
    .unwrap();
    assert_eq!(
        pg["spec"],
        json!({"minMember": 4, "scheduleTimeoutSeconds": 120,
            "minResources": {"cpu": "6500m", "memory": "3Gi"}})
    );
    for p in &pods {
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels
                .get("scheduling.x-k8s.io/pod-group")
                .map(String::as_str),
            Some("pi"),
            "{:?}",
            p.metadata.name
        );
    }
}

/// Volcano: minAvailable honoured (its resources those of the launcher and one worker), the
/// queue given; the pods annotated with their group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_podgroup_sized_by_min_available() {
    let (pg, pods) = gang_run(
        "gang-volcano",
        "volcano",
        "scheduling.volcano.sh/v1beta1",
        "vpi",
        json!({"minAvailable": 2, "queue": "research"}),
    )
    .await
    .unwrap();
    assert_eq!(
        pg["spec"],
        json!({"minMember": 2, "queue": "research",
            "minResources": {"cpu": "2500m", "memory": "1Gi"}})
    );
    for p in &pods {
        let a = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            a.get("scheduling.k8s.io/group-name").map(String::as_str),
            Some("vpi"),
            "{:?}",
            p.metadata.name
        );
    }
}
