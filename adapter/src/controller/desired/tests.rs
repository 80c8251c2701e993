//! The objects an MPIJob gets, who owns them, which MPIJobs are ours, and the Job's updates;
//! the warning an MPIJob gets when its launcher shares the Worker's template.

use k8s_openapi::api::batch::v1::Job;
use serde_json::{json, Value};

use crate::controller::child::job_update;
use crate::controller::desired::{
    desired, launcher_warning, managed, Desired, Settings, SharedBecause,
};
use crate::controller::gang::GangScheduler;
use crate::controller::observe::job_finished;
use crate::manifest::mpijob::model::MpiJob;
use crate::manifest::mpijob::{from_mpijob, Note, Overrides};
use crate::manifest::{objects, INJECT_IMAGE};

const PI: &str = include_str!("../../manifest/mpijob/examples/pi.yaml");

/// mpi-operator's pi as the API server returns it: namespace, uid, server fields, a status.
fn served(managed_by: Option<&str>, suspend: bool) -> Value {
    let mut v: Value = serde_yaml::from_str(PI).unwrap();
    v["metadata"]["namespace"] = json!("team");
    v["metadata"]["uid"] = json!("1f1e5c7a-0000-4000-8000-000000000001");
    v["metadata"]["resourceVersion"] = json!("42");
    v["metadata"]["generation"] = json!(1);
    v["metadata"]["creationTimestamp"] = json!("2026-12-03T12:00:00Z");
    v["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update"}]);
    v["status"] = json!({"conditions": [{"type": "Created", "status": "True"}]});
    if let Some(m) = managed_by {
        v["spec"]["runPolicy"]["managedBy"] = json!(m);
    }
    if suspend {
        v["spec"]["runPolicy"]["suspend"] = json!(true);
    }
    v
}

/// The document as the controller reads it.
fn model(v: &Value) -> MpiJob {
    serde_json::from_value(v.clone()).unwrap()
}

/// The Job of `d` (the one Indexed Job).
fn job_of(d: &Desired) -> &Job {
    d.child.job().expect("a Job")
}

fn settings() -> Settings {
    Settings {
        inject_image: INJECT_IMAGE.into(),
        ..Default::default()
    }
}

#[test]
fn ours_by_managed_by_and_manage_all() {
    let ours = served(Some("prrte-k8s.io/controller"), false);
    let none = served(None, false);
    let empty = served(Some(""), false);
    let mpi_operator = served(Some("kubeflow.org/mpi-operator"), false);
    let multikueue = served(Some("kueue.x-k8s.io/multikueue"), false);
    for manage_all in [false, true] {
        assert!(managed(&model(&ours), manage_all));
        assert!(!managed(&model(&mpi_operator), manage_all));
        assert!(!managed(&model(&multikueue), manage_all));
        assert_eq!(managed(&model(&none), manage_all), manage_all);
        assert_eq!(managed(&model(&empty), manage_all), manage_all);
    }
}

#[test]
fn the_same_objects_as_from_mpijob_each_owned_by_the_mpijob() {
    let obj = served(Some("prrte-k8s.io/controller"), false);
    let d = desired(&model(&obj), &settings(), "k3y").unwrap();
    // One conversion: what `manifest --from-mpijob` renders for the same document, as the
    // model reads it (a quantity `cpu: 1` is "1", as the API server returns it).
    let (plan, notes) = from_mpijob(
        &serde_json::to_string(&model(&obj)).unwrap(),
        &Overrides {
            inject_image: INJECT_IMAGE.into(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(d.notes, notes);
    let rendered = objects(&plan, Some("k3y")).unwrap();
    let kinds: Vec<&str> = d
        .others
        .iter()
        .map(|o| o.types.as_ref().unwrap().kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Secret",
            "NetworkPolicy"
        ]
    );
    let mut ours: Vec<Value> = d
        .others
        .iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    ours.push(json(job_of(&d)));
    assert_eq!(ours.len(), rendered.len());
    for o in &mut ours {
        let refs = o["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("ownerReferences")
            .unwrap();
        assert_eq!(
            refs,
            json!([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
                "uid": "1f1e5c7a-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(o["metadata"]["namespace"], "team");
        strip_events_to(o);
        assert!(
            rendered.contains(o),
            "{} differs from the rendered one",
            o["kind"]
        );
    }
    // The Job is the Job controller's, and runs now.
    let spec = job_of(&d).spec.as_ref().unwrap();
    assert!(spec.managed_by.is_none());
    assert!(spec.suspend.is_none());
    assert_eq!(spec.parallelism, Some(3));
}

/// What only the controller's objects have, removed after it is checked: the Role's rule that
/// lets the launcher record events (`create` on `events`, nothing more), the pods' variable
/// naming the MPIJob.
fn strip_events_to(o: &mut Value) {
    if o["kind"] == "Role" {
        let rules = o["rules"].as_array_mut().unwrap();
        let events: Vec<Value> = rules
            .iter()
            .filter(|r| r["resources"] == json!(["events"]))
            .cloned()
            .collect();
        assert_eq!(
            events,
            [json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create"]})]
        );
        rules.retain(|r| r["resources"] != json!(["events"]));
    }
    if o["kind"] == "Job" {
        for c in o["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
        {
            let env = c["env"].as_array_mut().unwrap();
            let ours: Vec<&Value> = env
                .iter()
                .filter(|e| e["name"] == "PRRTE_K8S_MPIJOB")
                .collect();
            assert_eq!(
                ours,
                [
                    &json!({"name": "PRRTE_K8S_MPIJOB", "value": "pi:1f1e5c7a-0000-4000-8000-000000000001"})
                ]
            );
            env.retain(|e| e["name"] != "PRRTE_K8S_MPIJOB");
        }
    }
}

#[test]
fn the_mpijobs_own_variable_wins_over_the_jobs() {
    let mut obj = served(None, false);
    obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "PRRTE_K8S_MPIJOB", "value": "other:uid"}]);
    let d = desired(
        &model(&obj),
        &Settings {
            manage_all: true,
            ..settings()
        },
        "k",
    )
    .unwrap();
    let env = &json(job_of(&d))["spec"]["template"]["spec"]["containers"][0]["env"];
    let ours: Vec<&Value> = env
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "PRRTE_K8S_MPIJOB")
        .collect();
    assert_eq!(ours.len(), 1, "{env}");
    assert_eq!(ours[0]["value"], "pi:1f1e5c7a-0000-4000-8000-000000000001");
}

#[test]
fn a_suspended_mpijob_makes_a_suspended_job() {
    let d = desired(&model(&served(None, true)), &settings(), "k").unwrap();
    assert_eq!(job_of(&d).spec.as_ref().unwrap().suspend, Some(true));
}

#[test]
fn what_the_conversion_refuses_is_an_error_naming_the_field() {
    let mut obj = served(None, false);
    obj["spec"]["mpiImplementation"] = json!("LAM");
    let e = desired(&model(&obj), &settings(), "k")
        .unwrap_err()
        .to_string();
    assert!(e.contains("mpiImplementation") && e.contains("LAM"), "{e}");
    let mut obj = served(None, false);
    obj["spec"]["mpiReplicaSpecs"]["Worker"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let e = desired(&model(&obj), &settings(), "k")
        .unwrap_err()
        .to_string();
    assert!(e.contains("Worker.replicas"), "{e}");
}

/// A Job as the API server holds it: the Job controller's labels on its template.
fn existing(job: &Job, suspend: bool) -> Job {
    let mut j = json(job);
    j["spec"]["suspend"] = json!(suspend);
    j["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = json!("u");
    serde_json::from_value(j).unwrap()
}

fn json(job: &Job) -> Value {
    serde_json::to_value(job).unwrap()
}

/// The body of the apply `job_update` makes.
fn update(have: &Job, want: &Job) -> Option<Value> {
    job_update(have, want).map(|j| json(&j))
}

#[test]
fn kueues_admission_reaches_a_suspended_job_and_resumes_it() {
    let suspended = desired(&model(&served(None, true)), &settings(), "k")
        .unwrap()
        .child
        .job()
        .unwrap()
        .clone();
    let job = existing(&suspended, true);
    // Nothing changed: nothing to do.
    assert_eq!(update(&job, &suspended), None);
    // Kueue admits: node selector, tolerations and a label in the templates, then suspend false.
    let mut admitted = served(None, false);
    for role in ["Launcher", "Worker"] {
        let t = &mut admitted["spec"]["mpiReplicaSpecs"][role]["template"];
        t["spec"]["nodeSelector"] = json!({"pool": "a"});
        t["spec"]["tolerations"] = json!([{"key": "pool", "operator": "Exists"}]);
        t["metadata"]["labels"] = json!({"kueue.x-k8s.io/podset": role.to_lowercase()});
    }
    let want = desired(&model(&admitted), &settings(), "k")
        .unwrap()
        .child
        .job()
        .unwrap()
        .clone();
    let body = update(&job, &want).unwrap();
    assert_eq!(body["spec"]["suspend"], false);
    let t = &body["spec"]["template"];
    assert_eq!(t["spec"]["nodeSelector"], json!({"pool": "a"}));
    assert_eq!(
        t["spec"]["tolerations"],
        json!([{"key": "pool", "operator": "Exists"}])
    );
    assert_eq!(t["metadata"]["labels"]["kueue.x-k8s.io/podset"], "worker");
    // The apply holds the Job as it is: the Job controller's label stays, and so does the rest
    // of the Job (its owner, its command).
    assert_eq!(
        t["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
        "u"
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json(&job)["metadata"]["ownerReferences"]
    );
    assert_eq!(
        t["spec"]["containers"],
        json(&job)["spec"]["template"]["spec"]["containers"]
    );
    assert!(body.get("status").is_none());
    // Kueue suspends again and takes its node selector back: the apply leaves the field out
    // (so the API server removes it), or keeps only the MPIJob's own keys.
    let with_pool = existing(&want, true);
    let body = update(&with_pool, &suspended).unwrap();
    assert!(body["spec"]["template"]["spec"]
        .get("nodeSelector")
        .is_none());
    assert_eq!(body["spec"]["suspend"], true);
    let mut own = served(None, true);
    own["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] =
        json!({"disk": "ssd"});
    let own = desired(&model(&own), &settings(), "k")
        .unwrap()
        .child
        .job()
        .unwrap()
        .clone();
    let mut both = json(&existing(&own, true));
    both["spec"]["template"]["spec"]["nodeSelector"]["pool"] = json!("a");
    let both: Job = serde_json::from_value(both).unwrap();
    let body = update(&both, &own).unwrap();
    assert_eq!(
        body["spec"]["template"]["spec"]["nodeSelector"],
        json!({"disk": "ssd"})
    );
}

#[test]
fn a_running_job_only_follows_suspend_and_a_finished_one_nothing() {
    let running = desired(&model(&served(None, false)), &settings(), "k")
        .unwrap()
        .child
        .job()
        .unwrap()
        .clone();
    let job = existing(&running, false);
    assert_eq!(update(&job, &running), None);
    // A template change of a running Job is not Kubernetes' to make: only suspend follows.
    let mut changed = served(None, true);
    changed["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] =
        json!({"x": "y"});
    let want = desired(&model(&changed), &settings(), "k")
        .unwrap()
        .child
        .job()
        .unwrap()
        .clone();
    let mut expected = json(&job);
    expected["spec"]["suspend"] = json!(true);
    let body = update(&job, &want).unwrap();
    assert_eq!(body["spec"], expected["spec"]);
    let mut done = json(&job);
    done["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
    let done: Job = serde_json::from_value(done).unwrap();
    assert!(job_finished(&done));
    assert_eq!(update(&done, &want), None);
}

/// With `--gang-scheduler`: the PodGroup among the objects made before the Job, owned by the
/// MPIJob, sized by the MPIJob (pi: 3 pods of 1 CPU and 1Gi each, from their limits); the Job's
/// pods stamped; the policy the PodGroup honours noted no more, and Volcano's queue not
/// Kueue's.
#[test]
fn a_gang_scheduler_adds_the_podgroup_and_stamps_the_pods() {
    let mut obj = served(None, false);
    obj["spec"]["runPolicy"]["schedulingPolicy"] =
        json!({"minAvailable": 3, "scheduleTimeoutSeconds": 30, "queue": "gpu"});
    for (gang, api_version) in [
        (
            GangScheduler::SchedulerPlugins("coscheduler".into()),
            "scheduling.x-k8s.io/v1alpha1",
        ),
        (GangScheduler::Volcano, "scheduling.volcano.sh/v1beta1"),
    ] {
        let s = Settings {
            gang: Some(gang.clone()),
            ..settings()
        };
        let d = desired(&model(&obj), &s, "k").unwrap();
        let group = serde_json::to_value(d.others.last().unwrap()).unwrap();
        assert_eq!(group["apiVersion"], api_version);
        assert_eq!(group["kind"], "PodGroup");
        assert_eq!(group["metadata"]["name"], "pi");
        assert_eq!(group["metadata"]["namespace"], "team");
        assert_eq!(
            group["metadata"]["ownerReferences"],
            json!([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
                "uid": "1f1e5c7a-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(group["spec"]["minMember"], 3);
        assert_eq!(
            group["spec"]["minResources"],
            json!({"cpu": "3", "memory": "3Gi"})
        );
        let job = json(job_of(&d));
        let t = &job["spec"]["template"];
        assert_eq!(t["spec"]["schedulerName"], gang.scheduler_name());
        let fields = |n: &str| d.notes.iter().any(|x| x.field.ends_with(n));
        assert!(
            !fields("minAvailable") && !fields("scheduleTimeoutSeconds"),
            "{:?}",
            d.notes
        );
        match gang {
            GangScheduler::SchedulerPlugins(_) => {
                assert_eq!(
                    t["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"],
                    "pi"
                );
                assert_eq!(group["spec"]["scheduleTimeoutSeconds"], 30);
                assert_eq!(
                    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
                    "gpu"
                );
            }
            GangScheduler::Volcano => {
                assert_eq!(
                    t["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
                    "pi"
                );
                assert_eq!(group["spec"]["queue"], "gpu");
                assert!(job["metadata"]["labels"]
                    .get("kueue.x-k8s.io/queue-name")
                    .is_none());
            }
        }
    }
    // Without one: no PodGroup, the pods the default scheduler's, the policy noted.
    let d = desired(&model(&obj), &settings(), "k").unwrap();
    assert!(d
        .others
        .iter()
        .all(|o| o.types.as_ref().unwrap().kind != "PodGroup"));
    assert!(json(job_of(&d))["spec"]["template"]["spec"]
        .get("schedulerName")
        .is_none());
    assert!(d.notes.iter().any(|n| n.field.ends_with("minAvailable")));
}

/// The usual GPU MPIJob: a small launcher of another image, workers with more.
fn gpu_style(workers: Option<u32>) -> Value {
    let mut v = served(None, false);
    let specs = &mut v["spec"]["mpiReplicaSpecs"];
    let l = &mut specs["Launcher"]["template"]["spec"]["containers"][0];
    l["image"] = json!("launcher:1");
    l["resources"]["limits"] = json!({"cpu": "1", "memory": "1Gi"});
    let w = &mut specs["Worker"]["template"]["spec"]["containers"][0];
    w["resources"]["limits"] = json!({"cpu": "2", "memory": "2Gi"});
    match workers {
        Some(n) => specs["Worker"]["replicas"] = json!(n),
        None => {
            specs.as_object_mut().unwrap().remove("Worker");
            v["spec"]["runLauncherAsWorker"] = json!(true);
        }
    }
    v
}

/// The images and cpu limits of the containers of the pod template `t`.
fn images_and_cpus(t: &Value) -> Vec<(String, String)> {
    t["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["image"].as_str().unwrap_or("").to_string(),
                c["resources"]["limits"]["cpu"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

/// With the launcher in a pod of its own, the child is a JobSet owned by the MPIJob: the
/// replicated job `launcher` (one pod, the Launcher's template) and `worker` (the workers, the
/// Worker's), suspended and managed as a whole; with a gang scheduler both templates are
/// stamped with the one PodGroup. Without workers it stays the one Job.
#[test]
fn the_launchers_own_pod_is_a_jobsets_replicated_job() {
    let s = Settings {
        jobset: true,
        ..settings()
    };
    let d = desired(&model(&gpu_style(Some(2))), &s, "k").unwrap();
    assert_eq!(d.child.kind(), "JobSet");
    let js = serde_json::to_value(&d.child).unwrap();
    assert_eq!(js["apiVersion"], "jobset.x-k8s.io/v1alpha2");
    assert_eq!(js["metadata"]["ownerReferences"][0]["kind"], "MPIJob");
    assert_eq!(js["metadata"]["ownerReferences"][0]["controller"], true);
    let rjs = js["spec"]["replicatedJobs"].as_array().unwrap();
    let rj = |name: &str| rjs.iter().find(|r| r["name"] == name).unwrap().clone();
    let (l, w) = (rj("launcher"), rj("worker"));
    assert_eq!(l["template"]["spec"]["parallelism"], 1);
    assert_eq!(w["template"]["spec"]["parallelism"], 2);
    let lt = &l["template"]["spec"]["template"];
    let wt = &w["template"]["spec"]["template"];
    assert!(images_and_cpus(lt).contains(&("launcher:1".into(), "1".into())));
    assert!(images_and_cpus(wt).contains(&("mpioperator/mpi-pi:openmpi".into(), "2".into())));
    assert!(!images_and_cpus(wt).iter().any(|(i, _)| i == "launcher:1"));
    for t in [lt, wt] {
        assert_eq!(t["metadata"]["labels"][crate::manifest::JOB_LABEL], "pi");
    }
    // A restart is the controller's: the JobSet never restarts by itself.
    assert_eq!(js["spec"]["failurePolicy"]["maxRestarts"], 0);
    // Suspended as a whole.
    let mut suspended = gpu_style(Some(2));
    suspended["spec"]["runPolicy"]["suspend"] = json!(true);
    let d = desired(&model(&suspended), &s, "k").unwrap();
    assert_eq!(
        serde_json::to_value(&d.child).unwrap()["spec"]["suspend"],
        true
    );
    // Gang scheduling stamps both templates.
    let gang = Settings {
        gang: Some(GangScheduler::Volcano),
        ..s.clone()
    };
    let d = desired(&model(&gpu_style(Some(2))), &gang, "k").unwrap();
    let js = serde_json::to_value(&d.child).unwrap();
    for rj in js["spec"]["replicatedJobs"].as_array().unwrap() {
        let t = &rj["template"]["spec"]["template"];
        assert_eq!(t["spec"]["schedulerName"], "volcano", "{}", rj["name"]);
        assert_eq!(
            t["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
            "pi"
        );
    }
    // Without workers, the one pod is the launcher's: the Job.
    let d = desired(&model(&gpu_style(None)), &s, "k").unwrap();
    assert_eq!(d.child.kind(), "Job");
    // Without the setting, the Job whatever the MPIJob.
    let d = desired(&model(&gpu_style(Some(2))), &settings(), "k").unwrap();
    assert_eq!(d.child.kind(), "Job");
}

// The warning an MPIJob gets when its launcher is pod 0 of the one Indexed Job and its
// Launcher's template differs from the Worker's: which MPIJobs get it, what it names, and the
// remedy for each reason the launcher shares the Worker's template.

/// mpi-operator's pi as the API server returns it, changed by `edit`.
fn served_as(edit: impl FnOnce(&mut Value)) -> MpiJob {
    let mut v: Value = serde_yaml::from_str(PI).unwrap();
    v["metadata"]["namespace"] = json!("team");
    v["metadata"]["uid"] = json!("1f1e5c7a-0000-4000-8000-000000000002");
    edit(&mut v);
    serde_json::from_value(v).unwrap()
}

/// The Launcher's (`role` "Launcher") or Worker's pod spec.
fn role_spec<'a>(v: &'a mut Value, role: &str) -> &'a mut Value {
    &mut v["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
}

/// The usual GPU MPIJob: a small launcher of another image, workers with more, on GPU nodes.
fn gpu_style_edit(v: &mut Value) {
    let l = &mut role_spec(v, "Launcher")["containers"][0];
    l["image"] = json!("example/launcher:cpu");
    l["resources"]["limits"] = json!({"cpu": "1", "memory": "1Gi"});
    let w = role_spec(v, "Worker");
    w["containers"][0]["resources"]["limits"] =
        json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"});
    w["nodeSelector"] = json!({"accelerator": "h100"});
    w["tolerations"] = json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]);
}

fn launcher_settings(jobset: bool, shared_because: SharedBecause) -> Settings {
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
        &served_as(gpu_style_edit),
        &launcher_settings(false, SharedBecause::NoJobSet),
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
        &served_as(gpu_style_edit),
        &launcher_settings(false, SharedBecause::Chosen),
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
        &served_as(gpu_style_edit),
        &launcher_settings(true, SharedBecause::NoJobSet),
        "k",
    )
    .unwrap();
    assert_eq!(jobset.child.kind(), "JobSet");
    assert_eq!(jobset.launcher_warning, None);
    let no_workers = served_as(|v| {
        gpu_style_edit(v);
        v["spec"]["mpiReplicaSpecs"]
            .as_object_mut()
            .unwrap()
            .remove("Worker");
        v["spec"]["runLauncherAsWorker"] = json!(true);
    });
    let d = desired(
        &no_workers,
        &launcher_settings(false, SharedBecause::NoJobSet),
        "k",
    )
    .unwrap();
    assert_eq!(d.launcher_warning, None);
    let pi = desired(
        &served_as(|_| {}),
        &launcher_settings(false, SharedBecause::NoJobSet),
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
