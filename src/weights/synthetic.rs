//! Deterministic synthetic weights in the real checkpoint format.
//!
//! Every value comes from a seeded hash of the tensor's name and the element's index, so the
//! same checkpoint can be produced in Rust and in Python (`tests/reference/gen_mimi.py`,
//! whose README states the rules). The parity tests regenerate the reference's weights here,
//! write them as a real safetensors file and load that file through the real loader; the
//! offline demo runs on the same checkpoint.

use std::io::Write;

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;

use crate::error::{Error, Result};

/// The seed of the committed reference outputs.
pub const SEED: u64 = 20261129;

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h
}

/// The hash stream of one tensor (`tests/reference/README.md`): `u(i)` uniform in [0, 1) on
/// a 2^-24 grid, `s(i) = 2 u(i) - 1`. Shared by every synthetic weight generator.
#[derive(Clone, Copy)]
pub(crate) struct Stream {
    key: u64,
}

impl Stream {
    pub(crate) fn new(name: &str, seed: u64) -> Self {
        Self { key: fnv1a64(name.as_bytes()) ^ seed }
    }
    /// The 64 hash bits of element `i` (`u(i)` is their top 24 bits over 2^24).
    #[inline(always)]
    pub(crate) fn bits(&self, i: usize) -> u64 {
        let mut z = self.key.wrapping_add((i as u64 + 1).wrapping_mul(0x9E3779B97F4A7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    #[inline(always)]
    pub(crate) fn u(&self, i: usize) -> f64 {
        let mut z = self.key.wrapping_add((i as u64 + 1).wrapping_mul(0x9E3779B97F4A7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^= z >> 31;
        (z >> 40) as f64 / (1u64 << 24) as f64
    }
    #[inline(always)]
    pub(crate) fn s(&self, i: usize) -> f64 {
        2.0 * self.u(i) - 1.0
    }
}

/// Per-level codebook statistics: `mu` (`dim` values) then `sigma`, one row per level,
/// as stored in `tests/golden/mimi_codebook_stats.npy` (`[levels, dim + 1]`).
pub struct CodebookStats {
    pub dim: usize,
    pub rows: Vec<f32>,
}

impl CodebookStats {
    /// Zero mean and unit spread at every level (for checkpoints with no reference clip).
    pub fn unit(levels: usize, dim: usize) -> Self {
        let mut rows = vec![0f32; levels * (dim + 1)];
        for l in 0..levels {
            rows[l * (dim + 1) + dim] = 1.0;
        }
        Self { dim, rows }
    }
    fn level(&self, l: usize) -> Result<(&[f32], f32)> {
        let r = self.rows.get(l * (self.dim + 1)..(l + 1) * (self.dim + 1)).ok_or_else(|| {
            Error::Input(format!("codebook statistics have no row for level {l}"))
        })?;
        Ok((&r[..self.dim], r[self.dim]))
    }
}

fn codebook_level(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("quantizer.rvq_")?;
    let (which, rest) = rest.split_once(".vq.layers.")?;
    let j: usize = rest.split('.').next()?.parse().ok()?;
    match which {
        "first" => Some(0),
        "rest" => Some(1 + j),
        _ => None,
    }
}

fn usage(stream: &Stream, i: usize) -> f32 {
    ((4.0 * stream.u(i)).floor() - 1.0).exp2() as f32
}

/// The values of tensor `name` of `shape`, by the rules of `tests/reference/README.md`.
pub fn tensor_values(name: &str, shape: &[usize], seed: u64, stats: &CodebookStats) -> Result<Vec<f32>> {
    let n: usize = shape.iter().product();
    let st = Stream::new(name, seed);
    let ends = |suffixes: &[&str]| suffixes.iter().any(|s| name.ends_with(s));
    let v: Vec<f32> = if name.ends_with("._codebook._initialized") {
        vec![1.0; n]
    } else if name.ends_with("._codebook.cluster_usage") {
        (0..n).map(|i| usage(&st, i)).collect()
    } else if name.ends_with("._codebook.embedding_sum") {
        let level = codebook_level(name).ok_or_else(|| Error::Input(format!("no codebook level in `{name}`")))?;
        let (mu, sigma) = stats.level(level)?;
        let dim = shape[1];
        if dim != stats.dim {
            return Err(Error::Input(format!("codebook statistics have dim {}, `{name}` has {dim}", stats.dim)));
        }
        let us = Stream::new(&format!("{}.cluster_usage", name.trim_end_matches(".embedding_sum")), seed);
        let sqrt3 = 3f64.sqrt();
        (0..n)
            .map(|i| {
                let (b, c) = (i / dim, i % dim);
                let e = (mu[c] as f64 + sigma as f64 * (st.s(i) * sqrt3)) as f32;
                e * usage(&us, b)
            })
            .collect()
    } else if ends(&["norm1.weight", "norm2.weight"]) {
        (0..n).map(|i| (1.0 + 0.1 * st.s(i)) as f32).collect()
    } else if ends(&["norm1.bias", "norm2.bias"]) || name.ends_with(".bias") {
        (0..n).map(|i| (0.1 * st.s(i)) as f32).collect()
    } else if ends(&["layer_scale_1.scale", "layer_scale_2.scale"]) {
        (0..n).map(|i| (0.1 * (1.0 + 0.5 * st.s(i))) as f32).collect()
    } else if shape.len() >= 2 {
        let fan: usize = shape[1..].iter().product();
        let g = (3.0 / fan as f64).sqrt();
        (0..n).map(|i| (st.s(i) * g) as f32).collect()
    } else {
        return Err(Error::Input(format!("no synthetic rule for tensor `{name}` {shape:?}")));
    };
    Ok(v)
}

/// The values of Moshi LM tensor `name` (released naming) by the rules of
/// `tests/reference/MOSHI.md`: RMSNorm gains `1 + 0.1 s`, embeddings `s`, every linear
/// `s * sqrt(3 / fan)` made exactly representable in Q8_0 (quantized, then dequantized).
pub fn lm_tensor_values(name: &str, shape: &[usize], seed: u64) -> Result<Vec<f32>> {
    let rows = shape.iter().rev().skip(1).product();
    lm_tensor_rows(name, shape, seed, 0..rows)
}

/// [`lm_tensor_values`] of rows `rows` of the tensor alone (its last dimension is a row): the
/// whole tensor's values there, a Q8_0 block never crossing a row. [`Error::Input`] for rows
/// past the tensor's.
pub fn lm_tensor_rows(name: &str, shape: &[usize], seed: u64, rows: std::ops::Range<usize>) -> Result<Vec<f32>> {
    let cols = shape.last().copied().unwrap_or(1);
    let all_rows: usize = shape.iter().rev().skip(1).product();
    if rows.start > rows.end || rows.end > all_rows {
        return Err(Error::Input(format!("rows {rows:?} of tensor `{name}` {shape:?}")));
    }
    let span = rows.start * cols..rows.end * cols;
    let st = Stream::new(name, seed);
    let is_emb = ["emb.", "text_emb.", "depformer_emb.", "depformer_text_emb."].iter().any(|p| name.starts_with(p));
    if name.ends_with(".alpha") {
        return Ok(span.map(|i| (1.0 + 0.1 * st.s(i)) as f32).collect());
    }
    if is_emb {
        return Ok(span.map(|i| st.s(i) as f32).collect());
    }
    if shape.len() != 2 {
        return Err(Error::Input(format!("no synthetic rule for tensor `{name}` {shape:?}")));
    }
    let g = (3.0 / shape[1] as f64).sqrt();
    let w: Vec<f32> = span.map(|i| (st.s(i) * g) as f32).collect();
    let q = crate::weights::q8::Q8Tensor::from_f32(name, rows.len(), cols, &w)?;
    Ok(q.dequantize())
}

/// A complete safetensors checkpoint (f32) holding `specs`, valued by [`tensor_values`].
pub fn checkpoint(specs: &[(String, Vec<usize>)], seed: u64, stats: &CodebookStats) -> Result<Vec<u8>> {
    write_checkpoint(specs, |name, shape| tensor_values(name, shape, seed, stats))
}

/// A complete Moshi LM safetensors checkpoint (f32, released naming), valued by
/// [`lm_tensor_values`].
pub fn lm_checkpoint(specs: &[(String, Vec<usize>)], seed: u64) -> Result<Vec<u8>> {
    write_checkpoint(specs, |name, shape| lm_tensor_values(name, shape, seed))
}

/// A complete Moshi LM safetensors checkpoint, as [`lm_checkpoint`] gives it, written to `out`
/// one tensor at a time: at most one tensor's values in memory (Moshi 7B's f32 file is 31
/// GB). Returns the bytes written; `out`'s errors as they come.
pub fn write_lm_checkpoint(out: &mut dyn Write, specs: &[(String, Vec<usize>)], seed: u64) -> std::io::Result<u64> {
    write_safetensors(out, specs, |name, shape| lm_tensor_values(name, shape, seed))
}

fn write_checkpoint(specs: &[(String, Vec<usize>)], values: impl Fn(&str, &[usize]) -> Result<Vec<f32>>) -> Result<Vec<u8>> {
    let layout = SafetensorsLayout::new(specs).map_err(|e| Error::Checkpoint(e.to_string()))?;
    // the whole file's size at once, as safetensors::serialize takes it: a buffer grown by
    // doubling leaves the allocator's free lists as the loads after it do not expect
    let mut bytes = Vec::with_capacity(layout.len());
    layout.write(&mut bytes, values).map_err(|e| Error::Checkpoint(e.to_string()))?;
    Ok(bytes)
}

/// A safetensors file of f32 `specs`, valued by `values`, written tensor by tensor
/// ([`SafetensorsLayout::write`]).
fn write_safetensors(out: &mut dyn Write, specs: &[(String, Vec<usize>)], values: impl Fn(&str, &[usize]) -> Result<Vec<f32>>) -> std::io::Result<u64> {
    SafetensorsLayout::new(specs)?.write(out, values)
}

/// Where a safetensors file of f32 tensors puts them: the header of
/// `safetensors::serialize` (the tensors in its order, by name; padded with spaces to 8
/// bytes) and the tensors in that order.
struct SafetensorsLayout<'a> {
    header: Vec<u8>,
    order: Vec<&'a (String, Vec<usize>)>,
    data: usize,
}

impl<'a> SafetensorsLayout<'a> {
    fn new(specs: &'a [(String, Vec<usize>)]) -> std::io::Result<Self> {
        let mut order: Vec<&(String, Vec<usize>)> = specs.iter().collect();
        order.sort_by(|a, b| a.0.cmp(&b.0));
        let mut infos = Vec::with_capacity(order.len());
        let mut offset = 0;
        for (name, shape) in &order {
            let n = 4 * shape.iter().product::<usize>();
            infos.push((name.clone(), TensorInfo { dtype: Dtype::F32, shape: shape.clone(), data_offsets: (offset, offset + n) }));
            offset += n;
        }
        let metadata = Metadata::new(None, infos).map_err(std::io::Error::other)?;
        let mut header = serde_json::to_string(&metadata).map_err(std::io::Error::other)?.into_bytes();
        header.resize(header.len().next_multiple_of(8), b' ');
        Ok(Self { header, order, data: offset })
    }

    /// Bytes of the whole file.
    fn len(&self) -> usize {
        8 + self.header.len() + self.data
    }

    /// The header, then each tensor's values as `values` makes them. A value error is `out`'s
    /// error kind `Other` with its message. Returns the bytes written.
    fn write(&self, out: &mut dyn Write, values: impl Fn(&str, &[usize]) -> Result<Vec<f32>>) -> std::io::Result<u64> {
        out.write_all(&(self.header.len() as u64).to_le_bytes())?;
        out.write_all(&self.header)?;
        for (name, shape) in &self.order {
            let v = values(name, shape).map_err(|e| std::io::Error::other(e.to_string()))?;
            out.write_all(bytemuck::cast_slice(&v))?;
        }
        Ok(self.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn specs() -> Vec<(String, Vec<usize>)> {
        vec![
            ("transformer.layers.0.gating.linear_in.weight".into(), vec![64, 32]),
            ("emb.0.weight".into(), vec![9, 16]),
            ("out_norm.alpha".into(), vec![1, 1, 16]),
            ("depformer_in.0.weight".into(), vec![32, 64]),
        ]
    }

    #[test]
    fn the_streamed_checkpoint_is_safetensors_serialize_byte_for_byte() {
        let specs = specs();
        let mut streamed = Vec::new();
        let n = write_lm_checkpoint(&mut streamed, &specs, SEED).unwrap();
        assert_eq!(n as usize, streamed.len());
        let values: Vec<(String, Vec<usize>, Vec<u8>)> = specs
            .iter()
            .map(|(name, shape)| (name.clone(), shape.clone(), bytemuck::cast_slice(&lm_tensor_values(name, shape, SEED).unwrap()).to_vec()))
            .collect();
        let views: Vec<(String, TensorView<'_>)> = values.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap())).collect();
        assert!(streamed == safetensors::serialize(views, None).unwrap());
    }

    #[test]
    fn rows_of_a_tensor_are_the_whole_tensors_values_there() {
        for (name, shape) in specs() {
            let cols = *shape.last().unwrap();
            let rows: usize = shape.iter().rev().skip(1).product();
            let whole = lm_tensor_values(&name, &shape, SEED).unwrap();
            assert_eq!(whole.len(), rows * cols);
            for r in [0..rows, 0..1, rows / 2..rows, rows - 1..rows] {
                assert_eq!(lm_tensor_rows(&name, &shape, SEED, r.clone()).unwrap(), whole[r.start * cols..r.end * cols], "{name} rows {r:?}");
            }
            assert!(lm_tensor_rows(&name, &shape, SEED, 0..rows + 1).is_err(), "{name}: rows past the tensor");
        }
    }
}
