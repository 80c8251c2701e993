//! The image as it is deployed: an Indexed Job of 4 pods running the example application image
//! (`make image`: the builder's mpicc, the runtime image with Open MPI 5.0.7 on PRRTE + the k8s
//! components, the agent as entrypoint) as uid 1000 with a read-only root filesystem; from pod 0
//! Open MPI's `mpirun` with `ras k8s` + `plm k8s` runs 8 ranks across the 4 pods, in C and in
//! mpi4py. Nothing from the host is mounted into the pods.
#![forbid(unsafe_code)]
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::mpijob::{allreduce_lines, text, NS};
use sandbox::harness::{run_with_timeout, TestDir};
use std::collections::BTreeSet;
use std::time::Duration;

const APP: &str = "localhost/prrte-k8s-allreduce:latest";

fn job_yaml(job: &str, secret: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: {job}-prrte}}
stringData: {{key: "{secret}"}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: {job}}}
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 4
  template:
    metadata:
      labels: {{app: {job}}}
    spec:
      serviceAccountName: mpi-demo-prrte
      automountServiceAccountToken: true
      subdomain: {job}
      restartPolicy: Never
      securityContext: {{runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000}}
      containers:
      - name: worker
        image: {APP}
        imagePullPolicy: Never
        args: ["--kill-grace", "2"]
        env:
        - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        resources: {{requests: {{cpu: "2"}}}}
        readinessProbe: {{httpGet: {{path: /healthz, port: 7118}}, periodSeconds: 1}}
        securityContext:
          readOnlyRootFilesystem: true
          allowPrivilegeEscalation: false
          capabilities: {{drop: [ALL]}}
        volumeMounts:
        - {{name: tmp, mountPath: /tmp}}
        - {{name: run, mountPath: /var/run/prrte-k8s}}
        - {{name: shm, mountPath: /dev/shm}}
        - {{name: secret, mountPath: /etc/prrte-k8s/secret, readOnly: true}}
      volumes:
      - {{name: tmp, emptyDir: {{}}}}
      - {{name: run, emptyDir: {{}}}}
      - {{name: shm, emptyDir: {{medium: Memory}}}}
      - {{name: secret, secret: {{secretName: {job}-prrte, defaultMode: 288}}}}
"#
    )
}

/// (rank, size, host, ok) of lines `<prefix>allreduce rank=.. size=.. host=.. sum=.. OK`.
fn lines(stdout: &str, prefix: &str) -> Vec<(usize, usize, String, bool)> {
    let stripped: String = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| format!("{l}\n"))
        .collect();
    allreduce_lines(&stripped)
}

fn check_run(what: &str, stdout: &str, prefix: &str, hostnames: &BTreeSet<String>, out: &str) {
    let got = lines(stdout, prefix);
    assert_eq!(got.len(), 8, "{what}: 8 ranks print a line\n{out}");
    let ranks: BTreeSet<usize> = got.iter().map(|l| l.0).collect();
    assert_eq!(ranks, (0..8).collect(), "{what}: ranks 0..8\n{out}");
    assert!(
        got.iter().all(|l| l.1 == 8 && l.3),
        "{what}: size 8, sum 36 on every rank\n{out}"
    );
    assert!(stdout.matches("sum=36 OK").count() == 8, "{what}\n{out}");
    let hosts: BTreeSet<String> = got.iter().map(|l| l.2.clone()).collect();
    assert_eq!(
        &hosts, hostnames,
        "{what}: ranks on the 4 pods' hostnames\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_from_the_image_runs_mpirun_with_ras_and_plm_k8s_as_uid_1000_read_only() {
    let dir = TestDir::new("e2e-image").unwrap();
    let job = format!("img{:04x}", rand::random::<u16>());
    let cluster = Cluster::start(ClusterOptions {
        dir: Some(dir.path().join("cluster")),
        ..Default::default()
    })
    .await
    .unwrap();
    let rbac = sandbox::harness::mpijob::rbac_yaml(&job).unwrap();
    cluster.apply_yaml(&rbac).unwrap();
    let secret = format!("{:032x}", rand::random::<u128>());
    cluster.apply_yaml(&job_yaml(&job, &secret)).unwrap();
    let pods = cluster
        .wait_ready(
            NS,
            &format!("batch.kubernetes.io/job-name={job}"),
            4,
            Duration::from_secs(120),
        )
        .await
        .unwrap_or_else(|e| {
            panic!("4 Ready pods from {APP} (is the image built? `make image`): {e:#}")
        });
    let mut by_index: Vec<(usize, String, String)> = pods
        .iter()
        .map(|p| {
            let idx = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            let host = p["spec"]["hostname"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (idx, name, host)
        })
        .collect();
    by_index.sort();
    let pod0 = by_index[0].1.clone();
    let exec = |argv: &[&str], limit: u64| {
        let cmd = cluster.pod_exec(&pod0, argv).unwrap();
        run_with_timeout(cmd, Duration::from_secs(limit)).unwrap()
    };

    // The pod runs the image as uid 1000 on a read-only root filesystem.
    let o = exec(
        &[
            "sh",
            "-c",
            "id -u; touch /home/mpi/x 2>&1 || echo READ-ONLY; touch /tmp/x && echo TMP-OK",
        ],
        30,
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.lines().next() == Some("1000"), "{}", text(&o));
    assert!(
        out.contains("READ-ONLY") && out.contains("TMP-OK"),
        "{}",
        text(&o)
    );
    let hostnames: BTreeSet<String> = (0..4)
        .map(|i| {
            let o = run_with_timeout(
                cluster.pod_exec(&by_index[i].1, &["hostname"]).unwrap(),
                Duration::from_secs(30),
            )
            .unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
        .collect();
    assert_eq!(
        hostnames.len(),
        4,
        "4 distinct pod hostnames: {hostnames:?}"
    );

    let mpirun = [
        "mpirun", "--mca", "ras", "k8s", "--mca", "plm", "k8s", "-n", "8",
    ];
    let o = exec(&[&mpirun[..], &["/home/mpi/allreduce"]].concat(), 180);
    assert!(o.status.success(), "mpirun of the C program: {}", text(&o));
    check_run(
        "C",
        &String::from_utf8_lossy(&o.stdout),
        "",
        &hostnames,
        &text(&o),
    );

    let o = exec(
        &[&mpirun[..], &["python3", "/home/mpi/allreduce.py"]].concat(),
        180,
    );
    assert!(
        o.status.success(),
        "mpirun of the mpi4py program: {}",
        text(&o)
    );
    check_run(
        "mpi4py",
        &String::from_utf8_lossy(&o.stdout),
        "mpi4py ",
        &hostnames,
        &text(&o),
    );

    cluster.shutdown().unwrap();
}
