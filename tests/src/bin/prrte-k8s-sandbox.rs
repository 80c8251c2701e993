#![forbid(unsafe_code)]
fn main() {
    std::process::exit(sandbox::cli::main());
}
