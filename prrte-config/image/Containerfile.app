# An application image on prrte-k8s (the pattern for your own): compile with the builder image's
# mpicc, copy the program into the runtime image. The entrypoint stays the prrte-k8s agent.
#
#   buildah bud --isolation chroot -f prrte-config/image/Containerfile.app -t my-mpi-app DIR
# where DIR holds allreduce.c and allreduce.py (tests/programs/). With docker or podman:
#   docker build -f prrte-config/image/Containerfile.app -t my-mpi-app tests/programs
ARG BUILDER=localhost/prrte-k8s-builder:latest
ARG RUNTIME=localhost/prrte-k8s:latest

FROM ${BUILDER} AS build
COPY allreduce.c /home/mpi/src/
RUN mpicc -O2 -o /home/mpi/allreduce /home/mpi/src/allreduce.c

FROM ${RUNTIME}
COPY --from=build /home/mpi/allreduce /home/mpi/allreduce
COPY allreduce.py /home/mpi/allreduce.py
