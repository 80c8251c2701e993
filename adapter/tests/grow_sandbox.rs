//! `prrte-k8s grow`'s Kubernetes side against the sandbox API server and its Job and StatefulSet
//! controllers: an elastic Indexed Job grows by N (its parallelism and completions raised
//! together, the missing indexes made, the new pods awaited until Ready and returned with their
//! host names and slots), an elastic StatefulSet by its replicas, and a growth past --max-pods or
//! of a job not rendered elastic is refused with the reason, nothing changed. With the
//! ServiceAccount, Role and RoleBinding `prrte-k8s manifest --elastic` renders for a
//! StatefulSet, its token grows it (through the scale subresource) but cannot patch the
//! StatefulSet itself, nor scale it past the rendered admission policy; an elastic Job's token
//! grows it through its rendered admission policy, which refuses the token's other patches. A
//! stand-in kubelet makes every pod of the namespace Ready.
#![forbid(unsafe_code)]

mod discovery_support;

use discovery_support::{Fixture, WAIT};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use prrte_k8s::discovery::{DiscoveryConfig, Environment};
use prrte_k8s::elastic::allocreq::{extend, Status};
use prrte_k8s::elastic::grow::{add_host_arg, grow, GrowError};
use prrte_k8s::workload::WorkloadKind;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Instant;

const INDEX: &str = "batch.kubernetes.io/job-completion-index";
const STS_INDEX: &str = "apps.kubernetes.io/pod-index";

fn job(name: &str, pods: u32, max: Option<u32>) -> Job {
    let mut meta = json!({"name": name});
    if let Some(m) = max {
        meta["annotations"] = json!({"prrte-k8s.io/max-pods": m.to_string()});
    }
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods,
            "template": {"metadata": {"annotations": {"prrte-k8s.io/slots": "2"}},
                "spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "mpi", "command": ["sleep", "infinity"]}]}}}
    }))
    .unwrap()
}

/// A StatefulSet of `pods` replicas (pods made in parallel) selecting `app=<name>`.
fn statefulset(name: &str, pods: u32, max: Option<u32>) -> StatefulSet {
    let mut meta = json!({"name": name});
    if let Some(m) = max {
        meta["annotations"] = json!({"prrte-k8s.io/max-pods": m.to_string()});
    }
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"replicas": pods, "podManagementPolicy": "Parallel", "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name},
                    "annotations": {"prrte-k8s.io/slots": "3"}},
                "spec": {"containers": [{"name": "c", "image": "mpi", "command": ["sleep", "infinity"]}]}}}
    }))
    .unwrap()
}

/// A stand-in kubelet: every pod of the namespace becomes Running and Ready with an address
/// from its index (workload `j` (a Job, or a StatefulSet's `app`) of index i: 10.77.j.(10+i)).
fn kubelet(f: &Fixture) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = f.pods();
    tokio::spawn(async move {
        let mut ips: BTreeMap<String, u8> = BTreeMap::new();
        loop {
            for p in pods.list(&ListParams::default()).await.unwrap().items {
                let name = p.metadata.name.clone().unwrap();
                let ready = p.status.as_ref().and_then(|s| s.pod_ip.clone()).is_some();
                if ready {
                    continue;
                }
                let labels = p.metadata.labels.clone().unwrap_or_default();
                let index: u8 = labels
                    .get(INDEX)
                    .or(labels.get(STS_INDEX))
                    .and_then(|i| i.parse().ok())
                    .unwrap_or(0);
                let next = ips.len() as u8;
                let workload = labels.get("job-name").or(labels.get("app"));
                let job = *ips
                    .entry(workload.cloned().unwrap_or_default())
                    .or_insert(next);
                let ip = format!("10.77.{job}.{}", 10 + index);
                let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}});
                let _ = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
}

/// The Job's pods by index (name, uid), once there are `n` Ready.
async fn ready_pods(f: &Fixture, job: &str, n: usize) -> Vec<(String, String)> {
    ready_pods_of(f, &format!("job-name={job}"), INDEX, n).await
}

/// The pods `selector` matches by their index label (name, uid), once there are `n` Ready.
async fn ready_pods_of(
    f: &Fixture,
    selector: &str,
    index: &str,
    n: usize,
) -> Vec<(String, String)> {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut got: Vec<(u32, String, String)> = f
            .pods()
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
            .map(|p| {
                let i = p.metadata.labels.as_ref().unwrap()[index].parse().unwrap();
                (i, p.metadata.name.unwrap(), p.metadata.uid.unwrap())
            })
            .collect();
        got.sort();
        if got.len() == n {
            return got.into_iter().map(|(_, n, u)| (n, u)).collect();
        }
        assert!(
            Instant::now() < deadline,
            "{selector}: {} of {n} pods Ready",
            got.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn spec_counts(j: &Job) -> (i32, i32) {
    let s = j.spec.as_ref().unwrap();
    (s.parallelism.unwrap(), s.completions.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_job_grows_and_the_rest_is_refused_unchanged() {
    let f = Fixture::new("grow").await;
    let controllers = sandbox::cluster::controllers::spawn(f.server.store().clone());
    let kubelet = kubelet(&f);
    let jobs: Api<Job> = Api::namespaced(f.client.clone(), &f.ns);
    jobs.create(&PostParams::default(), &job("el", 4, Some(6)))
        .await
        .unwrap();
    jobs.create(&PostParams::default(), &job("fixed", 2, None))
        .await
        .unwrap();
    let first = ready_pods(&f, "el", 4).await;
    ready_pods(&f, "fixed", 2).await;
    let cfg = |pod: &str| DiscoveryConfig {
        self_pod: Some(pod.to_string()),
        ..f.config()
    };
    let env = Environment::default();

    // From pod 2 of the elastic job: 2 more.
    let grown = grow(&cfg(&first[2].0), &env, 2).await.unwrap();
    assert_eq!((grown.workload.pods, grown.pods), (4, 6));
    let hosts: Vec<&str> = grown.new.iter().map(|n| n.hostname.as_str()).collect();
    assert_eq!(hosts, ["el-4", "el-5"]);
    assert_eq!(add_host_arg(&grown.new), "el-4:2,el-5:2");
    assert_eq!(grown.new[0].ip.to_string(), "10.77.0.14");
    assert_eq!(spec_counts(&jobs.get("el").await.unwrap()), (6, 6));
    // The first four pods are the same pods.
    let now = ready_pods(&f, "el", 6).await;
    assert_eq!(&now[..4], &first[..]);

    // Past --max-pods: refused, nothing changed.
    let e = grow(&cfg(&first[0].0), &env, 1).await.unwrap_err();
    assert!(
        matches!(
            e,
            GrowError::BeyondMax {
                max: 6,
                room: 0,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("nothing was changed"), "{e}");
    assert_eq!(spec_counts(&jobs.get("el").await.unwrap()), (6, 6));

    // Not elastic: refused with the remedy, nothing changed.
    let fixed = ready_pods(&f, "fixed", 2).await;
    let e = grow(&cfg(&fixed[1].0), &env, 1).await.unwrap_err();
    assert!(matches!(e, GrowError::NotElastic { .. }), "{e}");
    assert!(e.to_string().contains("--elastic --max-pods M"), "{e}");
    assert_eq!(spec_counts(&jobs.get("fixed").await.unwrap()), (2, 2));
    kubelet.abort();
    controllers.abort();
}

/// An allocation request's extension (`ras k8s`'s `EXTEND`) whose new pod would take the name of
/// a node the DVM gave back before is refused before the workload is raised: no pod is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_onto_a_given_back_name_is_refused_before_any_pod_is_made() {
    let f = Fixture::new("grow-back").await;
    let controllers = sandbox::cluster::controllers::spawn(f.server.store().clone());
    let kubelet = kubelet(&f);
    let jobs: Api<Job> = Api::namespaced(f.client.clone(), &f.ns);
    jobs.create(&PostParams::default(), &job("back", 2, Some(4)))
        .await
        .unwrap();
    let first = ready_pods(&f, "back", 2).await;
    let cfg = DiscoveryConfig {
        self_pod: Some(first[0].0.clone()),
        ..f.config()
    };
    let env = Environment::default();
    let generation = |j: &Job| j.metadata.generation.unwrap_or(0);

    // The DVM gave back back-3: a new pod named back-2 is not that node.
    let given_back = vec!["back-3".to_string()];
    let (_keep, cancelled) = extend::cancellation();
    let grown = extend::grow_for_request(&cfg, &env, 1, None, &given_back, cancelled)
        .await
        .unwrap();
    let hosts: Vec<&str> = grown.new.iter().map(|n| n.hostname.as_str()).collect();
    assert_eq!(hosts, ["back-2"]);
    ready_pods(&f, "back", 3).await;
    let before = jobs.get("back").await.unwrap();
    assert_eq!(spec_counts(&before), (3, 3));

    // One more would be back-3: refused, the Job never raised, no pod made.
    let (_keep, cancelled) = extend::cancellation();
    let r = extend::grow_for_request(&cfg, &env, 1, None, &given_back, cancelled)
        .await
        .unwrap_err();
    assert_eq!(r.status, Status::NotSupported);
    assert!(
        r.reason.contains("back-3")
            && r.reason.contains("cannot take a released node back")
            && r.reason.contains("nothing was changed"),
        "{}",
        r.reason
    );
    let after = jobs.get("back").await.unwrap();
    assert_eq!(spec_counts(&after), (3, 3));
    assert_eq!(
        generation(&after),
        generation(&before),
        "the Job was changed"
    );
    let pods = f
        .pods()
        .list(&ListParams::default().labels("job-name=back"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 3);
    kubelet.abort();
    controllers.abort();
}

fn replicas(s: &StatefulSet) -> i32 {
    s.spec.as_ref().unwrap().replicas.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_statefulset_grows_by_its_replicas_and_the_rest_is_refused_unchanged() {
    let f = Fixture::new("grow-sts").await;
    let controllers = sandbox::cluster::controllers::spawn(f.server.store().clone());
    let kubelet = kubelet(&f);
    let sets: Api<StatefulSet> = Api::namespaced(f.client.clone(), &f.ns);
    sets.create(&PostParams::default(), &statefulset("els", 3, Some(5)))
        .await
        .unwrap();
    sets.create(&PostParams::default(), &statefulset("stay", 2, None))
        .await
        .unwrap();
    let first = ready_pods_of(&f, "app=els", STS_INDEX, 3).await;
    let cfg = |pod: &str| DiscoveryConfig {
        self_pod: Some(pod.to_string()),
        ..f.config()
    };
    let env = Environment::default();

    // From pod 1 of the elastic StatefulSet: 2 more, with the slots of its template.
    let grown = grow(&cfg(&first[1].0), &env, 2).await.unwrap();
    assert_eq!(grown.workload.kind, WorkloadKind::StatefulSet);
    assert_eq!((grown.workload.pods, grown.pods), (3, 5));
    let hosts: Vec<&str> = grown.new.iter().map(|n| n.hostname.as_str()).collect();
    assert_eq!(hosts, ["els-3", "els-4"]);
    assert_eq!(add_host_arg(&grown.new), "els-3:3,els-4:3");
    assert_eq!(replicas(&sets.get("els").await.unwrap()), 5);
    let now = ready_pods_of(&f, "app=els", STS_INDEX, 5).await;
    assert_eq!(&now[..3], &first[..]);

    // Past --max-pods: refused, nothing changed.
    let e = grow(&cfg(&first[0].0), &env, 1).await.unwrap_err();
    assert!(
        matches!(
            e,
            GrowError::BeyondMax {
                kind: WorkloadKind::StatefulSet,
                max: 5,
                room: 0,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(replicas(&sets.get("els").await.unwrap()), 5);

    // Not elastic: refused, nothing changed.
    let stay = ready_pods_of(&f, "app=stay", STS_INDEX, 2).await;
    let e = grow(&cfg(&stay[0].0), &env, 1).await.unwrap_err();
    assert!(
        matches!(
            e,
            GrowError::NotElastic {
                kind: WorkloadKind::StatefulSet,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(replicas(&sets.get("stay").await.unwrap()), 2);
    kubelet.abort();
    controllers.abort();
}

#[derive(clap::Parser)]
struct ManifestCli {
    #[command(flatten)]
    a: prrte_k8s::manifest::ManifestArgs,
}

/// The objects `prrte-k8s manifest ARGS` renders (no Secret).
fn rendered(args: &[&str]) -> Vec<serde_json::Value> {
    use clap::Parser;
    let mut argv = vec!["manifest"];
    argv.extend(args);
    let a = ManifestCli::try_parse_from(argv).unwrap().a;
    prrte_k8s::manifest::objects(&a.plan().unwrap(), None).unwrap()
}

/// A compromised rank holds the token of an elastic StatefulSet's service account: it may grow
/// the StatefulSet (its Scale) but not rewrite it (another service account, any Secret, any
/// image in its pod template), nor change its max-pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_statefulsets_token_grows_it_but_cannot_rewrite_it() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let f = Fixture::new("grow-rbac").await;
    let objs = rendered(&[
        "--name",
        "tok",
        "--kind",
        "statefulset",
        "--pods",
        "2",
        "--elastic",
        "--max-pods",
        "4",
        "-n",
        "grow-rbac",
    ]);
    let of = |kind: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} rendered"))
            .clone()
    };
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(f.client.clone(), &f.ns);
    let sa: ServiceAccount = serde_json::from_value(of("ServiceAccount")).unwrap();
    sas.create(&pp, &sa).await.unwrap();
    let roles: Api<Role> = Api::namespaced(f.client.clone(), &f.ns);
    roles
        .create(&pp, &serde_json::from_value(of("Role")).unwrap())
        .await
        .unwrap();
    let bindings: Api<RoleBinding> = Api::namespaced(f.client.clone(), &f.ns);
    bindings
        .create(&pp, &serde_json::from_value(of("RoleBinding")).unwrap())
        .await
        .unwrap();
    create_admission_policy(&f, &objs).await;
    let controllers = sandbox::cluster::controllers::spawn(f.server.store().clone());
    let kubelet = kubelet(&f);
    let sets: Api<StatefulSet> = Api::namespaced(f.client.clone(), &f.ns);
    sets.create(&pp, &statefulset("tok", 2, Some(4)))
        .await
        .unwrap();
    let first = ready_pods_of(&f, "app=tok", STS_INDEX, 2).await;

    let token = f
        .server
        .service_account_token(&f.ns, sa.metadata.name.as_deref().unwrap());
    let kubeconfig = f.kubeconfig_for(&token);
    let cfg = DiscoveryConfig {
        self_pod: Some(first[1].0.clone()),
        kubeconfig: Some(kubeconfig.clone()),
        ..f.config()
    };
    // grow works with the rendered Role alone.
    let grown = grow(&cfg, &Environment::default(), 1)
        .await
        .unwrap_or_else(|e| panic!("grow with the rendered Role: {e}"));
    assert_eq!((grown.workload.pods, grown.pods), (2, 3));
    assert_eq!(replicas(&sets.get("tok").await.unwrap()), 3);

    // The same token cannot patch the StatefulSet: not its template, not its max-pods.
    let before = sets.get("tok").await.unwrap();
    let rank = discovery_support::client_for(&kubeconfig).await;
    let as_rank: Api<StatefulSet> = Api::namespaced(rank, &f.ns);
    let attacks = [
        json!({"spec": {"template": {"spec": {"serviceAccountName": "default"}}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "attacker/any"}]}}}}),
        json!({"metadata": {"annotations": {"prrte-k8s.io/max-pods": "1000"}}}),
        json!({"spec": {"replicas": 1000}}),
    ];
    for attack in attacks {
        let e = as_rank
            .patch("tok", &PatchParams::default(), &Patch::Merge(&attack))
            .await
            .expect_err("the rendered Role lets the token patch its StatefulSet");
        assert!(
            matches!(&e, kube::Error::Api(s) if s.code == 403),
            "{attack}: {e}"
        );
    }
    // Its Scale, which the Role lets it patch: not past max-pods, not below 1 (the policy).
    for replicas in [5, 0] {
        let e = as_rank
            .patch_scale(
                "tok",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .expect_err("the token scaled its StatefulSet past its policy");
        assert!(
            matches!(&e, kube::Error::Api(s) if s.code == 403
                && s.message.contains("ValidatingAdmissionPolicy 'prrte-k8s.grow-rbac.tok' with binding 'prrte-k8s.grow-rbac.tok' denied request")),
            "{replicas}: {e}"
        );
    }
    let sts = sets.get("tok").await.unwrap();
    assert_eq!(
        sts.spec.as_ref().unwrap().template,
        before.spec.as_ref().unwrap().template,
        "the token changed the pod template"
    );
    let tpl = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(tpl.containers[0].image.as_deref(), Some("mpi"));
    assert_eq!(
        sts.metadata.annotations.unwrap()["prrte-k8s.io/max-pods"],
        "4"
    );
    assert_eq!(replicas(&sets.get("tok").await.unwrap()), 3);
    kubelet.abort();
    controllers.abort();
}

/// Creates the ValidatingAdmissionPolicy and its binding among `objs` (as the admin).
async fn create_admission_policy(f: &Fixture, objs: &[serde_json::Value]) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let of = |kind: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} rendered"))
            .clone()
    };
    let pp = PostParams::default();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(f.client.clone());
    policies
        .create(
            &pp,
            &serde_json::from_value(of("ValidatingAdmissionPolicy")).unwrap(),
        )
        .await
        .unwrap();
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(f.client.clone());
    bindings
        .create(
            &pp,
            &serde_json::from_value(of("ValidatingAdmissionPolicyBinding")).unwrap(),
        )
        .await
        .unwrap();
}

/// A compromised rank holds the token of an elastic Job's service account: `grow` with it
/// raises the Job through the rendered admission policy, and the same token's other patches
/// of the Job (its template, suspension, max-pods) are refused by the API server naming the
/// policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_jobs_token_grows_it_through_its_admission_policy_and_nothing_else() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let f = Fixture::new("grow-vap").await;
    let objs = rendered(&[
        "--name",
        "el",
        "--pods",
        "2",
        "--elastic",
        "--max-pods",
        "4",
        "-n",
        "grow-vap",
    ]);
    let of = |kind: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} rendered"))
            .clone()
    };
    let pp = PostParams::default();
    let sa: ServiceAccount = serde_json::from_value(of("ServiceAccount")).unwrap();
    Api::<ServiceAccount>::namespaced(f.client.clone(), &f.ns)
        .create(&pp, &sa)
        .await
        .unwrap();
    Api::<Role>::namespaced(f.client.clone(), &f.ns)
        .create(&pp, &serde_json::from_value(of("Role")).unwrap())
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(f.client.clone(), &f.ns)
        .create(&pp, &serde_json::from_value(of("RoleBinding")).unwrap())
        .await
        .unwrap();
    create_admission_policy(&f, &objs).await;
    let controllers = sandbox::cluster::controllers::spawn(f.server.store().clone());
    let kubelet = kubelet(&f);
    let jobs: Api<Job> = Api::namespaced(f.client.clone(), &f.ns);
    jobs.create(&pp, &job("el", 2, Some(4))).await.unwrap();
    let first = ready_pods(&f, "el", 2).await;

    let token = f
        .server
        .service_account_token(&f.ns, sa.metadata.name.as_deref().unwrap());
    let kubeconfig = f.kubeconfig_for(&token);
    let cfg = DiscoveryConfig {
        self_pod: Some(first[1].0.clone()),
        kubeconfig: Some(kubeconfig.clone()),
        ..f.config()
    };
    // grow's own patch passes the policy.
    let grown = grow(&cfg, &Environment::default(), 1)
        .await
        .unwrap_or_else(|e| panic!("grow through the rendered policy: {e}"));
    assert_eq!((grown.workload.pods, grown.pods), (2, 3));
    assert_eq!(spec_counts(&jobs.get("el").await.unwrap()), (3, 3));

    let before = jobs.get("el").await.unwrap();
    let rank = discovery_support::client_for(&kubeconfig).await;
    let as_rank: Api<Job> = Api::namespaced(rank, &f.ns);
    for attack in [
        json!({"spec": {"template": {"spec": {"serviceAccountName": "other"}}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "attacker/any"}]}}}}),
        json!({"spec": {"suspend": true}}),
        json!({"metadata": {"annotations": {"prrte-k8s.io/max-pods": "1000"}}}),
        json!({"spec": {"parallelism": 5, "completions": 5}}),
    ] {
        let e = as_rank
            .patch("el", &PatchParams::default(), &Patch::Merge(&attack))
            .await
            .expect_err("the policy let the token change its Job");
        assert!(
            matches!(&e, kube::Error::Api(s) if s.code == 403
                && s.message.starts_with("jobs.batch \"el\" is forbidden: ValidatingAdmissionPolicy 'prrte-k8s.grow-vap.el' with binding 'prrte-k8s.grow-vap.el' denied request: the job's own service account")),
            "{attack}: {e}"
        );
    }
    let after = jobs.get("el").await.unwrap();
    assert_eq!(after.spec, before.spec, "the token changed the Job");
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    kubelet.abort();
    controllers.abort();
}
