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
  constructor(workerUrl) {
    super();
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

// URLs resolve against the page (the worker's own base is the package's folder).
const sourceOf = (s) =>
  s === undefined || s === null || (typeof Blob !== "undefined" && s instanceof Blob) ? s : new URL(String(s), globalThis.document?.baseURI ?? globalThis.location?.href).href;

/**
 * Full-duplex Moshi: events `text` ({ frame, token, text }), `frame` ({ frame, encodeMs,
 * stepMs, totalMs, lagMs }), `progress` ({ file, loaded, total }), `error` and `devicelost`
 * ({ message }: the GPU device went away; `reload()` continues on a new one).
 */
export class Moshi extends EventTarget {
  constructor(options = {}) {
    super();
    this.client = new WorkerClient(options.workerUrl);
    this.workletUrl = options.workletUrl || new URL("./moshi-worklet.js", import.meta.url);
    for (const name of ["text", "frame", "progress", "error", "devicelost"]) {
      this.client.addEventListener(name, (e) => this.dispatchEvent(new CustomEvent(name, { detail: e.detail })));
    }
    this.loaded = null;
    this.running = null;
    this.frameTimes = [];
  }

  /**
   * Load Mimi and Moshi's LM (URLs or Files/Blobs; configs as objects or JSON text, omitted
   * for the released Mimi and Moshi 7B; an optional SentencePiece tokenizer). Resolves to
   * `{ adapter, frameSize }`. Rejects with an AbortError when `signal` aborts.
   */
  async load(options = {}) {
    const { mimi, lm, tokenizer, mimiConfig, lmConfig, seed = 0, greedy = false, onProgress, signal } = options;
    this.lastLoad = { moshi: options, codec: this.lastLoad?.codec };
    this.loaded = await this.client.loadWith(
      { mode: "moshi", sources: { mimi: sourceOf(mimi), lm: sourceOf(lm), tokenizer: sourceOf(tokenizer) }, mimiConfig, lmConfig, seed, greedy },
      { onProgress, signal },
    );
    this.loaded.mode = "moshi";
    return this.loaded;
  }

  /** Load Mimi alone, for the codec loopback (`start(stream, { mode: "loopback" })`). */
  async loadCodec(options = {}) {
    const { mimi, mimiConfig, keepForCheck = false, onProgress, signal } = options;
    this.lastLoad = { moshi: this.lastLoad?.moshi, codec: options };
    this.codecLoaded = await this.client.loadWith(
      { mode: "codec", sources: { mimi: sourceOf(mimi) }, mimiConfig, keepForCheck },
      { onProgress, signal },
    );
    return this.codecLoaded;
  }

  /**
   * Start on `stream` (a MediaStream; the microphone with `MIC_CONSTRAINTS` when omitted).
   * `mode`: "moshi" (default) or "loopback" (microphone -> Mimi -> speakers). The
   * AudioContext runs at the device's rate; the worker resamples to and from 24 kHz.
   */
  async start(stream, { mode = "moshi", audioContext, record = 0, destination } = {}) {
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
    this.running = { ctx, ownContext: !audioContext, node, source, stream, ownStream, stats, mode, rate, startedAt: performance.now() };
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
  async stop({ drainMs = 10000 } = {}) {
    const r = this.running;
    if (!r) return null;
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
    return { worklet, core };
  }

  /**
   * While a `stop()` is finishing the frames already captured: drop those still waiting, so
   * the stop resolves after the frame in progress (the counts then show fewer frames than
   * were captured).
   */
  dropBacklog() {
    return this.client.call("drop");
  }

  /**
   * Load again what `load()` (and `loadCodec()`) last loaded, on a new WebGPU device from a
   * new adapter: what to do after a `devicelost` event. A running session is stopped first
   * (its stop's failure is the loss, not reported again). Weights streamed from URLs come
   * back from the Cache API where they were stored, without a download; `options` replace
   * the last load's (`{ onProgress, signal }`, say). Resolves to `load()`'s result.
   */
  async reload(options = {}) {
    const last = this.lastLoad;
    if (!last?.moshi && !last?.codec) throw new Error("nothing loaded: call load() first");
    if (this.running) await this.stop({ drainMs: 0 }).catch(() => {});
    let out = null;
    if (last.codec) out = await this.loadCodec({ ...last.codec, ...options });
    if (last.moshi) out = await this.load({ ...last.moshi, ...options });
    return out;
  }

  /** A new conversation (every model stream back to its start); call while stopped. */
  reset() {
    return this.client.call("reset");
  }

  /** The last loopback's recording and the CPU codec over the same input (for tests). */
  cpuCheck() {
    return this.client.call("cpuCheck");
  }

  /** Stop and end the worker; the object cannot be used again. */
  async dispose() {
    await this.stop().catch(() => {});
    this.client.dispose();
  }
}

/** Mimi alone, frame by frame, in its own worker: `encode(pcm) -> codes`, `decode(codes) -> pcm`. */
export class MimiCodec {
  /** Load a Mimi checkpoint (URL or File) with its config; see `Moshi.load`. */
  static async create({ mimi, mimiConfig, onProgress, signal, workerUrl } = {}) {
    const c = new MimiCodec();
    c.client = new WorkerClient(workerUrl);
    try {
      c.info = await c.client.loadWith({ mode: "codec", sources: { mimi: sourceOf(mimi) }, mimiConfig }, { onProgress, signal });
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
    return this.client.call("encode", { pcm: Float32Array.from(pcm) });
  }

  /** One frame of codes -> `frameSize` samples at 24 kHz (Float32Array). */
  decode(codes) {
    // Uint32Array.from would wrap a negative code into a huge one: name it as given.
    const bad = Array.from(codes).findIndex((c) => !Number.isInteger(Number(c)) || c < 0);
    if (bad >= 0) return Promise.reject(new RangeError(`code ${codes[bad]} at codebook ${bad} is not a non-negative integer`));
    return this.client.call("decode", { codes: Uint32Array.from(codes) });
  }

  /** New streams in both directions. */
  reset() {
    return this.client.call("reset");
  }

  dispose() {
    this.client.dispose();
  }
}
