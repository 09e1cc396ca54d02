//! Byte sources: a checkpoint's bytes from a file or the network, fed to a [`ByteSink`] by
//! one async driver, [`load`], the same natively and on the web.
//!
//! A [`ByteSource`] opens the file at a byte offset (an HTTP `Range: bytes=N-` request, a
//! seek) and yields the body in chunks. The driver feeds every byte of the file to the sink
//! exactly once, in order, and around that:
//! - resumes a dropped connection (a network error, a body that ends before its
//!   `Content-Length`, a file that ends before its known length) by opening again at the
//!   first byte not yet fed, with bounded retries and a doubling backoff; a 5xx, 408 or 429
//!   status is retried the same way, any other status is an [`Error::Http`] at once;
//! - skips the prefix it already fed when a server answers a Range request with the whole
//!   file (HTTP 200 instead of 206), and refuses a response that starts past the byte it
//!   asked for, a body longer than its `Content-Length` or than the file, or a file whose
//!   length or version (ETag) changed between two requests ([`Error::Transfer`]);
//! - reports progress (bytes fed, total, the tensor being read) and honours cancellation
//!   ([`Error::Aborted`]);
//! - optionally reads and writes a [`BlockStore`] (the browser's Cache API, see
//!   `crate::web::cache`): fixed-size blocks of the file already downloaded are fed from it,
//!   and the network is asked only for the rest, so a reload (or a download cut short)
//!   continues where the stored blocks end; the blocks of a file the sink refused are
//!   dropped, so a bad download is never served again from the store.
//!
//! Nothing half-loaded stays in use: [`load`] takes the sink by value and gives it back only
//! when the whole file was fed and [`ByteSink::finish`] accepted it; on any error the sink
//! is dropped with everything it built.

use std::fmt;

use super::stream::ByteSink;
use crate::error::{Error, Result};

/// What a source's body will deliver once opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// File offset of the body's first byte: the offset asked for when the range was
    /// honoured (HTTP 206, a seek), 0 when the whole file comes back (HTTP 200).
    pub start: u64,
    /// Bytes the body declares (`Content-Length`, or the span of `Content-Range`), if any.
    pub len: Option<u64>,
    /// The file's length in bytes, when known (`Content-Range: bytes a-b/total`, a 200's
    /// `Content-Length`, a file's size).
    pub total: Option<u64>,
    /// The file's version (an ETag, else `Last-Modified`), to notice a file that changed
    /// between two requests.
    pub version: Option<String>,
}

/// Where a checkpoint's bytes come from: a file natively, `fetch` on the web.
///
/// Futures are not `Send` (on the web nothing is), hence `async fn` in a public trait.
#[allow(async_fn_in_trait)]
pub trait ByteSource {
    /// The URL or path, for errors and progress.
    fn url(&self) -> &str;
    /// Start (or restart) the body at file byte `offset`, dropping any body in flight.
    /// An HTTP error status is [`Error::Http`] (see [`http_error`]), a failed connection
    /// [`Error::Network`].
    async fn open(&mut self, offset: u64) -> Result<Opened>;
    /// The next chunk of the body into `buf` (cleared first): `Ok(false)` at its end, with
    /// `buf` empty. A dropped connection is [`Error::Network`].
    async fn read(&mut self, buf: &mut Vec<u8>) -> Result<bool>;
    /// Wait `ms` milliseconds before a retry (a timer on the web, a sleep natively).
    async fn pause(&mut self, ms: u32);
    /// Let the event loop run (called every [`YIELD_EVERY`] bytes): on the web a body whose
    /// chunks are already buffered resolves each read as a microtask, and would otherwise
    /// hold the thread for the whole load. Natively nothing.
    async fn yield_now(&mut self) {}
}

/// Bytes fed between two [`ByteSource::yield_now`] calls: 32 MiB.
pub const YIELD_EVERY: u64 = 32 << 20;

/// What a [`BlockStore`] records about the file its blocks belong to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredFile {
    /// The file's length in bytes.
    pub total: u64,
    /// Its version (ETag or `Last-Modified`) when it was stored, if the server gave one.
    pub version: Option<String>,
    /// The block size the blocks were cut to, in bytes.
    pub block_size: u64,
}

/// A persistent store of one file's blocks: block `i` holds file bytes
/// `i * block_size .. min((i + 1) * block_size, total)`. Blocks are written only once the
/// driver has fed them, in order; the store may lose any of them (eviction) without harm.
#[allow(async_fn_in_trait)]
pub trait BlockStore {
    /// Bytes per block (the last block of the file may be shorter).
    fn block_size(&self) -> u64;
    /// What was recorded about the file, if anything.
    async fn file(&mut self) -> Result<Option<StoredFile>>;
    /// Record the file the blocks belong to (before the first block is put).
    async fn set_file(&mut self, file: &StoredFile) -> Result<()>;
    /// Indices of the blocks stored, in any order.
    async fn blocks(&mut self) -> Result<Vec<u64>>;
    /// Block `index`, if stored.
    async fn get(&mut self, index: u64) -> Result<Option<Vec<u8>>>;
    /// Store block `index`.
    async fn put(&mut self, index: u64, bytes: &[u8]) -> Result<()>;
    /// Forget the file and every block.
    async fn clear(&mut self) -> Result<()>;
}

/// Where a load stands, as handed to [`LoadOptions::progress`].
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// Bytes of the file fed to the sink so far.
    pub loaded: u64,
    /// The file's length, once known.
    pub total: Option<u64>,
    /// The tensor being read (from [`ByteSink::current_tensor`]).
    pub tensor: Option<&'a str>,
    /// Of `loaded`, the bytes that came from the block store.
    pub from_cache: u64,
    /// Retries so far.
    pub retries: u32,
}

/// How [`load`] behaves: retries, progress, cancellation.
pub struct LoadOptions<'a> {
    /// Retries allowed in a row without a byte of progress (a retry that feeds bytes
    /// restores the budget). Default 5.
    pub retries: u32,
    /// Wait before the first retry, in ms; it doubles with each further retry in a row, up
    /// to 8 s. Default 250.
    pub backoff_ms: u32,
    /// Called at least every [`Self::progress_every`] bytes, and once at the end.
    pub progress: Option<&'a mut dyn FnMut(&Progress<'_>)>,
    /// Bytes between two progress calls. Default 1 MiB.
    pub progress_every: u64,
    /// Polled before each request and each chunk: `true` stops the load with
    /// [`Error::Aborted`].
    pub cancelled: Option<&'a dyn Fn() -> bool>,
}

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        Self { retries: 5, backoff_ms: 250, progress: None, progress_every: 1 << 20, cancelled: None }
    }
}

impl fmt::Debug for LoadOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadOptions")
            .field("retries", &self.retries)
            .field("backoff_ms", &self.backoff_ms)
            .field("progress", &self.progress.is_some())
            .field("progress_every", &self.progress_every)
            .field("cancelled", &self.cancelled.is_some())
            .finish()
    }
}

/// What a finished load did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// The file's length: every byte fed once.
    pub bytes: u64,
    /// Of those, bytes fed from the block store.
    pub from_cache: u64,
    /// Requests (opens) made to the source.
    pub requests: u32,
    /// Retries taken (dropped connections resumed, 5xx answers retried).
    pub retries: u32,
    /// Bytes received again and skipped (a Range request answered with the whole file).
    pub skipped: u64,
    /// Blocks written to the block store.
    pub blocks_stored: u64,
}

/// The most a backoff waits, in ms.
const MAX_BACKOFF_MS: u32 = 8000;

/// An [`Error::Http`] for `status` from `url`, saying what to do about it.
pub fn http_error(url: &str, status: u16, status_text: &str) -> Error {
    let advice = match status {
        401 | 403 => "the server refuses access: check the URL's credentials, or its CORS headers",
        404 | 410 => "no such file: check the URL",
        416 => "the server cannot serve the byte range asked for: the file is shorter than expected",
        408 | 429 => "the server is busy: try again later",
        500..=599 => "the server failed: try again later",
        _ => "the server did not send the checkpoint",
    };
    let text = if status_text.is_empty() { String::new() } else { format!("{status_text}; ") };
    Error::Http { url: url.to_string(), status, why: format!("{text}{advice}") }
}

/// Whether a retry may help: a dropped connection, a 5xx, 408 or 429.
fn transient(e: &Error) -> bool {
    match e {
        Error::Network { .. } => true,
        Error::Http { status, .. } => *status >= 500 || *status == 408 || *status == 429,
        _ => false,
    }
}

/// Add "after N retries" to an error the driver gives up on.
fn gave_up(e: Error, retries: u32) -> Error {
    if retries == 0 {
        return e;
    }
    let note = format!(" (gave up after {retries} retries)");
    match e {
        Error::Network { url, offset, why } => Error::Network { url, offset, why: why + &note },
        Error::Http { url, status, why } => Error::Http { url, status, why: why + &note },
        e => e,
    }
}

/// A borrowed sink is a sink: `load(&mut src, &mut my_sink, ..)` leaves the dropping to the
/// caller.
impl<T: ByteSink + ?Sized> ByteSink for &mut T {
    fn push(&mut self, chunk: &[u8]) -> Result<()> {
        (**self).push(chunk)
    }
    fn finish(&mut self) -> Result<()> {
        (**self).finish()
    }
    fn current_tensor(&self) -> Option<&str> {
        (**self).current_tensor()
    }
}

/// A [`BlockStore`] that stores nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoStore;

impl BlockStore for NoStore {
    fn block_size(&self) -> u64 {
        1
    }
    async fn file(&mut self) -> Result<Option<StoredFile>> {
        Ok(None)
    }
    async fn set_file(&mut self, _: &StoredFile) -> Result<()> {
        Ok(())
    }
    async fn blocks(&mut self) -> Result<Vec<u64>> {
        Ok(Vec::new())
    }
    async fn get(&mut self, _: u64) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
    async fn put(&mut self, _: u64, _: &[u8]) -> Result<()> {
        Ok(())
    }
    async fn clear(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Feed the whole file from `source` to `sink`, resuming and retrying as the module doc
/// says; returns the sink (after its [`ByteSink::finish`] succeeded) and what the load did.
/// On any error the sink is dropped. Errors: the sink's own, [`Error::Http`],
/// [`Error::Network`] (after the retries), [`Error::Transfer`], [`Error::Aborted`].
pub async fn load<S: ByteSource, K: ByteSink>(
    source: &mut S,
    sink: K,
    options: LoadOptions<'_>,
) -> Result<(K, LoadReport)> {
    Driver::new(source.url(), sink, options).run(source, None::<&mut NoStore>).await
}

/// [`load`], reading the blocks `store` already holds first and storing each block once fed,
/// so that a later load of the same file reads from the store. A store that fails (quota,
/// eviction) is logged and left aside; the load goes on from the network. A file whose
/// length or version on the server differs from the stored one clears the store first.
pub async fn load_cached<S: ByteSource, B: BlockStore, K: ByteSink>(
    source: &mut S,
    store: &mut B,
    sink: K,
    options: LoadOptions<'_>,
) -> Result<(K, LoadReport)> {
    Driver::new(source.url(), sink, options).run(source, Some(store)).await
}

/// The body being read.
struct Body {
    /// File offset of the next byte it delivers.
    at: u64,
    /// File offset where it declared it would end.
    end: Option<u64>,
}

/// Blocks of the file being written to a store as they are fed.
struct Writer {
    block: u64,
    /// File offset of `buf[0]`, a multiple of `block`.
    start: u64,
    buf: Vec<u8>,
    recorded: bool,
}

struct Driver<'a, K> {
    url: String,
    sink: K,
    opts: LoadOptions<'a>,
    fed: u64,
    total: Option<u64>,
    version: Option<String>,
    report: LoadReport,
    /// Retries in a row without progress.
    failures: u32,
    reported: u64,
    yielded: u64,
    /// Whether the sink refused the file (then its stored blocks are dropped).
    refused: bool,
}

impl<'a, K: ByteSink> Driver<'a, K> {
    fn new(url: &str, sink: K, opts: LoadOptions<'a>) -> Self {
        Self {
            url: url.to_string(),
            sink,
            opts,
            fed: 0,
            total: None,
            version: None,
            report: LoadReport::default(),
            failures: 0,
            reported: 0,
            yielded: 0,
            refused: false,
        }
    }

    fn check_cancel(&self) -> Result<()> {
        match self.opts.cancelled {
            Some(c) if c() => Err(Error::Aborted { url: self.url.clone(), offset: self.fed }),
            _ => Ok(()),
        }
    }

    fn transfer(&self, why: impl fmt::Display) -> Error {
        Error::Transfer { url: self.url.clone(), offset: self.fed, why: why.to_string() }
    }

    fn progress(&mut self, force: bool) {
        if !force && self.fed - self.reported < self.opts.progress_every {
            return;
        }
        if force && self.fed == self.reported && self.fed > 0 {
            return; // the last chunk was reported already
        }
        self.reported = self.fed;
        if let Some(p) = self.opts.progress.as_mut() {
            p(&Progress {
                loaded: self.fed,
                total: self.total,
                tensor: self.sink.current_tensor(),
                from_cache: self.report.from_cache,
                retries: self.report.retries,
            });
        }
    }

    /// Give up on `e`, or wait and let the caller try again.
    async fn retry<S: ByteSource>(&mut self, source: &mut S, e: Error) -> Result<()> {
        if matches!(e, Error::Aborted { .. }) {
            return Err(Error::Aborted { url: self.url.clone(), offset: self.fed });
        }
        if !transient(&e) || self.failures >= self.opts.retries {
            return Err(gave_up(e, self.report.retries));
        }
        let ms = self.opts.backoff_ms.saturating_mul(1 << self.failures.min(15)).min(MAX_BACKOFF_MS);
        self.failures += 1;
        self.report.retries += 1;
        log::warn!("{}: {e}; retrying from byte {} in {ms} ms", self.url, self.fed);
        source.pause(ms).await;
        self.check_cancel()
    }

    /// Check a freshly opened body against what the load knows.
    fn accept(&mut self, o: &Opened) -> Result<Body> {
        self.report.requests += 1;
        if o.start > self.fed {
            return Err(
                self.transfer(format!("the response starts at byte {}, but byte {} was asked for", o.start, self.fed))
            );
        }
        if let (Some(t), Some(t2)) = (self.total, o.total) {
            if t != t2 {
                return Err(self.transfer(format!(
                    "the file's length changed from {t} to {t2} bytes between two requests; load it again"
                )));
            }
        }
        if let (Some(v), Some(v2)) = (&self.version, &o.version) {
            if v != v2 {
                return Err(self.transfer(format!(
                    "the file changed on the server between two requests (version {v}, now {v2}); load it again"
                )));
            }
        }
        self.total = self.total.or(o.total);
        if self.version.is_none() {
            self.version = o.version.clone();
        }
        Ok(Body { at: o.start, end: o.len.map(|l| o.start + l) })
    }

    async fn open<S: ByteSource>(&mut self, source: &mut S) -> Result<Body> {
        loop {
            self.check_cancel()?;
            match source.open(self.fed).await {
                Ok(o) => return self.accept(&o),
                Err(e) => self.retry(source, e).await?,
            }
        }
    }

    /// Feed `chunk` (file bytes from `self.fed`) to the sink and the store's writer.
    async fn feed<B: BlockStore>(&mut self, chunk: &[u8], store: &mut Option<(&mut B, Writer)>) -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        self.push(chunk)?;
        self.fed += chunk.len() as u64;
        self.failures = 0;
        if let Some((s, w)) = store {
            let mut rest = chunk;
            let mut failed = None;
            while !rest.is_empty() {
                let take = ((w.block - w.buf.len() as u64) as usize).min(rest.len());
                w.buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                let last = Some(w.start + w.buf.len() as u64) == self.total;
                if w.buf.len() as u64 == w.block || last {
                    if let Err(e) = Self::put(&mut **s, w, self.total, &self.version).await {
                        failed = Some(e);
                        break;
                    }
                    self.report.blocks_stored += 1;
                }
            }
            if let Some(e) = failed {
                log::warn!("{}: the block store failed ({e}); loading on without it", self.url);
                *store = None;
            }
        }
        self.progress(false);
        Ok(())
    }

    async fn put<B: BlockStore>(s: &mut B, w: &mut Writer, total: Option<u64>, version: &Option<String>) -> Result<()> {
        let Some(total) = total else {
            return Err(Error::Input("the file's length is not known".into()));
        };
        if !w.recorded {
            s.set_file(&StoredFile { total, version: version.clone(), block_size: w.block }).await?;
            w.recorded = true;
        }
        s.put(w.start / w.block, &w.buf).await?;
        w.start += w.buf.len() as u64;
        w.buf.clear();
        Ok(())
    }

    async fn run<S: ByteSource, B: BlockStore>(
        mut self,
        source: &mut S,
        mut store: Option<&mut B>,
    ) -> Result<(K, LoadReport)> {
        match self.load(source, store.as_deref_mut()).await {
            Ok(()) => Ok((self.sink, self.report)),
            Err(e) => {
                // Bytes the sink refused (a truncated or malformed file, a wrong checksum) must
                // not be served again from the store: the next load asks the network.
                if self.refused {
                    if let Some(s) = store {
                        if let Err(c) = s.clear().await {
                            log::warn!("{}: the block store cannot be cleared ({c})", self.url);
                        }
                    }
                }
                Err(e)
            }
        }
    }

    fn push(&mut self, chunk: &[u8]) -> Result<()> {
        let r = self.sink.push(chunk);
        self.refused |= r.is_err();
        r
    }

    async fn load<S: ByteSource, B: BlockStore>(&mut self, source: &mut S, store: Option<&mut B>) -> Result<()> {
        let mut buf = Vec::new();
        // The stored prefix: blocks 0..prefix, if the store knows this file.
        let mut store = store;
        let mut known: Option<StoredFile> = None;
        let mut prefix = 0u64;
        if let Some(s) = store.as_deref_mut() {
            match Self::stored_prefix(s).await {
                Ok(Some((f, n))) => {
                    prefix = n;
                    known = Some(f);
                }
                Ok(None) => {}
                Err(e) => {
                    log::warn!("{}: the block store cannot be read ({e}); loading without it", self.url);
                    store = None;
                }
            }
        }
        let block = store.as_deref().map(|s| s.block_size().max(1)).unwrap_or(1);
        let stored_end = known.as_ref().map(|f| (prefix * block).min(f.total)).unwrap_or(0);

        // The whole file stored: ask the network for its last byte only, to notice a file
        // that changed there since (another length or version); it is then downloaded again.
        // When the network cannot answer (offline, an error status), the stored copy is used.
        if let Some(f) = known.clone().filter(|f| stored_end >= f.total && f.total > 0) {
            self.check_cancel()?;
            match source.open(f.total - 1).await {
                Ok(o) => {
                    self.report.requests += 1;
                    let same = o.total.is_none_or(|t| t == f.total)
                        && (f.version.is_none() || o.version.is_none() || f.version == o.version);
                    if !same {
                        log::info!("{}: the file changed on the server since it was stored; downloading it again", self.url);
                        if let Some(s) = store.as_deref_mut() {
                            if let Err(e) = s.clear().await {
                                log::warn!("{}: the block store cannot be cleared ({e}); loading without it", self.url);
                                store = None;
                            }
                        }
                        known = None;
                        prefix = 0;
                    }
                }
                Err(e @ Error::Aborted { .. }) => return Err(e),
                Err(e) => log::info!("{}: the stored copy cannot be checked against the server ({e}); using it", self.url),
            }
        }
        let stored_end = if known.is_some() { stored_end } else { 0 };

        // Open the network where the stored blocks end (unless they hold the whole file), and
        // check it still serves the file they were cut from.
        let mut body = None;
        if known.as_ref().is_none_or(|f| stored_end < f.total) {
            self.fed = stored_end;
            let b = self.open(source).await?;
            if let Some(f) = &known {
                let same = self.total == Some(f.total)
                    && (f.version.is_none() || self.version.is_none() || f.version == self.version);
                if !same {
                    log::info!("{}: the stored copy is stale; downloading again", self.url);
                    if let Some(s) = store.as_deref_mut() {
                        if let Err(e) = s.clear().await {
                            log::warn!("{}: the block store cannot be cleared ({e}); loading without it", self.url);
                            store = None;
                        }
                    }
                    known = None;
                    prefix = 0;
                }
            }
            self.fed = 0;
            // a body that does not start at 0 is reopened at 0 when the stored blocks are stale
            body = if known.is_some() || b.at == 0 { Some(b) } else { None };
        } else {
            self.total = known.as_ref().map(|f| f.total);
            self.version = known.as_ref().and_then(|f| f.version.clone());
        }

        // The stored blocks first.
        for i in 0..prefix {
            self.check_cancel()?;
            let want = (block).min(self.total.unwrap_or(0) - i * block);
            let got = match store.as_deref_mut() {
                Some(s) => s.get(i).await.unwrap_or(None),
                None => None,
            };
            match got {
                Some(b) if b.len() as u64 == want => {
                    self.push(&b)?;
                    self.fed += want;
                    self.report.from_cache += want;
                    self.progress(false);
                }
                _ => {
                    // evicted (or cut) since it was listed: the network gives the rest
                    log::info!("{}: stored block {i} is gone; downloading from byte {}", self.url, self.fed);
                    if body.as_ref().is_some_and(|b| b.at != self.fed) {
                        body = None;
                    }
                    break;
                }
            }
        }
        let mut store = store.map(|s| {
            let start = self.fed - self.fed % block;
            (s, Writer { block, start, buf: Vec::new(), recorded: known.is_some() })
        });
        if let Some((_, w)) = &store {
            if w.start != self.fed {
                // cannot happen: the stored prefix is whole blocks
                store = None;
            }
        }

        // Then the network, resuming after each drop.
        loop {
            if Some(self.fed) == self.total {
                break;
            }
            self.check_cancel()?;
            let b = match body.as_mut() {
                Some(b) => b,
                None => {
                    let b = self.open(source).await?;
                    body.insert(b)
                }
            };
            match source.read(&mut buf).await {
                Ok(true) => {
                    let n = buf.len() as u64;
                    if let Some(end) = b.end {
                        if b.at + n > end {
                            let why = format!(
                                "the body is longer than its declared length ({} bytes past byte {end})",
                                b.at + n - end
                            );
                            return Err(self.transfer(why));
                        }
                    }
                    if let Some(t) = self.total {
                        if b.at + n > t {
                            return Err(self.transfer(format!("the body runs past the file's length of {t} bytes")));
                        }
                    }
                    // bytes before `fed` were fed already (a 200 answering a Range request)
                    let skip = self.fed.saturating_sub(b.at).min(n);
                    b.at += n;
                    self.report.skipped += skip;
                    let chunk = std::mem::take(&mut buf);
                    let r = self.feed(&chunk[skip as usize..], &mut store).await;
                    buf = chunk;
                    r?;
                    if self.fed - self.yielded >= YIELD_EVERY {
                        self.yielded = self.fed;
                        source.yield_now().await;
                    }
                }
                Ok(false) => {
                    let Body { at, end } = body.take().unwrap_or(Body { at: 0, end: None });
                    let short = match (end, self.total) {
                        (Some(end), _) if at < end => {
                            Some(format!("the body ended at byte {at}, {} bytes before its declared end", end - at))
                        }
                        (_, Some(t)) if self.fed < t => {
                            Some(format!("the connection closed at byte {} of {t}", self.fed))
                        }
                        _ => None,
                    };
                    match short {
                        Some(why) => {
                            let e = Error::Network { url: self.url.clone(), offset: self.fed, why };
                            self.retry(source, e).await?;
                        }
                        None => {
                            // the length was not declared: the body's end is the file's end
                            self.total = Some(self.fed);
                            break;
                        }
                    }
                }
                Err(e) => {
                    body = None;
                    self.retry(source, e).await?;
                }
            }
        }
        if let Err(e) = self.sink.finish() {
            self.refused = true;
            return Err(e);
        }
        self.report.bytes = self.fed;
        self.progress(true);
        Ok(())
    }

    /// The file a store holds and how many blocks from the start it holds in a row.
    async fn stored_prefix<B: BlockStore>(s: &mut B) -> Result<Option<(StoredFile, u64)>> {
        let Some(f) = s.file().await? else {
            return Ok(None);
        };
        if f.block_size != s.block_size() || f.block_size == 0 {
            s.clear().await?;
            return Ok(None);
        }
        let mut have = s.blocks().await?;
        have.sort_unstable();
        let blocks = f.total.div_ceil(f.block_size);
        let mut n = 0;
        for i in have {
            if i == n && n < blocks {
                n += 1;
            }
        }
        Ok(Some((f, n)))
    }
}

// ---------------------------------------------------------------------------------------
// Native: a file.

/// A checkpoint file on disk, read in chunks (native only).
#[cfg(not(target_arch = "wasm32"))]
pub struct FileSource {
    path: std::path::PathBuf,
    name: String,
    file: Option<std::fs::File>,
    chunk: usize,
}

#[cfg(not(target_arch = "wasm32"))]
impl FileSource {
    /// The file at `path`, read 1 MiB at a time.
    pub fn new(path: impl Into<std::path::PathBuf>) -> Self {
        let path = path.into();
        Self { name: path.display().to_string(), path, file: None, chunk: 1 << 20 }
    }

    /// Read `bytes` at a time (at least 1).
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk = bytes.max(1);
        self
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for FileSource {
    fn url(&self) -> &str {
        &self.name
    }

    async fn open(&mut self, offset: u64) -> Result<Opened> {
        use std::io::{Seek, SeekFrom};
        self.file = None;
        let mut f = std::fs::File::open(&self.path).map_err(|e| Error::file(&self.name, e))?;
        let meta = f.metadata().map_err(|e| Error::file(&self.name, e))?;
        let total = meta.len();
        if offset > total {
            return Err(Error::Transfer {
                url: self.name.clone(),
                offset,
                why: format!("the file has only {total} bytes"),
            });
        }
        f.seek(SeekFrom::Start(offset)).map_err(|e| Error::file(&self.name, e))?;
        let version = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| format!("mtime {}.{:09}", d.as_secs(), d.subsec_nanos()));
        self.file = Some(f);
        Ok(Opened { start: offset, len: Some(total - offset), total: Some(total), version })
    }

    async fn read(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        use std::io::Read;
        buf.clear();
        let Some(f) = self.file.as_mut() else {
            return Err(Error::Input(format!("{}: read before open", self.name)));
        };
        buf.resize(self.chunk, 0);
        let n = loop {
            match f.read(buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    buf.clear();
                    return Err(Error::file(&self.name, e));
                }
            }
        };
        buf.truncate(n);
        Ok(n > 0)
    }

    async fn pause(&mut self, ms: u32) {
        std::thread::sleep(std::time::Duration::from_millis(ms as u64));
    }
}
