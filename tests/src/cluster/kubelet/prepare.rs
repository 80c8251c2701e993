//! What a container needs before it starts: volumes, service-account files, environment,
//! command, and (for image pods) its root filesystem and security settings.

use super::env::{expand, field_ref, resource_field};
use super::pod::PodCtx;
use super::volumes::{decoded, volume_modes, write_file, write_items};
use super::{s, SA_MOUNT};
use crate::api::resources::{CONFIGMAPS, SECRETS, SERVICEACCOUNTS};
use crate::cluster::security;
use crate::container::{Container, Tmpfs};
use crate::images::MountedImage;
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

impl PodCtx {
    pub(super) fn prepare(
        &self,
        pod: &Value,
        c: &Value,
        image: Option<&MountedImage>,
    ) -> Result<Prepared, PrepareError> {
        let fatal = |m: String| PrepareError::Fatal(m);
        // What the container runs as (image pods only); refusals keep the pod waiting.
        let security = match image {
            Some(mi) => Some(
                security::resolve(pod, c, &mi.config, &mi.rootfs)
                    .map_err(|e| PrepareError::Config(e.reason, e.message))?,
            ),
            None => None,
        };
        let fs_group = security.as_ref().and_then(|s| s.fs_group);
        let mut tmpfs: Vec<Tmpfs> = Vec::new();
        let mut memory_volumes: Vec<String> = Vec::new();
        let mut read_only_mounts: Vec<PathBuf> = Vec::new();
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| fatal(format!("creating {}: {e}", self.dir.display())))?;
        let mut mounts: Vec<(PathBuf, PathBuf)> = Vec::new();
        // Service account: token, CA and namespace, mounted where in-cluster clients look.
        let sa = s(pod, "/spec/serviceAccountName");
        let sa = if sa.is_empty() {
            "default".to_string()
        } else {
            sa
        };
        let sa_obj = self.store.get(&SERVICEACCOUNTS, &self.ns, &sa).ok();
        let automount = pod
            .pointer("/spec/automountServiceAccountToken")
            .and_then(Value::as_bool)
            .or_else(|| {
                sa_obj.as_ref().and_then(|o| {
                    o.get("automountServiceAccountToken")
                        .and_then(Value::as_bool)
                })
            })
            .unwrap_or(true);
        if automount {
            if sa_obj.is_none() {
                return Err(PrepareError::Retry(format!(
                    "serviceaccount \"{sa}\" not found"
                )));
            }
            let d = self.dir.join("serviceaccount");
            let token = self.api.service_account_token(&self.ns, &sa);
            let ca = std::fs::read(self.api.ca_pem_path())
                .map_err(|e| fatal(format!("reading the cluster CA: {e}")))?;
            let w = |f: &str, b: &[u8]| {
                std::fs::create_dir_all(&d).and_then(|_| std::fs::write(d.join(f), b))
            };
            w("token", token.as_bytes())
                .and_then(|_| w("ca.crt", &ca))
                .and_then(|_| w("namespace", self.ns.as_bytes()))
                .map_err(|e| fatal(format!("writing the service-account files: {e}")))?;
            let mounted_elsewhere = c["volumeMounts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|m| m["mountPath"] == SA_MOUNT));
            if !mounted_elsewhere {
                mounts.push((d, PathBuf::from(SA_MOUNT)));
            }
        }
        // Volumes.
        let mut vol_dirs: HashMap<String, PathBuf> = HashMap::new();
        for v in pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            let vname = v["name"].as_str().unwrap_or("").to_string();
            let d = self.dir.join("volumes").join(&vname);
            let mkdir = |d: &Path| {
                std::fs::create_dir_all(d)
                    .map_err(|e| fatal(format!("creating {}: {e}", d.display())))
            };
            if let Some(sec) = v.get("secret") {
                let name = sec["secretName"].as_str().unwrap_or("");
                let optional = sec["optional"].as_bool().unwrap_or(false);
                mkdir(&d)?;
                match self.store.get(&SECRETS, &self.ns, name) {
                    Ok(obj) => {
                        let data = decoded(&obj["data"]);
                        write_items(&d, &data, sec.get("items")).map_err(fatal)?;
                        if image.is_some() {
                            volume_modes(&d, sec, fs_group).map_err(fatal)?;
                        }
                    }
                    Err(_) if optional => {}
                    Err(_) => {
                        return Err(PrepareError::Retry(format!(
                            "secret \"{name}\" not found (volume {vname})"
                        )))
                    }
                }
            } else if let Some(cm) = v.get("configMap") {
                let name = cm["name"].as_str().unwrap_or("");
                let optional = cm["optional"].as_bool().unwrap_or(false);
                mkdir(&d)?;
                match self.store.get(&CONFIGMAPS, &self.ns, name) {
                    Ok(obj) => {
                        let mut data: Vec<(String, Vec<u8>)> = obj["data"]
                            .as_object()
                            .map(|m| {
                                m.iter()
                                    .map(|(k, v)| {
                                        (k.clone(), v.as_str().unwrap_or("").as_bytes().to_vec())
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        data.extend(decoded(&obj["binaryData"]));
                        write_items(&d, &data, cm.get("items")).map_err(fatal)?;
                        if image.is_some() {
                            volume_modes(&d, cm, fs_group).map_err(fatal)?;
                        }
                    }
                    Err(_) if optional => {}
                    Err(_) => {
                        return Err(PrepareError::Retry(format!(
                            "configmap \"{name}\" not found (volume {vname})"
                        )))
                    }
                }
            } else if let Some(da) = v.get("downwardAPI") {
                mkdir(&d)?;
                for it in da["items"].as_array().cloned().unwrap_or_default() {
                    let path = it["path"].as_str().unwrap_or("");
                    let field = it
                        .pointer("/fieldRef/fieldPath")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let text = match field {
                        "metadata.labels" | "metadata.annotations" => {
                            let key = field.trim_start_matches("metadata.");
                            pod["metadata"][key]
                                .as_object()
                                .map(|m| {
                                    m.iter()
                                        .map(|(k, v)| {
                                            format!(
                                                "{k}={}\n",
                                                Value::String(v.as_str().unwrap_or("").into())
                                            )
                                        })
                                        .collect::<String>()
                                })
                                .unwrap_or_default()
                        }
                        f => field_ref(pod, f).unwrap_or_default(),
                    };
                    write_file(&d, path, text.as_bytes()).map_err(fatal)?;
                }
                if image.is_some() {
                    volume_modes(&d, da, fs_group).map_err(fatal)?;
                }
            } else if let Some(ed) = v.get("emptyDir") {
                mkdir(&d)?;
                if image.is_some() {
                    // As the kubelet: world-writable, group fsGroup with setgid; medium Memory is a
                    // tmpfs in the container.
                    let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
                    if ed["medium"] == "Memory" {
                        memory_volumes.push(vname.clone());
                    }
                    std::os::unix::fs::chown(&d, None, fs_group)
                        .map_err(|e| fatal(format!("chown {}: {e}", d.display())))?;
                    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| fatal(format!("chmod {}: {e}", d.display())))?;
                }
            } else if let Some(hp) = v.get("hostPath") {
                let p = PathBuf::from(hp["path"].as_str().unwrap_or(""));
                if hp["type"]
                    .as_str()
                    .is_some_and(|t| t == "DirectoryOrCreate")
                {
                    mkdir(&p)?;
                }
                if !p.exists() {
                    return Err(fatal(format!(
                        "hostPath {} of volume {vname} does not exist",
                        p.display()
                    )));
                }
                vol_dirs.insert(vname, p);
                continue;
            } else if v.get("projected").is_some() {
                // The usual projected service-account volume is served by the mount above.
                mkdir(&d)?;
            } else {
                return Err(fatal(format!("volume {vname}: only secret, configMap, downwardAPI, emptyDir, hostPath and projected volumes are supported in the sandbox")));
            }
            vol_dirs.insert(vname, d);
        }
        for m in c["volumeMounts"].as_array().cloned().unwrap_or_default() {
            let vname = m["name"].as_str().unwrap_or("");
            let path = m["mountPath"].as_str().unwrap_or("");
            let src = vol_dirs.get(vname).ok_or_else(|| {
                fatal(format!(
                    "volumeMount {path} names volume {vname:?}, which the pod does not have"
                ))
            })?;
            let src = match m["subPath"].as_str().filter(|s| !s.is_empty()) {
                Some(sp) => src.join(sp),
                None => src.clone(),
            };
            if !Path::new(path).is_absolute() {
                return Err(fatal(format!("volumeMount path {path:?} is not absolute")));
            }
            if image.is_some() && memory_volumes.iter().any(|v| v == vname) {
                let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
                tmpfs.push(Tmpfs {
                    path: PathBuf::from(path),
                    mode,
                    gid: fs_group.unwrap_or(0),
                });
                continue;
            }
            if m["readOnly"].as_bool().unwrap_or(false) {
                read_only_mounts.push(PathBuf::from(path));
            }
            mounts.push((src, PathBuf::from(path)));
        }
        // Environment.
        let mut env: Vec<(String, String)> = Vec::new();
        let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
            env.retain(|(n, _)| *n != k);
            env.push((k, v));
        };
        // The image's environment comes first; the pod's overrides it.
        if let Some(mi) = image {
            for (k, v) in &mi.config.env {
                set(&mut env, k.clone(), v.clone());
            }
        }
        let api = self.api.addr();
        let host = self.net.gateway().to_string();
        let port = api.port().to_string();
        for (k, v) in [
            ("KUBERNETES_SERVICE_HOST", host.clone()),
            ("KUBERNETES_SERVICE_PORT", port.clone()),
            ("KUBERNETES_SERVICE_PORT_HTTPS", port.clone()),
            ("KUBERNETES_PORT", format!("tcp://{host}:{port}")),
            (
                &*format!("KUBERNETES_PORT_{port}_TCP"),
                format!("tcp://{host}:{port}"),
            ),
            (
                &*format!("KUBERNETES_PORT_{port}_TCP_PROTO"),
                "tcp".to_string(),
            ),
            (&*format!("KUBERNETES_PORT_{port}_TCP_PORT"), port.clone()),
            (&*format!("KUBERNETES_PORT_{port}_TCP_ADDR"), host.clone()),
        ] {
            set(&mut env, k.to_string(), v);
        }
        let hostname = pod["spec"]["hostname"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.name)
            .to_string();
        set(&mut env, "HOSTNAME".into(), hostname.clone());
        for ef in c["envFrom"].as_array().cloned().unwrap_or_default() {
            let prefix = ef["prefix"].as_str().unwrap_or("");
            let (obj, optional, what) = if let Some(r) = ef.get("secretRef") {
                (
                    self.store
                        .get(&SECRETS, &self.ns, r["name"].as_str().unwrap_or(""))
                        .ok()
                        .map(|o| decoded(&o["data"])),
                    r["optional"].as_bool().unwrap_or(false),
                    format!("secret {:?}", r["name"]),
                )
            } else if let Some(r) = ef.get("configMapRef") {
                (
                    self.store
                        .get(&CONFIGMAPS, &self.ns, r["name"].as_str().unwrap_or(""))
                        .ok()
                        .map(|o| {
                            o["data"]
                                .as_object()
                                .map(|m| {
                                    m.iter()
                                        .map(|(k, v)| {
                                            (
                                                k.clone(),
                                                v.as_str().unwrap_or("").as_bytes().to_vec(),
                                            )
                                        })
                                        .collect()
                                })
                                .unwrap_or_default()
                        }),
                    r["optional"].as_bool().unwrap_or(false),
                    format!("configmap {:?}", r["name"]),
                )
            } else {
                continue;
            };
            match obj {
                Some(kv) => {
                    for (k, v) in kv {
                        set(
                            &mut env,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        );
                    }
                }
                None if optional => {}
                None => return Err(PrepareError::Retry(format!("{what} not found (envFrom)"))),
            }
        }
        for e in c["env"].as_array().cloned().unwrap_or_default() {
            let name = e["name"].as_str().unwrap_or("").to_string();
            let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
                expand(v, &env)
            } else if let Some(vf) = e.get("valueFrom") {
                if let Some(fp) = vf.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
                    match field_ref(pod, fp) {
                        Some(v) => v,
                        None if fp == "status.podIP" || fp == "status.podIPs" => {
                            POD_IP_MARK.to_string()
                        }
                        None if fp == "status.hostIP" || fp == "status.hostIPs" => host.clone(),
                        None => {
                            return Err(fatal(format!("env {name}: unsupported fieldRef {fp:?}")))
                        }
                    }
                } else if let Some(r) = vf.get("secretKeyRef") {
                    let optional = r["optional"].as_bool().unwrap_or(false);
                    let (sn, key) = (
                        r["name"].as_str().unwrap_or(""),
                        r["key"].as_str().unwrap_or(""),
                    );
                    match self
                        .store
                        .get(&SECRETS, &self.ns, sn)
                        .ok()
                        .and_then(|o| decoded(&o["data"]).into_iter().find(|(k, _)| k == key))
                    {
                        Some((_, v)) => String::from_utf8_lossy(&v).into_owned(),
                        None if optional => continue,
                        None => {
                            return Err(PrepareError::Retry(format!(
                                "couldn't find key {key} in Secret {}/{sn}",
                                self.ns
                            )))
                        }
                    }
                } else if let Some(r) = vf.get("configMapKeyRef") {
                    let optional = r["optional"].as_bool().unwrap_or(false);
                    let (cn, key) = (
                        r["name"].as_str().unwrap_or(""),
                        r["key"].as_str().unwrap_or(""),
                    );
                    match self
                        .store
                        .get(&CONFIGMAPS, &self.ns, cn)
                        .ok()
                        .and_then(|o| o["data"][key].as_str().map(String::from))
                    {
                        Some(v) => v,
                        None if optional => continue,
                        None => {
                            return Err(PrepareError::Retry(format!(
                                "couldn't find key {key} in ConfigMap {}/{cn}",
                                self.ns
                            )))
                        }
                    }
                } else if let Some(r) = vf.get("resourceFieldRef") {
                    resource_field(c, r)
                } else {
                    return Err(fatal(format!("env {name}: unsupported valueFrom")));
                }
            } else {
                String::new()
            };
            set(&mut env, name, value);
        }
        let list = |k: &str| -> Vec<String> {
            c[k].as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| expand(x.as_str().unwrap_or(""), &env))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (cmd_field, args_field) = (list("command"), list("args"));
        if let (Some(mi), Some(sec)) = (image, security) {
            // Kubernetes' rules: command replaces ENTRYPOINT (and drops CMD), args replaces CMD.
            let (mut command, args) = match (cmd_field.is_empty(), args_field.is_empty()) {
                (false, _) => (cmd_field, args_field),
                (true, false) => (mi.config.entrypoint.clone(), args_field),
                (true, true) => (mi.config.entrypoint.clone(), mi.config.cmd.clone()),
            };
            command.extend(args);
            if command.is_empty() {
                return Err(PrepareError::Config(
                    "CreateContainerError",
                    format!("failed to create container {}: no command specified (neither the pod nor image {} sets one)", c["name"].as_str().unwrap_or(""), mi.config.resolved),
                ));
            }
            if !env.iter().any(|(k, _)| k == "HOME") {
                set(
                    &mut env,
                    "HOME".into(),
                    sec.home.clone().unwrap_or_else(|| "/".into()),
                );
            }
            let workdir = c["workingDir"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or(Some(mi.config.workdir.as_str()).filter(|s| !s.is_empty()))
                .map(PathBuf::from);
            let container = Container {
                rootfs: mi.rootfs.clone(),
                read_only_root: sec.read_only_root,
                uid: sec.uid,
                gid: sec.gid,
                groups: sec.groups,
                capabilities: sec.capabilities,
                no_new_privs: sec.no_new_privs,
                read_only_mounts,
                tmpfs,
            };
            return Ok(Prepared {
                hostname,
                command,
                env,
                workdir,
                mounts,
                container: Some(container),
            });
        }
        let mut command = cmd_field;
        command.extend(args_field);
        if command.is_empty() {
            return Err(fatal(format!(
                "container {} has no command: sandbox pods run host programs, not images, so spec.containers[].command is required",
                c["name"].as_str().unwrap_or("")
            )));
        }
        // As a container runtime would, refuse to start what cannot be executed.
        let path_var = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| crate::podnet::DEFAULT_PATH.to_string());
        if !executable_exists(&command[0], &path_var) {
            return Err(fatal(format!(
                "failed to start container {}: exec: {:?}: executable file not found in $PATH ({path_var}); sandbox pods run programs of the host filesystem",
                c["name"].as_str().unwrap_or(""),
                command[0]
            )));
        }
        let workdir = c["workingDir"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        Ok(Prepared {
            hostname,
            command,
            env,
            workdir,
            mounts,
            container: None,
        })
    }
}

/// Stands for the pod IP in the environment until the address is allocated.
pub(super) const POD_IP_MARK: &str = "\u{1}pod-ip\u{1}";

pub(super) struct Prepared {
    pub(super) hostname: String,
    pub(super) command: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) workdir: Option<PathBuf>,
    pub(super) mounts: Vec<(PathBuf, PathBuf)>,
    /// Set for pods that run an image.
    pub(super) container: Option<Container>,
}

pub(super) enum PrepareError {
    /// Will not get better (bad spec): the pod fails.
    Fatal(String),
    /// Waits for something to appear (Secret, ConfigMap, ServiceAccount).
    Retry(String),
    /// The container cannot be created as specified (e.g. runAsNonRoot with a root image): the
    /// pod stays Pending with this waiting reason, as on a node.
    Config(&'static str, String),
}

fn executable_exists(cmd: &str, path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.contains('/') {
        return ok(Path::new(cmd));
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .any(|d| ok(&Path::new(d).join(cmd)))
}
