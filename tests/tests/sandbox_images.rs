//! Sandbox pods that run images: the image's root filesystem, its configuration, the pod's
//! securityContext and volumes, and what happens when the image is not there. Needs root,
//! buildah and busybox-static (prrte-config/setup.sh installs them).

use sandbox::api::Obj;
use sandbox::cluster::{Cluster, ClusterOptions};
use sandbox::harness::unique;
use sandbox::images;
use sandbox::runtime::podnet;
use std::process::Command;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn ok_in(c: &Cluster, pod: &str, script: &str) -> String {
    let (code, out, err) = c.pod_run(pod, &["sh", "-c", script]).unwrap();
    assert_eq!(code, 0, "`{script}` in {pod}: {out}\n{err}");
    out
}

/// `kubectl get pod NAME` (the table kubectl prints).
fn kubectl_get(c: &Cluster, ns: &str, pod: &str) -> String {
    let kubectl =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["-n", ns, "get", "pod", pod])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl get pod {pod}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until the pod's container waits with `reason`; returns the pod.
async fn wait_waiting(c: &Cluster, ns: &str, pod: &str, reason: &str) -> Obj {
    let (name, reason) = (pod.to_string(), reason.to_string());
    sandbox::cluster::wait_pods(&c.store(), ns, "", WAIT, |pods| {
        pods.iter()
            .find(|p| {
                p["metadata"]["name"] == name.as_str()
                    && p.pointer("/status/containerStatuses/0/state/waiting/reason")
                        == Some(&serde_json::json!(reason))
            })
            .cloned()
    })
    .await
    .unwrap_or_else(|e| panic!("pod {pod} never waited with {reason}: {e:#}"))
}

fn status_line(c: &Cluster, pod: &str, field: &str) -> String {
    let text = ok_in(c, pod, &format!("grep '^{field}:' /proc/1/status"));
    text.split_whitespace().nth(1).unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pod_runs_in_the_image_with_its_security_context() {
    let image = images::test_image(false).expect("building the test image");
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let pod = unique("img");
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Secret
metadata: {{name: {pod}-creds}}
stringData: {{key: s3cret}}
---
apiVersion: v1
kind: Pod
metadata:
  name: {pod}
  labels: {{app: images}}
spec:
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    runAsGroup: 1000
    fsGroup: 3000
    supplementalGroups: [4000]
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Never
    env:
    - {{name: FROM_POD, value: "pod-$(FROM_POD_BASE)"}}
    - {{name: FROM_POD_BASE, value: base}}
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL]}}
    volumeMounts:
    - {{name: tmp, mountPath: /tmp}}
    - {{name: shm, mountPath: /dev/shm}}
    - {{name: creds, mountPath: /etc/creds, readOnly: true}}
    - {{name: info, mountPath: /etc/podinfo}}
    - {{name: run, mountPath: /var/run/{pod}}}
  volumes:
  - {{name: run, emptyDir: {{}}}}
  - {{name: tmp, emptyDir: {{}}}}
  - {{name: shm, emptyDir: {{medium: Memory}}}}
  - {{name: creds, secret: {{secretName: {pod}-creds, defaultMode: 256}}}}
  - name: info
    downwardAPI:
      items:
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
"#
        ))
        .unwrap();
    let pods = cluster
        .wait_ready("default", "app=images", 1, WAIT)
        .await
        .unwrap();
    let p = &pods[0];
    assert_eq!(p["status"]["containerStatuses"][0]["image"], image.as_str());
    assert!(
        p["status"]["containerStatuses"][0]["imageID"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{p}"
    );

    // The image's CMD is PID 1, in the image's working directory, with the image's environment
    // plus the pod's.
    assert_eq!(
        ok_in(&cluster, &pod, "tr '\\0' ' ' </proc/1/cmdline"),
        "sleep 3600"
    );
    assert_eq!(ok_in(&cluster, &pod, "readlink /proc/1/cwd"), "/home/app");
    assert_eq!(
        ok_in(&cluster, &pod, "echo $GREETING $FROM_POD $HOME $HOSTNAME"),
        format!("hello-from-image pod-$(FROM_POD_BASE) /home/app {pod}")
    );
    // The image's root, not the host's.
    ok_in(&cluster, &pod, "test -x /bin/busybox && test ! -e /opt/prrte-k8s && test ! -e /usr/lib && test \"$(hostname)\" = \"$HOSTNAME\"");
    let ip = p["status"]["podIP"].as_str().unwrap();
    assert!(ok_in(&cluster, &pod, "cat /etc/hosts").contains(&format!("{ip}\t{pod}")));

    // User, groups, capabilities and no_new_privs of the container process (PID 1) and of exec.
    assert_eq!(
        ok_in(&cluster, &pod, "id -u; id -g; id -G"),
        "1000\n1000\n1000 2000 3000 4000"
    );
    assert_eq!(status_line(&cluster, &pod, "Uid"), "1000");
    assert_eq!(
        ok_in(
            &cluster,
            &pod,
            "grep '^Groups:' /proc/1/status | cut -f2 | xargs"
        ),
        "2000 3000 4000",
        "the image's group membership (extra), supplementalGroups and fsGroup"
    );
    for f in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
        assert_eq!(
            status_line(&cluster, &pod, f),
            "0000000000000000",
            "{f} of PID 1"
        );
    }
    assert_eq!(status_line(&cluster, &pod, "NoNewPrivs"), "1");
    assert_eq!(
        ok_in(
            &cluster,
            &pod,
            "grep -E '^(CapEff|NoNewPrivs):' /proc/self/status | cut -f2 | xargs"
        ),
        "0000000000000000 1"
    );

    // Read-only root; /tmp (emptyDir) and /dev/shm (memory emptyDir) are writable, with fsGroup.
    let (code, _, err) = cluster
        .pod_run(&pod, &["sh", "-c", "echo x > /home/app/new"])
        .unwrap();
    assert_ne!(code, 0);
    assert!(err.contains("Read-only file system"), "{err}");
    let (code, _, _) = cluster.pod_run(&pod, &["touch", "/etc/new"]).unwrap();
    assert_ne!(code, 0, "the image's root is read-only");
    ok_in(
        &cluster,
        &pod,
        "echo a > /tmp/a && echo b > /dev/shm/b && cat /tmp/a /dev/shm/b",
    );
    assert_eq!(
        ok_in(&cluster, &pod, "stat -c '%a %g' /tmp /dev/shm"),
        "2777 3000\n2777 3000"
    );
    assert_eq!(ok_in(&cluster, &pod, "stat -f -c %T /dev/shm"), "tmpfs");
    assert_eq!(
        ok_in(&cluster, &pod, "stat -c '%u:%g' /tmp/a"),
        "1000:3000",
        "setgid directory: new files get the fsGroup"
    );
    // Secret: defaultMode plus group-read for fsGroup, readable by the user through the group.
    assert_eq!(
        ok_in(&cluster, &pod, "stat -c '%a %u %g' /etc/creds/key"),
        "440 0 3000"
    );
    assert_eq!(ok_in(&cluster, &pod, "cat /etc/creds/key"), "s3cret");
    let (code, _, _) = cluster
        .pod_run(&pod, &["touch", "/etc/creds/other"])
        .unwrap();
    assert_ne!(code, 0, "a readOnly volume mount refuses writes");
    assert_eq!(ok_in(&cluster, &pod, "cat /etc/podinfo/name"), pod);
    assert_eq!(
        ok_in(&cluster, &pod, "cat /etc/podinfo/labels"),
        "app=\"images\""
    );
    // A mount path through the image's absolute link /var/run -> /run lands in the image's /run,
    // not in the host's.
    ok_in(
        &cluster,
        &pod,
        &format!("echo r > /var/run/{pod}/f && test -f /run/{pod}/f"),
    );
    assert!(
        !std::path::Path::new("/run").join(&pod).exists(),
        "a mount point was created on the host"
    );
    // The service-account files are readable by the non-root user.
    assert_eq!(
        ok_in(
            &cluster,
            &pod,
            &format!("cat {}/namespace", sandbox::cluster::SA_MOUNT)
        ),
        "default"
    );
    // setuid binaries give nothing under no_new_privs; the host's filesystem is not reachable
    // through /proc/1/root either.
    ok_in(&cluster, &pod, "test \"$(ls /proc/1/root/)\" = \"$(ls /)\"");

    assert!(kubectl_get(&cluster, "default", &pod).contains("Running"));
    cluster.shutdown().unwrap();
    assert!(
        podnet::leftovers(&prefix).is_empty(),
        "{}",
        podnet::leftovers(&prefix)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_refuses_a_root_image_and_root_gets_default_capabilities() {
    let image = images::test_image(true).expect("building the test image");
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let (refused, rooted, dropped) = (unique("nonroot"), unique("root"), unique("dropped"));
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {refused}}}
spec:
  securityContext: {{runAsNonRoot: true}}
  containers: [{{name: main, image: {image}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {rooted}, labels: {{app: root}}}}
spec:
  containers: [{{name: main, image: {image}, command: [sleep], args: ["1000"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {dropped}, labels: {{app: root}}}}
spec:
  containers:
  - name: main
    image: {image}
    args: [sleep, "1001"]
    securityContext: {{capabilities: {{drop: [ALL], add: [NET_BIND_SERVICE]}}}}
"#
        ))
        .unwrap();
    let p = wait_waiting(&cluster, "default", &refused, "CreateContainerConfigError").await;
    let uid = p["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        format!("container has runAsNonRoot and image will run as root (pod: \"{refused}_default({uid})\", container: main)").as_str()
    );
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(kubectl_get(&cluster, "default", &refused).contains("CreateContainerConfigError"));

    cluster
        .wait_ready("default", "app=root", 2, WAIT)
        .await
        .unwrap();
    // As root with the runtime's default capabilities; command/args replace the image's CMD.
    assert_eq!(
        ok_in(&cluster, &rooted, "id -u; tr '\\0' ' ' </proc/1/cmdline"),
        "0\nsleep 1000"
    );
    assert_eq!(status_line(&cluster, &rooted, "CapEff"), "00000000a80425fb");
    assert_eq!(status_line(&cluster, &rooted, "CapBnd"), "00000000a80425fb");
    assert_eq!(status_line(&cluster, &rooted, "NoNewPrivs"), "0");
    // Writable root (per-pod layer, not the image): a write in one pod is not seen in another.
    ok_in(
        &cluster,
        &rooted,
        "echo mine > /etc/only-here && cat /etc/only-here",
    );
    ok_in(&cluster, &dropped, "test ! -e /etc/only-here");
    // args alone keep the image's ENTRYPOINT (none) and replace CMD; drop ALL + add one.
    assert_eq!(
        ok_in(&cluster, &dropped, "tr '\\0' ' ' </proc/1/cmdline"),
        "sleep 1001"
    );
    assert_eq!(
        status_line(&cluster, &dropped, "CapEff"),
        "0000000000000400"
    );
    assert_eq!(
        status_line(&cluster, &dropped, "CapBnd"),
        "0000000000000400"
    );
    let (code, _, err) = cluster
        .pod_run(&dropped, &["chown", "1000", "/tmp"])
        .unwrap();
    assert_ne!(code, 0, "no CAP_CHOWN: {err}");
    cluster.shutdown().unwrap();
    assert!(
        podnet::leftovers(&prefix).is_empty(),
        "{}",
        podnet::leftovers(&prefix)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_image_keeps_the_pod_pending_until_it_is_there() {
    let present = images::test_image(false).expect("building the test image");
    let cluster = Cluster::start(ClusterOptions::default()).await.unwrap();
    let prefix = cluster.network().prefix();
    let tag = unique("absent");
    let absent = format!("localhost/prrte-k8s-test/{tag}:1");
    let (never, later) = (unique("never"), unique("later"));
    cluster
        .apply_yaml(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {never}}}
spec:
  containers: [{{name: main, image: {absent}, imagePullPolicy: Never, command: [sleep, "600"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: {later}, labels: {{app: later}}}}
spec:
  containers: [{{name: main, image: {absent}, imagePullPolicy: IfNotPresent}}]
"#
        ))
        .unwrap();
    let p = wait_waiting(&cluster, "default", &never, "ErrImageNeverPull").await;
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        format!("Container image \"{absent}\" is not present with pull policy of Never").as_str()
    );
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(kubectl_get(&cluster, "default", &never).contains("ErrImageNeverPull"));
    let p = wait_waiting(&cluster, "default", &later, "ImagePullBackOff").await;
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        format!("Back-off pulling image \"{absent}\"").as_str()
    );
    assert!(kubectl_get(&cluster, "default", &later).contains("ImagePullBackOff"));
    let events = cluster
        .store()
        .list(
            &sandbox::api::resources::EVENTS,
            Some("default"),
            &Default::default(),
        )
        .unwrap()
        .items;
    assert!(
        events
            .iter()
            .any(|e| e["involvedObject"]["name"] == never.as_str()
                && e["reason"] == "ErrImageNeverPull"),
        "events: {events:?}"
    );
    // Nothing ran: no host-filesystem fallback.
    assert!(cluster.pod_exec(&never, &["true"]).is_err());

    // Once the local store has the image, the IfNotPresent pod starts from it.
    images::tag(&present, &absent).unwrap();
    struct Untag(String);
    impl Drop for Untag {
        fn drop(&mut self) {
            let _ = images::untag(&self.0);
        }
    }
    let _untag = Untag(absent.clone());
    let started = Instant::now();
    cluster
        .wait_ready("default", "app=later", 1, WAIT)
        .await
        .unwrap();
    assert_eq!(
        ok_in(&cluster, &later, "echo $GREETING"),
        "hello-from-image"
    );
    assert!(started.elapsed() < WAIT);
    // The Never pod does not pull, but it starts too once the node has the image.
    let p = cluster
        .wait_phase("default", &never, &["Running"], WAIT)
        .await
        .unwrap();
    assert_eq!(
        p["status"]["containerStatuses"][0]["imageID"],
        format!("sha256:{}", images::inspect(&present).unwrap().unwrap().id).as_str()
    );
    cluster.shutdown().unwrap();
    assert!(
        podnet::leftovers(&prefix).is_empty(),
        "{}",
        podnet::leftovers(&prefix)
    );
}
