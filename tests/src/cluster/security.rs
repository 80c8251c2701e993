//! A pod's `securityContext` turned into what the container runs with, as the kubelet and a
//! CRI runtime (containerd) compute it: user, groups, capabilities, `no_new_privs`, read-only
//! root; and the kubelet's `runAsNonRoot` check with its own error messages.

use crate::images::{self, ImageConfig};
use crate::runtime::container::{cap_name, DEFAULT_CAPABILITIES};
use serde_json::Value;
use std::path::Path;

/// Why a container cannot be created, with the waiting reason the kubelet reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// `CreateContainerConfigError` (the kubelet refused) or `CreateContainerError` (the
    /// runtime could not).
    pub reason: &'static str,
    pub message: String,
}

/// What the container runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Security {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// The user's home directory from the image's `/etc/passwd` (for `HOME`).
    pub home: Option<String>,
    pub capabilities: Vec<String>,
    pub no_new_privs: bool,
    pub read_only_root: bool,
    pub fs_group: Option<u32>,
}

/// `name_namespace(uid)`, the kubelet's way of naming a pod in messages.
pub fn format_pod(pod: &Value) -> String {
    let m = &pod["metadata"];
    format!(
        "{}_{}({})",
        m["name"].as_str().unwrap_or(""),
        m["namespace"].as_str().unwrap_or(""),
        m["uid"].as_str().unwrap_or("")
    )
}

fn sc_field<'a>(pod: &'a Value, c: &'a Value, key: &str) -> Option<&'a Value> {
    c.pointer(&format!("/securityContext/{key}"))
        .filter(|v| !v.is_null())
        .or_else(|| {
            pod.pointer(&format!("/spec/securityContext/{key}"))
                .filter(|v| !v.is_null())
        })
}

/// The kubelet's `runAsNonRoot` check (before the container is created).
pub fn verify_run_as_non_root(pod: &Value, c: &Value, image_user: &str) -> Result<(), ConfigError> {
    if !sc_field(pod, c, "runAsNonRoot")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return Ok(());
    }
    let cname = c["name"].as_str().unwrap_or("");
    let err = |message: String| {
        Err(ConfigError {
            reason: "CreateContainerConfigError",
            message,
        })
    };
    if let Some(u) = sc_field(pod, c, "runAsUser").and_then(Value::as_i64) {
        if u == 0 {
            return err(format!(
                "container's runAsUser breaks non-root policy (pod: \"{}\", container: {cname})",
                format_pod(pod)
            ));
        }
        return Ok(());
    }
    let user = image_user.split(':').next().unwrap_or("");
    match user.parse::<i64>() {
        _ if user.is_empty() => err(format!("container has runAsNonRoot and image will run as root (pod: \"{}\", container: {cname})", format_pod(pod))),
        Ok(0) => err(format!("container has runAsNonRoot and image will run as root (pod: \"{}\", container: {cname})", format_pod(pod))),
        Ok(_) => Ok(()),
        Err(_) => err(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: \"{}\", container: {cname})",
            format_pod(pod)
        )),
    }
}

/// The container's user, groups and privileges from the pod, the container and the image.
pub fn resolve(
    pod: &Value,
    c: &Value,
    image: &ImageConfig,
    rootfs: &Path,
) -> Result<Security, ConfigError> {
    verify_run_as_non_root(pod, c, &image.user)?;
    let passwd = images::passwd(rootfs);
    let groups = images::groups(rootfs);
    let (uid, gid) = user_and_group(pod, c, image, &passwd, &groups)?;
    let entry = passwd.iter().find(|p| p.uid == uid);
    let mut extra: Vec<u32> = Vec::new();
    if let Some(e) = entry {
        extra.extend(
            groups
                .iter()
                .filter(|(_, _, members)| members.contains(&e.name))
                .map(|(_, id, _)| *id),
        );
    }
    extra.extend(
        pod.pointer("/spec/securityContext/supplementalGroups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_i64)
            .map(|g| g as u32),
    );
    let fs_group = as_u32(pod.pointer("/spec/securityContext/fsGroup"));
    extra.extend(fs_group);
    let mut seen = std::collections::BTreeSet::new();
    extra.retain(|g| seen.insert(*g));

    let privileged = c
        .pointer("/securityContext/privileged")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let no_new_privs = !privileged
        && c.pointer("/securityContext/allowPrivilegeEscalation")
            .and_then(Value::as_bool)
            == Some(false);
    let read_only_root = c
        .pointer("/securityContext/readOnlyRootFilesystem")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Security {
        uid,
        gid,
        groups: extra,
        home: entry.map(|e| e.home.clone()).filter(|h| !h.is_empty()),
        capabilities: capabilities(c, privileged)?,
        no_new_privs,
        read_only_root,
        fs_group,
    })
}

fn as_u32(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_i64).map(|n| n as u32)
}

fn runtime_err(message: String) -> ConfigError {
    ConfigError {
        reason: "CreateContainerError",
        message,
    }
}

/// uid and gid: `runAsUser`/`runAsGroup`, else the image's `USER` (names looked up in its
/// `/etc/passwd` and `/etc/group`), else root and the user's primary group.
fn user_and_group(
    pod: &Value,
    c: &Value,
    image: &ImageConfig,
    passwd: &[images::PasswdEntry],
    groups: &[(String, u32, Vec<String>)],
) -> Result<(u32, u32), ConfigError> {
    let run_as_user = as_u32(sc_field(pod, c, "runAsUser"));
    let (uid, image_group) = match run_as_user {
        Some(u) => (u, None),
        None => {
            let (user, group) = match image.user.split_once(':') {
                Some((u, g)) => (u, Some(g)),
                None => (image.user.as_str(), None),
            };
            let uid = if user.is_empty() {
                0
            } else if let Ok(n) = user.parse::<u32>() {
                n
            } else {
                passwd
                    .iter()
                    .find(|p| p.name == user)
                    .map(|p| p.uid)
                    .ok_or_else(|| {
                        runtime_err(format!(
                            "unable to find user {user}: no matching entries in passwd file"
                        ))
                    })?
            };
            (uid, group.filter(|g| !g.is_empty()))
        }
    };
    let entry = passwd.iter().find(|p| p.uid == uid);
    let gid = match (as_u32(sc_field(pod, c, "runAsGroup")), image_group) {
        (Some(g), _) => g,
        (None, Some(g)) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => groups
                .iter()
                .find(|(n, _, _)| n == g)
                .map(|(_, id, _)| *id)
                .ok_or_else(|| {
                    runtime_err(format!(
                        "unable to find group {g}: no matching entries in group file"
                    ))
                })?,
        },
        (None, None) => entry.map(|e| e.gid).unwrap_or(0),
    };
    Ok((uid, gid))
}

/// The capabilities kept: every one when privileged, else the runtime's defaults with the
/// container's `drop` and `add` (`ALL` in either).
fn capabilities(c: &Value, privileged: bool) -> Result<Vec<String>, ConfigError> {
    let all: Vec<String> = caps::all().into_iter().map(|c| c.to_string()).collect();
    if privileged {
        return Ok(all);
    }
    let mut capabilities: Vec<String> =
        DEFAULT_CAPABILITIES.iter().map(|s| s.to_string()).collect();
    let list = |k: &str| -> Vec<String> {
        c.pointer(&format!("/securityContext/capabilities/{k}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(cap_name)
            .collect()
    };
    let (add, drop) = (list("add"), list("drop"));
    if add.iter().any(|a| a == "CAP_ALL") {
        capabilities = all.clone();
    }
    if drop.iter().any(|d| d == "CAP_ALL") {
        capabilities.clear();
    }
    for a in add.iter().filter(|a| *a != "CAP_ALL") {
        if !all.contains(a) {
            return Err(runtime_err(format!("unknown capability {a:?} to add")));
        }
        if !capabilities.contains(a) {
            capabilities.push(a.clone());
        }
    }
    capabilities.retain(|c| !drop.contains(c));
    Ok(capabilities)
}

#[cfg(test)]
mod tests;
