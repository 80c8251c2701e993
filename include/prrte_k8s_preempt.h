/*
 * prrte-k8s: the preemption notice, as an application sees it.
 *
 * When a pod of a running job is told to end (eviction, preemption, node drain, Job or pod
 * deletion: its containers get SIGTERM and terminationGracePeriodSeconds), prte sends every
 * process of the DVM's jobs, in every pod, the PMIx event
 *
 *     PMIX_JCTRL_PREEMPT_ALERT  (pmix_common.h, -108 in PMIx 5)
 *
 * within a second, range PMIX_RANGE_SESSION, only to handlers registered for that code (it
 * carries PMIX_EVENT_NON_DEFAULT, so default handlers, such as an MPI library's, never see it).
 * Its info array holds:
 *
 *     PRRTE_K8S_PREEMPT_SECONDS  (uint32)  seconds the ranks have left: the processes keep
 *                                          running that long (or until they exit), then they
 *                                          are stopped (SIGTERM, SIGKILL a few seconds later)
 *     PRRTE_K8S_PREEMPT_POD      (string)  the pod that is told to end
 *     PMIX_EVENT_TEXT_MESSAGE    (string)  the same in words
 *
 * The job's ranks are told once per DVM, for the first pod told to end.
 * Register with PMIx_Register_event_handler(&code, 1, NULL, 0, handler, NULL, NULL) after
 * PMIx_Init; see tests/programs/preempt_pmix.c.
 */
#ifndef PRRTE_K8S_PREEMPT_H
#define PRRTE_K8S_PREEMPT_H

#define PRRTE_K8S_PREEMPT_SECONDS "prrte-k8s.preempt.seconds"
#define PRRTE_K8S_PREEMPT_POD "prrte-k8s.preempt.pod"

#endif
