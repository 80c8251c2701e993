//! Volume contents: Secret, ConfigMap and downward-API files with the kubelet's modes.

use base64::Engine;
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub(super) fn decoded(data: &Value) -> Vec<(String, Vec<u8>)> {
    data.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        base64::engine::general_purpose::STANDARD
                            .decode(v.as_str().unwrap_or(""))
                            .unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn write_file(dir: &Path, rel: &str, data: &[u8]) -> Result<(), String> {
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

pub(super) fn write_items(
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
pub(super) fn volume_modes(dir: &Path, src: &Value, fs_group: Option<u32>) -> Result<(), String> {
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
