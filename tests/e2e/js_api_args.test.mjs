// The JavaScript API's entry points given malformed arguments (wrong types, NaN, negative
// sizes, wrong-length frames, missing options, bad URLs, calls after dispose or before
// load): each must reject (or throw) with a TypeError, RangeError or Error that names the
// method, before the worker sees a message. Runs in Node with a stand-in Worker that
// answers every message, so no browser, wasm or GPU is needed; the real worker's own
// refusals are the native corpus's (tests/malformed.rs) and the browser tests'.
import { test } from "node:test";
import assert from "node:assert/strict";

// The stand-in Worker: records what it is sent, answers `load` with a codec's info.
const posted = [];
globalThis.Worker = class {
  constructor(url) {
    this.url = url;
  }
  postMessage(m) {
    posted.push(m);
    if (!m.id) return;
    const value = m.type === "load" ? { adapter: "stand-in", frameSize: 1920, numCodebooks: 8 } : m.type === "encode" ? new Uint32Array(8) : m.type === "decode" ? new Float32Array(1920) : null;
    queueMicrotask(() => this.onmessage?.({ data: { id: m.id, ok: true, value } }));
  }
};
globalThis.location = { href: "http://localhost:8000/app/" };

const { Moshi, MimiCodec } = await import("../../js/moshi.js");

const WRONG = [null, 0, 1.5, NaN, -1, true, "", [], {}, () => {}, Symbol("s"), 10n];
const counts = {};

/** `call()` must reject with an Error of `kind` whose message names `where`, and post nothing. */
async function refuses(entry, name, where, call, kind = Error) {
  counts[entry] = (counts[entry] || 0) + 1;
  const before = posted.length;
  let err;
  try {
    await call();
  } catch (e) {
    err = e;
  }
  assert.ok(err, `${entry} / ${name}: accepted`);
  assert.ok(err instanceof kind, `${entry} / ${name}: ${err?.constructor?.name} ${err?.message}, expected a ${kind.name}`);
  assert.ok(String(err.message).includes(where), `${entry} / ${name}: "${err.message}" should name ${where}`);
  assert.equal(posted.length, before, `${entry} / ${name}: the worker got a message`);
}

const show = (v) => (typeof v === "symbol" || typeof v === "bigint" ? String(v) : typeof v === "function" ? "a function" : JSON.stringify(v) ?? String(v));

test("malformed arguments at every entry point are refused, naming the method and the argument", async () => {
  const good = { mimi: "models/mimi.safetensors", lm: "models/moshi.safetensors" };
  const sources = [...WRONG.filter((v) => v !== null && v !== ""), "   ", "http://[::1", "ftp://example.com/m.safetensors", "javascript:alert(1)", "file:///etc/passwd", new Blob([])];
  const configs = [0, true, [], "not json", "[1, 2]", "42", "null", () => {}, 10n];
  const m = new Moshi();

  // Moshi.load
  for (const o of [null, 1, "x", [], true]) await refuses("Moshi.load", `options ${show(o)}`, "Moshi.load", () => m.load(o), TypeError);
  await refuses("Moshi.load", "no options", "`mimi` is required", () => m.load());
  await refuses("Moshi.load", "no lm", "`lm` is required", () => m.load({ mimi: good.mimi }));
  await refuses("Moshi.load", "no mimi", "`mimi` is required", () => m.load({ lm: good.lm }));
  for (const key of ["mimi", "lm", "tokenizer"]) {
    for (const v of sources) await refuses("Moshi.load", `${key} = ${show(v)}`, `\`${key}\``, () => m.load({ ...good, [key]: v }));
  }
  for (const key of ["mimiConfig", "lmConfig"]) {
    for (const v of configs) await refuses("Moshi.load", `${key} = ${show(v)}`, `\`${key}\``, () => m.load({ ...good, [key]: v }), TypeError);
  }
  for (const v of [NaN, -1, 1.5, 2 ** 32, Infinity, "7", null, true, 10n]) {
    await refuses("Moshi.load", `seed = ${show(v)}`, "`seed`", () => m.load({ ...good, seed: v }), RangeError);
  }
  for (const v of [0, 1, "true", null, NaN]) await refuses("Moshi.load", `greedy = ${show(v)}`, "`greedy`", () => m.load({ ...good, greedy: v }), TypeError);
  for (const v of [1, "f", {}, true]) await refuses("Moshi.load", `onProgress = ${show(v)}`, "`onProgress`", () => m.load({ ...good, onProgress: v }), TypeError);
  for (const v of [1, "s", {}, { aborted: false }, true]) await refuses("Moshi.load", `signal = ${show(v)}`, "`signal`", () => m.load({ ...good, signal: v }), TypeError);

  // Moshi.loadCodec
  await refuses("Moshi.loadCodec", "no options", "`mimi` is required", () => m.loadCodec());
  for (const v of sources) await refuses("Moshi.loadCodec", `mimi = ${show(v)}`, "`mimi`", () => m.loadCodec({ mimi: v }));
  for (const v of configs) await refuses("Moshi.loadCodec", `mimiConfig = ${show(v)}`, "`mimiConfig`", () => m.loadCodec({ mimi: good.mimi, mimiConfig: v }), TypeError);
  for (const v of [1, "yes", null]) await refuses("Moshi.loadCodec", `keepForCheck = ${show(v)}`, "`keepForCheck`", () => m.loadCodec({ mimi: good.mimi, keepForCheck: v }), TypeError);

  // before load
  for (const method of ["reset", "dropBacklog", "cpuCheck"]) await refuses(`Moshi.${method}`, "before load", "nothing loaded", () => m[method]());
  // a load while a session runs: refused before the worker hears of it, and what was
  // loaded stays loaded (the session as start() leaves it, which needs a browser)
  {
    const loaded = await m.load(good);
    const lastLoad = m.lastLoad;
    m.running = { stand_in: true };
    await refuses("Moshi.load", "while a session runs", "a session is running", () => m.load(good));
    await refuses("Moshi.loadCodec", "while a session runs", "a session is running", () => m.loadCodec({ mimi: good.mimi }));
    assert.equal(m.loaded, loaded, "Moshi.load refused: what was loaded stays loaded");
    assert.equal(m.lastLoad, lastLoad, "Moshi.load refused: reload() keeps the sources that loaded");
    m.running = null;
    await m.load(good);
    m.loaded = null;
  }
  await refuses("Moshi.start", "before load", "nothing loaded", () => m.start());
  await refuses("Moshi.start", "loopback before loadCodec", "loadCodec", () => m.start(undefined, { mode: "loopback" }));
  for (const v of [1, "mic", {}, []]) await refuses("Moshi.start", `stream = ${show(v)}`, "`stream`", () => m.start(v), TypeError);
  for (const v of ["speaker", 1, null]) await refuses("Moshi.start", `mode = ${show(v)}`, "unknown mode", () => m.start(undefined, { mode: v }));
  for (const v of [NaN, -1, "40", Infinity]) await refuses("Moshi.start", `record = ${show(v)}`, "`record`", () => m.start(undefined, { record: v }), RangeError);
  for (const v of [null, 1, {}]) await refuses("Moshi.start", `audioContext = ${show(v)}`, "`audioContext`", () => m.start(undefined, { audioContext: v }), TypeError);
  for (const v of [NaN, -5, "10"]) await refuses("Moshi.stop", `drainMs = ${show(v)}`, "`drainMs`", () => m.stop({ drainMs: v }), RangeError);
  await refuses("Moshi.stop", "options 7", "Moshi.stop", () => m.stop(7), TypeError);

  // new Moshi
  for (const v of [1, {}, true]) {
    await refuses("new Moshi", `workerUrl = ${show(v)}`, "`workerUrl`", () => new Moshi({ workerUrl: v }), TypeError);
    await refuses("new Moshi", `workletUrl = ${show(v)}`, "`workletUrl`", () => new Moshi({ workletUrl: v }), TypeError);
  }
  await refuses("new Moshi", "options 1", "new Moshi", () => new Moshi(1), TypeError);

  // a misspelt or unknown option is refused, naming it (and the option it resembles)
  const typos = [
    ["new Moshi", () => new Moshi({ limit: {} }), "`limit`"],
    ["new Moshi", () => new Moshi({ workerURL: "w.js" }), "did you mean `workerUrl`"],
    ["Moshi.checkRequirements", () => m.checkRequirements({ LM: false }), "did you mean `lm`"],
    ["Moshi.load", () => m.load({ ...good, mimiconfig: {} }), "did you mean `mimiConfig`"],
    ["Moshi.load", () => m.load({ ...good, temperature: 0.5 }), "`temperature` is not one of its options"],
    ["Moshi.loadCodec", () => m.loadCodec({ mimi: good.mimi, onprogress: () => {} }), "did you mean `onProgress`"],
    ["Moshi.loadCodec", () => m.loadCodec({ mimi: good.mimi, lm: good.lm }), "`lm` is not one of its options"],
    ["Moshi.start", () => m.start(undefined, { Mode: "loopback" }), "did you mean `mode`"],
    ["Moshi.stop", () => m.stop({ drain: 0 }), "`drain` is not one of its options"],
    ["Moshi.reload", () => m.reload({ sead: 1 }), "`sead`"],
    ["MimiCodec.create", () => MimiCodec.create({ mimi: good.mimi, lmConfig: {} }), "`lmConfig` is not one of its options"],
  ];
  for (const [entry, call, what] of typos) await refuses(entry, `unknown option (${what})`, what, call, TypeError);

  // a good load goes through; after dispose nothing does
  await m.loadCodec({ mimi: good.mimi });
  assert.equal(posted.at(-1).sources.mimi, "http://localhost:8000/app/models/mimi.safetensors", "URLs resolve against the page");
  await m.dispose();
  await m.dispose();
  await refuses("Moshi.load", "after dispose", "disposed", () => m.load(good));
  await refuses("Moshi.loadCodec", "after dispose", "disposed", () => m.loadCodec({ mimi: good.mimi }));
  await refuses("Moshi.start", "after dispose", "disposed", () => m.start());
  for (const method of ["reset", "dropBacklog", "cpuCheck"]) await refuses(`Moshi.${method}`, "after dispose", "disposed", () => m[method]());

  // MimiCodec.create
  for (const o of [null, 1, "x", []]) await refuses("MimiCodec.create", `options ${show(o)}`, "MimiCodec.create", () => MimiCodec.create(o), TypeError);
  await refuses("MimiCodec.create", "no options", "`mimi` is required", () => MimiCodec.create());
  for (const v of sources) await refuses("MimiCodec.create", `mimi = ${show(v)}`, "`mimi`", () => MimiCodec.create({ mimi: v }));
  for (const v of configs) await refuses("MimiCodec.create", `mimiConfig = ${show(v)}`, "`mimiConfig`", () => MimiCodec.create({ mimi: good.mimi, mimiConfig: v }), TypeError);
  for (const v of [1, {}]) await refuses("MimiCodec.create", `workerUrl = ${show(v)}`, "`workerUrl`", () => MimiCodec.create({ mimi: good.mimi, workerUrl: v }), TypeError);
  for (const v of [1, {}]) await refuses("MimiCodec.create", `signal = ${show(v)}`, "`signal`", () => MimiCodec.create({ mimi: good.mimi, signal: v }), TypeError);

  // MimiCodec before create, then frames of every wrong kind
  const bare = new MimiCodec();
  await refuses("MimiCodec.encode", "before create", "MimiCodec.create", () => bare.encode(new Float32Array(1920)));
  await refuses("MimiCodec.decode", "before create", "MimiCodec.create", () => bare.decode(new Uint32Array(8)));
  await refuses("MimiCodec.reset", "before create", "MimiCodec.create", () => bare.reset());
  const c = await MimiCodec.create({ mimi: good.mimi, mimiConfig: { num_codebooks: 8 } });
  for (const v of [undefined, null, 1, "pcm", {}, new DataView(new ArrayBuffer(8))]) {
    await refuses("MimiCodec.encode", `pcm = ${show(v)}`, "`pcm`", () => c.encode(v), TypeError);
  }
  for (const n of [0, 1, 1919, 1921, 3840]) await refuses("MimiCodec.encode", `${n} samples`, "a frame has 1920", () => c.encode(new Float32Array(n)), RangeError);
  for (const v of [NaN, Infinity, -Infinity]) {
    const pcm = new Float32Array(1920);
    pcm[100] = v;
    await refuses("MimiCodec.encode", `a ${v} sample`, "sample 100", () => c.encode(pcm), RangeError);
  }
  await refuses("MimiCodec.encode", "a string sample", "sample 5", () => c.encode(Array.from({ length: 1920 }, (_, i) => (i === 5 ? "x" : 0))), RangeError);
  for (const v of [undefined, null, 1, "codes", {}]) await refuses("MimiCodec.decode", `codes = ${show(v)}`, "`codes`", () => c.decode(v), TypeError);
  for (const n of [0, 7, 9, 16]) await refuses("MimiCodec.decode", `${n} codes`, "a frame has 8", () => c.decode(new Array(n).fill(0)), RangeError);
  for (const v of [-1, 1.5, NaN, Infinity, 2 ** 32, "3", null]) {
    const codes = [0, 0, 0, v, 0, 0, 0, 0];
    await refuses("MimiCodec.decode", `code ${show(v)}`, "MimiCodec.decode: code", () => c.decode(codes), RangeError);
  }
  assert.ok((await c.encode(new Float32Array(1920))) instanceof Uint32Array, "a good frame goes through");
  c.dispose();
  c.dispose();
  await refuses("MimiCodec.encode", "after dispose", "disposed", () => c.encode(new Float32Array(1920)));
  await refuses("MimiCodec.decode", "after dispose", "disposed", () => c.decode(new Uint32Array(8)));
  await refuses("MimiCodec.reset", "after dispose", "disposed", () => c.reset());

  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  console.log(`JS API: ${total} malformed calls refused`);
  for (const [k, n] of Object.entries(counts)) console.log(`  ${k.padEnd(20)}${String(n).padStart(5)}`);
  assert.ok(total >= 200, `${total} cases`);
});

// reload() hands each load the options it takes: a codec's reload is not refused for the
// LM's `seed`, and the LM's load gets it.
test("Moshi.reload passes each load its own options", async () => {
  const m = new Moshi();
  await m.loadCodec({ mimi: "models/mimi.safetensors", keepForCheck: true });
  await m.load({ mimi: "models/mimi.safetensors", lm: "models/moshi.safetensors" });
  const before = posted.length;
  await m.reload({ seed: 7, keepForCheck: false });
  const loads = posted.slice(before).filter((p) => p.type === "load");
  assert.deepEqual(loads.map((p) => p.mode), ["codec", "moshi"]);
  assert.equal(loads[0].keepForCheck, false, "the codec's load takes keepForCheck");
  assert.equal(loads[1].seed, 7, "the LM's load takes seed");
  await m.dispose();
});

// Outside a browser page (no Worker): a message that says so, not a ReferenceError.
test("without Web Workers, new Moshi and MimiCodec.create say the package needs a browser page", async () => {
  const W = globalThis.Worker;
  delete globalThis.Worker;
  try {
    await refuses("new Moshi", "no Worker", "new Moshi: this environment has no Web Workers", () => new Moshi());
    await refuses("MimiCodec.create", "no Worker", "MimiCodec.create: this environment has no Web Workers", () => MimiCodec.create({ mimi: "models/mimi.safetensors" }));
  } finally {
    globalThis.Worker = W;
  }
});

// The worker answers `reset` with null (as the stand-in does): both resets resolve to
// undefined, as moshi.d.ts types them (`Promise<void>`).
test("Moshi.reset and MimiCodec.reset resolve to undefined", async () => {
  const m = new Moshi();
  await m.load({ mimi: "models/mimi.safetensors", lm: "models/moshi.safetensors" });
  assert.equal(await m.reset(), undefined, "Moshi.reset");
  await m.dispose();
  const c = await MimiCodec.create({ mimi: "models/mimi.safetensors" });
  assert.equal(await c.reset(), undefined, "MimiCodec.reset");
  c.dispose();
});

// A second load() or loadCodec() while one is in flight is refused before the worker sees
// it (two loads would each free the other's model there); the first one completes and what
// it loaded stays loaded.
test("a load while another is in progress is refused, and the first one completes", async () => {
  const m = new Moshi();
  const good = { mimi: "models/mimi.safetensors", lm: "models/moshi.safetensors" };
  const first = m.load(good);
  await refuses("Moshi.load", "during a load", "another load is in progress", () => m.load(good));
  await refuses("Moshi.loadCodec", "during a load", "another load is in progress", () => m.loadCodec({ mimi: good.mimi }));
  const info = await first;
  assert.equal(info.adapter, "stand-in");
  assert.equal(m.loaded, info, "the first load's model stays loaded");
  const second = m.load(good);
  await refuses("Moshi.reload", "during a load", "Moshi.reload: a load is in progress", () => m.reload());
  await second;
  const codec = m.loadCodec({ mimi: good.mimi });
  await refuses("Moshi.load", "during a loadCodec", "another load is in progress", () => m.load(good));
  await codec;
  assert.equal((await m.load(good)).adapter, "stand-in", "a load after the others completed goes through");
  await m.dispose();
});
