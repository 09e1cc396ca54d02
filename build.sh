#!/usr/bin/env bash
# inferencelayer's one entry point.
#   ./build.sh          set everything up, build the web app (the wasm package, the npm
#                       package's JS, the small synthetic model in www/models/), then serve
#                       the demo page with cross-origin isolation and print its URL
#   ./build.sh test     set everything up, then run every test: native (cargo test, on
#                       lavapipe without a GPU), in headless Chromium on WebGPU, and the web
#                       app end to end (Playwright)
#   ./build.sh codec    a synthetic Mimi checkpoint at the released geometry, a real speech
#                       clip through the GPU codec and back (out/roundtrip.wav), a benchmark
#   ./build.sh bench    the benchmarks, natively and in headless Chromium (the benchmark
#                       page www/bench.html, BENCH_QUERY=frames=20&warmup=2)
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:$PATH"
# wgpu and Mesa print a harmless warning without it.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# The browser tests stream a speech clip through the full-geometry codec on a CPU-emulated GPU
# (tens of seconds a frame on SwiftShader): allow them time.
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-2700}"

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

# The web app: the wasm package (wasm-pack --target web) completed into the npm package
# (pkg/: JS API, worker, worklet, types, exports), copied to www/pkg/, and the small synthetic
# model (a reduced Mimi and LM, www/config/*.json) with a tokenizer in www/models/.
web_app() {
  say "building the native tool (cargo build --release)"
  cargo build --release --quiet --bin inferencelayer
  mkdir -p www/models
  if [ ! -f www/models/moshi.safetensors ] || [ www/config/moshi-small.json -nt www/models/moshi.safetensors ] \
     || [ www/config/mimi-small.json -nt www/models/mimi.safetensors ]; then
    say "writing the small synthetic model into www/models/ (seeded random weights)"
    "$BIN" synthetic-checkpoint --config www/config/mimi-small.json www/models/mimi.safetensors
    "$BIN" synthetic-lm --config www/config/moshi-small.json www/models/moshi.safetensors
  fi
  cp www/config/mimi-small.json www/models/mimi.json
  cp www/config/moshi-small.json www/models/moshi.json
  cp tests/golden/spm_test.model www/models/tokenizer.model
  say "building the wasm package (wasm-pack build --release --target web) into pkg/"
  wasm-pack --quiet build --release --target web --out-dir pkg --out-name inferencelayer
  node scripts/package.mjs pkg
  rm -rf www/pkg && cp -r pkg www/pkg
}

# Real speech for the fake microphone of the end-to-end test: the golden clip and the ALSA
# recordings, 48 kHz mono, repeated to 86 s.
e2e_speech() {
  [ -f out/e2e-speech.wav ] && return
  mkdir -p out
  local t; t=$(mktemp -d)
  local i=0
  for f in tests/golden/mimi_input.wav /usr/share/sounds/alsa/{Front_Center,Front_Left,Front_Right,Rear_Center,Rear_Left,Rear_Right,Side_Left,Side_Right}.wav; do
    sox "$f" -r 48000 -c 1 -b 16 "$t/$i.wav"
    i=$((i + 1))
  done
  sox "$t"/?.wav "$t/once.wav"
  sox "$t/once.wav" "$t/once.wav" "$t/once.wav" "$t/once.wav" "$t/once.wav" "$t/once.wav" out/e2e-speech.wav
  rm -r "$t"
}

case "${1:-main}" in
  main)
    PORT="${PORT:-8080}"
    # a bad PORT is refused before the build, with the message serve.mjs gives
    if ! [[ "$PORT" =~ ^[0-9]{1,5}$ ]] || [ "$((10#$PORT))" -gt 65535 ]; then
      echo "build.sh: PORT must be a whole number from 0 to 65535 (0: any free port), got \"$PORT\"" >&2
      exit 2
    fi
    PORT=$((10#$PORT))
    say "checking the toolchain and system packages (scripts/setup.sh)"
    scripts/setup.sh
    web_app
    # PORT=0 (any free port): pick one here, so that the URLs below name the port served
    if [ "$PORT" = 0 ]; then
      PORT=$(node -e 'const s = require("node:net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
    fi
    say "serving the demo (Ctrl-C to stop):"
    say "  http://127.0.0.1:$PORT/?model=synthetic   the small synthetic model, offline"
    say "  http://127.0.0.1:$PORT/                   Kyutai's published weights from the Hugging Face hub"
    exec node scripts/serve.mjs www "$PORT"
    ;;
  codec)
    scripts/setup.sh
    checkpoint
    say "speech through Mimi on the GPU and back: tests/golden/mimi_input.wav -> out/roundtrip.wav"
    say "(without a GPU, Mesa's lavapipe emulates one on the CPU: a few seconds per 80 ms frame)"
    "$BIN" roundtrip --checkpoint "$CKPT" tests/golden/mimi_input.wav out/roundtrip.wav
    say "wrote out/roundtrip.wav; a short benchmark (./build.sh bench runs the full one)"
    "$BIN" bench --checkpoint "$CKPT" --frames 10 --warmup 2
    ;;
  test)
    say "checking the toolchain and system packages (scripts/setup.sh)"
    scripts/setup.sh
    log=$(mktemp)
    say "lints (cargo clippy, natively with every target and for wasm32): no warnings"
    cargo clippy --release --quiet --all-targets -- -D warnings
    cargo clippy --release --quiet --target wasm32-unknown-unknown --lib --tests -- -D warnings
    say "native tests (cargo test --release): GPU plans on the adapter wgpu finds, CPU oracles"
    cargo test --release 2>&1 | tee "$log"
    say "browser tests (wasm-pack test --headless --chrome): WebGPU in headless Chromium"
    fault_server
    wasm-pack test --headless --chrome --release 2>&1 | tee -a "$log"
    kill "$FAULT_PID" 2>/dev/null || true
    # The web app end to end: Playwright drives headless Chromium on the demo page.
    say "web app end to end (node --test tests/e2e/): codec loopback and full-duplex Moshi in headless Chromium"
    web_app
    e2e_speech
    node --test tests/e2e/ 2>&1 | tee -a "$log"
    # One closing line over both runners.
    awk '/test result:/ { for (i = 2; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i - 1); if ($i ~ /^failed;?$/) f += $(i - 1) } }
         /^# pass [0-9]+$/ { p += $3 } /^# fail [0-9]+$/ { f += $3 }
         END { printf "%d passed, %d failed\n", p, f }' "$log"
    rm -f "$log"
    ;;
  bench)
    scripts/setup.sh
    checkpoint
    say "native Mimi benchmark, 200 frames"
    "$BIN" bench --checkpoint "$CKPT" --frames 200
    # The benchmark page: every stage (Mimi encode and decode, the LM step, the full-duplex
    # frame) on the small synthetic model, in headless Chromium; few frames, as SwiftShader
    # (a CPU emulating a GPU) is for regressions only. BENCH_QUERY to change them.
    web_app
    say "browser benchmark page (www/bench.html) in headless Chromium: ${BENCH_QUERY:-frames=20&warmup=2}"
    node scripts/bench-page.mjs "${BENCH_QUERY:-frames=20&warmup=2}" out/bench-page.json
    say "native loader benchmark: Moshi 7B's geometry in bf16 (15.4 GB, generated) -> Q8_0"
    cargo run --release --quiet --example load_bench
    say "browser loader benchmark: the same file through fetch from a local server"
    fault_server
    wasm-pack test --headless --chrome --release --test web_load_bench -- --include-ignored --nocapture
    ;;
  -h|--help|help)
    # the header above, as the usage
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    ;;
  *)
    echo "unknown mode ${1@Q}: ./build.sh [main|test|codec|bench] (./build.sh --help says what each does)" >&2
    exit 2
    ;;
esac
