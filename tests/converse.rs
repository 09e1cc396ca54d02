//! `inferencelayer converse` end to end with the binary, on checkpoints the binary writes
//! itself (`synthetic-lm`: the parity tests' reduced LM geometry, the reference's weights;
//! `synthetic-checkpoint`: the reference's Mimi): greedy replies to the reference's user
//! codes equal Kyutai's LMGen output token for token, the reply WAV has one 1920-sample
//! frame per output row, and bad input gets `error: ...` and status 1.
//!
//! Mimi's decoder runs about 1 to 3 s per frame on lavapipe (a CPU), so the full-length
//! reply (63 frames of audio) is an ignored test, `converse_full_reply_wav`, for machines
//! with a GPU (`cargo test --release --test converse -- --ignored`). The default tests
//! compare all 63 token rows with `--no-audio`, and decode a short reply (`--max-frames`).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::path::Path;
use std::sync::OnceLock;

use common::cli::*;
use common::moshi::*;
use inferencelayer::moshi::tokenizer::{TextStream, TextTokenizer};
use inferencelayer::moshi::LmConfig;
use inferencelayer::weights::synthetic::{lm_checkpoint, SEED};
use npyz::WriterBuilder;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

fn scratch() -> &'static Path {
    scratch_dir("converse")
}
/// Rows through which greedy tokens must equal the reference's (see tests/moshi_parity.rs:
/// after row 44 the reference's own top-2 margin is inside f32 summation noise).
const EXACT_ROWS: usize = 44;
const FRAME: u32 = 1920;

fn path(name: &str) -> String {
    scratch().join(name).display().to_string()
}

fn golden(name: &str) -> String {
    format!("{GOLDEN}/{name}")
}

/// The reference's LM checkpoint, written by `inferencelayer synthetic-lm`.
fn lm() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = path("lm.safetensors");
        run_ok(&["synthetic-lm", &p]);
        p
    })
}

/// The reference's Mimi checkpoint, written by `inferencelayer synthetic-checkpoint`.
fn mimi() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = path("mimi.safetensors");
        run_ok(&["synthetic-checkpoint", &p]);
        p
    })
}

/// A `.npy` int64 file's shape and values.
fn read_npy_i64(path: &str) -> (Vec<u64>, Vec<i64>) {
    let bytes = std::fs::read(path).expect("npy file");
    let npy = npyz::NpyFile::new(bytes.as_slice()).expect("npy");
    assert_eq!(npy.dtype().descr(), "'<i8'", "{path} holds int64");
    let shape = npy.shape().to_vec();
    (shape, npy.into_vec::<i64>().expect("i64"))
}

fn rows(flat: &[i64], cols: usize) -> Vec<Vec<i32>> {
    flat.chunks_exact(cols).map(|r| r.iter().map(|&t| t as i32).collect()).collect()
}

fn write_npy_i64(path: &str, shape: &[u64], values: &[i64]) {
    let mut w = npyz::WriteOptions::<i64>::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(std::fs::File::create(path).expect("create npy")))
        .begin_nd()
        .expect("npy header");
    w.extend(values.iter().copied()).expect("npy data");
    w.finish().expect("npy finish");
}

const LM_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/moshi_config.json");

#[test]
fn synthetic_lm_is_the_reference_checkpoint() {
    let written = std::fs::read(lm()).expect("LM checkpoint");
    let g = lm_golden();
    assert!(written == lm_checkpoint_bytes(&g.config), "the binary's synthetic LM differs from the reference's weights");
}

#[test]
fn converse_greedy_tokens_equal_the_reference() {
    let tokens = path("greedy_tokens.npy");
    let codes = golden("moshi_user_codes.npy");
    let out = run_ok(&["converse", "--greedy", "--no-audio", "--lm", lm(), "--lm-config", LM_CONFIG, "--tokens-out", &tokens, &codes]);
    let (shape, flat) = read_npy_i64(&tokens);
    assert_eq!(shape, [63, 9], "one row per frame after the first (max(delays) = 1), text then 8 audio");
    let got = rows(&flat, 9);
    let g = lm_golden();
    let (leading, total) = agreement(&got, &g.tokens);
    eprintln!("converse: {leading} leading rows equal the reference, {total}/63 rows equal");
    assert!(leading >= EXACT_ROWS, "only the first {leading} rows equal the reference");
    // stdout: the text token ids, padding (3) and 0 left out
    let text: Vec<i32> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(|t| t.parse().expect("a token id")).collect();
    let want: Vec<i32> = got.iter().map(|r| r[0]).filter(|&t| t != 0 && t != 3).collect();
    assert_eq!(text, want);
}

#[test]
fn converse_short_reply_wav() {
    let (wav, tokens) = (path("short.wav"), path("short_tokens.npy"));
    let codes = golden("moshi_user_codes.npy");
    let spm = golden("spm_test.model");
    let args = [
        "converse", "--greedy", "--max-frames", "4", "--tokenizer", &spm, "--mimi", mimi(), "--lm", lm(), "--lm-config", LM_CONFIG,
        "--tokens-out", &tokens, &codes, &wav,
    ];
    let out = run_ok(&args);
    let (spec, len) = wav_spec_and_len(&wav);
    assert_eq!((spec.sample_rate, spec.channels, spec.bits_per_sample), (24_000, 1, 16));
    assert_eq!(len, 3 * FRAME, "3 reply frames of 1920 samples from 4 input frames");
    let (shape, flat) = read_npy_i64(&tokens);
    assert_eq!(shape, [3, 9]);
    assert_eq!(rows(&flat, 9), &lm_golden().tokens[..3]);
    // stdout: the reply's text through the tokenizer, padding skipped
    let tok = TextTokenizer::from_bytes(&std::fs::read(&spm).unwrap()).unwrap();
    let mut stream = TextStream::new().skip_padding(3);
    let mut want: String = flat.chunks_exact(9).map(|r| stream.push(&tok, r[0] as u32).unwrap()).collect();
    want += &stream.finish();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{want}\n"));
    let pcm: Vec<i16> = hound::WavReader::open(&wav).unwrap().samples::<i16>().map(|s| s.unwrap()).collect();
    assert!(pcm.iter().any(|&s| s != 0), "the reply is not silent");
}

/// Standard output closed by its reader before the reply is printed (`converse ... | head
/// -c1`): no panic, the WAV and the tokens are written all the same, status 0.
#[test]
fn converse_writes_its_files_when_stdout_is_closed() {
    use std::process::{Command, Stdio};
    let (wav, tokens) = (path("closed.wav"), path("closed_tokens.npy"));
    let codes = golden("moshi_user_codes.npy");
    let spm = golden("spm_test.model");
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").unwrap_or_else(|| std::env::temp_dir().into_os_string());
    let mut child = Command::new(common::cli::BIN)
        .args(["converse", "--greedy", "--max-frames", "4", "--tokenizer", &spm, "--mimi", mimi(), "--lm", lm(), "--lm-config", LM_CONFIG])
        .args(["--tokens-out", &tokens, &codes, &wav])
        .env("XDG_RUNTIME_DIR", xdg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run inferencelayer");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "the binary panicked: {stderr}");
    assert!(out.status.success(), "status {:?}: {stderr}", out.status);
    let (_, len) = wav_spec_and_len(&wav);
    assert_eq!(len, 3 * FRAME);
    assert_eq!(read_npy_i64(&tokens).0, [3, 9]);
}

/// The full reply: 63 frames of audio, about 1 to 3 minutes of Mimi decoding on lavapipe.
#[test]
#[ignore = "decodes 63 frames with Mimi: minutes on a CPU adapter; run with --ignored on a GPU"]
fn converse_full_reply_wav() {
    let (wav, tokens) = (path("full.wav"), path("full_tokens.npy"));
    let codes = golden("moshi_user_codes.npy");
    run_ok(&["converse", "--greedy", "--mimi", mimi(), "--lm", lm(), "--lm-config", LM_CONFIG, "--tokens-out", &tokens, &codes, &wav]);
    let (spec, len) = wav_spec_and_len(&wav);
    assert_eq!((spec.sample_rate, spec.channels, spec.bits_per_sample), (24_000, 1, 16));
    assert_eq!(len, 63 * FRAME);
    let (shape, flat) = read_npy_i64(&tokens);
    assert_eq!(shape, [63, 9]);
    let (leading, _) = agreement(&rows(&flat, 9), &lm_golden().tokens);
    assert!(leading >= EXACT_ROWS, "only the first {leading} rows equal the reference");
}

/// A WAV input is encoded with Mimi, frame by frame. The LM here has the reduced geometry
/// except for a full audio card (2048, Mimi's bins), so Mimi's codes are in its range.
#[test]
fn converse_wav_input() {
    let config_path = path("card2048.json");
    let lm_path = path("card2048.safetensors");
    let mut v: serde_json::Value = serde_json::from_str(CONFIG_JSON).unwrap();
    v["card"] = 2048.into();
    std::fs::write(&config_path, v.to_string()).unwrap();
    run_ok(&["synthetic-lm", "--config", &config_path, &lm_path]);
    let (wav, tokens) = (path("from_wav.wav"), path("from_wav_tokens.npy"));
    let input = golden("mimi_input.wav");
    let args = [
        "converse", "--seed", "7", "--max-frames", "3", "--mimi", mimi(), "--lm", &lm_path, "--lm-config", &config_path,
        "--tokens-out", &tokens, &input, &wav,
    ];
    run_ok(&args);
    assert_eq!(wav_spec_and_len(&wav).1, 2 * FRAME);
    let (shape, flat) = read_npy_i64(&tokens);
    assert_eq!(shape, [2, 9]);
    for r in rows(&flat, 9) {
        assert!((0..96).contains(&r[0]), "text token {} below text_card", r[0]);
        assert!(r[1..].iter().all(|t| (0..2048).contains(t)), "audio tokens {r:?} below card");
    }
}

#[test]
fn converse_refuses_bad_input() {
    let codes = golden("moshi_user_codes.npy");
    let base = ["converse", "--greedy", "--no-audio", "--lm", lm(), "--lm-config", LM_CONFIG];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        base.iter().chain(extra).copied().collect()
    }

    // a codes file with 7 columns
    let seven = path("seven.npy");
    write_npy_i64(&seven, &[4, 7], &[1; 28]);
    run_err(&with(&base, &[&seven]), &["seven.npy", "7 codes per frame", "8 user codes"]);

    // a code at the LM's card (64)
    let high = path("high.npy");
    let mut v = vec![1i64; 5 * 8];
    v[2 * 8 + 5] = 64;
    write_npy_i64(&high, &[5, 8], &v);
    run_err(&with(&base, &[&high]), &["high.npy", "code 64", "frame 2", "codebook 5", "bins = 64"]);
    let negative = path("negative.npy");
    write_npy_i64(&negative, &[1, 8], &[0, 0, 0, -1, 0, 0, 0, 0]);
    run_err(&with(&base, &[&negative]), &["code -1", "codebook 3"]);

    // a config that disagrees with the checkpoint: dim 160 against 128
    let wide = path("wide.json");
    let mut c: serde_json::Value = serde_json::from_str(CONFIG_JSON).unwrap();
    c["dim"] = 160.into();
    c["hidden_scale"] = 4.2.into();
    std::fs::write(&wide, c.to_string()).unwrap();
    run_err(
        &["converse", "--greedy", "--no-audio", "--lm", lm(), "--lm-config", &wide, &codes],
        &["emb.0.weight", "[65, 128]", "[65, 160]"],
    );

    // a checkpoint missing a tensor
    let config = LmConfig::from_json(CONFIG_JSON).unwrap();
    let specs: Vec<_> = config.tensor_specs().into_iter().filter(|(n, _)| n != "linears.3.weight").collect();
    let partial = path("partial.safetensors");
    std::fs::write(&partial, lm_checkpoint(&specs, SEED).unwrap()).unwrap();
    run_err(
        &["converse", "--greedy", "--no-audio", "--lm", &partial, "--lm-config", LM_CONFIG, &codes],
        &["missing tensor", "linears.3.weight"],
    );

    // an invalid config, a checkpoint that is not one, a missing file
    let bad = path("bad_heads.json");
    let mut c: serde_json::Value = serde_json::from_str(CONFIG_JSON).unwrap();
    c["num_heads"] = 5.into();
    std::fs::write(&bad, c.to_string()).unwrap();
    run_err(&["converse", "--no-audio", "--lm", lm(), "--lm-config", &bad, &codes], &["num_heads"]);
    run_err(&["converse", "--no-audio", "--lm", &codes, "--lm-config", LM_CONFIG, &codes], &["moshi_user_codes.npy", "safetensors"]);
    run_err(&with(&base, &[&path("absent.npy")]), &["absent.npy"]);
    run_err(&with(&base, &["--tokenizer", LM_CONFIG, &codes]), &["moshi_config.json", "tokenizer"]);
    // a tokenizer of fewer pieces than the LM's text vocabulary: refused before any frame runs
    let wide_text = path("wide_text.json");
    let mut c: serde_json::Value = serde_json::from_str(CONFIG_JSON).unwrap();
    c["text_card"] = 100_000.into();
    std::fs::write(&wide_text, c.to_string()).unwrap();
    let spm = golden("spm_test.model");
    run_err(
        &["converse", "--greedy", "--no-audio", "--tokenizer", &spm, "--lm", lm(), "--lm-config", &wide_text, &codes],
        &["spm_test.model", "pieces", "text_card 100000"],
    );

    // audio out needs Mimi and an OUTPUT; --no-audio takes none
    run_err(&["converse", "--lm", lm(), "--lm-config", LM_CONFIG, &codes, &path("x.wav")], &["--mimi"]);
    run_err(&["converse", "--lm", lm(), "--lm-config", LM_CONFIG, &codes], &["OUTPUT"]);
    run_err(&with(&base, &[&codes, &path("x.wav")]), &["--no-audio"]);
    run_err(&with(&base, &["--max-frames", "0", &codes]), &["--max-frames"]);
    // too short for any reply (max(delays) = 1: the reply begins after the first frame): a
    // clear refusal before any work, and no reply WAV written (it was an empty one, status 0)
    run_err(&with(&base, &["--max-frames", "1", &codes]), &["--max-frames must be at least 2", "first frame"]);
    let one_row = path("one_row.npy");
    write_npy_i64(&one_row, &[1, 8], &[1; 8]);
    run_err(&with(&base, &[&one_row]), &["one_row.npy", "too few frames of codes (1)", "at least 2"]);
    let spec = hound::WavSpec { channels: 1, sample_rate: 24_000, bits_per_sample: 16, sample_format: hound::SampleFormat::Int };
    for n in [1000, FRAME] {
        let short = path(&format!("short_{n}.wav"));
        let mut w = hound::WavWriter::create(&short, spec).unwrap();
        (0..n).for_each(|i| w.write_sample(((i % 64) as i16 - 32) * 100).unwrap());
        w.finalize().unwrap();
        let reply = path(&format!("reply_to_{n}.wav"));
        let _ = std::fs::remove_file(&reply);
        run_err(
            &["converse", "--mimi", mimi(), "--lm", lm(), "--lm-config", LM_CONFIG, &short, &reply],
            &[&format!("short_{n}.wav"), &format!("{n} samples"), "too short", "at least 1921 samples", "more than 80 ms"],
        );
        assert!(!Path::new(&reply).exists(), "a refused converse wrote {reply}");
    }
    // an output in a directory that does not exist: refused before any work, naming it
    let nowhere = path("no-such-dir/reply.wav");
    run_err(
        &["converse", "--mimi", mimi(), "--lm", lm(), "--lm-config", LM_CONFIG, &codes, &nowhere],
        &["no-such-dir/reply.wav", "does not exist", "mkdir -p"],
    );

    // a reduced Mimi with Moshi 7B's config, assumed for want of --lm-config: the error says
    // which config was assumed
    let small_mimi = concat!(env!("CARGO_MANIFEST_DIR"), "/www/config/mimi-small.json");
    run_err(
        &["converse", "--mimi", mimi(), "--mimi-config", small_mimi, "--lm", lm(), &codes, &path("assumed.wav")],
        &["card", "without --lm-config", "Moshi 7B's config is assumed"],
    );

    // bench-lm's Mimi for the full-duplex frame, given another geometry's config: refused
    // at the load, naming the file and the flag
    run_err(
        &["bench-lm", "--config", LM_CONFIG, "--frames", "1", "--warmup", "0", "--profile", "0", "--mimi", mimi(), "--mimi-config", small_mimi],
        &["mimi.safetensors", "--mimi-config"],
    );
}
