//! Builds the C shim and generates Rust bindings from the configured PRRTE tree.
//!
//! Inputs (environment):
//! - `PRRTE_K8S_PREFIX`: the PRRTE/PMIx install prefix (default
//!   `/opt/prrte-k8s/prrte-<PRRTE>-pmix-<PMIx>-<patch level>`, where
//!   `prrte-config/build-prrte.sh` installs; the versions are the components' profile's, in
//!   `adapter/src/profile/built.rs`).
//! - `PRRTE_SRC`: the configured PRRTE source tree (default `$PRRTE_K8S_PREFIX/src/prrte`);
//!   its generated `src/include/prte_config.h` is never installed, so it is required.
use std::env;
use std::path::{Path, PathBuf};

/// The release the components are built for (shared with the `prrte-k8s` crate's profile).
mod built {
    include!("../adapter/src/profile/built.rs");
}

fn fail(msg: &str) -> ! {
    eprintln!("\nprrte-k8s-cabi build error: {msg}\n");
    std::process::exit(1);
}

fn main() {
    println!("cargo:rerun-if-env-changed=PRRTE_K8S_PREFIX");
    println!("cargo:rerun-if-env-changed=PRRTE_SRC");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/alloc.c");
    println!("cargo:rerun-if-changed=shim/prrte_headers.h");
    println!("cargo:rerun-if-changed=../include/prrte_k8s.h");
    println!("cargo:rerun-if-changed=../include/prrte_k8s_preempt.h");
    println!("cargo:rerun-if-changed=../adapter/src/profile/built.rs");

    let prefix =
        PathBuf::from(env::var("PRRTE_K8S_PREFIX").unwrap_or_else(|_| built::default_prefix()));
    let src = env::var("PRRTE_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|_| prefix.join("src/prrte"));
    let remedy =
        "build PRRTE first with `prrte-config/build-prrte.sh` (or point PRRTE_K8S_PREFIX at its \
                  install prefix and PRRTE_SRC at the configured PRRTE source tree)";
    let prte_config = src.join("src/include/prte_config.h");
    if !prte_config.is_file() {
        fail(&format!(
            "the configured PRRTE tree is missing: {} not found; {remedy}",
            prte_config.display()
        ));
    }
    let pmix_h = prefix.join("include/pmix.h");
    let pmix_internal = prefix.join("include/pmix/src/include/pmix_config.h");
    if !pmix_h.is_file() || !pmix_internal.is_file() {
        fail(&format!(
            "PMIx headers are missing under {} (need include/pmix.h and include/pmix/src/...); {remedy}",
            prefix.display()
        ));
    }
    println!("cargo:rerun-if-changed={}", prte_config.display());
    // Patch 0003 (patch level k8s2) gives the RAS module `modify`: the layout tests check that
    // bindgen's module is the five-entry one exactly then (src/ras/layout.rs).
    let ras_h = src.join("src/mca/ras/ras.h");
    println!("cargo:rerun-if-changed={}", ras_h.display());
    println!("cargo::rustc-check-cfg=cfg(prrte_ras_modify)");
    let ras_header = std::fs::read_to_string(&ras_h)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}; {remedy}", ras_h.display())));
    let ras_modify = ras_header.contains("prte_ras_base_module_modify_fn_t");
    if ras_modify {
        println!("cargo:rustc-cfg=prrte_ras_modify");
    }

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let include_dir = manifest.join("../include");
    let shim_dir = manifest.join("shim");
    let inc_args = include_args(&src, &prefix, &include_dir, &shim_dir);

    // The shim: PRRTE's macros and inline functions as plain functions.
    let mut build = cc::Build::new();
    build
        .file(shim_dir.join("shim.c"))
        // The allocation request's fields exist only with the RAS modify patch.
        .files(ras_modify.then(|| shim_dir.join("alloc.c")))
        .define("HAVE_CONFIG_H", None)
        .define("NDEBUG", None);
    for a in &inc_args {
        build.flag(a);
    }
    build.flag_if_supported("-Wno-unused-parameter");
    build.compile("prrte_k8s_shim");

    // Bindings: PRRTE/PMIx types, functions and globals the components use, and the shim's
    // functions from include/prrte_k8s.h.
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let bindings = bindgen::Builder::default()
        .header(shim_dir.join("prrte_headers.h").to_string_lossy())
        // Our own ABI: the shim's functions as the header declares them.
        .header(include_dir.join("prrte_k8s.h").to_string_lossy())
        // The keys of the preemption notice applications read.
        .header(include_dir.join("prrte_k8s_preempt.h").to_string_lossy())
        .allowlist_var("PRRTE_K8S_PREEMPT_.*")
        .allowlist_function("PMIx_Notify_event|PMIx_Info_create|PMIx_Info_free|PMIx_Info_load")
        .allowlist_var("PMIX_JCTRL_PREEMPT_ALERT|PMIX_RANGE_SESSION|PMIX_UINT32|PMIX_EVENT_NON_DEFAULT|PMIX_EVENT_TEXT_MESSAGE|PMIX_OPERATION_SUCCEEDED")
        .allowlist_var("PMIX_ALLOC_(ID|NODE_LIST|NUM_NODES|NUM_CPUS|REQ_ID)|PMIX_ERROR|PMIX_ERR_(TIMEOUT|BAD_PARAM|RESOURCE_BUSY|OUT_OF_RESOURCE|NOT_FOUND|NOT_SUPPORTED|JOB_CANCELED|NO_PERMISSIONS|WOULD_BLOCK)")
        .allowlist_function("prrte_k8s_shim_.*")
        .allowlist_type("prrte_k8s_type_id_t|prrte_k8s_fd_cb_t|prrte_k8s_tools_cb_t")
        .allowlist_var("PRRTE_K8S_VAR_SOURCE_.*")
        .allowlist_var("PRRTE_K8S_FRAMEWORK_.*")
        .clang_arg("-DHAVE_CONFIG_H")
        .clang_arg("-DNDEBUG")
        .clang_args(&inc_args)
        .allowlist_type("pmix_mca_base_component_t|pmix_mca_base_module_t|pmix_list_t|pmix_list_item_t")
        .allowlist_type("prte_(node|job|proc|job_map|app_context)_t|prte_job_map_t")
        .allowlist_type("prte_ras_base_module_t|prte_plm_base_module_t|prte_state_base_module_t")
        .allowlist_type("prte_plm_globals_t|prte_process_info_t|pmix_mca_base_var_type_t")
        .allowlist_function("prte_ras_base_node_insert|prte_get_job_data_object|prte_check_host_is_local")
        .allowlist_function("prte_plm_base_.*|prte_rml_route_lost|prte_util_convert_vpid_to_string")
        .allowlist_function("pmix_mca_base_component_var_register|PMIx_Argv_free|PMIx_Argv_count")
        .allowlist_function("prte_job_state_to_str|prte_proc_state_to_str")
        .allowlist_var("prte_managed_allocation|prte_do_not_resolve|prte_plm_globals|prte_state|prte_process_info")
        .allowlist_var("prte_exit_status|prte_plm|prte_num_allocated_nodes|prte_node_pool")
        .allowlist_var("prte_prteds_term_ordered|PRTE_JOB_FLAG_ABORTED")
        .allowlist_var("PRTE_(SUCCESS|ERROR|ERR_[A-Z_]+)|PMIX_SUCCESS")
        .allowlist_var("PRTE_(JOB|PROC|NODE)_STATE_[A-Z_]+|PRTE_NODE_FLAG_[A-Z_]+|PRTE_PROC_MASTER|PRTE_JOB_DO_NOT_LAUNCH")
        .allowlist_var("PRTE_(MAJOR|MINOR|RELEASE)_VERSION|PMIX_MCA_BASE_VERSION_MAJOR|PMIX_MCA_BASE_VERSION_MINOR|PMIX_MCA_BASE_VERSION_RELEASE")
        .allowlist_var("PMIX_(MAJOR|MINOR|RELEASE)_VERSION|PMIX_ERR_NOT_AVAILABLE") // version_guard.rs
        .allowlist_var("PMIX_MAX_NSLEN|PMIX_BOOL|PMIX_STRING|PRTE_JOB_DISPLAY_ALLOC|PRTE_DAEMON_EXIT_CMD")
        .allowlist_var("prte_ras_base|prte_ras_base_framework|prte_plm_base_framework")
        .allowlist_type("prte_state_caddy_t|pmix_mca_base_framework_t|prte_ras_base_t")
        .allowlist_function("prte_ras_base_display_alloc|prte_get_attribute|pmix_output_get_verbosity")
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed on the PRRTE headers: {e}; {remedy}")));
    // PRRTE forward-declares `struct prte_node_t` / `struct prte_job_t` (incomplete) while the
    // real types are typedefs of anonymous structs with the same names. bindgen emits an opaque
    // item for each forward declaration; drop those so the names refer to the real layouts
    // (which is what those pointers point at).
    let mut text = bindings.to_string();
    for name in ["prte_node_t", "prte_job_t"] {
        let opaque = format!(
            "#[repr(C)]\n#[derive(Debug, Copy, Clone)]\npub struct {name} {{\n    _unused: [u8; 0],\n}}\n"
        );
        if text.matches(&format!("pub struct {name} {{")).count() > 1 {
            text = text.replacen(&opaque, "", 1);
        }
    }
    std::fs::write(out.join("prrte_bindings.rs"), text)
        .unwrap_or_else(|e| fail(&format!("cannot write bindings: {e}")));
    println!(
        "cargo:rustc-env=PRRTE_K8S_BUILD_PREFIX={}",
        prefix.display()
    );
    // Link against PRRTE and PMIx: inside prte/prted these resolve to the libraries already loaded
    // (same sonames); for our own test binaries they make the shim's references resolvable.
    let libdir = prefix.join("lib");
    println!("cargo:rustc-link-search=native={}", libdir.display());
    println!("cargo:rustc-link-lib=dylib=prrte");
    println!("cargo:rustc-link-lib=dylib=pmix");
    // libevent, which PRRTE is built on (the shim calls it for PRRTE's event macros).
    println!("cargo:rustc-link-lib=dylib=event_core");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", libdir.display());
}

fn include_args(src: &Path, prefix: &Path, include_dir: &Path, shim_dir: &Path) -> Vec<String> {
    vec![
        format!("-iquote{}", src.display()),
        format!("-iquote{}", src.join("src/include").display()),
        format!("-I{}", include_dir.display()),
        format!("-I{}", shim_dir.display()),
        format!("-I{}", prefix.join("include").display()),
        format!("-I{}", prefix.join("include/pmix").display()),
    ]
}
