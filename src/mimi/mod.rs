//! Mimi, Kyutai's streaming neural audio codec: 24 kHz mono in 1920-sample (80 ms) frames,
//! each frame coded as `num_codebooks` codes of a split RVQ (1 semantic + acoustic).
//!
//! Encode, per frame: SEANet encoder `[1, 1920]` -> `[512, 2]`, encoder transformer,
//! learnt downsample (stride 2, replicate-first padding) -> latent `[512]`, split RVQ ->
//! codes. Decode mirrors it: RVQ decode, channel-wise learnt upsample (the reference's
//! `upsample_channel_wise_bug`, kept), decoder transformer, SEANet decoder -> `[1920]`.
//!
//! [`MimiWeights`] holds a checkpoint's tensors (read from memory, or streamed by
//! [`MimiLoader`]); [`Mimi`] runs them as two static GPU plans;
//! [`MimiCpu`] is the CPU oracle the tests hold the GPU to.

pub mod config;
pub mod conv;
pub mod loader;
pub mod quantization;
pub mod seanet;
pub mod synthetic;
pub mod transformer;

mod codec;
mod oracle;

pub use codec::Mimi;
pub use config::MimiConfig;
pub use loader::{requirements, MimiLoader};
pub use oracle::MimiCpu;

use crate::error::Result;
use crate::weights::{TensorSource, TensorStore};
use conv::{Conv1d, ConvTr1d};
use quantization::SplitRvq;
use seanet::{SeanetDecoder, SeanetEncoder};
use transformer::Transformer;

/// Every weight of the codec, loaded from Kyutai's Mimi state dict
/// (`tokenizer-e351c8d8-checkpoint125.safetensors` names).
pub struct MimiWeights {
    pub config: MimiConfig,
    pub encoder: SeanetEncoder,
    pub encoder_transformer: Transformer,
    /// `downsample.conv.conv.conv.weight` `[d, d, 2 stride]`, no bias, replicate padding.
    pub downsample: Conv1d,
    pub quantizer: SplitRvq,
    /// `upsample.convtr.convtr.convtr.weight` `[d, 1, 2 stride]`, channel-wise, no bias.
    pub upsample: ConvTr1d,
    pub decoder_transformer: Transformer,
    pub decoder: SeanetDecoder,
}

impl MimiWeights {
    /// Load from a checkpoint's tensors (a parsed file, or a streamed [`crate::weights::place::TensorMap`]);
    /// errors name the missing or misshapen tensor.
    pub fn load(config: &MimiConfig, store: &dyn TensorSource) -> Result<Self> {
        config.validate()?;
        let d = config.seanet.dimension;
        let st = config.resample_stride();
        Ok(Self {
            config: config.clone(),
            encoder: SeanetEncoder::load(store, &config.seanet)?,
            encoder_transformer: Transformer::load(store, "encoder_transformer", &config.transformer)?,
            downsample: Conv1d::load(store, "downsample.conv.conv.conv", (d, d, 2 * st), st, 1, false, true)?,
            quantizer: SplitRvq::load(store, &config.quantizer, config.num_codebooks)?,
            upsample: ConvTr1d::load(store, "upsample.convtr.convtr.convtr", (d, d, 2 * st), st, d, false)?,
            decoder_transformer: Transformer::load(store, "decoder_transformer", &config.transformer)?,
            decoder: SeanetDecoder::load(store, &config.seanet)?,
        })
    }

    /// Parse and load a safetensors file's bytes.
    pub fn from_safetensors(config: &MimiConfig, bytes: &[u8]) -> Result<Self> {
        Self::load(config, &TensorStore::from_bytes(bytes)?)
    }

    /// Samples per frame.
    pub fn frame_size(&self) -> usize {
        self.config.frame_size()
    }
}
