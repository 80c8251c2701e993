//! `prrte-k8s controller`: serves `/metrics` and the probes' `/healthz`, waits to hold the Lease, then runs kube-runtime's
//! `Controller` over the MPIJobs (kept as their heads, `controller::head`), the Jobs and, where
//! the launcher gets a pod of its own (`--launcher-pod`), the JobSets they own (their metadata)
//! and those children's pods (through a reflector, whose store the reconciles read
//! the pods from, trimmed to what they read), of every namespace or, with `--namespace`, one
//! `Controller` for each namespace named (the install's Roles then grant no more), until the
//! Lease is lost (the process then exits, and its Deployment starts it again as a follower) or
//! a signal.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Client, ResourceExt};
use kube_lease_manager::LeaseManagerBuilder;

use super::child::jobset_resource;
use super::context::Context;
use super::desired::{Settings, SharedBecause};
use super::head::{reconcile_head, MpiJobHead};
use super::metrics::{serve, Metrics};
use super::pod_policy::PodPolicy;
use super::reconcile::error_policy;
use crate::manifest::api_server::{self, ApiServer};
use crate::manifest::{INJECT_IMAGE, JOB_LABEL};

/// The controller's name: its events' reporting controller and its Lease's default name.
pub(crate) const CONTROLLER: &str = "prrte-k8s-controller";

/// `prrte-k8s controller`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct ControllerArgs {
    /// Also reconcile the MPIJobs that name no spec.runPolicy.managedBy (a cluster without
    /// mpi-operator); without it only those with managedBy: prrte-k8s.io/controller.
    #[arg(long)]
    pub(crate) manage_all: bool,
    /// The image whose init container copies the runtime into every pod.
    #[arg(long, default_value = INJECT_IMAGE)]
    pub(crate) inject_image: String,
    /// imagePullPolicy of every container of the jobs' pods.
    #[arg(long, value_parser = ["Always", "IfNotPresent", "Never"])]
    pub(crate) image_pull_policy: Option<String>,
    /// Where the jobs' pods may reach the Kubernetes API (their NetworkPolicy's egress);
    /// repeatable. Default: any address but link-local ones.
    #[arg(long, value_name = "CIDR")]
    pub api_server_cidr: Vec<ipnet::IpNet>,
    /// The API server's ports in that egress; repeatable. Default: 443 and 6443.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub api_server_port: Vec<u16>,
    /// Ask the cluster at start for the API server's addresses and ports (the endpoints of
    /// Service `kubernetes` in `default`; needs list on endpointslices there).
    #[arg(long, conflicts_with_all = ["api_server_cidr", "api_server_port"])]
    pub api_server_from_cluster: bool,
    /// Where to serve GET /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub(crate) metrics_address: SocketAddr,
    /// Where to serve the probes' GET /healthz and /readyz (a port of their own, so that
    /// connections to the metrics port cannot starve them).
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub(crate) health_address: SocketAddr,
    /// The coordination.k8s.io/v1 Lease the replicas elect their leader with.
    #[arg(long, default_value = CONTROLLER)]
    pub(crate) lease_name: String,
    /// The Lease's namespace [default: the pod's own namespace, else "default"].
    #[arg(long, env = "POD_NAMESPACE")]
    pub(crate) lease_namespace: Option<String>,
    /// This replica's name in the Lease and in its events [default: the host name].
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds a Lease holds without renewal.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=300))]
    pub(crate) lease_seconds: u64,
    /// How many MPIJobs are reconciled at once (in each namespace of --namespace).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,
    /// Watch only the MPIJobs, Jobs and pods of these namespaces (repeatable, or a comma
    /// list): the install then grants the controller a Role in each instead of its
    /// ClusterRole. Default: every namespace.
    #[arg(long = "namespace", value_name = "NS", value_delimiter = ',')]
    pub namespaces: Vec<String>,
    /// Refuse (condition Failed, naming the field) an MPIJob whose pod templates mount or read
    /// a Secret that is not the job's own (a Secret or projected volume, envFrom, valueFrom,
    /// a CSI volume's secret reference).
    #[arg(long)]
    pub(crate) refuse_foreign_secrets: bool,
    /// Refuse (condition Failed, naming the field) an MPIJob whose pod templates set nodeName
    /// (which bypasses the scheduler).
    #[arg(long)]
    pub(crate) refuse_node_name: bool,
    /// Gang scheduling, as mpi-operator's --gang-scheduling: each MPIJob gets a PodGroup sized
    /// by its runPolicy.schedulingPolicy, made before its Job, and its pods the scheduler's
    /// name. "volcano": Volcano's (scheduling.volcano.sh); any other NAME: scheduler-plugins'
    /// coscheduling (scheduling.x-k8s.io) in the scheduler of that name. Default: none.
    #[arg(long, value_name = "NAME", value_parser = super::gang::parse_scheduler)]
    pub(crate) gang_scheduler: Option<super::gang::GangScheduler>,
    /// Where an MPIJob's launcher runs: "auto", jobset where the cluster serves JobSets (asked
    /// at start), else shared; "jobset", a pod of its own from the Launcher's template (each
    /// MPIJob with workers gets a JobSet, jobset.x-k8s.io, replicated jobs launcher and
    /// worker); "shared", pod 0 of the one Indexed Job, from the Worker's template (an MPIJob
    /// whose Launcher's template differs gets a warning event naming the fields).
    #[arg(long, value_enum, default_value_t = LauncherPod::Auto)]
    pub(crate) launcher_pod: LauncherPod,
    /// Also reconcile Kubeflow Trainer's TrainJobs whose runtime is prrte-k8s's (a name
    /// starting prrte-k8s-), as Trainer's controller would: for clusters without it (the
    /// controller refuses to start where Trainer's controller is installed).
    #[arg(long)]
    pub trainjobs: bool,
}

/// `--launcher-pod`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LauncherPod {
    /// A JobSet where the cluster serves them, else the Indexed Job.
    Auto,
    /// A JobSet: the launcher's pod of its own.
    Jobset,
    /// The Indexed Job: the launcher is its pod 0.
    Shared,
}

/// Whether the API server serves JobSets (jobset.x-k8s.io/v1alpha2, resource jobsets).
async fn serves_jobsets(client: &Client) -> Result<bool, ControllerError> {
    let gv = format!("{}/v1alpha2", super::child::JOBSET_GROUP);
    match client.list_api_group_resources(&gv).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == "jobsets")),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(ControllerError::Client(e)),
    }
}

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("cannot reach the Kubernetes API: {0} (in a pod, the ServiceAccount's token is used; elsewhere KUBECONFIG)")]
    Client(#[source] kube::Error),
    #[error("cannot serve /metrics on {0}: {1} (give another --metrics-address)")]
    Metrics(SocketAddr, #[source] std::io::Error),
    #[error("cannot serve /healthz on {0}: {1} (give another --health-address)")]
    Health(SocketAddr, #[source] std::io::Error),
    #[error("the Lease {0}: {1} (the controller's Role must allow get, create and patch on leases.coordination.k8s.io in that namespace)")]
    Lease(String, String),
    #[error(
        "--api-server-from-cluster: {0} (give --api-server-cidr and --api-server-port instead)"
    )]
    ApiServer(#[source] api_server::ApiServerError),
    #[error(transparent)]
    Trainer(#[from] super::trainjobs::detect::DetectError),
    #[error("lost the Lease {0}: another replica leads now; exiting so that this one restarts as a follower")]
    LostLease(String),
}

fn own_namespace() -> String {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| CONTROLLER.into())
}

/// Runs the controller until the Lease is lost or a signal comes.
pub async fn run(args: ControllerArgs) -> Result<(), ControllerError> {
    let client = Client::try_default()
        .await
        .map_err(ControllerError::Client)?;
    let api_server = if args.api_server_from_cluster {
        api_server::lookup(std::time::Duration::from_secs(30))
            .await
            .map_err(ControllerError::ApiServer)?
    } else {
        ApiServer {
            cidrs: args.api_server_cidr.clone(),
            ports: args.api_server_port.clone(),
        }
    };
    if args.trainjobs {
        super::trainjobs::detect::refuse_if_trainer(&client).await?;
    }
    let metrics = Arc::new(Metrics::new());
    let listener = tokio::net::TcpListener::bind(args.metrics_address)
        .await
        .map_err(|e| ControllerError::Metrics(args.metrics_address, e))?;
    let health = tokio::net::TcpListener::bind(args.health_address)
        .await
        .map_err(|e| ControllerError::Health(args.health_address, e))?;
    // A flood of connections must not run the controller out of descriptors before the
    // endpoints' caps act.
    crate::agent::limits::raise_nofile_limit();
    let server = tokio::spawn(serve(listener, health, metrics.clone()));
    let identity = args.identity.clone().unwrap_or_else(host_name);
    let lease_ns = args.lease_namespace.clone().unwrap_or_else(own_namespace);
    let lease_id = format!("{lease_ns}/{}", args.lease_name);
    let lease_err = |e: kube_lease_manager::LeaseManagerError| {
        ControllerError::Lease(lease_id.clone(), e.to_string())
    };
    let manager = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&lease_ns)
        .with_identity(&identity)
        .with_duration(args.lease_seconds)
        .with_grace((args.lease_seconds / 3).max(1))
        .build()
        .await
        .map_err(lease_err)?;
    let (mut leader, lease_task) = manager.watch().await;
    tracing::info!("{identity}: waiting to lead through the Lease {lease_id}");
    while !*leader.borrow_and_update() {
        tokio::select! {
            changed = leader.changed() => if changed.is_err() {
                // The manager's task ended: say why.
                let why = match lease_task.await {
                    Ok(Err(e)) => e.to_string(),
                    _ => "its task ended".to_string(),
                };
                return Err(ControllerError::Lease(lease_id, why));
            },
            _ = stop_signal() => return Ok(()),
        }
    }
    tracing::info!("{identity}: leading through the Lease {lease_id}");
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = lost.clone();
    let stop = async move {
        tokio::select! {
            _ = async {
                while leader.changed().await.is_ok() && *leader.borrow_and_update() {}
            } => flag.store(true, std::sync::atomic::Ordering::SeqCst),
            _ = stop_signal() => {}
        }
        // Dropping the channel ends the manager's task, which gives the Lease up.
        drop(leader);
    };
    let settings = Settings {
        inject_image: args.inject_image.clone(),
        pull_policy: args.image_pull_policy.clone(),
        api_server,
        manage_all: args.manage_all,
        pod_policy: PodPolicy {
            foreign_secrets: args.refuse_foreign_secrets,
            node_name: args.refuse_node_name,
        },
        gang: args.gang_scheduler.clone(),
        jobset: false,
        shared_because: SharedBecause::Chosen,
    };
    let settings = match args.launcher_pod {
        LauncherPod::Jobset => Settings {
            jobset: true,
            ..settings
        },
        LauncherPod::Shared => settings,
        LauncherPod::Auto => Settings {
            jobset: serves_jobsets(&client).await?,
            shared_because: SharedBecause::NoJobSet,
            ..settings
        },
    };
    if settings.jobset {
        tracing::info!("each MPIJob with workers gets a JobSet: the launcher in a pod of its own");
    } else if settings.shared_because == SharedBecause::NoJobSet {
        tracing::warn!("the cluster serves no JobSet (jobset.x-k8s.io/v1alpha2): each MPIJob gets one Indexed Job, the launcher its pod 0 from the Worker's template (an MPIJob whose Launcher's template differs gets a warning event); install JobSet and restart the controller for the launcher to have a pod of its own");
    } else {
        tracing::info!("each MPIJob gets one Indexed Job: the launcher is its pod 0");
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: CONTROLLER.into(),
            instance: Some(identity),
        },
    );
    // Every namespace, or one controller for each namespace named, all ending together.
    let scopes: Vec<Option<String>> = if args.namespaces.is_empty() {
        vec![None]
    } else {
        let mut named: Vec<String> = args.namespaces.clone();
        named.sort();
        named.dedup();
        named.into_iter().map(Some).collect()
    };
    let stop = futures::FutureExt::shared(Box::pin(stop));
    let runs = scopes.into_iter().map(|scope| {
        if let Some(ns) = &scope {
            tracing::info!("watching the namespace {ns}");
        }
        let shared = Shared {
            client: client.clone(),
            settings: settings.clone(),
            recorder: recorder.clone(),
            metrics: metrics.clone(),
        };
        let trainjobs = args.trainjobs.then(|| {
            let (client, recorder) = (client.clone(), recorder.clone());
            super::trainjobs::watch::watch(
                client,
                recorder,
                scope.clone(),
                args.concurrency,
                stop.clone(),
            )
        });
        let mpijobs = watch(scope, shared, args.concurrency, stop.clone());
        async move {
            let trainjobs = async {
                if let Some(t) = trainjobs {
                    t.await
                }
            };
            futures::join!(mpijobs, trainjobs);
        }
    });
    futures::future::join_all(runs).await;
    server.abort();
    let _ = lease_task.await;
    if lost.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ControllerError::LostLease(lease_id));
    }
    Ok(())
}

/// The API of `K` in the namespace `scope`, or in all.
fn api<K>(client: &Client, scope: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What the controllers of every namespace share.
struct Shared {
    client: Client,
    settings: Settings,
    recorder: Recorder,
    metrics: Arc<Metrics>,
}

/// Runs kube-runtime's `Controller` over the MPIJobs of the namespace `scope` (None: all), the
/// Jobs they own and those Jobs' pods, until `stop`.
async fn watch(
    scope: Option<String>,
    shared: Shared,
    concurrency: u16,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let scope = scope.as_deref();
    let client = shared.client.clone();
    // The pods of every prrte-k8s job, watched once: each change wakes the MPIJob of the same
    // name, if there is one, and the store it fills is what the reconciles read them from.
    let (pods, pod_writer) = reflector::store();
    let pod_events = reflector::reflector(
        pod_writer,
        watcher(
            api::<Pod>(&client, scope),
            watcher::Config::default()
                .labels(JOB_LABEL)
                .page_size(LIST_PAGE),
        )
        .modify(trim_pod),
    )
    .default_backoff()
    .touched_objects();
    let jobset = shared.settings.jobset;
    let ctx = Arc::new(Context {
        client: client.clone(),
        settings: shared.settings,
        recorder: shared.recorder,
        metrics: shared.metrics,
        pods,
        posted: Default::default(),
        failures: Default::default(),
    });
    // Every MPIJob of the scope, kept as its head (name, uid, versions, managedBy: a few
    // hundred bytes whatever its size or shape); the reconcile of one the controller manages
    // reads it in full. Listed a page at a time, so that a list of big objects is never held
    // whole.
    let mpijobs = api::<MpiJobHead>(&client, scope);
    // The Jobs of every prrte-k8s job (the controller's own and others'), their metadata
    // only: a change wakes the MPIJob that owns it.
    let job_events = watcher(
        api::<PartialObjectMeta<Job>>(&client, scope),
        watcher::Config::default()
            .labels("app.kubernetes.io/name=prrte-k8s")
            .page_size(LIST_PAGE),
    )
    .default_backoff()
    .touched_objects();
    // The JobSets likewise, where the children are JobSets (their metadata: a change wakes
    // the MPIJob that owns it); else a stream that never yields.
    let jobset_owners = if jobset {
        let ar = jobset_resource();
        let api: Api<PartialObjectMeta<DynamicObject>> = match scope {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        watcher(api, watcher::Config::default().page_size(LIST_PAGE))
            .default_backoff()
            .touched_objects()
            .filter_map(|r| futures::future::ready(r.ok()))
            .flat_map(|j| futures::stream::iter(mpijob_owners(&j.metadata)))
            .boxed()
    } else {
        futures::stream::pending().boxed()
    };
    Controller::new(mpijobs, watcher::Config::default().page_size(LIST_PAGE))
        .watches_stream(job_events, |j: PartialObjectMeta<Job>| {
            mpijob_owners(&j.metadata)
        })
        .reconcile_on(jobset_owners)
        .watches_stream(pod_events, move |p: Pod| {
            let ns = p.namespace();
            p.labels().get(JOB_LABEL).map(|name| {
                let r = ObjectRef::<MpiJobHead>::new(name);
                match &ns {
                    Some(ns) => r.within(ns),
                    None => r,
                }
            })
        })
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(stop)
        .run(reconcile_head, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Objects per page of the initial lists (and relists) of the MPIJobs, the Jobs and the pods:
/// a page is read whole before its objects are, so it bounds what a list holds at once
/// (objects are at most the API server's 1.5 MiB request limit).
pub(crate) const LIST_PAGE: u32 = 10;

/// The MPIJobs among the owners of the object of `meta` (in its namespace).
fn mpijob_owners(meta: &ObjectMeta) -> Vec<ObjectRef<MpiJobHead>> {
    meta.owner_references
        .iter()
        .flatten()
        .filter(|r| r.kind == "MPIJob" && r.api_version.split('/').next() == Some("kubeflow.org"))
        .map(|r| {
            let o = ObjectRef::<MpiJobHead>::new(&r.name);
            match &meta.namespace {
                Some(ns) => o.within(ns),
                None => o,
            }
        })
        .collect()
}

/// What the pod store keeps of a pod: the status, the labels and the owners the reconciles
/// read, not the spec (the MPIJob's pod template, whatever its size), the annotations or the
/// managed fields.
fn trim_pod(p: &mut Pod) {
    p.spec = None;
    p.metadata.annotations = None;
    p.metadata.managed_fields = None;
}

/// SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! { _ = t.recv() => {}, _ = i.recv() => {} }
        }
        _ => futures::future::pending().await,
    }
}
