// The dedicated Worker of the web app: it owns the wasm core and the WebGPU device. It
// loads the weights (fetch with progress and abort, or a File), then per 80 ms frame reads
// the microphone's samples from the input ring, resamples them to 24 kHz, runs Mimi encode
// -> Moshi step -> Mimi decode (or Mimi encode -> decode in the codec loopback), resamples
// Moshi's audio to the device's rate and writes it to the output ring. The GPU's readbacks
// are awaited here, never by the audio thread: the worklet only ever sees the rings.
//
// Messages in: { id, type, ... } with type check | load | start | stop | reset | encode |
// decode | capture | cpuCheck | abort | dispose | stall | loseDevice (test hooks); check and load may
// carry `limits`, the device limits to emulate; each answered by { id, ok, value | error }.
// Messages out, unprompted: { type: "event", name: "progress" | "frame" | "text" | "error" |
// "devicelost", detail }.

import init, { initPanicHook, MoshiSession, MimiCodec, StreamResampler, mimiCpuRoundtrip, checkRequirements, emulateLimits } from "./inferencelayer.js";
import { SampleRing, STAT } from "./ring.js";

const RATE = 24000;
let ready = null;
let session = null; // MoshiSession
let codec = null; // MimiCodec
let mimiBytes = null; // kept for the CPU check when asked to
let mimiConfig = undefined;
let loop = null;
const aborts = new Map();

function emit(name, detail) {
  postMessage({ type: "event", name, detail });
}

// The core's Error::DeviceLost: the models on the lost device are gone; a new load opens a
// new device on a new adapter (the weights from the Cache API where they were stored).
const isDeviceLost = (e) => /GPU device lost/.test(String(e?.message || e));
function reportFailure(e) {
  const message = String(e?.message || e);
  if (isDeviceLost(e)) emit("devicelost", { message });
  emit("error", { message });
}

// A URL (fetched, streamed for progress) or a Blob/File, into one Uint8Array: for Files,
// the tokenizer and the codec kept for the CPU check.
async function loadBytes(source, name, signal) {
  let total = 0, reader;
  if (typeof Blob !== "undefined" && source instanceof Blob) {
    total = source.size;
    reader = source.stream().getReader();
  } else {
    let res;
    try {
      res = await fetch(String(source), { signal });
    } catch (e) {
      if (e?.name === "AbortError") throw e;
      throw new Error(`${name}: cannot fetch ${source} (${e?.message || e}): is the server up and the URL right?`);
    }
    if (!res.ok) throw new Error(`${name}: ${source} answered HTTP ${res.status}${res.status === 404 ? " (no such file: check the URL)" : ""}`);
    total = Number(res.headers.get("content-length")) || 0;
    reader = res.body.getReader();
  }
  let buf = new Uint8Array(total || 1 << 20);
  let loaded = 0, last = 0;
  for (;;) {
    if (signal.aborted) throw new DOMException("loading aborted", "AbortError");
    const { done, value } = await reader.read();
    if (done) break;
    if (loaded + value.length > buf.length) {
      const bigger = new Uint8Array(Math.max(buf.length * 2, loaded + value.length));
      bigger.set(buf.subarray(0, loaded));
      buf = bigger;
    }
    buf.set(value, loaded);
    loaded += value.length;
    const now = performance.now();
    if (now - last > 50) {
      last = now;
      emit("progress", { file: name, loaded, total });
    }
  }
  emit("progress", { file: name, loaded, total: total || loaded });
  return loaded === buf.length ? buf : buf.slice(0, loaded);
}

const asJson = (c) => (c === undefined || c === null ? undefined : typeof c === "string" ? c : JSON.stringify(c));

const isUrl = (s) => typeof s === "string";
// Progress of a streamed load, as the page sees it: { file, loaded, total }.
const progressOf = (file) => (p) => emit("progress", { file, loaded: p.loaded, total: p.total || 0, tensor: p.tensor, fromCache: p.fromCache || 0 });

// URLs stream through the Rust loaders (the LM straight into GPU buffers, with Range resume
// and the Cache API); Files, or a codec kept for the CPU check, go as whole bytes.
// Emulated device limits ({ maxStorageBufferBindingSize, maxBufferSize } in bytes) for the
// contexts opened next; none given: the adapter's own.
const applyLimits = (l) => emulateLimits(l?.maxStorageBufferBindingSize ?? undefined, l?.maxBufferSize ?? undefined);

async function load(msg, signal) {
  await ready;
  applyLimits(msg.limits);
  const s = msg.sources;
  if (msg.mode === "codec") {
    mimiConfig = asJson(msg.mimiConfig);
    codec?.free();
    codec = null;
    if (isUrl(s.mimi) && !msg.keepForCheck) {
      codec = await MimiCodec.load(s.mimi, mimiConfig, progressOf("mimi"), signal);
      mimiBytes = null;
    } else {
      const m = await loadBytes(s.mimi, "mimi", signal);
      mimiBytes = msg.keepForCheck ? m.slice() : null;
      codec = await MimiCodec.create(m, mimiConfig);
    }
    return { adapter: codec.adapter, frameSize: codec.frameSize, numCodebooks: codec.numCodebooks };
  }
  const tok = s.tokenizer ? await loadBytes(s.tokenizer, "tokenizer", signal) : undefined;
  session?.free();
  session = null;
  const mc = asJson(msg.mimiConfig), lc = asJson(msg.lmConfig), seed = msg.seed >>> 0, greedy = !!msg.greedy;
  if (isUrl(s.mimi) && isUrl(s.lm)) {
    session = await MoshiSession.load(s.mimi, mc, s.lm, lc, tok, seed, greedy, progressOf("mimi"), progressOf("lm"), signal);
  } else {
    const m = await loadBytes(s.mimi, "mimi", signal);
    const lm = await loadBytes(s.lm, "lm", signal);
    session = await MoshiSession.create(m, mc, lm, lc, tok, seed, greedy);
  }
  return { adapter: session.adapter, frameSize: session.frameSize };
}

// A growable queue of 24 kHz samples between the resampler and the frames.
class Fifo {
  constructor(n) { this.buf = new Float32Array(n); this.len = 0; }
  push(x) {
    if (this.len + x.length > this.buf.length) {
      const b = new Float32Array(2 * (this.len + x.length));
      b.set(this.buf.subarray(0, this.len));
      this.buf = b;
    }
    this.buf.set(x, this.len);
    this.len += x.length;
  }
  take(n) {
    const out = this.buf.slice(0, n);
    this.buf.copyWithin(0, n, this.len);
    this.len -= n;
    return out;
  }
}

class Loop {
  constructor(msg) {
    this.mode = msg.mode;
    this.input = new SampleRing(msg.input);
    this.output = new SampleRing(msg.output);
    this.stats = new Int32Array(msg.stats);
    this.rate = msg.sampleRate;
    this.inRes = new StreamResampler(this.rate, RATE);
    this.outRes = new StreamResampler(RATE, this.rate);
    this.fifo = new Fifo(8 * 1920);
    this.scratch = new Float32Array(16384);
    this.running = true;
    this.record = msg.record ? { frames: msg.record, input: [], codes: [], pcm: [] } : null;
    this.counts = { popped: 0, resampled: 0, frames: 0, outputFrames: 0, outputSamples: 0, outputDropped: 0, textEvents: 0 };
    this.done = this.run();
  }

  async wait() {
    // Sleep until the worklet writes more input (Atomics.waitAsync where there is one).
    const idx = this.input.index;
    const w = Atomics.load(idx, 0);
    if (Atomics.waitAsync) {
      const r = Atomics.waitAsync(idx, 0, w, 20);
      if (r.async) await r.value;
    } else {
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  drainInput() {
    let n;
    while ((n = this.input.pop(this.scratch)) > 0) {
      this.counts.popped += n;
      const y = this.inRes.process(this.scratch.subarray(0, n));
      this.counts.resampled += y.length;
      this.fifo.push(y);
    }
  }

  async run() {
    while (!this.drop && (this.running || this.input.available() > 0 || this.fifo.len >= 1920)) {
      this.drainInput();
      if (this.fifo.len < 1920) {
        if (!this.running) break;
        await this.wait();
        continue;
      }
      const frame = this.fifo.take(1920);
      const t0 = performance.now();
      const lagMs = (this.input.available() / this.rate + this.fifo.len / RATE) * 1000;
      let pcm, detail;
      if (this.loseDevice) {
        this.loseDevice = false;
        destroyDevices();
      }
      if (this.mode === "loopback") {
        const r = await codec.roundtrip(frame);
        pcm = r.pcm;
        detail = { frame: this.counts.frames, encodeMs: r.encodeMs, stepMs: r.decodeMs };
        if (this.record && this.record.input.length < this.record.frames) {
          this.record.input.push(frame);
          this.record.codes.push(r.codes);
          this.record.pcm.push(r.pcm);
        }
      } else {
        const r = await session.step(frame);
        pcm = r.pcm;
        detail = { frame: r.frame, encodeMs: r.encodeMs, stepMs: r.stepMs };
        if (r.token >= 0) {
          this.counts.textEvents++;
          emit("text", { frame: r.frame, token: r.token, text: r.text });
        }
      }
      this.counts.frames++;
      detail.totalMs = performance.now() - t0;
      detail.lagMs = lagMs;
      if (pcm.length) {
        const out = this.outRes.process(pcm);
        const wrote = this.output.push(out);
        this.counts.outputFrames++;
        this.counts.outputSamples += wrote;
        this.counts.outputDropped += out.length - wrote;
      }
      emit("frame", detail);
    }
    return this.counts;
  }
}

function destroyDevices() {
  session?.destroyDevice();
  codec?.destroyDevice();
}

const handlers = {
  // The capability check from the configs alone, before anything downloads.
  async check(msg) {
    await ready;
    applyLimits(msg.limits);
    return await checkRequirements(asJson(msg.mimiConfig), asJson(msg.lmConfig), msg.withLm !== false);
  },
  async load(msg) {
    // Loading frees the models a running frame loop is using.
    if (loop) throw new Error("a session is running: stop it before loading new weights");
    const ac = new AbortController();
    aborts.set(msg.id, ac);
    try {
      return await load(msg, ac.signal);
    } catch (e) {
      if (!ac.signal.aborted) throw e;
      const err = new Error(String(e?.message || e));
      err.name = "AbortError";
      throw err;
    } finally {
      aborts.delete(msg.id);
    }
  },
  abort(msg) {
    aborts.get(msg.target)?.abort();
  },
  start(msg) {
    if (loop) throw new Error("a session is already running");
    if (msg.mode === "loopback" ? !codec : !session) throw new Error(`nothing loaded for mode ${msg.mode}`);
    loop = new Loop(msg);
    loop.done.catch(reportFailure);
    return { started: true };
  },
  async stop() {
    if (!loop) return null;
    const l = loop;
    l.running = false;
    try {
      // A loop that failed (a lost device, say) still ends the session: its error was
      // reported as an `error` event and is the stop's rejection.
      const counts = await l.done;
      counts.record = !!l.record;
      stopped = l;
      return counts;
    } finally {
      loop = null;
    }
  },
  // During a stop: leave the frames still waiting unprocessed (a core slower than real time
  // can have minutes of them).
  drop() {
    if (loop && !loop.running) loop.drop = true;
    return null;
  },
  reset() {
    if (loop) throw new Error("a session is running: stop it before reset");
    return inOrder(() => {
      session?.reset();
      codec?.reset();
      return null;
    });
  },
  encode(msg) {
    return inOrder(() => {
      if (!codec) throw new Error("no codec loaded");
      return codec.encode(msg.pcm);
    });
  },
  decode(msg) {
    return inOrder(() => {
      if (!codec) throw new Error("no codec loaded");
      return codec.decode(msg.codes);
    });
  },
  // What the last loopback recorded, with the CPU codec run over the same 24 kHz input.
  cpuCheck() {
    const rec = stopped?.record;
    if (!rec || !rec.input.length) throw new Error("no loopback recording (start with record)");
    if (!mimiBytes) throw new Error("the codec was loaded without keepForCheck");
    const cat = (arrs, T) => {
      const out = new T(arrs.reduce((n, a) => n + a.length, 0));
      let o = 0;
      for (const a of arrs) { out.set(a, o); o += a.length; }
      return out;
    };
    const input = cat(rec.input, Float32Array);
    const cpu = mimiCpuRoundtrip(mimiBytes, mimiConfig, input);
    return { frames: rec.input.length, input, gpuCodes: cat(rec.codes, Uint32Array), gpuPcm: cat(rec.pcm, Float32Array), cpuCodes: cpu.codes, cpuPcm: cpu.pcm };
  },
  // Test hook, for fault injection (Moshi.stallWorker): keep this thread busy for `ms` ms,
  // as a long task or a slow collection would. The frame loop and every message wait
  // meanwhile; the worklet keeps capturing and playing from the rings.
  stall(msg) {
    const ms = Number(msg.ms);
    if (!(ms >= 0 && ms <= 10000)) throw new RangeError(`stall: ${msg.ms} ms is not between 0 and 10000`);
    const t0 = performance.now();
    const frames = loop ? loop.counts.frames : 0;
    while (performance.now() - t0 < ms);
    return { stalledMs: performance.now() - t0, frames };
  },
  // Test hook, for fault injection (Moshi.loseDevice): destroy the WebGPU device of the
  // loaded models, as a driver reset would; the frame loop's next step fails with the loss.
  // A running loop destroys it before its next frame (a model is borrowed by the Rust side
  // for as long as one of its steps is awaited).
  loseDevice() {
    if (!session && !codec) throw new Error("loseDevice: nothing loaded");
    if (loop) loop.loseDevice = true;
    else destroyDevices();
    return null;
  },
  dispose() {
    session?.free();
    codec?.free();
    session = codec = null;
    close();
  },
};
let stopped = null;
// The codec's calls one at a time, in the order they came: a call that began while another
// was waiting for its readback would find the codec in use (a streaming codec's state
// goes from one frame to the next).
let queue = Promise.resolve();
function inOrder(f) {
  const p = queue.then(f);
  queue = p.catch(() => {});
  return p;
}

onmessage = async (e) => {
  const msg = e.data;
  try {
    const value = await handlers[msg.type](msg);
    postMessage({ id: msg.id, ok: true, value });
  } catch (err) {
    if (isDeviceLost(err) && msg.type !== "stop") emit("devicelost", { message: String(err?.message || err) });
    postMessage({ id: msg.id, ok: false, error: { name: err?.name || "Error", message: String(err?.message || err) } });
  }
};

ready = init().then(() => initPanicHook());
