//! A checkpoint over HTTP through the browser's `fetch`: a [`ByteSource`] that opens the
//! file at a byte offset with `Range: bytes=N-` and reads the body's `ReadableStream` chunk
//! by chunk (never the whole body), cancellable through an `AbortSignal`; and
//! [`fetch_into`], which drives it (with the Cache API store of [`super::cache`]) into any
//! [`ByteSink`].
//!
//! A cross-origin server must allow the request and expose the headers the driver reads:
//! `Access-Control-Allow-Origin`, `Access-Control-Allow-Headers: Range` (preflight),
//! `Access-Control-Expose-Headers: Content-Range, Content-Length, ETag`; a page that is
//! cross-origin isolated (COEP `require-corp`) also needs `Cross-Origin-Resource-Policy:
//! cross-origin` from it, or CORS.

use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, Headers, ReadableStreamDefaultReader, ReadableStreamReadResult, Request, RequestInit};

use super::cache::{CacheStore, DEFAULT_BLOCK};
use super::scope::{js_text, Scope};
use crate::error::{Error, Result};
use crate::weights::source::{http_error, load, load_cached, ByteSource, LoadOptions, LoadReport, Opened, Progress};
use crate::weights::stream::ByteSink;

/// The file at a URL, read through `fetch`.
pub struct FetchSource {
    url: String,
    scope: Scope,
    signal: Option<AbortSignal>,
    reader: Option<ReadableStreamDefaultReader>,
    /// File offset of the next body byte.
    at: u64,
}

impl FetchSource {
    /// The file at `url` (absolute, or relative to the page). [`Error::Input`] outside a
    /// window or worker.
    pub fn new(url: &str) -> Result<Self> {
        Ok(Self { url: url.to_string(), scope: Scope::current()?, signal: None, reader: None, at: 0 })
    }

    /// Abort requests and reads with `signal` (its abort gives [`Error::Aborted`]).
    pub fn with_signal(mut self, signal: Option<AbortSignal>) -> Self {
        self.signal = signal;
        self
    }

    fn aborted(&self) -> bool {
        self.signal.as_ref().is_some_and(|s| s.aborted())
    }

    /// A rejected fetch or read: the abort, or a network error at file byte `offset`.
    fn failed(&self, offset: u64, e: JsValue) -> Error {
        if self.aborted() {
            return Error::Aborted { url: self.url.clone(), offset };
        }
        Error::Network {
            url: self.url.clone(),
            offset,
            why: format!(
                "{} (the connection dropped, the server is unreachable, or it refused the request: \
                 a cross-origin server must send CORS headers)",
                js_text(&e)
            ),
        }
    }

    fn drop_body(&mut self) {
        if let Some(r) = self.reader.take() {
            // let the browser close the connection; the promise's outcome does not matter
            let _ = r.cancel();
        }
    }

    fn transfer(&self, offset: u64, why: impl Into<String>) -> Error {
        Error::Transfer { url: self.url.clone(), offset, why: why.into() }
    }
}

impl Drop for FetchSource {
    fn drop(&mut self) {
        self.drop_body();
    }
}

/// `bytes a-b/total` (total may be `*`): `(a, b, total)`.
fn content_range(v: &str) -> Option<(u64, u64, Option<u64>)> {
    let v = v.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = v.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    (b >= a && total.is_none_or(|t| b < t)).then_some((a, b, total))
}

fn header(h: &Headers, name: &str) -> Option<String> {
    h.get(name).ok().flatten()
}

impl ByteSource for FetchSource {
    fn url(&self) -> &str {
        &self.url
    }

    async fn open(&mut self, offset: u64) -> Result<Opened> {
        self.drop_body();
        let js = |e: JsValue| Error::Input(format!("{}: cannot build the request: {}", self.url, js_text(&e)));
        let init = RequestInit::new();
        init.set_method("GET");
        init.set_mode(web_sys::RequestMode::Cors);
        // our own store is the cache; the HTTP cache would only hold a second copy
        init.set_cache(web_sys::RequestCache::NoStore);
        if offset > 0 {
            let h = Headers::new().map_err(js)?;
            h.set("Range", &format!("bytes={offset}-")).map_err(js)?;
            init.set_headers(&h);
        }
        init.set_signal(self.signal.as_ref());
        let req = Request::new_with_str_and_init(&self.url, &init).map_err(js)?;
        let resp = JsFuture::from(self.scope.fetch(&req)).await.map_err(|e| self.failed(offset, e))?;
        let resp: web_sys::Response = resp.dyn_into().map_err(|_| self.transfer(offset, "fetch gave no Response"))?;
        let status = resp.status();
        let h = resp.headers();
        let length = header(&h, "Content-Length").and_then(|v| v.trim().parse::<u64>().ok());
        // a compressed body's Content-Length counts the compressed bytes, not the file's
        let encoded = header(&h, "Content-Encoding").is_some_and(|e| !e.trim().eq_ignore_ascii_case("identity"));
        let length = if encoded { None } else { length };
        let (start, len, total) = match status {
            200 => (0, length, length),
            206 => {
                let cr = header(&h, "Content-Range").ok_or_else(|| {
                    self.transfer(
                        offset,
                        "a 206 answer without a readable Content-Range: a cross-origin server must send \
                         Access-Control-Expose-Headers: Content-Range",
                    )
                })?;
                let (a, b, total) = content_range(&cr).ok_or_else(|| {
                    self.transfer(offset, format!("a 206 answer with a malformed Content-Range `{cr}`"))
                })?;
                (a, Some(b - a + 1), total)
            }
            s => return Err(http_error(&self.url, s, &resp.status_text())),
        };
        let version = header(&h, "ETag").or_else(|| header(&h, "Last-Modified"));
        self.reader = match resp.body() {
            Some(body) => Some(body.get_reader().unchecked_into::<ReadableStreamDefaultReader>()),
            None if len == Some(0) => None,
            None => return Err(self.transfer(offset, format!("HTTP {status} without a body"))),
        };
        self.at = start;
        Ok(Opened { start, len, total, version })
    }

    async fn read(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        let Some(reader) = self.reader.as_ref() else {
            return Ok(false);
        };
        let r = match JsFuture::from(reader.read()).await {
            Ok(r) => r,
            Err(e) => {
                self.reader = None;
                return Err(self.failed(self.at, e));
            }
        };
        let r: ReadableStreamReadResult = r.unchecked_into();
        if r.get_done().unwrap_or(false) {
            self.reader = None;
            return Ok(false);
        }
        let v: Uint8Array =
            r.get_value().dyn_into().map_err(|_| self.transfer(self.at, "the body gave a chunk that is not bytes"))?;
        buf.resize(v.length() as usize, 0);
        v.copy_to(buf);
        self.at += buf.len() as u64;
        Ok(true)
    }

    async fn pause(&mut self, ms: u32) {
        self.scope.sleep(ms).await;
    }

    async fn yield_now(&mut self) {
        self.scope.sleep(0).await;
    }
}

/// How [`fetch_into`] loads.
pub struct FetchOptions<'a> {
    /// Retries in a row without progress (see [`LoadOptions::retries`]). Default 5.
    pub retries: u32,
    /// First backoff in ms, doubling. Default 250.
    pub backoff_ms: u32,
    /// Called as bytes arrive (at least every `progress_every` bytes) and at the end.
    pub progress: Option<&'a mut dyn FnMut(&Progress<'_>)>,
    /// Bytes between two progress calls. Default 1 MiB.
    pub progress_every: u64,
    /// Aborts the requests and reads in flight, and the load, with [`Error::Aborted`].
    pub signal: Option<AbortSignal>,
    /// Keep the file in the Cache API in blocks of this many bytes (and read the blocks
    /// already there first); `None` for no cache. Default 8 MiB blocks.
    pub cache_block: Option<u64>,
}

impl Default for FetchOptions<'_> {
    fn default() -> Self {
        Self {
            retries: 5,
            backoff_ms: 250,
            progress: None,
            progress_every: 1 << 20,
            signal: None,
            cache_block: Some(DEFAULT_BLOCK),
        }
    }
}

/// Load the checkpoint at `url` into `sink` (a [`crate::weights::stream::CheckpointReader`]
/// or a model loader): the blocks the Cache API holds first, then the rest through `fetch`,
/// resuming after dropped connections; returns the sink once it accepted the whole file,
/// and what the load did. On any error the sink is dropped and nothing of it is kept.
/// Errors: [`Error::Http`] (status and URL), [`Error::Network`], [`Error::Transfer`],
/// [`Error::Aborted`], and the sink's own (a malformed checkpoint names the tensor and the
/// byte). A Cache API that is missing or fails is logged and the load goes on without it.
pub async fn fetch_into<K: ByteSink>(url: &str, sink: K, opts: FetchOptions<'_>) -> Result<(K, LoadReport)> {
    let mut source = FetchSource::new(url)?.with_signal(opts.signal.clone());
    let signal = opts.signal.clone();
    let cancelled = move || signal.as_ref().is_some_and(|s| s.aborted());
    let mut progress = opts.progress;
    let options = LoadOptions {
        retries: opts.retries,
        backoff_ms: opts.backoff_ms,
        progress: match progress.as_mut() {
            Some(p) => Some(&mut **p),
            None => None,
        },
        progress_every: opts.progress_every,
        cancelled: Some(&cancelled),
    };
    let store = match opts.cache_block {
        Some(block) => match CacheStore::open(url, block).await {
            Ok(s) => Some(s),
            Err(e) => {
                log::warn!("{url}: no browser cache ({e}); loading without it");
                None
            }
        },
        None => None,
    };
    match store {
        Some(mut store) => load_cached(&mut source, &mut store, sink, options).await,
        None => load(&mut source, sink, options).await,
    }
}

/// A progress callback for [`FetchOptions::progress`] that calls the JS function `f` with
/// `{loaded, total, tensor, fromCache, retries}` (numbers in bytes; `total` and `tensor`
/// `undefined` until known).
pub fn js_progress(f: js_sys::Function) -> impl FnMut(&Progress<'_>) {
    move |p: &Progress<'_>| {
        let o = js_sys::Object::new();
        let set = |k: &str, v: JsValue| {
            let _ = js_sys::Reflect::set(&o, &JsValue::from_str(k), &v);
        };
        set("loaded", JsValue::from_f64(p.loaded as f64));
        set("total", p.total.map(|t| JsValue::from_f64(t as f64)).unwrap_or(JsValue::UNDEFINED));
        set("tensor", p.tensor.map(JsValue::from_str).unwrap_or(JsValue::UNDEFINED));
        set("fromCache", JsValue::from_f64(p.from_cache as f64));
        set("retries", JsValue::from_f64(p.retries as f64));
        if let Err(e) = f.call1(&JsValue::NULL, &o) {
            log::warn!("the progress callback threw: {}", js_text(&e));
        }
    }
}
