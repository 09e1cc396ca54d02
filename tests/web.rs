//! The parity gates in a real browser: headless Chromium's WebGPU (SwiftShader where there
//! is no GPU), through `wasm-pack test --headless --chrome`. Same reference outputs, same
//! regenerated checkpoints as `tests/mimi_parity.rs` and `tests/moshi_parity.rs`; the LM's
//! checkpoint is streamed through `LmLoader` into the GPU, as the web loads it.
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

/// Frames of the golden clip the GPU plans stream in the browser: the first 10 of its 37
/// (speech, silence, then speech again). SwiftShader took 22 to 26 s for each of the
/// full-geometry codec's encode frames and 21 to 25 s for each decode frame on this
/// project's 2-core machine, so the whole clip both ways outran the browser tests' 45-minute
/// limit; the native tests (`tests/mimi_parity.rs`) hold the same plans to all 37 on
/// lavapipe, and the CPU oracle here (0.24 s a frame each way in wasm) takes all 37. Ten
/// frames still carry every streaming state across frames (conv histories, the
/// transformer's KV ring, the 12.5 -> 25 Hz resampling), and the reference's codes and
/// audio of a prefix are the prefix of its streams: its encode and decode are causal.
const BROWSER_GPU_FRAMES: usize = 10;

/// The adapter carries the browser's name for it (Chromium gives wgpu's webgpu backend an
/// empty description: `GpuContext` asks `GPUAdapterInfo`'s vendor and architecture).
#[wasm_bindgen_test]
async fn browser_adapter_is_named() {
    let ctx = GpuContext::new().await.expect("WebGPU adapter");
    console_log!("adapter: {}", ctx.info);
    assert!(!ctx.info.name.trim().is_empty(), "no name for the adapter: {}", ctx.info);
}

#[wasm_bindgen_test]
async fn browser_gpu_and_cpu_match_the_reference() {
    let g = golden();
    let w = weights();
    let ctx = Rc::new(GpuContext::new().await.expect("WebGPU adapter (Chromium needs --enable-unsafe-webgpu)"));
    console_log!("adapter: {}", ctx.info);
    let mut mimi = Mimi::new(ctx.clone(), &w).await.expect("plans");
    let fs = mimi.frame_size();
    let n = BROWSER_GPU_FRAMES;
    let (want_codes, want_pcm) = (&g.codes[..n], &g.decoded[..n * fs]);

    let t0 = now_ms();
    let mut codes = Vec::new();
    for frame in g.pcm.chunks_exact(fs).take(n) {
        codes.push(mimi.encode_frame(frame).await.expect("encode"));
    }
    let agreement = code_gate(&codes, want_codes);
    console_log!("browser GPU encode, {n} frames in {:.0} ms: {agreement:?}", now_ms() - t0);
    assert!(agreement.is_ok());
    let t0 = now_ms();
    let mut pcm = Vec::new();
    for (f, c) in want_codes.iter().enumerate() {
        pcm.extend(mimi.decode_frame(f, c).await.expect("decode"));
    }
    let snr = snr_db(&pcm, want_pcm);
    console_log!("browser GPU decode, {n} frames in {:.0} ms: SNR vs reference {snr:.1} dB", now_ms() - t0);
    assert!(snr >= 40.0, "decode SNR {snr:.1} dB < 40 dB");

    let t0 = now_ms();
    let mut cpu = MimiCpu::new(&w);
    let codes: Vec<Vec<u32>> = g.pcm.chunks_exact(fs).map(|f| cpu.encode_frame(f).unwrap()).collect();
    let agreement = code_gate(&codes, &g.codes);
    console_log!("browser CPU encode, {} frames in {:.0} ms: {agreement:?}", codes.len(), now_ms() - t0);
    assert!(agreement.is_ok());
    let t0 = now_ms();
    let mut pcm = Vec::new();
    for (f, c) in g.codes.iter().enumerate() {
        pcm.extend(cpu.decode_frame(f, c).unwrap());
    }
    let snr = snr_db(&pcm, &g.decoded);
    console_log!("browser CPU decode, {} frames in {:.0} ms: SNR vs reference {snr:.1} dB", g.codes.len(), now_ms() - t0);
    assert!(snr >= 40.0, "CPU decode SNR {snr:.1} dB < 40 dB");
}

/// The LM as the web loads it: the reduced-geometry checkpoint streamed through `LmLoader`
/// in chunks (uneven sizes, as a `fetch` body arrives) straight into WebGPU buffers, then
/// greedy LMGen held to the reference.
#[wasm_bindgen_test]
async fn browser_moshi_lm_streamed_greedy_matches_the_reference() {
    use common::moshi::*;
    use inferencelayer::moshi::{Lm, LmGen, LmLoader, Sampling};
    use inferencelayer::weights::stream::ByteSink;
    let g = lm_golden();
    let bytes = lm_checkpoint_bytes(&g.config);
    let ctx = Rc::new(GpuContext::new().await.expect("WebGPU adapter"));
    let mut loader = LmLoader::with_part_bytes(ctx.clone(), &g.config, Some(bytes.len() as u64), 4096).expect("loader");
    let (mut at, mut i) = (0, 0usize);
    while at < bytes.len() {
        let n = [65536, 13, 40000, 3][i % 4].min(bytes.len() - at);
        loader.push(&bytes[at..at + n]).expect("push");
        at += n;
        i += 1;
    }
    loader.finish().expect("finish");
    let gw = loader.into_weights().expect("streamed weights");
    console_log!("browser LM: {} chunks streamed into {} bytes of GPU buffers", i, gw.bytes());
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

/// Every kernel of `shaders/` compiles in the browser's WGSL compiler (Tint, which the
/// parity tests above reach only for the kernels their reduced geometry dispatches).
#[wasm_bindgen_test]
async fn browser_every_kernel_compiles() {
    use inferencelayer::gpu::KERNELS;
    let ctx = GpuContext::new().await.expect("WebGPU adapter");
    for k in KERNELS {
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(k.name),
            source: wgpu::ShaderSource::Wgsl(k.source.into()),
        });
        let _pipeline = ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(k.name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = scope.pop().await {
            panic!("{}: {e}", k.name);
        }
    }
    console_log!("browser: {} kernels compiled", KERNELS.len());
}
