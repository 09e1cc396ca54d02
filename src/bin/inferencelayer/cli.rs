//! `inferencelayer`: Kyutai's Mimi codec and Moshi speech LM on the command line, on the GPU
//! through WebGPU (natively: Vulkan, Metal or DX12; Mesa's lavapipe where there is no GPU).
//!
//! - `encode`: a WAV (1 kHz to 1 MHz, any channel count) -> codes `.npy` `[frames, codebooks]` int64;
//! - `decode`: codes `.npy` -> a 24 kHz mono 16-bit WAV;
//! - `roundtrip`: a WAV -> codes -> a WAV, frame by frame;
//! - `synthetic-checkpoint`: a seeded synthetic Mimi checkpoint, for trying the tool offline;
//! - `bench`: per-frame GPU encode and decode times;
//! - `converse`: the user's speech (a WAV, or its Mimi codes) -> Moshi's reply: a WAV, its
//!   text, and on request its tokens `.npy` `[frames, 1 + dep_q]` int64;
//! - `synthetic-lm`: a seeded synthetic Moshi LM checkpoint (f32, released naming);
//! - `bench-lm`: per-frame GPU times of the LM on synthetic Q8_0 weights (Moshi 7B's geometry
//!   by default), built in memory;
//! - `load-lm`: stream an LM checkpoint (`.safetensors` or `.gguf`) into the GPU and report
//!   the throughput and the peak host memory;
//! - `check`: from the configs alone, before any download, whether Mimi and the LM fit the
//!   adapter's limits (or lower, emulated ones): largest buffer, total GPU memory, and the
//!   limit a model breaks, with the bytes needed and allowed.
//!
//! Checkpoints are read in chunks (the byte-source driver over a `FileSource`) through the
//! streaming loaders (`LmLoader`, `MimiLoader`):
//! the LM's weights go from the file straight into GPU buffers, never whole in memory.
//!
//! Audio is coded in frames of 1920 samples (80 ms at 24 kHz); the last partial frame of an
//! input is zero-padded, so outputs are a whole number of frames long. Errors print
//! `error: ...` and exit with status 1.

// Standard output as `println!` writes it, but a closed pipe (`... | head`) neither panics
// nor stops the command: it goes on to write its files, and its exit status says how it went.
macro_rules! println {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use inferencelayer::audio;
use inferencelayer::bench::{self, bench_signal, Stats};
use inferencelayer::moshi::synthetic as lm_synthetic;
use inferencelayer::moshi::tokenizer::{TextStream, TextTokenizer};
use inferencelayer::moshi::{Lm, LmConfig, LmGen, LmGpuWeights, LmLoader, LmWeights, Sampling, StreamSampling};
use inferencelayer::mimi::MimiLoader;
use inferencelayer::weights::source::{self, FileSource, LoadOptions};
use inferencelayer::weights::stream::ByteSink;
use inferencelayer::weights::synthetic::{self, CodebookStats};
use inferencelayer::gpu::{capability_json, frame_submits, GpuLimits};
use inferencelayer::{Error, GpuContext, Mimi, MimiConfig, Result};

/// Per-level codebook statistics of the reference clip, `f32 [32, 257]`: synthetic codebooks
/// drawn from them give varying codes on speech.
const CODEBOOK_STATS_NPY: &[u8] = include_bytes!("../../../tests/golden/mimi_codebook_stats.npy");
/// The reduced LM geometry of the parity tests (`tests/reference/MOSHI.md`): the default of
/// `synthetic-lm`, whose f32 checkpoint at Moshi 7B's geometry would be 31 GB.
const SMALL_LM_CONFIG: &str = include_str!("../../../tests/golden/moshi_config.json");

#[derive(Parser)]
#[command(name = "inferencelayer", version, about = "Kyutai's Mimi audio codec and Moshi speech LM on WebGPU")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Encode a WAV file into Mimi codes (a NumPy .npy int64 array [frames, codebooks]).
    Encode {
        #[command(flatten)]
        codec: CodecArgs,
        /// WAV file: 8/16/24/32-bit integer or 32-bit float, 1 kHz to 1 MHz, any channel count.
        input: PathBuf,
        /// Codes file to write (.npy).
        output: PathBuf,
    },
    /// Decode Mimi codes (.npy [frames, codebooks]) into a 24 kHz mono 16-bit WAV.
    Decode {
        #[command(flatten)]
        codec: CodecArgs,
        /// Codes file (.npy, integer, [frames, codebooks]).
        input: PathBuf,
        /// WAV file to write.
        output: PathBuf,
    },
    /// Encode and decode a WAV file frame by frame, as a streaming codec would.
    Roundtrip {
        #[command(flatten)]
        codec: CodecArgs,
        /// WAV file: 8/16/24/32-bit integer or 32-bit float, 1 kHz to 1 MHz, any channel count.
        input: PathBuf,
        /// WAV file to write (24 kHz mono 16-bit).
        output: PathBuf,
    },
    /// Write a seeded synthetic Mimi checkpoint (the released geometry, f32, about 385 MB).
    SyntheticCheckpoint {
        /// Safetensors file to write.
        output: PathBuf,
        /// Codec configuration (JSON, Kyutai's `_mimi_config` keys; missing keys take the
        /// released values) for a reduced geometry; its codebooks are calibrated on the
        /// built-in speech clip [default: the released geometry, the reference's statistics].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seed of the weights.
        #[arg(long, default_value_t = synthetic::SEED)]
        seed: u64,
    },
    /// Time per-frame GPU encode and decode (each with its submit and readback) on a speech clip.
    Bench {
        #[command(flatten)]
        codec: CodecArgs,
        /// Frames timed (80 ms each; the clip is looped).
        #[arg(long, default_value_t = 200)]
        frames: usize,
        /// Frames run before timing.
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        /// Replays of each plan profiled step by step with timestamp queries (0: none).
        #[arg(long, default_value_t = 1)]
        profile: usize,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Talk to Moshi: the user's speech in, Moshi's reply out (a 24 kHz WAV, its text on
    /// stdout, and on request its tokens).
    ///
    /// Per 80 ms frame the user's 8 Mimi codes go through LMGen's delays into one LM step;
    /// from frame max(delays) on each step yields Moshi's text token and audio codes, which
    /// Mimi decodes into 1920 samples. The reply is thus max(delays) frames shorter than the
    /// input.
    Converse {
        #[command(flatten)]
        args: ConverseArgs,
    },
    /// Write a seeded synthetic Moshi LM checkpoint: `.safetensors` (f32, the released
    /// naming) or, for a `.gguf` output, candle's naming with Q8_0 linears.
    SyntheticLm {
        /// File to write (`.safetensors`, or `.gguf`).
        output: PathBuf,
        /// LM configuration (JSON, Kyutai's `_lm_kwargs` keys) [default: the reduced geometry
        /// of the parity tests, 4.0 M parameters; Moshi 7B's would be a 31 GB file].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Seed of the weights.
        #[arg(long, default_value_t = synthetic::SEED)]
        seed: u64,
    },
    /// Stream a Moshi LM checkpoint from its file into GPU buffers and report the time, the
    /// throughput and the peak host memory (heap and resident set).
    LoadLm {
        /// LM checkpoint (`.safetensors` or `.gguf`).
        #[arg(long)]
        lm: PathBuf,
        /// LM configuration (JSON, Kyutai's `_lm_kwargs` keys); Moshi 7B by default.
        #[arg(long)]
        lm_config: Option<PathBuf>,
        /// Bytes per read from the file (1 to 2^30).
        #[arg(long, default_value_t = 4 << 20)]
        chunk: usize,
    },
    /// Check, from the configs alone (before any checkpoint is read), whether Mimi and the
    /// Moshi LM fit this adapter: the adapter's limits, each model's largest buffer (bound
    /// whole; embedding tables split into parts of whole rows), its total GPU memory, and
    /// the limit it breaks with the bytes needed and allowed. Exits with status 1 when a
    /// model does not fit.
    Check {
        /// LM configuration (JSON, Kyutai's `_lm_kwargs` keys); Moshi 7B by default.
        #[arg(long)]
        lm_config: Option<PathBuf>,
        /// Mimi configuration (JSON, Kyutai's `_mimi_config` keys); the released codec by default.
        #[arg(long)]
        mimi_config: Option<PathBuf>,
        /// Emulate a smaller device: its maxStorageBufferBindingSize, in bytes (at least 1; never
        /// above the adapter's).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_storage_binding: Option<u64>,
        /// Emulate a smaller device: its maxBufferSize, in bytes (at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_buffer: Option<u64>,
        /// Check against WebGPU's default limits (128 MiB binding, 256 MiB buffer), what a
        /// browser gives a page that asks for nothing more.
        #[arg(long)]
        webgpu_defaults: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time the Moshi LM on the GPU, one LMGen frame at a time, with seeded synthetic Q8_0
    /// weights built in memory (no checkpoint) and seeded synthetic user codes.
    BenchLm {
        /// LM configuration (JSON, Kyutai's `_lm_kwargs` keys) [default: Moshi 7B, 7.69 B
        /// parameters, 9.1 GB of weights and 3.1 GB of KV rings on the GPU].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Frames timed (80 ms each).
        #[arg(long, default_value_t = 200)]
        frames: usize,
        /// Frames run before timing.
        #[arg(long, default_value_t = 10)]
        warmup: usize,
        /// Seed of the weights, the user codes and the sampling.
        #[arg(long, default_value_t = synthetic::SEED)]
        seed: u64,
        /// Greedy decoding instead of Moshi's default sampling (text temperature 0.7, top-k
        /// 25; audio 0.8, top-k 250).
        #[arg(long)]
        greedy: bool,
        /// Replays of each plan profiled step by step with timestamp queries (0: none).
        #[arg(long, default_value_t = 1)]
        profile: usize,
        /// A Mimi checkpoint: also time the whole full-duplex frame (Mimi encode of the
        /// user's audio, then the LM step and Mimi's decode of its output in one replay),
        /// as `Session::step` runs it.
        #[arg(long)]
        mimi: Option<PathBuf>,
        /// The configuration of the --mimi checkpoint (JSON, Kyutai's `_mimi_config` keys);
        /// the released codec by default.
        #[arg(long, requires = "mimi")]
        mimi_config: Option<PathBuf>,
        /// The synthetic weights' rule: `hash` (one hash per value, the weights of
        /// `synthetic-lm`) or `fast` (eight Q8_0 quants per hash, about a sixth of the time;
        /// the wasm build's `benchLm` builds the same bits).
        #[arg(long, default_value = "hash", value_parser = ["hash", "fast"])]
        weights: String,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct ConverseArgs {
    /// Mimi checkpoint (.safetensors, Kyutai's state-dict names): encodes a WAV input and
    /// decodes the reply. Not needed with a codes input and --no-audio.
    #[arg(long)]
    mimi: Option<PathBuf>,
    /// Mimi configuration (JSON, Kyutai's `_mimi_config` keys); the released codec by
    /// default. Its codebook count must equal the LM's user streams and dep_q (8).
    #[arg(long)]
    mimi_config: Option<PathBuf>,
    /// Moshi LM checkpoint: Kyutai's released `model.safetensors` (f32, f16 or bf16; stacked
    /// or split attention names; linears quantized to Q8_0 as they stream) or candle's
    /// `model.q8.gguf` (Q8_0 blocks repacked as they are).
    #[arg(long)]
    lm: PathBuf,
    /// LM configuration (JSON, Kyutai's `_lm_kwargs` keys); Moshi 7B by default.
    #[arg(long)]
    lm_config: Option<PathBuf>,
    /// Kyutai's SentencePiece text tokenizer (`tokenizer_spm_32k_3.model`): Moshi's text is
    /// printed as text. Without it, the text token ids are printed.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Seed of the sampling: the same seed, input and options replay the same reply.
    #[arg(long, default_value_t = 0)]
    seed: u32,
    /// Text temperature (0: greedy).
    #[arg(long, default_value_t = 0.7)]
    temp_text: f32,
    /// Text top-k (0: the whole vocabulary).
    #[arg(long, default_value_t = 25)]
    top_k_text: usize,
    /// Audio temperature (0: greedy).
    #[arg(long, default_value_t = 0.8)]
    temp_audio: f32,
    /// Audio top-k (0: the whole codebook).
    #[arg(long, default_value_t = 250)]
    top_k_audio: usize,
    /// Greedy decoding on every stream (overrides the temperatures and top-k).
    #[arg(long)]
    greedy: bool,
    /// Write Moshi's tokens as .npy int64 [rows, 1 + dep_q]: per frame with output, the text
    /// token, then the audio codes 0..dep_q.
    #[arg(long)]
    tokens_out: Option<PathBuf>,
    /// Run only the first N input frames.
    #[arg(long)]
    max_frames: Option<usize>,
    /// Do not decode the reply into audio (no OUTPUT is written; text and tokens only).
    #[arg(long)]
    no_audio: bool,
    /// The user's speech: a WAV file (1 kHz to 1 MHz, any channel count; encoded with Mimi), or a
    /// `.npy` integer array [frames, n_q - dep_q] of the user's Mimi codes, each below the
    /// LM's card. Moshi's reply begins after the LM's largest delay (one frame for Moshi 7B),
    /// so the input must be longer than that (a WAV: more than 1920 samples, 80 ms).
    input: PathBuf,
    /// WAV file to write: Moshi's reply, 24 kHz mono 16-bit. Required unless --no-audio.
    output: Option<PathBuf>,
}

#[derive(Args)]
struct CodecArgs {
    /// Mimi checkpoint (.safetensors, Kyutai's state-dict names).
    #[arg(long)]
    checkpoint: PathBuf,
    /// Codec configuration (JSON, Kyutai's `_mimi_config` keys); the released codec by default.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Codebooks per frame, 1 to 32 [default: the config's num_codebooks, 8].
    #[arg(long)]
    codebooks: Option<usize>,
}

fn file_error(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::File { path: path.display().to_string(), why: why.to_string() }
}

/// A config file's text through `parse`: a file that cannot be read, or whose JSON `parse`
/// refuses, is an [`Error::File`] naming it (the field and the reason in its message).
fn config_file<T>(path: &Path, what: &str, parse: impl FnOnce(&str) -> Result<T>) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| file_error(path, format!("cannot read the {what} config: {e}")))?;
    parse(&text).map_err(|e| match e {
        Error::Config { .. } => file_error(path, format!("not a valid {what} config: {e}")),
        e => e,
    })
}

fn mimi_config_file(path: &Path) -> Result<MimiConfig> {
    config_file(path, "Mimi", MimiConfig::from_json)
}

/// A checkpoint refused for its tensors (missing, unknown, misshapen) was most likely made
/// for another geometry: say which config flag to give. Other errors pass through.
fn mismatch_hint(e: Error, path: &Path, flag: &str, default: &str) -> Error {
    match e {
        Error::MissingTensor(_) | Error::UnknownTensor(_) | Error::Shape { .. } => file_error(
            path,
            format!("{e}: the checkpoint does not match the config (or is another model's file); pass the {flag} it was made with (without one, {default} is assumed)"),
        ),
        e => e,
    }
}

/// A code out of range in a codes file, with the file's name (the other errors of
/// `audio::read_codes` name it already).
fn in_file(e: Error, path: &Path) -> Error {
    match e {
        Error::CodeOutOfRange { .. } => file_error(path, e),
        e => e,
    }
}

/// Refuse an output that is the input (`roundtrip a.wav a.wav`): writing it would destroy
/// what is being read.
fn distinct(input: &Path, output: &Path) -> Result<()> {
    distinct_from(output, &[input])
}

/// Whether two paths name one file: the same canonical path, or (on Unix, both existing) the
/// same device and inode, so a hard link or a symbolic link is seen through.
fn same_file(a: &Path, b: &Path) -> bool {
    if let (Ok(x), Ok(y)) = (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        if x == y {
            return true;
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
    }
    a == b
}

/// Checks an `output` before any work: it must not be a directory (nor end in a path
/// separator), its directory must exist (found missing only when the file is written,
/// either would fail a long run at its end) and it must be none of the
/// files the command reads ([`distinct_from`]).
fn check_output(output: &Path, inputs: &[&Path]) -> Result<()> {
    let text = output.as_os_str().to_string_lossy();
    let sep = std::path::MAIN_SEPARATOR;
    if output.is_dir() {
        return Err(file_error(output, "is a directory: give the output a file name"));
    }
    if text.ends_with(sep) || text == "." || text == ".." || text.ends_with(&format!("{sep}.")) || text.ends_with(&format!("{sep}..")) {
        return Err(file_error(output, "names a directory: give the output a file name"));
    }
    // a dangling symlink is written through: the directory that must exist is its target's
    let resolved;
    let output = match std::fs::read_link(output) {
        Ok(target) if !output.exists() => {
            resolved = output.parent().map_or(target.clone(), |d| d.join(&target));
            resolved.as_path()
        }
        _ => output,
    };
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(file_error(output, format!("{} is not a directory", dir.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let d = dir.display();
                return Err(file_error(output, format!("the directory {d} does not exist: create it first (mkdir -p {d})")));
            }
            Err(e) => return Err(file_error(output, format!("cannot reach the directory {}: {e}", dir.display()))),
        }
    }
    distinct_from(output, inputs)
}

/// Refuses an `output` that is one of the files the command reads (its input, a checkpoint, a
/// config, a tokenizer): writing it would destroy what is read. [`Error::Input`] naming it.
fn distinct_from(output: &Path, inputs: &[&Path]) -> Result<()> {
    if let Some(i) = inputs.iter().find(|i| same_file(i, output)) {
        let what = if i.as_os_str() == output.as_os_str() { String::new() } else { format!(" ({})", i.display()) };
        return Err(Error::Input(format!(
            "the output {} is a file this command reads{what}: writing it would destroy it; choose another output",
            output.display()
        )));
    }
    Ok(())
}

impl CodecArgs {
    /// The files this command reads besides its input: the checkpoint and the config.
    fn reads<'a>(&'a self, input: &'a Path) -> Vec<&'a Path> {
        let mut v = vec![input, self.checkpoint.as_path()];
        v.extend(self.config.as_deref());
        v
    }

    /// The configuration: `--config` or the released codec, with `--codebooks` applied.
    fn config(&self) -> Result<MimiConfig> {
        let mut config = match &self.config {
            Some(path) => mimi_config_file(path)?,
            None => MimiConfig::default(),
        };
        if let Some(n) = self.codebooks {
            config.num_codebooks = n;
            config.validate().map_err(|e| Error::Input(format!("--codebooks {n}: {e}")))?;
        }
        Ok(config)
    }
}

/// The codec on the GPU, and what to say about it.
struct Codec {
    mimi: Mimi,
    adapter: String,
}

impl Codec {
    async fn open(config: &MimiConfig, checkpoint: &Path) -> Result<Self> {
        let ctx = Rc::new(GpuContext::new().await?);
        Self::open_on(ctx, config, checkpoint).await
    }

    /// [`Codec::open`] on an existing context (shared with the LM).
    async fn open_on(ctx: Rc<GpuContext>, config: &MimiConfig, checkpoint: &Path) -> Result<Self> {
        let hint = |e| mismatch_hint(e, checkpoint, "Mimi config (--config, or --mimi-config)", "the released codec's");
        let loader = stream_file(checkpoint, MimiLoader::checked(config, &ctx.info.limits(), None)?, "Mimi", CHUNK).await.map_err(hint)?;
        let weights = loader.into_weights().map_err(hint)?;
        let adapter = ctx.info.to_string();
        let mimi = Mimi::new(ctx, &weights).await?;
        Ok(Self { mimi, adapter })
    }

    /// One line on stderr: adapter, frames, seconds of audio, milliseconds per frame.
    fn summary(&self, what: &str, frames: usize, elapsed: std::time::Duration) {
        let fs = self.mimi.frame_size();
        let seconds = (frames * fs) as f64 / audio::SAMPLE_RATE as f64;
        let ms = elapsed.as_secs_f64() * 1e3 / frames.max(1) as f64;
        eprintln!("{}: {what} {frames} frames ({seconds:.2} s of audio) at {ms:.1} ms per frame", self.adapter);
    }
}

/// `pcm` zero-padded to a whole number of frames of `fs` samples.
fn pad_to_frames(mut pcm: Vec<f32>, fs: usize) -> Vec<f32> {
    pcm.resize(pcm.len().div_ceil(fs) * fs, 0.0);
    pcm
}

async fn encode(codec: &CodecArgs, input: &Path, output: &Path) -> Result<()> {
    check_output(output, &codec.reads(input))?;
    let config = codec.config()?;
    let pcm = audio::read_wav(input)?;
    let mut c = Codec::open(&config, &codec.checkpoint).await?;
    let pcm = pad_to_frames(pcm, c.mimi.frame_size());
    let start = Instant::now();
    let mut codes = Vec::with_capacity(pcm.len() / c.mimi.frame_size());
    for frame in pcm.chunks_exact(c.mimi.frame_size()) {
        codes.push(c.mimi.encode_frame(frame).await?);
    }
    let elapsed = start.elapsed();
    audio::write_codes(output, &codes)?;
    c.summary("encoded", codes.len(), elapsed);
    Ok(())
}

async fn decode(codec: &CodecArgs, input: &Path, output: &Path) -> Result<()> {
    check_output(output, &codec.reads(input))?;
    let config = codec.config()?;
    let n_q = config.num_codebooks;
    let (_, k) = audio::codes_shape(input)?;
    if k != n_q {
        let hint = if (1..=config.quantizer.n_q).contains(&k) {
            format!("pass --codebooks {k}")
        } else {
            format!("the codec runs 1 to {} codebooks", config.quantizer.n_q)
        };
        return Err(file_error(input, format!("the file has {k} codebooks per frame, the codec runs {n_q}: {hint}")));
    }
    let codes = audio::read_codes(input, n_q, config.quantizer.bins).map_err(|e| in_file(e, input))?;
    let mut c = Codec::open(&config, &codec.checkpoint).await?;
    let start = Instant::now();
    let mut pcm = Vec::with_capacity(codes.len() * c.mimi.frame_size());
    for (f, frame) in codes.iter().enumerate() {
        pcm.extend(c.mimi.decode_frame(f, frame).await?);
    }
    let elapsed = start.elapsed();
    audio::write_wav(output, &pcm)?;
    c.summary("decoded", codes.len(), elapsed);
    Ok(())
}

async fn roundtrip(codec: &CodecArgs, input: &Path, output: &Path) -> Result<()> {
    check_output(output, &codec.reads(input))?;
    let config = codec.config()?;
    let pcm = audio::read_wav(input)?;
    let mut c = Codec::open(&config, &codec.checkpoint).await?;
    let fs = c.mimi.frame_size();
    let pcm = pad_to_frames(pcm, fs);
    let start = Instant::now();
    let mut out = Vec::with_capacity(pcm.len());
    for (f, frame) in pcm.chunks_exact(fs).enumerate() {
        let codes = c.mimi.encode_frame(frame).await?;
        out.extend(c.mimi.decode_frame(f, &codes).await?);
    }
    let elapsed = start.elapsed();
    audio::write_wav(output, &out)?;
    c.summary("encoded and decoded", pcm.len() / fs, elapsed);
    Ok(())
}

fn synthetic_checkpoint(output: &Path, config: Option<&Path>, seed: u64) -> Result<()> {
    check_output(output, &config.into_iter().collect::<Vec<_>>())?;
    let start = Instant::now();
    let (specs, bytes) = match config {
        None => {
            let config = MimiConfig::default();
            let stats = npyz::NpyFile::new(CODEBOOK_STATS_NPY)
                .and_then(|f| f.into_vec::<f32>())
                .map_err(|e| Error::Input(format!("embedded codebook statistics: {e}")))?;
            let stats = CodebookStats { dim: config.quantizer.dimension, rows: stats };
            let specs = config.tensor_specs();
            let bytes = synthetic::checkpoint(&specs, seed, &stats)?;
            (specs, bytes)
        }
        Some(path) => {
            let config = mimi_config_file(path)?;
            let bytes = inferencelayer::mimi::synthetic::calibrated_checkpoint(&config, seed, &bench_signal()?)?;
            (config.tensor_specs(), bytes)
        }
    };
    audio::write_file(output, "checkpoint", |out| out.write_all(&bytes))?;
    eprintln!(
        "wrote a synthetic Mimi checkpoint (seed {seed}, {} tensors, {:.0} MB) in {:.1} s",
        specs.len(),
        bytes.len() as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_stats_header() {
    println!("{:<17}{:>9}{:>9}{:>9}{:>9}{:>8}", "per frame", "p50 ms", "p95 ms", "p99 ms", "mean ms", ">80 ms");
}

fn print_stats(name: &str, s: &Stats) {
    println!("{name:<17}{:>9.3}{:>9.3}{:>9.3}{:>9.3}{:>8}", s.p50, s.p95, s.p99, s.mean, s.over);
}

fn print_profile(title: &str, groups: &[(String, usize, f64)]) {
    let total: f64 = groups.iter().map(|g| g.2).sum();
    let n: usize = groups.iter().map(|g| g.1).sum();
    println!();
    println!("GPU time per step ({title}, timestamp queries, one pass per step): {n} dispatches, {total:.3} ms");
    for (key, count, ms) in groups.iter().take(24) {
        println!("  {key:<46}{count:>5} x {:>8.1} us = {ms:>7.3} ms", 1e3 * ms / *count as f64);
    }
}

/// Milliseconds since the first call, the benchmarks' clock.
fn now_ms() -> f64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
}

/// [`bench::check_counts`] for `--frames` and `--profile` and [`bench::check_warmup`] for
/// `--warmup`, the flag named in the error.
fn bench_counts(frames: usize, warmup: usize, replays: usize) -> Result<()> {
    let flag = |flag: &'static str, value: usize| {
        move |e| match e {
            Error::Input(m) => Error::Input(format!("{flag} {value}: {m}")),
            e => e,
        }
    };
    bench::check_counts(frames, 0).map_err(flag("--frames", frames))?;
    bench::check_warmup(warmup).map_err(flag("--warmup", warmup))?;
    bench::check_counts(1, replays).map_err(flag("--profile", replays))
}

/// `bench`: [`inferencelayer::bench::bench_mimi`] on the speech clip, printed.
async fn bench(codec: &CodecArgs, frames: usize, warmup: usize, replays: usize, json: bool) -> Result<()> {
    // before any work, so that a count out of range is refused at once
    bench_counts(frames, warmup, replays)?;
    let config = codec.config()?;
    let signal = bench_signal()?;
    let mut c = Codec::open(&config, &codec.checkpoint).await?;
    let r = bench::bench_mimi(&mut c.mimi, &signal, frames, warmup, replays, &now_ms).await?;
    if json {
        println!("{:#}", r.json());
    } else {
        let info = &r.info;
        let (enc_dispatches, dec_dispatches) = r.dispatches;
        println!("adapter        {info}");
        println!("adapter name   {}", info.name);
        println!("queue          {}", info.queue);
        println!("shader checks  {} left out", info.shader_checks.dropped());
        println!(
            "per frame      encode {enc_dispatches} dispatches in {} submits (one pass each, recorded during the frame before), \
             decode {dec_dispatches} in {}; streaming state {:.2} MiB",
            frame_submits(enc_dispatches),
            frame_submits(dec_dispatches),
            r.state_bytes as f64 / (1u64 << 20) as f64
        );
        println!("frames         {frames} timed after {warmup} warm-up, {} codebooks, {:.0} ms of audio each", r.codebooks, r.frame_ms);
        println!();
        print_stats_header();
        for (name, s) in [("encode", &r.encode), ("decode", &r.decode), ("encode+decode", &r.encode_decode)] {
            print_stats(name, s);
        }
        println!("{:<17}{:>9.2}", "real-time x", r.frame_ms / r.encode_decode.mean);
        if let Some(g) = &r.profile_encode {
            print_profile("Mimi encode", g);
        }
        if let Some(g) = &r.profile_decode {
            print_profile("Mimi decode", g);
        }
    }
    c.summary("benchmarked", warmup + frames, std::time::Duration::from_secs_f64(r.elapsed_s));
    Ok(())
}

/// An LM configuration: the JSON file at `path` (Kyutai's `_lm_kwargs` keys), else `default`.
fn lm_config(path: Option<&Path>, default: impl FnOnce() -> Result<LmConfig>) -> Result<LmConfig> {
    match path {
        Some(path) => config_file(path, "LM", LmConfig::from_json),
        None => default(),
    }
}

/// Bytes per read when streaming a checkpoint file.
const CHUNK: usize = 4 << 20;
/// The largest `load-lm --chunk`: one read's buffer is held in memory.
const MAX_CHUNK: usize = 1 << 30;

/// The length in bytes of the `what` checkpoint at `path`: an [`Error::File`] naming it when
/// it cannot be read or is a directory.
fn checkpoint_len(path: &Path, what: &str) -> Result<u64> {
    let m = std::fs::metadata(path).map_err(|e| file_error(path, format!("cannot read the {what} checkpoint: {e}")))?;
    if m.is_dir() {
        return Err(file_error(path, format!("is a directory: give the {what} checkpoint file (.safetensors or .gguf) itself")));
    }
    Ok(m.len())
}

/// Feed the file at `path` to `sink` in reads of `chunk` bytes through the byte-source
/// driver (the one the web's `fetch` goes through), which finishes the sink; returns it. A
/// file that cannot be read, or is not a checkpoint of either format, is an [`Error::File`]
/// naming it; the model's own refusals (a missing or misshapen tensor) pass through as
/// they are.
async fn stream_file<K: ByteSink>(path: &Path, sink: K, what: &str, chunk: usize) -> Result<K> {
    checkpoint_len(path, what)?;
    let mut file = FileSource::new(path).chunk_size(chunk);
    match source::load(&mut file, sink, LoadOptions::default()).await {
        Ok((sink, _)) => Ok(sink),
        Err(e @ Error::Stream { .. }) => Err(file_error(path, format!("not a valid {what} checkpoint (safetensors or GGUF): {e}"))),
        Err(e) => Err(e),
    }
}

/// Stream an LM checkpoint (`.safetensors` or `.gguf`) for `config` into GPU buffers on
/// `ctx`. A tensor missing, unknown or of the wrong shape for the config is
/// [`Error::MissingTensor`] / [`Error::UnknownTensor`] / [`Error::Shape`] naming it, before
/// any weight is uploaded; a file that is not a checkpoint is an [`Error::File`] naming it.
async fn load_lm(ctx: &Rc<GpuContext>, config: &LmConfig, path: &Path, chunk: usize) -> Result<LmGpuWeights> {
    let len = checkpoint_len(path, "LM")?;
    let hint = |e| mismatch_hint(e, path, "--lm-config", "Moshi 7B's geometry");
    let loader = stream_file(path, LmLoader::new(ctx.clone(), config, Some(len))?, "LM", chunk).await.map_err(hint)?;
    loader.into_weights().map_err(hint)
}

/// Peak resident set of this process in bytes (Linux `VmHWM`), where the system says.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `load-lm`: stream a checkpoint into the GPU; time, throughput, peak host memory.
async fn load_lm_command(path: &Path, config: Option<&Path>, chunk: usize) -> Result<()> {
    if !(1..=MAX_CHUNK).contains(&chunk) {
        return Err(Error::Input(format!("--chunk must be between 1 and {MAX_CHUNK} bytes, got {chunk}")));
    }
    let config = lm_config(config, || Ok(LmConfig::default()))?;
    let ctx = Rc::new(GpuContext::new().await?);
    let heap0 = inferencelayer::heap::reset_peak();
    let t0 = Instant::now();
    let len = checkpoint_len(path, "LM")?;
    let hint = |e| mismatch_hint(e, path, "--lm-config", "Moshi 7B's geometry");
    let loader = stream_file(path, LmLoader::new(ctx.clone(), &config, Some(len))?, "LM", chunk).await.map_err(hint)?;
    let format = loader.format_name().unwrap_or("?");
    let weights = loader.into_weights().map_err(hint)?;
    let secs = t0.elapsed().as_secs_f64();
    let heap = inferencelayer::heap::peak().saturating_sub(heap0);
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!("adapter        {}", ctx.info);
    println!("checkpoint     {} ({format}, {:.1} MiB)", path.display(), mib(len));
    println!("loaded         {:.2} s, {:.1} MiB/s read, {:.1} MiB of weights on the GPU", secs, mib(len) / secs, mib(weights.bytes()));
    println!("peak heap      {:.1} MiB above the start (Rust allocations while loading; reads of {chunk} bytes)", mib(heap));
    if let Some(rss) = peak_rss() {
        println!("peak RSS       {:.1} MiB (the whole process; on a CPU Vulkan driver it includes the \"GPU\" buffers)", mib(rss));
    }
    Ok(())
}

/// `check`: the capability check from the configs (see [`Command::Check`]).
async fn check_command(lm_config_path: Option<&Path>, mimi_config_path: Option<&Path>, emulated: (Option<u64>, Option<u64>, bool), json: bool) -> Result<()> {
    let lc = lm_config(lm_config_path, || Ok(LmConfig::default()))?;
    let mc = match mimi_config_path {
        Some(path) => mimi_config_file(path)?,
        None => MimiConfig::default(),
    };
    let (binding, buffer, defaults) = emulated;
    let base = if defaults { GpuLimits::WEBGPU_DEFAULT } else { GpuLimits { max_storage_binding: u64::MAX, max_buffer: u64::MAX } };
    let want = base.min(&GpuLimits { max_storage_binding: binding.unwrap_or(u64::MAX), max_buffer: buffer.unwrap_or(u64::MAX) });
    let emulate = (want.max_storage_binding != u64::MAX || want.max_buffer != u64::MAX).then_some(want);
    let ctx = GpuContext::with_limits(emulate).await?;
    let limits = ctx.info.limits();
    let models = [inferencelayer::mimi::requirements(&mc, &limits)?, inferencelayer::moshi::requirements(&lc, &limits)?];
    if json {
        println!("{}", capability_json(&ctx.info.to_string(), &ctx.info.adapter_limits, &models));
    } else {
        println!("adapter        {}", ctx.info);
        println!("adapter limits {}", ctx.info.adapter_limits);
        println!("checked with   {}{}", limits, if emulate.is_some() { " (emulated)" } else { "" });
        for m in &models {
            println!("{m}");
        }
    }
    for m in &models {
        m.check()?;
    }
    Ok(())
}

fn synthetic_lm(output: &Path, config: Option<&Path>, seed: u64) -> Result<()> {
    check_output(output, &config.into_iter().collect::<Vec<_>>())?;
    let config = lm_config(config, || LmConfig::from_json(SMALL_LM_CONFIG))?;
    let specs = config.tensor_specs();
    let start = Instant::now();
    let gguf = output.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    config.validate()?;
    // written tensor by tensor: Moshi 7B's f32 file (31 GB) is never held whole
    let mut len = 0;
    audio::write_file(output, "checkpoint", |out| {
        len = if gguf { lm_synthetic::write_lm_gguf(out, &config, seed)? } else { synthetic::write_lm_checkpoint(out, &specs, seed)? };
        Ok::<(), std::io::Error>(())
    })?;
    eprintln!(
        "wrote a synthetic Moshi LM checkpoint (seed {seed}, {} tensors, {} parameters, {:.1} MB) in {:.1} s",
        specs.len(),
        lm_synthetic::parameter_count(&config),
        len as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn config_error(field: &str, why: String) -> Error {
    Error::Config { field: field.to_string(), why }
}

/// Whether `path` names a `.npy` file (by its extension, in any case).
fn is_npy(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npy"))
}

/// The user's codes from a `.npy` `[frames, users]`, each below `card`.
fn read_user_codes(path: &Path, users: usize, card: usize) -> Result<Vec<Vec<u32>>> {
    let (_, k) = audio::codes_shape(path)?;
    if k != users {
        return Err(file_error(
            path,
            format!("the file has {k} codes per frame; the LM takes {users} user codes per frame (n_q - dep_q)"),
        ));
    }
    audio::read_codes(path, users, card).map_err(|e| in_file(e, path))
}

async fn converse(a: &ConverseArgs) -> Result<()> {
    let config = lm_config(a.lm_config.as_deref(), || Ok(LmConfig::default()))?;
    let users = config.user_streams();
    let npy_input = is_npy(&a.input);
    let output = match (&a.output, a.no_audio) {
        (Some(_), true) => return Err(Error::Input("--no-audio writes no WAV: drop OUTPUT or --no-audio".into())),
        (None, false) => return Err(Error::Input("give an OUTPUT.wav for Moshi's reply, or --no-audio".into())),
        (o, _) => o.clone(),
    };
    // Moshi's reply begins only after the LM's largest delay (a frame for Moshi 7B): fewer
    // input frames give no reply at all, refused here rather than written as an empty WAV
    let delay = config.max_delay();
    let after_delay = || match delay {
        0 => String::new(),
        1 => ": Moshi's reply begins only after the first frame (the LM's delay)".to_string(),
        d => format!(": Moshi's reply begins only after the first {d} frames (the LM's largest delay)"),
    };
    if a.max_frames.is_some_and(|m| m <= delay) {
        return Err(Error::Input(format!("--max-frames must be at least {}{}", delay + 1, after_delay())));
    }
    let mut reads: Vec<&Path> = vec![a.input.as_path(), a.lm.as_path()];
    reads.extend(a.mimi.as_deref().into_iter().chain(a.mimi_config.as_deref()).chain(a.lm_config.as_deref()).chain(a.tokenizer.as_deref()));
    for written in output.iter().chain(&a.tokens_out) {
        check_output(written, &reads)?;
    }
    if let (Some(o), Some(t)) = (&output, &a.tokens_out) {
        if distinct(o, t).is_err() {
            return Err(Error::Input(format!("--tokens-out {} is the OUTPUT WAV: give them different paths", t.display())));
        }
    }

    // What Mimi must do, checked against the LM before anything heavy is loaded.
    let mimi_config = if npy_input && a.no_audio {
        None
    } else {
        let mc = match &a.mimi_config {
            Some(path) => mimi_config_file(path)?,
            None => MimiConfig::default(),
        };
        // a config left out is the released model's: say so, since that is the likely cause
        let assumed = match (&a.lm_config, &a.mimi_config) {
            (None, None) => "; without --lm-config and --mimi-config, Moshi 7B's and the released Mimi's configs are assumed: pass those the checkpoints were made with",
            (None, Some(_)) => "; without --lm-config, Moshi 7B's config is assumed: pass the one the LM was made with",
            (Some(_), None) => "; without --mimi-config, the released Mimi's config is assumed: pass the one Mimi was made with",
            (Some(_), Some(_)) => "",
        };
        let n = mc.num_codebooks;
        if !npy_input && n != users {
            return Err(config_error(
                "num_codebooks",
                format!("Mimi codes {n} codebooks per frame, the LM takes {users} user streams (n_q - dep_q){assumed}"),
            ));
        }
        if !a.no_audio && n != config.dep_q {
            return Err(config_error(
                "num_codebooks",
                format!("Mimi decodes {n} codebooks per frame, the LM generates dep_q = {}{assumed}", config.dep_q),
            ));
        }
        if config.card > mc.quantizer.bins {
            return Err(config_error(
                "card",
                format!("the LM's audio card {} is larger than Mimi's {} bins{assumed}", config.card, mc.quantizer.bins),
            ));
        }
        Some(mc)
    };
    let mimi_path = match (&mimi_config, &a.mimi) {
        (Some(_), None) => {
            let why = if npy_input { "to decode Moshi's reply (or pass --no-audio)" } else { "to encode the WAV input" };
            return Err(Error::Input(format!("--mimi MIMI.safetensors is needed {why}")));
        }
        (_, path) => path.clone(),
    };

    // The user's side: codes now, or the WAV's samples to encode once Mimi is up.
    let (mut codes, pcm) = if npy_input {
        (read_user_codes(&a.input, users, config.card)?, None)
    } else {
        (Vec::new(), Some(audio::read_wav(&a.input)?))
    };
    let too_short = match (&pcm, &mimi_config) {
        (Some(pcm), Some(mc)) => {
            let fs = mc.frame_size();
            let ms = |n: usize| (1e4 * n as f64 / audio::SAMPLE_RATE as f64).round() / 10.0;
            (pcm.len().div_ceil(fs) <= delay).then(|| {
                format!(
                    "{} samples at 24 kHz ({} ms) are too short{}; give at least {} samples (more than {} ms)",
                    pcm.len(),
                    ms(pcm.len()),
                    after_delay(),
                    delay * fs + 1,
                    ms(delay * fs)
                )
            })
        }
        _ => (codes.len() <= delay).then(|| format!("too few frames of codes ({}){}; give at least {}", codes.len(), after_delay(), delay + 1)),
    };
    if let Some(why) = too_short {
        return Err(file_error(&a.input, why));
    }

    let tokenizer = match &a.tokenizer {
        Some(path) => {
            let bytes =
                std::fs::read(path).map_err(|e| file_error(path, format!("cannot read the tokenizer: {e}")))?;
            let tok = TextTokenizer::from_bytes(&bytes).map_err(|e| file_error(path, e))?;
            // checked before a frame runs: the LM draws text ids up to text_card - 1
            if tok.piece_count() < config.text_card {
                return Err(file_error(
                    path,
                    format!(
                        "the tokenizer has {} pieces, fewer than the LM's text vocabulary (text_card {}): pass the tokenizer that goes with the LM (Moshi 7B's is tokenizer_spm_32k_3.model), or none to print token ids",
                        tok.piece_count(),
                        config.text_card
                    ),
                ));
            }
            Some(tok)
        }
        None => None,
    };
    let mut text = TextStream::new().skip_padding(config.existing_text_padding_id as u32);

    let sampling = if a.greedy {
        Sampling::greedy()
    } else {
        Sampling {
            text: StreamSampling { temperature: a.temp_text, top_k: a.top_k_text },
            audio: StreamSampling { temperature: a.temp_audio, top_k: a.top_k_audio },
            seed: a.seed,
        }
    };
    for (what, t) in [("--temp-text", a.temp_text), ("--temp-audio", a.temp_audio)] {
        if !t.is_finite() || t < 0.0 {
            return Err(Error::Input(format!("{what} must be a finite number >= 0, got {t}")));
        }
    }

    let start = Instant::now();
    let ctx = Rc::new(GpuContext::new().await?);
    let weights = load_lm(&ctx, &config, &a.lm, CHUNK).await?;
    let adapter = ctx.info.to_string();
    let mut lm = Lm::new(ctx.clone(), &weights, sampling).await?;
    drop(weights);
    let mut codec = match (&mimi_config, &mimi_path) {
        (Some(mc), Some(path)) => Some(Codec::open_on(ctx.clone(), mc, path).await?),
        _ => None,
    };
    let load_s = start.elapsed().as_secs_f64();

    if let (Some(pcm), Some(c)) = (pcm, codec.as_mut()) {
        let fs = c.mimi.frame_size();
        let pcm = pad_to_frames(pcm, fs);
        let n = a.max_frames.map_or(pcm.len() / fs, |m| m.min(pcm.len() / fs));
        for frame in pcm.chunks_exact(fs).take(n) {
            codes.push(c.mimi.encode_frame(frame).await?);
        }
        c.mimi.reset();
    }
    if let Some(m) = a.max_frames {
        codes.truncate(m);
    }

    let mut gen = LmGen::new(&config);
    let mut rows: Vec<Vec<i32>> = Vec::new();
    let mut reply: Vec<f32> = Vec::new();
    let (mut lm_s, mut mimi_s) = (0f64, 0f64);
    let mut stdout = std::io::stdout();
    let mut said = 0usize;
    for user in &codes {
        let t0 = Instant::now();
        let input = gen.input(user)?;
        let generated = lm.step(&input).await?;
        let out = gen.output(&generated);
        lm_s += t0.elapsed().as_secs_f64();
        let Some(row) = out else { continue };
        if !u32::try_from(row[0]).is_ok_and(|id| TextTokenizer::is_padding(id, config.existing_text_padding_id as u32)) {
            use std::io::Write;
            let piece = match &tokenizer {
                Some(tok) => {
                    let id = u32::try_from(row[0])
                        .map_err(|_| Error::Input(format!("the LM gave text token {} at reply frame {}", row[0], rows.len())))?;
                    text.push(tok, id)?
                }
                None => format!("{}{}", if said > 0 { " " } else { "" }, row[0]),
            };
            let _ = write!(stdout, "{piece}");
            let _ = stdout.flush();
            said += 1;
        }
        if let Some(c) = codec.as_mut().filter(|_| !a.no_audio) {
            let t0 = Instant::now();
            let audio_codes: Vec<u32> = row[1..]
                .iter()
                .map(|&t| u32::try_from(t).map_err(|_| Error::Input(format!("the LM gave audio token {t} at reply frame {}", rows.len()))))
                .collect::<Result<_>>()?;
            reply.extend(c.mimi.decode_frame(rows.len(), &audio_codes).await?);
            mimi_s += t0.elapsed().as_secs_f64();
        }
        rows.push(row);
    }
    println!("{}", text.finish());
    if let Some(path) = &output {
        audio::write_wav(path, &reply)?;
    }
    if let Some(path) = &a.tokens_out {
        audio::write_npy_i64(path, "tokens", [rows.len(), 1 + config.dep_q], rows.iter().flatten().map(|&t| t as i64))?;
    }
    let per = |s: f64, n: usize| 1e3 * s / n.max(1) as f64;
    eprintln!(
        "{adapter}: {} frames in, {} frames of reply ({:.2} s), {said} text tokens ({}; padding {} and 0 left out); \
         loaded in {load_s:.1} s; LM {:.1} ms per frame{}",
        codes.len(),
        rows.len(),
        (rows.len() * 1920) as f64 / audio::SAMPLE_RATE as f64,
        if tokenizer.is_some() { "as text" } else { "as ids" },
        config.existing_text_padding_id,
        per(lm_s, codes.len()),
        if output.is_some() { format!(", Mimi decode {:.1} ms per frame", per(mimi_s, rows.len())) } else { String::new() },
    );
    Ok(())
}

/// `bench-lm`: [`inferencelayer::bench::bench_lm`] on seeded synthetic Q8_0 weights built
/// in memory (`--weights fast`: the cheaper generator of [`lm_synthetic::Generator::Fast`]),
/// printed. Achieved bandwidth is the Q8_0 linears' bytes (each read once per frame) over
/// the step's p50, against a device-to-device copy. GPU memory is the sum of the buffers the
/// LM holds, not a driver reading: the Q8_0 linears and f32 tables as uploaded
/// ([`lm_synthetic::weight_bytes`], from the config) plus the streaming state
/// (`Lm::state_bytes`: KV rings); activation buffers are not counted.
#[allow(clippy::too_many_arguments)]
async fn bench_lm(
    config: Option<&Path>,
    frames: usize,
    warmup: usize,
    seed: u64,
    greedy: bool,
    replays: usize,
    (mimi, mimi_config): (Option<&Path>, Option<&Path>),
    generator: lm_synthetic::Generator,
    json: bool,
) -> Result<()> {
    // before any work, so that a count out of range is refused at once
    bench_counts(frames, warmup, replays)?;
    let config = lm_config(config, || Ok(LmConfig::default()))?;
    let sampling = if greedy { Sampling::greedy() } else { Sampling::moshi(seed as u32) };
    // the Mimi config and checkpoint are read before the LM is built (a minute and most of
    // the memory at Moshi 7B's geometry), so that a bad file is refused at once
    let mimi_config = match mimi_config {
        Some(path) => mimi_config_file(path)?,
        None => MimiConfig::default(),
    };
    let ctx = Rc::new(GpuContext::new().await?);
    let mimi_weights = match mimi {
        None => None,
        Some(path) => {
            let hint = |e| mismatch_hint(e, path, "--mimi-config", "the released codec's");
            let loader = stream_file(path, MimiLoader::checked(&mimi_config, &ctx.info.limits(), None)?, "Mimi", CHUNK).await.map_err(hint)?;
            Some(loader.into_weights().map_err(hint)?)
        }
    };

    let t0 = Instant::now();
    let weights = LmWeights::synthetic_with(&config, seed, generator)?;
    let build_weights_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let gpu_weights = weights.upload(&ctx)?;
    drop(weights);
    let lm = Lm::new(ctx.clone(), &gpu_weights, sampling).await?;
    let upload_and_plan_s = t0.elapsed().as_secs_f64();
    let signal = bench_signal()?;
    let setup = bench::LmSetup { seed, greedy, weights: generator.name(), build_weights_s, upload_and_plan_s };
    let r = bench::bench_lm(
        lm,
        &gpu_weights,
        sampling,
        setup,
        (frames, warmup, replays),
        true,
        mimi_weights.as_ref().map(|w| (w, signal.as_slice())),
        &now_ms,
    )
    .await?;
    drop(gpu_weights);
    let info = &r.info;
    if json {
        println!("{:#}", r.json());
    } else {
        let (temporal_dispatches, depformer_dispatches) = r.dispatches;
        let dispatches = temporal_dispatches + depformer_dispatches;
        let (q8_bytes, f32_bytes, kv_bytes) = r.gpu_bytes;
        let gpu_bytes = q8_bytes + f32_bytes + kv_bytes;
        let (bandwidth, bandwidth_how) = r.copy_bandwidth.unwrap_or((f64::NAN, "not measured"));
        let achieved_gbs = r.achieved_gbs();
        let size = |b: u64| {
            if b >= 1 << 30 {
                format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
            } else {
                format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
            }
        };
        println!("adapter        {info}");
        println!("adapter name   {}", info.name);
        println!("queue          {}", info.queue);
        println!("shader checks  {} left out", info.shader_checks.dropped());
        println!("Q8_0 linears   {}", bench::q8_kernel_name(info)?);
        println!(
            "model          dim {} x {} layers, depformer {} x {} layers x {} steps, context {}: {:.3} B parameters",
            config.dim,
            config.num_layers,
            config.depformer_dim,
            config.depformer_num_layers,
            config.dep_q,
            config.context,
            lm_synthetic::parameter_count(&config) as f64 / 1e9
        );
        println!("sampling       {}", if greedy { "greedy" } else { "Moshi's (text T 0.7 top-k 25, audio T 0.8 top-k 250)" });
        println!(
            "build          {build_weights_s:.2} s synthetic Q8_0 weights in memory ({} generator), {upload_and_plan_s:.2} s upload and plan",
            generator.name()
        );
        println!(
            "GPU memory     {}: Q8_0 linears {}, f32 tables {}, KV rings {} (activations not counted)",
            size(gpu_bytes),
            size(q8_bytes),
            size(f32_bytes),
            size(kv_bytes)
        );
        println!(
            "per frame      {dispatches} dispatches ({temporal_dispatches} temporal, {depformer_dispatches} depformer) \
             in {} submits of one pass each (recorded during the frame before), {} bytes read back",
            frame_submits(dispatches),
            r.readback_bytes
        );
        println!(
            "bandwidth      {achieved_gbs:.0} GB/s achieved (Q8_0 linears over the step's p50), {:.0}% of a copy's \
             {bandwidth:.0} GB/s ({bandwidth_how})",
            100.0 * achieved_gbs / bandwidth
        );
        println!("frames         {frames} timed after {warmup} warm-up, {:.0} ms of audio each", bench::FRAME_MS);
        println!();
        print_stats_header();
        print_stats("LM step", &r.step);
        print_stats("  CPU record+submit", &r.cpu);
        print_stats("temporal *", &r.temporal);
        print_stats("depformer *", &r.depformer);
        if let Some((all, enc, rest)) = &r.duplex {
            print_stats("full-duplex frame", all);
            print_stats("  Mimi encode", enc);
            print_stats("  LM + decode", rest);
        }
        println!("{:<17}{:>9.2}", "real-time x", bench::FRAME_MS / r.step.mean);
        println!("* recorded beforehand in the submits a frame is cut into, then submitted and waited for apart, on a second pass over the same frames");
        if r.duplex.is_some() {
            println!("full-duplex frame: Mimi encode (submit, readback), then the LM step and Mimi decode in one replay (a few submits, recorded during the frame before)");
        }
        if let Some((t, d)) = r.pass_ms {
            println!("GPU time per step in one pass (timestamp queries): temporal {t:.3} ms, depformer {d:.3} ms");
        }
        if let Some(g) = &r.profile_temporal {
            print_profile("temporal", g);
        }
        if let Some(g) = &r.profile_depformer {
            print_profile("depformer", g);
        }
    }
    eprintln!("{info}: benchmarked 2 x {} LM frames in {:.1} s", warmup + frames, r.elapsed_s);
    Ok(())
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Encode { codec, input, output } => encode(&codec, &input, &output).await,
        Command::Decode { codec, input, output } => decode(&codec, &input, &output).await,
        Command::Roundtrip { codec, input, output } => roundtrip(&codec, &input, &output).await,
        Command::SyntheticCheckpoint { output, config, seed } => synthetic_checkpoint(&output, config.as_deref(), seed),
        Command::Bench { codec, frames, warmup, profile, json } => bench(&codec, frames, warmup, profile, json).await,
        Command::Converse { args } => converse(&args).await,
        Command::SyntheticLm { output, config, seed } => synthetic_lm(&output, config.as_deref(), seed),
        Command::LoadLm { lm, lm_config, chunk } => load_lm_command(&lm, lm_config.as_deref(), chunk).await,
        Command::Check { lm_config, mimi_config, max_storage_binding, max_buffer, webgpu_defaults, json } => {
            check_command(lm_config.as_deref(), mimi_config.as_deref(), (max_storage_binding, max_buffer, webgpu_defaults), json).await
        }
        Command::BenchLm { config, frames, warmup, seed, greedy, profile, mimi, mimi_config, weights, json } => {
            let generator = lm_synthetic::Generator::from_name(&weights)?;
            bench_lm(config.as_deref(), frames, warmup, seed, greedy, profile, (mimi.as_deref(), mimi_config.as_deref()), generator, json).await
        }
    }
}

pub fn main() -> ExitCode {
    // A negative number is read as a flag's value (`--temp-text -1`), for the flag's own
    // check to refuse it, where clap took it for an unknown flag and suggested `-- -1`.
    let matches = Cli::command().mut_subcommands(|c| c.allow_negative_numbers(true)).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Interrupted (Ctrl-C, SIGTERM, SIGHUP) while writing, the temporary file beside the output
    // goes, and the output stays as it was ([`audio::write_file`]); 130, as a shell reports
    // an interrupt.
    let _ = ctrlc::set_handler(|| {
        let removed = audio::remove_partial_files();
        let files = if removed > 0 { format!(" (removed {removed} partly written file{})", if removed > 1 { "s" } else { "" }) } else { String::new() };
        eprintln!("inferencelayer: interrupted{files}");
        std::process::exit(130);
    });
    match pollster::block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
