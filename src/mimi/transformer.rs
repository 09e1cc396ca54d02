//! Mimi's streaming transformer (moshi.modules.transformer `ProjectedTransformer` with
//! identity projections): pre-norm layers of LayerNorm, causal multi-head attention with
//! interleaved RoPE over a KV ring of `context` steps, LayerScale residuals, GELU FFN.
//!
//! Per 80 ms frame it takes and returns `[2, d_model]` (time-major, two 25 Hz steps).

use super::config::TransformerConfig;
use crate::error::Result;
use crate::gpu::{LinearOut, PlanBuilder, Tensor, TransformerSpec};
use crate::weights::TensorSource;

const LN_EPS: f32 = 1e-5;

/// One `StreamingTransformerLayer` (`<prefix>.layers.<i>.*`).
pub struct Layer {
    pub norm1: (Vec<f32>, Vec<f32>),
    pub norm2: (Vec<f32>, Vec<f32>),
    /// `self_attn.in_projs.0.weight` (or `in_proj_weight`) `[3 d, d]`
    pub in_proj: Vec<f32>,
    /// `self_attn.out_projs.0.weight` (or `out_proj.weight`) `[d, d]`
    pub out_proj: Vec<f32>,
    /// `linear1.weight` `[ffn, d]`
    pub linear1: Vec<f32>,
    /// `linear2.weight` `[d, ffn]`
    pub linear2: Vec<f32>,
    pub layer_scale_1: Vec<f32>,
    pub layer_scale_2: Vec<f32>,
}

/// A transformer stack and its geometry.
pub struct Transformer {
    pub name: String,
    pub layers: Vec<Layer>,
    pub d_model: usize,
    pub num_heads: usize,
    pub dim_feedforward: usize,
    pub context: usize,
    pub max_period: f64,
}

/// CPU streaming state: per layer a KV ring of `context` slots and its positions.
pub struct TransformerState {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    pos: Vec<Vec<Option<usize>>>,
    offset: usize,
}

impl Transformer {
    /// Load `<prefix>.transformer.layers.*` (e.g. prefix `encoder_transformer`). Accepts the
    /// current split names (`in_projs.0.weight`) and the older stacked ones
    /// (`in_proj_weight`, `out_proj.weight`), as the reference's load hook does.
    pub fn load(store: &dyn TensorSource, prefix: &str, cfg: &TransformerConfig) -> Result<Self> {
        let d = cfg.d_model;
        let f = cfg.dim_feedforward;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let p = format!("{prefix}.transformer.layers.{l}");
            let g = |n: &str, s: &[usize]| store.get(&format!("{p}.{n}"), s);
            layers.push(Layer {
                norm1: (g("norm1.weight", &[d])?, g("norm1.bias", &[d])?),
                norm2: (g("norm2.weight", &[d])?, g("norm2.bias", &[d])?),
                in_proj: store.get_any(
                    &[&format!("{p}.self_attn.in_projs.0.weight"), &format!("{p}.self_attn.in_proj_weight")],
                    &[3 * d, d],
                )?,
                out_proj: store.get_any(
                    &[&format!("{p}.self_attn.out_projs.0.weight"), &format!("{p}.self_attn.out_proj.weight")],
                    &[d, d],
                )?,
                linear1: g("linear1.weight", &[f, d])?,
                linear2: g("linear2.weight", &[d, f])?,
                layer_scale_1: g("layer_scale_1.scale", &[d])?,
                layer_scale_2: g("layer_scale_2.scale", &[d])?,
            });
        }
        Ok(Self {
            name: prefix.to_string(),
            layers,
            d_model: d,
            num_heads: cfg.num_heads,
            dim_feedforward: f,
            context: cfg.context,
            max_period: cfg.max_period,
        })
    }

    pub fn state(&self) -> TransformerState {
        let n = self.layers.len();
        TransformerState {
            k: vec![vec![0.0; self.context * self.d_model]; n],
            v: vec![vec![0.0; self.context * self.d_model]; n],
            pos: vec![vec![None; self.context]; n],
            offset: 0,
        }
    }

    /// CPU oracle: `x` `[t, d_model]` in place.
    pub fn step(&self, st: &mut TransformerState, x: &mut [f32]) {
        let d = self.d_model;
        let t = x.len() / d;
        let hd = d / self.num_heads;
        let coef = (-(self.max_period.ln()) * 2.0 / hd as f64) as f32;
        let scale = (1.0 / (hd as f64).sqrt()) as f32;
        for (li, layer) in self.layers.iter().enumerate() {
            let h = layer_norm(x, &layer.norm1.0, &layer.norm1.1, d);
            let mut qkv = matmul(&layer.in_proj, &h, 3 * d, d);
            // rope on q and k, then push k and v into the ring
            for r in 0..t {
                let pos = st.offset + r;
                for hh in 0..self.num_heads {
                    for j in 0..hd / 2 {
                        let freq = (j as f32 * coef).exp();
                        let angle = freq * pos as f32;
                        let (sn, cs) = angle.sin_cos();
                        for part in 0..2 {
                            let o = r * 3 * d + part * d + hh * hd + 2 * j;
                            let (a, b) = (qkv[o], qkv[o + 1]);
                            qkv[o] = a * cs - b * sn;
                            qkv[o + 1] = a * sn + b * cs;
                        }
                    }
                }
                let slot = pos % self.context;
                st.k[li][slot * d..(slot + 1) * d].copy_from_slice(&qkv[r * 3 * d + d..r * 3 * d + 2 * d]);
                st.v[li][slot * d..(slot + 1) * d].copy_from_slice(&qkv[r * 3 * d + 2 * d..r * 3 * d + 3 * d]);
                st.pos[li][slot] = Some(pos);
            }
            let mut attn = vec![0f32; t * d];
            for r in 0..t {
                let pos_q = st.offset + r;
                for hh in 0..self.num_heads {
                    let q = &qkv[r * 3 * d + hh * hd..][..hd];
                    let mut scores: Vec<(usize, f32)> = Vec::new();
                    for (slot, p) in st.pos[li].iter().enumerate() {
                        if let Some(pk) = *p {
                            if pk <= pos_q && pos_q - pk < self.context {
                                let k = &st.k[li][slot * d + hh * hd..][..hd];
                                let s: f32 = q.iter().zip(k).map(|(a, b)| a * b).sum();
                                scores.push((slot, s * scale));
                            }
                        }
                    }
                    let m = scores.iter().map(|s| s.1).fold(f32::NEG_INFINITY, f32::max);
                    let mut den = 0f32;
                    for s in scores.iter_mut() {
                        s.1 = (s.1 - m).exp();
                        den += s.1;
                    }
                    let out = &mut attn[r * d + hh * hd..][..hd];
                    for (slot, e) in &scores {
                        let v = &st.v[li][slot * d + hh * hd..][..hd];
                        for (o, vv) in out.iter_mut().zip(v) {
                            *o += e * vv;
                        }
                    }
                    for o in out.iter_mut() {
                        *o /= den;
                    }
                }
            }
            let upd = matmul(&layer.out_proj, &attn, d, d);
            for (i, xv) in x.iter_mut().enumerate() {
                *xv += layer.layer_scale_1[i % d] * upd[i];
            }
            let h = layer_norm(x, &layer.norm2.0, &layer.norm2.1, d);
            let mut ff = matmul(&layer.linear1, &h, self.dim_feedforward, d);
            for v in ff.iter_mut() {
                *v = 0.5 * *v * (1.0 + libm::erff(*v * std::f32::consts::FRAC_1_SQRT_2));
            }
            let upd = matmul(&layer.linear2, &ff, d, self.dim_feedforward);
            for (i, xv) in x.iter_mut().enumerate() {
                *xv += layer.layer_scale_2[i % d] * upd[i];
            }
        }
        st.offset += t;
    }

    /// GPU plan: `x` `[t, d_model]` time-major, updated in place. The positions come from
    /// the plan's frame uniform (`pos` = steps before this frame).
    pub fn plan(&self, b: &mut PlanBuilder<'_>, x: &Tensor) -> Result<()> {
        let (t, d) = (x.shape[0], x.shape[1]);
        let f = self.dim_feedforward;
        let ctx = b.ctx();
        let spec = TransformerSpec { dim: d, heads: self.num_heads, context: self.context, max_period: self.max_period, rope: true, kv_half: false };
        let qkv = b.tensor(&format!("{}.qkv", self.name), &[t, 3 * d])?;
        let ff = b.tensor(&format!("{}.ff", self.name), &[t, f])?;
        for (li, l) in self.layers.iter().enumerate() {
            let p = format!("{}.layers.{li}", self.name);
            let up = |n: &str, v: &[f32]| ctx.storage_f32(&format!("{p}.{n}"), v);
            let (n1w, n1b) = (up("norm1.weight", &l.norm1.0)?, up("norm1.bias", &l.norm1.1)?);
            let (n2w, n2b) = (up("norm2.weight", &l.norm2.0)?, up("norm2.bias", &l.norm2.1)?);
            let w_in = up("in_proj", &l.in_proj)?;
            let w_out = up("out_proj", &l.out_proj)?;
            let w1 = up("linear1", &l.linear1)?;
            let w2 = up("linear2", &l.linear2)?;
            let ls1 = up("layer_scale_1", &l.layer_scale_1)?;
            let ls2 = up("layer_scale_2", &l.layer_scale_2)?;
            b.linear_layer_norm(&format!("{p}.norm1+in_proj"), &w_in, (3 * d, d), x, (&n1w, &n1b, LN_EPS), &qkv, LinearOut::Store)?;
            let attn = b.rope_attention(&format!("{p}.self_attn"), &spec, &qkv)?;
            b.linear(&format!("{p}.out_proj"), &w_out, (d, d), t, &attn.buf, 0, &x.buf, 0, LinearOut::Residual(&ls1))?;
            b.linear_layer_norm(&format!("{p}.norm2+linear1"), &w1, (f, d), x, (&n2w, &n2b, LN_EPS), &ff, LinearOut::Gelu)?;
            b.linear(&format!("{p}.linear2"), &w2, (d, f), t, &ff.buf, 0, &x.buf, 0, LinearOut::Residual(&ls2))?;
        }
        Ok(())
    }
}

/// Row-wise LayerNorm of `x` `[rows, d]`.
fn layer_norm(x: &[f32], w: &[f32], b: &[f32], d: usize) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    for (xr, yr) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        let mean = xr.iter().sum::<f32>() / d as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + LN_EPS).sqrt();
        for i in 0..d {
            yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
        }
    }
    y
}

/// `y[r, i] = sum_j w[i, j] x[r, j]`, `w` `[n, k]`, `x` `[rows, k]`.
pub(crate) fn matmul(w: &[f32], x: &[f32], n: usize, k: usize) -> Vec<f32> {
    let rows = x.len() / k;
    let mut y = vec![0f32; rows * n];
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        for i in 0..n {
            let wr = &w[i * k..(i + 1) * k];
            y[r * n + i] = wr.iter().zip(xr).map(|(a, b)| a * b).sum();
        }
    }
    y
}
