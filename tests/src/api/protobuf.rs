//! Decoding of Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) for
//! the kinds kubectl 1.32+ sends that way in its typed commands (`kubectl create namespace`,
//! `create secret`, `create token`, `auth can-i`, ...). Only the fields listed in the schemas
//! below are kept; others are skipped, as unknown JSON fields are.

use serde_json::{json, Map, Value};

#[derive(Clone, Copy)]
enum F {
    Str,
    Int,
    Bool,
    Bytes,
    Msg(&'static [Field]),
    RepStr,
    RepMsg(&'static [Field]),
    MapStr,
    MapBytes,
    MapQty,
    Time,
    Qty,
}

type Field = (u32, &'static str, F);

const OWNER_REF: &[Field] = &[
    (1, "kind", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
    (6, "controller", F::Bool),
    (7, "blockOwnerDeletion", F::Bool),
];
const META: &[Field] = &[
    (1, "name", F::Str),
    (2, "generateName", F::Str),
    (3, "namespace", F::Str),
    (5, "uid", F::Str),
    (6, "resourceVersion", F::Str),
    (7, "generation", F::Int),
    (8, "creationTimestamp", F::Time),
    (11, "labels", F::MapStr),
    (12, "annotations", F::MapStr),
    (13, "ownerReferences", F::RepMsg(OWNER_REF)),
    (14, "finalizers", F::RepStr),
];
const NAMESPACE: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (2, "spec", F::Msg(&[(1, "finalizers", F::RepStr)])),
];
const OBJ_REF: &[Field] = &[
    (1, "kind", F::Str),
    (2, "namespace", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
];
const LOCAL_REF: &[Field] = &[(1, "name", F::Str)];
const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (2, "secrets", F::RepMsg(OBJ_REF)),
    (3, "imagePullSecrets", F::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", F::Bool),
];
const SECRET: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (2, "data", F::MapBytes),
    (3, "type", F::Str),
    (4, "stringData", F::MapStr),
    (5, "immutable", F::Bool),
];
const CONFIG_MAP: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (2, "data", F::MapStr),
    (3, "binaryData", F::MapBytes),
    (4, "immutable", F::Bool),
];
const RESOURCE_ATTRS: &[Field] = &[
    (1, "namespace", F::Str),
    (2, "verb", F::Str),
    (3, "group", F::Str),
    (4, "version", F::Str),
    (5, "resource", F::Str),
    (6, "subresource", F::Str),
    (7, "name", F::Str),
];
const SSAR: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (
        2,
        "spec",
        F::Msg(&[
            (1, "resourceAttributes", F::Msg(RESOURCE_ATTRS)),
            (
                2,
                "nonResourceAttributes",
                F::Msg(&[(1, "path", F::Str), (2, "verb", F::Str)]),
            ),
        ]),
    ),
];
const SSRR: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (2, "spec", F::Msg(&[(1, "namespace", F::Str)])),
];
const SSR: &[Field] = &[(1, "metadata", F::Msg(META))];
const TOKEN_REQUEST: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (
        2,
        "spec",
        F::Msg(&[
            (1, "audiences", F::RepStr),
            (4, "expirationSeconds", F::Int),
            (
                3,
                "boundObjectRef",
                F::Msg(&[
                    (1, "kind", F::Str),
                    (2, "apiVersion", F::Str),
                    (3, "name", F::Str),
                    (4, "uid", F::Str),
                ]),
            ),
        ]),
    ),
];
const POLICY_RULE: &[Field] = &[
    (1, "verbs", F::RepStr),
    (2, "apiGroups", F::RepStr),
    (3, "resources", F::RepStr),
    (4, "resourceNames", F::RepStr),
    (5, "nonResourceURLs", F::RepStr),
];
const ROLE: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (2, "rules", F::RepMsg(POLICY_RULE)),
];
const SUBJECT: &[Field] = &[
    (1, "kind", F::Str),
    (2, "apiGroup", F::Str),
    (3, "name", F::Str),
    (4, "namespace", F::Str),
];
const ROLE_REF: &[Field] = &[
    (1, "apiGroup", F::Str),
    (2, "kind", F::Str),
    (3, "name", F::Str),
];
const BINDING: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (2, "subjects", F::RepMsg(SUBJECT)),
    (3, "roleRef", F::Msg(ROLE_REF)),
];
const KEY_SELECTOR: &[Field] = &[
    (1, "localObjectReference", F::Msg(LOCAL_REF)),
    (2, "key", F::Str),
    (3, "optional", F::Bool),
];
const ENV_VAR: &[Field] = &[
    (1, "name", F::Str),
    (2, "value", F::Str),
    (
        3,
        "valueFrom",
        F::Msg(&[
            (
                1,
                "fieldRef",
                F::Msg(&[(1, "apiVersion", F::Str), (2, "fieldPath", F::Str)]),
            ),
            (3, "configMapKeyRef", F::Msg(KEY_SELECTOR)),
            (4, "secretKeyRef", F::Msg(KEY_SELECTOR)),
        ]),
    ),
];
const CONTAINER: &[Field] = &[
    (1, "name", F::Str),
    (2, "image", F::Str),
    (3, "command", F::RepStr),
    (4, "args", F::RepStr),
    (5, "workingDir", F::Str),
    (
        6,
        "ports",
        F::RepMsg(&[
            (1, "name", F::Str),
            (3, "containerPort", F::Int),
            (4, "protocol", F::Str),
        ]),
    ),
    (7, "env", F::RepMsg(ENV_VAR)),
    (
        8,
        "resources",
        F::Msg(&[(1, "limits", F::MapQty), (2, "requests", F::MapQty)]),
    ),
    (13, "terminationMessagePath", F::Str),
    (14, "imagePullPolicy", F::Str),
];
const POD_SPEC: &[Field] = &[
    (2, "containers", F::RepMsg(CONTAINER)),
    (3, "restartPolicy", F::Str),
    (4, "terminationGracePeriodSeconds", F::Int),
    (6, "dnsPolicy", F::Str),
    (7, "nodeSelector", F::MapStr),
    (8, "serviceAccountName", F::Str),
    (10, "nodeName", F::Str),
    (16, "hostname", F::Str),
    (17, "subdomain", F::Str),
    (19, "schedulerName", F::Str),
];
const TEMPLATE: &[Field] = &[(1, "metadata", F::Msg(META)), (2, "spec", F::Msg(POD_SPEC))];
const JOB: &[Field] = &[
    (1, "metadata", F::Msg(META)),
    (
        2,
        "spec",
        F::Msg(&[
            (1, "parallelism", F::Int),
            (2, "completions", F::Int),
            (6, "template", F::Msg(TEMPLATE)),
            (7, "backoffLimit", F::Int),
            (9, "completionMode", F::Str),
            (10, "suspend", F::Bool),
        ]),
    ),
];
const POD: &[Field] = &[(1, "metadata", F::Msg(META)), (2, "spec", F::Msg(POD_SPEC))];

fn schema(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Secret") => SECRET,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Pod") => POD,
        ("batch/v1", "Job") => JOB,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => SSAR,
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => SSRR,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => SSR,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        ("rbac.authorization.k8s.io/v1", "Role")
        | ("rbac.authorization.k8s.io/v1", "ClusterRole") => ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding")
        | ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => BINDING,
        _ => return None,
    })
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let byte = *self.b.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            v |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.varint()? as usize;
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or("truncated field")?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn skip(&mut self, wire: u64) -> Result<(), String> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => self.advance(8),
            2 => self.bytes().map(|_| ()),
            5 => self.advance(4),
            w => Err(format!("unsupported wire type {w}")),
        }
    }
    fn advance(&mut self, n: usize) -> Result<(), String> {
        if self.pos + n > self.b.len() {
            return Err("truncated field".into());
        }
        self.pos += n;
        Ok(())
    }
    /// (field number, wire type) pairs with the reader positioned at the value.
    fn key(&mut self) -> Result<Option<(u32, u64)>, String> {
        if self.pos >= self.b.len() {
            return Ok(None);
        }
        let k = self.varint()?;
        Ok(Some(((k >> 3) as u32, k & 7)))
    }
}

fn utf8(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "a string field is not UTF-8".to_string())
}

fn decode(b: &[u8], fields: &[Field]) -> Result<Value, String> {
    let mut out = Map::new();
    let mut r = Reader { b, pos: 0 };
    while let Some((num, wire)) = r.key()? {
        let Some((_, name, f)) = fields.iter().find(|(n, _, _)| *n == num) else {
            r.skip(wire)?;
            continue;
        };
        let name = name.to_string();
        match f {
            F::Int => {
                let v = r.varint()? as i64;
                out.insert(name, json!(v));
            }
            F::Bool => {
                let v = r.varint()? != 0;
                out.insert(name, json!(v));
            }
            F::Str => {
                // Go's protobuf writes unset strings as "": leave them out, as JSON would.
                let v = utf8(r.bytes()?)?;
                if !v.is_empty() {
                    out.insert(name, json!(v));
                }
            }
            F::Bytes => {
                use base64::Engine;
                let v = base64::engine::general_purpose::STANDARD.encode(r.bytes()?);
                out.insert(name, json!(v));
            }
            F::Msg(s) => {
                let v = decode(r.bytes()?, s)?;
                out.insert(name, v);
            }
            F::RepStr => {
                let v = utf8(r.bytes()?)?;
                out.entry(name)
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .expect("array")
                    .push(json!(v));
            }
            F::RepMsg(s) => {
                let v = decode(r.bytes()?, s)?;
                out.entry(name)
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .expect("array")
                    .push(v);
            }
            F::MapStr | F::MapBytes | F::MapQty => {
                let vf = match f {
                    F::MapStr => F::Str,
                    F::MapBytes => F::Bytes,
                    _ => F::Qty,
                };
                let entry = decode(r.bytes()?, &[(1, "k", F::Str), (2, "v", vf)])?;
                let k = entry["k"].as_str().unwrap_or("").to_string();
                let v = entry.get("v").cloned().unwrap_or(json!(""));
                out.entry(name)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .expect("object")
                    .insert(k, v);
            }
            F::Time => {
                let t = decode(r.bytes()?, &[(1, "s", F::Int), (2, "n", F::Int)])?;
                out.insert(
                    name,
                    json!(super::defaults::rfc3339(t["s"].as_i64().unwrap_or(0))),
                );
            }
            F::Qty => {
                let q = decode(r.bytes()?, &[(1, "q", F::Str)])?;
                out.insert(name, q.get("q").cloned().unwrap_or(json!("0")));
            }
        }
    }
    Ok(Value::Object(out))
}

/// Decodes a `k8s\0`-prefixed protobuf object into its JSON form.
pub fn decode_object(body: &[u8]) -> Result<Value, String> {
    let raw_env = body
        .strip_prefix(b"k8s\0")
        .ok_or("the body does not start with the Kubernetes protobuf magic bytes")?;
    const TYPE_META: &[Field] = &[(1, "apiVersion", F::Str), (2, "kind", F::Str)];
    let env = decode(
        raw_env,
        &[(1, "typeMeta", F::Msg(TYPE_META)), (2, "raw", F::Bytes)],
    )?;
    let av = env["typeMeta"]["apiVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let kind = env["typeMeta"]["kind"].as_str().unwrap_or("").to_string();
    let s = schema(&av, &kind).ok_or_else(|| format!("{av} {kind} in protobuf"))?;
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(env["raw"].as_str().unwrap_or(""))
        .map_err(|e| e.to_string())?;
    let mut v = decode(&raw, s)?;
    v["apiVersion"] = json!(av);
    v["kind"] = json!(kind);
    // An enum-like field set in the wrapper of key selectors.
    fix_key_selectors(&mut v);
    Ok(v)
}

/// `{localObjectReference: {name}}` is flattened to `{name}` in JSON.
fn fix_key_selectors(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(l)) = m.remove("localObjectReference") {
                for (k, x) in l {
                    m.insert(k, x);
                }
            }
            for x in m.values_mut() {
                fix_key_selectors(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(fix_key_selectors),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u32, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![(num << 3 | 2) as u8, bytes.len() as u8];
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn decodes_a_namespace() {
        let meta = [
            field(1, b"ns1"),
            field(11, &[field(1, b"a"), field(2, b"b")].concat()),
        ]
        .concat();
        let obj = field(1, &meta);
        let tm = [field(1, b"v1"), field(2, b"Namespace")].concat();
        let unknown = [field(1, &tm), field(2, &obj)].concat();
        let body = [b"k8s\0".to_vec(), unknown].concat();
        let v = decode_object(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1", "labels": {"a": "b"}}})
        );
        let empty = [
            b"k8s\0".to_vec(),
            field(1, &tm),
            field(2, &field(1, &field(2, b""))),
        ]
        .concat();
        assert_eq!(decode_object(&empty).unwrap()["metadata"], json!({}));
    }

    #[test]
    fn rejects_other_kinds() {
        let tm = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm)].concat();
        assert!(decode_object(&body).is_err());
        assert!(decode_object(b"{}").is_err());
    }
}
