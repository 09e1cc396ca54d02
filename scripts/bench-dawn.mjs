// The wasm build's benchmarks (`benchMimi`, `benchLm`: the loops of the native
// `inferencelayer bench` and `bench-lm`, src/bench.rs) on WebGPU through Dawn, in Node, and
// their ratios to the native reports of the same stages.
//
// usage: node scripts/bench-dawn.mjs PKG_DIR WEBGPU_DIR [FRAMES=200] [WARMUP=10]
//          [--mimi CKPT] [--seed 20261129] [--weights hash|fast] [--stages mimi,lm,duplex]
//          [--native-mimi JSON] [--native-lm JSON]
//   PKG_DIR       `wasm-pack build --release --target nodejs --out-dir PKG_DIR`
//   WEBGPU_DIR    the `webgpu` npm package (Dawn for Node: index.js, dist/<platform>/dawn.node)
//   --mimi        a Mimi checkpoint at the released geometry (`inferencelayer
//                 synthetic-checkpoint FILE`): Mimi's stages and the full-duplex frame
//   --seed, --weights  the synthetic LM's weights: the same bits as `bench-lm --seed S --weights W`
//   --native-*    the native `bench --json` / `bench-lm --json` of the same frames: ratios
// Prints one JSON object { dawnAdapter, mimi, lm, native, ratio } on stdout and a table of
// the stages (native p50 / p95 / p99, wasm on Dawn, wasm / native) on stderr; exits 1 with
// the error's message when a benchmark fails.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    mimi: { type: 'string' },
    seed: { type: 'string', default: '20261129' },
    weights: { type: 'string', default: 'hash' },
    stages: { type: 'string', default: 'mimi,lm,duplex' },
    'native-mimi': { type: 'string' },
    'native-lm': { type: 'string' },
  },
});
const [pkgDir, webgpuDir, frames = '200', warmup = '10'] = positionals;
if (!pkgDir || !webgpuDir) {
  console.error('usage: node scripts/bench-dawn.mjs PKG_DIR WEBGPU_DIR [FRAMES] [WARMUP] [--mimi CKPT] [--seed S] [--weights hash|fast] [--stages mimi,lm,duplex] [--native-mimi JSON] [--native-lm JSON]');
  process.exit(2);
}
const stages = new Set(opt.stages.split(','));
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
const mimi = opt.mimi ? new Uint8Array(readFileSync(opt.mimi)) : undefined;
if (!mimi && (stages.has('mimi') || stages.has('duplex'))) console.error('no --mimi checkpoint: Mimi and the full-duplex frame are skipped');
const r = { dawnAdapter: { vendor: info.vendor, architecture: info.architecture, device: info.device, description: info.description }, mimi: null, lm: null };
const t0 = performance.now();
try {
  if (mimi && stages.has('mimi')) {
    r.mimi = await wasm.benchMimi(mimi, undefined, Number(frames), Number(warmup), 0);
    console.error(`benchMimi done at ${((performance.now() - t0) / 1e3).toFixed(1)} s`);
  }
  if (stages.has('lm') || stages.has('duplex')) {
    r.lm = await wasm.benchLm(Number(frames), Number(warmup), Number(opt.seed), {
      weights: opt.weights,
      mimi: stages.has('duplex') ? mimi : undefined,
      replays: 0,
    });
    console.error(`benchLm done at ${((performance.now() - t0) / 1e3).toFixed(1)} s (weights ${r.lm.weights}, built in ${r.lm.build_weights_s.toFixed(1)} s)`);
  }
} catch (e) {
  console.error(`the wasm benchmark failed: ${e.message ?? e}`);
  console.log(JSON.stringify(r, null, 2));
  process.exit(1);
}

// Stage -> [report, key]: the same keys in the native and the wasm reports.
const STAGES = [
  ['Mimi encode', 'mimi', 'encode_ms'],
  ['Mimi decode', 'mimi', 'decode_ms'],
  ['Mimi encode + decode', 'mimi', 'encode_decode_ms'],
  ['LM step', 'lm', 'step_ms'],
  ['  CPU record + submit', 'lm', 'cpu_encode_submit_ms'],
  ['  temporal (apart)', 'lm', 'temporal_ms'],
  ['  depformer (apart)', 'lm', 'depformer_ms'],
  ['full-duplex frame', 'lm', 'full_duplex_frame_ms'],
  ['  Mimi encode', 'lm', 'full_duplex_encode_ms'],
  ['  LM step + decode', 'lm', 'full_duplex_lm_decode_ms'],
];
const native = {
  mimi: opt['native-mimi'] ? JSON.parse(readFileSync(opt['native-mimi'], 'utf8')) : null,
  lm: opt['native-lm'] ? JSON.parse(readFileSync(opt['native-lm'], 'utf8')) : null,
};
r.native = { mimiAdapter: native.mimi?.adapter ?? null, lmAdapter: native.lm?.adapter ?? null };
r.ratio = {};
const f = (x) => (typeof x === 'number' ? x.toFixed(2) : '-');
const lines = [`${'per frame, ms'.padEnd(24)}${'native p50 / p95 / p99'.padStart(26)}${'wasm on Dawn'.padStart(26)}${'wasm / native'.padStart(26)}`];
for (const [name, which, key] of STAGES) {
  const w = r[which]?.[key], n = native[which]?.[key];
  if (!w && !n) continue;
  const ratio = w && n ? Object.fromEntries(['p50', 'p95', 'p99', 'mean'].map((k) => [k, w[k] / n[k]])) : null;
  if (ratio) r.ratio[key] = ratio;
  const three = (s) => (s ? `${f(s.p50)} / ${f(s.p95)} / ${f(s.p99)}` : '-');
  lines.push(`${name.padEnd(24)}${three(n).padStart(26)}${three(w).padStart(26)}${three(ratio).padStart(26)}`);
}
if (r.lm) {
  lines.push(`dispatches per frame: LM ${r.lm.dispatches_per_frame.total} (native ${native.lm?.dispatches_per_frame?.total ?? '-'}); ` +
    `GB/s at the LM step's p50: wasm ${r.lm.achieved_gbs.toFixed(0)}, native ${native.lm ? native.lm.achieved_gbs.toFixed(0) : '-'} ` +
    `(copy: ${r.lm.copy_bandwidth_gbs?.toFixed(0) ?? '-'} on Dawn, ${native.lm?.copy_bandwidth_gbs?.toFixed(0) ?? '-'} native)`);
}
console.log(JSON.stringify(r, null, 2));
console.error(lines.join('\n'));
// Dawn's device keeps the event loop alive.
process.exit(0);
