//! The web app's small synthetic models (`www/config/mimi-small.json`,
//! `www/config/moshi-small.json`), as real-format checkpoints loaded through the streaming
//! loaders the CLI and the browser use: for the reliability tests (device loss, long
//! sessions, lifecycle), where what matters is the machinery around the models.
#![allow(dead_code)]

use std::rc::Rc;

use inferencelayer::mimi::synthetic::calibrated_checkpoint;
use inferencelayer::moshi::{LmConfig, LmGpuWeights, LmLoader, Sampling};
use inferencelayer::session::Session;
use inferencelayer::weights::stream::ByteSink;
use inferencelayer::weights::synthetic;
use inferencelayer::mimi::MimiLoader;
use inferencelayer::{GpuContext, MimiConfig, MimiWeights, Result};

pub const MIMI_JSON: &str = include_str!("../../www/config/mimi-small.json");
pub const LM_JSON: &str = include_str!("../../www/config/moshi-small.json");

/// Both small models' configs and checkpoint bytes, and the golden clip at 24 kHz.
pub struct Small {
    pub mimi_config: MimiConfig,
    pub lm_config: LmConfig,
    pub mimi_bytes: Vec<u8>,
    pub lm_bytes: Vec<u8>,
    pub clip: Vec<f32>,
}

/// The small models, with the LM's `context` replaced when given.
pub fn small(lm_context: Option<usize>) -> Small {
    let mimi_config = MimiConfig::from_json(MIMI_JSON).expect("mimi-small.json");
    let mut lm_config = LmConfig::from_json(LM_JSON).expect("moshi-small.json");
    if let Some(c) = lm_context {
        lm_config.context = c;
    }
    let clip = super::golden().pcm;
    let mimi_bytes = calibrated_checkpoint(&mimi_config, synthetic::SEED, &clip).expect("small Mimi checkpoint");
    let lm_bytes = synthetic::lm_checkpoint(&lm_config.tensor_specs(), synthetic::SEED).expect("small LM checkpoint");
    Small { mimi_config, lm_config, mimi_bytes, lm_bytes, clip }
}

fn push<K: ByteSink>(mut sink: K, bytes: &[u8]) -> Result<K> {
    for chunk in bytes.chunks(1 << 16) {
        sink.push(chunk)?;
    }
    sink.finish()?;
    Ok(sink)
}

impl Small {
    /// Mimi's weights through [`MimiLoader`].
    pub fn mimi(&self) -> Result<MimiWeights> {
        push(MimiLoader::new(&self.mimi_config, Some(self.mimi_bytes.len() as u64))?, &self.mimi_bytes)?.into_weights()
    }

    /// The LM's weights streamed through [`LmLoader`] into GPU buffers on `ctx`.
    pub fn lm(&self, ctx: &Rc<GpuContext>) -> Result<LmGpuWeights> {
        push(LmLoader::new(ctx.clone(), &self.lm_config, Some(self.lm_bytes.len() as u64))?, &self.lm_bytes)?.into_weights()
    }

    /// A greedy session on `ctx`, both models loaded from their bytes.
    pub async fn session(&self, ctx: &Rc<GpuContext>) -> Result<Session> {
        let mimi = self.mimi()?;
        let lm = self.lm(ctx)?;
        Session::new(ctx.clone(), &mimi, &lm, Sampling::greedy()).await
    }

    /// Frame `i` of the golden clip played in a loop (1920 samples at 24 kHz).
    pub fn frame(&self, i: usize) -> Vec<f32> {
        let fs = self.mimi_config.frame_size();
        let n = self.clip.len() / fs;
        self.clip[(i % n) * fs..(i % n + 1) * fs].to_vec()
    }
}
