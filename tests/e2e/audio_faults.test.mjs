// Audio faults in the web app, in headless Chromium (Playwright, WebGPU on SwiftShader): one
// codec-loopback session of the demo page (microphone -> Mimi encode -> decode -> speakers, the
// same frame loop as Moshi's, and the cheapest on a CPU-emulated GPU) goes through, in order,
//   1. a Worker that stalls for 500 ms (Moshi.stallWorker, a test hook), while playing,
//   2. its AudioContext suspended for 1 s and resumed,
//   3. the tab put in the background for 12 s (another tab brought to the front, and the
//      hidden state emulated: headless Chromium never hides a page),
//   4. the microphone's track stopped: capture ends with a `micended` event and the session
//      stops by itself (a `stopped` event with the counts); the backlog is dropped (see below).
// After each fault the session must go on: the audio thread keeps running, frames keep coming.
// At the end the streams must be in step: every 24 kHz frame the core took came out as exactly
// one output frame, in order, none missing, nothing captured was lost before the core, and
// every output sample was either played or counted as silence.
//   node --test tests/e2e/audio_faults.test.mjs    (after ./build.sh has built www/)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { ROOT, serve, launchChromium } from "./harness.mjs";

const SPEECH = process.env.E2E_SPEECH || `${ROOT}/out/e2e-speech.wav`;

let server, browser, context, page;
const log = (...a) => console.log("faults:", ...a);
const app = (f, arg) => page.evaluate(f, arg);
const wait = (f, arg, timeout) => page.waitForFunction(f, arg, { timeout, polling: 100 });
const stats = () => app(() => ({ ...window.app.moshi.stats(), frames: window.app.frames.length, errors: window.app.errors.length }));
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const sec = (s, n) => (n / s.sampleRate).toFixed(2);

before(async () => {
  for (const f of [`${ROOT}/www/pkg/moshi.js`, `${ROOT}/www/models/mimi.safetensors`, SPEECH]) {
    assert.ok(existsSync(f), `${f} is missing: run ./build.sh first`);
  }
  let url;
  ({ server, url } = await serve(`${ROOT}/www`));
  browser = await launchChromium({ speech: SPEECH });
  context = await browser.newContext({ viewport: { width: 900, height: 1100 } });
  page = await context.newPage();
  page.on("pageerror", (e) => log("page error:", e.message));
  page.on("console", (m) => m.type() === "error" && !/favicon|404/.test(m.text()) && log("console:", m.text()));
  await page.goto(`${url}?model=synthetic`);
  await page.check("input[name=mode][value=loopback]");
  await page.click("#load");
  await wait(() => window.app.codecLoaded || window.app.errors.length, null, 300_000);
  assert.deepEqual(await app(() => window.app.errors), [], "loading failed");
  await page.click("#start");
  await wait(() => window.app.moshi?.stats()?.captured > 0 || window.app.errors.length, null, 60_000);
  assert.deepEqual(await app(() => window.app.errors), [], "start failed");
});

after(async () => {
  await browser?.close();
  server?.kill();
});

// The audio thread ran over a wall-clock interval: render quanta for at least 70% of it
// (headless Chromium's fake audio device renders in real time, loosely on a loaded machine).
function ranFor(a, b, ms, what) {
  const want = (ms / 1000) * a.sampleRate / 128;
  assert.ok(b.quanta - a.quanta >= 0.7 * want, `${what}: ${b.quanta - a.quanta} render quanta in ${ms.toFixed(0)} ms, expected about ${want.toFixed(0)}`);
  assert.ok(b.captured - a.captured >= 0.7 * want * 128, `${what}: capture did not go on`);
}

// After a fault: the session goes on, frames keep coming and audio keeps playing.
async function resumes(what) {
  const s = await stats();
  await wait((n) => window.app.frames.length >= n + 2 || window.app.errors.length, s.frames, 120_000);
  await wait((p) => window.app.moshi.stats().played > p || window.app.errors.length, s.played, 120_000);
  const t = await stats();
  assert.equal(t.errors, 0, `${what}: errors on the page`);
  log(`${what}: resumed, frames ${s.frames} -> ${t.frames}, played ${sec(s, s.played)} -> ${sec(t, t.played)} s`);
}

test("a Worker stalled for 500 ms while playing: the worklet plays silence, counts an underrun, the session resumes", async () => {
  // Wait until the worklet is playing with some output buffered, then stall the Worker at once.
  const r = await app(async () => {
    const m = window.app.moshi;
    let prev = m.stats();
    for (const until = performance.now() + 120_000; performance.now() < until; ) {
      await new Promise((ok) => setTimeout(ok, 4));
      const s = m.stats();
      const playing = s.played > prev.played && s.buffered >= s.sampleRate * 0.04;
      prev = s;
      if (!playing) continue;
      const t0 = performance.now();
      const stall = await m.stallWorker(500);
      const wallMs = performance.now() - t0;
      return { s0: s, s1: m.stats(), stall, wallMs, frameEventsAt0: window.app.frames.length };
    }
    return null;
  });
  assert.ok(r, "the worklet never played");
  const { s0, s1, stall, wallMs } = r;
  log(`stall: ${stall.stalledMs.toFixed(0)} ms in the Worker (${wallMs.toFixed(0)} ms on the page) at frame ${stall.frames}, ` +
    `buffered ${sec(s0, s0.buffered)} s; underruns ${s0.underruns} -> ${s1.underruns}, played +${sec(s0, s1.played - s0.played)} s, ` +
    `silence +${sec(s0, s1.silence - s0.silence)} s, quanta +${s1.quanta - s0.quanta}, jitter margin ${s0.targetMs} -> ${s1.targetMs} ms`);
  assert.ok(stall.stalledMs >= 500 && wallMs >= 500, "the Worker stalled for 500 ms");
  ranFor(s0, s1, wallMs, "stall");
  // Nothing came from the core meanwhile: the worklet played out at most what was buffered
  // (plus a frame finished as the stall began), ran dry, counted it and played silence.
  const frameSamples = (1920 * s0.sampleRate) / 24000;
  assert.ok(s1.played - s0.played <= s0.buffered + 2 * frameSamples, "played more than the core had given");
  assert.ok(s1.underruns > s0.underruns, "the stall's underrun was not counted");
  assert.ok(s1.targetMs >= Math.min(80, s0.targetMs + 5), "the jitter margin did not grow");
  assert.ok(s1.silence - s0.silence >= (0.5 - 0.05) * s0.sampleRate - s0.buffered - 2 * frameSamples, "no silence during the stall");
  assert.equal(s1.captureDropped, 0);
  await resumes("stall");
});

test("an AudioContext suspended for 1.1 s and resumed: audio stops and goes on, the session with it", async () => {
  const r = await app(async () => {
    const m = window.app.moshi, ctx = window.app.ctx;
    const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
    await ctx.suspend();
    const state = ctx.state;
    await sleep(100); // a render quantum under way when it suspended
    const s0 = m.stats();
    await sleep(1000);
    const s1 = m.stats();
    await ctx.resume();
    const t0 = performance.now(), s2 = m.stats();
    await sleep(1500);
    return { state, after: ctx.state, s0, s1, s2, s3: m.stats(), ms: performance.now() - t0 };
  });
  const { s0, s1, s2, s3 } = r;
  log(`suspend: ${r.state}, quanta +${s1.quanta - s0.quanta} while suspended; ${r.after}, quanta +${s3.quanta - s2.quanta} in ${r.ms.toFixed(0)} ms after; ` +
    `underruns ${s0.underruns} -> ${s3.underruns}, overruns ${s0.overruns} -> ${s3.overruns}`);
  assert.equal(r.state, "suspended");
  assert.equal(s1.quanta, s0.quanta, "the worklet ran while suspended");
  assert.equal(s1.captured, s0.captured, "captured while suspended");
  assert.equal(r.after, "running");
  ranFor(s2, s3, r.ms, "resume");
  await resumes("suspend");
});

// Headless Chromium never hides a page (measured: bringing another page to the front, a
// window.open tab or a minimised window all leave visibilityState "visible", timers at full
// rate, and CDP's Page.setWebLifecycleState("frozen") does nothing to a visible page). So the
// test brings another page to the front and also emulates what a background tab gets in
// Chrome: visibilityState "hidden" with a visibilitychange event, the page's timers woken at
// most once a second, no animation frames. (A page playing audio is exempt from intensive
// throttling; Workers and the AudioWorklet are not throttled.)
// Long enough for frames on SwiftShader, where a loopback frame takes 2 to 3 s on a quiet
// machine: a window of 3 s held one at most, and one of 6 s none in a CI run on this 2-core
// machine whose browser tests ran a fifth slower than the run before.
const BACKGROUND_MS = 12000;
test("the tab in the background for 12 s: capture, playback and frames go on", async () => {
  const other = await context.newPage();
  await other.goto("about:blank");
  await other.bringToFront();
  const r = await app(async (backgroundMs) => {
    const m = window.app.moshi;
    const real = { setTimeout: window.setTimeout.bind(window), setInterval: window.setInterval.bind(window), raf: window.requestAnimationFrame.bind(window) };
    const rafs = [];
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "hidden" });
    Object.defineProperty(document, "hidden", { configurable: true, get: () => true });
    window.setTimeout = (f, ms = 0, ...a) => real.setTimeout(f, Math.max(ms, 1000 - (performance.now() % 1000)), ...a);
    window.setInterval = (f, ms = 0, ...a) => real.setInterval(f, Math.max(ms, 1000), ...a);
    window.requestAnimationFrame = (f) => rafs.push(f);
    document.dispatchEvent(new Event("visibilitychange"));
    const s0 = m.stats(), f0 = window.app.frames.length, t0 = performance.now();
    let ticks = 0;
    const timer = setInterval(() => ticks++, 100);
    await new Promise((ok) => real.setTimeout(ok, backgroundMs));
    clearInterval(timer);
    const out = { hidden: document.visibilityState, s0, s1: m.stats(), ms: performance.now() - t0, frames: window.app.frames.length - f0, ticks };
    delete document.visibilityState;
    delete document.hidden;
    Object.assign(window, { setTimeout: real.setTimeout, setInterval: real.setInterval, requestAnimationFrame: real.raf });
    document.dispatchEvent(new Event("visibilitychange"));
    rafs.forEach((f) => real.raf(f));
    out.visible = document.visibilityState;
    return out;
  }, BACKGROUND_MS);
  await page.bringToFront();
  await other.close();
  const { s0, s1 } = r;
  log(`background: the page was ${r.hidden} (then ${r.visible}); in ${r.ms.toFixed(0)} ms, ${r.ticks} ticks of a 100 ms timer, quanta +${s1.quanta - s0.quanta}, ` +
    `captured +${sec(s0, s1.captured - s0.captured)} s, played +${sec(s0, s1.played - s0.played)} s, ${r.frames} frames, underruns ${s0.underruns} -> ${s1.underruns}`);
  assert.equal(r.hidden, "hidden");
  assert.ok(r.ticks <= BACKGROUND_MS / 1000 + 1, "the page's timers were not throttled");
  ranFor(s0, s1, r.ms, "background");
  assert.ok(r.frames >= 1, "no frame went through the core in the background");
  await resumes("background");
});

// The backlog: on SwiftShader the core runs about 30 times slower than real time, so
// finishing every frame captured in the test (20 s) takes over ten minutes. By default the
// test drops it once the microphone has ended (Moshi.dropBacklog, the stop's documented
// policy) and checks that the frames the core did take stayed in step; E2E_FAULTS_FINISH=1
// finishes every frame and checks that every captured sample went through the core.
const FINISH = !!process.env.E2E_FAULTS_FINISH;

test("the microphone stops: capture ends with micended, the session stops by itself, in step", async () => {
  const s0 = await stats();
  await app(() => window.app.micStream.getAudioTracks().forEach((t) => t.stop()));
  await wait(() => window.app.micEnded > 0, null, 5_000);
  const t0 = Date.now();
  if (!FINISH) await app(() => window.app.moshi.dropBacklog());
  await wait(() => !window.app.running || window.app.errors.length, null, 1_800_000);
  const r = await app(() => ({ last: window.app.last, frames: window.app.frames, errors: window.app.errors, status: document.getElementById("status").textContent }));
  assert.deepEqual(r.errors, [], "errors on the page");
  const { worklet: w, core: c } = r.last;
  const rate = w.sampleRate;
  log(`microphone stopped after ${sec(s0, s0.captured)} s captured; the session stopped ${((Date.now() - t0) / 1000).toFixed(0)} s later ` +
    `after ${c.frames} frames (${FINISH ? "every frame finished" : "the backlog dropped"})`);
  log("worklet", JSON.stringify(w));
  log("core", JSON.stringify(c));
  assert.match(r.status, /microphone ended/);
  assert.ok(w.captured - s0.captured < rate * 0.5, "capture went on after the microphone stopped");
  // In step: the core's input frames and its output frames are equal, in order, none
  // missing; every output sample was played or counted as silence; nothing captured was
  // dropped before the core (with FINISH: every captured sample went through it).
  assert.equal(w.captureDropped, 0, "the input ring dropped captured samples");
  assert.ok(c.popped <= w.captured && c.popped > 0, "the core took more than was captured");
  const want24k = (c.popped * 24000) / rate;
  assert.ok(Math.abs(c.resampled - want24k) <= 40, `resampled ${c.resampled}, expected about ${want24k.toFixed(0)}`);
  if (FINISH) {
    assert.equal(c.popped, w.captured, "the core took every captured sample");
    assert.equal(c.frames, Math.floor(c.resampled / 1920), "every whole frame reached the core");
  } else {
    assert.ok(c.frames <= Math.floor(c.resampled / 1920), "more frames than input");
    assert.ok(c.frames < (w.captured * 24000) / rate / 1920, "nothing was dropped");
  }
  assert.equal(c.outputFrames, c.frames, "one output frame per input frame");
  assert.ok(Math.abs(c.outputSamples + c.outputDropped - (c.outputFrames * 1920 * rate) / 24000) <= 80, "output samples per frame");
  assert.equal(r.frames.length, c.frames, "frame events");
  r.frames.forEach((f, i) => assert.equal(f.frame, i, "frame events in order, none missing"));
  assert.equal(w.played + w.silence, w.quanta * 128, "every output sample is either played or silence");
  assert.ok(w.played + w.dropped <= c.outputSamples, "the worklet played more than the core made");
  assert.ok(w.underruns >= 1 && w.played > 0 && w.audible > 0, "audio came out");
});
