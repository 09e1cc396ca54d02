#!/usr/bin/env bash
# inferencelayer's one entry point.
#   ./build.sh          set everything up, then run the main job: a synthetic Mimi checkpoint
#                       (offline, no download), a real speech clip through the GPU codec and
#                       back (out/roundtrip.wav), and the per-frame benchmark
#   ./build.sh test     set everything up, then run every test: native (cargo test, on
#                       lavapipe without a GPU) and in headless Chromium on WebGPU
#   ./build.sh bench    the benchmarks, natively and in headless Chromium
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:$PATH"
# wgpu and Mesa print a harmless warning without it.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# The browser tests replay a whole clip on a CPU-emulated GPU: allow them time.
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-1800}"

CKPT=out/mimi-synthetic.safetensors
BIN=target/release/inferencelayer

say() { echo "== $*" >&2; }

# The browser loader tests and benchmark fetch from a local fault-injecting server.
FAULT_PORT="${FAULT_PORT:-8719}"
export FAULT_SERVER="http://127.0.0.1:$FAULT_PORT"
fault_server() {
  python3 tests/server/fault_server.py --port "$FAULT_PORT" &
  FAULT_PID=$!
  trap 'kill "$FAULT_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$FAULT_PORT") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "the fault server did not start on port $FAULT_PORT" >&2
  return 1
}

checkpoint() {
  say "building the native tool (cargo build --release; the first build takes a few minutes)"
  cargo build --release --quiet --bin inferencelayer
  mkdir -p out
  if [ ! -f "$CKPT" ]; then
    say "writing a synthetic Mimi checkpoint in the real format: $CKPT"
    "$BIN" synthetic-checkpoint "$CKPT"
  fi
}

case "${1:-main}" in
  main)
    say "checking the toolchain and system packages (scripts/setup.sh)"
    scripts/setup.sh
    checkpoint
    say "speech through Mimi on the GPU and back: tests/golden/mimi_input.wav -> out/roundtrip.wav"
    say "(without a GPU, Mesa's lavapipe emulates one on the CPU: about a second per 80 ms frame)"
    "$BIN" roundtrip --checkpoint "$CKPT" tests/golden/mimi_input.wav out/roundtrip.wav
    say "wrote out/roundtrip.wav; a short benchmark (./build.sh bench runs the full one)"
    "$BIN" bench --checkpoint "$CKPT" --frames 10 --warmup 2
    ;;
  test)
    say "checking the toolchain and system packages (scripts/setup.sh)"
    scripts/setup.sh
    log=$(mktemp)
    say "native tests (cargo test --release): GPU plans on the adapter wgpu finds, CPU oracles"
    cargo test --release 2>&1 | tee "$log"
    say "browser tests (wasm-pack test --headless --chrome): WebGPU in headless Chromium"
    fault_server
    wasm-pack test --headless --chrome --release 2>&1 | tee -a "$log"
    kill "$FAULT_PID" 2>/dev/null || true
    # One closing line over both runners.
    awk '/test result:/ { for (i = 2; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i - 1); if ($i ~ /^failed;?$/) f += $(i - 1) } }
         END { printf "%d passed, %d failed\n", p, f }' "$log"
    rm -f "$log"
    ;;
  bench)
    scripts/setup.sh
    checkpoint
    say "native Mimi benchmark, 200 frames"
    "$BIN" bench --checkpoint "$CKPT" --frames 200
    say "browser Mimi benchmark, 100 frames (slow on SwiftShader without a GPU)"
    wasm-pack test --headless --chrome --release --test web_bench -- --include-ignored
    say "native loader benchmark: Moshi 7B's geometry in bf16 (15.4 GB, generated) -> Q8_0"
    cargo run --release --quiet --example load_bench
    say "browser loader benchmark: the same file through fetch from a local server"
    fault_server
    wasm-pack test --headless --chrome --release --test web_load_bench -- --include-ignored --nocapture
    ;;
  *)
    echo "usage: ./build.sh [main|test|bench]" >&2
    exit 2
    ;;
esac
