//! [`MoshiSession`]: the full-duplex core the Worker runs, one 80 ms frame per call.
//!
//! Per frame: the user's 1920 samples at 24 kHz in; Mimi's encode (one submit, 32-byte
//! readback), then the LM step and Mimi's decode in one submit (36 bytes of tokens and the
//! 1920 decoded samples back), through [`crate::session::Session`]; out come Moshi's text
//! (decoded by the SentencePiece tokenizer, padding dropped), his audio and the frame's
//! timings.

use std::rc::Rc;

use wasm_bindgen::prelude::*;
use web_sys::AbortSignal;

use super::load::{self, Source};
use super::{js_error, now_ms, set};
use crate::moshi::tokenizer::TextStream;
use crate::moshi::{Sampling, TextTokenizer};
use crate::session::Session;

/// Mimi and Moshi's LM on the Worker's WebGPU device. Build with [`MoshiSession::create`].
#[wasm_bindgen]
pub struct MoshiSession {
    session: Session,
    tokenizer: Option<TextTokenizer>,
    text: TextStream,
    padding: u32,
    frame_size: usize,
    frames: u32,
    adapter: String,
}

#[wasm_bindgen]
impl MoshiSession {
    /// Build both models on a new WebGPU device from whole files' bytes (`File`s the user
    /// picked): a Mimi checkpoint and an LM checkpoint (safetensors or GGUF, Kyutai's names),
    /// their configs as JSON (Kyutai's keys; `undefined` for the released Mimi and Moshi 7B),
    /// an optional SentencePiece tokenizer (without it text events carry token ids only),
    /// and the sampling: Moshi's defaults seeded by `seed`, or greedy. Rejects with the
    /// loader's or the device's error.
    #[allow(clippy::too_many_arguments)]
    pub async fn create(
        mimi: Vec<u8>,
        mimi_config: Option<String>,
        lm: Vec<u8>,
        lm_config: Option<String>,
        tokenizer: Option<Vec<u8>>,
        seed: u32,
        greedy: bool,
    ) -> Result<MoshiSession, JsError> {
        let (ml, ll) = (mimi.len() as u64, lm.len() as u64);
        Self::build(Source::Bytes(&mimi), Some(ml), mimi_config, Source::Bytes(&lm), Some(ll), lm_config, tokenizer, seed, greedy)
            .await
            .map_err(js_error)
    }

    /// [`Self::create`] from URLs: both checkpoints streamed by `fetch` through the model
    /// loaders (the LM straight into GPU buffers; Range resume, the Cache API), with
    /// `mimiProgress` / `lmProgress` called with `{loaded, total, tensor, fromCache,
    /// retries}` and `signal` aborting the load.
    #[allow(clippy::too_many_arguments)]
    pub async fn load(
        mimi_url: String,
        mimi_config: Option<String>,
        lm_url: String,
        lm_config: Option<String>,
        tokenizer: Option<Vec<u8>>,
        seed: u32,
        greedy: bool,
        mimi_progress: Option<js_sys::Function>,
        lm_progress: Option<js_sys::Function>,
        signal: Option<AbortSignal>,
    ) -> Result<MoshiSession, JsError> {
        let mimi = Source::Url { url: &mimi_url, progress: mimi_progress, signal: signal.clone() };
        let lm = Source::Url { url: &lm_url, progress: lm_progress, signal };
        Self::build(mimi, None, mimi_config, lm, None, lm_config, tokenizer, seed, greedy).await.map_err(js_error)
    }

    #[allow(clippy::too_many_arguments)]
    async fn build(
        mimi: Source<'_>,
        mimi_len: Option<u64>,
        mimi_config: Option<String>,
        lm: Source<'_>,
        lm_len: Option<u64>,
        lm_config: Option<String>,
        tokenizer: Option<Vec<u8>>,
        seed: u32,
        greedy: bool,
    ) -> crate::Result<MoshiSession> {
        let mc = load::mimi_config(mimi_config.as_deref())?;
        let lc = load::lm_config(lm_config.as_deref())?;
        let tokenizer = tokenizer.map(|b| load::tokenizer(&b)).transpose()?;
        let ctx = Rc::new(super::limits::gpu_context().await?);
        // both models checked against the device before either download starts
        let limits = ctx.info.limits();
        crate::moshi::requirements(&lc, &limits)?.check()?;
        crate::session::check_configs(&mc, &lc)?;
        let mimi_w = load::mimi_weights(&mc, "mimiConfig", &limits, mimi, mimi_len).await?;
        let lm_w = load::lm_weights(ctx.clone(), &lc, "lmConfig", lm, lm_len).await?;
        let adapter = ctx.info.to_string();
        let sampling = if greedy { Sampling::greedy() } else { Sampling::moshi(seed) };
        let session = Session::new(ctx, &mimi_w, &lm_w, sampling).await?;
        let padding = lc.existing_text_padding_id as u32;
        Ok(Self {
            session,
            tokenizer,
            text: TextStream::new().skip_padding(padding),
            padding,
            frame_size: mc.frame_size(),
            frames: 0,
            adapter,
        })
    }

    /// Samples per frame at 24 kHz (1920).
    #[wasm_bindgen(getter, js_name = frameSize)]
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// The WebGPU adapter, in words.
    #[wasm_bindgen(getter)]
    pub fn adapter(&self) -> String {
        self.adapter.clone()
    }

    /// One frame of the user's audio (`frameSize` samples at 24 kHz). Resolves to
    /// `{ frame, encodeMs, stepMs, token, text, pcm }`: `token` is Moshi's text token (-1
    /// before LMGen yields), `text` its decoded piece (`""` for padding), `pcm` his
    /// `frameSize` samples (empty before LMGen yields, `max(delays)` frames). Rejects on a
    /// frame of the wrong length or a GPU error.
    pub async fn step(&mut self, pcm: Vec<f32>) -> Result<JsValue, JsError> {
        let (out, [encode_ms, step_ms]) = self.session.step_timed(&pcm, now_ms).await.map_err(js_error)?;
        let o = js_sys::Object::new();
        set(&o, "frame", &self.frames.into());
        set(&o, "encodeMs", &encode_ms.into());
        set(&o, "stepMs", &step_ms.into());
        self.frames += 1;
        match out {
            None => {
                set(&o, "token", &(-1).into());
                set(&o, "text", &"".into());
                set(&o, "pcm", &js_sys::Float32Array::new_with_length(0));
            }
            Some(f) => {
                set(&o, "token", &f.text.into());
                let piece = match (&self.tokenizer, u32::try_from(f.text)) {
                    (Some(t), Ok(id)) if !TextTokenizer::is_padding(id, self.padding) => self.text.push(t, id).unwrap_or_default(),
                    _ => String::new(),
                };
                set(&o, "text", &piece.into());
                set(&o, "pcm", &js_sys::Float32Array::from(&f.pcm[..]));
            }
        }
        Ok(o.into())
    }

    /// A new conversation: every stream of both models and the text back to the start.
    pub fn reset(&mut self) {
        self.session.reset();
        self.text = TextStream::new().skip_padding(self.padding);
        self.frames = 0;
    }

    /// Whether the WebGPU device was lost (then every `step` rejects with the loss: load
    /// again to continue on a new device).
    #[wasm_bindgen(getter, js_name = deviceLost)]
    pub fn device_lost(&self) -> bool {
        self.session.context().lost().is_some()
    }

    /// Fault injection (a test hook): destroy this session's WebGPU device, as a driver reset
    /// or the browser reclaiming the GPU would. Every later `step` rejects with the loss
    /// ("GPU device lost: ..."); a new `load` continues on a new device.
    #[wasm_bindgen(js_name = destroyDevice)]
    pub fn destroy_device(&self) {
        self.session.context().destroy();
    }
}

/// Disposing (`free()` from JS) destroys the session's own WebGPU device, so that its GPU
/// memory goes at once rather than when the garbage collector reaches every buffer.
impl Drop for MoshiSession {
    fn drop(&mut self) {
        self.session.context().destroy();
    }
}

impl MoshiSession {
    /// The session underneath (its GPU context, for Rust callers and tests).
    pub fn session(&self) -> &Session {
        &self.session
    }
}
