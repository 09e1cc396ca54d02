//! Native file formats for the command-line tool: WAV in (any rate, any channel count,
//! down-mixed and resampled to 24 kHz with `rubato`), WAV out (24 kHz mono 16-bit), and
//! codes as NumPy `.npy` integer arrays of shape `[frames, n_q]`. Every file the tool writes
//! (these, its token arrays and its checkpoints) goes through [`write_file`], whole or not at
//! all.
//!
//! Every failure is an [`Error::File`] naming the file and the problem (not a WAV, empty,
//! truncated, wrong dtype or shape), except codes outside `[0, bins)`, which are
//! [`Error::CodeOutOfRange`] with their frame and codebook. Nothing here panics on bad input.

use std::fs::File;
use std::io::{BufWriter, Cursor};
use std::path::Path;

use npyz::{DType, TypeChar, WriterBuilder};
use rubato::{FftFixedInOut, Resampler};

use crate::error::{Error, Result};

/// The codec's sample rate, in Hz.
pub const SAMPLE_RATE: u32 = 24_000;

/// Input sample rates accepted by [`read_wav`], in Hz; anything outside is not audio the
/// resampler can sensibly convert.
pub const SAMPLE_RATES: std::ops::RangeInclusive<u32> = 1_000..=1_000_000;

/// Input chunk the resampler works in, in samples at the file's rate (rounded up by `rubato`
/// to a whole number of resampling periods).
const RESAMPLE_CHUNK: usize = 1024;

fn read_file(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| Error::file(path.display(), format!("cannot read the file: {e}")))?;
    if bytes.is_empty() {
        return Err(Error::file(path.display(), "the file is empty"));
    }
    Ok(bytes)
}

/// Read a WAV file as mono f32 samples at 24 kHz.
///
/// Accepts integer PCM of 8, 16, 24 or 32 bits and 32-bit float, at any sample rate in
/// [`SAMPLE_RATES`] and with any number of channels. Integer samples are scaled by
/// `1 / 2^(bits - 1)` (16-bit: `s / 32768`), so full scale is `[-1, 1)`; channels are averaged
/// into one; a file not at 24 kHz is resampled with an FFT resampler (`rubato`), its delay
/// removed, to `ceil(len * 24000 / rate)` samples. A 24 kHz mono file comes back exactly as
/// stored.
///
/// Returns `[samples]` at 24 kHz. Fails with [`Error::File`] naming the file when it cannot be
/// read, is empty, is not a WAV, is truncated, has an unsupported format or rate, holds no
/// samples, or holds a non-finite float sample.
pub fn read_wav(path: impl AsRef<Path>) -> Result<Vec<f32>> {
    let path = path.as_ref();
    let fail = |why: String| Error::file(path.display(), why);
    let bytes = read_file(path)?;
    let mut reader = hound::WavReader::new(Cursor::new(&bytes[..])).map_err(|e| match wav_format(&bytes) {
        Some((tag, bits)) if !matches!((tag, bits), (1, 8 | 16 | 24 | 32) | (3, 32)) => fail(format!(
            "{bits}-bit {} samples are not supported (expected 8, 16, 24 or 32-bit integer, or 32-bit float; \
             convert it, e.g. `sox IN.wav -b 16 OUT.wav`)",
            match tag {
                1 => "integer PCM".to_string(),
                3 => "float".to_string(),
                t => format!("format code {t:#06x}"),
            }
        )),
        _ => fail(format!("not a readable WAV file: {e}; convert it first, e.g. `sox IN OUT.wav` or `ffmpeg -i IN OUT.wav`")),
    })?;
    let spec = reader.spec();
    let channels = spec.channels as usize;
    if channels == 0 {
        return Err(fail("the WAV header declares zero channels".into()));
    }
    if !SAMPLE_RATES.contains(&spec.sample_rate) {
        return Err(fail(format!(
            "sample rate {} Hz is not supported (expected {} to {} Hz; resample it, e.g. `sox IN.wav -r 24000 OUT.wav`)",
            spec.sample_rate,
            SAMPLE_RATES.start(),
            SAMPLE_RATES.end()
        )));
    }
    // The header's count bounds nothing: never reserve more than the file can hold.
    let capacity = (reader.len() as usize).min(bytes.len());
    let mut interleaved = Vec::with_capacity(capacity);
    let truncated =
        |n: usize, e: hound::Error| fail(format!("truncated or corrupt sample data after {n} samples: {e}"));
    match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Int, bits @ (8 | 16 | 24 | 32)) => {
            let scale = 1.0 / (1u64 << (bits - 1)) as f64;
            for s in reader.samples::<i32>() {
                let s = s.map_err(|e| truncated(interleaved.len(), e))?;
                interleaved.push((s as f64 * scale) as f32);
            }
        }
        (hound::SampleFormat::Float, 32) => {
            for s in reader.samples::<f32>() {
                let s = s.map_err(|e| truncated(interleaved.len(), e))?;
                if !s.is_finite() {
                    return Err(fail(format!("sample {} is not finite ({s})", interleaved.len())));
                }
                interleaved.push(s);
            }
        }
        (format, bits) => {
            return Err(fail(format!(
                "{bits}-bit {format:?} samples are not supported (expected 8, 16, 24 or 32-bit integer, or 32-bit float)"
            )));
        }
    }
    if interleaved.is_empty() {
        return Err(fail("the WAV holds no samples".into()));
    }
    if interleaved.len() % channels != 0 {
        return Err(fail(format!(
            "truncated: {} samples do not make whole frames of {channels} channels",
            interleaved.len()
        )));
    }
    let mono: Vec<f32> = if channels == 1 {
        interleaved
    } else {
        interleaved.chunks_exact(channels).map(|f| f.iter().sum::<f32>() / channels as f32).collect()
    };
    if spec.sample_rate == SAMPLE_RATE {
        return Ok(mono);
    }
    resample(&mono, spec.sample_rate as usize, SAMPLE_RATE as usize)
        .map_err(|e| fail(format!("resampling failed: {e}")))
}

/// The format code and bits per sample of a RIFF/WAVE file's `fmt ` chunk (the subformat's
/// code for `WAVE_FORMAT_EXTENSIBLE`), where the bytes have one: to say why a file `hound`
/// refuses is not read.
fn wav_format(bytes: &[u8]) -> Option<(u16, u16)> {
    if bytes.get(0..4)? != b"RIFF" || bytes.get(8..12)? != b"WAVE" {
        return None;
    }
    let u16_at = |at: usize| bytes.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let mut at = 12usize;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if &head[..4] == b"fmt " {
            let (tag, bits) = (u16_at(at + 8)?, u16_at(at + 22)?);
            // WAVE_FORMAT_EXTENSIBLE: the subformat GUID starts with the format code
            return Some(if tag == 0xfffe { (u16_at(at + 32).unwrap_or(tag), bits) } else { (tag, bits) });
        }
        at = at.checked_add(8)?.checked_add(len.checked_add(len & 1)?)?;
    }
    None
}

/// Resample mono `x` from `from` Hz to `to` Hz: `ceil(len * to / from)` samples, aligned with
/// the input (the resampler's delay removed; the tail flushed with zeros).
fn resample(x: &[f32], from: usize, to: usize) -> std::result::Result<Vec<f32>, String> {
    // The resampler works in an even number of periods of `from / gcd` input samples: its
    // filter is centred on sample `chunk / 2` (rounded down), which is then exactly the
    // `output_delay` it reports.
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let period = from / gcd(from, to).max(1);
    let periods = RESAMPLE_CHUNK.div_ceil(period).next_multiple_of(2);
    let mut r = FftFixedInOut::<f64>::new(from, to, periods * period, 1).map_err(|e| e.to_string())?;
    let want = (x.len() as u64 * to as u64).div_ceil(from as u64) as usize;
    let delay = r.output_delay();
    let mut input = r.input_buffer_allocate(true);
    let mut output = r.output_buffer_allocate(true);
    let mut out: Vec<f32> = Vec::with_capacity(delay + want + r.output_frames_max());
    let mut pos = 0;
    while out.len() < delay + want {
        let n = r.input_frames_next();
        let chunk = &mut input[0];
        chunk.resize(n, 0.0);
        for (i, v) in chunk.iter_mut().enumerate() {
            *v = x.get(pos + i).map_or(0.0, |&s| s as f64);
        }
        pos += n;
        let (_, m) = r.process_into_buffer(&input, &mut output, None).map_err(|e| e.to_string())?;
        out.extend(output[0][..m].iter().map(|&v| v as f32));
    }
    out.drain(..delay);
    out.truncate(want);
    Ok(out)
}

/// Write `pcm` (24 kHz mono, nominally in [-1, 1]) as a 16-bit WAV at 24 kHz.
///
/// Samples are clamped to [-1, 1] and stored as `round(s * 32768)` saturated to the 16-bit
/// range, the inverse of [`read_wav`]'s scaling; a NaN is stored as 0. The file is written whole
/// or not at all ([`write_file`]). Fails with [`Error::File`] naming the file when it cannot be
/// created or written.
pub fn write_wav(path: impl AsRef<Path>, pcm: &[f32]) -> Result<()> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SAMPLE_RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    write_file(path, "WAV", |out| {
        let mut w = hound::WavWriter::new(out, spec)?;
        for &s in pcm {
            // `as` saturates (1.0 gives 32767) and maps NaN to 0.
            w.write_sample((s.clamp(-1.0, 1.0) * 32768.0).round() as i16)?;
        }
        w.finalize()
    })
}

/// Write a file whole or not at all: `write` fills a temporary file beside `path` (in its
/// directory, so that the two are on one file system), which is flushed to the disk and then
/// takes `path`'s place by a rename. A failure part way (a full disk, an error of `write`)
/// removes the temporary file and leaves whatever was at `path` before as it was.
///
/// A symlink is followed: its target is replaced and the link kept. A file replaced keeps its
/// permissions; a new one gets those `File::create` gives (0o666 less the umask on Unix).
/// What cannot be replaced by a rename (a device such as `/dev/null`, a FIFO, a dangling
/// symlink) is written directly, as `File::create` would.
///
/// Fails with [`Error::File`] naming `path`: "cannot write the {what}: {reason}".
pub fn write_file<E: std::fmt::Display>(
    path: impl AsRef<Path>,
    what: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), E>,
) -> Result<()> {
    let path = path.as_ref();
    let fail = |e: &dyn std::fmt::Display| Error::file(path.display(), format!("cannot write the {what}: {e}"));
    // `into_inner` flushes the buffer and reports a failure to
    let finish = |out: BufWriter<File>| out.into_inner().map_err(|e| fail(e.error()));
    // `metadata` follows symlinks: `existing` is what a write would change
    let existing = std::fs::metadata(path).ok();
    let dangling = existing.is_none() && path.is_symlink();
    if dangling || existing.as_ref().is_some_and(|m| !m.is_file()) {
        let mut out = BufWriter::new(File::create(path).map_err(|e| fail(&e))?);
        write(&mut out).map_err(|e| fail(&e))?;
        finish(out)?;
        return Ok(());
    }
    let target = match existing {
        Some(_) => std::fs::canonicalize(path).map_err(|e| fail(&e))?,
        None => path.to_path_buf(),
    };
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new();
    temp.prefix(".inferencelayer-").suffix(".part");
    #[cfg(unix)]
    temp.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666)); // less the umask
    // tempfile's errors name the temporary file, which the user never sees: keep the reason
    let (file, temp_path) = temp.tempfile_in(dir).map_err(|e| fail(&std::io::Error::from(e.kind())))?.into_parts();
    if let Some(before) = &existing {
        file.set_permissions(before.permissions()).map_err(|e| fail(&e))?;
    }
    let _part = Partial::register(temp_path.to_path_buf());
    let mut out = BufWriter::new(file);
    write(&mut out).map_err(|e| fail(&e))?;
    finish(out)?.sync_all().map_err(|e| fail(&e))?;
    temp_path.persist(&target).map_err(|e| fail(&e.error))?;
    Ok(())
}

/// The temporary files [`write_file`] is filling now, for [`remove_partial_files`].
static PARTIAL: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A temporary file of [`write_file`] in [`PARTIAL`] while it lives.
struct Partial(std::path::PathBuf);

impl Partial {
    fn register(path: std::path::PathBuf) -> Self {
        PARTIAL.lock().unwrap_or_else(|e| e.into_inner()).push(path.clone());
        Self(path)
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        PARTIAL.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| p != &self.0);
    }
}

/// Remove the temporary files of the [`write_file`] calls in progress (the outputs they
/// would replace are untouched): for a process about to end part way, on an interrupt,
/// whose temporary files would otherwise stay beside the outputs. Returns how many it
/// removed.
pub fn remove_partial_files() -> usize {
    let parts = PARTIAL.lock().unwrap_or_else(|e| e.into_inner());
    parts.iter().filter(|p| std::fs::remove_file(p).is_ok()).count()
}

/// Check that the shape in an `.npy` header has a product that fits in 64 bits (the parser
/// multiplies the dimensions unchecked). `Err` carries the reason.
fn check_npy_shape(bytes: &[u8]) -> std::result::Result<(), String> {
    // magic (6), version (2), header length (2 in v1, 4 in v2 and v3), header text
    let (len_bytes, start): (usize, usize) = match bytes.get(6) {
        Some(1) => (2, 10),
        Some(2 | 3) => (4, 12),
        _ => return Ok(()), // let the parser report it
    };
    let Some(len) = bytes.get(8..8 + len_bytes) else { return Ok(()) };
    let len = len.iter().rev().fold(0usize, |acc, &b| (acc << 8) | b as usize);
    let Some(text) = bytes.get(start..start.saturating_add(len)) else { return Ok(()) };
    let text = String::from_utf8_lossy(text);
    let Some(at) = text.find("'shape'") else { return Ok(()) };
    let rest = &text[at..];
    let (Some(open), Some(close)) = (rest.find('('), rest.find(')')) else { return Ok(()) };
    if close < open {
        return Ok(());
    }
    let mut total: u64 = 1;
    for dim in rest[open + 1..close].split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let d: u64 =
            dim.trim_end_matches('L').parse().map_err(|_| format!("shape dimension `{dim}` is not a number"))?;
        total = total.checked_mul(d).ok_or_else(|| format!("shape ({}) is too large", &rest[open + 1..close]))?;
    }
    Ok(())
}

fn ints<T>(file: npyz::NpyFile<&[u8]>) -> std::io::Result<Vec<i64>>
where
    T: npyz::Deserialize + TryInto<i64>,
{
    Ok(file.into_vec::<T>()?.into_iter().map(|v| v.try_into().unwrap_or(i64::MAX)).collect())
}

/// A codes file's header, checked to be a 2-D integer array whose data the file holds.
struct CodesFile {
    bytes: Vec<u8>,
    data_at: usize,
    header: npyz::NpyHeader,
    ty: TypeChar,
    width: usize,
    frames: usize,
    codebooks: usize,
}

impl CodesFile {
    fn open(path: &Path) -> Result<Self> {
        let fail = |why: String| Error::file(path.display(), why);
        let bytes = read_file(path)?;
        check_npy_shape(&bytes).map_err(|e| fail(format!("not a valid .npy file: {e}")))?;
        let mut data: &[u8] = &bytes;
        let header =
            npyz::NpyHeader::from_reader(&mut data).map_err(|e| fail(format!("not a NumPy .npy file: {e}")))?;
        let data_at = bytes.len() - data.len();
        let dtype = header.dtype();
        let DType::Plain(ts) = &dtype else {
            return Err(fail(format!("codes must be integers, the file holds a structured dtype {}", dtype.descr())));
        };
        let (ty, width) = (ts.type_char(), ts.num_bytes().unwrap_or(0));
        if !matches!(ty, TypeChar::Int | TypeChar::Uint) || !matches!(width, 1 | 2 | 4 | 8) {
            return Err(fail(format!(
                "codes must be integers (int8 to int64, uint8 to uint64), the file holds dtype `{ts}`"
            )));
        }
        let shape = header.shape();
        let [frames, codebooks] = shape[..] else {
            return Err(fail(format!("codes must be a 2-D array [frames, codebooks], the file has shape {shape:?}")));
        };
        let needed = header.len().checked_mul(width as u64);
        if needed.is_none_or(|n| n > data.len() as u64) {
            return Err(fail(format!(
                "truncated: shape {shape:?} needs {} bytes of data, the file holds {}",
                header.len().saturating_mul(width as u64),
                data.len()
            )));
        }
        let (Ok(frames), Ok(codebooks)) = (usize::try_from(frames), usize::try_from(codebooks)) else {
            return Err(fail(format!("shape {shape:?} is too large")));
        };
        Ok(Self { bytes, data_at, header, ty, width, frames, codebooks })
    }

    /// Every value, in the file's order, widened to i64 (u64 above `i64::MAX` saturates).
    fn values(self) -> std::io::Result<Vec<i64>> {
        let file = npyz::NpyFile::with_header(self.header, &self.bytes[self.data_at..]);
        match (self.ty, self.width) {
            (TypeChar::Int, 1) => ints::<i8>(file),
            (TypeChar::Int, 2) => ints::<i16>(file),
            (TypeChar::Int, 4) => ints::<i32>(file),
            (TypeChar::Int, 8) => ints::<i64>(file),
            (TypeChar::Uint, 1) => ints::<u8>(file),
            (TypeChar::Uint, 2) => ints::<u16>(file),
            (TypeChar::Uint, 4) => ints::<u32>(file),
            _ => ints::<u64>(file),
        }
    }
}

/// The shape `(frames, codebooks)` of a codes file, from its header, with the checks of
/// [`read_codes`] except the codebook count and the values' range.
pub fn codes_shape(path: impl AsRef<Path>) -> Result<(usize, usize)> {
    let f = CodesFile::open(path.as_ref())?;
    Ok((f.frames, f.codebooks))
}

/// Read codes from a NumPy `.npy` integer array of shape `[frames, n_q]` (C or Fortran order;
/// dtypes `int8` to `int64` and `uint8` to `uint64`).
///
/// Returns `frames` rows of `n_q` codes. Fails with [`Error::File`] naming the file when it
/// cannot be read, is not an `.npy`, is truncated, is not a 2-D integer array, or has a number
/// of codebooks other than `n_q` (the message says how many it has and how many the codec
/// runs) or holds no frames; with [`Error::CodeOutOfRange`] for the first code that is negative or `>= bins`.
pub fn read_codes(path: impl AsRef<Path>, n_q: usize, bins: usize) -> Result<Vec<Vec<u32>>> {
    let path = path.as_ref();
    let file = CodesFile::open(path)?;
    let (frames, k) = (file.frames, file.codebooks);
    if frames == 0 {
        return Err(Error::file(path.display(), format!("the file holds no frames (shape [0, {k}]): there is nothing to decode")));
    }
    if n_q == 0 {
        return Err(Error::Input("a codec runs at least one codebook".into()));
    }
    if k != n_q {
        return Err(Error::file(path.display(), format!("the file has {k} codebooks per frame, the codec runs {n_q}")));
    }
    let order = file.header.order();
    let flat = file.values().map_err(|e| Error::file(path.display(), format!("cannot read the codes: {e}")))?;
    let at = |f: usize, q: usize| match order {
        npyz::Order::C => flat[f * n_q + q],
        npyz::Order::Fortran => flat[q * frames + f],
    };
    let mut codes = Vec::with_capacity(frames);
    for f in 0..frames {
        let mut row = Vec::with_capacity(n_q);
        for q in 0..n_q {
            let code = at(f, q);
            if code < 0 || code as u64 >= bins as u64 {
                return Err(Error::CodeOutOfRange { frame: f, codebook: q, code, bins });
            }
            row.push(code as u32);
        }
        codes.push(row);
    }
    Ok(codes)
}

/// Write codes as a NumPy `.npy` `int64` array of shape `[frames, n_q]` (C order), as
/// `np.save` would; `n_q` is the length of the rows (0 when there are no frames).
///
/// The file is written whole or not at all ([`write_file`]). Fails with [`Error::Input`] when
/// the rows differ in length, and with [`Error::File`] naming the file when it cannot be
/// created or written.
pub fn write_codes(path: impl AsRef<Path>, codes: &[Vec<u32>]) -> Result<()> {
    let path = path.as_ref();
    let n_q = codes.first().map_or(0, Vec::len);
    if let Some(f) = codes.iter().position(|r| r.len() != n_q) {
        return Err(Error::Input(format!("frame {f} has {} codes, frame 0 has {n_q}", codes[f].len())));
    }
    write_npy_i64(path, "codes", [codes.len(), n_q], codes.iter().flatten().map(|&c| c as i64))
}

/// Write `values` as a NumPy `.npy` `int64` array of `shape` `[rows, cols]` (C order), as
/// `np.save` would, whole or not at all ([`write_file`]). Fails with [`Error::File`] naming
/// the file and `what` it holds when it cannot be created or written, or when `values` are
/// fewer or more than the shape holds.
pub fn write_npy_i64(path: impl AsRef<Path>, what: &str, [rows, cols]: [usize; 2], values: impl Iterator<Item = i64>) -> Result<()> {
    write_file(path, what, |out| {
        let mut w = npyz::WriteOptions::<i64>::new()
            .default_dtype()
            .shape(&[rows as u64, cols as u64])
            .writer(out)
            .begin_nd()?;
        w.extend(values)?;
        w.finish()
    })
}
