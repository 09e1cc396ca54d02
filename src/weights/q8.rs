//! Q8_0, ggml's 8-bit block quantization, in the layout the GPU kernels read.
//!
//! # Quantization (ggml's `quantize_row_q8_0_ref`, exactly)
//! A row is cut into blocks of [`BLOCK`] = 32 consecutive values along its last dimension
//! (the input dimension of a `[out, in]` linear weight). For each block:
//! `amax = max |x|`, `d = amax / 127` (f32), `id = 1 / d` (0 when `d` is 0),
//! `q = round(x * id)` with ties away from zero (C's `roundf`), clamped to `[-127, 127]`,
//! and the block's scale is stored as `f16(d)` (round to nearest even). A value decodes as
//! `q * f32(f16(d))`. Values of the form `q * s` with `s` an f16 and one `|q| = 127` in the
//! block come back exactly.
//!
//! ggml leaves non-finite input and scales beyond f16's range (`amax > ~8.3e6`) undefined;
//! here they are refused with [`Error::Quant`] naming the tensor and the row.
//!
//! # GPU layout ([`Q8Tensor`])
//! Quants and scales sit in two separate `u32` arrays (two storage buffers, each 4-byte
//! aligned, unlike ggml's 34-byte blocks):
//! - `quants`: every `q` as an `i8`, row-major over the whole tensor; element `i = r * cols
//!   + c` is byte `i % 4` (little-endian: bits `8 * (i % 4) .. 8 * (i % 4) + 8`) of word
//!   `i / 4`, two's complement. In WGSL: `unpack4xI8(quants[i / 4])[i % 4]`. A block is 8
//!   whole words, so block `b` starts at word `8 * b`.
//! - `scales`: the f16 bits of block `b = r * (cols / 32) + c / 32` in half `b % 2` of word
//!   `b / 2` (low half first: bits `16 * (b % 2) .. 16 * (b % 2) + 16`). In WGSL:
//!   `unpack2x16float(scales[b / 2])[b % 2]`. When the tensor has an odd number of
//!   blocks the high half of the last word is 0 (padding).
//!
//! Byte sizes: `rows * cols` for the quants, `4 * ceil(rows * cols / 64)` for the scales
//! (see [`Q8Tensor::buffer_sizes`]).

use half::{bf16, f16};

use crate::error::{Error, Result};

/// Values per Q8_0 block, along the last dimension.
pub const BLOCK: usize = 32;

/// One quantized block: the f16 bits of its scale and its 32 quants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Q8Block {
    /// Bits of the f16 scale `d`.
    pub d: u16,
    /// The quants, each in `[-127, 127]` when made by [`quantize_block`] (a repacked
    /// ggml block may hold -128).
    pub qs: [i8; BLOCK],
}

impl Q8Block {
    /// The block's scale as f32.
    pub fn scale(&self) -> f32 {
        f16::from_bits(self.d).to_f32()
    }

    /// The 32 decoded values, `q * scale`.
    pub fn dequantize(&self) -> [f32; BLOCK] {
        let d = self.scale();
        let mut out = [0f32; BLOCK];
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = q as f32 * d;
        }
        out
    }
}

/// `round(t)` with ties away from zero, as C's `roundf`, for `|t| <= 128`; larger `|t|`
/// gives +-128 and NaN gives 0 (both then clamped by the caller).
///
/// `f32::round` compiles to a libm call per element on baseline x86-64 (no SSE4.1); this
/// form vectorizes. For `|t| < 2^23`, `|t| - trunc(|t|)` is exact, so comparing it with 0.5
/// decides the tie exactly as `roundf` does. `|t|` exceeds 127 only when `1 / d` is
/// inexact or infinite, for blocks whose `d` is far below f16's range (the stored scale is
/// then 0 and every value decodes to 0 whatever its quant); ggml leaves that case undefined.
#[inline(always)]
fn round_away(t: f32) -> i32 {
    let a = t.abs();
    let a = if a <= 128.0 {
        a
    } else if a > 128.0 {
        128.0
    } else {
        0.0
    };
    let i = a as i32;
    let r = i + ((a - i as f32) >= 0.5) as i32;
    if t < 0.0 {
        -r
    } else {
        r
    }
}

/// Quantize one block by ggml's rules (see the module doc). `None` when a value is not
/// finite or the scale `amax / 127` does not fit an f16 (`amax` above about 8.3e6).
#[inline]
pub fn quantize_block(x: &[f32; BLOCK]) -> Option<Q8Block> {
    // |x| as bits: for non-negative floats the integer order is the float order, and the
    // integer max vectorizes; bits at or above 0x7f80_0000 are infinity or NaN
    let mut amax_bits = 0u32;
    for &v in x {
        amax_bits = amax_bits.max(v.to_bits() & 0x7fff_ffff);
    }
    if amax_bits >= 0x7f80_0000 {
        return None;
    }
    let amax = f32::from_bits(amax_bits);
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let dh = f16::from_f32(d);
    if dh.is_infinite() {
        return None;
    }
    let mut qs = [0i8; BLOCK];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = round_away(v * id).clamp(-127, 127) as i8;
    }
    Some(Q8Block { d: dh.to_bits(), qs })
}

pub(crate) fn block_error(name: &str, cols: usize, block_index: usize, x: &[f32; BLOCK]) -> Error {
    let (row, col) = (block_index * BLOCK / cols.max(1), block_index * BLOCK % cols.max(1));
    let why = match x.iter().position(|v| !v.is_finite()) {
        Some(k) => format!("value {} at row {row}, column {} is not finite", x[k], col + k),
        None => {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            format!(
                "block at row {row}, columns {col}..{}: max |x| = {amax:e} gives a scale beyond f16's range",
                col + BLOCK
            )
        }
    };
    Error::Quant { name: name.to_string(), why }
}

/// Quantize one row (`x.len()` a multiple of 32) into its blocks. `name` only labels the
/// errors: [`Error::Quant`] for a row length that is not a multiple of 32, a value that is not
/// finite or a block scale beyond f16's range.
pub fn quantize_row(name: &str, x: &[f32]) -> Result<Vec<Q8Block>> {
    check_cols(name, x.len())?;
    let mut out = Vec::with_capacity(x.len() / BLOCK);
    for (b, c) in x.chunks_exact(BLOCK).enumerate() {
        let blk: &[f32; BLOCK] = c.try_into().map_err(|_| Error::Quant { name: name.into(), why: "block".into() })?;
        out.push(quantize_block(blk).ok_or_else(|| block_error(name, x.len(), b, blk))?);
    }
    Ok(out)
}

/// Refuse a row length that Q8_0 cannot cut into blocks of 32.
pub fn check_cols(name: &str, cols: usize) -> Result<()> {
    if cols % BLOCK != 0 || cols == 0 {
        return Err(Error::Quant {
            name: name.to_string(),
            why: format!("the last dimension is {cols}, not a positive multiple of {BLOCK}"),
        });
    }
    Ok(())
}

/// A `[rows, cols]` matrix in Q8_0, laid out for the GPU (see the module doc for the exact
/// bits). `cols` is a multiple of 32. Built whole by the `from_*` converters, or block by
/// block in row-major order by [`Q8Tensor::with_shape`] and [`Q8Tensor::push_block`] (the
/// streaming loader's path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Q8Tensor {
    /// Rows (every dimension but the last, multiplied).
    pub rows: usize,
    /// Row length (the last dimension), a multiple of 32.
    pub cols: usize,
    /// `rows * cols / 4` words: four i8 quants each, little-endian, row-major.
    pub quants: Vec<u32>,
    /// `ceil(rows * cols / 64)` words: two f16 scale bits each, low half first, the high half
    /// of the last word 0 when the block count is odd.
    pub scales: Vec<u32>,
}

impl Q8Tensor {
    /// An empty tensor of `[rows, cols]` with room for all its blocks, to be filled by
    /// [`Q8Tensor::push_block`]. [`Error::Quant`] when `cols` is not a multiple of 32.
    pub fn with_shape(name: &str, rows: usize, cols: usize) -> Result<Self> {
        check_cols(name, cols)?;
        let (qb, sb) = Self::buffer_sizes(rows, cols);
        Ok(Self {
            rows,
            cols,
            quants: Vec::with_capacity(qb as usize / 4),
            scales: Vec::with_capacity(sb as usize / 4),
        })
    }

    /// Byte sizes of the quants and the scales buffers of a `[rows, cols]` tensor.
    pub fn buffer_sizes(rows: usize, cols: usize) -> (u64, u64) {
        let n = rows as u64 * cols as u64;
        let blocks = n / BLOCK as u64;
        (n, blocks.div_ceil(2) * 4)
    }

    /// Blocks in the whole tensor.
    pub fn blocks(&self) -> usize {
        self.rows * self.cols / BLOCK
    }

    /// Blocks pushed so far.
    pub fn filled(&self) -> usize {
        self.quants.len() / 8
    }

    /// Whether every block has been pushed.
    pub fn is_complete(&self) -> bool {
        self.filled() == self.blocks()
    }

    /// Append the next block in row-major order. The caller keeps to `blocks()` pushes.
    #[inline]
    pub fn push_block(&mut self, b: &Q8Block) {
        let mut words = [0u32; BLOCK / 4];
        for (w, q) in words.iter_mut().zip(b.qs.chunks_exact(4)) {
            *w = u32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8]);
        }
        self.quants.extend_from_slice(&words);
        let k = self.filled() - 1;
        if k % 2 == 0 {
            self.scales.push(b.d as u32);
        } else if let Some(last) = self.scales.last_mut() {
            *last |= (b.d as u32) << 16;
        }
    }

    /// Quantize a row-major `[rows, cols]` f32 matrix. [`Error::Quant`] (naming `name`) for
    /// `cols` not a multiple of 32, non-finite values or out-of-range scales; [`Error::Shape`]
    /// when `data.len() != rows * cols`.
    pub fn from_f32(name: &str, rows: usize, cols: usize, data: &[f32]) -> Result<Self> {
        let mut t = Self::with_shape(name, rows, cols)?;
        if data.len() != rows * cols {
            return Err(Error::Shape { name: name.into(), expected: vec![rows, cols], found: vec![data.len()] });
        }
        for (b, c) in data.chunks_exact(BLOCK).enumerate() {
            let blk: &[f32; BLOCK] =
                c.try_into().map_err(|_| Error::Quant { name: name.into(), why: "block".into() })?;
            t.push_block(&quantize_block(blk).ok_or_else(|| block_error(name, cols, b, blk))?);
        }
        Ok(t)
    }

    /// Quantize a row-major f16 matrix (values widened to f32 first, exactly).
    pub fn from_f16(name: &str, rows: usize, cols: usize, data: &[f16]) -> Result<Self> {
        Self::from_f32(name, rows, cols, &data.iter().map(|v| v.to_f32()).collect::<Vec<_>>())
    }

    /// Quantize a row-major bf16 matrix (values widened to f32 first, exactly).
    pub fn from_bf16(name: &str, rows: usize, cols: usize, data: &[bf16]) -> Result<Self> {
        Self::from_f32(name, rows, cols, &data.iter().map(|v| v.to_f32()).collect::<Vec<_>>())
    }

    /// Quant of element `i` (row-major index).
    pub fn quant(&self, i: usize) -> i8 {
        (self.quants[i / 4] >> (8 * (i % 4))) as u8 as i8
    }

    /// f16 bits of the scale of block `b`.
    pub fn scale_bits(&self, b: usize) -> u16 {
        (self.scales[b / 2] >> (16 * (b % 2))) as u16
    }

    /// Block `b` (row-major block index).
    pub fn block(&self, b: usize) -> Q8Block {
        let mut qs = [0i8; BLOCK];
        for (k, q) in qs.iter_mut().enumerate() {
            *q = self.quant(b * BLOCK + k);
        }
        Q8Block { d: self.scale_bits(b), qs }
    }

    /// Every value decoded, `q * f32(f16 scale)`, row-major: the values a GPU kernel reading
    /// this layout sees (the CPU oracle of the Q8_0 path).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for b in 0..self.filled() {
            out.extend_from_slice(&self.block(b).dequantize());
        }
        out
    }

    /// The quants buffer's bytes.
    pub fn quants_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.quants)
    }

    /// The scales buffer's bytes.
    pub fn scales_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.scales)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (splitmix64) for test data.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            z ^ (z >> 31)
        }
        fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32
        }
    }

    #[test]
    fn round_away_matches_roundf() {
        let mut cases: Vec<f32> = vec![0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 126.5, 127.49999, 1e-30, -1e-30];
        for k in 0..130 {
            let h = k as f32 + 0.5;
            cases.extend([h, -h, f32::from_bits(h.to_bits() - 1), f32::from_bits(h.to_bits() + 1)]);
        }
        cases.push(f32::from_bits(0.5f32.to_bits() - 1)); // 0.49999997: `x + 0.5` in f32 would round to 1
        cases.extend([8388607.5, -8388607.5, 4194303.5, 1e-45, 127.5, -127.5]);
        let mut rng = Rng(7);
        for _ in 0..2_000_000 {
            cases.push((rng.unit() * 2.0 - 1.0) * 130.0);
        }
        for t in cases {
            let want = if t.abs() > 128.0 { 128 * t.signum() as i32 } else { t.round() as i32 };
            assert_eq!(round_away(t), want, "t = {t:e}");
        }
        assert_eq!(round_away(f32::NAN), 0);
        assert_eq!(round_away(f32::INFINITY), 128);
        assert_eq!(round_away(f32::NEG_INFINITY), -128);
    }

    #[test]
    fn representable_values_are_lossless() {
        let mut rng = Rng(1);
        let (rows, cols) = (5, 96);
        let mut x = vec![0f32; rows * cols];
        let mut want_q = vec![0i8; rows * cols];
        let mut want_d = vec![];
        for (b, blk) in x.chunks_exact_mut(BLOCK).enumerate() {
            // f16 scales across the normal range, from 2^-14 up to about 500
            let s = f16::from_f32((rng.unit() * 23.0 - 14.0).exp2() * (1.0 + rng.unit()));
            want_d.push(s.to_bits());
            let top = (rng.next() % 32) as usize;
            for (k, v) in blk.iter_mut().enumerate() {
                let q: i32 = if k == top {
                    if rng.next() % 2 == 0 {
                        127
                    } else {
                        -127
                    }
                } else {
                    (rng.next() % 255) as i32 - 127
                };
                want_q[b * BLOCK + k] = q as i8;
                *v = q as f32 * s.to_f32();
            }
        }
        let t = Q8Tensor::from_f32("w", rows, cols, &x).unwrap();
        for (b, &d) in want_d.iter().enumerate() {
            assert_eq!(t.scale_bits(b), d, "block {b}");
        }
        for (i, &q) in want_q.iter().enumerate() {
            assert_eq!(t.quant(i), q, "element {i}");
        }
        assert_eq!(t.dequantize(), x);
    }

    #[test]
    fn random_data_within_half_a_step() {
        let mut rng = Rng(2);
        let (rows, cols) = (64, 256);
        let x: Vec<f32> = (0..rows * cols).map(|i| (rng.unit() * 2.0 - 1.0) * (1.0 + (i % 7) as f32)).collect();
        let t = Q8Tensor::from_f32("w", rows, cols, &x).unwrap();
        let y = t.dequantize();
        for (b, blk) in x.chunks_exact(BLOCK).enumerate() {
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            // half a quantization step, plus the f16 rounding of d times the largest quant
            let bound = 0.5 * d + 127.0 * d * 2f32.powi(-11) + 1e-6 * amax;
            for k in 0..BLOCK {
                let e = (blk[k] - y[b * BLOCK + k]).abs();
                assert!(e <= bound, "block {b} element {k}: error {e} > {bound}");
            }
        }
    }

    #[test]
    fn layout_bytes() {
        // two blocks in one row, then a third: an odd block count pads the last scale word
        let mut x = vec![0f32; 96];
        for (i, v) in x.iter_mut().enumerate() {
            *v = (i as f32 - 16.0)
                * if i < 32 {
                    1.0
                } else if i < 64 {
                    -0.5
                } else {
                    0.25
                };
        }
        let t = Q8Tensor::from_f32("w", 1, 96, &x).unwrap();
        let blocks: Vec<Q8Block> = quantize_row("w", &x).unwrap();
        assert_eq!(t.quants.len(), 24);
        assert_eq!(t.scales.len(), 2);
        let qb = t.quants_bytes();
        for (b, blk) in blocks.iter().enumerate() {
            for k in 0..BLOCK {
                assert_eq!(qb[b * BLOCK + k], blk.qs[k] as u8, "quant byte {b}/{k}");
            }
        }
        // word 0 holds elements 0..4, element 0 in the low byte
        assert_eq!(t.quants[0] & 0xff, blocks[0].qs[0] as u8 as u32);
        assert_eq!(t.quants[0] >> 24, blocks[0].qs[3] as u8 as u32);
        let sb = t.scales_bytes();
        assert_eq!(&sb[0..2], &blocks[0].d.to_le_bytes());
        assert_eq!(&sb[2..4], &blocks[1].d.to_le_bytes());
        assert_eq!(&sb[4..6], &blocks[2].d.to_le_bytes());
        assert_eq!(&sb[6..8], &[0, 0]);
        assert_eq!(t.scales[0], blocks[0].d as u32 | (blocks[1].d as u32) << 16);
        // block 0: amax = 16 (x[0] = -16), d = 16/127, q(-16) = -127, q(15) = 119
        assert_eq!(blocks[0].d, f16::from_f32(16.0 / 127.0).to_bits());
        assert_eq!(blocks[0].qs[0], -127);
        assert_eq!(blocks[0].qs[31], (15.0f32 * (127.0 / 16.0)).round() as i8);
        assert_eq!(Q8Tensor::buffer_sizes(1, 96), (96, 8));
    }

    #[test]
    fn blocks_far_below_f16_range_are_defined() {
        // amax / 127 is a subnormal f32 whose reciprocal overflows: q is clamped, the scale is 0
        let mut x = [0f32; BLOCK];
        x[3] = 2e-43;
        x[4] = -2e-43;
        let b = quantize_block(&x).unwrap();
        assert_eq!(b.d, 0);
        assert_eq!((b.qs[0], b.qs[3], b.qs[4]), (0, 127, -127));
        assert_eq!(b.dequantize(), [0.0; BLOCK]);
    }

    #[test]
    fn zero_block_has_zero_scale() {
        let b = quantize_block(&[0.0; BLOCK]).unwrap();
        assert_eq!(b.d, 0);
        assert_eq!(b.qs, [0; BLOCK]);
    }

    #[test]
    fn converters_agree() {
        let mut rng = Rng(3);
        let h: Vec<f16> = (0..128).map(|_| f16::from_f32(rng.unit() - 0.5)).collect();
        let bh: Vec<bf16> = h.iter().map(|v| bf16::from_f32(v.to_f32())).collect();
        let a = Q8Tensor::from_f16("w", 2, 64, &h).unwrap();
        let b = Q8Tensor::from_f32("w", 2, 64, &h.iter().map(|v| v.to_f32()).collect::<Vec<_>>()).unwrap();
        assert_eq!(a, b);
        let c = Q8Tensor::from_bf16("w", 2, 64, &bh).unwrap();
        let d = Q8Tensor::from_f32("w", 2, 64, &bh.iter().map(|v| v.to_f32()).collect::<Vec<_>>()).unwrap();
        assert_eq!(c, d);
    }

    #[test]
    fn bad_input_is_named() {
        let e = Q8Tensor::from_f32("layer.w", 1, 48, &[0.0; 48]).unwrap_err();
        assert!(matches!(&e, Error::Quant { name, .. } if name == "layer.w"), "{e}");
        let mut x = vec![0f32; 64];
        x[40] = f32::NAN;
        let e = Q8Tensor::from_f32("layer.w", 1, 64, &x).unwrap_err();
        assert!(e.to_string().contains("column 40"), "{e}");
        x[40] = 1e7;
        let e = Q8Tensor::from_f32("layer.w", 1, 64, &x).unwrap_err();
        assert!(e.to_string().contains("f16"), "{e}");
        let e = Q8Tensor::from_f32("layer.w", 2, 64, &x).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }));
    }
}
