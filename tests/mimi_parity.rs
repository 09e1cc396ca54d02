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
