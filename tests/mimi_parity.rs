//! Mimi parity with Kyutai's PyTorch reference (moshi 0.2.13), natively: the GPU plans on
//! whatever adapter wgpu finds (Mesa's lavapipe where there is no GPU) and the CPU oracle,
//! both on the reference's own synthetic weights regenerated from the seed, written as a
//! safetensors file and loaded through the real loader.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;
use std::sync::OnceLock;

use common::*;
use inferencelayer::{GpuContext, Mimi, MimiConfig, MimiCpu, MimiWeights};
use sha2::{Digest, Sha256};

/// The checkpoint as a file on disk, written once per test process.
fn checkpoint_file() -> &'static std::path::Path {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("mimi-synthetic-{}.safetensors", std::process::id()));
        std::fs::write(&path, checkpoint_bytes()).expect("write checkpoint");
        path
    })
}

fn load(codebooks: usize) -> MimiWeights {
    let bytes = std::fs::read(checkpoint_file()).expect("read checkpoint");
    MimiWeights::from_safetensors(&MimiConfig::with_codebooks(codebooks).unwrap(), &bytes).expect("load checkpoint")
}

fn weights() -> &'static MimiWeights {
    static W: OnceLock<MimiWeights> = OnceLock::new();
    W.get_or_init(|| load(8))
}

#[test]
fn synthetic_checkpoint_matches_the_reference_tensor_by_tensor() {
    let bytes = checkpoint_bytes();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let want: Vec<serde_json::Value> = serde_json::from_str(TENSORS_JSON).unwrap();
    assert_eq!(st.len(), want.len(), "tensor count");
    for t in &want {
        let name = t["name"].as_str().unwrap();
        let view = st.tensor(name).unwrap_or_else(|_| panic!("missing {name}"));
        let shape: Vec<usize> = t["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(view.shape(), &shape[..], "{name}");
        let sha = format!("{:x}", Sha256::digest(view.data()));
        assert_eq!(sha, t["sha256"].as_str().unwrap(), "{name} differs from the reference's weights");
    }
}

#[test]
fn gpu_streaming_encode_and_decode_match_the_reference() {
    pollster::block_on(async {
        let g = golden();
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        eprintln!("adapter: {}", ctx.info);
        let mut mimi = Mimi::new(ctx.clone(), weights()).await.expect("plans");
        let fs = mimi.frame_size();
        let mut codes = Vec::new();
        let mut worst_latent = 0f32;
        for (f, frame) in g.pcm.chunks_exact(fs).enumerate() {
            codes.push(mimi.encode_frame(frame).await.expect("encode"));
            let lat = mimi.read_tap("latent").await.unwrap();
            worst_latent = worst_latent.max(max_abs_diff(&lat, &g.latent[f * 512..(f + 1) * 512]));
        }
        eprintln!("largest latent difference vs reference: {worst_latent:e}");
        let agreement = code_gate(&codes, &g.codes);
        eprintln!("GPU encode: {agreement:?}");
        assert!(agreement.is_ok());

        let mut pcm = Vec::new();
        for (f, c) in g.codes.iter().enumerate() {
            pcm.extend(mimi.decode_frame(f, c).await.expect("decode"));
        }
        let snr = snr_db(&pcm, &g.decoded);
        eprintln!("GPU decode SNR vs reference: {snr:.1} dB");
        assert!(snr >= 40.0, "decode SNR {snr:.1} dB < 40 dB");

        // reset starts a new stream: the first frames come out again
        mimi.reset();
        let again = mimi.encode_frame(&g.pcm[..fs]).await.unwrap();
        assert_eq!(again, codes[0], "reset must restore the start-of-stream state");
    });
}

#[test]
fn cpu_oracle_matches_the_reference() {
    let g = golden();
    let mut cpu = MimiCpu::new(weights());
    let mut codes = Vec::new();
    let mut worst_latent = 0f32;
    for (f, frame) in g.pcm.chunks_exact(1920).enumerate() {
        let lat = cpu.encode_latent(frame).unwrap();
        worst_latent = worst_latent.max(max_abs_diff(&lat, &g.latent[f * 512..(f + 1) * 512]));
        codes.push(weights().quantizer.encode(&lat));
    }
    eprintln!("CPU largest latent difference vs reference: {worst_latent:e}");
    let agreement = code_gate(&codes, &g.codes);
    eprintln!("CPU encode: {agreement:?}");
    assert!(agreement.is_ok());
    cpu.reset();
    let mut pcm = Vec::new();
    for (f, c) in g.codes.iter().enumerate() {
        pcm.extend(cpu.decode_frame(f, c).unwrap());
    }
    let snr = snr_db(&pcm, &g.decoded);
    eprintln!("CPU decode SNR vs reference: {snr:.1} dB");
    assert!(snr >= 40.0, "decode SNR {snr:.1} dB < 40 dB");
}

/// Any codebook count up to 32: RVQ levels are nested, so the first 8 of 32 codes are the
/// 8-codebook codes; the GPU plan agrees with the CPU oracle on all 32; 1 codebook works.
#[test]
fn codebook_counts_from_1_to_32() {
    pollster::block_on(async {
        let g = golden();
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        for n in [32usize, 1] {
            let w = load(n);
            let mut gpu = Mimi::new(ctx.clone(), &w).await.expect("plans");
            let mut cpu = MimiCpu::new(&w);
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for frame in g.pcm.chunks_exact(1920).take(6) {
                got.push(gpu.encode_frame(frame).await.unwrap());
                want.push(cpu.encode_frame(frame).unwrap());
            }
            assert_eq!(got[0].len(), n);
            let agreement = code_gate(&got, &want);
            eprintln!("{n} codebooks, GPU vs CPU oracle: {agreement:?}");
            assert!(agreement.is_ok());
            for (f, codes) in got.iter().enumerate() {
                let k = n.min(8);
                assert_eq!(&codes[..k], &g.codes[f][..k], "frame {f}: the first {k} codes must be the 8-codebook codes");
            }
            let pcm = gpu.decode_frame(0, &got[0]).await.unwrap();
            let reference = cpu.decode_frame(0, &want[0]).unwrap();
            let snr = snr_db(&pcm, &reference);
            assert!(snr >= 40.0, "{n} codebooks: decode SNR {snr:.1} dB");
        }
    });
}

/// SEANet's ELUs applied where the convs load their inputs (`INFERENCELAYER_CONV_ELU=load`,
/// `PlanBuilder::set_elu_on_store(false)`) and where the convs before them store their outputs
/// (the default), on the reference's weights: the encoder's and decoder's plans each give the
/// CPU oracle's outputs (`SeanetEncoder::step`, `SeanetDecoder::step`) over three frames of
/// the golden speech, and the two placements give each other's.
#[test]
fn seanet_elus_on_load_and_on_store_match_the_cpu_oracle() {
    use inferencelayer::gpu::{FrameParams, PlanBuilder, Tensor};
    pollster::block_on(async {
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        let w = weights();
        let (fs, dim) = (w.config.frame_size(), w.config.seanet.dimension);
        let t = fs / w.config.hop_length();
        let pcm_all = golden().pcm;
        let mut outs: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
        for store in [false, true] {
            let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
            let pcm = Tensor { buf: ctx.zeros("pcm", fs).unwrap(), shape: vec![1, fs] };
            let latent = Tensor { buf: ctx.zeros("latent", t * dim).unwrap(), shape: vec![t, dim] };
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_elu_on_store(store);
            assert_eq!(b.elu_on_store(), store);
            let enc = w.encoder.plan(&mut b, &pcm).unwrap();
            let dec = w.decoder.plan(&mut b, &latent).unwrap();
            assert_eq!((&enc.shape[..], &dec.shape[..]), (&[t, dim][..], &[1, fs][..]));
            let (plan, _, _) = b.finish();
            let (mut enc_st, mut dec_st) = (w.encoder.state(), w.decoder.state());
            let (mut enc_all, mut dec_all) = (Vec::new(), Vec::new());
            for f in 0..3usize {
                let x = &pcm_all[f * fs..(f + 1) * fs];
                // the CPU encoder's output [dim, t] is the decoder's input, time-major
                let want_enc = w.encoder.step(&mut enc_st, x);
                let lat: Vec<f32> = (0..t * dim).map(|i| want_enc[(i % dim) * t + i / dim]).collect();
                let want_dec = w.decoder.step(&mut dec_st, &want_enc);
                ctx.queue.write_buffer(&pcm.buf, 0, bytemuck::cast_slice(x));
                ctx.queue.write_buffer(&latent.buf, 0, bytemuck::cast_slice(&lat));
                let fp = FrameParams { pos: f as u32, first: (f == 0) as u32, index: f as u32, _pad: 0 };
                ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&fp));
                let mut e = ctx.device.create_command_encoder(&Default::default());
                {
                    let mut pass = e.begin_compute_pass(&Default::default());
                    plan.record(&mut pass);
                }
                ctx.queue.submit([e.finish()]);
                let got_enc = ctx.read_f32(&enc.buf, t * dim).await.unwrap();
                let got_dec = ctx.read_f32(&dec.buf, fs).await.unwrap();
                let (se, sd) = (snr_db(&got_enc, &lat), snr_db(&got_dec, &want_dec));
                eprintln!("ELUs on {}: frame {f}, encoder {se:.1} dB, decoder {sd:.1} dB from the CPU oracle", if store { "store" } else { "load" });
                assert!(se > 90.0 && sd > 90.0, "ELUs on {}, frame {f}: encoder {se:.1} dB, decoder {sd:.1} dB", if store { "store" } else { "load" });
                enc_all.extend(got_enc);
                dec_all.extend(got_dec);
            }
            outs.push((enc_all, dec_all));
        }
        let (se, sd) = (snr_db(&outs[0].0, &outs[1].0), snr_db(&outs[0].1, &outs[1].1));
        eprintln!("ELUs on load against on store: encoder {se:.1} dB, decoder {sd:.1} dB");
        assert!(se > 90.0 && sd > 90.0, "on load against on store: encoder {se:.1} dB, decoder {sd:.1} dB");
    });
}
