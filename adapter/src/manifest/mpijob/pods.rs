//! The pods of the converted job: either one pod template for the launcher (pod 0) and the
//! workers, made from the Worker's template (the Launcher's when there are no workers), with
//! what the Launcher adds that the Worker lacks (environment variables, volumes, mounts: what
//! its command may need) and every other difference named in a note ([`For::All`]); or each
//! role's pods from its own template ([`For::Launcher`], [`For::Workers`]).

use serde_json::{json, Map, Value};

use super::container::{first_container, REPLACED};
use super::error::{MpiJobError, Note};
use super::harden::{self, Identity};
use super::parse::{Parsed, Replica};
use super::reader::show;
use super::volumes::{check_mounts, check_volumes, rename_volumes};
use crate::manifest::inject::INSTALL_CONTAINER;

/// The pod spec fields handled on their own (not compared or copied as they are).
const POD_OWN: &[&str] = &[
    "containers",
    "initContainers",
    "volumes",
    "securityContext",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "hostname",
    "subdomain",
    "restartPolicy",
    "hostNetwork",
    "hostPID",
    "hostIPC",
];

/// What mpi-operator itself sets in the pods for its hostfile and ssh (`K_MPI_JOB_ROLE` aside):
/// they would point the MPI at files that do not exist here.
const OPERATOR_ENV: &[&str] = &[
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
    "OMPI_MCA_plm_rsh_args",
    "I_MPI_HYDRA_HOST_FILE",
    "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
    "I_MPI_PERHOST",
    "HYDRA_HOST_FILE",
    "HYDRA_LAUNCH_EXTRA_ARGS",
];

/// The pods' parts, for the plan.
pub(super) struct Pods {
    pub labels: Map<String, Value>,
    pub annotations: Map<String, Value>,
    pub spec: Map<String, Value>,
    pub container: Map<String, Value>,
    pub env: Vec<Value>,
    pub mounts: Vec<Value>,
    pub volumes: Vec<Value>,
    pub(crate) init_containers: Vec<Value>,
    pub identity: Identity,
    /// The Launcher's command and args: the batch command.
    pub command: Vec<String>,
}

/// The entries of an array field of `obj` that are objects with a string `key` (env names,
/// volume names, mount paths), refusing others.
fn keyed(
    obj: &Map<String, Value>,
    field: &str,
    key: &str,
    at: &str,
) -> Result<Vec<Value>, MpiJobError> {
    let list = match obj.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(MpiJobError::field(
                format!("{at}.{field}"),
                format!("is {}, not a list", show(other)),
                "give a list",
            ))
        }
    };
    for (i, e) in list.iter().enumerate() {
        if !e[key].is_string() {
            return Err(MpiJobError::field(
                format!("{at}.{field}[{i}]"),
                format!("has no {key}"),
                format!("give each entry its {key}"),
            ));
        }
    }
    Ok(list.clone())
}

/// `base` with the entries of `extra` whose `key` it lacks appended; an entry of both that
/// differs keeps `base`'s, with a note.
fn union(
    base: Vec<Value>,
    extra: Vec<Value>,
    key: &str,
    what: &str,
    at: &str,
    notes: &mut Vec<Note>,
) -> Vec<Value> {
    let mut out = base;
    for e in extra {
        match out.iter().find(|b| b[key] == e[key]) {
            None => out.push(e),
            Some(b) if *b == e => {}
            Some(b) => notes.push(Note::new(
                format!("{at}[{}]", e[key].as_str().unwrap_or("")),
                format!(
                    "the Launcher's {what} {} differs from the Worker's {}: every pod gets the Worker's (one pod template for all)",
                    show(&e),
                    show(b)
                ),
            )),
        }
    }
    out
}

/// The Launcher's command and args: the batch command.
fn launcher_command(l: &Replica) -> Result<Vec<String>, MpiJobError> {
    let c = first_container(l)?;
    let at = format!("{}.containers[0]", l.path);
    let mut command = Vec::new();
    for field in ["command", "args"] {
        command.extend(keyed_strings(c, field, &at)?);
    }
    if command.is_empty() {
        return Err(MpiJobError::field(
            format!("{at}.command"),
            "is missing (and so are its args): the launcher's command is the job's batch command, and the image's entrypoint cannot be read here",
            "give the Launcher's container a command, e.g. [mpirun, -n, \"2\", /home/mpiuser/pi]",
        ));
    }
    Ok(command)
}

/// A list of strings (command, args).
fn keyed_strings(
    c: &Map<String, Value>,
    field: &str,
    at: &str,
) -> Result<Vec<String>, MpiJobError> {
    match c.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, w)| match w {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(MpiJobError::field(
                    format!("{at}.{field}[{i}]"),
                    format!("is {}, not a string", show(other)),
                    "quote it",
                )),
            })
            .collect(),
        Some(other) => Err(MpiJobError::field(
            format!("{at}.{field}"),
            format!("is {}, not a list of strings", show(other)),
            "give a list of strings",
        )),
    }
}

/// Which pods the parts are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum For {
    /// Every pod (one template): the Worker's, with what the Launcher adds.
    All,
    /// The launcher's own pod: the Launcher's template.
    Launcher,
    /// The workers' pods: the Worker's template.
    Workers,
}

/// Builds the pods' parts from the MPIJob for the pods `which` (`exclude_self`: the job's own
/// variable that keeps the launcher's pod out of the allocation; `pull_policy`: the command
/// line's imagePullPolicy, if any).
pub(super) fn pods(
    job: &Parsed,
    which: For,
    exclude_self: Option<Value>,
    pull_policy: Option<&str>,
    notes: &mut Vec<Note>,
) -> Result<Pods, MpiJobError> {
    let launcher = &job.launcher;
    let base = match which {
        For::Launcher => launcher,
        For::All | For::Workers => job.worker.as_ref().unwrap_or(launcher),
    };
    let other = job
        .worker
        .as_ref()
        .filter(|_| which == For::All)
        .map(|_| launcher);
    let at = base.path.clone();
    let containers = base
        .spec
        .get("containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if containers.len() > 1 {
        let name = containers[1]["name"].as_str().unwrap_or("");
        return Err(MpiJobError::field(
            format!("{at}.containers[1]"),
            format!("a second container ({name}) would keep every pod running after the MPI job ended, and gets none of the agent's setup"),
            "move it to initContainers with restartPolicy: Always (a sidecar), or remove it",
        ));
    }
    let command = launcher_command(launcher)?;
    let app = first_container(base)?;
    let app_at = format!("{at}.containers[0]");
    if !app.get("image").is_some_and(Value::is_string) {
        return Err(MpiJobError::field(
            format!("{app_at}.image"),
            "is missing",
            "give the image that holds the MPI program",
        ));
    }
    if job.worker.is_some() && which != For::Launcher {
        note_worker_command(app, &app_at, notes)?;
    }
    note_dropped_fields(app, &app_at, notes);
    let mut container: Map<String, Value> = app
        .iter()
        .filter(|(k, _)| !REPLACED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(p) = pull_policy {
        container.insert("imagePullPolicy".into(), json!(p));
    }
    let app_sc = harden::container(
        app.get("securityContext"),
        &format!("{app_at}.securityContext"),
        true,
        notes,
    )?;
    container.insert("securityContext".into(), Value::Object(app_sc.clone()));
    let (pod_sc, identity) = harden::pod(
        base.spec.get("securityContext"),
        &format!("{at}.securityContext"),
        &app_sc,
        notes,
    )?;
    let env = merged_env(app, &app_at, other, exclude_self, notes)?;
    let (volumes, mounts, mut init_containers) = merged_volumes(base, app, &app_at, other, notes)?;
    harden_init_containers(&mut init_containers, &at, notes)?;
    let spec = pod_spec(base, pod_sc, notes);
    if let Some(l) = other {
        super::differences::launcher_differences(l, base, notes)?;
    }
    Ok(Pods {
        labels: base.labels.clone(),
        annotations: base.annotations.clone(),
        spec,
        container,
        env,
        mounts,
        volumes,
        init_containers,
        identity,
        command,
    })
}

/// Notes the Worker's own command and args, which the agent replaces.
fn note_worker_command(
    app: &Map<String, Value>,
    app_at: &str,
    notes: &mut Vec<Note>,
) -> Result<(), MpiJobError> {
    let words = [
        keyed_strings(app, "command", app_at)?,
        keyed_strings(app, "args", app_at)?,
    ]
    .concat();
    if !words.is_empty() {
        notes.push(Note::new(
            format!("{app_at}.command"),
            format!(
                "{} dropped: every pod's entrypoint is the agent (no sshd is needed)",
                show(&json!(words))
            ),
        ));
    }
    Ok(())
}

/// Notes the application container's ports and probes, which the job's own replace.
fn note_dropped_fields(app: &Map<String, Value>, app_at: &str, notes: &mut Vec<Note>) {
    for dropped in ["ports", "readinessProbe", "livenessProbe", "startupProbe"] {
        if app.get(dropped).is_some_and(|v| !v.is_null()) {
            let why = if dropped == "ports" {
                "the job's pods listen on the agent's pinned ports, which the NetworkPolicy admits"
            } else {
                "the agent's /healthz is the readiness probe (an sshd probe would never pass)"
            };
            notes.push(Note::new(
                format!("{app_at}.{dropped}"),
                format!("dropped: {why}"),
            ));
        }
    }
}

/// The environment: the Worker's, with what only the Launcher sets, less mpi-operator's
/// hostfile and ssh variables; the job's own variable first.
fn merged_env(
    app: &Map<String, Value>,
    app_at: &str,
    other: Option<&Replica>,
    exclude_self: Option<Value>,
    notes: &mut Vec<Note>,
) -> Result<Vec<Value>, MpiJobError> {
    let mut env = keyed(app, "env", "name", app_at)?;
    if let Some(l) = other {
        let lc = first_container(l)?;
        let l_at = format!("{}.containers[0]", l.path);
        env = union(
            env,
            keyed(lc, "env", "name", &l_at)?,
            "name",
            "variable",
            &format!("{app_at}.env"),
            notes,
        );
    }
    env.retain(|e| {
        let name = e["name"].as_str().unwrap_or("");
        let drop = OPERATOR_ENV.contains(&name);
        if drop {
            notes.push(Note::new(
                format!("{app_at}.env[{name}]"),
                "dropped: it points the MPI at mpi-operator's hostfile and ssh; the agent gives the MPI its hosts from the pods themselves",
            ));
        }
        !drop
    });
    if let Some(e) = exclude_self {
        env.insert(0, e);
    }

    Ok(env)
}

/// Volumes, mounts and init containers: the Worker's, with what only the Launcher has,
/// checked and renamed where the job's own volumes take the name.
#[allow(clippy::type_complexity)]
fn merged_volumes(
    base: &Replica,
    app: &Map<String, Value>,
    app_at: &str,
    other: Option<&Replica>,
    notes: &mut Vec<Note>,
) -> Result<(Vec<Value>, Vec<Value>, Vec<Value>), MpiJobError> {
    let at = base.path.as_str();
    let mut volumes = keyed(&base.spec, "volumes", "name", at)?;
    let mut mounts = keyed(app, "volumeMounts", "mountPath", app_at)?;
    if let Some(l) = other {
        let lc = first_container(l)?;
        let l_at = format!("{}.containers[0]", l.path);
        volumes = union(
            volumes,
            keyed(&l.spec, "volumes", "name", &l.path)?,
            "name",
            "volume",
            &format!("{at}.volumes"),
            notes,
        );
        mounts = union(
            mounts,
            keyed(lc, "volumeMounts", "mountPath", &l_at)?,
            "mountPath",
            "mount",
            &format!("{app_at}.volumeMounts"),
            notes,
        );
    }
    let mut init_containers = keyed(&base.spec, "initContainers", "name", at)?;
    check_volumes(&volumes, at)?;
    check_mounts(&mounts, app_at, notes)?;
    rename_volumes(&mut volumes, &mut mounts, &mut init_containers, at, notes);
    for m in &mounts {
        let v = m["name"].as_str().unwrap_or("");
        if !volumes.iter().any(|x| x["name"] == v) {
            return Err(MpiJobError::field(
                format!(
                    "{app_at}.volumeMounts[{}]",
                    m["mountPath"].as_str().unwrap_or("")
                ),
                format!("names volume {v:?}, which the pod spec does not have"),
                "add the volume to the pod spec's volumes, or remove the mount",
            ));
        }
    }
    Ok((volumes, mounts, init_containers))
}

/// The init containers made restricted; the runtime's installer's name is refused.
fn harden_init_containers(
    init_containers: &mut [Value],
    at: &str,
    notes: &mut Vec<Note>,
) -> Result<(), MpiJobError> {
    for (i, c) in init_containers.iter_mut().enumerate() {
        let c_at = format!("{at}.initContainers[{i}]");
        if c["name"] == INSTALL_CONTAINER {
            return Err(MpiJobError::field(
                format!("{c_at}.name"),
                format!("{INSTALL_CONTAINER} is the name of the init container that installs the runtime"),
                "rename it",
            ));
        }
        let sc = harden::container(
            c.get("securityContext"),
            &format!("{c_at}.securityContext"),
            false,
            notes,
        )?;
        c["securityContext"] = Value::Object(sc);
        if let Some(Value::Array(ports)) = c.get_mut("ports") {
            for p in ports.iter_mut() {
                if let Some(h) = p.as_object_mut().and_then(|p| p.remove("hostPort")) {
                    notes.push(Note::new(
                        format!("{c_at}.ports"),
                        format!("hostPort {h} removed: the restricted level allows no host ports"),
                    ));
                }
            }
        }
    }

    Ok(())
}

/// The rest of the pod spec: the Worker's, less what the job's own pods set; what is dropped
/// or replaced is noted.
fn pod_spec(
    base: &Replica,
    pod_sc: Map<String, Value>,
    notes: &mut Vec<Note>,
) -> Map<String, Value> {
    let at = base.path.as_str();
    let mut spec: Map<String, Value> = base
        .spec
        .iter()
        .filter(|(k, _)| !POD_OWN.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    spec.insert("securityContext".into(), Value::Object(pod_sc));
    for (field, why) in [
        (
            "hostNetwork",
            "dropped: the restricted level allows no host network; the pods use the pod network",
        ),
        (
            "hostPID",
            "dropped: the restricted level allows no host process namespace",
        ),
        (
            "hostIPC",
            "dropped: the restricted level allows no host IPC namespace",
        ),
    ] {
        if base.spec.get(field) == Some(&json!(true)) {
            notes.push(Note::new(format!("{at}.{field}"), why));
        }
    }
    for (field, why) in [
        ("serviceAccountName", "replaced by the job's own ServiceAccount (it may read the job's pods)"),
        ("serviceAccount", "replaced by the job's own ServiceAccount (it may read the job's pods)"),
        ("automountServiceAccountToken", "the job's pods mount the token of their ServiceAccount (the launcher reads the pods with it)"),
        ("hostname", "dropped: each pod is named after the job and its index"),
        ("subdomain", "dropped: the pods find each other through the API, not DNS"),
    ] {
        if base.spec.get(field).is_some_and(|v| !v.is_null()) {
            notes.push(Note::new(format!("{at}.{field}"), why));
        }
    }

    spec
}

#[cfg(test)]
mod tests;
