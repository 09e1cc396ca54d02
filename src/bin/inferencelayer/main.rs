//! `inferencelayer`: the native command-line tool (encode, decode, roundtrip, bench,
//! synthetic-checkpoint). See `cli.rs`; on wasm32 there is no command line.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
