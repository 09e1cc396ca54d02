// The benchmark page: the wasm build's `benchMimi` and `benchLm` (the native `bench` and
// `bench-lm` loops, src/bench.rs) on this browser's WebGPU, shown as a table and exposed as
// `window.benchResult` ({ adapter, mimi, lm, stages, error }; `window.benchDone` once set)
// for automation (`./build.sh bench`, scripts/bench-page.mjs).
import init, { initPanicHook, benchMimi, benchLm } from "./pkg/inferencelayer.js";

const $ = (id) => document.getElementById(id);
const q = new URLSearchParams(location.search);
const num = (k, d) => (q.has(k) ? Number(q.get(k)) : d);
const frames = num("frames", 200), warmup = num("warmup", 10), replays = num("replays", 1), seed = num("seed", 20261129);
const stages = new Set((q.get("stages") || "mimi,lm,duplex").split(","));
const result = { adapter: null, frames, warmup, mimi: null, lm: null, stages: {}, error: null };
window.benchResult = result;
window.benchDone = false;
const status = (s) => ($("status").textContent = s);

async function fetched(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}${r.status === 404 ? " (no such file: check the URL)" : ""}`);
  return r;
}
const bytes = async (url) => new Uint8Array(await (await fetched(url)).arrayBuffer());
const text = async (url) => (await fetched(url)).text();

// Stage name -> [label, stats, dispatches, submits] rows of the table.
function rows() {
  const out = [];
  const m = result.mimi, l = result.lm;
  if (m) {
    out.push(["Mimi encode", m.encode_ms, m.dispatches_per_frame.encode, m.submits_per_frame.encode]);
    out.push(["Mimi decode", m.decode_ms, m.dispatches_per_frame.decode, m.submits_per_frame.decode]);
    out.push(["Mimi encode + decode", m.encode_decode_ms, m.dispatches_per_frame.encode + m.dispatches_per_frame.decode,
      m.submits_per_frame.encode + m.submits_per_frame.decode]);
  }
  if (l) {
    out.push(["LM step (temporal + depformer)", l.step_ms, l.dispatches_per_frame.total, l.submits_per_frame]);
    out.push(["  CPU: LMGen, recording, submits", l.cpu_encode_submit_ms, "", ""]);
    out.push(["  temporal transformer *", l.temporal_ms, l.dispatches_per_frame.temporal, ""]);
    out.push(["  depformer *", l.depformer_ms, l.dispatches_per_frame.depformer, ""]);
    if (l.full_duplex_frame_ms) {
      out.push(["whole full-duplex frame", l.full_duplex_frame_ms, "", ""]);
      out.push(["  Mimi encode", l.full_duplex_encode_ms, "", ""]);
      out.push(["  LM step + Mimi decode", l.full_duplex_lm_decode_ms, "", ""]);
    }
  }
  return out;
}

const f = (x, d = 2) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(d) : "");
const size = (b) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / 2 ** 20).toFixed(2)} MiB`);

function render() {
  const t = $("results");
  t.replaceChildren();
  const head = t.insertRow();
  for (const h of ["per 80 ms frame", "frames", "p50 ms", "p95 ms", "p99 ms", "mean ms", "> 80 ms", "dispatches", "submits"]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.append(th);
  }
  for (const [name, s, d, sub] of rows()) {
    const r = t.insertRow();
    for (const v of [name, frames, f(s.p50), f(s.p95), f(s.p99), f(s.mean), s.over_80ms, d, sub]) r.insertCell().textContent = v;
  }
  const l = result.lm, lines = [];
  if (result.adapter) lines.push(`adapter: ${result.adapter}`);
  if (l) {
    const bw = l.copy_bandwidth_gbs ? `, ${((100 * l.achieved_gbs) / l.copy_bandwidth_gbs).toFixed(0)}% of a copy's ${f(l.copy_bandwidth_gbs, 0)} GB/s (${l.copy_bandwidth_by})` : "";
    lines.push(`LM: ${(l.parameters / 1e9).toFixed(3)} B parameters (${l.weights} weights), ${f(l.achieved_gbs, 1)} GB/s of Q8_0 weights at the step's p50${bw}`);
    lines.push(`GPU memory: ${size(l.gpu_bytes.total)} (Q8_0 linears ${size(l.gpu_bytes.q8_linears)}, f32 tables ${size(l.gpu_bytes.f32_tables)}, KV rings ${size(l.gpu_bytes.kv_rings)}), Mimi's streaming state ${result.mimi ? size(result.mimi.state_bytes) : "not run"}`);
    lines.push(`weights built in ${f(l.build_weights_s, 1)} s, plans in ${f(l.upload_and_plan_s, 1)} s; * recorded beforehand in the submits a frame is cut into, then submitted and waited for apart`);
  }
  if (result.error) lines.push(`error: ${result.error}`);
  $("summary").replaceChildren(...lines.flatMap((s) => [document.createTextNode(s), document.createElement("br")]));
  $("json").textContent = JSON.stringify(result, null, 2);
}

// Per-stage statistics under common names, for scripts comparing runs.
function collect() {
  const m = result.mimi, l = result.lm, s = result.stages;
  if (m) Object.assign(s, { mimi_encode: m.encode_ms, mimi_decode: m.decode_ms, mimi_encode_decode: m.encode_decode_ms });
  if (l) {
    Object.assign(s, { lm_step: l.step_ms, lm_cpu: l.cpu_encode_submit_ms, temporal: l.temporal_ms, depformer: l.depformer_ms });
    if (l.full_duplex_frame_ms) s.full_duplex_frame = l.full_duplex_frame_ms;
  }
}

async function run() {
  await init();
  initPanicHook();
  if (!navigator.gpu) throw new Error("this browser has no WebGPU (navigator.gpu)");
  const mimiUrl = q.get("mimi") || "models/mimi.safetensors";
  const mimiConfigUrl = q.get("mimiConfig") || (q.has("mimi") ? null : "models/mimi.json");
  const lmConfigUrl = q.get("lmConfig") || (q.has("lm") ? null : "models/moshi.json");
  const mimiConfig = mimiConfigUrl && mimiConfigUrl !== "released" ? await text(mimiConfigUrl) : undefined;
  const lmConfig = lmConfigUrl && lmConfigUrl !== "moshi7b" ? await text(lmConfigUrl) : undefined;
  const mimi = stages.has("mimi") || stages.has("duplex") ? await bytes(mimiUrl) : undefined;
  if (stages.has("mimi")) {
    status(`Mimi: ${warmup} + ${frames} frames`);
    result.mimi = await benchMimi(mimi, mimiConfig, frames, warmup, replays);
    result.adapter = result.mimi.adapter;
    collect();
    render();
  }
  if (stages.has("lm") || stages.has("duplex")) {
    status(`LM${stages.has("duplex") ? " and the full-duplex frame" : ""}: ${warmup} + ${frames} frames`);
    result.lm = await benchLm(frames, warmup, seed, {
      config: lmConfig,
      lmUrl: q.get("lm") || undefined,
      weights: q.get("weights") || "hash",
      mimi: stages.has("duplex") ? mimi : undefined,
      mimiConfig,
      replays,
      bandwidth: q.get("bandwidth") !== "0",
      greedy: q.has("greedy"),
    });
    result.adapter = result.lm.adapter;
    collect();
  }
}

run()
  .then(() => status("done"))
  .catch((e) => {
    result.error = String(e?.message ?? e);
    status(`failed: ${result.error}`);
  })
  .finally(() => {
    render();
    window.benchDone = true;
  });
