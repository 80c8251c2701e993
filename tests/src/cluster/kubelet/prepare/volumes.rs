//! The pod's volumes on the host (Secret, ConfigMap, downward-API files with the kubelet's
//! modes; emptyDirs; hostPaths), the service-account files, and each container's mounts of
//! them.

use super::error::{fatal, PrepareError};
use super::sources::{config_map_data, decoded, field_ref};
use crate::api::resources::{CONFIGMAPS, SECRETS, SERVICEACCOUNTS};
use crate::cluster::kubelet::containers::PodContainer;
use crate::cluster::kubelet::fields::s;
use crate::cluster::kubelet::pod::PodCtx;
use crate::runtime::container::Tmpfs;
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// In-pod path of the service-account directory.
pub const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The pod's volumes: their directories on the host, by name, and which are memory-backed
/// (emptyDir `medium: Memory` of an image pod: a tmpfs in the container instead).
pub(super) struct Volumes {
    dirs: HashMap<String, PathBuf>,
    memory: Vec<String>,
}

/// A container's mounts.
pub(super) struct Mounts {
    /// (host source, path in the container), the service account's first.
    pub(super) binds: Vec<(PathBuf, PathBuf)>,
    pub(super) tmpfs: Vec<Tmpfs>,
    /// Mount points of `binds` that are read-only.
    pub(super) read_only: Vec<PathBuf>,
}

/// Whether each container's volume contents get the kubelet's modes and fsGroup ownership
/// (image pods; host pods keep the files as written).
#[derive(Clone, Copy)]
struct Modes {
    image_pod: bool,
    fs_group: Option<u32>,
}

fn mkdir(d: &Path) -> Result<(), PrepareError> {
    std::fs::create_dir_all(d).map_err(|e| fatal(format!("creating {}: {e}", d.display())))
}

impl PodCtx {
    /// The pod's service account (`default` when it names none).
    fn service_account_name(pod: &Value) -> String {
        let sa = s(pod, "/spec/serviceAccountName");
        if sa.is_empty() {
            "default".to_string()
        } else {
            sa
        }
    }

    /// A projected volume: its sources' files in one directory, as the kubelet writes them
    /// (`serviceAccountToken`: a token of the pod's service account; `configMap`
    /// `kube-root-ca.crt`, which the API server's controller publishes in every namespace:
    /// the cluster's CA unless the namespace holds one; `secret`, `configMap`, `downwardAPI`
    /// as their own volumes), then the volume's modes.
    fn projected_volume(
        &self,
        pod: &Value,
        d: &Path,
        pj: &Value,
        vname: &str,
        modes: Modes,
    ) -> Result<(), PrepareError> {
        mkdir(d)?;
        let plain = Modes {
            image_pod: false,
            ..modes
        };
        for src in pj["sources"].as_array().cloned().unwrap_or_default() {
            if let Some(t) = src.get("serviceAccountToken") {
                let sa = Self::service_account_name(pod);
                if self.store.get(&SERVICEACCOUNTS, &self.ns, &sa).is_err() {
                    return Err(PrepareError::Retry(format!(
                        "serviceaccount \"{sa}\" not found (volume {vname})"
                    )));
                }
                let token = self.api.service_account_token(&self.ns, &sa);
                write_file(d, t["path"].as_str().unwrap_or(""), token.as_bytes()).map_err(fatal)?;
            } else if let Some(cm) = src.get("configMap") {
                let root_ca = cm["name"] == "kube-root-ca.crt"
                    && self
                        .store
                        .get(&CONFIGMAPS, &self.ns, "kube-root-ca.crt")
                        .is_err();
                if root_ca {
                    let ca = std::fs::read(self.api.ca_pem_path())
                        .map_err(|e| fatal(format!("reading the cluster CA: {e}")))?;
                    write_items(d, &[("ca.crt".to_string(), ca)], cm.get("items"))
                        .map_err(fatal)?;
                } else {
                    self.config_map_volume(d, cm, vname, plain)?;
                }
            } else if let Some(sec) = src.get("secret") {
                let sec = match sec.get("name") {
                    Some(n) => {
                        let mut s = sec.clone();
                        s["secretName"] = n.clone();
                        s
                    }
                    None => sec.clone(),
                };
                self.secret_volume(d, &sec, vname, plain)?;
            } else if let Some(da) = src.get("downwardAPI") {
                downward_api_volume(pod, d, da, plain)?;
            } else {
                return Err(fatal(format!("volume {vname}: only serviceAccountToken, configMap, secret and downwardAPI sources of a projected volume are supported in the sandbox")));
            }
        }
        if modes.image_pod {
            volume_modes(d, pj, modes.fs_group).map_err(fatal)?;
        }
        Ok(())
    }

    /// Service account: token, CA and namespace, written for mounting where in-cluster clients
    /// look ([`SA_MOUNT`]). Their directory, unless the token is not mounted.
    pub(super) fn service_account(&self, pod: &Value) -> Result<Option<PathBuf>, PrepareError> {
        let sa = Self::service_account_name(pod);
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
        if !automount {
            return Ok(None);
        }
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
        Ok(Some(d))
    }

    /// Makes the pod's volumes on the host.
    pub(super) fn volumes(
        &self,
        pod: &Value,
        fs_group: Option<u32>,
        image_pod: bool,
    ) -> Result<Volumes, PrepareError> {
        let modes = Modes {
            image_pod,
            fs_group,
        };
        let mut out = Volumes {
            dirs: HashMap::new(),
            memory: Vec::new(),
        };
        for v in pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            let vname = v["name"].as_str().unwrap_or("").to_string();
            let d = self.volume(pod, &v, &vname, modes, &mut out.memory)?;
            out.dirs.insert(vname, d);
        }
        Ok(out)
    }

    /// Makes volume `v` (named `vname`); its directory on the host.
    fn volume(
        &self,
        pod: &Value,
        v: &Value,
        vname: &str,
        modes: Modes,
        memory: &mut Vec<String>,
    ) -> Result<PathBuf, PrepareError> {
        let d = self.dir.join("volumes").join(vname);
        if let Some(sec) = v.get("secret") {
            self.secret_volume(&d, sec, vname, modes)?;
        } else if let Some(cm) = v.get("configMap") {
            self.config_map_volume(&d, cm, vname, modes)?;
        } else if let Some(da) = v.get("downwardAPI") {
            downward_api_volume(pod, &d, da, modes)?;
        } else if let Some(ed) = v.get("emptyDir") {
            mkdir(&d)?;
            if modes.image_pod {
                empty_dir(&d, ed, vname, modes.fs_group, memory)?;
            }
        } else if let Some(hp) = v.get("hostPath") {
            return host_path(hp, vname);
        } else if let Some(pj) = v.get("projected") {
            self.projected_volume(pod, &d, pj, vname, modes)?;
        } else {
            return Err(fatal(format!("volume {vname}: only secret, configMap, downwardAPI, emptyDir, hostPath and projected volumes are supported in the sandbox")));
        }
        Ok(d)
    }

    fn secret_volume(
        &self,
        d: &Path,
        sec: &Value,
        vname: &str,
        modes: Modes,
    ) -> Result<(), PrepareError> {
        let name = sec["secretName"].as_str().unwrap_or("");
        let optional = sec["optional"].as_bool().unwrap_or(false);
        mkdir(d)?;
        match self.store.get(&SECRETS, &self.ns, name) {
            Ok(obj) => {
                let data = decoded(&obj["data"]);
                write_items(d, &data, sec.get("items")).map_err(fatal)?;
                if modes.image_pod {
                    volume_modes(d, sec, modes.fs_group).map_err(fatal)?;
                }
                Ok(())
            }
            Err(_) if optional => Ok(()),
            Err(_) => Err(PrepareError::Retry(format!(
                "secret \"{name}\" not found (volume {vname})"
            ))),
        }
    }

    fn config_map_volume(
        &self,
        d: &Path,
        cm: &Value,
        vname: &str,
        modes: Modes,
    ) -> Result<(), PrepareError> {
        let name = cm["name"].as_str().unwrap_or("");
        let optional = cm["optional"].as_bool().unwrap_or(false);
        mkdir(d)?;
        match self.store.get(&CONFIGMAPS, &self.ns, name) {
            Ok(obj) => {
                let mut data = config_map_data(&obj["data"]);
                data.extend(decoded(&obj["binaryData"]));
                write_items(d, &data, cm.get("items")).map_err(fatal)?;
                if modes.image_pod {
                    volume_modes(d, cm, modes.fs_group).map_err(fatal)?;
                }
                Ok(())
            }
            Err(_) if optional => Ok(()),
            Err(_) => Err(PrepareError::Retry(format!(
                "configmap \"{name}\" not found (volume {vname})"
            ))),
        }
    }
}

/// The pod's labels, annotations or other fields as files.
fn downward_api_volume(
    pod: &Value,
    d: &Path,
    da: &Value,
    modes: Modes,
) -> Result<(), PrepareError> {
    mkdir(d)?;
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
                                format!("{k}={}\n", Value::String(v.as_str().unwrap_or("").into()))
                            })
                            .collect::<String>()
                    })
                    .unwrap_or_default()
            }
            f => field_ref(pod, f).unwrap_or_default(),
        };
        write_file(d, path, text.as_bytes()).map_err(fatal)?;
    }
    if modes.image_pod {
        volume_modes(d, da, modes.fs_group).map_err(fatal)?;
    }
    Ok(())
}

/// As the kubelet: world-writable, group fsGroup with setgid; medium Memory is a tmpfs in the
/// container (listed in `memory`).
fn empty_dir(
    d: &Path,
    ed: &Value,
    vname: &str,
    fs_group: Option<u32>,
    memory: &mut Vec<String>,
) -> Result<(), PrepareError> {
    let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
    if ed["medium"] == "Memory" {
        memory.push(vname.to_string());
    }
    std::os::unix::fs::chown(d, None, fs_group)
        .map_err(|e| fatal(format!("chown {}: {e}", d.display())))?;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))
        .map_err(|e| fatal(format!("chmod {}: {e}", d.display())))
}

/// A directory of the host (made for `type: DirectoryOrCreate`).
fn host_path(hp: &Value, vname: &str) -> Result<PathBuf, PrepareError> {
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
    Ok(p)
}

impl Volumes {
    /// Container `c`'s mounts: the service account's (`sa`, unless `c` mounts something at
    /// [`SA_MOUNT`] itself), then its `volumeMounts`.
    pub(super) fn mounts(
        &self,
        c: &PodContainer,
        sa: Option<&Path>,
        fs_group: Option<u32>,
    ) -> Result<Mounts, PrepareError> {
        let mut out = Mounts {
            binds: Vec::new(),
            tmpfs: Vec::new(),
            read_only: Vec::new(),
        };
        let volume_mounts = c.spec["volumeMounts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(d) = sa {
            if !volume_mounts.iter().any(|m| m["mountPath"] == SA_MOUNT) {
                out.binds.push((d.to_path_buf(), PathBuf::from(SA_MOUNT)));
            }
        }
        for m in volume_mounts {
            self.mount(c, &m, fs_group, &mut out)?;
        }
        Ok(out)
    }

    /// One `volumeMounts` entry `m` of container `c`.
    fn mount(
        &self,
        c: &PodContainer,
        m: &Value,
        fs_group: Option<u32>,
        out: &mut Mounts,
    ) -> Result<(), PrepareError> {
        let vname = m["name"].as_str().unwrap_or("");
        let path = m["mountPath"].as_str().unwrap_or("");
        let src = self.dirs.get(vname).ok_or_else(|| {
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
        if c.rootfs.is_some() && self.memory.iter().any(|v| v == vname) {
            let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
            out.tmpfs.push(Tmpfs {
                volume: vname.to_string(),
                path: PathBuf::from(path),
                mode,
                gid: fs_group.unwrap_or(0),
            });
            return Ok(());
        }
        if m["readOnly"].as_bool().unwrap_or(false) {
            out.read_only.push(PathBuf::from(path));
        }
        out.binds.push((src, PathBuf::from(path)));
        Ok(())
    }
}

/// Writes `data` to `rel` (relative, inside the volume) in `dir`.
fn write_file(dir: &Path, rel: &str, data: &[u8]) -> Result<(), String> {
    if rel.is_empty() || rel.starts_with('/') || rel.split('/').any(|p| p == "..") {
        return Err(format!(
            "volume item path {rel:?} must be relative and stay inside the volume"
        ));
    }
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    std::fs::write(&p, data).map_err(|e| format!("writing {}: {e}", p.display()))
}

/// Writes a Secret's or ConfigMap's `data`, all keys or the listed `items`.
fn write_items(
    dir: &Path,
    data: &[(String, Vec<u8>)],
    items: Option<&Value>,
) -> Result<(), String> {
    match items.and_then(Value::as_array) {
        Some(items) => {
            for it in items {
                let key = it["key"].as_str().unwrap_or("");
                let path = it["path"].as_str().unwrap_or(key);
                let v = data
                    .iter()
                    .find(|(k, _)| k == key)
                    .ok_or_else(|| format!("key {key:?} is not in the volume's source"))?;
                write_file(dir, path, &v.1)?;
            }
            Ok(())
        }
        None => {
            for (k, v) in data {
                write_file(dir, k, v)?;
            }
            Ok(())
        }
    }
}

/// File modes (`defaultMode`, items' `mode`) and fsGroup ownership of a secret, configMap or
/// downwardAPI volume, as the kubelet sets them: files root-owned with group fsGroup and at
/// least group-readable, directories setgid.
fn volume_modes(dir: &Path, src: &Value, fs_group: Option<u32>) -> Result<(), String> {
    let default_mode = src["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    let item_modes: HashMap<String, u32> = src["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|it| {
            Some((
                it["path"].as_str().or(it["key"].as_str())?.to_string(),
                it["mode"].as_u64()? as u32,
            ))
        })
        .collect();
    fn walk(d: &Path, rel: &str, out: &mut Vec<(PathBuf, String, bool)>) -> std::io::Result<()> {
        for e in std::fs::read_dir(d)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let is_dir = e.file_type()?.is_dir();
            out.push((e.path(), r.clone(), is_dir));
            if is_dir {
                walk(&e.path(), &r, out)?;
            }
        }
        Ok(())
    }
    let mut entries = vec![(dir.to_path_buf(), String::new(), true)];
    walk(dir, "", &mut entries).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for (p, rel, is_dir) in entries {
        let mut mode = if is_dir {
            0o755
        } else {
            item_modes.get(&rel).copied().unwrap_or(default_mode) & 0o777
        };
        if let Some(g) = fs_group {
            std::os::unix::fs::chown(&p, Some(0), Some(g))
                .map_err(|e| format!("chown {}: {e}", p.display()))?;
            mode |= if is_dir { 0o2000 | 0o050 } else { 0o440 };
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", p.display()))?;
    }
    Ok(())
}
