use serde_json::{json, Value};

use super::*;
use crate::trainjob::types::{TrainJob, TrainJobSpec};

/// A runtime of ours in Trainer's MPI shape: `node` first, the `launcher` the trainer step.
pub(crate) fn runtime(run_launcher_as_node: bool, implementation: &str) -> Runtime {
    let pod = |command: Value| {
        json!({"spec": {"template": {"spec": {
            "volumes": [{"name": "prrte-k8s", "emptyDir": {}}],
            "containers": [{"name": "node", "image": "example/mpi:1", "command": command,
                "env": [{"name": "PRRTE_K8S_ROLE", "value": "node"}],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
        }}}})
    };
    let mut launcher = pod(json!(["mpirun", "hostname"]));
    launcher["metadata"] = json!({"labels": {ANCESTOR_LABEL: "trainer"}});
    Runtime::new(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "prrte-k8s-openmpi", "labels": {"trainer.kubeflow.org/framework": "mpi"},
            "managedFields": [{"manager": "kubectl"}]},
        "spec": {
            "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": implementation,
                "sshAuthMountPath": "/home/mpiuser/.ssh", "runLauncherAsNode": run_launcher_as_node}},
            "template": {"metadata": {"labels": {"example.org/site": "a"}}, "spec": {
                "network": {"publishNotReadyAddresses": true},
                "replicatedJobs": [
                    {"name": "node", "template": pod(json!(["/opt/prrte-k8s/bin/prrte-k8s-agent"]))},
                    {"name": "launcher", "template": launcher},
                ],
            }},
        },
    }))
}

pub(crate) fn job(spec: Value) -> TrainJob {
    let mut j = TrainJob::new("pi", serde_json::from_value::<TrainJobSpec>(spec).unwrap());
    j.metadata.namespace = Some("team".into());
    j.metadata.uid = Some("uid-1".into());
    j
}

fn two_by_two() -> TrainJob {
    job(json!({
        "runtimeRef": {"name": "prrte-k8s-openmpi"},
        "trainer": {"numNodes": 2, "numProcPerNode": 2, "image": "example/app:2",
            "command": ["mpirun", "--hostfile", "/etc/mpi/hostfile", "python", "pi.py"],
            "env": [{"name": "MODE", "value": "fast"}],
            "resourcesPerNode": {"limits": {"cpu": "2"}}},
    }))
}

fn keys() -> SshKeyPair {
    SshKeyPair {
        private_pem: "PRIVATE".into(),
        public_openssh: "PUBLIC\n".into(),
    }
}

fn rjob<'a>(js: &'a Value, name: &str) -> &'a Value {
    js["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap()
}

fn container<'a>(js: &'a Value, name: &str) -> &'a Value {
    &rjob(js, name)["template"]["spec"]["template"]["spec"]["containers"][0]
}

fn env<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

#[test]
fn the_jobset_is_the_template_with_the_trainer_in_the_launchers_node_container() {
    let r = render(&two_by_two(), &runtime(false, "OpenMPI"), Some(&keys())).unwrap();
    let js = &r.jobset;
    assert_eq!(js["metadata"]["name"], "pi");
    assert_eq!(js["metadata"]["namespace"], "team");
    assert_eq!(js["metadata"]["labels"]["example.org/site"], "a");
    let owner = &js["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "TrainJob");
    assert_eq!(owner["apiVersion"], "trainer.kubeflow.org/v1alpha1");
    assert_eq!(owner["uid"], "uid-1");
    assert_eq!(owner["controller"], true);
    let l = container(js, "launcher");
    assert_eq!(l["image"], "example/app:2");
    assert_eq!(l["command"][0], "mpirun");
    assert_eq!(env(l, "MODE"), Some("fast"));
    assert_eq!(
        env(l, "PRRTE_K8S_ROLE"),
        Some("node"),
        "the template's env is kept"
    );
    assert_eq!(
        env(l, "OMPI_MCA_orte_default_hostfile"),
        Some("/etc/mpi/hostfile")
    );
    assert_eq!(env(l, "OMPI_MCA_orte_set_default_slots"), Some("2"));
    assert_eq!(env(l, "OMPI_MCA_orte_keep_fqdn_hostnames"), Some("true"));
    assert_eq!(
        env(l, "OMPI_MCA_plm_rsh_args"),
        Some("-o ConnectionAttempts=10")
    );
    assert_eq!(
        l["resources"],
        json!({"limits": {"cpu": "2", "memory": "1Gi"}})
    );
    // The node pods keep their image, command, env and resources.
    let n = container(js, "node");
    assert_eq!(n["image"], "example/mpi:1");
    assert_eq!(n["command"][0], "/opt/prrte-k8s/bin/prrte-k8s-agent");
    assert_eq!(env(n, "MODE"), None);
    assert_eq!(env(n, "OMPI_MCA_orte_default_hostfile"), None);
    assert_eq!(n["resources"]["limits"]["cpu"], "1");
    // Counts: the node job numNodes, the launcher one pod, one replica.
    let node = &rjob(js, "node")["template"]["spec"];
    assert_eq!(
        (node["parallelism"].as_i64(), node["completions"].as_i64()),
        (Some(2), Some(2))
    );
    let launcher = rjob(js, "launcher");
    assert_eq!(launcher["replicas"], 1);
    assert_eq!(launcher["template"]["spec"]["parallelism"], 1);
    assert!(js["spec"].get("suspend").is_none(), "unset stays unset");
}

#[test]
fn the_launcher_and_node_pods_mount_the_secret_and_the_launcher_the_hostfile() {
    let r = render(&two_by_two(), &runtime(false, "OpenMPI"), None).unwrap();
    for name in ["node", "launcher"] {
        let pod = &rjob(&r.jobset, name)["template"]["spec"]["template"]["spec"];
        let vols: Vec<&str> = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        let want: &[&str] = if name == "launcher" {
            &["prrte-k8s", "mpi-ssh-auth", "mpi-hostfile"]
        } else {
            &["prrte-k8s", "mpi-ssh-auth"]
        };
        assert_eq!(vols, want, "{name}");
        let ssh = &pod["volumes"][1]["secret"];
        assert_eq!(ssh["secretName"], "pi-mpi-ssh-auth");
        assert_eq!(ssh["defaultMode"], 0o400);
        assert_eq!(ssh["items"][2]["path"], "authorized_keys");
        let mounts = &pod["containers"][0]["volumeMounts"];
        assert_eq!(mounts[0]["mountPath"], "/home/mpiuser/.ssh");
        assert_eq!(
            mounts.as_array().unwrap().len(),
            if name == "launcher" { 2 } else { 1 }
        );
    }
    assert!(r.ssh_auth.is_none(), "no keys: the Secret exists already");
}

#[test]
fn the_hostfile_names_each_node_pod_by_its_jobset_host_name() {
    let r = render(&two_by_two(), &runtime(false, "OpenMPI"), None).unwrap();
    let h = r.hostfile.unwrap();
    assert_eq!(h["metadata"]["name"], "pi-mpi-hostfile");
    assert_eq!(
        h["data"]["hostfile"],
        "pi-node-0-0.pi slots=2\npi-node-0-1.pi slots=2\n"
    );
    assert_eq!(h["metadata"]["ownerReferences"][0]["name"], "pi");
}

#[test]
fn run_launcher_as_node_counts_the_launcher_among_the_nodes() {
    let r = render(&two_by_two(), &runtime(true, "OpenMPI"), None).unwrap();
    let js = &r.jobset;
    assert_eq!(rjob(js, "node")["template"]["spec"]["parallelism"], 1);
    assert_eq!(env(container(js, "node"), "MODE"), Some("fast"));
    assert_eq!(container(js, "node")["resources"]["limits"]["cpu"], "2");
    assert_eq!(
        r.hostfile.unwrap()["data"]["hostfile"],
        "pi-node-0-0.pi slots=2\npi-launcher-0-0.pi slots=2\n"
    );
}

#[test]
fn the_secret_is_immutable_ssh_auth_and_suspend_is_mirrored() {
    let mut j = two_by_two();
    j.spec.suspend = Some(true);
    let r = render(&j, &runtime(false, "OpenMPI"), Some(&keys())).unwrap();
    assert_eq!(r.jobset["spec"]["suspend"], true);
    let s = r.ssh_auth.unwrap();
    assert_eq!(s["metadata"]["name"], "pi-mpi-ssh-auth");
    assert_eq!(s["type"], "kubernetes.io/ssh-auth");
    assert_eq!(s["immutable"], true);
    // base64, as Trainer's `WithData` of the bytes
    assert_eq!(s["data"]["ssh-privatekey"], "UFJJVkFURQ==");
    assert_eq!(s["data"]["ssh-publickey"], "UFVCTElDCg==");
    assert!(s.get("stringData").is_none());
}

#[test]
fn the_snapshot_keeps_the_runtime_and_reads_back() {
    let rt = runtime(false, "OpenMPI");
    let r = render(&two_by_two(), &rt, None).unwrap();
    assert_eq!(r.snapshot["metadata"]["name"], "pi-runtime-snapshot");
    let back = from_snapshot(&r.snapshot).unwrap();
    assert!(back.object["metadata"].get("managedFields").is_none());
    assert_eq!(back.object["spec"], rt.object["spec"]);
    assert_eq!(render(&two_by_two(), &back, None).unwrap().jobset, r.jobset);
    assert_eq!(r.objects().len(), 3);
}

#[test]
fn other_implementations_and_runtime_patches_are_refused_as_trainer_refuses_them() {
    let e = render(&two_by_two(), &runtime(false, "MPICH"), None).unwrap_err();
    assert_eq!(e, RenderError::Implementation("MPICH".into()));
    let mut j = two_by_two();
    j.spec.runtime_patches = vec![json!({"manager": "kueue"})];
    let e = render(&j, &runtime(false, "OpenMPI"), None).unwrap_err();
    assert_eq!(e, RenderError::RuntimePatches);
    let mut j = two_by_two();
    j.metadata.uid = None;
    assert_eq!(
        render(&j, &runtime(false, "OpenMPI"), None).unwrap_err(),
        RenderError::Meta("uid")
    );
}

#[test]
fn without_trainer_fields_the_runtime_decides() {
    let j = job(json!({"runtimeRef": {"name": "prrte-k8s-openmpi"}}));
    let r = render(&j, &runtime(false, "OpenMPI"), None).unwrap();
    assert_eq!(
        rjob(&r.jobset, "node")["template"]["spec"]["parallelism"],
        1
    );
    let l = container(&r.jobset, "launcher");
    assert_eq!(l["command"], json!(["mpirun", "hostname"]));
    assert_eq!(env(l, "OMPI_MCA_orte_set_default_slots"), Some("1"));
    assert_eq!(
        r.hostfile.unwrap()["data"]["hostfile"],
        "pi-node-0-0.pi slots=1\n"
    );
}

fn slots_annotation(js: &Value, rj: &str) -> Value {
    rjob(js, rj)["template"]["spec"]["template"]["metadata"]["annotations"]["prrte-k8s.io/slots"]
        .clone()
}

#[test]
fn the_node_pods_carry_the_slots_annotation_and_the_launcher_only_as_a_node() {
    let r = render(&two_by_two(), &runtime(false, "OpenMPI"), Some(&keys())).unwrap();
    assert_eq!(slots_annotation(&r.jobset, "node"), json!("2"));
    assert_eq!(slots_annotation(&r.jobset, "launcher"), Value::Null);
    let r = render(&two_by_two(), &runtime(true, "OpenMPI"), Some(&keys())).unwrap();
    assert_eq!(slots_annotation(&r.jobset, "launcher"), json!("2"));
}
