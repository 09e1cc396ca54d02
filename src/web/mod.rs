//! The browser bindings (wasm32): what the web app's dedicated Worker drives, through
//! wasm-bindgen. The Worker owns WebGPU and these objects; the page and the AudioWorklet
//! never load this module (the worklet scope has no TextDecoder for the glue).
//!
//! - [`session`]: [`MoshiSession`], Mimi encode -> Moshi step -> Mimi decode per 80 ms frame,
//!   with Moshi's text decoded;
//! - [`codec`]: [`MimiCodec`], Mimi alone (encode and decode frames on the GPU), and
//!   [`mimi_cpu_roundtrip`], the CPU oracle over a whole clip;
//! - [`bench`]: `benchMimi` and `benchLm`, the native `bench` and `bench-lm` (every stage,
//!   the same JSON report) on this WebGPU;
//! - [`resample`]: [`StreamResampler`], the device's rate to and from 24 kHz;
//! - [`limits`]: emulated device limits and the capability check made before a download;
//! - [`load`]: the models' weights from a URL (streamed) or a file's bytes;
//! - [`fetch`], [`cache`]: checkpoint bytes through `fetch` (Range resume, AbortSignal) and
//!   the Cache API, fed to the same [`crate::weights::source`] driver as a file natively.
//!
//! Errors reach JavaScript as `Error`s carrying [`crate::Error`]'s message.

pub mod bench;
pub mod cache;
pub mod codec;
pub mod fetch;
pub mod limits;
pub mod load;
pub mod resample;
pub mod scope;
pub mod session;

pub use codec::{mimi_cpu_roundtrip, MimiCodec};
pub use limits::{check_requirements, emulate_limits};
pub use resample::StreamResampler;
pub use session::MoshiSession;

use wasm_bindgen::prelude::*;

/// Route Rust panics to the console with their message (call once per Worker).
#[wasm_bindgen(js_name = initPanicHook)]
pub fn init_panic_hook() {
    console_error_panic_hook::set_once();
}

pub(crate) fn js_error(e: crate::Error) -> JsError {
    JsError::new(&e.to_string())
}

/// Milliseconds from the global scope's `performance.now()` (Window or Worker), else 0.
pub(crate) fn now_ms() -> f64 {
    let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok();
    perf.and_then(|p| {
        let now = js_sys::Reflect::get(&p, &"now".into()).ok()?.dyn_into::<js_sys::Function>().ok()?;
        now.call0(&p).ok()?.as_f64()
    })
    .unwrap_or(0.0)
}

/// Set `key` on a plain JS object (never fails on a fresh `Object`).
pub(crate) fn set(obj: &js_sys::Object, key: &str, value: &JsValue) {
    let _ = js_sys::Reflect::set(obj, &key.into(), value);
}
