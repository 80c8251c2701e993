//! PID 1 of sandbox pods that run an image: sets up the container's root filesystem and
//! security settings, then `exec`s the container command (see `sandbox::runtime::container`).
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(sandbox::runtime::container::init_main(
        std::env::args_os().skip(1).collect(),
    ));
}
