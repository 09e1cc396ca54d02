// Types of inferencelayer's JavaScript API (moshi.js).

/** A weight file: a URL (fetched by the worker) or a File/Blob the user picked. */
export type Source = string | URL | Blob;

/** A config: Kyutai's keys as an object or JSON text. */
export type Config = string | Record<string, unknown>;

export interface Progress {
  /** "mimi", "lm" or "tokenizer". */
  file: string;
  /** Bytes so far. */
  loaded: number;
  /** Bytes in all (0 when the server did not say). */
  total: number;
  /** The tensor being read, for a streamed load. */
  tensor?: string;
  /** Of `loaded`, the bytes read from the browser's Cache API rather than the network. */
  fromCache?: number;
}

export interface LoadOptions {
  mimi: Source;
  lm: Source;
  tokenizer?: Source;
  /** Omitted: the released Mimi. */
  mimiConfig?: Config;
  /** Omitted: Moshi 7B. */
  lmConfig?: Config;
  /** Seed of Moshi's sampling (text temperature 0.7 top-k 25, audio 0.8 top-k 250). */
  seed?: number;
  /** Greedy decoding instead of sampling. */
  greedy?: boolean;
  onProgress?: (p: Progress) => void;
  signal?: AbortSignal;
}

export interface LoadedInfo {
  /** The WebGPU adapter, in words. */
  adapter: string;
  /** Samples per frame at 24 kHz (1920). */
  frameSize: number;
  numCodebooks?: number;
}

export interface TextEventDetail {
  frame: number;
  /** Moshi's text token id. */
  token: number;
  /** Its decoded piece ("" for padding or without a tokenizer). */
  text: string;
}

export interface FrameEventDetail {
  frame: number;
  /** Mimi encode with its readback, ms. */
  encodeMs: number;
  /** LM step and Mimi decode with their readbacks (loopback: Mimi decode), ms. */
  stepMs: number;
  /** The whole frame in the worker, ms. */
  totalMs: number;
  /** Captured audio waiting for the core when the frame began, ms. */
  lagMs: number;
}

export interface StartOptions {
  /** "moshi" (default): full duplex; "loopback": microphone -> Mimi -> speakers. */
  mode?: "moshi" | "loopback";
  /** Use this context (at the device's rate) instead of a new one. */
  audioContext?: AudioContext;
  /** Where the output goes (default: the context's destination). */
  destination?: AudioNode;
  /** Loopback only: record this many frames for `cpuCheck()`. */
  record?: number;
}

/** Counters of the audio path, in device-rate samples unless named otherwise. */
export interface AudioStats {
  sampleRate: number;
  mode: string;
  captured: number;
  captureDropped: number;
  played: number;
  underruns: number;
  overruns: number;
  dropped: number;
  silence: number;
  buffered: number;
  targetMs: number;
  quanta: number;
  audible: number;
  /** Underruns during the first 0.5 s of playback (warm-up); -1 before it ends. */
  warmUnderruns: number;
}

export interface CoreCounts {
  /** Device-rate samples the worker took from the input ring. */
  popped: number;
  /** Those, resampled to 24 kHz. */
  resampled: number;
  /** Frames run through the core. */
  frames: number;
  /** Frames of audio written to the output ring. */
  outputFrames: number;
  /** Device-rate samples written to the output ring. */
  outputSamples: number;
  /** Samples the output ring had no room for. */
  outputDropped: number;
  textEvents: number;
  record: boolean;
}

export interface Support {
  ok: boolean;
  webgpu: boolean;
  isolated: boolean;
  worklet: boolean;
  /** Plain sentences saying what is missing. */
  problems: string[];
}

export declare const MIC_CONSTRAINTS: MediaStreamConstraints;
export declare const STAT: Readonly<Record<string, number>>;
export declare function support(): Support;
/** `support()` plus whether WebGPU gives an adapter (asks `navigator.gpu.requestAdapter()`). */
export declare function checkSupport(): Promise<Support & { adapter: boolean }>;

export interface MoshiEventMap {
  text: CustomEvent<TextEventDetail>;
  frame: CustomEvent<FrameEventDetail>;
  progress: CustomEvent<Progress>;
  error: CustomEvent<{ message: string }>;
  /** Every audio track of the started stream ended: capture ends and the session stops. */
  micended: CustomEvent<{ capturedSeconds: number }>;
  /** A session ended (by `stop()` or an ended microphone), with the stop's counts. */
  stopped: CustomEvent<{ reason: "stop" | "micended"; worklet: AudioStats; core: CoreCounts }>;
  /** The GPU device was lost: the models on it are gone; `reload()` continues on a new one. */
  devicelost: CustomEvent<{ message: string }>;
}

/** Device limits, in bytes, under WebGPU's names. */
export interface DeviceLimits {
  maxStorageBufferBindingSize: number;
  maxBufferSize: number;
}

/** What one model needs of the device, from its config alone. */
export interface ModelRequirements {
  model: string;
  limits: DeviceLimits;
  largestBuffer: { name: string; bytes: number } | null;
  totalBytes: number;
  buffers: number;
  /** Tables kept in parts of whole rows to fit the binding limit. */
  split: { name: string; parts: number }[];
  fits: boolean;
  /** When it does not fit: the message, the limit broken, the bytes needed and allowed. */
  error: string | null;
  limit: "maxStorageBufferBindingSize" | "maxBufferSize" | null;
  needed: number | null;
  allowed: number | null;
}

/** The capability check's answer (`Moshi.checkRequirements`). */
export interface CapabilityReport {
  adapter: string;
  adapterLimits: DeviceLimits;
  /** What the models are checked against: the adapter's, or the emulated limits. */
  limits: DeviceLimits;
  models: ModelRequirements[];
  fits: boolean;
  error: string | null;
}

export declare class Moshi extends EventTarget {
  /** `limits`: emulate a smaller device (checks and loads keep to them). */
  constructor(options?: { workerUrl?: string | URL; workletUrl?: string | URL; limits?: DeviceLimits });
  /** The capability check from the configs, before anything downloads. */
  checkRequirements(options?: { mimiConfig?: Config; lmConfig?: Config; lm?: boolean }): Promise<CapabilityReport>;
  /** Rejects while a session runs (stop() it first) or while another load() or loadCodec() is in progress (await it first; an aborted one settles once the worker has stopped it); what was loaded then stays loaded. */
  load(options: LoadOptions): Promise<LoadedInfo>;
  /** Mimi alone, for the codec loopback; rejects while a session runs or another load is in progress, as load() does. */
  loadCodec(options: { mimi: Source; mimiConfig?: Config; keepForCheck?: boolean; onProgress?: (p: Progress) => void; signal?: AbortSignal }): Promise<LoadedInfo>;
  start(stream?: MediaStream, options?: StartOptions): Promise<{ sampleRate: number }>;
  stop(options?: { drainMs?: number }): Promise<{ worklet: AudioStats; core: CoreCounts } | null>;
  /** During a stop, drop the captured frames still waiting (the stop then resolves soon). */
  dropBacklog(): Promise<null>;
  /** Test hook (fault injection): the Worker busy-waits `ms` ms (0 to 10000). */
  stallWorker(ms: number): Promise<{ stalledMs: number; frames: number }>;
  /** Test hook (fault injection): destroy the loaded models' WebGPU device (then `devicelost`). */
  loseDevice(): Promise<null>;
  stats(): AudioStats | null;
  frameTimeSummary(): { frames: number; p50: number; p95: number; over80: number };
  /** Load the last `load()` / `loadCodec()` again on a new device (after `devicelost`). */
  reload(options?: Partial<LoadOptions>): Promise<LoadedInfo>;
  reset(): Promise<void>;
  cpuCheck(): Promise<{ frames: number; input: Float32Array; gpuCodes: Uint32Array; gpuPcm: Float32Array; cpuCodes: Uint32Array; cpuPcm: Float32Array }>;
  dispose(): Promise<void>;
  addEventListener<K extends keyof MoshiEventMap>(type: K, listener: (ev: MoshiEventMap[K]) => void, options?: boolean | AddEventListenerOptions): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: boolean | AddEventListenerOptions): void;
}

/** Mimi alone, frame by frame, in its own worker. Calls made without awaiting the one before run one at a time, in the order they were made. */
export declare class MimiCodec {
  static create(options: { mimi: Source; mimiConfig?: Config; onProgress?: (p: Progress) => void; signal?: AbortSignal; workerUrl?: string | URL }): Promise<MimiCodec>;
  readonly frameSize: number;
  readonly numCodebooks: number;
  encode(pcm: Float32Array | number[]): Promise<Uint32Array>;
  decode(codes: Uint32Array | number[]): Promise<Float32Array>;
  reset(): Promise<void>;
  dispose(): void;
}
