/*
 * A program that hears of its preemption through PMIx and checkpoints.
 *
 *   preempt_pmix DIR [STEPS]
 *
 * Counts steps (10 a second) up to STEPS (default 600), resuming from DIR/ckpt.RANK if it
 * exists ("resume rank R from step N"). It registers a handler for PMIX_JCTRL_PREEMPT_ALERT
 * (include/prrte_k8s_preempt.h); when told, it writes its step to DIR/ckpt.RANK, then
 * DIR/notice.RANK ("rank host seconds pod epoch_ms step"), prints the same and exits 0.
 * DIR/ready.RANK says the handler is registered. Files are written whole (temporary + rename).
 */
#include <pmix.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prrte_k8s_preempt.h"

static volatile int told = 0;
static volatile uint32_t seconds_left = 0;
static volatile long long told_ms = 0;
static char pod[256] = "?";

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_preempt(size_t id, pmix_status_t status, const pmix_proc_t *source,
                       pmix_info_t info[], size_t ninfo, pmix_info_t results[], size_t nresults,
                       pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata)
{
    (void) id; (void) status; (void) source; (void) results; (void) nresults;
    for (size_t n = 0; n < ninfo; n++) {
        if (PMIX_CHECK_KEY(&info[n], PRRTE_K8S_PREEMPT_SECONDS)) {
            seconds_left = info[n].value.data.uint32;
        } else if (PMIX_CHECK_KEY(&info[n], PRRTE_K8S_PREEMPT_POD)
                   && NULL != info[n].value.data.string) {
            snprintf(pod, sizeof(pod), "%s", info[n].value.data.string);
        }
    }
    told_ms = now_ms();
    told = 1;
    if (NULL != cbfunc) {
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
    }
}

static void write_whole(const char *dir, const char *name, pmix_rank_t rank, const char *text)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s.%u", dir, name, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (NULL == f || fputs(text, f) < 0 || 0 != fclose(f) || 0 != rename(tmp, path)) {
        perror(path);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    pmix_proc_t me;
    pmix_status_t code = PMIX_JCTRL_PREEMPT_ALERT;
    char host[256], text[1024], path[4096];
    long steps = argc > 2 ? atol(argv[2]) : 600, step = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [STEPS]\n", argv[0]);
        return 2;
    }
    if (PMIX_SUCCESS != PMIx_Init(&me, NULL, 0)) {
        fprintf(stderr, "PMIx_Init failed\n");
        return 2;
    }
    gethostname(host, sizeof(host));
    snprintf(path, sizeof(path), "%s/ckpt.%u", argv[1], me.rank);
    FILE *f = fopen(path, "r");
    if (NULL != f) {
        if (1 == fscanf(f, "%ld", &step)) {
            printf("resume rank %u from step %ld\n", me.rank, step);
        }
        fclose(f);
    }
    /* A blocking registration (no callback): the handler is in place when it returns. */
    pmix_status_t rc = PMIx_Register_event_handler(&code, 1, NULL, 0, on_preempt, NULL, NULL);
    if (rc < 0) {
        fprintf(stderr, "rank %u: cannot register for PMIX_JCTRL_PREEMPT_ALERT: %s\n", me.rank,
                PMIx_Error_string(rc));
        return 2;
    }
    write_whole(argv[1], "ready", me.rank, "ready\n");
    for (; step < steps && !told; step++) {
        usleep(100000);
    }
    if (told) {
        snprintf(text, sizeof(text), "%ld\n", step);
        write_whole(argv[1], "ckpt", me.rank, text);
        snprintf(text, sizeof(text), "%u %s %u %s %lld %ld\n", me.rank, host, seconds_left, pod,
                 told_ms, step);
        write_whole(argv[1], "notice", me.rank, text);
        printf("preempt rank %u host %s seconds %u pod %s step %ld: checkpoint written\n", me.rank,
               host, seconds_left, pod, step);
    } else {
        printf("done rank %u at step %ld\n", me.rank, step);
    }
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return 0;
}
