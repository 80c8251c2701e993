"""Each rank contributes rank+1; every rank checks the sum n(n+1)/2 and reports its host."""
import socket
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1, op=MPI.SUM)
expected = comm.size * (comm.size + 1) // 2
print(f"mpi4py allreduce rank={comm.rank} size={comm.size} host={socket.gethostname()} sum={total} "
      f"{'OK' if total == expected else 'WRONG'}", flush=True)
sys.exit(0 if total == expected else 1)
