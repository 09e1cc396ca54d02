//! Moshi's language model (moshi.models.lm `LMModel`): the temporal transformer over the
//! summed stream embeddings, the text head, and the depformer that emits `dep_q` audio
//! tokens per frame, each step fed the token chosen by the step before.
//!
//! Per 80 ms frame: 1 + n_q input tokens (text, Moshi's audio, the user's audio; -1 for
//! none) -> 1 + dep_q generated tokens (text, then audio codebooks 0..dep_q).
//! [`LmWeights`] holds the weights (linears in Q8_0); [`Lm`] runs a frame as one GPU plan
//! (a few submits with no wait between them) and one `4 (1 + dep_q)`-byte readback;
//! [`LmCpu`] is the CPU oracle.

use std::rc::Rc;

use super::config::LmConfig;
use super::loader::LmGpuWeights;
use super::sampler::{self, Sampling};
use super::transformer::{rms_norm, LmTransformer, LmTransformerState, Q8Linear, RMS_EPS};
use crate::error::{Error, Result};
use crate::gpu::{fuse_norms, FrameParams, FrameRecorder, GpuContext, Plan, PlanBuilder, PlanState, Q8Dot, Readback};
use crate::weights::TensorStore;

/// Every weight of the LM, addressed by the released checkpoint's names.
pub struct LmWeights {
    pub config: LmConfig,
    /// `emb.N.weight`, N in 0..n_q, each `[card + 1, dim]`, concatenated.
    pub emb: Vec<f32>,
    /// `text_emb.weight` `[text_card + 1, dim]`
    pub text_emb: Vec<f32>,
    pub transformer: LmTransformer,
    /// `out_norm.alpha` `[dim]`
    pub out_norm: Vec<f32>,
    /// `text_linear.weight` `[text_card, dim]`
    pub text_linear: Q8Linear,
    /// `depformer_in.k.weight` `[depformer_dim, dim]`
    pub depformer_in: Vec<Q8Linear>,
    /// `depformer_text_emb.weight` `[text_card + 1, depformer_dim]`
    pub depformer_text_emb: Vec<f32>,
    /// `depformer_emb.j.weight`, j in 0..dep_q - 1, each `[card + 1, depformer_dim]`.
    pub depformer_emb: Vec<Vec<f32>>,
    pub depformer: LmTransformer,
    /// `linears.k.weight` `[card, depformer_dim]`
    pub linears: Vec<Q8Linear>,
}

impl LmWeights {
    /// Load from a parsed checkpoint (released `model.safetensors` naming, or the split
    /// names of the current package). Linears are quantized to Q8_0 on load.
    pub fn load(config: &LmConfig, store: &TensorStore<'_>) -> Result<Self> {
        config.validate()?;
        let c = config;
        let (d, dd) = (c.dim, c.depformer_dim);
        let mut emb = Vec::with_capacity(c.n_q * (c.card + 1) * d);
        for n in 0..c.n_q {
            emb.extend(store.get(&format!("emb.{n}.weight"), &[c.card + 1, d])?);
        }
        Ok(Self {
            config: c.clone(),
            emb,
            text_emb: store.get("text_emb.weight", &[c.text_card + 1, d])?,
            transformer: LmTransformer::load(store, "transformer", (c.num_layers, d, c.num_heads, c.hidden()), 1, c.context, c.max_period, true)?,
            out_norm: store.get("out_norm.alpha", &[1, 1, d])?,
            text_linear: Q8Linear::load(store, "text_linear.weight", c.text_card, d)?,
            depformer_in: (0..c.dep_q).map(|k| Q8Linear::load(store, &format!("depformer_in.{k}.weight"), dd, d)).collect::<Result<_>>()?,
            depformer_text_emb: store.get("depformer_text_emb.weight", &[c.text_card + 1, dd])?,
            depformer_emb: (0..c.dep_q - 1).map(|j| store.get(&format!("depformer_emb.{j}.weight"), &[c.card + 1, dd])).collect::<Result<_>>()?,
            depformer: LmTransformer::load(
                store,
                "depformer",
                (c.depformer_num_layers, dd, c.depformer_num_heads, c.depformer_hidden()),
                c.dep_q,
                c.dep_q,
                c.depformer_max_period,
                false,
            )?,
            linears: (0..c.dep_q).map(|k| Q8Linear::load(store, &format!("linears.{k}.weight"), c.card, dd)).collect::<Result<_>>()?,
        })
    }

    /// Parse and load a safetensors file's bytes.
    pub fn from_safetensors(config: &LmConfig, bytes: &[u8]) -> Result<Self> {
        Self::load(config, &TensorStore::from_bytes(bytes)?)
    }

    /// These weights uploaded to the GPU (see [`LmGpuWeights::upload`]).
    pub fn upload(&self, ctx: &GpuContext) -> Result<LmGpuWeights> {
        LmGpuWeights::upload(ctx, self)
    }

    /// Check one frame's input tokens: `1 + n_q` values, text below `text_card + 1`, audio
    /// below `card + 1`, or -1 for none.
    pub fn check_tokens(&self, tokens: &[i32]) -> Result<()> {
        let c = &self.config;
        if tokens.len() != 1 + c.n_q {
            return Err(Error::Input(format!("a frame takes {} tokens (text + {} audio), got {}", 1 + c.n_q, c.n_q, tokens.len())));
        }
        for (k, &t) in tokens.iter().enumerate() {
            let limit = if k == 0 { c.text_card + 1 } else { c.card + 1 };
            if t < -1 || t as i64 >= limit as i64 {
                return Err(Error::Input(format!("token {t} of stream {k} is outside [-1, {limit})")));
            }
        }
        Ok(())
    }
}

fn embed_row(table: &[f32], dim: usize, tok: i32, out: &mut [f32]) {
    if tok >= 0 {
        for (o, v) in out.iter_mut().zip(&table[tok as usize * dim..(tok as usize + 1) * dim]) {
            *o += v;
        }
    }
}

/// The CPU oracle of one LM stream.
pub struct LmCpu<'a> {
    w: &'a LmWeights,
    sampling: Sampling,
    temporal: LmTransformerState,
    pos: usize,
    /// Text logits and depformer logits of the last step, for probes.
    pub last_text_logits: Vec<f32>,
    pub last_audio_logits: Vec<Vec<f32>>,
}

impl<'a> LmCpu<'a> {
    pub fn new(w: &'a LmWeights, sampling: Sampling) -> Self {
        Self { w, sampling, temporal: w.transformer.state(), pos: 0, last_text_logits: Vec::new(), last_audio_logits: Vec::new() }
    }

    /// One frame: input tokens -> generated tokens (mirrors `LMGen._step`'s model calls).
    /// `forced`, when given, replaces the depformer's own choices as its inputs (teacher
    /// forcing for probes); the returned tokens are always the model's own choices.
    pub fn step(&mut self, tokens: &[i32], forced: Option<&[i32]>) -> Result<Vec<i32>> {
        self.w.check_tokens(tokens)?;
        let c = &self.w.config;
        let (d, dd) = (c.dim, c.depformer_dim);
        let mut x = vec![0f32; d];
        for n in 0..c.n_q {
            embed_row(&self.w.emb[n * (c.card + 1) * d..(n + 1) * (c.card + 1) * d], d, tokens[1 + n], &mut x);
        }
        embed_row(&self.w.text_emb, d, tokens[0], &mut x);
        self.w.transformer.step(&mut self.temporal, &mut x, self.pos, 0);
        let z = rms_norm(&x, &self.w.out_norm);
        self.last_text_logits = self.w.text_linear.forward(&z);
        let mut out = vec![sampler::sample_cpu(&self.last_text_logits, self.sampling.text, self.sampling.seed, self.pos as u32, 0)];
        let mut dep_state = self.w.depformer.state();
        self.last_audio_logits.clear();
        for k in 0..c.dep_q {
            let prev = forced.map_or(out[k], |f| f[k]);
            let mut y = self.w.depformer_in[k].forward(&z);
            let table = if k == 0 { &self.w.depformer_text_emb } else { &self.w.depformer_emb[k - 1] };
            embed_row(table, dd, prev, &mut y);
            self.w.depformer.step(&mut dep_state, &mut y, k, k);
            let logits = self.w.linears[k].forward(&y);
            out.push(sampler::sample_cpu(&logits, self.sampling.audio, self.sampling.seed, self.pos as u32, 1 + k as u32));
            self.last_audio_logits.push(logits);
        }
        self.pos += 1;
        Ok(out)
    }
}

/// The LM on the GPU: one static plan per frame.
pub struct Lm {
    ctx: Rc<GpuContext>,
    /// Embeddings, temporal transformer, text head and text sampling.
    temporal: Plan,
    /// The `dep_q` depformer steps, each sampling into the token buffer.
    depformer: Plan,
    states: [PlanState; 2],
    frame: wgpu::Buffer,
    in_tokens: wgpu::Buffer,
    out_tokens: wgpu::Buffer,
    realigned: wgpu::Buffer,
    readback: Readback,
    recorder: FrameRecorder,
    pos: u32,
    n_in: usize,
    weights_check: LmConfig,
}

impl Lm {
    /// Build the frame plan over the GPU-resident weights `w`: embeddings, temporal transformer, out norm, text
    /// head, text sampling, then `dep_q` depformer steps each sampling into the token buffer
    /// the next step reads.
    ///
    /// `w` stays the caller's: the plans hold their own references to its buffers, so several
    /// LMs can share one weight set, and dropping `w` frees nothing still in use.
    pub async fn new(ctx: Rc<GpuContext>, w: &LmGpuWeights, sampling: Sampling) -> Result<Self> {
        let c = &w.config;
        let (d, dd) = (c.dim, c.depformer_dim);
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let frame = ctx.uniform("lm frame", bytemuck::bytes_of(&FrameParams::default()));
        let in_tokens = ctx.zeros("lm input tokens", 1 + c.n_q)?;
        let out_tokens = ctx.zeros("lm output tokens", 1 + c.dep_q)?;
        let mut b = PlanBuilder::new(&ctx, &frame)?;

        // temporal: x = sum of the 16 audio embeddings + the text embedding
        let (emb, text_emb) = (&w.emb, &w.text_emb);
        let x = w.transformer.residual_row(&b, "transformer.x")?;
        b.embed_sum("emb", emb, (c.n_q, c.card + 1, d), &in_tokens, 1, &x.buf, false)?;
        b.embed_sum("text_emb", text_emb, (1, c.text_card + 1, d), &in_tokens, 0, &x.buf, true)?;
        let rings = w.transformer.plan_state(&mut b)?;
        // with fused norms the last residual add prepares out_norm for the text head and the
        // depformer's input projections; without, out_norm is a dispatch into `z`
        let fuse = fuse_norms();
        let out_row = if fuse { Some(b.normed_row("transformer_out", d)?) } else { None };
        w.transformer.plan_step(&mut b, &x, 0, &frame, &rings, fuse, out_row.as_ref().map(|r| (&w.out_norm, r)))?;
        let z = b.tensor("transformer_out", &[1, d])?;
        let norm_in_linear = b.q8_dot() == Q8Dot::I8;
        if out_row.is_none() {
            b.rms_norm("out_norm", &x, &w.out_norm, RMS_EPS, &z);
            b.tap("transformer_out", &z);
        }
        let text_logits = b.tensor("text_logits", &[1, c.text_card])?;
        let tl = &w.text_linear;
        let tl_w = (&tl.quants, &tl.scales);
        match &out_row {
            Some(row) => b.q8_linear_prenormed("text_linear", tl_w, (c.text_card, d), (row, RMS_EPS), (&text_logits.buf, 0, c.text_card), false)?,
            // with the i8 kernel the norm is taken by the linear from `x` as it quantizes it
            // (`z` is written beside, for the tap, and nothing waits for it)
            None if norm_in_linear => {
                b.q8_linear_normed("text_linear", tl_w, (c.text_card, d), (&x, &w.out_norm, RMS_EPS), (&text_logits.buf, 0, c.text_card), false)?
            }
            None => b.q8_linear("text_linear", tl_w, (c.text_card, d), 1, (&z.buf, 0), (&text_logits.buf, 0, c.text_card), false)?,
        }
        b.tap("text_logits", &text_logits);
        b.sample("sample text", (&text_logits.buf, 0, c.text_card), &out_tokens, 0, (sampling.text.temperature, sampling.text.top_k), sampling.seed, 0)?;

        let (temporal, temporal_state, _) = b.finish();

        // depformer: dep_q steps at fixed positions 0..dep_q over rings shared by the steps
        let mut b = PlanBuilder::new(&ctx, &frame)?;
        let dep_rings = w.depformer.plan_state(&mut b)?;
        // Each step's input projection depends on the temporal output only: all of them go
        // first, each into a row of its own, so that they share no buffer they write and no
        // barrier separates them (they run side by side, beside the text draw).
        let ys = (0..c.dep_q).map(|k| w.depformer.residual_row(&b, &format!("depformer.x{k}"))).collect::<Result<Vec<_>>>()?;
        for (k, y) in ys.iter().enumerate() {
            let win = &w.depformer_in[k];
            let win_w = (&win.quants, &win.scales);
            match &out_row {
                Some(row) => b.q8_linear_prenormed(&format!("depformer_in.{k}"), win_w, (dd, d), (row, RMS_EPS), (&y.buf, 0, dd), false)?,
                None if norm_in_linear => b.q8_linear_normed(&format!("depformer_in.{k}"), win_w, (dd, d), (&x, &w.out_norm, RMS_EPS), (&y.buf, 0, dd), false)?,
                None => b.q8_linear(&format!("depformer_in.{k}"), win_w, (dd, d), 1, (&z.buf, 0), (&y.buf, 0, dd), false)?,
            }
        }
        let audio_logits = b.tensor("audio_logits", &[c.dep_q, c.card])?;
        // the draw of step k adds step k + 1's embedding of its token itself (one dispatch
        // fewer a step) where that table is in one part
        let fused_embed = |k: usize| k > 0 && w.depformer_emb[k - 1].parts.len() == 1;
        for (k, y) in ys.iter().enumerate() {
            let step_frame = ctx.uniform("depformer step", bytemuck::bytes_of(&FrameParams { pos: k as u32, ..Default::default() }));
            if !fused_embed(k) {
                let table = if k == 0 { &w.depformer_text_emb } else { &w.depformer_emb[k - 1] };
                let rows = if k == 0 { c.text_card + 1 } else { c.card + 1 };
                b.embed_sum(&format!("depformer_emb.{k}"), table, (1, rows, dd), &out_tokens, k, &y.buf, true)?;
            }
            w.depformer.plan_step(&mut b, y, k, &step_frame, &dep_rings, fuse, None)?;
            let lin = &w.linears[k];
            b.q8_linear(&format!("linears.{k}"), (&lin.quants, &lin.scales), (c.card, dd), 1, (&y.buf, 0), (&audio_logits.buf, k * c.card, c.card), false)?;
            let embed = if k + 1 < c.dep_q && fused_embed(k + 1) { Some((&w.depformer_emb[k], &ys[k + 1].buf)) } else { None };
            b.sample_then_embed(
                &format!("sample audio {k}"),
                (&audio_logits.buf, k * c.card, c.card),
                &out_tokens,
                1 + k,
                (sampling.audio.temperature, sampling.audio.top_k),
                sampling.seed,
                1 + k as u32,
                embed,
            )?;
        }
        // LMGen's delays on the GPU: the realigned frame for a decoder in the same submit
        let realigned = ctx.zeros("lm realigned tokens", 1 + c.dep_q)?;
        let delays: Vec<u32> = c.delays[..=c.dep_q].iter().map(|&d| d as u32).collect();
        b.realign("realign", &out_tokens, &delays, c.max_delay() + 2, &realigned)?;
        let (depformer, depformer_state, _) = b.finish();
        if let Some(e) = scope.pop().await {
            return Err(Error::Gpu(e.to_string()));
        }
        ctx.take_error()?;
        let readback = Readback::new(&ctx, (4 * (1 + c.dep_q)) as u64);
        Ok(Self {
            ctx,
            temporal,
            depformer,
            states: [temporal_state, depformer_state],
            frame,
            in_tokens,
            out_tokens,
            realigned,
            readback,
            recorder: FrameRecorder::new()?,
            pos: 0,
            n_in: 1 + c.n_q,
            weights_check: c.clone(),
        })
    }

    /// One frame: `1 + n_q` input tokens (checked as [`LmWeights::check_tokens`] does) ->
    /// `1 + dep_q` generated tokens. One replay of the plans ([`Self::submit`]), one readback.
    pub async fn step(&mut self, tokens: &[i32]) -> Result<Vec<i32>> {
        self.submit(tokens, None)?;
        self.read_tokens().await
    }

    /// Upload `tokens` and submit this frame's LM plan and then `decoder` (a plan reading
    /// [`Self::realigned_tokens`], with the buffer its result is copied from and the
    /// readback it is copied to): the command buffers recorded during the last submit when
    /// that had the same decoder, else in a few growing parts so that the GPU starts while
    /// the CPU records ([`FrameRecorder`]); then the next frame's is recorded while the GPU
    /// runs. The generated tokens come from [`Self::read_tokens`].
    pub fn submit(&mut self, tokens: &[i32], decoder: Option<(&Plan, &wgpu::Buffer, &Readback)>) -> Result<()> {
        self.upload(tokens)?;
        self.ctx.check_lost()?;
        let mut plans = vec![&self.temporal, &self.depformer];
        if let Some((plan, _, _)) = decoder {
            plans.push(plan);
        }
        let (readback, out_tokens) = (&self.readback, &self.out_tokens);
        let mut copies = vec![out_tokens, readback.staging()];
        if let Some((_, src, rb)) = decoder {
            copies.extend([src, rb.staging()]);
        }
        self.recorder.submit(&self.ctx, &plans, &copies, |enc| {
            readback.copy(enc, out_tokens);
            if let Some((_, src, rb)) = decoder {
                rb.copy(enc, src);
            }
        });
        self.pos += 1;
        Ok(())
    }

    /// The `1 + dep_q` tokens generated by the last submit.
    pub async fn read_tokens(&self) -> Result<Vec<i32>> {
        let bytes = self.readback.read(&self.ctx).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// The GPU buffer holding LMGen's realigned output frame (`1 + dep_q` i32: text, then
    /// Moshi's audio codes), valid after a frame once `max(delays)` frames have passed.
    pub fn realigned_tokens(&self) -> &wgpu::Buffer {
        &self.realigned
    }

    /// The context the LM runs on.
    pub fn context(&self) -> &Rc<GpuContext> {
        &self.ctx
    }

    /// [`Self::step`] for profiles: the temporal part and the depformer submitted apart, each
    /// waited for, timed with `now` (a clock in ms). Both parts are recorded before the
    /// first timing starts, as [`Self::step`]'s frames are recorded a frame ahead
    /// ([`crate::gpu::FrameRecorder`]), and each in the submits the recorder cuts a frame
    /// into ([`crate::gpu::FrameRecorder::record`]: a small first one, so that the GPU starts
    /// while the queue takes in the rest), so each time is the part's submits, GPU work and
    /// readback. Returns the tokens and the two times.
    pub async fn step_timed(&mut self, tokens: &[i32], now: impl Fn() -> f64) -> Result<(Vec<i32>, [f64; 2])> {
        self.upload(tokens)?;
        let mut times = [0f64; 2];
        let mut bytes = Vec::new();
        let recorded: Vec<Vec<wgpu::CommandBuffer>> = [&self.temporal, &self.depformer]
            .into_iter()
            .map(|plan| self.recorder.record(&self.ctx, &[plan], |enc| self.readback.copy(enc, &self.out_tokens)))
            .collect();
        for (i, parts) in recorded.into_iter().enumerate() {
            let t0 = now();
            for cmd in parts {
                self.ctx.queue.submit([cmd]);
            }
            bytes = self.readback.read(&self.ctx).await?;
            times[i] = now() - t0;
        }
        self.pos += 1;
        Ok((bytemuck::pod_collect_to_vec(&bytes), times))
    }

    fn upload(&mut self, tokens: &[i32]) -> Result<()> {
        let c = &self.weights_check;
        if tokens.len() != self.n_in {
            return Err(Error::Input(format!("a frame takes {} tokens, got {}", self.n_in, tokens.len())));
        }
        for (k, &t) in tokens.iter().enumerate() {
            let limit = if k == 0 { c.text_card + 1 } else { c.card + 1 };
            if t < -1 || t as i64 >= limit as i64 {
                return Err(Error::Input(format!("token {t} of stream {k} is outside [-1, {limit})")));
            }
        }
        self.ctx.queue.write_buffer(&self.in_tokens, 0, bytemuck::cast_slice(tokens));
        let fp = FrameParams { pos: self.pos, first: (self.pos == 0) as u32, ..Default::default() };
        self.ctx.queue.write_buffer(&self.frame, 0, bytemuck::bytes_of(&fp));
        Ok(())
    }

    /// A new stream: KV rings cleared, position 0.
    pub fn reset(&mut self) {
        for s in &self.states {
            s.reset(&self.ctx);
        }
        self.pos = 0;
    }

    /// The frame's two plans, (temporal, depformer), for per-step profiles.
    pub fn plans(&self) -> (&Plan, &Plan) {
        (&self.temporal, &self.depformer)
    }

    /// Dispatches per frame: (temporal, depformer).
    pub fn dispatches(&self) -> (usize, usize) {
        (self.temporal.dispatches(), self.depformer.dispatches())
    }

    /// Bytes of streaming state (KV rings) on the GPU.
    pub fn state_bytes(&self) -> u64 {
        self.states.iter().map(|s| s.bytes()).sum()
    }
}
