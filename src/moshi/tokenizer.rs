//! Moshi's text tokenizer: turns the text token ids Moshi generates back into text, from
//! Kyutai's SentencePiece model file (`tokenizer_spm_32k_3.model`, a serialized
//! `sentencepiece.ModelProto`), in pure Rust so that it runs in the browser too.
//!
//! Only decoding is implemented, and it mirrors Google's `sentencepiece` (checked against
//! `SentencePieceProcessor.decode_ids` of sentencepiece 0.2.3, see
//! `tests/reference/gen_tokenizer.py`):
//!
//! - each id becomes its piece; `▁` (U+2581) becomes a space;
//! - while nothing has been written yet, the first `▁` of a piece is dropped when the model's
//!   `normalizer_spec` has `add_dummy_prefix` or `remove_extra_whitespaces` (with
//!   `remove_extra_whitespaces`, every piece keeps losing its first `▁` until some text has
//!   been written; with `add_dummy_prefix` alone, only until one piece has lost one);
//! - control pieces (`<s>`, `</s>`, `<pad>`, ...) write nothing; the unknown piece writes the
//!   model's `trainer_spec.unk_surface`, by default `" ⁇ "`;
//! - runs of consecutive byte pieces `<0xNN>` are assembled into UTF-8 one character at a
//!   time with sentencepiece's rules: a byte that does not start a complete, well-formed
//!   sequence (truncated, overlong, surrogate, above U+10FFFF, stray continuation byte)
//!   becomes one U+FFFD and decoding goes on at the next byte. Bytes are written as they are:
//!   byte pieces spelling `▁` give `▁`, not a space. Any other piece ends the run;
//! - each id is decoded by its own type: a normal piece whose string is also a control or
//!   byte piece decodes as text (sentencepiece 0.2.1 mapped ids to pieces and back, which
//!   made it decode as the other piece; 0.2.3 does not).
//!
//! Loading checks what sentencepiece checks when it loads a model (well-formed protobuf; one
//! unknown piece; no empty or duplicate piece; byte pieces spelled `<0xNN>` and all 256 of
//! them present exactly when `trainer_spec.byte_fallback` is set; a unigram model has at
//! least one normal, user-defined or unused piece) and two things this reader needs: every
//! piece and `unk_surface` is UTF-8, and `denormalizer_spec` has no `precompiled_charsmap`
//! (denormalization rules are not applied here). Failures are [`Error::Tokenizer`] naming
//! the field, the piece or the byte offset; nothing here panics on bad input. The encoder
//! side of the model (normalizer rules, scores, self-test samples) is not used.

use crate::error::{Error, Result};
use std::collections::HashMap;

/// The space marker SentencePiece writes in place of `' '`.
pub const SPACE_MARKER: char = '\u{2581}';

/// What sentencepiece writes for the unknown piece unless the model sets
/// `trainer_spec.unk_surface`.
pub const DEFAULT_UNK_SURFACE: &str = " \u{2047} ";

/// The id that ends a run of text padding in Moshi's text stream
/// (`LMModel.end_of_text_padding_id`).
pub const END_OF_TEXT_PADDING_ID: u32 = 0;

/// The kind of a piece (`ModelProto.SentencePiece.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PieceType {
    /// An ordinary piece (1).
    Normal,
    /// The unknown piece, `<unk>` (2).
    Unknown,
    /// A control piece such as `<s>`, `</s>`, `<pad>` (3): decodes to nothing.
    Control,
    /// A user-defined symbol (4): decodes like a normal piece.
    UserDefined,
    /// An unused piece (5): decodes like a normal piece.
    Unused,
    /// A byte-fallback piece `<0xNN>` (6).
    Byte,
}

impl PieceType {
    fn from_proto(v: i32) -> Option<Self> {
        Some(match v {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => return None,
        })
    }

    /// The lower-case name sentencepiece's proto uses (`normal`, `unknown`, `control`,
    /// `user_defined`, `unused`, `byte`).
    pub fn name(self) -> &'static str {
        match self {
            PieceType::Normal => "normal",
            PieceType::Unknown => "unknown",
            PieceType::Control => "control",
            PieceType::UserDefined => "user_defined",
            PieceType::Unused => "unused",
            PieceType::Byte => "byte",
        }
    }

    /// Normal, user-defined and unused pieces share one name space in sentencepiece; the
    /// others (unknown, control, byte) share another, which takes precedence.
    fn is_reserved(self) -> bool {
        matches!(self, PieceType::Unknown | PieceType::Control | PieceType::Byte)
    }
}

/// The model type (`TrainerSpec.ModelType`); decoding does not depend on it, loading does
/// (a unigram model needs at least one non-reserved piece).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelType {
    /// Unigram language model (1), the default and Kyutai's.
    Unigram,
    /// Byte-pair encoding (2).
    Bpe,
    /// Whitespace-delimited words (3).
    Word,
    /// Characters (4).
    Char,
}

#[derive(Clone, Debug)]
struct Piece {
    text: String,
    kind: PieceType,
    /// The byte of a `<0xNN>` byte piece.
    byte: u8,
}

/// A SentencePiece model, loaded for decoding. See the module documentation for what
/// decoding mirrors.
#[derive(Clone, Debug)]
pub struct TextTokenizer {
    pieces: Vec<Piece>,
    unk_surface: String,
    /// `add_dummy_prefix || remove_extra_whitespaces`: drop the first `▁` at the start.
    strip_leading: bool,
    /// `remove_extra_whitespaces`: keep dropping it until some text is written.
    strip_all_leading: bool,
    byte_fallback: bool,
    model_type: ModelType,
    unk_id: Option<u32>,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    pad_id: Option<u32>,
}

impl TextTokenizer {
    /// Load a serialized `sentencepiece.ModelProto` (the bytes of a `.model` file).
    ///
    /// [`Error::Tokenizer`] when the bytes are empty or not a well-formed protobuf (truncated,
    /// bad wire type, field number 0, overlong varint, unbalanced group), when sentencepiece
    /// would refuse the model (no or two unknown pieces, an empty or duplicate piece, a bad
    /// or unexpected byte piece, missing byte pieces, a unigram model without normal
    /// pieces), when a piece or `unk_surface` is not UTF-8, or when `denormalizer_spec`
    /// carries denormalization rules.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.is_empty() {
            return Err(tok_err("the file is empty: a SentencePiece model (.model) holds its pieces, and here no piece has type UNKNOWN"));
        }
        let proto = parse_model(bytes).map_err(|e| match e {
            Error::Tokenizer(why) => tok_err(format!("{why}: not a SentencePiece model (a .model file, such as Kyutai's tokenizer_spm_32k_3.model)")),
            e => e,
        })?;
        Self::from_proto(proto)
    }

    fn from_proto(proto: ModelProto) -> Result<Self> {
        let t = &proto.trainer;
        if !proto.denormalizer_charsmap.is_empty() {
            return Err(tok_err(format!(
                "denormalizer_spec has a {}-byte precompiled_charsmap; denormalization rules are not supported",
                proto.denormalizer_charsmap.len()
            )));
        }
        if proto.pieces.len() > u32::MAX as usize {
            return Err(tok_err("more pieces than 32-bit ids can name"));
        }
        let mut pieces = Vec::with_capacity(proto.pieces.len());
        let mut normal: HashMap<&[u8], u32> = HashMap::new();
        let mut reserved: HashMap<&[u8], u32> = HashMap::new();
        let mut unk: Option<u32> = None;
        let mut byte_seen = [false; 256];
        let mut non_reserved = 0usize;
        for (i, p) in proto.pieces.iter().enumerate() {
            let id = i as u32;
            if p.piece.is_empty() {
                return Err(tok_err(format!("piece {id} is empty")));
            }
            let shown = String::from_utf8_lossy(p.piece);
            let map = if p.kind.is_reserved() { &mut reserved } else { &mut normal };
            if let Some(first) = map.insert(p.piece, id) {
                return Err(tok_err(format!("piece {id} `{shown}` is already defined as piece {first}")));
            }
            let mut byte = 0u8;
            match p.kind {
                PieceType::Unknown => {
                    if let Some(first) = unk {
                        return Err(tok_err(format!(
                            "pieces {first} and {id} both have type UNKNOWN; a model has one unknown piece"
                        )));
                    }
                    unk = Some(id);
                }
                PieceType::Byte => {
                    if !t.byte_fallback {
                        return Err(tok_err(format!(
                            "byte piece {id} `{shown}` is found although trainer_spec.byte_fallback is false"
                        )));
                    }
                    byte = parse_byte_piece(p.piece).ok_or_else(|| {
                        tok_err(format!("byte piece {id} `{shown}` is not of the form <0xNN> (two upper-case hex digits)"))
                    })?;
                    byte_seen[byte as usize] = true;
                }
                PieceType::Normal | PieceType::UserDefined | PieceType::Unused => non_reserved += 1,
                PieceType::Control => {}
            }
            let text = std::str::from_utf8(p.piece)
                .map_err(|e| tok_err(format!("piece {id} is not UTF-8 ({e})")))?
                .to_string();
            pieces.push(Piece { text, kind: p.kind, byte });
        }
        let unk_index = unk.ok_or_else(|| tok_err("no piece has type UNKNOWN (the model defines no <unk>)"))?;
        if t.byte_fallback {
            if let Some(b) = byte_seen.iter().position(|&s| !s) {
                return Err(tok_err(format!(
                    "trainer_spec.byte_fallback is true but there is no byte piece <0x{b:02X}> (a model needs all 256)"
                )));
            }
        }
        if t.model_type == ModelType::Unigram && non_reserved == 0 {
            return Err(tok_err("the unigram model has no normal, user-defined or unused piece"));
        }
        let unk_surface = match t.unk_surface {
            Some(s) => std::str::from_utf8(s)
                .map_err(|e| tok_err(format!("trainer_spec.unk_surface is not UTF-8 ({e})")))?
                .to_string(),
            None => DEFAULT_UNK_SURFACE.to_string(),
        };
        // sentencepiece's PieceToId (for unk_id() and the like): reserved pieces first, then
        // the others, else <unk>.
        let piece_to_id = |s: &[u8]| -> u32 {
            reserved.get(s).or_else(|| normal.get(s)).copied().unwrap_or(unk_index)
        };
        // unk_id()/bos_id()/... : the id of the piece named by trainer_spec (or the default
        // name), when it has the right type. The name is read up to a NUL, as in C++.
        let special = |name: Option<&[u8]>, default: &str, want: PieceType| -> Option<u32> {
            let name = match name {
                Some(n) if !n.is_empty() => n,
                _ => default.as_bytes(),
            };
            let name = name.split(|&b| b == 0).next().unwrap_or(&[]);
            let id = piece_to_id(name);
            (pieces.get(id as usize).map(|p: &Piece| p.kind) == Some(want)).then_some(id)
        };
        let unk_id = special(t.unk_piece, "<unk>", PieceType::Unknown);
        let bos_id = special(t.bos_piece, "<s>", PieceType::Control);
        let eos_id = special(t.eos_piece, "</s>", PieceType::Control);
        let pad_id = special(t.pad_piece, "<pad>", PieceType::Control);
        let n = &proto.normalizer;
        Ok(TextTokenizer {
            unk_surface,
            strip_leading: n.add_dummy_prefix || n.remove_extra_whitespaces,
            strip_all_leading: n.remove_extra_whitespaces,
            byte_fallback: t.byte_fallback,
            model_type: t.model_type,
            unk_id,
            bos_id,
            eos_id,
            pad_id,
            pieces,
        })
    }

    /// Number of pieces (`GetPieceSize`): valid ids are `0..piece_count()`.
    pub fn piece_count(&self) -> usize {
        self.pieces.len()
    }

    /// The piece of `id` as stored in the model (`id_to_piece`), `None` out of range.
    pub fn piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(|p| p.text.as_str())
    }

    /// The type of `id`'s own piece, `None` out of range.
    pub fn piece_type(&self, id: u32) -> Option<PieceType> {
        self.pieces.get(id as usize).map(|p| p.kind)
    }

    /// `unk_id()`: the id of the unknown piece named by `trainer_spec.unk_piece`.
    pub fn unk_id(&self) -> Option<u32> {
        self.unk_id
    }

    /// `bos_id()`: the control piece named by `trainer_spec.bos_piece` (`<s>`), if any.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// `eos_id()`: the control piece named by `trainer_spec.eos_piece` (`</s>`), if any.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// `pad_id()`: the control piece named by `trainer_spec.pad_piece` (`<pad>`), if any.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad_id
    }

    /// `trainer_spec.byte_fallback`.
    pub fn byte_fallback(&self) -> bool {
        self.byte_fallback
    }

    /// `trainer_spec.model_type`.
    pub fn model_type(&self) -> ModelType {
        self.model_type
    }

    /// The text of `ids`, as `SentencePieceProcessor.decode_ids` writes it (see the module
    /// documentation). [`Error::Tokenizer`] if an id is not below [`Self::piece_count`].
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.check_ids(ids)?;
        let mut state = DecodeState::default();
        let mut out = String::new();
        for &id in ids {
            state.push(self, id, &mut out);
        }
        state.flush(&mut out);
        Ok(out)
    }

    /// The text token `id` adds when it follows some text, which is how a live transcript
    /// is printed token by token: its piece with `▁` as spaces (no leading `▁` is dropped),
    /// nothing for a control piece, the unknown surface for the unknown piece, and for a byte
    /// piece its byte if that is ASCII, else U+FFFD (a character spelled by several byte
    /// pieces needs [`TextStream`]). Equal to `decode_ids(prev + [id])` minus
    /// `decode_ids(prev)` for any `prev` whose text is not empty and that does not end in
    /// byte pieces. Moshi's padding ids are not special here: skip them with
    /// [`Self::is_padding`]. [`Error::Tokenizer`] if `id` is out of range.
    pub fn decode_piece(&self, id: u32) -> Result<String> {
        self.check_ids(&[id])?;
        let mut state = DecodeState { is_bos_ws: false, wrote: true, ..DecodeState::default() };
        let mut out = String::new();
        state.push(self, id, &mut out);
        state.flush(&mut out);
        Ok(out)
    }

    /// Whether `id` is padding in Moshi's text stream: the model's text padding id
    /// (`existing_text_padding_id` of the LM config, 3 for Kyutai's models) or the
    /// end-of-padding id [`END_OF_TEXT_PADDING_ID`] (0). Such tokens must produce no text;
    /// Kyutai's servers skip both before printing.
    pub fn is_padding(id: u32, existing_text_padding_id: u32) -> bool {
        id == existing_text_padding_id || id == END_OF_TEXT_PADDING_ID
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&id| id as usize >= self.pieces.len()) {
            Some(id) => Err(tok_err(format!(
                "token id {id} is out of range: the model has {} pieces",
                self.pieces.len()
            ))),
            None => Ok(()),
        }
    }
}

/// Incremental decoding for a live transcript: feed ids one at a time, get the text that
/// is final so far. The concatenation of everything [`TextStream::push`] and
/// [`TextStream::finish`] return equals [`TextTokenizer::decode`] of the same ids (of the ids
/// that are not padding, with [`TextStream::skip_padding`]). A character spelled by several
/// byte pieces comes out once its last byte arrives; a leading `▁` is dropped as in
/// `decode_ids`.
///
/// The stream does not borrow the tokenizer: pass it to each call.
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    state: DecodeState,
    padding: Option<u32>,
}

impl TextStream {
    /// A stream at the start of a text.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ignore Moshi's padding ids (see [`TextTokenizer::is_padding`]) as if they were not
    /// in the stream.
    pub fn skip_padding(mut self, existing_text_padding_id: u32) -> Self {
        self.padding = Some(existing_text_padding_id);
        self
    }

    /// Feed one id; returns the text it completes (often empty for byte pieces).
    /// [`Error::Tokenizer`] if `id` is out of range; the stream is then unchanged.
    pub fn push(&mut self, tokenizer: &TextTokenizer, id: u32) -> Result<String> {
        if let Some(pad) = self.padding {
            if TextTokenizer::is_padding(id, pad) {
                return Ok(String::new());
            }
        }
        tokenizer.check_ids(&[id])?;
        let mut out = String::new();
        self.state.push(tokenizer, id, &mut out);
        Ok(out)
    }

    /// End of the text: returns what the pending byte pieces decode to (U+FFFD for each byte
    /// of an incomplete character) and resets the stream to the start of a new text.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        self.state.flush(&mut out);
        self.state = DecodeState::default();
        out
    }
}

/// sentencepiece's `Decode` loop, one piece at a time.
#[derive(Clone, Debug)]
struct DecodeState {
    /// Bytes of the current run of byte pieces not written yet.
    pending: Vec<u8>,
    /// Whether a piece starting with `▁` at this point may still lose it.
    is_bos_ws: bool,
    /// Whether the last non-byte piece lost a leading `▁`.
    bos_ws_seen: bool,
    /// Whether any text has been written.
    wrote: bool,
}

impl Default for DecodeState {
    fn default() -> Self {
        DecodeState { pending: Vec::new(), is_bos_ws: true, bos_ws_seen: false, wrote: false }
    }
}

impl DecodeState {
    /// `id` must be in range.
    fn push(&mut self, tok: &TextTokenizer, id: u32, out: &mut String) {
        let Some(piece) = tok.pieces.get(id as usize) else { return };
        if piece.kind == PieceType::Byte {
            self.pending.push(piece.byte);
            self.drain_bytes(out, false);
            return;
        }
        self.flush(out);
        if self.bos_ws_seen || self.wrote {
            self.is_bos_ws = false;
        }
        let start = out.len();
        match piece.kind {
            PieceType::Control => self.bos_ws_seen = false,
            PieceType::Unknown => {
                self.bos_ws_seen = false;
                out.push_str(&tok.unk_surface);
            }
            _ => {
                let mut text = piece.text.as_str();
                let mut stripped = false;
                if self.is_bos_ws && tok.strip_leading {
                    if let Some(rest) = text.strip_prefix(SPACE_MARKER) {
                        text = rest;
                        stripped = true;
                    }
                    if tok.strip_all_leading {
                        stripped = false;
                    }
                }
                self.bos_ws_seen = stripped;
                out.extend(text.chars().map(|c| if c == SPACE_MARKER { ' ' } else { c }));
            }
        }
        self.wrote |= out.len() > start;
    }

    /// Write the whole pending byte run (the run has ended).
    fn flush(&mut self, out: &mut String) {
        self.drain_bytes(out, true);
    }

    /// Write the characters at the front of the pending bytes that are decided. With
    /// `end`, the run is over and everything is decided.
    fn drain_bytes(&mut self, out: &mut String, end: bool) {
        let mut at = 0;
        let start = out.len();
        while at < self.pending.len() {
            match utf8_char(&self.pending[at..], end) {
                Utf8::Char(c, n) => {
                    out.push(c);
                    at += n;
                }
                Utf8::Invalid => {
                    out.push(char::REPLACEMENT_CHARACTER);
                    at += 1;
                }
                Utf8::NeedMore => break,
            }
        }
        self.pending.drain(..at);
        self.wrote |= out.len() > start;
    }
}

enum Utf8 {
    /// A well-formed character of this many bytes.
    Char(char, usize),
    /// The first byte becomes U+FFFD.
    Invalid,
    /// Undecided until more bytes arrive.
    NeedMore,
}

/// sentencepiece's `string_util::DecodeUTF8` on the front of `b` (non-empty). Without
/// `end`, a sequence that is only short of bytes (every byte present is a continuation
/// byte) is undecided; with `end` it is invalid, as when the run ends there.
fn utf8_char(b: &[u8], end: bool) -> Utf8 {
    let b0 = b[0];
    if b0 < 0x80 {
        return Utf8::Char(b0 as char, 1);
    }
    let (n, lead, min) = match b0 {
        _ if b0 & 0xE0 == 0xC0 => (2, (b0 & 0x1F) as u32, 0x80),
        _ if b0 & 0xF0 == 0xE0 => (3, (b0 & 0x0F) as u32, 0x800),
        _ if b0 & 0xF8 == 0xF0 => (4, (b0 & 0x07) as u32, 0x10000),
        _ => return Utf8::Invalid,
    };
    let trail = |x: u8| x & 0xC0 == 0x80;
    if b.len() < n {
        return if end || !b[1..].iter().all(|&x| trail(x)) { Utf8::Invalid } else { Utf8::NeedMore };
    }
    if !b[1..n].iter().all(|&x| trail(x)) {
        return Utf8::Invalid;
    }
    let cp = b[1..n].iter().fold(lead, |cp, &x| (cp << 6) | (x & 0x3F) as u32);
    if cp < min {
        return Utf8::Invalid;
    }
    // char::from_u32 refuses surrogates and values above U+10FFFF, as IsValidCodepoint does.
    match char::from_u32(cp) {
        Some(c) => Utf8::Char(c, n),
        None => Utf8::Invalid,
    }
}

/// The byte of a byte piece: exactly `<0xNN>` with upper-case hex digits (sentencepiece
/// formats byte pieces with `<0x%02X>` and accepts only those 256 strings).
fn parse_byte_piece(p: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    match p {
        [b'<', b'0', b'x', h, l, b'>'] => Some(digit(*h)? << 4 | digit(*l)?),
        _ => None,
    }
}

fn tok_err(why: impl Into<String>) -> Error {
    Error::Tokenizer(why.into())
}

// ---------------------------------------------------------------------------------------
// The few ModelProto fields decoding needs, read with protobuf's rules: unknown fields
// (every wire type, groups included) are skipped, a known field with an unexpected wire type
// counts as unknown, an enum value the schema does not list leaves the field as it was,
// the last value of a repeated scalar wins, and sub-messages that appear twice merge.
// ---------------------------------------------------------------------------------------

struct ProtoPiece<'a> {
    piece: &'a [u8],
    kind: PieceType,
}

struct TrainerSpec<'a> {
    model_type: ModelType,
    byte_fallback: bool,
    unk_surface: Option<&'a [u8]>,
    unk_piece: Option<&'a [u8]>,
    bos_piece: Option<&'a [u8]>,
    eos_piece: Option<&'a [u8]>,
    pad_piece: Option<&'a [u8]>,
}

struct NormalizerSpec {
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
}

struct ModelProto<'a> {
    pieces: Vec<ProtoPiece<'a>>,
    trainer: TrainerSpec<'a>,
    normalizer: NormalizerSpec,
    denormalizer_charsmap: Vec<u8>,
}

const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const SGROUP: u8 = 3;
const EGROUP: u8 = 4;
const I32: u8 = 5;
/// protobuf's default nesting limit.
const MAX_DEPTH: usize = 100;

/// A cursor over one message's bytes; `base` is the offset of `buf` in the file.
struct Reader<'a, 'w> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
    what: &'w str,
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8], usize),
    Other,
}

impl<'a, 'w> Reader<'a, 'w> {
    fn new(buf: &'a [u8], base: usize, what: &'w str) -> Self {
        Reader { buf, pos: 0, base, what }
    }

    fn err(&self, at: usize, why: impl std::fmt::Display) -> Error {
        tok_err(format!("malformed model protobuf at byte {} (in {}): {why}", self.base + at, self.what))
    }

    fn varint(&mut self) -> Result<u64> {
        let start = self.pos;
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.err(start, "varint runs past the end"));
            };
            self.pos += 1;
            v |= ((b & 0x7F) as u64).checked_shl(7 * i).unwrap_or(0);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err(start, "varint longer than 10 bytes"))
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(self.err(self.pos, format!("{what} of {n} bytes runs past the end ({left} left)")));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    /// The next field, `None` at the end of the message. An end-group tag is an error here:
    /// groups are consumed whole by [`Self::skip_group`].
    fn field(&mut self, depth: usize) -> Result<Option<(u32, Value<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let at = self.pos;
        let tag = self.varint()?;
        if tag > u32::MAX as u64 {
            return Err(self.err(at, format!("tag {tag} is too large")));
        }
        let (field, wire) = ((tag >> 3) as u32, (tag & 7) as u8);
        if field == 0 {
            return Err(self.err(at, "field number 0"));
        }
        let value = match wire {
            VARINT => Value::Varint(self.varint()?),
            I64 => {
                self.take(8, "fixed64 field")?;
                Value::Other
            }
            LEN => {
                let n = self.varint()?;
                let off = self.base + self.pos;
                Value::Bytes(self.take(n, "length-delimited field")?, off)
            }
            SGROUP => {
                self.skip_group(field, depth + 1)?;
                Value::Other
            }
            EGROUP => return Err(self.err(at, format!("end of group {field} without a start"))),
            I32 => {
                self.take(4, "fixed32 field")?;
                Value::Other
            }
            w => return Err(self.err(at, format!("wire type {w} of field {field} does not exist"))),
        };
        Ok(Some((field, value)))
    }

    fn skip_group(&mut self, group: u32, depth: usize) -> Result<()> {
        let start = self.pos;
        if depth > MAX_DEPTH {
            return Err(self.err(start, "groups nested too deeply"));
        }
        loop {
            if self.pos >= self.buf.len() {
                return Err(self.err(start, format!("group {group} is not closed")));
            }
            let at = self.pos;
            let tag = self.varint()?;
            let (field, wire) = ((tag >> 3) as u32, (tag & 7) as u8);
            if tag > u32::MAX as u64 || field == 0 {
                return Err(self.err(at, "bad tag inside a group"));
            }
            match wire {
                VARINT => {
                    self.varint()?;
                }
                I64 => {
                    self.take(8, "fixed64 field")?;
                }
                LEN => {
                    let n = self.varint()?;
                    self.take(n, "length-delimited field")?;
                }
                SGROUP => self.skip_group(field, depth + 1)?,
                EGROUP if field == group => return Ok(()),
                EGROUP => return Err(self.err(at, format!("group {group} closed by end of group {field}"))),
                I32 => {
                    self.take(4, "fixed32 field")?;
                }
                w => return Err(self.err(at, format!("wire type {w} of field {field} does not exist"))),
            }
        }
    }
}

/// An enum or int32 field: the low 32 bits of the varint, as protobuf reads it.
fn as_i32(v: u64) -> i32 {
    v as u32 as i32
}

fn parse_model(bytes: &[u8]) -> Result<ModelProto<'_>> {
    let mut m = ModelProto {
        pieces: Vec::new(),
        trainer: TrainerSpec {
            model_type: ModelType::Unigram,
            byte_fallback: false,
            unk_surface: None,
            unk_piece: None,
            bos_piece: None,
            eos_piece: None,
            pad_piece: None,
        },
        normalizer: NormalizerSpec { add_dummy_prefix: true, remove_extra_whitespaces: true },
        denormalizer_charsmap: Vec::new(),
    };
    let mut r = Reader::new(bytes, 0, "ModelProto");
    while let Some((field, value)) = r.field(0)? {
        match (field, value) {
            (1, Value::Bytes(b, off)) => {
                let what = format!("ModelProto.pieces[{}]", m.pieces.len());
                m.pieces.push(parse_piece(b, off, &what)?);
            }
            (2, Value::Bytes(b, off)) => parse_trainer(b, off, &mut m.trainer)?,
            (3, Value::Bytes(b, off)) => parse_normalizer(b, off, "ModelProto.normalizer_spec", &mut m.normalizer, None)?,
            (5, Value::Bytes(b, off)) => {
                let mut unused = NormalizerSpec { add_dummy_prefix: true, remove_extra_whitespaces: true };
                parse_normalizer(b, off, "ModelProto.denormalizer_spec", &mut unused, Some(&mut m.denormalizer_charsmap))?
            }
            (4, Value::Bytes(b, off)) => skip_message(b, off, "ModelProto.self_test_data")?,
            _ => {}
        }
    }
    Ok(m)
}

fn parse_piece<'a>(b: &'a [u8], base: usize, what: &str) -> Result<ProtoPiece<'a>> {
    let mut p = ProtoPiece { piece: &[], kind: PieceType::Normal };
    let mut r = Reader::new(b, base, what);
    while let Some((field, value)) = r.field(1)? {
        match (field, value) {
            (1, Value::Bytes(s, _)) => p.piece = s,
            (3, Value::Varint(v)) => {
                if let Some(k) = PieceType::from_proto(as_i32(v)) {
                    p.kind = k;
                }
            }
            _ => {}
        }
    }
    Ok(p)
}

fn parse_trainer<'a>(b: &'a [u8], base: usize, t: &mut TrainerSpec<'a>) -> Result<()> {
    let mut r = Reader::new(b, base, "ModelProto.trainer_spec");
    while let Some((field, value)) = r.field(1)? {
        match (field, value) {
            (3, Value::Varint(v)) => {
                t.model_type = match as_i32(v) {
                    1 => ModelType::Unigram,
                    2 => ModelType::Bpe,
                    3 => ModelType::Word,
                    4 => ModelType::Char,
                    _ => t.model_type,
                }
            }
            (35, Value::Varint(v)) => t.byte_fallback = v != 0,
            (44, Value::Bytes(s, _)) => t.unk_surface = Some(s),
            (45, Value::Bytes(s, _)) => t.unk_piece = Some(s),
            (46, Value::Bytes(s, _)) => t.bos_piece = Some(s),
            (47, Value::Bytes(s, _)) => t.eos_piece = Some(s),
            (48, Value::Bytes(s, _)) => t.pad_piece = Some(s),
            _ => {}
        }
    }
    Ok(())
}

fn parse_normalizer(
    b: &[u8],
    base: usize,
    what: &str,
    n: &mut NormalizerSpec,
    mut charsmap: Option<&mut Vec<u8>>,
) -> Result<()> {
    let mut r = Reader::new(b, base, what);
    while let Some((field, value)) = r.field(1)? {
        match (field, value) {
            (2, Value::Bytes(s, _)) => {
                if let Some(c) = charsmap.as_deref_mut() {
                    // `bytes` field: the last occurrence wins.
                    c.clear();
                    c.extend_from_slice(s);
                }
            }
            (3, Value::Varint(v)) => n.add_dummy_prefix = v != 0,
            (4, Value::Varint(v)) => n.remove_extra_whitespaces = v != 0,
            _ => {}
        }
    }
    Ok(())
}

/// Check that a sub-message the reader does not use is well-formed, as protobuf does.
fn skip_message(b: &[u8], base: usize, what: &str) -> Result<()> {
    let mut r = Reader::new(b, base, what);
    while let Some((field, value)) = r.field(1)? {
        // SelfTestData.samples (1) are messages themselves.
        if let (1, Value::Bytes(s, off)) = (field, value) {
            skip_message(s, off, "ModelProto.self_test_data.samples")?;
        }
    }
    Ok(())
}
