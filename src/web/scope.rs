//! The global scope a wasm module runs in: a window (a page) or a worker. `fetch`, timers
//! and the Cache API are reached through whichever it is.

use wasm_bindgen::{JsCast, JsValue};

use crate::error::{Error, Result};

/// A page's `window` or a worker's `self`.
pub enum Scope {
    /// A page.
    Window(web_sys::Window),
    /// A dedicated, shared or service worker.
    Worker(web_sys::WorkerGlobalScope),
}

impl Scope {
    /// The scope this module runs in; [`Error::Input`] outside a window or a worker.
    pub fn current() -> Result<Self> {
        let g = js_sys::global();
        if let Some(w) = g.dyn_ref::<web_sys::Window>() {
            return Ok(Scope::Window(w.clone()));
        }
        if let Some(w) = g.dyn_ref::<web_sys::WorkerGlobalScope>() {
            return Ok(Scope::Worker(w.clone()));
        }
        Err(Error::Input("neither a window nor a worker: no fetch, timers or Cache API here".into()))
    }

    /// `fetch(request)`.
    pub fn fetch(&self, req: &web_sys::Request) -> js_sys::Promise {
        match self {
            Scope::Window(w) => w.fetch_with_request(req),
            Scope::Worker(w) => w.fetch_with_request(req),
        }
    }

    /// `caches`: absent outside a secure context (https, or localhost).
    pub fn caches(&self) -> std::result::Result<web_sys::CacheStorage, JsValue> {
        match self {
            Scope::Window(w) => w.caches(),
            Scope::Worker(w) => w.caches(),
        }
    }

    /// Resolves after `ms` milliseconds (`setTimeout`): never blocks the event loop.
    pub async fn sleep(&self, ms: u32) {
        let p = js_sys::Promise::new(&mut |resolve, _| {
            let ms = ms.min(i32::MAX as u32) as i32;
            let _ = match self {
                Scope::Window(w) => w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms),
                Scope::Worker(w) => w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms),
            };
        });
        let _ = wasm_bindgen_futures::JsFuture::from(p).await;
    }
}

/// A JS exception as text (`TypeError: Failed to fetch`).
pub fn js_text(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return format!("{}: {}", String::from(err.name()), String::from(err.message()));
    }
    e.as_string().unwrap_or_else(|| format!("{e:?}"))
}
