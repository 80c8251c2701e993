//! Pods as a node runs them: init containers in order, a failing one failing the pod (and its
//! Job through podFailurePolicy), several containers from different images sharing the pod's
//! network, hostname, IPC and volumes, native sidecars, readiness of a multi-container pod,
//! `kubectl logs -c`, short image names and `imagePullPolicy: Always`, a projected
//! service-account token only in the container that mounts it. What kubectl shows is
//! checked with kubectl. Needs root, buildah and busybox-static.

use sandbox::api::Obj;
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::unique;
use sandbox::images;
use sandbox::runtime::podnet;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// Runs kubectl against the cluster: (success, stdout, stderr).
fn kubectl(c: &Cluster, args: &[&str]) -> (bool, String, String) {
    let out = kubectl_cmd(c, args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

fn kubectl_cmd(c: &Cluster, args: &[&str]) -> Command {
    let kubectl =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let mut cmd = Command::new(kubectl);
    cmd.arg("--kubeconfig").arg(c.kubeconfig()).args(args);
    cmd.stdin(Stdio::null());
    cmd
}

/// The READY and STATUS columns `kubectl get pod` shows.
fn kubectl_row(c: &Cluster, pod: &str) -> (String, String) {
    let (ok, out, err) = kubectl(c, &["get", "pod", pod, "--no-headers"]);
    assert!(ok, "kubectl get pod {pod}: {err}");
    let cols: Vec<&str> = out.split_whitespace().collect();
    (cols[1].to_string(), cols[2].to_string())
}

/// `kubectl get pods -l app=APP -w`, its rows going to a file.
struct Watch {
    child: Child,
    out: tempfile::NamedTempFile,
}

impl Watch {
    fn start(c: &Cluster, app: &str) -> Watch {
        let out = tempfile::NamedTempFile::new().unwrap();
        let child = kubectl_cmd(
            c,
            &[
                "get",
                "pods",
                "-l",
                &format!("app={app}"),
                "-w",
                "--no-headers",
            ],
        )
        .stdout(out.reopen().unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        Watch { child, out }
    }

    /// The STATUS column of every row so far.
    fn statuses(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.out.path()).unwrap_or_default();
        text.lines()
            .filter_map(|l| l.split_whitespace().nth(2).map(String::from))
            .collect()
    }

    fn wait_for(&self, status: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.statuses().iter().any(|s| s == status) {
            assert!(
                Instant::now() < deadline,
                "kubectl -w never showed {status}: {:?}",
                self.statuses()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `check` holds for pod `name`; returns the pod.
async fn wait_pod(c: &Cluster, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Obj {
    let name = name.to_string();
    sandbox::cluster::wait_pods(&c.store(), "default", "", WAIT, |pods| {
        pods.iter()
            .find(|p| p["metadata"]["name"] == name.as_str() && check(p))
            .cloned()
    })
    .await
    .unwrap_or_else(|e| panic!("pod {name} never {what}: {e:#}"))
}

/// Runs `script` in container `container` of `pod`; its stdout (the exit must be 0).
fn sh_in(c: &Cluster, pod: &str, container: &str, script: &str) -> String {
    let (code, out, err) = c
        .container_run(pod, container, &["sh", "-c", script])
        .unwrap();
    assert_eq!(code, 0, "`{script}` in {pod}/{container}: {out}\n{err}");
    out
}

fn status_of<'a>(p: &'a Value, list: &str, container: &str) -> &'a Value {
    p["status"][list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == container))
        .unwrap_or_else(|| panic!("no {list} entry for {container}: {p}"))
}

fn assert_clean(prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !podnet::leftovers(prefix).is_empty() {
        assert!(Instant::now() < deadline, "{}", podnet::leftovers(prefix));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The test image (`root`: its root variant) with `/etc/marker` holding `marker` and an empty
/// `/etc/marker-<marker>`, built once into the local store.
fn marker_image(marker: &str, root: bool) -> String {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let base = images::test_image(root).expect("building the test image");
    let id = images::inspect(&base).unwrap().unwrap().id;
    let name = format!("localhost/prrte-k8s-test/marker-{marker}:{}", &id[..12]);
    if images::inspect(&name).unwrap().is_some() {
        return name;
    }
    let lock =
        std::fs::File::create(std::env::temp_dir().join("prrte-k8s-test-marker.lock")).unwrap();
    let _flock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    if images::inspect(&name).unwrap().is_some() {
        return name;
    }
    let ctr = format!("prrte-k8s-test-marker-{}", std::process::id());
    let buildah = |args: &[&str]| {
        let out = Command::new("buildah").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "buildah {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    buildah(&["from", "--pull-never", "--quiet", "--name", &ctr, &base]);
    let root_dir = buildah(&["mount", &ctr]);
    let etc = Path::new(&root_dir).join("etc");
    std::fs::write(etc.join("marker"), format!("{marker}\n")).unwrap();
    std::fs::write(etc.join(format!("marker-{marker}")), "").unwrap();
    buildah(&["commit", "--quiet", &ctr, &name]);
    buildah(&["rm", &ctr]);
    name
}

/// Removes an image name from the local store when dropped (the image keeps its others).
struct Untag(String);

impl Drop for Untag {
    fn drop(&mut self) {
        let _ = images::untag(&self.0);
    }
}

fn tag(image: &str, name: &str) -> Untag {
    images::tag(image, name).unwrap_or_else(|e| panic!("tagging {image} as {name}: {e:#}"));
    Untag(name.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_before_the_containers() {
    let image = images::test_image(false).expect("building the test image");
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let pod = unique("init");
    let watch = Watch::start(&cluster, &pod);
    let mount = "volumeMounts: [{name: work, mountPath: /work}]";
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {pod}, labels: {{app: {pod}}}}}
spec:
  restartPolicy: Never
  volumes: [{{name: work, emptyDir: {{}}}}]
  initContainers:
  - name: first
    image: {image}
    command: [sh, -c, "until [ -e /work/go ]; do sleep 0.05; done; echo first > /work/order"]
    {mount}
  - name: second
    image: {image}
    command: [sh, -c, "test \"$(cat /work/order)\" = first && echo second >> /work/order && echo second-ran"]
    {mount}
  containers:
  - name: main
    image: {image}
    command: [sh, -c, "cat /work/order; until [ -e /work/done ]; do sleep 0.05; done"]
    {mount}
"#
        ))
        .unwrap();
    // The first init container runs (and waits); nothing else has started.
    let p = wait_pod(&cluster, &pod, "ran its first init container", |p| {
        p.pointer("/status/initContainerStatuses/0/state/running")
            .is_some()
    })
    .await;
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(
        status_of(&p, "initContainerStatuses", "second")["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(
        status_of(&p, "containerStatuses", "main")["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(
        kubectl_row(&cluster, &pod),
        ("0/1".into(), "Init:0/2".into())
    );
    watch.wait_for("Init:0/2");
    // The second sees what the first wrote in the shared emptyDir; then the container runs.
    sh_in(&cluster, &pod, "first", "touch /work/go");
    let p = wait_pod(&cluster, &pod, "ran its container", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    for c in ["first", "second"] {
        let t = &status_of(&p, "initContainerStatuses", c)["state"]["terminated"];
        assert_eq!(
            (t["exitCode"].as_i64(), t["reason"].as_str()),
            (Some(0), Some("Completed")),
            "{c}"
        );
    }
    assert_eq!(
        kubectl_row(&cluster, &pod),
        ("1/1".into(), "Running".into())
    );
    assert_eq!(kubectl(&cluster, &["logs", &pod]).1, "first\nsecond");
    assert_eq!(
        kubectl(&cluster, &["logs", &pod, "-c", "second"]).1,
        "second-ran"
    );
    sh_in(&cluster, &pod, "main", "touch /work/done");
    let p = wait_pod(&cluster, &pod, "succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(
        status_of(&p, "containerStatuses", "main")["state"]["terminated"]["exitCode"],
        0
    );
    assert_eq!(kubectl_row(&cluster, &pod).1, "Completed");
    watch.wait_for("Completed");
    // Every stage, in order, as `kubectl get pods -w` showed it.
    let seen = watch.statuses();
    let stages = [
        "Init:0/2",
        "Init:1/2",
        "PodInitializing",
        "Running",
        "Completed",
    ];
    let mut at = seen.iter();
    for s in stages {
        assert!(
            at.any(|x| x == s),
            "{s} missing or out of order in {seen:?}"
        );
    }
    drop(watch);
    cluster.shutdown().unwrap();
    assert_clean(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_init_container_fails_the_pod_and_its_job_by_pod_failure_policy() {
    let image = images::test_image(false).expect("building the test image");
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let job = unique("initfail");
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: {job}}}
spec:
  backoffLimit: 6
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {{containerName: setup, operator: In, values: [3]}}
  template:
    metadata: {{labels: {{app: {job}}}}}
    spec:
      restartPolicy: Never
      initContainers:
      - {{name: setup, image: {image}, command: [sh, -c, "echo setting up; exit 3"]}}
      containers:
      - {{name: main, image: {image}, command: [sh, -c, "echo must not run"]}}
"#
        ))
        .unwrap();
    let (ok, out, err) = kubectl(
        &cluster,
        &[
            "wait",
            "--for=condition=failed",
            &format!("job/{job}"),
            "--timeout=60s",
        ],
    );
    assert!(ok, "{out}\n{err}");
    let j = cluster
        .store()
        .get(&sandbox::api::resources::JOBS, "default", &job)
        .unwrap();
    let failed = j["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap();
    let pods = cluster
        .store()
        .list(
            &sandbox::api::resources::PODS,
            Some("default"),
            &Default::default(),
        )
        .unwrap()
        .items;
    let p = pods
        .iter()
        .find(|p| p["metadata"]["labels"]["app"] == job.as_str())
        .unwrap();
    let name = p["metadata"]["name"].as_str().unwrap();
    assert_eq!(failed["reason"], "PodFailurePolicy");
    assert_eq!(
        failed["message"],
        format!("Container setup for pod default/{name} failed with exit code 3 matching FailJob rule at index 0").as_str()
    );
    let p = wait_pod(&cluster, name, "failed", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    let t = &status_of(&p, "initContainerStatuses", "setup")["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(3), Some("Error"))
    );
    assert_eq!(
        status_of(&p, "containerStatuses", "main")["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(
        kubectl_row(&cluster, name),
        ("0/1".into(), "Init:Error".into())
    );
    assert_eq!(
        kubectl(&cluster, &["logs", name, "-c", "setup"]).1,
        "setting up"
    );
    let (ok, _, err) = kubectl(&cluster, &["logs", name, "-c", "main"]);
    assert!(
        !ok && err.contains("is waiting to start: PodInitializing"),
        "{err}"
    );
    cluster.shutdown().unwrap();
    assert_clean(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_of_two_images_share_network_hostname_and_volumes_not_root_filesystems() {
    let (a, b) = (marker_image("a", false), marker_image("b", true));
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let pod = unique("duo");
    let shared = "{name: shared, mountPath: /shared}, {name: shm, mountPath: /dev/shm}";
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {pod}, labels: {{app: {pod}}}}}
spec:
  volumes: [{{name: shared, emptyDir: {{}}}}, {{name: shm, emptyDir: {{medium: Memory}}}}]
  containers:
  - name: server
    image: {a}
    command: [sh, -c, "echo server-up; mkdir -p /tmp/www && echo pong > /tmp/www/ping && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"]
    readinessProbe: {{exec: {{command: [wget, -qO-, "http://127.0.0.1:8080/ping"]}}, periodSeconds: 1}}
    volumeMounts: [{shared}]
  - name: client
    image: {b}
    command: [sh, -c, "echo client-up; exec sleep 3600"]
    readinessProbe: {{exec: {{command: [test, -e, /shared/ready]}}, periodSeconds: 1}}
    volumeMounts: [{shared}, {{name: shared, mountPath: /ro, readOnly: true}}]
"#
        ))
        .unwrap();
    // Ready only when both are: the server's probe passes first.
    let p = wait_pod(&cluster, &pod, "had a ready server", |p| {
        p["status"]["phase"] == "Running"
            && status_of(p, "containerStatuses", "server")["ready"] == true
    })
    .await;
    let ready = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["message"], "containers with unready status: [client]");
    assert_eq!(
        kubectl_row(&cluster, &pod),
        ("1/2".into(), "Running".into())
    );
    // One network: the client reaches the server's listener on 127.0.0.1.
    assert_eq!(
        sh_in(
            &cluster,
            &pod,
            "client",
            "wget -qO- http://127.0.0.1:8080/ping"
        ),
        "pong"
    );
    // One hostname; each its own image's root filesystem and user.
    for c in ["server", "client"] {
        assert_eq!(sh_in(&cluster, &pod, c, "hostname"), pod);
    }
    sh_in(
        &cluster,
        &pod,
        "server",
        "test -e /etc/marker-a && test ! -e /etc/marker-b && test \"$(id -u)\" = 1000",
    );
    sh_in(
        &cluster,
        &pod,
        "client",
        "test -e /etc/marker-b && test ! -e /etc/marker-a && test \"$(id -u)\" = 0",
    );
    sh_in(&cluster, &pod, "client", "echo only-here > /etc/written");
    sh_in(&cluster, &pod, "server", "test ! -e /etc/written");
    // The same emptyDir (also memory-backed) in both; a readOnly mount refuses writes.
    sh_in(
        &cluster,
        &pod,
        "server",
        "echo from-server > /shared/x && echo in-memory > /dev/shm/y",
    );
    assert_eq!(
        sh_in(&cluster, &pod, "client", "cat /shared/x /ro/x /dev/shm/y"),
        "from-server\nfrom-server\nin-memory"
    );
    assert_eq!(
        sh_in(&cluster, &pod, "client", "stat -f -c %T /dev/shm"),
        "tmpfs"
    );
    let (code, _, err) = cluster
        .container_run(&pod, "client", &["touch", "/ro/z"])
        .unwrap();
    assert!(code != 0 && err.contains("Read-only file system"), "{err}");
    // Each its own processes, log and status.
    assert!(sh_in(&cluster, &pod, "server", "cat /proc/1/cmdline").starts_with("httpd"));
    assert!(sh_in(&cluster, &pod, "client", "cat /proc/1/cmdline").starts_with("sleep"));
    assert_eq!(
        kubectl(&cluster, &["logs", &pod, "-c", "server"]).1,
        "server-up"
    );
    assert_eq!(
        kubectl(&cluster, &["logs", &pod, "-c", "client"]).1,
        "client-up"
    );
    // Without -c, kubectl (1.24 and later) takes the first container and says which.
    let (ok, out, err) = kubectl(&cluster, &["logs", &pod]);
    assert!(
        ok && out == "server-up"
            && err.contains(r#"Defaulted container "server" out of: server, client"#),
        "{out}\n{err}"
    );
    sh_in(&cluster, &pod, "server", "touch /shared/ready");
    let p = wait_pod(&cluster, &pod, "was Ready", sandbox::cluster::pod_ready).await;
    assert_eq!(
        kubectl_row(&cluster, &pod),
        ("2/2".into(), "Running".into())
    );
    let ids: Vec<&str> = ["server", "client"]
        .iter()
        .map(|c| {
            status_of(&p, "containerStatuses", c)["imageID"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    cluster.shutdown().unwrap();
    assert_clean(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_sidecar_runs_alongside_and_the_pod_still_completes() {
    let image = images::test_image(false).expect("building the test image");
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let pod = unique("sidecar");
    let mount = "volumeMounts: [{name: work, mountPath: /work}]";
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {pod}, labels: {{app: {pod}}}}}
spec:
  restartPolicy: Never
  volumes: [{{name: work, emptyDir: {{}}}}]
  initContainers:
  - name: side
    image: {image}
    restartPolicy: Always
    command: [sh, -c, "mkdir -p /tmp/www && echo side-serving > /tmp/www/s && exec httpd -f -p 127.0.0.1:8081 -h /tmp/www"]
    startupProbe: {{exec: {{command: [wget, -qO-, "http://127.0.0.1:8081/s"]}}, periodSeconds: 1, failureThreshold: 30}}
    {mount}
  - name: after
    image: {image}
    command: [sh, -c, "wget -qO- http://127.0.0.1:8081/s > /work/after"]
    {mount}
  containers:
  - name: main
    image: {image}
    command: [sh, -c, "cat /work/after; until [ -e /work/go ]; do sleep 0.05; done; wget -qO- http://127.0.0.1:8081/s"]
    {mount}
"#
        ))
        .unwrap();
    // The next init container started only once the sidecar served; it keeps running.
    let p = wait_pod(&cluster, &pod, "ran its container", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let side = status_of(&p, "initContainerStatuses", "side");
    assert!(
        side["state"]["running"].is_object() && side["started"] == true,
        "{side}"
    );
    assert_eq!(
        status_of(&p, "initContainerStatuses", "after")["state"]["terminated"]["exitCode"],
        0
    );
    wait_pod(&cluster, &pod, "was Ready", sandbox::cluster::pod_ready).await;
    assert_eq!(
        kubectl_row(&cluster, &pod),
        ("2/2".into(), "Running".into())
    );
    sh_in(&cluster, &pod, "side", "touch /work/go");
    // The pod completes with its regular container; the sidecar is stopped after it.
    let p = wait_pod(&cluster, &pod, "succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })
    .await;
    assert_eq!(
        status_of(&p, "containerStatuses", "main")["state"]["terminated"]["exitCode"],
        0
    );
    assert!(
        status_of(&p, "initContainerStatuses", "side")["state"]["terminated"].is_object(),
        "{p}"
    );
    assert_eq!(
        kubectl_row(&cluster, &pod),
        ("0/2".into(), "Completed".into())
    );
    assert_eq!(
        kubectl(&cluster, &["logs", &pod, "-c", "main"]).1,
        "side-serving\nside-serving"
    );
    assert!(
        cluster.pod_exec(&pod, &["true"]).is_err(),
        "nothing runs in a completed pod"
    );
    cluster.shutdown().unwrap();
    assert_clean(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_names_resolve_and_pull_policy_always_picks_up_a_retagged_image() {
    let (a, b) = (marker_image("a", false), marker_image("b", true));
    let id = |i: &str| format!("sha256:{}", images::inspect(i).unwrap().unwrap().id);
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let (pod, repo) = (unique("names"), unique("prrte-k8s-test"));
    // Short names: on docker.io, single names in library/, no tag is :latest.
    let _tags = [
        tag(&a, &format!("docker.io/{repo}/x:1")),
        tag(&a, &format!("docker.io/library/{repo}:latest")),
        tag(&a, &format!("localhost/{repo}:retag")),
    ];
    let script = "cat /etc/marker >> /work/seen-$C; n=$(wc -l < /work/seen-$C); until [ -e /work/go-$n ]; do sleep 0.05; done; exit 1";
    let container = |name: &str, image: &str, policy: &str| {
        format!("  - {{name: {name}, image: \"{image}\", {policy}command: [sh, -c, \"{script}\"], env: [{{name: C, value: {name}}}], volumeMounts: [{{name: work, mountPath: /work}}]}}\n")
    };
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}}}\nspec:\n  volumes: [{{name: work, emptyDir: {{}}}}]\n  containers:\n{}{}{}{}",
        container("short", &format!("{repo}/x:1"), ""),
        container("single", &repo, ""),
        container("always", &format!("localhost/{repo}:retag"), "imagePullPolicy: Always, "),
        container("kept", &format!("localhost/{repo}:retag"), "imagePullPolicy: IfNotPresent, "),
    );
    cluster.apply_yaml(&yaml).unwrap();
    let p = wait_pod(&cluster, &pod, "ran", |p| p["status"]["phase"] == "Running").await;
    let spec = |c: usize| {
        p["spec"]["containers"][c]["imagePullPolicy"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        (spec(0), spec(1)),
        ("IfNotPresent".into(), "Always".into()),
        "Kubernetes' default policies"
    );
    assert_eq!(
        status_of(&p, "containerStatuses", "short")["image"],
        format!("docker.io/{repo}/x:1").as_str()
    );
    assert_eq!(
        status_of(&p, "containerStatuses", "single")["image"],
        format!("docker.io/library/{repo}:latest").as_str()
    );
    for c in ["short", "single", "always", "kept"] {
        assert_eq!(
            status_of(&p, "containerStatuses", c)["imageID"],
            id(&a).as_str(),
            "{c}"
        );
    }
    for c in ["always", "kept"] {
        assert_eq!(
            sh_in(&cluster, &pod, c, &format!("cat /work/seen-{c}")),
            "a"
        );
    }
    // The name moves to the other image; both containers end and are restarted.
    let _retag = tag(&b, &format!("localhost/{repo}:retag"));
    sh_in(&cluster, &pod, "always", "touch /work/go-1");
    let p = wait_pod(&cluster, &pod, "restarted both", |p| {
        ["always", "kept"].iter().all(|c| {
            let s = status_of(p, "containerStatuses", c);
            s["restartCount"].as_i64() >= Some(1) && s["state"]["running"].is_object()
        })
    })
    .await;
    for c in ["always", "kept"] {
        let s = status_of(&p, "containerStatuses", c);
        assert_eq!(s["restartCount"], 1, "{c} restarted once: {s}");
    }
    assert_eq!(
        sh_in(&cluster, &pod, "always", "cat /work/seen-always"),
        "a\nb",
        "Always resolved the name again"
    );
    assert_eq!(
        sh_in(&cluster, &pod, "kept", "cat /work/seen-kept"),
        "a\na",
        "IfNotPresent kept its image"
    );
    assert_eq!(
        status_of(&p, "containerStatuses", "always")["imageID"],
        id(&b).as_str()
    );
    assert_eq!(
        status_of(&p, "containerStatuses", "kept")["imageID"],
        id(&a).as_str()
    );
    cluster.shutdown().unwrap();
    assert_clean(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pod_has_its_own_ipc_namespace_shared_by_its_containers() {
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let t = unique("ipc");
    let pod = |n: &str, containers: &[&str]| {
        let cs: Vec<String> = containers
            .iter()
            .map(|c| format!("{{name: {c}, command: [sleep, \"600\"]}}"))
            .collect();
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {t}-{n}, labels: {{app: {t}}}}}\nspec:\n  containers: [{}]\n", cs.join(", "))
    };
    cluster
        .apply_yaml(&[pod("one", &["a", "b"]), pod("two", &["c"])].join("---\n"))
        .unwrap();
    cluster
        .wait_ready("default", &format!("app={t}"), 2, WAIT)
        .await
        .unwrap();
    let (one, two) = (format!("{t}-one"), format!("{t}-two"));
    let keys = |pod: &str, c: &str| -> Vec<String> {
        sh_in(&cluster, pod, c, "cat /proc/sysvipc/shm")
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .collect()
    };
    sh_in(&cluster, &one, "a", "ipcmk -M 4096 >/dev/null");
    let made = keys(&one, "a");
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(
        keys(&one, "b"),
        made,
        "the pod's containers share System V shared memory"
    );
    assert!(keys(&two, "c").is_empty(), "another pod does not see it");
    let host = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    assert!(
        !host
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some(made[0].as_str())),
        "nor does the host"
    );
    cluster.shutdown().unwrap();
    assert_clean(&prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projected_service_account_token_is_only_in_the_container_that_mounts_it() {
    let image = marker_image("a", false);
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let pod = unique("token");
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {pod}}}
spec:
  automountServiceAccountToken: false
  volumes:
  - name: kube-api-access
    projected:
      sources:
      - serviceAccountToken: {{path: token, expirationSeconds: 3607}}
      - configMap: {{name: kube-root-ca.crt, items: [{{key: ca.crt, path: ca.crt}}]}}
      - downwardAPI: {{items: [{{path: namespace, fieldRef: {{apiVersion: v1, fieldPath: metadata.namespace}}}}]}}
  initContainers:
  - name: init
    image: {image}
    command: [sh, -c, "test ! -e {sa}/token"]
  containers:
  - name: api
    image: {image}
    command: [sleep, "3600"]
    volumeMounts: [{{name: kube-api-access, mountPath: {sa}, readOnly: true}}]
  - name: other
    image: {image}
    command: [sleep, "3600"]
"#
        ))
        .unwrap();
    wait_pod(&cluster, &pod, "was Ready", sandbox::cluster::pod_ready).await;
    // Where it is mounted: the token of the pod's service account, the cluster's CA, the
    // namespace, read-only.
    let token = sh_in(&cluster, &pod, "api", &format!("cat {sa}/token"));
    assert!(sh_in(&cluster, &pod, "api", &format!("cat {sa}/ca.crt"))
        .starts_with("-----BEGIN CERTIFICATE-----"));
    assert_eq!(
        sh_in(&cluster, &pod, "api", &format!("cat {sa}/namespace")),
        "default"
    );
    let (code, _, err) = cluster
        .container_run(&pod, "api", &["touch", &format!("{sa}/x")])
        .unwrap();
    assert!(code != 0 && err.contains("Read-only file system"), "{err}");
    let (ok, _, err) = kubectl(&cluster, &["--token", &token, "get", "pods"]);
    assert!(
        !ok && err.contains("system:serviceaccount:default:default"),
        "the token is the pod's service account's: {err}"
    );
    // Elsewhere (the other container; the init container checked it itself): nothing.
    sh_in(&cluster, &pod, "other", &format!("test ! -e {sa}"));
    cluster.shutdown().unwrap();
    assert_clean(&prefix);
}
