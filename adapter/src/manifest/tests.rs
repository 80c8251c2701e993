//! The manifest's unit tests: whole jobs rendered from options (here), elastic jobs
//! (`elastic`), the preemption notice and the Role's hints (`preempt`); their shared helpers in
//! `support`.

mod elastic;
mod preempt;
mod support;

use super::header::quote;
use super::layout::SECRET_DIR;
use super::options::{parse_env, ManifestArgs};
use super::plan::JobPlan;
use super::render;
use super::secret::fresh_key;
use clap::Parser;
use serde_json::{json, Value};
use support::{args, objects, T};

fn plan(a: &ManifestArgs) -> JobPlan {
    a.plan().unwrap()
}

fn kinds(objs: &[Value]) -> Vec<String> {
    objs.iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn batch_job_has_everything() {
    let a = args(&[
        "--name",
        "ar",
        "--pods",
        "4",
        "--cpu",
        "2",
        "--",
        "mpirun",
        "-n",
        "8",
        "./allreduce",
    ]);
    let key = fresh_key();
    assert_eq!(key.len(), 64);
    assert_ne!(key, fresh_key());
    let objs = objects(&a, Some(&key)).unwrap();
    assert_eq!(
        kinds(&objs),
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Secret",
            "Job",
            "NetworkPolicy"
        ]
    );
    let role = &objs[1];
    assert_eq!(
        role["rules"][0],
        json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]})
    );
    assert_eq!(
        role["rules"][1],
        json!({"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": ["ar"], "verbs": ["get"]}),
        "the owner is read by name only"
    );
    assert_eq!(role["rules"].as_array().unwrap().len(), 2);
    let job = &objs[4];
    let spec = &job["spec"];
    assert_eq!(spec["completions"], 4);
    assert_eq!(spec["parallelism"], 4);
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["backoffLimit"], 0);
    assert_eq!(spec["successPolicy"]["rules"][0]["succeededIndexes"], "0");
    assert_eq!(spec["ttlSecondsAfterFinished"], 3600);
    let pod = &spec["template"]["spec"];
    let c = &pod["containers"][0];
    let cmd: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        cmd,
        [
            "prrte-k8s-agent",
            "--prted",
            "/opt/prrte/bin/prted",
            "--run",
            "--",
            "mpirun",
            "-n",
            "8",
            "./allreduce"
        ]
    );
    assert_eq!(c["resources"]["requests"]["cpu"], "2");
    assert!(!c["image"].as_str().unwrap().is_empty());
    // restricted pod security
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert!(pod["securityContext"]["runAsUser"].as_u64().unwrap() >= 1000);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    for p in ["/tmp", "/var/run/prrte-k8s", "/dev/shm", SECRET_DIR] {
        assert!(mounts.contains(&p), "{p} mounted: {mounts:?}");
    }
    assert_eq!(pod["volumes"][3]["emptyDir"]["medium"], "Memory");
    // The token only in the agent's container, read-only, where in-cluster clients look.
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["serviceAccountName"], "ar-prrte");
    let api = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount")
        .expect("the API access mount");
    assert_eq!(api["readOnly"], true);
    let vol = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == api["name"])
        .unwrap();
    let sources: Vec<&str> = vol["projected"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert_eq!(sources, ["serviceAccountToken", "configMap", "downwardAPI"]);
    // Pods carry the job's own label besides the Job controller's.
    let labels = &job["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["prrte-k8s.io/job"], "ar");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "ar");
    // pinned ports in the env, and exactly those in the policy
    let env = |k: &str| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == k)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        env("PRTE_MCA_oob_tcp_dynamic_ipv4_ports"),
        Some(json!("7121"))
    );
    assert_eq!(env("OMPI_MCA_btl_tcp_port_min_v4"), Some(json!("7200")));
    assert_eq!(env("OMPI_MCA_btl_tcp_port_range_v4"), Some(json!("100")));
    let np = &objs[5]["spec"];
    let own = json!({"matchLabels": {"prrte-k8s.io/job": "ar"}});
    assert_eq!(np["podSelector"], own);
    assert_eq!(np["ingress"][0]["from"], json!([{"podSelector": own}]));
    assert_eq!(np["policyTypes"], json!(["Ingress", "Egress"]));
    // Out: the job's pods on the same ports, the cluster DNS, the API server; nothing else.
    let egress = np["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 3, "{egress:?}");
    assert_eq!(egress[0]["to"], json!([{"podSelector": own}]));
    assert_eq!(egress[0]["ports"], np["ingress"][0]["ports"]);
    assert_eq!(
        egress[1]["to"][0]["podSelector"]["matchLabels"]["k8s-app"],
        "kube-dns"
    );
    assert_eq!(
        egress[1]["ports"],
        json!([{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}])
    );
    assert_eq!(
        egress[2]["to"],
        json!([{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}]),
        "no cloud metadata endpoint"
    );
    assert_eq!(
        egress[2]["ports"],
        json!([{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}])
    );
    for e in egress {
        assert!(e["to"].as_array().is_some_and(|t| !t.is_empty()), "{e}");
        assert!(e["ports"].as_array().is_some_and(|p| !p.is_empty()), "{e}");
    }
    let narrowed = objects(
        &args(&[
            "--name",
            "ar",
            "--api-server-cidr",
            "10.0.0.17/32",
            "--api-server-cidr",
            "192.168.7.9/24",
        ]),
        None,
    )
    .unwrap();
    assert_eq!(
        narrowed.last().unwrap()["spec"]["egress"][2]["to"],
        json!([{"ipBlock": {"cidr": "10.0.0.17/32"}}, {"ipBlock": {"cidr": "192.168.7.0/24"}}])
    );
    assert!(T::try_parse_from(["m", "--api-server-cidr", "10.0.0.300/8"]).is_err());
    // The endpoints' ports too (those the cluster names with --api-server-from-cluster).
    let narrowed = objects(
        &args(&[
            "--name",
            "ar",
            "--api-server-cidr",
            "172.18.0.2/32",
            "--api-server-port",
            "8443",
        ]),
        None,
    )
    .unwrap();
    let api = &narrowed.last().unwrap()["spec"]["egress"][2];
    assert_eq!(api["to"], json!([{"ipBlock": {"cidr": "172.18.0.2/32"}}]));
    assert_eq!(api["ports"], json!([{"protocol": "TCP", "port": 8443}]));
    for bad in [
        &["m", "--api-server-port", "0"][..],
        &[
            "m",
            "--api-server-from-cluster",
            "--api-server-cidr",
            "10.0.0.1/32",
        ],
    ] {
        assert!(T::try_parse_from(bad).is_err(), "{bad:?}");
    }
    let ports: Vec<(u64, Option<u64>)> = np["ingress"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["port"].as_u64().unwrap(), p["endPort"].as_u64()))
        .collect();
    assert_eq!(
        ports,
        [(7117, None), (7118, None), (7121, None), (7200, Some(7299))],
        "batch: no tool port"
    );
    // the Secret carries the key
    use base64::Engine;
    let stored = base64::engine::general_purpose::STANDARD
        .decode(objs[3]["data"]["key"].as_str().unwrap())
        .unwrap();
    assert_eq!(stored, key.as_bytes());
}

#[test]
fn interactive_statefulset_and_jobset() {
    let a = args(&[
        "--kind",
        "statefulset",
        "--name",
        "dvm",
        "--pods",
        "3",
        "--gpus",
        "1",
        "-n",
        "hpc",
    ]);
    let objs = objects(&a, None).unwrap();
    assert_eq!(
        kinds(&objs),
        [
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "StatefulSet",
            "NetworkPolicy"
        ]
    );
    assert_eq!(objs[1]["rules"][1]["resources"], json!(["statefulsets"]));
    assert_eq!(objs[1]["rules"][1]["resourceNames"], json!(["dvm"]));
    assert_eq!(objs[2]["subjects"][0]["namespace"], "hpc");
    let sts = &objs[3];
    assert_eq!(sts["metadata"]["namespace"], "hpc");
    let c = &sts["spec"]["template"]["spec"]["containers"][0];
    assert!(c["command"]
        .as_array()
        .unwrap()
        .contains(&json!("--dvm-head")));
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert!(c["env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "POD_INDEX"));
    assert!(sts["spec"]["template"]["spec"]
        .get("restartPolicy")
        .is_none());
    // The StatefulSet and its policy select the job's own label, not the one Helm puts on
    // every pod of a release.
    let own = json!({"matchLabels": {"prrte-k8s.io/job": "dvm"}});
    assert_eq!(sts["spec"]["selector"], own);
    assert_eq!(
        sts["spec"]["template"]["metadata"]["labels"]["prrte-k8s.io/job"],
        "dvm"
    );
    assert_eq!(objs[4]["spec"]["podSelector"], own);
    assert_eq!(
        objs[4]["spec"]["ingress"][0]["from"],
        json!([{"podSelector": own}])
    );
    assert!(!objs[4]
        .to_string()
        .contains("app.kubernetes.io/instance\":\"dvm\"}"));
    assert!(objs[4]["spec"]["ingress"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["port"] == 7120));
    let e = objects(&args(&["--kind", "statefulset", "--", "true"]), None).unwrap_err();
    assert!(e.to_string().contains("interactive"), "{e}");

    let a = args(&[
        "--kind",
        "jobset",
        "--name",
        "js",
        "--success",
        "all",
        "--deadline",
        "600",
        "--",
        "mpirun",
        "./x",
    ]);
    let objs = objects(&a, None).unwrap();
    assert_eq!(objs[1]["rules"][1]["resources"], json!(["jobsets"]));
    assert_eq!(objs[1]["rules"][1]["resourceNames"], json!(["js"]));
    let js = &objs[3];
    let job = &js["spec"]["replicatedJobs"][0]["template"]["spec"];
    assert!(job.get("successPolicy").is_none(), "--success all");
    assert_eq!(job["activeDeadlineSeconds"], 600);
    assert_eq!(
        objs[4]["spec"]["podSelector"],
        json!({"matchLabels": {"prrte-k8s.io/job": "js"}})
    );
    let labels = &job["template"]["metadata"]["labels"];
    assert_eq!(labels["prrte-k8s.io/job"], "js");
    assert_eq!(labels["jobset.sigs.k8s.io/jobset-name"], "js");
}

#[test]
fn jobset_max_restarts_is_its_failure_policy() {
    let js = |v: &[&str]| {
        let objs = objects(&args(v), None).unwrap();
        objs.into_iter().find(|o| o["kind"] == "JobSet").unwrap()
    };
    let base = ["--kind", "jobset", "--name", "js", "--", "mpirun", "./x"];
    assert_eq!(
        js(&base)["spec"]["failurePolicy"],
        json!({"maxRestarts": 0})
    );
    let mut v = vec!["--max-restarts", "3"];
    v.extend(base);
    let restarting = js(&v);
    assert_eq!(
        restarting["spec"]["failurePolicy"],
        json!({"maxRestarts": 3})
    );
    // Only the failure policy differs.
    let mut without = restarting.clone();
    without["spec"]["failurePolicy"]["maxRestarts"] = json!(0);
    assert_eq!(without, js(&base));
    for kind in ["job", "statefulset"] {
        let e = objects(&args(&["--kind", kind, "--max-restarts", "1"]), None).unwrap_err();
        assert!(
            e.to_string().contains("--max-restarts") && e.to_string().contains("--kind jobset"),
            "{e}"
        );
    }
    let argv = ["manifest", "--from-mpijob", "x.yaml", "--max-restarts", "1"];
    assert!(
        T::try_parse_from(argv).is_err(),
        "an MPIJob is not a JobSet"
    );
}

#[test]
fn options_are_checked_and_header_says_how() {
    assert!(objects(&args(&["--name", "Bad_Name"]), None)
        .unwrap_err()
        .to_string()
        .contains("--name"));
    let a = args(&[
        "--name",
        "x",
        "--only",
        "rbac,networkpolicy",
        "--env",
        "A=b c",
        "--slots",
        "3",
    ]);
    let objs = objects(&a, Some("k")).unwrap();
    assert_eq!(
        kinds(&objs),
        ["ServiceAccount", "Role", "RoleBinding", "NetworkPolicy"]
    );
    let a = args(&[
        "--name",
        "x",
        "--env",
        "A=b c",
        "--slots",
        "3",
        "--",
        "sh",
        "-c",
        "echo 'hi'",
    ]);
    let t = render::render(&plan(&a), "--name x -- sh -c 'echo '\\''hi'\\'''", None).unwrap();
    assert!(t.starts_with("# Generated by: prrte-k8s manifest --name x"));
    assert!(t.contains("kubectl create secret generic x-prrte"));
    assert!(!t.contains("kind: Secret"));
    let objs = objects(&a, None).unwrap();
    let tmpl = &objs[3]["spec"]["template"];
    assert_eq!(
        tmpl["metadata"]["annotations"][crate::discovery::SLOTS_ANNOTATION],
        "3"
    );
    assert!(tmpl["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "A", "value": "b c"})));
    assert_eq!(quote("echo 'hi'"), "'echo '\\''hi'\\'''");
    assert_eq!(quote("-n"), "-n");
    assert_eq!(quote("a\nb's\\"), "$'a\\nb\\'s\\\\'");
    assert_eq!(quote("\u{1}"), "$'\\x01'");
    assert!(parse_env("1X=2").is_err() && parse_env("noequals").is_err());
}

#[test]
fn a_multi_line_command_stays_in_its_comments_and_in_the_job() {
    let script = "import sys\nprint('x')\nsys.exit(3)\n";
    let a = args(&["--name", "m", "--", "python3", "-c", script]);
    let argv_text = ["--name", "m", "--", "python3", "-c", script]
        .iter()
        .map(|s| quote(s))
        .collect::<Vec<_>>()
        .join(" ");
    let t = render::render(&plan(&a), &argv_text, Some(&fresh_key())).unwrap();
    let header: Vec<&str> = t.lines().take_while(|l| *l != "---").collect();
    assert!(
        header.iter().all(|l| l.starts_with("# ")),
        "every header line is a comment:\n{t}"
    );
    let docs: Vec<Value> = t
        .split("\n---\n")
        .skip(1)
        .map(|d| serde_yaml::from_str(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 6, "{t}");
    let c = &docs[4]["spec"]["template"]["spec"]["containers"][0];
    let cmd: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(cmd[cmd.len() - 3..], ["python3", "-c", script]);
}

#[test]
fn inject_puts_the_runtime_into_any_image() {
    let a = args(&[
        "--name",
        "inj",
        "--image",
        "debian-openmpi:trixie",
        "--inject",
        "--mpi",
        "openmpi",
        "--image-pull-policy",
        "Never",
        "--",
        "mpirun",
        "-n",
        "2",
        "/home/mpiuser/pi",
    ]);
    let objs = objects(&a, None).unwrap();
    let pod = &objs[3]["spec"]["template"]["spec"];
    let init = pod["initContainers"].as_array().unwrap();
    assert_eq!(init.len(), 1);
    let i = &init[0];
    assert_eq!(i["name"], "prrte-k8s-install");
    assert_eq!(i["image"], "localhost/prrte-k8s-inject:latest");
    assert_eq!(i["imagePullPolicy"], "Never");
    assert_eq!(
        i["command"],
        json!([
            "/opt/prrte-k8s-bundle/bin/prrte-k8s",
            "install-runtime",
            "--to",
            "/opt/prrte-k8s"
        ])
    );
    // The runtime's init container gets no service-account token.
    assert_eq!(
        i["volumeMounts"],
        json!([{"name": "prrte-k8s-runtime", "mountPath": "/opt/prrte-k8s"}])
    );
    assert_eq!(pod["automountServiceAccountToken"], false);
    let sc = &i["securityContext"];
    assert_eq!(sc["runAsUser"], 1000);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(i["resources"]["requests"], i["resources"]["limits"]);
    assert!(pod["volumes"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "prrte-k8s-runtime", "emptyDir": {}})));
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "debian-openmpi:trixie");
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
    assert!(c["volumeMounts"].as_array().unwrap().contains(
        &json!({"name": "prrte-k8s-runtime", "mountPath": "/opt/prrte-k8s", "readOnly": true})
    ));
    let btl = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "OMPI_MCA_btl")
        .unwrap();
    assert!(
        btl["value"].as_str().unwrap().starts_with('^'),
        "fabrics excluded, not an include list naming sm: {btl}"
    );
    // Without --inject nothing of that.
    let plain = objects(&args(&["--name", "p", "--", "true"]), None).unwrap();
    let pod = &plain[3]["spec"]["template"]["spec"];
    assert!(pod.get("initContainers").is_none());
    assert_eq!(pod["containers"][0]["command"][1], "--prted");
    // --mpi auto is the default; interactive jobs too.
    let objs = objects(
        &args(&["--name", "i", "--inject", "--kind", "statefulset"]),
        None,
    )
    .unwrap();
    let c = &objs[3]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"][1], "--mpi");
    assert_eq!(c["command"][2], "auto");
    assert_eq!(c["command"][3], "--dvm-head");
    // The options that only mean something with --inject, and those it replaces.
    for bad in [
        &["--inject-image", "x"][..],
        &["--mpi", "mpich"],
        &["--inject", "--agent", "/a"],
        &["--inject", "--prrte-prefix", "/p"],
    ] {
        let mut argv = vec!["manifest"];
        argv.extend(bad);
        assert!(T::try_parse_from(&argv).is_err(), "{bad:?} is refused");
    }
}

/// Every object `prrte-k8s manifest` prints, of every kind (elastic ones and their admission
/// policies too), carries the annotation the MPIJob controller refuses to adopt; the objects
/// the controller renders for itself (`objects`) do not.
#[test]
fn every_printed_object_is_marked_as_rendered() {
    use super::meta::{RENDERED_BY, RENDERED_BY_VALUE};
    use serde::Deserialize;
    for v in [
        &["--name", "m", "--", "hostname"][..],
        &["--name", "m", "--kind", "statefulset"],
        &["--name", "m", "--kind", "jobset", "--", "hostname"],
        &[
            "--name",
            "m",
            "--elastic",
            "--max-pods",
            "4",
            "--",
            "hostname",
        ],
        &[
            "--name",
            "m",
            "--kind",
            "statefulset",
            "--elastic",
            "--max-pods",
            "4",
        ],
    ] {
        let p = plan(&args(v));
        let text = render(&p, &v.join(" "), Some(&fresh_key())).unwrap();
        let printed: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|d| !d.is_null())
            .collect();
        assert_eq!(
            printed.len(),
            objects(&args(v), Some("k")).unwrap().len(),
            "{v:?}"
        );
        for o in &printed {
            assert_eq!(
                o["metadata"]["annotations"][RENDERED_BY], RENDERED_BY_VALUE,
                "{v:?}: {} {}",
                o["kind"], o["metadata"]["name"]
            );
        }
        for o in objects(&args(v), Some("k")).unwrap() {
            assert!(
                o["metadata"]["annotations"].get(RENDERED_BY).is_none(),
                "{o}"
            );
        }
    }
}
