//! The MPIJob's security contexts, kept but made "restricted" where they are weaker (each
//! change said in one note per context): every pod of the job runs at Kubernetes' restricted
//! pod security level, as the jobs `prrte-k8s manifest` renders from options do.

use serde_json::{json, Map, Value};

use super::error::{MpiJobError, Note};
use super::reader::show;
use crate::manifest::restricted::{ALLOWED_CAPABILITY, SAFE_SYSCTLS, SELINUX_TYPES};

/// The uid the pods run as when the MPIJob names none: mpi-operator's images' `mpiuser`.
pub(super) const DEFAULT_UID: u32 = 1000;

/// Who the application container runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Identity {
    pub uid: u32,
    pub gid: Option<u32>,
}

/// What one context had changed.
struct Changes(Vec<String>);

impl Changes {
    fn set(&mut self, sc: &mut Map<String, Value>, key: &str, value: Value) {
        let was = sc.get(key).map(show).unwrap_or_else(|| "unset".into());
        self.0.push(format!("{key} {} (was {was})", show(&value)));
        sc.insert(key.into(), value);
    }

    fn remove(&mut self, sc: &mut Map<String, Value>, key: &str, why: &str) {
        if let Some(v) = sc.remove(key) {
            self.0.push(format!("{key} {} removed ({why})", show(&v)));
        }
    }

    fn note(self, field: &str, notes: &mut Vec<Note>) {
        if !self.0.is_empty() {
            notes.push(Note::new(
                field,
                format!("made restricted: {}", self.0.join(", ")),
            ));
        }
    }
}

/// A securityContext field as an object (absent: empty).
fn context(sc: Option<&Value>, field: &str) -> Result<Map<String, Value>, MpiJobError> {
    match sc {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(other) => Err(MpiJobError::field(
            field,
            format!("is {}, not an object", show(other)),
            "give a securityContext mapping",
        )),
    }
}

/// The rules a pod's and a container's contexts share: SELinux, AppArmor, `/proc`, Windows
/// host processes, a root uid.
fn shared_rules(sc: &mut Map<String, Value>, ch: &mut Changes) {
    if let Some(Value::Object(se)) = sc.get("seLinuxOptions") {
        let bad_type = se
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty() && !SELINUX_TYPES.contains(&t));
        let user_or_role = ["user", "role"].iter().any(|f| {
            se.get(*f)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        });
        if bad_type || user_or_role {
            ch.remove(
                sc,
                "seLinuxOptions",
                "only the container SELinux types, no user or role",
            );
        }
    }
    if sc
        .get("procMount")
        .and_then(Value::as_str)
        .is_some_and(|p| p != "Default")
    {
        ch.remove(sc, "procMount", "only the default /proc mount");
    }
    if sc
        .get("windowsOptions")
        .is_some_and(|w| w["hostProcess"] == true)
    {
        ch.remove(sc, "windowsOptions", "no host processes");
    }
    if sc
        .get("appArmorProfile")
        .is_some_and(|a| a["type"] == "Unconfined")
    {
        ch.set(sc, "appArmorProfile", json!({"type": "RuntimeDefault"}));
    }
    if sc
        .get("seccompProfile")
        .is_some_and(|s| s["type"] == "Unconfined")
    {
        ch.set(sc, "seccompProfile", json!({"type": "RuntimeDefault"}));
    }
    if sc.get("runAsUser").and_then(Value::as_i64) == Some(0) {
        ch.set(sc, "runAsUser", json!(DEFAULT_UID));
    }
}

/// A container's securityContext at `field` made restricted (`read_only_root`: the root file
/// system read-only too, as the application container's always is).
pub(super) fn container(
    sc: Option<&Value>,
    field: &str,
    read_only_root: bool,
    notes: &mut Vec<Note>,
) -> Result<Map<String, Value>, MpiJobError> {
    let mut sc = context(sc, field)?;
    let mut ch = Changes(Vec::new());
    if sc.get("privileged") == Some(&json!(true)) {
        ch.set(&mut sc, "privileged", json!(false));
    }
    if sc.get("allowPrivilegeEscalation") != Some(&json!(false)) {
        ch.set(&mut sc, "allowPrivilegeEscalation", json!(false));
    }
    let caps = sc.get("capabilities").cloned().unwrap_or(Value::Null);
    let drops_all = caps["drop"]
        .as_array()
        .is_some_and(|d| d.iter().any(|c| c == "ALL"));
    let added: Vec<Value> = caps["add"].as_array().cloned().unwrap_or_default();
    let kept: Vec<Value> = added
        .iter()
        .filter(|c| *c == ALLOWED_CAPABILITY)
        .cloned()
        .collect();
    if !drops_all || kept.len() != added.len() {
        let mut new = json!({"drop": ["ALL"]});
        if !kept.is_empty() {
            new["add"] = Value::Array(kept);
        }
        ch.set(&mut sc, "capabilities", new);
    }
    if sc.get("runAsNonRoot") == Some(&json!(false)) {
        ch.set(&mut sc, "runAsNonRoot", json!(true));
    }
    if read_only_root && sc.get("readOnlyRootFilesystem") != Some(&json!(true)) {
        ch.set(&mut sc, "readOnlyRootFilesystem", json!(true));
    }
    shared_rules(&mut sc, &mut ch);
    ch.note(field, notes);
    Ok(sc)
}

/// The pod's securityContext at `field` made restricted, given the application container's
/// (already restricted) `app`; returns it and who the application runs as. With no uid
/// anywhere, the pods run as [`DEFAULT_UID`]; the group of the job's Secret (mode 0440) is
/// fsGroup, else the application's group, else its uid.
pub(super) fn pod(
    sc: Option<&Value>,
    field: &str,
    app: &Map<String, Value>,
    notes: &mut Vec<Note>,
) -> Result<(Map<String, Value>, Identity), MpiJobError> {
    let mut sc = context(sc, field)?;
    let mut ch = Changes(Vec::new());
    if sc.get("runAsNonRoot") != Some(&json!(true)) {
        ch.set(&mut sc, "runAsNonRoot", json!(true));
    }
    let seccomp_fine = matches!(
        sc.get("seccompProfile").and_then(|s| s["type"].as_str()),
        Some("RuntimeDefault" | "Localhost")
    );
    if !seccomp_fine {
        ch.set(&mut sc, "seccompProfile", json!({"type": "RuntimeDefault"}));
    }
    if let Some(Value::Array(sysctls)) = sc.get("sysctls") {
        let (safe, unsafe_): (Vec<Value>, Vec<Value>) = sysctls.iter().cloned().partition(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| SAFE_SYSCTLS.contains(&n))
        });
        if !unsafe_.is_empty() {
            let names: Vec<String> = unsafe_.iter().map(|s| show(&s["name"])).collect();
            ch.0.push(format!(
                "sysctls {} removed (only the safe sysctls)",
                names.join(", ")
            ));
            if safe.is_empty() {
                sc.remove("sysctls");
            } else {
                sc.insert("sysctls".into(), Value::Array(safe));
            }
        }
    }
    shared_rules(&mut sc, &mut ch);
    let number = |m: &Map<String, Value>, k: &str| {
        m.get(k)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    let uid = match number(app, "runAsUser").or_else(|| number(&sc, "runAsUser")) {
        Some(u) => u,
        None => {
            ch.0.push(format!(
                "runAsUser {DEFAULT_UID} (was unset: the image's user cannot be checked to be non-root; set runAsUser to choose the uid)"
            ));
            sc.insert("runAsUser".into(), json!(DEFAULT_UID));
            DEFAULT_UID
        }
    };
    let gid = number(app, "runAsGroup").or_else(|| number(&sc, "runAsGroup"));
    if number(&sc, "fsGroup").is_none() {
        let g = gid.unwrap_or(uid);
        ch.0.push(format!(
            "fsGroup {g} (was unset: the job's Secret is readable by its group)"
        ));
        sc.insert("fsGroup".into(), json!(g));
    }
    ch.note(field, notes);
    Ok((sc, Identity { uid, gid }))
}
