# prrte-k8s builder image: the runtime image plus a C/C++ toolchain, Open MPI's headers and
# PMIx's, so `mpicc`/`mpicxx` compile applications against exactly the libmpi the runtime image
# ships and `pmixcc` builds PMIx clients and tools (allocation requests, workflow submitters)
# against its libpmix. Use it as the first stage of an application image (Containerfile.app).
# Runs as uid 1000 too.
#
# Build with `make image`; the build context is the staging directory prrte-config/image/build.sh
# assembles (see Containerfile): here only ompi-include/ (Open MPI's installed headers) and
# pmix-include/ (PMIx's: pmix*.h and pmix/) are used.
ARG RUNTIME=localhost/prrte-k8s:latest
FROM ${RUNTIME}

ARG OMPI_PREFIX
ARG PRRTE_PREFIX
USER root
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      gcc g++ libc6-dev make \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
COPY ompi-include/ ${OMPI_PREFIX}/include/
COPY pmix-include/ ${PRRTE_PREFIX}/include/

USER 1000:1000
WORKDIR /home/mpi
ENTRYPOINT []
CMD ["/bin/bash"]
