//! Weights for the Worker's models, from a URL (streamed by `fetch` through the model
//! loaders, the LM straight into GPU buffers, with Range resume, the Cache API, progress and
//! an `AbortSignal`: [`super::fetch::fetch_into`]) or from a whole file's bytes (a `File`
//! the user picked, pushed through the same loaders).

use std::rc::Rc;

use web_sys::AbortSignal;

use super::fetch::{fetch_into, js_progress, FetchOptions};
use crate::error::{Error, Result};
use crate::gpu::{GpuContext, GpuLimits};
use crate::mimi::{MimiConfig, MimiLoader, MimiWeights};
use crate::moshi::{LmConfig, LmGpuWeights, LmLoader, TextTokenizer};
use crate::weights::stream::ByteSink;

/// A Mimi config from JSON (Kyutai's keys, missing keys the released values), or the
/// released codec when `None`.
pub fn mimi_config(json: Option<&str>) -> Result<MimiConfig> {
    json.map(MimiConfig::from_json).unwrap_or_else(|| Ok(MimiConfig::default()))
}

/// An LM config from JSON (Kyutai's `_lm_kwargs` keys), or Moshi 7B when `None`.
pub fn lm_config(json: Option<&str>) -> Result<LmConfig> {
    json.map(LmConfig::from_json).unwrap_or_else(|| Ok(LmConfig::default()))
}

/// Where a checkpoint comes from.
pub enum Source<'a> {
    /// A whole file's bytes.
    Bytes(&'a [u8]),
    /// A URL, fetched with progress (`{loaded, total, tensor, fromCache, retries}` to the JS
    /// function) and cancellation.
    Url { url: &'a str, progress: Option<js_sys::Function>, signal: Option<AbortSignal> },
}

async fn feed<K: ByteSink>(what: &str, source: Source<'_>, mut sink: K) -> Result<K> {
    match source {
        Source::Bytes(b) => {
            sink.push(b).and_then(|_| sink.finish()).map_err(|e| context(what, e))?;
            Ok(sink)
        }
        Source::Url { url, progress, signal } => {
            let mut cb = progress.map(js_progress);
            let opts = FetchOptions {
                progress: cb.as_mut().map(|f| f as &mut dyn FnMut(&crate::weights::source::Progress<'_>)),
                signal,
                ..FetchOptions::default()
            };
            Ok(fetch_into(url, sink, opts).await.map_err(|e| context(what, e))?.0)
        }
    }
}

/// Mimi's weights (safetensors, Kyutai's names) through [`MimiLoader`], for a codec on a
/// device with `limits`: refused before the source is opened when it cannot fit them. A
/// checkpoint whose tensors do not match `config` is refused with a hint to pass its config
/// as `config_option` (the caller's name for it, e.g. `mimiConfig`).
pub async fn mimi_weights(config: &MimiConfig, config_option: &str, limits: &GpuLimits, source: Source<'_>, len: Option<u64>) -> Result<MimiWeights> {
    let mismatch = |e| mimi_mismatch(e, config_option);
    let sink = feed("Mimi checkpoint", source, MimiLoader::checked(config, limits, len)?).await.map_err(mismatch)?;
    sink.into_weights().map_err(|e| mismatch(context("Mimi checkpoint", e)))
}

/// The LM's weights (safetensors or GGUF) through [`LmLoader`], into GPU buffers on `ctx`
/// (refused before the source is opened when the LM cannot fit the context's limits); a
/// checkpoint that does not match `config` is refused with a hint to pass its config as
/// `config_option` (e.g. `lmConfig`).
pub async fn lm_weights(ctx: Rc<GpuContext>, config: &LmConfig, config_option: &str, source: Source<'_>, len: Option<u64>) -> Result<LmGpuWeights> {
    let mismatch = |e| lm_mismatch(e, config_option);
    let sink = feed("Moshi LM checkpoint", source, LmLoader::new(ctx, config, len)?).await.map_err(mismatch)?;
    sink.into_weights().map_err(|e| mismatch(context("Moshi LM checkpoint", e)))
}

/// Mimi's weights from a whole safetensors file (the CPU oracle's path), refused as
/// [`mimi_weights`] refuses them.
pub fn mimi_weights_from_bytes(config: &MimiConfig, config_option: &str, bytes: &[u8]) -> Result<MimiWeights> {
    MimiWeights::from_safetensors(config, bytes).map_err(|e| mimi_mismatch(context("Mimi checkpoint", e), config_option))
}

/// The text tokenizer from a SentencePiece model's bytes.
pub fn tokenizer(bytes: &[u8]) -> Result<TextTokenizer> {
    TextTokenizer::from_bytes(bytes).map_err(|e| context("text tokenizer", e))
}

/// A Mimi checkpoint refused for its tensors (missing, unknown, misshapen) was most likely
/// made for another geometry than the config's: say to pass its config as `option`.
fn mimi_mismatch(e: Error, option: &str) -> Error {
    mismatch(e, "Mimi checkpoint", option, "the released codec's")
}

/// [`mimi_mismatch`] for the LM.
fn lm_mismatch(e: Error, option: &str) -> Error {
    mismatch(e, "Moshi LM checkpoint", option, "Moshi 7B's")
}

fn mismatch(e: Error, what: &str, option: &str, default: &str) -> Error {
    match e {
        Error::MissingTensor(_) | Error::UnknownTensor(_) | Error::Shape { .. } => Error::file(
            what,
            format!("{e}: the checkpoint does not match the config (or is another model's file); pass as `{option}` the config JSON it was made with (without one, {default} is assumed)"),
        ),
        e => e,
    }
}

fn context(what: &str, e: Error) -> Error {
    match e {
        Error::Checkpoint(m) => Error::Checkpoint(format!("{what}: {m}")),
        Error::Input(m) => Error::Input(format!("{what}: {m}")),
        Error::Stream { format, offset, tensor, why } => Error::Stream { format, offset, tensor, why: format!("{why} (reading the {what})") },
        other => other,
    }
}
