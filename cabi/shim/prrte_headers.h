/*
 * The PRRTE and PMIx headers prrte-k8s builds against, from the configured PRRTE tree and the
 * installed PMIx. Used by bindgen (types, functions, globals) and by the C shim.
 */
#ifndef PRRTE_K8S_PRRTE_HEADERS_H
#define PRRTE_K8S_PRRTE_HEADERS_H

#include "prte_config.h"
#include "constants.h"
#include "types.h"

#include "pmix.h"
#include "src/class/pmix_list.h"
#include "src/class/pmix_pointer_array.h"
#include "src/mca/base/pmix_base.h"
#include "src/mca/base/pmix_mca_base_var.h"
#include "src/util/pmix_output.h"
#include "src/util/pmix_argv.h"

#include "src/event/event-internal.h"
#include "src/hwloc/hwloc-internal.h"
#include "src/runtime/prte_globals.h"
#include "src/util/proc_info.h"
#include "src/util/name_fns.h"
#include "src/rml/rml.h"
#include "src/pmix/pmix-internal.h"
#include "src/util/attr.h"
#include "src/include/pmix_globals.h"
#include "src/server/pmix_server_ops.h"

#include "src/mca/rmaps/rmaps_types.h"
#include "src/mca/ras/ras.h"
#include "src/mca/ras/base/base.h"
#include "src/mca/ras/base/ras_private.h"
#include "src/mca/plm/plm.h"
#include "src/mca/plm/base/base.h"
#include "src/mca/plm/base/plm_private.h"
#include "src/mca/state/state.h"
#include "src/mca/errmgr/errmgr.h"
#include "src/mca/odls/odls_types.h"

#endif
