// The web app end to end in headless Chromium (Playwright, Debian's chromium on WebGPU /
// SwiftShader): the demo page loads the synthetic model from a local server, runs the codec
// loopback and checks it against the CPU codec on the same input, then runs full-duplex
// Moshi for E2E_SECONDS (10) of captured speech. The fake microphone plays real speech
// recordings (tests/golden/mimi_input.wav and the ALSA samples, built by ./build.sh test).
//   node --test tests/e2e/    (after ./build.sh has built www/pkg and www/models)
// SwiftShader emulates the GPU on the CPU, far from real time: underruns are expected and
// counted; what must hold is that no captured sample is lost and the stream stays in step.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { ROOT, serve, launchChromium, failedRequests } from "./harness.mjs";

const SPEECH = process.env.E2E_SPEECH || `${ROOT}/out/e2e-speech.wav`;
const SECONDS = Number(process.env.E2E_SECONDS || 10);
const LOOPBACK_FRAMES = Number(process.env.E2E_LOOPBACK_FRAMES || 20);
const OUT = `${ROOT}/out`;

let server, url, browser, page;
// what the demo page and the benchmark page asked for and did not get (`failedRequests`)
let missing = [];
const log = (...a) => console.log("e2e:", ...a);

before(async () => {
  for (const f of [`${ROOT}/www/pkg/moshi.js`, `${ROOT}/www/models/mimi.safetensors`, SPEECH]) {
    assert.ok(existsSync(f), `${f} is missing: run ./build.sh first`);
  }
  mkdirSync(OUT, { recursive: true });
  ({ server, url } = await serve(`${ROOT}/www`));
  browser = await launchChromium({ speech: SPEECH });
  page = await browser.newPage({ viewport: { width: 900, height: 1100 } });
  page.on("pageerror", (e) => log("page error:", e.message));
  page.on("console", (m) => m.type() === "error" && !/favicon|404/.test(m.text()) && log("console:", m.text()));
  missing = failedRequests(page);
  await page.goto(`${url}?model=synthetic&check=${LOOPBACK_FRAMES}${process.env.E2E_GREEDY ? "&greedy" : ""}`);
});

after(async () => {
  await browser?.close();
  server?.kill();
});

const app = (f, arg) => page.evaluate(f, arg);
const wait = (f, arg, timeout) => page.waitForFunction(f, arg, { timeout, polling: 250 });

async function load(mode) {
  await page.check(`input[name=mode][value=${mode}]`);
  await page.click("#load");
  const key = mode === "loopback" ? "codecLoaded" : "loaded";
  await wait((k) => window.app[k] || window.app.errors.length, key, 180_000);
  const state = await app((k) => ({ info: window.app[k], errors: window.app.errors, progress: document.getElementById("progress").value }), key);
  assert.deepEqual(state.errors, [], "loading failed");
  assert.equal(state.progress, 1, "the progress bar reached the end");
  return state.info;
}

// Run `mode` until `seconds` of audio are captured, then stop (the core finishes every
// captured frame) and return what the page and the API counted.
async function run(mode, seconds, timeout) {
  await page.check(`input[name=mode][value=${mode}]`);
  await page.click("#start");
  await wait(() => window.app.moshi?.stats()?.captured > 0 || window.app.errors.length, null, 60_000);
  await wait((t) => {
    const s = window.app.moshi.stats();
    return s.captured / s.sampleRate >= t;
  }, seconds, timeout);
  const t0 = Date.now();
  await page.click("#stop");
  await wait(() => !window.app.running, null, timeout);
  log(`${mode}: the core caught up ${((Date.now() - t0) / 1000).toFixed(0)} s after the capture stopped`);
  const r = await app(() => ({ last: window.app.last, summary: window.app.summary(), frames: window.app.frames, textEvents: window.app.textEvents, transcript: window.app.transcript, errors: window.app.errors }));
  assert.deepEqual(r.errors, [], `${mode}: errors on the page`);
  return r;
}

// The invariants of the audio path, for either mode.
function checkAudioPath(mode, r, yieldsFrom) {
  const { worklet: w, core: c } = r.last;
  const rate = w.sampleRate;
  log(`${mode}: worklet`, JSON.stringify(w));
  log(`${mode}: core`, JSON.stringify(c));
  const s = r.summary;
  // Warm-up is the first 0.5 s of playback (the worklet notes the underruns until then).
  const afterWarm = w.warmUnderruns >= 0 ? w.underruns - w.warmUnderruns : 0;
  log(`${mode}: ${c.frames} frames, frame time p50 ${s.p50.toFixed(0)} ms p95 ${s.p95.toFixed(0)} ms, ${s.over80} over 80 ms; ` +
    `underruns ${w.underruns} (${afterWarm} after warm-up), overruns ${w.overruns}, played ${(w.played / rate).toFixed(2)} s, jitter margin ${w.targetMs} ms`);
  // Every captured sample reached the core, and every whole 24 kHz frame went through it.
  assert.equal(w.captureDropped, 0, "the input ring dropped captured samples");
  assert.equal(c.popped, w.captured, "the core took every captured sample");
  const want24k = (w.captured * 24000) / rate;
  assert.ok(Math.abs(c.resampled - want24k) <= 40, `resampled ${c.resampled}, expected about ${want24k.toFixed(0)}`);
  assert.equal(c.frames, Math.floor(c.resampled / 1920), "every whole frame reached the core");
  // One output frame per frame from the one the model first yields.
  assert.equal(c.outputFrames, c.frames - yieldsFrom, "output frames");
  const wantOut = (c.outputFrames * 1920 * rate) / 24000;
  assert.ok(Math.abs(c.outputSamples + c.outputDropped - wantOut) <= 80, `output ${c.outputSamples} samples for ${c.outputFrames} frames`);
  // Audio came out of the worklet, and no more than the core made.
  assert.ok(w.played > 0 && w.audible > 0, "nothing audible came out of the worklet");
  assert.ok(w.played + w.dropped <= c.outputSamples, "the worklet played more than the core made");
  // Each render quantum either played samples or silence.
  assert.equal(w.played + w.silence, w.quanta * 128, "every output sample is either played or silence");
  // The page's own stats: a frame event per frame, in order, with sane times.
  assert.equal(r.frames.length, c.frames, "frame events");
  r.frames.forEach((f, i) => {
    assert.equal(f.frame, i, "frame index");
    assert.ok(f.encodeMs > 0 && f.stepMs > 0 && f.totalMs >= f.encodeMs + f.stepMs - 1 && f.lagMs >= 0, `frame ${i} times ${JSON.stringify(f)}`);
  });
  assert.equal(s.frames, c.frames);
  assert.ok(s.p50 > 0 && s.p95 >= s.p50 && s.over80 <= s.frames, `summary ${JSON.stringify(s)}`);
  assert.ok(afterWarm >= 0 && w.underruns <= w.quanta, "underrun count");
  assert.ok(w.warmUnderruns >= 0 || w.played < 0.5 * rate, "warm-up noted once 0.5 s played");
  // Slower than real time, the buffer must have run dry and rebuffered with a larger margin.
  if (s.p50 > 80 * 1.5 && w.played > 0.5 * rate) assert.ok(afterWarm > 0 && w.targetMs > 10, "a core slower than real time must show underruns");
}

const snr = (x, ref) => {
  let e = 0, p = 0;
  for (let i = 0; i < ref.length; i++) {
    e += (x[i] - ref[i]) ** 2;
    p += ref[i] ** 2;
  }
  return 10 * Math.log10(p / Math.max(e, 1e-30));
};

test("codec loopback: microphone -> Mimi on WebGPU -> speakers, equal to the CPU codec", async () => {
  const info = await load("loopback");
  log("codec on", JSON.stringify(info));
  const r = await run("loopback", (LOOPBACK_FRAMES * 1920) / 24000 + 0.2, 1_200_000);
  checkAudioPath("loopback", r, 0);
  const cmp = await app(async () => {
    const c = await window.app.moshi.cpuCheck();
    return { frames: c.frames, n: c.gpuCodes.length, input: Array.from(c.input), gpuCodes: Array.from(c.gpuCodes), cpuCodes: Array.from(c.cpuCodes), gpuPcm: Array.from(c.gpuPcm), cpuPcm: Array.from(c.cpuPcm) };
  });
  assert.equal(cmp.frames, LOOPBACK_FRAMES);
  assert.equal(cmp.n, LOOPBACK_FRAMES * info.numCodebooks);
  const rms = Math.sqrt(cmp.input.reduce((a, v) => a + v * v, 0) / cmp.input.length);
  assert.ok(rms > 1e-3, `the recorded input is silent (rms ${rms})`);
  const k = info.numCodebooks;
  const equal = cmp.gpuCodes.filter((c, i) => c === cmp.cpuCodes[i]).length;
  const firstEqual = cmp.gpuCodes.filter((c, i) => i % k === 0 && c === cmp.cpuCodes[i]).length;
  const distinct = new Set(cmp.gpuCodes.filter((_, i) => i % k === 0)).size;
  const db = snr(cmp.gpuPcm, cmp.cpuPcm);
  log(`loopback vs CPU codec: ${equal}/${cmp.n} codes equal, first codebook ${firstEqual}/${LOOPBACK_FRAMES}, ${distinct} distinct first codes, decoded SNR ${db.toFixed(1)} dB`);
  assert.ok(distinct > 1, "the codes do not change with the input");
  assert.ok(equal >= 0.99 * cmp.n && firstEqual === LOOPBACK_FRAMES, "GPU codes differ from the CPU codec's");
  assert.ok(db >= 40, `decoded PCM only ${db.toFixed(1)} dB from the CPU codec's`);
});

test(`full duplex Moshi for ${SECONDS} s of speech on the synthetic model`, async () => {
  const info = await load("moshi");
  log("moshi on", JSON.stringify(info));
  const r = await run("moshi", SECONDS, 3_000_000);
  checkAudioPath("moshi", r, 1);
  const c = r.last.core;
  assert.ok(r.last.worklet.captured / r.last.worklet.sampleRate >= SECONDS, "captured less than asked");
  assert.ok(r.textEvents > 0, "no text events");
  assert.equal(r.textEvents, c.outputFrames, "a text event per output frame");
  assert.equal(c.textEvents, c.outputFrames);
  log(`moshi: ${r.textEvents} text events, transcript ${JSON.stringify(r.transcript.slice(0, 80))}`);
  await page.screenshot({ path: `${OUT}/e2e-web-app.png`, fullPage: true });
  log(`screenshot: ${OUT}/e2e-web-app.png`);
});

// The benchmark page (www/bench.html) runs every stage on the synthetic model and reports
// the native `--json` fields; a handful of frames, for its wiring, not for its times.
test("the benchmark page reports every stage for a few frames", async () => {
  const frames = 2;
  const bench = await browser.newPage();
  bench.on("pageerror", (e) => log("bench page error:", e.message));
  const benchMissing = failedRequests(bench);
  const t0 = Date.now();
  await bench.goto(`${url}bench.html?frames=${frames}&warmup=0&replays=0&bandwidth=0`);
  await bench.waitForFunction(() => window.benchDone, null, { timeout: 300_000, polling: 250 });
  const r = await bench.evaluate(() => window.benchResult);
  await bench.close();
  missing.push(...benchMissing);
  log(`bench page: ${((Date.now() - t0) / 1000).toFixed(0)} s, adapter ${JSON.stringify(r.adapter)}, stages ${JSON.stringify(Object.fromEntries(Object.entries(r.stages).map(([k, s]) => [k, +s.p50.toFixed(1)])))}`);
  assert.equal(r.error, null, "the benchmark failed");
  assert.equal(typeof r.adapter, "string");
  for (const k of ["mimi_encode", "mimi_decode", "mimi_encode_decode", "lm_step", "lm_cpu", "temporal", "depformer", "full_duplex_frame"]) {
    const s = r.stages[k];
    assert.ok(s && s.p50 > 0 && s.p50 <= s.p95 && s.p95 <= s.p99 && s.over_80ms <= frames, `${k}: ${JSON.stringify(s)}`);
  }
  assert.equal(r.mimi.frames, frames);
  assert.equal(r.lm.frames, frames);
  assert.ok(r.mimi.dispatches_per_frame.encode > 0 && r.mimi.submits_per_frame.decode > 0, "Mimi's dispatches and submits");
  assert.equal(r.lm.dispatches_per_frame.total, r.lm.dispatches_per_frame.temporal + r.lm.dispatches_per_frame.depformer);
  assert.ok(r.lm.gpu_bytes.total > r.lm.gpu_bytes.q8_linears && r.lm.achieved_gbs > 0, "GPU bytes and bandwidth");
  // The whole step includes its CPU part; the full-duplex frame includes its encode.
  assert.ok(r.stages.lm_step.p50 >= r.stages.lm_cpu.p50, "step vs its CPU part");
  assert.ok(r.lm.full_duplex_frame_ms.p50 >= r.lm.full_duplex_encode_ms.p50, "frame vs its encode");
});

// Run last: every file the two pages asked for was there (a missing script, worklet, model or
// config would otherwise show only as a console line).
test("the pages asked for nothing that is missing", () => {
  assert.deepEqual(missing, [], "requests without a response or with an HTTP error status");
});
