//! `x-kubernetes-validations` through the store: rules like Trainer's TrainJob carries.

use crate::api::resources::CUSTOMRESOURCEDEFINITIONS as CRDS;
use crate::api::status::ApiError;
use crate::api::{Part, Patch, Store};
use serde_json::{json, Value};

const MANAGED_BY: &str = "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set";

/// A TrainJob-like CRD with CEL rules: an enum and an immutable field through CEL, a rule with
/// a `messageExpression` reported at a `fieldPath`, a `FieldValueForbidden` one, a transition
/// rule in the items of a `map` list, one at the root and one under `status`.
pub(crate) fn ruled_crd() -> Value {
    let spec = json!({
        "type": "object",
        "x-kubernetes-validations": [{
            "rule": "!has(self.numNodes) || self.numNodes <= self.maxNodes",
            "messageExpression": "'numNodes ' + string(self.numNodes) + ' is more than ' + string(self.maxNodes)",
            "fieldPath": ".numNodes",
        }, {
            "rule": "!(has(self.suspend) && self.suspend && has(self.priority))",
            "message": "a suspended job has no priority",
            "reason": "FieldValueForbidden",
            "fieldPath": ".priority",
        }],
        "properties": {
            "managedBy": {
                "type": "string",
                "x-kubernetes-validations": [
                    {"rule": "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']", "message": MANAGED_BY},
                    {"rule": "self == oldSelf", "message": "ManagedBy value is immutable"},
                ],
            },
            "numNodes": {"type": "integer"},
            "maxNodes": {"type": "integer", "default": 8},
            "suspend": {"type": "boolean"},
            "priority": {"type": "integer"},
            "replicas": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "count": {"type": "integer", "x-kubernetes-validations": [
                            {"rule": "self == oldSelf", "message": "field is immutable"},
                        ]},
                    },
                },
            },
        },
    });
    let status = json!({
        "type": "object",
        "x-kubernetes-validations": [{
            "rule": "!has(self.trainerStatus) || has(self.lastUpdatedTime)",
            "message": "lastUpdatedTime is required when trainerStatus is present",
        }],
        "properties": {
            "trainerStatus": {"type": "string"},
            "lastUpdatedTime": {"type": "string"},
        },
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "trainjobs.trainer.example.com"},
        "spec": {
            "group": "trainer.example.com",
            "scope": "Namespaced",
            "names": {"plural": "trainjobs", "singular": "trainjob", "kind": "TrainJob"},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-validations": [{
                        "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                        "message": "metadata.name must match RFC 1035 DNS label format",
                    }],
                    "properties": {
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
            }],
        },
    })
}

fn store() -> Store {
    let s = Store::new();
    s.create(
        &crate::api::resources::NAMESPACES,
        "",
        json!({"metadata": {"name": "default"}}),
        false,
    )
    .unwrap();
    s.create(&CRDS, "", ruled_crd(), false).unwrap();
    s
}

fn job(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "trainer.example.com/v1alpha1", "kind": "TrainJob", "metadata": {"name": name}, "spec": spec})
}

/// The (field, reason, message) of each cause of a 422.
fn causes(e: &ApiError) -> Vec<(String, String, String)> {
    assert_eq!((e.code, e.reason), (422, "Invalid"), "{}", e.message);
    let details = e.details.as_ref().expect("details");
    details["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (s("field"), s("reason"), s("message"))
        })
        .collect()
}

/// A value a rule refuses is refused at create as the API server refuses it: 422 Invalid,
/// the message naming the kind with its group, the cause naming the field.
#[test]
fn a_failed_rule_refuses_the_create() {
    let s = store();
    let rt = s
        .lookup("trainer.example.com", "v1alpha1", "trainjobs")
        .unwrap();
    let e = s
        .create(
            rt,
            "default",
            job("t", json!({"managedBy": "other"})),
            false,
        )
        .unwrap_err();
    assert_eq!(
        e.message,
        format!("TrainJob.trainer.example.com \"t\" is invalid: spec.managedBy: Invalid value: \"string\": {MANAGED_BY}")
    );
    assert_eq!(
        causes(&e),
        vec![(
            "spec.managedBy".to_string(),
            "FieldValueInvalid".to_string(),
            format!("Invalid value: \"string\": {MANAGED_BY}")
        )]
    );
    let status = e.to_status();
    assert_eq!(status["details"]["kind"], "TrainJob");
    assert_eq!(status["details"]["group"], "trainer.example.com");
    // Valid: created, transition rules not evaluated on a create.
    let o = s
        .create(
            rt,
            "default",
            job(
                "t",
                json!({"managedBy": "kueue.x-k8s.io/multikueue", "replicas": [{"name": "a", "count": 1}]}),
            ),
            false,
        )
        .unwrap();
    assert_eq!(o["spec"]["maxNodes"], 8, "defaulted before the rules run");
}

/// `messageExpression` makes the message, `fieldPath` the field, `reason` the cause's reason
/// and the words; a rule at the root is reported at `<nil>`.
#[test]
fn message_expression_field_path_reason_and_root() {
    let s = store();
    let rt = s
        .lookup("trainer.example.com", "v1alpha1", "trainjobs")
        .unwrap();
    let e = s
        .create(rt, "default", job("t", json!({"numNodes": 9})), false)
        .unwrap_err();
    assert_eq!(
        causes(&e),
        vec![(
            "spec.numNodes".to_string(),
            "FieldValueInvalid".to_string(),
            "Invalid value: \"object\": numNodes 9 is more than 8".to_string()
        )]
    );
    let e = s
        .create(
            rt,
            "default",
            job("t", json!({"suspend": true, "priority": 1})),
            false,
        )
        .unwrap_err();
    assert_eq!(
        causes(&e),
        vec![(
            "spec.priority".to_string(),
            "FieldValueForbidden".to_string(),
            "Forbidden: a suspended job has no priority".to_string()
        )]
    );
    let e = s
        .create(rt, "default", job("t.x", json!({})), false)
        .unwrap_err();
    assert_eq!(
        e.message,
        "TrainJob.trainer.example.com \"t.x\" is invalid: <nil>: Invalid value: \"object\": metadata.name must match RFC 1035 DNS label format"
    );
}

/// On an update, a transition rule compares with the old value: an immutable field cannot
/// change, in an object or in an item of a `map` list (matched by its keys); a new item has
/// no old value and is free. A rule under `status` holds on status writes.
#[test]
fn transition_rules_on_update() {
    let s = store();
    let rt = s
        .lookup("trainer.example.com", "v1alpha1", "trainjobs")
        .unwrap();
    s.create(
        rt,
        "default",
        job(
            "t",
            json!({"managedBy": "kueue.x-k8s.io/multikueue", "replicas": [{"name": "a", "count": 1}]}),
        ),
        false,
    )
    .unwrap();
    let patch = |p: Value, part| s.patch(rt, "default", "t", Patch::Merge(p), part, false);
    let e = patch(
        json!({"spec": {"managedBy": "trainer.kubeflow.org/trainjob-controller"}}),
        Part::Main,
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "TrainJob.trainer.example.com \"t\" is invalid: spec.managedBy: Invalid value: \"string\": ManagedBy value is immutable"
    );
    let e = patch(
        json!({"spec": {"replicas": [{"name": "a", "count": 2}]}}),
        Part::Main,
    )
    .unwrap_err();
    assert_eq!(causes(&e)[0].0, "spec.replicas[0].count");
    let o = patch(
        json!({"spec": {"replicas": [{"name": "b", "count": 2}, {"name": "a", "count": 1}]}}),
        Part::Main,
    )
    .unwrap();
    assert_eq!(o["spec"]["replicas"][0]["count"], 2);
    let e = patch(json!({"status": {"trainerStatus": "x"}}), Part::Status).unwrap_err();
    assert_eq!(causes(&e)[0].0, "status");
    patch(
        json!({"status": {"trainerStatus": "x", "lastUpdatedTime": "now"}}),
        Part::Status,
    )
    .unwrap();
}

/// A CRD whose rules the sandbox cannot evaluate is refused, naming each rule's field.
#[test]
fn rules_the_sandbox_cannot_evaluate_refuse_the_crd() {
    let s = store();
    let mut crd = ruled_crd();
    crd["metadata"]["name"] = json!("others.trainer.example.com");
    crd["spec"]["names"] = json!({"plural": "others", "kind": "Other"});
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties/spec";
    *crd.pointer_mut(&format!("{spec}/x-kubernetes-validations"))
        .unwrap() = json!([
        {"rule": "self.managedBy.lowerAscii() == self.managedBy"},
        {"rule": "self.numNodes >"},
        {"rule": "self == oldSelf", "optionalOldSelf": true},
        {"rule": "true", "fieldPath": ".nowhere"},
        {"rule": "true", "reason": "FieldValueWrong"},
    ]);
    let e = s.create(&CRDS, "", crd, false).unwrap_err();
    let at = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations";
    let got = causes(&e);
    let fields: Vec<&str> = got.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        fields,
        [
            format!("{at}[0].rule"),
            format!("{at}[1].rule"),
            format!("{at}[2].optionalOldSelf"),
            format!("{at}[3].fieldPath"),
            format!("{at}[4].reason"),
        ]
    );
    assert!(got[0].2.contains("has no function lowerAscii"), "{got:?}");
    assert!(got[1].2.contains("compilation failed"), "{got:?}");
}

/// Several failed rules are one 422 with a cause each, the message listing them in brackets
/// as Kubernetes' aggregate error does.
#[test]
fn several_failures_are_one_refusal() {
    let s = store();
    let rt = s
        .lookup("trainer.example.com", "v1alpha1", "trainjobs")
        .unwrap();
    let e = s
        .create(
            rt,
            "default",
            job("t", json!({"managedBy": "other", "numNodes": 9})),
            false,
        )
        .unwrap_err();
    assert_eq!(causes(&e).len(), 2, "{}", e.message);
    assert_eq!(
        e.message,
        format!("TrainJob.trainer.example.com \"t\" is invalid: [spec.numNodes: Invalid value: \"object\": numNodes 9 is more than 8, spec.managedBy: Invalid value: \"string\": {MANAGED_BY}]")
    );
}
