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
use crate::gpu::{GpuLimits, Requirements};
use crate::weights::place::{Placing, TensorMap};
use crate::weights::stream::{ByteSink, CheckpointReader, Limits, ReadState};

/// Host memory per part while streaming: 16 MiB of f32.
pub const PART_BYTES: u64 = 16 << 20;

/// What the codec of `config` needs of a device with `limits`, from the config alone: every
/// weight buffer [`super::Mimi::new`] uploads, labelled as it labels them (the checkpoint's
/// convolutions; per transformer layer `{encoder,decoder}_transformer.layers.L.{in_proj,
/// out_proj, linear1, linear2, norm1.weight, ...}`; per RVQ its input and output projections and the codebooks of its
/// `num_codebooks` active levels, `[levels, bins, dimension]`, once for each direction) and
/// the transformers' KV rings (`context` slots). [`Requirements::check`] says whether it
/// fits; [`MimiLoader::checked`] runs it before any byte. [`Error::Config`] for an invalid
/// config.
pub fn requirements(config: &MimiConfig, limits: &GpuLimits) -> Result<Requirements> {
    config.validate()?;
    let mut r = Requirements::new("Mimi", *limits);
    for (name, shape) in config.tensor_specs() {
        // the quantizer and the transformers are counted below, as the plans upload them
        if name.starts_with("quantizer.") || name.contains("_transformer.") {
            continue;
        }
        r.buffer(name, 4 * shape.iter().map(|&n| n as u64).product::<u64>());
    }
    let t = &config.transformer;
    let (d, f) = (t.d_model as u64, t.dim_feedforward as u64);
    for which in ["encoder_transformer", "decoder_transformer"] {
        for l in 0..t.num_layers {
            let p = format!("{which}.layers.{l}");
            for (n, len) in [("norm1.weight", d), ("norm1.bias", d), ("norm2.weight", d), ("norm2.bias", d), ("in_proj", 3 * d * d), ("out_proj", d * d), ("linear1", f * d), ("linear2", d * f), ("layer_scale_1", d), ("layer_scale_2", d)] {
                r.buffer(format!("{p}.{n}"), 4 * len);
            }
        }
    }
    let q = &config.quantizer;
    let n = config.num_codebooks;
    for (which, levels) in [("rvq_first", n.min(1)), ("rvq_rest", n.saturating_sub(1))] {
        if levels == 0 {
            continue;
        }
        let p = format!("quantizer.{which}");
        let codebooks = 4 * levels as u64 * q.bins as u64 * q.dimension as u64;
        r.buffer(format!("{p}.input_proj"), 4 * q.dimension as u64 * q.input_dimension as u64);
        r.buffer(format!("{p}.codebooks"), codebooks);
        r.buffer(format!("{p}.output_proj"), 4 * q.output_dimension as u64 * q.dimension as u64);
        r.buffer(format!("{p}.codebooks"), codebooks);
    }
    for which in ["encoder_transformer", "decoder_transformer"] {
        for l in 0..t.num_layers {
            let p = format!("{which}.layers.{l}.self_attn");
            r.buffer(format!("{p}.k_ring"), 4 * t.context as u64 * t.d_model as u64);
            r.buffer(format!("{p}.v_ring"), 4 * t.context as u64 * t.d_model as u64);
            r.buffer(format!("{p}.pos_ring"), 4 * t.context as u64);
        }
    }
    Ok(r)
}

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

    /// [`Self::new`] for a codec that will run on a device with `limits`: refused with
    /// [`Error::Limit`] (naming the limit, the bytes needed and allowed) before any byte
    /// when it cannot fit ([`requirements`]).
    pub fn checked(config: &MimiConfig, limits: &GpuLimits, total_len: Option<u64>) -> Result<Self> {
        requirements(config, limits)?.check()?;
        Self::new(config, total_len)
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
