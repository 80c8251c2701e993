use serde_json::{json, Value};

use super::{StoredMpiJob, Unfit};

fn pi(edit: impl FnOnce(&mut Value)) -> StoredMpiJob {
    let mut v: Value = serde_yaml::from_str(include_str!("../examples/pi.yaml")).unwrap();
    v["metadata"]["namespace"] = json!("team");
    v["spec"]["runPolicy"]["managedBy"] = json!("prrte-k8s.io/controller");
    edit(&mut v);
    serde_json::from_value(v).unwrap()
}

fn unfit(path: &str, problem: &str) -> Unfit {
    Unfit {
        path: path.into(),
        problem: problem.into(),
    }
}

#[test]
fn a_fitting_mpijob_reads_into_the_model_and_back() {
    let stored = pi(|_| {});
    let job = stored.model().unwrap();
    assert_eq!(job.spec.slots_per_worker, Some(1));
    assert_eq!(job.metadata.name.as_deref(), Some("pi"));
    let again = StoredMpiJob::from(&job).model().unwrap();
    assert_eq!(
        (again.metadata, again.spec, again.status),
        (job.metadata, job.spec, job.status)
    );
}

#[test]
fn a_field_of_another_type_is_named_by_its_path() {
    let stored = pi(|v| v["spec"]["runPolicy"]["suspend"] = json!("yes"));
    assert_eq!(
        stored.model().unwrap_err(),
        unfit(
            "spec.runPolicy.suspend",
            "invalid type: string \"yes\", expected a boolean"
        )
    );
    // managedBy is still read: the MPIJob is known to be the controller's.
    assert_eq!(
        stored.managed_by().unwrap().as_deref(),
        Some("prrte-k8s.io/controller")
    );
}

#[test]
fn a_field_deep_in_a_pod_template_is_named_with_its_indexes() {
    let stored = pi(|v| {
        v["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["ports"] =
            json!([{"containerPort": 80}, {"containerPort": "http"}]);
    });
    let e = stored.model().unwrap_err();
    assert_eq!(
        e.path,
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].ports[1].containerPort"
    );
    assert!(e.problem.contains("\"http\""), "{e}");
}

#[test]
fn an_unknown_value_of_a_replica_map_and_a_missing_field_are_named() {
    let stored = pi(|v| v["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = json!(2.5));
    assert_eq!(
        stored.model().unwrap_err().path,
        "spec.mpiReplicaSpecs.Worker.replicas"
    );
    let stored = pi(|v| {
        v["spec"].as_object_mut().unwrap().remove("mpiReplicaSpecs");
    });
    assert_eq!(
        stored.model().unwrap_err(),
        unfit("spec", "missing field `mpiReplicaSpecs`")
    );
}

#[test]
fn a_status_that_does_not_fit_is_named_and_read_as_none() {
    let stored = pi(|v| v["status"] = json!({"conditions": "Running"}));
    assert_eq!(stored.model().unwrap_err().path, "status.conditions");
    assert_eq!(stored.status(), None);
}

#[test]
fn managed_by_is_read_leniently_or_refused_when_it_is_itself_of_another_type() {
    let stored = pi(|v| {
        v["spec"]["runPolicy"]
            .as_object_mut()
            .unwrap()
            .remove("managedBy");
        v["spec"]["slotsPerWorker"] = json!("two");
    });
    assert_eq!(stored.managed_by(), Ok(None));
    assert_eq!(
        stored.model().unwrap_err(),
        unfit(
            "spec.slotsPerWorker",
            "invalid type: string \"two\", expected i32"
        )
    );
    let stored = pi(|v| v["spec"]["runPolicy"]["managedBy"] = json!(7));
    assert_eq!(
        stored.managed_by().unwrap_err().path,
        "spec.runPolicy.managedBy"
    );
}
