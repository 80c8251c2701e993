/*
 * prrte_k8s.h - the C ABI between prrte-k8s's C shim and its Rust code.
 *
 * The shared library that PRRTE loads as prte_mca_ras_k8s.so / prte_mca_plm_k8s.so is written in
 * Rust. PRRTE offers some of its interface only as C macros and inline functions (object
 * construction, state activation, list and array access, libevent wrappers, output streams); the
 * shim (cabi/shim/shim.c) implements exactly those as the plain functions declared here. The Rust
 * declarations of these functions are generated from this header by bindgen at build time
 * (cabi/build.rs), so both sides always agree on the signatures. PRRTE objects cross this
 * boundary as opaque pointers, so this header does not depend on PRRTE's headers.
 *
 * The Rust side exports the two component structs PRRTE looks up by name
 * (prte_mca_ras_k8s_component, prte_mca_plm_k8s_component; their type is PRRTE's
 * pmix_mca_base_component_t) and the two module accessors at the end of this file. Every
 * function the Rust side exports runs behind a panic boundary: a panic is reported on PRRTE's
 * error output and turned into the function's error value (PRTE_ERROR, or NULL here) instead of
 * unwinding into C.
 */
#ifndef PRRTE_K8S_H
#define PRRTE_K8S_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes the C compiler sees, for checking the Rust bindings' layout (prrte_k8s_shim_sizeof). */
typedef enum prrte_k8s_type_id {
    PRRTE_K8S_TYPE_COMPONENT = 0, /* pmix_mca_base_component_t */
    PRRTE_K8S_TYPE_NODE = 1,      /* prte_node_t */
    PRRTE_K8S_TYPE_JOB = 2,       /* prte_job_t */
    PRRTE_K8S_TYPE_PROC = 3,      /* prte_proc_t */
    PRRTE_K8S_TYPE_JOB_MAP = 4,   /* prte_job_map_t */
    PRRTE_K8S_TYPE_RAS_MODULE = 5,/* prte_ras_base_module_t */
    PRRTE_K8S_TYPE_PLM_MODULE = 6,/* prte_plm_base_module_t */
    PRRTE_K8S_TYPE_STATE_MODULE = 7, /* prte_state_base_module_t */
    PRRTE_K8S_TYPE_LIST = 8,      /* pmix_list_t */
    PRRTE_K8S_TYPE_COUNT = 9
} prrte_k8s_type_id_t;

/* Callback for a readable file descriptor, run on PRRTE's event thread. */
typedef void (*prrte_k8s_fd_cb_t)(int fd, short flags, void *arg);

/* ---- implemented by the C shim, called from Rust -------------------------------------------- */

/* sizeof() of a PRRTE type as the C compiler sees it; 0 for an unknown id. */
size_t prrte_k8s_shim_sizeof(int type_id);

/* PMIX_NEW(pmix_list_t). */
void *prrte_k8s_shim_list_new(void);
/* PMIX_LIST_RELEASE: releases the list and every item on it. */
void prrte_k8s_shim_list_release(void *list);
/* pmix_list_append(list, item). */
void prrte_k8s_shim_list_append(void *list, void *item);
/* pmix_pointer_array_get_item(array, index). */
void *prrte_k8s_shim_pointer_array_get(void *array, int index);
/* PMIX_NEW(prte_node_t); strdup's name and (if not NULL) rawname. NULL on allocation failure. */
void *prrte_k8s_shim_node_new(const char *name, const char *rawname);
/* PMIX_RETAIN / PMIX_RELEASE on any PMIx object. */
void prrte_k8s_shim_retain(void *obj);
void prrte_k8s_shim_release(void *obj);

/* PRTE_ACTIVATE_JOB_STATE(jdata, state) / PRTE_ACTIVATE_PROC_STATE(proc_name, state). */
void prrte_k8s_shim_activate_job_state(void *jdata, int state);
void prrte_k8s_shim_activate_proc_state(void *proc_name, int state);
/* PRTE_UPDATE_EXIT_STATUS(status). */
void prrte_k8s_shim_update_exit_status(int status);

/* Replaces the callback of the job state `state` in PRRTE's state machine (prte_job_states) with
 * cb, and stores the one it had in *previous (NULL if none). PRRTE status: PRTE_ERR_NOT_FOUND if
 * the state has no entry (nothing changed). Main thread, after the state module's init. */
int prrte_k8s_shim_wrap_job_state(int state, prrte_k8s_fd_cb_t cb, prrte_k8s_fd_cb_t *previous);

/* A persistent read event on PRRTE's event base; NULL on failure. */
void *prrte_k8s_shim_fd_event_new(int fd, prrte_k8s_fd_cb_t cb, void *arg);
/* Delete and free an event made by prrte_k8s_shim_fd_event_new. */
void prrte_k8s_shim_event_free(void *ev);

/* PRTE_BINDING_POLICY_IS_SET(prte_hwloc_default_binding_policy): 1 if a default binding policy
 * was given (hwloc_default_binding_policy), else 0. */
int prrte_k8s_shim_default_binding_is_set(void);
/* PRTE_SET_BINDING_POLICY(prte_hwloc_default_binding_policy, PRTE_BIND_TO_NONE). */
void prrte_k8s_shim_set_default_binding_none(void);

/* The URI of this process's PMIx listener (PMIx_Get of PMIX_MYSERVER_URI on itself), as
 * "<nspace>.<rank>;tcp4://<ip>:<port>"; malloc'ed (free it), NULL if unknown. */
char *prrte_k8s_shim_server_uri(void);

/* prte_plm_base_prted_exit(PRTE_DAEMON_EXIT_CMD): tell every daemon to exit. */
int prrte_k8s_shim_prted_exit(void);

/* pmix_output(0, "%s", msg): PRRTE's error output. */
void prrte_k8s_shim_output(const char *msg);
/* pmix_output_verbose(level, <framework output of "ras" or "plm">, "%s", msg). */
void prrte_k8s_shim_verbose(int framework, int level, const char *msg);
#define PRRTE_K8S_FRAMEWORK_RAS 0
#define PRRTE_K8S_FRAMEWORK_PLM 1

/* An int MCA variable of PRRTE or PMIx (pmix_mca_base_var_find + pmix_mca_base_var_get_value):
 * its source (one of PRRTE_K8S_VAR_SOURCE_*), and in *storage the variable's backing store, whose
 * value is the one in force (writing it changes that value; the source is left as it was).
 * -1 if no such variable is registered (yet). */
int prrte_k8s_shim_int_var(const char *project, const char *framework, const char *component,
                           const char *name, int **storage);
#define PRRTE_K8S_VAR_SOURCE_DEFAULT 0
#define PRRTE_K8S_VAR_SOURCE_COMMAND_LINE 1
#define PRRTE_K8S_VAR_SOURCE_ENV 2
#define PRRTE_K8S_VAR_SOURCE_FILE 3
#define PRRTE_K8S_VAR_SOURCE_SET 4
#define PRRTE_K8S_VAR_SOURCE_OVERRIDE 5

/* Called on PMIx's progress thread with the tools connected to this PMIx server now, one
 * "nspace:rank" a line (the string is valid during the call only), and the caller's arg. */
typedef void (*prrte_k8s_tools_cb_t)(const char *tools, void *arg);
/* Lists the tools connected now (PMIx's own record of its peers, read on PMIx's progress thread
 * where PMIx keeps it) and hands the list to cb there. PRRTE status (cb not called on error). */
int prrte_k8s_shim_connected_tools(prrte_k8s_tools_cb_t cb, void *arg);

/* prte_job_data: PRRTE's pointer array of job objects (prte_job_t), indexed as PRRTE keeps it. */
void *prrte_k8s_shim_jobs(void);
/* The job's PRTE_JOB_LAUNCH_PROXY (the process that asked for its spawn): 1 and its name in
 * nspace (PMIX_MAX_NSLEN + 1 bytes) and *rank, or 0 if the job has none. */
int prrte_k8s_shim_job_launch_proxy(void *jdata, char *nspace, uint32_t *rank);
/* Kill every process of the job, as PMIx job control's PMIX_JOB_CTRL_KILL on nspace:* does
 * (prte_plm.terminate_procs with the job's wildcard proc): their daemons kill them and report
 * them ended, and the job then ends and frees its slots. PRRTE status. */
int prrte_k8s_shim_kill_job(void *jdata);

/* ---- allocation requests (PMIx_Allocation_request through the RAS module's modify) ---------- */

/* A pmix_info_t array as opaque memory: item i's key (NULL past the end is not checked: the
 * caller passes i < n), its value as an unsigned number (PMIX_VALUE_GET_NUMBER: 0 and *out set,
 * or a PMIx error for a value that is no number), and its value as a string (NULL if it is not a
 * PMIX_STRING). */
const char *prrte_k8s_shim_info_key(const void *info, size_t i);
int prrte_k8s_shim_info_number(const void *info, size_t i, uint64_t *out);
const char *prrte_k8s_shim_info_string(const void *info, size_t i);
/* PMIX_INFO_CREATE(n) and PMIX_INFO_LOAD(&info[i], key, value, PMIX_STRING). */
void *prrte_k8s_shim_info_create(size_t n);
int prrte_k8s_shim_info_load_string(void *info, size_t i, const char *key, const char *value);
/* PMIX_INFO_FREE(info, n), for an array never handed to PRRTE. */
void prrte_k8s_shim_info_free(void *info, size_t n);

/* The allocation request PRRTE hands the RAS module's modify (its pmix_server_req_t, which only
 * a PRRTE with the RAS modify patch has; compiled only against such headers, in shim/alloc.c):
 * its directive (pmix_alloc_directive_t), its info array and count, and its requester (nspace of
 * PMIX_MAX_NSLEN + 1 bytes, rank). */
int prrte_k8s_shim_req_directive(const void *req);
const void *prrte_k8s_shim_req_info(const void *req, size_t *ninfo);
void prrte_k8s_shim_req_requester(const void *req, char *nspace, uint32_t *rank);

/* ---- implemented in Rust, callable from C ---------------------------------------------------- */

/* The module structs the components hand PRRTE (prte_ras_base_module_t / prte_plm_base_module_t),
 * for inspection; PRRTE itself gets them through the components' query functions. */
const void *prrte_k8s_ras_module(void);
const void *prrte_k8s_plm_module(void);

#ifdef __cplusplus
}
#endif

#endif /* PRRTE_K8S_H */
