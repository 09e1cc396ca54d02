// The wasm build's LM benchmark (`benchLm`) on WebGPU through Dawn, in Node: the same loop
// as the native `inferencelayer bench-lm`, on the same synthetic Moshi 7B.
//
// usage: node scripts/bench-dawn.mjs PKG_DIR WEBGPU_DIR [FRAMES] [WARMUP] [NATIVE_JSON]
//   PKG_DIR     `wasm-pack build --release --target nodejs --out-dir PKG_DIR`
//   WEBGPU_DIR  the `webgpu` npm package (Dawn for Node: index.js, dist/<platform>/dawn.node)
//   NATIVE_JSON `bench-lm --json` output of the same frames: also prints wasm/native ratios
// Prints one JSON object; exits 1 with the error's message when the benchmark fails.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkgDir, webgpuDir, frames = '200', warmup = '10', nativeJson] = process.argv.slice(2);
if (!pkgDir || !webgpuDir) {
  console.error('usage: node scripts/bench-dawn.mjs PKG_DIR WEBGPU_DIR [FRAMES] [WARMUP] [NATIVE_JSON]');
  process.exit(2);
}
const { create, globals } = await import(pathToFileURL(resolve(webgpuDir, 'index.js')).href);
Object.assign(globalThis, globals);
// wgpu's WebGPU backend finds `navigator.gpu` through a Window or a WorkerGlobalScope.
globalThis.navigator = { gpu: create([]) };
globalThis.WorkerGlobalScope ??= class WorkerGlobalScope {};

const adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
if (!adapter) {
  console.error('Dawn: no WebGPU adapter');
  process.exit(1);
}
const info = adapter.info ?? {};
console.error(`Dawn adapter: ${info.vendor} ${info.architecture} ${info.device} ${info.description}`);

const require = createRequire(import.meta.url);
const wasm = require(resolve(pkgDir, 'inferencelayer.js'));
try {
  const r = await wasm.benchLm(Number(frames), Number(warmup), 42);
  r.dawnAdapter = { vendor: info.vendor, architecture: info.architecture, device: info.device, description: info.description };
  if (nativeJson) {
    const n = JSON.parse(readFileSync(nativeJson, 'utf8'));
    r.native = { adapter: n.adapter, stepMs: n.step_ms, cpuMs: n.cpu_encode_submit_ms };
    r.ratio = Object.fromEntries(['p50', 'p95', 'p99', 'mean'].map((k) => [k, r.stepMs[k] / n.step_ms[k]]));
  }
  console.log(JSON.stringify(r, null, 2));
  if (r.ratio) {
    console.error(`LM step p50: wasm on Dawn ${r.stepMs.p50.toFixed(2)} ms, native ${r.native.stepMs.p50.toFixed(2)} ms: ${r.ratio.p50.toFixed(2)}x`);
  }
} catch (e) {
  console.error(`benchLm failed: ${e.message ?? e}`);
  process.exit(1);
}
// Dawn's device keeps the event loop alive.
process.exit(0);
