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

checkpoint() {
  cargo build --release --quiet --bin inferencelayer
  mkdir -p out
  [ -f "$CKPT" ] || "$BIN" synthetic-checkpoint "$CKPT"
}

case "${1:-main}" in
  main)
    scripts/setup.sh
    checkpoint
    "$BIN" roundtrip --checkpoint "$CKPT" tests/golden/mimi_input.wav out/roundtrip.wav
    "$BIN" bench --checkpoint "$CKPT" --frames 100
    echo "wrote out/roundtrip.wav (speech through Mimi on the GPU, synthetic weights)"
    ;;
  test)
    scripts/setup.sh
    cargo test --release
    wasm-pack test --headless --chrome --release
    ;;
  bench)
    scripts/setup.sh
    checkpoint
    "$BIN" bench --checkpoint "$CKPT" --frames 200
    wasm-pack test --headless --chrome --release --test web_bench -- --include-ignored
    ;;
  *)
    echo "usage: ./build.sh [main|test|bench]" >&2
    exit 2
    ;;
esac
