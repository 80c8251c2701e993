//! The conversion: mpi-operator's pi examples (written here) rendered and compared with their
//! golden files, every runPolicy field, and every refusal.

use serde_json::{json, Value};

use super::convert::{from_mpijob, Overrides};
use super::error::{MpiJobError, Note};
use crate::manifest::inject::INJECT_IMAGE;
use crate::manifest::plan::JobPlan;
use crate::manifest::render::{objects, render};
use crate::manifest::restricted::violations;

pub(super) fn overrides() -> Overrides {
    Overrides {
        inject_image: INJECT_IMAGE.to_string(),
        ..Default::default()
    }
}

pub(super) fn convert(text: &str) -> (JobPlan, Vec<Note>) {
    from_mpijob(text, &overrides()).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn refused(text: &str) -> String {
    match from_mpijob(text, &overrides()) {
        Ok(_) => panic!("converted, but should be refused:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// The Job of a converted MPIJob.
pub(super) fn job(plan: &JobPlan) -> Value {
    objects(plan, None)
        .unwrap()
        .into_iter()
        .find(|o| o["kind"] == "Job")
        .unwrap()
}

fn notes_text(notes: &[Note]) -> String {
    notes.iter().map(|n| format!("{n}\n")).collect()
}

const EXAMPLES: &[(&str, &str, &str, &str)] = &[
    (
        "pi.yaml",
        include_str!("examples/pi.yaml"),
        include_str!("examples/pi.rendered.yaml"),
        include_str!("examples/pi.notes"),
    ),
    (
        "pi-mpich.yaml",
        include_str!("examples/pi-mpich.yaml"),
        include_str!("examples/pi-mpich.rendered.yaml"),
        include_str!("examples/pi-mpich.notes"),
    ),
    (
        "pi-intel.yaml",
        include_str!("examples/pi-intel.yaml"),
        include_str!("examples/pi-intel.rendered.yaml"),
        include_str!("examples/pi-intel.notes"),
    ),
];

/// mpi-operator's three pi examples render to their golden files (the manifest and the notes
/// on stderr). `PRRTE_K8S_UPDATE_GOLDEN=1` rewrites the files; review the diff.
#[test]
fn the_pi_examples_render_to_their_golden_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/manifest/mpijob/examples");
    let update = std::env::var_os("PRRTE_K8S_UPDATE_GOLDEN").is_some();
    for (file, input, rendered, notes) in EXAMPLES {
        let (plan, got_notes) = convert(input);
        let got = render(&plan, &format!("--from-mpijob {file} --no-secret"), None).unwrap();
        let got_notes = notes_text(&got_notes);
        let stem = file.trim_end_matches(".yaml");
        if update {
            std::fs::write(dir.join(format!("{stem}.rendered.yaml")), &got).unwrap();
            std::fs::write(dir.join(format!("{stem}.notes")), &got_notes).unwrap();
            continue;
        }
        assert!(
            got == *rendered,
            "{file}: the rendering changed (PRRTE_K8S_UPDATE_GOLDEN=1 rewrites the golden file):\n{got}"
        );
        assert_eq!(got_notes, *notes, "{file}: the notes changed");
    }
}

/// What the pi examples map to, checked field by field (the golden files hold the rest).
#[test]
fn pi_maps_launcher_workers_and_ranks_as_mpi_operator_does() {
    let (plan, _) = convert(EXAMPLES[0].1);
    let j = job(&plan);
    let spec = &j["spec"];
    assert_eq!(j["metadata"]["name"], "pi");
    assert_eq!(spec["completions"], 3, "the launcher and 2 workers");
    assert_eq!(spec["parallelism"], 3);
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["successPolicy"]["rules"][0]["succeededIndexes"], "0");
    assert_eq!(spec["ttlSecondsAfterFinished"], 60);
    assert_eq!(spec["backoffLimit"], 0);
    assert!(spec.get("activeDeadlineSeconds").is_none());
    assert!(spec.get("suspend").is_none());
    let tmpl = &spec["template"];
    assert_eq!(
        tmpl["metadata"]["annotations"]["prrte-k8s.io/slots"], "1",
        "slotsPerWorker"
    );
    let pod = &tmpl["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "mpioperator/mpi-pi:openmpi");
    assert_eq!(
        c["resources"],
        json!({"limits": {"cpu": 1, "memory": "1Gi"}})
    );
    let cmd: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        cmd,
        [
            "/opt/prrte-k8s/bin/prrte-k8s-agent",
            "--mpi",
            "openmpi",
            "--run",
            "--",
            "mpirun",
            "-n",
            "2",
            "/home/mpiuser/pi"
        ]
    );
    let env = |k: &str| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == k)
            .cloned()
    };
    assert_eq!(
        env("PRTE_MCA_ras_k8s_exclude_self"),
        Some(json!({"name": "PRTE_MCA_ras_k8s_exclude_self", "value": "true"})),
        "ranks on the workers only"
    );
    assert_eq!(c["securityContext"]["runAsUser"], 1000);
    assert_eq!(
        pod["initContainers"][0]["securityContext"]["runAsUser"],
        1000
    );
    assert_eq!(pod["securityContext"]["fsGroup"], 1000);
    assert_eq!(violations(tmpl), Vec::<String>::new());
    // runLauncherAsWorker: ranks on every pod, pod 0 included.
    let text = EXAMPLES[0].1.replace(
        "  slotsPerWorker: 1\n",
        "  slotsPerWorker: 4\n  runLauncherAsWorker: true\n",
    );
    let (plan, _) = convert(&text);
    let j = job(&plan);
    assert_eq!(j["spec"]["completions"], 3);
    let c = &j["spec"]["template"]["spec"]["containers"][0];
    assert!(
        !c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "PRTE_MCA_ras_k8s_exclude_self"),
        "{c}"
    );
    assert_eq!(
        j["spec"]["template"]["metadata"]["annotations"]["prrte-k8s.io/slots"],
        "4"
    );
    // MPICH and Intel reach the agent's --mpi; the launcher's args alone are the command.
    for ((_, input, _, _), mpi) in EXAMPLES[1..].iter().zip(["mpich", "intel"]) {
        let (plan, notes) = convert(input);
        let c = &job(&plan)["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["command"][2], mpi);
        assert_eq!(c["command"][5], "mpirun");
        assert_eq!(c["imagePullPolicy"], "Always");
        assert!(c.get("readinessProbe").unwrap()["httpGet"]["path"] == "/healthz");
        assert!(
            notes
                .iter()
                .any(|n| n.field.ends_with("containers[0].readinessProbe")),
            "{notes:?}"
        );
    }
}

/// A minimal MPIJob with `spec` fields spliced in (YAML, indented by two).
pub(super) fn mpijob(extra_spec: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: j
spec:
{extra_spec}
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers:
          - name: l
            image: app:1
            command: [mpirun, ./a]
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: w
            image: app:1
"
    )
}

pub(super) fn field<'a>(notes: &'a [Note], suffix: &str) -> Option<&'a Note> {
    notes.iter().find(|n| n.field.ends_with(suffix))
}

#[test]
fn every_run_policy_field_is_mapped_or_named() {
    let (plan, notes) = convert(&mpijob(
        "  runPolicy:
    backoffLimit: 0
    activeDeadlineSeconds: 900
    ttlSecondsAfterFinished: 30
    suspend: true
    cleanPodPolicy: Running
    managedBy: kueue.x-k8s.io/multikueue
    schedulingPolicy:
      queue: team-a
      priorityClass: high",
    ));
    assert!(
        notes.is_empty() || notes.iter().all(|n| n.field.contains("securityContext")),
        "{notes:#?}"
    );
    let j = job(&plan);
    let s = &j["spec"];
    assert_eq!(s["backoffLimit"], 0);
    assert_eq!(s["activeDeadlineSeconds"], 900);
    assert_eq!(s["ttlSecondsAfterFinished"], 30);
    assert_eq!(s["suspend"], true);
    assert_eq!(s["managedBy"], "kueue.x-k8s.io/multikueue");
    assert_eq!(
        j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "team-a"
    );
    assert_eq!(s["template"]["spec"]["priorityClassName"], "high");
    // Defaults: no TTL (mpi-operator keeps a finished job), not suspended, no managedBy.
    let (plan, _) = convert(&mpijob(
        "  runPolicy:\n    managedBy: kubeflow.org/mpi-operator",
    ));
    let s = &job(&plan)["spec"];
    assert!(s.get("ttlSecondsAfterFinished").is_none() && s.get("suspend").is_none());
    assert!(s.get("managedBy").is_none());
    // The controller's own managedBy is not the Job's either: the Job controller runs the Job.
    let (plan, _) = convert(&mpijob(
        "  runPolicy:\n    managedBy: prrte-k8s.io/controller",
    ));
    assert!(job(&plan)["spec"].get("managedBy").is_none());

    // What cannot be honoured is named, one note each, with the reason.
    let (_, notes) = convert(&mpijob(
        "  runPolicy:
    backoffLimit: 3
    cleanPodPolicy: None
    schedulingPolicy:
      minAvailable: 2
      minResources: {cpu: 4}
      scheduleTimeoutSeconds: 60",
    ));
    for (f, needle) in [
        (
            "runPolicy.backoffLimit",
            "restarts the whole job after it failed",
        ),
        ("runPolicy.cleanPodPolicy", "None: the workers stay up"),
        ("schedulingPolicy.minAvailable", "--gang-scheduler"),
        ("schedulingPolicy.minResources", "PodGroup"),
        ("schedulingPolicy.scheduleTimeoutSeconds", "60 not honoured"),
    ] {
        let n = field(&notes, f).unwrap_or_else(|| panic!("no note on {f}: {notes:#?}"));
        assert!(n.what.contains(needle), "{n}");
    }
    let (_, notes) = convert(&mpijob("  runPolicy:\n    cleanPodPolicy: All"));
    assert!(field(&notes, "cleanPodPolicy")
        .unwrap()
        .what
        .contains("All not fully honoured without the controller"));
    // None: no success policy (the Job must not stop the workers when the launcher succeeds),
    // and every agent is told the workers stay; Running (or nothing): index 0's success policy.
    let agent_args = |plan: &JobPlan| -> Vec<String> {
        let c = &job(plan)["spec"]["template"]["spec"]["containers"][0];
        serde_json::from_value(c["command"].clone()).unwrap_or_default()
    };
    let (none, _) = convert(&mpijob("  runPolicy:\n    cleanPodPolicy: None"));
    assert!(job(&none)["spec"].get("successPolicy").is_none());
    let args = agent_args(&none);
    let stay = args.iter().position(|a| a == "--workers-stay");
    let run = args.iter().position(|a| a == "--run");
    assert!(stay.is_some() && stay < run, "{args:?}");
    for policy in ["Running", "All"] {
        let (plan, _) = convert(&mpijob(&format!(
            "  runPolicy:\n    cleanPodPolicy: {policy}"
        )));
        assert_eq!(
            job(&plan)["spec"]["successPolicy"]["rules"][0]["succeededIndexes"],
            "0"
        );
        assert!(!agent_args(&plan).contains(&"--workers-stay".to_string()));
    }
    // The queue as the MPIJob's own Kueue label works the same; two different queues are refused.
    let labelled = mpijob("").replace(
        "  name: j\n",
        "  name: j\n  labels:\n    kueue.x-k8s.io/queue-name: q1\n",
    );
    let (plan, _) = convert(&labelled);
    assert_eq!(
        job(&plan)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "q1"
    );
    let both = labelled.replace(
        "spec:\n\n",
        "spec:\n  runPolicy:\n    schedulingPolicy:\n      queue: q2\n",
    );
    let e = refused(&both);
    assert!(
        e.contains("queue") && e.contains("q1") && e.contains("q2"),
        "{e}"
    );
    // restartPolicy OnFailure: no pod restarted in place.
    let (_, notes) = convert(&mpijob("").replace(
        "    Launcher:\n",
        "    Launcher:\n      restartPolicy: OnFailure\n",
    ));
    assert!(field(&notes, "Launcher.restartPolicy")
        .unwrap()
        .what
        .contains("no pod is restarted in place"));
}

#[test]
fn every_refusal_names_the_cause_and_the_remedy() {
    let base = mpijob("");
    let cases: Vec<(String, &[&str])> = vec![
        ("".into(), &["no document"]),
        ("a: [".into(), &["not valid YAML"]),
        (format!("{base}---\n{base}"), &["2 documents"]),
        (base.replace("kind: MPIJob", "kind: Job"), &["\"Job\"", "not MPIJob", "--image"]),
        (base.replace("kubeflow.org/v2beta1", "kubeflow.org/v1"), &["kubeflow.org/v1", "v2beta1"]),
        (base.replace("  name: j\n", "  generateName: j-\n"), &["metadata.name", "generateName", "--name"]),
        (base.replace("  name: j\n", "  name: Not_A_Name\n"), &["metadata.name", "--name"]),
        (base.replace("spec:\n\n", "spec:\n  elasticPolicy: {}\n"), &["spec.elasticPolicy", "not a field"]),
        (base.replace("spec:\n\n", "spec:\n  runPolicy:\n    cleanPodPolicy: Sometimes\n"), &["cleanPodPolicy", "Sometimes", "Running"]),
        (base.replace("spec:\n\n", "spec:\n  runPolicy:\n    restarts: 2\n"), &["spec.runPolicy.restarts"]),
        (base.replace("spec:\n\n", "spec:\n  runPolicy:\n    backoffLimit: -1\n"), &["backoffLimit", "at least 0"]),
        (base.replace("spec:\n\n", "spec:\n  runPolicy:\n    activeDeadlineSeconds: 0\n"), &["activeDeadlineSeconds", "positive"]),
        (base.replace("spec:\n\n", "spec:\n  runPolicy:\n    managedBy: someone\n"), &["managedBy", "multikueue"]),
        (base.replace("spec:\n\n", "spec:\n  runPolicy:\n    schedulingPolicy:\n      gang: true\n"), &["schedulingPolicy.gang"]),
        (base.replace("spec:\n\n", "spec:\n  mpiImplementation: LAM\n"), &["mpiImplementation", "LAM", "MPICH"]),
        (base.replace("spec:\n\n", "spec:\n  slotsPerWorker: 0\n"), &["slotsPerWorker", "at least 1"]),
        (base.replace("spec:\n\n", "spec:\n  launcherCreationPolicy: Later\n"), &["launcherCreationPolicy"]),
        (base.replace("    Launcher:", "    Driver:"), &["mpiReplicaSpecs.Driver", "Launcher"]),
        (base.replace("    Launcher:\n      template:", "    Launcher:\n      replicas: 2\n      template:"), &["Launcher.replicas", "set it to 1"]),
        (base.replace("    Launcher:\n      template:", "    Launcher:\n      restartPolicy: ExitCode\n      template:"), &["restartPolicy", "ExitCode"]),
        (base.replace("            command: [mpirun, ./a]\n", ""), &["Launcher.template.spec.containers[0].command", "is missing", "give the Launcher's container a command"]),
        (base.replace("      replicas: 2\n", ""), &["Worker.replicas", "missing"]),
        (base.replace("      replicas: 2\n", "      replicas: 0\n"), &["Worker.replicas", "runLauncherAsWorker"]),
        (base[..base.find("    Worker:").unwrap()].to_string(), &["Worker", "runLauncherAsWorker: true"]),
        (base.replace("          - name: w\n            image: app:1\n", "          - name: w\n"), &["Worker.template.spec.containers[0].image", "missing"]),
        (format!("{base}          - name: sidecar\n            image: s:1\n"), &["containers[1]", "sidecar", "initContainers"]),
        (format!("{base}          volumes:\n          - name: data\n            hostPath: {{path: /data}}\n"), &["volumes[data].hostPath", "restricted", "persistentVolumeClaim"]),
        (base.replace("            image: app:1\n\"", "").replace("          - name: w\n            image: app:1\n", "          - name: w\n            image: app:1\n            volumeMounts:\n            - {name: keys, mountPath: /etc/prrte-k8s/secret}\n          volumes:\n          - {name: keys, emptyDir: {}}\n"), &["/etc/prrte-k8s/secret", "secret volume"]),
        (base.replace("          - name: w\n            image: app:1\n", "          - name: w\n            image: app:1\n            volumeMounts:\n            - {name: gone, mountPath: /data}\n"), &["volumeMounts[/data]", "\"gone\""]),
        (base.replace("          - name: w\n            image: app:1\n", "          - name: w\n            image: app:1\n          initContainers:\n          - {name: prrte-k8s-install, image: x}\n"), &["initContainers[0].name", "rename"]),
    ];
    for (text, needles) in cases {
        let e = refused(&text);
        for n in needles {
            assert!(e.contains(n), "missing {n:?} in: {e}\nfor:\n{text}");
        }
        assert!(
            e.contains("; ") || e.contains(": "),
            "cause and remedy: {e}"
        );
    }
    // The typed error names the field, the cause and the remedy apart.
    match from_mpijob(
        &base.replace("            command: [mpirun, ./a]\n", ""),
        &overrides(),
    ) {
        Err(MpiJobError::Field {
            field,
            cause,
            remedy,
        }) => {
            assert!(field.ends_with("containers[0].command"), "{field}");
            assert!(
                !cause.is_empty() && remedy.contains("command"),
                "{cause} / {remedy}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn name_namespace_labels_and_overrides() {
    let text = mpijob("").replace(
        "  name: j\n",
        "  name: j\n  namespace: hpc\n  uid: 1234\n  resourceVersion: \"9\"\n  labels: {team: a}\n  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: \"{}\"\n    owner: me\n",
    );
    let (plan, _) = convert(&text);
    let j = job(&plan);
    assert_eq!(j["metadata"]["namespace"], "hpc");
    assert_eq!(j["metadata"]["labels"]["team"], "a");
    assert_eq!(
        j["metadata"]["labels"]["app.kubernetes.io/name"],
        "prrte-k8s"
    );
    assert_eq!(j["metadata"]["annotations"], json!({"owner": "me"}));
    let o = Overrides {
        name: Some("other".into()),
        namespace: Some("ns2".into()),
        pull_policy: Some("Never".into()),
        env: vec![("PRRTE_K8S_AGENT_KILL_GRACE".into(), "2".into())],
        ..overrides()
    };
    let (plan, _) = from_mpijob(&text, &o).unwrap();
    let j = job(&plan);
    assert_eq!(j["metadata"]["name"], "other");
    assert_eq!(j["metadata"]["namespace"], "ns2");
    let pod = &j["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "Never");
    assert_eq!(pod["initContainers"][0]["imagePullPolicy"], "Never");
    assert!(pod["containers"][0]["env"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "PRRTE_K8S_AGENT_KILL_GRACE", "value": "2"})));
    // The RBAC, Secret and NetworkPolicy are the job's, as for any batch job.
    let kinds: Vec<String> = objects(&plan, Some("k"))
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Secret",
            "Job",
            "NetworkPolicy"
        ]
    );
}

#[test]
fn counts_past_what_a_job_takes_are_refused_naming_the_field_and_the_limit() {
    let base = mpijob("");
    let workers = |n: &str| base.replace("      replicas: 2\n", &format!("      replicas: {n}\n"));
    // u32::MAX workers: the launcher's pod once overflowed the count (a panic, or a Job of 0 pods).
    for n in ["4294967295", "100000"] {
        match from_mpijob(&workers(n), &overrides()) {
            Err(MpiJobError::Field {
                field,
                cause,
                remedy,
            }) => {
                assert_eq!(field, "spec.mpiReplicaSpecs.Worker.replicas");
                assert!(cause.contains(n) && cause.contains("100000"), "{cause}");
                assert!(remedy.contains("at most 99999"), "{remedy}");
            }
            other => panic!("{n} workers: {other:?}"),
        }
    }
    // The most there may be: 99999 workers and the launcher.
    let (plan, _) = convert(&workers("99999"));
    assert_eq!(plan.pods, 100_000);
    assert_eq!(job(&plan)["spec"]["parallelism"], 100_000);
    // The runPolicy's seconds past what a Job's field holds are refused (the typed model's
    // int32), not clamped.
    let policy = |p: &str| base.replace("spec:\n\n", &format!("spec:\n  runPolicy:\n    {p}\n"));
    for (p, needles) in [
        (
            "ttlSecondsAfterFinished: 2147483648",
            ["spec.runPolicy", "2147483648"],
        ),
        (
            "activeDeadlineSeconds: 9223372036854775807",
            ["activeDeadlineSeconds", "9223372036854775807"],
        ),
    ] {
        let r = from_mpijob(&policy(p), &overrides());
        if p.starts_with("active") {
            // The largest int64 a Job takes is taken.
            assert!(r.is_ok(), "{p}: {r:?}");
            continue;
        }
        let e = r.expect_err(p).to_string();
        for n in needles {
            assert!(e.contains(n), "{n:?} missing in {e}");
        }
    }
    let (plan, _) = convert(&policy("ttlSecondsAfterFinished: 2147483647"));
    assert_eq!(job(&plan)["spec"]["ttlSecondsAfterFinished"], 2_147_483_647);
    // A grace period past an int64.
    let o = Overrides {
        grace_period: Some(u64::MAX),
        ..overrides()
    };
    let e = from_mpijob(&base, &o)
        .expect_err("u64::MAX seconds")
        .to_string();
    assert!(
        e.contains("terminationGracePeriodSeconds") && e.contains("9223372036854775807"),
        "{e}"
    );
}
