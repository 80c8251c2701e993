"""An mpi4py program that hears of its preemption by a signal and checkpoints.

    python3 preempt_signal.py DIR [STEPS] [SIGNAL]

Counts steps (10 a second) up to STEPS (default 600), resuming from DIR/ckpt.RANK if it exists
("resume rank R from step N"). SIGNAL (default SIGUSR1) is the site's plm_k8s_preempt_signal;
when it comes, the program writes its step to DIR/ckpt.RANK, then DIR/notice.RANK
("rank host seconds - epoch_ms step"; the seconds it has are PRRTE_K8S_PREEMPT_SECONDS, set by
the agents' --preempt-grace), prints the same and exits 0. DIR/ready.RANK says the handler is
installed. Files are written whole (temporary + rename).
"""
import os
import signal
import socket
import sys
import time

from mpi4py import MPI

told_ms = None


def on_signal(_signum, _frame):
    global told_ms
    if told_ms is None:
        told_ms = int(time.time() * 1000)


def write_whole(directory, name, rank, text):
    path = os.path.join(directory, f"{name}.{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main():
    directory = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    signum = getattr(signal, sys.argv[3] if len(sys.argv) > 3 else "SIGUSR1")
    rank = MPI.COMM_WORLD.rank
    step = 0
    try:
        with open(os.path.join(directory, f"ckpt.{rank}")) as f:
            step = int(f.read())
        print(f"resume rank {rank} from step {step}", flush=True)
    except FileNotFoundError:
        pass
    signal.signal(signum, on_signal)
    write_whole(directory, "ready", rank, "ready\n")
    while step < steps and told_ms is None:
        time.sleep(0.1)
        step += 1
    if told_ms is None:
        print(f"done rank {rank} at step {step}", flush=True)
        return
    seconds = os.environ.get("PRRTE_K8S_PREEMPT_SECONDS", "?")
    write_whole(directory, "ckpt", rank, f"{step}\n")
    line = f"{rank} {socket.gethostname()} {seconds} - {told_ms} {step}"
    write_whole(directory, "notice", rank, line + "\n")
    print(f"preempt rank {rank} host {socket.gethostname()} seconds {seconds} step {step}: "
          "checkpoint written", flush=True)


main()
