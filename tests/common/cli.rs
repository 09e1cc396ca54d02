//! Running the `inferencelayer` binary from tests: scratch directories, status checks, and
//! the `error: ` line every refusal must print.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_inferencelayer");

/// This process's scratch directory, `target/tmp/<prefix>-<pid>`; those of earlier runs with
/// the same prefix, untouched for an hour, are removed. One prefix per test binary.
pub fn scratch_dir(prefix: &str) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let stale = |e: &std::fs::DirEntry| {
            let age = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
            e.file_name().to_string_lossy().starts_with(&format!("{prefix}-")) && age > Some(Duration::from_secs(3600))
        };
        for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
            if stale(&e) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = root.join(format!("{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// Run the binary; it must not panic.
pub fn run(args: &[&str]) -> Output {
    let start = Instant::now();
    // Mesa prints an `error: XDG_RUNTIME_DIR ...` line without it.
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").unwrap_or_else(|| std::env::temp_dir().into_os_string());
    let out = Command::new(BIN).args(args).env("XDG_RUNTIME_DIR", xdg).output().expect("run inferencelayer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("$ inferencelayer {} ({:.1} s)\n{stderr}", args.join(" "), start.elapsed().as_secs_f64());
    assert!(!stderr.contains("panicked"), "the binary panicked: {stderr}");
    out
}

/// Run the binary; it must succeed.
pub fn run_ok(args: &[&str]) -> Output {
    let out = run(args);
    assert!(out.status.success(), "inferencelayer {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Run the binary; it must exit with status 1 and an `error: ` line containing every one of
/// `needles`.
pub fn run_err(args: &[&str], needles: &[&str]) {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "inferencelayer {args:?} should fail with status 1: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: ") && !l.contains("XDG_RUNTIME_DIR"))
        .unwrap_or_else(|| panic!("no `error: ` line in {stderr}"));
    for n in needles {
        assert!(line.contains(n), "`{line}` should mention `{n}`");
    }
}

/// `(spec, samples over all channels)` of a WAV file.
pub fn wav_spec_and_len(path: &str) -> (hound::WavSpec, u32) {
    let r = hound::WavReader::open(path).expect("open wav");
    (r.spec(), r.len())
}
