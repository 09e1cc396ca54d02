#!/usr/bin/env bash
# Installs everything the build, the demo and the tests need, on a Debian machine; safe to
# run again (it skips what is there). Pinned tools: wasm-pack and wasm-bindgen-cli at the
# versions the crate locks.
set -euo pipefail
cd "$(dirname "$0")/.."

WASM_PACK_VERSION=0.15.1
# wasm-bindgen-cli must match the crate's wasm-bindgen (Cargo.lock).
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)

export PATH="$HOME/.cargo/bin:$PATH"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Debian packages: Vulkan on the CPU (Mesa's lavapipe) for the native GPU tests; Chromium and
# its driver for the browser tests (WebGPU on SwiftShader); binaryen's wasm-opt for wasm-pack;
# sox and the ALSA sample recordings for audio; python3 for the loader tests' fault server.
APT_PKGS="mesa-vulkan-drivers libvulkan1 chromium chromium-driver binaryen sox alsa-utils python3"
missing=""
for p in $APT_PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown
# `./build.sh test` lints with clippy before it tests
rustup component list --installed 2>/dev/null | grep -q '^clippy' \
  || rustup component add clippy

if ! wasm-pack --version 2>/dev/null | grep -q "$WASM_PACK_VERSION"; then
  echo "setup: installing wasm-pack $WASM_PACK_VERSION"
  cargo install --quiet wasm-pack --version "$WASM_PACK_VERSION" --locked
fi
if ! wasm-bindgen --version 2>/dev/null | grep -q "$WASM_BINDGEN_VERSION"; then
  echo "setup: installing wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  # Not --locked: its lock file pins a webpki-roots release the registry may not serve.
  cargo install --quiet wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# Node.js runs the demo's server and the end-to-end test; Playwright (playwright-core, pinned in
# tests/e2e/package-lock.json) drives Debian's chromium, so it downloads no browser.
if ! command -v node >/dev/null 2>&1; then
  echo "setup: installing Node.js"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -f tests/e2e/node_modules/playwright-core/package.json ]; then
  echo "setup: installing playwright-core into tests/e2e (npm ci)"
  (cd tests/e2e && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent)
fi
