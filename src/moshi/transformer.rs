//! The LM's transformer layers (moshi.modules.transformer with `gating = "silu"`,
//! `norm = "rms_norm_f32"`, no LayerScale): RMSNorm, causal multi-head attention over a KV
//! ring, RMSNorm, SiLU-gated FFN, both branches residual. Linears are Q8_0.
//!
//! Shared by the temporal transformer (one weight set, RoPE, `context` slots) and the
//! depformer (one weight set per step, no positional embedding, `dep_q` slots).

use crate::error::{Error, Result};
use crate::gpu::{gate_in_linear_out, GatedRow, GpuContext, NormInput, NormedRow, PlanBuilder, Tensor, TransformerSpec};
use crate::weights::q8::{Q8Tensor, BLOCK};
use crate::weights::TensorStore;

/// RMSNorm epsilon of `rms_norm_f32`.
pub const RMS_EPS: f32 = 1e-8;

/// A bias-free linear layer held in Q8_0, `[rows, cols]` (`y = W x`).
pub struct Q8Linear {
    pub name: String,
    pub q8: Q8Tensor,
}

/// A [`Q8Linear`] uploaded: quants and scales buffers.
pub struct GpuQ8 {
    pub quants: wgpu::Buffer,
    pub scales: wgpu::Buffer,
    pub rows: usize,
    pub cols: usize,
}

impl Q8Linear {
    /// Quantize rows `[row0, row0 + rows)` of checkpoint tensor `name` `[.., cols]` (stacked
    /// per-step weights are row blocks of one tensor).
    pub fn from_rows(name: &str, data: &[f32], row0: usize, rows: usize, cols: usize) -> Result<Self> {
        let part = data.get(row0 * cols..(row0 + rows) * cols).ok_or_else(|| Error::Shape {
            name: name.to_string(),
            expected: vec![row0 + rows, cols],
            found: vec![data.len() / cols.max(1), cols],
        })?;
        Ok(Self { name: name.to_string(), q8: Q8Tensor::from_f32(name, rows, cols, part)? })
    }

    /// Load the whole tensor `name` `[rows, cols]`.
    pub fn load(store: &TensorStore<'_>, name: &str, rows: usize, cols: usize) -> Result<Self> {
        let data = store.get(name, &[rows, cols])?;
        Self::from_rows(name, &data, 0, rows, cols)
    }

    pub fn rows(&self) -> usize {
        self.q8.rows
    }
    pub fn cols(&self) -> usize {
        self.q8.cols
    }

    /// CPU oracle: `y = W x` for each row of `x` `[t, cols]`, dequantizing on the fly.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let (n, k) = (self.rows(), self.cols());
        let t = x.len() / k;
        let mut y = vec![0f32; t * n];
        for r in 0..t {
            let xr = &x[r * k..(r + 1) * k];
            for i in 0..n {
                let mut acc = 0f32;
                for b in 0..k / BLOCK {
                    let blk = self.q8.block(i * k / BLOCK + b);
                    let d = blk.scale();
                    let xs = &xr[b * BLOCK..(b + 1) * BLOCK];
                    let s: f32 = blk.qs.iter().zip(xs).map(|(&q, &v)| q as f32 * v).sum();
                    acc += d * s;
                }
                y[r * n + i] = acc;
            }
        }
        y
    }

    /// Upload quants and scales.
    pub fn upload(&self, ctx: &GpuContext) -> Result<GpuQ8> {
        Ok(GpuQ8 {
            quants: ctx.storage_bytes(&format!("{}.quants", self.name), self.q8.quants_bytes())?,
            scales: ctx.storage_bytes(&format!("{}.scales", self.name), self.q8.scales_bytes())?,
            rows: self.rows(),
            cols: self.cols(),
        })
    }
}

/// The per-step weights of one layer: attention projections and gated FFN.
pub struct StepWeights {
    /// `[3 dim, dim]`: q, k, v rows, heads contiguous
    pub in_proj: Q8Linear,
    /// `[dim, dim]`
    pub out_proj: Q8Linear,
    /// `[2 hidden, dim]`: SiLU half then multiplier half
    pub linear_in: Q8Linear,
    /// `[dim, hidden]`
    pub linear_out: Q8Linear,
}

/// One layer: shared RMSNorm gains and one [`StepWeights`] per step (1 for the temporal
/// transformer, `dep_q` for the depformer).
pub struct Layer {
    pub norm1: Vec<f32>,
    pub norm2: Vec<f32>,
    pub steps: Vec<StepWeights>,
}

/// A stack of layers and its attention geometry.
pub struct LmTransformer {
    pub name: String,
    pub layers: Vec<Layer>,
    pub dim: usize,
    pub heads: usize,
    pub hidden: usize,
    /// KV ring slots (= attention window).
    pub context: usize,
    pub max_period: f64,
    pub rope: bool,
}

/// CPU streaming state: per layer a KV ring and its positions.
pub struct LmTransformerState {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    pos: Vec<Vec<Option<usize>>>,
}

impl LmTransformer {
    /// Load `<prefix>.layers.L.*`: attention as the released stacked
    /// `self_attn.in_proj_weight` / `self_attn.out_proj.weight` (step k = the k-th block of
    /// rows) or the split `in_projs.k.weight` / `out_projs.k.weight`; gating as
    /// `gating.linear_in.weight` (one step) or `gating.k.linear_in.weight` (per step).
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        store: &TensorStore<'_>,
        prefix: &str,
        (num_layers, dim, heads, hidden): (usize, usize, usize, usize),
        steps: usize,
        context: usize,
        max_period: f64,
        rope: bool,
    ) -> Result<Self> {
        let mut layers = Vec::with_capacity(num_layers);
        for l in 0..num_layers {
            let p = format!("{prefix}.layers.{l}");
            let norm1 = store.get(&format!("{p}.norm1.alpha"), &[1, 1, dim])?;
            let norm2 = store.get(&format!("{p}.norm2.alpha"), &[1, 1, dim])?;
            let stacked_in = format!("{p}.self_attn.in_proj_weight");
            let stacked_out = format!("{p}.self_attn.out_proj.weight");
            let (in_all, out_all) = if store.contains(&stacked_in) {
                (
                    Some(store.get(&stacked_in, &[steps * 3 * dim, dim])?),
                    Some(store.get(&stacked_out, &[steps * dim, dim])?),
                )
            } else {
                (None, None)
            };
            let mut sw = Vec::with_capacity(steps);
            for k in 0..steps {
                let (in_proj, out_proj) = match (&in_all, &out_all) {
                    (Some(a), Some(b)) => (
                        Q8Linear::from_rows(&stacked_in, a, k * 3 * dim, 3 * dim, dim)?,
                        Q8Linear::from_rows(&stacked_out, b, k * dim, dim, dim)?,
                    ),
                    _ => (
                        Q8Linear::load(store, &format!("{p}.self_attn.in_projs.{k}.weight"), 3 * dim, dim)?,
                        Q8Linear::load(store, &format!("{p}.self_attn.out_projs.{k}.weight"), dim, dim)?,
                    ),
                };
                let g = if steps == 1 { format!("{p}.gating") } else { format!("{p}.gating.{k}") };
                sw.push(StepWeights {
                    in_proj,
                    out_proj,
                    linear_in: Q8Linear::load(store, &format!("{g}.linear_in.weight"), 2 * hidden, dim)?,
                    linear_out: Q8Linear::load(store, &format!("{g}.linear_out.weight"), dim, hidden)?,
                });
            }
            layers.push(Layer { norm1, norm2, steps: sw });
        }
        Ok(Self { name: prefix.to_string(), layers, dim, heads, hidden, context, max_period, rope })
    }

    pub fn state(&self) -> LmTransformerState {
        let n = self.layers.len();
        LmTransformerState {
            k: vec![vec![0.0; self.context * self.dim]; n],
            v: vec![vec![0.0; self.context * self.dim]; n],
            pos: vec![vec![None; self.context]; n],
        }
    }

    /// CPU oracle: one position `pos` of `x` `[dim]` in place, with the weights of `step`.
    pub fn step(&self, st: &mut LmTransformerState, x: &mut [f32], pos: usize, step: usize) {
        let d = self.dim;
        let hd = d / self.heads;
        let coef = (-(self.max_period.ln()) * 2.0 / hd as f64) as f32;
        let scale = (1.0 / (hd as f64).sqrt()) as f32;
        for (li, layer) in self.layers.iter().enumerate() {
            let w = &layer.steps[step];
            let h = rms_norm(x, &layer.norm1);
            let mut qkv = w.in_proj.forward(&h);
            if self.rope {
                for hh in 0..self.heads {
                    for j in 0..hd / 2 {
                        let angle = (j as f32 * coef).exp() * pos as f32;
                        let (sn, cs) = angle.sin_cos();
                        for part in 0..2 {
                            let o = part * d + hh * hd + 2 * j;
                            let (a, b) = (qkv[o], qkv[o + 1]);
                            qkv[o] = a * cs - b * sn;
                            qkv[o + 1] = a * sn + b * cs;
                        }
                    }
                }
            }
            let slot = pos % self.context;
            st.k[li][slot * d..(slot + 1) * d].copy_from_slice(&qkv[d..2 * d]);
            st.v[li][slot * d..(slot + 1) * d].copy_from_slice(&qkv[2 * d..3 * d]);
            st.pos[li][slot] = Some(pos);
            let mut attn = vec![0f32; d];
            for hh in 0..self.heads {
                let q = &qkv[hh * hd..(hh + 1) * hd];
                let mut sc: Vec<(usize, f32)> = Vec::new();
                for (s, p) in st.pos[li].iter().enumerate() {
                    if let Some(pk) = *p {
                        if pk <= pos && pos - pk < self.context {
                            let k = &st.k[li][s * d + hh * hd..][..hd];
                            sc.push((s, q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale));
                        }
                    }
                }
                let m = sc.iter().map(|s| s.1).fold(f32::NEG_INFINITY, f32::max);
                let mut den = 0f32;
                for s in sc.iter_mut() {
                    s.1 = (s.1 - m).exp();
                    den += s.1;
                }
                let out = &mut attn[hh * hd..(hh + 1) * hd];
                for (s, e) in &sc {
                    for (o, v) in out.iter_mut().zip(&st.v[li][s * d + hh * hd..][..hd]) {
                        *o += e * v;
                    }
                }
                out.iter_mut().for_each(|o| *o /= den);
            }
            for (xv, u) in x.iter_mut().zip(w.out_proj.forward(&attn)) {
                *xv += u;
            }
            let h = rms_norm(x, &layer.norm2);
            let g = w.linear_in.forward(&h);
            let gated: Vec<f32> = (0..self.hidden).map(|j| silu(g[j]) * g[self.hidden + j]).collect();
            for (xv, u) in x.iter_mut().zip(w.linear_out.forward(&gated)) {
                *xv += u;
            }
        }
    }
}

/// One step's weights of one layer on the GPU, named as in the split checkpoint naming
/// (`{prefix}.layers.L.norm1.alpha`, `self_attn.in_projs.K.weight`, `gating.K.linear_in.weight`,
/// ...). The RMSNorm gains are shared by the steps in a PyTorch checkpoint and stored per step
/// in a candle one; here each step has its own copy (as each step's plan binds it).
pub struct GpuStep {
    /// `norm1.alpha` `[dim]` f32
    pub norm1: wgpu::Buffer,
    /// `norm2.alpha` `[dim]` f32
    pub norm2: wgpu::Buffer,
    /// `[3 dim, dim]` Q8_0
    pub in_proj: GpuQ8,
    /// `[dim, dim]` Q8_0
    pub out_proj: GpuQ8,
    /// `[2 hidden, dim]` Q8_0
    pub linear_in: GpuQ8,
    /// `[dim, hidden]` Q8_0
    pub linear_out: GpuQ8,
}

/// A stack of layers resident on the GPU (`layers[L][step]`) and its attention geometry:
/// what the plan of [`GpuTransformer::plan_step`] binds.
pub struct GpuTransformer {
    /// `transformer` or `depformer`.
    pub name: String,
    pub layers: Vec<Vec<GpuStep>>,
    pub dim: usize,
    pub heads: usize,
    pub hidden: usize,
    /// KV ring slots (= attention window).
    pub context: usize,
    pub max_period: f64,
    pub rope: bool,
}

impl GpuTransformer {
    /// GPU: the rings of every layer (`context` slots each).
    pub fn plan_state(&self, b: &mut PlanBuilder<'_>) -> Result<Vec<[wgpu::Buffer; 3]>> {
        let spec = self.spec();
        (0..self.layers.len()).map(|l| b.attention_state(&format!("{}.layers.{l}", self.name), &spec)).collect()
    }

    fn spec(&self) -> TransformerSpec {
        lm_attention_spec(self.dim, self.heads, self.context, self.max_period, self.rope)
    }

    /// The partial rows a layer's attention and `out_proj` leave behind the residual row in
    /// `b`'s plans ([`PlanBuilder::attention_out_proj`], where it takes this stack's
    /// attention and `linear_in` gates in its epilogue); 0 where `out_proj` adds into the
    /// row itself.
    fn partial_rows(&self, b: &PlanBuilder<'_>) -> usize {
        if gate_in_linear_out() {
            return 0;
        }
        b.attention_out_proj_group(&self.spec()).map_or(0, |g| self.heads / g)
    }

    /// GPU: a residual row `[1, dim]` for [`Self::plan_step`], its buffer with room behind
    /// the row for the partial rows the plans of `b` leave there (none where they leave
    /// none).
    pub fn residual_row(&self, b: &PlanBuilder<'_>, label: &str) -> Result<Tensor> {
        let rows = 1 + self.partial_rows(b);
        let t = b.tensor(label, &[rows, self.dim])?;
        Ok(Tensor { buf: t.buf, shape: vec![1, self.dim] })
    }

    /// GPU plan: one position of `x` `[1, dim]` in place with the weights of `step`, at the
    /// position held by `frame` (a `FrameParams` uniform), over `rings`. Where the plans
    /// take a short window's attention into `out_proj` ([`PlanBuilder::attention_out_proj`]:
    /// the depformer), `x` must come from [`Self::residual_row`].
    ///
    /// With `fuse` every RMSNorm after the first is prepared by the residual add before it
    /// ([`PlanBuilder::q8_linear_residual`]: the new row times the norm's gain and partial
    /// sums of its squares) and taken by the normed linear from there, so no norm is a
    /// dispatch of its own; `out_norm` (a gain `[dim]` and a row of width `dim`) has the
    /// last residual add prepare a norm that follows the stack as well. Without `fuse` the
    /// norms are taken from `x` ([`PlanBuilder::q8_linear_normed`]) and `out_norm` is not
    /// written.
    #[allow(clippy::too_many_arguments)]
    pub fn plan_step(
        &self,
        b: &mut PlanBuilder<'_>,
        x: &Tensor,
        step: usize,
        frame: &wgpu::Buffer,
        rings: &[[wgpu::Buffer; 3]],
        fuse: bool,
        out_norm: Option<(&wgpu::Buffer, &NormedRow)>,
    ) -> Result<()> {
        let d = self.dim;
        let spec = self.spec();
        let qkv = b.tensor(&format!("{}.qkv", self.name), &[1, 3 * d])?;
        // The FFN's hidden row: gated by linear_in's epilogue (and with the i8 kernel
        // quantized there for linear_out), or, by the rule before, [gate; up] for
        // linear_out to gate as it reads it (`INFERENCELAYER_GATE=linear_out`).
        let ffn = if gate_in_linear_out() {
            Ffn::Pair(b.tensor(&format!("{}.g", self.name), &[1, 2 * self.hidden])?)
        } else {
            Ffn::Gated(b.gated_row(&format!("{}.h", self.name), self.hidden)?)
        };
        let partials = if fuse { 0 } else { self.partial_rows(b) };
        if partials > 0 && x.buf.size() < ((1 + partials) * d * 4) as u64 {
            return Err(Error::config(&self.name, format!("the residual row of a plan that takes attention into out_proj needs room for {partials} partial rows behind it (GpuTransformer::residual_row)")));
        }
        let rows = if fuse {
            Some([b.normed_row(&format!("{}.norm1_row", self.name), d)?, b.normed_row(&format!("{}.norm2_row", self.name), d)?])
        } else {
            None
        };
        for (li, layer) in self.layers.iter().enumerate() {
            let p = format!("{}.layers.{li}.step{step}", self.name);
            let w = &layer[step];
            let (n1, n2) = (&w.norm1, &w.norm2);
            let (wi, wo, gi, go) = (&w.in_proj, &w.out_proj, &w.linear_in, &w.linear_out);
            let Some([row1, row2]) = &rows else {
                b.q8_linear_normed(&format!("{p}.in_proj"), (&wi.quants, &wi.scales), (3 * d, d), (x, n1, RMS_EPS), (&qkv.buf, 0, 3 * d), false)?;
                if partials > 0 {
                    // attention and out_proj in one dispatch, its partial rows added in by
                    // linear_in (into its input) and linear_out (into the residual)
                    let parts = b.attention_out_proj(&format!("{p}.self_attn"), &spec, &qkv, frame, &rings[li], (&wo.quants, &wo.scales), x)?;
                    self.plan_ffn(b, &p, (gi, go), &ffn, x, NormInput::RawPartials(x, n2, RMS_EPS, parts), None, parts)?;
                    continue;
                }
                let attn = b.rope_attention_at(&format!("{p}.self_attn"), &spec, &qkv, frame, &rings[li])?;
                b.q8_linear(&format!("{p}.out_proj"), (&wo.quants, &wo.scales), (d, d), 1, (&attn.buf, 0), (&x.buf, 0, d), true)?;
                self.plan_ffn(b, &p, (gi, go), &ffn, x, NormInput::Raw(x, n2, RMS_EPS), None, 0)?;
                continue;
            };
            if li == 0 {
                b.q8_linear_normed(&format!("{p}.in_proj"), (&wi.quants, &wi.scales), (3 * d, d), (x, n1, RMS_EPS), (&qkv.buf, 0, 3 * d), false)?;
            } else {
                b.q8_linear_prenormed(&format!("{p}.in_proj"), (&wi.quants, &wi.scales), (3 * d, d), (row1, RMS_EPS), (&qkv.buf, 0, 3 * d), false)?;
            }
            let attn = b.rope_attention_at(&format!("{p}.self_attn"), &spec, &qkv, frame, &rings[li])?;
            b.q8_linear_residual(&format!("{p}.out_proj"), (&wo.quants, &wo.scales), (d, d), false, &attn.buf, x, (n2, row2))?;
            let next = match self.layers.get(li + 1) {
                Some(l) => Some((&l[step].norm1, row1)),
                None => out_norm,
            };
            self.plan_ffn(b, &p, (gi, go), &ffn, x, NormInput::Prepared(row2, RMS_EPS), next, 0)?;
        }
        Ok(())
    }

    /// One layer's gated FFN, added to the residual row `x` (with the `partials` rows behind
    /// it): `linear_in` of the norm `norm` gives, then `linear_out` (with `next`, also
    /// preparing the next RMSNorm into its row).
    #[allow(clippy::too_many_arguments)]
    fn plan_ffn(
        &self,
        b: &mut PlanBuilder<'_>,
        p: &str,
        (gi, go): (&GpuQ8, &GpuQ8),
        ffn: &Ffn,
        x: &Tensor,
        norm: NormInput<'_>,
        next: Option<(&wgpu::Buffer, &NormedRow)>,
        partials: usize,
    ) -> Result<()> {
        let (gi_w, go_w) = ((&gi.quants, &gi.scales), (&go.quants, &go.scales));
        let (n_in, n_out) = ((2 * self.hidden, self.dim), (self.dim, self.hidden));
        let (li, lo) = (format!("{p}.linear_in"), format!("{p}.linear_out"));
        match ffn {
            Ffn::Gated(h) => {
                b.q8_linear_gate(&li, gi_w, n_in, norm, h)?;
                b.q8_linear_from_gated(&lo, go_w, n_out, h, x, partials, next)
            }
            Ffn::Pair(g) => {
                let y = (&g.buf, 0, 2 * self.hidden);
                match norm {
                    NormInput::Raw(xr, alpha, eps) => b.q8_linear_normed(&li, gi_w, n_in, (xr, alpha, eps), y, false)?,
                    NormInput::Prepared(row, eps) => b.q8_linear_prenormed(&li, gi_w, n_in, (row, eps), y, false)?,
                    NormInput::RawPartials(..) => return Err(Error::config(p, "partial rows behind the residual go with linear_in's gate (GatedRow)")),
                }
                match next {
                    Some(next) => b.q8_linear_residual(&lo, go_w, n_out, true, &g.buf, x, next),
                    None => b.q8_linear_gated(&lo, go_w, n_out, 1, (&g.buf, 0), (&x.buf, 0, self.dim), true),
                }
            }
        }
    }
}

/// The attention geometry of an LM transformer stack of `dim` wide rows, `heads` heads and
/// `context` KV ring slots, as its plans take it: f16 keys and values wherever the split
/// kernel takes the attention (the temporal transformer's 3000 slots; the depformer's 8 take
/// the small kernel, in f32: [`crate::gpu::AttentionKernel::kv_half`]). The plans
/// ([`GpuTransformer`]) and the buffer sizes checked before a load
/// ([`super::loader::requirements`]) both ask it.
pub fn lm_attention_spec(dim: usize, heads: usize, context: usize, max_period: f64, rope: bool) -> TransformerSpec {
    TransformerSpec { dim, heads, context, max_period, rope, kv_half: true }
}

/// The FFN's hidden row between `linear_in` and `linear_out` in a plan.
enum Ffn {
    /// gated in `linear_in`'s epilogue (the default)
    Gated(GatedRow),
    /// `[gate; up]`, gated as `linear_out` reads it (`INFERENCELAYER_GATE=linear_out`)
    Pair(Tensor),
}

/// `x * (alpha * rsqrt(eps + mean(x^2)))` over one row.
pub fn rms_norm(x: &[f32], alpha: &[f32]) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (RMS_EPS + ms).sqrt();
    x.iter().zip(alpha).map(|(v, a)| v * (a * inv)).collect()
}

fn silu(v: f32) -> f32 {
    v / (1.0 + (-v).exp())
}
