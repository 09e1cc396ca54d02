//! The streaming loader: safetensors and GGUF pushed in chunks of every size give exactly
//! the tensors the in-memory reader gives, as f32 or as Q8_0 in the GPU layout; every bad
//! input is refused with a typed error naming the tensor or the byte offset, never a panic.
#![cfg(not(target_arch = "wasm32"))]

use std::collections::HashMap;
use std::sync::OnceLock;

use half::{bf16, f16};
use inferencelayer::weights::gguf::{self, GgufStream, GgufValue};
use inferencelayer::weights::q8::{Q8Tensor, BLOCK};
use inferencelayer::weights::stream::{
    Header, Kind, Limits, Loaded, Loader, Plan, SafetensorsStream, Sink, TensorEntry, Unknown,
};
use inferencelayer::weights::synthetic::{self, CodebookStats};
use inferencelayer::weights::TensorStore;
use inferencelayer::{Error, MimiConfig, Result};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use sha2::{Digest, Sha256};

#[path = "common/fixtures.rs"]
mod fixtures;
use fixtures::{gstr, raw_st, GgufWriter, Rng};

/// The synthetic Mimi checkpoint (f32, 385 MB), made once.
fn mimi() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        synthetic::checkpoint(&MimiConfig::default().tensor_specs(), synthetic::SEED, &CodebookStats::unit(32, 256))
            .expect("synthetic checkpoint")
    })
}

/// How a test cuts the file into chunks.
#[derive(Clone, Copy, Debug)]
enum Chunks {
    Fixed(usize),
    Whole,
    /// Sizes drawn from 1 to the bound, seeded.
    Random(u64, usize),
}

/// Drive any stream over `bytes` in `chunks`, then finish it.
fn drive(bytes: &[u8], chunks: Chunks, push: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let mut rng = match chunks {
        Chunks::Random(seed, _) => Rng(seed),
        _ => Rng(0),
    };
    let mut i = 0;
    while i < bytes.len() {
        let n = match chunks {
            Chunks::Fixed(n) => n,
            Chunks::Whole => bytes.len(),
            Chunks::Random(_, max) => 1 + rng.below(max),
        }
        .min(bytes.len() - i);
        push(&bytes[i..i + n])?;
        i += n;
    }
    Ok(())
}

fn stream_st(bytes: &[u8], total: Option<u64>, limits: Limits, chunks: Chunks, sink: &mut dyn Sink) -> Result<()> {
    let mut s = SafetensorsStream::new(total, limits);
    drive(bytes, chunks, &mut |c| s.push(c, sink))?;
    s.finish(sink)
}

fn stream_gguf(bytes: &[u8], total: Option<u64>, chunks: Chunks, sink: &mut dyn Sink) -> Result<()> {
    let mut s = GgufStream::new(total, Limits::default());
    drive(bytes, chunks, &mut |c| s.push(c, sink))?;
    s.finish(sink)
}

const GIB: u64 = 1 << 30;

/// Stream a safetensors file through a loader following `plan`; every part collected.
fn load_st(bytes: &[u8], total: Option<u64>, chunks: Chunks, plan: Plan) -> Result<Collected> {
    let mut got = Collected::default();
    let mut loader = Loader::new(plan, collect(&mut got));
    stream_st(bytes, total, Limits::default(), chunks, &mut loader)?;
    drop(loader);
    Ok(got)
}

/// Stream a GGUF file through a loader following `plan`; every part collected.
fn load_gguf(bytes: &[u8], total: Option<u64>, chunks: Chunks, plan: Plan) -> Result<Collected> {
    let mut got = Collected::default();
    let mut loader = Loader::new(plan, collect(&mut got));
    stream_gguf(bytes, total, chunks, &mut loader)?;
    drop(loader);
    Ok(got)
}

/// A sink that records every event (for the format tests).
#[derive(Default)]
struct Recorder {
    header: Option<Header>,
    data: HashMap<String, Vec<u8>>,
    order: Vec<String>,
}

impl Sink for Recorder {
    fn header(&mut self, h: &Header) -> Result<()> {
        self.header = Some(h.clone());
        Ok(())
    }
    fn begin(&mut self, t: &TensorEntry) -> Result<()> {
        self.order.push(t.name.clone());
        self.data.insert(t.name.clone(), Vec::new());
        Ok(())
    }
    fn bytes(&mut self, t: &TensorEntry, offset: u64, bytes: &[u8]) -> Result<()> {
        let d = self.data.get_mut(&t.name).expect("begun");
        assert_eq!(d.len() as u64, offset, "pieces of `{}` arrive in order", t.name);
        d.extend_from_slice(bytes);
        Ok(())
    }
    fn end(&mut self, t: &TensorEntry) -> Result<()> {
        assert_eq!(self.data[&t.name].len() as u64, t.len, "`{}` complete at its end", t.name);
        Ok(())
    }
}

/// Every part loaded, by tensor: f32 parts concatenated, Q8 parts kept.
#[derive(Default)]
struct Collected {
    f32: HashMap<String, Vec<f32>>,
    q8: HashMap<String, Vec<(usize, usize, Q8Tensor)>>,
    parts: HashMap<String, Vec<(usize, usize, usize, usize)>>,
}

fn collect(c: &mut Collected) -> impl FnMut(&TensorEntry, Loaded) -> Result<()> + '_ {
    move |t, l| {
        match l {
            Loaded::F32(p) => {
                c.parts.entry(t.name.clone()).or_default().push((p.index, p.count, p.row_start, p.rows));
                let v = c.f32.entry(t.name.clone()).or_default();
                assert_eq!(v.len(), p.row_start * t.cols(), "`{}` parts in order", t.name);
                v.extend_from_slice(&p.data);
            }
            Loaded::Q8(p) => {
                c.parts.entry(t.name.clone()).or_default().push((p.index, p.count, p.row_start, p.rows));
                c.q8.entry(t.name.clone()).or_default().push((p.row_start, p.rows, p.data));
            }
        }
        Ok(())
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

// --- the synthetic Mimi checkpoint ----------------------------------------------------------

#[test]
fn mimi_f32_at_every_chunking_equals_the_in_memory_reader() {
    let bytes = mimi();
    let store = TensorStore::from_bytes(bytes).expect("store");
    let names = store.names();
    for chunks in [
        Chunks::Whole,
        Chunks::Fixed(64 << 10),
        Chunks::Fixed(7),
        Chunks::Fixed(1),
        Chunks::Random(11, 100_000),
        Chunks::Random(12, 64),
    ] {
        let mut seen = 0usize;
        let mut loader = Loader::new(Plan::take_all(Kind::F32, GIB), |t: &TensorEntry, l: Loaded| {
            let Loaded::F32(p) = l else { panic!("f32 plan gave {l:?}") };
            assert_eq!((p.index, p.count, p.row_start), (0, 1, 0), "`{}` in one part", t.name);
            let want = store.get(&t.name, &t.shape)?;
            assert!(bits(&p.data) == bits(&want), "`{}` differs at {chunks:?}", t.name);
            seen += 1;
            Ok(())
        });
        stream_st(bytes, Some(bytes.len() as u64), Limits::default(), chunks, &mut loader)
            .unwrap_or_else(|e| panic!("{chunks:?}: {e}"));
        assert_eq!(seen, names.len(), "every tensor at {chunks:?}");
    }
}

#[test]
fn mimi_q8_through_the_stream_equals_quantizing_each_whole_tensor() {
    let bytes = mimi();
    let store = TensorStore::from_bytes(bytes).expect("store");
    let specs = MimiConfig::default().tensor_specs();
    let mut plan = Plan::new(GIB);
    let mut q8_names = vec![];
    for (name, shape) in &specs {
        let q = shape.len() >= 2 && shape[shape.len() - 1] % BLOCK == 0;
        plan.want(name, shape, if q { Kind::Q8 } else { Kind::F32 });
        if q {
            q8_names.push(name.clone());
        }
    }
    assert!(q8_names.len() > 50, "the codec's linear weights and codebooks: {}", q8_names.len());
    for chunks in [Chunks::Fixed(7), Chunks::Random(5, 200_000), Chunks::Whole] {
        let got = load_st(bytes, None, chunks, plan.clone()).expect("stream");
        for (name, shape) in &specs {
            let want = store.get(name, shape).expect("tensor");
            if let Some(parts) = got.q8.get(name) {
                let cols = shape[shape.len() - 1];
                let rows = want.len() / cols;
                assert_eq!(parts.len(), 1);
                let whole = Q8Tensor::from_f32(name, rows, cols, &want).expect("quantize");
                assert!(parts[0].2 == whole, "`{name}` at {chunks:?}");
            } else {
                assert!(bits(&got.f32[name]) == bits(&want), "`{name}`");
            }
        }
        assert_eq!(got.q8.len(), q8_names.len());
    }
}

// --- other stored types and parts ----------------------------------------------------------

fn st_file(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> =
        tensors.iter().map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).expect("view"))).collect();
    safetensors::serialize(views, None).expect("serialize")
}

fn values(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| (rng.unit() * 2.0 - 1.0) * scale).collect()
}

#[test]
fn f16_and_bf16_stream_as_f32_and_as_q8_split_anywhere() {
    let mut rng = Rng(3);
    let a: Vec<f16> = values(&mut rng, 6 * 96, 2.0).into_iter().map(f16::from_f32).collect();
    let b: Vec<bf16> = values(&mut rng, 4 * 64, 0.1).into_iter().map(bf16::from_f32).collect();
    let c: Vec<f32> = values(&mut rng, 5 * 32, 3.0);
    let file = st_file(&[
        ("a", Dtype::F16, vec![2, 3, 96], a.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ("b", Dtype::BF16, vec![4, 64], b.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ("c", Dtype::F32, vec![5, 32], bytemuck::cast_slice::<f32, u8>(&c).to_vec()),
        ("empty", Dtype::BF16, vec![0, 32], vec![]),
        ("scalar", Dtype::F32, vec![], 1.5f32.to_le_bytes().to_vec()),
    ]);
    let store = TensorStore::from_bytes(&file).expect("store");
    for chunks in [Chunks::Fixed(1), Chunks::Fixed(3), Chunks::Fixed(7), Chunks::Random(9, 40), Chunks::Whole] {
        let got = load_st(&file, Some(file.len() as u64), chunks, Plan::take_all(Kind::F32, GIB)).expect("f32");
        for (n, s) in
            [("a", vec![2, 3, 96]), ("b", vec![4, 64]), ("c", vec![5, 32]), ("empty", vec![0, 32]), ("scalar", vec![])]
        {
            assert!(bits(&got.f32[n]) == bits(&store.get(n, &s).expect("get")), "`{n}` at {chunks:?}");
        }
        let mut plan = Plan::take_all(Kind::Q8, GIB);
        plan.want("scalar", &[], Kind::F32);
        let got = load_st(&file, None, chunks, plan).expect("q8");
        assert_eq!(got.q8["a"][0].2, Q8Tensor::from_f16("a", 6, 96, &a).expect("q8"));
        assert_eq!(got.q8["b"][0].2, Q8Tensor::from_bf16("b", 4, 64, &b).expect("q8"));
        assert_eq!(got.q8["c"][0].2, Q8Tensor::from_f32("c", 5, 32, &c).expect("q8"));
        assert_eq!(got.q8["empty"][0].2.rows, 0);
    }
}

#[test]
fn tensors_over_the_binding_limit_are_cut_into_parts_of_whole_rows() {
    let mut rng = Rng(4);
    let (rows, cols) = (100, 64);
    let w = values(&mut rng, rows * cols, 1.0);
    let file = st_file(&[("w", Dtype::F32, vec![rows, cols], bytemuck::cast_slice::<f32, u8>(&w).to_vec())]);
    let whole = Q8Tensor::from_f32("w", rows, cols, &w).expect("q8");
    // Q8: 64 bytes of quants a row, 30 rows a binding -> 4 parts of 25 rows
    let got = load_st(&file, None, Chunks::Fixed(13), Plan::take_all(Kind::Q8, 30 * 64)).expect("q8 parts");
    assert_eq!(got.parts["w"], vec![(0, 4, 0, 25), (1, 4, 25, 25), (2, 4, 50, 25), (3, 4, 75, 25)]);
    let mut deq = vec![];
    for (row_start, n, part) in &got.q8["w"] {
        assert_eq!(part.rows, *n);
        assert!(part.quants_bytes().len() as u64 <= 30 * 64);
        assert_eq!(*part, Q8Tensor::from_f32("w", *n, cols, &w[row_start * cols..(row_start + n) * cols]).expect("q8"));
        deq.extend(part.dequantize());
    }
    assert_eq!(deq, whole.dequantize());
    // f32: 256 bytes a row, 7 rows a binding -> 15 parts of 7 rows (the last 2)
    let got = load_st(&file, None, Chunks::Fixed(5), Plan::take_all(Kind::F32, 7 * 256 + 100)).expect("f32 parts");
    let p = &got.parts["w"];
    assert_eq!(p.len(), 15);
    assert_eq!(p[14], (14, 15, 98, 2));
    assert!(bits(&got.f32["w"]) == bits(&w));
    // a single row over the limit is an Error::Limit naming the tensor
    let mut loader = Loader::new(Plan::take_all(Kind::Q8, 32), |_: &TensorEntry, _: Loaded| Ok(()));
    match stream_st(&file, None, Limits::default(), Chunks::Whole, &mut loader) {
        Err(Error::Limit { what, needed: 64, allowed: 32, .. }) => assert!(what.contains("`w`"), "{what}"),
        other => panic!("expected Limit, got {other:?}"),
    }
}

#[test]
fn events_arrive_in_file_order_and_cover_each_tensor() {
    let file = mimi();
    let mut rec = Recorder::default();
    stream_st(file, None, Limits::default(), Chunks::Random(21, 1 << 20), &mut rec).expect("stream");
    let h = rec.header.expect("header");
    let order: Vec<String> = h.tensors.iter().map(|t| t.name.clone()).collect();
    assert_eq!(rec.order, order);
    let store = TensorStore::from_bytes(file).expect("store");
    assert_eq!(store.names().len(), order.len());
    for t in &h.tensors {
        assert_eq!(&file[t.start as usize..t.end() as usize], &rec.data[&t.name][..]);
    }
}

#[test]
fn sha256_is_checked_while_streaming() {
    let file = st_file(&[("x", Dtype::F32, vec![4], vec![0; 16])]);
    let digest: [u8; 32] = Sha256::digest(&file).into();
    let mut rec = Recorder::default();
    let mut s = SafetensorsStream::new(None, Limits::default()).verify_sha256(digest);
    drive(&file, Chunks::Fixed(3), &mut |c| s.push(c, &mut rec)).expect("push");
    s.finish(&mut rec).expect("digest matches");
    let mut wrong = digest;
    wrong[0] ^= 1;
    let mut s = SafetensorsStream::new(None, Limits::default()).verify_sha256(wrong);
    drive(&file, Chunks::Whole, &mut |c| s.push(c, &mut rec)).expect("push");
    match s.finish(&mut rec) {
        Err(Error::Stream { why, offset, .. }) => {
            assert!(why.contains("SHA-256"), "{why}");
            assert_eq!(offset, file.len() as u64);
        }
        other => panic!("expected a SHA-256 mismatch, got {other:?}"),
    }
}

// --- bad safetensors -----------------------------------------------------------------------

/// The error of streaming `bytes` (length given or not) into a recorder at a few chunkings;
/// all must agree on the variant and the offset.
fn st_error(bytes: &[u8], total: Option<u64>, limits: Limits) -> Error {
    let mut first: Option<Error> = None;
    // one-byte and seven-byte pushes through hundreds of MB cost minutes: small files only
    let mut all = vec![Chunks::Whole, Chunks::Random(bytes.len() as u64, 1 << 16)];
    if bytes.len() <= 4 << 20 {
        all.push(Chunks::Fixed(1));
    }
    if bytes.len() <= 64 << 20 {
        all.push(Chunks::Fixed(7));
    }
    for chunks in all {
        let e = match stream_st(bytes, total, limits, chunks, &mut Recorder::default()) {
            Err(e) => e,
            Ok(()) => panic!("accepted at {chunks:?}"),
        };
        if let Some(f) = &first {
            assert_eq!(format!("{f}"), format!("{e}"), "same error at {chunks:?}");
        } else {
            first = Some(e);
        }
    }
    first.expect("an error")
}

fn expect_stream(e: Error, offset: u64, tensor: Option<&str>, why_has: &str) {
    match &e {
        Error::Stream { format, offset: o, tensor: t, why } => {
            assert_eq!(*format, "safetensors");
            assert_eq!(*o, offset, "offset in `{e}`");
            assert_eq!(t.as_deref(), tensor, "tensor in `{e}`");
            assert!(why.contains(why_has), "`{why}` should mention `{why_has}`");
        }
        _ => panic!("expected Error::Stream, got {e:?}"),
    }
}

#[test]
fn truncated_safetensors_names_where_it_stopped() {
    let file = mimi();
    let mut rec = Recorder::default();
    stream_st(&file[..1 << 20], None, Limits::default(), Chunks::Whole, &mut rec).ok();
    let header = rec.header.expect("header read from the first MiB");
    let t3 = &header.tensors[3];
    let last = header.tensors.last().expect("tensors");
    let cuts: Vec<(u64, Option<&str>, &str)> = vec![
        (0, None, "header length"),
        (5, None, "header length"),
        (8, None, "inside the header"),
        (header.data_start - 1, None, "inside the header"),
        (header.data_start, Some(&header.tensors[0].name), "before the tensor"),
        (t3.start + 3, Some(&t3.name), "3 bytes into"),
        (t3.end() - 1, Some(&t3.name), "bytes into"),
        (file.len() as u64 - 1, Some(&last.name), "bytes into"),
    ];
    for (cut, tensor, why) in cuts {
        let part = &file[..cut as usize];
        // length unknown: the stream ends early
        expect_stream(st_error(part, None, Limits::default()), cut, tensor, why);
        // length announced as the full file, but the stream stops at `cut`
        expect_stream(st_error(part, Some(file.len() as u64), Limits::default()), cut, tensor, why);
    }
    // a length announced shorter than the header describes is refused at the header
    let cut = t3.start + 3;
    let e = st_error(&file[..cut as usize], Some(cut), Limits::default());
    expect_stream(e, cut, Some(&t3.name), "file has only");
}

#[test]
fn header_length_over_the_cap_is_refused_before_reading_it() {
    let mut f = u64::MAX.to_le_bytes().to_vec();
    f.extend_from_slice(b"{}");
    expect_stream(st_error(&f, None, Limits::default()), 0, None, "above the cap");
    let file = raw_st(r#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#, &[0; 4]);
    expect_stream(st_error(&file, None, Limits { max_header: 16 }), 0, None, "above the cap of 16");
    let mut rec = Recorder::default();
    stream_st(&file, None, Limits { max_header: 100 }, Chunks::Whole, &mut rec).expect("under the cap");
    // a header longer than the announced file
    let mut f = 1000u64.to_le_bytes().to_vec();
    f.extend_from_slice(b"{}");
    expect_stream(st_error(&f, Some(10), Limits::default()), 0, None, "only 10 bytes");
}

#[test]
fn header_that_is_not_json_is_refused() {
    for text in ["not json at all", "[1, 2]", "{\"a\": 1}", "{\"a\":{\"dtype\":\"F32\"", ""] {
        match st_error(&raw_st(text, &[]), None, Limits::default()) {
            Error::Stream { offset, why, .. } => {
                assert!((8..=8 + text.len() as u64).contains(&offset), "offset {offset} inside the header of {text:?}");
                assert!(why.contains("not a valid"), "{why}");
            }
            e => panic!("expected Error::Stream, got {e:?}"),
        }
    }
    let mut f = 4u64.to_le_bytes().to_vec();
    f.extend_from_slice(&[0xff, 0xfe, b'{', b'}']);
    assert!(matches!(st_error(&f, None, Limits::default()), Error::Stream { .. }));
    // an entry with the wrong fields names its tensor
    let e = st_error(&raw_st(r#"{"w":{"dtype":"F32","shape":[1]}}"#, &[]), None, Limits::default());
    assert!(matches!(&e, Error::Stream { tensor: Some(t), .. } if t == "w"), "{e:?}");
    let e = st_error(
        &raw_st(r#"{"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}}"#, &[0; 4]),
        None,
        Limits::default(),
    );
    assert!(matches!(&e, Error::Stream { tensor: Some(t), why, .. } if t == "w" && why.contains("F99")), "{e:?}");
    let e = st_error(
        &raw_st(
            r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &[0; 8],
        ),
        None,
        Limits::default(),
    );
    assert!(matches!(&e, Error::Stream { tensor: Some(t), why, .. } if t == "w" && why.contains("twice")), "{e:?}");
    // `__metadata__` is allowed
    let f =
        raw_st(r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}  "#, &[0; 4]);
    let mut rec = Recorder::default();
    stream_st(&f, Some(f.len() as u64), Limits::default(), Chunks::Fixed(1), &mut rec).expect("metadata");
    assert_eq!(rec.header.expect("header").metadata, vec![("format".to_string(), "pt".to_string())]);
}

#[test]
fn bad_offsets_are_refused_with_the_tensor() {
    let ds = |json: &str| 8 + json.len() as u64;
    let t = |name: &str, dtype: &str, shape: &str, s: u64, e: u64| {
        format!(r#""{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{s},{e}]}}"#)
    };
    // out of range: `b` extends past the file
    let j = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("b", "F32", "[2]", 8, 16));
    let f = raw_st(&j, &[0; 8]);
    expect_stream(st_error(&f, Some(f.len() as u64), Limits::default()), f.len() as u64, Some("b"), "file has only");
    expect_stream(st_error(&f, None, Limits::default()), f.len() as u64, Some("b"), "before the tensor");
    // offsets beyond u64
    let j = format!("{{{}}}", t("a", "F32", "[1]", u64::MAX - 4, u64::MAX));
    expect_stream(st_error(&raw_st(&j, &[]), None, Limits::default()), ds(&j), Some("a"), "out of range");
    // overlapping
    let j = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("b", "F32", "[2]", 4, 12));
    expect_stream(
        st_error(&raw_st(&j, &[0; 12]), None, Limits::default()),
        ds(&j) + 4,
        Some("b"),
        "overlaps tensor `a`",
    );
    // a hole between tensors, and one before the first
    let j = format!("{{{},{}}}", t("a", "F32", "[2]", 0, 8), t("b", "F32", "[2]", 12, 20));
    expect_stream(
        st_error(&raw_st(&j, &[0; 20]), None, Limits::default()),
        ds(&j) + 8,
        Some("b"),
        "belong to no tensor",
    );
    let j = format!("{{{}}}", t("a", "F32", "[2]", 4, 12));
    expect_stream(st_error(&raw_st(&j, &[0; 12]), None, Limits::default()), ds(&j), Some("a"), "belong to no tensor");
    // offsets that run backwards
    let j = format!("{{{}}}", t("a", "F32", "[0]", 8, 0));
    expect_stream(st_error(&raw_st(&j, &[0; 8]), None, Limits::default()), ds(&j), Some("a"), "end before");
    // dtype x shape not the span
    let j = format!("{{{}}}", t("a", "F32", "[3]", 0, 8));
    expect_stream(st_error(&raw_st(&j, &[0; 8]), None, Limits::default()), ds(&j), Some("a"), "is 12 bytes");
    let j = format!("{{{}}}", t("a", "BF16", "[4, 4]", 0, 64));
    expect_stream(st_error(&raw_st(&j, &[0; 64]), None, Limits::default()), ds(&j), Some("a"), "is 32 bytes");
    // a shape whose size overflows
    let j = format!("{{{}}}", t("a", "F32", "[4294967296, 4294967296, 16]", 0, 8));
    expect_stream(st_error(&raw_st(&j, &[0; 8]), None, Limits::default()), ds(&j), Some("a"), "too many elements");
    // bytes after the last tensor, length unknown
    let j = format!("{{{}}}", t("a", "F32", "[2]", 0, 8));
    expect_stream(st_error(&raw_st(&j, &[0; 9]), None, Limits::default()), ds(&j) + 8, None, "past the end");
    // and with the length known
    let f = raw_st(&j, &[0; 9]);
    expect_stream(st_error(&f, Some(f.len() as u64), Limits::default()), ds(&j) + 8, None, "follow the last tensor");
}

#[test]
fn the_plan_refuses_missing_unknown_misshapen_and_mistyped_tensors_before_any_data() {
    let f = st_file(&[
        ("a", Dtype::F32, vec![2, 32], vec![0; 256]),
        ("b", Dtype::I32, vec![2], vec![0; 8]),
        ("c", Dtype::F32, vec![3, 7], vec![0; 84]),
    ]);
    let run = |plan: Plan| {
        let mut parts = 0;
        let r = {
            let mut loader = Loader::new(plan, |_: &TensorEntry, _: Loaded| {
                parts += 1;
                Ok(())
            });
            stream_st(&f, None, Limits::default(), Chunks::Fixed(7), &mut loader)
        };
        (r, parts)
    };
    let mut p = Plan::new(GIB);
    p.want("a", &[2, 32], Kind::Q8).want("zz", &[1], Kind::F32).unknown(Unknown::Skip);
    assert!(matches!(run(p), (Err(Error::MissingTensor(n)), 0) if n == "zz"));
    let mut p = Plan::new(GIB);
    p.want("a", &[2, 32], Kind::Q8).want("c", &[3, 7], Kind::F32);
    assert!(matches!(run(p), (Err(Error::UnknownTensor(n)), 0) if n == "b"));
    let mut p = Plan::new(GIB);
    p.want("a", &[32, 2], Kind::Q8).unknown(Unknown::Skip);
    assert!(matches!(run(p), (Err(Error::Shape { name, .. }), 0) if name == "a"));
    let mut p = Plan::new(GIB);
    p.want("b", &[2], Kind::F32).unknown(Unknown::Skip);
    assert!(matches!(run(p), (Err(Error::Dtype { name, found }), 0) if name == "b" && found == "I32"));
    let mut p = Plan::new(GIB);
    p.want("c", &[3, 7], Kind::Q8).unknown(Unknown::Skip);
    assert!(matches!(run(p), (Err(Error::Quant { name, .. }), 0) if name == "c"));
    let mut p = Plan::new(GIB);
    p.want("a", &[2, 32], Kind::Q8).want("c", &[3, 7], Kind::F32).unknown(Unknown::Skip);
    assert!(matches!(run(p), (Ok(()), 2)));
}

#[test]
fn values_q8_cannot_hold_are_refused_with_the_row() {
    let mut w = vec![0f32; 3 * 32];
    w[2 * 32 + 5] = f32::INFINITY;
    let f = st_file(&[("w", Dtype::F32, vec![3, 32], bytemuck::cast_slice::<f32, u8>(&w).to_vec())]);
    let mut loader = Loader::new(Plan::take_all(Kind::Q8, GIB), |_: &TensorEntry, _: Loaded| Ok(()));
    match stream_st(&f, None, Limits::default(), Chunks::Fixed(7), &mut loader) {
        Err(Error::Quant { name, why }) => {
            assert_eq!(name, "w");
            assert!(why.contains("row 2, column 5"), "{why}");
        }
        other => panic!("expected Quant, got {other:?}"),
    }
}

/// Flip, cut and overwrite bytes of small valid files: every outcome is `Ok` or a typed
/// error, never a panic, at any chunking.
#[test]
fn mutated_files_never_panic() {
    let mut rng = Rng(99);
    let st = st_file(&[
        ("a", Dtype::F32, vec![2, 32], bytemuck::cast_slice::<f32, u8>(&values(&mut rng, 64, 1.0)).to_vec()),
        ("b", Dtype::BF16, vec![64], vec![1; 128]),
    ]);
    let gg = gguf_fixture(&mut rng).0;
    for (which, base) in [("safetensors", &st), ("gguf", &gg)] {
        for i in 0..20_000 {
            let mut f = base.clone();
            match rng.below(4) {
                0 => {
                    let k = rng.below(f.len());
                    f[k] ^= 1 << rng.below(8);
                }
                1 => f.truncate(rng.below(f.len())),
                2 => {
                    let k = rng.below(f.len().min(200));
                    let v = rng.next().to_le_bytes();
                    let n = v.len().min(f.len() - k);
                    f[k..k + n].copy_from_slice(&v[..n]);
                }
                _ => {
                    let k = rng.below(f.len());
                    f[k] = rng.next() as u8;
                }
            }
            let chunks = Chunks::Random(i, 50);
            let total = if i % 2 == 0 { Some(base.len() as u64) } else { None };
            for kind in [Kind::F32, Kind::Q8] {
                let mut loader = Loader::new(Plan::take_all(kind, GIB), |_: &TensorEntry, _: Loaded| Ok(()));
                let _ = if which == "gguf" {
                    stream_gguf(&f, total, chunks, &mut loader)
                } else {
                    stream_st(&f, total, Limits::default(), chunks, &mut loader)
                };
            }
        }
    }
}

// --- GGUF ------------------------------------------------------------------------------------

/// ggml's `quantize_row_q8_0_ref`, transcribed from C for the fixtures: 34-byte blocks.
fn ggml_q8_0(x: &[f32]) -> Vec<u8> {
    let mut out = vec![];
    for blk in x.chunks(32) {
        let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / ((1 << 7) - 1) as f32;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for &v in blk {
            out.push((v * id).round() as i8 as u8);
        }
    }
    out
}

/// A GGUF with metadata of every value type and F32, F16, BF16 and Q8_0 tensors; returns the
/// file and the tensors' values.
/// A fixture tensor: name, row-major shape, values.
type Fixture = (&'static str, Vec<usize>, Vec<f32>);

fn gguf_fixture(rng: &mut Rng) -> (Vec<u8>, Vec<Fixture>) {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", 8, &{
        let mut v = vec![];
        gstr(&mut v, "moshi");
        v
    })
    .kv("u8", 0, &[200])
    .kv("i8", 1, &[0xfe])
    .kv("u16", 2, &500u16.to_le_bytes())
    .kv("i16", 3, &(-500i16).to_le_bytes())
    .kv("u32", 4, &70000u32.to_le_bytes())
    .kv("i32", 5, &(-70000i32).to_le_bytes())
    .kv("f32", 6, &1.5f32.to_le_bytes())
    .kv("bool", 7, &[1])
    .kv("u64", 10, &(1u64 << 40).to_le_bytes())
    .kv("i64", 11, &(-(1i64 << 40)).to_le_bytes())
    .kv("f64", 12, &2.25f64.to_le_bytes());
    let mut arr = vec![];
    arr.extend_from_slice(&6u32.to_le_bytes());
    arr.extend_from_slice(&3u64.to_le_bytes());
    for v in [1f32, 2.0, 3.0] {
        arr.extend_from_slice(&v.to_le_bytes());
    }
    w.kv("arr.f32", 9, &arr);
    let mut arr = vec![];
    arr.extend_from_slice(&8u32.to_le_bytes());
    arr.extend_from_slice(&2u64.to_le_bytes());
    gstr(&mut arr, "tok_a");
    gstr(&mut arr, "");
    w.kv("arr.str", 9, &arr);
    let mut arr = vec![];
    arr.extend_from_slice(&9u32.to_le_bytes());
    arr.extend_from_slice(&2u64.to_le_bytes());
    for n in [1u64, 2] {
        arr.extend_from_slice(&0u32.to_le_bytes());
        arr.extend_from_slice(&n.to_le_bytes());
        arr.extend(std::iter::repeat_n(7u8, n as usize));
    }
    w.kv("arr.nested", 9, &arr);
    w.alignment(64);
    let q: Vec<f32> = values(rng, 3 * 64, 0.5);
    let f: Vec<f32> = values(rng, 5, 1.0);
    let h: Vec<f32> = values(rng, 2 * 32, 1.0).into_iter().map(|v| f16::from_f32(v).to_f32()).collect();
    let b: Vec<f32> = values(rng, 3, 1.0).into_iter().map(|v| bf16::from_f32(v).to_f32()).collect();
    w.tensor("lin.weight", &[3, 64], 8, ggml_q8_0(&q));
    w.tensor("norm.alpha", &[1, 1, 5], 0, bytemuck::cast_slice::<f32, u8>(&f).to_vec());
    w.tensor("h", &[2, 32], 1, h.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect());
    w.tensor("b", &[3], 30, b.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect());
    (
        w.bytes(),
        vec![
            ("lin.weight", vec![3, 64], q),
            ("norm.alpha", vec![1, 1, 5], f),
            ("h", vec![2, 32], h),
            ("b", vec![3], b),
        ],
    )
}

#[test]
fn gguf_q8_0_is_repacked_to_exactly_what_quantizing_the_values_gives() {
    let mut rng = Rng(8);
    let (file, tensors) = gguf_fixture(&mut rng);
    let (q_name, q_shape, q_vals) = &tensors[0];
    let want = Q8Tensor::from_f32(q_name, q_shape[0], q_shape[1], q_vals).expect("q8");
    for chunks in [Chunks::Whole, Chunks::Fixed(1), Chunks::Fixed(7), Chunks::Fixed(64 << 10), Chunks::Random(2, 33)] {
        for total in [None, Some(file.len() as u64)] {
            let mut plan = Plan::take_all(Kind::F32, GIB);
            plan.want(q_name, q_shape, Kind::Q8);
            let got = load_gguf(&file, total, chunks, plan).unwrap_or_else(|e| panic!("{chunks:?}: {e}"));
            assert_eq!(got.q8[*q_name][0].2, want, "repacked Q8_0 at {chunks:?}");
            for (name, _, vals) in &tensors[1..] {
                assert!(bits(&got.f32[*name]) == bits(vals), "`{name}` at {chunks:?}");
            }
        }
    }
    // Q8_0 loaded as f32 is dequantized: the values of the repacked tensor
    let got = load_gguf(&file, None, Chunks::Fixed(5), Plan::take_all(Kind::F32, GIB)).expect("f32");
    assert_eq!(got.f32[*q_name], want.dequantize());
    // and the whole-buffer repack agrees
    let (h, _) = gguf::parse_header(&file).expect("header");
    let t = h.get(q_name).expect("entry");
    let r = gguf::repack_q8_0(q_name, 3, 64, &file[t.start as usize..t.end() as usize]).expect("repack");
    assert_eq!(r, want);
}

#[test]
fn gguf_header_of_every_value_type_parses() {
    let mut rng = Rng(8);
    let (file, _) = gguf_fixture(&mut rng);
    let mut rec = Recorder::default();
    let mut s = GgufStream::new(None, Limits::default());
    drive(&file, Chunks::Fixed(1), &mut |c| s.push(c, &mut rec)).expect("push");
    s.finish(&mut rec).expect("finish");
    let info = s.info().expect("info");
    assert_eq!((info.version, info.alignment), (3, 64));
    let want = [
        ("general.architecture", GgufValue::Str("moshi".into())),
        ("u8", GgufValue::U8(200)),
        ("i8", GgufValue::I8(-2)),
        ("u16", GgufValue::U16(500)),
        ("i16", GgufValue::I16(-500)),
        ("u32", GgufValue::U32(70000)),
        ("i32", GgufValue::I32(-70000)),
        ("f32", GgufValue::F32(1.5)),
        ("bool", GgufValue::Bool(true)),
        ("u64", GgufValue::U64(1 << 40)),
        ("i64", GgufValue::I64(-(1 << 40))),
        ("f64", GgufValue::F64(2.25)),
        ("arr.f32", GgufValue::Array { elem_type: 6, len: 3 }),
        ("arr.str", GgufValue::Array { elem_type: 8, len: 2 }),
        ("arr.nested", GgufValue::Array { elem_type: 9, len: 2 }),
        ("general.alignment", GgufValue::U32(64)),
    ];
    for (k, v) in want {
        assert_eq!(info.get(k), Some(&v), "{k}");
    }
    let h = rec.header.expect("header");
    assert_eq!(h.format, "GGUF");
    let lin = h.get("lin.weight").expect("lin");
    assert_eq!(lin.shape, vec![3, 64], "ne [64, 3] read as rows 3, cols 64");
    assert_eq!((lin.type_name.as_str(), lin.ggml_type, lin.len), ("Q8_0", Some(8), 6 * 34));
    assert_eq!(h.data_start % 64, 0);
    assert_eq!(h.get("norm.alpha").expect("alpha").shape, vec![1, 1, 5]);
}

fn gguf_error(bytes: &[u8], total: Option<u64>, plan: Plan) -> Error {
    let mut first: Option<String> = None;
    let mut out = None;
    for chunks in [Chunks::Whole, Chunks::Fixed(1), Chunks::Fixed(7), Chunks::Fixed(100)] {
        let mut loader = Loader::new(plan.clone(), |_: &TensorEntry, _: Loaded| Ok(()));
        let e = match stream_gguf(bytes, total, chunks, &mut loader) {
            Err(e) => e,
            Ok(()) => panic!("accepted at {chunks:?}"),
        };
        let s = format!("{e}");
        if let Some(f) = &first {
            assert_eq!(f, &s, "same error at {chunks:?}");
        } else {
            first = Some(s);
            out = Some(e);
        }
    }
    out.expect("an error")
}

fn expect_gguf(e: Error, offset: u64, tensor: Option<&str>, why_has: &str) {
    match &e {
        Error::Stream { format, offset: o, tensor: t, why } => {
            assert_eq!(*format, "GGUF");
            assert_eq!(*o, offset, "offset in `{e}`");
            assert_eq!(t.as_deref(), tensor, "tensor in `{e}`");
            assert!(why.contains(why_has), "`{why}` should mention `{why_has}`");
        }
        _ => panic!("expected Error::Stream, got {e:?}"),
    }
}

#[test]
fn gguf_of_an_unsupported_quant_type_is_refused_naming_the_tensor_and_type() {
    let mut w = GgufWriter::new();
    w.tensor("ok", &[2, 32], 0, vec![0; 256]);
    w.tensor("blk.0.ffn_down.weight", &[2, 256], 12, vec![0; 2 * 144]);
    let file = w.bytes();
    match gguf_error(&file, None, Plan::take_all(Kind::Q8, GIB)) {
        Error::GgufType { name, type_id, type_name } => {
            assert_eq!((name.as_str(), type_id, type_name.as_str()), ("blk.0.ffn_down.weight", 12, "Q4_K"));
        }
        e => panic!("expected GgufType, got {e:?}"),
    }
    assert!(matches!(gguf_error(&file, None, Plan::take_all(Kind::F32, GIB)), Error::GgufType { type_id: 12, .. }));
    // read past when the model does not want it
    let mut plan = Plan::new(GIB);
    plan.want("ok", &[2, 32], Kind::Q8).unknown(Unknown::Skip);
    let mut loader = Loader::new(plan, |_: &TensorEntry, _: Loaded| Ok(()));
    stream_gguf(&file, Some(file.len() as u64), Chunks::Fixed(7), &mut loader).expect("skipped");
    // a type id ggml does not define cannot even be sized
    let mut w = GgufWriter::new();
    w.tensor("odd", &[32], 200, vec![0; 32]);
    match gguf_error(&w.bytes(), None, Plan::take_all(Kind::F32, GIB)) {
        Error::GgufType { name, type_id: 200, type_name } => {
            assert_eq!((name.as_str(), type_name.as_str()), ("odd", "unknown"))
        }
        e => panic!("expected GgufType, got {e:?}"),
    }
}

#[test]
fn truncated_gguf_names_where_it_stopped() {
    let mut rng = Rng(8);
    let (file, _) = gguf_fixture(&mut rng);
    let (h, info) = gguf::parse_header(&file).expect("header");
    let lin = h.get("lin.weight").expect("lin");
    let alpha = h.get("norm.alpha").expect("alpha");
    let plan = || Plan::take_all(Kind::F32, GIB);
    for cut in [0u64, 3, 12, 23, 40, info.infos_end - 1] {
        let e = gguf_error(&file[..cut as usize], None, plan());
        expect_gguf(e, cut, None, "truncated inside the header");
    }
    expect_gguf(
        gguf_error(&file[..info.infos_end as usize], None, plan()),
        info.infos_end,
        Some("lin.weight"),
        "before the tensor",
    );
    expect_gguf(
        gguf_error(&file[..(lin.start + 40) as usize], None, plan()),
        lin.start + 40,
        Some("lin.weight"),
        "40 bytes into",
    );
    // inside the padding after `lin.weight`: the next tensor is missing
    expect_gguf(
        gguf_error(&file[..(lin.end() + 3) as usize], None, plan()),
        lin.end() + 3,
        Some("norm.alpha"),
        "before the tensor",
    );
    expect_gguf(
        gguf_error(&file[..(alpha.start + 1) as usize], None, plan()),
        alpha.start + 1,
        Some("norm.alpha"),
        "1 bytes into",
    );
    // the announced length shorter than the header describes
    let cut = alpha.start + 1;
    expect_gguf(gguf_error(&file[..cut as usize], Some(cut), plan()), cut, Some("norm.alpha"), "file has");
    // the padding after the last tensor may be missing, and a file must not run past it
    let last = h.tensors.last().expect("last");
    let mut loader = Loader::new(plan(), |_: &TensorEntry, _: Loaded| Ok(()));
    stream_gguf(&file[..last.end() as usize], None, Chunks::Fixed(7), &mut loader).expect("unpadded end");
    let mut long = file.clone();
    long.push(0);
    expect_gguf(gguf_error(&long, None, plan()), file.len() as u64, None, "past the end");
}

#[test]
fn malformed_gguf_headers_are_refused() {
    let plan = || Plan::take_all(Kind::F32, GIB);
    let mut w = GgufWriter::new();
    w.tensor("a", &[32], 0, vec![0; 128]);
    let good = w.bytes();
    // magic and version
    let mut f = good.clone();
    f[0] = b'X';
    expect_gguf(gguf_error(&f, None, plan()), 0, None, "magic");
    let mut f = good.clone();
    f[4..8].copy_from_slice(&3u32.to_be_bytes());
    expect_gguf(gguf_error(&f, None, plan()), 4, None, "version");
    // a key string whose length is beyond the cap
    let mut f = good[..24].to_vec();
    f[16..24].copy_from_slice(&1u64.to_le_bytes());
    f.extend_from_slice(&(1u64 << 40).to_le_bytes());
    f.extend_from_slice(b"abc");
    expect_gguf(gguf_error(&f, None, plan()), 0, None, "above the cap");
    // a bad alignment, a bool that is not 0 or 1, an unknown value type, a repeated key
    let mut w = GgufWriter::new();
    w.kv("general.alignment", 4, &48u32.to_le_bytes());
    expect_gguf(gguf_error(&w.bytes(), None, plan()), 24, None, "power of two");
    let mut w = GgufWriter::new();
    w.kv("flag", 7, &[2]);
    expect_gguf(gguf_error(&w.bytes(), None, plan()), 24 + 8 + 4 + 4, None, "bool");
    let mut w = GgufWriter::new();
    w.kv("k", 13, &[0; 8]);
    expect_gguf(gguf_error(&w.bytes(), None, plan()), 24 + 8 + 1 + 4, None, "unknown value type 13");
    let mut w = GgufWriter::new();
    w.kv("k", 0, &[1]).kv("k", 0, &[2]);
    expect_gguf(gguf_error(&w.bytes(), None, plan()), 24 + 14, None, "twice");
    // arrays nested too deep
    let mut v = vec![];
    for _ in 0..6 {
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
    }
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    let mut w = GgufWriter::new();
    w.kv("deep", 9, &v);
    assert!(matches!(gguf_error(&w.bytes(), None, plan()), Error::Stream { why, .. } if why.contains("nested")));
    // tensor infos: too many dims, a wrong offset, a row not a whole number of blocks, a repeated name
    let infos = 24u64;
    let mut w = GgufWriter::new();
    w.tensor("a", &[1, 1, 1, 1, 32], 0, vec![0; 128]);
    expect_gguf(gguf_error(&w.bytes(), None, plan()), infos, Some("a"), "5 dimensions");
    let mut w = GgufWriter::new();
    w.tensor("a", &[32], 0, vec![0; 128]).tensor("b", &[32], 0, vec![0; 128]);
    let mut f = w.bytes();
    // tensor b's offset field: after a's info (8+1+4+8+4+8 = 33 bytes) and b's name, dims and type
    let b_off = (infos + 33 + 8 + 1 + 4 + 8 + 4) as usize;
    f[b_off..b_off + 8].copy_from_slice(&64u64.to_le_bytes());
    expect_gguf(gguf_error(&f, None, plan()), infos + 33, Some("b"), "expected 128");
    let mut w = GgufWriter::new();
    w.tensor("q", &[2, 48], 8, vec![0; 3 * 34]);
    expect_gguf(gguf_error(&w.bytes(), None, plan()), infos, Some("q"), "multiple of Q8_0's block");
    let mut w = GgufWriter::new();
    w.tensor("a", &[32], 0, vec![0; 128]).tensor("a", &[32], 0, vec![0; 128]);
    expect_gguf(gguf_error(&w.bytes(), None, plan()), infos + 33, Some("a"), "twice");
    // a tensor name that is not UTF-8
    let mut w = GgufWriter::new();
    w.tensor("\u{e9}", &[32], 0, vec![0; 128]);
    let mut f = w.bytes();
    f[(infos + 8) as usize] = 0xff;
    expect_gguf(gguf_error(&f, None, plan()), infos, None, "not UTF-8");
}

#[test]
fn gguf_of_moshi_names_loads_through_a_plan() {
    // Kyutai's candle export keeps Linear weights as [out, in] (ne = [in, out]) in Q8_0 and
    // norms in F32; the plan asks for row-major shapes.
    let mut rng = Rng(10);
    let w_in: Vec<f32> = values(&mut rng, 96 * 64, 0.2);
    let alpha: Vec<f32> = values(&mut rng, 64, 1.0);
    let mut w = GgufWriter::new();
    w.tensor("transformer.layers.0.self_attn.in_proj_weight", &[96, 64], 8, ggml_q8_0(&w_in));
    w.tensor("transformer.layers.0.norm1.alpha", &[1, 1, 64], 0, bytemuck::cast_slice::<f32, u8>(&alpha).to_vec());
    let file = w.bytes();
    let mut plan = Plan::new(96 * 64 / 2);
    plan.want("transformer.layers.0.self_attn.in_proj_weight", &[96, 64], Kind::Q8);
    plan.want("transformer.layers.0.norm1.alpha", &[1, 1, 64], Kind::F32);
    let got = load_gguf(&file, Some(file.len() as u64), Chunks::Random(3, 100), plan).expect("load");
    let parts = &got.q8["transformer.layers.0.self_attn.in_proj_weight"];
    assert_eq!(parts.len(), 2, "cut in two at half the quants");
    let deq: Vec<f32> = parts.iter().flat_map(|p| p.2.dequantize()).collect();
    assert_eq!(deq, Q8Tensor::from_f32("w", 96, 64, &w_in).expect("q8").dequantize());
    assert!(bits(&got.f32["transformer.layers.0.norm1.alpha"]) == bits(&alpha));
}

/// Found by `fuzz/fuzz_targets/gguf_header.rs` (its crash input; the first byte picks f32
/// and 106-byte chunks): a GGUF F32 tensor of shape `[0, 2^62 + 2^61 + 8281]`, empty but
/// with a row too long for any buffer. Cutting it to the binding limit computed its f32 row
/// size (times 4 bytes) before seeing it has no rows, and overflowed u64: a panic where
/// overflow checks are on (`cargo test` without `--release`, the fuzz build), a wrapped
/// value without. It loads as one empty part.
#[test]
fn fuzz_regression_an_empty_gguf_tensor_with_a_huge_row_loads_as_one_empty_part() {
    const CRASH: &str = "2a0300000002000000000000000200000000000000110000000000000067656e6572616c2e616c69676e6d656e74\
        04000000200000000c0000000000000067656e6572616c2e6e616d650800000005000000000000006d6f73686901000000\
        00000000610200000059200000000000600000000000000000000000000000000000000000000000000000000000000000\
        000000000000000000000000000000410000f86e";
    let hex: String = CRASH.split_whitespace().collect();
    let crash: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    let mut file = b"GGUF".to_vec();
    file.extend_from_slice(&crash[1..]);
    for chunks in [Chunks::Fixed(106), Chunks::Whole, Chunks::Fixed(1)] {
        let got = load_gguf(&file, Some(file.len() as u64), chunks, Plan::take_all(Kind::F32, 1 << 20)).unwrap();
        assert_eq!(got.parts["a"], vec![(0, 1, 0, 0)], "{chunks:?}");
        assert!(got.f32["a"].is_empty());
    }
    let (h, _) = gguf::parse_header(&file).unwrap();
    assert_eq!(h.get("a").unwrap().shape, vec![0, 0x6000_0000_0000_2059]);
}

// --- MimiLoader ------------------------------------------------------------------------------

/// `MimiLoader` fed the synthetic Mimi checkpoint in random chunks, in the current naming
/// and with the encoder transformer's attention under the released stacked names
/// (`self_attn.in_proj_weight`), gives weights on which the CPU oracle encodes and decodes
/// exactly as on the in-memory reader's; a missing tensor is refused at the header.
#[test]
fn mimi_loader_gives_the_weights_of_the_in_memory_reader() {
    use inferencelayer::mimi::MimiLoader;
    use inferencelayer::weights::stream::ByteSink;
    use inferencelayer::{MimiCpu, MimiWeights};
    let config = MimiConfig::default();
    let bytes = mimi();
    let want = MimiWeights::from_safetensors(&config, bytes).expect("in-memory load");
    // the released names for the encoder transformer's attention
    let store = TensorStore::from_bytes(bytes).unwrap();
    let renamed: Vec<(String, Vec<usize>, Vec<f32>)> = config
        .tensor_specs()
        .into_iter()
        .map(|(n, s)| {
            let v = store.get(&n, &s).unwrap();
            let n = n
                .replace("encoder_transformer.transformer.layers.0.self_attn.in_projs.0.weight", "encoder_transformer.transformer.layers.0.self_attn.in_proj_weight")
                .replace("encoder_transformer.transformer.layers.0.self_attn.out_projs.0.weight", "encoder_transformer.transformer.layers.0.self_attn.out_proj.weight");
            (n, s, v)
        })
        .collect();
    assert!(renamed.iter().any(|t| t.0.ends_with("in_proj_weight")), "the renaming must hit a tensor");
    let data: Vec<Vec<u8>> = renamed.iter().map(|t| bytemuck::cast_slice(&t.2).to_vec()).collect();
    let views: Vec<(String, TensorView<'_>)> =
        renamed.iter().zip(&data).map(|(t, d)| (t.0.clone(), TensorView::new(Dtype::F32, t.1.clone(), d).unwrap())).collect();
    let released = safetensors::serialize(views, None).unwrap();
    drop(data);

    let mut rng = Rng(5);
    let pcm: Vec<f32> = (0..config.frame_size()).map(|_| 0.1 * (rng.unit() - 0.5)).collect();
    let mut cpu = MimiCpu::new(&want);
    let want_codes = cpu.encode_frame(&pcm).unwrap();
    let want_pcm = cpu.decode_frame(0, &want_codes).unwrap();
    for (what, file, seed) in [("current names", bytes, 21u64), ("released names", &released[..], 22)] {
        let mut loader = MimiLoader::new(&config, Some(file.len() as u64)).unwrap();
        let mut rng = Rng(seed);
        let mut at = 0;
        while at < file.len() {
            let n = (1 + rng.below(1 << 20)).min(file.len() - at);
            loader.push(&file[at..at + n]).unwrap();
            at += n;
        }
        loader.finish().unwrap();
        let got = loader.into_weights().unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut cpu = MimiCpu::new(&got);
        let codes = cpu.encode_frame(&pcm).unwrap();
        assert_eq!(codes, want_codes, "{what}: codes");
        assert!(bits(&cpu.decode_frame(0, &codes).unwrap()) == bits(&want_pcm), "{what}: decoded samples differ");
    }

    // a missing tensor: refused at the header, naming it
    let missing = "quantizer.rvq_rest.vq.layers.3._codebook.embedding_sum";
    let kept: Vec<_> = renamed.iter().filter(|t| t.0 != missing).collect();
    let data: Vec<Vec<u8>> = kept.iter().map(|t| bytemuck::cast_slice(&t.2).to_vec()).collect();
    let views: Vec<(String, TensorView<'_>)> =
        kept.iter().zip(&data).map(|(t, d)| (t.0.clone(), TensorView::new(Dtype::F32, t.1.clone(), d).unwrap())).collect();
    let file = safetensors::serialize(views, None).unwrap();
    let mut loader = MimiLoader::new(&config, Some(file.len() as u64)).unwrap();
    let e = file.chunks(1 << 16).try_for_each(|c| loader.push(c)).and_then(|_| loader.finish()).expect_err("refused");
    assert!(matches!(&e, Error::MissingTensor(n) if n == missing), "{e:?}");
    assert!(loader.into_weights().is_err(), "a failed load hands out nothing");
}
