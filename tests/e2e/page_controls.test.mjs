// The demo page's controls and the query's settings: while a load runs, Start, Reset, the
// model list and the mode are locked (a second load replaces the first model, which is freed
// as it begins); a wrong ?seed or ?limits is said at once, naming the parameter, with Load
// locked; an unknown ?model is said; a refused or missing microphone says what to do. Headless
// Chromium on WebGPU, the small synthetic model.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { ROOT, serve, launchChromium } from "./harness.mjs";

let server, browser, url;
const errors = [];

before(async () => {
  for (const f of [`${ROOT}/www/pkg/moshi.js`, `${ROOT}/www/models/mimi.safetensors`]) {
    assert.ok(existsSync(f), `${f} is missing: run ./build.sh first`);
  }
  ({ server, url } = await serve(`${ROOT}/www`));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  server?.kill();
});

async function open(query) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${url}${query}`);
  return page;
}

const controls = (page) => page.evaluate(() => {
  const d = (id) => document.getElementById(id).disabled;
  return {
    load: d("load"), start: d("start"), reset: d("reset"), model: d("model"),
    mode: [...document.querySelectorAll("input[name=mode]")].map((r) => r.disabled),
    status: document.getElementById("status").textContent, loaded: !!window.app.loaded, loading: window.app.loading,
  };
});

test("during a load the controls of the model and the session are locked, and a second load frees the first", async () => {
  const page = await open("?model=synthetic");
  await page.click("#load");
  await page.waitForFunction(() => window.app.loaded || window.app.errors.length, null, { timeout: 180_000, polling: 100 });
  let c = await controls(page);
  assert.ok(c.loaded, c.status);
  assert.deepEqual([c.start, c.reset, c.model, c.mode], [false, false, false, [false, false]], "after the load: all usable");
  await page.click("#load");
  c = await controls(page);
  assert.ok(c.loading, "the second load is under way");
  assert.deepEqual([c.load, c.start, c.reset, c.model, c.mode], [true, true, true, true, [true, true]], "during the load: locked");
  assert.equal(c.loaded, false, "the model the load replaces is not offered while it loads");
  await page.waitForFunction(() => window.app.loaded || window.app.errors.length, null, { timeout: 180_000, polling: 100 });
  c = await controls(page);
  assert.deepEqual([c.load, c.start, c.reset, c.model, c.mode], [false, false, false, false, [false, false]], `after it: usable (${c.status})`);
  // the loopback needs Mimi alone: the page says so
  await page.check("input[name=mode][value=loopback]");
  c = await controls(page);
  assert.equal(c.start, true);
  assert.match(c.status, /loopback needs Mimi alone: press Load/);
  assert.deepEqual(await page.evaluate(() => window.app.errors), []);
  await page.context().close();
});

test("a wrong ?seed or ?limits is said at once and locks Load; an unknown ?model is said", async () => {
  for (const [query, want] of [["?model=synthetic&seed=abc", /\?seed=abc must be an integer/], ["?model=synthetic&seed=-5", /\?seed=-5 must be/], ["?model=synthetic&limits=-1,NaN", /\?limits=-1,NaN must be one or two sizes/]]) {
    const page = await open(query);
    const c = await controls(page);
    assert.match(c.status, want, query);
    assert.equal(c.load, true, `${query}: Load locked`);
    await page.context().close();
  }
  const page = await open("?model=bogus");
  const c = await controls(page);
  assert.match(c.status, /\?model=bogus is not a model of this page/);
  assert.equal(await page.evaluate(() => document.getElementById("model").value), "kyutai");
  await page.context().close();
});

test("a refused or missing microphone says what to do", async () => {
  const denying = await launchChromium({ args: ["--use-fake-device-for-media-stream", "--deny-permission-prompts"] });
  try {
    for (const [b, want] of [[denying, /allow the microphone for this page/], [browser, /no microphone was found: connect one/]]) {
      const page = await (await b.newContext()).newPage();
      page.on("pageerror", (e) => errors.push(e.message));
      await page.goto(`${url}?model=synthetic`);
      await page.check("input[name=mode][value=loopback]");
      await page.click("#load");
      await page.waitForFunction(() => window.app.codecLoaded || window.app.errors.length, null, { timeout: 180_000, polling: 100 });
      await page.click("#start");
      await page.waitForFunction(() => /Could not start/.test(document.getElementById("status").textContent), null, { timeout: 60_000 });
      const c = await controls(page);
      assert.match(c.status, want);
      assert.equal(c.start, false, "Start stays usable");
      await page.context().close();
    }
  } finally {
    await denying.close();
  }
  assert.deepEqual(errors, [], "no uncaught error on the pages");
});
