//! The `harness-bridge` binary: all behaviour lives in the library.

fn main() -> std::process::ExitCode {
    harness_bridge::cli::main()
}
