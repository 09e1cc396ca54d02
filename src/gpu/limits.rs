//! The device limits a model must fit, and what a model needs of them.
//!
//! WebGPU bounds every buffer twice: `maxBufferSize` (the buffer) and
//! `maxStorageBufferBindingSize` (the range a kernel binds); every buffer of our plans is
//! bound whole, so the smaller of the two is the largest buffer a plan can use. A browser
//! gives 128 MiB and 256 MiB unless the page asks for more ([`GpuLimits::WEBGPU_DEFAULT`]).
//!
//! [`Requirements`] is a model's answer from its config alone, before any byte of a
//! checkpoint: every buffer it will create (embedding tables already split into parts of
//! whole rows, [`split_table`]), the largest, the total, and whether they fit a device's
//! limits ([`Requirements::check`], an [`Error::Limit`] naming the limit and the bytes
//! needed and allowed). The loaders run it before they read, so a model that cannot fit is
//! refused before its download starts.

use crate::error::{mib, Error, Result};
use crate::weights::stream::split_rows;

/// WebGPU's name of the storage-binding limit.
pub const MAX_STORAGE_BINDING: &str = "maxStorageBufferBindingSize";
/// WebGPU's name of the buffer-size limit.
pub const MAX_BUFFER: &str = "maxBufferSize";

/// The two limits that bound a plan's buffers, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuLimits {
    /// `maxStorageBufferBindingSize`: the largest range one binding covers.
    pub max_storage_binding: u64,
    /// `maxBufferSize`: the largest buffer.
    pub max_buffer: u64,
}

impl GpuLimits {
    /// WebGPU's defaults, what every adapter gives: 128 MiB binding, 256 MiB buffer.
    pub const WEBGPU_DEFAULT: GpuLimits = GpuLimits { max_storage_binding: 128 << 20, max_buffer: 256 << 20 };

    /// The largest buffer that can be bound whole: the smaller limit.
    pub fn max_bound_buffer(&self) -> u64 {
        self.max_storage_binding.min(self.max_buffer)
    }

    /// The lower of each limit of `self` and `other` (an emulated limit never above the
    /// adapter's).
    pub fn min(&self, other: &GpuLimits) -> GpuLimits {
        GpuLimits {
            max_storage_binding: self.max_storage_binding.min(other.max_storage_binding),
            max_buffer: self.max_buffer.min(other.max_buffer),
        }
    }

    /// `Ok` when a buffer of `bytes`, bound whole, fits; else [`Error::Limit`] naming the
    /// limit it breaks (the binding limit first) and `what`.
    pub fn check(&self, what: &str, bytes: u64) -> Result<()> {
        let (limit, allowed) = if bytes > self.max_storage_binding {
            (MAX_STORAGE_BINDING, self.max_storage_binding)
        } else if bytes > self.max_buffer {
            (MAX_BUFFER, self.max_buffer)
        } else {
            return Ok(());
        };
        Err(Error::Limit { limit, what: what.to_string(), needed: bytes, allowed })
    }
}

impl std::fmt::Display for GpuLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{MAX_STORAGE_BINDING} {} ({}), {MAX_BUFFER} {} ({})", self.max_storage_binding, mib(self.max_storage_binding), self.max_buffer, mib(self.max_buffer))
    }
}

/// The parts a table of `rows` rows of `cols` f32 values becomes under `limits`: rows per
/// part and, per part, (first row, rows). One part when the table fits whole; parts of at
/// most [`GpuLimits::max_bound_buffer`] bytes otherwise, balanced as the streaming loader
/// balances its parts. [`Error::Limit`] when a single row does not fit.
pub fn split_table(name: &str, rows: usize, cols: usize, limits: &GpuLimits) -> Result<Vec<(usize, usize)>> {
    let row_bytes = 4 * cols.max(1) as u64;
    limits.check(&format!("one row of table `{name}`"), row_bytes)?;
    let (per, count) = split_rows(name, rows, row_bytes, limits.max_bound_buffer())?;
    Ok((0..count).map(|k| (k * per, per.min(rows.saturating_sub(k * per)))).filter(|&(_, n)| n > 0 || rows == 0).collect())
}

/// The buffer name of part `k` of `count` of table `name`: the name itself when whole.
pub fn part_name(name: &str, k: usize, count: usize) -> String {
    if count == 1 {
        name.to_string()
    } else {
        format!("{name}.part{k}")
    }
}

/// One buffer a model creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferNeed {
    /// The buffer's label (a checkpoint tensor's name, `NAME.partK` for a part of a split
    /// table, `NAME.quants` / `NAME.scales` for Q8_0).
    pub name: String,
    /// Bytes.
    pub bytes: u64,
}

/// What a model needs of the device, from its config alone (see the module doc).
#[derive(Clone, Debug)]
pub struct Requirements {
    /// The model (`Moshi LM`, `Mimi`).
    pub model: String,
    /// The limits the buffers were split for and are checked against.
    pub limits: GpuLimits,
    /// Every weight and streaming-state buffer, in the order the model creates them.
    pub buffers: Vec<BufferNeed>,
    /// Tables split into parts: (name, parts).
    pub split: Vec<(String, usize)>,
    /// The first table whose single row is larger than the limits allow (it cannot be
    /// split): `one row of table NAME` and the row's bytes.
    pub unsplittable: Option<BufferNeed>,
}

impl Requirements {
    /// An empty list for `model` under `limits`.
    pub fn new(model: &str, limits: GpuLimits) -> Self {
        Self { model: model.to_string(), limits, buffers: Vec::new(), split: Vec::new(), unsplittable: None }
    }

    /// Add a buffer bound whole.
    pub fn buffer(&mut self, name: impl Into<String>, bytes: u64) {
        self.buffers.push(BufferNeed { name: name.into(), bytes });
    }

    /// Add an f32 table of `[rows, cols]`, split as [`split_table`] splits it.
    pub fn table(&mut self, name: &str, rows: usize, cols: usize) {
        match split_table(name, rows, cols, &self.limits) {
            Ok(parts) => {
                if parts.len() > 1 {
                    self.split.push((name.to_string(), parts.len()));
                }
                for (k, &(_, n)) in parts.iter().enumerate() {
                    self.buffer(part_name(name, k, parts.len()), 4 * n as u64 * cols as u64);
                }
            }
            Err(_) => {
                if self.unsplittable.is_none() {
                    self.unsplittable = Some(BufferNeed { name: format!("one row of table `{name}`"), bytes: 4 * cols as u64 });
                }
                self.buffer(name, 4 * rows as u64 * cols as u64);
            }
        }
    }

    /// The largest buffer (the first of that size), or `None` for a model of no buffers.
    pub fn largest(&self) -> Option<&BufferNeed> {
        self.buffers.iter().fold(None, |m: Option<&BufferNeed>, b| if m.is_some_and(|m| m.bytes >= b.bytes) { m } else { Some(b) })
    }

    /// Bytes of GPU memory the listed buffers take (weights and streaming state; a frame's
    /// activations add well under 1% at Moshi's geometry).
    pub fn total_bytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.bytes).sum()
    }

    /// `Ok` when every buffer fits the limits; else [`Error::Limit`] for the largest
    /// buffer that does not (or the table row that cannot be split), naming the limit, the
    /// bytes needed and the bytes allowed.
    pub fn check(&self) -> Result<()> {
        if let Some(row) = &self.unsplittable {
            return self.limits.check(&format!("{}: {}", self.model, row.name), row.bytes);
        }
        let mut worst: Option<&BufferNeed> = None;
        for b in &self.buffers {
            if self.limits.check("", b.bytes).is_err() && worst.is_none_or(|w| b.bytes > w.bytes) {
                worst = Some(b);
            }
        }
        match worst {
            Some(b) => self.limits.check(&format!("{} buffer `{}`", self.model, b.name), b.bytes),
            None => Ok(()),
        }
    }

    /// Whether [`Self::check`] passes.
    pub fn fits(&self) -> bool {
        self.check().is_ok()
    }

    /// The report as JSON: `{model, limits: {maxStorageBufferBindingSize, maxBufferSize},
    /// largestBuffer: {name, bytes}, totalBytes, buffers, split: [{name, parts}], fits,
    /// error, limit, needed, allowed}` (the last four `null` when it fits).
    pub fn to_json(&self) -> String {
        let largest = self.largest().map(|b| serde_json::json!({"name": b.name, "bytes": b.bytes}));
        let (error, limit, needed, allowed) = match self.check() {
            Ok(()) => (None, None, None, None),
            Err(e) => {
                let msg = e.to_string();
                match e {
                    Error::Limit { limit, needed, allowed, .. } => (Some(msg), Some(limit), Some(needed), Some(allowed)),
                    _ => (Some(msg), None, None, None),
                }
            }
        };
        serde_json::json!({
            "model": self.model,
            "limits": {MAX_STORAGE_BINDING: self.limits.max_storage_binding, MAX_BUFFER: self.limits.max_buffer},
            "largestBuffer": largest,
            "totalBytes": self.total_bytes(),
            "buffers": self.buffers.len(),
            "split": self.split.iter().map(|(n, k)| serde_json::json!({"name": n, "parts": k})).collect::<Vec<_>>(),
            "fits": error.is_none(),
            "error": error,
            "limit": limit,
            "needed": needed,
            "allowed": allowed,
        })
        .to_string()
    }
}

impl std::fmt::Display for Requirements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}: {} buffers, {} bytes ({}) of GPU memory", self.model, self.buffers.len(), self.total_bytes(), mib(self.total_bytes()))?;
        if let Some(b) = self.largest() {
            writeln!(f, "  largest buffer (bound whole): `{}`, {} bytes ({})", b.name, b.bytes, mib(b.bytes))?;
        }
        for (n, k) in &self.split {
            writeln!(f, "  split into {k} parts of whole rows: `{n}`")?;
        }
        writeln!(f, "  limits: {}", self.limits)?;
        match self.check() {
            Ok(()) => write!(f, "  fits"),
            Err(e) => write!(f, "  does not fit: {e}"),
        }
    }
}

/// The capability check's answer for a page or a log, as JSON: `{adapter, adapterLimits,
/// limits, models: [Requirements::to_json ...], fits, error}` (`error`: the first model's
/// refusal, `null` when all fit). `adapter` is the adapter's description, `adapterLimits`
/// what it could give, `limits` what the models are checked against (the adapter's, or
/// lower emulated ones).
pub fn capability_json(adapter: &str, adapter_limits: &GpuLimits, models: &[Requirements]) -> String {
    let lim = |l: &GpuLimits| serde_json::json!({MAX_STORAGE_BINDING: l.max_storage_binding, MAX_BUFFER: l.max_buffer});
    let limits = models.first().map_or(*adapter_limits, |m| m.limits);
    let error = models.iter().find_map(|m| m.check().err()).map(|e| e.to_string());
    let parsed: Vec<serde_json::Value> = models.iter().filter_map(|m| serde_json::from_str(&m.to_json()).ok()).collect();
    serde_json::json!({
        "adapter": adapter,
        "adapterLimits": lim(adapter_limits),
        "limits": lim(&limits),
        "models": parsed,
        "fits": error.is_none(),
        "error": error,
    })
    .to_string()
}
