//! GGUF (versions 2 and 3) as a stream, and ggml's Q8_0 blocks repacked into the GPU
//! layout of [`Q8Tensor`] without being dequantized.
//!
//! File layout (little-endian): magic `GGUF`, `u32` version, `u64` tensor count, `u64`
//! key/value count; the key/value pairs (key: `u64` length + UTF-8 bytes; `u32` value type;
//! the value: u8, i8, u16, i16, u32, i32, f32, bool, string, array (`u32` element type, `u64`
//! count, elements; arrays may nest), u64, i64, f64); the tensor infos (name, `u32` dim
//! count up to 4, `u64` dims innermost first, `u32` ggml type, `u64` offset in the data
//! section); padding to the alignment (`general.alignment`, a `u32` power of two, default
//! 32); the data section. As in ggml's own reader, tensor `i` must sit at exactly the sum of
//! the sizes of tensors `0..i`, each padded to the alignment.
//!
//! Shapes: GGUF stores dims innermost first (`ne[0]` is the row length); a
//! [`TensorEntry`]'s shape is row-major, outermost first, so it is `ne` reversed: a Linear
//! weight `[out, in]` has `ne = [in, out]`.
//!
//! Types read: F32, F16, BF16 (as f32 or quantized to Q8_0) and Q8_0 (repacked as is, or
//! dequantized to f32). Other ggml types are sized from ggml's block table so they can be
//! read past; loading one is [`Error::GgufType`], naming the tensor and the type.
//!
//! The header is buffered whole (up to [`Limits::max_header`]); its end is not known until
//! it is parsed, so the stream parses what it holds each time that doubles, and resumes
//! after the header with the bytes it already holds.

use std::collections::HashSet;
use std::fmt;

use super::q8::{Q8Block, Q8Tensor, BLOCK};
use super::stream::{stream_err, DataCursor, Header, Limits, Sink, StoredType, TensorEntry};
use crate::error::{Error, Result};

/// Bytes of one ggml Q8_0 block: f16 scale `d`, then 32 `i8` quants.
pub const Q8_0_BLOCK_BYTES: usize = 2 + BLOCK;

/// `GGUF` read as a little-endian u32.
pub const GGUF_MAGIC: u32 = 0x4655_4747;

/// Default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

const FORMAT: &str = "GGUF";

/// Repack one ggml Q8_0 block (34 bytes: f16 `d` little-endian, then 32 `i8`) into a
/// [`Q8Block`]: the same bits, no arithmetic. `blk` shorter than 34 bytes reads as zeros
/// past its end (callers pass whole blocks).
pub fn repack_block(blk: &[u8]) -> Q8Block {
    let mut b = [0u8; Q8_0_BLOCK_BYTES];
    let n = blk.len().min(Q8_0_BLOCK_BYTES);
    b[..n].copy_from_slice(&blk[..n]);
    let mut qs = [0i8; BLOCK];
    for (q, &v) in qs.iter_mut().zip(&b[2..]) {
        *q = v as i8;
    }
    Q8Block { d: u16::from_le_bytes([b[0], b[1]]), qs }
}

/// Repack a whole ggml Q8_0 tensor of `[rows, cols]` (row-major; `bytes` is its data, 34
/// bytes per 32 values) into the GPU layout. [`Error::Quant`] for `cols` not a multiple of
/// 32, [`Error::Shape`] for a byte length that does not match.
pub fn repack_q8_0(name: &str, rows: usize, cols: usize, bytes: &[u8]) -> Result<Q8Tensor> {
    let mut t = Q8Tensor::with_shape(name, rows, cols)?;
    let blocks = rows * cols / BLOCK;
    if bytes.len() != blocks * Q8_0_BLOCK_BYTES {
        return Err(Error::Shape {
            name: name.into(),
            expected: vec![blocks * Q8_0_BLOCK_BYTES],
            found: vec![bytes.len()],
        });
    }
    for blk in bytes.chunks_exact(Q8_0_BLOCK_BYTES) {
        t.push_block(&repack_block(blk));
    }
    Ok(t)
}

/// ggml's types: id, name, values per block, bytes per block (ggml's `type_traits`).
const GGML_TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

/// ggml type id of Q8_0.
pub const GGML_Q8_0: u32 = 8;

/// The name of ggml type `id` (`Q4_K`, ...), or `unknown`.
pub fn ggml_type_name(id: u32) -> &'static str {
    GGML_TYPES.iter().find(|t| t.0 == id).map(|t| t.1).unwrap_or("unknown")
}

fn stored_of(id: u32) -> StoredType {
    match id {
        0 => StoredType::F32,
        1 => StoredType::F16,
        30 => StoredType::BF16,
        GGML_Q8_0 => StoredType::Q8_0,
        _ => StoredType::Other,
    }
}

/// A metadata value. Arrays are parsed and checked but kept as their element type and
/// length only (a vocabulary can hold hundreds of thousands of strings).
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array { elem_type: u32, len: u64 },
    U64(u64),
    I64(i64),
    F64(f64),
}

impl fmt::Display for GgufValue {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            GgufValue::U8(v) => write!(f, "{v}"),
            GgufValue::I8(v) => write!(f, "{v}"),
            GgufValue::U16(v) => write!(f, "{v}"),
            GgufValue::I16(v) => write!(f, "{v}"),
            GgufValue::U32(v) => write!(f, "{v}"),
            GgufValue::I32(v) => write!(f, "{v}"),
            GgufValue::F32(v) => write!(f, "{v}"),
            GgufValue::Bool(v) => write!(f, "{v}"),
            GgufValue::Str(v) => write!(f, "{v}"),
            GgufValue::Array { elem_type, len } => write!(f, "[{len} values of type {elem_type}]"),
            GgufValue::U64(v) => write!(f, "{v}"),
            GgufValue::I64(v) => write!(f, "{v}"),
            GgufValue::F64(v) => write!(f, "{v}"),
        }
    }
}

/// What a GGUF header says beyond the tensor table.
#[derive(Clone, Debug)]
pub struct GgufInfo {
    /// Format version (2 or 3).
    pub version: u32,
    /// Data alignment in bytes.
    pub alignment: u64,
    /// Every key/value pair, in file order.
    pub metadata: Vec<(String, GgufValue)>,
    /// File offset where the tensor infos end (the padding to the data section follows).
    pub infos_end: u64,
    /// File offset one past the last tensor padded to the alignment (where a file written
    /// by ggml ends).
    pub padded_end: u64,
}

impl GgufInfo {
    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

enum PErr {
    /// The header goes on past the bytes held: at least this many are needed.
    Need(u64),
    Bad(Error),
}

type PResult<T> = std::result::Result<T, PErr>;

fn bad(offset: u64, tensor: Option<&str>, why: impl fmt::Display) -> PErr {
    PErr::Bad(stream_err(FORMAT, offset, tensor, why))
}

struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: u64) -> PResult<&'a [u8]> {
        let end = (self.pos as u64).checked_add(n).ok_or_else(|| bad(self.pos as u64, None, "length overflows"))?;
        if end > self.b.len() as u64 {
            return Err(PErr::Need(end));
        }
        let s = &self.b[self.pos..end as usize];
        self.pos = end as usize;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> PResult<[u8; N]> {
        let s = self.take(N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self) -> PResult<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> PResult<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn bytes_str(&mut self) -> PResult<&'a [u8]> {
        let n = self.u64()?;
        self.take(n)
    }
    fn name(&mut self, what: &str) -> PResult<String> {
        let at = self.pos as u64;
        let s = self.bytes_str()?;
        String::from_utf8(s.to_vec()).map_err(|_| bad(at, None, format!("{what} is not UTF-8")))
    }
}

/// Fixed byte size of a scalar value type, `None` for string, array or unknown.
fn scalar_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// Deepest nesting of arrays accepted (the format allows nesting; files use one level).
const MAX_ARRAY_DEPTH: u32 = 4;

fn value(rd: &mut Rd, ty: u32, key: &str, depth: u32) -> PResult<GgufValue> {
    let at = rd.pos as u64;
    Ok(match ty {
        0 => GgufValue::U8(rd.arr::<1>()?[0]),
        1 => GgufValue::I8(rd.arr::<1>()?[0] as i8),
        2 => GgufValue::U16(u16::from_le_bytes(rd.arr()?)),
        3 => GgufValue::I16(i16::from_le_bytes(rd.arr()?)),
        4 => GgufValue::U32(rd.u32()?),
        5 => GgufValue::I32(i32::from_le_bytes(rd.arr()?)),
        6 => GgufValue::F32(f32::from_le_bytes(rd.arr()?)),
        7 => match rd.arr::<1>()?[0] {
            0 => GgufValue::Bool(false),
            1 => GgufValue::Bool(true),
            b => return Err(bad(at, None, format!("key `{key}`: bool byte {b} is neither 0 nor 1"))),
        },
        8 => GgufValue::Str(String::from_utf8_lossy(rd.bytes_str()?).into_owned()),
        9 => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(bad(at, None, format!("key `{key}`: arrays nested deeper than {MAX_ARRAY_DEPTH}")));
            }
            let et = rd.u32()?;
            let n = rd.u64()?;
            if let Some(sz) = scalar_size(et) {
                let total = n
                    .checked_mul(sz)
                    .ok_or_else(|| bad(at, None, format!("key `{key}`: array length {n} overflows")))?;
                rd.take(total)?;
            } else if et == 8 || et == 9 {
                // every element takes at least 8 bytes, so the loop ends with the bytes held
                for _ in 0..n {
                    value(rd, et, key, depth + 1)?;
                }
            } else {
                return Err(bad(at, None, format!("key `{key}`: unknown array element type {et}")));
            }
            GgufValue::Array { elem_type: et, len: n }
        }
        10 => GgufValue::U64(rd.u64()?),
        11 => GgufValue::I64(i64::from_le_bytes(rd.arr()?)),
        12 => GgufValue::F64(f64::from_le_bytes(rd.arr()?)),
        _ => return Err(bad(at, None, format!("key `{key}`: unknown value type {ty}"))),
    })
}

/// Parse a GGUF header from the start of a file (`b` may hold more than the header).
fn parse(b: &[u8]) -> PResult<(Header, GgufInfo)> {
    let mut rd = Rd { b, pos: 0 };
    let magic = rd.u32()?;
    if magic != GGUF_MAGIC {
        return Err(bad(0, None, format!("bad magic {:02x?}, expected `GGUF`", magic.to_le_bytes())));
    }
    let version = rd.u32()?;
    if version != 2 && version != 3 {
        return Err(bad(
            4,
            None,
            format!("version {version} is not supported (2 or 3; a big-endian file reads as a large number)"),
        ));
    }
    let n_tensors = rd.u64()?;
    let n_kv = rd.u64()?;
    let mut metadata = Vec::new();
    let mut keys = HashSet::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..n_kv {
        let at = rd.pos as u64;
        let key = rd.name("a metadata key")?;
        let ty = rd.u32()?;
        let v = value(&mut rd, ty, &key, 0)?;
        if !keys.insert(key.clone()) {
            return Err(bad(at, None, format!("key `{key}` appears twice")));
        }
        if key == "general.alignment" {
            alignment = match v {
                GgufValue::U32(a) if a != 0 && a.is_power_of_two() => a as u64,
                _ => return Err(bad(at, None, format!("general.alignment is {v:?}, not a u32 power of two"))),
            };
        }
        metadata.push((key, v));
    }
    let mut tensors: Vec<TensorEntry> = Vec::new();
    let mut names = HashSet::new();
    let mut offsets = Vec::new();
    for _ in 0..n_tensors {
        let at = rd.pos as u64;
        let name = rd.name("a tensor name")?;
        let t = Some(name.as_str());
        let n_dims = rd.u32()?;
        if n_dims > 4 {
            return Err(bad(at, t, format!("{n_dims} dimensions (at most 4)")));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(rd.u64()?);
        }
        let type_id = rd.u32()?;
        let offset = rd.u64()?;
        if !names.insert(name.clone()) {
            return Err(bad(at, t, "the tensor appears twice"));
        }
        let Some(&(_, type_name, blk, blk_bytes)) = GGML_TYPES.iter().find(|x| x.0 == type_id) else {
            return Err(PErr::Bad(Error::GgufType { name, type_id, type_name: "unknown".into() }));
        };
        let elements = ne
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| n < i64::MAX as u64 && usize::try_from(n).is_ok())
            .ok_or_else(|| bad(at, t, format!("shape (ne) {ne:?} has too many elements")))?;
        let row = ne.first().copied().unwrap_or(1);
        if row % blk != 0 {
            return Err(bad(
                at,
                t,
                format!("row length ne[0] = {row} is not a multiple of {type_name}'s block of {blk}"),
            ));
        }
        let len = (elements / blk)
            .checked_mul(blk_bytes)
            .ok_or_else(|| bad(at, t, format!("shape (ne) {ne:?} is too large")))?;
        let shape = ne
            .iter()
            .rev()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<usize>, _>>()
            .map_err(|_| bad(at, t, format!("shape (ne) {ne:?} is too large")))?;
        offsets.push((at, offset));
        tensors.push(TensorEntry {
            name,
            stored: stored_of(type_id),
            type_name: type_name.to_string(),
            ggml_type: Some(type_id),
            shape,
            start: 0,
            len,
        });
    }
    let infos_end = rd.pos as u64;
    let data_start = infos_end
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| bad(infos_end, None, "data offset out of range"))?;
    // ggml's rule: tensor i at the padded sum of the sizes before it
    let mut expect = 0u64;
    for (t, &(at, offset)) in tensors.iter_mut().zip(&offsets) {
        if offset != expect {
            return Err(bad(
                at,
                Some(&t.name),
                format!("data offset {offset}, expected {expect} (tensors follow each other, each padded to {alignment} bytes)"),
            ));
        }
        t.start = data_start
            .checked_add(offset)
            .ok_or_else(|| bad(at, Some(&t.name), format!("data offset {offset} out of range")))?;
        expect = t
            .len
            .checked_next_multiple_of(alignment)
            .and_then(|padded| offset.checked_add(padded))
            .ok_or_else(|| bad(at, Some(&t.name), "data size out of range"))?;
    }
    // checked before any `start + len` is formed: every tensor ends at or before it
    let padded_end = data_start.checked_add(expect).ok_or_else(|| bad(infos_end, None, "data size out of range"))?;
    let data_end = tensors.last().map(|t| t.end()).unwrap_or(data_start);
    let header = Header {
        format: FORMAT,
        tensors,
        data_start,
        data_end,
        metadata: metadata.iter().map(|(k, v)| (k.clone(), v.to_string())).collect(),
    };
    Ok((header, GgufInfo { version, alignment, metadata, infos_end, padded_end }))
}

/// Parse the header of a GGUF file held in memory (`bytes` from the start of the file; it
/// may hold more). [`Error::Stream`] when it is malformed or `bytes` ends inside it,
/// [`Error::GgufType`] for a type id ggml does not define.
pub fn parse_header(bytes: &[u8]) -> Result<(Header, GgufInfo)> {
    parse(bytes).map_err(|e| match e {
        PErr::Bad(e) => e,
        PErr::Need(n) => stream_err(
            FORMAT,
            bytes.len() as u64,
            None,
            format!("truncated inside the header (it needs at least {n} bytes)"),
        ),
    })
}

fn over_cap(need: u64, cap: u64) -> Error {
    stream_err(FORMAT, 0, None, format!("the header needs at least {need} bytes, above the cap of {cap} bytes"))
}

enum State {
    Header { buf: Vec<u8>, next_try: usize },
    Data(DataCursor),
    Failed,
}

/// A push-based GGUF reader, the GGUF twin of [`super::stream::SafetensorsStream`]: feed it
/// the file in chunks of any size, in order; it parses and checks the header and hands
/// every tensor's bytes to a [`Sink`] (through a [`super::stream::Loader`], Q8_0 tensors
/// become [`Q8Tensor`] parts by repacking, without dequantizing).
pub struct GgufStream {
    limits: Limits,
    total: Option<u64>,
    state: State,
    info: Option<GgufInfo>,
    received: u64,
}

/// Bytes held before the first parse attempt: magic, version and the two counts.
const FIRST_TRY: usize = 24;

impl GgufStream {
    /// A reader for a file of `total_len` bytes, when known.
    pub fn new(total_len: Option<u64>, limits: Limits) -> Self {
        let next_try = FIRST_TRY.min(usize::try_from(limits.max_header).unwrap_or(usize::MAX));
        Self { limits, total: total_len, state: State::Header { buf: Vec::new(), next_try }, info: None, received: 0 }
    }

    /// Bytes received so far.
    pub fn position(&self) -> u64 {
        self.received
    }

    /// The tensor table, once the header has been read.
    pub fn header(&self) -> Option<&Header> {
        match &self.state {
            State::Data(c) => Some(&c.header),
            _ => None,
        }
    }

    /// Version, alignment and metadata, once the header has been read.
    pub fn info(&self) -> Option<&GgufInfo> {
        self.info.as_ref()
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
        let r = self.push_inner(chunk, sink);
        if r.is_err() {
            self.state = State::Failed;
        }
        r
    }

    fn start_data(&mut self, buf: Vec<u8>, header: Header, info: GgufInfo, sink: &mut dyn Sink) -> Result<()> {
        let min_end = if header.tensors.is_empty() { info.infos_end } else { header.data_end };
        let mut end = info.padded_end;
        if let Some(t) = self.total {
            if t < min_end || t > info.padded_end {
                let past = header.tensors.iter().find(|e| e.end() > t).map(|e| e.name.clone());
                return Err(stream_err(
                    FORMAT,
                    t.min(min_end),
                    past.as_deref(),
                    format!(
                        "the file has {t} bytes, the header describes {min_end} (up to {} with padding)",
                        info.padded_end
                    ),
                ));
            }
            end = t;
        }
        sink.header(&header)?;
        let mut c = DataCursor::new(header, end);
        c.set_position(info.infos_end);
        self.info = Some(info);
        let surplus = buf.get(c.position() as usize..).unwrap_or(&[]);
        c.feed(surplus, sink)?;
        self.state = State::Data(c);
        Ok(())
    }

    fn push_inner(&mut self, chunk: &[u8], sink: &mut dyn Sink) -> Result<()> {
        let mut rest = chunk;
        loop {
            match &mut self.state {
                State::Header { buf, next_try } => {
                    let take = (*next_try - buf.len()).min(rest.len());
                    buf.extend_from_slice(&rest[..take]);
                    self.received += take as u64;
                    rest = &rest[take..];
                    if buf.len() < *next_try {
                        return Ok(());
                    }
                    match parse(buf) {
                        Ok((header, info)) => {
                            let buf = std::mem::take(buf);
                            self.start_data(buf, header, info, sink)?;
                        }
                        Err(PErr::Bad(e)) => return Err(e),
                        Err(PErr::Need(n)) => {
                            let cap = self.limits.max_header;
                            if n > cap || buf.len() as u64 >= cap {
                                return Err(over_cap(n.max(buf.len() as u64 + 1), cap));
                            }
                            // n <= cap here, and cap bytes were allocatable when checked
                            *next_try = (n as usize).max(2 * buf.len()).min(cap as usize);
                        }
                    }
                }
                State::Data(c) => {
                    c.feed(rest, sink)?;
                    self.received += rest.len() as u64;
                    return Ok(());
                }
                State::Failed => {
                    return Err(stream_err(FORMAT, self.received, None, "the stream failed earlier; start a new one"))
                }
            }
        }
    }

    /// The stream has ended: refuses a file truncated in its header or in a tensor.
    pub fn finish(&mut self, sink: &mut dyn Sink) -> Result<()> {
        if let State::Header { buf, .. } = &mut self.state {
            // the header may be complete in fewer bytes than the next parse attempt waited for
            let buf = std::mem::take(buf);
            match parse(&buf) {
                Ok((header, info)) => {
                    let r = self.start_data(buf, header, info, sink);
                    if r.is_err() {
                        self.state = State::Failed;
                    }
                    r?;
                }
                Err(e) => {
                    self.state = State::Failed;
                    return Err(match e {
                        PErr::Bad(e) => e,
                        PErr::Need(n) if n > self.limits.max_header => over_cap(n, self.limits.max_header),
                        PErr::Need(n) => stream_err(
                            FORMAT,
                            buf.len() as u64,
                            None,
                            format!("truncated inside the header (it needs at least {n} bytes)"),
                        ),
                    });
                }
            }
        }
        match &self.state {
            State::Data(c) => c.finish(),
            _ => Err(stream_err(FORMAT, self.received, None, "the stream failed earlier")),
        }
    }
}
