"""The Kubeflow SDK's TrainJob workflow against a cluster, as a user runs it.

    python trainer_sdk.py KUBECONFIG NAMESPACE RUNTIME IMAGE

With the `kubeflow` package (`TrainerClient` on its Kubernetes backend) and nothing else:
`list_runtimes` and `get_runtime` (RUNTIME must be there), then two TrainJobs of 2 nodes on
RUNTIME, one a `CustomTrainer` function, one a `CustomTrainerContainer` of IMAGE with a command,
each through `train`, `get_job`, `list_jobs`, `wait_for_job_status({"Complete"})`,
`get_job_logs` (the launcher's, `node-0`, and a follow of it), `get_job_events` and
`delete_job`. Prints one JSON object per line for the caller to check: {"runtimes": [...]},
then per job {"job": NAME, "kind": ..., "steps": [...], "status": ..., "logs": [...],
"followed": [...], "events": [...]}, and {"deleted": NAME} once get_job no longer finds it.
Any SDK call that raises ends the script with a traceback and a non-zero exit.
"""

import json
import sys
import time

from kubeflow.trainer import (
    CustomTrainer,
    CustomTrainerContainer,
    KubernetesBackendConfig,
    TrainerClient,
)
from kubeflow.trainer.options.kubernetes import TrainerCommand


def print_rank():
    import os
    import socket

    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK"))
    size = os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE"))
    print(f"function rank {rank} of {size} on {socket.gethostname()}", flush=True)


# What the container command prints on each rank (Open MPI's or a PMI launcher's rank).
CONTAINER_COMMAND = [
    "mpirun",
    "--hostfile",
    "/etc/mpi/hostfile",
    "bash",
    "-c",
    'echo "container rank ${OMPI_COMM_WORLD_RANK:-$PMI_RANK} of ${OMPI_COMM_WORLD_SIZE:-$PMI_SIZE} on $HOSTNAME"',
]


def out(obj):
    print(json.dumps(obj, default=str), flush=True)


def run_job(client, runtime, kind, trainer, options=None):
    name = client.train(runtime=runtime, trainer=trainer, options=options)
    listed = [j.name for j in client.list_jobs(runtime=runtime)]
    assert name in listed, f"list_jobs does not show {name}: {listed}"
    job = client.wait_for_job_status(name, {"Complete"}, timeout=300, polling_interval=1)
    job = client.get_job(name)
    logs = list(client.get_job_logs(name))
    followed = list(client.get_job_logs(name, follow=True))
    events = [
        {"kind": e.involved_object_kind, "name": e.involved_object_name, "reason": e.reason}
        for e in client.get_job_events(name)
    ]
    out(
        {
            "job": name,
            "kind": kind,
            "status": job.status,
            "num_nodes": job.num_nodes,
            "steps": [
                {"name": s.name, "pod": s.pod_name, "status": s.status} for s in job.steps
            ],
            "logs": logs,
            "followed": followed,
            "events": events,
        }
    )
    client.delete_job(name)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.get_job(name)
        except RuntimeError:
            break
        assert time.monotonic() < deadline, f"TrainJob {name} still there after delete_job"
        time.sleep(0.5)
    out({"deleted": name})


def main():
    kubeconfig, namespace, runtime_name, image = sys.argv[1:5]
    client = TrainerClient(
        backend_config=KubernetesBackendConfig(config_file=kubeconfig, namespace=namespace)
    )
    runtimes = client.list_runtimes()
    out({"runtimes": [{"name": r.name, "framework": r.trainer.framework} for r in runtimes]})
    runtime = client.get_runtime(runtime_name)
    assert runtime.name == runtime_name, runtime
    run_job(client, runtime, "function", CustomTrainer(func=print_rank, num_nodes=2))
    run_job(
        client,
        runtime,
        "container",
        CustomTrainerContainer(image=image, num_nodes=2),
        options=[TrainerCommand(command=CONTAINER_COMMAND)],
    )


if __name__ == "__main__":
    main()
