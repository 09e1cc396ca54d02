//! The worker-side wasm bindings given malformed input in a real browser (headless Chromium,
//! `wasm-pack test --headless --chrome`): checkpoint bytes, config JSON, tokenizer bytes and
//! frames through `MimiCodec`, `MoshiSession`, `mimiCpuRoundtrip` and `StreamResampler`,
//! generated here from a seed. Each must reject with an `Error` carrying a message, never
//! trap; the codec built once on WebGPU keeps working after every bad frame. Small inputs
//! (a reduced Mimi of a few hundred kB): most cases are refused before any GPU work.
#![cfg(target_arch = "wasm32")]

#[path = "common/fixtures.rs"]
mod fixtures;

use fixtures::Rng;
use inferencelayer::web::{mimi_cpu_roundtrip, MimiCodec, MoshiSession, StreamResampler};
use inferencelayer::weights::synthetic::{self, CodebookStats};
use inferencelayer::MimiConfig;
use wasm_bindgen::{JsError, JsValue};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const TINY_MIMI: &str = r#"{"seanet": {"dimension": 32, "n_filters": 4, "ratios": [8, 6, 5, 4]},
 "transformer": {"d_model": 32, "num_heads": 2, "num_layers": 1, "dim_feedforward": 64, "input_dimension": 32, "output_dimensions": [32]},
 "quantizer": {"dimension": 16, "n_q": 4, "bins": 16, "input_dimension": 32, "output_dimension": 32}, "num_codebooks": 4}"#;

fn checkpoint() -> Vec<u8> {
    let c = MimiConfig::from_json(TINY_MIMI).unwrap();
    synthetic::checkpoint(&c.tensor_specs(), synthetic::SEED, &CodebookStats::unit(4, 16)).unwrap()
}

/// The message of a refusal; a refusal without one fails.
fn message(e: JsError) -> String {
    let v = JsValue::from(e);
    let m = js_sys::Error::from(v).message().as_string().unwrap_or_default();
    assert!(!m.trim().is_empty(), "a refusal without a message");
    m
}

/// Bad configs: not JSON, wrong types, unknown keys, zero and huge sizes.
fn bad_configs() -> Vec<String> {
    let mut v: Vec<String> = ["", "{", "[]", "null", "42", r#"{"seanet": 1}"#, r#"{"seanet": [1]}"#, r#"{"num_codebooks": 0}"#,
        r#"{"num_codebooks": 33}"#, r#"{"num_codebooks": -1}"#, r#"{"num_codebooks": "8"}"#, r#"{"sample_rate": 0}"#,
        r#"{"frame_rate": 0}"#, r#"{"unknown": 1}"#, r#"{"seanet": {"dimensions": 32}}"#, r#"{"seanet": {"ratios": []}}"#,
        r#"{"seanet": {"ratios": [0]}}"#, r#"{"seanet": {"n_filters": 1099511627776}}"#, r#"{"transformer": {"num_heads": 0}}"#,
        r#"{"quantizer": {"bins": 0}}"#, r#"{"channels": 2}"#]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // the tiny config cut short
    v.extend((0..TINY_MIMI.len()).step_by(29).map(|n| TINY_MIMI[..n].to_string()));
    v
}

/// Bad checkpoint bytes: truncations, header bit flips, garbage.
fn bad_checkpoints(base: &[u8], rng: &mut Rng) -> Vec<Vec<u8>> {
    let hlen = 8 + u64::from_le_bytes(base[..8].try_into().unwrap()) as usize;
    let mut v = vec![vec![], b"GGUF".to_vec(), vec![0xff; 64], b"not a checkpoint".to_vec()];
    for _ in 0..20 {
        v.push(base[..rng.below(base.len())].to_vec());
    }
    for _ in 0..20 {
        let mut f = base.to_vec();
        f[rng.below(hlen)] ^= 1 << rng.below(8);
        v.push(f);
    }
    v
}

#[wasm_bindgen_test]
async fn the_bindings_refuse_malformed_input_with_an_error() {
    let mut rng = Rng(0x6d61_6c66);
    let base = checkpoint();
    let mut counts: Vec<(&str, usize)> = Vec::new();
    let mut count = |what: &'static str| match counts.iter_mut().find(|c| c.0 == what) {
        Some(c) => c.1 += 1,
        None => counts.push((what, 1)),
    };

    // MimiCodec.create: bad configs with good bytes, bad bytes with the good config; all
    // refused before a GPU device is asked for
    for config in bad_configs() {
        let e = MimiCodec::create(base.clone(), Some(config.clone())).await.err().unwrap_or_else(|| panic!("config {config:?} accepted"));
        message(e);
        count("MimiCodec.create");
    }
    for bytes in bad_checkpoints(&base, &mut rng) {
        let e = MimiCodec::create(bytes, Some(TINY_MIMI.into())).await.err().expect("bad bytes accepted");
        message(e);
        count("MimiCodec.create");
    }
    // the released codec's config for the tiny file: a shape mismatch, which says to pass
    // the config the checkpoint was made with
    let m = message(MimiCodec::create(base.clone(), None).await.err().expect("the released config accepted the tiny file"));
    assert!(m.contains("pass as `mimiConfig` the config JSON"), "{m}");
    count("MimiCodec.create");

    // mimiCpuRoundtrip: bad bytes, bad configs, partial frames
    for bytes in bad_checkpoints(&base, &mut rng) {
        message(mimi_cpu_roundtrip(&bytes, Some(TINY_MIMI.into()), &[0.0; 1920]).expect_err("bad bytes accepted"));
        count("mimiCpuRoundtrip");
    }
    for config in bad_configs() {
        message(mimi_cpu_roundtrip(&base, Some(config), &[0.0; 1920]).expect_err("bad config accepted"));
        count("mimiCpuRoundtrip");
    }
    for n in [1, 1919, 1921, 3839] {
        message(mimi_cpu_roundtrip(&base, Some(TINY_MIMI.into()), &vec![0.0; n]).expect_err("a partial frame accepted"));
        count("mimiCpuRoundtrip");
    }

    // MoshiSession.create: bad configs and tokenizer bytes, refused before any GPU work
    let lm_bad = [r#"{"dims": 64}"#, "[]", "{", r#"{"num_heads": 0}"#, r#"{"n_q": 4}"#, r#"{"delays": "0"}"#, r#"{"dim": -1}"#];
    for lc in lm_bad {
        let e = MoshiSession::create(base.clone(), Some(TINY_MIMI.into()), vec![0; 16], Some(lc.into()), None, 0, false).await;
        let m = message(e.err().expect("a bad LM config accepted"));
        assert!(m.contains("config"), "{m}");
        count("MoshiSession.create");
    }
    for config in bad_configs().into_iter().take(10) {
        let e = MoshiSession::create(base.clone(), Some(config), vec![0; 16], None, None, 0, false).await;
        message(e.err().expect("a bad Mimi config accepted"));
        count("MoshiSession.create");
    }
    for tok in [vec![], vec![0xff; 32], b"not a sentencepiece model".to_vec()] {
        let e = MoshiSession::create(base.clone(), Some(TINY_MIMI.into()), vec![0; 16], None, Some(tok), 0, false).await;
        message(e.err().expect("bad tokenizer bytes accepted"));
        count("MoshiSession.create");
    }

    // StreamResampler: zero rates
    for (from, to) in [(0, 24000), (48000, 0), (0, 0)] {
        message(StreamResampler::new(from, to).err().expect("a zero rate accepted"));
        count("StreamResampler");
    }

    // one codec on WebGPU: wrong frames are refused and it goes on working
    let mut codec = MimiCodec::create(base.clone(), Some(TINY_MIMI.into())).await.map_err(message).expect("the tiny codec");
    let fs = codec.frame_size();
    for n in [0, 1, fs - 1, fs + 1, 2 * fs] {
        message(codec.encode(vec![0.1; n]).await.expect_err("a wrong-length frame accepted"));
        count("MimiCodec.encode");
    }
    for codes in [vec![], vec![0; 3], vec![0; 5], vec![16, 0, 0, 0], vec![0, 0, 0, u32::MAX]] {
        message(codec.decode(codes).await.expect_err("bad codes accepted"));
        count("MimiCodec.decode");
    }
    let pcm: Vec<f32> = (0..fs).map(|i| 0.2 * (i as f32 * 0.05).sin()).collect();
    let codes = codec.encode(pcm).await.map_err(message).expect("a good frame after the bad ones");
    assert_eq!(codes.len(), 4);
    assert_eq!(codec.decode(codes).await.map_err(message).expect("decode").len(), fs);

    let total: usize = counts.iter().map(|c| c.1).sum();
    console_log!("wasm bindings: {total} malformed inputs refused: {counts:?}");
    assert!(total >= 150, "{total} cases");
}
