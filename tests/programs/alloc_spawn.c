/* An MPI job that asks the resource manager for nodes, runs children there, and gives the nodes
 * back, all through PMIx allocation requests from rank 0.
 *
 * usage: alloc_spawn N
 *   1. PMIx_Allocation_request(PMIX_ALLOC_EXTEND, PMIX_ALLOC_NUM_NODES = N): prints
 *      "EXTEND status=S nodes=LIST id=ID";
 *   2. MPI_Comm_spawn of N children with the info key "host" = LIST: each child sends rank + 1
 *      if it runs on one of those hosts, else 1000; prints "SPAWN children=N sum=S OK" (or
 *      WRONG); the children disconnect and end;
 *   3. PMIx_Allocation_request(PMIX_ALLOC_RELEASE, PMIX_ALLOC_NODE_LIST = LIST), retried while
 *      the answer is PMIX_ERR_RESOURCE_BUSY (the children's end may not be recorded yet): prints
 *      "RELEASE status=S nodes=LIST".
 * Exits 1 if any step fails. */
#include <mpi.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *answer(pmix_info_t *r, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        if (0 == strcmp(r[i].key, key) && PMIX_STRING == r[i].value.type) {
            return r[i].value.data.string;
        }
    }
    return "";
}

static int on_listed_host(const char *list)
{
    char host[256] = "", buf[4096];
    gethostname(host, sizeof(host) - 1);
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (0 == strcmp(t, host)) return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Comm parent, inter;
    int rank, ok = 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (parent != MPI_COMM_NULL) {
        long mine = on_listed_host(argc > 1 ? argv[1] : "") ? rank + 1 : 1000, none = 0;
        MPI_Reduce(&mine, &none, 1, MPI_LONG, MPI_SUM, 0, parent);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s N\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) {
        uint64_t n = strtoull(argv[1], NULL, 10);
        pmix_info_t req[1], *res = NULL;
        size_t nres = 0;
        char nodes[4096] = "";
        PMIX_INFO_LOAD(&req[0], PMIX_ALLOC_NUM_NODES, &n, PMIX_UINT64);
        pmix_status_t rc = PMIx_Allocation_request(PMIX_ALLOC_EXTEND, req, 1, &res, &nres);
        snprintf(nodes, sizeof(nodes), "%s", answer(res, nres, PMIX_ALLOC_NODE_LIST));
        printf("EXTEND status=%s nodes=%s id=%s\n", PMIx_Error_string(rc), nodes,
               answer(res, nres, PMIX_ALLOC_ID));
        if (PMIX_SUCCESS != rc) {
            printf("EXTEND reason=%s\n", answer(res, nres, PMIX_EVENT_TEXT_MESSAGE));
        }
        fflush(stdout);
        if (NULL != res) PMIX_INFO_FREE(res, nres);
        if (PMIX_SUCCESS != rc || '\0' == nodes[0]) {
            ok = 0;
        } else {
            MPI_Info info;
            char *child_argv[] = {nodes, NULL};
            int errs[64];
            long none = 0, sum = 0, want = (long) n * ((long) n + 1) / 2;
            MPI_Info_create(&info);
            MPI_Info_set(info, "host", nodes);
            MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
            int src = MPI_Comm_spawn(argv[0], child_argv, (int) n, info, 0, MPI_COMM_SELF, &inter, errs);
            MPI_Info_free(&info);
            if (MPI_SUCCESS != src) {
                printf("SPAWN failed (%d)\n", src);
                ok = 0;
            } else {
                MPI_Reduce(&none, &sum, 1, MPI_LONG, MPI_SUM, MPI_ROOT, inter);
                MPI_Comm_disconnect(&inter);
                printf("SPAWN children=%d sum=%ld %s\n", (int) n, sum, sum == want ? "OK" : "WRONG");
                ok = sum == want;
            }
            fflush(stdout);
            PMIX_INFO_LOAD(&req[0], PMIX_ALLOC_NODE_LIST, nodes, PMIX_STRING);
            for (int tries = 0; tries < 50; tries++) {
                res = NULL;
                nres = 0;
                rc = PMIx_Allocation_request(PMIX_ALLOC_RELEASE, req, 1, &res, &nres);
                if (PMIX_ERR_RESOURCE_BUSY != rc) break;
                if (NULL != res) PMIX_INFO_FREE(res, nres);
                usleep(200000);
            }
            printf("RELEASE status=%s nodes=%s\n", PMIx_Error_string(rc),
                   answer(res, nres, PMIX_ALLOC_NODE_LIST));
            if (PMIX_SUCCESS != rc) {
                printf("RELEASE reason=%s\n", answer(res, nres, PMIX_EVENT_TEXT_MESSAGE));
                ok = 0;
            }
            fflush(stdout);
            if (NULL != res) PMIX_INFO_FREE(res, nres);
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return ok ? 0 : 1;
}
