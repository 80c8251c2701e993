//! `trainjob::render`, what `prrte-k8s controller --trainjobs` applies, against what Trainer
//! v2.3.0's controller makes (`tests/golden/trainer/<case>/`, derivation in its README): the
//! golden TrainJob on the runtime of `prrte-config/trainer/` renders to the golden objects,
//! compared as parsed objects, but for the differences the README lists under "What
//! `controller --trainjobs` makes differently":
//!
//! - the goldens' TrainJob sets the node pods' slots through `runtimePatches`, which the
//!   controller refuses: the TrainJob is rendered without them, and the `prrte-k8s.io/slots`
//!   annotation the patch puts on the golden JobSet's node pods is compared with the one the
//!   renderer adds there (the same value) and then left out of both;
//! - the Secret's key pair is random, and an ECDSA P-384 key (`PRIVATE KEY`, PKCS#8) where
//!   Trainer's is P-521 (`EC PRIVATE KEY`): its two keys are compared by kind, not by value.
#![forbid(unsafe_code)]

use base64::Engine;
use prrte_k8s::trainjob::render::{RenderError, Rendered};
use prrte_k8s::trainjob::{render, ssh, Runtime, TrainJob};
use sandbox::harness::mpijob::repo;
use serde_json::Value;
use std::path::Path;

const SLOTS: &str = "prrte-k8s.io/slots";
/// The owner's uid in the golden objects.
const UID_PLACEHOLDER: &str = "TRAINJOB-UID";

fn yaml(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

fn golden(case: &str, file: &str) -> Value {
    yaml(&repo().join("tests/golden/trainer").join(case).join(file))
}

/// The JSON pointers where `a` and `b` differ, with both values.
fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                let p = format!("{at}/{k}");
                differences(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &p,
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                differences(x, y, &format!("{at}/{i}"), out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{at}: rendered {a}, golden {b}")),
    }
}

fn assert_same(what: &str, rendered: &Value, golden: &Value) {
    let mut d = Vec::new();
    differences(rendered, golden, "", &mut d);
    assert!(d.is_empty(), "{what} differs:\n{}", d.join("\n"));
}

/// Takes the node pods' slots annotation out of a JobSet (with `annotations` if that leaves it
/// empty); returns it.
fn take_node_slots(jobset: &mut Value) -> Option<Value> {
    let rjobs = jobset["spec"]["replicatedJobs"].as_array_mut()?;
    let node = rjobs.iter_mut().find(|r| r["name"] == "node")?;
    let meta = node["template"]["spec"]["template"]["metadata"].as_object_mut()?;
    let annotations = meta.get_mut("annotations")?.as_object_mut()?;
    let slots = annotations.remove(SLOTS);
    if annotations.is_empty() {
        meta.remove("annotations");
    }
    slots
}

/// The Secret's `data` value `key`, decoded.
fn secret_text(secret: &Value, key: &str) -> String {
    let b64 = secret["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("the Secret has no data {key}: {secret}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap_or_else(|e| panic!("data {key} is not base64: {e}"));
    String::from_utf8(bytes).unwrap()
}

/// The Secret's key pair, by kind: the private key's PEM label and the public key's type.
fn key_kinds(secret: &mut Value) -> (String, String) {
    let private = secret_text(secret, "ssh-privatekey");
    let public = secret_text(secret, "ssh-publickey");
    secret["data"] = Value::Null;
    let label = private
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("-----BEGIN "))
        .and_then(|l| l.strip_suffix("-----"))
        .unwrap_or_else(|| panic!("ssh-privatekey is no PEM: {private}"))
        .to_string();
    assert!(
        public.ends_with('\n') && public.lines().count() == 1,
        "ssh-publickey is one authorized_keys line: {public:?}"
    );
    let kind = public.split(' ').next().unwrap_or_default().to_string();
    (label, kind)
}

/// The golden TrainJob of `case` (its uid the goldens' placeholder) rendered on the runtime
/// `prrte-k8s-<runtime>`; and the TrainJob's `runtimePatches` it was rendered without (null
/// if it has none).
fn rendered(case: &str, runtime: &str) -> (Rendered, Value) {
    let mut tj = golden(case, "trainjob.yaml");
    tj["metadata"]["uid"] = UID_PLACEHOLDER.into();
    let patches = tj["spec"]
        .as_object_mut()
        .and_then(|s| s.remove("runtimePatches"))
        .unwrap_or_default();
    let job: TrainJob = serde_json::from_value(tj.clone()).unwrap();
    let rt = yaml(&repo().join(format!("prrte-config/trainer/prrte-k8s-{runtime}.yaml")));
    let runtime = Runtime::new(rt);
    let keys = ssh::generate().unwrap();

    // With its patches, the TrainJob is refused: the controller does not take runtimePatches.
    if !patches.is_null() {
        tj["spec"]["runtimePatches"] = patches.clone();
        let patched: TrainJob = serde_json::from_value(tj).unwrap();
        assert_eq!(
            render(&patched, &runtime, Some(&keys)),
            Err(RenderError::RuntimePatches)
        );
    }
    (render(&job, &runtime, Some(&keys)).unwrap(), patches)
}

fn check_case(case: &str, runtime: &str) {
    let (r, patches) = rendered(case, runtime);
    let procs = golden(case, "trainjob.yaml")["spec"]["trainer"]["numProcPerNode"].to_string();
    let procs = Value::from(procs);

    // The one patch of a golden that has one: the node pods' slots, numProcPerNode.
    let patched_slots = (!patches.is_null()).then(|| {
        assert_eq!(
            patches.as_array().map(Vec::len),
            Some(1),
            "{case}: one runtime patch: {patches}"
        );
        let slots = patches[0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
            ["template"]["spec"]["template"]["metadata"]["annotations"][SLOTS]
            .clone();
        assert_eq!(slots, procs, "{case}: {patches}");
        slots
    });

    let mut jobset = r.jobset.clone();
    let mut golden_jobset = golden(case, "jobset.yaml");
    assert_eq!(
        take_node_slots(&mut jobset),
        Some(procs),
        "{case}: the renderer gives the node pods numProcPerNode as their slots"
    );
    assert_eq!(
        take_node_slots(&mut golden_jobset),
        patched_slots,
        "{case}: the golden JobSet has the patch's annotation, if any"
    );
    assert_same(&format!("{case}: the JobSet"), &jobset, &golden_jobset);

    let hostfile = r.hostfile.as_ref().expect("an MPI runtime has a hostfile");
    assert_same(
        &format!("{case}: the hostfile ConfigMap"),
        hostfile,
        &golden(case, "configmap-mpi-hostfile.yaml"),
    );

    let mut secret = r.ssh_auth.clone().expect("keys were given: a Secret");
    let mut golden_secret = golden(case, "secret-mpi-ssh-auth.yaml");
    assert_eq!(
        key_kinds(&mut secret),
        ("PRIVATE KEY".into(), "ecdsa-sha2-nistp384".into()),
        "{case}: the renderer's key pair"
    );
    assert_eq!(
        key_kinds(&mut golden_secret),
        ("EC PRIVATE KEY".into(), "ecdsa-sha2-nistp521".into()),
        "{case}: Trainer's key pair"
    );
    assert_same(&format!("{case}: the Secret"), &secret, &golden_secret);

    // The snapshot's runtime compared parsed (Trainer's keys are sorted).
    let mut snapshot = r.snapshot.clone();
    let mut golden_snapshot = golden(case, "configmap-runtime-snapshot.yaml");
    for s in [&mut snapshot, &mut golden_snapshot] {
        let text = s["data"]["runtime"]
            .as_str()
            .expect("data.runtime")
            .to_string();
        s["data"]["runtime"] = serde_yaml::from_str(&text).unwrap();
    }
    assert_same(
        &format!("{case}: the snapshot ConfigMap"),
        &snapshot,
        &golden_snapshot,
    );
}

#[test]
fn openmpi_renders_what_trainer_makes() {
    check_case("openmpi", "openmpi");
}

#[test]
fn mpich_renders_what_trainer_makes() {
    check_case("mpich", "mpich");
}

/// Without runtimePatches, the golden node pods have no slots annotation; the renderer's is
/// numProcPerNode (3).
#[test]
fn openmpi_procs_renders_what_trainer_makes() {
    check_case("openmpi-procs", "openmpi");
}

/// The comparison sees a difference: a field changed in the rendered JobSet is reported.
#[test]
fn a_difference_is_reported_with_its_place() {
    let (r, _) = rendered("openmpi", "openmpi");
    let mut js = r.jobset;
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = 3.into();
    let mut d = Vec::new();
    differences(&js, &golden("openmpi", "jobset.yaml"), "", &mut d);
    assert_eq!(
        d,
        ["/spec/replicatedJobs/1/template/spec/parallelism: rendered 3, golden 2"]
    );
}
