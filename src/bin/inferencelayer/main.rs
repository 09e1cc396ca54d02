//! `inferencelayer`: the native command-line tool (encode, decode, roundtrip, bench,
//! synthetic-checkpoint, converse, synthetic-lm, load-lm, bench-lm, check). See `cli.rs`; on wasm32 there is no command line.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

/// Counts heap bytes for `load-lm`'s report.
#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static HEAP: inferencelayer::heap::Counting = inferencelayer::heap::Counting;

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
