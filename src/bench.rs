//! The per-stage benchmarks, one code path for the native `inferencelayer bench` /
//! `bench-lm` and the wasm build's `benchMimi` / `benchLm` (a browser page, or Node on Dawn):
//! the same frame loops, the same statistics and the same JSON fields, so a script can divide
//! one run's figures by the other's stage by stage.
//!
//! Stages, each timed per 80 ms frame after warm-up with its submits and readback, on a
//! caller's clock in milliseconds (`std::time::Instant` natively, `performance.now()` on the
//! web): Mimi encode and decode ([`bench_mimi`]); the LM step (temporal transformer and
//! depformer in one replay: a few submits recorded during the frame before, and one
//! readback), then the temporal part and the depformer submitted and waited for apart (recorded before their
//! timings, as the step's frames are recorded ahead), and the whole full-duplex frame as `Session::step` runs
//! it ([`bench_lm`]). Statistics are nearest-rank p50 / p95 / p99, the mean and the frames
//! over 80 ms ([`Stats`]); the GPU time per step comes from timestamp queries where the
//! adapter has them ([`profile`]); the achieved bandwidth is compared with a copy kernel's
//! ([`copy_bandwidth`]).

use std::rc::Rc;

use crate::error::{Error, Result};
use crate::gpu::{frame_submits, GpuContext, GpuInfo, Plan, Q8Dot, Readback};
use crate::mimi::{Mimi, MimiWeights};
use crate::moshi::synthetic::{bench_user_codes, parameter_count, weight_bytes};
use crate::moshi::{Lm, LmConfig, LmGen, LmGpuWeights, Sampling};
use crate::session::Session;

/// The real-time budget of one frame, in ms (1920 samples at 24 kHz).
pub const FRAME_MS: f64 = 80.0;

/// Least time each benchmark loop warms up for, in ms, beyond its warm-up frames: on an
/// H200 the first 10 to 30 LM steps after a pause ran at 8 to 10 ms instead of 5.2 (the
/// GPU's clocks and power still settling, about 250 ms), which 10 warm-up frames of 5 ms
/// left inside the timed frames. Kyutai's reference warms up for 20 steps of 12.7 ms.
pub const WARMUP_MIN_MS: f64 = 500.0;

/// Whether frame `t` of a loop that started at `since` (ms on the loop's clock) still
/// warms up: before `warmup` frames or [`WARMUP_MIN_MS`] have gone by.
fn warming(t: usize, warmup: usize, since: f64, now: f64) -> bool {
    t < warmup || now - since < WARMUP_MIN_MS
}

/// The benchmark's test signal: 2.96 s of speech, 24 kHz mono 16-bit.
const BENCH_WAV: &[u8] = include_bytes!("../tests/golden/mimi_input.wav");

/// The benchmarks' input: the embedded speech clip `tests/golden/mimi_input.wav`, 2.96 s at
/// 24 kHz mono, as f32 samples in [-1, 1). Looped over as many frames as are timed.
pub fn bench_signal() -> Result<Vec<f32>> {
    let embedded = |e: hound::Error| Error::Input(format!("embedded benchmark clip: {e}"));
    let mut r = hound::WavReader::new(BENCH_WAV).map_err(embedded)?;
    r.samples::<i16>().map(|s| s.map(|s| s as f32 / 32768.0).map_err(embedded)).collect()
}

/// Nearest-rank p50, p95, p99, the mean and the frames over [`FRAME_MS`] of per-frame times
/// in ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub mean: f64,
    /// Frames over 80 ms (the real-time budget of one frame).
    pub over: usize,
}

impl Stats {
    /// The statistics of `ms` (at least one value; an empty slice gives zeros).
    pub fn of(ms: &[f64]) -> Self {
        if ms.is_empty() {
            return Self { p50: 0.0, p95: 0.0, p99: 0.0, mean: 0.0, over: 0 };
        }
        let mut v = ms.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Self {
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            over: v.iter().filter(|&&m| m > FRAME_MS).count(),
        }
    }

    /// `{ p50, p95, p99, mean, over_80ms }`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "p50": self.p50, "p95": self.p95, "p99": self.p99, "mean": self.mean, "over_80ms": self.over })
    }
}

/// Most frames one benchmark times (a day of audio at 80 ms a frame): the per-frame timings
/// are kept for the percentiles.
pub const MAX_FRAMES: usize = 1_080_000;
/// Most replays of a plan one profile takes.
pub const MAX_REPLAYS: usize = 10_000;

/// [`Error::Input`] for 0 frames, or more than [`MAX_FRAMES`] frames or [`MAX_REPLAYS`]
/// replays.
pub fn check_counts(frames: usize, replays: usize) -> Result<()> {
    if frames == 0 {
        return Err(Error::Input("frames must be at least 1".into()));
    }
    if frames > MAX_FRAMES {
        return Err(Error::Input(format!("{frames} frames is more than a benchmark times (at most {MAX_FRAMES}, a day of audio)")));
    }
    if replays > MAX_REPLAYS {
        return Err(Error::Input(format!("{replays} profile replays is more than a benchmark takes (at most {MAX_REPLAYS})")));
    }
    Ok(())
}

/// Most untimed warm-up frames one benchmark runs before it times ([`MAX_FRAMES`]: a day
/// of audio, far past the temporal transformer's full window of 3000 frames).
pub const MAX_WARMUP: usize = MAX_FRAMES;

/// [`Error::Input`] for more than [`MAX_WARMUP`] warm-up frames.
pub fn check_warmup(warmup: usize) -> Result<()> {
    if warmup > MAX_WARMUP {
        return Err(Error::Input(format!("{warmup} warm-up frames is more than a benchmark runs (at most {MAX_WARMUP}, a day of audio)")));
    }
    Ok(())
}

/// Per-step GPU time of a plan, grouped by label with the layer and step numbers replaced
/// by `N`: (group, dispatches per replay, median ms per replay), largest first.
pub type Profile = Vec<(String, usize, f64)>;

/// [`Plan::profile`] over `replays` replays of `plan` (timestamp queries, every dispatch in
/// a pass of its own), grouped as [`Profile`] says. `None` where the device has no timestamp
/// queries or `replays` is 0; [`Error::Input`] for more than [`MAX_REPLAYS`].
pub async fn profile(ctx: &GpuContext, plan: &Plan, replays: usize) -> Result<Option<Profile>> {
    check_counts(1, replays)?;
    if !ctx.info.timestamps || replays == 0 {
        return Ok(None);
    }
    let mut runs = Vec::new();
    for _ in 0..replays {
        runs.push(plan.profile(ctx).await?);
    }
    let mut groups: Profile = Vec::new();
    for (i, label) in plan.labels().iter().enumerate() {
        let mut v: Vec<f64> = runs.iter().map(|r| r[i]).collect();
        v.sort_by(f64::total_cmp);
        let ms = v[v.len() / 2];
        let mut key = String::new();
        for ch in label.chars() {
            if !ch.is_ascii_digit() {
                key.push(ch);
            } else if !key.ends_with('N') {
                key.push('N');
            }
        }
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => {
                g.1 += 1;
                g.2 += ms;
            }
            None => groups.push((key, 1, ms)),
        }
    }
    groups.sort_by(|a, b| b.2.total_cmp(&a.2));
    Ok(Some(groups))
}

/// The median of `replays` replays of `plan` in one pass each ([`Plan::time_one_pass`]), ms.
async fn one_pass(ctx: &GpuContext, plan: &Plan, replays: usize) -> Result<f64> {
    let mut v = Vec::new();
    for _ in 0..replays {
        v.push(plan.time_one_pass(ctx).await?);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// `[{ step, dispatches, ms }]`, or `null`.
pub fn profile_json(groups: &Option<Profile>) -> serde_json::Value {
    match groups {
        None => serde_json::Value::Null,
        Some(g) => g.iter().map(|(k, c, ms)| serde_json::json!({ "step": k, "dispatches": c, "ms": ms })).collect(),
    }
}

/// Device memory bandwidth in GB/s (bytes read plus written) of a copy of a buffer of up to
/// 512 MiB, and how it was measured: by the `copy_v4` probe of `shaders/bandwidth.wgsl` (one
/// 16-byte load and store per thread; a scalar copy of 64-thread workgroups stops at a fifth
/// of the bandwidth on a large GPU, bound by how fast workgroups start) timed with timestamp
/// queries (the best of 5) where the device has them, else by `copy_buffer_to_buffer` 10
/// times in one submit timed on `now` (ms). The ceiling achieved figures are compared to;
/// a GPU that has been idle may still run at a low clock, so measure after work.
pub async fn copy_bandwidth(ctx: &GpuContext, now: &dyn Fn() -> f64) -> Result<(f64, &'static str)> {
    // In u64: a limit of 4 GiB or more would wrap to 0 as a wasm32 usize.
    let len = ((128u64 << 20).min(ctx.info.max_storage_binding / 4).min(ctx.info.max_buffer / 8) & !3) as usize;
    if len == 0 {
        return Err(Error::Input(format!("the bandwidth probe needs a buffer of 16 bytes or more; the device allows {} bytes", ctx.info.max_buffer.min(ctx.info.max_storage_binding))));
    }
    let size = (len * 4) as u64;
    let (a, b) = (ctx.zeros("bandwidth src", len)?, ctx.zeros("bandwidth dst", len)?);
    if ctx.info.timestamps {
        let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("bandwidth"),
            source: wgpu::ShaderSource::Wgsl(include_str!("../shaders/bandwidth.wgsl").into()),
        });
        let pipeline = ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("copy_v4"),
            layout: None,
            module: &module,
            entry_point: Some("copy_v4"),
            compilation_options: Default::default(),
            cache: None,
        });
        let vecs = len / 4;
        let params = ctx.uniform("bandwidth params", bytemuck::cast_slice(&[vecs as u32, 0, 0, 0]));
        let bind = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("copy_v4"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 2, resource: a.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: b.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 6, resource: params.as_entire_binding() },
            ],
        });
        let groups = vecs.div_ceil(256);
        let gx = groups.min(32768);
        let (gx, gy) = (gx as u32, groups.div_ceil(gx) as u32);
        const RUNS: u32 = 6;
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("bandwidth"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * RUNS,
        });
        let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("bandwidth"),
            size: 16 * RUNS as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let rb = Readback::new(ctx, 16 * RUNS as u64);
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        for j in 0..RUNS {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &set,
                    beginning_of_pass_write_index: Some(2 * j),
                    end_of_pass_write_index: Some(2 * j + 1),
                }),
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        enc.resolve_query_set(&set, 0..2 * RUNS, &resolved, 0);
        rb.copy(&mut enc, &resolved);
        ctx.queue.submit([enc.finish()]);
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&rb.read(ctx).await?);
        let period_ms = ctx.queue.get_timestamp_period() as f64 * 1e-6;
        let best = ticks.chunks_exact(2).skip(1).map(|t| t[1].saturating_sub(t[0]) as f64 * period_ms).fold(f64::INFINITY, f64::min);
        return Ok((2.0 * size as f64 / (best * 1e-3) / 1e9, "16-byte copy kernel, timestamp queries"));
    }
    let mut best = 0f64;
    for reps in [1u64, 10] {
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        for _ in 0..reps {
            enc.copy_buffer_to_buffer(&a, 0, &b, 0, size);
        }
        let t0 = now();
        ctx.queue.submit([enc.finish()]);
        ctx.read_f32(&b, 1).await?;
        best = (2 * reps * size) as f64 / ((now() - t0).max(1e-3) * 1e-3) / 1e9;
    }
    Ok((best, "copy_buffer_to_buffer, CPU clock"))
}

/// The adapter's fields every report opens with.
/// Which kernel the LM's Q8_0 linears run on `info`'s device ([`Q8Dot`]: the
/// environment's choice, the f32 kernel where the device lacks `dot4I8Packed`).
/// [`Error::Input`] for a bad `INFERENCELAYER_Q8_DOT`.
pub fn q8_kernel_name(info: &GpuInfo) -> Result<&'static str> {
    Ok(match Q8Dot::from_env()? {
        Q8Dot::I8 if info.packed_dot => "i8 (the input quantized to two 8-bit levels, dot4I8Packed)",
        Q8Dot::I8 => "f32 (the device's WGSL has no dot4I8Packed)",
        Q8Dot::F32 => "f32 (INFERENCELAYER_Q8_DOT=f32)",
    })
}

fn adapter_json(info: &GpuInfo) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("q8_kernel".into(), q8_kernel_name(info).unwrap_or("unknown (INFERENCELAYER_Q8_DOT is neither f32 nor i8)").into());
    m.insert("adapter".into(), info.to_string().into());
    m.insert("adapter_name".into(), info.name.clone().into());
    m.insert("queue".into(), info.queue.clone().into());
    m.insert("shader_checks_dropped".into(), info.shader_checks.dropped().into());
    m.insert("backend".into(), info.backend.clone().into());
    m.insert("device_type".into(), info.device_type.clone().into());
    m.insert("timestamps".into(), info.timestamps.into());
    m
}

/// What [`bench_mimi`] measured.
pub struct MimiBench {
    pub info: GpuInfo,
    pub codebooks: usize,
    pub frames: usize,
    pub warmup: usize,
    /// Milliseconds of audio per frame (80).
    pub frame_ms: f64,
    /// Dispatches per frame: (encode, decode).
    pub dispatches: (usize, usize),
    /// The codec's streaming state on the GPU, bytes.
    pub state_bytes: u64,
    pub encode: Stats,
    pub decode: Stats,
    pub encode_decode: Stats,
    /// GPU time per step of the encode and decode plans (timestamp queries), where profiled.
    pub profile_encode: Option<Profile>,
    pub profile_decode: Option<Profile>,
    /// Seconds the timed loop took, warm-up included.
    pub elapsed_s: f64,
}

/// Time `frames` Mimi frames (after `warmup` untimed ones, and at least [`WARMUP_MIN_MS`]
/// of them) of `signal` (24 kHz, looped; at
/// least one frame): per frame `encode_frame` (its submits and codes readback), then
/// `decode_frame` of those codes (submits and samples readback), then profile each plan
/// `replays` times step by step. [`Error::Input`] for 0 frames, more than [`MAX_FRAMES`]
/// frames, [`MAX_WARMUP`] warm-up frames or [`MAX_REPLAYS`] replays, or a signal shorter than a
/// frame; the device's error otherwise. Mirrors `inferencelayer bench`.
pub async fn bench_mimi(mimi: &mut Mimi, signal: &[f32], frames: usize, warmup: usize, replays: usize, now: &dyn Fn() -> f64) -> Result<MimiBench> {
    check_counts(frames, replays)?;
    check_warmup(warmup)?;
    let fs = mimi.frame_size();
    if signal.len() < fs {
        return Err(Error::Input(format!("the benchmark signal has {} samples, less than a frame ({fs})", signal.len())));
    }
    let (mut enc, mut dec, mut both) = (Vec::with_capacity(frames), Vec::with_capacity(frames), Vec::with_capacity(frames));
    let start = now();
    for (i, frame) in signal.chunks_exact(fs).cycle().enumerate() {
        if both.len() == frames {
            break;
        }
        let t0 = now();
        let timed = !warming(i, warmup, start, t0);
        let codes = mimi.encode_frame(frame).await?;
        let t1 = now();
        mimi.decode_frame(i, &codes).await?;
        let t2 = now();
        if timed {
            enc.push(t1 - t0);
            dec.push(t2 - t1);
            both.push(t2 - t0);
        }
    }
    let elapsed_s = (now() - start) / 1e3;
    let ctx = mimi.context().clone();
    let profile_encode = profile(&ctx, mimi.encode_plan(), replays).await?;
    let profile_decode = profile(&ctx, mimi.decode_plan(), replays).await?;
    Ok(MimiBench {
        info: ctx.info.clone(),
        codebooks: mimi.num_codebooks(),
        frames,
        warmup,
        frame_ms: 1e3 * fs as f64 / 24_000.0,
        dispatches: mimi.dispatches(),
        state_bytes: mimi.state_bytes(),
        encode: Stats::of(&enc),
        decode: Stats::of(&dec),
        encode_decode: Stats::of(&both),
        profile_encode,
        profile_decode,
        elapsed_s,
    })
}

impl MimiBench {
    /// The report of `inferencelayer bench --json`: the adapter, dispatches, passes and
    /// submits per frame, `encode_ms`, `decode_ms`, `encode_decode_ms` (each [`Stats::json`])
    /// and the per-step profiles.
    pub fn json(&self) -> serde_json::Value {
        let (e, d) = self.dispatches;
        let mut m = adapter_json(&self.info);
        let rest = serde_json::json!({
            "codebooks": self.codebooks,
            "frames": self.frames,
            "warmup": self.warmup,
            "frame_ms": self.frame_ms,
            "dispatches_per_frame": { "encode": e, "decode": d },
            "passes_per_frame": { "encode": frame_submits(e), "decode": frame_submits(d) },
            "submits_per_frame": { "encode": frame_submits(e), "decode": frame_submits(d) },
            "state_bytes": self.state_bytes,
            "encode_ms": self.encode.json(),
            "decode_ms": self.decode.json(),
            "encode_decode_ms": self.encode_decode.json(),
            "profile_encode": profile_json(&self.profile_encode),
            "profile_decode": profile_json(&self.profile_decode),
            "elapsed_s": self.elapsed_s,
        });
        if let serde_json::Value::Object(r) = rest {
            m.extend(r);
        }
        serde_json::Value::Object(m)
    }
}

/// How the LM's weights were made, for the report.
pub struct LmSetup {
    pub seed: u64,
    pub greedy: bool,
    /// The synthetic weights' generator (`"hash"` or `"fast"`, [`crate::moshi::synthetic`]),
    /// or `"checkpoint"`.
    pub weights: &'static str,
    /// Seconds to build the weights (in memory, or written to the GPU tensor by tensor).
    pub build_weights_s: f64,
    /// Seconds to upload them and build the plans.
    pub upload_and_plan_s: f64,
}

/// What [`bench_lm`] measured.
pub struct LmBench {
    pub info: GpuInfo,
    pub config: LmConfig,
    pub setup: LmSetup,
    pub frames: usize,
    pub warmup: usize,
    /// Dispatches per frame: (temporal, depformer).
    pub dispatches: (usize, usize),
    pub readback_bytes: usize,
    /// Bytes on the GPU: Q8_0 linears, f32 tables (as uploaded, from the config), KV rings.
    pub gpu_bytes: (u64, u64, u64),
    /// GB/s of the copy kernel, and how it was measured; `None` when not asked for.
    pub copy_bandwidth: Option<(f64, &'static str)>,
    /// The whole step (one replay in a few submits recorded during the step before, one
    /// readback).
    pub step: Stats,
    /// Each timed frame's whole step, ms, in order (where slow frames fall).
    pub step_frames: Vec<f64>,
    /// The CPU's part of the step: LMGen's input, the recording and the submits.
    pub cpu: Stats,
    /// The temporal transformer, recorded beforehand (in the submits a frame is cut into),
    /// then submitted and waited for apart.
    pub temporal: Stats,
    /// The depformer's `dep_q` steps, recorded beforehand (in the submits a frame is cut
    /// into), then submitted and waited for apart.
    pub depformer: Stats,
    /// The whole full-duplex frame (`Session::step`): total, Mimi encode, LM step with Mimi
    /// decode. `None` without a Mimi.
    pub duplex: Option<(Stats, Stats, Stats)>,
    pub profile_temporal: Option<Profile>,
    pub profile_depformer: Option<Profile>,
    /// GPU time of the temporal plan and of the depformer's, each replayed in one pass
    /// ([`Plan::time_one_pass`], the median of the profile's replays), ms; where profiled.
    pub pass_ms: Option<(f64, f64)>,
    /// Seconds the timed loops took, warm-up included.
    pub elapsed_s: f64,
}

/// Time the Moshi LM on `weights` (already on `lm`'s context; `lm` built over them with
/// `sampling`), one LMGen frame at a time with [`bench_user_codes`] of `setup.seed` as the
/// user's codes: `frames` whole steps (`Lm::submit`, `Lm::read_tokens` awaited) after
/// `warmup` untimed ones and at least [`WARMUP_MIN_MS`] of them (so in every loop below),
/// then the same frames again on a new stream with the temporal part and the depformer
/// submitted and waited for apart (`Lm::step_timed`), then each plan profiled `replays`
/// times; with `mimi`, whole full-duplex frames of `signal` (24 kHz, looped) through a
/// [`Session`] over the same weights. With `bandwidth`, the copy kernel's bandwidth right
/// after the whole steps, on a GPU at the clocks the steps ran at (measured before them,
/// after the upload, the H200 read 1.7 TB/s in some runs and 4.2 in others; after them, 4.1
/// to 4.2 in every run).
/// [`Error::Input`] for counts [`check_counts`] or [`check_warmup`] refuses; the device's errors otherwise. Mirrors
/// `inferencelayer bench-lm`.
#[allow(clippy::too_many_arguments)]
pub async fn bench_lm(
    mut lm: Lm,
    weights: &LmGpuWeights,
    sampling: Sampling,
    setup: LmSetup,
    (frames, warmup, replays): (usize, usize, usize),
    bandwidth: bool,
    mimi: Option<(&MimiWeights, &[f32])>,
    now: &dyn Fn() -> f64,
) -> Result<LmBench> {
    check_counts(frames, replays)?;
    check_warmup(warmup)?;
    let ctx: Rc<GpuContext> = lm.context().clone();
    let config = weights.config.clone();
    let users = config.user_streams();
    let seed = setup.seed as u32;
    let start = now();

    // The whole step as it runs: one replay in a few submits recorded during the step before,
    // one readback; the CPU's part is LMGen's input, the submit and the next step's recording.
    let mut gen = LmGen::new(&config);
    let (mut step_ms, mut cpu_ms) = (Vec::with_capacity(frames), Vec::with_capacity(frames));
    let since = now();
    for t in 0.. {
        if step_ms.len() == frames {
            break;
        }
        let codes = bench_user_codes(seed, t, users, config.card);
        let t0 = now();
        let timed = !warming(t, warmup, since, t0);
        let input = gen.input(&codes)?;
        lm.submit(&input, None)?;
        let t1 = now();
        let generated = lm.read_tokens().await?;
        gen.output(&generated);
        if timed {
            step_ms.push(now() - t0);
            cpu_ms.push(t1 - t0);
        }
    }
    let copy_bandwidth = if bandwidth { Some(copy_bandwidth(&ctx, now).await?) } else { None };
    // The same frames again on a new stream, the temporal part and the depformer submitted
    // and waited for apart (two submits, two readbacks), each recorded before its timing.
    lm.reset();
    let mut gen = LmGen::new(&config);
    let (mut temporal_ms, mut depformer_ms) = (Vec::with_capacity(frames), Vec::with_capacity(frames));
    let since = now();
    for t in 0.. {
        if temporal_ms.len() == frames {
            break;
        }
        let codes = bench_user_codes(seed, t, users, config.card);
        let timed = !warming(t, warmup, since, now());
        let input = gen.input(&codes)?;
        let (generated, [tt, td]) = lm.step_timed(&input, now).await?;
        gen.output(&generated);
        if timed {
            temporal_ms.push(tt);
            depformer_ms.push(td);
        }
    }
    let (temporal_plan, depformer_plan) = lm.plans();
    let profile_temporal = profile(&ctx, temporal_plan, replays).await?;
    let profile_depformer = profile(&ctx, depformer_plan, replays).await?;
    let pass_ms = match profile_temporal {
        Some(_) => Some((one_pass(&ctx, temporal_plan, replays).await?, one_pass(&ctx, depformer_plan, replays).await?)),
        None => None,
    };
    let dispatches = lm.dispatches();
    let kv_bytes = lm.state_bytes();
    drop(lm);

    // The whole full-duplex frame, as a session runs it.
    let duplex = match mimi {
        None => None,
        Some((mw, signal)) => {
            let mut session = Session::new(ctx.clone(), mw, weights, sampling).await?;
            let fs = mw.config.frame_size();
            if signal.len() < fs {
                return Err(Error::Input(format!("the benchmark signal has {} samples, less than a frame ({fs})", signal.len())));
            }
            let (mut all, mut enc, mut rest) = (Vec::with_capacity(frames), Vec::with_capacity(frames), Vec::with_capacity(frames));
            let since = now();
            for (t, pcm) in signal.chunks_exact(fs).cycle().enumerate() {
                if all.len() == frames {
                    break;
                }
                let t0 = now();
                let timed = !warming(t, warmup, since, t0);
                let (_, [te, tr]) = session.step_timed(pcm, now).await?;
                if timed {
                    all.push(now() - t0);
                    enc.push(te);
                    rest.push(tr);
                }
            }
            Some((Stats::of(&all), Stats::of(&enc), Stats::of(&rest)))
        }
    };
    let (q8, f32_tables) = weight_bytes(&config);
    Ok(LmBench {
        info: ctx.info.clone(),
        readback_bytes: 4 * (1 + config.dep_q),
        config,
        setup,
        frames,
        warmup,
        dispatches,
        gpu_bytes: (q8, f32_tables, kv_bytes),
        copy_bandwidth,
        step: Stats::of(&step_ms),
        step_frames: step_ms,
        cpu: Stats::of(&cpu_ms),
        temporal: Stats::of(&temporal_ms),
        depformer: Stats::of(&depformer_ms),
        duplex,
        profile_temporal,
        profile_depformer,
        pass_ms,
        elapsed_s: (now() - start) / 1e3,
    })
}

impl LmBench {
    /// Bytes of weights each frame streams (every Q8_0 linear once) over the step's p50, in
    /// GB/s.
    pub fn achieved_gbs(&self) -> f64 {
        self.gpu_bytes.0 as f64 / self.step.p50 / 1e6
    }

    /// The report of `inferencelayer bench-lm --json`: the adapter, the geometry, dispatches,
    /// passes and submits per frame, GPU bytes, bandwidth, `step_ms`,
    /// `cpu_encode_submit_ms`, `temporal_ms`, `depformer_ms`, `full_duplex_frame_ms` (with
    /// `full_duplex_encode_ms` and `full_duplex_lm_decode_ms`; `null` without a Mimi), each
    /// [`Stats::json`], `step_frames_ms` (each timed step in order), and the per-step
    /// profiles.
    pub fn json(&self) -> serde_json::Value {
        let c = &self.config;
        let (td, dd) = self.dispatches;
        let (q8, f32_tables, kv) = self.gpu_bytes;
        let mut m = adapter_json(&self.info);
        let rest = serde_json::json!({
            "config": {
                "dim": c.dim, "num_layers": c.num_layers, "num_heads": c.num_heads,
                "hidden": c.hidden(), "context": c.context, "text_card": c.text_card,
                "card": c.card, "n_q": c.n_q, "dep_q": c.dep_q,
                "depformer_dim": c.depformer_dim, "depformer_num_layers": c.depformer_num_layers,
                "depformer_hidden": c.depformer_hidden(),
            },
            "parameters": parameter_count(c),
            "sampling": if self.setup.greedy { "greedy" } else { "moshi (text T 0.7 top-k 25, audio T 0.8 top-k 250)" },
            "seed": self.setup.seed,
            "weights": self.setup.weights,
            "frames": self.frames,
            "warmup": self.warmup,
            "frame_ms": FRAME_MS,
            "build_weights_s": self.setup.build_weights_s,
            "upload_and_plan_s": self.setup.upload_and_plan_s,
            "dispatches_per_frame": { "temporal": td, "depformer": dd, "total": td + dd },
            "passes_per_frame": frame_submits(td + dd),
            "submits_per_frame": frame_submits(td + dd),
            "readback_bytes_per_frame": self.readback_bytes,
            "gpu_bytes": { "q8_linears": q8, "f32_tables": f32_tables, "kv_rings": kv, "total": q8 + f32_tables + kv },
            "copy_bandwidth_gbs": self.copy_bandwidth.map(|b| b.0),
            "copy_bandwidth_by": self.copy_bandwidth.map(|b| b.1),
            "achieved_gbs": self.achieved_gbs(),
            "step_ms": self.step.json(),
            "step_frames_ms": self.step_frames,
            "cpu_encode_submit_ms": self.cpu.json(),
            "temporal_ms": self.temporal.json(),
            "depformer_ms": self.depformer.json(),
            "full_duplex_frame_ms": self.duplex.map(|d| d.0.json()),
            "full_duplex_encode_ms": self.duplex.map(|d| d.1.json()),
            "full_duplex_lm_decode_ms": self.duplex.map(|d| d.2.json()),
            "profile_temporal": profile_json(&self.profile_temporal),
            "profile_depformer": profile_json(&self.profile_depformer),
            "one_pass_ms": self.pass_ms.map(|(t, d)| serde_json::json!({ "temporal": t, "depformer": d })),
            "elapsed_s": self.elapsed_s,
        });
        if let serde_json::Value::Object(r) = rest {
            m.extend(r);
        }
        serde_json::Value::Object(m)
    }
}
