/* A PMIx client (started by prun on a prted's node) whose allocation request its prted relays
 * to the DVM master; it counts the answers it is given.
 *
 * usage: alloc_relayed DIR
 *   appends to DIR/client.log: "READY" once initialised; after DIR/go exists it asks for one
 *   more node (PMIx_Allocation_request_nb, PMIX_ALLOC_EXTEND) and writes "REQUESTED"; on the
 *   first answer "ANSWER status=S" (S the number); once DIR/done exists "CALLBACKS N" (the
 *   answers given in all), then it finalizes. Its pid is in DIR/client.pid. Each wait gives up
 *   after 120 s ("TIMEOUT what"); it ends at once (status 5) if its prted does.
 */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *dir;
static pid_t parent;
static volatile int callbacks = 0;
static volatile int first_status = 0;

static void say(const char *line)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/client.log", dir);
    FILE *f = fopen(path, "a");
    if (NULL == f) {
        exit(4);
    }
    fprintf(f, "%s\n", line);
    fclose(f);
}

static void say_n(const char *what, int n)
{
    char line[128];
    snprintf(line, sizeof(line), "%s%d", what, n);
    say(line);
}

static int await_file(const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    time_t end = time(NULL) + 120;
    while (0 != access(path, F_OK)) {
        if (time(NULL) > end) {
            return 0;
        }
        if (getppid() != parent) {
            exit(5);
        }
        usleep(20000);
    }
    return 1;
}

static void cbfunc(pmix_status_t status, pmix_info_t *info, size_t ninfo, void *cbdata,
                   pmix_release_cbfunc_t release_fn, void *release_cbdata)
{
    (void) info;
    (void) ninfo;
    (void) cbdata;
    if (0 == callbacks) {
        first_status = status;
    }
    callbacks++;
    if (NULL != release_fn) {
        release_fn(release_cbdata);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    parent = getppid();
    char pidfile[4096];
    snprintf(pidfile, sizeof(pidfile), "%s/client.pid", dir);
    FILE *f = fopen(pidfile, "w");
    if (NULL == f) {
        return 4;
    }
    fprintf(f, "%d\n", (int) getpid());
    fclose(f);
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (PMIX_SUCCESS != rc) {
        say_n("INIT_FAILED ", rc);
        return 1;
    }
    say("READY");
    if (!await_file("go")) {
        say("TIMEOUT go");
        return 3;
    }
    pmix_info_t req;
    uint64_t nodes = 1;
    PMIX_INFO_LOAD(&req, PMIX_ALLOC_NUM_NODES, &nodes, PMIX_UINT64);
    rc = PMIx_Allocation_request_nb(PMIX_ALLOC_EXTEND, &req, 1, cbfunc, NULL);
    if (PMIX_SUCCESS != rc) {
        say_n("REQUEST_FAILED ", rc);
        return 1;
    }
    say("REQUESTED");
    time_t end = time(NULL) + 120;
    while (0 == callbacks && time(NULL) <= end) {
        if (getppid() != parent) {
            exit(5);
        }
        usleep(20000);
    }
    if (0 == callbacks) {
        say("TIMEOUT answer");
        return 3;
    }
    say_n("ANSWER status=", first_status);
    if (!await_file("done")) {
        say("TIMEOUT done");
        return 3;
    }
    say_n("CALLBACKS ", callbacks);
    PMIx_Finalize(NULL, 0);
    return 0;
}
