//! Generates bindings for the PMIx tool API from the installed `pmix.h` (the PRRTE prefix's,
//! `PRRTE_K8S_PREFIX`, default where `prrte-config/build-prrte.sh` installs). The functions are
//! not linked: bindgen's dynamic-library mode turns them into a table filled from `libpmix` at
//! run time, so binaries that never talk to a DVM do not need PMIx to start.
use std::env;
use std::path::PathBuf;

mod built {
    include!("../../adapter/src/profile/built.rs");
}

fn fail(msg: &str) -> ! {
    eprintln!("\nprrte-k8s-pmix-tool build error: {msg}\n");
    std::process::exit(1);
}

fn main() {
    println!("cargo:rerun-if-env-changed=PRRTE_K8S_PREFIX");
    println!("cargo:rerun-if-changed=../../adapter/src/profile/built.rs");
    let prefix =
        PathBuf::from(env::var("PRRTE_K8S_PREFIX").unwrap_or_else(|_| built::default_prefix()));
    let include = prefix.join("include");
    let pmix_h = include.join("pmix.h");
    if !pmix_h.is_file() {
        fail(&format!(
            "{} not found: build PRRTE and PMIx first with `prrte-config/build-prrte.sh`, or point \
             PRRTE_K8S_PREFIX at their install prefix",
            pmix_h.display()
        ));
    }
    println!("cargo:rerun-if-changed={}", pmix_h.display());
    let bindings = bindgen::Builder::default()
        .header_contents(
            "pmix_tool_api.h",
            "#include <pmix.h>\n#include <pmix_tool.h>\n",
        )
        .clang_arg(format!("-I{}", include.display()))
        .dynamic_library_name("PmixApi")
        .dynamic_link_require_all(true)
        .allowlist_function(
            "PMIx_tool_init|PMIx_tool_finalize|PMIx_Spawn_nb|PMIx_Register_event_handler|\
             PMIx_Job_control_nb|PMIx_Query_info_nb|PMIx_Error_string|PMIx_IOF_pull",
        )
        .allowlist_type("pmix_info_t|pmix_app_t|pmix_proc_t|pmix_query_t|pmix_proc_info_t")
        .allowlist_type("pmix_data_array_t|pmix_value_t|pmix_byte_object_t")
        .allowlist_var("PMIX_(SUCCESS|BOOL|STRING|PROC|UINT32|DATA_ARRAY|PROC_INFO|STATUS|INT)")
        .allowlist_var(
            "PMIX_(MAX_NSLEN|MAX_KEYLEN|RANK_WILDCARD|EVENT_JOB_END|OPERATION_SUCCEEDED)",
        )
        .allowlist_var("PMIX_ERR_(LOST_CONNECTION|UNREACH|JOB_TERMINATED|NOT_FOUND)")
        .allowlist_var("PMIX_EVENT_ACTION_COMPLETE|PMIX_FWD_STD(OUT|ERR)_CHANNEL")
        .allowlist_var("PMIX_PROC_STATE_(UNDEF|UNTERMINATED)")
        .allowlist_var(
            "PMIX_(SERVER_URI|NOTIFY_COMPLETION|EVENT_AFFECTED_PROC|JOB_TERM_STATUS|\
             EVENT_TEXT_MESSAGE|EVENT_HDLR_NAME|JOB_CTRL_KILL|HOST|NSPACE|QUERY_PROC_TABLE|\
             FWD_STDOUT|FWD_STDERR|IOF_REDIRECT|TOOL_CONNECT_OPTIONAL|TOOL_DO_NOT_CONNECT|\
             IOF_LOCAL_OUTPUT|QUERY_REFRESH_CACHE)",
        )
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed on {}: {e}", pmix_h.display())));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_else(|_| fail("OUT_DIR not set")));
    bindings
        .write_to_file(out.join("pmix_bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("cannot write bindings: {e}")));
    println!(
        "cargo:rustc-env=PRRTE_K8S_PMIX_BUILD_PREFIX={}",
        prefix.display()
    );
}
