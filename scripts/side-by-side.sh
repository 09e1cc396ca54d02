#!/bin/bash
# This project side by side with Kyutai's PyTorch reference, on one GPU, in one call.
#
#   scripts/side-by-side.sh prepare
#       Here, with a network and the toolchain of ./build.sh: packs what the GPU machine
#       lacks into folders that .gitignore names: .bench/dawn/ (the native
#       release binary, the wasm build for Node, scripts/bench-dawn.mjs, a Node binary and
#       the `webgpu` npm package's Dawn for Node, xz-compressed: see scripts/bench-dawn.sh),
#       .gl/ (the Vulkan loader's and GLVND's Debian packages) and .whl/ (the `moshi` 0.2.13 wheel; the
#       GPU machine has PyTorch and the rest of what it imports). About 40 MB in all.
#   OUT=DIR scripts/side-by-side.sh run [FRAMES=200]
#       On the GPU machine, with .bench, .gl and .whl beside the scripts: on the same GPU,
#       1. scripts/bench-dawn.sh: Mimi encode and decode (`inferencelayer bench`), the LM step
#          and the whole full-duplex frame (`bench-lm --mimi`, Moshi 7B's geometry, synthetic
#          Q8_0 weights), then the same stages from the wasm build on WebGPU through Dawn;
#       2. tests/reference/bench_reference.py: Kyutai's reference (moshi 0.2.13: Mimi in fp32,
#          `LMGen.step` of Moshi 7B in bf16 with CUDA graphs, the full-duplex frame), and its
#          LM step again at a full window (`--window`, WINDOW=3000, the temporal context);
#       3. `bench-lm` again with its first WINDOW frames untimed: the LM step once the
#          temporal transformer attends over its whole window, as after four minutes of a
#          conversation (the reference attends over its whole ring at every position);
#       then scripts/side-by-side.py prints the table of all of them with the ratios, into
#       $OUT/side-by-side.md as well. Each part writes its JSON report into $OUT as it ends.
set -u
cd "$(dirname "$0")/.."
D=${D:-.bench/dawn}
WINDOW=${WINDOW:-3000}
SEED=20261129

prepare() {
  set -e
  export PATH="$HOME/.cargo/bin:$PATH"
  mkdir -p "$D/webgpu" .gl .whl
  echo "== the native release binary and the wasm build for Node" >&2
  cargo build --release --quiet --bin inferencelayer
  cp target/release/inferencelayer "$D/" && strip "$D/inferencelayer"  # the release profile keeps line tables
  wasm-pack --quiet build --release --target nodejs --out-dir "$D/pkg" --out-name inferencelayer
  cp scripts/bench-dawn.mjs "$D/"
  echo "== Node and Dawn for Node (webgpu 0.6.2)" >&2
  xz -T0 -c "$(command -v node)" > "$D/node.xz"
  local t; t=$(mktemp -d)
  (cd "$t" && npm pack --silent webgpu@0.6.2 > /dev/null && tar xzf webgpu-0.6.2.tgz)
  cp "$t/package/index.js" "$t/package/package.json" "$D/webgpu/"
  xz -T0 -c "$t/package/dist/linux-x64/dawn.node" > "$D/dawn.node.xz"
  rm -rf "$t"
  echo "== the Vulkan loader (.gl) and the moshi wheel (.whl)" >&2
  local o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  mkdir -p /tmp/amd64/partial
  apt-get $o update > /dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 2> /dev/null)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl moshi==0.2.13
  du -sh "$D" .gl .whl >&2
}

run() {
  local n=${1:-200}
  : "${OUT:?set OUT to the folder for the reports}"
  . scripts/gpu-env.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
  echo "== 1. this project natively, then the wasm build on Dawn ($n frames)"
  D=$D scripts/bench-dawn.sh "$n"
  echo "== 2. Kyutai's reference ($n frames; the LM step again at a window of $WINDOW)"
  ( time timeout 420 python3 tests/reference/bench_reference.py --frames "$n" --window "$WINDOW" \
      > "$OUT/reference.json" 2> "$OUT/reference.err" ) 2>&1 | grep real
  tail -3 "$OUT/reference.err"
  echo "== 3. the native LM step at a full window ($WINDOW frames untimed, then $n)"
  ( time timeout 300 "$D/inferencelayer" bench-lm --frames "$n" --warmup "$WINDOW" --profile 0 --seed $SEED \
      --weights fast --json > "$OUT/native-lm-window.json" 2> "$OUT/native-lm-window.err" ) 2>&1 | grep real
  tail -2 "$OUT/native-lm-window.err"
  python3 scripts/side-by-side.py "$OUT" | tee "$OUT/side-by-side.md"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/side-by-side.sh prepare | OUT=DIR scripts/side-by-side.sh run [FRAMES]" >&2; exit 2 ;;
esac
