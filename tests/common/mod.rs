//! Shared by the native and browser parity tests: the committed reference outputs of
//! Kyutai's Mimi (`tests/golden/`, made by `tests/reference/gen_mimi.py`), the synthetic
//! checkpoint regenerated from the same seed, and the parity gates.
#![allow(dead_code)]

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
pub mod moshi;
pub mod small;

use inferencelayer::weights::synthetic::{self, CodebookStats};
use inferencelayer::MimiConfig;

pub const INPUT_WAV: &[u8] = include_bytes!("../golden/mimi_input.wav");
pub const STATS_NPY: &[u8] = include_bytes!("../golden/mimi_codebook_stats.npy");
pub const CODES_NPY: &[u8] = include_bytes!("../golden/mimi_codes.npy");
pub const LATENT_NPY: &[u8] = include_bytes!("../golden/mimi_latent.npy");
pub const DECODED_NPY: &[u8] = include_bytes!("../golden/mimi_decoded.npy");
pub const TENSORS_JSON: &str = include_str!("../golden/mimi_tensors.json");

/// The reference's inputs and outputs.
pub struct Golden {
    /// The clip, 24 kHz, as the reference saw it (int16 / 32768).
    pub pcm: Vec<f32>,
    /// `[frames][8]` streaming-encode codes.
    pub codes: Vec<Vec<u32>>,
    /// `[frames * 512]` unquantized latents.
    pub latent: Vec<f32>,
    /// `[frames * 1920]` streaming decode of `codes`.
    pub decoded: Vec<f32>,
}

fn npy_f32(bytes: &[u8]) -> Vec<f32> {
    npyz::NpyFile::new(bytes).expect("npy header").into_vec::<f32>().expect("npy f32 data")
}

pub fn golden() -> Golden {
    let mut r = hound::WavReader::new(INPUT_WAV).expect("golden wav");
    let pcm: Vec<f32> = r.samples::<i16>().map(|s| s.expect("sample") as f32 / 32768.0).collect();
    let npy = npyz::NpyFile::new(CODES_NPY).expect("codes npy");
    let shape = npy.shape().to_vec();
    let flat = npy.into_vec::<i64>().expect("codes i64");
    let nq = shape[1] as usize;
    let codes = flat.chunks_exact(nq).map(|r| r.iter().map(|&c| c as u32).collect()).collect();
    Golden { pcm, codes, latent: npy_f32(LATENT_NPY), decoded: npy_f32(DECODED_NPY) }
}

pub fn stats() -> CodebookStats {
    CodebookStats { dim: 256, rows: npy_f32(STATS_NPY) }
}

/// The reference's weights, regenerated: a real-format safetensors file.
pub fn checkpoint_bytes() -> Vec<u8> {
    let cfg = MimiConfig::default();
    synthetic::checkpoint(&cfg.tensor_specs(), synthetic::SEED, &stats()).expect("synthetic checkpoint")
}

/// The encode gate: at least 99% of (frame, codebook) pairs equal and every first-codebook
/// code equal. Returns a description of the agreement either way.
pub fn code_gate(got: &[Vec<u32>], want: &[Vec<u32>]) -> Result<String, String> {
    if got.len() != want.len() {
        return Err(format!("{} frames encoded, the reference has {}", got.len(), want.len()));
    }
    let (mut equal, mut total, mut first_bad) = (0usize, 0usize, Vec::new());
    for (f, (g, w)) in got.iter().zip(want).enumerate() {
        for (k, want_code) in w.iter().enumerate() {
            total += 1;
            if g.get(k) == Some(want_code) {
                equal += 1;
            } else if k == 0 {
                first_bad.push(f);
            }
        }
    }
    let pct = 100.0 * equal as f64 / total as f64;
    let msg = format!("{equal}/{total} codes equal ({pct:.2}%), first codebook differs at frames {first_bad:?}");
    if pct >= 99.0 && first_bad.is_empty() {
        Ok(msg)
    } else {
        Err(msg)
    }
}

/// Signal-to-noise ratio of `got` against `want`, in dB.
pub fn snr_db(got: &[f32], want: &[f32]) -> f64 {
    let (mut s, mut n) = (0f64, 0f64);
    for (g, w) in got.iter().zip(want) {
        s += (*w as f64).powi(2);
        n += (*g as f64 - *w as f64).powi(2);
    }
    10.0 * (s / n.max(1e-30)).log10()
}

/// The browser's clock in ms, for the browser tests' timings.
#[cfg(target_arch = "wasm32")]
pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// Largest absolute difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
