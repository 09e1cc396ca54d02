// A lost GPU device in the web app, in headless Chromium (Playwright, WebGPU on SwiftShader):
// a codec-loopback session of the demo page is running when its WebGPU device is destroyed
// (Moshi.loseDevice, a test hook, as a driver reset or the browser reclaiming the GPU would).
// The page must say so and offer a reload (no error, no crash); the reload opens a new device
// on a new adapter and reads the weights back from the Cache API, none from the network,
// without reloading the page; a new session then runs frames and plays audio again.
//   node --test tests/e2e/device_loss.test.mjs    (after ./build.sh has built www/)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { ROOT, serve, launchChromium } from "./harness.mjs";

const SPEECH = process.env.E2E_SPEECH || `${ROOT}/out/e2e-speech.wav`;

let server, browser, page;
const log = (...a) => console.log("device loss:", ...a);
const app = (f, arg) => page.evaluate(f, arg);
const wait = async (f, arg, timeout) => {
  try {
    return await page.waitForFunction(f, arg, { timeout, polling: 100 });
  } catch (e) {
    const state = await app(() => ({ status: document.querySelector("#status").textContent, running: window.app.running, frames: window.app.frames.length, stats: window.app.moshi?.stats(), errors: window.app.errors }));
    throw new Error(`${e.message}; the page: ${JSON.stringify(state)}`);
  }
};

before(async () => {
  for (const f of [`${ROOT}/www/pkg/moshi.js`, `${ROOT}/www/models/mimi.safetensors`, SPEECH]) {
    assert.ok(existsSync(f), `${f} is missing: run ./build.sh first`);
  }
  let url;
  ({ server, url } = await serve(`${ROOT}/www`));
  browser = await launchChromium({ speech: SPEECH });
  page = await (await browser.newContext()).newPage();
  page.on("pageerror", (e) => log("page error:", e.message));
  await page.goto(`${url}?model=synthetic`);
  // A fresh profile: nothing cached before the first load.
  assert.deepEqual(await app(async () => (await caches.keys()).length), 0);
});

after(async () => {
  await browser?.close();
  server?.kill();
});

test("the device lost mid-session: the page offers a reload, which reads the cache and runs again", async () => {
  await page.check("input[name=mode][value=loopback]");
  await page.click("#load");
  await wait(() => window.app.codecLoaded || window.app.errors.length, null, 300_000);
  assert.deepEqual(await app(() => window.app.errors), [], "loading failed");
  await page.click("#start");
  await wait(() => window.app.frames.length >= 3 || window.app.errors.length, null, 120_000);
  const before = await app(() => ({ frames: window.app.frames.length, played: window.app.moshi.stats().played }));
  assert.ok(before.played > 0, "no audio played before the loss");

  await app(() => window.app.moshi.loseDevice());
  await wait(() => (window.app.deviceLost.length && !window.app.running) || window.app.errors.length, null, 60_000);
  const lost = await app(() => ({
    messages: window.app.deviceLost,
    errors: window.app.errors,
    reloadShown: !document.querySelector("#reload").hidden,
    startDisabled: document.querySelector("#start").disabled,
    status: document.querySelector("#status").textContent,
  }));
  log(`lost after ${before.frames} frames: ${lost.messages[0]}; status: ${lost.status}`);
  assert.deepEqual(lost.errors, [], "the loss is reported as a device loss, not as errors");
  assert.equal(lost.messages.length, 1, "one devicelost event");
  assert.match(lost.messages[0], /GPU device lost/);
  assert.ok(lost.reloadShown, "the page offers a reload");
  assert.ok(lost.startDisabled, "nothing to start on a lost device");

  await page.click("#reload");
  await wait(() => window.app.reloads.length || window.app.errors.length, null, 300_000);
  const r = await app(() => ({ reload: window.app.reloads[0], errors: window.app.errors, adapter: window.app.codecLoaded?.adapter, hidden: document.querySelector("#reload").hidden }));
  log(`reloaded on "${r.adapter}": ${JSON.stringify(r.reload)}`);
  assert.deepEqual(r.errors, [], "reloading failed");
  assert.ok(r.hidden, "the reload button goes once reloaded");
  assert.ok(r.reload.mimi.loaded > 1e6, "the codec's weights were read");
  assert.equal(r.reload.mimi.fromCache, r.reload.mimi.loaded, "every byte of the reload came from the Cache API");

  await page.click("#start");
  await wait(() => window.app.frames.length >= 3 || window.app.errors.length, null, 120_000);
  await wait(() => window.app.moshi.stats().played > 0 || window.app.errors.length, null, 60_000);
  const after = await app(() => ({ frames: window.app.frames.length, played: window.app.moshi.stats().played, errors: window.app.errors }));
  log(`after the reload: ${after.frames} frames, ${after.played} samples played`);
  assert.deepEqual(after.errors, []);
  // Stop, dropping the backlog a CPU-emulated GPU leaves behind.
  await page.click("#stop");
  await page.click("#drop");
  await wait(() => !window.app.running, null, 120_000);
});
