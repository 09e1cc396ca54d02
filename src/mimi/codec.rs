//! The codec on the GPU: one static plan per direction, replayed per frame in a few submits
//! with no wait between them, recorded during the frame before ([`crate::gpu::FrameRecorder`]),
//! all streaming state on the GPU,
//! and one small readback (the codes, 4 bytes each, or the 1920 samples).

use std::collections::BTreeMap;
use std::rc::Rc;

use super::MimiWeights;
use crate::error::{Error, Result};
use crate::gpu::{Elu, FrameRecorder, GpuContext, Plan, PlanBuilder, PlanState, Readback, Tensor};
use crate::gpu::FrameParams;

/// Mimi as two GPU plans. Build once with [`Mimi::new`]; then per 80 ms frame
/// [`Mimi::encode_frame`] and/or [`Mimi::decode_frame`]; [`Mimi::reset`] starts new streams.
pub struct Mimi {
    ctx: Rc<GpuContext>,
    frame_size: usize,
    num_codebooks: usize,
    bins: usize,
    steps_per_frame: u32,
    enc: Direction,
    dec: Direction,
    pcm_in: wgpu::Buffer,
    codes_out: wgpu::Buffer,
    codes_in: wgpu::Buffer,
    pcm_out: Tensor,
}

struct Direction {
    plan: Plan,
    state: PlanState,
    taps: BTreeMap<String, Tensor>,
    frame: wgpu::Buffer,
    readback: Readback,
    recorder: FrameRecorder,
    pos: u32,
    first: bool,
    /// frames since the stream started
    index: u32,
}

impl Direction {
    fn new(ctx: &GpuContext, b: PlanBuilder<'_>, frame: wgpu::Buffer, readback_bytes: u64) -> Result<Self> {
        let (plan, state, taps) = b.finish();
        let recorder = FrameRecorder::new()?;
        Ok(Self { plan, state, taps, frame, readback: Readback::new(ctx, readback_bytes), recorder, pos: 0, first: true, index: 0 })
    }

    /// Write the frame uniform, replay the plan and copy `out` into the readback: the
    /// command buffers recorded during the last submit ([`FrameRecorder`]).
    fn submit(&mut self, ctx: &GpuContext, out: &wgpu::Buffer, steps: u32) {
        self.prepare(ctx, steps);
        let readback = &self.readback;
        self.recorder.submit(ctx, &[&self.plan], &[out, readback.staging()], |enc| readback.copy(enc, out));
    }

    /// Write the frame uniform of the next replay and advance the stream by one frame.
    fn prepare(&mut self, ctx: &GpuContext, steps: u32) {
        let fp = FrameParams { pos: self.pos, first: self.first as u32, index: self.index, _pad: 0 };
        ctx.queue.write_buffer(&self.frame, 0, bytemuck::bytes_of(&fp));
        self.pos += steps;
        self.first = false;
        self.index = self.index.wrapping_add(1);
    }

    fn reset(&mut self, ctx: &GpuContext) {
        self.state.reset(ctx);
        self.pos = 0;
        self.first = true;
        self.index = 0;
    }
}

impl Mimi {
    /// Upload `weights` and build both plans. Fails with [`Error::Limit`] (before any
    /// upload, naming the limit) when a buffer is larger than the device's limits allow
    /// ([`super::requirements`]), or [`Error::Gpu`] when a pipeline does not compile.
    pub async fn new(ctx: Rc<GpuContext>, weights: &MimiWeights) -> Result<Self> {
        Self::with_codes_source(ctx, weights, None).await
    }

    /// [`Self::new`] with the decode plan reading its codes from `codes` (a GPU buffer of
    /// u32/i32 codes, from element `offset`) instead of its own input buffer: an LM's token
    /// buffer, so decoding can follow the LM step in the same submit
    /// ([`Self::decode_plan`], [`Self::prepare_decode`], [`Self::read_decoded`]).
    pub async fn with_codes_source(ctx: Rc<GpuContext>, weights: &MimiWeights, codes: Option<(&wgpu::Buffer, usize)>) -> Result<Self> {
        let cfg = &weights.config;
        super::requirements(cfg, &ctx.info.limits())?.check()?;
        let fs = cfg.frame_size();
        let d = cfg.seanet.dimension;
        let nq = weights.quantizer.num_codebooks();
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let frame_bytes = bytemuck::bytes_of(&FrameParams::default()).to_vec();

        // encode: pcm [1, fs] -> codes [nq]
        let pcm_in = ctx.zeros("pcm_in", fs)?;
        let codes_out = ctx.zeros("codes_out", nq)?;
        let enc_frame = ctx.uniform("encode frame", &frame_bytes);
        let mut b = PlanBuilder::new(&ctx, &enc_frame)?;
        let pcm = Tensor { buf: pcm_in.clone(), shape: vec![1, fs] };
        let mut xt = weights.encoder.plan(&mut b, &pcm)?;
        b.tap("encoder", &xt);
        weights.encoder_transformer.plan(&mut b, &xt)?;
        b.tap("encoder_transformer", &xt);
        xt.shape = vec![xt.shape[0], d];
        let latent = weights.downsample.plan(&mut b, &xt, true, false, Elu::NONE, None)?;
        if latent.len() != d {
            return Err(Error::config("frame_rate", format!("one frame must give one latent, got {:?}", latent.shape)));
        }
        b.tap("latent", &latent);
        weights.quantizer.plan_encode(&mut b, &latent, &codes_out)?;
        let enc = Direction::new(&ctx, b, enc_frame, (nq * 4) as u64)?;

        // decode: codes [nq] -> pcm [1, fs]
        let codes_in = ctx.zeros("codes_in", nq)?;
        let dec_frame = ctx.uniform("decode frame", &frame_bytes);
        let mut b = PlanBuilder::new(&ctx, &dec_frame)?;
        let (codes_src, codes_offset) = codes.unwrap_or((&codes_in, 0));
        let mut latent = weights.quantizer.plan_decode(&mut b, codes_src, codes_offset)?;
        latent.shape = vec![d, 1];
        b.tap("decoded_latent", &latent);
        let xt = weights.upsample.plan(&mut b, &latent, Elu::NONE, true)?;
        weights.decoder_transformer.plan(&mut b, &xt)?;
        b.tap("decoder_transformer", &xt);
        let pcm_out = weights.decoder.plan(&mut b, &xt)?;
        if pcm_out.len() != fs {
            return Err(Error::config("seanet.ratios", format!("decoder gives {:?} samples per frame, expected {fs}", pcm_out.shape)));
        }
        let dec = Direction::new(&ctx, b, dec_frame, (fs * 4) as u64)?;

        if let Some(e) = scope.pop().await {
            return Err(Error::Gpu(e.to_string()));
        }
        ctx.take_error()?;
        let steps_per_frame = cfg.resample_stride() as u32;
        Ok(Self {
            ctx,
            frame_size: fs,
            num_codebooks: nq,
            bins: cfg.quantizer.bins,
            steps_per_frame,
            enc,
            dec,
            pcm_in,
            codes_out,
            codes_in,
            pcm_out,
        })
    }

    /// Samples per frame (1920).
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// Codes per frame.
    pub fn num_codebooks(&self) -> usize {
        self.num_codebooks
    }

    /// Encode one frame: exactly `frame_size` samples at 24 kHz in [-1, 1] -> `num_codebooks`
    /// codes. One replay of the plan and a `4 * num_codebooks`-byte readback. Mirrors `MimiModel.encode`
    /// inside `streaming(1)`.
    pub async fn encode_frame(&mut self, pcm: &[f32]) -> Result<Vec<u32>> {
        if pcm.len() != self.frame_size {
            return Err(Error::Input(format!("a frame is {} samples, got {}", self.frame_size, pcm.len())));
        }
        if let Some(i) = pcm.iter().position(|v| !v.is_finite()) {
            return Err(Error::Input(format!("sample {i} of the frame is not finite")));
        }
        self.ctx.check_lost()?;
        self.ctx.queue.write_buffer(&self.pcm_in, 0, bytemuck::cast_slice(pcm));
        self.enc.submit(&self.ctx, &self.codes_out, self.steps_per_frame);
        let bytes = self.enc.readback.read(&self.ctx).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Decode one frame of `num_codebooks` codes (each below `bins`) -> `frame_size` samples.
    /// One replay of the plan and a `4 * frame_size`-byte readback. Mirrors `MimiModel.decode` inside
    /// `streaming(1)`. `frame` only labels errors.
    pub async fn decode_frame(&mut self, frame: usize, codes: &[u32]) -> Result<Vec<f32>> {
        if codes.len() != self.num_codebooks {
            return Err(Error::Input(format!(
                "frame {frame} has {} codes, the codec runs {} codebooks",
                codes.len(),
                self.num_codebooks
            )));
        }
        for (k, &c) in codes.iter().enumerate() {
            if c as usize >= self.bins {
                return Err(Error::CodeOutOfRange { frame, codebook: k, code: c as i64, bins: self.bins });
            }
        }
        self.ctx.queue.write_buffer(&self.codes_in, 0, bytemuck::cast_slice(codes));
        self.dec.submit(&self.ctx, &self.pcm_out.buf, self.steps_per_frame);
        let bytes = self.dec.readback.read(&self.ctx).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// The encode plan (for per-step profiles).
    pub fn encode_plan(&self) -> &Plan {
        &self.enc.plan
    }

    /// The decode plan, for recording after another plan that fills its codes source.
    /// Call [`Self::prepare_decode`] before the submit and [`Self::read_decoded`] after.
    pub fn decode_plan(&self) -> &Plan {
        &self.dec.plan
    }

    /// The decoded samples' buffer and the readback to copy them into, for a combined
    /// submit.
    pub fn decode_output(&self) -> (&wgpu::Buffer, &Readback) {
        (&self.pcm_out.buf, &self.dec.readback)
    }

    /// Write the decode frame uniform and advance the decode stream by one frame.
    pub fn prepare_decode(&mut self) {
        self.dec.prepare(&self.ctx, self.steps_per_frame);
    }

    /// The `frame_size` samples of the last combined submit.
    pub async fn read_decoded(&self) -> Result<Vec<f32>> {
        Ok(bytemuck::pod_collect_to_vec(&self.dec.readback.read(&self.ctx).await?))
    }

    /// Start new encode and decode streams: every conv prefix, overlap tail and KV ring
    /// cleared, positions back to 0.
    pub fn reset(&mut self) {
        self.enc.reset(&self.ctx);
        self.dec.reset(&self.ctx);
    }

    /// Read a named activation of the last frame (`encoder` and `encoder_transformer`
    /// `[2, 512]` time-major, `latent`, `decoded_latent`, `decoder_transformer` `[2, 512]`),
    /// for parity probes.
    pub async fn read_tap(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.enc.taps.get(name).or_else(|| self.dec.taps.get(name)).ok_or_else(|| {
            Error::Input(format!("no tap named `{name}`"))
        })?;
        self.ctx.read_f32(&t.buf, t.len()).await
    }

    /// Dispatches per frame: (encode, decode).
    pub fn dispatches(&self) -> (usize, usize) {
        (self.enc.plan.dispatches(), self.dec.plan.dispatches())
    }

    /// Bytes of streaming state on the GPU.
    pub fn state_bytes(&self) -> u64 {
        self.enc.state.bytes() + self.dec.state.bytes()
    }

    /// The context the codec runs on.
    pub fn context(&self) -> &Rc<GpuContext> {
        &self.ctx
    }
}
