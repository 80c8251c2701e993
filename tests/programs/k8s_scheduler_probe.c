/* A minimal PMIx scheduler with an `allocate` upcall that reports on stdout every
 * allocation request it receives and answers PMIX_SUCCESS with PMIX_ALLOC_ID=k8s-probe-1 and
 * PMIX_ALLOC_NODE_LIST=probe-node-a,probe-node-b.
 *
 * usage: k8s_scheduler_probe attach PRTE_PID SECONDS
 *          attaches to a running prte as a tool declaring PMIX_SERVER_SCHEDULER and
 *          installs the module with PMIx_tool_set_server_module (the way prte expects a
 *          scheduler to attach to it)
 *        k8s_scheduler_probe serve SECONDS
 *          is itself a PMIx server (PMIx_server_init with PMIX_SERVER_SCHEDULER and tool
 *          support) that tools connect to directly, e.g. by its pid
 *   prints "READY <nspace> <rank>" once set up, "ALLOCATE from=P directive=D ndata=N" and one
 *   "INFO key=.. value=.." line per directive for each upcall, and "TIMEOUT" when SECONDS
 *   pass without one (exit status 3).
 */
#include <pmix_server.h>
#include <pmix_tool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static volatile int upcalls = 0;

static void print_info(const char *tag, const pmix_info_t *info, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *v = PMIx_Value_string(&info[i].value);
        printf("%s key=%s value=%s\n", tag, info[i].key, v ? v : "?");
        free(v);
    }
}

/* the answer to every request: an allocation id and the nodes granted */
#define NREPLY 2
static pmix_info_t *reply;

static void make_reply(void)
{
    PMIX_INFO_CREATE(reply, NREPLY);
    PMIX_INFO_LOAD(&reply[0], PMIX_ALLOC_ID, "k8s-probe-1", PMIX_STRING);
    PMIX_INFO_LOAD(&reply[1], PMIX_ALLOC_NODE_LIST, "probe-node-a,probe-node-b", PMIX_STRING);
}

static void release(void *cbdata)
{
    (void) cbdata;
}

static pmix_status_t allocate(const pmix_proc_t *client, pmix_alloc_directive_t directive,
                              const pmix_info_t data[], size_t ndata,
                              pmix_info_cbfunc_t cbfunc, void *cbdata)
{
    printf("ALLOCATE from=%s:%u directive=%s ndata=%zu\n", client->nspace, client->rank,
           PMIx_Alloc_directive_string(directive), ndata);
    print_info("INFO", data, ndata);
    fflush(stdout);
    upcalls++;
    if (NULL != cbfunc) {
        cbfunc(PMIX_SUCCESS, reply, NREPLY, cbdata, release, NULL);
    }
    return PMIX_SUCCESS;
}

/* Prints READY, waits up to SECS for an upcall, then finalizes with FIN. */
static int wait_for_upcall(int secs, pmix_status_t (*fin)(void))
{
    printf("READY pid=%d\n", (int) getpid());
    fflush(stdout);
    time_t end = time(NULL) + secs;
    while (0 == upcalls && time(NULL) < end) {
        usleep(50000);
    }
    if (0 == upcalls) {
        printf("TIMEOUT\n");
    }
    fflush(stdout);
    /* a moment for the answer to be sent before finalizing */
    usleep(500000);
    fin();
    return 0 == upcalls ? 3 : 0;
}

static void tool_connected(pmix_info_t *info, size_t ninfo, pmix_tool_connection_cbfunc_t cbfunc,
                           void *cbdata)
{
    static pmix_rank_t next = 0;
    pmix_proc_t tool;
    (void) info;
    (void) ninfo;
    PMIX_LOAD_PROCID(&tool, "k8s-scheduler-tool", next++);
    printf("TOOL_CONNECTED %s:%u\n", tool.nspace, tool.rank);
    fflush(stdout);
    cbfunc(PMIX_SUCCESS, &tool, cbdata);
}

static int serve(int secs)
{
    pmix_server_module_t module;
    memset(&module, 0, sizeof(module));
    module.allocate = allocate;
    module.tool_connected = tool_connected;
    pmix_info_t info[3];
    bool t = true;
    PMIX_INFO_LOAD(&info[0], PMIX_SERVER_SCHEDULER, &t, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_SERVER_TOOL_SUPPORT, &t, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[2], PMIX_SERVER_NSPACE, "k8s-scheduler", PMIX_STRING);
    pmix_status_t rc = PMIx_server_init(&module, info, 3);
    if (PMIX_SUCCESS != rc) {
        printf("SERVER_INIT_FAILED %s\n", PMIx_Error_string(rc));
        return 1;
    }
    return wait_for_upcall(secs, PMIx_server_finalize);
}

int main(int argc, char **argv)
{
    if (argc == 3 && 0 == strcmp(argv[1], "serve")) {
        make_reply();
        return serve(atoi(argv[2]));
    }
    if (argc != 4 || 0 != strcmp(argv[1], "attach")) {
        fprintf(stderr, "usage: %s attach PRTE_PID SECONDS | serve SECONDS\n", argv[0]);
        return 2;
    }
    pid_t pid = (pid_t) atoi(argv[2]);
    int secs = atoi(argv[3]);
    pmix_info_t info[4];
    bool t = true;
    pmix_rank_t rank = 0;
    PMIX_INFO_LOAD(&info[0], PMIX_SERVER_SCHEDULER, &t, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_SERVER_PIDINFO, &pid, PMIX_PID);
    PMIX_INFO_LOAD(&info[2], PMIX_TOOL_NSPACE, "k8s-scheduler", PMIX_STRING);
    PMIX_INFO_LOAD(&info[3], PMIX_TOOL_RANK, &rank, PMIX_PROC_RANK);
    pmix_proc_t me;
    pmix_status_t rc = PMIx_tool_init(&me, info, 4);
    if (PMIX_SUCCESS != rc) {
        printf("TOOL_INIT_FAILED %s\n", PMIx_Error_string(rc));
        return 1;
    }
    pmix_server_module_t module;
    memset(&module, 0, sizeof(module));
    module.allocate = allocate;
    rc = PMIx_tool_set_server_module(&module);
    if (PMIX_SUCCESS != rc) {
        printf("SET_SERVER_MODULE_FAILED %s\n", PMIx_Error_string(rc));
        PMIx_tool_finalize();
        return 1;
    }
    make_reply();
    printf("ATTACHED %s:%u\n", me.nspace, me.rank);
    return wait_for_upcall(secs, PMIx_tool_finalize);
}
