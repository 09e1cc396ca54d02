// The AudioWorklet processor (js/moshi-worklet.js) in Node, quantum by quantum, around a
// 500 ms stall of the Worker that feeds it: the processor runs with stand-ins for the
// worklet scope's globals (AudioWorkletProcessor, registerProcessor, sampleRate) on the real
// SharedArrayBuffer rings of js/ring.js. The "Worker" here pushes one 80 ms frame of a tone
// per 80 ms of simulated time, stops for 500 ms, then writes the frames it owes at once (the
// backlog a stalled core catches up on) and goes on in real time. Checked: the output fades
// into silence instead of stepping (no click), the underrun and the overrun are counted,
// playback resumes with a fade-in, every sample is played or counted as silence, and the
// capture side keeps every sample meanwhile.
//   node --test tests/e2e/worklet.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";

const RATE = 48000;
const Q = 128;
let Processor;
globalThis.sampleRate = RATE;
globalThis.AudioWorkletProcessor = class {};
globalThis.registerProcessor = (name, cls) => (Processor = cls);
const { SampleRing, STAT, createStats } = await import("../../js/ring.js");
await import("../../js/moshi-worklet.js");

const FRAME = (RATE * 80) / 1000; // 3840 samples: 30 quanta
const QUANTA_PER_FRAME = FRAME / Q;

function setup() {
  const input = SampleRing.create(RATE * 45);
  const output = SampleRing.create(RATE * 5);
  const stats = createStats();
  const proc = new Processor({ processorOptions: { input: input.sab, output: output.sab, stats: stats.buffer } });
  Atomics.store(stats, STAT.control, 1);
  return { input, output, stats, proc };
}

// A 440 Hz tone at half scale, continuous across frames.
const tone = (start, n) => Float32Array.from({ length: n }, (_, i) => 0.5 * Math.sin((2 * Math.PI * 440 * (start + i)) / RATE));

test("worklet: a 500 ms Worker stall plays faded silence, counts an underrun and an overrun, then resumes", () => {
  const { input, output, stats, proc } = setup();
  const st = (k) => Atomics.load(stats, STAT[k]);
  const mic = [new Float32Array(Q).fill(0.25)];
  const played = [];
  let made = 0; // tone samples written by the "Worker"
  let quantum = 0;
  const push = (frames) => {
    for (let f = 0; f < frames; f++) {
      assert.equal(output.push(tone(made, FRAME)), FRAME);
      made += FRAME;
    }
  };
  const render = (quanta) => {
    for (let i = 0; i < quanta; i++, quantum++) {
      const out = [new Float32Array(Q)];
      assert.equal(proc.process([mic], [out]), true);
      played.push(...out[0]);
    }
  };
  // Two frames ahead, then one per frame time: a Worker keeping up in real time.
  push(2);
  for (let f = 0; f < 25; f++) {
    render(QUANTA_PER_FRAME);
    push(1);
  }
  const before = { underruns: st("underruns"), overruns: st("overruns"), played: st("played"), silence: st("silence"), buffered: output.available() };
  assert.equal(before.underruns, 0, "no underrun while the Worker keeps up");
  assert.equal(before.overruns, 0);
  assert.ok(before.played > 20 * FRAME, "played in real time before the stall");

  // The stall: 500 ms (187.5 quanta) with nothing written.
  const stallQuanta = Math.ceil((0.5 * RATE) / Q);
  const stallAt = played.length;
  render(stallQuanta);
  const during = { underruns: st("underruns"), played: st("played"), silence: st("silence") };
  assert.equal(during.underruns - before.underruns, 1, "the stall is one underrun");
  assert.equal(during.played - before.played, before.buffered, "during the stall it plays only what was buffered");
  assert.equal(during.silence - before.silence, stallQuanta * Q - before.buffered, "then silence");
  assert.equal(st("targetMs"), 15, "the jitter margin grew by 5 ms");
  // Faded: after the buffered audio, a ramp of one quantum to zero, then exact zeros.
  const dryAt = stallAt + before.buffered;
  assert.ok(Math.abs(played[dryAt - 1]) > 0.01, "the tone was playing up to the underrun");
  for (let i = dryAt + Q; i < stallAt + stallQuanta * Q; i++) assert.equal(played[i], 0, `sample ${i} of the stall is not silent`);

  // The Worker catches up: the 500 ms it owes arrive at once, then real time again.
  const owed = Math.ceil((stallQuanta * Q) / FRAME);
  push(owed);
  for (let f = 0; f < 20; f++) {
    render(QUANTA_PER_FRAME);
    push(1);
  }
  const after = { underruns: st("underruns"), overruns: st("overruns"), played: st("played"), dropped: st("dropped"), silence: st("silence") };
  assert.equal(after.underruns, during.underruns, "no further underrun once it resumed");
  assert.equal(after.overruns, 1, "the backlog is one overrun: the oldest samples dropped");
  const margin = (15 * RATE) / 1000;
  assert.equal(after.dropped, owed * FRAME - (FRAME + margin), "dropped back to one frame plus the margin");
  assert.ok(after.played - during.played >= 19 * FRAME, "playback resumed");
  assert.ok(st("buffered") <= 2 * FRAME + margin, "latency back within two frames plus the margin");

  // No click anywhere: sample to sample, the output never jumps more than the tone itself
  // does (0.5 * 2 pi * 440 / 48000 = 0.029 per sample), neither into the stall's silence nor
  // out of it (the overrun's cut falls in the fade-in from silence).
  const toneStep = (0.5 * 2 * Math.PI * 440) / RATE;
  const jumps = [];
  for (let i = 1; i < played.length; i++) if (Math.abs(played[i] - played[i - 1]) > toneStep * 1.5) jumps.push(i);
  assert.deepEqual(jumps.slice(0, 5), [], "the output steps (a click)");

  // Every output sample is played or silence; the capture kept every microphone sample.
  assert.equal(after.played + after.silence, quantum * Q);
  assert.equal(st("captured"), quantum * Q);
  assert.equal(st("captureDropped"), 0);
  assert.equal(input.available(), quantum * Q, "the input ring holds every captured sample for the core");
});

test("worklet: draining captures nothing and plays out what is left; off outputs silence", () => {
  const { input, output, stats, proc } = setup();
  output.push(tone(0, 2 * FRAME));
  const mic = [new Float32Array(Q).fill(0.25)];
  const out = [new Float32Array(Q)];
  proc.process([mic], [out]);
  Atomics.store(stats, STAT.control, 2);
  for (let i = 0; i < 2 * QUANTA_PER_FRAME + 2; i++) proc.process([mic], [out]);
  assert.equal(Atomics.load(stats, STAT.captured), Q, "nothing captured while draining");
  assert.equal(input.available(), Q);
  assert.equal(Atomics.load(stats, STAT.played), 2 * FRAME, "played every sample left");
  assert.equal(Atomics.load(stats, STAT.underruns), 1);
  Atomics.store(stats, STAT.control, 0);
  out[0].fill(1);
  assert.equal(proc.process([mic], [out]), true);
  assert.ok(out[0].every((v) => v === 0));
  Atomics.store(stats, STAT.control, -1);
  assert.equal(proc.process([mic], [out]), false, "control -1 ends the processor");
});
