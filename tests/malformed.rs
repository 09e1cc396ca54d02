//! A generated corpus of malformed inputs (seeded, made here, nothing committed) across the
//! public entry points: checkpoint bytes (safetensors and GGUF) through `MimiLoader` and
//! `LmLoader`, Mimi and LM config JSON, configs that disagree with their checkpoint, codes
//! `.npy` files, WAV files, and the command line. Every case must be refused with a typed
//! `inferencelayer::Error` (the CLI: a nonzero exit with an `error:` line); a case accepted,
//! or one that panics (caught with `catch_unwind`), fails the test by its name. The counts
//! per entry point and per error variant are printed.
#![cfg(not(target_arch = "wasm32"))]

#[path = "common/cli.rs"]
mod cli;
#[path = "common/fixtures.rs"]
mod fixtures;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use fixtures::{raw_st, GgufTensor, GgufWriter, Rng};
use inferencelayer::mimi::MimiLoader;
use inferencelayer::moshi::{synthetic as lm_synthetic, LmConfig, LmLoader};
use inferencelayer::weights::stream::ByteSink;
use inferencelayer::weights::synthetic::{self, CodebookStats};
use inferencelayer::{audio, Error, GpuContext, MimiConfig};
use serde_json::{json, Value};

const SEED: u64 = 0x6d61_6c66_6f72_6d65;

// --- the corpus ------------------------------------------------------------------------------

/// Cases run, by entry point; the error variants they got; the failures, by case name.
#[derive(Default)]
struct Corpus {
    counts: BTreeMap<&'static str, usize>,
    variants: BTreeMap<&'static str, BTreeMap<String, usize>>,
    failures: Vec<String>,
}

fn variant(e: &Error) -> String {
    format!("{e:?}").split(['(', ' ', '{']).next().unwrap_or("?").to_string()
}

impl Corpus {
    /// Run one case: `f` returns the error the input was refused with, or `Ok(what)` when it
    /// was accepted (a failure). A panic is a failure naming the case.
    fn case(&mut self, entry: &'static str, name: &str, f: impl FnOnce() -> std::result::Result<String, Error>) {
        *self.counts.entry(entry).or_default() += 1;
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Err(e)) => {
                if e.to_string().trim().is_empty() {
                    self.failures.push(format!("{entry} / {name}: an error with no message ({e:?})"));
                }
                *self.variants.entry(entry).or_default().entry(variant(&e)).or_default() += 1;
            }
            Ok(Ok(what)) => self.failures.push(format!("{entry} / {name}: accepted ({what})")),
            Err(p) => {
                let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                self.failures.push(format!("{entry} / {name}: panicked: {}", msg.unwrap_or_default()));
            }
        }
    }

    fn report(&self, min_total: usize) {
        let total: usize = self.counts.values().sum();
        eprintln!("malformed inputs: {total} cases");
        for (entry, n) in &self.counts {
            let v: Vec<String> = self.variants.get(entry).into_iter().flatten().map(|(k, c)| format!("{k} {c}")).collect();
            eprintln!("  {entry:<28}{n:>5}  {}", v.join(", "));
        }
        assert!(self.failures.is_empty(), "{} of {total} cases failed:\n{}", self.failures.len(), self.failures.join("\n"));
        assert!(total >= min_total, "{total} cases, expected at least {min_total}");
    }
}

// --- reduced geometries and their checkpoints ------------------------------------------------

/// A small Mimi: every shape of the released one's kind, a few hundred kB of f32.
fn tiny_mimi() -> Value {
    json!({
        "seanet": { "dimension": 32, "n_filters": 4, "ratios": [8, 6, 5, 4] },
        "transformer": { "d_model": 32, "num_heads": 2, "num_layers": 1, "dim_feedforward": 64,
                         "input_dimension": 32, "output_dimensions": [32] },
        "quantizer": { "dimension": 16, "n_q": 4, "bins": 16, "input_dimension": 32, "output_dimension": 32 },
        "num_codebooks": 4
    })
}

/// A small LM (Q8_0-able widths): dim 64, one layer each, 4 streams.
fn tiny_lm() -> Value {
    json!({
        "dim": 64, "text_card": 64, "existing_text_padding_id": 3, "n_q": 4, "dep_q": 2, "card": 32,
        "num_heads": 2, "num_layers": 1, "hidden_scale": 1.5, "depformer_dim": 32,
        "depformer_dim_feedforward": 48, "depformer_num_heads": 2, "depformer_num_layers": 1,
        "delays": [0, 0, 1, 0, 1]
    })
}

fn mimi_config() -> MimiConfig {
    MimiConfig::from_json(&tiny_mimi().to_string()).expect("tiny Mimi config")
}

fn lm_config() -> LmConfig {
    LmConfig::from_json(&tiny_lm().to_string()).expect("tiny LM config")
}

fn mimi_st(config: &MimiConfig) -> Vec<u8> {
    let q = &config.quantizer;
    synthetic::checkpoint(&config.tensor_specs(), synthetic::SEED, &CodebookStats::unit(q.n_q, q.dimension)).expect("Mimi checkpoint")
}

/// A safetensors file's header (parsed) and data section.
fn st_parts(file: &[u8]) -> (Value, Vec<u8>) {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&file[8..8 + n]).expect("header JSON"), file[8 + n..].to_vec())
}

/// The same tensors as a GGUF of F32 tensors (ggml type 0).
fn st_to_gguf(file: &[u8]) -> GgufWriter {
    let (header, data) = st_parts(file);
    let mut w = GgufWriter::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let shape: Vec<u64> = t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        let [a, b] = [0, 1].map(|i| t["data_offsets"][i].as_u64().unwrap() as usize);
        w.tensor(name, &shape, 0, data[a..b].to_vec());
    }
    w
}

/// Where a GGUF's data section starts (after the header and its padding).
fn gguf_data_start(w: &GgufWriter) -> usize {
    let data: u64 = w.tensors.iter().map(|t| (t.3.len() as u64).next_multiple_of(w.alignment)).sum();
    w.bytes().len() - data as usize
}

// --- feeding the loaders ----------------------------------------------------------------------

/// Push `bytes` in seeded chunks, then finish.
fn feed(sink: &mut dyn ByteSink, bytes: &[u8], seed: u64) -> inferencelayer::Result<()> {
    let mut rng = Rng(seed);
    let mut at = 0;
    while at < bytes.len() {
        let n = (1 + rng.below(4096)).min(bytes.len() - at);
        sink.push(&bytes[at..at + n])?;
        at += n;
    }
    sink.finish()
}

fn load_mimi(config: &MimiConfig, bytes: &[u8], total: Option<u64>, seed: u64) -> std::result::Result<String, Error> {
    let mut l = MimiLoader::new(config, total)?;
    if let Err(e) = feed(&mut l, bytes, seed) {
        return match l.into_weights() {
            Ok(_) => Ok(format!("weights handed out after `{e}`")),
            Err(_) => Err(e),
        };
    }
    l.into_weights().map(|_| "the weights".into())
}

fn load_lm(ctx: &Rc<GpuContext>, config: &LmConfig, bytes: &[u8], total: Option<u64>, seed: u64) -> std::result::Result<String, Error> {
    let mut l = LmLoader::new(ctx.clone(), config, total)?;
    if let Err(e) = feed(&mut l, bytes, seed) {
        return match l.into_weights() {
            Ok(_) => Ok(format!("weights handed out after `{e}`")),
            Err(_) => Err(e),
        };
    }
    l.into_weights().map(|_| "the weights".into())
}

// --- checkpoint mutations ----------------------------------------------------------------------

type Cases = Vec<(String, Vec<u8>, bool)>;

/// Truncations at seeded lengths (and the first bytes), each with and without the length.
fn truncations(base: &[u8], rng: &mut Rng, n: usize, out: &mut Cases) {
    let mut at: Vec<usize> = vec![0, 1, 7, 8, 9, 23, 24, base.len() - 1];
    at.extend((0..n).map(|_| rng.below(base.len())));
    for (i, len) in at.into_iter().enumerate() {
        out.push((format!("truncated to {len} bytes"), base[..len].to_vec(), i % 2 == 0));
        out.push((format!("truncated to {len} bytes, no length"), base[..len].to_vec(), false));
    }
}

/// Bit flips in `range` (a header: every flip there breaks the file).
fn flips(base: &[u8], range: std::ops::Range<usize>, rng: &mut Rng, n: usize, out: &mut Cases) {
    for _ in 0..n {
        let k = range.start + rng.below(range.len());
        let bit = rng.below(8);
        let mut f = base.to_vec();
        f[k] ^= 1 << bit;
        out.push((format!("bit {bit} of byte {k} flipped"), f, true));
    }
}

/// Safetensors header edits: tensors dropped, renamed, retyped, reshaped, re-offset, replaced
/// by non-objects; the header length wrong; the header not JSON or not an object.
fn st_mutations(base: &[u8], rng: &mut Rng, picks: usize) -> Cases {
    let (header, data) = st_parts(base);
    let names: Vec<String> = header.as_object().unwrap().keys().filter(|k| *k != "__metadata__").cloned().collect();
    let mut out: Cases = Vec::new();
    let edit = |what: String, f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut h = header.clone();
        f(h.as_object_mut().unwrap());
        (what, raw_st(&h.to_string(), &data), true)
    };
    for _ in 0..picks {
        let t = names[rng.below(names.len())].clone();
        let shape: Vec<u64> = header[&t]["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        let [a, b] = [0, 1].map(|i| header[&t]["data_offsets"][i].as_u64().unwrap());
        let mut cases = vec![
            edit(format!("`{t}` dropped"), &|m| {
                m.remove(&t);
            }),
            edit(format!("`{t}` renamed"), &|m| {
                let v = m.remove(&t).unwrap();
                m.insert(format!("{t}.renamed"), v);
            }),
            edit(format!("`{t}` with one more dimension"), &|m| {
                let mut s = shape.clone();
                s.push(1);
                m[&t]["shape"] = json!(s);
            }),
            edit(format!("`{t}` as a scalar"), &|m| m[&t]["shape"] = json!([])),
            edit(format!("`{t}` one row longer"), &|m| {
                let mut s = shape.clone();
                s[0] += 1;
                m[&t]["shape"] = json!(s);
            }),
            edit(format!("`{t}` with a negative dimension"), &|m| m[&t]["shape"] = json!([-1])),
            edit(format!("`{t}` with offsets swapped"), &|m| m[&t]["data_offsets"] = json!([b, a])),
            edit(format!("`{t}` ending 4 bytes early"), &|m| m[&t]["data_offsets"] = json!([a, b - 4])),
            edit(format!("`{t}` ending past the data"), &|m| m[&t]["data_offsets"] = json!([a, u64::MAX])),
            edit(format!("`{t}` with string offsets"), &|m| m[&t]["data_offsets"] = json!(["0", "4"])),
            edit(format!("`{t}` without offsets"), &|m| {
                m[&t].as_object_mut().unwrap().remove("data_offsets");
            }),
            edit(format!("`{t}` without a dtype"), &|m| {
                m[&t].as_object_mut().unwrap().remove("dtype");
            }),
        ];
        for dtype in ["I8", "I16", "I32", "I64", "U8", "U32", "BOOL", "F64", "F8_E4M3", "f32", "Q8_0", ""] {
            cases.push(edit(format!("`{t}` of dtype {dtype:?}"), &|m| m[&t]["dtype"] = json!(dtype)));
        }
        for v in [json!(null), json!(1), json!("F32"), json!([])] {
            cases.push(edit(format!("`{t}` replaced by {v}"), &|m| m[&t] = v.clone()));
        }
        out.extend(cases);
    }
    let n = u64::from_le_bytes(base[..8].try_into().unwrap());
    for (what, len) in [("one more", n + 1), ("one less", n - 1), ("zero", 0), ("the whole file", base.len() as u64), ("2^64 - 1", u64::MAX), ("2^40", 1 << 40)] {
        let mut f = base.to_vec();
        f[..8].copy_from_slice(&len.to_le_bytes());
        out.push((format!("header length {what}"), f, true));
    }
    for text in ["", "not json", "[]", "null", "1", "\"x\"", "{", "{\"a\":", "{\"__metadata__\": 5}", "{\"__metadata__\": {\"k\": 1}}"] {
        out.push((format!("header {text:?}"), raw_st(text, &data), true));
    }
    let json = header.to_string();
    out.push((
        "a tensor overlapping the first".into(),
        raw_st(&json.replacen('{', r#"{"zz.overlap":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"#, 1), &data),
        true,
    ));
    out.push(("the data section doubled".into(), raw_st(&json, &[&data[..], &data[..]].concat()), true));
    out
}

/// GGUF edits through the writer (types, shapes, names) and in the fixed header (magic,
/// version, counts).
fn gguf_mutations(w: &GgufWriter, rng: &mut Rng, picks: usize) -> Cases {
    let mut out: Cases = Vec::new();
    let base = w.bytes();
    for _ in 0..picks {
        let i = rng.below(w.tensors.len());
        let name = w.tensors[i].0.clone();
        let mut edit = |what: String, f: &dyn Fn(&mut GgufTensor)| {
            let mut w2 = GgufWriter { alignment: w.alignment, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
            f(&mut w2.tensors[i]);
            out.push((what, w2.bytes(), true));
        };
        for (ty, what) in [(2u32, "Q4_0"), (12, "Q4_K"), (8, "Q8_0"), (99, "unknown 99"), (u32::MAX, "2^32 - 1")] {
            edit(format!("`{name}` of ggml type {what}"), &|t| t.2 = ty);
        }
        edit(format!("`{name}` renamed"), &|t| t.0.push_str(".renamed"));
        edit(format!("`{name}` with an empty name"), &|t| t.0.clear());
        edit(format!("`{name}` with one more dimension"), &|t| t.1.push(1));
        edit(format!("`{name}` with no dimension"), &|t| t.1.clear());
        edit(format!("`{name}` one row longer"), &|t| *t.1.last_mut().unwrap() += 1);
        edit(format!("`{name}` with a zero dimension"), &|t| t.1[0] = 0);
        edit(format!("`{name}` with 2^62 rows"), &|t| *t.1.last_mut().unwrap() = 1 << 62);
        edit(format!("`{name}` with 5 dimensions"), &|t| t.1.extend([1, 1, 1, 1]));
    }
    {
        let mut w2 = GgufWriter { alignment: w.alignment, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
        let t = w2.tensors.pop().unwrap();
        out.push((format!("`{}` dropped", t.0), w2.bytes(), true));
        w2.tensors.push(t.clone());
        w2.tensors.push(t.clone());
        out.push((format!("`{}` twice", t.0), w2.bytes(), true));
    }
    let patch = |what: &str, at: usize, v: &[u8]| {
        let mut f = base.clone();
        f[at..at + v.len()].copy_from_slice(v);
        (what.to_string(), f, true)
    };
    out.push(patch("magic GGUG", 0, b"GGUG"));
    out.push(patch("magic FUGG", 0, b"FUGG"));
    out.push(patch("magic of a safetensors length", 0, &[0x10, 0, 0, 0]));
    // (version 2 is version 3's layout: both are read)
    for v in [0u32, 1, 4, 1000, u32::MAX] {
        out.push(patch(&format!("version {v}"), 4, &v.to_le_bytes()));
    }
    let n_t = w.tensors.len() as u64;
    for v in [0u64, n_t - 1, n_t + 1, 1 << 40, u64::MAX] {
        out.push(patch(&format!("{v} tensors"), 8, &v.to_le_bytes()));
    }
    for v in [w.n_kv + 1, 1 << 40, u64::MAX] {
        out.push(patch(&format!("{v} metadata keys"), 16, &v.to_le_bytes()));
    }
    let mut kv = GgufWriter { alignment: w.alignment, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
    kv.kv("general.alignment", 4, &0u32.to_le_bytes());
    out.push(("alignment 0".into(), kv.bytes(), true));
    let mut kv = GgufWriter { alignment: w.alignment, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
    kv.kv("general.alignment", 4, &3u32.to_le_bytes());
    out.push(("alignment 3".into(), kv.bytes(), true));
    let mut kv = GgufWriter { alignment: w.alignment, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
    kv.kv("bad.type", 13, &[0; 8]);
    out.push(("a metadata value of type 13".into(), kv.bytes(), true));
    let mut kv = GgufWriter { alignment: w.alignment, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
    kv.kv("huge.string", 8, &u64::MAX.to_le_bytes());
    out.push(("a metadata string of 2^64 - 1 bytes".into(), kv.bytes(), true));
    let mut kv = GgufWriter { alignment: w.alignment, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
    let mut arr = 4u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(1u64 << 60).to_le_bytes());
    kv.kv("huge.array", 9, &arr);
    out.push(("a metadata array of 2^60 values".into(), kv.bytes(), true));
    out
}

/// A loader under test: the bytes, the length it is told (if any) and the seed of the chunk sizes it is fed, to what it loaded or its error.
type LoadFn<'a> = dyn Fn(&[u8], Option<u64>, u64) -> std::result::Result<String, Error> + 'a;

fn checkpoint_cases(c: &mut Corpus, entry: &'static str, cases: Cases, load: &LoadFn<'_>) {
    for (i, (name, bytes, with_len)) in cases.into_iter().enumerate() {
        let total = with_len.then_some(bytes.len() as u64);
        c.case(entry, &name, || load(&bytes, total, SEED + i as u64));
    }
}

fn checkpoints(c: &mut Corpus, ctx: &Rc<GpuContext>) {
    let mut rng = Rng(SEED);
    // Mimi, safetensors
    let mc = mimi_config();
    let st = mimi_st(&mc);
    load_mimi(&mc, &st, Some(st.len() as u64), 1).expect("the unmangled Mimi checkpoint loads");
    let hlen = 8 + u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let mut cases = st_mutations(&st, &mut rng, 12);
    truncations(&st, &mut rng, 40, &mut cases);
    flips(&st, 0..hlen, &mut rng, 60, &mut cases);
    checkpoint_cases(c, "Mimi checkpoint, safetensors", cases, &|b, t, s| load_mimi(&mc, b, t, s));
    // Mimi, GGUF
    let w = st_to_gguf(&st);
    let gg = w.bytes();
    load_mimi(&mc, &gg, Some(gg.len() as u64), 2).expect("the unmangled Mimi GGUF loads");
    let mut cases = gguf_mutations(&w, &mut rng, 6);
    truncations(&gg, &mut rng, 30, &mut cases);
    let header_end = {
        let mut bare = GgufWriter { alignment: 1, kv: w.kv.clone(), n_kv: w.n_kv, tensors: w.tensors.clone() };
        for t in &mut bare.tensors {
            t.3.clear();
        }
        bare.bytes().len()
    };
    assert!(header_end <= gguf_data_start(&w));
    flips(&gg, 0..header_end, &mut rng, 40, &mut cases);
    checkpoint_cases(c, "Mimi checkpoint, GGUF", cases, &|b, t, s| load_mimi(&mc, b, t, s));

    // the LM, safetensors and GGUF
    let lc = lm_config();
    let st = synthetic::lm_checkpoint(&lc.tensor_specs(), synthetic::SEED).expect("LM checkpoint");
    load_lm(ctx, &lc, &st, Some(st.len() as u64), 3).expect("the unmangled LM checkpoint loads");
    let hlen = 8 + u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let mut cases = st_mutations(&st, &mut rng, 8);
    truncations(&st, &mut rng, 30, &mut cases);
    flips(&st, 0..hlen, &mut rng, 40, &mut cases);
    checkpoint_cases(c, "LM checkpoint, safetensors", cases, &|b, t, s| load_lm(ctx, &lc, b, t, s));
    let gg = lm_synthetic::lm_gguf(&lc, synthetic::SEED).expect("LM GGUF");
    load_lm(ctx, &lc, &gg, Some(gg.len() as u64), 4).expect("the unmangled LM GGUF loads");
    let mut cases: Cases = Vec::new();
    truncations(&gg, &mut rng, 30, &mut cases);
    for (what, at, v) in [
        ("magic GGUG", 0, b"GGUG".to_vec()),
        ("version 0", 4, 0u32.to_le_bytes().to_vec()),
        ("version 4", 4, 4u32.to_le_bytes().to_vec()),
        ("0 tensors", 8, 0u64.to_le_bytes().to_vec()),
        ("2^40 tensors", 8, (1u64 << 40).to_le_bytes().to_vec()),
        ("2^64 - 1 metadata keys", 16, u64::MAX.to_le_bytes().to_vec()),
    ] {
        let mut f = gg.clone();
        f[at..at + v.len()].copy_from_slice(&v);
        cases.push((what.to_string(), f, true));
    }
    // a Mimi file given as the LM and the LM given as Mimi
    cases.push(("the Mimi checkpoint".into(), mimi_st(&mc), true));
    checkpoint_cases(c, "LM checkpoint, GGUF", cases, &|b, t, s| load_lm(ctx, &lc, b, t, s));
    c.case("Mimi checkpoint, safetensors", "the LM checkpoint", || load_mimi(&mc, &st, Some(st.len() as u64), 5));
}

// --- configs ----------------------------------------------------------------------------------

/// Every leaf of a JSON object, as a path of keys.
fn leaves(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if let Value::Object(m) = v {
        for (k, x) in m {
            prefix.push(k.clone());
            if x.is_object() {
                out.push(prefix.clone());
                leaves(x, prefix, out);
            } else {
                out.push(prefix.clone());
            }
            prefix.pop();
        }
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[String]) -> &'a mut Value {
    path.iter().fold(v, |v, k| &mut v[k])
}

fn remove(v: &mut Value, path: &[String]) {
    let (last, parent) = path.split_last().unwrap();
    at_mut(v, parent).as_object_mut().unwrap().remove(last);
}

/// Values of the wrong type, or of the right type and out of range, for a leaf whose good
/// value is `good`; `zero_ok` for the fields where 0 means something.
fn bad_values(key: &str, good: &Value) -> Vec<Value> {
    let zero_ok = matches!(key, "existing_text_padding_id" | "disable_norm_outer_blocks");
    let unchecked = matches!(key, "disable_norm_outer_blocks" | "conv_layout");
    match good {
        Value::Number(n) if n.is_u64() => {
            let mut v = vec![json!("7"), json!(true), json!(null), json!([]), json!({}), json!(-1), json!(1.5), json!(1e300), json!(18446744073709551616u128 as f64)];
            v.push(serde_json::from_str("18446744073709551616").unwrap());
            if !unchecked {
                v.push(json!(1u64 << 40));
                if !zero_ok {
                    v.push(json!(0));
                }
            }
            v
        }
        // a float: the frame rate and FFN scale size things, RoPE periods do not (any positive
        // one is a period), LayerScale's is an initial value the checkpoint replaces
        Value::Number(_) => {
            let mut v = vec![json!("1.0"), json!(true), json!(null), json!([]), json!({})];
            if key != "layer_scale" {
                v.extend([json!(0), json!(-1)]);
            }
            if matches!(key, "frame_rate" | "hidden_scale") {
                v.push(json!(1e308));
            }
            v
        }
        Value::Null => vec![json!("0.1"), json!(true), json!([]), json!({})],
        Value::Bool(b) => {
            let mut v = vec![json!(1), json!("true"), json!(null), json!([])];
            if *b && !unchecked {
                v.push(json!(false));
            }
            v
        }
        Value::String(_) => vec![json!(1), json!(true), json!(null), json!([]), json!({}), json!("unknown-kind"), json!("")],
        Value::Array(_) => vec![json!(1), json!("x"), json!(null), json!({}), json!([]), json!([-1]), json!([1.5]), json!(["a"]), json!([0]), json!([1u64 << 40])],
        Value::Object(_) => vec![json!(1), json!("x"), json!(null), json!([]), json!({"unknown_key": 1})],
    }
}

/// Config cases for a full config `full` (every key written out): each leaf given each bad
/// value, each key misspelt, the text cut at every few bytes, and text that is not JSON.
fn config_cases(full: &Value) -> Vec<(String, String)> {
    let mut paths = Vec::new();
    leaves(full, &mut Vec::new(), &mut paths);
    let mut out = Vec::new();
    for p in &paths {
        let key = p.last().unwrap().as_str();
        let good = at_mut(&mut full.clone(), p).clone();
        let mut values = bad_values(key, &good);
        // LayerScale is refused in the LM (null is its good value) and required in Mimi
        if key.ends_with("layer_scale") && good.is_null() {
            values.push(json!(0.01));
        }
        for bad in values {
            let mut v = full.clone();
            *at_mut(&mut v, p) = bad.clone();
            out.push((format!("{} = {bad}", p.join(".")), v.to_string()));
        }
        for (how, k) in [("plural", format!("{key}s")), ("upper case", key.to_uppercase()), ("cut", key[..key.len() - 1].to_string())] {
            let mut v = full.clone();
            let (_, parent) = p.split_last().unwrap();
            let m = at_mut(&mut v, parent).as_object_mut().unwrap();
            if m.contains_key(&k) {
                continue;
            }
            let x = m.remove(key).unwrap();
            m.insert(k.clone(), x);
            out.push((format!("key `{}` misspelt ({how}): `{k}`", p.join(".")), v.to_string()));
        }
    }
    for k in ["model_type", "version", "lm_gen_config", "extra"] {
        let mut v = full.clone();
        v[k] = json!(1);
        out.push((format!("unknown key `{k}`"), v.to_string()));
    }
    let text = full.to_string();
    for len in (0..text.len()).step_by(13) {
        out.push((format!("JSON cut at byte {len}"), text[..len].to_string()));
    }
    for bad in [
        "", " ", "null", "[]", "1", "\"{}\"", "true", "{,}", "{\"dim\": 1,}", "{'dim': 1}", "{\"dim\": NaN}", "{\"dim\": Infinity}",
        "\u{feff}{}", "{} {}", "{}x", "// comment\n{}", "{\"dim\": 0x40}", "{\"dim\": 1e}", "{\"dim\" 1}", "\u{0}", "<config/>", "dim: 64", "[64]", "[64, 96]",
    ] {
        out.push((format!("not JSON: {bad:?}"), bad.to_string()));
    }
    let mut rng = Rng(SEED ^ 0x5a);
    for i in 0..20 {
        let s: String = (0..1 + rng.below(60)).map(|_| char::from_u32(32 + rng.below(95) as u32).unwrap()).collect();
        if serde_json::from_str::<serde_json::Map<String, Value>>(&s).is_err() {
            out.push((format!("random text {i}"), s));
        }
    }
    out
}

fn configs(c: &mut Corpus, ctx: &Rc<GpuContext>) {
    let full_mimi = serde_json::to_value(mimi_config()).unwrap();
    let mut dims = vec![];
    for (name, text) in config_cases(&full_mimi) {
        dims.push(name.clone());
        c.case("Mimi config JSON", &name, || MimiConfig::from_json(&text).map(|c| format!("{c:?}")));
    }
    let full_lm = serde_json::to_value(lm_config()).unwrap();
    for (name, text) in config_cases(&full_lm) {
        c.case("LM config JSON", &name, || LmConfig::from_json(&text).map(|c| format!("{c:?}")));
    }
    // inconsistent dimensions, each valid alone
    for (name, edit) in [
        ("quantizer.n_q 1", json!({"quantizer": {"n_q": 1}})),
        ("num_codebooks above n_q", json!({"num_codebooks": 5})),
        ("d_model not seanet.dimension", json!({"transformer": {"d_model": 64}})),
        ("num_heads not dividing d_model", json!({"transformer": {"num_heads": 3}})),
        ("odd head dimension", json!({"transformer": {"num_heads": 32}})),
        ("compress not dividing n_filters", json!({"seanet": {"compress": 3}})),
        ("ratios not dividing the frame", json!({"seanet": {"ratios": [7, 7]}})),
        ("a frame of 24001 samples", json!({"frame_rate": 0.99996})),
        ("quantizer input not seanet.dimension", json!({"quantizer": {"input_dimension": 16}})),
        ("two transformer outputs", json!({"transformer": {"output_dimensions": [32, 32]}})),
        ("stereo", json!({"channels": 2})),
        ("seanet as an array of its fields", json!({"seanet": [1, 32, true, 4]})),
        ("quantizer as an array", json!({"quantizer": [16, 4, 16, 32, 32]})),
        ("dilation 2^30", json!({"seanet": {"dilation_base": 1024, "n_residual_layers": 4}})),
        ("n_filters times 2^ratios too wide", json!({"seanet": {"n_filters": 8192, "compress": 2}})),
    ] {
        let mut v = tiny_mimi();
        merge(&mut v, &edit);
        c.case("Mimi config JSON", name, || MimiConfig::from_json(&v.to_string()).map(|c| format!("{c:?}")));
    }
    for (name, edit) in [
        ("dep_q above n_q", json!({"dep_q": 5})),
        ("delays one short", json!({"delays": [0, 0, 1, 0]})),
        ("num_heads not dividing dim", json!({"num_heads": 3})),
        ("odd head dimension", json!({"num_heads": 64})),
        ("depformer_num_heads not dividing", json!({"depformer_num_heads": 3})),
        ("dim not a multiple of 32", json!({"dim": 48, "num_heads": 2})),
        ("hidden not a multiple of 32", json!({"hidden_scale": 1.25})),
        ("depformer hidden not a multiple of 32", json!({"depformer_dim_feedforward": 40})),
        ("padding id past the vocabulary", json!({"existing_text_padding_id": 64})),
        ("a delay of 10^6 frames", json!({"delays": [0, 0, 1, 0, 1000000]})),
        ("2^37 parameters", json!({"dim": 65536, "num_heads": 2, "num_layers": 64})),
        ("hidden_scale NaN-sized", json!({"hidden_scale": 1e300})),
    ] {
        let mut v = tiny_lm();
        merge(&mut v, &edit);
        c.case("LM config JSON", name, || LmConfig::from_json(&v.to_string()).map(|c| format!("{c:?}")));
    }

    // A config and a checkpoint that disagree: a key left out (its released value then
    // disagrees with the file), or a valid geometry of another file.
    let mc = mimi_config();
    let mst = mimi_st(&mc);
    let defaults = serde_json::to_value(MimiConfig::default()).unwrap();
    let mut paths = Vec::new();
    leaves(&full_mimi, &mut Vec::new(), &mut paths);
    // (a head count shapes no tensor: a config without it cannot be caught by the file)
    let shapes_tensors = |p: &&Vec<String>| !p.last().unwrap().ends_with("num_heads");
    for p in paths.iter().filter(shapes_tensors).filter(|p| at_mut(&mut defaults.clone(), p) != at_mut(&mut full_mimi.clone(), p)) {
        let mut v = full_mimi.clone();
        remove(&mut v, p);
        c.case("config vs checkpoint", &format!("Mimi config without `{}`", p.join(".")), || {
            let config = MimiConfig::from_json(&v.to_string())?;
            load_mimi(&config, &mst, Some(mst.len() as u64), 7)
        });
    }
    for (name, edit) in [
        ("two transformer layers", json!({"transformer": {"num_layers": 2}})),
        ("wider FFN", json!({"transformer": {"dim_feedforward": 128}})),
        ("more bins", json!({"quantizer": {"bins": 32}})),
        ("more codebooks", json!({"quantizer": {"n_q": 8}})),
        ("other ratios", json!({"seanet": {"ratios": [8, 6, 4, 5]}})),
        ("more filters", json!({"seanet": {"n_filters": 8}})),
        ("two residual layers", json!({"seanet": {"n_residual_layers": 2}})),
        ("the released codec", json!(null)),
    ] {
        let v = if edit.is_null() { json!({}) } else {
            let mut v = tiny_mimi();
            merge(&mut v, &edit);
            v
        };
        c.case("config vs checkpoint", &format!("Mimi: {name}"), || {
            let config = MimiConfig::from_json(&v.to_string())?;
            load_mimi(&config, &mst, Some(mst.len() as u64), 8)
        });
    }
    let lc = lm_config();
    let lst = synthetic::lm_checkpoint(&lc.tensor_specs(), synthetic::SEED).expect("LM checkpoint");
    let lgg = lm_synthetic::lm_gguf(&lc, synthetic::SEED).expect("LM GGUF");
    let defaults = serde_json::to_value(LmConfig::default()).unwrap();
    let mut paths = Vec::new();
    leaves(&full_lm, &mut Vec::new(), &mut paths);
    for p in paths.iter().filter(shapes_tensors).filter(|p| at_mut(&mut defaults.clone(), p) != at_mut(&mut full_lm.clone(), p)) {
        let mut v = full_lm.clone();
        remove(&mut v, p);
        for (fmt, file) in [("safetensors", &lst), ("GGUF", &lgg)] {
            c.case("config vs checkpoint", &format!("LM config without `{}`, {fmt}", p.join(".")), || {
                let config = LmConfig::from_json(&v.to_string())?;
                load_lm(ctx, &config, file, Some(file.len() as u64), 9)
            });
        }
    }
    for (name, edit) in [
        ("two layers", json!({"num_layers": 2})),
        ("two depformer layers", json!({"depformer_num_layers": 2})),
        ("a larger card", json!({"card": 64})),
        ("a larger vocabulary", json!({"text_card": 128})),
        ("wider", json!({"dim": 128})),
        ("a wider FFN", json!({"hidden_scale": 3.0})),
        ("more streams", json!({"n_q": 6, "dep_q": 3, "delays": [0, 0, 1, 1, 0, 1, 1]})),
    ] {
        let mut v = tiny_lm();
        merge(&mut v, &edit);
        for (fmt, file) in [("safetensors", &lst), ("GGUF", &lgg)] {
            c.case("config vs checkpoint", &format!("LM: {name}, {fmt}"), || {
                let config = LmConfig::from_json(&v.to_string())?;
                load_lm(ctx, &config, file, Some(file.len() as u64), 10)
            });
        }
    }
}

fn merge(v: &mut Value, edit: &Value) {
    match (v, edit) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, x) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), x);
            }
        }
        (v, e) => *v = e.clone(),
    }
}

// --- codes files -------------------------------------------------------------------------------

fn scratch() -> &'static Path {
    cli::scratch_dir("malformed")
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, bytes).expect("scratch file");
    p
}

/// A version 1.0 `.npy`: magic, header dict padded to 64 bytes, data.
fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut h = dict.to_string();
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut f = b"\x93NUMPY\x01\x00".to_vec();
    f.extend_from_slice(&(h.len() as u16).to_le_bytes());
    f.extend_from_slice(h.as_bytes());
    f.extend_from_slice(data);
    f
}

fn dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}")
}

fn codes(c: &mut Corpus) {
    let (n_q, bins) = (8usize, 2048usize);
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    let good: Vec<u8> = (0..4 * 8).flat_map(|i| (i as i64 * 37 % 2048).to_le_bytes()).collect();
    let valid = npy(&dict("'<i8'", "(4, 8)"), &good);
    let p = write("valid.npy", &valid);
    assert_eq!(audio::read_codes(&p, n_q, bins).expect("the valid codes file").len(), 4);
    for (descr, width) in [
        ("'<f4'", 4), ("'<f8'", 8), ("'<f2'", 2), ("'|b1'", 1), ("'<c8'", 8), ("'<U1'", 4), ("'|S4'", 4), ("'|O'", 8),
        ("'<M8[s]'", 8), ("'<m8[s]'", 8), ("[('a', '<i8')]", 8), ("'<i3'", 3), ("'<i16'", 16), ("'x'", 1), ("1", 8), ("None", 8),
    ] {
        cases.push((format!("dtype {descr}"), npy(&dict(descr, "(4, 8)"), &vec![0; 32 * width])));
    }
    for shape in ["()", "(32,)", "(4, 8, 1)", "(1, 4, 8)", "(4, 7)", "(4, 9)", "(8, 4)", "(0, 8)", "(0, 0)", "(4, 0)", "(2, 16)"] {
        let n: usize = shape.trim_matches(['(', ')']).split(',').filter_map(|d| d.trim().parse::<usize>().ok()).product();
        cases.push((format!("shape {shape}"), npy(&dict("'<i8'", shape), &vec![0; 8 * n])));
    }
    let mut rng = Rng(SEED ^ 0xc0de);
    for (descr, width, bad) in [
        ("'<i8'", 8, vec![-1i128, -2048, i64::MIN as i128, 2048, 4095, i64::MAX as i128]),
        ("'<i4'", 4, vec![-1, i32::MIN as i128, 2048, i32::MAX as i128]),
        ("'<i2'", 2, vec![-1, i16::MIN as i128, 2048, i16::MAX as i128]),
        ("'|i1'", 1, vec![-1, -128]),
        ("'<u2'", 2, vec![2048, 65535]),
        ("'<u4'", 4, vec![2048, u32::MAX as i128]),
        ("'<u8'", 8, vec![2048, i64::MAX as i128 + 1, u64::MAX as i128]),
        ("'>i8'", 8, vec![-1, 2048]),
    ] {
        for code in bad {
            for _ in 0..3 {
                let at = rng.below(32);
                let mut data = Vec::new();
                for i in 0..32 {
                    let v: i128 = if i == at { code } else { (i as i128 * 37) % 2048 };
                    let le = v.to_le_bytes();
                    let mut b = le[..width].to_vec();
                    if descr.starts_with("'>") {
                        b.reverse();
                    }
                    data.extend(b);
                }
                cases.push((format!("code {code} as {descr} at value {at}"), npy(&dict(descr, "(4, 8)"), &data)));
            }
        }
    }
    for len in (0..valid.len()).step_by(3) {
        cases.push((format!("truncated to {len} bytes"), valid[..len].to_vec()));
    }
    let patch = |at: usize, v: &[u8]| {
        let mut f = valid.clone();
        f[at..at + v.len()].copy_from_slice(v);
        f
    };
    cases.push(("magic \\x93NUMPZ".into(), patch(0, b"\x93NUMPZ")));
    cases.push(("magic without \\x93".into(), patch(0, b"xNUMPY")));
    for (maj, min) in [(0u8, 0u8), (4, 0), (255, 255)] {
        cases.push((format!("version {maj}.{min}"), patch(6, &[maj, min])));
    }
    for len in [0u16, 1, 60, u16::MAX] {
        cases.push((format!("header length {len}"), patch(8, &len.to_le_bytes())));
    }
    cases.push(("version 2 with a 2^32 - 1 header".into(), [b"\x93NUMPY\x02\x00".to_vec(), u32::MAX.to_le_bytes().to_vec(), vec![b' '; 64]].concat()));
    for d in [
        "{'fortran_order': False, 'shape': (4, 8), }",
        "{'descr': '<i8', 'shape': (4, 8), }",
        "{'descr': '<i8', 'fortran_order': False, }",
        "{'descr': '<i8', 'fortran_order': 'yes', 'shape': (4, 8), }",
        "{'descr': '<i8', 'fortran_order': False, 'shape': (-1, 8), }",
        "{'descr': '<i8', 'fortran_order': False, 'shape': ('a', 8), }",
        "{'descr': '<i8', 'fortran_order': False, 'shape': (1180591620717411303424, 8), }",
        "{'descr': '<i8', 'fortran_order': False, 'shape': (1099511627776, 8), }",
        "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
        "{'descr': '<i8', 'fortran_order': False, 'shape': (4, 8)",
        "['descr', '<i8']",
        "not a dict",
        "",
        "{'descr': <i8, 'fortran_order': False, 'shape': (4, 8), }",
    ] {
        cases.push((format!("header {d:?}"), npy(d, &good)));
    }
    cases.push(("not a .npy at all".into(), b"frame,code\n0,1\n".to_vec()));
    cases.push(("a WAV".into(), wav(1, 1, 24000, 16, &[0; 64])));
    for (i, (name, bytes)) in cases.into_iter().enumerate() {
        let p = write(&format!("codes-{i}.npy"), &bytes);
        c.case("codes .npy", &name, || audio::read_codes(&p, n_q, bins).map(|v| format!("{} frames", v.len())));
    }
    let dir = scratch().to_path_buf();
    c.case("codes .npy", "a directory", || audio::read_codes(&dir, n_q, bins).map(|v| format!("{} frames", v.len())));
    let missing = scratch().join("missing.npy");
    c.case("codes .npy", "a missing file", || audio::read_codes(&missing, n_q, bins).map(|v| format!("{} frames", v.len())));
}

// --- WAV files --------------------------------------------------------------------------------

/// A RIFF/WAVE file: `fmt ` chunk of `format` (with `channels`, `rate`, `bits`; byte rate
/// and block align from them), then a `data` chunk.
fn wav(format: u16, channels: u16, rate: u32, bits: u16, data: &[u8]) -> Vec<u8> {
    let align = channels as u32 * (bits as u32).div_ceil(8);
    let mut fmt = Vec::new();
    fmt.extend_from_slice(&format.to_le_bytes());
    fmt.extend_from_slice(&channels.to_le_bytes());
    fmt.extend_from_slice(&rate.to_le_bytes());
    fmt.extend_from_slice(&(rate.wrapping_mul(align)).to_le_bytes());
    fmt.extend_from_slice(&(align as u16).to_le_bytes());
    fmt.extend_from_slice(&bits.to_le_bytes());
    riff(&[(b"fmt ", fmt), (b"data", data.to_vec())])
}

fn riff(chunks: &[(&[u8; 4], Vec<u8>)]) -> Vec<u8> {
    let mut body = b"WAVE".to_vec();
    for (id, c) in chunks {
        body.extend_from_slice(*id);
        body.extend_from_slice(&(c.len() as u32).to_le_bytes());
        body.extend_from_slice(c);
        if c.len() % 2 == 1 {
            body.push(0);
        }
    }
    let mut f = b"RIFF".to_vec();
    f.extend_from_slice(&(body.len() as u32).to_le_bytes());
    f.extend(body);
    f
}

/// A WAVE_FORMAT_EXTENSIBLE `fmt ` chunk with the subformat code `sub`.
fn extensible(sub: u16, bits: u16) -> Vec<u8> {
    let mut fmt = Vec::new();
    for v in [0xfffeu16, 1] {
        fmt.extend_from_slice(&v.to_le_bytes());
    }
    fmt.extend_from_slice(&24000u32.to_le_bytes());
    fmt.extend_from_slice(&(24000u32 * (bits as u32 / 8)).to_le_bytes());
    fmt.extend_from_slice(&(bits / 8).to_le_bytes());
    fmt.extend_from_slice(&bits.to_le_bytes());
    fmt.extend_from_slice(&22u16.to_le_bytes());
    fmt.extend_from_slice(&bits.to_le_bytes());
    fmt.extend_from_slice(&4u32.to_le_bytes());
    fmt.extend_from_slice(&sub.to_le_bytes());
    fmt.extend_from_slice(&[0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]);
    fmt
}

fn wavs(c: &mut Corpus) {
    let pcm16: Vec<u8> = (0..100i16).flat_map(|i| (i * 300).to_le_bytes()).collect();
    let valid = wav(1, 1, 24000, 16, &pcm16);
    let p = write("valid.wav", &valid);
    assert_eq!(audio::read_wav(&p).expect("the valid WAV").len(), 100);
    let stereo24: Vec<u8> = (0..2 * 50 * 3).map(|i| (i * 7) as u8).collect();
    let valid24 = wav(1, 2, 48000, 24, &stereo24);
    assert!(audio::read_wav(write("valid24.wav", &valid24)).is_ok());
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for len in 0..valid.len() {
        cases.push((format!("16-bit mono truncated to {len} bytes"), valid[..len].to_vec()));
    }
    for len in (0..valid24.len()).step_by(3) {
        cases.push((format!("24-bit stereo truncated to {len} bytes"), valid24[..len].to_vec()));
    }
    for (fmt, bits, what) in [
        (0u16, 16u16, "format 0"), (2, 16, "ADPCM"), (6, 8, "A-law"), (7, 8, "mu-law"), (0x11, 4, "IMA ADPCM"), (0x55, 16, "MP3"),
        (0xffff, 16, "format 0xffff"), (3, 64, "64-bit float"), (3, 16, "16-bit float"), (3, 24, "24-bit float"), (3, 8, "8-bit float"),
        (1, 0, "0-bit integer"), (1, 1, "1-bit integer"), (1, 4, "4-bit integer"), (1, 12, "12-bit integer"), (1, 20, "20-bit integer"),
        (1, 40, "40-bit integer"), (1, 48, "48-bit integer"), (1, 64, "64-bit integer"),
    ] {
        let n = 16 * (bits as usize).div_ceil(8).max(1);
        cases.push((format!("{what} samples"), wav(fmt, 1, 24000, bits, &vec![0x11; n])));
    }
    cases.push(("64-bit float stereo at 48 kHz".into(), wav(3, 2, 48000, 64, &vec![0; 256])));
    for (sub, bits, what) in [(3u16, 64u16, "extensible 64-bit float"), (2, 16, "extensible ADPCM"), (0x55, 16, "extensible MP3"), (0, 16, "extensible format 0")] {
        cases.push((what.into(), riff(&[(b"fmt ", extensible(sub, bits)), (b"data", vec![0; 64])])));
    }
    cases.push(("0 channels".into(), wav(1, 0, 24000, 16, &pcm16)));
    for rate in [0u32, 1, 10, 999, 1_000_001, 96_000_000, u32::MAX] {
        cases.push((format!("{rate} Hz"), wav(1, 1, rate, 16, &pcm16)));
    }
    for (bits, what) in [(32u16, "float")] {
        for (v, name) in [(f32::NAN, "NaN"), (f32::INFINITY, "+inf"), (f32::NEG_INFINITY, "-inf")] {
            let data: Vec<u8> = (0..20).flat_map(|i| if i == 7 { v } else { 0.1 }.to_le_bytes()).collect();
            cases.push((format!("a {name} sample in a {bits}-bit {what} WAV"), wav(3, 1, 24000, bits, &data)));
        }
    }
    cases.push(("empty".into(), vec![]));
    cases.push(("no samples".into(), wav(1, 1, 24000, 16, &[])));
    cases.push(("3 samples in 2 channels".into(), wav(1, 2, 24000, 16, &[0; 6])));
    cases.push(("RIFF alone".into(), b"RIFF".to_vec()));
    cases.push(("RIFF without WAVE".into(), [b"RIFF".to_vec(), 4u32.to_le_bytes().to_vec(), b"AVI ".to_vec()].concat()));
    cases.push(("RIFX (big-endian)".into(), [b"RIFX".to_vec(), valid[4..].to_vec()].concat()));
    cases.push(("no fmt chunk".into(), riff(&[(b"data", pcm16.clone())])));
    cases.push(("no data chunk".into(), riff(&[(b"fmt ", valid[20..36].to_vec())])));
    cases.push(("data before fmt".into(), riff(&[(b"data", pcm16.clone()), (b"fmt ", valid[20..36].to_vec())])));
    cases.push(("a fmt chunk of 8 bytes".into(), riff(&[(b"fmt ", valid[20..28].to_vec()), (b"data", pcm16.clone())])));
    cases.push(("a fmt chunk of 0 bytes".into(), riff(&[(b"fmt ", vec![]), (b"data", pcm16.clone())])));
    let mut huge = valid.clone();
    huge[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
    cases.push(("a data chunk of 2^32 - 1 bytes".into(), huge));
    let mut odd = valid.clone();
    odd[40..44].copy_from_slice(&199u32.to_le_bytes());
    cases.push(("a data chunk of an odd byte count".into(), odd));
    cases.push(("text".into(), b"this is not audio\n".to_vec()));
    cases.push(("a codes file".into(), npy(&dict("'<i8'", "(1, 8)"), &[0; 64])));
    for (i, (name, bytes)) in cases.into_iter().enumerate() {
        let p = write(&format!("wav-{i}.wav"), &bytes);
        c.case("WAV files", &name, || audio::read_wav(&p).map(|v| format!("{} samples", v.len())));
    }
    let dir = scratch().to_path_buf();
    c.case("WAV files", "a directory", || audio::read_wav(&dir).map(|v| format!("{} samples", v.len())));
    let p = write("float64.wav", &wav(3, 1, 24000, 64, &[0; 64]));
    let msg = audio::read_wav(&p).unwrap_err().to_string();
    assert!(msg.contains("64-bit float samples are not supported"), "the 64-bit float WAV: {msg}");
}

// --- the tests ----------------------------------------------------------------------------------

/// Everything but the command line, in one process: at least 1000 cases.
#[test]
fn malformed_inputs_are_refused_with_typed_errors() {
    let ctx = Rc::new(pollster::block_on(GpuContext::new()).expect("a GPU adapter (lavapipe natively)"));
    let mut c = Corpus::default();
    checkpoints(&mut c, &ctx);
    configs(&mut c, &ctx);
    codes(&mut c);
    wavs(&mut c);
    c.report(1000);
}

/// The messages the fixed defects now give.
#[test]
fn messages_name_the_key_and_the_problem() {
    let e = LmConfig::from_json(r#"{"dims": 64}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `dims`"), "{e}");
    let e = MimiConfig::from_json(r#"{"seanet": {"dimensions": 64}}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `dimensions`"), "{e}");
    let e = LmConfig::from_json(r#"{"num_heads": 0}"#).unwrap_err().to_string();
    assert!(e.contains("`num_heads`") && e.contains("between 1 and"), "{e}");
    let p = write("no-frames.npy", &npy(&dict("'<i8'", "(0, 8)"), &[]));
    let e = audio::read_codes(&p, 8, 2048).unwrap_err().to_string();
    assert!(e.contains("holds no frames"), "{e}");
}

// --- the command line ---------------------------------------------------------------------------

fn cli_cases(c: &mut Corpus) {
    let dir = scratch();
    let s = |p: &Path| p.display().to_string();
    let mc = mimi_config();
    let mimi = write("cli-mimi.safetensors", &mimi_st(&mc));
    let mimi_json = write("cli-mimi.json", tiny_mimi().to_string().as_bytes());
    let lm_json = write("cli-lm.json", tiny_lm().to_string().as_bytes());
    let lm = write("cli-lm.safetensors", &synthetic::lm_checkpoint(&lm_config().tensor_specs(), synthetic::SEED).unwrap());
    let wav_in = write("cli-in.wav", &wav(1, 1, 24000, 16, &[0; 3840 * 2]));
    let codes4 = write("cli-codes4.npy", &npy(&dict("'<i8'", "(2, 4)"), &[0; 64]));
    let codes0 = write("cli-codes0.npy", &npy(&dict("'<i8'", "(0, 4)"), &[]));
    let codes_oob = write("cli-codes-oob.npy", &npy(&dict("'<i8'", "(1, 4)"), &[0xff; 32]));
    // the tiny LM's user codes: 2 per frame, below its card of 32
    let user2 = write("cli-user2.npy", &npy(&dict("'<i8'", "(2, 2)"), &[0; 32]));
    let user0 = write("cli-user0.npy", &npy(&dict("'<i8'", "(0, 2)"), &[]));
    let user_oob = write("cli-user-oob.npy", &npy(&dict("'<i8'", "(1, 2)"), &[&32i64.to_le_bytes()[..], &[0; 8]].concat()));
    let bad_json = write("cli-bad.json", b"{\"seanet\": ");
    let unknown_json = write("cli-unknown.json", br#"{"dims": 64}"#);
    let nonutf8 = write("cli-nonutf8.json", b"{\"\xff\": 1}");
    let float64 = write("cli-f64.wav", &wav(3, 1, 24000, 64, &[0; 64]));
    let garbage = write("cli-garbage.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": garbage}");
    let missing = dir.join("missing.file");
    let out = dir.join("cli-out.wav");
    let (mimi, mimi_json, lm_json, lm, wav_in) = (s(&mimi), s(&mimi_json), s(&lm_json), s(&lm), s(&wav_in));
    let (user2, user0, user_oob) = (s(&user2), s(&user0), s(&user_oob));
    let (codes4, codes0, codes_oob, bad_json, unknown_json, nonutf8, float64, garbage, missing, out, dir_s) = (
        s(&codes4), s(&codes0), s(&codes_oob), s(&bad_json), s(&unknown_json), s(&nonutf8), s(&float64), s(&garbage), s(&missing), s(&out), s(dir),
    );
    let codec = |rest: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["--checkpoint".into(), mimi.clone(), "--config".into(), mimi_json.clone()];
        v.extend(rest.iter().map(|x| x.to_string()));
        v
    };
    let mut cases: Vec<(String, Vec<String>, &'static str)> = Vec::new();
    let mut add = |args: Vec<String>, needle: &'static str| cases.push((args.join(" "), args, needle));
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    // clap's refusals: unknown, missing or unparsable arguments
    add(v(&[]), "Usage");
    add(v(&["frobnicate"]), "unrecognized subcommand");
    add(v(&["encode"]), "required");
    add(v(&["encode", "--checkpoint"]), "value is required");
    add(v(&["decode", "--checkpoint", "x", "a.npy"]), "required");
    add(v(&["encode", "--checkpoint", "x", "--bogus", "a", "b"]), "unexpected argument");
    // ("-1" is a value that no unsigned count parses)
    for n in ["-1", "x", "1.5", "", "99999999999999999999999"] {
        add(v(&["encode", "--checkpoint", "x", "--codebooks", n, "a", "b"]), "invalid value|unexpected argument");
        add(v(&["load-lm", "--lm", "x", "--chunk", n]), "invalid value|unexpected argument");
        add(v(&["bench", "--checkpoint", "x", "--frames", n]), "invalid value|unexpected argument");
        add(v(&["converse", "--lm", "x", "--seed", n, "a.npy", "--no-audio"]), "invalid value|unexpected argument");
        add(v(&["synthetic-lm", "--seed", n, "out.safetensors"]), "invalid value|unexpected argument");
    }
    for t in ["x", "1e", ""] {
        add(v(&["converse", "--lm", "x", "--temp-text", t, "a.npy", "--no-audio"]), "invalid value|unexpected argument");
    }
    // the tool's own refusals
    let cmd = |name: &str, rest: Vec<String>| -> Vec<String> { [vec![name.to_string()], rest].concat() };
    for n in ["0", "33", "5"] {
        add(cmd("decode", codec(&["--codebooks", n, &codes4, &out])), "num_codebooks");
    }
    add(cmd("roundtrip", codec(&[&wav_in, &wav_in])), "is a file this command reads");
    add(cmd("encode", codec(&[&wav_in, &wav_in])), "is a file this command reads");
    add(cmd("decode", codec(&[&codes4, &codes4])), "is a file this command reads");
    // an output that is another file the command reads: the checkpoint, the config, a hard link
    add(cmd("encode", codec(&[&wav_in, &mimi])), "is a file this command reads");
    add(cmd("roundtrip", codec(&[&wav_in, &mimi_json])), "is a file this command reads");
    let linked = dir.join("cli-in-link.wav");
    let _ = std::fs::remove_file(&linked);
    std::fs::hard_link(&wav_in, &linked).expect("hard link");
    add(cmd("roundtrip", codec(&[&wav_in, &s(&linked)])), "is a file this command reads");
    add(v(&["synthetic-checkpoint", "--config", &mimi_json, &mimi_json]), "is a file this command reads");
    add(v(&["synthetic-lm", "--config", &lm_json, &lm_json]), "is a file this command reads");
    add(cmd("decode", codec(&[&codes0, &out])), "holds no frames");
    add(cmd("decode", codec(&[&codes_oob, &out])), "out of range");
    add(cmd("decode", codec(&[&wav_in, &out])), "npy");
    add(cmd("decode", codec(&[&missing, &out])), "cannot read");
    add(cmd("decode", codec(&[&dir_s, &out])), "cannot read");
    add(cmd("encode", codec(&[&float64, &out])), "64-bit float samples are not supported");
    add(cmd("encode", codec(&[&codes4, &out])), "WAV");
    add(cmd("encode", codec(&[&missing, &out])), "cannot read");
    add(cmd("encode", v(&["--checkpoint", &mimi, "--config", &bad_json, &wav_in, &out])), "cli-bad.json");
    add(cmd("encode", v(&["--checkpoint", &mimi, "--config", &unknown_json, &wav_in, &out])), "unknown field `dims`");
    add(cmd("encode", v(&["--checkpoint", &mimi, "--config", &nonutf8, &wav_in, &out])), "cli-nonutf8.json");
    add(cmd("encode", v(&["--checkpoint", &mimi, "--config", &missing, &wav_in, &out])), "cannot read the Mimi config");
    add(cmd("encode", v(&["--checkpoint", &mimi, &wav_in, &out])), "pass the Mimi config");
    add(cmd("encode", v(&["--checkpoint", &garbage, "--config", &mimi_json, &wav_in, &out])), "not a valid Mimi checkpoint");
    add(cmd("encode", v(&["--checkpoint", &lm, "--config", &mimi_json, &wav_in, &out])), "pass the Mimi config");
    add(cmd("encode", v(&["--checkpoint", &missing, "--config", &mimi_json, &wav_in, &out])), "cannot read the Mimi checkpoint");
    add(cmd("bench", codec(&["--frames", "0"])), "--frames");
    add(v(&["bench-lm", "--frames", "0"]), "--frames");
    add(v(&["load-lm", "--lm", &lm, "--lm-config", &lm_json, "--chunk", "0"]), "--chunk must be between 1");
    add(v(&["load-lm", "--lm", &lm, "--lm-config", &lm_json, "--chunk", "4294967296"]), "--chunk must be between 1");
    add(v(&["load-lm", "--lm", &lm, "--lm-config", &unknown_json]), "unknown field `dims`");
    add(v(&["load-lm", "--lm", &lm, "--lm-config", &bad_json]), "cli-bad.json");
    add(v(&["load-lm", "--lm", &lm]), "pass the --lm-config");
    add(v(&["load-lm", "--lm", &mimi, "--lm-config", &lm_json]), "pass the --lm-config");
    add(v(&["load-lm", "--lm", &garbage, "--lm-config", &lm_json]), "not a valid LM checkpoint");
    add(v(&["load-lm", "--lm", &missing, "--lm-config", &lm_json]), "cannot read the LM checkpoint");
    add(v(&["synthetic-lm", "--config", &unknown_json, &s(&dir.join("x.safetensors"))]), "unknown field `dims`");
    add(v(&["synthetic-checkpoint", "--config", &bad_json, &s(&dir.join("x.safetensors"))]), "cli-bad.json");
    add(v(&["bench-lm", "--config", &unknown_json]), "unknown field `dims`");
    let conv = |rest: &[&str]| -> Vec<String> { cmd("converse", [v(&["--lm", &lm, "--lm-config", &lm_json]), v(rest)].concat()) };
    add(conv(&[&user2, "--no-audio", "--max-frames", "0"]), "--max-frames");
    add(conv(&[&user2, &out, "--no-audio"]), "--no-audio");
    add(conv(&[&user2]), "OUTPUT");
    add(conv(&[&wav_in, &wav_in, "--mimi", &mimi, "--mimi-config", &mimi_json]), "is a file this command reads");
    add(conv(&[&user2, "--no-audio", "--tokens-out", &user2]), "is a file this command reads");
    add(conv(&[&user2, "--no-audio", "--tokens-out", &lm]), "is a file this command reads");
    add(conv(&[&user2, "--no-audio", "--tokens-out", &lm_json]), "is a file this command reads");
    add(conv(&[&user0, "--no-audio"]), "holds no frames");
    add(conv(&[&user_oob, "--no-audio"]), "out of range");
    add(conv(&[&user2, &out]), "num_codebooks");
    // a negative number is the flag's value (clap took it for a flag)
    add(conv(&[&user2, "--no-audio", "--temp-text", "-1"]), "--temp-text");
    add(conv(&[&user2, "--no-audio", "--temp-text=-1"]), "--temp-text");
    add(conv(&[&user2, "--no-audio", "--temp-audio", "NaN"]), "--temp-audio");
    add(conv(&[&user2, "--no-audio", "--temp-audio", "inf"]), "--temp-audio");
    add(conv(&[&wav_in, &out, "--mimi", &mimi, "--mimi-config", &unknown_json]), "unknown field `dims`");
    add(conv(&[&user2, "--no-audio", "--tokenizer", &missing]), "cannot read the tokenizer");
    add(conv(&[&user2, "--no-audio", "--tokenizer", &lm]), "tokenizer");
    add(cmd("converse", v(&["--lm", &lm, "--lm-config", &bad_json, &user2, "--no-audio"])), "cli-bad.json");
    add(cmd("converse", v(&["--lm", &mimi, "--lm-config", &lm_json, &user2, "--no-audio"])), "pass the --lm-config");
    for (i, (name, args, needle)) in cases.into_iter().enumerate() {
        c.case("command line", &name, || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = cli::run(&args);
            let stderr = String::from_utf8_lossy(&o.stderr).to_string();
            let code = o.status.code();
            if code.is_none() {
                return Ok(format!("killed by a signal: {stderr}"));
            }
            if o.status.success() {
                return Ok(format!("exit 0: {stderr}"));
            }
            if !needle.split('|').any(|n| stderr.contains(n)) {
                return Ok(format!("case {i}: exit {code:?} without `{needle}` in: {stderr}"));
            }
            Err(Error::Input(format!("exit {}", code.unwrap())))
        });
    }
    assert!(!Path::new(&out).exists(), "no refused command writes its output");
}

/// The command line: bad arguments and files exit nonzero with a message, never a signal.
#[test]
fn the_command_line_refuses_malformed_arguments() {
    let mut c = Corpus::default();
    cli_cases(&mut c);
    c.report(80);
}
