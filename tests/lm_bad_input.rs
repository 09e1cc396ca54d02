//! The Moshi LM refuses bad input with an error that names what is wrong, and keeps working
//! after it: a config whose shapes disagree with the checkpoint (`Error::Shape` naming the
//! tensor), a checkpoint missing a tensor (`Error::MissingTensor`), an invalid config
//! (`Error::Config` naming the field), user codes out of range or of the wrong count into
//! `LmGen::input`, tokens out of range or of the wrong count into `Lm::step` and
//! `LmCpu::step` (`Error::Input`). The checkpoint is the parity tests' reduced geometry,
//! regenerated from the seed.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;

use common::moshi::*;
use inferencelayer::moshi::synthetic::synthetic_weights;
use inferencelayer::moshi::{Lm, LmConfig, LmCpu, LmGen, LmWeights, Sampling};
use inferencelayer::weights::synthetic::{lm_checkpoint, SEED};
use inferencelayer::{Error, GpuContext};

fn golden_config() -> LmConfig {
    LmConfig::from_json(CONFIG_JSON).expect("golden config")
}

/// The golden config with `edit` applied to its JSON object.
fn config_json(edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(CONFIG_JSON).unwrap();
    edit(v.as_object_mut().unwrap());
    v.to_string()
}

#[test]
fn config_shapes_disagreeing_with_the_checkpoint_name_the_tensor() {
    let bytes = lm_checkpoint_bytes(&golden_config());

    // dim 160 against the 128 of the checkpoint (hidden_scale 4.2 keeps the config valid:
    // int(4.2 * 160) = 672, hidden 448): the first tensor read is the first audio embedding.
    let wide = LmConfig::from_json(&config_json(|m| {
        m.insert("dim".into(), 160.into());
        m.insert("hidden_scale".into(), 4.2.into());
    }))
    .expect("a valid config");
    let e = LmWeights::from_safetensors(&wide, &bytes).err().expect("dim 160 must not load");
    eprintln!("{e}");
    match &e {
        Error::Shape { name, expected, found } => {
            assert_eq!(name, "emb.0.weight");
            assert_eq!((expected.as_slice(), found.as_slice()), (&[65, 160][..], &[65, 128][..]));
        }
        other => panic!("expected Error::Shape, got {other:?}"),
    }
    assert!(e.to_string().contains("emb.0.weight") && e.to_string().contains("160"), "{e}");

    // a wider temporal FFN (hidden 384 against 352): found deep in the first layer
    let ffn = LmConfig::from_json(&config_json(|m| {
        m.insert("hidden_scale".into(), 4.5.into());
    }))
    .expect("a valid config");
    match LmWeights::from_safetensors(&ffn, &bytes).err() {
        Some(Error::Shape { name, expected, found }) => {
            assert_eq!(name, "transformer.layers.0.gating.linear_in.weight");
            assert_eq!((expected, found), (vec![768, 128], vec![704, 128]));
        }
        other => panic!("expected Error::Shape, got {other:?}"),
    }

    // a larger text vocabulary
    let text = LmConfig::from_json(&config_json(|m| {
        m.insert("text_card".into(), 100.into());
    }))
    .unwrap();
    match LmWeights::from_safetensors(&text, &bytes).err() {
        Some(Error::Shape { name, .. }) => assert_eq!(name, "text_emb.weight"),
        other => panic!("expected Error::Shape, got {other:?}"),
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let config = golden_config();
    for missing in ["depformer.layers.1.gating.5.linear_out.weight", "text_emb.weight", "linears.7.weight", "out_norm.alpha"] {
        let specs: Vec<_> = config.tensor_specs().into_iter().filter(|(n, _)| n != missing).collect();
        let bytes = lm_checkpoint(&specs, SEED).unwrap();
        match LmWeights::from_safetensors(&config, &bytes).err() {
            Some(Error::MissingTensor(name)) => assert_eq!(name, missing),
            other => panic!("without {missing}: expected Error::MissingTensor, got {other:?}"),
        }
    }
    // a depformer with more layers than the checkpoint holds
    let deeper = LmConfig { depformer_num_layers: 3, ..config };
    let bytes = lm_checkpoint_bytes(&golden_config());
    let e = LmWeights::from_safetensors(&deeper, &bytes).err().expect("3 depformer layers must not load");
    assert!(matches!(&e, Error::MissingTensor(n) if n == "depformer.layers.2.norm1.alpha"), "{e:?}");
    // not a checkpoint at all
    assert!(matches!(LmWeights::from_safetensors(&golden_config(), b"not safetensors"), Err(Error::Checkpoint(_))));
}

#[test]
fn invalid_configs_name_the_field() {
    let bytes = lm_checkpoint_bytes(&golden_config());
    type Edit = Box<dyn Fn(&mut LmConfig)>;
    let cases: [(&str, Edit, &str); 6] = [
        ("dim not divisible by num_heads", Box::new(|c| c.num_heads = 5), "num_heads"),
        ("odd head dim", Box::new(|c| c.num_heads = 128), "num_heads"),
        ("16 delays for 17 streams", Box::new(|c| { c.delays.pop(); }), "delays"),
        // int(4.2 * 128) = 537, hidden 2 * 537 / 3 = 358: not whole Q8_0 blocks
        ("hidden not a multiple of 32", Box::new(|c| c.hidden_scale = 4.2), "hidden_scale"),
        ("dep_q above n_q", Box::new(|c| c.dep_q = 17), "dep_q"),
        ("depformer heads", Box::new(|c| c.depformer_num_heads = 3), "depformer_num_heads"),
    ];
    for (what, edit, field) in cases {
        let mut c = golden_config();
        edit(&mut c);
        let check = |e: Option<Error>, path: &str| match e {
            Some(Error::Config { field: f, why }) => {
                assert_eq!(f, field, "{what} ({path}): {why}");
                eprintln!("{what} ({path}): {}", Error::Config { field: f.clone(), why: why.clone() });
            }
            other => panic!("{what} ({path}): expected Error::Config, got {other:?}"),
        };
        check(LmConfig::from_json(&serde_json::to_string(&c).unwrap()).err(), "from_json");
        check(LmWeights::from_safetensors(&c, &bytes).err(), "load");
        check(synthetic_weights(&c, SEED).err(), "synthetic");
    }
    // not JSON, and a key of the wrong type
    assert!(matches!(LmConfig::from_json("{"), Err(Error::Config { .. })));
    assert!(matches!(LmConfig::from_json(r#"{"dim": "wide"}"#), Err(Error::Config { .. })));
}

#[test]
fn user_codes_out_of_range_or_of_the_wrong_count_are_refused() {
    let config = golden_config();
    let mut gen = LmGen::new(&config);
    let ok = gen.input(&[1, 2, 3, 4, 5, 6, 7, 8]).expect("codes below card");
    assert_eq!(ok.len(), 17);
    gen.output(&[0; 9]);
    match gen.input(&[1, 2, 3, 64, 5, 6, 7, 8]) {
        Err(Error::CodeOutOfRange { frame, codebook, code, bins }) => {
            assert_eq!((frame, codebook, code, bins), (1, 3, 64, 64));
        }
        other => panic!("expected Error::CodeOutOfRange, got {other:?}"),
    }
    assert!(matches!(gen.input(&[u32::MAX; 8]), Err(Error::CodeOutOfRange { codebook: 0, .. })));
    for n in [0, 7, 9, 16] {
        let e = gen.input(&vec![0; n]).err();
        assert!(matches!(&e, Some(Error::Input(m)) if m.contains("8 user audio codes")), "{n} codes: {e:?}");
    }
    // the refused calls left the stream where it was
    assert_eq!(gen.offset(), 1);
    assert!(gen.input(&[0; 8]).is_ok());
}

/// Tokens a frame must not take: wrong count, text at or above `text_card + 1`, audio at or
/// above `card + 1`, below -1.
fn bad_frames(config: &LmConfig) -> Vec<(String, Vec<i32>)> {
    let n = 1 + config.n_q;
    let mut v = Vec::new();
    v.push(("16 tokens".to_string(), vec![0; n - 1]));
    v.push(("18 tokens".to_string(), vec![0; n + 1]));
    let mut t = vec![0; n];
    t[0] = config.text_card as i32 + 1;
    v.push(("text token text_card + 1".to_string(), t));
    let mut t = vec![0; n];
    t[5] = config.card as i32 + 1;
    v.push(("audio token card + 1".to_string(), t));
    let mut t = vec![0; n];
    t[16] = -2;
    v.push(("audio token -2".to_string(), t));
    let mut t = vec![0; n];
    t[0] = i32::MAX;
    v.push(("text token i32::MAX".to_string(), t));
    v
}

#[test]
fn cpu_lm_refuses_tokens_out_of_range_and_goes_on() {
    let g = lm_golden();
    let w = LmWeights::from_safetensors(&g.config, &lm_checkpoint_bytes(&g.config)).unwrap();
    let run = |with_bad: bool| {
        let mut lm = LmCpu::new(&w, Sampling::greedy());
        let mut gen = LmGen::new(&g.config);
        let mut out = Vec::new();
        for codes in g.user_codes.iter().take(6) {
            let input = gen.input(codes).unwrap();
            if with_bad {
                for (what, bad) in bad_frames(&g.config) {
                    let e = lm.step(&bad, None).err();
                    assert!(matches!(e, Some(Error::Input(_))), "{what}: {e:?}");
                }
            }
            out.extend(gen.output(&lm.step(&input, None).unwrap()));
        }
        out
    };
    let (clean, after_bad) = (run(false), run(true));
    assert_eq!(clean, after_bad, "refused frames must not disturb the stream");
    assert_eq!(&clean[..], &g.tokens[..clean.len()]);
}

#[test]
fn gpu_lm_refuses_tokens_out_of_range_and_goes_on() {
    pollster::block_on(async {
        let g = lm_golden();
        let w = LmWeights::from_safetensors(&g.config, &lm_checkpoint_bytes(&g.config)).unwrap();
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        let frames = 8;
        let mut runs = Vec::new();
        for with_bad in [false, true] {
            let mut lm = Lm::new(ctx.clone(), &w.upload(&ctx).unwrap(), Sampling::greedy()).await.expect("plan");
            let mut gen = LmGen::new(&g.config);
            let mut out = Vec::new();
            for (t, codes) in g.user_codes.iter().take(frames).enumerate() {
                let input = gen.input(codes).unwrap();
                if with_bad && t % 3 == 1 {
                    for (what, bad) in bad_frames(&g.config) {
                        match lm.step(&bad).await {
                            Err(Error::Input(m)) => {
                                if t == 1 {
                                    eprintln!("{what}: {m}");
                                }
                            }
                            other => panic!("{what}: expected Error::Input, got {other:?}"),
                        }
                    }
                }
                out.extend(gen.output(&lm.step(&input).await.expect("a good frame after bad ones")));
            }
            runs.push(out);
        }
        assert_eq!(runs[0].len(), frames - 1);
        assert_eq!(runs[0], runs[1], "greedy tokens after refused frames must equal a clean run's");
        assert_eq!(&runs[0][..], &g.tokens[..frames - 1], "and the reference's");
    });
}
