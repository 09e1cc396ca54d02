//! `benchMimi` and `benchLm`: the native `inferencelayer bench` and `bench-lm` from the wasm
//! build, on whatever WebGPU the global scope offers (the benchmark page `www/bench.html`, or
//! Node with Dawn: `scripts/bench-dawn.mjs`). Both run [`crate::bench`]'s loops, the ones the
//! native commands run, and resolve to the same JSON report as the native `--json` (same
//! fields, same units), so the two compare stage by stage: Mimi encode and decode, the LM
//! step (with the temporal transformer and the depformer submitted apart) and the whole
//! full-duplex frame as `Session::step` runs it.

use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::load::{self, Source};
use super::{js_error, now_ms};
use crate::bench::{self, LmSetup};
use crate::moshi::synthetic::{upload_synthetic_with, Generator};
use crate::moshi::{Lm, Sampling};
use crate::GpuContext;

/// A report's JSON as a plain JS object.
fn to_js(v: &serde_json::Value) -> Result<JsValue, JsError> {
    js_sys::JSON::parse(&v.to_string()).map_err(|_| JsError::new("the benchmark report is not valid JSON"))
}

/// `options[key]`, when it is set and not `undefined` or `null`.
fn option(options: &JsValue, key: &str) -> Option<JsValue> {
    if !options.is_object() {
        return None;
    }
    js_sys::Reflect::get(options, &key.into()).ok().filter(|v| !v.is_undefined() && !v.is_null())
}

fn option_string(options: &JsValue, key: &str) -> Result<Option<String>, JsError> {
    option(options, key).map(|v| v.as_string().ok_or_else(|| JsError::new(&format!("options.{key} must be a string")))).transpose()
}

fn option_bytes(options: &JsValue, key: &str) -> Result<Option<Vec<u8>>, JsError> {
    option(options, key)
        .map(|v| {
            v.dyn_into::<js_sys::Uint8Array>().map(|a| a.to_vec()).map_err(|_| JsError::new(&format!("options.{key} must be a Uint8Array")))
        })
        .transpose()
}

fn option_usize(options: &JsValue, key: &str, default: usize) -> Result<usize, JsError> {
    match option(options, key) {
        None => Ok(default),
        Some(v) => match v.as_f64() {
            Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= u32::MAX as f64 => Ok(n as usize),
            _ => Err(JsError::new(&format!("options.{key} must be a whole number"))),
        },
    }
}

fn option_bool(options: &JsValue, key: &str, default: bool) -> bool {
    option(options, key).map_or(default, |v| v.is_truthy())
}

/// Time `frames` Mimi frames (after `warmup` untimed ones) of the embedded speech clip on
/// the codec of `checkpoint` (safetensors bytes, Kyutai's names) and `configJson` (Kyutai's
/// `_mimi_config` keys; the released codec when omitted), then profile each plan `replays`
/// times where the adapter has timestamp queries. Resolves to the report of the native
/// `inferencelayer bench --json`: `{ adapter, adapter_name, backend, ..., dispatches_per_frame,
/// passes_per_frame, submits_per_frame, state_bytes, encode_ms, decode_ms, encode_decode_ms:
/// { p50, p95, p99, mean, over_80ms }, profile_encode, profile_decode }`, times in ms.
/// Rejects with the error's message when there is no adapter, `frames` is 0 or over
/// `bench::MAX_FRAMES` (`warmup` over `bench::MAX_WARMUP`, `replays` over
/// `bench::MAX_REPLAYS`), the checkpoint
/// does not match the config, or the device fails.
#[wasm_bindgen(js_name = benchMimi)]
pub async fn bench_mimi(checkpoint: Vec<u8>, config_json: Option<String>, frames: usize, warmup: usize, replays: usize) -> Result<JsValue, JsError> {
    bench::check_counts(frames, replays).map_err(js_error)?;
    bench::check_warmup(warmup).map_err(js_error)?;
    let config = load::mimi_config(config_json.as_deref()).map_err(js_error)?;
    let ctx = Rc::new(GpuContext::new().await.map_err(js_error)?);
    let weights = load::mimi_weights(&config, "configJson", &ctx.info.limits(), Source::Bytes(&checkpoint), Some(checkpoint.len() as u64)).await.map_err(js_error)?;
    drop(checkpoint);
    let mut mimi = crate::Mimi::new(ctx, &weights).await.map_err(js_error)?;
    drop(weights);
    let signal = bench::bench_signal().map_err(js_error)?;
    let r = bench::bench_mimi(&mut mimi, &signal, frames, warmup, replays, &now_ms).await.map_err(js_error)?;
    to_js(&r.json())
}

/// Time `frames` LMGen frames (after `warmup` untimed ones) of the Moshi LM with seeded
/// synthetic user codes, as the native `inferencelayer bench-lm` does, and resolve to its
/// `--json` report (`step_ms`, `cpu_encode_submit_ms`, `temporal_ms`, `depformer_ms`,
/// `full_duplex_frame_ms`, ..., each `{ p50, p95, p99, mean, over_80ms }` in ms).
///
/// The weights: with `options.lmUrl`, the checkpoint there (safetensors or GGUF, streamed
/// into GPU buffers); otherwise seeded synthetic Q8_0 weights of `seed` (the native default
/// is 20261129), written to the GPU tensor by tensor, bit for bit those `bench-lm --seed
/// SEED --weights W` builds, by `options.weights` (`"hash"`, the default, or `"fast"`).
/// `options`: `config` (the LM config JSON, Kyutai's `_lm_kwargs` keys; Moshi 7B when
/// omitted), `weights`, `lmUrl`, `mimi` (a Mimi checkpoint's bytes, `Uint8Array`: also time
/// the whole full-duplex frame), `mimiConfig` (its config JSON; the released codec when
/// omitted), `replays` (timestamp-query profiles of each plan, default 1), `bandwidth`
/// (measure a copy's bandwidth after the whole steps, default true), `greedy` (default false: Moshi's
/// sampling of `seed`). Rejects with the error's message on a bad option, no adapter,
/// `frames` 0 or over `bench::MAX_FRAMES` (`warmup` over `bench::MAX_WARMUP`, `replays` over
/// `bench::MAX_REPLAYS`), a config the
/// model cannot run, or a device error.
#[wasm_bindgen(js_name = benchLm)]
pub async fn bench_lm(frames: usize, warmup: usize, seed: u32, options: JsValue) -> Result<JsValue, JsError> {
    bench::check_counts(frames, 0).map_err(js_error)?;
    bench::check_warmup(warmup).map_err(js_error)?;
    let config_json = option_string(&options, "config")?;
    let generator = Generator::from_name(option_string(&options, "weights")?.as_deref().unwrap_or("hash")).map_err(js_error)?;
    let lm_url = option_string(&options, "lmUrl")?;
    let mimi_bytes = option_bytes(&options, "mimi")?;
    let mimi_config = option_string(&options, "mimiConfig")?;
    let replays = option_usize(&options, "replays", 1)?;
    bench::check_counts(frames, replays).map_err(js_error)?;
    let bandwidth = option_bool(&options, "bandwidth", true);
    let greedy = option_bool(&options, "greedy", false);
    let config = load::lm_config(config_json.as_deref()).map_err(js_error)?;
    config.validate().map_err(js_error)?;
    let sampling = if greedy { Sampling::greedy() } else { Sampling::moshi(seed) };

    let ctx = Rc::new(GpuContext::new().await.map_err(js_error)?);
    let t0 = now_ms();
    let (weights, kind) = match &lm_url {
        Some(url) => (
            load::lm_weights(ctx.clone(), &config, "config", Source::Url { url, progress: None, signal: None }, None).await.map_err(js_error)?,
            "checkpoint",
        ),
        None => (upload_synthetic_with(&ctx, &config, seed as u64, generator).map_err(js_error)?, generator.name()),
    };
    let build_weights_s = (now_ms() - t0) / 1e3;
    let t0 = now_ms();
    let lm = Lm::new(ctx.clone(), &weights, sampling).await.map_err(js_error)?;
    let upload_and_plan_s = (now_ms() - t0) / 1e3;
    let mimi = match mimi_bytes {
        None => None,
        Some(bytes) => {
            let mc = load::mimi_config(mimi_config.as_deref()).map_err(js_error)?;
            Some(load::mimi_weights(&mc, "mimiConfig", &ctx.info.limits(), Source::Bytes(&bytes), Some(bytes.len() as u64)).await.map_err(js_error)?)
        }
    };
    let signal = bench::bench_signal().map_err(js_error)?;
    let setup = LmSetup { seed: seed as u64, greedy, weights: kind, build_weights_s, upload_and_plan_s };
    let r = bench::bench_lm(lm, &weights, sampling, setup, (frames, warmup, replays), bandwidth, mimi.as_ref().map(|w| (w, signal.as_slice())), &now_ms)
        .await
        .map_err(js_error)?;
    to_js(&r.json())
}
