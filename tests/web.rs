//! The Mimi parity gates in a real browser: headless Chromium's WebGPU (SwiftShader where
//! there is no GPU), through `wasm-pack test --headless --chrome`. Same reference outputs,
//! same regenerated checkpoint, loaded through the same loader, as `tests/mimi_parity.rs`.
#![cfg(target_arch = "wasm32")]

mod common;

use std::rc::Rc;

use common::*;
use inferencelayer::{GpuContext, Mimi, MimiConfig, MimiCpu, MimiWeights};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn weights() -> MimiWeights {
    let bytes = checkpoint_bytes();
    MimiWeights::from_safetensors(&MimiConfig::default(), &bytes).expect("load checkpoint")
}

#[wasm_bindgen_test]
async fn browser_gpu_and_cpu_match_the_reference() {
    let g = golden();
    let w = weights();
    let ctx = Rc::new(GpuContext::new().await.expect("WebGPU adapter (Chromium needs --enable-unsafe-webgpu)"));
    console_log!("adapter: {}", ctx.info);
    let mut mimi = Mimi::new(ctx.clone(), &w).await.expect("plans");
    let fs = mimi.frame_size();

    let mut codes = Vec::new();
    for frame in g.pcm.chunks_exact(fs) {
        codes.push(mimi.encode_frame(frame).await.expect("encode"));
    }
    let agreement = code_gate(&codes, &g.codes);
    console_log!("browser GPU encode: {agreement:?}");
    assert!(agreement.is_ok());
    let mut pcm = Vec::new();
    for (f, c) in g.codes.iter().enumerate() {
        pcm.extend(mimi.decode_frame(f, c).await.expect("decode"));
    }
    let snr = snr_db(&pcm, &g.decoded);
    console_log!("browser GPU decode SNR vs reference: {snr:.1} dB");
    assert!(snr >= 40.0, "decode SNR {snr:.1} dB < 40 dB");

    let mut cpu = MimiCpu::new(&w);
    let codes: Vec<Vec<u32>> = g.pcm.chunks_exact(fs).map(|f| cpu.encode_frame(f).unwrap()).collect();
    let agreement = code_gate(&codes, &g.codes);
    console_log!("browser CPU encode: {agreement:?}");
    assert!(agreement.is_ok());
    let mut pcm = Vec::new();
    for (f, c) in g.codes.iter().enumerate() {
        pcm.extend(cpu.decode_frame(f, c).unwrap());
    }
    let snr = snr_db(&pcm, &g.decoded);
    console_log!("browser CPU decode SNR vs reference: {snr:.1} dB");
    assert!(snr >= 40.0, "CPU decode SNR {snr:.1} dB < 40 dB");
}

#[wasm_bindgen_test]
async fn browser_moshi_lm_greedy_matches_the_reference() {
    use common::moshi::*;
    use inferencelayer::moshi::{Lm, LmGen, LmWeights, Sampling};
    let g = lm_golden();
    let w = LmWeights::from_safetensors(&g.config, &lm_checkpoint_bytes(&g.config)).expect("load LM checkpoint");
    let ctx = Rc::new(GpuContext::new().await.expect("WebGPU adapter"));
    let gw = w.upload(&ctx).expect("upload");
    let mut lm = Lm::new(ctx, &gw, Sampling::greedy()).await.expect("plan");
    let mut gen = LmGen::new(&g.config);
    let mut out = Vec::new();
    for codes in &g.user_codes {
        let input = gen.input(codes).unwrap();
        if let Some(row) = gen.output(&lm.step(&input).await.unwrap()) {
            out.push(row);
        }
    }
    let (leading, total) = agreement(&out, &g.tokens);
    console_log!("browser LM: {leading} leading rows equal, {total}/{} rows equal", g.tokens.len());
    assert!(leading >= 44, "only the first {leading} rows equal the reference");
}
