use super::columns::eval;
use crate::api::resources::CUSTOMRESOURCEDEFINITIONS as CRDS;
use crate::api::{DeleteOptions, Part, Patch, Store};
use serde_json::{json, Value};

/// A CRD like mpi-operator's MPIJob, cut down: a typed spec, a free-form pod template, a
/// status subresource and printer columns.
pub(crate) fn widget_crd(scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1, "maximum": 100},
                                "color": {"type": "string", "enum": ["red", "blue"]},
                                "policy": {"type": "string", "default": "Always"},
                                "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                                "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "names": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
                                "note": {"type": "string", "nullable": true},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {"conditions": {"type": "array", "items": {
                                "type": "object",
                                "properties": {"type": {"type": "string"}, "status": {"type": "string"}},
                            }}},
                        },
                    },
                }},
            }],
        },
    })
}

fn store_with_widgets() -> Store {
    let s = Store::new();
    s.create(
        &crate::api::resources::NAMESPACES,
        "",
        json!({"metadata": {"name": "default"}}),
        false,
    )
    .unwrap();
    s.create(&CRDS, "", widget_crd("Namespaced"), false)
        .unwrap();
    s
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// A created CRD is Established with its names accepted, and its resource is served from then
/// on (and no more once it is deleted, with its objects).
#[test]
fn a_crd_registers_its_resource() {
    let s = store_with_widgets();
    let crd = s.get(&CRDS, "", "widgets.example.com").unwrap();
    let conds = crd["status"]["conditions"].as_array().unwrap();
    for ty in ["Established", "NamesAccepted"] {
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == ty && c["status"] == "True"),
            "{crd}"
        );
    }
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");
    let rt = s.lookup("example.com", "v1", "widgets").expect("served");
    assert!(rt.namespaced && rt.has_status() && rt.short_names == ["wd"]);
    assert!(s
        .groups()
        .iter()
        .any(|(g, v)| *g == "example.com" && v == &["v1"]));
    s.create(rt, "default", widget("w", json!({"size": 2})), false)
        .unwrap();
    s.delete(&CRDS, "", "widgets.example.com", &DeleteOptions::default())
        .unwrap();
    assert!(s.lookup("example.com", "v1", "widgets").is_none());
    assert_eq!(s.get(rt, "default", "w").unwrap_err().code, 404);
    // A CRD whose name is not PLURAL.GROUP, or without a storage version, is refused.
    let mut bad = widget_crd("Namespaced");
    bad["metadata"]["name"] = json!("gadgets.example.com");
    bad["spec"]["versions"][0]["storage"] = json!(false);
    let e = s.create(&CRDS, "", bad, false).unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("metadata.name") && e.message.contains("spec.versions"),
        "{}",
        e.message
    );
}

/// The unknown fields a strict write names are those pruning drops: not the preserved ones,
/// nor nulls, nor the root's or an embedded object's apiVersion/kind/metadata; array items by
/// index; and the object is left as it was.
#[test]
fn unknown_fields_are_what_pruning_drops() {
    let s = store_with_widgets();
    let rt = s.lookup("example.com", "v1", "widgets").unwrap();
    let mut o = widget(
        "w",
        json!({"size": 3, "bogus": 1, "note": null, "gone": null,
        "template": {"spec": {"containers": [{"name": "x", "anything": true}]}},
        "labels": {"a": "b"}, "names": ["abc"]}),
    );
    o["status"] = json!({"extra": 1, "conditions": [{"type": "Ready", "bad": 1}]});
    o["metadata"]["whatever"] = json!(1);
    let before = o.clone();
    assert_eq!(
        super::unknown_fields(rt, &o),
        ["spec.bogus", "status.conditions[0].bad", "status.extra"],
        "{o}"
    );
    assert_eq!(o, before);
    // Not a CRD's resource: nothing is judged.
    assert!(super::unknown_fields(&CRDS, &json!({"spec": {"x": 1}})).is_empty());
}

/// Objects are checked against the schema (each cause named), unknown fields pruned except
/// where preserved, defaults and nullable honoured.
#[test]
fn objects_are_checked_pruned_and_defaulted() {
    let s = store_with_widgets();
    let rt = s.lookup("example.com", "v1", "widgets").unwrap();
    let o = s
        .create(
            rt,
            "default",
            widget(
                "w",
                json!({"size": 3, "port": "http", "bogus": 1, "note": null,
                "template": {"spec": {"containers": [{"name": "x", "anything": true}]}},
                "labels": {"a": "b"}, "names": ["abc"]}),
            ),
            false,
        )
        .unwrap();
    let spec = &o["spec"];
    assert!(
        spec.get("bogus").is_none(),
        "unknown fields are pruned: {o}"
    );
    assert_eq!(spec["policy"], "Always", "defaulted");
    assert!(spec["note"].is_null());
    assert_eq!(
        spec["template"]["spec"]["containers"][0]["anything"], true,
        "preserved"
    );
    assert_eq!(o["metadata"]["generation"], 1);
    let bad = widget(
        "b",
        json!({"size": "big", "color": "green", "labels": {"a": 1}, "names": ["A1"], "port": 1.5}),
    );
    let e = s.create(rt, "default", bad, false).unwrap_err();
    assert_eq!(e.code, 422);
    for want in [
        "Widget.example.com \"b\" is invalid",
        "spec.size: Invalid value: \"big\": spec.size in body must be of type integer: \"string\"",
        "spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\"",
        "spec.labels.a: Invalid value",
        "spec.names[0]: Invalid value: \"A1\": spec.names[0] in body should match '^[a-z]+$'",
        "spec.port: Invalid value",
    ] {
        assert!(e.message.contains(want), "{want:?} not in {}", e.message);
    }
    let e = s
        .create(
            rt,
            "default",
            widget("c", json!({"color": "red", "size": 0})),
            false,
        )
        .unwrap_err();
    assert!(
        e.message.contains(
            "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
        ),
        "{}",
        e.message
    );
    let e = s
        .create(rt, "default", widget("d", json!({})), false)
        .unwrap_err();
    assert!(
        e.message.contains("spec.size: Required value"),
        "{}",
        e.message
    );
}

/// With a status subresource: the main resource ignores status, the status subresource
/// ignores the rest; generation counts spec changes only.
#[test]
fn status_subresource_and_generation() {
    let s = store_with_widgets();
    let rt = s.lookup("example.com", "v1", "widgets").unwrap();
    let mut w = widget("w", json!({"size": 1}));
    w["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    let o = s.create(rt, "default", w, false).unwrap();
    assert_eq!(o["metadata"]["generation"], 1);
    let patch = |p: Value, part| {
        s.patch(rt, "default", "w", Patch::Merge(p), part, false)
            .unwrap()
    };
    let o = patch(
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}, "spec": {"size": 5}}),
        Part::Main,
    );
    assert_eq!(o["spec"]["size"], 5);
    assert_ne!(
        o["status"]["conditions"][0]["status"], "False",
        "status ignored: {o}"
    );
    assert_eq!(o["metadata"]["generation"], 2);
    let o = patch(
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}, "spec": {"size": 9}}),
        Part::Status,
    );
    assert_eq!(o["status"]["conditions"][0]["status"], "True");
    assert_eq!(o["spec"]["size"], 5, "spec ignored through status");
    assert_eq!(
        o["metadata"]["generation"], 2,
        "status changes do not count"
    );
    let o = s
        .patch(
            rt,
            "default",
            "w",
            Patch::Json(json!([{"op": "replace", "path": "/spec/size", "value": 7}])),
            Part::Main,
            false,
        )
        .unwrap();
    assert_eq!(
        (
            o["spec"]["size"].clone(),
            o["metadata"]["generation"].clone()
        ),
        (json!(7), json!(3))
    );
    // A patch that breaks the schema is refused.
    let e = s
        .patch(
            rt,
            "default",
            "w",
            Patch::Merge(json!({"spec": {"size": "x"}})),
            Part::Main,
            false,
        )
        .unwrap_err();
    assert_eq!(e.code, 422);
    // A changed schema applies at once (the same served type, its schema replaced).
    let mut crd = (*s.get(&CRDS, "", "widgets.example.com").unwrap()).clone();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["size"]["maximum"] = json!(6);
    s.update(&CRDS, "", "widgets.example.com", crd, Part::Main, false)
        .unwrap();
    assert!(std::ptr::eq(
        rt,
        s.lookup("example.com", "v1", "widgets").unwrap()
    ));
    let e = s
        .patch(
            rt,
            "default",
            "w",
            Patch::Merge(json!({"spec": {"size": 7}})),
            Part::Main,
            false,
        )
        .unwrap_err();
    assert!(
        e.message.contains("less than or equal to 6"),
        "{}",
        e.message
    );
}

/// The printer columns: JSONPath as kubectl's columns use it; a table row per object.
#[test]
fn printer_columns() {
    let o = json!({"metadata": {"name": "w"}, "spec": {"size": 3, "m": {"a.b": 1}},
        "status": {"conditions": [{"type": "Created", "status": "True"}, {"type": "Ready", "status": "False"}]}});
    assert_eq!(eval(".spec.size", &o), [&json!(3)]);
    assert_eq!(
        eval("{.status.conditions[?(@.type==\"Ready\")].status}", &o),
        [&json!("False")]
    );
    assert_eq!(eval(".status.conditions[-1:].type", &o), [&json!("Ready")]);
    assert_eq!(eval(".status.conditions[0].type", &o), [&json!("Created")]);
    assert_eq!(eval(".status.conditions[*].type", &o).len(), 2);
    assert_eq!(eval(".spec.m['a.b']", &o), [&json!(1)]);
    assert!(eval(".spec.missing", &o).is_empty());
    let s = store_with_widgets();
    let rt = s.lookup("example.com", "v1", "widgets").unwrap();
    let w = s
        .create(rt, "default", widget("w", json!({"size": 4})), false)
        .unwrap();
    let t = crate::api::table::table(
        rt,
        &[&w],
        crate::api::table::IncludeObject::None,
        "meta.k8s.io/v1",
        json!({}),
    );
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Size", "Ready", "Age"]);
    let cells = &t["rows"][0]["cells"];
    assert_eq!(
        (cells[0].clone(), cells[1].clone(), cells[2].clone()),
        (json!("w"), json!(4), Value::Null)
    );
    assert!(cells[3].as_str().unwrap().ends_with('s'), "{cells}");
}

/// A cluster-scoped CRD's objects live in no namespace.
#[test]
fn cluster_scoped_resources() {
    let s = Store::new();
    s.create(&CRDS, "", widget_crd("Cluster"), false).unwrap();
    let rt = s.lookup("example.com", "v1", "widgets").unwrap();
    assert!(!rt.namespaced);
    let o = s
        .create(rt, "", widget("w", json!({"size": 1})), false)
        .unwrap();
    assert!(o["metadata"].get("namespace").is_none());
    assert_eq!(
        s.kind_of("example.com/v1", "Widget").unwrap().key(),
        "widgets.example.com"
    );
}
