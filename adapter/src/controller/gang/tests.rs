//! The PodGroup mpi-operator renders for an MPIJob (its `podgroup_test.go` cases), the pods'
//! stamp, and the scheduler names `--gang-scheduler` takes.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{json, Value};

use super::{for_conversion, parse_scheduler, pod_group, stamp, GangScheduler};
use crate::manifest::mpijob::model::MpiJob;

fn plugins() -> GangScheduler {
    GangScheduler::SchedulerPlugins("scheduler-plugins-scheduler".into())
}

/// A container asking `requests` (and `limits`, when given).
fn container(requests: Value, limits: Option<Value>) -> Value {
    let mut r = json!({"requests": requests});
    if let Some(l) = limits {
        r["limits"] = l;
    }
    json!({"name": "c", "image": "i", "resources": r})
}

/// An MPIJob `test` in `ns` of one launcher asking `launcher` and `workers` workers asking
/// `worker`, with `policy` as `schedulingPolicy` and `annotations`.
fn job(
    launcher: Value,
    workers: Option<(i32, Value)>,
    policy: Value,
    annotations: Value,
) -> MpiJob {
    let mut specs =
        json!({"Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}}});
    if let Some((n, w)) = workers {
        specs["Worker"] = json!({"replicas": n, "template": {"spec": {"containers": [w]}}});
    }
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "test", "namespace": "ns", "annotations": annotations},
        "spec": {
            "runPolicy": {"schedulingPolicy": policy},
            "mpiReplicaSpecs": specs,
        },
    }))
    .unwrap()
}

fn rendered(job: &MpiJob, gang: &GangScheduler) -> Value {
    serde_json::to_value(pod_group(job, gang).unwrap()).unwrap()
}

/// `podgroup_test.go` "schedulingPolicy is nil": minMember is the workers and the launcher,
/// minResources the sum of their requests, the priority class the launcher's template's, the
/// Volcano queue the MPIJob's annotation.
#[test]
fn without_a_policy_the_group_is_every_pod_and_their_requests() {
    let mut j = job(
        container(json!({"cpu": "1", "memory": "2Gi"}), None),
        Some((2, container(json!({"cpu": "10", "memory": "20Gi"}), None))),
        json!({}),
        json!({"scheduling.volcano.sh/queue-name": "project-x"}),
    );
    j.spec
        .mpi_replica_specs
        .get_mut("Launcher")
        .unwrap()
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .priority_class_name = Some("high".into());
    assert_eq!(
        rendered(&j, &plugins()),
        json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "test", "namespace": "ns"},
            "spec": {
                "minMember": 3,
                "scheduleTimeoutSeconds": 0,
                "minResources": {"cpu": "21", "memory": "42Gi"},
            },
        })
    );
    assert_eq!(
        rendered(&j, &GangScheduler::Volcano),
        json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "test", "namespace": "ns"},
            "spec": {
                "minMember": 3,
                "queue": "project-x",
                "priorityClassName": "high",
                "minResources": {"cpu": "21", "memory": "42Gi"},
            },
        })
    );
}

/// "all schedulingPolicy fields are set": each is taken as given (the queue over the
/// annotation), scheduler-plugins taking no queue and no priority class, Volcano no timeout.
#[test]
fn the_policy_given_is_honoured() {
    let j = job(
        container(json!({"cpu": "1", "memory": "2Gi"}), None),
        Some((
            1000,
            container(json!({"cpu": "10", "memory": "20Gi"}), None),
        )),
        json!({
            "minAvailable": 2,
            "queue": "project-y",
            "priorityClass": "high",
            "minResources": {"cpu": "100", "memory": "512Gi", "example.com/gpu": "40"},
            "scheduleTimeoutSeconds": 100,
        }),
        json!({"scheduling.volcano.sh/queue-name": "project-x"}),
    );
    let given = json!({"cpu": "100", "memory": "512Gi", "example.com/gpu": "40"});
    assert_eq!(
        rendered(&j, &plugins())["spec"],
        json!({"minMember": 2, "scheduleTimeoutSeconds": 100, "minResources": given})
    );
    assert_eq!(
        rendered(&j, &GangScheduler::Volcano)["spec"],
        json!({"minMember": 2, "queue": "project-y", "priorityClassName": "high", "minResources": given})
    );
}

/// minAvailable below the pods: the launcher and minAvailable-1 workers are summed
/// ("without priorityClass": 1 launcher of 2 CPUs and 1Gi, 2 workers of 10 and 32Gi, 3 pods:
/// 22 and 65Gi; with minAvailable 2: 12 and 33Gi).
#[test]
fn min_available_sizes_the_resources_of_that_many_pods() {
    let make = |min: Option<i32>| {
        let policy = min.map_or(json!({}), |m| json!({"minAvailable": m}));
        job(
            container(json!({"cpu": "2", "memory": "1Gi"}), None),
            Some((2, container(json!({"cpu": "10", "memory": "32Gi"}), None))),
            policy,
            json!({}),
        )
    };
    let spec = |min| rendered(&make(min), &plugins())["spec"].clone();
    assert_eq!(
        spec(None)["minResources"],
        json!({"cpu": "22", "memory": "65Gi"})
    );
    assert_eq!(
        spec(Some(3))["minResources"],
        json!({"cpu": "22", "memory": "65Gi"})
    );
    assert_eq!(spec(Some(2))["minMember"], json!(2));
    assert_eq!(
        spec(Some(2))["minResources"],
        json!({"cpu": "12", "memory": "33Gi"})
    );
    // No pod asked: no resources ("schedulingPolicy.minMember is 0").
    assert_eq!(spec(Some(0))["minMember"], json!(0));
    assert!(spec(Some(0)).get("minResources").is_none());
    assert!(rendered(&make(Some(0)), &GangScheduler::Volcano)["spec"]
        .get("minResources")
        .is_none());
}

/// A resource with no request counts its limit ("same resource names exist in requests and
/// limits"); fractions, mixed formats and no resources at all.
#[test]
fn requests_else_limits_summed_exactly() {
    let j = job(
        container(
            json!({"cpu": "500m", "memory": "16Gi"}),
            Some(json!({"example.com/gpu": "8", "cpu": "20", "memory": "32Gi"})),
        ),
        Some((3, container(json!({"cpu": "1.5", "memory": "1G"}), None))),
        json!({}),
        json!({}),
    );
    assert_eq!(
        rendered(&j, &plugins())["spec"]["minResources"],
        // cpu 0.5 + 3 * 1.5; memory 16Gi + 3 * 1G in bytes (no binary suffix divides it); the
        // launcher's GPUs from its limit.
        json!({"cpu": "5", "example.com/gpu": "8", "memory": "20179869184"})
    );
    let j = job(
        container(json!({"cpu": "250m"}), None),
        Some((1, container(json!({"cpu": "0.5", "memory": "3000"}), None))),
        json!({}),
        json!({}),
    );
    assert_eq!(
        rendered(&j, &plugins())["spec"]["minResources"],
        json!({"cpu": "750m", "memory": "3k"})
    );
    // No container asks anything: scheduler-plugins leaves minResources out, Volcano keeps
    // the empty list mpi-operator computes.
    let bare = |c: &mut Value| c.as_object_mut().unwrap().remove("resources");
    let (mut l, mut w) = (container(json!({}), None), container(json!({}), None));
    bare(&mut l);
    bare(&mut w);
    let j = job(l, Some((2, w)), json!({}), json!({}));
    assert!(rendered(&j, &plugins())["spec"]
        .get("minResources")
        .is_none());
    assert_eq!(
        rendered(&j, &GangScheduler::Volcano)["spec"]["minResources"],
        json!({})
    );
}

/// "no worker no MinResources": runLauncherAsWorker without workers, minAvailable 1.
#[test]
fn a_launcher_alone() {
    let j = job(
        container(json!({"cpu": "1", "memory": "2Gi"}), None),
        None,
        json!({"minAvailable": 1, "queue": "project-y", "priorityClass": "high", "scheduleTimeoutSeconds": 100}),
        json!({}),
    );
    assert_eq!(
        rendered(&j, &plugins())["spec"],
        json!({"minMember": 1, "scheduleTimeoutSeconds": 100, "minResources": {"cpu": "1", "memory": "2Gi"}})
    );
    let j = job(
        container(json!({"cpu": "1"}), None),
        None,
        json!({}),
        json!({}),
    );
    assert_eq!(rendered(&j, &plugins())["spec"]["minMember"], json!(1));
}

/// The priority class: the policy's, else the Launcher's, else the Worker's
/// (`TestCalcPriorityClassName`).
#[test]
fn the_volcano_priority_class_falls_back_launcher_then_worker() {
    let with = |policy: Value, l: Option<&str>, w: Option<&str>| {
        let mut j = job(
            container(json!({"cpu": "1"}), None),
            Some((1, container(json!({"cpu": "1"}), None))),
            policy,
            json!({}),
        );
        for (role, pc) in [("Launcher", l), ("Worker", w)] {
            let spec = j.spec.mpi_replica_specs.get_mut(role).unwrap();
            spec.template
                .as_mut()
                .unwrap()
                .spec
                .as_mut()
                .unwrap()
                .priority_class_name = pc.map(str::to_string);
        }
        rendered(&j, &GangScheduler::Volcano)["spec"]["priorityClassName"].clone()
    };
    assert_eq!(
        with(json!({"priorityClass": "p"}), Some("high"), Some("low")),
        json!("p")
    );
    assert_eq!(with(json!({}), Some("high"), Some("low")), json!("high"));
    assert_eq!(with(json!({}), None, Some("low")), json!("low"));
    assert_eq!(with(json!({}), None, None), Value::Null);
}

/// A quantity that is not one fails the rendering, naming its field.
#[test]
fn a_bad_quantity_is_named() {
    let j = job(
        container(json!({"cpu": "lots"}), None),
        Some((1, container(json!({"cpu": "1"}), None))),
        json!({}),
        json!({}),
    );
    let e = pod_group(&j, &plugins()).unwrap_err().to_string();
    assert!(
        e.contains(
            "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].resources.requests.cpu"
        ),
        "{e}"
    );
}

/// `TestDecoratePodTemplateSpec`: the schedulerName set (another replaced, with a note) and
/// the group named by the label or the annotation.
#[test]
fn the_pods_are_stamped_with_the_scheduler_and_their_group() {
    let mut t: PodTemplateSpec = serde_json::from_value(json!({
        "metadata": {"labels": {"a": "b"}},
        "spec": {"schedulerName": "default-scheduler", "containers": []},
    }))
    .unwrap();
    let note = stamp(&mut t, &plugins(), "pi").unwrap();
    assert!(
        note.what.contains("\"default-scheduler\" replaced"),
        "{note}"
    );
    let v = serde_json::to_value(&t).unwrap();
    assert_eq!(v["spec"]["schedulerName"], "scheduler-plugins-scheduler");
    assert_eq!(
        v["metadata"]["labels"],
        json!({"a": "b", "scheduling.x-k8s.io/pod-group": "pi"})
    );
    assert!(v["metadata"].get("annotations").is_none());

    let mut t = PodTemplateSpec::default();
    assert!(stamp(&mut t, &GangScheduler::Volcano, "pi").is_none());
    let v = serde_json::to_value(&t).unwrap();
    assert_eq!(v["spec"]["schedulerName"], "volcano");
    assert_eq!(
        v["metadata"]["annotations"],
        json!({"scheduling.k8s.io/group-name": "pi"})
    );
    assert!(v["metadata"].get("labels").is_none());
}

/// mpi-operator's names: volcano, else a scheduler-plugins scheduler; workload refused.
#[test]
fn scheduler_names() {
    assert_eq!(parse_scheduler("volcano"), Ok(GangScheduler::Volcano));
    assert_eq!(
        parse_scheduler("scheduler-plugins"),
        Ok(GangScheduler::SchedulerPlugins("scheduler-plugins".into()))
    );
    let e = parse_scheduler("workload").unwrap_err();
    assert!(
        e.contains("Workload API") && e.contains("not supported"),
        "{e}"
    );
    for bad in ["", "Volcano", "-x", "a..b", &"x".repeat(254)] {
        assert!(parse_scheduler(bad).is_err(), "{bad:?}");
    }
}

/// The conversion does not see what the PodGroup honours; Volcano's queue is not Kueue's.
#[test]
fn the_conversion_sees_what_the_podgroup_does_not_honour() {
    let j = job(
        container(json!({"cpu": "1"}), None),
        Some((1, container(json!({"cpu": "1"}), None))),
        json!({"minAvailable": 2, "queue": "q", "priorityClass": "high", "minResources": {"cpu": "2"}, "scheduleTimeoutSeconds": 5}),
        json!({}),
    );
    let policy = |j: &MpiJob| {
        serde_json::to_value(&j.spec.run_policy.as_ref().unwrap().scheduling_policy).unwrap()
    };
    assert_eq!(policy(&for_conversion(&j, None)), policy(&j));
    assert_eq!(
        policy(&for_conversion(&j, Some(&plugins()))),
        json!({"queue": "q", "priorityClass": "high"})
    );
    assert_eq!(
        policy(&for_conversion(&j, Some(&GangScheduler::Volcano))),
        json!({"priorityClass": "high"})
    );
}
