//! The whole manifest: the objects in their order, and their YAML with the comment header.

use serde_json::Value;

use super::error::ManifestError;
use super::layout::CONTAINER;
use super::meta::{job_label, mark_rendered, workload_meta};
use super::mpijob::{from_mpijob, MpiJobError, Note, Overrides};
use super::options::ManifestArgs;
use super::plan::{JobPlan, Part};
use super::pod::pod_template;
use super::{admission, header, network_policy, rbac, secret};
use crate::workload::{LauncherParts, Parts, WorkloadKind};

/// The workload object of the chosen kind.
fn workload(a: &JobPlan) -> Result<Value, ManifestError> {
    let batch = a.batch();
    let (lk, lv) = job_label(a);
    let parts = Parts {
        name: a.name.clone(),
        metadata: workload_meta(a)?,
        template: pod_template(a, batch)?,
        selector: [(lk.to_string(), lv)].into(),
        container: CONTAINER.to_string(),
        pods: a.pods,
        batch,
        success: a.success,
        deadline: a.deadline,
        ttl: a.ttl,
        suspend: a.suspend,
        managed_by: a.managed_by.clone(),
        max_restarts: a.max_restarts,
        launcher: match &a.launcher {
            Some(l) => Some(LauncherParts {
                template: pod_template(
                    &JobPlan {
                        pod: l.pod.clone(),
                        ..a.clone()
                    },
                    batch,
                )?,
                after_workers: l.after_workers,
            }),
            None => None,
        },
    };
    Ok(a.kind.render(&parts)?)
}

/// The job the options describe: from the options themselves, or from the MPIJob of
/// `--from-mpijob` (read from `stdin` for `-`) with the notes on what it changed or cannot
/// honour.
pub fn prepare(
    a: &ManifestArgs,
    stdin: &mut dyn std::io::Read,
) -> Result<(JobPlan, Vec<Note>), ManifestError> {
    let Some(file) = &a.from_mpijob else {
        return Ok((a.plan()?, Vec::new()));
    };
    let fail = |error| ManifestError::MpiJob {
        file: file.clone(),
        error,
    };
    let mut text = String::new();
    if file == "-" {
        stdin.read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|mut f| std::io::Read::read_to_string(&mut f, &mut text))
    }
    .map_err(|e| fail(MpiJobError::Read(e)))?;
    if a.kind == WorkloadKind::StatefulSet {
        return Err(fail(MpiJobError::field(
            "--kind",
            "statefulset restarts the pods when they exit: an MPIJob runs to completion",
            "give --kind job or jobset",
        )));
    }
    let overrides = Overrides {
        name: a.name.clone(),
        namespace: a.namespace.clone(),
        inject_image: a.inject_image.clone(),
        pull_policy: a.image_pull_policy.clone(),
        env: a.env.clone(),
        only: a.only.clone(),
        api_server: a.api_server(),
        grace_period: a.grace_period,
        preempt_signal: a.preempt_signal.clone(),
        jobset: a.kind == WorkloadKind::JobSet,
    };
    from_mpijob(&text, &overrides).map_err(fail)
}

/// The objects of the manifest (`key`: the Secret's key, or None to leave the Secret out).
pub fn objects(a: &JobPlan, key: Option<&str>) -> Result<Vec<Value>, ManifestError> {
    let want = |p: Part| a.only.is_empty() || a.only.contains(&p);
    let mut out = Vec::new();
    if want(Part::Rbac) {
        out.extend(rbac::rbac(a)?);
        out.extend(admission::admission(a));
    }
    if want(Part::Secret) {
        if let Some(k) = key {
            out.push(serde_json::to_value(secret::secret(a, k))?);
        }
    }
    if want(Part::Workload) {
        out.push(workload(a)?);
    }
    if want(Part::Networkpolicy) {
        out.push(serde_json::to_value(network_policy::network_policy(a))?);
    }
    Ok(out)
}

/// Renders the manifest: a header of comments (the command line `argv_text`, and how to make
/// the Secret if it is left out), then the objects as YAML documents, each marked as printed
/// (`RENDERED_BY`: the MPIJob controller never takes such an object for its own).
pub fn render(a: &JobPlan, argv_text: &str, key: Option<&str>) -> Result<String, ManifestError> {
    let mut text = header::header(a, argv_text, key);
    for mut o in objects(a, key)? {
        mark_rendered(&mut o);
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(&o)?);
    }
    Ok(text)
}
