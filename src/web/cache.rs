//! A persistent copy of downloaded checkpoints in the browser's Cache API, so a reload
//! reads the weights from disk instead of the network, and a download cut short (a closed
//! tab, a lost connection) continues where its stored blocks end.
//!
//! Layout, in the cache named [`CACHE_NAME`]: each file is cut into blocks of a fixed size
//! (8 MiB by default, so that one block is all a load holds in wasm memory for the cache);
//! block `i` of the file at `url` is stored under the derived key
//! `https://inferencelayer.invalid/v1/<url, percent-encoded>/block/<i>`, and the file's
//! length, version (ETag) and block size under `.../file`, as JSON. Blocks are written as
//! the load feeds them, so whatever was stored before an interruption is used by the next
//! load; a file whose length or version on the server no longer matches is cleared first.
//!
//! [`cache_size`] and [`cache_clear`] (exported to JS as `cacheSize()` and `cacheClear()`)
//! let a page show and free the space.

use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Cache, Request, Response};

use super::scope::{js_text, Scope};
use crate::error::{Error, Result};
use crate::weights::source::{BlockStore, StoredFile};

/// The Cache API cache holding checkpoint blocks.
pub const CACHE_NAME: &str = "inferencelayer-weights-v1";

/// Default block size: 8 MiB.
pub const DEFAULT_BLOCK: u64 = 8 << 20;

const KEY_ROOT: &str = "https://inferencelayer.invalid/v1/";

fn cache_err(what: &str, e: &JsValue) -> Error {
    Error::Cache(format!("{what}: {}", js_text(e)))
}

async fn open_cache() -> Result<Cache> {
    let caches = Scope::current()?
        .caches()
        .map_err(|e| cache_err("the Cache API is not available (it needs https or localhost)", &e))?;
    let c = JsFuture::from(caches.open(CACHE_NAME)).await.map_err(|e| cache_err("cannot open the cache", &e))?;
    Ok(c.unchecked_into())
}

/// The key prefix of the file at `url`.
fn prefix(url: &str) -> String {
    format!("{KEY_ROOT}{}/", String::from(js_sys::encode_uri_component(url)))
}

/// Every key (request URL) in the cache.
async fn keys(cache: &Cache) -> Result<Vec<String>> {
    let a = JsFuture::from(cache.keys()).await.map_err(|e| cache_err("cannot list the cache", &e))?;
    let a: Array = a.unchecked_into();
    Ok(a.iter().filter_map(|r| r.dyn_into::<Request>().ok()).map(|r| r.url()).collect())
}

async fn get_response(cache: &Cache, key: &str) -> Result<Option<Response>> {
    let r = JsFuture::from(cache.match_with_str(key)).await.map_err(|e| cache_err("cannot read the cache", &e))?;
    Ok(r.dyn_into::<Response>().ok())
}

async fn get_file(cache: &Cache, prefix: &str) -> Result<Option<StoredFile>> {
    let Some(r) = get_response(cache, &format!("{prefix}file")).await? else {
        return Ok(None);
    };
    let p = r.text().map_err(|e| cache_err("cannot read a cache entry", &e))?;
    let text = JsFuture::from(p).await.map_err(|e| cache_err("cannot read a cache entry", &e))?;
    Ok(text.as_string().and_then(|t| serde_json::from_str(&t).ok()))
}

/// One file's blocks in the Cache API: the [`BlockStore`] [`super::fetch::fetch_into`] uses.
pub struct CacheStore {
    cache: Cache,
    prefix: String,
    block: u64,
}

impl CacheStore {
    /// The store of the file at `url`, in blocks of `block` bytes (a store cut to another
    /// block size is cleared when first read). [`Error::Cache`] when the Cache API is
    /// missing (an insecure context) or refuses to open.
    pub async fn open(url: &str, block: u64) -> Result<Self> {
        Ok(Self { cache: open_cache().await?, prefix: prefix(url), block: block.max(1) })
    }

    fn block_key(&self, i: u64) -> String {
        format!("{}block/{i}", self.prefix)
    }

    async fn put_body(&self, key: &str, resp: std::result::Result<Response, JsValue>) -> Result<()> {
        let resp = resp.map_err(|e| cache_err("cannot make a cache entry", &e))?;
        JsFuture::from(self.cache.put_with_str(key, &resp))
            .await
            .map_err(|e| cache_err("cannot write the cache (is the storage quota full?)", &e))?;
        Ok(())
    }
}

impl BlockStore for CacheStore {
    fn block_size(&self) -> u64 {
        self.block
    }

    async fn file(&mut self) -> Result<Option<StoredFile>> {
        get_file(&self.cache, &self.prefix).await
    }

    async fn set_file(&mut self, file: &StoredFile) -> Result<()> {
        let json = serde_json::to_string(file).map_err(|e| Error::Cache(e.to_string()))?;
        self.put_body(&format!("{}file", self.prefix), Response::new_with_opt_str(Some(&json))).await
    }

    async fn blocks(&mut self) -> Result<Vec<u64>> {
        let p = format!("{}block/", self.prefix);
        Ok(keys(&self.cache).await?.iter().filter_map(|k| k.strip_prefix(&p)?.parse().ok()).collect())
    }

    async fn get(&mut self, index: u64) -> Result<Option<Vec<u8>>> {
        let Some(r) = get_response(&self.cache, &self.block_key(index)).await? else {
            return Ok(None);
        };
        let p = r.array_buffer().map_err(|e| cache_err("cannot read a cached block", &e))?;
        let ab = JsFuture::from(p).await.map_err(|e| cache_err("cannot read a cached block", &e))?;
        Ok(Some(Uint8Array::new(&ab).to_vec()))
    }

    async fn put(&mut self, index: u64, bytes: &[u8]) -> Result<()> {
        // the Response copies the bytes out of wasm memory
        let body = Uint8Array::from(bytes);
        self.put_body(&self.block_key(index), Response::new_with_opt_buffer_source(Some(&body))).await
    }

    async fn clear(&mut self) -> Result<()> {
        for k in keys(&self.cache).await? {
            if k.starts_with(&self.prefix) {
                JsFuture::from(self.cache.delete_with_str(&k))
                    .await
                    .map_err(|e| cache_err("cannot delete a cache entry", &e))?;
            }
        }
        Ok(())
    }
}

/// Bytes of checkpoint data the cache holds, over every file (from each file's recorded
/// length and block size; a block counts once stored). [`Error::Cache`] without a Cache API.
pub async fn cache_size() -> Result<u64> {
    let cache = open_cache().await?;
    let keys = keys(&cache).await?;
    let mut size = 0u64;
    for k in keys.iter().filter(|k| k.starts_with(KEY_ROOT) && k.ends_with("/file")) {
        let prefix = &k[..k.len() - "file".len()];
        let Some(f) = get_file(&cache, prefix).await? else { continue };
        let blocks = format!("{prefix}block/");
        for i in keys.iter().filter_map(|k| k.strip_prefix(&blocks)?.parse::<u64>().ok()) {
            size += f.block_size.min(f.total.saturating_sub(i * f.block_size));
        }
    }
    Ok(size)
}

/// Forget every cached checkpoint (deletes the cache [`CACHE_NAME`]). [`Error::Cache`]
/// without a Cache API.
pub async fn cache_clear() -> Result<()> {
    let caches = Scope::current()?.caches().map_err(|e| cache_err("the Cache API is not available", &e))?;
    JsFuture::from(caches.delete(CACHE_NAME)).await.map_err(|e| cache_err("cannot delete the cache", &e))?;
    Ok(())
}

/// Forget the cached copy of the file at `url`.
pub async fn cache_clear_url(url: &str) -> Result<()> {
    CacheStore::open(url, DEFAULT_BLOCK).await?.clear().await
}

/// `cacheSize(): Promise<number>`: bytes of checkpoints kept in the browser cache.
#[wasm_bindgen(js_name = cacheSize)]
pub async fn js_cache_size() -> std::result::Result<f64, JsValue> {
    cache_size().await.map(|n| n as f64).map_err(|e| JsValue::from_str(&e.to_string()))
}

/// `cacheClear(): Promise<void>`: forget every cached checkpoint.
#[wasm_bindgen(js_name = cacheClear)]
pub async fn js_cache_clear() -> std::result::Result<(), JsValue> {
    cache_clear().await.map_err(|e| JsValue::from_str(&e.to_string()))
}
