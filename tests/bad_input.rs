//! Bad input of every kind gets a typed error naming the tensor, field or file, never a panic:
//! broken checkpoints (built from the reference's synthetic one), configs, WAV and codes
//! files, and wrong frames and codes given to the GPU codec, which keeps working afterwards.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::OnceLock;

use common::cli::*;
use common::*;
use inferencelayer::{audio, Error, GpuContext, Mimi, MimiConfig, MimiWeights};
use npyz::WriterBuilder;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

fn scratch() -> &'static Path {
    scratch_dir("bad-input")
}

/// The reference's synthetic checkpoint, made once.
fn checkpoint() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(checkpoint_bytes)
}

/// The checkpoint rewritten: `edit` gets each tensor's name, dtype and shape and returns the
/// new ones, or `None` to drop the tensor. The data bytes are kept.
fn rewrite(edit: impl Fn(&str, Dtype, &[usize]) -> Option<(String, Dtype, Vec<usize>)>) -> Vec<u8> {
    let st = SafeTensors::deserialize(checkpoint()).expect("synthetic checkpoint");
    let views: Vec<(String, TensorView<'_>)> = st
        .iter()
        .filter_map(|(name, v)| {
            let (name, dtype, shape) = edit(name, v.dtype(), v.shape())?;
            Some((name, TensorView::new(dtype, shape, v.data()).expect("tensor view")))
        })
        .collect();
    safetensors::serialize(views, None).expect("serialize")
}

fn load(bytes: &[u8]) -> inferencelayer::Result<MimiWeights> {
    MimiWeights::from_safetensors(&MimiConfig::default(), bytes)
}

fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, bytes).expect("write scratch file");
    p
}

// --- checkpoints --------------------------------------------------------------------------

const LINEAR1: &str = "encoder_transformer.transformer.layers.3.linear1.weight";

#[test]
fn a_missing_tensor_is_named() {
    let dropped = "decoder_transformer.transformer.layers.5.norm2.bias";
    match load(&rewrite(|n, d, s| (n != dropped).then(|| (n.to_string(), d, s.to_vec())))) {
        Err(Error::MissingTensor(name)) => assert_eq!(name, dropped),
        other => panic!("expected MissingTensor({dropped}), got {:?}", other.err()),
    }
}

#[test]
fn a_misshapen_tensor_is_named_with_both_shapes() {
    let bytes = rewrite(|n, d, s| Some((n.to_string(), d, if n == LINEAR1 { vec![1024, 1024] } else { s.to_vec() })));
    match load(&bytes) {
        Err(e @ Error::Shape { .. }) => {
            let Error::Shape { name, expected, found } = &e else { unreachable!() };
            assert_eq!((name.as_str(), &expected[..], &found[..]), (LINEAR1, &[2048, 512][..], &[1024, 1024][..]));
            assert!(e.to_string().contains(LINEAR1), "{e}");
        }
        other => panic!("expected Shape, got {:?}", other.err()),
    }
}

#[test]
fn an_integer_tensor_is_named_with_its_dtype() {
    let bytes = rewrite(|n, d, s| Some((n.to_string(), if n == LINEAR1 { Dtype::I32 } else { d }, s.to_vec())));
    match load(&bytes) {
        Err(e @ Error::Dtype { .. }) => {
            let Error::Dtype { name, found } = &e else { unreachable!() };
            assert_eq!((name.as_str(), found.as_str()), (LINEAR1, "I32"));
            assert!(e.to_string().contains(LINEAR1), "{e}");
        }
        other => panic!("expected Dtype, got {:?}", other.err()),
    }
}

#[test]
fn truncated_and_garbage_files_are_not_checkpoints() {
    let full = checkpoint();
    let cuts = [full.len() / 2, full.len() - 1, 100, 9, 3, 0];
    for cut in cuts {
        assert!(matches!(load(&full[..cut]), Err(Error::Checkpoint(_))), "checkpoint cut at {cut} bytes");
    }
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    assert!(matches!(load(&garbage), Err(Error::Checkpoint(_))));
    assert!(matches!(load(b"{\"not\": \"a checkpoint\"}"), Err(Error::Checkpoint(_))));
    // a header length far beyond the file
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(matches!(load(&huge), Err(Error::Checkpoint(_))));
    // a valid file with no tensors lacks the first one the codec needs
    let empty = safetensors::serialize(Vec::<(String, TensorView<'_>)>::new(), None).expect("empty checkpoint");
    assert!(matches!(load(&empty), Err(Error::MissingTensor(n)) if n == "encoder.model.0.conv.conv.weight"));
}

#[test]
fn the_old_stacked_attention_names_load() {
    let renamed = rewrite(|n, d, s| {
        let n = n
            .replace("self_attn.in_projs.0.weight", "self_attn.in_proj_weight")
            .replace("self_attn.out_projs.0.weight", "self_attn.out_proj.weight");
        Some((n, d, s.to_vec()))
    });
    let st = SafeTensors::deserialize(&renamed).expect("renamed checkpoint");
    assert!(st.tensor("decoder_transformer.transformer.layers.7.self_attn.in_proj_weight").is_ok());
    assert!(st.tensor("decoder_transformer.transformer.layers.7.self_attn.in_projs.0.weight").is_err());
    let w = load(&renamed).expect("stacked attention names load");
    let original = SafeTensors::deserialize(checkpoint()).expect("checkpoint");
    let want: Vec<f32> = bytemuck::pod_collect_to_vec(
        original
            .tensor("decoder_transformer.transformer.layers.7.self_attn.out_projs.0.weight")
            .expect("out proj")
            .data(),
    );
    assert_eq!(w.decoder_transformer.layers[7].out_proj, want);
}

// --- configs ------------------------------------------------------------------------------

fn config_error(json: &str) -> (String, String) {
    match MimiConfig::from_json(json) {
        Err(e @ Error::Config { .. }) => {
            let msg = e.to_string();
            let Error::Config { field, .. } = e else { unreachable!() };
            (field, msg)
        }
        other => panic!("{json}: expected Config, got {other:?}"),
    }
}

#[test]
fn bad_configs_name_the_field() {
    let (_, msg) = config_error(r#"{"num_codebooks": 8, "codebooks_typo": 1}"#);
    assert!(msg.contains("codebooks_typo"), "{msg}");
    let (_, msg) = config_error(r#"{"seanet": {"n_filter": 64}}"#);
    assert!(msg.contains("n_filter"), "{msg}");
    for n in [0, 33] {
        let (field, msg) = config_error(&format!(r#"{{"num_codebooks": {n}}}"#));
        assert_eq!(field, "num_codebooks", "{msg}");
    }
    let (field, _) = config_error(r#"{"transformer": {"d_model": 256}}"#);
    assert_eq!(field, "transformer.d_model");
    let (_, msg) = config_error(r#"{"num_codebooks": "eight"}"#);
    assert!(msg.contains("num_codebooks") || msg.contains("invalid type"), "{msg}");
    let (_, msg) = config_error("{");
    assert!(msg.contains("EOF"), "{msg}");
    // a config that is fine
    assert_eq!(MimiConfig::from_json(r#"{"num_codebooks": 32}"#).expect("valid").num_codebooks, 32);
    // and the same checks when the field is set in code
    let c = MimiConfig { num_codebooks: 33, ..MimiConfig::default() };
    assert!(matches!(c.validate(), Err(Error::Config { field, .. }) if field == "num_codebooks"));
}

// --- WAV files ----------------------------------------------------------------------------

fn file_error<T: std::fmt::Debug>(r: inferencelayer::Result<T>, path: &Path, why: &str) {
    match r {
        Err(e @ Error::File { .. }) => {
            let msg = e.to_string();
            let Error::File { path: p, why: w } = e else { unreachable!() };
            assert_eq!(p, path.display().to_string());
            assert!(w.contains(why), "`{msg}` should say `{why}`");
        }
        other => panic!("{}: expected File error, got {other:?}", path.display()),
    }
}

#[test]
fn bad_wav_files_are_named() {
    let text = scratch_file("not-a-wav.wav", b"this is not audio\n");
    file_error(audio::read_wav(&text), &text, "not a readable WAV");
    let empty = scratch_file("empty.wav", b"");
    file_error(audio::read_wav(&empty), &empty, "empty");
    let missing = scratch().join("missing.wav");
    file_error(audio::read_wav(&missing), &missing, "cannot read");
    // the data chunk cut short of what the header declares
    let cut = scratch_file("truncated.wav", &INPUT_WAV[..INPUT_WAV.len() / 2 + 1]);
    file_error(audio::read_wav(&cut), &cut, "truncated");
    // a header with no samples
    let silent = scratch().join("no-samples.wav");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 24_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    hound::WavWriter::create(&silent, spec).expect("create").finalize().expect("finalize");
    file_error(audio::read_wav(&silent), &silent, "no samples");
    // a NaN in a float WAV
    let nan = scratch().join("nan.wav");
    let spec = hound::WavSpec { bits_per_sample: 32, sample_format: hound::SampleFormat::Float, ..spec };
    let mut w = hound::WavWriter::create(&nan, spec).expect("create");
    for v in [0.0, 0.1, f32::NAN, 0.2] {
        w.write_sample(v).expect("sample");
    }
    w.finalize().expect("finalize");
    file_error(audio::read_wav(&nan), &nan, "sample 2 is not finite");
    // a sample rate no audio has
    let slow = scratch().join("10hz.wav");
    let spec = hound::WavSpec { sample_rate: 10, ..spec };
    let mut w = hound::WavWriter::create(&slow, spec).expect("create");
    w.write_sample(0.5f32).expect("sample");
    w.finalize().expect("finalize");
    file_error(audio::read_wav(&slow), &slow, "sample rate 10 Hz");
}

#[test]
fn mangled_wav_headers_give_errors_not_panics() {
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 44_100,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut cursor = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut cursor, spec).expect("WAV writer");
    for i in 0..2000 {
        w.write_sample(((i * 37) % 2000 - 1000) as i16).expect("sample");
    }
    w.finalize().expect("finalize");
    let wav = cursor.into_inner();
    assert_eq!(audio::read_wav(scratch_file("mangled.wav", &wav)).expect("the unmangled WAV").len(), 545);
    let mut cases: Vec<Vec<u8>> = (0..wav.len()).step_by(7).map(|n| wav[..n].to_vec()).collect();
    for at in 0..48 {
        for v in [0x00, 0xff, 0x01, 0x80, 0x7f] {
            let mut b = wav.clone();
            b[at] = v;
            cases.push(b);
        }
    }
    let (mut ok, mut refused) = (0, 0);
    for bytes in cases {
        let p = scratch_file("mangled.wav", &bytes);
        match audio::read_wav(&p) {
            Ok(pcm) => {
                assert!(pcm.iter().all(|v| v.is_finite()));
                ok += 1
            }
            Err(Error::File { path, .. }) if path == p.display().to_string() => refused += 1,
            Err(e) => panic!("expected a File error, got {e:?}"),
        }
    }
    eprintln!("mangled WAVs: {ok} read, {refused} refused");
    assert!(ok > 0 && refused > 100);
}

// --- codes files --------------------------------------------------------------------------

fn write_npy<T: npyz::Serialize + npyz::AutoSerialize>(name: &str, shape: &[u64], v: Vec<T>) -> PathBuf {
    let p = scratch().join(name);
    let mut w = npyz::WriteOptions::<T>::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(std::fs::File::create(&p).expect("create")))
        .begin_nd()
        .expect("npy writer");
    w.extend(v).expect("npy data");
    w.finish().expect("npy finish");
    p
}

#[test]
fn bad_codes_files_are_refused() {
    let seven = write_npy("seven.npy", &[3, 7], vec![1i64; 21]);
    file_error(audio::read_codes(&seven, 8, 2048), &seven, "the file has 7 codebooks per frame, the codec runs 8");

    let mut v = vec![5i64; 24];
    v[2 * 8 + 3] = 2048;
    let big = write_npy("big.npy", &[3, 8], v);
    assert!(matches!(
        audio::read_codes(&big, 8, 2048),
        Err(Error::CodeOutOfRange { frame: 2, codebook: 3, code: 2048, bins: 2048 })
    ));

    let mut v = vec![5i32; 16];
    v[9] = -1;
    let negative = write_npy("negative.npy", &[2, 8], v);
    match audio::read_codes(&negative, 8, 2048) {
        Err(e @ Error::CodeOutOfRange { frame: 1, codebook: 1, code: -1, bins: 2048 }) => {
            assert!(e.to_string().contains("code -1 at frame 1, codebook 1"), "{e}")
        }
        other => panic!("expected CodeOutOfRange, got {other:?}"),
    }

    let flat = write_npy("flat.npy", &[8], vec![1i64; 8]);
    file_error(audio::read_codes(&flat, 8, 2048), &flat, "2-D");
    let cube = write_npy("cube.npy", &[1, 2, 8], vec![1i64; 16]);
    file_error(audio::read_codes(&cube, 8, 2048), &cube, "2-D");
    let floats = write_npy("floats.npy", &[2, 8], vec![1.0f32; 16]);
    file_error(audio::read_codes(&floats, 8, 2048), &floats, "integers");

    let text = scratch_file("text.npy", b"1 2 3 4 5 6 7 8\n");
    file_error(audio::read_codes(&text, 8, 2048), &text, "not a NumPy .npy file");
    let empty = scratch_file("empty.npy", b"");
    file_error(audio::read_codes(&empty, 8, 2048), &empty, "empty");
    let missing = scratch().join("missing.npy");
    file_error(audio::read_codes(&missing, 8, 2048), &missing, "cannot read");
    // data cut short of the header's shape
    let whole = std::fs::read(&big).expect("read");
    let cut = scratch_file("cut.npy", &whole[..whole.len() - 8]);
    file_error(audio::read_codes(&cut, 8, 2048), &cut, "truncated");
    // a header whose shape overflows
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 8), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    let overflow = scratch_file("overflow.npy", &bytes);
    file_error(audio::read_codes(&overflow, 8, 2048), &overflow, "too large");
    // a huge shape with no data behind it
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (1000000000000, 8), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    let hollow = scratch_file("hollow.npy", &bytes);
    file_error(audio::read_codes(&hollow, 8, 2048), &hollow, "truncated");
}

// --- the GPU codec ------------------------------------------------------------------------

/// Encode frames 0..3 of the reference clip, then decode their reference codes; with
/// `refuse`, bad frames and codes are offered between the good ones and must be refused.
async fn stream(mimi: &mut Mimi, g: &Golden, refuse: bool) -> (Vec<Vec<u32>>, Vec<f32>) {
    let fs = mimi.frame_size();
    let frame = |f: usize| &g.pcm[f * fs..(f + 1) * fs];
    let mut codes = Vec::new();
    if refuse {
        match mimi.encode_frame(&frame(0)[..fs - 1]).await {
            Err(e @ Error::Input(_)) => assert!(e.to_string().contains("1919"), "{e}"),
            other => panic!("1919 samples: expected Input, got {other:?}"),
        }
    }
    codes.push(mimi.encode_frame(frame(0)).await.expect("encode after a short frame"));
    if refuse {
        let mut nan = frame(1).to_vec();
        nan[700] = f32::NAN;
        match mimi.encode_frame(&nan).await {
            Err(e @ Error::Input(_)) => assert!(e.to_string().contains("sample 700"), "{e}"),
            other => panic!("NaN: expected Input, got {other:?}"),
        }
        let mut inf = frame(1).to_vec();
        inf[0] = f32::INFINITY;
        assert!(matches!(mimi.encode_frame(&inf).await, Err(Error::Input(_))));
    }
    codes.push(mimi.encode_frame(frame(1)).await.expect("encode after a NaN"));
    if refuse {
        assert!(matches!(mimi.encode_frame(&vec![0.0; fs + 1]).await, Err(Error::Input(_))));
        assert!(matches!(mimi.encode_frame(&[]).await, Err(Error::Input(_))));
    }
    codes.push(mimi.encode_frame(frame(2)).await.expect("encode after an oversized frame"));

    let mut pcm = Vec::new();
    if refuse {
        match mimi.decode_frame(0, &g.codes[0][..7]).await {
            Err(e @ Error::Input(_)) => assert!(e.to_string().contains("7 codes"), "{e}"),
            other => panic!("7 codes: expected Input, got {other:?}"),
        }
    }
    pcm.extend(mimi.decode_frame(0, &g.codes[0]).await.expect("decode after 7 codes"));
    if refuse {
        let mut bad = g.codes[1].clone();
        bad[5] = 5000;
        match mimi.decode_frame(1, &bad).await {
            Err(e @ Error::CodeOutOfRange { frame: 1, codebook: 5, code: 5000, bins: 2048 }) => {
                assert!(e.to_string().contains("code 5000"), "{e}")
            }
            other => panic!("code 5000: expected CodeOutOfRange, got {other:?}"),
        }
    }
    pcm.extend(mimi.decode_frame(1, &g.codes[1]).await.expect("decode after a code 5000"));
    if refuse {
        assert!(matches!(mimi.decode_frame(2, &[0; 9]).await, Err(Error::Input(_))));
        assert!(matches!(mimi.read_tap("no-such-tap").await, Err(Error::Input(_))));
    }
    pcm.extend(mimi.decode_frame(2, &g.codes[2]).await.expect("decode after 9 codes"));
    (codes, pcm)
}

#[test]
fn the_gpu_codec_refuses_bad_frames_and_keeps_working() {
    pollster::block_on(async {
        let g = golden();
        let weights = load(checkpoint()).expect("synthetic checkpoint");
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        eprintln!("adapter: {}", ctx.info);
        let mut mimi = Mimi::new(ctx, &weights).await.expect("plans");
        drop(weights);

        // Every refusal comes before any GPU work: the streams go on as if it never came.
        let (codes, pcm) = stream(&mut mimi, &g, true).await;
        mimi.reset();
        let (clean_codes, clean_pcm) = stream(&mut mimi, &g, false).await;
        assert_eq!(codes, clean_codes, "the refusals changed the encode stream");
        assert_eq!(pcm, clean_pcm, "the refusals changed the decode stream");

        eprintln!("encode after refusals vs reference: {:?}", code_gate(&codes, &g.codes[..3]));
        let snr = snr_db(&pcm, &g.decoded[..pcm.len()]);
        eprintln!("decode after refusals, SNR vs reference: {snr:.1} dB");
        assert!(snr >= 40.0, "decode SNR {snr:.1} dB < 40 dB");
    });
}
