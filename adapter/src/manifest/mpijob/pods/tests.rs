//! The conversion's pods: security contexts made restricted, and what the Launcher adds to
//! the Worker's pod or differs in.

use serde_json::{json, Value};

use crate::manifest::mpijob::tests::{convert, field, job, mpijob};
use crate::manifest::restricted::violations;

#[test]
fn security_contexts_are_kept_but_made_restricted() {
    let text = mpijob("").replace(
        "          - name: w\n            image: app:1\n",
        "          - name: w
            image: app:1
            securityContext:
              runAsUser: 0
              privileged: true
              allowPrivilegeEscalation: true
              capabilities: {add: [NET_BIND_SERVICE, SYS_PTRACE, IPC_LOCK]}
              seccompProfile: {type: Unconfined}
              readOnlyRootFilesystem: false
          hostNetwork: true
          hostIPC: true
          securityContext:
            sysctls: [{name: kernel.shm_rmid_forced, value: \"1\"}, {name: kernel.msgmax, value: \"65536\"}]
            supplementalGroups: [44]
          initContainers:
          - name: prep
            image: busybox
            securityContext: {privileged: true}
          volumes:
          - {name: tmp, emptyDir: {medium: Memory}}
          - {name: data, persistentVolumeClaim: {claimName: d}}
",
    ).replace("            image: app:1\n\"", "");
    let text = text.replace(
        "            securityContext:\n              runAsUser: 0\n",
        "            volumeMounts:\n            - {name: tmp, mountPath: /scratch}\n            - {name: data, mountPath: /dev/shm}\n            securityContext:\n              runAsUser: 0\n",
    );
    let (plan, notes) = convert(&text);
    let j = job(&plan);
    let tmpl = &j["spec"]["template"];
    assert_eq!(
        violations(tmpl),
        Vec::<String>::new(),
        "restricted:\n{tmpl:#}"
    );
    let pod = &tmpl["spec"];
    let sc = &pod["containers"][0]["securityContext"];
    assert_eq!(sc["runAsUser"], 1000, "root replaced");
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(
        sc["capabilities"],
        json!({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})
    );
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert!(pod.get("hostNetwork").is_none() && pod.get("hostIPC").is_none());
    assert_eq!(
        pod["securityContext"]["sysctls"],
        json!([{"name": "kernel.shm_rmid_forced", "value": "1"}])
    );
    assert_eq!(
        pod["securityContext"]["supplementalGroups"],
        json!([44]),
        "kept"
    );
    let init = pod["initContainers"].as_array().unwrap();
    assert_eq!(init[0]["name"], "prrte-k8s-install");
    assert_eq!(init[1]["name"], "prep");
    assert_eq!(init[1]["securityContext"]["privileged"], false);
    // The user's volume named like ours is renamed, in its mount too; a volume of its own at
    // /dev/shm replaces ours there.
    let vols: Vec<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        vols,
        [
            "secret",
            "tmp",
            "run",
            "kube-api-access",
            "prrte-k8s-runtime",
            "mpijob-tmp",
            "data"
        ]
    );
    let mounts: Vec<(&str, &str)> = pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["mountPath"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        mounts.contains(&("mpijob-tmp", "/scratch")) && mounts.contains(&("data", "/dev/shm")),
        "{mounts:?}"
    );
    assert!(!mounts.iter().any(|m| m.0 == "shm"), "{mounts:?}");
    // Each change is said, with what it was.
    let app = field(&notes, "Worker.template.spec.containers[0].securityContext").unwrap();
    for w in [
        "runAsUser 1000 (was 0)",
        "privileged false (was true)",
        "allowPrivilegeEscalation false (was true)",
        "SYS_PTRACE",
        "seccompProfile",
        "readOnlyRootFilesystem true (was false)",
    ] {
        assert!(app.what.contains(w), "{w}: {app}");
    }
    assert!(
        field(&notes, "spec.hostNetwork").is_some() && field(&notes, "spec.hostIPC").is_some(),
        "{notes:#?}"
    );
    assert!(field(&notes, "Worker.template.spec.securityContext")
        .unwrap()
        .what
        .contains("kernel.msgmax"));
    assert!(
        field(&notes, "initContainers[0].securityContext").is_some(),
        "{notes:#?}"
    );
    assert!(field(&notes, "volumes[tmp]")
        .unwrap()
        .what
        .contains("mpijob-tmp"));
    assert!(
        field(&notes, "volumeMounts[/dev/shm]").is_some(),
        "{notes:#?}"
    );
    // No uid anywhere: uid 1000, said so.
    let (plan, notes) = convert(&mpijob(""));
    let pod = &job(&plan)["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"], 1000);
    assert!(field(&notes, "Worker.template.spec.securityContext")
        .unwrap()
        .what
        .contains("runAsUser 1000 (was unset"));
}

#[test]
fn the_launcher_adds_what_the_worker_lacks_and_differences_are_named() {
    let text = mpijob("")
        .replace(
            "            command: [mpirun, ./a]\n",
            "            command: [mpirun, ./a]
            image: app:2
            workingDir: /work
            env: [{name: OMPI_MCA_btl_base_verbose, value: \"1\"}, {name: SHARED, value: launcher}]
            resources: {limits: {cpu: 1}}
            volumeMounts: [{name: scripts, mountPath: /scripts}]
          volumes: [{name: scripts, configMap: {name: s}}]
          nodeSelector: {pool: cpu}
",
        )
        .replace(
            "            image: app:1\n            command",
            "            command",
        )
        .replace(
            "          - name: w\n            image: app:1\n",
            "          - name: w
            image: app:1
            command: [/usr/sbin/sshd, -De]
            env:
            - {name: SHARED, value: worker}
            - {name: OMPI_MCA_orte_default_hostfile, value: /etc/mpi/hostfile}
            - {name: OMPI_MCA_pml, value: ucx}
            resources: {limits: {cpu: 4, nvidia.com/gpu: 1}}
          nodeSelector: {pool: gpu}
",
        );
    let text = text.replace(
        "    Launcher:\n      template:\n",
        "    Launcher:\n      template:\n        metadata: {labels: {role: launcher}}\n",
    );
    let (plan, notes) = convert(&text);
    let tmpl = &job(&plan)["spec"]["template"];
    assert!(
        tmpl["metadata"]["labels"].get("role").is_none(),
        "the Launcher's labels are not every pod's: {tmpl}"
    );
    let pod = &tmpl["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "app:1", "the Worker's");
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 1);
    assert_eq!(pod["nodeSelector"]["pool"], "gpu");
    let env: Vec<(String, Value)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["value"].clone()))
        .collect();
    let get = |k: &str| env.iter().find(|e| e.0 == k).map(|e| e.1.clone());
    assert_eq!(
        get("OMPI_MCA_btl_base_verbose"),
        Some(json!("1")),
        "the Launcher's own variable"
    );
    assert_eq!(get("SHARED"), Some(json!("worker")));
    assert_eq!(
        get("OMPI_MCA_orte_default_hostfile"),
        None,
        "mpi-operator's hostfile variable dropped"
    );
    assert_eq!(
        get("OMPI_MCA_pml"),
        Some(json!("ucx")),
        "the MPIJob's value wins over the job's"
    );
    assert!(pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "scripts"));
    assert!(c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["mountPath"] == "/scripts"));
    for f in [
        "Launcher.template.spec.containers[0].image",
        "Launcher.template.spec.containers[0].resources",
        "Launcher.template.spec.containers[0].workingDir",
        "Launcher.template.spec.nodeSelector",
        "Launcher.template.metadata.labels[role]",
        "containers[0].env[SHARED]",
        "env[OMPI_MCA_orte_default_hostfile]",
        "env[OMPI_MCA_pml]",
        "Worker.template.spec.containers[0].command",
    ] {
        assert!(field(&notes, f).is_some(), "no note on {f}: {notes:#?}");
    }
    assert!(field(&notes, "Worker.template.spec.containers[0].command")
        .unwrap()
        .what
        .contains("sshd"));
    let wd = field(&notes, "Launcher.template.spec.containers[0].workingDir").unwrap();
    assert!(
        wd.what
            .starts_with("\"/work\" not used: pod 0 (the launcher) gets the Worker's none"),
        "{wd}"
    );
    let res = field(&notes, "Launcher.template.spec.containers[0].resources").unwrap();
    assert!(res.what.contains("nvidia.com/gpu"), "{res}");
}
