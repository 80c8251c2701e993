//! Link settings for this package's binaries (the agent runs in every pod; its memory counts).
//!
//! On Linux with glibc, the binaries are linked with `-z pack-relative-relocs` (DT_RELR): the
//! position-independent executable's relative relocations are stored as a compact bitmap instead
//! of 24 bytes each. For the agent that is ~0.65 MiB less of `.rela.dyn` that the dynamic loader
//! reads (and keeps resident) at every start. Needs GNU ld >= 2.38 or lld to link and glibc >=
//! 2.36 to run (Debian 12 and the images' base have both); `PRRTE_K8S_NO_RELR=1` turns it off.
//! The cdylib PRRTE loads is not affected.
//!
//! The static builds for the injected runtime (`--target x86_64-unknown-linux-musl`: static-pie,
//! no program interpreter, they run in any image) keep the plain relocations: there the
//! executable relocates itself with musl's static-pie start-up code, which knows DT_RELR only
//! since musl 1.2.4 (Debian 12's musl-tools have 1.2.3), so the flag stays glibc-only.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PRRTE_K8S_NO_RELR");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let off = std::env::var_os("PRRTE_K8S_NO_RELR").is_some_and(|v| v != "0" && !v.is_empty());
    if target_os == "linux" && target_env == "gnu" && !off {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
