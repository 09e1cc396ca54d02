// The AudioWorklet processor of the web app, in plain JS (the worklet scope cannot load the
// wasm glue). At the device's rate, per 128-sample render quantum: the microphone's samples
// go into the input ring, and the output ring's samples come out through an adaptive jitter
// buffer. It never allocates, never posts a message per quantum and never waits.
//
// Jitter buffer (the policy of Kyutai's web client): playback starts once one 80 ms frame
// plus `extra` (10 ms at first) is buffered. When the ring runs dry while playing, the last
// samples fade out, an underrun is counted, `extra` grows by 5 ms (up to 80 ms) and playback
// waits to rebuffer; when more than two frames plus `extra` are waiting, the oldest are
// dropped back to one frame plus `extra` and an overrun is counted. Playback resumes with a
// fade-in. Neither ever stops the session. While draining (control 2) it plays what is left
// and captures nothing.

import { SampleRing, STAT } from "./ring.js";

const FADE = 128;

class MoshiProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = options.processorOptions;
    this.input = new SampleRing(o.input);
    this.output = new SampleRing(o.output);
    this.stats = new Int32Array(o.stats);
    const ms = (t) => Math.round((t * sampleRate) / 1000);
    this.frame = ms(80);
    this.extra = ms(10);
    this.step = ms(5);
    this.maxExtra = ms(80);
    this.playing = false;
    this.fadeIn = 0;
    this.tail = 0; // the last sample output, for the fade of an underrun
    this.scratch = new Float32Array(128);
    this.warm = ms(500);
    Atomics.store(this.stats, STAT.targetMs, 10);
    Atomics.store(this.stats, STAT.warmUnderruns, -1);
  }

  process(inputs, outputs) {
    const s = this.stats;
    const control = Atomics.load(s, STAT.control);
    if (control !== 1 && control !== 2) {
      const out = outputs[0];
      for (let c = 0; c < out.length; c++) out[c].fill(0);
      return control !== -1;
    }
    Atomics.add(s, STAT.quanta, 1);

    // Capture: channel 0 of the microphone into the input ring.
    const mic = control === 1 && inputs[0] && inputs[0][0];
    if (mic) {
      const wrote = this.input.push(mic);
      Atomics.add(s, STAT.captured, mic.length);
      if (wrote < mic.length) Atomics.add(s, STAT.captureDropped, mic.length - wrote);
    }

    // Playback through the jitter buffer.
    const out = outputs[0];
    const ch = out[0];
    const n = ch.length;
    let avail = this.output.available();
    if (!this.playing) {
      if (avail >= this.frame + this.extra) {
        this.playing = true;
        this.fadeIn = FADE;
      } else {
        ch.fill(0);
        Atomics.add(s, STAT.silence, n);
      }
    }
    if (this.playing) {
      const high = 2 * this.frame + this.extra;
      if (avail > high) {
        const drop = avail - (this.frame + this.extra);
        this.output.skip(drop);
        avail -= drop;
        Atomics.add(s, STAT.overruns, 1);
        Atomics.add(s, STAT.dropped, drop);
      }
      const got = this.output.pop(ch, 0, n);
      for (let i = 0; this.fadeIn > 0 && i < got; i++, this.fadeIn--) ch[i] *= 1 - this.fadeIn / FADE;
      if (got < n) {
        // Ran dry: fade out what there was, or, when the ring emptied at the end of the last
        // quantum (80 ms frames are whole quanta at 48 kHz), ramp from the last sample played
        // to zero over this one: no step to click. Then rebuffer with a larger margin.
        for (let i = 0; i < got; i++) ch[i] *= (got - i) / got;
        const from = got > 0 ? 0 : this.tail;
        for (let i = got; i < n; i++) ch[i] = (from * (n - 1 - i)) / n;
        Atomics.add(s, STAT.silence, n - got);
        this.playing = false;
        this.extra = Math.min(this.extra + this.step, this.maxExtra);
        Atomics.add(s, STAT.underruns, 1);
        Atomics.store(s, STAT.targetMs, Math.round((this.extra * 1000) / sampleRate));
      }
      const played = Atomics.add(s, STAT.played, got) + got;
      if (played >= this.warm && Atomics.load(s, STAT.warmUnderruns) < 0) Atomics.store(s, STAT.warmUnderruns, Atomics.load(s, STAT.underruns));
      let peak = 0;
      for (let i = 0; i < got; i++) peak = Math.max(peak, Math.abs(ch[i]));
      if (peak > 1e-3) Atomics.add(s, STAT.audible, 1);
    }
    this.tail = ch[n - 1];
    for (let c = 1; c < out.length; c++) out[c].set(ch);
    Atomics.store(s, STAT.buffered, this.output.available());
    return true;
  }
}

registerProcessor("moshi-processor", MoshiProcessor);
