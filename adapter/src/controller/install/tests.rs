//! The install objects: the files of `prrte-config/deploy/` are the renderer's, the ClusterRole
//! holds exactly what the controller does (every object `desired` makes, the job Role it hands
//! on, the watches) and no more, and the Deployment's pod is at the restricted level.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use crate::controller::crd::crd_yaml;
use crate::controller::desired::{desired, Settings};
use crate::controller::gang::GangScheduler;
use crate::controller::install::{
    cluster_rules, files, lease_rules, objects, yaml, CRD_FILE, IMAGE, NAME, NAMESPACE,
};
use crate::manifest::INJECT_IMAGE;

const PI: &str = include_str!("../../manifest/mpijob/examples/pi.yaml");
const RICH: &str = include_str!("../../manifest/mpijob/examples/rich.yaml");

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../prrte-config/deploy")
}

/// Whether `rules` allow `verb` on `resource` of `group` (no wildcards are used).
fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == group)
            && r.resources.iter().flatten().any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
    })
}

/// An MPIJob as served, ours.
fn served(text: &str) -> Value {
    let mut v: Value = serde_yaml::from_str(text).unwrap();
    v["metadata"]["namespace"] = json!("team");
    v["metadata"]["uid"] = json!("1f1e5c7a-0000-4000-8000-000000000001");
    v["spec"]["runPolicy"]["managedBy"] = json!("prrte-k8s.io/controller");
    v
}

/// (group, plural) of the object `o`.
fn resource_of(o: &Value) -> (String, String) {
    let av = o["apiVersion"].as_str().unwrap();
    let (g, v) = av.split_once('/').unwrap_or(("", av));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, o["kind"].as_str().unwrap()));
    (g.to_string(), ar.plural)
}

#[test]
fn the_deploy_files_are_the_renderers_and_the_crd_is_generated() {
    let regenerate = std::env::var_os("PRRTE_K8S_REGENERATE").is_some();
    for (name, text) in files().unwrap() {
        let path = deploy_dir().join(name);
        if regenerate {
            std::fs::write(&path, &text).unwrap();
        }
        let file =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            file == text,
            "{} differs from the renderer; regenerate prrte-config/deploy with\n  PRRTE_K8S_REGENERATE=1 cargo test -p prrte-k8s --lib controller::install",
            path.display()
        );
    }
    assert_eq!(files().unwrap()[0], (CRD_FILE, crd_yaml().unwrap()));
    let read = |f: &str| -> Value {
        serde_yaml::from_str(&std::fs::read_to_string(deploy_dir().join(f)).unwrap()).unwrap()
    };
    let k = read("kustomization.yaml");
    // kustomize v5 takes directories under `resources` (it deprecates `bases`).
    assert_eq!(k["resources"], json!([CRD_FILE, "controller"]));
    assert!(k.get("bases").is_none(), "{k:?}");
    let k = read("controller/kustomization.yaml");
    assert_eq!(k["resources"], json!(["controller.yaml"]));
    assert_eq!(
        k["images"][0]["name"].as_str(),
        IMAGE.strip_suffix(":latest")
    );
    // The one stream holds the same objects as the files, in the same order.
    let stream: Vec<Value> = serde_yaml::Deserializer::from_str(&yaml().unwrap())
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(stream, objects().unwrap());
}

#[test]
fn the_cluster_role_creates_every_object_of_a_job_and_holds_what_its_role_grants() {
    let rules = cluster_rules();
    let mut made = BTreeSet::new();
    // Without a gang scheduler, and with each kind of PodGroup; the child a Job or a JobSet.
    let gangs = [
        None,
        Some(GangScheduler::Volcano),
        Some(GangScheduler::SchedulerPlugins("coscheduler".into())),
    ];
    for ((text, gang), jobset) in [PI, RICH]
        .into_iter()
        .flat_map(|t| gangs.iter().map(move |g| (t, g.clone())))
        .flat_map(|tg| [(tg.clone(), false), (tg, true)])
    {
        let settings = Settings {
            inject_image: INJECT_IMAGE.into(),
            gang,
            jobset,
            ..Default::default()
        };
        let d = desired(
            &serde_json::from_value(served(text)).unwrap(),
            &settings,
            "a-key",
        )
        .unwrap();
        let all = d
            .others
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .chain(std::iter::once(serde_json::to_value(&d.child).unwrap()));
        for o in &all.collect::<Vec<Value>>() {
            let (g, r) = resource_of(o);
            // Server-side apply: patch, and create for a new object; get before it is made,
            // so that another's object of the same name is never taken over.
            for verb in ["get", "create", "patch"] {
                assert!(allows(&rules, &g, &r, verb), "{verb} {r}.{g}");
            }
            made.insert((g, r));
            // The controller may create a Role only with the permissions it holds itself.
            if o["kind"] == "Role" {
                for rule in o["rules"].as_array().unwrap() {
                    for g in rule["apiGroups"].as_array().unwrap() {
                        for r in rule["resources"].as_array().unwrap() {
                            for v in rule["verbs"].as_array().unwrap() {
                                let (g, r, v) = (
                                    g.as_str().unwrap(),
                                    r.as_str().unwrap(),
                                    v.as_str().unwrap(),
                                );
                                assert!(allows(&rules, g, r, v), "{v} {r}.{g} (the job's Role)");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(made.contains(&("jobset.x-k8s.io".to_string(), "jobsets".to_string())));
    // The watches and reads of reconcile and run: MPIJobs, their status, the children (Jobs,
    // JobSets: a failed one deleted to be made again), pods, events.
    let child = &["get", "list", "watch", "patch", "delete"][..];
    for (g, r, verbs) in [
        ("kubeflow.org", "mpijobs", &["get", "list", "watch"][..]),
        ("kubeflow.org", "mpijobs/status", &["patch"]),
        ("batch", "jobs", child),
        ("jobset.x-k8s.io", "jobsets", child),
        ("", "pods", &["list", "watch", "delete"]),
        ("events.k8s.io", "events", &["create", "patch"]),
    ] {
        for v in verbs {
            assert!(allows(&rules, g, r, v), "{v} {r}.{g}");
        }
    }
    // Nothing else: no wildcard, no resource the controller does not touch, no delete (the
    // garbage collector deletes what the MPIJob owns) but of pods (`cleanPodPolicy: All`) and
    // of the children (a restart's), no update.
    let touched: BTreeSet<(String, String)> = made
        .into_iter()
        .chain(
            [
                ("kubeflow.org", "mpijobs"),
                ("kubeflow.org", "mpijobs/status"),
                ("", "pods"),
                ("events.k8s.io", "events"),
                // Granted to the launcher by the job's Role (checked above).
                ("", "events"),
                // `--trainjobs` (controller::trainjobs).
                ("trainer.kubeflow.org", "trainjobs"),
                ("trainer.kubeflow.org", "trainjobs/status"),
                ("trainer.kubeflow.org", "clustertrainingruntimes"),
                ("trainer.kubeflow.org", "trainingruntimes"),
                ("", "configmaps"),
                (
                    "admissionregistration.k8s.io",
                    "validatingwebhookconfigurations",
                ),
            ]
            .map(|(g, r)| (g.to_string(), r.to_string())),
        )
        .collect();
    for rule in rules.iter().chain(lease_rules().iter()) {
        let deleted = rule
            .resources
            .iter()
            .flatten()
            .all(|r| ["pods", "jobs", "jobsets"].contains(&r.as_str()));
        for v in &rule.verbs {
            assert!(
                ["get", "list", "watch", "create", "patch"].contains(&v.as_str())
                    || (deleted && v == "delete"),
                "verb {v}"
            );
        }
        assert!(rule.resource_names.is_none() && rule.non_resource_urls.is_none());
    }
    for rule in &rules {
        for g in rule.api_groups.iter().flatten() {
            for r in rule.resources.iter().flatten() {
                assert!(
                    touched.contains(&(g.clone(), r.clone())),
                    "{r}.{g} is not used"
                );
            }
        }
    }
    assert!(allows(
        &lease_rules(),
        "coordination.k8s.io",
        "leases",
        "patch"
    ));
}

#[test]
fn the_deployment_is_restricted_and_runs_the_controller_image() {
    let objects = objects().unwrap();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "NetworkPolicy",
            "Deployment"
        ]
    );
    assert_eq!(
        objects[1]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let d = &objects[8];
    assert_eq!(d["metadata"]["namespace"], NAMESPACE);
    let t = &d["spec"]["template"];
    assert_eq!(
        crate::manifest::restricted::violations(t),
        Vec::<String>::new()
    );
    let c = &t["spec"]["containers"][0];
    assert_eq!(c["image"], IMAGE);
    assert_eq!(c["args"], json!(["controller"]));
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert_eq!(t["spec"]["serviceAccountName"], NAME);
    // Both bindings name the ServiceAccount the pod runs as.
    for b in &objects[4..7] {
        if let Some(s) = b["subjects"].as_array() {
            assert_eq!(s[0]["name"], NAME);
            assert_eq!(s[0]["namespace"], NAMESPACE);
        }
    }
}

#[test]
fn the_probes_have_a_port_of_their_own_and_the_namespace_a_network_policy() {
    let objects = objects().unwrap();
    let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["ports"],
        json!([
            {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
            {"name": "health", "containerPort": 8081, "protocol": "TCP"},
        ])
    );
    // Neither probe goes to the metrics port: its connections cannot starve them.
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["port"], "health", "{probe}");
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
    }
    let p = objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .unwrap();
    assert_eq!(p["metadata"]["namespace"], NAMESPACE);
    let spec = &p["spec"];
    // It selects the controller's pods.
    assert_eq!(
        spec["podSelector"]["matchLabels"],
        d["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    // In: the metrics port alone, from Prometheus' namespace alone.
    assert_eq!(
        spec["ingress"],
        json!([{
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            "ports": [{"protocol": "TCP", "port": "metrics"}],
        }])
    );
    // Out: the Kubernetes API alone (no link-local address: no cloud metadata).
    assert_eq!(
        spec["egress"],
        json!([{
            "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}],
            "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}],
        }])
    );
}
