//! The byte-source driver on files with injected faults: a connection reset mid-tensor, 5xx
//! and 4xx answers, a body cut short of (or running past) its declared length, a Range
//! request answered with the whole file, a file that changes between requests,
//! cancellation, and the block store that lets a later load resume. Every load that
//! succeeds gives exactly the tensors the safetensors crate reads from the same bytes; every
//! one that fails gives a typed error with the status, URL, offset or tensor, and drops the
//! sink.
#![cfg(not(target_arch = "wasm32"))]

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::rc::Rc;

use half::bf16;
use inferencelayer::weights::q8::Q8Tensor;
use inferencelayer::weights::source::{
    http_error, load, load_cached, BlockStore, ByteSource, FileSource, LoadOptions, LoadReport, Opened, StoredFile,
};
use inferencelayer::weights::stream::{ByteSink, CheckpointReader, Kind, Limits, Loaded, Loader, Plan, TensorEntry};
use inferencelayer::weights::TensorStore;
use inferencelayer::{Error, Result};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// The test checkpoint's tensors: (name, shape), bf16.
const SPECS: &[(&str, &[usize])] =
    &[("a.weight", &[256, 1024]), ("b.weight", &[1024, 1024]), ("c.alpha", &[1024]), ("d.weight", &[512, 512])];

/// splitmix64
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}

/// A bf16 safetensors file of [`SPECS`] with seeded values in [-1, 1), written once to the
/// temp dir; its path and bytes.
/// The test checkpoint, written once per process: the tests run on parallel threads, and
/// one writing the file while another reads it would hand the reader a truncated file.
fn checkpoint() -> (PathBuf, Vec<u8>) {
    static FILE: std::sync::OnceLock<(PathBuf, Vec<u8>)> = std::sync::OnceLock::new();
    FILE.get_or_init(write_checkpoint).clone()
}

fn write_checkpoint() -> (PathBuf, Vec<u8>) {
    let mut data = Vec::new();
    for (t, (_, shape)) in SPECS.iter().enumerate() {
        let n: usize = shape.iter().product();
        let v: Vec<u8> = (0..n)
            .flat_map(|i| {
                let u = (mix(((t as u64) << 40) ^ i as u64) >> 40) as f32 / (1u64 << 24) as f32;
                bf16::from_f32(2.0 * u - 1.0).to_le_bytes()
            })
            .collect();
        data.push(v);
    }
    let views: Vec<(&str, TensorView)> = SPECS
        .iter()
        .zip(&data)
        .map(|((name, shape), d)| (*name, TensorView::new(Dtype::BF16, shape.to_vec(), d).unwrap()))
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    let path = std::env::temp_dir().join(format!("inferencelayer-faults-{}.safetensors", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

/// File offset of the middle of tensor `name` (a byte no chunk boundary falls on).
fn mid(bytes: &[u8], name: &str) -> u64 {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let json: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n as usize]).unwrap();
    let o = &json[name]["data_offsets"];
    let (s, e) = (o[0].as_u64().unwrap(), o[1].as_u64().unwrap());
    8 + n + (s + e) / 2 + 7
}

/// Every tensor as f32 bits, read by the safetensors crate from the whole file.
fn direct(bytes: &[u8]) -> BTreeMap<String, Vec<u32>> {
    let st = TensorStore::from_bytes(bytes).unwrap();
    SPECS.iter().map(|(n, s)| (n.to_string(), st.get(n, s).unwrap().iter().map(|v| v.to_bits()).collect())).collect()
}

/// Parts collected by a loader, and whether its sink was dropped.
#[derive(Default)]
struct Got {
    f32: BTreeMap<String, Vec<u32>>,
    q8: BTreeMap<String, Vec<(usize, usize, Q8Tensor)>>,
}

/// A sink that sets `dropped` when it goes, to show a failed load keeps nothing.
struct Watched<S> {
    inner: S,
    dropped: Rc<Cell<bool>>,
}
impl<S: ByteSink> ByteSink for Watched<S> {
    fn push(&mut self, c: &[u8]) -> Result<()> {
        self.inner.push(c)
    }
    fn finish(&mut self) -> Result<()> {
        self.inner.finish()
    }
    fn current_tensor(&self) -> Option<&str> {
        self.inner.current_tensor()
    }
}
impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        self.dropped.set(true);
    }
}

type Emit = Box<dyn FnMut(&TensorEntry, Loaded) -> Result<()>>;

/// A checkpoint reader loading every tensor as `kind` into `got`, parts cut to `binding`.
fn sink(
    kind: Kind,
    binding: u64,
    got: Rc<RefCell<Got>>,
    dropped: Rc<Cell<bool>>,
) -> Watched<CheckpointReader<Loader<Emit>>> {
    let emit: Emit = Box::new(move |t: &TensorEntry, l: Loaded| {
        let mut g = got.borrow_mut();
        match l {
            Loaded::F32(p) => g.f32.entry(t.name.clone()).or_default().extend(p.data.iter().map(|v| v.to_bits())),
            Loaded::Q8(p) => g.q8.entry(t.name.clone()).or_default().push((p.index, p.row_start, p.data)),
        }
        Ok(())
    });
    Watched {
        inner: CheckpointReader::new(None, Limits::default(), Loader::new(Plan::take_all(kind, binding), emit)),
        dropped,
    }
}

/// What the faulty source does.
#[derive(Clone, Debug, Default)]
struct Faults {
    /// Reads fail with a network error when the body reaches this file byte, this many times.
    reset_at: Option<(u64, u32)>,
    /// Opens answer this status, this many times.
    status: Option<(u16, u32)>,
    /// Opens past byte 0 answer with the whole file (a 200), this many times.
    ignore_range: u32,
    /// The body ends (cleanly) at this file byte although it declared the whole rest, once.
    cut_at: Option<u64>,
    /// Declare this many bytes fewer than the body sends.
    declare_less: u64,
    /// Answer a Range request from this many bytes past the offset asked for.
    start_past: u64,
    /// From the second open on, report another version of the file.
    change_version: bool,
}

/// A [`FileSource`] with [`Faults`], recording the offset of every open.
struct Faulty {
    inner: FileSource,
    f: Faults,
    /// File offset of the next body byte.
    at: u64,
    opens: Vec<u64>,
    /// Pauses asked for, in ms.
    pauses: Vec<u32>,
    /// A read that ended the body early: the next read reports its end.
    ended: bool,
}

impl Faulty {
    fn new(path: &PathBuf, f: Faults) -> Self {
        Self {
            inner: FileSource::new(path).chunk_size(64 << 10),
            f,
            at: 0,
            opens: vec![],
            pauses: vec![],
            ended: false,
        }
    }
}

impl ByteSource for Faulty {
    fn url(&self) -> &str {
        self.inner.url()
    }
    async fn open(&mut self, offset: u64) -> Result<Opened> {
        self.opens.push(offset);
        self.ended = false;
        if let Some((status, n)) = &mut self.f.status {
            if *n > 0 {
                *n -= 1;
                return Err(http_error(self.inner.url(), *status, "Injected"));
            }
        }
        let mut from = offset;
        if offset > 0 && self.f.ignore_range > 0 {
            self.f.ignore_range -= 1;
            from = 0;
        }
        from += self.f.start_past;
        let mut o = self.inner.open(from).await?;
        if self.f.change_version && self.opens.len() > 1 {
            o.version = Some("another".into());
        }
        o.len = o.len.map(|l| l - self.f.declare_less);
        self.at = from;
        Ok(o)
    }
    async fn read(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        if self.ended {
            buf.clear();
            return Ok(false);
        }
        if !self.inner.read(buf).await? {
            return Ok(false);
        }
        let end = self.at + buf.len() as u64;
        if let Some((at, n)) = &mut self.f.reset_at {
            if *n > 0 && self.at <= *at && *at < end {
                if *at == self.at {
                    *n -= 1;
                    buf.clear();
                    return Err(Error::Network {
                        url: self.inner.url().into(),
                        offset: *at,
                        why: "connection reset".into(),
                    });
                }
                // deliver up to the reset point; the next read fails there
                buf.truncate((*at - self.at) as usize);
            }
        }
        if let Some(at) = self.f.cut_at {
            if self.at <= at && at < end {
                buf.truncate((at - self.at) as usize);
                self.f.cut_at = None;
                self.ended = true;
            }
        }
        self.at += buf.len() as u64;
        Ok(!buf.is_empty())
    }
    async fn pause(&mut self, ms: u32) {
        self.pauses.push(ms);
    }
}

fn quick() -> LoadOptions<'static> {
    LoadOptions { backoff_ms: 1, ..LoadOptions::default() }
}

/// Load through `src` as f32; the parts and the report, or the error (with the sink's fate).
fn run(src: &mut Faulty, opts: LoadOptions<'_>) -> (Result<LoadReport>, Got, bool) {
    let got = Rc::new(RefCell::new(Got::default()));
    let dropped = Rc::new(Cell::new(false));
    let s = sink(Kind::F32, 1 << 30, got.clone(), dropped.clone());
    let r = pollster::block_on(load(src, s, opts)).map(|(s, rep)| {
        drop(s);
        rep
    });
    let got = std::mem::take(&mut *got.borrow_mut());
    (r, got, dropped.get())
}

#[test]
fn a_clean_load_equals_the_direct_parse_and_reports_progress() {
    let (path, bytes) = checkpoint();
    let mut src = Faulty::new(&path, Faults::default());
    let seen = RefCell::new(Vec::new());
    let mut progress = |p: &inferencelayer::weights::source::Progress<'_>| {
        seen.borrow_mut().push((p.loaded, p.total, p.tensor.map(str::to_string)));
    };
    let opts = LoadOptions { progress: Some(&mut progress), progress_every: 256 << 10, ..quick() };
    let (r, got, _) = run(&mut src, opts);
    let rep = r.unwrap();
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!(rep, LoadReport { bytes: bytes.len() as u64, requests: 1, ..LoadReport::default() });
    assert_eq!(src.opens, vec![0]);
    let seen = seen.into_inner();
    let last = seen.last().unwrap();
    assert_eq!((last.0, last.1), (bytes.len() as u64, Some(bytes.len() as u64)));
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "progress only grows");
    let names: std::collections::BTreeSet<_> = seen.iter().filter_map(|s| s.2.clone()).collect();
    assert!(names.contains("b.weight") && names.contains("d.weight"), "progress names the tensors: {names:?}");
}

#[test]
fn a_reset_mid_tensor_resumes_with_a_range_from_the_byte_it_reached() {
    let (path, bytes) = checkpoint();
    let at = mid(&bytes, "b.weight");
    let mut src = Faulty::new(&path, Faults { reset_at: Some((at, 1)), ..Faults::default() });
    let (r, got, _) = run(&mut src, quick());
    let rep = r.unwrap();
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!(src.opens, vec![0, at], "resumed at the byte the reset cut");
    assert_eq!((rep.retries, rep.requests, rep.skipped), (1, 2, 0));

    // Reset at the same byte every time: no progress, so it gives up after the retries.
    let mut src = Faulty::new(&path, Faults { reset_at: Some((at, 99)), ..Faults::default() });
    let (r, got, dropped) = run(&mut src, LoadOptions { retries: 3, backoff_ms: 10, ..quick() });
    match r.unwrap_err() {
        Error::Network { url, offset, why } => {
            assert_eq!(offset, at);
            assert_eq!(url, path.display().to_string());
            assert!(why.contains("gave up after 3 retries"), "{why}");
        }
        e => panic!("expected a network error, got {e}"),
    }
    assert_eq!(src.opens, vec![0, at, at, at]);
    assert_eq!(src.pauses, vec![10, 20, 40], "the backoff doubles");
    assert!(dropped, "the sink of a failed load is dropped");
    assert!(!got.f32.contains_key("d.weight"), "nothing past the reset was loaded");
}

#[test]
fn a_5xx_is_retried_and_a_4xx_reported_at_once_with_its_status_and_url() {
    let (path, bytes) = checkpoint();
    let mut src = Faulty::new(&path, Faults { status: Some((503, 2)), ..Faults::default() });
    let (r, got, _) = run(&mut src, quick());
    assert_eq!(r.unwrap().retries, 2);
    assert_eq!(got.f32, direct(&bytes));

    let mut src = Faulty::new(&path, Faults { status: Some((500, 99)), ..Faults::default() });
    let (r, _, dropped) = run(&mut src, quick());
    let e = r.unwrap_err();
    assert!(matches!(&e, Error::Http { status: 500, url, .. } if *url == path.display().to_string()), "{e}");
    assert!(e.to_string().contains("try again later") && e.to_string().contains("gave up after 5 retries"), "{e}");
    assert_eq!(src.opens.len(), 6);
    assert!(dropped);

    let mut src = Faulty::new(&path, Faults { status: Some((404, 99)), ..Faults::default() });
    let (r, _, _) = run(&mut src, quick());
    let e = r.unwrap_err();
    assert!(matches!(e, Error::Http { status: 404, .. }), "{e}");
    assert!(e.to_string().contains("check the URL"), "{e}");
    assert_eq!(src.opens, vec![0], "a 404 is not retried");
}

#[test]
fn a_range_answered_with_the_whole_file_skips_what_was_fed() {
    let (path, bytes) = checkpoint();
    let at = mid(&bytes, "b.weight");
    let faults = Faults { reset_at: Some((at, 1)), ignore_range: 1, ..Faults::default() };
    let mut src = Faulty::new(&path, faults);
    let (r, got, _) = run(&mut src, quick());
    let rep = r.unwrap();
    assert_eq!(got.f32, direct(&bytes), "no byte fed twice");
    assert_eq!(src.opens, vec![0, at]);
    assert_eq!((rep.retries, rep.skipped, rep.bytes), (1, at, bytes.len() as u64));
}

#[test]
fn a_body_cut_short_of_its_length_resumes_and_one_longer_is_refused() {
    let (path, bytes) = checkpoint();
    let at = mid(&bytes, "d.weight");
    let mut src = Faulty::new(&path, Faults { cut_at: Some(at), ..Faults::default() });
    let (r, got, _) = run(&mut src, quick());
    assert_eq!(r.unwrap().retries, 1);
    assert_eq!(src.opens, vec![0, at]);
    assert_eq!(got.f32, direct(&bytes));

    let mut src = Faulty::new(&path, Faults { declare_less: 100, ..Faults::default() });
    let (r, _, dropped) = run(&mut src, quick());
    match r.unwrap_err() {
        Error::Transfer { offset, why, .. } => {
            assert!(why.contains("longer than its declared length"), "{why}");
            assert!(offset > bytes.len() as u64 - 64 * 1024 - 100, "offset {offset}");
        }
        e => panic!("expected a transfer error, got {e}"),
    }
    assert!(dropped);
}

#[test]
fn a_response_past_the_asked_byte_or_of_a_changed_file_is_refused() {
    let (path, bytes) = checkpoint();
    let at = mid(&bytes, "b.weight");
    let mut src = Faulty::new(&path, Faults { reset_at: Some((at, 1)), start_past: 4, ..Faults::default() });
    let (r, _, _) = run(&mut src, quick());
    // the first open (offset 0) is answered from byte 4 already
    assert!(matches!(r.unwrap_err(), Error::Transfer { offset: 0, ref why, .. } if why.contains("starts at byte 4")));

    let mut src = Faulty::new(&path, Faults { reset_at: Some((at, 1)), change_version: true, ..Faults::default() });
    let (r, _, dropped) = run(&mut src, quick());
    match r.unwrap_err() {
        Error::Transfer { offset, why, .. } => {
            assert_eq!(offset, at);
            assert!(why.contains("changed on the server"), "{why}");
        }
        e => panic!("expected a transfer error, got {e}"),
    }
    assert!(dropped);
}

#[test]
fn cancelling_stops_the_load_and_drops_the_sink() {
    let (path, _) = checkpoint();
    let mut src = Faulty::new(&path, Faults::default());
    let loaded = Cell::new(0u64);
    let mut progress = |p: &inferencelayer::weights::source::Progress<'_>| loaded.set(p.loaded);
    let cancelled = || loaded.get() >= 1 << 20;
    let opts =
        LoadOptions { progress: Some(&mut progress), progress_every: 64 << 10, cancelled: Some(&cancelled), ..quick() };
    let (r, got, dropped) = run(&mut src, opts);
    match r.unwrap_err() {
        Error::Aborted { offset, .. } => assert_eq!(offset, 1 << 20),
        e => panic!("expected aborted, got {e}"),
    }
    assert!(dropped);
    assert!(!got.f32.contains_key("c.alpha"));
}

#[test]
fn a_bad_checkpoint_fails_once_naming_the_tensor() {
    let (_, bytes) = checkpoint();
    let cut = std::env::temp_dir().join(format!("inferencelayer-faults-cut-{}.safetensors", std::process::id()));
    std::fs::write(&cut, &bytes[..mid(&bytes, "d.weight") as usize]).unwrap();
    let mut src = Faulty::new(&cut, Faults::default());
    let (r, _, dropped) = run(&mut src, quick());
    match r.unwrap_err() {
        Error::Stream { tensor, .. } => assert_eq!(tensor.as_deref(), Some("d.weight")),
        e => panic!("expected a stream error, got {e}"),
    }
    assert_eq!(src.opens, vec![0], "a malformed file is not retried");
    assert!(dropped);

    // Through a block store: the blocks of a file the sink refused are not kept.
    let mut store = Memory { block: 256 << 10, ..Memory::default() };
    let mut src = Faulty::new(&cut, Faults::default());
    let (r, _) = run_cached(&mut src, &mut store, quick());
    assert!(matches!(r, Err(Error::Stream { .. })));
    assert!(store.puts > 4, "blocks were stored as they were fed ({})", store.puts);
    assert!(store.blocks.is_empty() && store.file.is_none(), "and dropped when the file was refused");
    std::fs::remove_file(cut).ok();
}

#[test]
fn q8_parts_through_a_resumed_load_equal_quantizing_each_tensor() {
    let (path, bytes) = checkpoint();
    let at = mid(&bytes, "b.weight");
    let mut src = Faulty::new(&path, Faults { reset_at: Some((at, 2)), ignore_range: 1, ..Faults::default() });
    let got = Rc::new(RefCell::new(Got::default()));
    // 640 KiB parts: b.weight (1024 x 1024, 1.06 MB in Q8_0) comes in two
    let s = sink(Kind::Q8, 640 << 10, got.clone(), Rc::new(Cell::new(false)));
    let (_, rep) = pollster::block_on(load(&mut src, s, quick())).unwrap();
    assert_eq!(rep.retries, 2);
    let st = TensorStore::from_bytes(&bytes).unwrap();
    let got = got.borrow();
    for (name, shape) in SPECS {
        let (rows, cols) = (shape.iter().rev().skip(1).product::<usize>(), *shape.last().unwrap());
        let want = Q8Tensor::from_f32(name, rows, cols, &st.get(name, shape).unwrap()).unwrap();
        let parts = &got.q8[*name];
        if *name == "b.weight" {
            assert_eq!(parts.len(), 2, "b.weight is cut in two parts");
        }
        let mut q = Vec::new();
        let mut s = Vec::new();
        for (i, (index, row_start, p)) in parts.iter().enumerate() {
            assert_eq!(*index, i);
            assert_eq!(*row_start * cols, q.len() * 4);
            q.extend_from_slice(&p.quants);
            s.extend_from_slice(&p.scales);
        }
        assert_eq!((q, s), (want.quants.clone(), want.scales.clone()), "{name}");
    }
}

/// A block store in memory.
#[derive(Default)]
struct Memory {
    block: u64,
    file: Option<StoredFile>,
    blocks: HashMap<u64, Vec<u8>>,
    puts: u32,
}

impl BlockStore for Memory {
    fn block_size(&self) -> u64 {
        self.block
    }
    async fn file(&mut self) -> Result<Option<StoredFile>> {
        Ok(self.file.clone())
    }
    async fn set_file(&mut self, f: &StoredFile) -> Result<()> {
        self.file = Some(f.clone());
        Ok(())
    }
    async fn blocks(&mut self) -> Result<Vec<u64>> {
        Ok(self.blocks.keys().copied().collect())
    }
    async fn get(&mut self, i: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.blocks.get(&i).cloned())
    }
    async fn put(&mut self, i: u64, b: &[u8]) -> Result<()> {
        self.puts += 1;
        self.blocks.insert(i, b.to_vec());
        Ok(())
    }
    async fn clear(&mut self) -> Result<()> {
        self.file = None;
        self.blocks.clear();
        Ok(())
    }
}

fn run_cached(src: &mut Faulty, store: &mut Memory, opts: LoadOptions<'_>) -> (Result<LoadReport>, Got) {
    let got = Rc::new(RefCell::new(Got::default()));
    let s = sink(Kind::F32, 1 << 30, got.clone(), Rc::new(Cell::new(false)));
    let r = pollster::block_on(load_cached(src, store, s, opts)).map(|(_, rep)| rep);
    let got = std::mem::take(&mut *got.borrow_mut());
    (r, got)
}

#[test]
fn the_block_store_resumes_a_cut_download_and_serves_a_reload() {
    let (path, bytes) = checkpoint();
    let total = bytes.len() as u64;
    let block = 256 << 10;
    let mut store = Memory { block, ..Memory::default() };

    // A first load cancelled after 1 MiB leaves 4 blocks.
    let mut src = Faulty::new(&path, Faults::default());
    let fed = Cell::new(0u64);
    let mut progress = |p: &inferencelayer::weights::source::Progress<'_>| fed.set(p.loaded);
    let cancelled = || fed.get() >= (1 << 20) + 1000;
    let opts = LoadOptions { progress: Some(&mut progress), progress_every: 1, cancelled: Some(&cancelled), ..quick() };
    let (r, _) = run_cached(&mut src, &mut store, opts);
    assert!(matches!(r, Err(Error::Aborted { .. })));
    assert_eq!(store.blocks.len(), 4);
    assert_eq!(store.file.as_ref().map(|f| f.total), Some(total));

    // The next load reads those from the store and asks the network for the rest only.
    let mut src = Faulty::new(&path, Faults { reset_at: Some((mid(&bytes, "d.weight"), 1)), ..Faults::default() });
    let (r, got) = run_cached(&mut src, &mut store, quick());
    let rep = r.unwrap();
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!(rep.from_cache, 4 * block);
    assert_eq!(src.opens, vec![4 * block, mid(&bytes, "d.weight")]);
    assert_eq!(rep.blocks_stored, total.div_ceil(block) - 4);
    let mut joined = Vec::new();
    for i in 0..total.div_ceil(block) {
        joined.extend_from_slice(&store.blocks[&i]);
    }
    assert_eq!(joined, bytes, "the stored blocks are the file");

    // A reload reads the store and asks the network for the last byte only, to check the
    // file is the one stored.
    let mut src = Faulty::new(&path, Faults::default());
    let (r, got) = run_cached(&mut src, &mut store, quick());
    let rep = r.unwrap();
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!((rep.from_cache, rep.requests), (total, 1));
    assert_eq!(src.opens, vec![total - 1]);
    // Where the network cannot answer (an error status, offline), the store alone.
    let mut src = Faulty::new(&path, Faults { status: Some((500, 99)), ..Faults::default() });
    let (r, got) = run_cached(&mut src, &mut store, quick());
    let rep = r.unwrap();
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!((rep.from_cache, rep.requests, rep.retries), (total, 0, 0));
    assert_eq!(src.opens, vec![total - 1]);
    // A file of another version on the server: the store is cleared and the file downloaded
    // whole, then stored again.
    store.file.as_mut().unwrap().version = Some("stored before".into());
    let mut src = Faulty::new(&path, Faults::default());
    let (r, got) = run_cached(&mut src, &mut store, quick());
    let rep = r.unwrap();
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!((rep.from_cache, rep.requests), (0, 2));
    assert_eq!(src.opens, vec![total - 1, 0]);
    assert_eq!(store.blocks.len() as u64, total.div_ceil(block));
    assert_ne!(store.file.as_ref().unwrap().version.as_deref(), Some("stored before"));

    // An evicted block in the middle: the stored prefix before it, the network after.
    store.blocks.remove(&5);
    let mut src = Faulty::new(&path, Faults::default());
    let (r, got) = run_cached(&mut src, &mut store, quick());
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!(r.unwrap().from_cache, 5 * block);
    assert_eq!(src.opens, vec![5 * block]);

    // A store of another version of the file is cleared and the file downloaded whole.
    store.file.as_mut().unwrap().version = Some("older".into());
    store.blocks.remove(&7);
    let mut src = Faulty::new(&path, Faults::default());
    let (r, got) = run_cached(&mut src, &mut store, quick());
    assert_eq!(got.f32, direct(&bytes));
    assert_eq!(r.unwrap().from_cache, 0);
    assert_eq!(src.opens, vec![7 * block, 0]);
    assert_eq!(store.blocks.len() as u64, total.div_ceil(block));
}
