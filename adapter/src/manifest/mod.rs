//! `prrte-k8s manifest`: one complete MPI job as Kubernetes YAML, for `kubectl apply -f -`.
//!
//! The output holds, in this order: a ServiceAccount, a Role with exactly what discovery reads
//! for the chosen workload (get/list/watch pods; get on the one Job, StatefulSet or JobSet that
//! owns them, by name), its RoleBinding, a Secret with a fresh random key (32 bytes from the
//! operating system, hex), the workload (an Indexed Job, a StatefulSet or a JobSet), and a
//! NetworkPolicy that admits exactly the job's pinned ports, only from the job's own pods, and
//! lets them connect only to each other, the cluster DNS and the Kubernetes API
//! (`--api-server-cidr`). Every pod carries `JOB_LABEL` with the job's name, which the
//! StatefulSet and the NetworkPolicy select. Every object printed carries the annotation
//! `RENDERED_BY`, which the MPIJob controller never takes for its own.
//!
//! Every pod runs `prrte-k8s-agent` as its entrypoint under Kubernetes' "restricted" pod
//! security: non-root uid, no privilege escalation, every capability dropped, the runtime's
//! seccomp profile, a read-only root file system with emptyDirs for `/tmp`,
//! `/var/run/prrte-k8s` and `/dev/shm` (memory). The service-account token (of a Role that only
//! reads) is mounted into the agent's container alone, by a projected volume; the pod does not
//! automount it, so init containers and sidecars have none.
//!
//! **Batch** (a command after `--`): the agent of the pod with index 0 runs it once the pod is
//! ready; its output is the pod's log; when it ends every other agent exits too (see
//! `agent::batch`). The Job has `backoffLimit: 0`, a `successPolicy` on index 0 (or
//! none: all indexes must succeed), a `podFailurePolicy` that fails the Job at the first
//! disruption or non-zero exit and names it, an optional `activeDeadlineSeconds` and a
//! `ttlSecondsAfterFinished`. **Interactive** (no command): the agent of pod 0 runs the DVM head
//! and `prrte-k8s prun` works from any pod.
//!
//! **Elastic** (`--elastic --max-pods M`): `prrte-k8s grow N` may add pods to the running job.
//! The Role may then also raise the one workload (a StatefulSet through its `scale` subresource
//! alone; a Job, which has none, by `patch`, narrowed by a ValidatingAdmissionPolicy rendered
//! with it (`admission`) to its parallelism and completions within M), the workload carries
//! `MAX_PODS_ANNOTATION` with M, and a Job Kueue's `KUEUE_ELASTIC_ANNOTATION` so that a
//! cluster with Kueue admits the growth. A JobSet does not grow (its replicated Jobs cannot
//! change while it runs).
//!
//! Ports (pinned, so that the NetworkPolicy can name them):
//! [`AGENT_PORT`] (agent), `HEALTH_PORT` (readiness), `TOOL_PORT` (the DVM head's PMIx
//! tool listener, interactive only), `OOB_PORT` (PRRTE's OOB: `oob_tcp_dynamic_ipv4_ports`),
//! `BTL_PORT_MIN..+BTL_PORT_RANGE` (Open MPI's TCP BTL: `btl_tcp_port_min_v4`,
//! `btl_tcp_port_range_v4`).
//!
//! **Inputs.** The job comes from the command-line options ([`ManifestArgs::plan`]) or from a
//! kubeflow.org/v2beta1 MPIJob (`mpijob`, `--from-mpijob`), as a `JobPlan` the renderers
//! read. The agent and PRRTE are in the image, or the runtime is injected into any image by
//! an init container (`inject`, `--inject`; implied by `--from-mpijob`). [`restricted`] checks a
//! pod template against the restricted pod security level; a converted MPIJob is checked with
//! it before it is printed.
//!
//! Layout: `options` holds the command-line options and their checks, `plan` the job between
//! the inputs and the renderers, `error` what can go wrong, `render` the entry ([`prepare`],
//! [`objects`], [`render`]); `layout` the ports, paths and names every pod shares, `meta` the
//! objects' names and labels; `pod` the pod template every kind shares, `inject` the injected
//! runtime's parts; the workload object itself is its kind's ([`crate::workload`]); `rbac`,
//! `secret`, `network_policy` the other objects (`api_server` where the pods may reach the
//! API), `admission` an elastic job's admission policy; `header` the comment header; `mpijob`
//! the MPIJob input; `restricted` the check. This file only names the parts and what they
//! offer.

mod admission;
pub mod api_server;
mod error;
mod header;
mod inject;
mod layout;
mod meta;
pub(crate) mod mpijob;
pub(crate) mod network_policy;
mod options;
mod plan;
mod pod;
mod rbac;
mod render;
pub mod restricted;
mod secret;
#[cfg(test)]
mod tests;

pub(crate) use error::ManifestError;
pub use header::quote;
pub use inject::INJECT_IMAGE;
pub use layout::{AGENT_PORT, CONTAINER};
pub(crate) use meta::{JOB_LABEL, MAX_PODS_ANNOTATION, RENDERED_BY};
pub use options::{check, ManifestArgs};
pub use plan::{Launch, Part};
pub use render::{objects, prepare, render};
pub use secret::fresh_key;
