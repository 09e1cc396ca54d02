//! Streaming checkpoint reader: bytes in, tensors out, without holding the file.
//!
//! A checkpoint arrives as chunks of any size, in file order (a `fetch` body on the web, a
//! file read natively). [`SafetensorsStream`] (and [`super::gguf::GgufStream`]) take each
//! chunk as it comes ([`SafetensorsStream::push`]), check the header before any tensor
//! byte, and hand every tensor's bytes to a [`Sink`] in pieces, in file order. Nothing
//! blocks and nothing is awaited inside: the caller drives it from whatever source it has,
//! so the same code serves a native reader and a browser stream.
//!
//! Memory: the reader holds the header (at most [`Limits::max_header`] bytes, 16 MiB by
//! default) and, in the destinations, one partial element or block (under 34 bytes), one
//! bounded conversion batch, and the current bindable part of the tensor being built
//! (an f32 part for [`F32Dest`], a Q8_0 part for [`Q8Dest`]); each part is handed over as
//! soon as it is complete.
//!
//! The [`Loader`] sink routes each tensor by a [`Plan`]: which tensors the model wants, at
//! which shape, stored as f32 or Q8_0. The plan is checked against the header before any
//! data arrives, so a missing, unknown, mistyped or misshapen tensor is refused before
//! anything is loaded. Parts are handed to the caller as they complete; a caller keeps them
//! only once [`SafetensorsStream::finish`] has returned `Ok` (the stream may still turn out
//! truncated, or fail its SHA-256 check, after some parts arrived).
//!
//! Errors name the byte offset in the file and the tensor: [`Error::Stream`] for the
//! format (truncation, header, offsets), [`Error::MissingTensor`], [`Error::UnknownTensor`],
//! [`Error::Shape`], [`Error::Dtype`], [`Error::Quant`], [`Error::Limit`] for the plan.

use std::collections::{HashMap, HashSet};
use std::fmt;

use safetensors::Dtype;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use sha2::{Digest, Sha256};

use super::gguf;
use super::q8::{self, Q8Tensor, BLOCK};
use crate::error::{Error, Result};

/// Default cap on a checkpoint header: 16 MiB. Moshi 7B's safetensors header is about
/// 40 KB and a GGUF with a 128k-token vocabulary a few MB; 16 MiB, parsed, still fits in the
/// 64 MiB the loader allows itself beyond the largest tensor.
pub const DEFAULT_MAX_HEADER: u64 = 16 << 20;

/// What a stream may ask of memory before it proves itself.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest header accepted, in bytes (the safetensors JSON, or a GGUF's metadata and
    /// tensor table). A longer header is refused as soon as its length is known.
    pub max_header: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_header: DEFAULT_MAX_HEADER }
    }
}

/// How a tensor's bytes are stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredType {
    /// little-endian f32
    F32,
    /// little-endian IEEE f16
    F16,
    /// little-endian bfloat16
    BF16,
    /// ggml Q8_0 blocks: f16 scale then 32 i8, 34 bytes per 32 values (GGUF only)
    Q8_0,
    /// Anything else: readable past, never loaded.
    Other,
}

impl StoredType {
    /// Bytes of one unit (an element, or a Q8_0 block); `None` for [`StoredType::Other`].
    pub fn unit_bytes(self) -> Option<usize> {
        match self {
            StoredType::F32 => Some(4),
            StoredType::F16 | StoredType::BF16 => Some(2),
            StoredType::Q8_0 => Some(gguf::Q8_0_BLOCK_BYTES),
            StoredType::Other => None,
        }
    }
    /// Values per unit: 32 for Q8_0, else 1.
    pub fn unit_values(self) -> usize {
        if self == StoredType::Q8_0 {
            BLOCK
        } else {
            1
        }
    }
}

/// One tensor of a checkpoint as its header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorEntry {
    /// Name in the checkpoint.
    pub name: String,
    /// How its bytes are stored.
    pub stored: StoredType,
    /// The file's own name for the type (`BF16`, `Q8_0`, `Q4_K`, ...).
    pub type_name: String,
    /// The ggml type id, for GGUF tensors.
    pub ggml_type: Option<u32>,
    /// Shape, outermost dimension first (row-major; a GGUF's `ne` reversed).
    pub shape: Vec<usize>,
    /// File offset of its first byte.
    pub start: u64,
    /// Its size in bytes.
    pub len: u64,
}

impl TensorEntry {
    /// Number of values.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
    /// Row length: the last dimension (1 for a scalar).
    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }
    /// Rows: every dimension but the last, multiplied (1 for a vector or a scalar).
    pub fn rows(&self) -> usize {
        self.shape.iter().rev().skip(1).product()
    }
    /// File offset one past its last byte.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// A checked checkpoint header.
#[derive(Clone, Debug)]
pub struct Header {
    /// `safetensors` or `GGUF`.
    pub format: &'static str,
    /// Every tensor, in file order (by start offset).
    pub tensors: Vec<TensorEntry>,
    /// File offset of the data section.
    pub data_start: u64,
    /// File offset one past the last tensor byte.
    pub data_end: u64,
    /// Free-form metadata: safetensors' `__metadata__`, or a GGUF's key/value pairs (scalars
    /// and strings as text, arrays summarised).
    pub metadata: Vec<(String, String)>,
}

impl Header {
    /// The entry of `name`, if the checkpoint has it.
    pub fn get(&self, name: &str) -> Option<&TensorEntry> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// Sum of all tensor sizes in bytes.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.len).sum()
    }
}

/// Receives a checkpoint as it streams. Calls come in file order: `header` once, then for
/// each tensor `begin`, its bytes in one or more `bytes` calls covering it exactly in
/// order, and `end` (an empty tensor gets `begin` and `end` only). An error returned from
/// any call stops the stream.
pub trait Sink {
    /// The header, checked, before any tensor byte: refuse here what the model cannot use.
    fn header(&mut self, header: &Header) -> Result<()>;
    /// Tensor `tensor` starts.
    fn begin(&mut self, tensor: &TensorEntry) -> Result<()>;
    /// The next `bytes` of `tensor`, starting at byte `offset` within it.
    fn bytes(&mut self, tensor: &TensorEntry, offset: u64, bytes: &[u8]) -> Result<()>;
    /// The last byte of `tensor` has been given.
    fn end(&mut self, tensor: &TensorEntry) -> Result<()>;
}

/// A checkpoint consumer fed from any byte source (a `fetch` body, a file, a resumed
/// download): the file's bytes arrive through [`ByteSink::push`] in file order, in chunks of
/// any size, each byte exactly once; [`ByteSink::finish`] says the source has ended. This is
/// the seam between the sources (which handle the network, retries and caching) and the
/// model loaders (which parse and place the tensors); neither knows the other.
pub trait ByteSink {
    /// The next bytes of the file. An error stops the load: the caller drops the sink and
    /// keeps nothing of it.
    fn push(&mut self, chunk: &[u8]) -> Result<()>;
    /// The source has ended: refuse a truncated or otherwise incomplete file.
    fn finish(&mut self) -> Result<()>;
    /// The tensor being read (or next to be read), for progress reports.
    fn current_tensor(&self) -> Option<&str> {
        None
    }
}

pub(crate) fn stream_err(format: &'static str, offset: u64, tensor: Option<&str>, why: impl fmt::Display) -> Error {
    Error::Stream { format, offset, tensor: tensor.map(str::to_string), why: why.to_string() }
}

/// Walks the data section of a checked header, handing each tensor's bytes to a sink.
/// Bytes between tensors (GGUF alignment padding) are skipped.
pub(crate) struct DataCursor {
    pub(crate) header: Header,
    /// Index of the tensor being read, or the next one.
    next: usize,
    /// Whether `begin` was called for `tensors[next]`.
    open: bool,
    /// File offset of the next byte.
    pos: u64,
    /// Most bytes the file may have (bytes past it are refused).
    end: u64,
}

impl DataCursor {
    pub(crate) fn new(header: Header, end: u64) -> Self {
        let pos = header.data_start;
        Self { header, next: 0, open: false, pos, end }
    }

    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// Start reading at file offset `pos` (at or before the first tensor: a GGUF's bytes
    /// after its tensor infos, whose padding is skipped).
    pub(crate) fn set_position(&mut self, pos: u64) {
        self.pos = pos.min(self.header.data_start);
    }

    pub(crate) fn current(&self) -> Option<&TensorEntry> {
        self.header.tensors.get(self.next)
    }

    /// The next bytes of the file, which start at `self.pos`.
    pub(crate) fn feed(&mut self, chunk: &[u8], sink: &mut dyn Sink) -> Result<()> {
        let mut rest = chunk;
        let n = self.header.tensors.len();
        loop {
            while !self.open && self.next < n && self.header.tensors[self.next].start == self.pos {
                let t = &self.header.tensors[self.next];
                sink.begin(t)?;
                if t.len == 0 {
                    sink.end(t)?;
                    self.next += 1;
                } else {
                    self.open = true;
                }
            }
            if rest.is_empty() {
                return Ok(());
            }
            if self.next == n {
                if self.pos >= self.end {
                    return Err(stream_err(
                        self.header.format,
                        self.pos,
                        None,
                        format!("{} bytes past the end of the checkpoint (it ends at byte {})", rest.len(), self.end),
                    ));
                }
                let skip = (self.end - self.pos).min(rest.len() as u64) as usize;
                self.pos += skip as u64;
                rest = &rest[skip..];
                continue;
            }
            let t = &self.header.tensors[self.next];
            if self.pos < t.start {
                let skip = (t.start - self.pos).min(rest.len() as u64) as usize;
                self.pos += skip as u64;
                rest = &rest[skip..];
                continue;
            }
            let take = (t.end() - self.pos).min(rest.len() as u64) as usize;
            sink.bytes(t, self.pos - t.start, &rest[..take])?;
            self.pos += take as u64;
            rest = &rest[take..];
            if self.pos == t.end() {
                sink.end(t)?;
                self.open = false;
                self.next += 1;
            }
        }
    }

    /// The stream has ended: every tensor must be complete.
    pub(crate) fn finish(&self) -> Result<()> {
        if let Some(t) = self.current() {
            let why = if self.pos > t.start {
                format!(
                    "truncated: the stream ended {} bytes into the tensor's {} (file bytes {}..{})",
                    self.pos - t.start,
                    t.len,
                    t.start,
                    t.end()
                )
            } else {
                format!("truncated: the stream ended before the tensor (file bytes {}..{})", t.start, t.end())
            };
            let why = format!("{why}; the file is shorter than its header says: download or copy it again");
            return Err(stream_err(self.header.format, self.pos, Some(&t.name), why));
        }
        Ok(())
    }
}

/// Header JSON as read: tensors in the order written, and the `__metadata__` map.
struct RawHeader {
    tensors: Vec<(String, RawInfo)>,
    metadata: Vec<(String, String)>,
}

/// One tensor's header entry. Offsets and dims are read as u64 (not `safetensors`'
/// `TensorInfo`, whose `usize` offsets stop at 4 GiB on wasm32, below Moshi's 15 GB file).
#[derive(serde::Deserialize)]
struct RawInfo {
    dtype: Dtype,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// Parses the header map, remembering the key being read so an error can name the tensor.
struct HeaderSeed<'a> {
    key: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = RawHeader;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<RawHeader, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = RawHeader;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object of tensor entries")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawHeader, A::Error> {
        let mut seen = HashSet::new();
        let mut tensors = Vec::new();
        let mut metadata = None;
        loop {
            *self.key = None;
            let Some(key) = map.next_key::<String>()? else { break };
            *self.key = Some(key.clone());
            if key == "__metadata__" {
                if metadata.is_some() {
                    return Err(de::Error::custom("`__metadata__` appears twice"));
                }
                let m: HashMap<String, String> = map.next_value()?;
                let mut m: Vec<(String, String)> = m.into_iter().collect();
                m.sort();
                metadata = Some(m);
            } else {
                if !seen.insert(key.clone()) {
                    return Err(de::Error::custom("the tensor appears twice"));
                }
                let info: RawInfo = map.next_value()?;
                tensors.push((key, info));
            }
        }
        Ok(RawHeader { tensors, metadata: metadata.unwrap_or_default() })
    }
}

const ST: &str = "safetensors";

fn stored_of(d: Dtype) -> StoredType {
    match d {
        Dtype::F32 => StoredType::F32,
        Dtype::F16 => StoredType::F16,
        Dtype::BF16 => StoredType::BF16,
        _ => StoredType::Other,
    }
}

/// Parse and check a safetensors header (`json`, which starts at file byte 8).
fn parse_header(json: &[u8]) -> Result<Header> {
    let data_start = 8 + json.len() as u64;
    let mut key = None;
    let mut de = serde_json::Deserializer::from_slice(json);
    let raw = HeaderSeed { key: &mut key }.deserialize(&mut de).and_then(|h| de.end().map(|_| h));
    let raw = match raw {
        Ok(r) => r,
        Err(e) => {
            let at = if e.line() == 1 { 8 + e.column().saturating_sub(1) as u64 } else { 8 };
            return Err(stream_err(
                ST,
                at,
                key.as_deref(),
                format!("the header is not a valid safetensors JSON header: {e}"),
            ));
        }
    };
    let mut tensors = Vec::with_capacity(raw.tensors.len());
    for (name, info) in raw.tensors {
        let err = |why: String| stream_err(ST, data_start, Some(&name), why);
        let mut shape = Vec::with_capacity(info.shape.len());
        for &d in &info.shape {
            shape.push(usize::try_from(d).map_err(|_| err(format!("dimension {d} is too large")))?);
        }
        let elements = info
            .shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| usize::try_from(n).is_ok())
            .ok_or_else(|| err(format!("shape {:?} has too many elements", info.shape)))?;
        let bits = elements
            .checked_mul(info.dtype.bitsize() as u64)
            .ok_or_else(|| err(format!("shape {:?} is too large", info.shape)))?;
        if bits % 8 != 0 {
            return Err(err(format!("{elements} elements of {} do not fill whole bytes", info.dtype)));
        }
        let (s, e) = info.data_offsets;
        if e < s {
            return Err(err(format!("data_offsets [{s}, {e}] end before they start")));
        }
        if e - s != bits / 8 {
            return Err(err(format!(
                "dtype {} x shape {:?} is {} bytes, but data_offsets [{s}, {e}] span {}",
                info.dtype,
                info.shape,
                bits / 8,
                e - s
            )));
        }
        let start = data_start.checked_add(s).ok_or_else(|| err(format!("data offset {s} is out of range")))?;
        let end = data_start.checked_add(e).ok_or_else(|| err(format!("data offset {e} is out of range")))?;
        tensors.push(TensorEntry {
            name,
            stored: stored_of(info.dtype),
            type_name: info.dtype.to_string(),
            ggml_type: None,
            shape,
            start,
            len: end - start,
        });
    }
    tensors.sort_by_key(|t| (t.start, t.end()));
    let mut at = data_start;
    let mut prev: Option<&TensorEntry> = None;
    for t in &tensors {
        if t.start < at {
            let p = prev.map(|p| p.name.as_str()).unwrap_or("");
            return Err(stream_err(
                ST,
                t.start,
                Some(&t.name),
                format!(
                    "its data (file bytes {}..{}) overlaps tensor `{p}` (which ends at byte {at})",
                    t.start,
                    t.end()
                ),
            ));
        }
        if t.start > at {
            let after = prev.map(|p| format!(" after tensor `{}`", p.name)).unwrap_or_default();
            return Err(stream_err(
                ST,
                at,
                Some(&t.name),
                format!("file bytes {at}..{}{after} belong to no tensor (a hole before this one)", t.start),
            ));
        }
        at = t.end();
        prev = Some(t);
    }
    Ok(Header { format: ST, tensors, data_start, data_end: at, metadata: raw.metadata })
}

enum State {
    Len { buf: [u8; 8], have: usize },
    Header { len: usize, buf: Vec<u8> },
    Data(DataCursor),
    Failed,
}

/// A push-based safetensors reader: feed it the file's bytes in chunks of any size, in
/// order, and it checks the header and hands each tensor's bytes to a [`Sink`].
///
/// Checks: the 8-byte header length against [`Limits::max_header`]; the header is JSON of
/// the safetensors format (`__metadata__` allowed, no key twice); every tensor's `dtype` x
/// `shape` size equals its `data_offsets` span; the spans, sorted, start at 0 and follow
/// each other with no hole and no overlap; the data ends where the stream ends (its length
/// when given to [`SafetensorsStream::new`], else at [`SafetensorsStream::finish`]); no
/// bytes after the last tensor. Each failure is an [`Error::Stream`] with the file offset
/// and, where there is one, the tensor.
pub struct SafetensorsStream {
    limits: Limits,
    total: Option<u64>,
    state: State,
    received: u64,
    sha: Option<(Sha256, [u8; 32])>,
}

impl SafetensorsStream {
    /// A reader for a file of `total_len` bytes (`None` when the length is not known, e.g.
    /// a compressed HTTP response; then the length is checked at [`Self::finish`]).
    pub fn new(total_len: Option<u64>, limits: Limits) -> Self {
        Self { limits, total: total_len, state: State::Len { buf: [0; 8], have: 0 }, received: 0, sha: None }
    }

    /// Also check the SHA-256 of the whole file against `digest`, computed as the bytes
    /// stream; a mismatch is reported by [`Self::finish`] (after every tensor was handed
    /// over: a caller keeps nothing until `finish` succeeds).
    pub fn verify_sha256(mut self, digest: [u8; 32]) -> Self {
        self.sha = Some((Sha256::new(), digest));
        self
    }

    /// Bytes received so far (where a resumed download continues: `Range: bytes=N-`).
    pub fn position(&self) -> u64 {
        self.received
    }

    /// The file's length, when known (given, or once the header is read).
    pub fn total(&self) -> Option<u64> {
        match &self.state {
            State::Data(c) => Some(c.header.data_end),
            _ => self.total,
        }
    }

    /// The header, once it has been read and checked.
    pub fn header(&self) -> Option<&Header> {
        match &self.state {
            State::Data(c) => Some(&c.header),
            _ => None,
        }
    }

    /// The tensor being read, or next to be read.
    pub fn current_tensor(&self) -> Option<&str> {
        match &self.state {
            State::Data(c) => c.current().map(|t| t.name.as_str()),
            _ => None,
        }
    }

    /// The next bytes of the file. After an error the stream is failed and refuses more.
    pub fn push(&mut self, chunk: &[u8], sink: &mut dyn Sink) -> Result<()> {
        if matches!(self.state, State::Failed) {
            return Err(stream_err(ST, self.received, None, "the stream failed earlier; start a new one"));
        }
        if let Some((h, _)) = &mut self.sha {
            h.update(chunk);
        }
        let r = self.push_inner(chunk, sink);
        if r.is_err() {
            self.state = State::Failed;
        }
        r
    }

    fn push_inner(&mut self, chunk: &[u8], sink: &mut dyn Sink) -> Result<()> {
        let mut rest = chunk;
        loop {
            let next = match &mut self.state {
                State::Len { buf, have } => {
                    let take = (8 - *have).min(rest.len());
                    buf[*have..*have + take].copy_from_slice(&rest[..take]);
                    *have += take;
                    self.received += take as u64;
                    rest = &rest[take..];
                    if *have < 8 {
                        return Ok(());
                    }
                    let n = u64::from_le_bytes(*buf);
                    if n > self.limits.max_header {
                        return Err(stream_err(
                            ST,
                            0,
                            None,
                            format!(
                                "the header length is {n} bytes, above the cap of {} bytes: this is not a safetensors (or GGUF) checkpoint, or not the file you meant (an HTML error page, a truncated download?)",
                                self.limits.max_header
                            ),
                        ));
                    }
                    if let Some(t) = self.total {
                        if 8 + n > t {
                            return Err(stream_err(
                                ST,
                                0,
                                None,
                                format!("the header length is {n} bytes, but the file has only {t} bytes"),
                            ));
                        }
                    }
                    State::Header { len: n as usize, buf: Vec::with_capacity(n as usize) }
                }
                State::Header { len, buf } => {
                    let take = (*len - buf.len()).min(rest.len());
                    buf.extend_from_slice(&rest[..take]);
                    self.received += take as u64;
                    rest = &rest[take..];
                    if buf.len() < *len {
                        return Ok(());
                    }
                    let header = parse_header(buf)?;
                    if let Some(t) = self.total {
                        if header.data_end != t {
                            let why = if header.data_end > t {
                                format!("the header describes {} bytes, but the file has only {t}", header.data_end)
                            } else {
                                format!(
                                    "{} bytes follow the last tensor (the header describes {})",
                                    t - header.data_end,
                                    header.data_end
                                )
                            };
                            let past = header.tensors.iter().find(|e| e.end() > t).map(|e| e.name.as_str());
                            return Err(stream_err(ST, header.data_end.min(t), past, why));
                        }
                    }
                    sink.header(&header)?;
                    let end = header.data_end;
                    let mut c = DataCursor::new(header, end);
                    c.feed(&[], sink)?;
                    State::Data(c)
                }
                State::Data(c) => {
                    c.feed(rest, sink)?;
                    self.received += rest.len() as u64;
                    return Ok(());
                }
                State::Failed => return Err(stream_err(ST, self.received, None, "the stream failed earlier")),
            };
            self.state = next;
        }
    }

    /// The stream has ended. Refuses a truncated file, naming where it stopped (inside the
    /// length, the header, or a tensor), and a SHA-256 mismatch. (`_sink` is unused: the
    /// signature matches [`super::gguf::GgufStream::finish`], whose header may complete
    /// only here.)
    pub fn finish(&mut self, _sink: &mut dyn Sink) -> Result<()> {
        match &self.state {
            State::Len { have, .. } => {
                return Err(stream_err(ST, *have as u64, None, "truncated inside the 8-byte header length"));
            }
            State::Header { len, buf } => {
                return Err(stream_err(
                    ST,
                    self.received,
                    None,
                    format!("truncated inside the header ({} of its {len} bytes)", buf.len()),
                ));
            }
            State::Data(c) => c.finish()?,
            State::Failed => return Err(stream_err(ST, self.received, None, "the stream failed earlier")),
        }
        if let Some((h, want)) = self.sha.take() {
            let got: [u8; 32] = h.finalize().into();
            if got != want {
                return Err(stream_err(
                    ST,
                    self.received,
                    None,
                    format!("SHA-256 mismatch: expected {}, got {}", hex(&want), hex(&got)),
                ));
            }
        }
        Ok(())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------------------
// Destinations: what a tensor's bytes become.

/// What a loaded tensor becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// f32 values (from F32, F16, BF16, or Q8_0 dequantized).
    F32,
    /// Q8_0 in the GPU layout (quantized from F32, F16, BF16; a GGUF's Q8_0 repacked as is).
    Q8,
}

/// One bindable part of a loaded tensor: rows `row_start .. row_start + rows` of the
/// `[rows, cols]` view (every dimension but the last flattened into rows).
///
/// A tensor whose buffer would exceed the storage-binding limit is cut into `count` parts
/// of whole rows, all of `ceil(rows / count)` rows but the last; one that fits is one part.
#[derive(Clone, Debug, PartialEq)]
pub struct Part<T> {
    /// This part's index, from 0.
    pub index: usize,
    /// Parts in the tensor.
    pub count: usize,
    /// First row of the part in the whole tensor.
    pub row_start: usize,
    /// Rows in the part.
    pub rows: usize,
    /// The part's values.
    pub data: T,
}

/// A completed part of a tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum Loaded {
    /// `rows * cols` f32 values, row-major.
    F32(Part<Vec<f32>>),
    /// The part as a `[rows, cols]` Q8_0 tensor.
    Q8(Part<Q8Tensor>),
}

/// Rows per part and part count for `rows` rows of `row_bytes` bytes each under a binding
/// limit of `max_binding` bytes. [`Error::Limit`] when a single row is over the limit.
pub fn split_rows(name: &str, rows: usize, row_bytes: u64, max_binding: u64) -> Result<(usize, usize)> {
    if rows == 0 || row_bytes == 0 {
        return Ok((rows, 1));
    }
    if row_bytes > max_binding {
        return Err(Error::Limit {
            limit: crate::gpu::MAX_STORAGE_BINDING,
            what: format!("one row of tensor `{name}`"),
            needed: row_bytes,
            allowed: max_binding,
        });
    }
    let max_rows = ((max_binding / row_bytes) as usize).min(rows);
    let count = rows.div_ceil(max_rows);
    Ok((rows.div_ceil(count), count))
}

/// Bytes per row of the largest buffer a tensor becomes, for [`split_rows`].
fn row_bytes(kind: Kind, cols: usize) -> u64 {
    match kind {
        Kind::F32 => (cols as u64).saturating_mul(4),
        // the quants buffer (1 byte a value) is the larger of the two
        Kind::Q8 => cols as u64,
    }
}

/// Callback receiving each completed part.
pub type Emit<'a> = dyn FnMut(Loaded) -> Result<()> + 'a;

/// Where one tensor's bytes go as they stream: given the bytes in order (pieces of any
/// size, elements and blocks split anywhere), it hands over each completed [`Part`].
pub trait Destination {
    /// The next bytes of the tensor.
    fn write(&mut self, bytes: &[u8], emit: &mut Emit<'_>) -> Result<()>;
    /// The tensor's last byte was written: hand over what remains.
    fn finish(&mut self, emit: &mut Emit<'_>) -> Result<()>;
}

/// Reassembles whole units (elements or Q8_0 blocks) split across pieces: holds at most
/// one partial unit.
struct Units {
    unit: usize,
    carry: [u8; gguf::Q8_0_BLOCK_BYTES],
    have: usize,
}

impl Units {
    fn new(unit: usize) -> Self {
        Self { unit, carry: [0; gguf::Q8_0_BLOCK_BYTES], have: 0 }
    }
    /// Calls `f` with runs of whole units, in order.
    fn feed(&mut self, mut bytes: &[u8], mut f: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        if self.have > 0 {
            let take = (self.unit - self.have).min(bytes.len());
            self.carry[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have < self.unit {
                return Ok(());
            }
            self.have = 0;
            let c = self.carry;
            f(&c[..self.unit])?;
        }
        let whole = bytes.len() / self.unit * self.unit;
        if whole > 0 {
            f(&bytes[..whole])?;
        }
        let tail = &bytes[whole..];
        self.carry[..tail.len()].copy_from_slice(tail);
        self.have = tail.len();
        Ok(())
    }
}

/// Units converted per batch: bounds the conversion scratch (16 KiB of f32).
const BATCH_VALUES: usize = 4096;

/// Decode a run of whole units of `stored` to f32, `BATCH_VALUES` at a time.
fn decode_f32(
    stored: StoredType,
    run: &[u8],
    scratch: &mut Vec<f32>,
    mut f: impl FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    let unit = stored.unit_bytes().unwrap_or(1);
    for piece in run.chunks(unit * (BATCH_VALUES / stored.unit_values())) {
        scratch.clear();
        match stored {
            StoredType::F32 => {
                scratch.extend(piece.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            }
            StoredType::F16 => {
                scratch.extend(piece.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()))
            }
            StoredType::BF16 => scratch
                .extend(piece.chunks_exact(2).map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))),
            StoredType::Q8_0 => {
                for blk in piece.chunks_exact(unit) {
                    scratch.extend_from_slice(&gguf::repack_block(blk).dequantize());
                }
            }
            StoredType::Other => return Ok(()),
        }
        f(scratch)?;
    }
    Ok(())
}

fn readable(t: &TensorEntry) -> Result<()> {
    if t.stored == StoredType::Other {
        return Err(match t.ggml_type {
            Some(id) => Error::GgufType { name: t.name.clone(), type_id: id, type_name: t.type_name.clone() },
            None => Error::Dtype { name: t.name.clone(), found: t.type_name.clone() },
        });
    }
    Ok(())
}

/// Builds a tensor as f32, part by part (see [`Part`]).
pub struct F32Dest {
    name: String,
    stored: StoredType,
    rows: usize,
    cols: usize,
    per: usize,
    count: usize,
    index: usize,
    row_start: usize,
    units: Units,
    scratch: Vec<f32>,
    cur: Vec<f32>,
}

impl F32Dest {
    /// A destination for `tensor`, cut into parts of at most `max_binding` bytes.
    /// [`Error::Dtype`] / [`Error::GgufType`] for a type it cannot read, [`Error::Limit`]
    /// for a row above `max_binding`.
    pub fn new(tensor: &TensorEntry, max_binding: u64) -> Result<Self> {
        readable(tensor)?;
        let (rows, cols) = (tensor.rows(), tensor.cols());
        let (per, count) = split_rows(&tensor.name, rows, row_bytes(Kind::F32, cols), max_binding)?;
        Ok(Self {
            name: tensor.name.clone(),
            stored: tensor.stored,
            rows,
            cols,
            per,
            count,
            index: 0,
            row_start: 0,
            units: Units::new(tensor.stored.unit_bytes().unwrap_or(1)),
            scratch: Vec::with_capacity(BATCH_VALUES),
            cur: Vec::with_capacity(per.min(rows) * cols),
        })
    }
}

struct F32Fill<'a> {
    d: &'a mut Vec<f32>,
    rows: usize,
    cols: usize,
    per: usize,
    count: usize,
    index: &'a mut usize,
    row_start: &'a mut usize,
}

impl F32Fill<'_> {
    fn part_rows(&self) -> usize {
        self.per.min(self.rows - *self.row_start)
    }
    fn emit_part(&mut self, emit: &mut Emit<'_>) -> Result<()> {
        let rows = self.part_rows();
        let next = self.per.min(self.rows - *self.row_start - rows) * self.cols;
        // hand the part over before the next one is allocated: one part is held at a time
        let data = std::mem::take(self.d);
        emit(Loaded::F32(Part { index: *self.index, count: self.count, row_start: *self.row_start, rows, data }))?;
        *self.d = Vec::with_capacity(next);
        *self.index += 1;
        *self.row_start += rows;
        Ok(())
    }
    fn push(&mut self, mut v: &[f32], emit: &mut Emit<'_>) -> Result<()> {
        while !v.is_empty() {
            let cap = self.part_rows() * self.cols;
            let take = (cap - self.d.len()).min(v.len());
            if take == 0 {
                // more values than the tensor holds: the header check makes this impossible
                return Err(Error::Input("tensor data longer than its shape".into()));
            }
            self.d.extend_from_slice(&v[..take]);
            v = &v[take..];
            if self.d.len() == cap {
                self.emit_part(emit)?;
            }
        }
        Ok(())
    }
}

impl Destination for F32Dest {
    fn write(&mut self, bytes: &[u8], emit: &mut Emit<'_>) -> Result<()> {
        let Self { stored, rows, cols, per, count, index, row_start, units, scratch, cur, .. } = self;
        let mut fill = F32Fill { d: cur, rows: *rows, cols: *cols, per: *per, count: *count, index, row_start };
        let stored = *stored;
        units.feed(bytes, |run| decode_f32(stored, run, scratch, |v| fill.push(v, emit)))
    }

    fn finish(&mut self, emit: &mut Emit<'_>) -> Result<()> {
        if self.units.have != 0 || self.row_start < self.rows && !self.cur.is_empty() {
            return Err(Error::Input(format!("tensor `{}` ended inside a value", self.name)));
        }
        if self.index == 0 && self.rows * self.cols == 0 {
            let data = std::mem::take(&mut self.cur);
            emit(Loaded::F32(Part { index: 0, count: 1, row_start: 0, rows: self.rows, data }))?;
            self.index = 1;
        }
        if self.index != self.count {
            return Err(Error::Input(format!(
                "tensor `{}` ended after {} of {} parts",
                self.name, self.index, self.count
            )));
        }
        Ok(())
    }
}

/// Builds a tensor as Q8_0 in the GPU layout, part by part (see [`Part`]): values are
/// quantized as each block of 32 completes (blocks along the last dimension, row-major);
/// a GGUF's Q8_0 blocks are repacked without being dequantized.
pub struct Q8Dest {
    name: String,
    stored: StoredType,
    rows: usize,
    cols: usize,
    per: usize,
    count: usize,
    index: usize,
    row_start: usize,
    blocks_done: usize,
    units: Units,
    scratch: Vec<f32>,
    block: [f32; BLOCK],
    fill: usize,
    cur: Q8Tensor,
}

impl Q8Dest {
    /// A destination for `tensor`, cut into parts whose quants buffer stays within
    /// `max_binding` bytes (the scales buffer is 16 times smaller). [`Error::Quant`] when the
    /// last dimension is not a multiple of 32, [`Error::Dtype`] / [`Error::GgufType`] for a
    /// type it cannot read, [`Error::Limit`] for a row above `max_binding`.
    pub fn new(tensor: &TensorEntry, max_binding: u64) -> Result<Self> {
        readable(tensor)?;
        let (rows, cols) = (tensor.rows(), tensor.cols());
        q8::check_cols(&tensor.name, cols)?;
        let (per, count) = split_rows(&tensor.name, rows, row_bytes(Kind::Q8, cols), max_binding)?;
        Ok(Self {
            name: tensor.name.clone(),
            stored: tensor.stored,
            rows,
            cols,
            per,
            count,
            index: 0,
            row_start: 0,
            blocks_done: 0,
            units: Units::new(tensor.stored.unit_bytes().unwrap_or(1)),
            scratch: Vec::with_capacity(BATCH_VALUES),
            block: [0.0; BLOCK],
            fill: 0,
            cur: Q8Tensor::with_shape(&tensor.name, per.min(rows), cols)?,
        })
    }
}

struct Q8Fill<'a> {
    name: &'a str,
    rows: usize,
    cols: usize,
    per: usize,
    count: usize,
    index: &'a mut usize,
    row_start: &'a mut usize,
    blocks_done: &'a mut usize,
    block: &'a mut [f32; BLOCK],
    fill: &'a mut usize,
    cur: &'a mut Q8Tensor,
}

impl Q8Fill<'_> {
    #[inline]
    fn push_block(&mut self, b: &q8::Q8Block, emit: &mut Emit<'_>) -> Result<()> {
        if self.cur.is_complete() {
            return Err(Error::Input(format!("tensor `{}`: more blocks than its shape holds", self.name)));
        }
        self.cur.push_block(b);
        *self.blocks_done += 1;
        if self.cur.is_complete() {
            let rows = self.cur.rows;
            let next = self.per.min(self.rows - *self.row_start - rows);
            // hand the part over before the next one is allocated: one part is held at a time
            let empty = Q8Tensor { rows: 0, cols: self.cols, quants: Vec::new(), scales: Vec::new() };
            let data = std::mem::replace(self.cur, empty);
            emit(Loaded::Q8(Part { index: *self.index, count: self.count, row_start: *self.row_start, rows, data }))?;
            *self.cur = Q8Tensor::with_shape(self.name, next, self.cols)?;
            *self.index += 1;
            *self.row_start += rows;
        }
        Ok(())
    }
    #[inline]
    fn push_f32_block(&mut self, x: &[f32; BLOCK], emit: &mut Emit<'_>) -> Result<()> {
        let b = q8::quantize_block(x).ok_or_else(|| q8::block_error(self.name, self.cols, *self.blocks_done, x))?;
        self.push_block(&b, emit)
    }
    fn push_values(&mut self, mut v: &[f32], emit: &mut Emit<'_>) -> Result<()> {
        if *self.fill > 0 {
            let take = (BLOCK - *self.fill).min(v.len());
            self.block[*self.fill..*self.fill + take].copy_from_slice(&v[..take]);
            *self.fill += take;
            v = &v[take..];
            if *self.fill < BLOCK {
                return Ok(());
            }
            *self.fill = 0;
            let x = *self.block;
            self.push_f32_block(&x, emit)?;
        }
        let mut it = v.chunks_exact(BLOCK);
        for c in &mut it {
            let x: &[f32; BLOCK] = c.try_into().map_err(|_| Error::Input("block".into()))?;
            self.push_f32_block(x, emit)?;
        }
        let r = it.remainder();
        self.block[..r.len()].copy_from_slice(r);
        *self.fill = r.len();
        Ok(())
    }
}

impl Destination for Q8Dest {
    fn write(&mut self, bytes: &[u8], emit: &mut Emit<'_>) -> Result<()> {
        let Self {
            name,
            stored,
            rows,
            cols,
            per,
            count,
            index,
            row_start,
            blocks_done,
            units,
            scratch,
            block,
            fill,
            cur,
        } = self;
        let stored = *stored;
        let mut q = Q8Fill {
            name,
            rows: *rows,
            cols: *cols,
            per: *per,
            count: *count,
            index,
            row_start,
            blocks_done,
            block,
            fill,
            cur,
        };
        if stored == StoredType::Q8_0 {
            units.feed(bytes, |run| {
                for blk in run.chunks_exact(gguf::Q8_0_BLOCK_BYTES) {
                    q.push_block(&gguf::repack_block(blk), emit)?;
                }
                Ok(())
            })
        } else {
            units.feed(bytes, |run| decode_f32(stored, run, scratch, |v| q.push_values(v, emit)))
        }
    }

    fn finish(&mut self, emit: &mut Emit<'_>) -> Result<()> {
        if self.units.have != 0 || self.fill != 0 {
            return Err(Error::Input(format!("tensor `{}` ended inside a block", self.name)));
        }
        if self.index == 0 && self.rows * self.cols == 0 {
            let data =
                std::mem::replace(&mut self.cur, Q8Tensor { rows: 0, cols: self.cols, quants: vec![], scales: vec![] });
            emit(Loaded::Q8(Part { index: 0, count: 1, row_start: 0, rows: self.rows, data }))?;
            self.index = 1;
        }
        if self.index != self.count {
            return Err(Error::Input(format!(
                "tensor `{}` ended after {} of {} parts",
                self.name, self.index, self.count
            )));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The plan and the loader.

/// What to do with a tensor the plan does not name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// Refuse the checkpoint ([`Error::UnknownTensor`]).
    Refuse,
    /// Read past it.
    Skip,
    /// Load it as this kind, whatever its shape.
    Take(Kind),
}

/// Which tensors a model wants, at which shape and as what, and the binding limit parts
/// are cut to.
#[derive(Clone, Debug)]
pub struct Plan {
    want: HashMap<String, (Vec<usize>, Kind)>,
    unknown: Unknown,
    max_binding: u64,
}

impl Plan {
    /// An empty plan refusing unknown tensors; parts are cut to `max_binding` bytes (the
    /// device's `max_storage_buffer_binding_size`).
    pub fn new(max_binding: u64) -> Self {
        Self { want: HashMap::new(), unknown: Unknown::Refuse, max_binding }
    }

    /// A plan loading every tensor as `kind`.
    pub fn take_all(kind: Kind, max_binding: u64) -> Self {
        Self { want: HashMap::new(), unknown: Unknown::Take(kind), max_binding }
    }

    /// Want tensor `name`, of exactly `shape`, as `kind`.
    pub fn want(&mut self, name: &str, shape: &[usize], kind: Kind) -> &mut Self {
        self.want.insert(name.to_string(), (shape.to_vec(), kind));
        self
    }

    /// What to do with tensors the plan does not name (default: refuse).
    pub fn unknown(&mut self, u: Unknown) -> &mut Self {
        self.unknown = u;
        self
    }

    fn kind_of(&self, t: &TensorEntry) -> Option<Kind> {
        match self.want.get(&t.name) {
            Some((_, k)) => Some(*k),
            None => match self.unknown {
                Unknown::Take(k) => Some(k),
                _ => None,
            },
        }
    }

    /// Check a header against the plan: every wanted tensor present with its shape, no
    /// unknown tensor (unless allowed), every loaded tensor of a readable type and
    /// splittable into bindable parts.
    pub fn check(&self, header: &Header) -> Result<()> {
        let mut names: Vec<&String> = self.want.keys().collect();
        names.sort();
        for name in names {
            let (shape, _) = &self.want[name];
            let t = header.get(name).ok_or_else(|| Error::MissingTensor(name.clone()))?;
            if &t.shape != shape {
                return Err(Error::Shape { name: name.clone(), expected: shape.clone(), found: t.shape.clone() });
            }
        }
        for t in &header.tensors {
            if !self.want.contains_key(&t.name) && self.unknown == Unknown::Refuse {
                return Err(Error::UnknownTensor(t.name.clone()));
            }
            if let Some(kind) = self.kind_of(t) {
                readable(t)?;
                if kind == Kind::Q8 {
                    q8::check_cols(&t.name, t.cols())?;
                }
                split_rows(&t.name, t.rows(), row_bytes(kind, t.cols()), self.max_binding)?;
            }
        }
        Ok(())
    }
}

/// A [`Sink`] that checks the header against a [`Plan`], builds each wanted tensor in its
/// [`Destination`] and hands every completed part to `emit(tensor, part)`.
pub struct Loader<E> {
    plan: Plan,
    emit: E,
    current: Option<Box<dyn Destination>>,
}

impl<E: FnMut(&TensorEntry, Loaded) -> Result<()>> Loader<E> {
    /// A loader following `plan`, handing parts to `emit`.
    pub fn new(plan: Plan, emit: E) -> Self {
        Self { plan, emit, current: None }
    }
}

impl<E: FnMut(&TensorEntry, Loaded) -> Result<()>> Sink for Loader<E> {
    fn header(&mut self, header: &Header) -> Result<()> {
        self.plan.check(header)
    }

    fn begin(&mut self, t: &TensorEntry) -> Result<()> {
        self.current = match self.plan.kind_of(t) {
            Some(Kind::F32) => Some(Box::new(F32Dest::new(t, self.plan.max_binding)?)),
            Some(Kind::Q8) => Some(Box::new(Q8Dest::new(t, self.plan.max_binding)?)),
            None => None,
        };
        Ok(())
    }

    fn bytes(&mut self, t: &TensorEntry, _offset: u64, bytes: &[u8]) -> Result<()> {
        let emit = &mut self.emit;
        match &mut self.current {
            Some(d) => d.write(bytes, &mut |l| emit(t, l)),
            None => Ok(()),
        }
    }

    fn end(&mut self, t: &TensorEntry) -> Result<()> {
        let emit = &mut self.emit;
        match self.current.take() {
            Some(mut d) => d.finish(&mut |l| emit(t, l)),
            None => Ok(()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Either format, as a ByteSink.

enum Format {
    /// Fewer than 4 bytes seen: the magic is not known yet.
    Unknown(Vec<u8>),
    Safetensors(SafetensorsStream),
    Gguf(gguf::GgufStream),
}

/// Where a [`CheckpointReader`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadState {
    /// Taking bytes.
    Reading,
    /// [`ByteSink::finish`] accepted the whole file: the sink's results may be kept.
    Finished,
    /// A push or the finish failed: the sink's results must be dropped.
    Failed,
}

/// A checkpoint file of either format read as it streams, handing its tensors to `sink`
/// (usually a [`Loader`]): a GGUF file is told by its magic `GGUF` in the first 4 bytes,
/// anything else is read as safetensors. A [`ByteSink`], so any byte source can drive it.
/// It reads one file once: after it finished or failed ([`Self::state`]) every further push
/// or finish is refused with [`Error::Input`].
pub struct CheckpointReader<S: Sink> {
    state: ReadState,
    format: Format,
    total: Option<u64>,
    limits: Limits,
    sha256: Option<[u8; 32]>,
    sink: S,
}

impl<S: Sink> CheckpointReader<S> {
    /// A reader for a file of `total_len` bytes (when known), feeding `sink`.
    pub fn new(total_len: Option<u64>, limits: Limits, sink: S) -> Self {
        Self { state: ReadState::Reading, format: Format::Unknown(Vec::with_capacity(4)), total: total_len, limits, sha256: None, sink }
    }

    /// Reading, finished or failed: a loader hands out its results only once `Finished`.
    pub fn state(&self) -> ReadState {
        self.state
    }

    /// Refuse calls after the end, and record how a call ended.
    fn guarded(&mut self, call: impl FnOnce(&mut Self) -> Result<()>, finishing: bool) -> Result<()> {
        if self.state != ReadState::Reading {
            return Err(Error::Input("this checkpoint load already ended; start a new loader".into()));
        }
        let r = call(self);
        self.state = match (&r, finishing) {
            (Err(_), _) => ReadState::Failed,
            (Ok(()), true) => ReadState::Finished,
            (Ok(()), false) => ReadState::Reading,
        };
        r
    }

    /// Also check a safetensors file's SHA-256 against `digest` while it streams (see
    /// [`SafetensorsStream::verify_sha256`]); a GGUF file is refused with this set.
    pub fn verify_sha256(mut self, digest: [u8; 32]) -> Self {
        self.sha256 = Some(digest);
        self
    }

    /// The sink, to take its results once [`ByteSink::finish`] has returned `Ok`.
    pub fn into_sink(self) -> S {
        self.sink
    }

    /// The sink, borrowed.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// Which format the file turned out to be, once its first 4 bytes arrived.
    pub fn format_name(&self) -> Option<&'static str> {
        match self.format {
            Format::Unknown(_) => None,
            Format::Safetensors(_) => Some(ST),
            Format::Gguf(_) => Some("GGUF"),
        }
    }

    fn decide(&mut self, first: &[u8]) -> Result<()> {
        self.format = if first == gguf::GGUF_MAGIC.to_le_bytes() {
            if self.sha256.is_some() {
                return Err(stream_err("GGUF", 0, None, "SHA-256 verification is only offered for safetensors files"));
            }
            Format::Gguf(gguf::GgufStream::new(self.total, self.limits))
        } else {
            let s = SafetensorsStream::new(self.total, self.limits);
            Format::Safetensors(match self.sha256 {
                Some(d) => s.verify_sha256(d),
                None => s,
            })
        };
        Ok(())
    }
}

impl<S: Sink> ByteSink for CheckpointReader<S> {
    fn push(&mut self, chunk: &[u8]) -> Result<()> {
        self.guarded(|r| r.push_any(chunk), false)
    }

    fn finish(&mut self) -> Result<()> {
        self.guarded(|r| r.finish_any(), true)
    }

    fn current_tensor(&self) -> Option<&str> {
        match &self.format {
            Format::Safetensors(s) => s.current_tensor(),
            Format::Gguf(g) => g.current_tensor(),
            Format::Unknown(_) => None,
        }
    }
}

impl<S: Sink> CheckpointReader<S> {
    fn push_any(&mut self, mut chunk: &[u8]) -> Result<()> {
        if let Format::Unknown(buf) = &mut self.format {
            let take = (4 - buf.len()).min(chunk.len());
            buf.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if buf.len() < 4 {
                return Ok(());
            }
            let first = std::mem::take(buf);
            self.decide(&first)?;
            self.push_known(&first)?;
        }
        self.push_known(chunk)
    }

    fn finish_any(&mut self) -> Result<()> {
        if let Format::Unknown(buf) = &mut self.format {
            // Too short for either format: let the safetensors reader name the truncation.
            let first = std::mem::take(buf);
            self.decide(&[0; 4])?;
            self.push_known(&first)?;
        }
        match &mut self.format {
            Format::Safetensors(s) => s.finish(&mut self.sink),
            Format::Gguf(g) => g.finish(&mut self.sink),
            Format::Unknown(_) => Ok(()),
        }
    }

    fn push_known(&mut self, chunk: &[u8]) -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        match &mut self.format {
            Format::Safetensors(s) => s.push(chunk, &mut self.sink),
            Format::Gguf(g) => g.push(chunk, &mut self.sink),
            Format::Unknown(_) => Ok(()),
        }
    }
}
