/* A PMIx tool that sends one allocation request to a DVM and prints the answer.
 *
 * usage: alloc_request DVM_URI DIRECTIVE [KEY=VALUE ...]
 *   DIRECTIVE: new, extend, release or cancel (PMIX_ALLOC_NEW, _EXTEND, _RELEASE,
 *   _REQ_CANCEL); KEY: nodes (PMIX_ALLOC_NUM_NODES), cpus (PMIX_ALLOC_NUM_CPUS), nodelist
 *   (PMIX_ALLOC_NODE_LIST), reqid (PMIX_ALLOC_REQ_ID), timeout (PMIX_TIMEOUT, seconds), time
 *   (PMIX_ALLOC_TIME); then=cancel: once the request is sent, wait for a line (or the end) on
 *   standard input, then cancel it from this same process (PMIX_ALLOC_REQ_CANCEL with its
 *   reqid) and print "CANCEL status=S" before its answer. Prints "ANSWER status=S" and one
 *   "INFO key=value" line per returned info, then "ELAPSED_MS=T" (request to answer). Exit 0 on
 *   success, 1 on an error answer, 2 on bad usage or when the tool cannot connect.
 */
#include <pmix_tool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The answer of a request sent with PMIx_Allocation_request_nb. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    pmix_status_t status;
    pmix_info_t *info;
    size_t ninfo;
} answer_t;

static void answered(pmix_status_t status, pmix_info_t *info, size_t ninfo, void *cbdata,
                     pmix_release_cbfunc_t release_fn, void *release_cbdata)
{
    answer_t *a = (answer_t *) cbdata;
    pthread_mutex_lock(&a->lock);
    a->status = status;
    if (0 < ninfo) {
        PMIX_INFO_CREATE(a->info, ninfo);
        a->ninfo = ninfo;
        for (size_t i = 0; i < ninfo; i++) {
            PMIX_INFO_XFER(&a->info[i], &info[i]);
        }
    }
    a->done = 1;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
    if (NULL != release_fn) {
        release_fn(release_cbdata);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DVM_URI DIRECTIVE [KEY=VALUE ...]\n", argv[0]);
        return 2;
    }
    pmix_alloc_directive_t dir;
    if (0 == strcmp(argv[2], "new")) dir = PMIX_ALLOC_NEW;
    else if (0 == strcmp(argv[2], "extend")) dir = PMIX_ALLOC_EXTEND;
    else if (0 == strcmp(argv[2], "release")) dir = PMIX_ALLOC_RELEASE;
    else if (0 == strcmp(argv[2], "cancel")) dir = PMIX_ALLOC_REQ_CANCEL;
    else {
        fprintf(stderr, "unknown directive %s\n", argv[2]);
        return 2;
    }
    pmix_info_t tinfo[1];
    PMIX_INFO_LOAD(&tinfo[0], PMIX_SERVER_URI, argv[1], PMIX_STRING);
    pmix_proc_t me;
    pmix_status_t rc = PMIx_tool_init(&me, tinfo, 1);
    if (PMIX_SUCCESS != rc) {
        printf("TOOL_INIT_FAILED %s\n", PMIx_Error_string(rc));
        return 2;
    }
    size_t n = 0;
    int then_cancel = 0;
    const char *reqid = NULL;
    for (int i = 3; i < argc; i++) {
        if (0 == strcmp(argv[i], "then=cancel")) then_cancel = 1;
        else n++;
    }
    pmix_info_t *req = NULL;
    if (n > 0) {
        PMIX_INFO_CREATE(req, n);
    }
    for (size_t i = 0, a = 3; i < n; a++) {
        if (0 == strcmp(argv[a], "then=cancel")) continue;
        char *kv = argv[a], *eq = strchr(kv, '=');
        if (NULL == eq) {
            fprintf(stderr, "not KEY=VALUE: %s\n", kv);
            return 2;
        }
        *eq = '\0';
        const char *v = eq + 1;
        uint64_t u = strtoull(v, NULL, 10);
        uint32_t t = (uint32_t) u;
        if (0 == strcmp(kv, "nodes")) PMIX_INFO_LOAD(&req[i], PMIX_ALLOC_NUM_NODES, &u, PMIX_UINT64);
        else if (0 == strcmp(kv, "cpus")) PMIX_INFO_LOAD(&req[i], PMIX_ALLOC_NUM_CPUS, &u, PMIX_UINT64);
        else if (0 == strcmp(kv, "nodelist")) PMIX_INFO_LOAD(&req[i], PMIX_ALLOC_NODE_LIST, v, PMIX_STRING);
        else if (0 == strcmp(kv, "reqid")) {
            PMIX_INFO_LOAD(&req[i], PMIX_ALLOC_REQ_ID, v, PMIX_STRING);
            reqid = v;
        }
        else if (0 == strcmp(kv, "timeout")) PMIX_INFO_LOAD(&req[i], PMIX_TIMEOUT, &t, PMIX_UINT32);
        else if (0 == strcmp(kv, "time")) PMIX_INFO_LOAD(&req[i], PMIX_ALLOC_TIME, v, PMIX_STRING);
        else {
            fprintf(stderr, "unknown key %s\n", kv);
            return 2;
        }
        i++;
    }
    if (then_cancel && NULL == reqid) {
        fprintf(stderr, "then=cancel needs reqid=ID\n");
        return 2;
    }
    pmix_info_t *results = NULL;
    size_t nresults = 0;
    double t0 = now_ms();
    if (!then_cancel) {
        rc = PMIx_Allocation_request(dir, req, n, &results, &nresults);
    } else {
        answer_t a = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, PMIX_SUCCESS, NULL, 0};
        rc = PMIx_Allocation_request_nb(dir, req, n, answered, &a);
        if (PMIX_SUCCESS == rc) {
            char line[64];
            (void) !fgets(line, sizeof line, stdin);
            pmix_info_t cancel;
            pmix_info_t *cres = NULL;
            size_t ncres = 0;
            PMIX_INFO_LOAD(&cancel, PMIX_ALLOC_REQ_ID, reqid, PMIX_STRING);
            pmix_status_t crc = PMIx_Allocation_request(PMIX_ALLOC_REQ_CANCEL, &cancel, 1, &cres, &ncres);
            printf("CANCEL status=%s\n", PMIx_Error_string(crc));
            fflush(stdout);
            PMIX_INFO_DESTRUCT(&cancel);
            if (NULL != cres) {
                PMIX_INFO_FREE(cres, ncres);
            }
            pthread_mutex_lock(&a.lock);
            while (!a.done) {
                pthread_cond_wait(&a.cond, &a.lock);
            }
            pthread_mutex_unlock(&a.lock);
            rc = a.status;
            results = a.info;
            nresults = a.ninfo;
        }
    }
    double t1 = now_ms();
    printf("ANSWER status=%s\n", PMIx_Error_string(rc));
    for (size_t i = 0; i < nresults; i++) {
        char *s = (PMIX_STRING == results[i].value.type) ? strdup(results[i].value.data.string)
                                                         : PMIx_Value_string(&results[i].value);
        printf("INFO %s=%s\n", results[i].key, s ? s : "?");
        free(s);
    }
    printf("ELAPSED_MS=%.1f\n", t1 - t0);
    fflush(stdout);
    if (NULL != results) {
        PMIX_INFO_FREE(results, nresults);
    }
    if (NULL != req) {
        PMIX_INFO_FREE(req, n);
    }
    PMIx_tool_finalize();
    return PMIX_SUCCESS == rc ? 0 : 1;
}
