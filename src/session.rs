//! A full-duplex Moshi session on one GPU: per 80 ms frame, the user's audio in, Moshi's
//! text token and audio out.
//!
//! Per frame: Mimi encodes the user's 1920 samples (one replay of its plan in a few submits
//! recorded during the frame before; 32-byte readback), LMGen turns the user's codes into
//! the LM's 17 input tokens, then one replay (`gpu::FrameRecorder`) runs the LM step
//! and, once LMGen yields output, Mimi's decode plan reading Moshi's realigned audio codes
//! straight from the LM's token buffer (no CPU round trip): 36 bytes of tokens and the
//! 1920 decoded samples come back.

use std::rc::Rc;

use crate::error::{Error, Result};
use crate::gpu::GpuContext;
use crate::mimi::{Mimi, MimiWeights};
use crate::moshi::{Lm, LmGen, LmGpuWeights, Sampling};

/// One output frame of a session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionFrame {
    /// Moshi's text token (ids of the text tokenizer; `existing_text_padding_id` is silence).
    pub text: i32,
    /// Moshi's `dep_q` audio codes of this frame.
    pub audio_codes: Vec<u32>,
    /// The decoded 1920 samples at 24 kHz.
    pub pcm: Vec<f32>,
}

/// Mimi and the LM wired together. Build with [`Session::new`].
pub struct Session {
    mimi: Mimi,
    lm: Lm,
    gen: LmGen,
    user_streams: usize,
    max_delay: usize,
}

/// Whether a codec of `mimi` and an LM of `lm` can run together, from their configs alone
/// (before any download): Mimi must run the LM's `dep_q` codebooks and its codebooks must
/// cover the LM's `card`. [`Error::Config`] naming the key otherwise. [`Session::new`]
/// checks the same of the loaded weights.
pub fn check_configs(mimi: &crate::MimiConfig, lm: &crate::moshi::LmConfig) -> Result<()> {
    if mimi.num_codebooks != lm.dep_q {
        return Err(Error::config("num_codebooks", format!("the codec runs {} codebooks, the LM generates {}: give a Mimi config with num_codebooks {}", mimi.num_codebooks, lm.dep_q, lm.dep_q)));
    }
    if lm.card > mimi.quantizer.bins {
        return Err(Error::config("card", format!("the LM's {} audio tokens exceed the codec's {} bins", lm.card, mimi.quantizer.bins)));
    }
    Ok(())
}

impl Session {
    /// Build both models' plans on `ctx`, the LM over its GPU-resident weights (streamed by
    /// [`crate::moshi::LmLoader`] or uploaded by [`LmGpuWeights::upload`]). The codec must run
    /// `dep_q` codebooks and its codebooks must cover the LM's `card`; otherwise
    /// [`Error::Config`] says which.
    pub async fn new(ctx: Rc<GpuContext>, mimi: &MimiWeights, lm: &LmGpuWeights, sampling: Sampling) -> Result<Self> {
        let c = &lm.config;
        if mimi.quantizer.num_codebooks() != c.dep_q {
            return Err(Error::config(
                "num_codebooks",
                format!("the codec runs {} codebooks, the LM generates {}", mimi.quantizer.num_codebooks(), c.dep_q),
            ));
        }
        if c.card > mimi.config.quantizer.bins {
            return Err(Error::config("card", format!("the LM's {} audio tokens exceed the codec's {} bins", c.card, mimi.config.quantizer.bins)));
        }
        let lm_gpu = Lm::new(ctx.clone(), lm, sampling).await?;
        let mimi_gpu = Mimi::with_codes_source(ctx, mimi, Some((lm_gpu.realigned_tokens(), 1))).await?;
        Ok(Self { mimi: mimi_gpu, lm: lm_gpu, gen: LmGen::new(c), user_streams: c.user_streams(), max_delay: c.max_delay() })
    }

    /// One frame of the user's audio: `frame_size` samples at 24 kHz. Returns Moshi's frame
    /// once LMGen yields (after `max(delays)` frames), else `None`.
    pub async fn step(&mut self, pcm: &[f32]) -> Result<Option<SessionFrame>> {
        let codes = self.mimi.encode_frame(pcm).await?;
        let user = codes.get(..self.user_streams).ok_or_else(|| {
            Error::Input(format!("the codec gave {} codes, the LM takes {} user streams", codes.len(), self.user_streams))
        })?;
        self.step_codes(user).await
    }

    /// [`Self::step`], also giving the milliseconds `now` (a clock in ms) saw for Mimi's
    /// encode (submit and codes readback) and for the LM step with Mimi's decode (submit and
    /// both readbacks): `[encode, lm_and_decode]`.
    pub async fn step_timed(&mut self, pcm: &[f32], now: impl Fn() -> f64) -> Result<(Option<SessionFrame>, [f64; 2])> {
        let t0 = now();
        let codes = self.mimi.encode_frame(pcm).await?;
        let t1 = now();
        let user = codes.get(..self.user_streams).ok_or_else(|| {
            Error::Input(format!("the codec gave {} codes, the LM takes {} user streams", codes.len(), self.user_streams))
        })?;
        let out = self.step_codes(user).await?;
        Ok((out, [t1 - t0, now() - t1]))
    }

    /// One frame given the user's audio codes directly (`n_q - dep_q` codes below `card`).
    pub async fn step_codes(&mut self, user_codes: &[u32]) -> Result<Option<SessionFrame>> {
        let input = self.gen.input(user_codes)?;
        let yields = self.gen.offset() + 1 > self.max_delay;
        if yields {
            self.mimi.prepare_decode();
            let (buf, rb) = self.mimi.decode_output();
            self.lm.submit(&input, Some((self.mimi.decode_plan(), buf, rb)))?;
        } else {
            self.lm.submit(&input, None)?;
        }
        let tokens = self.lm.read_tokens().await?;
        match self.gen.output(&tokens) {
            None => Ok(None),
            Some(row) => {
                let pcm = self.mimi.read_decoded().await?;
                Ok(Some(SessionFrame { text: row[0], audio_codes: row[1..].iter().map(|&t| t.max(0) as u32).collect(), pcm }))
            }
        }
    }

    /// The GPU context both models run on (to watch for or provoke a device loss: after
    /// one every call fails with [`Error::DeviceLost`] and the session must be built again,
    /// on a new [`GpuContext`]).
    pub fn context(&self) -> &Rc<GpuContext> {
        self.lm.context()
    }

    /// A new conversation: every stream of both models back to its start.
    pub fn reset(&mut self) {
        self.mimi.reset();
        self.lm.reset();
        self.gen = LmGen::new_like(&self.gen);
    }
}
