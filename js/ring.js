// Single-producer single-consumer rings of f32 samples over a SharedArrayBuffer, and the
// shared counters of the audio path. Plain JS with no imports, so that the AudioWorklet
// (which has no TextDecoder, hence no wasm glue) can load it.
//
// Layout of a ring: Int32 [write, read, 0, 0] (16 bytes), then `capacity` f32 samples
// (a power of two). `write` and `read` count samples since the start and wrap at 2^32;
// only the producer stores `write`, only the consumer stores `read` (Atomics), so neither
// side ever waits or locks. Nothing here allocates after construction.

export const RING_HEADER_BYTES = 16;

export class SampleRing {
  /** A new ring of at least `capacity` samples (rounded up to a power of two). */
  static create(capacity) {
    let cap = 1;
    while (cap < capacity) cap <<= 1;
    return new SampleRing(new SharedArrayBuffer(RING_HEADER_BYTES + 4 * cap));
  }

  /** A view of a ring made by `create` (possibly in another thread). */
  constructor(sab) {
    this.sab = sab;
    this.index = new Int32Array(sab, 0, 4);
    this.data = new Float32Array(sab, RING_HEADER_BYTES);
    this.capacity = this.data.length;
    this.mask = this.capacity - 1;
  }

  /** Samples the consumer can read now. */
  available() {
    return (Atomics.load(this.index, 0) - Atomics.load(this.index, 1)) | 0;
  }

  /** Samples the producer can write now. */
  space() {
    return this.capacity - this.available();
  }

  /** Producer: write `src[start, end)` or as much as fits; returns the samples written. */
  push(src, start = 0, end = src.length) {
    const w = Atomics.load(this.index, 0);
    const n = Math.min(end - start, this.capacity - ((w - Atomics.load(this.index, 1)) | 0));
    const d = this.data, m = this.mask;
    for (let i = 0; i < n; i++) d[(w + i) & m] = src[start + i];
    Atomics.store(this.index, 0, (w + n) | 0);
    return n;
  }

  /** Consumer: read up to `n` samples into `dst` from `offset`; returns the samples read. */
  pop(dst, offset = 0, n = dst.length - offset) {
    const r = Atomics.load(this.index, 1);
    const k = Math.min(n, (Atomics.load(this.index, 0) - r) | 0);
    const d = this.data, m = this.mask;
    for (let i = 0; i < k; i++) dst[offset + i] = d[(r + i) & m];
    Atomics.store(this.index, 1, (r + k) | 0);
    return k;
  }

  /** Consumer: drop the `n` oldest samples (at most what is there); returns those dropped. */
  skip(n) {
    const r = Atomics.load(this.index, 1);
    const k = Math.min(n, (Atomics.load(this.index, 0) - r) | 0);
    Atomics.store(this.index, 1, (r + k) | 0);
    return k;
  }
}

// Counters shared by the worklet (which writes them) and the worker and page (which read
// them): an Int32Array over a SharedArrayBuffer, indexed by these names.
export const STAT = Object.freeze({
  control: 0, // written by the page: 1 = run, 2 = drain (play what is left, capture nothing), 0 = off
  captured: 1, // device-rate samples the microphone gave the worklet
  captureDropped: 2, // of those, samples the input ring had no room for
  played: 3, // device-rate samples played from the output ring
  underruns: 4, // times the output ring ran dry while playing (faded out, then rebuffered)
  overruns: 5, // times the output ring held too much and the oldest samples were dropped
  dropped: 6, // samples dropped by those overruns
  silence: 7, // samples of silence output while buffering
  buffered: 8, // output samples waiting, at the last quantum
  targetMs: 9, // the jitter buffer's current start threshold beyond one frame, in ms
  quanta: 10, // render quanta processed
  audible: 11, // output quanta with a sample above -60 dBFS
  warmUnderruns: 12, // underruns before the first 0.5 s of playback (warm-up); -1 until then
  length: 16,
});

export function createStats() {
  return new Int32Array(new SharedArrayBuffer(4 * STAT.length));
}
