// inferencelayer's JavaScript API: full-duplex Moshi in a browser tab.
//
//   import { Moshi, MimiCodec, support } from "inferencelayer";
//   const moshi = new Moshi();
//   await moshi.load({ mimi, lm, tokenizer, mimiConfig, lmConfig, onProgress, signal });
//   moshi.addEventListener("text", (e) => console.log(e.detail.text));
//   await moshi.start();            // the microphone, or start(mediaStream)
//   await moshi.stop(); moshi.dispose();
//
// A dedicated Worker (moshi-worker.js) owns the wasm core and WebGPU; an AudioWorklet
// (moshi-worklet.js, plain JS) exchanges samples with it through SharedArrayBuffer rings,
// so the page needs cross-origin isolation (COOP/COEP headers, or coi-serviceworker.js).

import { SampleRing, STAT, createStats } from "./ring.js";

export { STAT };

/** Microphone constraints as Kyutai's web client asks for them. */
export const MIC_CONSTRAINTS = Object.freeze({
  audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
});

/** What this browser lacks for the web app: `{ ok, webgpu, isolated, worklet, problems }`. */
export function support() {
  const g = globalThis;
  const webgpu = !!(g.navigator && g.navigator.gpu);
  const isolated = !!g.crossOriginIsolated && typeof g.SharedArrayBuffer === "function";
  const worklet = typeof g.AudioWorkletNode === "function";
  const problems = [];
  if (!webgpu) problems.push("WebGPU is not available (navigator.gpu is missing): use a recent Chrome, Edge or Firefox with WebGPU enabled.");
  if (!isolated) problems.push("The page is not cross-origin isolated, so SharedArrayBuffer is unavailable: serve it with COOP/COEP headers (or let coi-serviceworker.js add them).");
  if (!worklet) problems.push("AudioWorklet is not available.");
  return { ok: problems.length === 0, webgpu, isolated, worklet, problems };
}

/**
 * [`support`] and, where WebGPU is present, whether it gives an adapter (a browser can have
 * `navigator.gpu` and still no adapter: hardware acceleration off, a blocklisted GPU).
 * Resolves to the same shape as `support()`, plus `adapter` (a boolean).
 */
export async function checkSupport() {
  const s = support();
  let adapter = false;
  if (s.webgpu) {
    try {
      adapter = !!(await globalThis.navigator.gpu.requestAdapter());
    } catch {
      adapter = false;
    }
    if (!adapter) {
      s.problems.push("WebGPU gives no GPU adapter here: turn on hardware acceleration, or enable WebGPU for this GPU (in Chrome: chrome://flags/#enable-unsafe-webgpu).");
    }
  }
  return { ...s, adapter, ok: s.problems.length === 0 };
}

class WorkerClient extends EventTarget {
  constructor(where, workerUrl) {
    super();
    if (typeof Worker === "undefined") {
      throw new Error(`${where}: this environment has no Web Workers (Worker is not defined): the package runs in a browser page; support() and checkSupport() say what the page lacks`);
    }
    this.worker = new Worker(workerUrl || new URL("./moshi-worker.js", import.meta.url), { type: "module" });
    this.nextId = 1;
    this.pending = new Map();
    this.worker.onmessage = (e) => {
      const m = e.data;
      if (m.type === "event") {
        this.dispatchEvent(new CustomEvent(m.name, { detail: m.detail }));
        return;
      }
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.value);
      else {
        const err = new Error(m.error.message);
        err.name = m.error.name;
        p.reject(err);
      }
    };
    this.worker.onerror = (e) => {
      // A worker that cannot start (a wrong workerUrl, a script error) answers nothing:
      // fail what waits on it instead of leaving it pending.
      const message = `the worker failed: ${e.message || "its script could not be loaded (check workerUrl)"}`;
      this.dispatchEvent(new CustomEvent("error", { detail: { message } }));
      for (const p of this.pending.values()) p.reject(new Error(message));
      this.pending.clear();
    };
  }

  call(type, fields = {}, transfer = []) {
    if (!this.worker) return Promise.reject(new Error("disposed"));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, type, ...fields }, transfer);
    });
  }

  // A load with progress callback and AbortSignal (the worker fetches; abort is relayed).
  loadWith(fields, { onProgress, signal } = {}) {
    if (signal?.aborted) return Promise.reject(new DOMException("loading aborted", "AbortError"));
    const id = this.nextId;
    const onP = (e) => onProgress && onProgress(e.detail);
    const onAbort = () => this.worker?.postMessage({ id: 0, type: "abort", target: id });
    this.addEventListener("progress", onP);
    signal?.addEventListener("abort", onAbort);
    return this.call("load", fields).finally(() => {
      this.removeEventListener("progress", onP);
      signal?.removeEventListener("abort", onAbort);
    });
  }

  dispose() {
    if (!this.worker) return;
    this.worker.postMessage({ id: 0, type: "dispose" });
    this.worker = null;
    for (const p of this.pending.values()) p.reject(new Error("disposed"));
    this.pending.clear();
  }
}

// --- argument checks at the API's entry points: a wrong argument rejects with a TypeError
// or RangeError naming the method and the argument, before the worker sees anything.

const typeName = (v) => (v === null ? "null" : Array.isArray(v) ? "an array" : typeof v === "object" ? (v.constructor?.name || "an object") : `${typeof v} ${String(v)}`.slice(0, 60));
const isBlob = (v) => typeof Blob !== "undefined" && v instanceof Blob;
const isUrlObject = (v) => typeof URL !== "undefined" && v instanceof URL;
const SCHEMES = ["http:", "https:", "blob:", "data:"];

// The options object of an entry point: an object whose keys are all among `keys` (a
// misspelt key would otherwise be dropped without a word).
function options(where, o, keys) {
  if (o === undefined) return {};
  if (o === null || typeof o !== "object" || Array.isArray(o)) throw new TypeError(`${where}: the options must be an object, got ${typeName(o)}`);
  for (const k of Object.keys(o)) {
    if (keys.includes(k)) continue;
    const near = keys.find((c) => c.toLowerCase() === k.toLowerCase());
    const hint = near ? `did you mean \`${near}\`? ` : "";
    throw new TypeError(`${where}: \`${k}\` is not one of its options (${hint}they are ${keys.map((c) => `\`${c}\``).join(", ")})`);
  }
  return o;
}

// The options of each entry point.
const OPTIONS = {
  moshi: ["workerUrl", "workletUrl", "limits"],
  check: ["mimiConfig", "lmConfig", "lm"],
  load: ["mimi", "lm", "tokenizer", "mimiConfig", "lmConfig", "seed", "greedy", "onProgress", "signal"],
  loadCodec: ["mimi", "mimiConfig", "keepForCheck", "onProgress", "signal"],
  start: ["mode", "audioContext", "record", "destination"],
  stop: ["drainMs"],
  codec: ["mimi", "mimiConfig", "onProgress", "signal", "workerUrl"],
};
// reload()'s replace the last load's and loadCodec()'s, each taking its own
OPTIONS.reload = [...new Set([...OPTIONS.load, ...OPTIONS.loadCodec])];
const pick = (o, keys) => Object.fromEntries(Object.entries(o).filter(([k]) => keys.includes(k)));

// URLs resolve against the page (the worker's own base is the package's folder).
function sourceOf(where, name, s, required) {
  if (s === undefined || s === null) {
    if (required) throw new TypeError(`${where}: \`${name}\` is required (a URL or a File/Blob)`);
    return undefined;
  }
  if (isBlob(s)) {
    if (s.size === 0) throw new RangeError(`${where}: \`${name}\` is an empty File/Blob`);
    return s;
  }
  if (typeof s !== "string" && !isUrlObject(s)) throw new TypeError(`${where}: \`${name}\` must be a URL (a string or URL) or a File/Blob, got ${typeName(s)}`);
  if (String(s).trim() === "") throw new TypeError(`${where}: \`${name}\` is an empty URL`);
  let url;
  try {
    url = new URL(String(s), globalThis.document?.baseURI ?? globalThis.location?.href);
  } catch {
    throw new TypeError(`${where}: \`${name}\` is not a valid URL: ${JSON.stringify(String(s))}`);
  }
  if (!SCHEMES.includes(url.protocol)) throw new TypeError(`${where}: \`${name}\` has scheme ${url.protocol}, expected one of ${SCHEMES.join(" ")}`);
  return url.href;
}

// A config: omitted, a plain object, or JSON text of one.
function configOf(where, name, c) {
  if (c === undefined || c === null) return undefined;
  if (typeof c === "string") {
    let v;
    try {
      v = JSON.parse(c);
    } catch (e) {
      throw new TypeError(`${where}: \`${name}\` is not JSON: ${e.message}`);
    }
    if (v === null || typeof v !== "object" || Array.isArray(v)) throw new TypeError(`${where}: \`${name}\` must be a JSON object, got ${typeName(v)}`);
    return c;
  }
  if (typeof c !== "object" || Array.isArray(c)) throw new TypeError(`${where}: \`${name}\` must be an object or JSON text, got ${typeName(c)}`);
  return c;
}

function callbackOf(where, name, f) {
  if (f !== undefined && f !== null && typeof f !== "function") throw new TypeError(`${where}: \`${name}\` must be a function, got ${typeName(f)}`);
  return f ?? undefined;
}

function signalOf(where, s) {
  if (s === undefined || s === null) return undefined;
  if (typeof AbortSignal !== "undefined" ? !(s instanceof AbortSignal) : typeof s.aborted !== "boolean") {
    throw new TypeError(`${where}: \`signal\` must be an AbortSignal, got ${typeName(s)}`);
  }
  return s;
}

function seedOf(where, seed) {
  if (typeof seed !== "number" || !Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    throw new RangeError(`${where}: \`seed\` must be an integer from 0 to 2^32 - 1, got ${typeName(seed)}`);
  }
  return seed;
}

function booleanOf(where, name, b) {
  if (typeof b !== "boolean") throw new TypeError(`${where}: \`${name}\` must be a boolean, got ${typeName(b)}`);
  return b;
}

function workerUrlOf(where, name, u) {
  if (u === undefined || u === null) return undefined;
  if (typeof u !== "string" && !isUrlObject(u)) throw new TypeError(`${where}: \`${name}\` must be a URL (a string or URL), got ${typeName(u)}`);
  return u;
}

function nonNegative(where, name, v) {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new RangeError(`${where}: \`${name}\` must be a finite number >= 0, got ${typeName(v)}`);
  return v;
}

const reject = (e) => Promise.reject(e);

// Emulated device limits: both keys, positive whole numbers of bytes, or nothing.
function limitsOf(where, l) {
  if (l === undefined || l === null) return null;
  if (typeof l !== "object" || Array.isArray(l)) throw new TypeError(`${where}: \`limits\` must be an object { maxStorageBufferBindingSize, maxBufferSize } (bytes), got ${typeName(l)}`);
  const keys = ["maxStorageBufferBindingSize", "maxBufferSize"];
  for (const k of Object.keys(l)) if (!keys.includes(k)) throw new TypeError(`${where}: \`limits.${k}\` is not a limit this API emulates (${keys.join(", ")})`);
  for (const k of keys) {
    const v = l[k];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v <= 0) throw new RangeError(`${where}: \`limits.${k}\` must be a positive whole number of bytes, got ${typeName(v)}`);
  }
  return { maxStorageBufferBindingSize: l.maxStorageBufferBindingSize, maxBufferSize: l.maxBufferSize };
}

/**
 * Full-duplex Moshi: events `text` ({ frame, token, text }), `frame` ({ frame, encodeMs,
 * stepMs, totalMs, lagMs }), `progress` ({ file, loaded, total }), `error`, `devicelost`
 * ({ message }: the GPU device went away; `reload()` continues on a new one), `micended`
 * ({ capturedSeconds }: the stream's audio tracks ended, see `start`) and `stopped`
 * ({ reason: "stop" | "micended", worklet, core }: a session ended, with `stop()`'s counts).
 */
export class Moshi extends EventTarget {
  constructor(opts) {
    super();
    const o = options("new Moshi", opts, OPTIONS.moshi);
    const workerUrl = workerUrlOf("new Moshi", "workerUrl", o.workerUrl);
    this.workletUrl = workerUrlOf("new Moshi", "workletUrl", o.workletUrl) || new URL("./moshi-worklet.js", import.meta.url);
    // Emulated device limits, { maxStorageBufferBindingSize, maxBufferSize } in bytes
    // (below the adapter's): checks and loads keep to them.
    this.limits = limitsOf("new Moshi", o.limits);
    this.client = new WorkerClient("new Moshi", workerUrl);
    for (const name of ["text", "frame", "progress", "error", "devicelost"]) {
      this.client.addEventListener(name, (e) => this.dispatchEvent(new CustomEvent(name, { detail: e.detail })));
    }
    this.loaded = null;
    this.running = null;
    this.loading = false;
    this.frameTimes = [];
  }

  /**
   * The capability check, from the configs alone (nothing downloads): the adapter, its
   * limits, and per model (Mimi, and the LM unless `lm` is false) its largest buffer, total
   * GPU memory, the tables split to fit and whether it fits. Resolves to `{ adapter,
   * adapterLimits, limits, models: [{ model, largestBuffer: { name, bytes }, totalBytes,
   * split, fits, error, limit, needed, allowed }], fits, error }`: `error` names the limit
   * (`maxStorageBufferBindingSize`, `maxBufferSize`) and the bytes needed and allowed.
   */
  async checkRequirements(opts) {
    const w = "Moshi.checkRequirements";
    this.#usable(w);
    const { mimiConfig, lmConfig, lm = true } = options(w, opts, OPTIONS.check);
    const fields = { mimiConfig: configOf(w, "mimiConfig", mimiConfig), lmConfig: configOf(w, "lmConfig", lmConfig), withLm: booleanOf(w, "lm", lm), limits: this.limits };
    return await this.client.call("check", fields);
  }

  /**
   * Load Mimi and Moshi's LM (URLs or Files/Blobs; configs as objects or JSON text, omitted
   * for the released Mimi and Moshi 7B; an optional SentencePiece tokenizer). Resolves to
   * `{ adapter, frameSize }`. Rejects with an AbortError when `signal` aborts. A load replaces
   * what was loaded: the old model is freed first, so after a failed or aborted load nothing is
   * loaded (`start()` says so) until a load succeeds. Rejects while a session runs, before
   * anything changes: `stop()` it first; and while another load() or loadCodec() is in
   * progress: await it first (an aborted load settles with an AbortError once the worker
   * has stopped it).
   */
  async load(opts) {
    const w = "Moshi.load";
    this.#usable(w);
    const { mimi, lm, tokenizer, mimiConfig, lmConfig, seed = 0, greedy = false, onProgress, signal } = options(w, opts, OPTIONS.load);
    const fields = {
      mode: "moshi",
      sources: { mimi: sourceOf(w, "mimi", mimi, true), lm: sourceOf(w, "lm", lm, true), tokenizer: sourceOf(w, "tokenizer", tokenizer, false) },
      mimiConfig: configOf(w, "mimiConfig", mimiConfig),
      lmConfig: configOf(w, "lmConfig", lmConfig),
      seed: seedOf(w, seed),
      greedy: booleanOf(w, "greedy", greedy),
      limits: this.limits,
    };
    const how = { onProgress: callbackOf(w, "onProgress", onProgress), signal: signalOf(w, signal) };
    this.#idle(w);
    this.lastLoad = { moshi: opts, codec: this.lastLoad?.codec };
    // A load replaces the model in the worker: the old one is freed first (two Moshi 7B
    // would not fit one GPU), so if this load fails or is aborted nothing stays loaded.
    this.loaded = null;
    this.loading = true;
    try {
      this.loaded = await this.client.loadWith(fields, how);
    } finally {
      this.loading = false;
    }
    this.loaded.mode = "moshi";
    return this.loaded;
  }

  /** Load Mimi alone, for the codec loopback (`start(stream, { mode: "loopback" })`). */
  async loadCodec(opts) {
    const w = "Moshi.loadCodec";
    this.#usable(w);
    const { mimi, mimiConfig, keepForCheck = false, onProgress, signal } = options(w, opts, OPTIONS.loadCodec);
    const fields = {
      mode: "codec",
      sources: { mimi: sourceOf(w, "mimi", mimi, true) },
      mimiConfig: configOf(w, "mimiConfig", mimiConfig),
      keepForCheck: booleanOf(w, "keepForCheck", keepForCheck),
      limits: this.limits,
    };
    const how = { onProgress: callbackOf(w, "onProgress", onProgress), signal: signalOf(w, signal) };
    this.#idle(w);
    this.lastLoad = { moshi: this.lastLoad?.moshi, codec: opts };
    this.codecLoaded = null; // as in load(): the old codec is freed before the new one loads
    this.loading = true;
    try {
      this.codecLoaded = await this.client.loadWith(fields, how);
    } finally {
      this.loading = false;
    }
    return this.codecLoaded;
  }

  /**
   * Start on `stream` (a MediaStream; the microphone with `MIC_CONSTRAINTS` when omitted).
   * `mode`: "moshi" (default) or "loopback" (microphone -> Mimi -> speakers). The
   * AudioContext runs at the device's rate; the worker resamples to and from 24 kHz.
   *
   * When every audio track of the stream ends (the microphone unplugged, its permission
   * revoked, a track stopped), capture ends: a `micended` event, then the session stops as
   * `stop()` does (every frame captured is finished and played) and a `stopped` event carries
   * the counts. A suspended AudioContext pauses capture and playback; the session goes on
   * when it resumes.
   */
  async start(stream, opts) {
    const w = "Moshi.start";
    this.#usable(w);
    const { mode = "moshi", audioContext, record = 0, destination } = options(w, opts, OPTIONS.start);
    if (stream !== undefined && stream !== null && (typeof MediaStream === "undefined" ? typeof stream.getTracks !== "function" : !(stream instanceof MediaStream))) {
      throw new TypeError(`${w}: \`stream\` must be a MediaStream, got ${typeName(stream)}`);
    }
    if (audioContext !== undefined && (audioContext === null || typeof audioContext.createMediaStreamSource !== "function")) {
      throw new TypeError(`${w}: \`audioContext\` must be an AudioContext, got ${typeName(audioContext)}`);
    }
    nonNegative(w, "record", record);
    if (this.running || this.starting) throw new Error("already running");
    if (mode !== "moshi" && mode !== "loopback") throw new Error(`unknown mode ${JSON.stringify(mode)}: "moshi" or "loopback"`);
    if (mode === "loopback" ? !this.codecLoaded : !this.loaded) {
      throw new Error(mode === "loopback" ? "nothing loaded for the loopback: call loadCodec() first" : "nothing loaded: call load() first");
    }
    const s = support();
    if (!s.ok) throw new Error(s.problems.join(" "));
    this.starting = true;
    const ownStream = !stream;
    let ctx;
    try {
      return await this.#startOn(stream, ownStream, (c) => (ctx = c), { mode, audioContext, record, destination });
    } catch (e) {
      // Nothing of a failed start stays open: the microphone, our AudioContext.
      if (ownStream && this.pendingStream) this.pendingStream.getTracks().forEach((t) => t.stop());
      if (ctx && !audioContext) await ctx.close().catch(() => {});
      throw e;
    } finally {
      this.starting = false;
      this.pendingStream = null;
    }
  }

  async #startOn(stream, ownStream, keepCtx, { mode, audioContext, record, destination }) {
    stream = stream || (this.pendingStream = await navigator.mediaDevices.getUserMedia(MIC_CONSTRAINTS));
    const ctx = audioContext || new AudioContext({ latencyHint: "interactive" });
    keepCtx(ctx);
    await ctx.audioWorklet.addModule(this.workletUrl);
    const rate = ctx.sampleRate;
    const input = SampleRing.create(rate * 45); // the core may fall behind: keep every sample
    const output = SampleRing.create(rate * 5);
    const stats = createStats();
    const node = new AudioWorkletNode(ctx, "moshi-processor", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { input: input.sab, output: output.sab, stats: stats.buffer },
    });
    const source = ctx.createMediaStreamSource(stream);
    source.connect(node);
    node.connect(destination || ctx.destination);
    await this.client.call("start", { mode, sampleRate: rate, input: input.sab, output: output.sab, stats: stats.buffer, record });
    Atomics.store(stats, STAT.control, 1);
    if (ctx.state !== "running") await ctx.resume().catch(() => {});
    this.frameTimes = [];
    this.onFrame = (e) => this.frameTimes.push(e.detail.totalMs);
    this.client.addEventListener("frame", this.onFrame);
    const r = (this.running = { ctx, ownContext: !audioContext, node, source, stream, ownStream, stats, mode, rate, startedAt: performance.now() });
    // Tracks stopped by script fire no `ended`: look at their state too (off the audio thread).
    const tracks = stream.getAudioTracks();
    const ended = () => {
      if (this.running !== r || this.stopping || !tracks.length || !tracks.every((t) => t.readyState === "ended")) return;
      this.dispatchEvent(new CustomEvent("micended", { detail: { capturedSeconds: Atomics.load(stats, STAT.captured) / rate } }));
      this.#stopOnce("micended").catch(() => {}); // a failure is the `error` event
    };
    tracks.forEach((t) => t.addEventListener("ended", ended));
    r.watch = setInterval(ended, 250);
    return { sampleRate: rate };
  }

  /** Counters of the audio path now (see `STAT`), with the context's rate. */
  stats() {
    const r = this.running || this.last;
    if (!r) return null;
    const o = { sampleRate: r.rate, mode: r.mode };
    for (const [k, i] of Object.entries(STAT)) if (k !== "length" && k !== "control") o[k] = Atomics.load(r.stats, i);
    return o;
  }

  /** p50 and p95 of the frame times so far (ms), and how many frames took over 80 ms. */
  frameTimeSummary() {
    const t = [...this.frameTimes].sort((a, b) => a - b);
    const q = (p) => (t.length ? t[Math.min(t.length - 1, Math.ceil(p * t.length) - 1)] : 0);
    return { frames: t.length, p50: q(0.5), p95: q(0.95), over80: t.filter((x) => x > 80).length };
  }

  /**
   * Stop capturing; the worker finishes every frame already captured and the worklet plays
   * what they gave (at most `drainMs` more, default 10 s), then the audio stops. Resolves to
   * the counts: `{ worklet: stats(), core: { popped, resampled, frames, ... } }`.
   */
  stop(opts) {
    const { drainMs = 10000 } = options("Moshi.stop", opts, OPTIONS.stop);
    nonNegative("Moshi.stop", "drainMs", drainMs);
    return this.#stopOnce("stop", drainMs);
  }

  // One stop at a time: a second call while one runs gets the same promise.
  #stopOnce(reason, drainMs = 10000) {
    if (!this.stopping) this.stopping = this.#stop(reason, drainMs).finally(() => (this.stopping = null));
    return this.stopping;
  }

  async #stop(reason, drainMs) {
    const r = this.running;
    if (!r) return null;
    clearInterval(r.watch);
    Atomics.store(r.stats, STAT.control, 2);
    let core, failure;
    try {
      core = await this.client.call("stop");
    } catch (e) {
      failure = e; // the frame loop failed: still release the audio path, then report it
    }
    const until = performance.now() + drainMs;
    // Let the jitter buffer play out: until the ring is empty (or holds less than it would
    // start playing, after an underrun) or the time is up.
    let before = -1;
    while (performance.now() < until) {
      const buffered = Atomics.load(r.stats, STAT.buffered);
      const played = Atomics.load(r.stats, STAT.played);
      if (buffered === 0 || (played === before && buffered < r.rate * 0.17)) break;
      before = played;
      await new Promise((ok) => setTimeout(ok, 50));
    }
    Atomics.store(r.stats, STAT.control, 0);
    const worklet = this.stats();
    this.client.removeEventListener("frame", this.onFrame);
    r.source.disconnect();
    r.node.disconnect();
    Atomics.store(r.stats, STAT.control, -1);
    if (r.ownStream) r.stream.getTracks().forEach((t) => t.stop());
    if (r.ownContext) await r.ctx.close().catch(() => {});
    this.last = r;
    this.running = null;
    if (failure) throw failure;
    this.dispatchEvent(new CustomEvent("stopped", { detail: { reason, worklet, core } }));
    return { worklet, core };
  }

  /**
   * While a `stop()` is finishing the frames already captured: drop those still waiting, so
   * the stop resolves after the frame in progress (the counts then show fewer frames than
   * were captured).
   */
  dropBacklog() {
    return this.#call("Moshi.dropBacklog", "drop");
  }

  /**
   * Test hook, for fault injection: the Worker busy-waits `ms` ms (0 to 10000), frame loop
   * included, as a long task would; the worklet plays on from the rings meanwhile. Resolves
   * to `{ stalledMs, frames }` (frames the core had finished when the stall began).
   */
  stallWorker(ms) {
    return this.client.call("stall", { ms });
  }

  /**
   * Test hook, for fault injection: destroy the WebGPU device of the loaded models, as a
   * driver reset or the browser reclaiming the GPU would. A running session's next frame
   * fails with the loss: a `devicelost` event, then `reload()` continues on a new device.
   */
  loseDevice() {
    return this.#call("Moshi.loseDevice", "loseDevice");
  }

  /**
   * Load again what `load()` (and `loadCodec()`) last loaded, on a new WebGPU device from a
   * new adapter: what to do after a `devicelost` event. A running session is stopped first
   * (its stop's failure is the loss, not reported again). Weights streamed from URLs come
   * back from the Cache API where they were stored, without a download; `options` replace
   * the last load's (`{ onProgress, signal }`, say). Resolves to `load()`'s result.
   */
  async reload(opts) {
    const w = "Moshi.reload";
    this.#usable(w);
    const o = options(w, opts, OPTIONS.reload);
    const last = this.lastLoad;
    if (!last?.moshi && !last?.codec) throw new Error(`${w}: nothing loaded yet: call load() or loadCodec() first`);
    if (this.loading) throw new Error(`${w}: a load is in progress: await it first`);
    if (this.running) await this.stop({ drainMs: 0 }).catch(() => {});
    let out = null;
    if (last.codec) out = await this.loadCodec({ ...last.codec, ...pick(o, OPTIONS.loadCodec) });
    if (last.moshi) out = await this.load({ ...last.moshi, ...pick(o, OPTIONS.load) });
    return out;
  }

  /** A new conversation (every model stream back to its start); call while stopped. */
  reset() {
    // the worker answers null: resolve to undefined, as moshi.d.ts types it
    return this.#call("Moshi.reset", "reset").then(() => undefined);
  }

  /** The last loopback's recording and the CPU codec over the same input (for tests). */
  cpuCheck() {
    return this.#call("Moshi.cpuCheck", "cpuCheck");
  }

  /** Stop and end the worker; the object cannot be used again (a second call does nothing). */
  async dispose() {
    if (this.disposed) return;
    this.disposed = true;
    await this.stop().catch(() => {});
    this.client.dispose();
  }

  #usable(where) {
    if (this.disposed) throw new Error(`${where}: this Moshi was disposed; create a new one`);
  }

  // A load while a session runs is refused here, before anything changes: the worker would
  // refuse it too, but after load() had already forgotten what was loaded.
  #idle(where) {
    if (this.running || this.starting) throw new Error(`${where}: a session is running: stop() it before loading new weights`);
    // Two loads at once would each free the other's model in the worker.
    if (this.loading) throw new Error(`${where}: another load is in progress: await it first (aborted through its signal, it settles once the worker has stopped it)`);
  }

  #call(where, type) {
    if (this.disposed) return reject(new Error(`${where}: this Moshi was disposed; create a new one`));
    if (!this.loaded && !this.codecLoaded) return reject(new Error(`${where}: nothing loaded: call load() or loadCodec() first`));
    return this.client.call(type);
  }
}

/**
 * Mimi alone, frame by frame, in its own worker: `encode(pcm) -> codes`, `decode(codes) -> pcm`.
 * Calls made without awaiting the one before run one at a time, in the order they were made.
 */
export class MimiCodec {
  /** Load a Mimi checkpoint (URL or File) with its config; see `Moshi.load`. */
  static async create(opts) {
    const w = "MimiCodec.create";
    const { mimi, mimiConfig, onProgress, signal, workerUrl } = options(w, opts, OPTIONS.codec);
    const fields = { mode: "codec", sources: { mimi: sourceOf(w, "mimi", mimi, true) }, mimiConfig: configOf(w, "mimiConfig", mimiConfig) };
    const how = { onProgress: callbackOf(w, "onProgress", onProgress), signal: signalOf(w, signal) };
    const c = new MimiCodec();
    c.client = new WorkerClient(w, workerUrlOf(w, "workerUrl", workerUrl));
    try {
      c.info = await c.client.loadWith(fields, how);
    } catch (e) {
      c.client.dispose();
      throw e;
    }
    c.frameSize = c.info.frameSize;
    c.numCodebooks = c.info.numCodebooks;
    return c;
  }

  /** One frame of `frameSize` samples at 24 kHz -> `numCodebooks` codes (Uint32Array). */
  encode(pcm) {
    const w = "MimiCodec.encode";
    const e = this.#unusable(w) || frameError(w, "pcm", pcm, this.frameSize);
    if (e) return reject(e);
    const x = Float32Array.from(pcm);
    const bad = x.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) return reject(new RangeError(`${w}: sample ${bad} is ${x[bad]}, not a finite number`));
    return named(w, this.client.call("encode", { pcm: x }));
  }

  /** One frame of codes -> `frameSize` samples at 24 kHz (Float32Array). */
  decode(codes) {
    const w = "MimiCodec.decode";
    const e = this.#unusable(w) || frameError(w, "codes", codes, this.numCodebooks);
    if (e) return reject(e);
    // Uint32Array.from would wrap a negative code into a huge one: name it as given.
    const bad = Array.from(codes).findIndex((c) => typeof c !== "number" || !Number.isInteger(c) || c < 0 || c > 0xffffffff);
    if (bad >= 0) return reject(new RangeError(`${w}: code ${codes[bad]} at codebook ${bad} is not a non-negative integer`));
    return named(w, this.client.call("decode", { codes: Uint32Array.from(codes) }));
  }

  /** New streams in both directions. */
  reset() {
    const e = this.#unusable("MimiCodec.reset");
    return e ? reject(e) : this.client.call("reset").then(() => undefined);
  }

  /** End the worker; the codec cannot be used again (a second call does nothing). */
  dispose() {
    this.disposed = true;
    this.client?.dispose();
  }

  #unusable(where) {
    if (this.disposed) return new Error(`${where}: this MimiCodec was disposed`);
    if (!this.client) return new Error(`${where}: no codec loaded: make one with \`await MimiCodec.create({ mimi })\``);
    return null;
  }
}

// The worker's refusal (a code past the codebook's size, say) named after the method called.
function named(where, promise) {
  return promise.catch((err) => {
    if (err instanceof Error && !String(err.message).startsWith(`${where}:`)) err.message = `${where}: ${err.message}`;
    throw err;
  });
}

// A frame: an array or typed array of exactly `n` values.
function frameError(where, name, x, n) {
  const arrayLike = Array.isArray(x) || (ArrayBuffer.isView(x) && !(x instanceof DataView));
  if (!arrayLike) return new TypeError(`${where}: \`${name}\` must be an array or typed array, got ${typeName(x)}`);
  if (x.length !== n) return new RangeError(`${where}: \`${name}\` has ${x.length} values, a frame has ${n}`);
  return null;
}
