//! SEANet encoder and decoder (moshi.modules.seanet), causal and streaming.
//!
//! Encoder, per 80 ms frame: `[1, 1920]` samples -> `[dimension, 2]` (25 Hz steps; the GPU
//! plan writes it time-major, `[2, dimension]`, for the transformer). Decoder:
//! `[dimension, 2]` (time-major `[2, dimension]` on the GPU) -> `[1, 1920]`. Residual blocks
//! use true skips; every conv but the first of each model is preceded by an ELU. On the GPU
//! each conv is one dispatch (its input staged and its prefix carried inside it), each
//! residual add part of the conv that ends the block, and each ELU applied by the conv that
//! writes its input where that conv's output has no other reader (a block's inner conv, a
//! block's end before an up- or downsampling, the decoder's first conv; [`Elu`]: once an
//! output instead of once a term of every reader), else on load by the conv after it (a
//! block's first conv, whose input is also the skip).

use super::config::SeanetConfig;
use super::conv::{Conv1d, Conv1dState, ConvTr1d, ConvTr1dState};
use crate::error::Result;
use crate::gpu::{Elu, PlanBuilder, Tensor};
use crate::weights::TensorSource;

/// `SEANetResnetBlock`: x + conv2(elu(conv1(elu(x)))), conv1 `[dim -> dim / compress]`
/// with the residual kernel, conv2 1x1 back to `dim` (`<name>.block.1`, `<name>.block.3`).
pub struct ResBlock {
    pub conv1: Conv1d,
    pub conv2: Conv1d,
}

impl ResBlock {
    fn load(store: &dyn TensorSource, name: &str, dim: usize, dilation: usize, cfg: &SeanetConfig) -> Result<Self> {
        let hidden = dim / cfg.compress;
        Ok(Self {
            conv1: Conv1d::load(store, &format!("{name}.block.1.conv.conv"), (dim, hidden, cfg.residual_kernel_size), 1, dilation, true, false)?,
            conv2: Conv1d::load(store, &format!("{name}.block.3.conv.conv"), (hidden, dim, 1), 1, 1, true, false)?,
        })
    }
    fn state(&self) -> [Conv1dState; 2] {
        [self.conv1.state(), self.conv2.state()]
    }
    fn step(&self, st: &mut [Conv1dState; 2], x: &[f32]) -> Vec<f32> {
        let h = self.conv1.step(&mut st[0], x, true);
        let mut y = self.conv2.step(&mut st[1], &h, true);
        for (a, b) in y.iter_mut().zip(x) {
            *a += b;
        }
        y
    }
    /// `elu_out`: the block's output goes only to an ELU (the conv after it then loads it
    /// as it is).
    fn plan(&self, b: &mut PlanBuilder<'_>, x: &Tensor, elu_out: bool) -> Result<Tensor> {
        let store = b.elu_on_store();
        let h = self.conv1.plan(b, x, false, false, Elu { input: true, output: store }, None)?;
        self.conv2.plan(b, &h, false, false, Elu { input: !store, output: elu_out }, Some(x))
    }
}

/// `SEANetEncoder` (`encoder.model.*`).
pub struct SeanetEncoder {
    pub init: Conv1d,
    /// Per ratio (reversed ratios): residual blocks, then the strided downsampling conv.
    pub blocks: Vec<(Vec<ResBlock>, Conv1d)>,
    pub last: Conv1d,
}

/// CPU streaming state of a [`SeanetEncoder`] or [`SeanetDecoder`].
pub struct SeanetState {
    convs: Vec<Conv1dState>,
    res: Vec<[Conv1dState; 2]>,
    convtrs: Vec<ConvTr1dState>,
}

impl SeanetEncoder {
    pub fn load(store: &dyn TensorSource, cfg: &SeanetConfig) -> Result<Self> {
        let p = |i: usize| format!("encoder.model.{i}.conv.conv");
        let init = Conv1d::load(store, &p(0), (cfg.channels, cfg.n_filters, cfg.kernel_size), 1, 1, true, false)?;
        let mut blocks = Vec::new();
        let (mut mult, mut idx) = (1, 1);
        for &r in cfg.ratios.iter().rev() {
            let dim = mult * cfg.n_filters;
            let mut res = Vec::new();
            for j in 0..cfg.n_residual_layers {
                res.push(ResBlock::load(store, &format!("encoder.model.{idx}"), dim, cfg.dilation_base.pow(j as u32), cfg)?);
                idx += 1;
            }
            let down = Conv1d::load(store, &p(idx + 1), (dim, 2 * dim, 2 * r), r, 1, true, false)?;
            idx += 2;
            mult *= 2;
            blocks.push((res, down));
        }
        let last = Conv1d::load(store, &p(idx + 1), (mult * cfg.n_filters, cfg.dimension, cfg.last_kernel_size), 1, 1, true, false)?;
        Ok(Self { init, blocks, last })
    }

    pub fn state(&self) -> SeanetState {
        let mut convs = vec![self.init.state()];
        let mut res = Vec::new();
        for (rb, down) in &self.blocks {
            res.extend(rb.iter().map(|r| r.state()));
            convs.push(down.state());
        }
        convs.push(self.last.state());
        SeanetState { convs, res, convtrs: Vec::new() }
    }

    /// CPU oracle: `[1, t]` samples -> `[dimension, t / hop]`.
    pub fn step(&self, st: &mut SeanetState, pcm: &[f32]) -> Vec<f32> {
        let mut y = self.init.step(&mut st.convs[0], pcm, false);
        let (mut ci, mut ri) = (1, 0);
        for (rb, down) in &self.blocks {
            for r in rb {
                y = r.step(&mut st.res[ri], &y);
                ri += 1;
            }
            y = down.step(&mut st.convs[ci], &y, true);
            ci += 1;
        }
        self.last.step(&mut st.convs[ci], &y, true)
    }

    /// GPU plan: `pcm` `[1, t]` -> `[t / hop, dimension]`, time-major (the transformer's
    /// layout: the last conv writes it so).
    pub fn plan(&self, b: &mut PlanBuilder<'_>, pcm: &Tensor) -> Result<Tensor> {
        let store = b.elu_on_store();
        // `pre`: `y` is stored ELU'd, where its only reader is a down- or the last conv (a
        // residual block reads its input raw too, for the skip)
        let block_next = |i: usize| self.blocks.get(i).is_some_and(|(rb, _)| !rb.is_empty());
        let mut pre = store && !block_next(0);
        let mut y = self.init.plan(b, pcm, false, false, Elu { input: false, output: pre }, None)?;
        for (i, (rb, down)) in self.blocks.iter().enumerate() {
            for (j, r) in rb.iter().enumerate() {
                pre = store && j + 1 == rb.len();
                y = r.plan(b, &y, pre)?;
            }
            let out = store && !block_next(i + 1);
            y = down.plan(b, &y, false, false, Elu { input: !pre, output: out }, None)?;
            pre = out;
        }
        self.last.plan(b, &y, false, true, Elu { input: !pre, output: false }, None)
    }
}

/// `SEANetDecoder` (`decoder.model.*`).
pub struct SeanetDecoder {
    pub init: Conv1d,
    /// Per ratio: the upsampling transposed conv, then residual blocks.
    pub blocks: Vec<(ConvTr1d, Vec<ResBlock>)>,
    pub last: Conv1d,
}

impl SeanetDecoder {
    pub fn load(store: &dyn TensorSource, cfg: &SeanetConfig) -> Result<Self> {
        let mut mult = 1usize << cfg.ratios.len();
        let init = Conv1d::load(store, "decoder.model.0.conv.conv", (cfg.dimension, mult * cfg.n_filters, cfg.kernel_size), 1, 1, true, false)?;
        let mut blocks = Vec::new();
        let mut idx = 1;
        for &r in &cfg.ratios {
            let (i, o) = (mult * cfg.n_filters, mult * cfg.n_filters / 2);
            let up = ConvTr1d::load(store, &format!("decoder.model.{}.convtr.convtr", idx + 1), (i, o, 2 * r), r, 1, true)?;
            idx += 2;
            let mut res = Vec::new();
            for j in 0..cfg.n_residual_layers {
                res.push(ResBlock::load(store, &format!("decoder.model.{idx}"), o, cfg.dilation_base.pow(j as u32), cfg)?);
                idx += 1;
            }
            mult /= 2;
            blocks.push((up, res));
        }
        let last = Conv1d::load(store, &format!("decoder.model.{}.conv.conv", idx + 1), (cfg.n_filters, cfg.channels, cfg.last_kernel_size), 1, 1, true, false)?;
        Ok(Self { init, blocks, last })
    }

    pub fn state(&self) -> SeanetState {
        let mut res = Vec::new();
        let mut convtrs = Vec::new();
        for (up, rb) in &self.blocks {
            convtrs.push(up.state());
            res.extend(rb.iter().map(|r| r.state()));
        }
        SeanetState { convs: vec![self.init.state(), self.last.state()], res, convtrs }
    }

    /// CPU oracle: `[dimension, t]` -> `[1, t * hop]`.
    pub fn step(&self, st: &mut SeanetState, x: &[f32]) -> Vec<f32> {
        let mut y = self.init.step(&mut st.convs[0], x, false);
        let mut ri = 0;
        for (i, (up, rb)) in self.blocks.iter().enumerate() {
            y = up.step(&mut st.convtrs[i], &y, true);
            for r in rb {
                y = r.step(&mut st.res[ri], &y);
                ri += 1;
            }
        }
        self.last.step(&mut st.convs[1], &y, true)
    }

    /// GPU plan: `x` `[t, dimension]` time-major (the transformer's layout) -> `[1, t * hop]`.
    pub fn plan(&self, b: &mut PlanBuilder<'_>, x: &Tensor) -> Result<Tensor> {
        let store = b.elu_on_store();
        // `pre`: `y` is stored ELU'd, where its only reader is an up- or the last conv (a
        // residual block reads its input raw too, for the skip)
        let mut pre = store;
        let mut y = self.init.plan(b, x, true, false, Elu { input: false, output: pre }, None)?;
        for (up, rb) in &self.blocks {
            let out = store && rb.is_empty();
            y = up.plan(b, &y, Elu { input: !pre, output: out }, false)?;
            pre = out;
            for (j, r) in rb.iter().enumerate() {
                pre = store && j + 1 == rb.len();
                y = r.plan(b, &y, pre)?;
            }
        }
        self.last.plan(b, &y, false, false, Elu { input: !pre, output: false }, None)
    }
}
