//! Seeded synthetic Mimi checkpoints at any geometry, with codebooks calibrated on a clip.
//!
//! The weights follow [`crate::weights::synthetic`]'s rules. Random codebooks give the same
//! code on every frame unless their scale matches the residual each level sees, so, for a
//! geometry with no reference statistics, [`calibrated_checkpoint`] measures them: it runs
//! the CPU encoder over a clip to get the latents, then, level by level, sets that level's
//! statistics to the mean and spread of the residual, builds the level's codebook from
//! them and quantizes the residual for the next level (as `tests/reference/gen_mimi.py` does
//! at the released geometry).

use super::config::MimiConfig;
use super::oracle::MimiCpu;
use super::transformer::matmul;
use super::MimiWeights;
use crate::error::{Error, Result};
use crate::weights::synthetic::{self, CodebookStats};

/// A safetensors checkpoint (f32, Kyutai's names) for `config`, seeded by `seed`, with every
/// one of `quantizer.n_q` codebooks calibrated on `clip` (24 kHz mono; at least one frame).
/// Fails with [`Error::Input`] when the clip is shorter than a frame, or with the config's
/// error when the geometry is invalid.
pub fn calibrated_checkpoint(config: &MimiConfig, seed: u64, clip: &[f32]) -> Result<Vec<u8>> {
    config.validate()?;
    let fs = config.frame_size();
    if clip.len() < fs {
        return Err(Error::Input(format!("the calibration clip has {} samples, less than a frame ({fs})", clip.len())));
    }
    let q = &config.quantizer;
    let (dim, bins) = (q.dimension, q.bins);
    let specs = config.tensor_specs();
    // The codebooks do not reach the latent: one pass with unit statistics gives it.
    let mut stats = CodebookStats::unit(q.n_q, dim);
    let all = MimiConfig { num_codebooks: q.n_q, ..config.clone() };
    let w = MimiWeights::from_safetensors(&all, &synthetic::checkpoint(&specs, seed, &stats)?)?;
    let mut cpu = MimiCpu::new(&w);
    let latents: Vec<Vec<f32>> = clip.chunks_exact(fs).map(|f| cpu.encode_latent(f)).collect::<Result<_>>()?;

    for (which, first_level, levels, proj) in
        [("rvq_first", 0, 1, &w.quantizer.first.input_proj), ("rvq_rest", 1, q.n_q - 1, &w.quantizer.rest.input_proj)]
    {
        let mut residuals: Vec<Vec<f32>> = latents.iter().map(|l| matmul(proj, l, dim, q.input_dimension)).collect();
        for j in 0..levels {
            let level = first_level + j;
            let n = residuals.len() as f64;
            let mut mu = vec![0f64; dim];
            for r in &residuals {
                mu.iter_mut().zip(r).for_each(|(m, &v)| *m += v as f64 / n);
            }
            let var = residuals.iter().flat_map(|r| r.iter().zip(&mu).map(|(&v, m)| (v as f64 - m).powi(2))).sum::<f64>()
                / (n * dim as f64);
            let row = &mut stats.rows[level * (dim + 1)..(level + 1) * (dim + 1)];
            row[..dim].iter_mut().zip(&mu).for_each(|(s, &m)| *s = m as f32);
            row[dim] = var.sqrt().max(1e-6) as f32;
            // This level's effective codebook: embedding_sum / max(cluster_usage, 1e-5).
            let c = format!("quantizer.{which}.vq.layers.{j}._codebook");
            let sum = synthetic::tensor_values(&format!("{c}.embedding_sum"), &[bins, dim], seed, &stats)?;
            let usage = synthetic::tensor_values(&format!("{c}.cluster_usage"), &[bins], seed, &stats)?;
            let book: Vec<f32> = sum.chunks_exact(dim).zip(&usage).flat_map(|(e, &u)| e.iter().map(move |v| v / u.max(1e-5))).collect();
            for r in &mut residuals {
                let best = book
                    .chunks_exact(dim)
                    .map(|e| e.iter().zip(r.iter()).map(|(a, b)| (a - b) * (a - b)).sum::<f32>())
                    .enumerate()
                    .fold((0, f32::INFINITY), |b, (i, d)| if d < b.1 { (i, d) } else { b })
                    .0;
                r.iter_mut().zip(&book[best * dim..(best + 1) * dim]).for_each(|(v, e)| *v -= e);
            }
        }
    }
    synthetic::checkpoint(&specs, seed, &stats)
}
