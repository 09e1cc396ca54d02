//! The browser loader against the local fault server (`tests/server/fault_server.py`, which
//! `./build.sh test` starts; `FAULT_SERVER` at build time gives its address, default
//! `http://127.0.0.1:8719`): a checkpoint through `fetch`, with a connection reset
//! mid-tensor, 5xx and 404 answers, a body short of its Content-Length, a Range request
//! answered with 200, an AbortSignal, and the Cache API store. Each load that succeeds gives
//! exactly the tensors the safetensors crate reads from the whole file; each that fails
//! gives the status, URL or offset, and drops its sink.
#![cfg(target_arch = "wasm32")]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use inferencelayer::web::cache::{cache_clear, cache_size};
use inferencelayer::web::fetch::{fetch_into, FetchOptions};
use inferencelayer::weights::source::{LoadReport, Progress};
use inferencelayer::weights::stream::{ByteSink, CheckpointReader, Kind, Limits, Loaded, Loader, Plan, TensorEntry};
use inferencelayer::{Error, Result};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const SERVER: &str = match option_env!("FAULT_SERVER") {
    Some(s) => s,
    None => "http://127.0.0.1:8719",
};
const FILE: &str = "small.safetensors";

/// A token no other test (or earlier run) used: faults that happen once happen per token.
fn token(what: &str) -> String {
    format!("{what}{:012x}", (js_sys::Math::random() * 2f64.powi(48)) as u64)
}

fn url(token: &str, fault: &str) -> String {
    format!("{SERVER}/{token}/{fault}/{FILE}")
}

async fn get(url: &str) -> web_sys::Response {
    let w = web_sys::window().unwrap();
    let r = JsFuture::from(w.fetch_with_str(url)).await.unwrap_or_else(|e| {
        panic!("{url}: {e:?}: is the fault server running (python3 tests/server/fault_server.py)?")
    });
    r.dyn_into().unwrap()
}

/// The whole file in one plain fetch.
async fn whole() -> Vec<u8> {
    let r = get(&url(&token("whole"), "ok")).await;
    let ab = JsFuture::from(r.array_buffer().unwrap()).await.unwrap();
    js_sys::Uint8Array::new(&ab).to_vec()
}

/// Every tensor as f32 bits, read by the safetensors crate from the whole file.
fn direct(bytes: &[u8]) -> BTreeMap<String, Vec<u32>> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, v)| {
            assert_eq!(v.dtype(), safetensors::Dtype::BF16);
            let bits = v.data().chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32().to_bits());
            (name, bits.collect())
        })
        .collect()
}

/// File offset of the middle of tensor `name`, off any chunk boundary.
fn mid(bytes: &[u8], name: &str) -> u64 {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let json: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n as usize]).unwrap();
    let o = &json[name]["data_offsets"];
    8 + n + (o[0].as_u64().unwrap() + o[1].as_u64().unwrap()) / 2 + 7
}

/// The requests the server saw under `token`: (Range header, status).
async fn log(token: &str) -> Vec<(Option<String>, u16)> {
    let r = get(&format!("{SERVER}/log/{token}")).await;
    let t = JsFuture::from(r.text().unwrap()).await.unwrap().as_string().unwrap();
    let v: Vec<serde_json::Value> = serde_json::from_str(&t).unwrap();
    v.iter().map(|e| (e["range"].as_str().map(str::to_string), e["status"].as_u64().unwrap_or(0) as u16)).collect()
}

fn range_start(r: &Option<String>) -> u64 {
    r.as_deref()
        .and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok())
        .expect("a Range: bytes=N- header")
}

type Emit = Box<dyn FnMut(&TensorEntry, Loaded) -> Result<()>>;

/// A checkpoint reader collecting f32 parts; sets `dropped` when it goes.
struct Collect {
    reader: CheckpointReader<Loader<Emit>>,
    dropped: Rc<Cell<bool>>,
}
impl ByteSink for Collect {
    fn push(&mut self, c: &[u8]) -> Result<()> {
        self.reader.push(c)
    }
    fn finish(&mut self) -> Result<()> {
        self.reader.finish()
    }
    fn current_tensor(&self) -> Option<&str> {
        self.reader.current_tensor()
    }
}
impl Drop for Collect {
    fn drop(&mut self) {
        self.dropped.set(true);
    }
}

struct Outcome {
    result: Result<LoadReport>,
    tensors: BTreeMap<String, Vec<u32>>,
    dropped: bool,
}

async fn load(url: &str, opts: FetchOptions<'_>) -> Outcome {
    let got = Rc::new(RefCell::new(BTreeMap::<String, Vec<u32>>::new()));
    let dropped = Rc::new(Cell::new(false));
    let g = got.clone();
    let emit: Emit = Box::new(move |t: &TensorEntry, l: Loaded| {
        if let Loaded::F32(p) = l {
            g.borrow_mut().entry(t.name.clone()).or_default().extend(p.data.iter().map(|v| v.to_bits()));
        }
        Ok(())
    });
    let reader = CheckpointReader::new(None, Limits::default(), Loader::new(Plan::take_all(Kind::F32, 1 << 30), emit));
    let sink = Collect { reader, dropped: dropped.clone() };
    let result = fetch_into(url, sink, opts).await.map(|(s, r)| {
        drop(s);
        r
    });
    let tensors = std::mem::take(&mut *got.borrow_mut());
    Outcome { result, tensors, dropped: dropped.get() }
}

fn quick() -> FetchOptions<'static> {
    FetchOptions { backoff_ms: 1, cache_block: None, ..FetchOptions::default() }
}

#[wasm_bindgen_test]
async fn fetch_loads_the_checkpoint_equal_to_its_direct_parse() {
    let bytes = whole().await;
    let t = token("ok");
    let seen = RefCell::new(Vec::new());
    let mut progress = |p: &Progress<'_>| seen.borrow_mut().push((p.loaded, p.total, p.tensor.map(str::to_string)));
    let o = load(&url(&t, "ok"), FetchOptions { progress: Some(&mut progress), progress_every: 256 << 10, ..quick() })
        .await;
    let rep = o.result.unwrap();
    assert_eq!(o.tensors, direct(&bytes));
    assert_eq!((rep.bytes, rep.requests, rep.retries, rep.skipped), (bytes.len() as u64, 1, 0, 0));
    assert_eq!(log(&t).await, vec![(None, 200)]);
    let seen = seen.into_inner();
    assert_eq!(seen.last().map(|s| (s.0, s.1)), Some((bytes.len() as u64, Some(bytes.len() as u64))));
    assert!(seen.iter().any(|s| s.2.as_deref() == Some("b.weight")), "progress names the tensor");
    console_log!("fetch: {} bytes in {} progress calls", rep.bytes, seen.len());
}

#[wasm_bindgen_test]
async fn a_reset_mid_tensor_resumes_with_a_range_request() {
    let bytes = whole().await;
    let at = mid(&bytes, "b.weight");
    let t = token("reset");
    let o = load(&url(&t, &format!("reset-{at}")), quick()).await;
    let rep = o.result.unwrap();
    assert_eq!(o.tensors, direct(&bytes));
    assert_eq!((rep.retries, rep.requests, rep.skipped), (1, 2, 0));
    let l = log(&t).await;
    assert_eq!(l.len(), 2, "{l:?}");
    let resumed = range_start(&l[1].0);
    assert!(resumed > 0 && resumed <= at && l[1].1 == 206, "resumed at byte {resumed} (reset at {at}): {l:?}");
    console_log!("reset at byte {at}: resumed with Range: bytes={resumed}-");
}

#[wasm_bindgen_test]
async fn a_body_short_of_its_content_length_resumes() {
    let bytes = whole().await;
    let at = mid(&bytes, "d.weight");
    let t = token("cut");
    let o = load(&url(&t, &format!("cut-{at}")), quick()).await;
    assert_eq!(o.result.unwrap().retries, 1);
    assert_eq!(o.tensors, direct(&bytes));
    let l = log(&t).await;
    assert_eq!((l.len(), l[1].1), (2, 206), "{l:?}");
    assert!(range_start(&l[1].0) <= at);
}

#[wasm_bindgen_test]
async fn a_range_request_answered_with_200_feeds_no_byte_twice() {
    let bytes = whole().await;
    let at = mid(&bytes, "b.weight");
    let t = token("r200");
    let o = load(&url(&t, &format!("range200-{at}")), quick()).await;
    let rep = o.result.unwrap();
    assert_eq!(o.tensors, direct(&bytes));
    let l = log(&t).await;
    assert_eq!(l.iter().map(|e| e.1).collect::<Vec<_>>(), vec![200, 200], "{l:?}");
    assert_eq!(rep.skipped, range_start(&l[1].0), "the prefix fed before the reset is skipped");
    assert_eq!(rep.retries, 1);
}

#[wasm_bindgen_test]
async fn http_failures_carry_their_status_and_url() {
    let t = token("s500");
    let u = url(&t, "status-500");
    let o = load(&u, FetchOptions { retries: 2, ..quick() }).await;
    match o.result.unwrap_err() {
        Error::Http { url, status, why } => {
            assert_eq!((url.as_str(), status), (u.as_str(), 500));
            assert!(why.contains("try again later") && why.contains("gave up after 2 retries"), "{why}");
        }
        e => panic!("expected HTTP 500, got {e}"),
    }
    assert!(o.dropped);
    assert_eq!(log(&t).await.len(), 3, "one request and two retries");

    let t = token("s503");
    let bytes = whole().await;
    let o = load(&url(&t, "status-503-once"), quick()).await;
    assert_eq!(o.result.unwrap().retries, 1);
    assert_eq!(o.tensors, direct(&bytes));

    let t = token("s404");
    let o = load(&url(&t, "status-404"), quick()).await;
    let e = o.result.unwrap_err();
    assert!(matches!(e, Error::Http { status: 404, .. }) && e.to_string().contains("check the URL"), "{e}");
    assert_eq!(log(&t).await.len(), 1, "a 404 is not retried");
    console_log!("{e}");
}

#[wasm_bindgen_test]
async fn an_abort_signal_cancels_the_load_and_drops_the_sink() {
    let ctl = web_sys::AbortController::new().unwrap();
    let signal = ctl.signal();
    let loaded = Cell::new(0u64);
    let mut progress = |p: &Progress<'_>| {
        loaded.set(p.loaded);
        if p.loaded >= 512 << 10 {
            ctl.abort();
        }
    };
    let t = token("abort");
    let opts = FetchOptions { progress: Some(&mut progress), progress_every: 1, signal: Some(signal), ..quick() };
    let o = load(&url(&t, "slow-20"), opts).await;
    match o.result.unwrap_err() {
        Error::Aborted { offset, .. } => assert_eq!(offset, loaded.get()),
        e => panic!("expected an abort, got {e}"),
    }
    assert!(o.dropped, "the sink is dropped");
    assert!(loaded.get() < 1 << 20, "stopped at byte {}", loaded.get());
}

#[wasm_bindgen_test]
async fn the_cache_serves_a_reload_and_resumes_a_cut_download() {
    let bytes = whole().await;
    let total = bytes.len() as u64;
    let block = 256 << 10;
    cache_clear().await.unwrap();
    assert_eq!(cache_size().await.unwrap(), 0);
    let t = token("cache");
    let u = url(&t, "ok");

    // A first load stopped after 1 MiB keeps its whole blocks.
    let ctl = web_sys::AbortController::new().unwrap();
    let fed = Cell::new(0u64);
    let mut progress = |p: &Progress<'_>| {
        fed.set(p.loaded);
        if p.loaded >= 1 << 20 {
            ctl.abort();
        }
    };
    let opts = FetchOptions {
        progress: Some(&mut progress),
        progress_every: 1,
        signal: Some(ctl.signal()),
        cache_block: Some(block),
        ..quick()
    };
    let o = load(&u, opts).await;
    assert!(matches!(o.result, Err(Error::Aborted { .. })));
    let kept = fed.get() / block;
    assert!(kept >= 4);
    assert_eq!(cache_size().await.unwrap(), kept * block);

    // The next load reads them from the cache and asks the server for the rest only.
    let o = load(&u, FetchOptions { cache_block: Some(block), ..quick() }).await;
    let rep = o.result.unwrap();
    assert_eq!(o.tensors, direct(&bytes));
    assert_eq!(rep.from_cache, kept * block);
    let l = log(&t).await;
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!((range_start(&l[1].0), l[1].1), (kept * block, 206));
    assert_eq!(cache_size().await.unwrap(), total);

    // A reload reads the cache and asks the server for the last byte only (the file's length
    // and ETag, to notice it changed).
    let o = load(&u, FetchOptions { cache_block: Some(block), ..quick() }).await;
    let rep = o.result.unwrap();
    assert_eq!(o.tensors, direct(&bytes));
    assert_eq!((rep.from_cache, rep.requests), (total, 1));
    let l = log(&t).await;
    assert_eq!(l.len(), 3, "{l:?}");
    assert_eq!((range_start(&l[2].0), l[2].1), (total - 1, 206));
    console_log!("cache: {kept} blocks kept from the cut load, reload from cache: {total} bytes, one 1-byte request");

    cache_clear().await.unwrap();
    assert_eq!(cache_size().await.unwrap(), 0);
}
