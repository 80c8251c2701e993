/*
 * The allocation request a PRRTE with the RAS modify patch hands the RAS module (its
 * pmix_server_req_t), read field by field for the Rust side. Compiled only against such headers
 * (cabi/build.rs). A file of its own: pmix_server_internal.h cannot share a translation unit with
 * PMIx's internal server header, which the main shim includes.
 */
#include "prte_config.h"
#include "src/prted/pmix/pmix_server_internal.h"
#include "prrte_k8s.h"

int prrte_k8s_shim_req_directive(const void *req)
{
    return ((const pmix_server_req_t *) req)->allocdir;
}

const void *prrte_k8s_shim_req_info(const void *req, size_t *ninfo)
{
    const pmix_server_req_t *r = (const pmix_server_req_t *) req;
    *ninfo = (NULL == r->info) ? 0 : r->ninfo;
    return r->info;
}

void prrte_k8s_shim_req_requester(const void *req, char *nspace, uint32_t *rank)
{
    const pmix_server_req_t *r = (const pmix_server_req_t *) req;
    PMIX_LOAD_NSPACE(nspace, r->tproc.nspace);
    *rank = r->tproc.rank;
}
