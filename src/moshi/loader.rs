//! The LM's weights resident on the GPU, and the streaming loader that puts them there.
//!
//! [`LmGpuWeights`] is every buffer the LM's plans bind: each Q8_0 linear as a quants and a
//! scales buffer ([`GpuQ8`]), embedding tables and RMSNorm gains as f32 buffers. It is built
//! either by uploading the CPU oracle's [`LmWeights`] ([`LmGpuWeights::upload`], for tests
//! and oracle comparisons) or by [`LmLoader`], a [`ByteSink`] that reads a checkpoint as it
//! streams and writes each completed part (at most [`DEFAULT_PART_BYTES`]) straight into its
//! GPU buffer with `queue.write_buffer`: host memory holds one part at a time, never the
//! model (Moshi 7B is 8 GB in Q8_0, 15 GB in bf16; a wasm32 heap stops at 4 GB).
//!
//! Checkpoints read, told apart by their tensor names:
//! - Kyutai's PyTorch `model.safetensors` (bf16, or any of F32 / F16 / BF16): attention as
//!   the stacked `self_attn.in_proj_weight` / `self_attn.out_proj.weight` (the depformer's
//!   steps stacked along dim 0: step `k` is rows `k 3 dim .. (k + 1) 3 dim`), or as the split
//!   `self_attn.in_projs.K.weight` / `out_projs.K.weight` of the current package, layer by
//!   layer; linears are quantized to Q8_0 block by block as they stream (ggml's rules).
//! - Kyutai's candle `model.q8.gguf`, named as `scripts/import_rust.py` renames the state
//!   dict: the depformer per step, `depformer.K.linear_in.weight` (= `depformer_in.K`),
//!   `depformer.K.linear_out.weight` (= `linears.K`), `depformer.K.emb.weight` (the text
//!   embedding for K = 0, else `depformer_emb.{K-1}`), and
//!   `depformer.K.transformer.layers.L.{self_attn.in_proj_weight, self_attn.out_proj.weight,
//!   norm1.alpha, norm2.alpha, gating.linear_in.weight, gating.linear_out.weight}`. Q8_0
//!   blocks are repacked into the GPU layout bit for bit, never dequantized; tables stored as
//!   Q8_0 are dequantized to f32, as candle's own loader does.
//!
//! The plan is checked against the header before any tensor byte: a missing tensor, an
//! unknown one, or a shape that disagrees with the [`LmConfig`] is a typed error naming it
//! ([`Error::MissingTensor`], [`Error::UnknownTensor`], [`Error::Shape`]) before any buffer
//! is made. The weights are handed out only by [`LmLoader::into_weights`] after
//! [`ByteSink::finish`] succeeded; after any error the loader refuses everything and its
//! buffers go when it is dropped.
//!
//! `write_buffer` needs 4-byte offsets and sizes; a Q8_0 row of `cols / 32` blocks has
//! `cols / 16` bytes of f16 scales, so when that block count is odd a part (or a stacked
//! step) can start at an odd block, mid-word: the loader holds the last scale of a write
//! back until the next part gives its pair (see `Q8Writer`).

use std::collections::HashMap;
use std::rc::Rc;

use super::config::LmConfig;
use super::lm::LmWeights;
use super::transformer::{lm_attention_spec, GpuQ8, GpuStep, GpuTransformer, LmTransformer, Q8Linear};
use crate::error::{Error, Result};
use crate::gpu::{AttentionKernel, GpuContext, GpuLimits, Requirements, SplitTable};
use crate::weights::place::{Placer, Placing};
use crate::weights::q8::{Q8Tensor, BLOCK};
use crate::weights::stream::{ByteSink, CheckpointReader, Header, Kind, Limits, Loaded, Plan, ReadState, TensorEntry};

/// Largest part the loader holds in host memory at once: 16 MiB (a quants buffer's worth;
/// its scales add a sixteenth). Parts are also kept under the device's binding limit.
pub const DEFAULT_PART_BYTES: u64 = 16 << 20;

/// Bytes written to the queue between flushes (a submit, and natively a wait, so the
/// driver's staging copies of `write_buffer` are released).
const FLUSH_BYTES: u64 = 64 << 20;

/// Every weight of the LM on the GPU (see the module doc). Field docs give the checkpoint
/// names of the released `model.safetensors`.
pub struct LmGpuWeights {
    pub config: LmConfig,
    /// `emb.{n}.weight` for n in 0..n_q, concatenated: `[n_q (card + 1), dim]` f32, in
    /// parts within the device's limits (the buffer `emb`, or `emb.partK`).
    pub emb: SplitTable,
    /// `text_emb.weight` `[text_card + 1, dim]` f32, in parts within the limits.
    pub text_emb: SplitTable,
    /// `transformer.layers.*` (one step).
    pub transformer: GpuTransformer,
    /// `out_norm.alpha` `[dim]` f32.
    pub out_norm: wgpu::Buffer,
    /// `text_linear.weight` `[text_card, dim]` Q8_0.
    pub text_linear: GpuQ8,
    /// `depformer_in.{k}.weight` `[depformer_dim, dim]` Q8_0.
    pub depformer_in: Vec<GpuQ8>,
    /// `depformer_text_emb.weight` `[text_card + 1, depformer_dim]` f32, in parts.
    pub depformer_text_emb: SplitTable,
    /// `depformer_emb.{j}.weight` `[card + 1, depformer_dim]` f32, j in 0..dep_q - 1, in parts.
    pub depformer_emb: Vec<SplitTable>,
    /// `depformer.layers.*` (`dep_q` steps).
    pub depformer: GpuTransformer,
    /// `linears.{k}.weight` `[card, depformer_dim]` Q8_0.
    pub linears: Vec<GpuQ8>,
}

/// f32 buffer of `len` values, zero-filled, bindable whole.
fn f32_buffer(ctx: &GpuContext, label: &str, len: usize) -> Result<wgpu::Buffer> {
    ctx.zeros(label, len)
}

fn q8_buffers(ctx: &GpuContext, label: &str, rows: usize, cols: usize) -> Result<GpuQ8> {
    let (qb, sb) = Q8Tensor::buffer_sizes(rows, cols);
    Ok(GpuQ8 {
        quants: ctx.zeros(&format!("{label}.quants"), (qb / 4) as usize)?,
        scales: ctx.zeros(&format!("{label}.scales"), (sb / 4) as usize)?,
        rows,
        cols,
    })
}

/// What the LM of `config` needs of a device with `limits`, from the config alone: every
/// weight buffer [`LmGpuWeights::allocate`] makes (labelled as it labels them, the
/// embedding tables split into parts of whole rows within the limits) and the KV rings of
/// [`super::Lm`] (`transformer.layers.L.{k,v,pos}_ring`, `context` slots; the depformer's,
/// `dep_q` slots; keys and values in f16 where the plans' attention kernel takes them:
/// [`AttentionKernel::kv_half`]). [`Requirements::check`] says whether it fits. The loaders run it before
/// they read a byte. [`Error::Config`] for an invalid config.
pub fn requirements(config: &LmConfig, limits: &GpuLimits) -> Result<Requirements> {
    config.validate()?;
    let c = config;
    let mut r = Requirements::new("Moshi LM", *limits);
    let q = |r: &mut Requirements, n: &str, rows: usize, cols: usize| {
        let (qb, sb) = Q8Tensor::buffer_sizes(rows, cols);
        r.buffer(format!("{n}.quants"), qb.max(4));
        r.buffer(format!("{n}.scales"), sb.max(4));
    };
    let transformer = |r: &mut Requirements, name: &str, (layers, dim, hidden): (usize, usize, usize), steps: usize| {
        for l in 0..layers {
            for k in 0..steps {
                let p = format!("{name}.layers.{l}");
                let g = if steps == 1 { format!("{p}.gating") } else { format!("{p}.gating.{k}") };
                r.buffer(format!("{p}.norm1.alpha"), 4 * dim as u64);
                r.buffer(format!("{p}.norm2.alpha"), 4 * dim as u64);
                q(r, &format!("{p}.self_attn.in_projs.{k}.weight"), 3 * dim, dim);
                q(r, &format!("{p}.self_attn.out_projs.{k}.weight"), dim, dim);
                q(r, &format!("{g}.linear_in.weight"), 2 * hidden, dim);
                q(r, &format!("{g}.linear_out.weight"), dim, hidden);
            }
        }
    };
    let (d, dd) = (c.dim, c.depformer_dim);
    r.table("emb", c.n_q * (c.card + 1), d);
    r.table("text_emb.weight", c.text_card + 1, d);
    transformer(&mut r, "transformer", (c.num_layers, d, c.hidden()), 1);
    r.buffer("out_norm.alpha", 4 * d as u64);
    q(&mut r, "text_linear.weight", c.text_card, d);
    for k in 0..c.dep_q {
        q(&mut r, &format!("depformer_in.{k}.weight"), dd, d);
    }
    r.table("depformer_text_emb.weight", c.text_card + 1, dd);
    for j in 0..c.dep_q - 1 {
        r.table(&format!("depformer_emb.{j}.weight"), c.card + 1, dd);
    }
    transformer(&mut r, "depformer", (c.depformer_num_layers, dd, c.depformer_hidden()), c.dep_q);
    for k in 0..c.dep_q {
        q(&mut r, &format!("linears.{k}.weight"), c.card, dd);
    }
    let attention = AttentionKernel::from_env()?;
    let stacks = [
        ("transformer", c.num_layers, lm_attention_spec(d, c.num_heads, c.context, c.max_period, true)),
        ("depformer", c.depformer_num_layers, lm_attention_spec(dd, c.depformer_num_heads, c.dep_q, c.depformer_max_period, false)),
    ];
    for (name, layers, spec) in stacks {
        // the rings as the plans allocate them (f16 keys and values where the attention takes them)
        let bytes = attention.kv_ring_bytes(&spec) as u64;
        for l in 0..layers {
            r.buffer(format!("{name}.layers.{l}.k_ring"), bytes);
            r.buffer(format!("{name}.layers.{l}.v_ring"), bytes);
            r.buffer(format!("{name}.layers.{l}.pos_ring"), 4 * spec.context as u64);
        }
    }
    Ok(r)
}

impl LmGpuWeights {
    /// Zero-filled buffers for every weight of `config`, labelled with their checkpoint
    /// names (embedding tables in parts, see [`requirements`]). [`Error::Config`] for an
    /// invalid config, [`Error::Limit`] (before any buffer is made) when a buffer is larger
    /// than the device's limits allow, naming the limit.
    pub fn allocate(ctx: &GpuContext, config: &LmConfig) -> Result<Self> {
        requirements(config, &ctx.info.limits())?.check()?;
        let c = config;
        let (d, dd) = (c.dim, c.depformer_dim);
        let transformer = |name: &str, (layers, dim, heads, hidden): (usize, usize, usize, usize), steps: usize, context: usize, max_period: f64, rope: bool| -> Result<GpuTransformer> {
            let mut ls = Vec::with_capacity(layers);
            for l in 0..layers {
                let mut ss = Vec::with_capacity(steps);
                for k in 0..steps {
                    let p = format!("{name}.layers.{l}");
                    let g = if steps == 1 { format!("{p}.gating") } else { format!("{p}.gating.{k}") };
                    ss.push(GpuStep {
                        norm1: f32_buffer(ctx, &format!("{p}.norm1.alpha"), dim)?,
                        norm2: f32_buffer(ctx, &format!("{p}.norm2.alpha"), dim)?,
                        in_proj: q8_buffers(ctx, &format!("{p}.self_attn.in_projs.{k}.weight"), 3 * dim, dim)?,
                        out_proj: q8_buffers(ctx, &format!("{p}.self_attn.out_projs.{k}.weight"), dim, dim)?,
                        linear_in: q8_buffers(ctx, &format!("{g}.linear_in.weight"), 2 * hidden, dim)?,
                        linear_out: q8_buffers(ctx, &format!("{g}.linear_out.weight"), dim, hidden)?,
                    });
                }
                ls.push(ss);
            }
            Ok(GpuTransformer { name: name.to_string(), layers: ls, dim, heads, hidden, context, max_period, rope })
        };
        Ok(Self {
            config: c.clone(),
            emb: SplitTable::zeros(ctx, "emb", c.n_q * (c.card + 1), d)?,
            text_emb: SplitTable::zeros(ctx, "text_emb.weight", c.text_card + 1, d)?,
            transformer: transformer("transformer", (c.num_layers, d, c.num_heads, c.hidden()), 1, c.context, c.max_period, true)?,
            out_norm: f32_buffer(ctx, "out_norm.alpha", d)?,
            text_linear: q8_buffers(ctx, "text_linear.weight", c.text_card, d)?,
            depformer_in: (0..c.dep_q).map(|k| q8_buffers(ctx, &format!("depformer_in.{k}.weight"), dd, d)).collect::<Result<_>>()?,
            depformer_text_emb: SplitTable::zeros(ctx, "depformer_text_emb.weight", c.text_card + 1, dd)?,
            depformer_emb: (0..c.dep_q - 1).map(|j| SplitTable::zeros(ctx, &format!("depformer_emb.{j}.weight"), c.card + 1, dd)).collect::<Result<_>>()?,
            depformer: transformer(
                "depformer",
                (c.depformer_num_layers, dd, c.depformer_num_heads, c.depformer_hidden()),
                c.dep_q,
                c.dep_q,
                c.depformer_max_period,
                false,
            )?,
            linears: (0..c.dep_q).map(|k| q8_buffers(ctx, &format!("linears.{k}.weight"), c.card, dd)).collect::<Result<_>>()?,
        })
    }

    /// Upload the CPU oracle's weights (quants and scales as they are, tables as f32).
    pub fn upload(ctx: &GpuContext, w: &LmWeights) -> Result<Self> {
        let g = Self::allocate(ctx, &w.config)?;
        let q = ctx.queue.clone();
        let f = |buf: &wgpu::Buffer, v: &[f32]| q.write_buffer(buf, 0, bytemuck::cast_slice(v));
        let l = |gpu: &GpuQ8, cpu: &Q8Linear| {
            q.write_buffer(&gpu.quants, 0, cpu.q8.quants_bytes());
            q.write_buffer(&gpu.scales, 0, cpu.q8.scales_bytes());
        };
        let t = |gpu: &GpuTransformer, cpu: &LmTransformer| {
            for (gl, cl) in gpu.layers.iter().zip(&cpu.layers) {
                for (gs, cs) in gl.iter().zip(&cl.steps) {
                    f(&gs.norm1, &cl.norm1);
                    f(&gs.norm2, &cl.norm2);
                    l(&gs.in_proj, &cs.in_proj);
                    l(&gs.out_proj, &cs.out_proj);
                    l(&gs.linear_in, &cs.linear_in);
                    l(&gs.linear_out, &cs.linear_out);
                }
            }
        };
        g.emb.write_rows(&q, 0, &w.emb)?;
        g.text_emb.write_rows(&q, 0, &w.text_emb)?;
        t(&g.transformer, &w.transformer);
        f(&g.out_norm, &w.out_norm);
        l(&g.text_linear, &w.text_linear);
        for (a, b) in g.depformer_in.iter().zip(&w.depformer_in) {
            l(a, b);
        }
        g.depformer_text_emb.write_rows(&q, 0, &w.depformer_text_emb)?;
        for (a, b) in g.depformer_emb.iter().zip(&w.depformer_emb) {
            a.write_rows(&q, 0, b)?;
        }
        t(&g.depformer, &w.depformer);
        for (a, b) in g.linears.iter().zip(&w.linears) {
            l(a, b);
        }
        ctx.queue.submit([]);
        ctx.take_error()?;
        Ok(g)
    }

    /// Every buffer with its name (the split checkpoint naming; Q8_0 linears as
    /// `NAME.quants` and `NAME.scales`, depformer gains per step as `...norm1.alpha.K`),
    /// in a fixed order: for comparing two weight sets and for memory reports.
    pub fn buffers(&self) -> Vec<(String, &wgpu::Buffer)> {
        let mut v: Vec<(String, &wgpu::Buffer)> = Vec::new();
        fn lin<'a>(v: &mut Vec<(String, &'a wgpu::Buffer)>, n: String, g: &'a GpuQ8) {
            v.push((format!("{n}.quants"), &g.quants));
            v.push((format!("{n}.scales"), &g.scales));
        }
        fn tr<'a>(v: &mut Vec<(String, &'a wgpu::Buffer)>, t: &'a GpuTransformer) {
            let steps = t.layers.first().map_or(1, Vec::len);
            for (l, layer) in t.layers.iter().enumerate() {
                for (k, s) in layer.iter().enumerate() {
                    let p = format!("{}.layers.{l}", t.name);
                    let g = if steps == 1 { format!("{p}.gating") } else { format!("{p}.gating.{k}") };
                    v.push((format!("{p}.norm1.alpha.{k}"), &s.norm1));
                    v.push((format!("{p}.norm2.alpha.{k}"), &s.norm2));
                    lin(v, format!("{p}.self_attn.in_projs.{k}.weight"), &s.in_proj);
                    lin(v, format!("{p}.self_attn.out_projs.{k}.weight"), &s.out_proj);
                    lin(v, format!("{g}.linear_in.weight"), &s.linear_in);
                    lin(v, format!("{g}.linear_out.weight"), &s.linear_out);
                }
            }
        }
        v.extend(self.emb.buffers());
        v.extend(self.text_emb.buffers());
        tr(&mut v, &self.transformer);
        v.push(("out_norm.alpha".into(), &self.out_norm));
        lin(&mut v, "text_linear.weight".into(), &self.text_linear);
        for (k, g) in self.depformer_in.iter().enumerate() {
            lin(&mut v, format!("depformer_in.{k}.weight"), g);
        }
        v.extend(self.depformer_text_emb.buffers());
        for t in &self.depformer_emb {
            v.extend(t.buffers());
        }
        tr(&mut v, &self.depformer);
        for (k, g) in self.linears.iter().enumerate() {
            lin(&mut v, format!("linears.{k}.weight"), g);
        }
        v
    }

    /// Bytes of GPU memory the weights take.
    pub fn bytes(&self) -> u64 {
        self.buffers().iter().map(|(_, b)| b.size()).sum()
    }
}

// ---------------------------------------------------------------------------------------
// Routing checkpoint tensors to buffers.

/// Where rows `src_row0 .. src_row0 + rows` of a checkpoint tensor go: to rows from
/// `dst_row0` of the buffer of `slot` (for Q8_0, through writer `writer` once allocated).
struct Route {
    src_row0: usize,
    rows: usize,
    slot: Slot,
    dst_row0: usize,
    writer: usize,
}

/// A weight of [`LmGpuWeights`], by position.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Emb,
    TextEmb,
    OutNorm,
    TextLinear,
    DepIn(usize),
    DepTextEmb,
    DepEmb(usize),
    Linear(usize),
    /// `(depformer, layer, step, which)`
    Layer(bool, usize, usize, LayerPart),
}

#[derive(Clone, Copy, Debug)]
enum LayerPart {
    Norm1,
    Norm2,
    InProj,
    OutProj,
    LinearIn,
    LinearOut,
}

enum Buf<'a> {
    F32(&'a wgpu::Buffer),
    Table(&'a SplitTable),
    Q8(&'a GpuQ8),
}

impl LmGpuWeights {
    fn slot(&self, s: Slot) -> Buf<'_> {
        match s {
            Slot::Emb => Buf::Table(&self.emb),
            Slot::TextEmb => Buf::Table(&self.text_emb),
            Slot::OutNorm => Buf::F32(&self.out_norm),
            Slot::TextLinear => Buf::Q8(&self.text_linear),
            Slot::DepIn(k) => Buf::Q8(&self.depformer_in[k]),
            Slot::DepTextEmb => Buf::Table(&self.depformer_text_emb),
            Slot::DepEmb(j) => Buf::Table(&self.depformer_emb[j]),
            Slot::Linear(k) => Buf::Q8(&self.linears[k]),
            Slot::Layer(dep, l, k, part) => {
                let s = &if dep { &self.depformer } else { &self.transformer }.layers[l][k];
                match part {
                    LayerPart::Norm1 => Buf::F32(&s.norm1),
                    LayerPart::Norm2 => Buf::F32(&s.norm2),
                    LayerPart::InProj => Buf::Q8(&s.in_proj),
                    LayerPart::OutProj => Buf::Q8(&s.out_proj),
                    LayerPart::LinearIn => Buf::Q8(&s.linear_in),
                    LayerPart::LinearOut => Buf::Q8(&s.linear_out),
                }
            }
        }
    }
}

/// A checkpoint tensor the loader wants: its shape, what it becomes, where its rows go.
struct Entry {
    shape: Vec<usize>,
    kind: Kind,
    routes: Vec<Route>,
}

/// Writes a Q8_0 linear's quants and scales into its buffers in row order, keeping every
/// `write_buffer` 4-byte aligned: scales are f16 pairs per u32 word, so a write that ends
/// on an odd block holds its last scale back (`pending`) until the next write supplies the
/// other half of the word (or the tensor ends and the half is zero padding).
struct Q8Writer {
    name: String,
    quants: wgpu::Buffer,
    scales: wgpu::Buffer,
    /// Blocks in the whole destination.
    blocks: usize,
    /// Blocks written so far (including a pending one).
    done: usize,
    pending: Option<u16>,
}

impl Q8Writer {
    fn new(name: &str, g: &GpuQ8) -> Self {
        Self {
            name: name.to_string(),
            quants: g.quants.clone(),
            scales: g.scales.clone(),
            blocks: g.rows * g.cols / BLOCK,
            done: 0,
            pending: None,
        }
    }

    /// Write blocks `blk0 .. blk0 + n` of `part` as the destination's blocks from `dst0`
    /// (which must be where the last write stopped). Returns the bytes written.
    fn write(&mut self, queue: &wgpu::Queue, part: &Q8Tensor, blk0: usize, n: usize, dst0: usize) -> Result<u64> {
        if dst0 != self.done || dst0 + n > self.blocks {
            return Err(Error::Input(format!(
                "tensor `{}`: blocks {dst0}..{} arrived out of order (after block {} of {})",
                self.name,
                dst0 + n,
                self.done,
                self.blocks
            )));
        }
        let quants = &part.quants_bytes()[blk0 * BLOCK..(blk0 + n) * BLOCK];
        queue.write_buffer(&self.quants, (dst0 * BLOCK) as u64, quants);
        let mut scales: Vec<u16> = Vec::with_capacity(n + 2);
        let start = if dst0 % 2 == 1 {
            let p = self.pending.take().ok_or_else(|| Error::Input(format!("tensor `{}`: lost a block scale", self.name)))?;
            scales.push(p);
            dst0 - 1
        } else {
            dst0
        };
        scales.extend((blk0..blk0 + n).map(|b| part.scale_bits(b)));
        self.done = dst0 + n;
        if scales.len() % 2 == 1 {
            if self.done == self.blocks {
                scales.push(0);
            } else {
                self.pending = scales.pop();
            }
        }
        queue.write_buffer(&self.scales, (start * 2) as u64, bytemuck::cast_slice(&scales));
        Ok(quants.len() as u64 + 2 * scales.len() as u64)
    }
}

/// How the checkpoint names the tensors of one transformer layer.
fn stacked(header: &Header, prefix: &str) -> bool {
    header.get(&format!("{prefix}.self_attn.in_proj_weight")).is_some()
}

/// The routes of every tensor, for the naming the header uses; shapes from the config.
struct Layout {
    entries: HashMap<String, Entry>,
    /// The names in the model's order (embeddings, temporal transformer, heads, depformer).
    order: Vec<String>,
}

impl Layout {
    /// An f32 tensor whose every row goes to each of `slots` (a shared gain to every step).
    fn f32(&mut self, name: String, shape: Vec<usize>, slots: &[(Slot, usize)]) {
        let rows = shape.iter().rev().skip(1).product();
        let routes = slots.iter().map(|&(slot, dst_row0)| Route { src_row0: 0, rows, slot, dst_row0, writer: 0 }).collect();
        self.order.push(name.clone());
        self.entries.insert(name, Entry { shape, kind: Kind::F32, routes });
    }

    /// A Q8_0 tensor `[sum of rows, cols]` whose row blocks go to `slots` (each `rows` rows) in order.
    fn q8(&mut self, name: String, cols: usize, slots: &[(Slot, usize)]) {
        let mut routes = Vec::with_capacity(slots.len());
        let mut row0 = 0;
        for &(slot, rows) in slots {
            routes.push(Route { src_row0: row0, rows, slot, dst_row0: 0, writer: 0 });
            row0 += rows;
        }
        self.order.push(name.clone());
        self.entries.insert(name, Entry { shape: vec![row0, cols], kind: Kind::Q8, routes });
    }

    /// One layer's tensors under prefix `p`, holding the weights of `steps`: attention stacked
    /// in one tensor (`self_attn.in_proj_weight`, step after step along dim 0) unless the
    /// header has the split `self_attn.in_projs.J.weight`; gating per step
    /// (`gating.J.linear_in.weight`) or not (`gating.linear_in.weight`).
    #[allow(clippy::too_many_arguments)]
    fn layer(&mut self, header: &Header, p: &str, dep: bool, l: usize, steps: std::ops::Range<usize>, gating_per_step: bool, (dim, hidden): (usize, usize)) {
        use LayerPart::*;
        let all: Vec<usize> = steps.clone().collect();
        let norm = |part| all.iter().map(|&k| (Slot::Layer(dep, l, k, part), 0)).collect::<Vec<_>>();
        self.f32(format!("{p}.norm1.alpha"), vec![1, 1, dim], &norm(Norm1));
        self.f32(format!("{p}.norm2.alpha"), vec![1, 1, dim], &norm(Norm2));
        if stacked(header, p) || !header.tensors.iter().any(|t| t.name.starts_with(&format!("{p}.self_attn.in_projs."))) {
            let i: Vec<_> = all.iter().map(|&k| (Slot::Layer(dep, l, k, InProj), 3 * dim)).collect();
            let o: Vec<_> = all.iter().map(|&k| (Slot::Layer(dep, l, k, OutProj), dim)).collect();
            self.q8(format!("{p}.self_attn.in_proj_weight"), dim, &i);
            self.q8(format!("{p}.self_attn.out_proj.weight"), dim, &o);
        } else {
            for (j, &k) in all.iter().enumerate() {
                self.q8(format!("{p}.self_attn.in_projs.{j}.weight"), dim, &[(Slot::Layer(dep, l, k, InProj), 3 * dim)]);
                self.q8(format!("{p}.self_attn.out_projs.{j}.weight"), dim, &[(Slot::Layer(dep, l, k, OutProj), dim)]);
            }
        }
        for (j, &k) in all.iter().enumerate() {
            let g = if gating_per_step { format!("{p}.gating.{j}") } else { format!("{p}.gating") };
            self.q8(format!("{g}.linear_in.weight"), dim, &[(Slot::Layer(dep, l, k, LinearIn), 2 * hidden)]);
            self.q8(format!("{g}.linear_out.weight"), hidden, &[(Slot::Layer(dep, l, k, LinearOut), dim)]);
        }
    }

    fn build(c: &LmConfig, header: &Header) -> Self {
        let mut lay = Layout { entries: HashMap::new(), order: Vec::new() };
        let (d, dd, k) = (c.dim, c.depformer_dim, c.dep_q);
        for n in 0..c.n_q {
            lay.f32(format!("emb.{n}.weight"), vec![c.card + 1, d], &[(Slot::Emb, n * (c.card + 1))]);
        }
        lay.f32("text_emb.weight".into(), vec![c.text_card + 1, d], &[(Slot::TextEmb, 0)]);
        lay.q8("text_linear.weight".into(), d, &[(Slot::TextLinear, c.text_card)]);
        lay.f32("out_norm.alpha".into(), vec![1, 1, d], &[(Slot::OutNorm, 0)]);
        for l in 0..c.num_layers {
            lay.layer(header, &format!("transformer.layers.{l}"), false, l, 0..1, false, (d, c.hidden()));
        }
        let hd = c.depformer_hidden();
        if header.get("depformer.0.linear_in.weight").is_some() {
            // candle (`scripts/import_rust.py`): one weight set per step
            for s in 0..k {
                let base = format!("depformer.{s}");
                lay.q8(format!("{base}.linear_in.weight"), d, &[(Slot::DepIn(s), dd)]);
                lay.q8(format!("{base}.linear_out.weight"), dd, &[(Slot::Linear(s), c.card)]);
                let (rows, slot) = if s == 0 { (c.text_card + 1, Slot::DepTextEmb) } else { (c.card + 1, Slot::DepEmb(s - 1)) };
                lay.f32(format!("{base}.emb.weight"), vec![rows, dd], &[(slot, 0)]);
                for l in 0..c.depformer_num_layers {
                    lay.layer(header, &format!("{base}.transformer.layers.{l}"), true, l, s..s + 1, false, (dd, hd));
                }
            }
        } else {
            // PyTorch: steps stacked (or split) inside `depformer.layers.L`
            for l in 0..c.depformer_num_layers {
                lay.layer(header, &format!("depformer.layers.{l}"), true, l, 0..k, true, (dd, hd));
            }
            for s in 0..k {
                lay.q8(format!("depformer_in.{s}.weight"), d, &[(Slot::DepIn(s), dd)]);
                lay.q8(format!("linears.{s}.weight"), dd, &[(Slot::Linear(s), c.card)]);
            }
            lay.f32("depformer_text_emb.weight".into(), vec![c.text_card + 1, dd], &[(Slot::DepTextEmb, 0)]);
            for j in 0..k - 1 {
                lay.f32(format!("depformer_emb.{j}.weight"), vec![c.card + 1, dd], &[(Slot::DepEmb(j), 0)]);
            }
        }
        lay
    }
}

// ---------------------------------------------------------------------------------------
// The loader.

/// The [`Placer`] of the LM: allocates the GPU weights once the header passed the plan,
/// then writes each part where its routes say.
struct LmPlacer {
    ctx: Rc<GpuContext>,
    config: LmConfig,
    max_part: u64,
    weights: Option<LmGpuWeights>,
    entries: HashMap<String, Entry>,
    writers: Vec<Q8Writer>,
    /// Bytes written since the last flush, and in all.
    unflushed: u64,
    written: u64,
}

impl LmPlacer {
    fn flush(&mut self) -> Result<()> {
        self.ctx.queue.submit([]);
        self.ctx.poll()?;
        self.unflushed = 0;
        Ok(())
    }
}

impl Placer for LmPlacer {
    fn plan(&mut self, header: &Header) -> Result<Plan> {
        let lay = Layout::build(&self.config, header);
        // the first missing or misshapen tensor in the model's order (the plan's own check
        // goes by name), so the error names the tensor a reader of the config meets first
        for name in &lay.order {
            let want = &lay.entries[name].shape;
            let t = header.get(name).ok_or_else(|| Error::MissingTensor(name.clone()))?;
            if &t.shape != want {
                return Err(Error::Shape { name: name.clone(), expected: want.clone(), found: t.shape.clone() });
            }
        }
        let mut plan = Plan::new(self.max_part);
        for (name, e) in &lay.entries {
            plan.want(name, &e.shape, e.kind);
        }
        self.entries = lay.entries;
        Ok(plan)
    }

    fn ready(&mut self, _header: &Header) -> Result<()> {
        let w = LmGpuWeights::allocate(&self.ctx, &self.config)?;
        self.writers.clear();
        let mut names: Vec<&String> = self.entries.keys().collect();
        names.sort();
        let names: Vec<String> = names.into_iter().cloned().collect();
        for name in names {
            let Some(e) = self.entries.get_mut(&name) else { continue };
            for r in &mut e.routes {
                if let Buf::Q8(g) = w.slot(r.slot) {
                    self.writers.push(Q8Writer::new(&name, g));
                    r.writer = self.writers.len() - 1;
                }
            }
        }
        self.weights = Some(w);
        Ok(())
    }

    fn place(&mut self, t: &TensorEntry, part: Loaded) -> Result<()> {
        let w = self.weights.as_ref().ok_or_else(|| Error::Input(format!("tensor `{}` arrived before the header", t.name)))?;
        let entry = self.entries.get(&t.name).ok_or_else(|| Error::UnknownTensor(t.name.clone()))?;
        let cols = t.cols();
        let queue = &self.ctx.queue;
        let mut bytes = 0u64;
        let (row_start, rows) = match &part {
            Loaded::F32(p) => (p.row_start, p.rows),
            Loaded::Q8(p) => (p.row_start, p.rows),
        };
        for r in &entry.routes {
            let a = row_start.max(r.src_row0);
            let b = (row_start + rows).min(r.src_row0 + r.rows);
            if a >= b {
                continue;
            }
            let dst_row = r.dst_row0 + (a - r.src_row0);
            match (&part, w.slot(r.slot)) {
                (Loaded::F32(p), Buf::F32(buf)) => {
                    let v = &p.data[(a - row_start) * cols..(b - row_start) * cols];
                    queue.write_buffer(buf, (dst_row * cols * 4) as u64, bytemuck::cast_slice(v));
                    bytes += 4 * v.len() as u64;
                }
                (Loaded::F32(p), Buf::Table(table)) => {
                    let v = &p.data[(a - row_start) * cols..(b - row_start) * cols];
                    table.write_rows(queue, dst_row, v)?;
                    bytes += 4 * v.len() as u64;
                }
                (Loaded::Q8(p), Buf::Q8(_)) => {
                    let per = cols / BLOCK;
                    bytes += self.writers[r.writer].write(queue, &p.data, (a - row_start) * per, (b - a) * per, dst_row * per)?;
                }
                _ => return Err(Error::Input(format!("tensor `{}` arrived as other than {:?}, as planned", t.name, entry.kind))),
            }
        }
        self.unflushed += bytes;
        self.written += bytes;
        if self.unflushed >= FLUSH_BYTES {
            self.flush()?;
        }
        Ok(())
    }
}

/// Streams an LM checkpoint (safetensors or GGUF, either naming; see the module doc)
/// straight into GPU buffers. Feed it the file's bytes through [`ByteSink::push`] in
/// chunks of any size, call [`ByteSink::finish`], then take the weights with
/// [`LmLoader::into_weights`].
pub struct LmLoader {
    reader: CheckpointReader<Placing<LmPlacer>>,
}

impl LmLoader {
    /// A loader for `config` on `ctx`, for a file of `total_len` bytes when known (checked
    /// against the header). Parts are cut to [`DEFAULT_PART_BYTES`] (or the device's binding
    /// limit, if lower). [`Error::Config`] for an invalid config; [`Error::Limit`] when
    /// the model does not fit the context's limits ([`requirements`]), before any byte.
    pub fn new(ctx: Rc<GpuContext>, config: &LmConfig, total_len: Option<u64>) -> Result<Self> {
        Self::with_part_bytes(ctx, config, total_len, DEFAULT_PART_BYTES)
    }

    /// [`LmLoader::new`] with parts of at most `part_bytes` bytes (host memory per part).
    pub fn with_part_bytes(ctx: Rc<GpuContext>, config: &LmConfig, total_len: Option<u64>, part_bytes: u64) -> Result<Self> {
        // refused here, before the caller opens the source, when the model cannot fit
        requirements(config, &ctx.info.limits())?.check()?;
        let max_part = part_bytes.min(ctx.info.limits().max_bound_buffer()).max(1);
        let placer = LmPlacer {
            ctx,
            config: config.clone(),
            max_part,
            weights: None,
            entries: HashMap::new(),
            writers: Vec::new(),
            unflushed: 0,
            written: 0,
        };
        Ok(Self { reader: CheckpointReader::new(total_len, Limits::default(), Placing::new(placer)) })
    }

    /// Bytes written into GPU buffers so far.
    pub fn bytes_written(&self) -> u64 {
        self.reader.sink().placer().written
    }

    /// `safetensors` or `GGUF`, once the first 4 bytes arrived.
    pub fn format_name(&self) -> Option<&'static str> {
        self.reader.format_name()
    }

    /// The weights, after [`ByteSink::finish`] returned `Ok`. Otherwise [`Error::Input`]
    /// (the load failed or has not finished; nothing of it is kept), or [`Error::Gpu`] for a
    /// GPU error met while writing.
    pub fn into_weights(self) -> Result<LmGpuWeights> {
        match self.reader.state() {
            ReadState::Finished => {}
            ReadState::Failed => return Err(Error::Input("the LM load failed; its weights were dropped".into())),
            ReadState::Reading => return Err(Error::Input("the LM load has not finished".into())),
        }
        let mut p = self.reader.into_sink().into_placer()?;
        if let Some(w) = p.writers.iter().find(|w| w.done != w.blocks || w.pending.is_some()) {
            return Err(Error::Input(format!("tensor `{}`: {} of its {} blocks were written", w.name, w.done, w.blocks)));
        }
        p.flush()?;
        p.ctx.take_error()?;
        p.weights.take().ok_or_else(|| Error::Input("the LM checkpoint had no header".into()))
    }
}

impl ByteSink for LmLoader {
    fn push(&mut self, chunk: &[u8]) -> Result<()> {
        self.reader.push(chunk)
    }

    fn finish(&mut self) -> Result<()> {
        self.reader.finish()
    }

    fn current_tensor(&self) -> Option<&str> {
        self.reader.current_tensor()
    }
}
