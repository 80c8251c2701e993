fn main() {
    std::process::exit(sandbox::cli::main());
}
