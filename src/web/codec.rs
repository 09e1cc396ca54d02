//! [`MimiCodec`]: Mimi alone on the Worker's WebGPU device, frame by frame (the codec
//! loopback of the web app, and a codec API of its own); [`mimi_cpu_roundtrip`]: the CPU
//! oracle over a clip, to hold the GPU's output to.

use std::rc::Rc;

use wasm_bindgen::prelude::*;
use web_sys::AbortSignal;

use super::load::{self, Source};
use super::{js_error, now_ms, set};
use crate::mimi::{Mimi, MimiCpu};

/// The streaming codec on the GPU. Build with [`MimiCodec::create`].
#[wasm_bindgen]
pub struct MimiCodec {
    mimi: Mimi,
    frame_size: usize,
    num_codebooks: usize,
    decoded: usize,
    adapter: String,
}

#[wasm_bindgen]
impl MimiCodec {
    /// Build both plans on a new WebGPU device from a Mimi checkpoint's bytes (safetensors,
    /// Kyutai's names) and its config as JSON (`undefined`: the released codec, 8
    /// codebooks). Rejects with the loader's or the device's error.
    pub async fn create(mimi: Vec<u8>, config: Option<String>) -> Result<MimiCodec, JsError> {
        let len = mimi.len() as u64;
        Self::build(Source::Bytes(&mimi), Some(len), config).await.map_err(js_error)
    }

    /// [`Self::create`] from a URL, streamed by `fetch` (progress `{loaded, total, tensor,
    /// fromCache, retries}` to `progress`; `signal` aborts).
    pub async fn load(url: String, config: Option<String>, progress: Option<js_sys::Function>, signal: Option<AbortSignal>) -> Result<MimiCodec, JsError> {
        Self::build(Source::Url { url: &url, progress, signal }, None, config).await.map_err(js_error)
    }

    async fn build(source: Source<'_>, len: Option<u64>, config: Option<String>) -> crate::Result<MimiCodec> {
        let c = load::mimi_config(config.as_deref())?;
        let ctx = Rc::new(super::limits::gpu_context().await?);
        let w = load::mimi_weights(&c, "mimiConfig", &ctx.info.limits(), source, len).await?;
        let adapter = ctx.info.to_string();
        let mimi = Mimi::new(ctx, &w).await?;
        Ok(Self { mimi, frame_size: c.frame_size(), num_codebooks: c.num_codebooks, decoded: 0, adapter })
    }

    /// Samples per frame at 24 kHz (1920).
    #[wasm_bindgen(getter, js_name = frameSize)]
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// Codes per frame.
    #[wasm_bindgen(getter, js_name = numCodebooks)]
    pub fn num_codebooks(&self) -> usize {
        self.num_codebooks
    }

    /// The WebGPU adapter, in words.
    #[wasm_bindgen(getter)]
    pub fn adapter(&self) -> String {
        self.adapter.clone()
    }

    /// Encode one frame (`frameSize` samples at 24 kHz) into `numCodebooks` codes. Rejects
    /// on a frame of the wrong length.
    pub async fn encode(&mut self, pcm: Vec<f32>) -> Result<Vec<u32>, JsError> {
        self.mimi.encode_frame(&pcm).await.map_err(js_error)
    }

    /// Decode one frame of codes into `frameSize` samples at 24 kHz. Rejects on the wrong
    /// number of codes or a code out of range.
    pub async fn decode(&mut self, codes: Vec<u32>) -> Result<Vec<f32>, JsError> {
        let pcm = self.mimi.decode_frame(self.decoded, &codes).await.map_err(js_error)?;
        self.decoded += 1;
        Ok(pcm)
    }

    /// Encode then decode one frame: resolves to `{ codes, pcm, encodeMs, decodeMs }`.
    pub async fn roundtrip(&mut self, pcm: Vec<f32>) -> Result<JsValue, JsError> {
        let t0 = now_ms();
        let codes = self.mimi.encode_frame(&pcm).await.map_err(js_error)?;
        let t1 = now_ms();
        let out = self.mimi.decode_frame(self.decoded, &codes).await.map_err(js_error)?;
        self.decoded += 1;
        let o = js_sys::Object::new();
        set(&o, "codes", &js_sys::Uint32Array::from(&codes[..]));
        set(&o, "pcm", &js_sys::Float32Array::from(&out[..]));
        set(&o, "encodeMs", &(t1 - t0).into());
        set(&o, "decodeMs", &(now_ms() - t1).into());
        Ok(o.into())
    }

    /// New streams in both directions.
    pub fn reset(&mut self) {
        self.mimi.reset();
        self.decoded = 0;
    }

    /// Fault injection (a test hook): destroy this codec's WebGPU device, as a driver reset
    /// or the browser reclaiming the GPU would. Every later `encode` / `decode` rejects with
    /// the loss ("GPU device lost: ..."); a new `load` continues on a new device.
    #[wasm_bindgen(js_name = destroyDevice)]
    pub fn destroy_device(&self) {
        self.mimi.context().destroy();
    }
}

/// The CPU oracle over a clip: encode `pcm` (24 kHz, a whole number of frames) frame by
/// frame, decode those codes, and return `{ codes, pcm }` (`[frames, numCodebooks]` codes
/// flattened, and the decoded samples). Throws on a bad checkpoint or a partial frame.
#[wasm_bindgen(js_name = mimiCpuRoundtrip)]
pub fn mimi_cpu_roundtrip(mimi: &[u8], config: Option<String>, pcm: &[f32]) -> Result<JsValue, JsError> {
    let c = load::mimi_config(config.as_deref()).map_err(js_error)?;
    let fs = c.frame_size();
    if pcm.len() % fs != 0 {
        return Err(JsError::new(&format!("{} samples are not a whole number of {fs}-sample frames", pcm.len())));
    }
    let w = load::mimi_weights_from_bytes(&c, "config", mimi).map_err(js_error)?;
    let mut cpu = MimiCpu::new(&w);
    let mut codes = Vec::new();
    for f in pcm.chunks_exact(fs) {
        codes.extend(cpu.encode_frame(f).map_err(js_error)?);
    }
    let mut out = Vec::with_capacity(pcm.len());
    for (i, f) in codes.chunks_exact(c.num_codebooks).enumerate() {
        out.extend(cpu.decode_frame(i, f).map_err(js_error)?);
    }
    let o = js_sys::Object::new();
    set(&o, "codes", &js_sys::Uint32Array::from(&codes[..]));
    set(&o, "pcm", &js_sys::Float32Array::from(&out[..]));
    Ok(o.into())
}
