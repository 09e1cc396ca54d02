//! Mimi's configuration, mirroring the keys of `_mimi_config` in Kyutai's
//! `moshi/models/loaders.py` (moshi 0.2.13). [`MimiConfig::default`] is the released codec
//! (`tokenizer-e351c8d8-checkpoint125.safetensors`).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Largest width (channels, model width, FFN width, codebook size and dimension)
/// [`MimiConfig::validate`] accepts; the released codec's widest is 2048.
pub const MAX_WIDTH: usize = 1 << 16;
/// Largest kernel of a SEANet convolution.
pub const MAX_KERNEL: usize = 1024;
/// Most SEANet residual layers per block, or transformer layers.
pub const MAX_LAYERS: usize = 256;
/// Most SEANet stages (`seanet.ratios`).
pub const MAX_RATIOS: usize = 8;
/// Largest SEANet ratio (stride of one stage).
pub const MAX_RATIO: usize = 64;
/// Most codebooks of the quantizer.
pub const MAX_CODEBOOKS: usize = 1024;
/// Longest transformer window, in steps.
pub const MAX_CONTEXT: usize = 1 << 20;
/// Highest sample rate, in Hz, and the longest frame, in samples.
pub const MAX_SAMPLE_RATE: usize = 1 << 20;

/// SEANet encoder/decoder geometry (`_seanet_kwargs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SeanetConfig {
    pub channels: usize,
    pub dimension: usize,
    pub causal: bool,
    pub n_filters: usize,
    pub n_residual_layers: usize,
    pub activation: String,
    pub compress: usize,
    pub dilation_base: usize,
    pub disable_norm_outer_blocks: usize,
    pub kernel_size: usize,
    pub residual_kernel_size: usize,
    pub last_kernel_size: usize,
    pub norm: String,
    pub pad_mode: String,
    /// Decoder order; the encoder uses them reversed.
    pub ratios: Vec<usize>,
    pub true_skip: bool,
}

impl Default for SeanetConfig {
    fn default() -> Self {
        Self {
            channels: 1,
            dimension: 512,
            causal: true,
            n_filters: 64,
            n_residual_layers: 1,
            activation: "ELU".into(),
            compress: 2,
            dilation_base: 2,
            disable_norm_outer_blocks: 0,
            kernel_size: 7,
            residual_kernel_size: 3,
            last_kernel_size: 3,
            norm: "none".into(),
            pad_mode: "constant".into(),
            ratios: vec![8, 6, 5, 4],
            true_skip: true,
        }
    }
}

/// Split residual vector quantizer (`_quantizer_kwargs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuantizerConfig {
    pub dimension: usize,
    /// Codebooks in the checkpoint (1 semantic + the rest acoustic).
    pub n_q: usize,
    pub bins: usize,
    pub input_dimension: usize,
    pub output_dimension: usize,
}

impl Default for QuantizerConfig {
    fn default() -> Self {
        Self { dimension: 256, n_q: 32, bins: 2048, input_dimension: 512, output_dimension: 512 }
    }
}

/// The encoder and decoder transformers (`_transformer_kwargs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformerConfig {
    pub d_model: usize,
    pub num_heads: usize,
    pub num_layers: usize,
    pub causal: bool,
    pub layer_scale: Option<f64>,
    /// Attention window in steps (25 Hz steps: 250 is 10 s).
    pub context: usize,
    pub conv_layout: bool,
    pub max_period: f64,
    pub gating: String,
    pub norm: String,
    pub positional_embedding: String,
    pub dim_feedforward: usize,
    pub input_dimension: usize,
    pub output_dimensions: Vec<usize>,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        Self {
            d_model: 512,
            num_heads: 8,
            num_layers: 8,
            causal: true,
            layer_scale: Some(0.01),
            context: 250,
            conv_layout: true,
            max_period: 10000.0,
            gating: "none".into(),
            norm: "layer_norm".into(),
            positional_embedding: "rope".into(),
            dim_feedforward: 2048,
            input_dimension: 512,
            output_dimensions: vec![512],
        }
    }
}

/// The whole codec (`_mimi_config`), plus how many codebooks to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MimiConfig {
    pub sample_rate: usize,
    pub channels: usize,
    pub frame_rate: f64,
    pub seanet: SeanetConfig,
    pub quantizer: QuantizerConfig,
    pub transformer: TransformerConfig,
    /// Codebooks encoded and decoded per frame, 1..=quantizer.n_q (Moshi uses 8).
    pub num_codebooks: usize,
}

impl Default for MimiConfig {
    fn default() -> Self {
        Self {
            sample_rate: 24000,
            channels: 1,
            frame_rate: 12.5,
            seanet: SeanetConfig::default(),
            quantizer: QuantizerConfig::default(),
            transformer: TransformerConfig::default(),
            num_codebooks: 8,
        }
    }
}

impl MimiConfig {
    /// Parse a JSON config (Kyutai's keys; missing keys take the released values) and check it.
    /// [`Error::Config`] for text that is not JSON, a value of the wrong type, a key the config
    /// does not have (named), or a value [`Self::validate`] refuses.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::config("(mimi config JSON)", e))?;
        // serde reads a struct from an array of its fields too: only objects are configs
        let Some(m) = v.as_object() else { return Err(Error::config("(mimi config JSON)", "must be a JSON object")) };
        for key in ["seanet", "quantizer", "transformer"] {
            if m.get(key).is_some_and(|s| !s.is_object()) {
                return Err(Error::config(key, "must be a JSON object"));
            }
        }
        let c: Self = serde_json::from_value(v).map_err(|e| Error::config("(mimi config JSON)", e))?;
        c.validate()?;
        Ok(c)
    }

    /// The released geometry with `n` codebooks.
    pub fn with_codebooks(n: usize) -> Result<Self> {
        let c = Self { num_codebooks: n, ..Self::default() };
        c.validate()?;
        Ok(c)
    }

    /// Samples per frame (1920 at 24 kHz and 12.5 Hz).
    pub fn frame_size(&self) -> usize {
        (self.sample_rate as f64 / self.frame_rate).round() as usize
    }

    /// SEANet hop: samples per encoder step (960).
    pub fn hop_length(&self) -> usize {
        self.seanet.ratios.iter().product()
    }

    /// Encoder steps per frame (2: the learnt down/upsample stride).
    pub fn resample_stride(&self) -> usize {
        self.frame_size() / self.hop_length().max(1)
    }

    /// Check every field this implementation relies on; errors name the field.
    pub fn validate(&self) -> Result<()> {
        let s = &self.seanet;
        let t = &self.transformer;
        let q = &self.quantizer;
        let need = |ok: bool, field: &str, why: &str| if ok { Ok(()) } else { Err(Error::config(field, why)) };
        let size = |field: &str, v: usize, max: usize| {
            need(v >= 1 && v <= max, field, &format!("must be between 1 and {max}, got {v}"))
        };
        need(self.channels == 1 && s.channels == 1, "channels", "only mono (1) is supported")?;
        size("sample_rate", self.sample_rate, MAX_SAMPLE_RATE)?;
        need(self.frame_rate.is_finite() && self.frame_rate > 0.0, "frame_rate", "must be a positive number")?;
        let fs = self.sample_rate as f64 / self.frame_rate;
        need(fs.fract() == 0.0, "frame_rate", "sample_rate / frame_rate must be a whole number of samples")?;
        need(fs <= MAX_SAMPLE_RATE as f64, "frame_rate", &format!("a frame must be at most {MAX_SAMPLE_RATE} samples"))?;
        need(
            !s.ratios.is_empty() && s.ratios.len() <= MAX_RATIOS && s.ratios.iter().all(|&r| (1..=MAX_RATIO).contains(&r)),
            "seanet.ratios",
            &format!("must be 1 to {MAX_RATIOS} ratios, each between 1 and {MAX_RATIO}"),
        )?;
        for (field, v) in [
            ("seanet.dimension", s.dimension),
            ("seanet.n_filters", s.n_filters),
            ("transformer.dim_feedforward", t.dim_feedforward),
            ("quantizer.dimension", q.dimension),
            ("quantizer.bins", q.bins),
        ] {
            size(field, v, MAX_WIDTH)?;
        }
        for (field, v) in [
            ("seanet.kernel_size", s.kernel_size),
            ("seanet.residual_kernel_size", s.residual_kernel_size),
            ("seanet.last_kernel_size", s.last_kernel_size),
        ] {
            size(field, v, MAX_KERNEL)?;
        }
        size("seanet.n_residual_layers", s.n_residual_layers, MAX_LAYERS)?;
        size("seanet.compress", s.compress, MAX_WIDTH)?;
        need(
            (1..=MAX_KERNEL).contains(&s.dilation_base)
                && s.dilation_base.checked_pow(s.n_residual_layers as u32 - 1).is_some_and(|d| d <= MAX_WIDTH),
            "seanet.dilation_base",
            &format!("must be between 1 and {MAX_KERNEL}, with dilation_base^(n_residual_layers - 1) at most {MAX_WIDTH}"),
        )?;
        size("transformer.num_layers", t.num_layers, MAX_LAYERS)?;
        size("transformer.num_heads", t.num_heads, MAX_WIDTH)?;
        size("quantizer.n_q", q.n_q, MAX_CODEBOOKS)?;
        size("transformer.context", t.context, MAX_CONTEXT)?;
        need(t.max_period.is_finite() && t.max_period > 0.0, "transformer.max_period", "must be a positive number")?;
        need(t.layer_scale.is_none_or(f64::is_finite), "transformer.layer_scale", "must be a finite number")?;
        need(
            (s.n_filters as u64) << s.ratios.len() <= MAX_WIDTH as u64,
            "seanet.n_filters",
            &format!("n_filters * 2^(number of ratios) must be at most {MAX_WIDTH}"),
        )?;
        need(self.frame_size() % self.hop_length() == 0, "seanet.ratios", "their product must divide the frame size")?;
        need(self.resample_stride() >= 1, "frame_rate", "the encoder rate must be a multiple of the frame rate")?;
        need(s.causal, "seanet.causal", "only causal (streaming) SEANet is supported")?;
        need(s.activation == "ELU", "seanet.activation", "only ELU is supported")?;
        need(s.norm == "none", "seanet.norm", "only \"none\" (weight norm folded) is supported")?;
        need(s.pad_mode == "constant", "seanet.pad_mode", "only \"constant\" is supported")?;
        need(s.true_skip, "seanet.true_skip", "only true skip connections are supported")?;
        need(s.compress > 0 && s.n_filters % s.compress == 0, "seanet.compress", "must divide n_filters")?;
        need(s.kernel_size > 0 && s.residual_kernel_size > 0 && s.last_kernel_size > 0, "seanet.kernel_size", "must be positive")?;
        need(s.n_residual_layers >= 1, "seanet.n_residual_layers", "must be at least 1")?;
        need(t.d_model == s.dimension && t.input_dimension == s.dimension, "transformer.d_model", "must equal seanet.dimension")?;
        need(t.output_dimensions == vec![s.dimension], "transformer.output_dimensions", "must be [seanet.dimension]")?;
        need(t.num_heads > 0 && t.d_model % t.num_heads == 0 && (t.d_model / t.num_heads) % 2 == 0, "transformer.num_heads", "must divide d_model into even head dims")?;
        need(t.causal && t.positional_embedding == "rope", "transformer.positional_embedding", "only causal rope is supported")?;
        need(t.norm == "layer_norm" && t.gating == "none", "transformer.norm", "only layer_norm without gating is supported")?;
        need(t.layer_scale.is_some(), "transformer.layer_scale", "LayerScale is required")?;
        need(t.context > 0, "transformer.context", "must be positive")?;
        need(t.num_layers >= 1, "transformer.num_layers", "must be at least 1")?;
        need(q.input_dimension == s.dimension && q.output_dimension == s.dimension, "quantizer.input_dimension", "must equal seanet.dimension")?;
        need(q.n_q >= 2 && q.bins > 0 && q.dimension > 0, "quantizer.n_q", "needs at least 2 codebooks (1 semantic + acoustic)")?;
        need(
            self.num_codebooks >= 1 && self.num_codebooks <= q.n_q,
            "num_codebooks",
            &format!("must be between 1 and quantizer.n_q = {}", q.n_q),
        )?;
        Ok(())
    }

    /// Every tensor of Kyutai's Mimi state dict for this geometry, `(name, shape)`, in the
    /// reference's order (transformer attention under the current `in_projs.0` names).
    pub fn tensor_specs(&self) -> Vec<(String, Vec<usize>)> {
        let mut v: Vec<(String, Vec<usize>)> = Vec::new();
        let s = &self.seanet;
        let conv = |v: &mut Vec<(String, Vec<usize>)>, p: String, o: usize, i: usize, k: usize| {
            v.push((format!("{p}.conv.conv.weight"), vec![o, i, k]));
            v.push((format!("{p}.conv.conv.bias"), vec![o]));
        };
        let res = |v: &mut Vec<(String, Vec<usize>)>, p: String, dim: usize| {
            let hidden = dim / s.compress;
            conv(v, format!("{p}.block.1"), hidden, dim, s.residual_kernel_size);
            conv(v, format!("{p}.block.3"), dim, hidden, 1);
        };
        // encoder
        let mut mult = 1;
        conv(&mut v, "encoder.model.0".into(), s.n_filters, s.channels, s.kernel_size);
        let mut idx = 1;
        for &r in s.ratios.iter().rev() {
            for _ in 0..s.n_residual_layers {
                res(&mut v, format!("encoder.model.{idx}"), mult * s.n_filters);
                idx += 1;
            }
            conv(&mut v, format!("encoder.model.{}", idx + 1), mult * s.n_filters * 2, mult * s.n_filters, 2 * r);
            idx += 2;
            mult *= 2;
        }
        conv(&mut v, format!("encoder.model.{}", idx + 1), s.dimension, mult * s.n_filters, s.last_kernel_size);
        // decoder
        let mut mult = 1 << s.ratios.len();
        conv(&mut v, "decoder.model.0".into(), mult * s.n_filters, s.dimension, s.kernel_size);
        let mut idx = 1;
        for &r in &s.ratios {
            let p = format!("decoder.model.{}", idx + 1);
            v.push((format!("{p}.convtr.convtr.weight"), vec![mult * s.n_filters, mult * s.n_filters / 2, 2 * r]));
            v.push((format!("{p}.convtr.convtr.bias"), vec![mult * s.n_filters / 2]));
            idx += 2;
            for _ in 0..s.n_residual_layers {
                res(&mut v, format!("decoder.model.{idx}"), mult * s.n_filters / 2);
                idx += 1;
            }
            mult /= 2;
        }
        conv(&mut v, format!("decoder.model.{}", idx + 1), s.channels, s.n_filters, s.last_kernel_size);
        // transformers
        let t = &self.transformer;
        for which in ["encoder_transformer", "decoder_transformer"] {
            for l in 0..t.num_layers {
                let p = format!("{which}.transformer.layers.{l}");
                v.push((format!("{p}.self_attn.in_projs.0.weight"), vec![3 * t.d_model, t.d_model]));
                v.push((format!("{p}.self_attn.out_projs.0.weight"), vec![t.d_model, t.d_model]));
                v.push((format!("{p}.norm1.weight"), vec![t.d_model]));
                v.push((format!("{p}.norm1.bias"), vec![t.d_model]));
                v.push((format!("{p}.norm2.weight"), vec![t.d_model]));
                v.push((format!("{p}.norm2.bias"), vec![t.d_model]));
                v.push((format!("{p}.linear1.weight"), vec![t.dim_feedforward, t.d_model]));
                v.push((format!("{p}.linear2.weight"), vec![t.d_model, t.dim_feedforward]));
                v.push((format!("{p}.layer_scale_1.scale"), vec![t.d_model]));
                v.push((format!("{p}.layer_scale_2.scale"), vec![t.d_model]));
            }
        }
        // quantizer
        let q = &self.quantizer;
        for (which, levels) in [("rvq_first", 1), ("rvq_rest", q.n_q - 1)] {
            let p = format!("quantizer.{which}");
            v.push((format!("{p}.input_proj.weight"), vec![q.dimension, q.input_dimension, 1]));
            v.push((format!("{p}.output_proj.weight"), vec![q.output_dimension, q.dimension, 1]));
            for j in 0..levels {
                let c = format!("{p}.vq.layers.{j}._codebook");
                v.push((format!("{c}._initialized"), vec![1]));
                v.push((format!("{c}.cluster_usage"), vec![q.bins]));
                v.push((format!("{c}.embedding_sum"), vec![q.bins, q.dimension]));
            }
        }
        let d = s.dimension;
        let st = self.resample_stride();
        v.push(("downsample.conv.conv.conv.weight".into(), vec![d, d, 2 * st]));
        v.push(("upsample.convtr.convtr.convtr.weight".into(), vec![d, 1, 2 * st]));
        v
    }
}
