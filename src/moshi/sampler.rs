//! Token sampling (moshi.utils.sampling `sample_token`): greedy at temperature 0, else a
//! softmax sample at the temperature over the top-k logits, drawn by the Gumbel-max trick
//! (`argmax(l / T + g)`, g Gumbel noise, is a sample of `softmax(l / T)`). The noise comes
//! from a hash of (seed, frame, stream, index), the same on the GPU (`shaders/sample.wgsl`,
//! `shaders/sample_radix8.wgsl`) and here, so a seeded session replays.

/// Temperature and top-k of one kind of stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamSampling {
    /// 0 for greedy.
    pub temperature: f32,
    /// 0 for no restriction.
    pub top_k: usize,
}

/// Sampling of a session: text, audio and the seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    pub text: StreamSampling,
    pub audio: StreamSampling,
    pub seed: u32,
}

impl Sampling {
    /// LMGen's defaults: audio temperature 0.8 top-k 250, text temperature 0.7 top-k 25.
    pub fn moshi(seed: u32) -> Self {
        Self {
            text: StreamSampling { temperature: 0.7, top_k: 25 },
            audio: StreamSampling { temperature: 0.8, top_k: 250 },
            seed,
        }
    }

    /// Greedy on every stream (`LMGen(use_sampling=False)`).
    pub fn greedy() -> Self {
        let g = StreamSampling { temperature: 0.0, top_k: 0 };
        Self { text: g, audio: g, seed: 0 }
    }
}

fn pcg(v: u32) -> u32 {
    let s = v.wrapping_mul(747796405).wrapping_add(2891336453);
    let w = ((s >> ((s >> 28) + 4)) ^ s).wrapping_mul(277803737);
    (w >> 22) ^ w
}

/// The uniform draw in (0, 1) of `shaders/sample.wgsl` for (seed, frame, stream, index).
pub fn uniform01(seed: u32, frame: u32, stream: u32, i: u32) -> f32 {
    let h = pcg(pcg(pcg(pcg(seed) ^ frame) ^ stream) ^ i);
    ((h >> 8) as f32 + 0.5) / 16777216.0
}

/// The CPU mirror of the GPU sampler.
pub fn sample_cpu(logits: &[f32], s: StreamSampling, seed: u32, frame: u32, stream: u32) -> i32 {
    let greedy = s.temperature <= 0.0;
    let threshold = if !greedy && s.top_k > 0 && s.top_k < logits.len() {
        let mut sorted: Vec<f32> = logits.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        Some(sorted[s.top_k - 1])
    } else {
        None
    };
    let mut best: Option<(f32, usize)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if threshold.is_some_and(|t| l < t) {
            continue;
        }
        let v = if greedy { l } else { l * (1.0 / s.temperature) - (-(uniform01(seed, frame, stream, i as u32)).ln()).ln() };
        if best.is_none_or(|(b, _)| v > b) {
            best = Some((v, i));
        }
    }
    best.map_or(0, |(_, i)| i as i32)
}
