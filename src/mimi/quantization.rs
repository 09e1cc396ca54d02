//! Mimi's split residual vector quantizer (moshi.quantization `SplitResidualVectorQuantizer`):
//! a semantic RVQ of one codebook (`rvq_first`) and an acoustic RVQ (`rvq_rest`), each with
//! its own 1x1 input and output projections, both fed the same latent.
//!
//! Encode, per frame: latent `[dimension]` (512) -> `num_codebooks` codes in `[0, bins)`.
//! Decode: codes -> latent `[dimension]`, the sum of both RVQs' projected outputs.

use super::config::QuantizerConfig;
use super::transformer::matmul;
use crate::error::{Error, Result};
use crate::gpu::{LinearOut, PlanBuilder, Tensor};
use crate::weights::TensorSource;

/// One RVQ: projections and the codebooks of its active levels.
pub struct Rvq {
    pub name: String,
    /// `input_proj.weight` `[dim, input_dim, 1]`
    pub input_proj: Vec<f32>,
    /// `output_proj.weight` `[output_dim, dim, 1]`
    pub output_proj: Vec<f32>,
    /// `[levels, bins, dim]`, each entry `embedding_sum / max(cluster_usage, 1e-5)`.
    pub codebooks: Vec<f32>,
    pub levels: usize,
}

/// Both RVQs and the geometry.
pub struct SplitRvq {
    pub first: Rvq,
    pub rest: Rvq,
    pub dim: usize,
    pub bins: usize,
    pub input_dim: usize,
}

impl Rvq {
    fn load(store: &dyn TensorSource, name: &str, cfg: &QuantizerConfig, levels: usize) -> Result<Self> {
        let (d, i, o, bins) = (cfg.dimension, cfg.input_dimension, cfg.output_dimension, cfg.bins);
        let p = format!("quantizer.{name}");
        let input_proj = store.get(&format!("{p}.input_proj.weight"), &[d, i, 1])?;
        let output_proj = store.get(&format!("{p}.output_proj.weight"), &[o, d, 1])?;
        let mut codebooks = Vec::with_capacity(levels * bins * d);
        for j in 0..levels {
            let c = format!("{p}.vq.layers.{j}._codebook");
            let sum = store.get(&format!("{c}.embedding_sum"), &[bins, d])?;
            let usage = store.get(&format!("{c}.cluster_usage"), &[bins])?;
            for (b, row) in sum.chunks_exact(d).enumerate() {
                let u = usage[b].max(1e-5);
                codebooks.extend(row.iter().map(|v| v / u));
            }
        }
        Ok(Self { name: p, input_proj, output_proj, codebooks, levels })
    }
}

impl SplitRvq {
    /// Load the codebooks of the first `n` levels (1 semantic + `n - 1` acoustic).
    pub fn load(store: &dyn TensorSource, cfg: &QuantizerConfig, n: usize) -> Result<Self> {
        Ok(Self {
            first: Rvq::load(store, "rvq_first", cfg, 1)?,
            rest: Rvq::load(store, "rvq_rest", cfg, n.saturating_sub(1))?,
            dim: cfg.dimension,
            bins: cfg.bins,
            input_dim: cfg.input_dimension,
        })
    }

    /// Codebooks in use.
    pub fn num_codebooks(&self) -> usize {
        1 + self.rest.levels
    }

    /// CPU oracle: one latent `[input_dim]` -> codes.
    pub fn encode(&self, latent: &[f32]) -> Vec<u32> {
        let mut codes = Vec::with_capacity(self.num_codebooks());
        for rvq in [&self.first, &self.rest] {
            let mut r = matmul(&rvq.input_proj, latent, self.dim, self.input_dim);
            for l in 0..rvq.levels {
                let cb = &rvq.codebooks[l * self.bins * self.dim..(l + 1) * self.bins * self.dim];
                let mut best = (f32::INFINITY, 0usize);
                for (b, e) in cb.chunks_exact(self.dim).enumerate() {
                    let d: f32 = e.iter().zip(&r).map(|(a, b)| (a - b) * (a - b)).sum();
                    if d < best.0 {
                        best = (d, b);
                    }
                }
                let e = &cb[best.1 * self.dim..(best.1 + 1) * self.dim];
                for (rv, ev) in r.iter_mut().zip(e) {
                    *rv -= ev;
                }
                codes.push(best.1 as u32);
            }
        }
        codes
    }

    /// CPU oracle: codes -> latent `[output_dim]`.
    pub fn decode(&self, codes: &[u32]) -> Vec<f32> {
        let mut out = vec![0f32; self.input_dim];
        let mut slot = 0;
        for rvq in [&self.first, &self.rest] {
            let mut acc = vec![0f32; self.dim];
            for l in 0..rvq.levels {
                let c = codes[slot] as usize;
                slot += 1;
                let e = &rvq.codebooks[(l * self.bins + c) * self.dim..][..self.dim];
                for (a, v) in acc.iter_mut().zip(e) {
                    *a += v;
                }
            }
            if rvq.levels > 0 {
                for (o, v) in out.iter_mut().zip(matmul(&rvq.output_proj, &acc, self.input_dim, self.dim)) {
                    *o += v;
                }
            }
        }
        out
    }

    /// Check that `codes` holds one code per active codebook, each below `bins`.
    pub fn check_codes(&self, frame: usize, codes: &[u32]) -> Result<()> {
        if codes.len() != self.num_codebooks() {
            return Err(Error::Input(format!(
                "frame {frame} has {} codes, the codec runs {} codebooks",
                codes.len(),
                self.num_codebooks()
            )));
        }
        for (k, &c) in codes.iter().enumerate() {
            if c as usize >= self.bins {
                return Err(Error::CodeOutOfRange { frame, codebook: k, code: c as i64, bins: self.bins });
            }
        }
        Ok(())
    }

    /// GPU encode plan: `latent` `[input_dim]` -> `codes` (u32 `[num_codebooks]`).
    pub fn plan_encode(&self, b: &mut PlanBuilder<'_>, latent: &Tensor, codes: &wgpu::Buffer) -> Result<()> {
        let ctx = b.ctx();
        let mut slot = 0;
        for rvq in [&self.first, &self.rest] {
            if rvq.levels == 0 {
                continue;
            }
            let w = ctx.storage_f32(&format!("{}.input_proj", rvq.name), &rvq.input_proj)?;
            let cb = ctx.storage_f32(&format!("{}.codebooks", rvq.name), &rvq.codebooks)?;
            let r = b.tensor(&format!("{}.residuals", rvq.name), &[rvq.levels, self.dim])?;
            b.linear(&format!("{}.input_proj", rvq.name), &w, (self.dim, self.input_dim), 1, &latent.buf, 0, &r.buf, 0, LinearOut::Store)?;
            b.rvq_encode(&rvq.name, &cb, (rvq.levels, self.bins, self.dim), &r.buf, codes, slot)?;
            slot += rvq.levels;
        }
        Ok(())
    }

    /// GPU decode plan: codes (u32 `[num_codebooks]` from element `offset` of `codes`) ->
    /// latent `[input_dim]`.
    pub fn plan_decode(&self, b: &mut PlanBuilder<'_>, codes: &wgpu::Buffer, offset: usize) -> Result<Tensor> {
        let ctx = b.ctx();
        let out = b.tensor("quantizer.decoded", &[1, self.input_dim])?;
        let mut offset = offset;
        let mut first = true;
        for rvq in [&self.first, &self.rest] {
            if rvq.levels == 0 {
                continue;
            }
            let w = ctx.storage_f32(&format!("{}.output_proj", rvq.name), &rvq.output_proj)?;
            let cb = ctx.storage_f32(&format!("{}.codebooks", rvq.name), &rvq.codebooks)?;
            let label = format!("{}.decode+output_proj", rvq.name);
            b.rvq_decode_proj(&label, &cb, (rvq.levels, self.bins, self.dim), (codes, offset), (&w, self.input_dim), &out.buf, !first);
            offset += rvq.levels;
            first = false;
        }
        Ok(out)
    }
}
