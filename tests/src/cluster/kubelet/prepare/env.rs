//! A container's environment, as the kubelet makes it: the image's, the API server's service
//! variables, `HOSTNAME`, `envFrom`, then `env` (values with `$(VAR)` expansion, or from
//! downward-API fields, Secrets, ConfigMaps and resource fields).

use super::error::{fatal, PrepareError};
use super::prepared::POD_IP_MARK;
use super::sources::{config_map_data, decoded, field_ref, resource_field};
use crate::api::resources::{CONFIGMAPS, SECRETS};
use crate::cluster::kubelet::containers::PodContainer;
use crate::cluster::kubelet::pod::PodCtx;
use serde_json::Value;

type Env = Vec<(String, String)>;

/// Sets `k` to `v`, replacing an earlier value.
fn set(env: &mut Env, k: String, v: String) {
    env.retain(|(n, _)| *n != k);
    env.push((k, v));
}

impl PodCtx {
    /// The environment of container `c` of `pod`, whose hostname is `hostname`.
    pub(super) fn env(
        &self,
        pod: &Value,
        c: &PodContainer,
        hostname: &str,
    ) -> Result<Env, PrepareError> {
        let mut env: Env = Vec::new();
        // The image's environment comes first; the pod's overrides it.
        if let Some(mi) = &c.rootfs {
            for (k, v) in &mi.config.env {
                set(&mut env, k.clone(), v.clone());
            }
        }
        for (k, v) in self.service_env() {
            set(&mut env, k, v);
        }
        set(&mut env, "HOSTNAME".into(), hostname.to_string());
        for ef in c.spec["envFrom"].as_array().cloned().unwrap_or_default() {
            self.env_from(&mut env, &ef)?;
        }
        for e in c.spec["env"].as_array().cloned().unwrap_or_default() {
            let name = e["name"].as_str().unwrap_or("").to_string();
            let value = match e.get("value").and_then(Value::as_str) {
                Some(v) => expand(v, &env),
                None => match e.get("valueFrom") {
                    Some(vf) => match self.value_from(pod, &c.spec, &name, vf)? {
                        Some(v) => v,
                        None => continue,
                    },
                    None => String::new(),
                },
            };
            set(&mut env, name, value);
        }
        Ok(env)
    }

    /// The API server's service variables (`KUBERNETES_SERVICE_HOST`, ...).
    fn service_env(&self) -> Env {
        let api = self.api.addr();
        let host = self.net.gateway().to_string();
        let port = api.port().to_string();
        vec![
            ("KUBERNETES_SERVICE_HOST".into(), host.clone()),
            ("KUBERNETES_SERVICE_PORT".into(), port.clone()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.clone()),
            ("KUBERNETES_PORT".into(), format!("tcp://{host}:{port}")),
            (
                format!("KUBERNETES_PORT_{port}_TCP"),
                format!("tcp://{host}:{port}"),
            ),
            (
                format!("KUBERNETES_PORT_{port}_TCP_PROTO"),
                "tcp".to_string(),
            ),
            (format!("KUBERNETES_PORT_{port}_TCP_PORT"), port.clone()),
            (format!("KUBERNETES_PORT_{port}_TCP_ADDR"), host),
        ]
    }

    /// One `envFrom` entry: every key of a Secret or ConfigMap, with its prefix.
    fn env_from(&self, env: &mut Env, ef: &Value) -> Result<(), PrepareError> {
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
                    .map(|o| config_map_data(&o["data"])),
                r["optional"].as_bool().unwrap_or(false),
                format!("configmap {:?}", r["name"]),
            )
        } else {
            return Ok(());
        };
        match obj {
            Some(kv) => {
                for (k, v) in kv {
                    let v = String::from_utf8_lossy(&v).into_owned();
                    set(env, format!("{prefix}{k}"), v);
                }
                Ok(())
            }
            None if optional => Ok(()),
            None => Err(PrepareError::Retry(format!("{what} not found (envFrom)"))),
        }
    }

    /// The value of variable `name` from `valueFrom` (`vf`); None when an optional source does
    /// not have it (the variable is then left out).
    fn value_from(
        &self,
        pod: &Value,
        c: &Value,
        name: &str,
        vf: &Value,
    ) -> Result<Option<String>, PrepareError> {
        if let Some(fp) = vf.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
            return match field_ref(pod, fp) {
                Some(v) => Ok(Some(v)),
                None if fp == "status.podIP" || fp == "status.podIPs" => {
                    Ok(Some(POD_IP_MARK.to_string()))
                }
                None if fp == "status.hostIP" || fp == "status.hostIPs" => {
                    Ok(Some(self.net.gateway().to_string()))
                }
                None => Err(fatal(format!("env {name}: unsupported fieldRef {fp:?}"))),
            };
        }
        if let Some(r) = vf.get("secretKeyRef") {
            let (sn, key) = key_ref(r);
            let found = self
                .store
                .get(&SECRETS, &self.ns, sn)
                .ok()
                .and_then(|o| decoded(&o["data"]).into_iter().find(|(k, _)| k == key))
                .map(|(_, v)| String::from_utf8_lossy(&v).into_owned());
            return key_value(
                found,
                r,
                &format!("couldn't find key {key} in Secret {}/{sn}", self.ns),
            );
        }
        if let Some(r) = vf.get("configMapKeyRef") {
            let (cn, key) = key_ref(r);
            let found = self
                .store
                .get(&CONFIGMAPS, &self.ns, cn)
                .ok()
                .and_then(|o| o["data"][key].as_str().map(String::from));
            return key_value(
                found,
                r,
                &format!("couldn't find key {key} in ConfigMap {}/{cn}", self.ns),
            );
        }
        if let Some(r) = vf.get("resourceFieldRef") {
            return Ok(Some(resource_field(c, r)));
        }
        Err(fatal(format!("env {name}: unsupported valueFrom")))
    }
}

/// A key's value, or its absence: left out when the reference `r` is optional, else the pod
/// waits (`missing`).
fn key_value(
    found: Option<String>,
    r: &Value,
    missing: &str,
) -> Result<Option<String>, PrepareError> {
    match found {
        Some(v) => Ok(Some(v)),
        None if r["optional"].as_bool().unwrap_or(false) => Ok(None),
        None => Err(PrepareError::Retry(missing.to_string())),
    }
}

/// The object's name and the key of a `secretKeyRef` or `configMapKeyRef`.
fn key_ref(r: &Value) -> (&str, &str) {
    (
        r["name"].as_str().unwrap_or(""),
        r["key"].as_str().unwrap_or(""),
    )
}

/// `$(VAR)` expansion as the kubelet does for env values, command and args.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'(' {
                if let Some(end) = s[i + 2..].find(')') {
                    let name = &s[i + 2..i + 2 + end];
                    if let Some((_, v)) = env.iter().rev().find(|(k, _)| k == name) {
                        out.push_str(v);
                        i += end + 3;
                        continue;
                    }
                }
            }
        }
        let ch = s[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        let env = vec![
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "x".to_string()),
        ];
        assert_eq!(expand("$(A)-$(B)-$(C)-$$(A)", &env), "1-x-$(C)-$(A)");
    }
}
