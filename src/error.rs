//! The crate's one error type: every failure a caller can meet, each naming what was wrong
//! (the tensor, the field, the file, the GPU limit) and, where it helps, what to do.

use std::fmt;

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong, from a bad checkpoint to a lost GPU device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No WebGPU/Vulkan/Metal adapter could be found.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The adapter refused the device (limits or features).
    #[error("GPU device request failed: {0}")]
    Device(String),
    /// A GPU validation, out-of-memory or internal error reported by wgpu or the browser.
    #[error("GPU error: {0}")]
    Gpu(String),
    /// The GPU device was lost (destroyed, a driver reset or update, the browser reclaiming
    /// it, the system sleeping): every buffer and pipeline on it is gone and every later call
    /// on the models built on it fails with this error. The message is the loss's reason as
    /// the driver or browser gave it. Recovery: drop the models and load them again, which
    /// opens a new device on a new adapter (in a browser the weights come back from the
    /// Cache API without a download).
    #[error("GPU device lost ({0}): load the models again to continue on a new device")]
    DeviceLost(String),
    /// A buffer the model needs is larger than the device allows: `limit` is the WebGPU
    /// limit's name (`maxStorageBufferBindingSize`, `maxBufferSize`), `needed` and `allowed`
    /// are bytes.
    #[error("GPU limit {limit} exceeded: {what} needs {needed} bytes ({}), the device allows {allowed} ({})", mib(*.needed), mib(*.allowed))]
    Limit { limit: &'static str, what: String, needed: u64, allowed: u64 },
    /// A checkpoint lacks a tensor the model needs.
    #[error("checkpoint is missing tensor `{0}`")]
    MissingTensor(String),
    /// A checkpoint tensor has the wrong shape.
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    Shape { name: String, expected: Vec<usize>, found: Vec<usize> },
    /// A checkpoint tensor has a dtype the loader cannot read.
    #[error("tensor `{name}` has dtype {found}, expected F32, F16 or BF16")]
    Dtype { name: String, found: String },
    /// The bytes are not a valid safetensors file (truncated, bad header, bad offsets).
    #[error("invalid safetensors checkpoint: {0}")]
    Checkpoint(String),
    /// A configuration field is missing, malformed or inconsistent.
    #[error("invalid config field `{field}`: {why}")]
    Config { field: String, why: String },
    /// Input of the wrong size or range for a model call.
    #[error("invalid input: {0}")]
    Input(String),
    /// A code outside `[0, bins)`.
    #[error("code {code} at frame {frame}, codebook {codebook} is out of range (bins = {bins})")]
    CodeOutOfRange { frame: usize, codebook: usize, code: i64, bins: usize },
    /// A file could not be read or written, or has the wrong format.
    #[error("{path}: {why}")]
    File { path: String, why: String },
    /// A streamed checkpoint (`format` is `safetensors` or `GGUF`) is malformed or ended
    /// early: `offset` is the byte of the file where the problem lies, `tensor` the tensor
    /// it belongs to, where there is one.
    #[error("{format} stream, byte {offset}{}: {why}", tensor_note(.tensor))]
    Stream { format: &'static str, offset: u64, tensor: Option<String>, why: String },
    /// A tensor cannot be stored as Q8_0 (row length not a multiple of 32, a value that is
    /// not finite or too large for an f16 block scale).
    #[error("tensor `{name}` cannot be stored as Q8_0: {why}")]
    Quant { name: String, why: String },
    /// A GGUF tensor whose ggml type the loader does not read (it reads F32, F16, BF16 and
    /// Q8_0).
    #[error("tensor `{name}` has ggml type {type_name} (id {type_id}); the loader reads F32, F16, BF16 and Q8_0")]
    GgufType { name: String, type_id: u32, type_name: String },
    /// A checkpoint holds a tensor the model has no place for (a wrong or renamed file).
    #[error("checkpoint holds tensor `{0}`, which the model does not use")]
    UnknownTensor(String),
    /// A server answered a checkpoint request with an HTTP error status (after the retries
    /// a 5xx, 408 or 429 gets).
    #[error("HTTP {status} from {url}: {why}")]
    Http { url: String, status: u16, why: String },
    /// The connection to `url` failed or dropped at file byte `offset`, and resuming from
    /// there did not succeed within the retries allowed.
    #[error("network error reading {url} at byte {offset}: {why}")]
    Network { url: String, offset: u64, why: String },
    /// A response that cannot be trusted: a body longer than its `Content-Length`, a
    /// `Content-Range` that does not start where asked, a file that changed between two
    /// requests. `offset` is the file byte the load had reached.
    #[error("bad response from {url} at byte {offset}: {why}")]
    Transfer { url: String, offset: u64, why: String },
    /// The load was cancelled (an `AbortSignal`, or the caller's cancel flag) at file byte
    /// `offset`; nothing of it is kept.
    #[error("loading {url} was cancelled at byte {offset}")]
    Aborted { url: String, offset: u64 },
    /// The browser's Cache API is missing (an insecure context) or failed (quota).
    #[error("browser cache: {0}")]
    Cache(String),
    /// A SentencePiece text tokenizer model that cannot be read (malformed protobuf, or a
    /// model sentencepiece itself refuses to load), or a token id the model does not have.
    #[error("text tokenizer: {0}")]
    Tokenizer(String),
}

fn tensor_note(tensor: &Option<String>) -> String {
    tensor.as_ref().map(|t| format!(" (tensor `{t}`)")).unwrap_or_default()
}

impl Error {
    pub(crate) fn config(field: impl Into<String>, why: impl fmt::Display) -> Self {
        Error::Config { field: field.into(), why: why.to_string() }
    }
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn file(path: impl fmt::Display, why: impl fmt::Display) -> Self {
        Error::File { path: path.to_string(), why: why.to_string() }
    }
}

/// `bytes` for messages: in MiB, or KiB, or bytes below 1 KiB.
pub(crate) fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}
