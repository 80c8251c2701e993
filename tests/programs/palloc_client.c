/* Asks a running prte for two more nodes through PMIx_Allocation_request_nb.
 *
 * usage: palloc_client PRTE_PID SECONDS
 *   prints "REQUESTED" once the request is sent, then "ANSWER status=S ninfo=N" and one
 *   "INFO key=value" line per returned info, or "NO_ANSWER" if none came within SECONDS.
 */
#include <pmix_tool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static volatile int answered = 0;

static void cbfunc(pmix_status_t status, pmix_info_t *info, size_t ninfo, void *cbdata,
                   pmix_release_cbfunc_t release_fn, void *release_cbdata)
{
    (void) cbdata;
    printf("ANSWER status=%s ninfo=%zu\n", PMIx_Error_string(status), ninfo);
    for (size_t i = 0; i < ninfo; i++) {
        char *v = PMIx_Value_string(&info[i].value);
        printf("INFO key=%s value=%s\n", info[i].key, v ? v : "?");
        free(v);
    }
    fflush(stdout);
    if (NULL != release_fn) {
        release_fn(release_cbdata);
    }
    answered = 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PRTE_PID SECONDS\n", argv[0]);
        return 2;
    }
    pid_t pid = (pid_t) atoi(argv[1]);
    int secs = atoi(argv[2]);
    pmix_info_t tinfo[1];
    PMIX_INFO_LOAD(&tinfo[0], PMIX_SERVER_PIDINFO, &pid, PMIX_PID);
    pmix_proc_t me;
    pmix_status_t rc = PMIx_tool_init(&me, tinfo, 1);
    if (PMIX_SUCCESS != rc) {
        printf("TOOL_INIT_FAILED %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_info_t *req;
    uint64_t nodes = 2;
    PMIX_INFO_CREATE(req, 2);
    PMIX_INFO_LOAD(&req[0], PMIX_ALLOC_NUM_NODES, &nodes, PMIX_UINT64);
    PMIX_INFO_LOAD(&req[1], PMIX_ALLOC_REQ_ID, "probe-req", PMIX_STRING);
    rc = PMIx_Allocation_request_nb(PMIX_ALLOC_EXTEND, req, 2, cbfunc, NULL);
    if (PMIX_SUCCESS != rc) {
        printf("REQUEST_FAILED %s\n", PMIx_Error_string(rc));
        PMIx_tool_finalize();
        return 1;
    }
    printf("REQUESTED\n");
    fflush(stdout);
    time_t end = time(NULL) + secs;
    while (!answered && time(NULL) < end) {
        usleep(50000);
    }
    if (!answered) {
        printf("NO_ANSWER\n");
        fflush(stdout);
        /* PMIx_tool_finalize waits on the server; do not risk it after no answer */
        return 3;
    }
    PMIx_tool_finalize();
    return 0;
}
