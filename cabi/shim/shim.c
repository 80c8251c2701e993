/*
 * The C shim: PRRTE's macros and inline functions as plain functions for the Rust side.
 * Declared in include/prrte_k8s.h. No decisions are made here; see cabi/src for the logic.
 */
#include "prrte_headers.h"
#include "prrte_k8s.h"

size_t prrte_k8s_shim_sizeof(int type_id)
{
    switch (type_id) {
    case PRRTE_K8S_TYPE_COMPONENT: return sizeof(pmix_mca_base_component_t);
    case PRRTE_K8S_TYPE_NODE: return sizeof(prte_node_t);
    case PRRTE_K8S_TYPE_JOB: return sizeof(prte_job_t);
    case PRRTE_K8S_TYPE_PROC: return sizeof(prte_proc_t);
    case PRRTE_K8S_TYPE_JOB_MAP: return sizeof(struct prte_job_map_t);
    case PRRTE_K8S_TYPE_RAS_MODULE: return sizeof(prte_ras_base_module_t);
    case PRRTE_K8S_TYPE_PLM_MODULE: return sizeof(prte_plm_base_module_t);
    case PRRTE_K8S_TYPE_STATE_MODULE: return sizeof(prte_state_base_module_t);
    case PRRTE_K8S_TYPE_LIST: return sizeof(pmix_list_t);
    default: return 0;
    }
}

void *prrte_k8s_shim_list_new(void)
{
    return PMIX_NEW(pmix_list_t);
}

void prrte_k8s_shim_list_release(void *list)
{
    pmix_list_t *l = (pmix_list_t *) list;
    PMIX_LIST_RELEASE(l);
}

void prrte_k8s_shim_list_append(void *list, void *item)
{
    pmix_list_append((pmix_list_t *) list, (pmix_list_item_t *) item);
}

void *prrte_k8s_shim_pointer_array_get(void *array, int index)
{
    return pmix_pointer_array_get_item((pmix_pointer_array_t *) array, index);
}

void *prrte_k8s_shim_node_new(const char *name, const char *rawname)
{
    prte_node_t *node = PMIX_NEW(prte_node_t);
    if (NULL == node) {
        return NULL;
    }
    node->name = strdup(name);
    if (NULL != rawname) {
        node->rawname = strdup(rawname);
    }
    return node;
}

void prrte_k8s_shim_retain(void *obj)
{
    pmix_object_t *o = (pmix_object_t *) obj;
    PMIX_RETAIN(o);
}

void prrte_k8s_shim_release(void *obj)
{
    pmix_object_t *o = (pmix_object_t *) obj;
    PMIX_RELEASE(o);
}

void prrte_k8s_shim_activate_job_state(void *jdata, int state)
{
    PRTE_ACTIVATE_JOB_STATE((prte_job_t *) jdata, (prte_job_state_t) state);
}

void prrte_k8s_shim_activate_proc_state(void *proc_name, int state)
{
    PRTE_ACTIVATE_PROC_STATE((pmix_proc_t *) proc_name, (prte_proc_state_t) state);
}

void prrte_k8s_shim_update_exit_status(int status)
{
    PRTE_UPDATE_EXIT_STATUS(status);
}

void *prrte_k8s_shim_fd_event_new(int fd, prrte_k8s_fd_cb_t cb, void *arg)
{
    /* prte_event_new is declared by PRRTE 3.0.8 but not defined; use libevent's event_new on
     * PRRTE's event base, as PRRTE's own macros do for add/del/free. */
    prte_event_t *ev = event_new(prte_event_base, fd, PRTE_EV_READ | PRTE_EV_PERSIST, cb, arg);
    if (NULL == ev) {
        return NULL;
    }
    if (0 != prte_event_add(ev, NULL)) {
        prte_event_free(ev);
        return NULL;
    }
    return ev;
}

void prrte_k8s_shim_event_free(void *ev)
{
    if (NULL != ev) {
        prte_event_del((prte_event_t *) ev);
        prte_event_free((prte_event_t *) ev);
    }
}

void prrte_k8s_shim_output(const char *msg)
{
    pmix_output(0, "%s", msg);
}

void prrte_k8s_shim_verbose(int framework, int level, const char *msg)
{
    int out = (PRRTE_K8S_FRAMEWORK_RAS == framework) ? prte_ras_base_framework.framework_output
                                                     : prte_plm_base_framework.framework_output;
    pmix_output_verbose(level, out, "%s", msg);
}

int prrte_k8s_shim_prted_exit(void)
{
    return prte_plm_base_prted_exit(PRTE_DAEMON_EXIT_CMD);
}

int prrte_k8s_shim_default_binding_is_set(void)
{
    return PRTE_BINDING_POLICY_IS_SET(prte_hwloc_default_binding_policy) ? 1 : 0;
}

void prrte_k8s_shim_set_default_binding_none(void)
{
    PRTE_SET_BINDING_POLICY(prte_hwloc_default_binding_policy, PRTE_BIND_TO_NONE);
}

char *prrte_k8s_shim_server_uri(void)
{
    pmix_value_t *val = NULL;
    char *uri = NULL;

    if (PMIX_SUCCESS == PMIx_Get(PRTE_PROC_MY_NAME, PMIX_MYSERVER_URI, NULL, 0, &val) && NULL != val) {
        if (PMIX_STRING == val->type && NULL != val->data.string) {
            uri = strdup(val->data.string);
        }
    }
    if (NULL != val) {
        PMIX_VALUE_RELEASE(val);
    }
    return uri;
}
