//! Static plans: every shape fixed when the plan is built, pipelines and bind groups built
//! once, a frame replayed as one compute pass.
//!
//! [`PlanBuilder`] offers model-agnostic layers (streaming causal conv and transposed conv,
//! layer norm, linear, rotary KV-ring push, windowed attention, vector quantization). Each
//! layer allocates its outputs and its streaming state on the GPU and appends its dispatches;
//! models call these in order to describe themselves. [`PlanState`] is the list of every
//! state buffer, so `reset` reaches all of it.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytemuck::Pod;

use super::context::{GpuContext, Pipeline};
use super::kernels::*;
use super::table::SplitTable;
use crate::error::{Error, Result};

/// An f32 activation on the GPU, row-major with a fixed shape.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub buf: wgpu::Buffer,
    pub shape: Vec<usize>,
}

impl Tensor {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One dispatch: a pipeline, its bind group, a grid and a readable label.
struct Step {
    pipeline: Rc<Pipeline>,
    bind_group: wgpu::BindGroup,
    grid: [u32; 2],
    label: String,
}

/// A prebuilt list of dispatches, replayed into one compute pass per frame.
pub struct Plan {
    steps: Vec<Step>,
    /// unique among the plans of the process ([`FrameRecorder`] keys its buffer by it)
    id: u64,
}

/// The next [`Plan::id`].
static NEXT_PLAN_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Plan {
    /// Record every step into `pass`, in order. wgpu orders the dispatches of one pass and
    /// makes each one's writes visible to the next.
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        let mut last = None;
        for i in 0..self.steps.len() {
            self.record_step_after(i, pass, &mut last);
        }
    }

    /// Number of dispatches per replay.
    pub fn dispatches(&self) -> usize {
        self.steps.len()
    }

    /// The label of every step, in order (for per-step profiles).
    pub fn labels(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.label.as_str()).collect()
    }

    /// GPU time of every step of one replay, in ms, in step order: each step in a compute
    /// pass of its own with timestamps at its start and end (the replay's writes happen, as
    /// in a frame). Returns [`Error::Gpu`] when the device has no timestamp queries.
    pub async fn profile(&self, ctx: &GpuContext) -> Result<Vec<f64>> {
        if !ctx.info.timestamps {
            return Err(Error::Gpu("the device has no timestamp queries".into()));
        }
        // a query set holds at most 4096 queries: two per step
        const CHUNK: usize = 2048;
        let period_ms = ctx.queue.get_timestamp_period() as f64 * 1e-6;
        let mut out = Vec::with_capacity(self.steps.len());
        for start in (0..self.steps.len()).step_by(CHUNK) {
            let n = CHUNK.min(self.steps.len() - start);
            let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("plan profile"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * n as u32,
            });
            let bytes = (16 * n) as u64;
            let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("plan profile"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let rb = super::context::Readback::new(ctx, bytes);
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            for j in 0..n {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &set,
                        beginning_of_pass_write_index: Some(2 * j as u32),
                        end_of_pass_write_index: Some(2 * j as u32 + 1),
                    }),
                });
                self.record_step(start + j, &mut pass);
            }
            enc.resolve_query_set(&set, 0..2 * n as u32, &resolved, 0);
            rb.copy(&mut enc, &resolved);
            ctx.queue.submit([enc.finish()]);
            let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&rb.read(ctx).await?);
            out.extend(ticks.chunks_exact(2).map(|t| t[1].saturating_sub(t[0]) as f64 * period_ms));
        }
        Ok(out)
    }

    /// GPU time of one replay recorded as a frame records it (every step in one compute
    /// pass, a pipeline set only when it changes), in ms, from timestamps at the pass's
    /// start and end: what the plan costs the GPU with the barriers between its dispatches
    /// and none of [`Self::profile`]'s passes. [`Error::Gpu`] when the device has no
    /// timestamp queries.
    pub async fn time_one_pass(&self, ctx: &GpuContext) -> Result<f64> {
        if !ctx.info.timestamps {
            return Err(Error::Gpu("the device has no timestamp queries".into()));
        }
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("plan pass"), ty: wgpu::QueryType::Timestamp, count: 2 });
        let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("plan pass"),
            size: 16,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let rb = super::context::Readback::new(ctx, 16);
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("plan pass"),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites { query_set: &set, beginning_of_pass_write_index: Some(0), end_of_pass_write_index: Some(1) }),
            });
            let mut last = None;
            for i in 0..self.steps.len() {
                self.record_step_after(i, &mut pass, &mut last);
            }
        }
        enc.resolve_query_set(&set, 0..2, &resolved, 0);
        rb.copy(&mut enc, &resolved);
        ctx.queue.submit([enc.finish()]);
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&rb.read(ctx).await?);
        Ok(ticks[1].saturating_sub(ticks[0]) as f64 * ctx.queue.get_timestamp_period() as f64 * 1e-6)
    }

    /// Record step `i` alone into `pass` (the per-step profile submits one at a time).
    pub fn record_step(&self, i: usize, pass: &mut wgpu::ComputePass<'_>) {
        self.record_step_after(i, pass, &mut None);
    }

    /// [`Self::record_step`] into a pass whose pipeline is `last` (the one the pass's last
    /// step set, `None` at the start): the CPU's recording skips setting it again.
    fn record_step_after(&self, i: usize, pass: &mut wgpu::ComputePass<'_>, last: &mut Option<*const Pipeline>) {
        if let Some(s) = self.steps.get(i) {
            let p = Rc::as_ptr(&s.pipeline);
            if *last != Some(p) {
                pass.set_pipeline(&s.pipeline.pipeline);
                *last = Some(p);
            }
            pass.set_bind_group(0, &s.bind_group, &[]);
            pass.dispatch_workgroups(s.grid[0], s.grid[1], 1);
        }
    }
}

/// Weights (`n * k`) from which [`PlanBuilder::q8_linear_normed`] takes the RMSNorm apart:
/// on an NVIDIA H200 the fused norm cost a [22528, 4096] linear about 35 us (100 us against
/// 65 us plain), an RMSNorm dispatch of its own a few; below this the extra dispatch costs
/// more than the fusion.
pub const Q8_NORM_APART: usize = 1 << 24;

/// Dispatches in the first submit of [`submit_plans`]; each next submit takes four times as
/// many, up to the end.
const FIRST_SUBMIT: usize = 24;

/// Replay `plans` in order and submit them, then record `epilogue` (the readback copies)
/// after the last dispatch. Recording costs the CPU a few microseconds per dispatch, so a
/// frame goes in a few submits of growing size: the GPU starts on the first while the CPU
/// records the rest (wgpu orders submits and makes each one's writes visible to the next).
/// Returns the number of submits (each one compute pass).
pub fn submit_plans(ctx: &GpuContext, plans: &[&Plan], epilogue: impl FnOnce(&mut wgpu::CommandEncoder)) -> usize {
    record_parts(ctx, plans, epilogue, FIRST_SUBMIT, |cb| {
        ctx.queue.submit([cb]);
    })
}

/// Record `plans` then `epilogue` in command buffers of `first`, then four times as many
/// dispatches each (one compute pass each; the epilogue after the last), handing each to
/// `sink` as soon as it is recorded. Returns their number.
fn record_parts(
    ctx: &GpuContext,
    plans: &[&Plan],
    epilogue: impl FnOnce(&mut wgpu::CommandEncoder),
    first: usize,
    mut sink: impl FnMut(wgpu::CommandBuffer),
) -> usize {
    let steps: Vec<(&Plan, usize)> = plans.iter().flat_map(|p| (0..p.steps.len()).map(move |i| (*p, i))).collect();
    let mut epilogue = Some(epilogue);
    let (mut start, mut chunk, mut parts) = (0usize, first, 0);
    loop {
        let end = start.saturating_add(chunk).min(steps.len());
        let mut enc = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("frame") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("frame"), timestamp_writes: None });
            let mut last = None;
            for &(plan, i) in &steps[start..end] {
                plan.record_step_after(i, &mut pass, &mut last);
            }
        }
        if end == steps.len() {
            if let Some(f) = epilogue.take() {
                f(&mut enc);
            }
        }
        sink(enc.finish());
        parts += 1;
        if end == steps.len() {
            return parts;
        }
        start = end;
        chunk = chunk.saturating_mul(4);
    }
}

/// How [`FrameRecorder`] cuts a frame: `INFERENCELAYER_SUBMITS=one` records it as one
/// command buffer and submit; unset or `parts`, as [`submit_plans`] does (the first part
/// small, so the GPU starts on it while the queue takes in the rest). Anything else is an
/// [`Error::Input`].
pub fn submits_from_env() -> Result<bool> {
    match std::env::var("INFERENCELAYER_SUBMITS").ok().as_deref() {
        None | Some("") | Some("parts") => Ok(false),
        Some("one") => Ok(true),
        Some(v) => Err(Error::Input(format!("INFERENCELAYER_SUBMITS must be `one` or `parts`, not `{v}`"))),
    }
}

/// The submits (each one compute pass) of a [`FrameRecorder`]'s frame of `dispatches`
/// dispatches, as [`submits_from_env`] cuts it (1 where it asks for one).
pub fn frame_submits(dispatches: usize) -> usize {
    if submits_from_env().unwrap_or(false) {
        1
    } else {
        submits_for(dispatches)
    }
}

/// The plans' ids and the epilogue's buffers a frame's parts were recorded for.
type RecordedFor = (Vec<u64>, Vec<wgpu::Buffer>);

/// A frame's replay recorded ahead, during the frame before: the steps' pipelines and bind
/// groups are fixed and the per-frame values (tokens, the frame uniform) go in by
/// `write_buffer` before the submit, so a frame's commands never change. The first frame
/// (or one whose plans differ from the last one's) is recorded and submitted part by part
/// ([`submit_plans`]); every later frame submits the parts recorded while the GPU ran the
/// frame before (as [`submits_from_env`] cuts them), so the CPU's recording is off the
/// frame's path.
pub struct FrameRecorder {
    /// what the parts were recorded for, and the parts
    ahead: Option<(RecordedFor, Vec<wgpu::CommandBuffer>)>,
    one: bool,
}

impl FrameRecorder {
    /// A recorder cutting frames as [`submits_from_env`] says (an [`Error::Input`] for a bad
    /// `INFERENCELAYER_SUBMITS`).
    pub fn new() -> Result<Self> {
        Ok(Self { ahead: None, one: submits_from_env()? })
    }

    /// Submit a replay of `plans` in order followed by `epilogue` (the readback copies,
    /// between the buffers `copies` lists), then record the next frame's. The parts
    /// recorded last time are submitted when they were recorded for the same plans and the
    /// same `copies`. Returns the number of submits made now.
    pub fn submit(&mut self, ctx: &GpuContext, plans: &[&Plan], copies: &[&wgpu::Buffer], epilogue: impl Fn(&mut wgpu::CommandEncoder)) -> usize {
        let key = (plans.iter().map(|p| p.id).collect::<Vec<u64>>(), copies.iter().map(|&b| b.clone()).collect::<Vec<_>>());
        let submits = match self.ahead.take() {
            Some((k, parts)) if k == key => {
                let n = parts.len();
                for cb in parts {
                    ctx.queue.submit([cb]);
                }
                n
            }
            _ => submit_plans(ctx, plans, &epilogue),
        };
        self.ahead = Some((key, self.record(ctx, plans, &epilogue)));
        submits
    }

    /// The command buffers of a frame of `plans` then `epilogue`, cut as this recorder cuts
    /// its frames (one where [`submits_from_env`] asked for one; else a first part of
    /// 24 dispatches and each next four times as large), for the caller to
    /// submit in order: also a part of a frame timed apart ([`crate::moshi::Lm::step_timed`]).
    pub fn record(&self, ctx: &GpuContext, plans: &[&Plan], epilogue: impl FnOnce(&mut wgpu::CommandEncoder)) -> Vec<wgpu::CommandBuffer> {
        let first = if self.one { usize::MAX } else { FIRST_SUBMIT };
        let mut parts = Vec::new();
        record_parts(ctx, plans, epilogue, first, |cb| parts.push(cb));
        parts
    }
}

/// The number of submits [`submit_plans`] (and a [`FrameRecorder`] by default) makes for
/// `dispatches` dispatches.
pub fn submits_for(dispatches: usize) -> usize {
    let (mut done, mut chunk, mut n) = (0, FIRST_SUBMIT, 0);
    loop {
        done += chunk;
        n += 1;
        if done >= dispatches {
            return n;
        }
        chunk *= 4;
    }
}

/// Every streaming-state buffer of a plan: conv prefixes, transposed-conv tails, KV rings
/// (zeroed on reset) and position rings (filled with [`INVALID_POS`] on reset: a zeroed
/// ring would claim that every slot holds position 0).
#[derive(Default)]
pub struct PlanState {
    zeroed: Vec<wgpu::Buffer>,
    pos_rings: Vec<wgpu::Buffer>,
}

/// The position stamped in an empty KV-ring slot.
pub const INVALID_POS: u32 = u32::MAX;

impl PlanState {
    /// Return every state buffer to the start of a stream.
    pub fn reset(&self, ctx: &GpuContext) {
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        for b in &self.zeroed {
            enc.clear_buffer(b, 0, None);
        }
        ctx.queue.submit([enc.finish()]);
        for b in &self.pos_rings {
            let inval = vec![INVALID_POS; (b.size() / 4) as usize];
            ctx.queue.write_buffer(b, 0, bytemuck::cast_slice(&inval));
        }
    }

    /// Total bytes of streaming state.
    pub fn bytes(&self) -> u64 {
        self.zeroed.iter().chain(&self.pos_rings).map(|b| b.size()).sum()
    }
}

/// A causal streaming Conv1d (moshi.modules.conv.StreamingConv1d): weights on the GPU plus
/// the shape facts the plan needs.
pub struct ConvSpec<'a> {
    pub name: &'a str,
    /// `[out_c, in_c / groups, k]`
    pub w: &'a wgpu::Buffer,
    /// `[out_c]`
    pub b: Option<&'a wgpu::Buffer>,
    pub in_c: usize,
    pub out_c: usize,
    pub k: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
    /// `pad_mode == "replicate"`: the first frame's prefix repeats its first sample.
    pub replicate: bool,
}

/// Where a conv applies SEANet's ELU (alpha 1): to its input as it loads it (`input`, the
/// `ELU` layer in front of the conv in the reference) and to its outputs as it stores them
/// (`output`, for the ELU of the conv after it, where that conv is the output's only reader).
/// An ELU on store is computed once an output; on load, once a term of every output that
/// reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Elu {
    pub input: bool,
    pub output: bool,
}

impl Elu {
    /// No ELU: the conv loads and stores its values as they are.
    pub const NONE: Self = Self { input: false, output: false };
    /// The ELU on the input alone (the reference's `ELU` layer in front of the conv).
    pub const INPUT: Self = Self { input: true, output: false };
}

/// Whether Mimi's plans move SEANet's ELUs to the convs that write their inputs where a
/// conv's output has no other reader ([`Elu`]): `INFERENCELAYER_CONV_ELU=load` keeps every
/// ELU on its reader's loads (for measurements), `store` or unset moves them; any other
/// value is an [`Error::Input`]. On the web always `store`.
pub fn elu_on_store_from_env() -> Result<bool> {
    env_switch("INFERENCELAYER_CONV_ELU", "store", "load")
}

/// A switch for measurements in the environment variable `var`: `on`, empty or unset (and
/// always on the web) `true`, `off` `false`, any other value an [`Error::Input`].
fn env_switch(var: &str, on: &str, off: &str) -> Result<bool> {
    if cfg!(target_arch = "wasm32") {
        return Ok(true);
    }
    match std::env::var(var).as_deref().map(str::trim) {
        Err(_) | Ok("") => Ok(true),
        Ok(v) if v == on => Ok(true),
        Ok(v) if v == off => Ok(false),
        Ok(v) => Err(Error::Input(format!("{var} must be {on} or {off}, got {v:?}"))),
    }
}

/// A causal streaming ConvTranspose1d (moshi.modules.conv.StreamingConvTranspose1d).
pub struct ConvTrSpec<'a> {
    pub name: &'a str,
    /// `[in_c, out_c / groups, k]`
    pub w: &'a wgpu::Buffer,
    /// `[out_c]`
    pub b: Option<&'a wgpu::Buffer>,
    pub in_c: usize,
    pub out_c: usize,
    pub k: usize,
    pub stride: usize,
    pub groups: usize,
}

/// The attention geometry of one transformer stack.
#[derive(Clone, Copy, Debug)]
pub struct TransformerSpec {
    pub dim: usize,
    pub heads: usize,
    /// Attention window in steps; also the KV ring capacity, as the reference's RingKVCache.
    pub context: usize,
    pub max_period: f64,
    /// Rotary embedding on queries and keys (off for Moshi's depformer).
    pub rope: bool,
    /// Keys and values in the rings as f16 where the attention takes the split kernel
    /// ([`PlanBuilder::kv_half`]): half the rings' bytes, and half what a step reads at a
    /// full window (Kyutai's reference keeps its cache in bf16). On for Moshi's temporal
    /// transformer; such rings take one new position a step.
    pub kv_half: bool,
}

/// What a Q8_0 linear reads as its input row.
#[derive(Clone, Copy)]
enum Q8Input {
    Plain,
    Gated,
    Normed(f32),
    /// A [`NormedRow`]: eps, partial sums
    Prenormed(f32, usize),
    /// A [`GatedRow`] the i8 kernel wrote already quantized (`p.input 4`)
    Packed,
    /// [`NormInput::RawPartials`]: eps, partial rows (`p.input 5`)
    NormedPartials(f32, usize),
}

/// What a Q8_0 linear does with its outputs (`p.mode` of the kernels).
#[derive(Clone, Copy)]
enum Q8Out<'b> {
    Write,
    Add,
    /// Add, and prepare the next RMSNorm into this row ([`NormedRow`])
    AddNormed(&'b wgpu::Buffer),
    /// A SiLU-gated FFN's `linear_in`: the gate as its epilogue, into a [`GatedRow`]
    Gate,
}

impl Q8Out<'_> {
    fn add_if(accumulate: bool) -> Self {
        if accumulate {
            Self::Add
        } else {
            Self::Write
        }
    }
}

/// A SiLU-gated FFN's hidden row `silu(gate) * up` `[1, dim]` as
/// [`PlanBuilder::q8_linear_gate`] writes it, for [`PlanBuilder::q8_linear_from_gated`]
/// (moshi.modules.gating ActivationGating, between `linear_in` and `linear_out`). With the
/// i8 kernel ([`Q8Dot::I8`]) it is held already quantized as `linear_out` dots it (per
/// 16 values two 8-bit levels and a scale: `9 dim / 16` u32, the layout of `p.input 4` in
/// `shaders/q8_matvec_dot4.wgsl`), so that `linear_out`'s workgroups stage and quantize
/// nothing; with the f32 kernel, as `dim` f32.
#[derive(Clone, Debug)]
pub struct GatedRow {
    pub buf: wgpu::Buffer,
    pub dim: usize,
    packed: bool,
}

/// The input of a normed Q8_0 linear: the raw row `x` `[1, k]` with the norm's gain and eps
/// ([`PlanBuilder::q8_linear_normed`]), or a row a residual add prepared
/// ([`PlanBuilder::q8_linear_prenormed`]).
#[derive(Clone, Copy)]
pub enum NormInput<'b> {
    Raw(&'b Tensor, &'b wgpu::Buffer, f32),
    Prepared(&'b NormedRow, f32),
    /// [`Self::Raw`] of the row `x` plus the partial rows [`PlanBuilder::attention_out_proj`]
    /// wrote behind it (their count last): the i8 kernel only.
    RawPartials(&'b Tensor, &'b wgpu::Buffer, f32, usize),
}

/// Whether plans take a SiLU-gated FFN's gate as `linear_out` reads the `[gate; up]` row
/// of `linear_in` (the rule before [`GatedRow`]): only where the environment sets
/// `INFERENCELAYER_GATE=linear_out`, for measurements. By default `linear_in` takes the
/// gate in its epilogue ([`PlanBuilder::q8_linear_gate`]). Read once per plan build; on
/// the web always off.
pub fn gate_in_linear_out() -> bool {
    matches!(std::env::var("INFERENCELAYER_GATE").as_deref(), Ok("linear_out"))
}

/// Most lanes per row group of the i8 kernel's `linear_in` with the gate as its epilogue:
/// a workgroup must end with whole units of 16 hidden values (two a row group) to quantize.
const Q8_GATE_MAX_LANES: usize = 32;

/// One row `[dim]` made ready for an RMSNorm by the residual add that wrote it
/// ([`PlanBuilder::q8_linear_residual`]): `buf` holds `dim` f32 (the row times the norm's
/// gain) then `dim / 4` partial sums of the row's squares, one per group of 4 rows the add
/// wrote. [`PlanBuilder::q8_linear_prenormed`] reads it: the norm costs neither a dispatch
/// of its own nor a gain read beside the input.
#[derive(Clone, Debug)]
pub struct NormedRow {
    pub buf: wgpu::Buffer,
    pub dim: usize,
}

/// Whether plans take their RMSNorms from the partial sums of the residual add before them
/// ([`NormedRow`]): only where the environment sets
/// `INFERENCELAYER_FUSE=1`. By default each normed linear takes its norm from the raw row
/// (the i8 kernel as it quantizes it, the f32 kernel below [`Q8_NORM_APART`], a norm
/// dispatch above), which the H200 measured faster with the i8 kernel: the depformer's
/// plan 1.83 ms in one pass against 2.10 with the prepared rows (and an attention fused into
/// out_proj, since removed; the residual add's epilogue
/// costs a latency-bound dispatch more than the norm it saves), the temporal plan within
/// 1%. Read once per plan build; on the web always off.
pub fn fuse_norms() -> bool {
    matches!(std::env::var("INFERENCELAYER_FUSE").as_deref(), Ok("1"))
}

/// Output columns per workgroup of `conv_transpose1d` (`TILE` in the shader).
const CONV_TR_TILE: usize = 128;
/// Buffers a [`PlanBuilder`] takes in turn for outputs a step writes nothing to: more than
/// the depformer's eight input projections, which must not wait for one another.
const UNUSED_OUTPUTS: usize = 10;
/// Logits up to which [`PlanBuilder::sample`] draws with `sample_radix8.wgsl`.
const SAMPLE_RADIX8_MAX: usize = 4096;
/// Threads per workgroup of `matvec`.
const WG_MATVEC: usize = 256;

/// Lanes per output element of an f32 linear (`matvec`: Mimi's transformers and its
/// quantizer's input projection) `[n, k]`, on a CPU adapter (`cpu`) or not, its input
/// LayerNormed as it is read (`norm`) or not: 64 (4 outputs a workgroup of 256) on a CPU
/// adapter and where the kernel takes the LayerNorm (every workgroup takes the statistics
/// of the whole input rows, so more workgroups cost more); else one vec4 of each weight row
/// a lane, `k / 4` lanes from 64 to 256 (1 output a workgroup). On an NVIDIA H100
/// (2026-12-06, `examples/mimi_steps.rs`, a layer's dispatch profiled apart, the median of
/// Mimi's 16 layers) at 64, 128 and 256 lanes: `linear2` (k 2048) 13.0, 10.2 and 9.4 us,
/// `out_proj` (k 512) 8.5, 7.7 and 7.8; `norm1+in_proj` 11.5, 15.6 and 20.0,
/// `norm2+linear1` 11.8, 16.4 and 24.2.
pub fn matvec_lanes_auto(cpu: bool, k: usize, norm: bool) -> usize {
    if cpu || norm {
        return 64;
    }
    (k / 4).next_power_of_two().clamp(64, 256)
}

/// Lanes per output element of the f32 linears: `INFERENCELAYER_MATVEC_LANES` = 64, 128 or
/// 256 at every shape (4, 2 or 1 outputs a workgroup), for measurements; unset, empty or
/// `auto`, and on the web, `None`: [`matvec_lanes_auto`]'s by shape. Any other value is an
/// [`Error::Input`].
pub fn matvec_lanes_from_env() -> Result<Option<usize>> {
    if cfg!(target_arch = "wasm32") {
        return Ok(None);
    }
    match std::env::var("INFERENCELAYER_MATVEC_LANES").as_deref().map(str::trim) {
        Err(_) | Ok("") | Ok("auto") => Ok(None),
        Ok(v) => match v.parse() {
            Ok(l @ (64 | 128 | 256)) => Ok(Some(l)),
            _ => Err(Error::Input(format!("INFERENCELAYER_MATVEC_LANES must be auto, 64, 128 or 256, got {v:?}"))),
        },
    }
}

/// Threads per workgroup of `q8_matvec`.
const WG_Q8: usize = 256;

/// Output channels x output columns of one `conv1d_tiled` workgroup (`TO`, `TT` in the
/// shader).
const CONV_TILE: (usize, usize) = (16, 16);
/// Workgroup floats of `conv1d_tiled` for one chunk's input window (`XS`) and weights (`WS`):
/// a conv fits the kernel where its tile's window, `(TT - 1) * stride + (k - 1) * dilation + 1`
/// columns, is at most `XS` and `k` at most `WS / TO - 1`.
const CONV_TILED_WINDOW: usize = 1280;
const CONV_TILED_WEIGHTS: usize = 2560;

/// Which kernel a streaming conv ([`PlanBuilder::conv1d`], and a transposed conv as a conv:
/// [`PlanBuilder::conv_transpose1d_as_conv`]) runs. All take the same
/// bindings and give the same result, summed in different orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKernel {
    /// By shape and adapter (the default): [`conv_kernel_auto`].
    Auto,
    /// `conv1d_tiled` (a workgroup per 16 output channels x 16 columns of one group, input
    /// window and weights staged in workgroup memory) at every shape that fits it; a conv
    /// that does not is an [`Error::Config`].
    Tiled,
    /// `conv1d_reduce` (a workgroup per output, 64 threads over the reduction) at every
    /// shape.
    Reduce,
    /// `conv1d_lanes` (16 to 256 threads per output over the reduction, by its reduction and
    /// output count: [`conv_reduce_lanes`]) at every shape.
    Lanes,
}

impl ConvKernel {
    /// The kernel `INFERENCELAYER_CONV` names for every streaming conv of a plan: `auto`,
    /// `reduce`, `lanes` or `tiled` (unset or empty, and on the web: [`Self::Auto`]), so that
    /// one build can compare them in Mimi's plans (`tiled` fails the plans with a conv it does
    /// not fit). Any other value is an [`Error::Input`].
    pub fn from_env() -> Result<Self> {
        match std::env::var("INFERENCELAYER_CONV").as_deref().map(str::trim) {
            Err(_) | Ok("") | Ok("auto") => Ok(Self::Auto),
            Ok("reduce") => Ok(Self::Reduce),
            Ok("lanes") => Ok(Self::Lanes),
            Ok("tiled") => Ok(Self::Tiled),
            Ok(v) => Err(Error::Input(format!("INFERENCELAYER_CONV must be auto, reduce, lanes or tiled, got {v:?}"))),
        }
    }
}

/// The kernel [`ConvKernel::Auto`] runs a streaming conv on, from the adapter (`cpu`),
/// whether the conv fits `conv1d_tiled` (`fits`), its `outputs` (output channels times
/// columns; phase rows times input columns for a transposed conv as a conv) and its
/// reduction (input channels per group times taps).
/// - On a GPU, `conv1d_lanes` for deep, short layers (at most 16384 outputs) and shapes
///   past the tiled kernel, `conv1d_tiled` for the others (on an H200,
///   `examples/conv_bench.rs`: Mimi's 30 convs 1050 to 1180 us alone against 1216 with
///   `conv1d_reduce` in its place, the stride-8 downsampling 43.0 against 62.8). The tiled
///   kernel also for Mimi's stride-6 upsampling (1024 terms over 24576 outputs as a conv
///   into phases), though `conv_bench` timed it at 61.1 us on `conv1d_reduce` against 129.6
///   tiled (an NVIDIA H100, 2026-12-06, each conv waiting for the one before): in Mimi's
///   decode plan, on the same H100 in the same hour, `conv1d_reduce` there made the decode
///   slower, 0.857 to 0.859 ms at the p50 against 0.847 to 0.848 in three runs alternating.
/// - On a CPU adapter (lavapipe, SwiftShader), `conv1d_reduce` for at most 16384 outputs of
///   a reduction of at least 128 and the shapes past the tiled kernel, where
///   `conv1d_lanes`'s workgroups of 256 and their barriers made Mimi's frames on SwiftShader
///   slower; `conv1d_tiled` for the others.
pub fn conv_kernel_auto(cpu: bool, fits: bool, outputs: usize, reduction: usize) -> ConvKernel {
    if cpu {
        return if fits && !(outputs <= 16384 && reduction >= 128) { ConvKernel::Tiled } else { ConvKernel::Reduce };
    }
    if fits && outputs > 16384 {
        ConvKernel::Tiled
    } else {
        ConvKernel::Lanes
    }
}

/// Threads per output of `conv1d_lanes` for `outputs` outputs of a reduction of `n` terms
/// (input channels per group times taps): about 16 terms each (two rounds of the kernel's
/// eight loads in flight), and at least 65536 threads in all while 256 a output allows, a
/// power of two from 16 to 256. Mimi's deepest downsampling conv (2048 outputs of 512 x 16
/// terms) gets 256, its 256-channel pointwise convs (8192 outputs of 256) 16, its last conv
/// (1920 outputs of 64 x 7) 64.
pub fn conv_reduce_lanes(outputs: usize, n: usize) -> usize {
    let by_terms = (n / 16).clamp(16, 256);
    let by_threads = (65536 / outputs.max(1)).next_power_of_two().clamp(16, 256);
    let lanes = by_terms.max(by_threads);
    1 << (usize::BITS - 1 - lanes.leading_zeros())
}

/// How many lanes per row group the Q8_0 linears of a [`PlanBuilder`] give `q8_matvec`
/// ([`Q8Kernel::dispatch`]). [`PlanBuilder::new`] takes it from `INFERENCELAYER_Q8_LANES`
/// ([`Q8Kernel::from_env`]), so that one build can compare them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q8Kernel {
    /// From 32, doubled while there are 32-weight blocks for them and fewer than 512
    /// workgroups (`INFERENCELAYER_Q8_LANES=blocks`, the rule before [`Self::Auto`]; for
    /// [`Q8Dot::I8`] from 8 and 240: [`Self::dispatch_for`]).
    Blocks,
    /// From 32, doubled while each lane has a 16-weight unit and there are fewer than 512
    /// workgroups (for [`Q8Dot::I8`] from 8 and 240; the default; `INFERENCELAYER_Q8_LANES=auto`): the lanes of
    /// [`Self::Blocks`] at the temporal transformer's shapes, more lanes and workgroups in
    /// flight at the depformer's (1 to 6 MB, where a dispatch is latency), the fastest
    /// measured on an H200.
    Auto,
    /// `lanes` lanes (a power of two, 4 to 256) at every shape: for benchmarks.
    Fixed { lanes: usize },
    /// [`Self::Auto`]'s lanes doubled while there are fewer than `groups` workgroups
    /// (`INFERENCELAYER_Q8_LANES=groups:N`): for benchmarks.
    Groups { groups: usize },
}

/// How the Q8_0 linears of a [`PlanBuilder`] form their dot products. [`PlanBuilder::new`]
/// takes it from `INFERENCELAYER_Q8_DOT` ([`Q8Dot::from_env`]), so that one build can
/// compare them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q8Dot {
    /// In f32 (`shaders/q8_matvec.wgsl`, `INFERENCELAYER_Q8_DOT=f32`): every weight byte
    /// converted to a float and multiplied by the f32 input.
    F32,
    /// On packed 8-bit integers (`shaders/q8_matvec_dot4.wgsl`, the default;
    /// `INFERENCELAYER_Q8_DOT=i8`): each workgroup quantizes the input row into workgroup
    /// memory as two 8-bit levels per 16 inputs (15 to 16 bits of each 16's largest value)
    /// and `dot4I8Packed` multiplies four weights by four inputs and sums them in one
    /// instruction.
    I8,
}

impl Q8Dot {
    /// The rule `INFERENCELAYER_Q8_DOT` names: `f32` or `i8` (unset or empty, and on the
    /// web: [`Self::I8`], which [`PlanBuilder::new`] turns into [`Self::F32`] on a device
    /// without it). Any other value is an [`Error::Input`].
    pub fn from_env() -> Result<Self> {
        match std::env::var("INFERENCELAYER_Q8_DOT").as_deref().map(str::trim) {
            Err(_) | Ok("") | Ok("i8") => Ok(Self::I8),
            Ok("f32") => Ok(Self::F32),
            Ok(v) => Err(Error::Input(format!("INFERENCELAYER_Q8_DOT must be f32 or i8, got {v:?}"))),
        }
    }
}

/// How one Q8_0 linear is dispatched: lanes per row group (of 4 rows), workgroups of 256
/// threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q8Dispatch {
    pub lanes: usize,
    pub groups: usize,
}

impl Q8Kernel {
    /// The rule `INFERENCELAYER_Q8_LANES` names: `blocks`, `auto` or `groups:N` (unset or
    /// empty, and on the web: [`Self::Auto`]). Any other value is an [`Error::Input`].
    pub fn from_env() -> Result<Self> {
        match std::env::var("INFERENCELAYER_Q8_LANES").as_deref().map(str::trim) {
            Err(_) | Ok("") | Ok("auto") => Ok(Self::Auto),
            Ok("blocks") => Ok(Self::Blocks),
            Ok(v) => match v.strip_prefix("groups:").map(|g| g.trim().parse::<usize>()) {
                Some(Ok(groups)) if groups > 0 => Ok(Self::Groups { groups }),
                _ => Err(Error::Input(format!("INFERENCELAYER_Q8_LANES must be blocks, auto or groups:N (N at least 1), got {v:?}"))),
            },
        }
    }

    /// The dispatch of an `[n, k]` Q8_0 linear over `t` input rows (`k` a multiple of 32,
    /// `n` of 4) for the f32 kernel ([`Q8Dot::F32`]). [`Self::Fixed`] with lanes outside 4
    /// to 256 or not a power of two falls back to [`Self::Auto`] (lanes beyond a row's
    /// 16-weight units idle).
    pub fn dispatch(self, n: usize, k: usize, t: usize) -> Q8Dispatch {
        self.dispatch_for(Q8Dot::F32, n, k, t)
    }

    /// The dispatch of an `[n, k]` Q8_0 linear over `t` input rows for the kernel `dot`
    /// names. For [`Q8Dot::I8`], whose workgroups each quantize their input row first, the
    /// rules start from 8 lanes and stop doubling at 240 workgroups (about two per
    /// multiprocessor of a large GPU): rows per workgroup pay for the quantization, which
    /// the H200 measured fastest at every temporal shape of Moshi 7B (`in_proj` 18.7 us with
    /// 32 lanes against 21.4 with the f32 kernel's 64, `linear_in` 29.0 against 31.7), and
    /// the f32 kernel's lanes at the depformer's. Workgroups of the i8 kernel do not
    /// straddle input rows: `t` times the row's.
    pub fn dispatch_for(self, dot: Q8Dot, n: usize, k: usize, t: usize) -> Q8Dispatch {
        let (first, enough, per_row) = match dot {
            Q8Dot::F32 => (32, 512, false),
            Q8Dot::I8 => (8, 240, true),
        };
        let enough = if let Self::Groups { groups } = self { groups } else { enough };
        let groups_of = |lanes: usize| {
            let rows = (WG_Q8 / lanes) * Q8_ROWS_PER_GROUP;
            if per_row {
                t * n.div_ceil(rows)
            } else {
                (n * t).div_ceil(rows)
            }
        };
        let doubled = |units: usize| {
            let mut lanes = first;
            while lanes < WG_Q8 && 2 * lanes <= units && groups_of(lanes) < enough {
                lanes *= 2;
            }
            lanes
        };
        let lanes = match self {
            Self::Blocks => doubled((k / 32).next_power_of_two()),
            Self::Fixed { lanes } if lanes.is_power_of_two() && (Q8_ROWS_PER_GROUP..=WG_Q8).contains(&lanes) => lanes,
            Self::Auto | Self::Fixed { .. } | Self::Groups { .. } => doubled(k / 16),
        };
        Q8Dispatch { lanes, groups: groups_of(lanes) }
    }

    /// The dispatch of a SiLU-gated FFN's `linear_in` `[n, k]` with the gate as its
    /// epilogue ([`PlanBuilder::q8_linear_gate`]): [`Self::dispatch_for`]'s, but for the i8
    /// kernel at most 32 lanes, so that each workgroup ends with whole units of 16 hidden
    /// values to quantize.
    pub fn dispatch_gate(self, dot: Q8Dot, n: usize, k: usize) -> Q8Dispatch {
        let d = self.dispatch_for(dot, n, k, 1);
        if dot == Q8Dot::I8 && d.lanes > Q8_GATE_MAX_LANES {
            let lanes = Q8_GATE_MAX_LANES;
            return Q8Dispatch { lanes, groups: n.div_ceil((WG_Q8 / lanes) * Q8_ROWS_PER_GROUP) };
        }
        d
    }
}

/// Most positions per workgroup of `rope_attention_split` in [`AttentionKernel::Auto`]'s
/// plans (the splits of a full window: 24 at the temporal transformer's 3000). Measured on
/// an H200 with [`ATTENTION_KEY_LANES`] (`examples/attention_bench.rs`, a step at the
/// temporal shape, two dispatches, in a pass of 32 / alone; README, "Benchmark"): at 3000
/// positions 55.1 / 69.1 us against 70.8 / 84.0 with 256 (64.1 / 76.6 with 256 and one
/// thread a key, the rule before), at 1000 25.3 / 36.5 against 30.3 / 40.6; at 200
/// positions a window takes the same 7 workgroups of [`ATTENTION_LEAST`] per head with
/// either (9.9 / 19.6 against 9.2 / 18.8: twice the workgroups launched). Those passes let
/// the steps overlap; with each step waiting for the one before, as in a plan (an NVIDIA
/// H100, 2026-12-05, f32 rings): at 3000 positions 66.5 us against 79.2 with 256, at 1000
/// 33.2 against 36.4, at 200 15.3 against 14.6.
pub const ATTENTION_CHUNK: usize = 128;
/// Fewest positions per workgroup of `rope_attention_split` in [`AttentionKernel::Auto`]'s
/// plans while the window fills (200 positions: 7 workgroups of 32 per head).
pub const ATTENTION_LEAST: usize = 32;

/// Fewest threads of `rope_attention_split` that share one key's dot product, where its
/// partial dots fit (at most 1024 per workgroup): with one thread a key, as a workgroup of
/// over 128 positions had, each thread read a 512-byte key alone and a warp's loads fell on
/// 32 keys 16 KiB apart; with 4, a warp reads 8 keys' consecutive vec4s. On an H200 (a step
/// at the temporal shape in a pass of 32, [`ATTENTION_CHUNK`] 128): 55.1 us at 3000
/// positions against 60.6 with one thread a key; but at 256 positions a workgroup, 70.8
/// against 64.1: the chunk and the lanes go together.
pub const ATTENTION_KEY_LANES: usize = 4;

/// Which kernels a streaming attention step of one new position
/// ([`PlanBuilder::rope_attention_at`] with `t = 1`) runs. [`PlanBuilder::new`] takes it from
/// `INFERENCELAYER_ATTENTION` ([`AttentionKernel::from_env`]), so that one build can compare
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernel {
    /// By shape (the default; `INFERENCELAYER_ATTENTION=auto`): `rope_attention_small` where
    /// the window has at most 32 positions and a thread for each of its vec4s fits one
    /// workgroup (the depformer: 8 positions of 16), else `rope_attention_split` with
    /// [`ATTENTION_CHUNK`] and [`ATTENTION_LEAST`] (a wider chunk where the window would need
    /// over 256 splits) and `attention_combine`; `rope_attention` for windows past the split
    /// kernel's reach (131072 positions).
    Auto,
    /// `rope_attention` at every shape (`INFERENCELAYER_ATTENTION=fused`): one workgroup per
    /// head over the whole window, the kernel before the split ones.
    Fused,
    /// `rope_attention_split` with at most `chunk` positions per workgroup (1 to 512, at most
    /// 256 splits of the window; else [`Self::Auto`]'s choice) and at least `least` (clamped
    /// to 1..=chunk) while the window fills, at every shape (`INFERENCELAYER_ATTENTION=split`
    /// or `split:CHUNK/LEAST`): for benchmarks and tests. A window of at most `chunk`
    /// positions takes one split and no combine.
    Split { chunk: usize, least: usize },
}

/// The kernels [`AttentionKernel::dispatch`] chose for one attention step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionDispatch {
    /// `rope_attention`: a workgroup per head.
    Fused,
    /// `rope_attention_small`: a workgroup per head, a thread per vec4 of the window.
    Small,
    /// `rope_attention_split` on `[splits, heads]` workgroups of `least` to `chunk`
    /// positions, then `attention_combine` on `heads` (none when `splits == 1`).
    Split { chunk: usize, least: usize, splits: usize },
}

impl AttentionKernel {
    /// The rule `INFERENCELAYER_ATTENTION` names: `auto`, `fused`, `split` (the split kernels
    /// at every shape, with [`ATTENTION_CHUNK`] and [`ATTENTION_LEAST`]) or
    /// `split:CHUNK/LEAST` (unset or empty, and on the web: [`Self::Auto`]). Any other value
    /// is an [`Error::Input`].
    pub fn from_env() -> Result<Self> {
        let bad = |v: &str| Error::Input(format!("INFERENCELAYER_ATTENTION must be auto, fused, split or split:CHUNK/LEAST, got {v:?}"));
        match std::env::var("INFERENCELAYER_ATTENTION").as_deref().map(str::trim) {
            Err(_) | Ok("") | Ok("auto") => Ok(Self::Auto),
            Ok("fused") => Ok(Self::Fused),
            Ok("split") => Ok(Self::Split { chunk: ATTENTION_CHUNK, least: ATTENTION_LEAST }),
            Ok(v) => {
                let (chunk, least) = v.strip_prefix("split:").and_then(|cl| cl.split_once('/')).ok_or_else(|| bad(v))?;
                match (chunk.trim().parse(), least.trim().parse()) {
                    (Ok(chunk), Ok(least)) => Ok(Self::Split { chunk, least }),
                    _ => Err(bad(v)),
                }
            }
        }
    }

    /// The kernels of a step over a window of `window` positions (`min(context, ring)`) of
    /// heads of `head_dim` (a multiple of 4, at most 256).
    pub fn dispatch(self, head_dim: usize, window: usize) -> AttentionDispatch {
        let window = window.max(1);
        let split = |chunk: usize, least: usize| AttentionDispatch::Split { chunk, least: least.clamp(1, chunk), splits: window.div_ceil(chunk) };
        let fits = |chunk: usize| (1..=SPLIT_MAX_CHUNK).contains(&chunk) && window.div_ceil(chunk) <= SPLIT_MAX_SPLITS;
        match self {
            Self::Fused => AttentionDispatch::Fused,
            Self::Split { chunk, least } if fits(chunk) => split(chunk, least),
            Self::Auto | Self::Split { .. } => {
                if window <= SMALL_MAX_WINDOW && window * (head_dim / 4) <= 256 {
                    return AttentionDispatch::Small;
                }
                let chunk = ATTENTION_CHUNK.max(window.div_ceil(SPLIT_MAX_SPLITS));
                if fits(chunk) {
                    split(chunk, ATTENTION_LEAST)
                } else {
                    AttentionDispatch::Fused
                }
            }
        }
    }

    /// Whether the rings of `spec` hold f16 keys and values under this rule:
    /// [`TransformerSpec::kv_half`] where the split kernel takes one new position
    /// ([`Self::dispatch`]) and a head is a multiple of 8 wide.
    pub fn kv_half(self, spec: &TransformerSpec) -> bool {
        let hd = spec.dim / spec.heads.max(1);
        spec.kv_half && hd % 8 == 0 && matches!(self.dispatch(hd, spec.context), AttentionDispatch::Split { .. })
    }

    /// Bytes of the key ring (and of the value ring) of `spec` under this rule: `context`
    /// slots of `dim` values, f16 where [`Self::kv_half`], else f32. What
    /// [`PlanBuilder::attention_state`] allocates, and what a load checks against the
    /// device's limits beforehand.
    pub fn kv_ring_bytes(self, spec: &TransformerSpec) -> usize {
        spec.context * spec.dim * if self.kv_half(spec) { 2 } else { 4 }
    }
}

/// How [`PlanBuilder::linear`] writes its result.
pub enum LinearOut<'a> {
    /// `y = W x`
    Store,
    /// `y = gelu(W x)`
    Gelu,
    /// `y += W x`
    Accumulate,
    /// `y += scale * (W x)` (a LayerScale residual)
    Residual(&'a wgpu::Buffer),
}

/// Builds a [`Plan`] from model-agnostic layers. See the module doc.
pub struct PlanBuilder<'a> {
    ctx: &'a GpuContext,
    frame: wgpu::Buffer,
    steps: Vec<Step>,
    state: PlanState,
    taps: BTreeMap<String, Tensor>,
    dummy: wgpu::Buffer,
    /// bound where a kernel writes nothing (apart from `dummy`: one buffer cannot be bound
    /// read-only and writable in one bind group)
    dummy_out: wgpu::Buffer,
    /// [`UNUSED_OUTPUTS`] buffers taken in turn for outputs a step writes nothing to
    /// ([`Self::unused_output`])
    unused_outputs: Vec<wgpu::Buffer>,
    next_unused: usize,
    q8: Q8Kernel,
    q8_dot: Q8Dot,
    attention: AttentionKernel,
    /// Whether a short window's attention goes into out_proj ([`Self::attention_out_proj`])
    out_proj_fused: bool,
    /// [`elu_on_store_from_env`]
    elu_on_store: bool,
    conv: ConvKernel,
    /// Lanes per output element of the f32 linears at every shape, or by shape
    /// ([`matvec_lanes_auto`]) where `None` ([`matvec_lanes_from_env`])
    matvec_lanes: Option<usize>,
    /// Most bytes of weights a Q8_0 linear has prefetched into the L2 beside the dispatch
    /// before it ([`Self::prefetch`]); 0: none
    prefetch_max: u64,
}

/// Most bytes of weights [`PlanBuilder`] prefetches ahead of a Q8_0 linear on a GPU adapter
/// ([`prefetch_from_env`]): the depformer's linears (1.1 to 6.1 MB) and `linears.k`, which
/// run one after another on too little work to hide their weights' first loads. Measured on
/// an H200 (README, "Benchmark"; two runs of each, alternating): the depformer 1.62 ms in
/// one pass against 1.67 without, the LM step 5.21 against 5.29; 24 MiB, which adds the
/// temporal `out_proj` (17.8 MB) beside the attention's combine step, made the temporal
/// plan slower (3.50 ms against 3.45). Mimi's f32 linears, prefetched the same way, moved
/// within the runs' noise and are not.
pub const PREFETCH_MAX: u64 = 8 << 20;

/// The most bytes of weights plans prefetch ahead of a Q8_0 linear: `INFERENCELAYER_PREFETCH`
/// in MiB (`off` or 0 for none, for measurements), else [`PREFETCH_MAX`] natively on GPU
/// adapters and none on CPU adapters, whose caches a prefetch only fills twice. None on the
/// web (wgpu's webgpu backend, so Dawn and the browsers): on the H200 the wasm build on
/// Dawn took its depformer in 4.02 ms at the p50 with the prefetches where the round before
/// took 2.70 without (the whole LM step 6.07 against 5.33): Dawn does not run the prefetch
/// beside the step before it. A bad value is an [`Error::Input`].
pub fn prefetch_from_env(cpu: bool) -> Result<u64> {
    if cfg!(target_arch = "wasm32") {
        return Ok(0);
    }
    match std::env::var("INFERENCELAYER_PREFETCH").as_deref().map(str::trim) {
        Err(_) | Ok("") => Ok(if cpu { 0 } else { PREFETCH_MAX }),
        Ok("off") => Ok(0),
        Ok(v) => v
            .parse::<u64>()
            .ok()
            .and_then(|mib| mib.checked_mul(1 << 20))
            .ok_or_else(|| Error::Input(format!("INFERENCELAYER_PREFETCH must be off or a size in MiB, got {v:?}"))),
    }
}

/// Whether plans take a short window's attention into its out_proj where
/// [`PlanBuilder::attention_out_proj_group`] says it fits: `INFERENCELAYER_OUT_PROJ=apart`
/// keeps the two dispatches (for measurements), `fused` or unset takes it; any other value
/// is an [`Error::Input`]. On the web always fused.
pub fn out_proj_fused_from_env() -> Result<bool> {
    env_switch("INFERENCELAYER_OUT_PROJ", "fused", "apart")
}

/// Most partial rows a residual row holds behind it for the i8 kernel
/// (`shaders/q8_partials.wgsl`'s `MAX_PARTIALS`).
pub const MAX_PARTIALS: usize = 8;

fn grid_for(groups: usize) -> [u32; 2] {
    let g = groups.max(1) as u32;
    if g <= 65535 {
        [g, 1]
    } else {
        [65535, g.div_ceil(65535)]
    }
}

fn threads(n: usize) -> [u32; 2] {
    grid_for(n.div_ceil(WG as usize))
}

impl<'a> PlanBuilder<'a> {
    /// A builder whose stateful layers read `frame` (a [`FrameParams`] uniform the caller
    /// writes before each replay; its `index` must advance by one a replay, since the convs
    /// read one half of their state and write the other), its Q8_0 linears on
    /// [`Q8Kernel::from_env`], their dot products as [`Q8Dot::from_env`] says (the f32
    /// kernel where the WGSL of the device lacks `dot4I8Packed`:
    /// [`GpuInfo::packed_dot`](super::GpuInfo)), and its attention steps on
    /// [`AttentionKernel::from_env`], a short window's attention into its `out_proj` as
    /// [`out_proj_fused_from_env`] says (an [`Error::Input`] for a bad
    /// `INFERENCELAYER_Q8_LANES`, `INFERENCELAYER_Q8_DOT`, `INFERENCELAYER_ATTENTION`,
    /// `INFERENCELAYER_OUT_PROJ`, `INFERENCELAYER_CONV`, `INFERENCELAYER_CONV_ELU` or
    /// `INFERENCELAYER_MATVEC_LANES`).
    pub fn new(ctx: &'a GpuContext, frame: &wgpu::Buffer) -> Result<Self> {
        Ok(Self {
            ctx,
            frame: frame.clone(),
            steps: Vec::new(),
            state: PlanState::default(),
            taps: BTreeMap::new(),
            dummy: ctx.zeros("unused binding", 4)?,
            dummy_out: ctx.zeros("unused output binding", 4)?,
            unused_outputs: (0..UNUSED_OUTPUTS).map(|i| ctx.zeros(&format!("unused output {i}"), 4)).collect::<Result<_>>()?,
            next_unused: 0,
            q8: Q8Kernel::from_env()?,
            q8_dot: match Q8Dot::from_env()? {
                Q8Dot::I8 if !ctx.info.packed_dot => Q8Dot::F32,
                dot => dot,
            },
            attention: AttentionKernel::from_env()?,
            out_proj_fused: out_proj_fused_from_env()?,
            elu_on_store: elu_on_store_from_env()?,
            conv: ConvKernel::from_env()?,
            matvec_lanes: matvec_lanes_from_env()?,
            prefetch_max: prefetch_from_env(ctx.info.cpu)?,
        })
    }

    /// Prefetch the weights of Q8_0 linears added from now on of at most `bytes` (0: none).
    pub fn set_prefetch(&mut self, bytes: u64) {
        self.prefetch_max = bytes;
    }

    /// A dispatch that reads `a` and `b` through into the GPU's L2 cache (`prefetch.wgsl`),
    /// placed after the last step added: it writes only a buffer of its own, so nothing
    /// orders it after that step and the two run side by side; the next step that reads `a`
    /// or `b` (after the barrier its own inputs need) then finds them in the L2 instead of
    /// waiting on memory for its first loads. Worth it beside a latency-bound step, for
    /// buffers the L2 holds.
    pub fn prefetch(&mut self, label: &str, a: &wgpu::Buffer, b: &wgpu::Buffer) -> Result<()> {
        // the kernel binds both as vec4s: a buffer of less than one adds no step
        if a.size() < 16 || b.size() < 16 {
            return Ok(());
        }
        let (na, nb) = ((a.size() / 16) as usize, (b.size() / 16) as usize);
        // eight vec4 loads a thread
        let groups = na.max(nb).div_ceil(256 * 8).max(1);
        let threads = 256 * groups;
        if groups > 65535 {
            return Err(Error::config(label, format!("a prefetch of {} and {} bytes is more than one dispatch reads", a.size(), b.size())));
        }
        let p = PrefetchParams { a: na as u32, b: nb as u32, threads: threads as u32, _pad: 0 };
        let pb = self.params(label, &p);
        // a sink of its own: a write to a shared one would order every prefetch after the last
        let sink = self.ctx.zeros(&format!("{label} sink"), 1)?;
        self.step(&PREFETCH, format!("{label} prefetch"), &[a, b, &sink, &pb], [groups as u32, 1]);
        Ok(())
    }

    /// Dispatch the Q8_0 linears added from now on with `kernel`.
    pub fn set_q8_kernel(&mut self, kernel: Q8Kernel) {
        self.q8 = kernel;
    }

    /// Form the dot products of the Q8_0 linears added from now on as `dot` says.
    pub fn set_q8_dot(&mut self, dot: Q8Dot) {
        self.q8_dot = dot;
    }

    /// The dot products the Q8_0 linears added from now on take.
    pub fn q8_dot(&self) -> Q8Dot {
        self.q8_dot
    }

    /// Run the attention steps added from now on with `kernel`.
    pub fn set_attention_kernel(&mut self, kernel: AttentionKernel) {
        self.attention = kernel;
    }

    /// Whether models should move an ELU to the conv that writes its input where the
    /// input has no other reader ([`Elu`], [`elu_on_store_from_env`]).
    pub fn elu_on_store(&self) -> bool {
        self.elu_on_store
    }

    /// Whether the models planned from now on move their ELUs to the convs that store their
    /// inputs ([`Self::elu_on_store`]; [`elu_on_store_from_env`]'s until set).
    pub fn set_elu_on_store(&mut self, store: bool) {
        self.elu_on_store = store;
    }

    /// Run the streaming convs added from now on with `kernel` ([`ConvKernel::from_env`]'s
    /// until set).
    pub fn set_conv_kernel(&mut self, kernel: ConvKernel) {
        self.conv = kernel;
    }

    /// Run the f32 linears added from now on with `lanes` lanes per output element (64, 128
    /// or 256), or by shape where `None` ([`matvec_lanes_auto`]; [`matvec_lanes_from_env`]'s
    /// until set). [`Error::Input`] for any other count.
    pub fn set_matvec_lanes(&mut self, lanes: Option<usize>) -> Result<()> {
        if !matches!(lanes, None | Some(64 | 128 | 256)) {
            return Err(Error::Input(format!("matvec lanes must be 64, 128 or 256, got {lanes:?}")));
        }
        self.matvec_lanes = lanes;
        Ok(())
    }

    /// The context the plan is built on.
    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    /// Take the plan, its state and its named taps.
    pub fn finish(self) -> (Plan, PlanState, BTreeMap<String, Tensor>) {
        (Plan { steps: self.steps, id: NEXT_PLAN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed) }, self.state, self.taps)
    }

    /// A buffer for an output binding the step writes nothing to, one of
    /// [`UNUSED_OUTPUTS`] in turn: consecutive steps never share one, so none waits for the
    /// one before through it (a write to a shared buffer is a barrier).
    fn unused_output(&mut self) -> wgpu::Buffer {
        let b = self.unused_outputs[self.next_unused % UNUSED_OUTPUTS].clone();
        self.next_unused += 1;
        b
    }

    /// The dispatches added so far.
    pub fn dispatches(&self) -> usize {
        self.steps.len()
    }

    /// A zero-filled activation.
    pub fn tensor(&self, label: &str, shape: &[usize]) -> Result<Tensor> {
        Ok(Tensor { buf: self.ctx.zeros(label, shape.iter().product())?, shape: shape.to_vec() })
    }

    /// A streaming-state buffer of `len` f32, zeroed on reset.
    pub fn state(&mut self, label: &str, len: usize) -> Result<wgpu::Buffer> {
        let b = self.ctx.zeros(label, len)?;
        self.state.zeroed.push(b.clone());
        Ok(b)
    }

    /// A position ring of `len` slots, filled with [`INVALID_POS`] now and on reset.
    pub fn pos_ring(&mut self, label: &str, len: usize) -> Result<wgpu::Buffer> {
        let b = self.ctx.zeros(label, len)?;
        let inval = vec![INVALID_POS; len];
        self.ctx.queue.write_buffer(&b, 0, bytemuck::cast_slice(&inval));
        self.state.pos_rings.push(b.clone());
        Ok(b)
    }

    /// Name an activation so tests and debuggers can read it after a replay.
    pub fn tap(&mut self, name: &str, t: &Tensor) {
        self.taps.insert(name.to_string(), t.clone());
    }

    fn params<P: Pod>(&self, label: &str, p: &P) -> wgpu::Buffer {
        self.ctx.uniform(label, bytemuck::bytes_of(p))
    }

    fn step(&mut self, kernel: &Kernel, label: String, bufs: &[&wgpu::Buffer], grid: [u32; 2]) {
        debug_assert_eq!(bufs.len(), kernel.bindings.len(), "{}", kernel.name);
        let pipeline = self.ctx.pipeline(kernel);
        let entries: Vec<wgpu::BindGroupEntry> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        let bind_group = self.ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&label),
            layout: &pipeline.layout,
            entries: &entries,
        });
        self.steps.push(Step { pipeline, bind_group, grid, label });
    }

    /// One streaming causal conv over one frame, one dispatch: the input staged behind the
    /// carried prefix as the kernel reads it (ELU on load where `elu.input`, on the outputs as
    /// they are stored where `elu.output`: [`Elu`]; `x` is `[in_c, t]`, or
    /// `[t, in_c]` when `time_major`), convolved (adding `residual` `[out_c, t / stride]`
    /// when given), the next frame's prefix written into the other half of a two-half state
    /// (the frame uniform's `index` picks the halves). Returns `[out_c, t / stride]`, or
    /// `[t / stride, out_c]` when `time_major_out` (`residual` then lies the same way).
    /// Mirrors StreamingConv1d.forward in streaming mode.
    #[allow(clippy::too_many_arguments)]
    pub fn conv1d(
        &mut self,
        spec: &ConvSpec<'_>,
        x: &Tensor,
        time_major: bool,
        time_major_out: bool,
        elu: Elu,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        self.conv1d_phases(spec, x, time_major, time_major_out, elu, residual, 1)
    }

    /// A streaming ConvTranspose1d whose kernel is twice its stride `s`, as a conv: output
    /// column `q s + r` of channel `oc` takes input columns `q - 1` (the carried prefix for
    /// `q = 0`) and `q`, with taps `r + s` and `r`, so it is a stride-1 conv of kernel 2 into
    /// `s` phases of every output channel, interleaved in time as the conv writes them (no
    /// output tail to carry: the input's last column is carried instead). `spec` is that
    /// conv: `out_c` = the transposed conv's `out_c * s`, `k` 2, stride and dilation 1,
    /// weights `[out_c * s, in_c / groups, 2]` (`oc * s + r`: taps `r + s` then `r`), bias
    /// `[out_c]` (each phase takes its channel's). `x` `[in_c, t]` (the ELUs of `elu`: [`Elu`]) -> `[out_c, t * s]`, or
    /// `[t * s, out_c]` when `time_major_out`. Mirrors StreamingConvTranspose1d.forward in
    /// streaming mode (as [`Self::conv_transpose1d`] does for any kernel).
    pub fn conv_transpose1d_as_conv(&mut self, spec: &ConvSpec<'_>, x: &Tensor, elu: Elu, time_major_out: bool, stride: usize) -> Result<Tensor> {
        if spec.k != 2 || spec.stride != 1 || spec.dilation != 1 || stride == 0 || spec.out_c % stride != 0 || spec.replicate {
            return Err(Error::config(spec.name, "a transposed conv as a conv takes a stride-1 conv of kernel 2 into stride phases"));
        }
        self.conv1d_phases(spec, x, false, time_major_out, elu, None, stride)
    }

    #[allow(clippy::too_many_arguments)]
    fn conv1d_phases(
        &mut self,
        spec: &ConvSpec<'_>,
        x: &Tensor,
        time_major: bool,
        time_major_out: bool,
        elu: Elu,
        residual: Option<&Tensor>,
        phases: usize,
    ) -> Result<Tensor> {
        if spec.k == 0 || spec.stride == 0 || spec.dilation == 0 || spec.groups == 0 || phases == 0 {
            return Err(Error::config(spec.name, format!("a conv needs a kernel, stride, dilation and groups of at least 1, got {}, {}, {}, {}", spec.k, spec.stride, spec.dilation, spec.groups)));
        }
        let t = if time_major { x.shape[0] } else { x.shape[1] };
        let c = if time_major { x.shape[1] } else { x.shape[0] };
        if c != spec.in_c || t % spec.stride != 0 || spec.in_c % spec.groups != 0 || spec.out_c % spec.groups != 0 {
            return Err(Error::config(
                spec.name,
                format!("conv of {} channels, stride {}, groups {} cannot take input {:?}", spec.in_c, spec.stride, spec.groups, x.shape),
            ));
        }
        let k_eff = (spec.k - 1) * spec.dilation + 1;
        if k_eff < spec.stride {
            return Err(Error::config(spec.name, "kernel shorter than its stride"));
        }
        let tp = k_eff - spec.stride;
        let t_out = t / spec.stride;
        let (rows, cols) = (spec.out_c / phases, t_out * phases);
        let y = self.tensor(spec.name, &if time_major_out { [cols, rows] } else { [rows, cols] })?;
        let prev = if tp > 0 { self.state(&format!("{}.previous", spec.name), 2 * spec.in_c * tp)? } else { self.dummy_out.clone() };
        if let Some(r) = residual {
            if r.len() != spec.out_c * t_out {
                return Err(Error::config(spec.name, format!("residual {:?} does not match the output", r.shape)));
            }
        }
        // Deep, short layers (few outputs, long reductions) get 16 to 256 threads per output
        // on a GPU (conv1d_lanes), a workgroup of 64 per output on a CPU adapter
        // (conv1d_reduce): a tile of 16 x 16 outputs would leave most of the GPU idle there
        // (Mimi's 512 x 16 blocks: 16 to 32 workgroups) and most of its threads (2 columns
        // of 16), and each thread would sum the whole reduction; wide, long ones a workgroup
        // per tile of outputs, each input and weight read once per tile.
        let outputs = spec.out_c * t_out;
        let reduction = (spec.in_c / spec.groups) * spec.k;
        let (to, tt) = CONV_TILE;
        let window = (tt - 1) * spec.stride + (spec.k - 1) * spec.dilation + 1;
        let fits = window <= CONV_TILED_WINDOW && spec.k < CONV_TILED_WEIGHTS / to;
        let kernel = match self.conv {
            ConvKernel::Auto => conv_kernel_auto(self.ctx.info.cpu, fits, outputs, reduction),
            ConvKernel::Tiled if !fits => {
                return Err(Error::config(spec.name, format!("a kernel of {} taps, stride {}, dilation {} does not fit conv1d_tiled", spec.k, spec.stride, spec.dilation)));
            }
            kernel => kernel,
        };
        // conv1d_lanes's threads per output
        let lanes = conv_reduce_lanes(outputs, reduction);
        let p = Conv1dParams {
            in_c: spec.in_c as u32,
            out_c: spec.out_c as u32,
            k: spec.k as u32,
            stride: spec.stride as u32,
            dilation: spec.dilation as u32,
            groups: spec.groups as u32,
            t_out: t_out as u32,
            t: t as u32,
            tp: tp as u32,
            has_bias: spec.b.is_some() as u32,
            residual: residual.is_some() as u32,
            time_major: time_major as u32,
            _pad3: 0,
            replicate: spec.replicate as u32,
            time_major_out: time_major_out as u32,
            phases: phases as u32,
            lanes: lanes as u32,
            elu_out: elu.output as u32,
            _pad: [0; 2],
        };
        let pb = self.params(spec.name, &p);
        let b = spec.b.unwrap_or(&self.dummy).clone();
        let res = residual.map(|r| r.buf.clone()).unwrap_or_else(|| self.dummy.clone());
        let frame = self.frame.clone();
        let bufs = [spec.w, &b, &x.buf, &prev, &res, &y.buf, &pb, &frame];
        let label = spec.name.to_string();
        // each kernel's pipeline with or without the ELU on load, and its workgroups
        let (pipelines, groups) = match kernel {
            ConvKernel::Tiled => ([&CONV1D_TILED, &CONV1D_TILED_ELU], spec.groups * (spec.out_c / spec.groups).div_ceil(to) * t_out.div_ceil(tt)),
            ConvKernel::Lanes => ([&CONV1D_LANES, &CONV1D_LANES_ELU], outputs.div_ceil(256 / lanes)),
            // (Auto is resolved above)
            ConvKernel::Reduce | ConvKernel::Auto => ([&CONV1D_REDUCE, &CONV1D_REDUCE_ELU], outputs),
        };
        self.step(pipelines[elu.input as usize], label, &bufs, grid_for(groups));
        Ok(y)
    }

    /// One streaming causal transposed conv over one frame (the ELUs of `elu`: [`Elu`]), one
    /// dispatch: `x` `[in_c, t]` -> `[out_c, t * stride]`, the overlap tail carried to the
    /// next frame with its bias removed, in the other half of a two-half state (the frame
    /// uniform's `index` picks the halves); `[t * stride, out_c]` when `time_major_out`.
    /// Mirrors StreamingConvTranspose1d.forward in streaming mode.
    pub fn conv_transpose1d(&mut self, spec: &ConvTrSpec<'_>, x: &Tensor, elu: Elu, time_major_out: bool) -> Result<Tensor> {
        if spec.k == 0 || spec.stride == 0 || spec.groups == 0 {
            return Err(Error::config(spec.name, format!("a transposed conv needs a kernel, stride and groups of at least 1, got {}, {}, {}", spec.k, spec.stride, spec.groups)));
        }
        let (c, t_in) = (x.shape[0], x.shape[1]);
        if c != spec.in_c || spec.in_c % spec.groups != 0 || spec.out_c % spec.groups != 0 || spec.k < spec.stride {
            return Err(Error::config(spec.name, format!("transposed conv cannot take input {:?}", x.shape)));
        }
        let tp = spec.k - spec.stride;
        let ts = t_in * spec.stride;
        if ts < tp {
            return Err(Error::config(spec.name, "a frame must be at least as long as the overlap (kernel - stride)"));
        }
        let y = self.tensor(spec.name, &if time_major_out { [ts, spec.out_c] } else { [spec.out_c, ts] })?;
        let partial = if tp > 0 { self.state(&format!("{}.partial", spec.name), 2 * spec.out_c * tp)? } else { self.dummy_out.clone() };
        let p = ConvTransposeParams {
            in_c: spec.in_c as u32,
            out_c: spec.out_c as u32,
            k: spec.k as u32,
            stride: spec.stride as u32,
            groups: spec.groups as u32,
            t_in: t_in as u32,
            ts: ts as u32,
            tp: tp as u32,
            has_bias: spec.b.is_some() as u32,
            elu: elu.input as u32,
            time_major_out: time_major_out as u32,
            elu_out: elu.output as u32,
        };
        let pb = self.params(spec.name, &p);
        let b = spec.b.unwrap_or(&self.dummy).clone();
        let frame = self.frame.clone();
        self.step(
            &CONV_TRANSPOSE1D,
            spec.name.to_string(),
            &[spec.w, &b, &x.buf, &partial, &y.buf, &pb, &frame],
            grid_for(spec.out_c * (ts + tp).div_ceil(CONV_TR_TILE)),
        );
        Ok(y)
    }

    /// `dst[..n] = src[..n]`.
    pub fn copy(&mut self, label: &str, src: &wgpu::Buffer, dst: &wgpu::Buffer, n: usize) {
        let pb = self.params(label, &Count4 { a: n as u32, ..Default::default() });
        self.step(&COPY, label.to_string(), &[src, dst, &pb], threads(n));
    }

    /// `[rows, cols]` -> `[cols, rows]`.
    pub fn transpose(&mut self, label: &str, x: &Tensor) -> Result<Tensor> {
        let (r, c) = (x.shape[0], x.shape[1]);
        let y = self.tensor(label, &[c, r])?;
        let pb = self.params(label, &Count4 { a: r as u32, b: c as u32, ..Default::default() });
        self.step(&TRANSPOSE, label.to_string(), &[&x.buf, &y.buf, &pb], threads(r * c));
        Ok(y)
    }

    /// LayerNorm of each row of `x` `[rows, dim]` into `y` (same shape).
    pub fn layer_norm(&mut self, label: &str, x: &Tensor, w: &wgpu::Buffer, b: &wgpu::Buffer, eps: f32, y: &Tensor) {
        let (rows, dim) = (x.shape[0], x.shape[1]);
        let pb = self.params(label, &LayerNormParams { dim: dim as u32, eps, _pad: [0; 2] });
        self.step(&LAYER_NORM, label.to_string(), &[&x.buf, w, b, &y.buf, &pb], grid_for(rows));
    }

    /// A bias-free linear layer on `t` rows: `w` `[n, k]`, rows of `x` from element
    /// `x_offset`, rows of `y` from `y_offset`, written as `out` says. [`Error::Config`]
    /// when `k` or `x_offset` is not a multiple of 4 (the kernel reads rows as vec4s).
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        &mut self,
        label: &str,
        w: &wgpu::Buffer,
        (n, k): (usize, usize),
        t: usize,
        x: &wgpu::Buffer,
        x_offset: usize,
        y: &wgpu::Buffer,
        y_offset: usize,
        out: LinearOut<'_>,
    ) -> Result<()> {
        self.matvec(label, w, (n, k), t, (x, x_offset), None, (y, y_offset), out)
    }

    /// [`Self::linear`] of the LayerNorm of each row of `x` `[t, k]` (gain `ln_w`, bias
    /// `ln_b` `[k]`, `eps`; torch.nn.LayerNorm), one dispatch: each workgroup takes the
    /// statistics of every row with [`Self::layer_norm`]'s summation order and normalizes
    /// the rows as it reads them, so the result is that of a `layer_norm` then a `linear` at
    /// the same lanes ([`Self::set_matvec_lanes`]; by shape, [`matvec_lanes_auto`] may give a
    /// GPU's `linear` more lanes, which sum the dot products in another order). Writes `y`
    /// `[t, n]` as `out` says.
    #[allow(clippy::too_many_arguments)]
    pub fn linear_layer_norm(
        &mut self,
        label: &str,
        w: &wgpu::Buffer,
        (n, k): (usize, usize),
        x: &Tensor,
        (ln_w, ln_b, eps): (&wgpu::Buffer, &wgpu::Buffer, f32),
        y: &Tensor,
        out: LinearOut<'_>,
    ) -> Result<()> {
        let t = x.shape[0];
        if x.shape.len() != 2 || x.shape[1] != k || y.len() != t * n {
            return Err(Error::config(label, format!("a LayerNorm-fused linear [{n}, {k}] cannot take {:?} into {:?}", x.shape, y.shape)));
        }
        self.matvec(label, w, (n, k), t, (&x.buf, 0), Some((ln_w, ln_b, eps)), (&y.buf, 0), out)
    }

    #[allow(clippy::too_many_arguments)]
    fn matvec(
        &mut self,
        label: &str,
        w: &wgpu::Buffer,
        (n, k): (usize, usize),
        t: usize,
        (x, x_offset): (&wgpu::Buffer, usize),
        norm: Option<(&wgpu::Buffer, &wgpu::Buffer, f32)>,
        (y, y_offset): (&wgpu::Buffer, usize),
        out: LinearOut<'_>,
    ) -> Result<()> {
        if k % 4 != 0 || x_offset % 4 != 0 {
            return Err(Error::config(label, format!("a linear reads rows of a multiple of 4 from a multiple of 4, got [{n}, {k}] from {x_offset}")));
        }
        let mut p = MatvecParams {
            n: n as u32,
            k: k as u32,
            t: t as u32,
            x_offset: x_offset as u32,
            y_offset: y_offset as u32,
            ..Default::default()
        };
        let scale = match out {
            LinearOut::Store => self.dummy.clone(),
            LinearOut::Gelu => {
                p.gelu = 1;
                self.dummy.clone()
            }
            LinearOut::Accumulate => {
                p.accumulate = 1;
                self.dummy.clone()
            }
            LinearOut::Residual(s) => {
                p.residual = 1;
                s.clone()
            }
        };
        let (ln_w, ln_b) = match norm {
            Some((ln_w, ln_b, eps)) => {
                p.norm = 1;
                p.eps = eps;
                (ln_w.clone(), ln_b.clone())
            }
            None => (self.dummy.clone(), self.dummy.clone()),
        };
        let lanes = self.matvec_lanes.unwrap_or_else(|| matvec_lanes_auto(self.ctx.info.cpu, k, p.norm == 1));
        p.lanes = lanes as u32;
        let pb = self.params(label, &p);
        self.step(&MATVEC, label.to_string(), &[w, x, &scale, y, &pb, &ln_w, &ln_b], grid_for(n.div_ceil(WG_MATVEC / lanes)));
        Ok(())
    }

    /// Rotate the queries and keys of `qkv` `[t, 3 dim]` (positions `frame.pos + row`), push
    /// keys and values into the rings, then attend: returns `[t, dim]`. One dispatch while
    /// `t * head_dim <= 1024` and `t <= context` (`shaders/rope_attention.wgsl`: Mimi's two
    /// steps a frame, the LM's one), else two. The rings (and the position ring) are this
    /// layer's streaming state, `spec.context` slots each.
    pub fn rope_attention(&mut self, label: &str, spec: &TransformerSpec, qkv: &Tensor) -> Result<Tensor> {
        let frame = self.frame.clone();
        let state = self.attention_state(label, spec)?;
        self.rope_attention_at(label, spec, qkv, &frame, &state)
    }

    /// Whether the rings of `spec` hold f16 keys and values in this builder's plans
    /// ([`AttentionKernel::kv_half`]).
    pub fn kv_half(&self, spec: &TransformerSpec) -> bool {
        self.attention.kv_half(spec)
    }

    /// The KV ring, value ring and position ring of one attention layer (`context` slots;
    /// keys and values in f16 where [`Self::kv_half`]).
    pub fn attention_state(&mut self, label: &str, spec: &TransformerSpec) -> Result<[wgpu::Buffer; 3]> {
        let words = self.attention.kv_ring_bytes(spec) / 4;
        Ok([
            self.state(&format!("{label}.k_ring"), words)?,
            self.state(&format!("{label}.v_ring"), words)?,
            self.pos_ring(&format!("{label}.pos_ring"), spec.context)?,
        ])
    }

    /// [`Self::rope_attention`] with an explicit position uniform (`frame`, a
    /// [`FrameParams`]) and explicit rings (from [`Self::attention_state`]): the depformer
    /// runs its steps at fixed positions over rings shared by the steps of a frame. With one
    /// new position (`t = 1`) rotation, KV push and attention are fused in the kernels of
    /// [`AttentionKernel::dispatch`] (one dispatch, or two for a window split over several
    /// workgroups per head); with more, `rope_kv` then `attention`.
    pub fn rope_attention_at(
        &mut self,
        label: &str,
        spec: &TransformerSpec,
        qkv: &Tensor,
        frame: &wgpu::Buffer,
        rings: &[wgpu::Buffer; 3],
    ) -> Result<Tensor> {
        let t = qkv.shape[0];
        let (dim, heads, ring) = (spec.dim, spec.heads, spec.context);
        // the attention kernel reads heads as vec4s and keeps a query in 64 of them
        if dim % heads != 0 || (dim / heads) % 4 != 0 || dim / heads > 256 || qkv.shape[1] != 3 * dim {
            return Err(Error::config(label, format!("attention of dim {dim}, {heads} heads cannot take {:?}", qkv.shape)));
        }
        let [k_ring, v_ring, pos_ring] = rings;
        let hd = dim / heads;
        let half = self.kv_half(spec);
        if half && t != 1 {
            return Err(Error::config(label, format!("f16 KV rings take one new position a step, got {t}")));
        }
        let attn = RopeHeads::new(spec);
        let rope_params = |t: usize| RopeAttentionParams { attn, t: t as u32 };
        if t == 1 {
            // one new position: rotation, KV push and attention fused
            let out = self.tensor(&format!("{label}.attn"), &[1, dim])?;
            let p = rope_params(1);
            match self.attention.dispatch(hd, ring.min(spec.context)) {
                AttentionDispatch::Fused => {
                    let scores = self.ctx.zeros(&format!("{label}.scores"), heads * ring)?;
                    let pb = self.params(label, &p);
                    self.step(
                        &ROPE_ATTENTION,
                        format!("{label} rope+kv+attention"),
                        &[&qkv.buf, k_ring, v_ring, pos_ring, &scores, &out.buf, &pb, frame],
                        [heads as u32, 1],
                    );
                }
                AttentionDispatch::Small => {
                    let pb = self.params(label, &p);
                    self.step(
                        &ROPE_ATTENTION_SMALL,
                        format!("{label} rope+kv+attention"),
                        &[&qkv.buf, k_ring, v_ring, pos_ring, &out.buf, &pb, frame],
                        [heads as u32, 1],
                    );
                }
                AttentionDispatch::Split { chunk, least, splits } => {
                    let sp = SplitAttentionParams {
                        attn,
                        chunk: chunk as u32,
                        least: least as u32,
                        key_lanes: ATTENTION_KEY_LANES as u32,
                        half: half as u32,
                        _pad: 0,
                    };
                    let pb = self.params(label, &sp);
                    let part = if splits > 1 {
                        self.ctx.zeros(&format!("{label}.partials"), heads * splits * (hd + 4))?
                    } else {
                        self.dummy_out.clone()
                    };
                    self.step(
                        &ROPE_ATTENTION_SPLIT,
                        format!("{label} rope+kv+attention split"),
                        &[&qkv.buf, k_ring, v_ring, pos_ring, &part, &out.buf, &pb, frame],
                        [splits as u32, heads as u32],
                    );
                    if splits > 1 {
                        self.step(&ATTENTION_COMBINE, format!("{label} attention combine"), &[&part, &out.buf, &pb, frame], [heads as u32, 1]);
                    }
                }
            }
            return Ok(out);
        }
        if t * (hd / 4) <= 256 && t <= ring {
            // a few new positions: rotation, KV push and attention in one dispatch
            let scores = self.ctx.zeros(&format!("{label}.scores"), t * heads * ring)?;
            let out = self.tensor(&format!("{label}.attn"), &[t, dim])?;
            let pb = self.params(label, &rope_params(t));
            self.step(
                &ROPE_ATTENTION,
                format!("{label} rope+kv+attention"),
                &[&qkv.buf, k_ring, v_ring, pos_ring, &scores, &out.buf, &pb, frame],
                [heads as u32, t as u32],
            );
            return Ok(out);
        }
        let q = self.tensor(&format!("{label}.q"), &[t, dim])?;
        let p = RopeKvParams {
            dim: dim as u32,
            heads: heads as u32,
            ring: ring as u32,
            t: t as u32,
            freq_coef: attn.freq_coef,
            rope: spec.rope as u32,
            _pad: [0; 2],
        };
        let pb = self.params(label, &p);
        self.step(
            &ROPE_KV,
            format!("{label} rope+kv"),
            &[&qkv.buf, &q.buf, k_ring, v_ring, pos_ring, &pb, frame],
            threads(t * dim / 2),
        );
        let scores = self.ctx.zeros(&format!("{label}.scores"), t * heads * ring)?;
        let out = self.tensor(&format!("{label}.attn"), &[t, dim])?;
        let p = AttentionParams {
            dim: dim as u32,
            heads: heads as u32,
            ring: ring as u32,
            t: t as u32,
            context: spec.context as u32,
            scale: attn.scale,
            _pad: [0; 2],
        };
        let pb = self.params(label, &p);
        self.step(
            &ATTENTION,
            format!("{label} attention"),
            &[&q.buf, k_ring, v_ring, pos_ring, &scores, &out.buf, &pb, frame],
            [t as u32, heads as u32],
        );
        Ok(out)
    }

    /// The heads a workgroup of [`Self::attention_out_proj`] attends for `spec`'s attention
    /// of one new position (`G`: a power of two dividing the heads, the most with `G` times
    /// the window's vec4s at most 256 and `G hd` at most 256), or `None` where the fused
    /// kernel does not take it: a window past `rope_attention_small`'s (over 32 positions),
    /// heads not a multiple of 4 wide, `G hd` not a multiple of 16, more partial rows than
    /// [`MAX_PARTIALS`], the f32 kernel ([`Q8Dot::F32`]), or `INFERENCELAYER_OUT_PROJ=apart`.
    pub fn attention_out_proj_group(&self, spec: &TransformerSpec) -> Option<usize> {
        let (dim, heads) = (spec.dim, spec.heads);
        if !self.out_proj_fused || self.q8_dot != Q8Dot::I8 || heads == 0 || dim % heads != 0 || (dim / heads) % 4 != 0 {
            return None;
        }
        let (hd4, window) = (dim / heads / 4, spec.context.max(1));
        if self.attention.dispatch(4 * hd4, window) != AttentionDispatch::Small {
            return None;
        }
        let mut g = 1;
        while heads % (2 * g) == 0 && 2 * g * window * hd4 <= 256 && 2 * g * hd4 <= 64 {
            g *= 2;
        }
        let units = g * hd4 / 4;
        let fits = dim % 32 == 0 && window * hd4 * g <= 256 && g * hd4 <= 64 && (g * hd4) % 4 == 0 && 256 % units == 0 && dim % (256 / units) == 0 && heads / g <= MAX_PARTIALS;
        fits.then_some(g)
    }

    /// A transformer layer's self-attention over a short window for one new position and its
    /// `out_proj` (Q8_0 `(quants, scales)` `[dim, dim]`, bias-free) in one dispatch
    /// (`shaders/attention_out_proj.wgsl`): the attention of `rope_attention_small` (rotary,
    /// KV push into `rings`, the window of [`Self::rope_attention_at`]), and each group of
    /// `G` heads ([`Self::attention_out_proj_group`]) dotted with its columns of `out_proj`
    /// into a partial row of its own behind the residual row `x` `[1, dim]`, in the same
    /// buffer. Returns the number of partial rows (`heads / G`): the residual's next readers
    /// add them in ([`NormInput::RawPartials`] for the FFN's `linear_in`, the `partials` of
    /// [`Self::q8_linear_from_gated`] for its `linear_out`), so that `x + out_proj(attn)` is
    /// never written apart. One dispatch of `[dim / rows, heads / G]` workgroups where
    /// `rope_attention_at` and `q8_linear` took two. [`Error::Config`] where the shape does
    /// not fit the kernel or `x`'s buffer has no room for the partial rows
    /// (moshi.modules.transformer StreamingMultiheadAttention: attention then `out_proj`).
    #[allow(clippy::too_many_arguments)]
    pub fn attention_out_proj(
        &mut self,
        label: &str,
        spec: &TransformerSpec,
        qkv: &Tensor,
        frame: &wgpu::Buffer,
        rings: &[wgpu::Buffer; 3],
        (quants, scales): (&wgpu::Buffer, &wgpu::Buffer),
        x: &Tensor,
    ) -> Result<usize> {
        let (dim, heads, ring) = (spec.dim, spec.heads, spec.context);
        let Some(g) = self.attention_out_proj_group(spec) else {
            return Err(Error::config(label, format!("attention of dim {dim}, {heads} heads over {ring} positions does not fit attention_out_proj")));
        };
        let parts = heads / g;
        if qkv.shape != [1, 3 * dim] || x.len() != dim || x.buf.size() < ((1 + parts) * dim * 4) as u64 {
            return Err(Error::config(
                label,
                format!("attention_out_proj takes qkv [1, {}] and a row [1, {dim}] with room for {parts} partial rows behind it, got {:?} and {:?} in {} bytes", 3 * dim, qkv.shape, x.shape, x.buf.size()),
            ));
        }
        let hd = dim / heads;
        let units = g * hd / 16;
        let rows = 256 / units;
        let [k_ring, v_ring, pos_ring] = rings;
        let p = AttentionOutProjParams {
            attn: RopeHeads::new(spec),
            group: g as u32,
            rows: rows as u32,
            _pad: [0; 3],
        };
        let pb = self.params(label, &p);
        if quants.size() + scales.size() <= self.prefetch_max {
            self.prefetch(label, quants, scales)?;
        }
        self.step(
            &ATTENTION_OUT_PROJ,
            format!("{label} attention+out_proj"),
            &[quants, scales, &qkv.buf, k_ring, v_ring, pos_ring, &x.buf, &pb, frame],
            [(dim / rows) as u32, parts as u32],
        );
        Ok(parts)
    }

    /// A residual VQ encode of `levels` levels of `codebook` `[levels, bins, dim]`:
    /// `residuals` `[levels, dim]` holds the input in row 0 (rows 1.. receive each next
    /// level's residual); the nearest entry of each level goes to `codes[slot + l]`
    /// (moshi.quantization ResidualVectorQuantization.encode). `levels + 1` dispatches: the
    /// distances of level 0, then per further level one dispatch that takes the previous
    /// level's argmin, subtracts its entry and computes the new distances
    /// (`shaders/vq_search.wgsl`), then the last argmin. Dimensions up to 1024.
    #[allow(clippy::too_many_arguments)]
    pub fn rvq_encode(
        &mut self,
        label: &str,
        codebook: &wgpu::Buffer,
        (levels, bins, dim): (usize, usize, usize),
        residuals: &wgpu::Buffer,
        codes: &wgpu::Buffer,
        slot: usize,
    ) -> Result<()> {
        if levels == 0 || dim > 1024 {
            return Err(Error::config(label, format!("a residual VQ encode takes 1 level or more of dimension at most 1024, got {levels} of {dim}")));
        }
        let dist = self.ctx.zeros(&format!("{label}.dist"), 2 * bins)?;
        let pb = self.params(label, &Count4 { a: 0, b: bins as u32, c: dim as u32, d: 0 });
        self.step(&VQ_DISTANCE, format!("{label}.layers.0 distance"), &[codebook, residuals, &dist, &pb], grid_for(bins.div_ceil(8)));
        for l in 1..levels {
            let pb = self.params(label, &Count4 { a: l as u32, b: bins as u32, c: dim as u32, d: (slot + l - 1) as u32 });
            self.step(
                &VQ_SEARCH,
                format!("{label}.layers.{} argmin+{l} distance", l - 1),
                &[codebook, &dist, residuals, codes, &pb],
                grid_for(bins.div_ceil(8)),
            );
        }
        let last = levels - 1;
        let p = VqEncodeParams {
            level: last as u32,
            bins: bins as u32,
            dim: dim as u32,
            slot: (slot + last) as u32,
            subtract: 0,
            dist_offset: ((last % 2) * bins) as u32,
            res_offset: (last * dim) as u32,
            _pad: 0,
        };
        let pb = self.params(label, &p);
        self.step(&VQ_ARGMIN, format!("{label}.layers.{last} argmin"), &[codebook, &dist, residuals, codes, &pb], [1, 1]);
        Ok(())
    }

    /// One RVQ's decode and output projection, one dispatch: `out[i] (+)= sum_c
    /// w[i, c] sum_l codebook[l, codes[offset + l], c]` over `levels` levels of `codebook`
    /// `[levels, bins, dim]`, `w` `[n, dim]`; adds to `out` `[n]` when `accumulate`. The
    /// result of [`Self::vq_decode`] then [`Self::linear`].
    #[allow(clippy::too_many_arguments)]
    pub fn rvq_decode_proj(
        &mut self,
        label: &str,
        codebook: &wgpu::Buffer,
        (levels, bins, dim): (usize, usize, usize),
        codes: (&wgpu::Buffer, usize),
        (w, n): (&wgpu::Buffer, usize),
        out: &wgpu::Buffer,
        accumulate: bool,
    ) {
        let p = VqDecodeProjParams {
            n: n as u32,
            dim: dim as u32,
            levels: levels as u32,
            bins: bins as u32,
            offset: codes.1 as u32,
            accumulate: accumulate as u32,
            _pad: [0; 2],
        };
        let pb = self.params(label, &p);
        self.step(&VQ_DECODE_PROJ, label.to_string(), &[w, codebook, codes.0, out, &pb], grid_for(n));
    }

    /// `out[c] = sum_l codebook[l, codes[offset + l], c]` over `levels` levels.
    pub fn vq_decode(
        &mut self,
        label: &str,
        codebook: &wgpu::Buffer,
        (levels, bins, dim): (usize, usize, usize),
        codes: &wgpu::Buffer,
        offset: usize,
        out: &wgpu::Buffer,
    ) {
        let p = VqDecodeParams { levels: levels as u32, bins: bins as u32, dim: dim as u32, offset: offset as u32 };
        let pb = self.params(label, &p);
        self.step(&VQ_DECODE, label.to_string(), &[codebook, codes, out, &pb], threads(dim));
    }

    /// A bias-free linear layer with Q8_0 weights (`quants`, `scales` in the layout of
    /// `shaders/q8_matvec.wgsl`): `y[r, i] (+)= sum_j W[i, j] x[r, j]` for `t` rows, rows of
    /// `x` from `x_offset` (a multiple of 4), of `y` from `y_offset` with stride `y_stride`
    /// (the full output width, when `W` is one row-part of a larger matrix). `n` must be a
    /// multiple of 4 and `k` of 32.
    #[allow(clippy::too_many_arguments)]
    pub fn q8_linear(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        t: usize,
        x: (&wgpu::Buffer, usize),
        y: (&wgpu::Buffer, usize, usize),
        accumulate: bool,
    ) -> Result<()> {
        let dummy = self.dummy.clone();
        self.q8_matvec(label, w, (n, k), t, x, (Q8Input::Plain, &dummy), y, Q8Out::add_if(accumulate))
    }

    /// A residual add from a Q8_0 linear that also prepares the next RMSNorm:
    /// `y += W in` for one row (`in` being `x` `[1, k]`, or with `gated` the SiLU-gated
    /// `x` `[1, 2 k]` as [`Self::q8_linear_gated`] reads it), and into `next` the new `y`
    /// times `alpha` (the next norm's gain `[n]`) with the partial sums of its squares.
    /// `y` must be `[1, n]` and `next` of width `n`.
    #[allow(clippy::too_many_arguments)]
    pub fn q8_linear_residual(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        gated: bool,
        x: &wgpu::Buffer,
        y: &Tensor,
        (alpha, next): (&wgpu::Buffer, &NormedRow),
    ) -> Result<()> {
        if y.len() != n || next.dim != n {
            return Err(Error::config(label, format!("a residual add of {n} rows takes y [1, {n}], got {:?} and a norm row of {}", y.shape, next.dim)));
        }
        let input = if gated { Q8Input::Gated } else { Q8Input::Plain };
        self.q8_matvec(label, w, (n, k), 1, (x, 0), (input, alpha), (&y.buf, 0, n), Q8Out::AddNormed(&next.buf))
    }

    /// A row buffer for [`Self::q8_linear_residual`] to prepare an RMSNorm of width `dim`
    /// (a multiple of 16) in.
    pub fn normed_row(&self, label: &str, dim: usize) -> Result<NormedRow> {
        if dim % 16 != 0 {
            return Err(Error::config(label, format!("a prepared RMSNorm row needs a width that is a multiple of 16, got {dim}")));
        }
        Ok(NormedRow { buf: self.ctx.zeros(label, dim + dim / 4)?, dim })
    }

    /// [`Self::q8_linear_normed`] from a row prepared by [`Self::q8_linear_residual`]:
    /// `y (+)= W (x * alpha) * rsqrt(eps + sum(partials) / k)`, one dispatch at every shape.
    pub fn q8_linear_prenormed(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        (row, eps): (&NormedRow, f32),
        y: (&wgpu::Buffer, usize, usize),
        accumulate: bool,
    ) -> Result<()> {
        let (xb, input, dummy) = self.norm_input(label, (n, k), NormInput::Prepared(row, eps))?;
        self.q8_matvec(label, w, (n, k), 1, (&xb, 0), (input, &dummy), y, Q8Out::add_if(accumulate))
    }

    /// [`Self::q8_linear`] of a SiLU-gated FFN's hidden state: `x` holds rows `[t, 2 k]`
    /// (the `linear_in` output) and the input is `silu(x[r, :k]) * x[r, k:]`
    /// (moshi.modules.gating ActivationGating), computed as the weights stream by.
    #[allow(clippy::too_many_arguments)]
    pub fn q8_linear_gated(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        t: usize,
        x: (&wgpu::Buffer, usize),
        y: (&wgpu::Buffer, usize, usize),
        accumulate: bool,
    ) -> Result<()> {
        let dummy = self.dummy.clone();
        self.q8_matvec(label, w, (n, k), t, x, (Q8Input::Gated, &dummy), y, Q8Out::add_if(accumulate))
    }

    /// [`Self::q8_linear`] of the RMSNorm of one row `x` `[1, k]` (gain `alpha` `[k]`,
    /// `eps`; moshi.modules.transformer RMSNorm in f32), the norm taken by each workgroup
    /// as the weights stream by (each row group sums the squares of the inputs it reads and
    /// scales its sums at the end): `y (+)= W (x * alpha * rsqrt(eps + mean(x^2)))`.
    /// For the f32 kernel ([`Q8Dot::F32`]), from [`Q8_NORM_APART`] weights on, the norm is
    /// a dispatch of its own before a plain linear instead: reading the gain beside the
    /// input in every row group costs a large matrix more than the extra dispatch. The i8
    /// kernel takes the norm as it quantizes the input, once per workgroup, at any size.
    pub fn q8_linear_normed(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        (x, alpha, eps): (&Tensor, &wgpu::Buffer, f32),
        y: (&wgpu::Buffer, usize, usize),
        accumulate: bool,
    ) -> Result<()> {
        let (xb, input, alpha) = self.norm_input(label, (n, k), NormInput::Raw(x, alpha, eps))?;
        self.q8_matvec(label, w, (n, k), 1, (&xb, 0), (input, &alpha), y, Q8Out::add_if(accumulate))
    }

    /// The input binding, input rule and gain binding of a Q8_0 linear `[n, k]` of the
    /// RMSNorm `norm` gives: from the raw row fused into the linear (for the f32 kernel from
    /// [`Q8_NORM_APART`] weights on, a norm dispatch first and the linear on its output), or
    /// from a prepared row.
    fn norm_input(&mut self, label: &str, (n, k): (usize, usize), norm: NormInput<'_>) -> Result<(wgpu::Buffer, Q8Input, wgpu::Buffer)> {
        let dummy = self.dummy.clone();
        match norm {
            NormInput::Raw(x, alpha, eps) => {
                if x.len() != k {
                    return Err(Error::config(label, format!("an RMSNorm-fused linear takes one row of {k}, got {:?}", x.shape)));
                }
                if n * k >= Q8_NORM_APART && self.q8_dot == Q8Dot::F32 {
                    let xt = Tensor { buf: x.buf.clone(), shape: vec![1, k] };
                    let normed = self.tensor(&format!("{label}.norm"), &[1, k])?;
                    self.rms_norm(&format!("{label} rms_norm"), &xt, alpha, eps, &normed);
                    return Ok((normed.buf, Q8Input::Plain, dummy));
                }
                Ok((x.buf.clone(), Q8Input::Normed(eps), alpha.clone()))
            }
            NormInput::Prepared(row, eps) => {
                if row.dim != k {
                    return Err(Error::config(label, format!("a linear of {k} inputs cannot take a prepared row of {}", row.dim)));
                }
                Ok((row.buf.clone(), Q8Input::Prenormed(eps, k / 4), dummy))
            }
            NormInput::RawPartials(x, alpha, eps, parts) => {
                if x.len() != k || parts > MAX_PARTIALS || x.buf.size() < ((1 + parts) * k * 4) as u64 || self.q8_dot != Q8Dot::I8 {
                    return Err(Error::config(
                        label,
                        format!("an RMSNorm-fused linear of a row with partial rows takes one row of {k} with at most {MAX_PARTIALS} behind it, on the i8 kernel; got {:?} with {parts}", x.shape),
                    ));
                }
                Ok((x.buf.clone(), Q8Input::NormedPartials(eps, parts), alpha.clone()))
            }
        }
    }

    /// [`Self::q8_linear_normed`] with the norm fused at any size (for benchmarks: the
    /// plans take it apart from [`Q8_NORM_APART`] weights on).
    pub fn q8_linear_normed_fused(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        (x, alpha, eps): (&Tensor, &wgpu::Buffer, f32),
        y: (&wgpu::Buffer, usize, usize),
        accumulate: bool,
    ) -> Result<()> {
        if x.len() != k {
            return Err(Error::config(label, format!("an RMSNorm-fused linear takes one row of {k}, got {:?}", x.shape)));
        }
        self.q8_matvec(label, w, (n, k), 1, (&x.buf, 0), (Q8Input::Normed(eps), alpha), y, Q8Out::add_if(accumulate))
    }

    /// A row for [`Self::q8_linear_gate`] to write a SiLU-gated FFN's hidden state of width
    /// `dim` (a multiple of 32) into, in the layout of the Q8_0 kernel the linears added
    /// from now on take ([`GatedRow`]).
    pub fn gated_row(&self, label: &str, dim: usize) -> Result<GatedRow> {
        if dim % 32 != 0 {
            return Err(Error::config(label, format!("a gated row feeds a Q8_0 linear, whose inputs are a multiple of 32, got {dim}")));
        }
        let packed = self.q8_dot == Q8Dot::I8;
        // packed: whole vec4s, which the kernel reads the scales as (dim / 16 = 2 mod 4
        // would end the row halfway through one)
        let words = if packed { (9 * dim / 16).next_multiple_of(4) } else { dim };
        Ok(GatedRow { buf: self.ctx.zeros(label, words)?, dim, packed })
    }

    /// A SiLU-gated FFN's `linear_in` (`W` `[2 h, k]`: the gate's rows, then the up
    /// projection's) with the gate as its epilogue: `out = silu(W[:h] in) * (W[h:] in)`,
    /// `in` the RMSNorm of one row as `norm` gives it (moshi.modules.gating
    /// ActivationGating, after the transformer layer's norm2). Each row group of the kernel
    /// takes two gate rows and the two up rows beside them; with the i8 kernel each
    /// workgroup quantizes its hidden values for `linear_out` ([`GatedRow`]). `out` must be
    /// `h` wide and made for the kernel now in use.
    pub fn q8_linear_gate(&mut self, label: &str, w: (&wgpu::Buffer, &wgpu::Buffer), (n, k): (usize, usize), norm: NormInput<'_>, out: &GatedRow) -> Result<()> {
        if n != 2 * out.dim || out.packed != (self.q8_dot == Q8Dot::I8) {
            return Err(Error::config(label, format!("a gated linear_in of {n} rows writes a gated row of {} made for its kernel, got one of {}", n / 2, out.dim)));
        }
        let (x, input, alpha) = self.norm_input(label, (n, k), norm)?;
        self.q8_matvec(label, w, (n, k), 1, (&x, 0), (input, &alpha), (&out.buf, 0, out.dim), Q8Out::Gate)
    }

    /// A SiLU-gated FFN's `linear_out` (`W` `[n, k]`) from the hidden row
    /// [`Self::q8_linear_gate`] wrote, added to the residual row `y` `[1, n]` together with
    /// the `partials` rows behind it in its buffer ([`Self::attention_out_proj`]'s; 0 for
    /// none, at most [`MAX_PARTIALS`], the i8 kernel only); with `next` (the next RMSNorm's
    /// gain `[n]` and a row of width `n`) also preparing that norm as
    /// [`Self::q8_linear_residual`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn q8_linear_from_gated(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        row: &GatedRow,
        y: &Tensor,
        partials: usize,
        next: Option<(&wgpu::Buffer, &NormedRow)>,
    ) -> Result<()> {
        if row.dim != k || y.len() != n || next.is_some_and(|(_, r)| r.dim != n) {
            return Err(Error::config(label, format!("a linear_out [{n}, {k}] takes a gated row of {k} into y [1, {n}], got {} and {:?}", row.dim, y.shape)));
        }
        if partials > 0 && (partials > MAX_PARTIALS || y.buf.size() < ((1 + partials) * n * 4) as u64 || self.q8_dot != Q8Dot::I8) {
            return Err(Error::config(label, format!("a residual add takes at most {MAX_PARTIALS} partial rows behind its row, on the i8 kernel; got {partials} behind {:?}", y.shape)));
        }
        if row.packed && self.q8_dot != Q8Dot::I8 {
            return Err(Error::config(label, "a gated row quantized for the i8 kernel cannot feed the f32 kernel"));
        }
        let input = if row.packed { Q8Input::Packed } else { Q8Input::Plain };
        let dummy = self.dummy.clone();
        let (alpha, out) = match next {
            Some((alpha, r)) => (alpha, Q8Out::AddNormed(&r.buf)),
            None => (&dummy, Q8Out::Add),
        };
        self.q8_matvec_partials(label, w, (n, k), 1, (&row.buf, 0), (input, alpha), (&y.buf, 0, n), out, partials)
    }

    #[allow(clippy::too_many_arguments)]
    fn q8_matvec(
        &mut self,
        label: &str,
        w: (&wgpu::Buffer, &wgpu::Buffer),
        nk: (usize, usize),
        t: usize,
        x: (&wgpu::Buffer, usize),
        input: (Q8Input, &wgpu::Buffer),
        y: (&wgpu::Buffer, usize, usize),
        out: Q8Out<'_>,
    ) -> Result<()> {
        let partials = match input.0 {
            Q8Input::NormedPartials(_, parts) => parts,
            _ => 0,
        };
        self.q8_matvec_partials(label, w, nk, t, x, input, y, out, partials)
    }

    /// [`Self::q8_matvec`] whose residual add (or, for [`Q8Input::NormedPartials`], input)
    /// also takes the `partials` rows behind the row: on the i8 kernel's pipeline with them.
    #[allow(clippy::too_many_arguments)]
    fn q8_matvec_partials(
        &mut self,
        label: &str,
        (quants, scales): (&wgpu::Buffer, &wgpu::Buffer),
        (n, k): (usize, usize),
        t: usize,
        (x, x_offset): (&wgpu::Buffer, usize),
        (input, alpha): (Q8Input, &wgpu::Buffer),
        (y, y_offset, y_stride): (&wgpu::Buffer, usize, usize),
        out: Q8Out<'_>,
        partials: usize,
    ) -> Result<()> {
        if k % 32 != 0 || n % Q8_ROWS_PER_GROUP != 0 {
            return Err(Error::config(label, format!("Q8_0 linears need rows a multiple of 32 wide and a multiple of 4 of them, got [{n}, {k}]")));
        }
        if x_offset % 4 != 0 {
            return Err(Error::config(label, format!("a Q8_0 linear reads its input from a multiple of 4, got {x_offset}")));
        }
        let gate = matches!(out, Q8Out::Gate);
        let packed = matches!(input, Q8Input::Packed);
        if (gate || packed) && (t != 1 || x_offset != 0 || y_offset != 0) {
            return Err(Error::config(label, "a gated row is one row, read and written from its start"));
        }
        let d = if gate { self.q8.dispatch_gate(self.q8_dot, n, k) } else { self.q8.dispatch_for(self.q8_dot, n, k, t) };
        let (mode, eps, parts) = match input {
            Q8Input::Plain => (0, 0.0, 0),
            Q8Input::Gated => (1, 0.0, 0),
            Q8Input::Normed(eps) => (2, eps, 0),
            Q8Input::Prenormed(eps, parts) => (3, eps, parts as u32),
            Q8Input::Packed => (4, 0.0, 0),
            Q8Input::NormedPartials(eps, _) => (5, eps, 0),
        };
        if partials > 0 && (self.q8_dot != Q8Dot::I8 || partials > MAX_PARTIALS || t != 1) {
            return Err(Error::config(label, format!("partial rows ({partials}) are the i8 kernel's, at most {MAX_PARTIALS} behind one row")));
        }
        let (out_mode, norm_out) = match out {
            Q8Out::Write => (0, None),
            Q8Out::Add => (1, None),
            Q8Out::AddNormed(buf) => (2, Some(buf)),
            Q8Out::Gate => (3, None),
        };
        let p = Q8MatvecParams {
            n: n as u32,
            k: k as u32,
            t: t as u32,
            mode: out_mode,
            x_offset: x_offset as u32,
            y_offset: y_offset as u32,
            y_stride: y_stride as u32,
            input: mode,
            lanes: d.lanes as u32,
            eps,
            parts,
            partials: partials as u32,
        };
        let pb = self.params(label, &p);
        // Without a norm row to write, the kernel's output binding gets one of the unused
        // outputs in turn: one shared buffer would order every linear after the one before
        // (a write to the same buffer is a barrier), also those with nothing to wait for.
        let dummy = match norm_out {
            Some(_) => self.dummy_out.clone(),
            None => self.unused_output(),
        };
        let norm_out = norm_out.unwrap_or(&dummy);
        let kernel = match self.q8_dot {
            Q8Dot::I8 => match (partials > 0, mode == 4) {
                (true, true) => &Q8_MATVEC_DOT4_PARTIALS_PACKED,
                (true, false) => &Q8_MATVEC_DOT4_PARTIALS,
                (false, true) => &Q8_MATVEC_DOT4_PACKED,
                (false, false) => &Q8_MATVEC_DOT4,
            },
            Q8Dot::F32 => &Q8_MATVEC,
        };
        if quants.size() + scales.size() <= self.prefetch_max {
            self.prefetch(label, quants, scales)?;
        }
        self.step(kernel, label.to_string(), &[quants, scales, x, alpha, y, &pb, norm_out], grid_for(d.groups));
        Ok(())
    }

    /// RMSNorm of each row of `x` `[rows, dim]` into `y`.
    pub fn rms_norm(&mut self, label: &str, x: &Tensor, alpha: &wgpu::Buffer, eps: f32, y: &Tensor) {
        let (rows, dim) = (x.shape[0], x.shape[1]);
        let pb = self.params(label, &LayerNormParams { dim: dim as u32, eps, _pad: [0; 2] });
        self.step(&RMS_NORM, label.to_string(), &[&x.buf, alpha, &y.buf, &pb], grid_for(rows));
    }

    /// `h = silu(a[:, :hidden]) * a[:, hidden:]`, `a` `[t, 2 hidden]` -> `h` `[t, hidden]`.
    pub fn silu_gate(&mut self, label: &str, a: &Tensor, h: &Tensor) {
        let (t, hidden) = (h.shape[0], h.shape[1]);
        let pb = self.params(label, &Count4 { a: hidden as u32, b: t as u32, ..Default::default() });
        self.step(&SILU_GATE, label.to_string(), &[&a.buf, &h.buf, &pb], threads(t * hidden));
    }

    /// `out (+)= sum_l table[l, tokens[slot + l]]` over `tables` tables of `rows` rows of
    /// width `dim` (negative tokens add nothing), held in `table` as `[tables * rows, dim]`:
    /// one dispatch per part of the table, the first as `accumulate` says, the others
    /// adding. [`Error::Input`] when the table is not `[tables * rows, dim]`.
    #[allow(clippy::too_many_arguments)]
    pub fn embed_sum(
        &mut self,
        label: &str,
        table: &SplitTable,
        (tables, rows, dim): (usize, usize, usize),
        tokens: &wgpu::Buffer,
        slot: usize,
        out: &wgpu::Buffer,
        accumulate: bool,
    ) -> Result<()> {
        if table.rows != tables * rows || table.cols != dim {
            return Err(Error::Input(format!("{label}: table `{}` is [{}, {}], not [{tables} * {rows}, {dim}]", table.name, table.rows, table.cols)));
        }
        let count = table.parts.len();
        for (k, (buf, row0, part_rows)) in table.parts.iter().enumerate() {
            let p = EmbedSumParams {
                tables: tables as u32,
                rows: rows as u32,
                dim: dim as u32,
                slot: slot as u32,
                accumulate: (accumulate || k > 0) as u32,
                row0: *row0 as u32,
                part_rows: *part_rows as u32,
                _pad: 0,
            };
            let name = if count == 1 { label.to_string() } else { format!("{label}.part{k}") };
            let pb = self.params(&name, &p);
            self.step(&EMBED_SUM, name, &[buf, tokens, out, &pb], threads(dim));
        }
        Ok(())
    }

    /// Draw a token from `n` logits at `offset` of `logits` into `tokens[slot]`: greedy
    /// when `temperature` is 0, else Gumbel-max over the `top_k` largest at `temperature`,
    /// its noise hashed from (`seed`, the frame uniform's `pos`, `stream`, index).
    #[allow(clippy::too_many_arguments)]
    pub fn sample(
        &mut self,
        label: &str,
        (logits, offset, n): (&wgpu::Buffer, usize, usize),
        tokens: &wgpu::Buffer,
        slot: usize,
        (temperature, top_k): (f32, usize),
        seed: u32,
        stream: u32,
    ) -> Result<()> {
        self.sample_then_embed(label, (logits, offset, n), tokens, slot, (temperature, top_k), seed, stream, None)
    }

    /// [`Self::sample`], then, when `embed` is given, the drawn token's row of its table
    /// (one part of a [`SplitTable`], rows from 0) added into `out` `[cols]` by the same
    /// dispatch (a following [`Self::embed_sum`] of that token, fused). [`Error::Input`]
    /// when the table is split into several parts.
    #[allow(clippy::too_many_arguments)]
    pub fn sample_then_embed(
        &mut self,
        label: &str,
        (logits, offset, n): (&wgpu::Buffer, usize, usize),
        tokens: &wgpu::Buffer,
        slot: usize,
        (temperature, top_k): (f32, usize),
        seed: u32,
        stream: u32,
        embed: Option<(&SplitTable, &wgpu::Buffer)>,
    ) -> Result<()> {
        let (emb, emb_out, emb_dim, emb_rows) = match embed {
            None => (self.dummy.clone(), self.unused_output(), 0, 0),
            Some((table, out)) => match table.parts.as_slice() {
                [(buf, 0, rows)] => (buf.clone(), out.clone(), table.cols, *rows),
                _ => return Err(Error::Input(format!("{label}: table `{}` is in {} parts; a draw adds from one", table.name, table.parts.len()))),
            },
        };
        let greedy = temperature <= 0.0;
        let p = SampleParams {
            n: n as u32,
            top_k: top_k as u32,
            offset: offset as u32,
            slot: slot as u32,
            greedy: greedy as u32,
            inv_temp: if greedy { 0.0 } else { 1.0 / temperature },
            seed,
            stream,
            emb_dim: emb_dim as u32,
            emb_rows: emb_rows as u32,
            _pad: [0; 2],
        };
        let pb = self.params(label, &p);
        let frame = self.frame.clone();
        // Both kernels draw by the same rule; the four-round radix select is the faster one
        // for the audio codebooks' 2048 logits (11.9 against 17.8 us on an H200), the
        // bounded one for the text vocabulary (17.1 against 73.6 us at 32000).
        let kernel = if n <= SAMPLE_RADIX8_MAX { &SAMPLE_RADIX8 } else { &SAMPLE };
        self.step(kernel, label.to_string(), &[logits, tokens, &pb, &frame, &emb, &emb_out], [1, 1]);
        Ok(())
    }

    /// LMGen's realignment: record `generated` (`n` i32 tokens) in a history ring of `ct`
    /// frames (streaming state) and write into `out` the output frame, stream `s` read
    /// `max_delay - delays[s]` frames behind the newest (see `shaders/realign.wgsl`).
    pub fn realign(&mut self, label: &str, generated: &wgpu::Buffer, delays: &[u32], ct: usize, out: &wgpu::Buffer) -> Result<()> {
        let n = delays.len();
        if n > WG as usize {
            return Err(Error::config(label, format!("at most {WG} streams can be realigned, got {n}")));
        }
        let max_delay = delays.iter().copied().max().unwrap_or(0);
        let history = self.state(&format!("{label}.history"), ct * n)?;
        let delays_buf = self.ctx.storage_bytes(&format!("{label}.delays"), bytemuck::cast_slice(delays))?;
        let pb = self.params(label, &Count4 { a: n as u32, b: ct as u32, c: max_delay, d: 0 });
        let frame = self.frame.clone();
        self.step(&REALIGN, label.to_string(), &[generated, &delays_buf, &history, out, &pb, &frame], [1, 1]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{conv_kernel_auto, conv_reduce_lanes, matvec_lanes_auto, ConvKernel};

    /// The lanes `matvec_lanes_auto` gives Mimi's f32 linears: `linear2` (k 2048) 256,
    /// `out_proj` and the quantizer's input projection (k 512) 128, the LayerNorm-fused ones
    /// and every one on a CPU adapter 64; a short row no fewer than 64.
    #[test]
    fn matvec_lanes_by_shape_and_adapter() {
        for ((cpu, k, norm), lanes) in [((false, 2048, false), 256), ((false, 512, false), 128), ((false, 8192, false), 256), ((false, 512, true), 64), ((false, 2048, true), 64), ((true, 2048, false), 64), ((false, 96, false), 64), ((false, 600, false), 256)] {
            assert_eq!(matvec_lanes_auto(cpu, k, norm), lanes, "cpu {cpu}, k {k}, norm {norm}");
        }
    }

    /// The kernel `ConvKernel::Auto` gives Mimi's convs (outputs, reduction), on a GPU and on
    /// a CPU adapter; a conv past the tiled kernel takes the lanes (GPU) or reduce (CPU)
    /// kernel.
    #[test]
    fn conv_kernel_auto_by_shape_and_adapter() {
        use ConvKernel::{Lanes, Reduce, Tiled};
        let cases = [
            // the stride-6, -5 and -4 upsampling as convs into phases
            ((1536 * 16, 512 * 2), Tiled, Tiled),
            ((640 * 96, 256 * 2), Tiled, Tiled),
            ((256 * 480, 128 * 2), Tiled, Tiled),
            // the stride-8 upsampling, and the stride-8 and stride-5 downsampling
            ((4096 * 2, 1024 * 2), Lanes, Reduce),
            ((1024 * 2, 512 * 16), Lanes, Reduce),
            ((256 * 96, 128 * 10), Tiled, Tiled),
            // a residual block's pointwise conv at 1920 columns, the last conv
            ((64 * 1920, 32), Tiled, Tiled),
            ((1920, 64 * 7), Lanes, Reduce),
        ];
        for ((outputs, reduction), gpu, cpu) in cases {
            assert_eq!(conv_kernel_auto(false, true, outputs, reduction), gpu, "GPU: {outputs} outputs of {reduction} terms");
            assert_eq!(conv_kernel_auto(true, true, outputs, reduction), cpu, "CPU: {outputs} outputs of {reduction} terms");
        }
        assert_eq!(conv_kernel_auto(false, false, 1 << 20, 64), Lanes);
        assert_eq!(conv_kernel_auto(true, false, 1 << 20, 64), Reduce);
    }

    /// The lanes `conv_reduce_lanes` gives Mimi's shapes and the kernel tests' cases
    /// (tests/kernels.rs): by the terms, by the outputs, clamped.
    #[test]
    fn conv_reduce_lanes_by_terms_and_outputs() {
        for ((outputs, n), lanes) in [((2048, 512 * 16), 256), ((8192, 256), 16), ((1920, 64 * 7), 64), ((1920, 896), 64), ((4095, 300), 16), ((8, 300), 256), ((6, 2048), 256), ((16384, 4), 16)] {
            assert_eq!(conv_reduce_lanes(outputs, n), lanes, "{outputs} outputs of {n} terms");
        }
    }
}
