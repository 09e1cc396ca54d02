//! The CPU implementation of the codec: plain loops over the same weights, in the
//! reference's order of operations. Tests hold the GPU plans to it and it to Kyutai's
//! reference outputs.

use super::conv::Conv1dState;
use super::seanet::SeanetState;
use super::transformer::TransformerState;
use super::MimiWeights;
use crate::error::{Error, Result};

/// Streaming CPU codec over borrowed weights; one encode and one decode stream.
pub struct MimiCpu<'a> {
    w: &'a MimiWeights,
    enc: SeanetState,
    enc_tr: TransformerState,
    down: Conv1dState,
    up: super::conv::ConvTr1dState,
    dec_tr: TransformerState,
    dec: SeanetState,
}

impl<'a> MimiCpu<'a> {
    pub fn new(w: &'a MimiWeights) -> Self {
        Self {
            w,
            enc: w.encoder.state(),
            enc_tr: w.encoder_transformer.state(),
            down: w.downsample.state(),
            up: w.upsample.state(),
            dec_tr: w.decoder_transformer.state(),
            dec: w.decoder.state(),
        }
    }

    /// Start fresh streams.
    pub fn reset(&mut self) {
        *self = Self::new(self.w);
    }

    /// The unquantized latent `[dimension]` of one frame of `frame_size` samples.
    pub fn encode_latent(&mut self, pcm: &[f32]) -> Result<Vec<f32>> {
        let fs = self.w.frame_size();
        if pcm.len() != fs {
            return Err(Error::Input(format!("a frame is {fs} samples, got {}", pcm.len())));
        }
        let d = self.w.config.seanet.dimension;
        let y = self.w.encoder.step(&mut self.enc, pcm);
        let t = y.len() / d;
        let mut tm = transpose(&y, d, t);
        self.w.encoder_transformer.step(&mut self.enc_tr, &mut tm);
        let ct = transpose(&tm, t, d);
        Ok(self.w.downsample.step(&mut self.down, &ct, false))
    }

    /// Codes of one frame (mirrors `MimiModel.encode` in streaming mode).
    pub fn encode_frame(&mut self, pcm: &[f32]) -> Result<Vec<u32>> {
        let latent = self.encode_latent(pcm)?;
        Ok(self.w.quantizer.encode(&latent))
    }

    /// `frame_size` samples from one frame of codes (mirrors `MimiModel.decode`).
    pub fn decode_frame(&mut self, frame: usize, codes: &[u32]) -> Result<Vec<f32>> {
        self.w.quantizer.check_codes(frame, codes)?;
        let d = self.w.config.seanet.dimension;
        let latent = self.w.quantizer.decode(codes);
        let up = self.w.upsample.step(&mut self.up, &latent, false);
        let t = up.len() / d;
        let mut tm = transpose(&up, d, t);
        self.w.decoder_transformer.step(&mut self.dec_tr, &mut tm);
        let ct = transpose(&tm, t, d);
        Ok(self.w.decoder.step(&mut self.dec, &ct))
    }
}

/// `[rows, cols]` -> `[cols, rows]`.
fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut y = vec![0f32; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            y[c * rows + r] = x[r * cols + c];
        }
    }
    y
}
