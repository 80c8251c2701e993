//! Kubernetes' "restricted" Pod Security Standard (the policies of Kubernetes 1.33, baseline's
//! included) as a check of a pod template: [`violations`] names each rule a template breaks,
//! with the field. The rendered jobs are checked with it before they are printed, and by the
//! tests.
//!
//! The rules: no host namespaces (`hostNetwork`, `hostPID`, `hostIPC`), no Windows
//! `hostProcess`, no privileged containers, no host ports, capabilities dropped to `ALL` and
//! added back only `NET_BIND_SERVICE`, no `allowPrivilegeEscalation` other than `false`,
//! `runAsNonRoot: true` (the pod's, or every container's), no `runAsUser: 0`, a seccomp
//! profile of `RuntimeDefault` or `Localhost` (the pod's, or every container's), no AppArmor
//! profile `Unconfined`, only the SELinux types containers may use, the default `/proc` mount,
//! only the safe sysctls, and only the volume types `configMap`, `csi`, `downwardAPI`,
//! `emptyDir`, `ephemeral`, `persistentVolumeClaim`, `projected` and `secret`.

use serde_json::Value;

/// The volume types the restricted level allows.
pub(crate) const VOLUME_TYPES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The sysctls the baseline level allows (Kubernetes 1.33).
pub(crate) const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The SELinux types a container may run as.
pub(crate) const SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The one capability that may be added.
pub(crate) const ALLOWED_CAPABILITY: &str = "NET_BIND_SERVICE";

/// The fields of a pod's spec and its containers' (`containers`, `initContainers`,
/// `ephemeralContainers`) that live in `securityContext`, as `(where, context)`.
fn containers(spec: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let name = c["name"].as_str().unwrap_or("?");
            out.push((format!("spec.{list}[{i}] ({name})"), c));
        }
    }
    out
}

fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

/// The rules of the restricted level `template` (a pod template: `metadata` and `spec`)
/// breaks, one line each naming the field; empty when it complies.
pub fn violations(template: &Value) -> Vec<String> {
    let spec = &template["spec"];
    let pod_sc = &spec["securityContext"];
    let mut out = Vec::new();
    pod_violations(spec, &mut out);
    volume_violations(spec, &mut out);
    annotation_violations(template, &mut out);
    let pod_non_root = is_true(&pod_sc["runAsNonRoot"]);
    let pod_seccomp = seccomp_ok(&pod_sc["seccompProfile"]);
    for (at, c) in containers(spec) {
        container_violations(&at, c, pod_non_root, pod_seccomp, &mut out);
    }
    out
}

/// The pod's own fields: host namespaces, its security context, sysctls.
fn pod_violations(spec: &Value, out: &mut Vec<String>) {
    let pod_sc = &spec["securityContext"];
    for ns in ["hostNetwork", "hostPID", "hostIPC"] {
        if is_true(&spec[ns]) {
            out.push(format!("spec.{ns}: host namespaces are not allowed"));
        }
    }
    if is_true(&pod_sc["windowsOptions"]["hostProcess"]) {
        out.push("spec.securityContext.windowsOptions.hostProcess: not allowed".into());
    }
    common_context(pod_sc, "spec.securityContext", out);
    if pod_sc["runAsUser"].as_i64() == Some(0) {
        out.push("spec.securityContext.runAsUser: 0 (root) is not allowed".into());
    }
    for s in pod_sc["sysctls"].as_array().into_iter().flatten() {
        let name = s["name"].as_str().unwrap_or("");
        if !SAFE_SYSCTLS.contains(&name) {
            out.push(format!(
                "spec.securityContext.sysctls: {name:?} is not a safe sysctl"
            ));
        }
    }
}

/// Volume types other than the restricted level's.
fn volume_violations(spec: &Value, out: &mut Vec<String>) {
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let name = v["name"].as_str().unwrap_or("?");
        let types: Vec<&str> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .filter(|k| *k != "name")
            .collect();
        for t in types {
            if !VOLUME_TYPES.contains(&t) {
                out.push(format!(
                    "spec.volumes[{i}] ({name}): volume type {t} is not allowed (only {})",
                    VOLUME_TYPES.join(", ")
                ));
            }
        }
    }
}

/// AppArmor profiles other than the runtime's default or a local one.
fn annotation_violations(template: &Value, out: &mut Vec<String>) {
    for (k, v) in template["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if k.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && !(v == "runtime/default" || v.as_str().is_some_and(|s| s.starts_with("localhost/")))
        {
            out.push(format!(
                "metadata.annotations[{k}]: AppArmor profile {v} is not allowed"
            ));
        }
    }
}

/// One container's security context and ports (`pod_non_root`, `pod_seccomp`: what the pod's
/// security context sets for every container).
fn container_violations(
    at: &str,
    c: &Value,
    pod_non_root: bool,
    pod_seccomp: bool,
    out: &mut Vec<String>,
) {
    let sc = &c["securityContext"];
    let field = |f: &str| format!("{at}.securityContext.{f}");
    if is_true(&sc["privileged"]) {
        out.push(format!(
            "{}: privileged containers are not allowed",
            field("privileged")
        ));
    }
    if is_true(&sc["windowsOptions"]["hostProcess"]) {
        out.push(format!(
            "{}: not allowed",
            field("windowsOptions.hostProcess")
        ));
    }
    if sc["allowPrivilegeEscalation"].as_bool() != Some(false) {
        out.push(format!(
            "{}: must be false",
            field("allowPrivilegeEscalation")
        ));
    }
    let non_root = match sc["runAsNonRoot"].as_bool() {
        Some(b) => b,
        None => pod_non_root,
    };
    if !non_root {
        out.push(format!(
            "{}: must be true (here or in spec.securityContext)",
            field("runAsNonRoot")
        ));
    }
    if sc["runAsUser"].as_i64() == Some(0) {
        out.push(format!("{}: 0 (root) is not allowed", field("runAsUser")));
    }
    let seccomp = &sc["seccompProfile"];
    let seccomp_fine = if seccomp.is_null() {
        pod_seccomp
    } else {
        seccomp_ok(seccomp)
    };
    if !seccomp_fine {
        out.push(format!(
            "{}: must be RuntimeDefault or Localhost (here or in spec.securityContext)",
            field("seccompProfile.type")
        ));
    }
    let caps = &sc["capabilities"];
    let drops_all = caps["drop"]
        .as_array()
        .is_some_and(|d| d.iter().any(|c| c == "ALL"));
    if !drops_all {
        out.push(format!("{}: must contain ALL", field("capabilities.drop")));
    }
    for cap in caps["add"].as_array().into_iter().flatten() {
        if cap != ALLOWED_CAPABILITY {
            out.push(format!(
                "{}: {cap} may not be added (only {ALLOWED_CAPABILITY})",
                field("capabilities.add")
            ));
        }
    }
    common_context(sc, &format!("{at}.securityContext"), out);
    for (j, p) in c["ports"].as_array().into_iter().flatten().enumerate() {
        if p["hostPort"].as_i64().is_some_and(|h| h != 0) {
            out.push(format!(
                "{at}.ports[{j}].hostPort: host ports are not allowed"
            ));
        }
    }
}

/// A seccomp profile the restricted level accepts.
fn seccomp_ok(profile: &Value) -> bool {
    matches!(
        profile["type"].as_str(),
        Some("RuntimeDefault" | "Localhost")
    )
}

/// The rules shared by the pod's and the containers' security contexts: SELinux, AppArmor,
/// `/proc` mount, seccomp not `Unconfined`.
fn common_context(sc: &Value, at: &str, out: &mut Vec<String>) {
    let se = &sc["seLinuxOptions"];
    if let Some(t) = se["type"].as_str() {
        if !t.is_empty() && !SELINUX_TYPES.contains(&t) {
            out.push(format!("{at}.seLinuxOptions.type: {t:?} is not allowed"));
        }
    }
    for f in ["user", "role"] {
        if se[f].as_str().is_some_and(|s| !s.is_empty()) {
            out.push(format!("{at}.seLinuxOptions.{f}: may not be set"));
        }
    }
    if sc["appArmorProfile"]["type"] == "Unconfined" {
        out.push(format!(
            "{at}.appArmorProfile.type: Unconfined is not allowed"
        ));
    }
    if sc["procMount"].as_str().is_some_and(|p| p != "Default") {
        out.push(format!("{at}.procMount: only Default is allowed"));
    }
    if sc["seccompProfile"]["type"] == "Unconfined" {
        out.push(format!(
            "{at}.seccompProfile.type: Unconfined is not allowed"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn restricted() -> Value {
        json!({
            "metadata": {},
            "spec": {
                "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "mpi", "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                }}],
                "volumes": [{"name": "scratch", "emptyDir": {}}],
            },
        })
    }

    /// Each change breaks exactly the rule it names.
    #[test]
    fn every_rule_is_checked() {
        assert_eq!(violations(&restricted()), Vec::<String>::new());
        let cases: &[(&str, Value, &str)] = &[
            ("/spec/hostNetwork", json!(true), "spec.hostNetwork"),
            ("/spec/hostPID", json!(true), "spec.hostPID"),
            ("/spec/hostIPC", json!(true), "spec.hostIPC"),
            (
                "/spec/securityContext/runAsNonRoot",
                json!(false),
                "runAsNonRoot: must be true",
            ),
            (
                "/spec/securityContext/runAsUser",
                json!(0),
                "spec.securityContext.runAsUser: 0",
            ),
            (
                "/spec/securityContext/seccompProfile/type",
                json!("Unconfined"),
                "seccompProfile.type",
            ),
            (
                "/spec/securityContext/sysctls",
                json!([{"name": "kernel.msgmax", "value": "1"}]),
                "kernel.msgmax",
            ),
            (
                "/spec/securityContext/seLinuxOptions",
                json!({"type": "spc_t"}),
                "seLinuxOptions.type",
            ),
            (
                "/spec/securityContext/windowsOptions",
                json!({"hostProcess": true}),
                "hostProcess",
            ),
            (
                "/spec/containers/0/securityContext/privileged",
                json!(true),
                "privileged",
            ),
            (
                "/spec/containers/0/securityContext/allowPrivilegeEscalation",
                json!(true),
                "allowPrivilegeEscalation",
            ),
            (
                "/spec/containers/0/securityContext/capabilities/drop",
                json!(["NET_RAW"]),
                "capabilities.drop",
            ),
            (
                "/spec/containers/0/securityContext/capabilities/add",
                json!(["SYS_ADMIN"]),
                "SYS_ADMIN",
            ),
            (
                "/spec/containers/0/securityContext/runAsUser",
                json!(0),
                "containers[0] (mpi).securityContext.runAsUser",
            ),
            (
                "/spec/containers/0/securityContext/procMount",
                json!("Unmasked"),
                "procMount",
            ),
            (
                "/spec/containers/0/securityContext/appArmorProfile",
                json!({"type": "Unconfined"}),
                "appArmorProfile",
            ),
            (
                "/spec/containers/0/ports",
                json!([{"containerPort": 22, "hostPort": 22}]),
                "hostPort",
            ),
            (
                "/spec/volumes/0",
                json!({"name": "h", "hostPath": {"path": "/"}}),
                "hostPath",
            ),
            (
                "/spec/volumes/0",
                json!({"name": "n", "nfs": {"server": "s", "path": "/"}}),
                "nfs",
            ),
            (
                "/metadata/annotations",
                json!({"container.apparmor.security.beta.kubernetes.io/mpi": "unconfined"}),
                "AppArmor",
            ),
        ];
        for (pointer, value, needle) in cases {
            let mut t = restricted();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            let slot = t.pointer_mut(parent).unwrap_or_else(|| panic!("{parent}"));
            match slot {
                Value::Array(a) => a[key.parse::<usize>().unwrap()] = value.clone(),
                _ => slot[key] = value.clone(),
            }
            // (A pod-level rule broken shows in the containers relying on it as well.)
            let v = violations(&t);
            assert!(
                !v.is_empty() && v.iter().all(|l| l.contains(needle)),
                "{pointer} = {value}: {v:#?}"
            );
        }
        // Per-container settings stand in for the pod's; a container missing them breaks it.
        let mut t = restricted();
        t["spec"]["securityContext"] = json!({});
        t["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = json!(true);
        t["spec"]["containers"][0]["securityContext"]["seccompProfile"] =
            json!({"type": "Localhost", "localhostProfile": "p.json"});
        assert_eq!(violations(&t), Vec::<String>::new());
        t["spec"]["initContainers"] = json!([{"name": "init"}]);
        let v = violations(&t);
        assert_eq!(v.len(), 4, "{v:#?}");
        assert!(
            v.iter()
                .all(|l| l.starts_with("spec.initContainers[0] (init)")),
            "{v:#?}"
        );
    }
}
