//! The codec benchmark in the browser (WebGPU through wgpu's webgpu backend): per-frame
//! encode and decode wall time, each with its submit and readback, p50 and p95 over 100
//! frames (`MIMI_BENCH_FRAMES` at build time to change it), printed with the adapter's name.
//! A benchmark, not a test: it asserts nothing about time and is ignored unless asked for
//! (`./build.sh bench`).
#![cfg(target_arch = "wasm32")]

mod common;

use std::rc::Rc;

use common::*;
use inferencelayer::{GpuContext, Mimi, MimiConfig, MimiWeights};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn now_ms() -> f64 {
    js_sys::Date::now()
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[wasm_bindgen_test]
#[ignore]
async fn bench_mimi_in_the_browser() {
    let frames_timed: usize = option_env!("MIMI_BENCH_FRAMES").and_then(|v| v.parse().ok()).unwrap_or(100);
    const WARMUP: usize = 5;
    let g = golden();
    let w = MimiWeights::from_safetensors(&MimiConfig::default(), &checkpoint_bytes()).unwrap();
    let ctx = Rc::new(GpuContext::new().await.unwrap());
    let mut mimi = Mimi::new(ctx.clone(), &w).await.unwrap();
    let fs = mimi.frame_size();
    let frames: Vec<&[f32]> = g.pcm.chunks_exact(fs).collect();
    let (mut enc, mut dec) = (Vec::new(), Vec::new());
    for i in 0..frames_timed + WARMUP {
        let frame = frames[i % frames.len()];
        let t0 = now_ms();
        let codes = mimi.encode_frame(frame).await.unwrap();
        let t1 = now_ms();
        mimi.decode_frame(i, &codes).await.unwrap();
        let t2 = now_ms();
        if i >= WARMUP {
            enc.push(t1 - t0);
            dec.push(t2 - t1);
        }
    }
    let (d_enc, d_dec) = mimi.dispatches();
    console_log!("adapter: {} | dispatches per frame: encode {d_enc}, decode {d_dec}", ctx.info);
    console_log!(
        "browser encode ms/frame: p50 {:.2} p95 {:.2} | decode ms/frame: p50 {:.2} p95 {:.2} | {frames_timed} frames",
        percentile(&mut enc, 0.5),
        percentile(&mut enc, 0.95),
        percentile(&mut dec, 0.5),
        percentile(&mut dec, 0.95)
    );
}
