//! `benchLm`: the LM benchmark of the native `bench-lm` from the wasm build, on whatever
//! WebGPU the global scope offers (a browser, or Node with Dawn: `scripts/bench-dawn.mjs`).
//! Same synthetic Moshi LM (seeded Q8_0 weights, written to the GPU tensor by tensor by
//! [`upload_synthetic`], bit for bit the weights `bench-lm` uploads), same seeded user
//! codes, same sampling, same loop (`Lm::submit`, then `Lm::read_tokens` awaited), so the
//! two step times compare one for one.

use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::{js_error, now_ms, set};
use crate::moshi::synthetic::{self as lm_synthetic, bench_user_codes, upload_synthetic};
use crate::moshi::{Lm, LmConfig, LmGen, Sampling};
use crate::GpuContext;

/// `{ p50, p95, p99, mean }` of `ms` (nearest rank, as `bench-lm`), as a JS object.
fn stats(ms: &[f64]) -> js_sys::Object {
    let mut v = ms.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let o = js_sys::Object::new();
    set(&o, "p50", &rank(0.50).into());
    set(&o, "p95", &rank(0.95).into());
    set(&o, "p99", &rank(0.99).into());
    set(&o, "mean", &(v.iter().sum::<f64>() / v.len() as f64).into());
    o
}

/// Time `frames` LMGen frames (after `warmup` untimed ones) of Moshi 7B
/// ([`LmConfig::default`]) on synthetic weights of `seed` (`bench-lm`'s default is 42), with
/// Moshi's sampling. Returns `{ adapter, adapterName, backend, frames, warmup, dispatches,
/// buildMs, stepMs: {p50, p95, p99, mean}, cpuMs: {...} }`, times in ms: the step from the
/// input upload to the tokens read back, the CPU's part its recording and submit. Rejects
/// with the error's message when there is no adapter, `frames` is 0, or the device fails.
#[wasm_bindgen(js_name = benchLm)]
pub async fn bench_lm(frames: usize, warmup: usize, seed: u32) -> Result<js_sys::Object, JsError> {
    if frames == 0 {
        return Err(JsError::new("frames must be at least 1"));
    }
    let config = LmConfig::default();
    let ctx = Rc::new(GpuContext::new().await.map_err(js_error)?);
    let t0 = now_ms();
    let weights = upload_synthetic(&ctx, &config, seed as u64).map_err(js_error)?;
    let mut lm = Lm::new(ctx.clone(), &weights, Sampling::moshi(seed)).await.map_err(js_error)?;
    let build_ms = now_ms() - t0;
    let (td, dd) = lm.dispatches();
    let mut gen = LmGen::new(&config);
    let (mut step_ms, mut cpu_ms) = (Vec::with_capacity(frames), Vec::with_capacity(frames));
    for t in 0..warmup + frames {
        let codes = bench_user_codes(seed, t, config.user_streams(), config.card);
        let t0 = now_ms();
        let input = gen.input(&codes).map_err(js_error)?;
        lm.submit(&input, None).map_err(js_error)?;
        let t1 = now_ms();
        let generated = lm.read_tokens().await.map_err(js_error)?;
        gen.output(&generated);
        if t >= warmup {
            step_ms.push(now_ms() - t0);
            cpu_ms.push(t1 - t0);
        }
    }
    let info = &ctx.info;
    let o = js_sys::Object::new();
    set(&o, "adapter", &info.to_string().into());
    set(&o, "adapterName", &info.name.clone().into());
    set(&o, "backend", &info.backend.clone().into());
    set(&o, "parameters", &(lm_synthetic::parameter_count(&config) as f64).into());
    set(&o, "frames", &frames.into());
    set(&o, "warmup", &warmup.into());
    set(&o, "dispatches", &(td + dd).into());
    set(&o, "buildMs", &build_ms.into());
    set(&o, "stepMs", &stats(&step_ms));
    set(&o, "cpuMs", &stats(&cpu_ms));
    Ok(o)
}
