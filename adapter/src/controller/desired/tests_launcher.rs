//! The warning an MPIJob gets when its launcher is pod 0 of the one Indexed Job and its
//! Launcher's template differs from the Worker's: which MPIJobs get it, what it names, and the
//! remedy for each reason the launcher shares the Worker's template.

use serde_json::{json, Value};

use crate::controller::desired::{desired, launcher_warning, Settings, SharedBecause};
use crate::manifest::mpijob::model::MpiJob;
use crate::manifest::mpijob::Note;
use crate::manifest::INJECT_IMAGE;

const PI: &str = include_str!("../../manifest/mpijob/examples/pi.yaml");

/// mpi-operator's pi as the API server returns it, changed by `edit`.
fn served(edit: impl FnOnce(&mut Value)) -> MpiJob {
    let mut v: Value = serde_yaml::from_str(PI).unwrap();
    v["metadata"]["namespace"] = json!("team");
    v["metadata"]["uid"] = json!("1f1e5c7a-0000-4000-8000-000000000002");
    edit(&mut v);
    serde_json::from_value(v).unwrap()
}

/// The Launcher's (`role` "Launcher") or Worker's pod spec.
fn spec<'a>(v: &'a mut Value, role: &str) -> &'a mut Value {
    &mut v["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
}

/// The usual GPU MPIJob: a small launcher of another image, workers with more, on GPU nodes.
fn gpu_style(v: &mut Value) {
    let l = &mut spec(v, "Launcher")["containers"][0];
    l["image"] = json!("example/launcher:cpu");
    l["resources"]["limits"] = json!({"cpu": "1", "memory": "1Gi"});
    let w = spec(v, "Worker");
    w["containers"][0]["resources"]["limits"] =
        json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"});
    w["nodeSelector"] = json!({"accelerator": "h100"});
    w["tolerations"] = json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]);
}

fn settings(jobset: bool, shared_because: SharedBecause) -> Settings {
    Settings {
        inject_image: INJECT_IMAGE.into(),
        jobset,
        shared_because,
        ..Default::default()
    }
}

/// Where the cluster serves no JobSet, a GPU-style MPIJob's warning names each field of the
/// Launcher's template pod 0 does not get (image, resources, nodeSelector, tolerations) and
/// the remedy: install JobSet and restart the controller, or `--launcher-pod jobset`.
#[test]
fn without_jobset_a_launcher_template_that_differs_is_warned_of_with_the_remedy() {
    let d = desired(
        &served(gpu_style),
        &settings(false, SharedBecause::NoJobSet),
        "k",
    )
    .unwrap();
    assert_eq!(d.child.kind(), "Job");
    let w = d.launcher_warning.expect("a warning");
    for field in [
        "spec.containers[0].image",
        "spec.containers[0].resources",
        "spec.nodeSelector",
        "spec.tolerations",
        "(spec.mpiReplicaSpecs.Launcher.template)",
        "the cluster serves no JobSet",
        "install JobSet and restart the controller",
        "--launcher-pod jobset",
    ] {
        assert!(w.contains(field), "no {field:?} in {w}");
    }
    assert!(!w.contains("--launcher-pod shared"), "{w}");
}

/// With `--launcher-pod shared` chosen, the remedy is the other choice, not JobSet's install.
#[test]
fn with_shared_chosen_the_remedy_is_the_flag() {
    let d = desired(
        &served(gpu_style),
        &settings(false, SharedBecause::Chosen),
        "k",
    )
    .unwrap();
    let w = d.launcher_warning.expect("a warning");
    assert!(w.contains("--launcher-pod shared"), "{w}");
    assert!(w.contains("--launcher-pod auto"), "{w}");
    assert!(!w.contains("serves no JobSet"), "{w}");
    assert!(w.contains("spec.containers[0].image"), "{w}");
}

/// No warning where the launcher gets its template: a JobSet; an MPIJob without workers
/// (its one pod is the Launcher's); a Launcher's template that differs from the Worker's only
/// in what the runtime replaces (pi.yaml: the container's name, command and args).
#[test]
fn no_warning_where_the_launcher_gets_its_template() {
    let jobset = desired(
        &served(gpu_style),
        &settings(true, SharedBecause::NoJobSet),
        "k",
    )
    .unwrap();
    assert_eq!(jobset.child.kind(), "JobSet");
    assert_eq!(jobset.launcher_warning, None);
    let no_workers = served(|v| {
        gpu_style(v);
        v["spec"]["mpiReplicaSpecs"]
            .as_object_mut()
            .unwrap()
            .remove("Worker");
        v["spec"]["runLauncherAsWorker"] = json!(true);
    });
    let d = desired(&no_workers, &settings(false, SharedBecause::NoJobSet), "k").unwrap();
    assert_eq!(d.launcher_warning, None);
    let pi = desired(
        &served(|_| {}),
        &settings(false, SharedBecause::NoJobSet),
        "k",
    )
    .unwrap();
    assert_eq!(pi.launcher_warning, None, "{:?}", pi.notes);
}

/// Only the notes of the Launcher's lost fields count, and past eight the rest are counted.
#[test]
fn only_the_launchers_lost_fields_are_named_and_many_are_counted() {
    let other = Note::new("spec.runPolicy.backoffLimit", "something else");
    assert_eq!(
        launcher_warning(std::slice::from_ref(&other), SharedBecause::NoJobSet),
        None
    );
    let at = "spec.mpiReplicaSpecs.Launcher.template.";
    let lost: Vec<Note> = (0..11)
        .map(|i| Note::launcher_lost(format!("{at}spec.field{i}"), "not used"))
        .chain([other])
        .collect();
    let w = launcher_warning(&lost, SharedBecause::NoJobSet).unwrap();
    assert!(w.contains("spec.field0, spec.field1"), "{w}");
    assert!(w.contains("spec.field7 and 3 more"), "{w}");
    assert!(!w.contains("spec.field8"), "{w}");
    assert!(!w.contains("backoffLimit"), "{w}");
}
