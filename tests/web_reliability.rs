//! Device loss and lifecycle in the browser, on the web app's small synthetic models served
//! as `blob:` URLs through the same `fetch` loader and Cache API store as a real checkpoint:
//! the WebGPU device destroyed mid-session makes every step reject with the loss; loading
//! again (no page reload) opens a new device on a new adapter, reads the weights from the
//! Cache API and gives the same frames. Then ten loads, runs and disposals in the one page:
//! the wasm heap returns to its level after the first cycle each time and wasm memory stops
//! growing after it.
#![cfg(target_arch = "wasm32")]

mod common;

use std::cell::Cell;
use std::rc::Rc;

use inferencelayer::heap;
use inferencelayer::web::cache::cache_clear_url;
use inferencelayer::web::MoshiSession;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

const FRAMES: usize = 4;
const CYCLES: usize = 10;

fn global(name: &str) -> JsValue {
    js_sys::Reflect::get(&js_sys::global(), &name.into()).unwrap()
}

/// A `blob:` URL of `bytes` (`URL.createObjectURL(new Blob([bytes]))`).
fn blob_url(bytes: &[u8]) -> String {
    let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(bytes));
    let blob = js_sys::Reflect::construct(&global("Blob").unchecked_into::<js_sys::Function>(), &js_sys::Array::of1(&parts)).unwrap();
    let url = global("URL");
    let create: js_sys::Function = js_sys::Reflect::get(&url, &"createObjectURL".into()).unwrap().unchecked_into();
    create.call1(&url, &blob).unwrap().as_string().unwrap()
}

fn wasm_memory() -> f64 {
    let m: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    m.buffer().unchecked_into::<js_sys::ArrayBuffer>().byte_length() as f64
}

/// Bytes read from the Cache API, summed over both files' last progress reports.
fn progress(from_cache: Rc<Cell<f64>>) -> js_sys::Function {
    Closure::<dyn FnMut(JsValue)>::new(move |p: JsValue| {
        let v = js_sys::Reflect::get(&p, &"fromCache".into()).ok().and_then(|v| v.as_f64()).unwrap_or(0.0);
        from_cache.set(from_cache.get().max(v));
    })
    .into_js_value()
    .unchecked_into()
}

struct Files {
    m: common::small::Small,
    mimi_url: String,
    lm_url: String,
}

impl Files {
    /// Load both models from their URLs; returns the session and the bytes read from the
    /// Cache API (Mimi's and the LM's).
    /// `watch`: pass progress callbacks (closures the garbage collector frees, at its own
    /// time: left out where the heap is measured).
    async fn load(&self, watch: bool) -> Result<(MoshiSession, f64), String> {
        let (mc, lc) = (Rc::new(Cell::new(0.0)), Rc::new(Cell::new(0.0)));
        let s = MoshiSession::load(
            self.mimi_url.clone(),
            Some(common::small::MIMI_JSON.to_string()),
            self.lm_url.clone(),
            Some(common::small::LM_JSON.to_string()),
            None,
            0,
            true,
            watch.then(|| progress(mc.clone())),
            watch.then(|| progress(lc.clone())),
            None,
        )
        .await
        .map_err(|e| format!("{:?}", JsValue::from(e)))?;
        Ok((s, mc.get() + lc.get()))
    }
}

async fn run(s: &mut MoshiSession, files: &Files) -> Result<Vec<(i32, Vec<f32>)>, String> {
    let mut out = Vec::new();
    for i in 0..FRAMES {
        let r = s.step(files.m.frame(i)).await.map_err(|e| error_text(JsValue::from(e)))?;
        let token = js_sys::Reflect::get(&r, &"token".into()).unwrap().as_f64().unwrap() as i32;
        let pcm: js_sys::Float32Array = js_sys::Reflect::get(&r, &"pcm".into()).unwrap().unchecked_into();
        out.push((token, pcm.to_vec()));
    }
    Ok(out)
}

fn error_text(e: JsValue) -> String {
    e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message())).unwrap_or_else(|| format!("{e:?}"))
}

#[wasm_bindgen_test]
async fn device_loss_then_reload_from_the_cache_then_ten_lifecycles() {
    let log = |m: String| web_sys::console::log_1(&m.into());
    let m = common::small::small(None);
    log(format!("checkpoints: Mimi {} B, LM {} B", m.mimi_bytes.len(), m.lm_bytes.len()));
    let files = Files { mimi_url: blob_url(&m.mimi_bytes), lm_url: blob_url(&m.lm_bytes), m };

    let (mut s, cached) = files.load(true).await.expect("first load");
    assert_eq!(cached, 0.0, "the first load downloads");
    log(format!("loaded on {}", s.adapter()));
    let before = run(&mut s, &files).await.expect("frames before the loss");
    log("frames before the loss".into());
    assert!(before.iter().filter(|f| f.0 >= 0).count() == FRAMES - 1, "LMGen yields");

    // The browser takes the device away.
    s.session().context().device.destroy();
    let e = run(&mut s, &files).await.expect_err("a step on a lost device");
    log(format!("after the loss: {e}"));
    assert!(e.contains("GPU device lost") && e.contains("load the models again"), "{e}");
    assert!(s.device_lost());
    drop(s);

    // Loading again, in the same page: a new adapter and device, the weights from the cache.
    let (mut s, cached) = files.load(true).await.expect("load after the loss");
    assert!(!s.device_lost());
    let total = (files.m.mimi_bytes.len() + files.m.lm_bytes.len()) as f64;
    log(format!("reload: {cached} of {total} bytes from the Cache API"));
    assert!(cached >= files.m.lm_bytes.len() as f64, "the reload reads the weights from the Cache API ({cached} B)");
    assert_eq!(run(&mut s, &files).await.expect("frames after the reload"), before, "the new device gives the same frames");
    drop(s);

    // Ten loads, runs and disposals in this page.
    let (mut heap_first, mut mem_first, mut heap_second) = (0, 0.0, 0);
    for c in 0..CYCLES {
        let (mut s, _) = files.load(false).await.expect("load");
        assert_eq!(run(&mut s, &files).await.expect("frames"), before, "cycle {c}");
        // Dispose: the models go, and with them their device (its memory at once).
        let ctx = s.session().context().clone();
        drop(s);
        assert!(ctx.lost().is_some(), "disposing destroys the device");
        drop(ctx);
        let (h, mem) = (heap::live(), wasm_memory());
        log(format!("cycle {c}: heap {h} B, wasm memory {mem} B"));
        if c == 0 {
            (heap_first, mem_first) = (h, mem);
        } else {
            // wasm-bindgen's and wgpu's tables of JS objects may step once: a few hundred
            // bytes, never a trend (checked after the last cycle)
            assert!(h <= heap_first + (16 << 10), "cycle {c}: the heap grew from {heap_first} B to {h} B");
            assert_eq!(mem, mem_first, "cycle {c}: wasm memory grew from {mem_first} B to {mem} B");
        }
        if c == 1 {
            heap_second = h;
        }
        if c == CYCLES - 1 {
            // wgpu's webgpu backend hands each device's uncaptured-error closure to the JS
            // garbage collector (`Closure::forget` in `on_uncaptured_error`): its 52 bytes
            // of Rust heap (and the vectors holding them) go when the collector runs, if
            // ever. Anything of the models themselves (kilobytes to megabytes a cycle)
            // fails this bound.
            let per_cycle = (h - heap_second.min(h)) / (CYCLES as u64 - 2);
            log(format!("heap growth after the first cycles: {per_cycle} B per cycle"));
            assert!(per_cycle <= 256, "the heap grew from {heap_second} B after cycle 1 to {h} B after cycle {c}");
        }
    }
    cache_clear_url(&files.mimi_url).await.ok();
    cache_clear_url(&files.lm_url).await.ok();
}
