//! The Worker's volumes and mounts: the types the restricted level refuses, the paths the job's
//! own volumes take, and names the job's own volumes already use.

use serde_json::{json, Value};

use super::error::{MpiJobError, Note};
use crate::manifest::inject::{RUNTIME_DIR, RUNTIME_VOLUME};
use crate::manifest::layout::OWN_VOLUMES;
use crate::manifest::restricted::VOLUME_TYPES;

/// Refuses volume types the restricted level does not allow.
pub(super) fn check_volumes(volumes: &[Value], at: &str) -> Result<(), MpiJobError> {
    for v in volumes {
        let name = v["name"].as_str().unwrap_or("");
        if let Some(t) = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .find(|k| *k != "name" && !VOLUME_TYPES.contains(k))
        {
            return Err(MpiJobError::field(
                format!("{at}.volumes[{name}].{t}"),
                format!(
                    "the job runs at the restricted pod security level, which allows no {t} volume"
                ),
                format!(
                    "use one of {} (a persistentVolumeClaim for shared data)",
                    VOLUME_TYPES.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses mounts over the agent's own directories; notes the scratch directories a volume
/// of the pod's own takes over.
pub(super) fn check_mounts(
    mounts: &[Value],
    at: &str,
    notes: &mut Vec<Note>,
) -> Result<(), MpiJobError> {
    for m in mounts {
        let path = m["mountPath"].as_str().unwrap_or("").trim_end_matches('/');
        if path == RUNTIME_DIR {
            return Err(MpiJobError::field(
                format!("{at}.volumeMounts[{path}]"),
                "is where the injected runtime is mounted",
                "mount the volume elsewhere",
            ));
        }
        if let Some(own) = OWN_VOLUMES.iter().find(|v| v.path == path) {
            if own.replaceable {
                notes.push(Note::new(
                    format!("{at}.volumeMounts[{path}]"),
                    format!(
                        "kept in place of the job's own emptyDir {} at {path}",
                        own.name
                    ),
                ));
            } else {
                return Err(MpiJobError::field(
                    format!("{at}.volumeMounts[{path}]"),
                    format!(
                        "is where the job's {} volume is mounted (the agent needs it)",
                        own.name
                    ),
                    "mount the volume elsewhere",
                ));
            }
        }
    }
    Ok(())
}

/// Gives the pod's volumes whose names the job's own volumes use another name, in the mounts
/// that name them too.
pub(super) fn rename_volumes(
    volumes: &mut [Value],
    mounts: &mut [Value],
    init: &mut [Value],
    at: &str,
    notes: &mut Vec<Note>,
) {
    let taken = |n: &str, vs: &[Value]| {
        n == RUNTIME_VOLUME
            || OWN_VOLUMES.iter().any(|o| o.name == n)
            || vs.iter().any(|v| v["name"] == n)
    };
    for i in 0..volumes.len() {
        let name = volumes[i]["name"].as_str().unwrap_or("").to_string();
        if !(name == RUNTIME_VOLUME || OWN_VOLUMES.iter().any(|o| o.name == name)) {
            continue;
        }
        let mut new = format!("mpijob-{name}");
        let mut n = 2;
        while taken(&new, volumes) {
            new = format!("mpijob-{name}-{n}");
            n += 1;
        }
        volumes[i]["name"] = json!(new);
        let rename = |ms: &mut [Value]| {
            for m in ms.iter_mut() {
                if m["name"] == name.as_str() {
                    m["name"] = json!(new);
                }
            }
        };
        rename(mounts);
        for c in init.iter_mut() {
            if let Some(Value::Array(ms)) = c.get_mut("volumeMounts") {
                rename(ms);
            }
        }
        notes.push(Note::new(
            format!("{at}.volumes[{name}]"),
            format!("renamed {new}: the job's own volume is called {name}"),
        ));
    }
}
