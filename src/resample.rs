//! A streaming sample-rate converter: a Blackman-windowed sinc at any ratio, fed and drained
//! in chunks of any size (an AudioWorklet's 128-sample quanta, Mimi's 1920-sample frames).
//!
//! The browser's AudioContext runs at the device's rate (44.1 or 48 kHz; Firefox refuses a
//! 24 kHz context on a microphone) and Mimi at 24 kHz; this converts between them in the
//! worker, in both directions. Each output sample `y(t)` at input position `t` is
//! `sum_k x[k] c sinc(c (t - k)) w((t - k) / H)`, `c = min(1, to / from)` the low-pass cutoff
//! relative to the input's Nyquist, over the `2 H / c` inputs around `t`. The stream starts
//! with `H / c` zeros of history, so output sample `n` stands for input time `n * from / to`
//! delayed by [`Resampler::latency`] input samples.

use std::collections::VecDeque;
use std::f64::consts::PI;

/// Zero crossings of the sinc on each side of the centre (at the output's cutoff).
const HALF_TAPS: usize = 16;

/// One direction of sample-rate conversion, streaming.
pub struct Resampler {
    from: u32,
    to: u32,
    cutoff: f64,
    /// Half-width of the kernel in input samples.
    half: usize,
    history: VecDeque<f32>,
    /// Position of the next output sample, in input samples from `history[0]`: `ipos +
    /// frac / to`, kept exact so that the stream does not depend on how it is chunked.
    ipos: usize,
    frac: u64,
}

impl Resampler {
    /// From `from` Hz to `to` Hz (both positive; equal rates pass samples through).
    pub fn new(from: u32, to: u32) -> crate::Result<Self> {
        if from == 0 || to == 0 {
            return Err(crate::Error::Input(format!("sample rates must be positive, got {from} Hz -> {to} Hz")));
        }
        let cutoff = (to as f64 / from as f64).min(1.0);
        let half = (HALF_TAPS as f64 / cutoff).ceil() as usize;
        let mut r = Self { from, to, cutoff, half, history: VecDeque::new(), ipos: 0, frac: 0 };
        r.reset();
        Ok(r)
    }

    /// Input rate in Hz.
    pub fn from_rate(&self) -> u32 {
        self.from
    }

    /// Output rate in Hz.
    pub fn to_rate(&self) -> u32 {
        self.to
    }

    /// Delay of the stream in input samples (0 when the rates are equal).
    pub fn latency(&self) -> usize {
        if self.from == self.to { 0 } else { self.half }
    }

    /// Forget the stream: the next sample starts a new one.
    pub fn reset(&mut self) {
        self.history.clear();
        self.history.extend(std::iter::repeat_n(0.0, self.half));
        self.ipos = 0;
        self.frac = 0;
    }

    /// Push `input` and return every output sample it completes (about
    /// `input.len() * to / from`, exactly that over a long stream).
    pub fn process(&mut self, input: &[f32]) -> Vec<f32> {
        if self.from == self.to {
            return input.to_vec();
        }
        self.history.extend(input);
        let mut out = Vec::with_capacity(input.len() * self.to as usize / self.from as usize + 2);
        let h = self.half as f64;
        // Output at `pos` needs inputs up to floor(pos) + half.
        while self.ipos + self.half < self.history.len() {
            let pos = self.ipos as f64 + self.frac as f64 / self.to as f64;
            let centre = self.ipos as isize;
            let mut acc = 0f64;
            for k in (centre - self.half as isize + 1).max(0)..=centre + self.half as isize {
                let d = pos - k as f64;
                let x = d / h;
                if x.abs() >= 1.0 {
                    continue;
                }
                let w = 0.42 + 0.5 * (PI * x).cos() + 0.08 * (2.0 * PI * x).cos();
                let a = self.cutoff * d;
                let sinc = if a.abs() < 1e-12 { 1.0 } else { (PI * a).sin() / (PI * a) };
                acc += self.history[k as usize] as f64 * self.cutoff * sinc * w;
            }
            out.push(acc as f32);
            self.frac += self.from as u64;
            self.ipos += (self.frac / self.to as u64) as usize;
            self.frac %= self.to as u64;
        }
        // Keep the `half` inputs before the next output's centre.
        let drop = self.ipos.saturating_sub(self.half).min(self.history.len());
        self.history.drain(..drop);
        self.ipos -= drop;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(rate: u32, hz: f64, n: usize) -> Vec<f32> {
        (0..n).map(|i| (2.0 * PI * hz * i as f64 / rate as f64).sin() as f32).collect()
    }

    #[test]
    fn chunked_equals_whole_and_a_tone_survives_both_ways() {
        for (from, to) in [(48000, 24000), (44100, 24000), (24000, 48000), (24000, 44100)] {
            let x = sine(from, 1000.0, from as usize / 2);
            let whole = Resampler::new(from, to).unwrap().process(&x);
            let mut r = Resampler::new(from, to).unwrap();
            let chunked: Vec<f32> = x.chunks(128).flat_map(|c| r.process(c)).collect();
            assert_eq!(whole.len(), chunked.len(), "{from} -> {to}: chunked stream length");
            let first = whole.iter().zip(&chunked).position(|(a, b)| a != b);
            assert!(first.is_none(), "{from} -> {to}: chunked stream differs from sample {first:?}");
            // The output is the tone at the new rate, delayed by the latency.
            let delay = r.latency() as f64 / from as f64;
            let want: Vec<f32> = (0..whole.len())
                .map(|n| (2.0 * PI * 1000.0 * (n as f64 / to as f64 - delay)).sin() as f32)
                .collect();
            let skip = 2 * r.latency() * to as usize / from as usize + 4;
            let err = whole[skip..].iter().zip(&want[skip..]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err < 2e-3, "{from} -> {to}: tone error {err}");
            let expected = x.len() as f64 * to as f64 / from as f64;
            assert!((whole.len() as f64 - expected).abs() <= r.latency() as f64 + 2.0, "{from} -> {to}: {} samples", whole.len());
        }
    }

    #[test]
    fn above_the_new_nyquist_is_removed() {
        // 20 kHz at 48 kHz has no place at 24 kHz (Nyquist 12 kHz): it must not alias in.
        let x = sine(48000, 20000.0, 24000);
        let y = Resampler::new(48000, 24000).unwrap().process(&x);
        let rms = (y[200..].iter().map(|v| v * v).sum::<f32>() / (y.len() - 200) as f32).sqrt();
        assert!(rms < 0.01, "aliased energy {rms}");
    }

    #[test]
    fn zero_rate_is_an_error() {
        assert!(Resampler::new(0, 24000).is_err());
    }
}
