//! Mimi's weights from a stream: [`MimiLoader`] is a [`ByteSink`] reading Kyutai's Mimi
//! checkpoint (safetensors, or a GGUF of the same names) chunk by chunk into an f32
//! [`TensorMap`], then building [`MimiWeights`] from it. The codec's plans and its oracle
//! keep CPU tensors (the released file is 385 MB of f32), so the map is the model's own
//! memory, not a copy: each tensor moves from the map into the weights.
//!
//! Every tensor of [`MimiConfig::tensor_specs`] is wanted (transformer attention under the
//! current `self_attn.in_projs.0.weight` names or the released `self_attn.in_proj_weight`);
//! a missing or misshapen one is refused at the header, before any data. Other tensors are
//! read past, as [`MimiWeights::load`] ignores them in a file held in memory.

use super::{MimiConfig, MimiWeights};
use crate::error::{Error, Result};
use crate::weights::place::{Placing, TensorMap};
use crate::weights::stream::{ByteSink, CheckpointReader, Limits, ReadState};

/// Host memory per part while streaming: 16 MiB of f32.
pub const PART_BYTES: u64 = 16 << 20;

/// Streams a Mimi checkpoint into [`MimiWeights`]: push the file's bytes, call
/// [`ByteSink::finish`], then [`MimiLoader::into_weights`].
pub struct MimiLoader {
    config: MimiConfig,
    reader: CheckpointReader<Placing<TensorMap>>,
}

impl MimiLoader {
    /// A loader for `config`, for a file of `total_len` bytes when known. [`Error::Config`]
    /// for an invalid config.
    pub fn new(config: &MimiConfig, total_len: Option<u64>) -> Result<Self> {
        config.validate()?;
        let mut map = TensorMap::new(config.tensor_specs(), PART_BYTES);
        for (name, _) in config.tensor_specs() {
            for (split, stacked) in [("self_attn.in_projs.0.weight", "self_attn.in_proj_weight"), ("self_attn.out_projs.0.weight", "self_attn.out_proj.weight")] {
                if let Some(p) = name.strip_suffix(split) {
                    map = map.alias(&name, &format!("{p}{stacked}"));
                }
            }
        }
        Ok(Self {
            config: config.clone(),
            reader: CheckpointReader::new(total_len, Limits::default(), Placing::new(map)),
        })
    }

    /// The weights, once [`ByteSink::finish`] returned `Ok`; otherwise [`Error::Input`]
    /// (nothing of a failed load is kept).
    pub fn into_weights(self) -> Result<MimiWeights> {
        match self.reader.state() {
            ReadState::Finished => {}
            ReadState::Failed => return Err(Error::Input("the Mimi load failed; its tensors were dropped".into())),
            ReadState::Reading => return Err(Error::Input("the Mimi load has not finished".into())),
        }
        let map = self.reader.into_sink().into_placer()?;
        MimiWeights::load(&self.config, &map)
    }
}

impl ByteSink for MimiLoader {
    fn push(&mut self, chunk: &[u8]) -> Result<()> {
        self.reader.push(chunk)
    }

    fn finish(&mut self) -> Result<()> {
        self.reader.finish()
    }

    fn current_tensor(&self) -> Option<&str> {
        self.reader.current_tensor()
    }
}
