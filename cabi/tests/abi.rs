//! The C header of our ABI against the Rust side, and the built library as PRRTE sees it.
#![deny(clippy::undocumented_unsafe_blocks)]
use prrte_k8s_cabi::ffi;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::process::Command;

mod common;
use common::*;

fn library() -> PathBuf {
    let p = profile_dir().join("libprrte_k8s_cabi.so");
    assert!(p.is_file(), "the cdylib was not built at {}", p.display());
    p
}

/// Compile a C program that includes include/prrte_k8s.h and prints what the header defines;
/// every value must match the Rust side.
#[test]
fn c_header_matches_rust() {
    let dir = tempfile::tempdir().unwrap();
    // 1. Every function of the ABI is declared with exactly these types (compile only: the
    //    shim's functions live inside the component library, not in a library to link here).
    let decl = dir.path().join("decl.c");
    std::fs::write(
        &decl,
        r#"
#include "prrte_k8s.h"
const void *(*f3)(void) = prrte_k8s_ras_module;
const void *(*f4)(void) = prrte_k8s_plm_module;
void *(*f5)(int, prrte_k8s_fd_cb_t, void *) = prrte_k8s_shim_fd_event_new;
void *(*f6)(const char *, const char *) = prrte_k8s_shim_node_new;
char *(*f7)(void) = prrte_k8s_shim_server_uri;
size_t (*f8)(int) = prrte_k8s_shim_sizeof;
"#,
    )
    .unwrap();
    let out = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-c", "-I"])
        .arg(repo().join("include"))
        .arg(&decl)
        .arg("-o")
        .arg(dir.path().join("decl.o"))
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "the header's declarations do not compile: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 2. The constants, as a C program sees them.
    let src = dir.path().join("check.c");
    std::fs::write(
        &src,
        r#"
#include <stdio.h>
#include "prrte_k8s.h"
int main(void) {
    printf("fw %d %d\n", PRRTE_K8S_FRAMEWORK_RAS, PRRTE_K8S_FRAMEWORK_PLM);
    printf("types %d\n", PRRTE_K8S_TYPE_COUNT);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("check");
    let out = Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-I"])
        .arg(repo().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "the header does not compile: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "fw {} {}\n",
            ffi::PRRTE_K8S_FRAMEWORK_RAS,
            ffi::PRRTE_K8S_FRAMEWORK_PLM
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "types {}\n",
            ffi::prrte_k8s_type_id_PRRTE_K8S_TYPE_COUNT
        )),
        "{text}"
    );
}

/// bindgen's view of PRRTE's types must be the C compiler's view (the shim was compiled by it).
#[test]
fn bindgen_layouts_match_the_c_compiler() {
    use ffi::*;
    let cases: [(prrte_k8s_type_id, usize, &str); 9] = [
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_COMPONENT,
            std::mem::size_of::<ffi::pmix_mca_base_component_t>(),
            "pmix_mca_base_component_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_NODE,
            std::mem::size_of::<ffi::prte_node_t>(),
            "prte_node_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_JOB,
            std::mem::size_of::<ffi::prte_job_t>(),
            "prte_job_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_PROC,
            std::mem::size_of::<ffi::prte_proc_t>(),
            "prte_proc_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_JOB_MAP,
            std::mem::size_of::<ffi::prte_job_map_t>(),
            "prte_job_map_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_RAS_MODULE,
            std::mem::size_of::<ffi::prte_ras_base_module_t>(),
            "prte_ras_base_module_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_PLM_MODULE,
            std::mem::size_of::<ffi::prte_plm_base_module_t>(),
            "prte_plm_base_module_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_STATE_MODULE,
            std::mem::size_of::<ffi::prte_state_base_module_t>(),
            "prte_state_base_module_t",
        ),
        (
            prrte_k8s_type_id_PRRTE_K8S_TYPE_LIST,
            std::mem::size_of::<ffi::pmix_list_t>(),
            "pmix_list_t",
        ),
    ];
    for (id, rust, name) in cases {
        // SAFETY: a pure function of the shim returning a compile-time constant.
        let c = unsafe { prrte_k8s_shim_sizeof(id as c_int) };
        assert_eq!(
            c, rust,
            "sizeof({name}) is {c} in C but {rust} in the bindings"
        );
    }
    // SAFETY: as above.
    let count = unsafe { prrte_k8s_shim_sizeof(prrte_k8s_type_id_PRRTE_K8S_TYPE_COUNT as c_int) };
    assert_eq!(count, 0);
    assert_eq!(std::mem::size_of::<ffi::pmix_mca_base_component_t>(), 224);
}

fn cstr_field(bytes: &[c_char]) -> String {
    // SAFETY: the fields are NUL-padded fixed arrays written by our const initialiser.
    unsafe { CStr::from_ptr(bytes.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Load the built library the way PRRTE does (dlopen + the component symbols) and check what
/// PRRTE reads from it.
#[test]
fn library_exports_both_components() {
    let lib_path = library();
    // SAFETY: loading our own library; its initialisers only set up Rust statics.
    let lib = unsafe { libloading::Library::new(&lib_path) }.expect("dlopen the component library");
    for (sym, ty) in [
        ("prte_mca_ras_k8s_component", "ras"),
        ("prte_mca_plm_k8s_component", "plm"),
    ] {
        let comp: libloading::Symbol<*const ffi::pmix_mca_base_component_t> =
            // SAFETY: the symbol is a pmix_mca_base_component_t static (bindgen layout).
            unsafe { lib.get(sym.as_bytes()) }.unwrap_or_else(|e| panic!("{sym} not exported: {e}"));
        // SAFETY: the pointer refers to the static inside the loaded library.
        let c = unsafe { &**comp };
        assert_eq!(
            (
                c.pmix_mca_major_version,
                c.pmix_mca_minor_version,
                c.pmix_mca_release_version
            ),
            (2, 1, 0),
            "{sym}"
        );
        assert_eq!(cstr_field(&c.pmix_mca_project_name), "prte");
        assert_eq!(cstr_field(&c.pmix_mca_type_name), ty);
        assert_eq!(cstr_field(&c.pmix_mca_component_name), "k8s");
        assert_eq!(
            (
                c.pmix_mca_type_major_version,
                c.pmix_mca_type_minor_version,
                c.pmix_mca_type_release_version
            ),
            (2, 0, 0)
        );
        assert_eq!(
            c.pmix_mca_project_major_version, 3,
            "built against PRRTE 3.x"
        );
        assert!(c.pmix_mca_query_component.is_some(), "{sym}: query is NULL");
        assert!(
            c.pmix_mca_register_component_params.is_some(),
            "{sym}: register is NULL"
        );
    }

    // The modules: every pointer PRRTE calls without checking must be set.
    // SAFETY: functions of our ABI returning pointers to static module structs.
    let ras_fn: libloading::Symbol<unsafe extern "C" fn() -> *const c_void> =
        unsafe { lib.get(b"prrte_k8s_ras_module") }.unwrap();
    // SAFETY: as above.
    let plm_fn: libloading::Symbol<unsafe extern "C" fn() -> *const c_void> =
        unsafe { lib.get(b"prrte_k8s_plm_module") }.unwrap();
    // SAFETY: as above; the structs have the bindgen layout of PRRTE's module types.
    let ras = unsafe { &*(ras_fn() as *const ffi::prte_ras_base_module_t) };
    assert!(ras.init.is_some() && ras.allocate.is_some() && ras.finalize.is_some());
    // SAFETY: as above.
    let plm = unsafe { &*(plm_fn() as *const ffi::prte_plm_base_module_t) };
    assert!(plm.init.is_some() && plm.set_hnp_name.is_some() && plm.spawn.is_some());
    assert!(
        plm.terminate_job.is_some()
            && plm.terminate_orteds.is_some()
            && plm.terminate_procs.is_some()
    );
    assert!(plm.signal_job.is_some() && plm.finalize.is_some());
}
