//! Moshi's language-model configuration, mirroring the keys of `_lm_kwargs` in Kyutai's
//! `moshi/models/loaders.py` (moshi 0.2.13). [`LmConfig::default`] is Moshi 7B
//! (`kyutai/moshiko-pytorch-bf16`, `model.safetensors`).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The LM config: temporal transformer, depformer and stream layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LmConfig {
    pub dim: usize,
    /// Text vocabulary (the text embedding has `text_card + 1` rows: the extra id is the
    /// initial token).
    pub text_card: usize,
    pub existing_text_padding_id: usize,
    /// Audio streams in: `dep_q` of Moshi plus the user's.
    pub n_q: usize,
    /// Audio streams generated per frame by the depformer.
    pub dep_q: usize,
    /// Audio codebook size (embeddings have `card + 1` rows: the extra id is the initial token).
    pub card: usize,
    pub num_heads: usize,
    pub num_layers: usize,
    pub hidden_scale: f64,
    pub causal: bool,
    pub layer_scale: Option<f64>,
    /// Temporal attention window in frames (3000 = 4 minutes).
    pub context: usize,
    pub max_period: f64,
    pub gating: String,
    pub norm: String,
    pub positional_embedding: String,
    pub depformer_dim: usize,
    pub depformer_dim_feedforward: usize,
    pub depformer_num_heads: usize,
    pub depformer_num_layers: usize,
    pub depformer_layer_scale: Option<f64>,
    pub depformer_multi_linear: bool,
    pub depformer_context: usize,
    pub depformer_max_period: f64,
    pub depformer_gating: String,
    pub depformer_pos_emb: String,
    pub depformer_weights_per_step: bool,
    /// Per stream (text, then `n_q` audio): how many frames it lags the frame clock.
    pub delays: Vec<usize>,
}

impl Default for LmConfig {
    fn default() -> Self {
        Self {
            dim: 4096,
            text_card: 32000,
            existing_text_padding_id: 3,
            n_q: 16,
            dep_q: 8,
            card: 2048,
            num_heads: 32,
            num_layers: 32,
            hidden_scale: 4.125,
            causal: true,
            layer_scale: None,
            context: 3000,
            max_period: 10000.0,
            gating: "silu".into(),
            norm: "rms_norm_f32".into(),
            positional_embedding: "rope".into(),
            depformer_dim: 1024,
            depformer_dim_feedforward: (4.125 * 1024.0) as usize,
            depformer_num_heads: 16,
            depformer_num_layers: 6,
            depformer_layer_scale: None,
            depformer_multi_linear: true,
            depformer_context: 8,
            depformer_max_period: 10000.0,
            depformer_gating: "silu".into(),
            depformer_pos_emb: "none".into(),
            depformer_weights_per_step: true,
            delays: vec![0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
        }
    }
}

/// Largest width, FFN width or vocabulary [`LmConfig::validate`] accepts (Moshi 7B's widest
/// is its 32000-token text vocabulary).
pub const MAX_WIDTH: usize = 1 << 18;
/// Most layers of either transformer.
pub const MAX_LAYERS: usize = 1024;
/// Most audio streams (`n_q`).
pub const MAX_STREAMS: usize = 256;
/// Longest attention window, in frames (or depformer steps).
pub const MAX_CONTEXT: usize = 1 << 20;
/// Longest stream delay, in frames.
pub const MAX_DELAY: usize = 1 << 10;
/// Most parameters of a whole LM (Moshi 7B has 7.69e9).
pub const MAX_PARAMETERS: u64 = 1 << 36;

/// The hidden width of a SiLU-gated FFN of `dim_feedforward` (moshi.modules.gating
/// `ActivationGating`): `21 dim / 8` when `dim_feedforward == 4 dim`, else
/// `2 dim_feedforward / 3`.
pub fn gated_hidden(dim: usize, dim_feedforward: usize) -> usize {
    if dim_feedforward == 4 * dim {
        21 * dim / 8
    } else {
        2 * dim_feedforward / 3
    }
}

impl LmConfig {
    /// Parse a JSON config with Kyutai's keys (missing keys take Moshi 7B's values) and check
    /// it. [`Error::Config`] for text that is not JSON, a value of the wrong type, a key the
    /// config does not have (named, as Mimi's config does), or a value [`Self::validate`]
    /// refuses.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::config("(LM config JSON)", e))?;
        // serde reads a struct from an array of its fields too: only objects are configs
        if !v.is_object() {
            return Err(Error::config("(LM config JSON)", "must be a JSON object"));
        }
        let c: Self = serde_json::from_value(v).map_err(|e| Error::config("(LM config JSON)", e))?;
        c.validate()?;
        Ok(c)
    }

    /// Hidden width of the temporal FFN (11264 for Moshi 7B).
    pub fn hidden(&self) -> usize {
        gated_hidden(self.dim, (self.hidden_scale * self.dim as f64) as usize)
    }

    /// Hidden width of the depformer FFN.
    pub fn depformer_hidden(&self) -> usize {
        gated_hidden(self.depformer_dim, self.depformer_dim_feedforward)
    }

    /// User audio streams fed in per frame (`n_q - dep_q`).
    pub fn user_streams(&self) -> usize {
        self.n_q - self.dep_q
    }

    /// The largest delay: LMGen yields nothing for this many frames.
    pub fn max_delay(&self) -> usize {
        self.delays.iter().copied().max().unwrap_or(0)
    }

    /// Check the fields this implementation relies on; errors name the field. Sizes must be
    /// positive and at most [`MAX_WIDTH`] (widths, vocabularies), [`MAX_LAYERS`] (layers),
    /// [`MAX_STREAMS`] (streams) or [`MAX_CONTEXT`] (frames), and the whole model at most
    /// [`MAX_PARAMETERS`]: a config past them is a typo, refused before anything is sized
    /// from it.
    pub fn validate(&self) -> Result<()> {
        let need = |ok: bool, field: &str, why: &str| if ok { Ok(()) } else { Err(Error::config(field, why)) };
        let size = |field: &str, v: usize, max: usize| {
            need(v >= 1 && v <= max, field, &format!("must be between 1 and {max}, got {v}"))
        };
        for (field, v) in [
            ("dim", self.dim),
            ("text_card", self.text_card),
            ("card", self.card),
            ("num_heads", self.num_heads),
            ("depformer_dim", self.depformer_dim),
            ("depformer_dim_feedforward", self.depformer_dim_feedforward),
            ("depformer_num_heads", self.depformer_num_heads),
        ] {
            size(field, v, MAX_WIDTH)?;
        }
        size("num_layers", self.num_layers, MAX_LAYERS)?;
        size("depformer_num_layers", self.depformer_num_layers, MAX_LAYERS)?;
        size("n_q", self.n_q, MAX_STREAMS)?;
        size("context", self.context, MAX_CONTEXT)?;
        size("depformer_context", self.depformer_context, MAX_CONTEXT)?;
        need(
            self.hidden_scale.is_finite() && self.hidden_scale > 0.0 && self.hidden_scale * self.dim as f64 <= MAX_WIDTH as f64,
            "hidden_scale",
            &format!("must be positive with hidden_scale * dim at most {MAX_WIDTH}"),
        )?;
        for (field, p) in [("max_period", self.max_period), ("depformer_max_period", self.depformer_max_period)] {
            need(p.is_finite() && p > 0.0, field, "must be a positive number")?;
        }
        need(
            self.existing_text_padding_id < self.text_card,
            "existing_text_padding_id",
            &format!("must be a text token, below text_card = {}", self.text_card),
        )?;
        need(self.delays.len() == self.n_q + 1, "delays", "needs one delay per stream (1 + n_q)")?;
        need(self.delays.iter().all(|&d| d <= MAX_DELAY), "delays", &format!("must be at most {MAX_DELAY} frames"))?;
        need(self.dep_q >= 1 && self.dep_q <= self.n_q, "dep_q", "must be between 1 and n_q")?;
        need(self.dim % self.num_heads == 0 && (self.dim / self.num_heads) % 2 == 0, "num_heads", "must divide dim into even head dims")?;
        need(
            self.depformer_dim % self.depformer_num_heads == 0,
            "depformer_num_heads",
            "must divide depformer_dim",
        )?;
        need(self.causal, "causal", "only a causal (streaming) LM is supported")?;
        need(self.gating == "silu" && self.depformer_gating == "silu", "gating", "only SiLU gating is supported")?;
        need(self.norm == "rms_norm_f32", "norm", "only rms_norm_f32 is supported")?;
        need(self.positional_embedding == "rope", "positional_embedding", "only rope is supported")?;
        need(self.depformer_pos_emb == "none", "depformer_pos_emb", "only none is supported")?;
        need(self.depformer_weights_per_step && self.depformer_multi_linear, "depformer_weights_per_step", "only per-step depformer weights are supported")?;
        need(self.layer_scale.is_none() && self.depformer_layer_scale.is_none(), "layer_scale", "LayerScale in the LM is not supported")?;
        for (field, k) in [
            ("dim", self.dim),
            ("hidden_scale", self.hidden()),
            ("depformer_dim", self.depformer_dim),
            ("depformer_dim_feedforward", self.depformer_hidden()),
        ] {
            need(k >= 32 && k % 32 == 0, field, "linear input widths must be positive multiples of 32 (Q8_0 blocks)")?;
        }
        let mut total: u64 = 0;
        for (_, shape) in self.tensor_specs() {
            let n = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
            total = n.and_then(|n| total.checked_add(n)).unwrap_or(u64::MAX);
        }
        need(total <= MAX_PARAMETERS, "dim", &format!("the model would have {total} parameters, more than {MAX_PARAMETERS}"))?;
        Ok(())
    }

    /// Every tensor of the released `model.safetensors` for this geometry, `(name, shape)`:
    /// stacked attention names (`self_attn.in_proj_weight`, `self_attn.out_proj.weight`;
    /// the depformer's steps stacked along dim 0), per-step depformer gating.
    pub fn tensor_specs(&self) -> Vec<(String, Vec<usize>)> {
        let (d, dd, k) = (self.dim, self.depformer_dim, self.dep_q);
        let (h, hd) = (self.hidden(), self.depformer_hidden());
        let mut v: Vec<(String, Vec<usize>)> = Vec::new();
        for n in 0..self.n_q {
            v.push((format!("emb.{n}.weight"), vec![self.card + 1, d]));
        }
        v.push(("text_emb.weight".into(), vec![self.text_card + 1, d]));
        v.push(("text_linear.weight".into(), vec![self.text_card, d]));
        for l in 0..self.num_layers {
            let p = format!("transformer.layers.{l}");
            v.push((format!("{p}.self_attn.in_proj_weight"), vec![3 * d, d]));
            v.push((format!("{p}.self_attn.out_proj.weight"), vec![d, d]));
            v.push((format!("{p}.norm1.alpha"), vec![1, 1, d]));
            v.push((format!("{p}.norm2.alpha"), vec![1, 1, d]));
            v.push((format!("{p}.gating.linear_in.weight"), vec![2 * h, d]));
            v.push((format!("{p}.gating.linear_out.weight"), vec![d, h]));
        }
        v.push(("out_norm.alpha".into(), vec![1, 1, d]));
        for s in 0..k {
            v.push((format!("depformer_in.{s}.weight"), vec![dd, d]));
        }
        for j in 0..k - 1 {
            v.push((format!("depformer_emb.{j}.weight"), vec![self.card + 1, dd]));
        }
        v.push(("depformer_text_emb.weight".into(), vec![self.text_card + 1, dd]));
        for l in 0..self.depformer_num_layers {
            let p = format!("depformer.layers.{l}");
            v.push((format!("{p}.self_attn.in_proj_weight"), vec![k * 3 * dd, dd]));
            v.push((format!("{p}.self_attn.out_proj.weight"), vec![k * dd, dd]));
            v.push((format!("{p}.norm1.alpha"), vec![1, 1, dd]));
            v.push((format!("{p}.norm2.alpha"), vec![1, 1, dd]));
            for s in 0..k {
                v.push((format!("{p}.gating.{s}.linear_in.weight"), vec![2 * hd, dd]));
                v.push((format!("{p}.gating.{s}.linear_out.weight"), vec![dd, hd]));
            }
        }
        for s in 0..k {
            v.push((format!("linears.{s}.weight"), vec![self.card, dd]));
        }
        v
    }
}
