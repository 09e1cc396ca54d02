//! Device limits in the browser: emulating a smaller device ([`emulate_limits`]: every
//! context the bindings open keeps to the lower limits) and the capability check a page
//! makes before it downloads anything ([`check_requirements`]).

use std::cell::Cell;

use wasm_bindgen::prelude::*;

use super::{js_error, load};
use crate::gpu::{capability_json, GpuContext, GpuLimits};

thread_local! {
    static EMULATED: Cell<Option<GpuLimits>> = const { Cell::new(None) };
}

/// Keep every GPU context opened from now on (by [`super::MimiCodec`],
/// [`super::MoshiSession`], [`check_requirements`]) to at most
/// `maxStorageBufferBindingSize` and `maxBufferSize` bytes, as a device that has only
/// those would (`undefined` for either: the adapter's own; both `undefined`: no
/// emulation). The device is requested with them; the browser may raise a request below
/// WebGPU's defaults (128 MiB, 256 MiB) to the defaults, and the context still keeps to
/// the lower values.
#[wasm_bindgen(js_name = emulateLimits)]
pub fn emulate_limits(max_storage_buffer_binding_size: Option<f64>, max_buffer_size: Option<f64>) {
    let v = match (max_storage_buffer_binding_size, max_buffer_size) {
        (None, None) => None,
        (a, b) => Some(GpuLimits { max_storage_binding: a.map_or(u64::MAX, |v| v.max(0.0) as u64), max_buffer: b.map_or(u64::MAX, |v| v.max(0.0) as u64) }),
    };
    EMULATED.with(|e| e.set(v));
}

/// A context on a new device, keeping to the emulated limits if any.
pub(crate) async fn gpu_context() -> crate::Result<GpuContext> {
    GpuContext::with_limits(EMULATED.with(Cell::get)).await
}

/// The capability check, before any download: opens the adapter (within the emulated
/// limits), and says what the codec of `mimiConfig` and, when `withLm`, the LM of
/// `lmConfig` (JSON, Kyutai's keys; `undefined` for the released Mimi and Moshi 7B) need
/// of it. Resolves to `{adapter, adapterLimits: {maxStorageBufferBindingSize,
/// maxBufferSize}, limits, models: [{model, largestBuffer: {name, bytes}, totalBytes,
/// split, fits, error, limit, needed, allowed}], fits, error}` (bytes). Rejects for a bad
/// config or no adapter.
#[wasm_bindgen(js_name = checkRequirements)]
pub async fn check_requirements(mimi_config: Option<String>, lm_config: Option<String>, with_lm: bool) -> Result<JsValue, JsError> {
    let json = async {
        let mc = load::mimi_config(mimi_config.as_deref())?;
        let ctx = gpu_context().await?;
        let limits = ctx.info.limits();
        let mut models = vec![crate::mimi::requirements(&mc, &limits)?];
        if with_lm {
            let lc = load::lm_config(lm_config.as_deref())?;
            models.push(crate::moshi::requirements(&lc, &limits)?);
        }
        crate::Result::Ok(capability_json(&ctx.info.to_string(), &ctx.info.adapter_limits, &models))
    }
    .await
    .map_err(js_error)?;
    js_sys::JSON::parse(&json).map_err(|_| JsError::new("capability report: invalid JSON"))
}
