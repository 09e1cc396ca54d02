//! The `inferencelayer` binary end to end on the reference's synthetic checkpoint, written by
//! the binary itself once per test process: encode the reference clip and compare with the
//! reference's codes, decode them and compare with the reference's audio, round-trip a
//! 48 kHz stereo WAV, refuse bad input with `error: ...` and status 1. Also the file formats
//! the binary reads and writes (`inferencelayer::audio`).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::path::Path;
use std::sync::OnceLock;

use common::cli::*;
use common::*;
use inferencelayer::{audio, Error};
use npyz::WriterBuilder;

const INPUT_WAV_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/mimi_input.wav");

fn scratch() -> &'static Path {
    scratch_dir("cli")
}

/// The reference's synthetic checkpoint, written by `inferencelayer synthetic-checkpoint`.
fn checkpoint() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = scratch().join("mimi.safetensors").display().to_string();
        run_ok(&["synthetic-checkpoint", &path]);
        path
    })
}

fn path(name: &str) -> String {
    scratch().join(name).display().to_string()
}

#[test]
fn synthetic_checkpoint_is_the_reference_checkpoint() {
    let written = std::fs::read(checkpoint()).expect("checkpoint");
    assert!(written == checkpoint_bytes(), "the binary's synthetic checkpoint differs from the reference's weights");
}

#[test]
fn encode_gives_the_reference_codes_and_decode_the_reference_audio() {
    let codes = path("codes.npy");
    run_ok(&["encode", "--checkpoint", checkpoint(), INPUT_WAV_PATH, &codes]);
    let bytes = std::fs::read(&codes).expect("codes file");
    let npy = npyz::NpyFile::new(bytes.as_slice()).expect("npy");
    assert_eq!(npy.shape(), &[37, 8]);
    assert_eq!(npy.dtype().descr(), "'<i8'", "codes are int64 like the reference's");
    let flat = npy.into_vec::<i64>().expect("i64 codes");
    let got: Vec<Vec<u32>> = flat.chunks_exact(8).map(|r| r.iter().map(|&c| c as u32).collect()).collect();
    let g = golden();
    let agreement = code_gate(&got, &g.codes);
    eprintln!("CLI encode vs reference: {agreement:?}");
    assert!(agreement.is_ok());

    let wav = path("decoded.wav");
    run_ok(&["decode", "--checkpoint", checkpoint(), &codes, &wav]);
    let (spec, len) = wav_spec_and_len(&wav);
    assert_eq!((spec.sample_rate, spec.channels, spec.bits_per_sample), (24_000, 1, 16));
    assert_eq!(len, 37 * 1920);
    let pcm = audio::read_wav(&wav).expect("decoded WAV");
    let snr = snr_db(&pcm, &g.decoded);
    eprintln!("CLI decode SNR vs reference (16-bit WAV): {snr:.1} dB");
    assert!(snr >= 40.0, "decode SNR {snr:.1} dB < 40 dB");
}

#[test]
fn roundtrip_resamples_a_48k_stereo_wav_and_pads_to_whole_frames() {
    // 0.3 s of two tones at 48 kHz: 7200 samples at 24 kHz, 4 frames, 7680 samples out
    let input = path("tones-48k-stereo.wav");
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 48_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&input, spec).expect("create WAV");
    for i in 0..14_400 {
        let t = i as f64 / 48_000.0;
        for f in [220.0, 330.0] {
            w.write_sample((0.3 * (2.0 * std::f64::consts::PI * f * t).sin() * 32767.0) as i16).expect("sample");
        }
    }
    w.finalize().expect("finalize WAV");
    let output = path("tones-roundtrip.wav");
    run_ok(&["roundtrip", "--checkpoint", checkpoint(), &input, &output]);
    let (spec, len) = wav_spec_and_len(&output);
    assert_eq!((spec.sample_rate, spec.channels, spec.bits_per_sample), (24_000, 1, 16));
    assert_eq!(len, 7200u32.div_ceil(1920) * 1920);
}

#[test]
fn bench_prints_json_with_the_adapter_dispatches_and_times() {
    let out = run_ok(&[
        "bench",
        "--checkpoint",
        checkpoint(),
        "--frames",
        "2",
        "--warmup",
        "1",
        "--json",
        "--codebooks",
        "4",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench JSON");
    assert!(v["adapter"].as_str().is_some_and(|a| !a.is_empty()));
    assert!(v["adapter_name"].as_str().is_some_and(|a| !a.is_empty()));
    assert_eq!(v["frames"], 2);
    assert_eq!(v["codebooks"], 4);
    assert!(v["dispatches_per_frame"]["encode"].as_u64().is_some_and(|n| n > 0));
    assert!(v["dispatches_per_frame"]["decode"].as_u64().is_some_and(|n| n > 0));
    for k in ["encode_ms", "decode_ms", "encode_decode_ms"] {
        for s in ["p50", "p95", "p99", "mean"] {
            assert!(v[k][s].as_f64().is_some_and(|t| t > 0.0), "{k}.{s} in {v}");
        }
        assert!(v[k]["p99"].as_f64() >= v[k]["p50"].as_f64(), "{k} in {v}");
        assert!(v[k]["over_80ms"].as_u64().is_some_and(|n| n <= 2), "{k} in {v}");
    }
    // the per-step profile (where the adapter has timestamp queries) covers every dispatch
    for (profile, part) in [("profile_encode", "encode"), ("profile_decode", "decode")] {
        if let Some(groups) = v[profile].as_array() {
            let steps: u64 = groups.iter().map(|g| g["dispatches"].as_u64().unwrap()).sum();
            assert_eq!(steps, v["dispatches_per_frame"][part].as_u64().unwrap(), "{profile}");
            assert!(groups.iter().all(|g| g["ms"].as_f64().is_some_and(|t| t >= 0.0)), "{profile}");
        }
    }
}

#[test]
fn bad_input_exits_1_with_an_error_line() {
    let missing = path("no-such-file.safetensors");
    run_err(
        &["encode", "--checkpoint", &missing, INPUT_WAV_PATH, &path("x.npy")],
        &["no-such-file.safetensors", "cannot read"],
    );
    // a file that is not a checkpoint
    run_err(
        &["encode", "--checkpoint", INPUT_WAV_PATH, INPUT_WAV_PATH, &path("x.npy")],
        &["mimi_input.wav", "safetensors"],
    );
    // a file that is not a WAV
    let cargo_toml = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    run_err(&["encode", "--checkpoint", &missing, cargo_toml, &path("x.npy")], &["Cargo.toml", "WAV"]);
    run_err(
        &["roundtrip", "--checkpoint", &missing, "--codebooks", "0", INPUT_WAV_PATH, &path("x.wav")],
        &["num_codebooks"],
    );
    run_err(
        &["roundtrip", "--checkpoint", &missing, "--codebooks", "33", INPUT_WAV_PATH, &path("x.wav")],
        &["num_codebooks"],
    );
    let config = path("bad-config.json");
    std::fs::write(&config, r#"{"transformer": {"d_model": 256}}"#).expect("config");
    run_err(
        &["encode", "--checkpoint", &missing, "--config", &config, INPUT_WAV_PATH, &path("x.npy")],
        &["transformer.d_model"],
    );
    // codes with 8 codebooks decoded by a 4-codebook codec: says how to fix it
    let codes = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/mimi_codes.npy");
    run_err(
        &["decode", "--checkpoint", &missing, "--codebooks", "4", codes, &path("x.wav")],
        &["mimi_codes.npy", "8 codebooks", "runs 4", "--codebooks 8"],
    );
    run_err(&["decode", "--checkpoint", &missing, INPUT_WAV_PATH, &path("x.wav")], &["mimi_input.wav", ".npy"]);
    // a directory where a checkpoint or an output file goes
    let dir = scratch().display().to_string();
    run_err(&["encode", "--checkpoint", &dir, INPUT_WAV_PATH, &path("x.npy")], &[&dir, "is a directory", "checkpoint file"]);
    run_err(&["load-lm", "--lm", &dir], &[&dir, "is a directory", "LM checkpoint file"]);
    run_err(&["encode", "--checkpoint", &missing, INPUT_WAV_PATH, &dir], &[&dir, "is a directory", "file name"]);
    let slash = format!("{}/", path("not-yet"));
    run_err(&["encode", "--checkpoint", &missing, INPUT_WAV_PATH, &slash], &[&slash, "names a directory", "file name"]);
    let dot = format!("{}/.", path("not-yet"));
    run_err(&["encode", "--checkpoint", &missing, INPUT_WAV_PATH, &dot], &[&dot, "names a directory", "file name"]);
    // a dangling symlink into a directory that does not exist
    #[cfg(unix)]
    {
        let link = path("dangling.npy");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(path("no-such-dir/codes.npy"), &link).expect("symlink");
        run_err(&["encode", "--checkpoint", &missing, INPUT_WAV_PATH, &link], &["no-such-dir", "does not exist", "mkdir -p"]);
    }
    // benchmark counts out of range, refused before any work (a count too large to hold
    // the per-frame timings for was a panic)
    run_err(&["bench", "--checkpoint", &missing, "--frames", "0"], &["--frames 0: frames must be at least 1"]);
    run_err(&["bench", "--checkpoint", &missing, "--frames", "99999999999999"], &["--frames 99999999999999", "at most 1080000"]);
    run_err(&["bench", "--checkpoint", &missing, "--profile", "99999999999999"], &["--profile 99999999999999", "at most 10000"]);
    run_err(&["bench-lm", "--frames", "18446744073709551615"], &["--frames 18446744073709551615", "at most 1080000"]);
    // warm-up counts too (an unbounded one ran until interrupted)
    run_err(&["bench", "--checkpoint", &missing, "--warmup", "18446744073709551615"], &["--warmup 18446744073709551615", "at most 1080000"]);
    run_err(&["bench-lm", "--warmup", "1080001"], &["--warmup 1080001", "at most 1080000"]);
    // the full-duplex frame's Mimi checkpoint is read before the LM is built
    run_err(&["bench-lm", "--config", concat!(env!("CARGO_MANIFEST_DIR"), "/www/config/moshi-small.json"), "--mimi", &missing], &[&missing, "cannot read the Mimi checkpoint"]);
}

// --- file formats -----------------------------------------------------------------------

fn write_wav(path: &str, spec: hound::WavSpec, frames: usize, sample: impl Fn(usize, usize) -> f64) {
    let mut w = hound::WavWriter::create(path, spec).expect("create WAV");
    let full = (1i64 << (spec.bits_per_sample - 1)) as f64;
    for i in 0..frames {
        for c in 0..spec.channels as usize {
            let v = sample(i, c);
            match spec.sample_format {
                hound::SampleFormat::Float => w.write_sample(v as f32),
                hound::SampleFormat::Int => w.write_sample((v * full).round().clamp(-full, full - 1.0) as i32),
            }
            .expect("sample");
        }
    }
    w.finalize().expect("finalize WAV");
}

fn tone(freq: f64, rate: f64, i: usize) -> f64 {
    0.5 * (2.0 * std::f64::consts::PI * freq * i as f64 / rate).sin()
}

#[test]
fn read_wav_scales_every_sample_format_and_downmixes() {
    use hound::SampleFormat::{Float, Int};
    for (bits, format) in [(8, Int), (16, Int), (24, Int), (32, Int), (32, Float)] {
        let p = path(&format!("fmt-{bits}-{format:?}.wav"));
        let spec = hound::WavSpec { channels: 2, sample_rate: 24_000, bits_per_sample: bits, sample_format: format };
        // left: a tone; right: its negation plus 0.25, so the mean is 0.125
        write_wav(&p, spec, 480, |i, c| if c == 0 { tone(440.0, 24e3, i) } else { 0.25 - tone(440.0, 24e3, i) });
        let pcm = audio::read_wav(&p).expect("read WAV");
        assert_eq!(pcm.len(), 480, "{bits}-bit {format:?}");
        let tol = 2.0 / (1u64 << (bits.min(24) - 1)) as f32;
        let worst = pcm.iter().map(|v| (v - 0.125).abs()).fold(0.0, f32::max);
        assert!(worst <= tol, "{bits}-bit {format:?}: mean of channels off by {worst}");
    }
    // 16-bit is s / 32768 exactly
    let pcm = audio::read_wav(INPUT_WAV_PATH).expect("reference clip");
    assert_eq!(pcm, golden().pcm);
}

#[test]
fn read_wav_resamples_to_24k_in_phase() {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 48_000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let p = path("tone-48k.wav");
    write_wav(&p, spec, 9600, |i, _| tone(440.0, 48e3, i));
    let pcm = audio::read_wav(&p).expect("read WAV");
    assert_eq!(pcm.len(), 4800);
    // away from the ends, where the resampler's filter sees the cut
    let worst = (240..4560).map(|i| (pcm[i] as f64 - tone(440.0, 24e3, i)).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-3, "resampled tone off by {worst}");
    for rate in [8_000, 11_025, 22_050, 44_100, 96_000, 44_101] {
        let spec = hound::WavSpec { sample_rate: rate, ..spec };
        let p = path(&format!("tone-{rate}.wav"));
        let n = rate as usize / 10 + 7;
        write_wav(&p, spec, n, |i, _| tone(440.0, rate as f64, i));
        let pcm = audio::read_wav(&p).expect("read WAV");
        assert_eq!(pcm.len() as u64, (n as u64 * 24_000).div_ceil(rate as u64), "{rate} Hz");
        let mid = pcm.len() / 2;
        let worst = (mid - 200..mid + 200).map(|i| (pcm[i] as f64 - tone(440.0, 24e3, i)).abs()).fold(0.0, f64::max);
        eprintln!("{rate} Hz: resampled tone off by {worst:.1e}");
        assert!(worst < 1e-3, "{rate} Hz: resampled tone off by {worst}");
    }
}

#[test]
fn write_wav_clamps_and_read_wav_reads_it_back() {
    let p = path("clamped.wav");
    audio::write_wav(&p, &[0.0, 0.5, -0.5, 2.0, -2.0, f32::NAN, 1.0 / 32768.0]).expect("write WAV");
    let (spec, len) = wav_spec_and_len(&p);
    assert_eq!((spec.sample_rate, spec.channels, spec.bits_per_sample, len), (24_000, 1, 16, 7));
    let back = audio::read_wav(&p).expect("read WAV");
    assert_eq!(back, [0.0, 0.5, -0.5, 32767.0 / 32768.0, -1.0, 0.0, 1.0 / 32768.0]);
}

/// Interrupted (SIGINT, as Ctrl-C sends) while it writes a checkpoint, the binary removes the
/// temporary file, leaves the file it was replacing as it was and exits with 130.
#[cfg(unix)]
#[test]
fn an_interrupted_write_leaves_the_file_before_and_no_temporary_file() {
    let dir = scratch().join("interrupted");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create dir");
    // a reduced LM whose f32 file (about 670 MB) takes a few seconds to write
    let small = concat!(env!("CARGO_MANIFEST_DIR"), "/www/config/moshi-small.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(small).expect("config")).expect("JSON");
    for (k, v) in [("dim", 768), ("num_layers", 8), ("num_heads", 12), ("text_card", 8000), ("card", 2048), ("depformer_dim", 512), ("depformer_dim_feedforward", 2048), ("depformer_num_heads", 8), ("depformer_num_layers", 2)] {
        config[k] = v.into();
    }
    let config_path = scratch().join("interrupted-lm.json");
    std::fs::write(&config_path, config.to_string()).expect("write config");
    let out = dir.join("lm.safetensors");
    std::fs::write(&out, b"the file before").expect("write");
    let parts = || -> Vec<String> {
        std::fs::read_dir(&dir).expect("list dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".part")).collect()
    };
    let mut child = std::process::Command::new(BIN)
        .args(["synthetic-lm", "--config", &config_path.display().to_string(), &out.display().to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run inferencelayer");
    let start = std::time::Instant::now();
    while parts().is_empty() {
        assert!(child.try_wait().expect("wait").is_none(), "synthetic-lm ended before its temporary file was seen");
        assert!(start.elapsed().as_secs() < 120, "no temporary file after 120 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let kill = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill");
    assert!(kill.success());
    let done = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted (removed 1 partly written file)"), "{stderr}");
    assert_eq!(parts(), Vec::<String>::new(), "a temporary file was left");
    assert_eq!(std::fs::read(&out).expect("read"), b"the file before", "the file before was changed");
}

#[test]
fn a_write_that_fails_part_way_leaves_the_file_before_and_no_temporary_file() {
    use std::io::Write;
    let dir = scratch().join("whole-or-nothing");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create dir");
    let p = dir.join("reply.wav");
    audio::write_wav(&p, &[0.25; 480]).expect("write WAV");
    let before = std::fs::read(&p).expect("read WAV");
    let err = audio::write_file(&p, "WAV", |out| {
        out.write_all(&[0u8; 100_000]).map_err(|e| e.to_string())?;
        Err("the disk is full".to_string())
    })
    .expect_err("the write fails");
    let text = err.to_string();
    assert!(matches!(err, Error::File { .. }) && text.contains("reply.wav"), "{text}");
    assert!(text.contains("cannot write the WAV: the disk is full"), "{text}");
    assert_eq!(std::fs::read(&p).expect("read WAV"), before, "the file before was changed");
    let left: Vec<_> = std::fs::read_dir(&dir).expect("list dir").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from("reply.wav")], "a temporary file was left behind");
    // a write that succeeds replaces the file
    audio::write_wav(&p, &[-0.5; 960]).expect("write WAV");
    assert_eq!(audio::read_wav(&p).expect("read WAV"), vec![-0.5; 960]);
    // fewer values than the shape holds: refused, and no file
    let short = dir.join("short.npy");
    let err = audio::write_npy_i64(&short, "tokens", [2, 3], [1i64, 2, 3].into_iter()).expect_err("3 values for [2, 3]");
    assert!(err.to_string().contains("cannot write the tokens"), "{err}");
    assert!(!short.exists(), "a short .npy was left");
}

#[cfg(unix)]
#[test]
fn a_replaced_file_keeps_its_mode_a_symlink_its_target_and_a_fifo_is_written_directly() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = scratch().join("replace");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("real")).expect("create dir");
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;

    let private = dir.join("private.npy");
    audio::write_codes(&private, &[vec![1, 2]]).expect("write codes");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    audio::write_codes(&private, &[vec![3, 4], vec![5, 6]]).expect("write codes");
    assert_eq!(mode(&private), 0o600, "a private file became readable by others");
    assert_eq!(audio::read_codes(&private, 2, 2048).expect("read codes"), [vec![3, 4], vec![5, 6]]);

    // a link into another directory: the target is replaced, the link stays a link
    let target = dir.join("real").join("reply.wav");
    audio::write_wav(&target, &[0.25; 4]).expect("write WAV");
    let link = dir.join("reply.wav");
    symlink(&target, &link).expect("symlink");
    audio::write_wav(&link, &[0.5; 8]).expect("write WAV through the link");
    assert!(std::fs::symlink_metadata(&link).expect("lstat").file_type().is_symlink(), "the link was replaced");
    assert_eq!(audio::read_wav(&target).expect("read WAV"), vec![0.5; 8]);

    // a dangling link is written through, as File::create would
    let dangling = dir.join("dangling.wav");
    symlink(dir.join("real").join("new.wav"), &dangling).expect("symlink");
    audio::write_wav(&dangling, &[0.5; 8]).expect("write WAV through a dangling link");
    assert!(std::fs::symlink_metadata(&dangling).expect("lstat").file_type().is_symlink());
    assert_eq!(audio::read_wav(dir.join("real").join("new.wav")).expect("read WAV"), vec![0.5; 8]);

    // a FIFO (as a device) is not replaced by a rename: it is written directly
    let fifo = dir.join("codes.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).expect("read the FIFO"))
    };
    audio::write_codes(&fifo, &[vec![7, 8]]).expect("write codes into a FIFO");
    // checked before the join: a reader left waiting on a replaced FIFO ends with the process
    assert!(!std::fs::metadata(&fifo).expect("metadata").is_file(), "the FIFO was replaced by a file");
    let through = reader.join().expect("reader");
    let direct = dir.join("direct.npy");
    audio::write_codes(&direct, &[vec![7, 8]]).expect("write codes");
    assert_eq!(through, std::fs::read(&direct).expect("read codes"), "the FIFO got other bytes");

    for d in [dir.as_path(), &dir.join("real")] {
        let parts: Vec<_> = std::fs::read_dir(d)
            .expect("list dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".part"))
            .collect();
        assert!(parts.is_empty(), "temporary files left in {}: {parts:?}", d.display());
    }
}

#[test]
fn codes_files_round_trip_in_every_integer_dtype_and_order() {
    let codes: Vec<Vec<u32>> = (0..5u32).map(|f| (0..3u32).map(|q| (f * 400 + q * 7) % 2048).collect()).collect();
    let p = path("codes-i64.npy");
    audio::write_codes(&p, &codes).expect("write codes");
    assert_eq!(audio::codes_shape(&p).expect("shape"), (5, 3));
    assert_eq!(audio::read_codes(&p, 3, 2048).expect("read codes"), codes);

    fn write<T: npyz::Serialize + npyz::AutoSerialize>(p: &str, shape: &[u64], order: npyz::Order, v: Vec<T>) {
        let mut w = npyz::WriteOptions::<T>::new()
            .default_dtype()
            .shape(shape)
            .order(order)
            .writer(std::io::BufWriter::new(std::fs::File::create(p).expect("create")))
            .begin_nd()
            .expect("npy writer");
        w.extend(v).expect("npy data");
        w.finish().expect("npy finish");
    }
    let flat: Vec<u32> = codes.iter().flatten().copied().collect();
    let fortran: Vec<u32> = (0..3).flat_map(|q| codes.iter().map(move |r| r[q])).collect();
    let c = npyz::Order::C;
    let paths = ["i32", "u32", "i16", "u16", "u64-fortran"].map(|name| path(&format!("codes-{name}.npy")));
    write(&paths[0], &[5, 3], c, flat.iter().map(|&v| v as i32).collect());
    write(&paths[1], &[5, 3], c, flat.clone());
    write(&paths[2], &[5, 3], c, flat.iter().map(|&v| v as i16).collect());
    write(&paths[3], &[5, 3], c, flat.iter().map(|&v| v as u16).collect());
    write(&paths[4], &[5, 3], npyz::Order::Fortran, fortran.iter().map(|&v| v as u64).collect());
    for p in &paths {
        assert_eq!(audio::read_codes(p, 3, 2048).expect(p), codes, "{p}");
    }
    let small: Vec<u8> = vec![1, 2, 3, 4, 5, 6];
    let p = path("codes-u8.npy");
    write(&p, &[2, 3], npyz::Order::C, small);
    assert_eq!(audio::read_codes(&p, 3, 2048).expect("u8"), [[1, 2, 3], [4, 5, 6]]);
    // one code too large for the codebook
    assert!(matches!(
        audio::read_codes(&p, 3, 6),
        Err(Error::CodeOutOfRange { frame: 1, codebook: 2, code: 6, bins: 6 })
    ));
}
