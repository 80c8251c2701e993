//! A sandbox for TrainJobs run by `prrte-k8s controller --trainjobs`: a cluster of its own
//! ([`JobSetSandbox`]) with Kubeflow Trainer v2.3.0's CRDs as published, a runtime (a
//! ClusterTrainingRuntime of `prrte-config/trainer/`, as shipped or changed by the test) and
//! the namespace's objects (`namespace.yaml`) applied, and this build's controller as a
//! process; a TrainJob read, awaited, and what is left of it once deleted.

use super::controller::ControllerProc;
use super::jobset::{text, JobSetSandbox};
use anyhow::{bail, Context, Result};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use sandbox::api::resources::{CONFIGMAPS, JOBS, JOBSETS, PODS, SECRETS};
use sandbox::harness;
use serde_json::Value;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// The runtime `prrte-config/trainer/<name>.yaml`, parsed.
pub fn runtime_file(name: &str) -> Result<Value> {
    let path = repo().join(format!("prrte-config/trainer/{name}.yaml"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_yaml::from_str(&text)?)
}

/// The condition `ty` of a TrainJob (or JobSet), if it has one.
pub fn condition<'a>(object: &'a Value, ty: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

/// Whether the condition `ty` is True.
pub fn is_true(object: &Value, ty: &str) -> bool {
    condition(object, ty).is_some_and(|c| c["status"] == "True")
}

/// The sandbox; derefs to its [`JobSetSandbox`] (cluster, kubectl, pods, logs).
pub struct TrainerSandbox {
    // Dropped first: the controller stops before the cluster.
    controller: ControllerProc,
    sb: JobSetSandbox,
    trainjobs: Api<DynamicObject>,
}

impl Deref for TrainerSandbox {
    type Target = JobSetSandbox;
    fn deref(&self) -> &JobSetSandbox {
        &self.sb
    }
}

impl TrainerSandbox {
    /// The sandbox of the test `test`, TrainJobs in `ns`, `runtime` the ClusterTrainingRuntime
    /// (server-side applied).
    pub async fn start(test: &str, ns: &str, runtime: &Value) -> Result<TrainerSandbox> {
        let crds = harness::trainer::trainer_crds()?;
        let namespaced =
            std::fs::read_to_string(repo().join("prrte-config/trainer/namespace.yaml"))
                .context("reading prrte-config/trainer/namespace.yaml")?;
        let bin = harness::workspace_bin("prrte-k8s")?;
        let sb = JobSetSandbox::start(test, ns, &["launcher", "node"], "node").await?;
        // Trainer's CRDs are too large for a client-side apply (as Trainer's docs say): create.
        for crd in &crds {
            sb.kubectl_ok(&["create", "-f", &crd.to_string_lossy()], None)?;
        }
        let rt = serde_json::to_string(runtime)?;
        sb.kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(&rt))
            .context("applying the runtime")?;
        sb.kubectl_ok(&["apply", "-n", ns, "-f", "-"], Some(&namespaced))
            .context("applying namespace.yaml")?;
        let log = std::fs::File::create(sb.dir.path().join("controller.log"))?;
        let child = Command::new(&bin)
            .args(["controller", "--trainjobs"])
            .args(["--lease-namespace", ns, "--identity", test])
            .args(["--metrics-address", "127.0.0.1:0"])
            .args(["--health-address", "127.0.0.1:0"])
            .args(["--image-pull-policy", "Never"])
            .env("KUBECONFIG", sb.cluster.kubeconfig())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting prrte-k8s controller --trainjobs")?;
        let controller = ControllerProc(std::sync::Mutex::new(child));
        let client = super::api::client_for(sb.cluster.kubeconfig()).await;
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
            "trainjobs",
        );
        let trainjobs = Api::namespaced_with(client, ns, &ar);
        Ok(TrainerSandbox {
            controller,
            sb,
            trainjobs,
        })
    }

    /// `kubectl create` of the TrainJob `tj`.
    pub fn create(&self, tj: &Value) -> Result<()> {
        let ns = self.ns.clone();
        self.kubectl_ok(
            &["create", "-n", &ns, "-f", "-"],
            Some(&serde_json::to_string(tj)?),
        )
        .map(|_| ())
    }

    /// The TrainJob `name`, as JSON, if there is one.
    pub async fn trainjob(&self, name: &str) -> Option<Value> {
        let o = self.trainjobs.get_opt(name).await.ok()??;
        serde_json::to_value(o).ok()
    }

    /// The controller's log.
    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default()
    }

    /// The TrainJob, its JobSet's status and pods, the controller's last lines.
    pub async fn describe_trainjob(&self, name: &str) -> String {
        let tj = self
            .trainjob(name)
            .await
            .map(|t| serde_json::to_string_pretty(&t).unwrap_or_default());
        let log = self.controller_log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        format!(
            "trainjob: {tj:?}\n{}\ncontroller log (last lines, newest first):\n{}",
            self.describe(name),
            tail.join("\n")
        )
    }

    /// Waits up to `secs` until `ok` holds of the TrainJob `name` (`what` it waits for);
    /// returns it then. `watch` runs at every look (e.g. to note pods while they are there).
    pub async fn wait_trainjob(
        &self,
        name: &str,
        what: &str,
        secs: u64,
        ok: impl Fn(&Value) -> bool,
        mut watch: impl FnMut(&Self),
    ) -> Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            watch(self);
            if let Some(tj) = self.trainjob(name).await.filter(|t| ok(t)) {
                return Ok(tj);
            }
            if let Some(status) = self.controller.ended() {
                bail!(
                    "TrainJob {name}: not {what}: the controller exited ({status})\n{}",
                    self.describe_trainjob(name).await
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "TrainJob {name}: not {what} within {secs} s\n{}",
                    self.describe_trainjob(name).await
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What is left in the namespace of the TrainJob `name`: objects named after it.
    pub fn leftovers(&self, name: &str) -> Vec<String> {
        let store = self.cluster.store();
        let mut left = Vec::new();
        for (rt, kind) in [
            (&PODS, "pod"),
            (&JOBS, "job"),
            (&JOBSETS, "jobset"),
            (&SECRETS, "secret"),
            (&CONFIGMAPS, "configmap"),
        ] {
            let Ok(list) = store.list(rt, Some(&self.ns), &Default::default()) else {
                continue;
            };
            for o in list.items {
                let n = o["metadata"]["name"].as_str().unwrap_or_default();
                if n == name || n.starts_with(&format!("{name}-")) {
                    left.push(format!("{kind}/{n}"));
                }
            }
        }
        left
    }

    /// Waits up to `secs` until nothing of the deleted TrainJob `name` is left (the garbage
    /// collector has been through).
    pub async fn wait_nothing_left(&self, name: &str, secs: u64) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = self.leftovers(name);
            if left.is_empty() && self.trainjob(name).await.is_none() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("TrainJob {name} deleted, yet left after {secs} s: {left:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `kubectl delete trainjob NAME` (which fails on an error).
    pub fn delete_trainjob(&self, name: &str) -> Result<()> {
        let ns = self.ns.clone();
        let out = self.kubectl(&["delete", "trainjob", name, "-n", &ns], None)?;
        if !out.status.success() {
            bail!("kubectl delete trainjob {name}: {}", text(&out));
        }
        Ok(())
    }
}
