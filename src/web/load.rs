//! Weights from whole files: the bytes the Worker fetched (or read from a `File`), parsed
//! into the models' weights. The one place that changes when weights stream from the
//! network straight into GPU buffers.

use crate::error::{Error, Result};
use crate::mimi::{MimiConfig, MimiWeights};
use crate::moshi::{LmConfig, LmWeights, TextTokenizer};

/// A Mimi config from JSON (Kyutai's keys, missing keys the released values), or the
/// released codec when `None`.
pub fn mimi_config(json: Option<&str>) -> Result<MimiConfig> {
    json.map(MimiConfig::from_json).unwrap_or_else(|| Ok(MimiConfig::default()))
}

/// An LM config from JSON (Kyutai's `_lm_kwargs` keys), or Moshi 7B when `None`.
pub fn lm_config(json: Option<&str>) -> Result<LmConfig> {
    json.map(LmConfig::from_json).unwrap_or_else(|| Ok(LmConfig::default()))
}

/// Mimi's weights from a safetensors file's bytes.
pub fn mimi_weights(config: &MimiConfig, bytes: &[u8]) -> Result<MimiWeights> {
    MimiWeights::from_safetensors(config, bytes).map_err(|e| context("Mimi checkpoint", e))
}

/// The LM's weights from a safetensors file's bytes.
pub fn lm_weights(config: &LmConfig, bytes: &[u8]) -> Result<LmWeights> {
    LmWeights::from_safetensors(config, bytes).map_err(|e| context("Moshi LM checkpoint", e))
}

/// The text tokenizer from a SentencePiece model's bytes.
pub fn tokenizer(bytes: &[u8]) -> Result<TextTokenizer> {
    TextTokenizer::from_bytes(bytes).map_err(|e| context("text tokenizer", e))
}

fn context(what: &str, e: Error) -> Error {
    match e {
        Error::Checkpoint(m) => Error::Checkpoint(format!("{what}: {m}")),
        Error::Input(m) => Error::Input(format!("{what}: {m}")),
        other => other,
    }
}
