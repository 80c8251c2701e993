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

int prrte_k8s_shim_wrap_job_state(int state, prrte_k8s_fd_cb_t cb, prrte_k8s_fd_cb_t *previous)
{
    prte_state_t *st;
    PMIX_LIST_FOREACH(st, &prte_job_states, prte_state_t) {
        if (st->job_state == (prte_job_state_t) state) {
            *previous = st->cbfunc;
            st->cbfunc = cb;
            return PRTE_SUCCESS;
        }
    }
    *previous = NULL;
    return PRTE_ERR_NOT_FOUND;
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

_Static_assert(PRRTE_K8S_VAR_SOURCE_DEFAULT == PMIX_MCA_BASE_VAR_SOURCE_DEFAULT, "source");
_Static_assert(PRRTE_K8S_VAR_SOURCE_COMMAND_LINE == PMIX_MCA_BASE_VAR_SOURCE_COMMAND_LINE, "source");
_Static_assert(PRRTE_K8S_VAR_SOURCE_ENV == PMIX_MCA_BASE_VAR_SOURCE_ENV, "source");
_Static_assert(PRRTE_K8S_VAR_SOURCE_FILE == PMIX_MCA_BASE_VAR_SOURCE_FILE, "source");
_Static_assert(PRRTE_K8S_VAR_SOURCE_SET == PMIX_MCA_BASE_VAR_SOURCE_SET, "source");
_Static_assert(PRRTE_K8S_VAR_SOURCE_OVERRIDE == PMIX_MCA_BASE_VAR_SOURCE_OVERRIDE, "source");

int prrte_k8s_shim_int_var(const char *project, const char *framework, const char *component,
                           const char *name, int **storage)
{
    pmix_mca_base_var_source_t source = PMIX_MCA_BASE_VAR_SOURCE_DEFAULT;
    void *store = NULL;
    int idx = pmix_mca_base_var_find(project, framework, component, name);
    if (idx < 0) {
        return -1;
    }
    if (PMIX_SUCCESS != pmix_mca_base_var_get_value(idx, &store, &source, NULL) || NULL == store) {
        return -1;
    }
    *storage = (int *) store;
    return (int) source;
}

struct tools_request {
    prrte_k8s_tools_cb_t cb;
    void *arg;
};

/* On PMIx's progress thread: the connected tools among PMIx's peers. */
static void list_tools(evutil_socket_t fd, short flags, void *cbdata)
{
    struct tools_request *req = (struct tools_request *) cbdata;
    size_t len = 0, cap = 256;
    char *out = malloc(cap);
    int i;
    (void) fd; (void) flags;

    if (NULL != out) {
        out[0] = '\0';
        for (i = 0; i < pmix_server_globals.clients.size; i++) {
            pmix_peer_t *peer = (pmix_peer_t *) pmix_pointer_array_get_item(&pmix_server_globals.clients, i);
            char line[PMIX_MAX_NSLEN + 32];
            int n;
            if (NULL == peer || NULL == peer->info || NULL == peer->info->pname.nspace
                || !PMIX_PEER_IS_TOOL(peer) || peer->sd < 0) {
                continue;
            }
            n = snprintf(line, sizeof(line), "%s:%u\n", peer->info->pname.nspace,
                         (unsigned) peer->info->pname.rank);
            if (n <= 0 || (size_t) n >= sizeof(line)) {
                continue;
            }
            if (len + (size_t) n + 1 > cap) {
                char *bigger = realloc(out, 2 * (len + (size_t) n + 1));
                if (NULL == bigger) {
                    break;
                }
                out = bigger;
                cap = 2 * (len + (size_t) n + 1);
            }
            memcpy(out + len, line, (size_t) n + 1);
            len += (size_t) n;
        }
    }
    req->cb(NULL == out ? "" : out, req->arg);
    free(out);
    free(req);
}

int prrte_k8s_shim_connected_tools(prrte_k8s_tools_cb_t cb, void *arg)
{
    struct tools_request *req = malloc(sizeof(*req));
    if (NULL == req) {
        return PRTE_ERR_OUT_OF_RESOURCE;
    }
    req->cb = cb;
    req->arg = arg;
    /* libevent is thread-safe here (PMIx enables its pthread support): run on PMIx's base */
    if (0 != event_base_once(pmix_globals.evbase, -1, EV_TIMEOUT, list_tools, req, NULL)) {
        free(req);
        return PRTE_ERROR;
    }
    return PRTE_SUCCESS;
}

void *prrte_k8s_shim_jobs(void)
{
    return prte_job_data;
}

int prrte_k8s_shim_job_launch_proxy(void *jdata, char *nspace, uint32_t *rank)
{
    prte_job_t *job = (prte_job_t *) jdata;
    pmix_proc_t *proxy = NULL;

    if (!prte_get_attribute(&job->attributes, PRTE_JOB_LAUNCH_PROXY, (void **) &proxy, PMIX_PROC)
        || NULL == proxy) {
        return 0;
    }
    memcpy(nspace, proxy->nspace, PMIX_MAX_NSLEN);
    nspace[PMIX_MAX_NSLEN] = '\0';
    *rank = proxy->rank;
    PMIX_PROC_RELEASE(proxy);
    return 1;
}

int prrte_k8s_shim_kill_job(void *jdata)
{
    prte_job_t *job = (prte_job_t *) jdata;
    pmix_pointer_array_t procs;
    prte_proc_t *all;
    int rc;

    all = PMIX_NEW(prte_proc_t);
    if (NULL == all) {
        return PRTE_ERR_OUT_OF_RESOURCE;
    }
    PMIX_LOAD_PROCID(&all->name, job->nspace, PMIX_RANK_WILDCARD);
    PMIX_CONSTRUCT(&procs, pmix_pointer_array_t);
    pmix_pointer_array_add(&procs, all);
    rc = prte_plm.terminate_procs(&procs);
    PMIX_RELEASE(all);
    PMIX_DESTRUCT(&procs);
    return rc;
}

const char *prrte_k8s_shim_info_key(const void *info, size_t i)
{
    return ((const pmix_info_t *) info)[i].key;
}

int prrte_k8s_shim_info_number(const void *info, size_t i, uint64_t *out)
{
    pmix_status_t rc;
    const pmix_value_t *v = &((const pmix_info_t *) info)[i].value;
    uint64_t n = 0;

    PMIX_VALUE_GET_NUMBER(rc, v, n, uint64_t);
    if (PMIX_SUCCESS == rc) {
        *out = n;
    }
    return rc;
}

const char *prrte_k8s_shim_info_string(const void *info, size_t i)
{
    const pmix_value_t *v = &((const pmix_info_t *) info)[i].value;
    return (PMIX_STRING == v->type) ? v->data.string : NULL;
}

void *prrte_k8s_shim_info_create(size_t n)
{
    pmix_info_t *info;
    PMIX_INFO_CREATE(info, n);
    return info;
}

int prrte_k8s_shim_info_load_string(void *info, size_t i, const char *key, const char *value)
{
    return PMIx_Info_load(&((pmix_info_t *) info)[i], key, value, PMIX_STRING);
}

void prrte_k8s_shim_info_free(void *info, size_t n)
{
    pmix_info_t *p = (pmix_info_t *) info;
    PMIX_INFO_FREE(p, n);
}
