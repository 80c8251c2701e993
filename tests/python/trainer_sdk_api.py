"""The Kubeflow SDK's calls against an API server alone (no controller, no kubelet).

    python trainer_sdk_api.py KUBECONFIG NAMESPACE RUNTIME

This script plays Trainer's controller and the kubelet with the official Kubernetes client: it
makes the pods a TrainJob's JobSet would have (labels `jobset.sigs.k8s.io/jobset-name`,
`.../replicatedjob-name`, `batch.kubernetes.io/job-completion-index`, container `node`), their
phases, an event, and the TrainJob's `Complete` condition, between the SDK's calls:
`list_runtimes`, `get_runtime`, `train` (a `CustomTrainer` function on 2 nodes), `list_jobs`,
`get_job`, `get_job_events`, `wait_for_job_status`, `get_job_logs` (whole and followed) and
`delete_job`. A pod of another replicated job and one of another JobSet are made too: the SDK's
set-based selector must leave them out. Prints one JSON object per line, what each call gave.
"""

import datetime
import json
import sys

from kubernetes import client as k8s
from kubernetes import config

from kubeflow.trainer import CustomTrainer, KubernetesBackendConfig, TrainerClient


def train_fn():
    print("hello")


def out(what, value):
    print(json.dumps({"call": what, "value": value}, default=str), flush=True)


def steps(job):
    return sorted((s.name, s.pod_name, s.status) for s in job.steps)


def main():
    kubeconfig, ns, runtime_name = sys.argv[1:4]
    c = TrainerClient(
        backend_config=KubernetesBackendConfig(config_file=kubeconfig, namespace=ns)
    )
    config.load_kube_config(config_file=kubeconfig)
    core = k8s.CoreV1Api()
    custom = k8s.CustomObjectsApi()

    out("list_runtimes", [(r.name, r.trainer.framework, r.trainer.num_nodes) for r in c.list_runtimes()])
    runtime = c.get_runtime(runtime_name)
    out("get_runtime", [runtime.name, runtime.trainer.command[0], runtime.trainer.image])
    name = c.train(runtime=runtime, trainer=CustomTrainer(func=train_fn, num_nodes=2))
    tj = custom.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", name)
    out("train", {"name": name, "spec": tj["spec"]})
    out("list_jobs", [j.name for j in c.list_jobs()])
    job = c.get_job(name)
    out("get_job created", {"status": job.status, "steps": steps(job)})

    def pod(pod_name, jobset, rjob, index):
        labels = {
            "jobset.sigs.k8s.io/jobset-name": jobset,
            "jobset.sigs.k8s.io/replicatedjob-name": rjob,
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        body = {
            "metadata": {"name": pod_name, "labels": labels},
            "spec": {"containers": [{"name": "node", "image": "none", "command": ["true"]}]},
        }
        core.create_namespaced_pod(ns, body)
        core.patch_namespaced_pod_status(pod_name, ns, {"status": {"phase": "Running"}})

    pod(f"{name}-launcher-0-0", name, "launcher", 0)
    pod(f"{name}-node-0-0", name, "node", 0)
    pod(f"{name}-node-0-1", name, "node", 1)
    pod(f"{name}-other-0-0", name, "other", 0)
    pod("stranger-node-0-0", "stranger", "node", 0)
    job = c.get_job(name)
    out("get_job running", {"status": job.status, "steps": steps(job)})

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for obj, reason in [(f"{name}-launcher-0-0", "Started"), ("stranger-node-0-0", "Elsewhere")]:
        core.create_namespaced_event(
            ns,
            {
                "metadata": {"generateName": "ev-"},
                "involvedObject": {"kind": "Pod", "name": obj, "namespace": ns},
                "reason": reason,
                "message": f"{reason} {obj}",
                "type": "Normal",
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
                "source": {"component": "kubelet"},
            },
        )
    out("get_job_events", [(e.involved_object_name, e.reason) for e in c.get_job_events(name)])

    custom.patch_namespaced_custom_object_status(
        "trainer.kubeflow.org",
        "v1alpha1",
        ns,
        "trainjobs",
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Complete",
                        "status": "True",
                        "reason": "JobSetCompleted",
                        "message": "jobset completed",
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
    )
    for p in [f"{name}-launcher-0-0", f"{name}-node-0-0", f"{name}-node-0-1"]:
        core.patch_namespaced_pod_status(p, ns, {"status": {"phase": "Succeeded"}})
    job = c.wait_for_job_status(name, {"Complete"}, timeout=30, polling_interval=1)
    out("wait_for_job_status", {"status": job.status, "steps": steps(job)})
    out("get_job_logs", list(c.get_job_logs(name)))
    out("get_job_logs follow", list(c.get_job_logs(name, follow=True)))

    c.delete_job(name)
    try:
        c.get_job(name)
        out("get_job deleted", "found")
    except RuntimeError as e:
        out("get_job deleted", str(e))
    out("list_jobs deleted", [j.name for j in c.list_jobs()])


if __name__ == "__main__":
    main()
