//! bindgen's output for `pmix.h` / `pmix_tool.h` (build.rs): types, constants and the
//! [`PmixApi`] function table loaded from `libpmix` at run time. The layout assertions bindgen
//! emits are kept: they fail the build if a struct differs from the header's.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    rustdoc::all
)]

include!(concat!(env!("OUT_DIR"), "/pmix_bindings.rs"));
