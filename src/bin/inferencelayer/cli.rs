//! `inferencelayer`: Kyutai's Mimi codec on the command line, on the GPU through WebGPU
//! (natively: Vulkan, Metal or DX12; Mesa's lavapipe where there is no GPU).
//!
//! - `encode`: a WAV (any rate, any channel count) -> codes `.npy` `[frames, codebooks]` int64;
//! - `decode`: codes `.npy` -> a 24 kHz mono 16-bit WAV;
//! - `roundtrip`: a WAV -> codes -> a WAV, frame by frame;
//! - `synthetic-checkpoint`: a seeded synthetic Mimi checkpoint, for trying the tool offline;
//! - `bench`: per-frame GPU encode and decode times.
//!
//! Audio is coded in frames of 1920 samples (80 ms at 24 kHz); the last partial frame of an
//! input is zero-padded, so outputs are a whole number of frames long. Errors print
//! `error: ...` and exit with status 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use inferencelayer::audio;
use inferencelayer::weights::synthetic::{self, CodebookStats};
use inferencelayer::{Error, GpuContext, Mimi, MimiConfig, MimiWeights, Result};

/// Per-level codebook statistics of the reference clip, `f32 [32, 257]`: synthetic codebooks
/// drawn from them give varying codes on speech.
const CODEBOOK_STATS_NPY: &[u8] = include_bytes!("../../../tests/golden/mimi_codebook_stats.npy");
/// The benchmark's test signal: 2.96 s of speech, 24 kHz mono 16-bit.
const BENCH_WAV: &[u8] = include_bytes!("../../../tests/golden/mimi_input.wav");

#[derive(Parser)]
#[command(name = "inferencelayer", version, about = "Kyutai's Mimi audio codec on WebGPU")]
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
        /// WAV file: 8/16/24/32-bit integer or 32-bit float, any rate, any channel count.
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
        /// WAV file: 8/16/24/32-bit integer or 32-bit float, any rate, any channel count.
        input: PathBuf,
        /// WAV file to write (24 kHz mono 16-bit).
        output: PathBuf,
    },
    /// Write a seeded synthetic Mimi checkpoint (the released geometry, f32, about 385 MB).
    SyntheticCheckpoint {
        /// Safetensors file to write.
        output: PathBuf,
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
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
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

impl CodecArgs {
    /// The configuration: `--config` or the released codec, with `--codebooks` applied.
    fn config(&self) -> Result<MimiConfig> {
        let mut config = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| file_error(path, format!("cannot read the config: {e}")))?;
                MimiConfig::from_json(&text)?
            }
            None => MimiConfig::default(),
        };
        if let Some(n) = self.codebooks {
            config.num_codebooks = n;
            config.validate()?;
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
        let bytes = std::fs::read(checkpoint)
            .map_err(|e| file_error(checkpoint, format!("cannot read the checkpoint: {e}")))?;
        let weights = MimiWeights::from_safetensors(config, &bytes).map_err(|e| match e {
            Error::Checkpoint(why) => file_error(checkpoint, format!("not a valid safetensors checkpoint: {why}")),
            other => other,
        })?;
        drop(bytes);
        let ctx = Rc::new(GpuContext::new().await?);
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
    let codes = audio::read_codes(input, n_q, config.quantizer.bins)?;
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

fn synthetic_checkpoint(output: &Path, seed: u64) -> Result<()> {
    let config = MimiConfig::default();
    let stats = npyz::NpyFile::new(CODEBOOK_STATS_NPY)
        .and_then(|f| f.into_vec::<f32>())
        .map_err(|e| Error::Input(format!("embedded codebook statistics: {e}")))?;
    let dim = config.quantizer.dimension;
    let stats = CodebookStats { dim, rows: stats };
    let specs = config.tensor_specs();
    let start = Instant::now();
    let bytes = synthetic::checkpoint(&specs, seed, &stats)?;
    std::fs::write(output, &bytes).map_err(|e| file_error(output, format!("cannot write the checkpoint: {e}")))?;
    eprintln!(
        "wrote a synthetic Mimi checkpoint (seed {seed}, {} tensors, {:.0} MB) in {:.1} s",
        specs.len(),
        bytes.len() as f64 / 1e6,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// p50, p95 (nearest rank) and mean of durations in milliseconds.
struct Stats {
    p50: f64,
    p95: f64,
    mean: f64,
}

impl Stats {
    fn of(ms: &[f64]) -> Self {
        let mut v = ms.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Self { p50: rank(0.50), p95: rank(0.95), mean: v.iter().sum::<f64>() / v.len() as f64 }
    }
    fn json(&self) -> serde_json::Value {
        serde_json::json!({ "p50": self.p50, "p95": self.p95, "mean": self.mean })
    }
}

fn bench_signal() -> Result<Vec<f32>> {
    let embedded = |e: hound::Error| Error::Input(format!("embedded benchmark clip: {e}"));
    let mut r = hound::WavReader::new(BENCH_WAV).map_err(embedded)?;
    r.samples::<i16>().map(|s| s.map(|s| s as f32 / 32768.0).map_err(embedded)).collect()
}

async fn bench(codec: &CodecArgs, frames: usize, warmup: usize, json: bool) -> Result<()> {
    if frames == 0 {
        return Err(Error::Input("--frames must be at least 1".into()));
    }
    let config = codec.config()?;
    let signal = bench_signal()?;
    let mut c = Codec::open(&config, &codec.checkpoint).await?;
    let fs = c.mimi.frame_size();
    let (mut enc, mut dec, mut both) =
        (Vec::with_capacity(frames), Vec::with_capacity(frames), Vec::with_capacity(frames));
    let start = Instant::now();
    for (i, frame) in signal.chunks_exact(fs).cycle().take(warmup + frames).enumerate() {
        let t0 = Instant::now();
        let codes = c.mimi.encode_frame(frame).await?;
        let t1 = Instant::now();
        c.mimi.decode_frame(i, &codes).await?;
        let t2 = Instant::now();
        if i >= warmup {
            enc.push((t1 - t0).as_secs_f64() * 1e3);
            dec.push((t2 - t1).as_secs_f64() * 1e3);
            both.push((t2 - t0).as_secs_f64() * 1e3);
        }
    }
    let elapsed = start.elapsed();
    let info = &c.mimi.context().info;
    let (enc_dispatches, dec_dispatches) = c.mimi.dispatches();
    let frame_ms = 1e3 * fs as f64 / audio::SAMPLE_RATE as f64;
    let (enc, dec, both) = (Stats::of(&enc), Stats::of(&dec), Stats::of(&both));
    if json {
        let v = serde_json::json!({
            "adapter": info.to_string(),
            "adapter_name": info.name,
            "backend": info.backend,
            "device_type": info.device_type,
            "codebooks": c.mimi.num_codebooks(),
            "frames": frames,
            "warmup": warmup,
            "frame_ms": frame_ms,
            "dispatches_per_frame": { "encode": enc_dispatches, "decode": dec_dispatches },
            "encode_ms": enc.json(),
            "decode_ms": dec.json(),
            "encode_decode_ms": both.json(),
        });
        println!("{v:#}");
    } else {
        println!("adapter        {info}");
        println!("adapter name   {}", info.name);
        println!("dispatches     {enc_dispatches} encode, {dec_dispatches} decode per frame");
        println!(
            "frames         {frames} timed after {warmup} warm-up, {} codebooks, {frame_ms:.0} ms of audio each",
            c.mimi.num_codebooks()
        );
        println!();
        println!("{:<15}{:>10}{:>10}{:>10}", "per frame", "p50 ms", "p95 ms", "mean ms");
        for (name, s) in [("encode", &enc), ("decode", &dec), ("encode+decode", &both)] {
            println!("{name:<15}{:>10.2}{:>10.2}{:>10.2}", s.p50, s.p95, s.mean);
        }
        println!("{:<15}{:>10.2}", "real-time x", frame_ms / both.mean);
    }
    c.summary("benchmarked", warmup + frames, elapsed);
    Ok(())
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Encode { codec, input, output } => encode(&codec, &input, &output).await,
        Command::Decode { codec, input, output } => decode(&codec, &input, &output).await,
        Command::Roundtrip { codec, input, output } => roundtrip(&codec, &input, &output).await,
        Command::SyntheticCheckpoint { output, seed } => synthetic_checkpoint(&output, seed),
        Command::Bench { codec, frames, warmup, json } => bench(&codec, frames, warmup, json).await,
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match pollster::block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
