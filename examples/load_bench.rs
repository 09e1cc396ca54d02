//! Loader benchmark: a bf16 safetensors checkpoint at Moshi 7B's full geometry (about
//! 15.4 GB, Kyutai's `model.safetensors` tensor names), generated on the fly from a seeded
//! hash and never held, streamed chunk by chunk through the byte-source driver and the
//! streaming reader (the path of a browser load) into Q8_0
//! parts cut to a storage-binding limit. Prints the peak heap (a counting global allocator)
//! against the bound "largest single tensor + 64 MiB", and the throughput.
//!
//! ```sh
//! cargo run --release --example load_bench -- [--layers 32] [--chunk 1048576] \
//!     [--binding 134217728] [--sha256]
//! ```
//! `--layers` shrinks the main transformer for a quick run; `--sha256` also verifies the
//! stream's SHA-256 (the expected digest comes from a first pass of the generator alone).
//! Exits with status 1 when the peak heap is over the bound.

use std::collections::BTreeMap;
use std::time::Instant;

use inferencelayer::weights::source::{load, ByteSource, LoadOptions, Opened};
use inferencelayer::weights::stream::{CheckpointReader, Kind, Limits, Loaded, Loader, Plan, TensorEntry, Unknown};
use inferencelayer::{Error, Result};
use sha2::{Digest, Sha256};

#[global_allocator]
static HEAP: inferencelayer::heap::Counting = inferencelayer::heap::Counting;

const MB: f64 = 1e6;
const MIB: u64 = 1 << 20;

/// Moshi 7B (moshiko) with `layers` main layers: Kyutai's released names and shapes
/// (`_lm_kwargs`: dim 4096, hidden 11264, text_card 32000, card 2048, 16 streams, dep_q 8,
/// depformer dim 1024 with 6 layers, hidden 2816, weights per step).
fn moshi_specs(layers: usize) -> Vec<(String, Vec<usize>)> {
    let (d, h, dd, dh, card, text) = (4096, 11264, 1024, 2816, 2048, 32000);
    let mut v: Vec<(String, Vec<usize>)> = vec![("text_emb.weight".into(), vec![text + 1, d])];
    for k in 0..16 {
        v.push((format!("emb.{k}.weight"), vec![card + 1, d]));
    }
    for i in 0..layers {
        let p = format!("transformer.layers.{i}");
        v.push((format!("{p}.norm1.alpha"), vec![1, 1, d]));
        v.push((format!("{p}.self_attn.in_proj_weight"), vec![3 * d, d]));
        v.push((format!("{p}.self_attn.out_proj.weight"), vec![d, d]));
        v.push((format!("{p}.norm2.alpha"), vec![1, 1, d]));
        v.push((format!("{p}.gating.linear_in.weight"), vec![2 * h, d]));
        v.push((format!("{p}.gating.linear_out.weight"), vec![d, h]));
    }
    v.push(("out_norm.alpha".into(), vec![1, 1, d]));
    v.push(("text_linear.weight".into(), vec![text, d]));
    for k in 0..8 {
        v.push((format!("depformer_in.{k}.weight"), vec![dd, d]));
    }
    for k in 0..7 {
        v.push((format!("depformer_emb.{k}.weight"), vec![card + 1, dd]));
    }
    v.push(("depformer_text_emb.weight".into(), vec![text + 1, dd]));
    for j in 0..6 {
        let p = format!("depformer.layers.{j}");
        v.push((format!("{p}.norm1.alpha"), vec![1, 1, dd]));
        v.push((format!("{p}.self_attn.in_proj_weight"), vec![8 * 3 * dd, dd]));
        v.push((format!("{p}.self_attn.out_proj.weight"), vec![8 * dd, dd]));
        v.push((format!("{p}.norm2.alpha"), vec![1, 1, dd]));
        for k in 0..8 {
            v.push((format!("{p}.gating.{k}.linear_in.weight"), vec![2 * dh, dd]));
            v.push((format!("{p}.gating.{k}.linear_out.weight"), vec![dd, dh]));
        }
    }
    for k in 0..8 {
        v.push((format!("linears.{k}.weight"), vec![card, dd]));
    }
    v
}

/// The header of a bf16 safetensors file holding `specs` in order, padded with spaces to 8
/// bytes as the `safetensors` crate writes it.
fn header(specs: &[(String, Vec<usize>)]) -> Vec<u8> {
    let mut map = BTreeMap::new();
    let mut off = 0u64;
    for (name, shape) in specs {
        let n: usize = shape.iter().product();
        let end = off + 2 * n as u64;
        map.insert(name.clone(), serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [off, end]}));
        off = end;
    }
    let mut json = serde_json::to_vec(&map).expect("header JSON");
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out
}

/// Yields the file in chunks: the header, then each tensor's bf16 values from a seeded hash
/// of its name and the element index (uniform, scaled by `sqrt(3 / fan_in)`).
struct Generator<'a> {
    specs: &'a [(String, Vec<usize>)],
    header: Vec<u8>,
    at_header: usize,
    tensor: usize,
    element: usize,
    key: u64,
    gain: f32,
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    h
}

impl<'a> Generator<'a> {
    fn new(specs: &'a [(String, Vec<usize>)]) -> Self {
        let mut g = Self { specs, header: header(specs), at_header: 0, tensor: 0, element: 0, key: 0, gain: 0.0 };
        g.enter(0);
        g
    }

    fn enter(&mut self, t: usize) {
        self.tensor = t;
        self.element = 0;
        if let Some((name, shape)) = self.specs.get(t) {
            self.key = fnv1a64(name.as_bytes()) ^ 20261129;
            let fan: usize = shape.last().copied().unwrap_or(1);
            self.gain = if name.ends_with(".alpha") { 1.0 } else { (3.0 / fan as f32).sqrt() };
        }
    }

    /// Fill `buf` with the next bytes (up to its capacity); false at the end of the file.
    fn next_chunk(&mut self, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        let cap = buf.capacity();
        if self.at_header < self.header.len() {
            let n = (self.header.len() - self.at_header).min(cap);
            buf.extend_from_slice(&self.header[self.at_header..self.at_header + n]);
            self.at_header += n;
        }
        while buf.len() + 2 <= cap && self.tensor < self.specs.len() {
            let total: usize = self.specs[self.tensor].1.iter().product();
            let n = ((cap - buf.len()) / 2).min(total - self.element);
            let (key, gain, start) = (self.key, self.gain, self.element);
            let at = buf.len();
            buf.resize(at + 2 * n, 0);
            for (k, out) in buf[at..].chunks_exact_mut(2).enumerate() {
                let i = (start + k) as u64;
                let mut z = key.wrapping_add((i + 1).wrapping_mul(0x9E3779B97F4A7C15));
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
                z ^= z >> 31;
                let u = (z >> 40) as f32 * (1.0 / (1u64 << 24) as f32);
                let v = (2.0 * u - 1.0) * gain;
                // f32 -> bf16, round to nearest even (finite values only)
                let b = v.to_bits();
                let r = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
                out.copy_from_slice(&r.to_le_bytes());
            }
            self.element += n;
            if self.element == total {
                self.enter(self.tensor + 1);
            }
        }
        !buf.is_empty()
    }
}

/// The generator as a byte source (it streams from the start only, as a first request does).
struct GeneratorSource<'a> {
    g: Generator<'a>,
    chunk: usize,
    started: bool,
}

impl ByteSource for GeneratorSource<'_> {
    fn url(&self) -> &str {
        "generated Moshi 7B checkpoint"
    }
    async fn open(&mut self, offset: u64) -> Result<Opened> {
        if offset != 0 || self.started {
            return Err(Error::Input("the generator cannot seek".into()));
        }
        self.started = true;
        Ok(Opened { start: 0, len: None, total: None, version: None })
    }
    async fn read(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        buf.reserve(self.chunk);
        Ok(self.g.next_chunk(buf))
    }
    async fn pause(&mut self, _: u32) {}
}

/// This thread's time on a CPU, in seconds (Linux; the machine may be shared, so wall time
/// alone can mislead).
fn cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse::<u64>().ok().map(|ns| ns as f64 / 1e9)
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number, got {v}")))
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let layers = arg(&args, "--layers", 32) as usize;
    let chunk = arg(&args, "--chunk", MIB) as usize;
    let binding = arg(&args, "--binding", 128 * MIB);
    let sha = args.iter().any(|a| a == "--sha256");

    let specs = moshi_specs(layers);
    let (largest_name, largest_shape) = specs.iter().max_by_key(|(_, s)| s.iter().product::<usize>()).expect("tensors");
    let largest = 2 * largest_shape.iter().product::<usize>() as u64;
    let file_len =
        header(&specs).len() as u64 + specs.iter().map(|(_, s)| 2 * s.iter().product::<usize>() as u64).sum::<u64>();
    println!(
        "load_bench: Moshi 7B geometry ({layers} main layers), {} tensors, bf16 checkpoint {:.2} GB, \
         {} KiB chunks -> Q8_0 (F32 for norms), binding limit {} MiB",
        specs.len(),
        file_len as f64 / 1e9,
        chunk / 1024,
        binding / MIB
    );
    println!(
        "largest tensor: {largest_name} {largest_shape:?}, {:.1} MB in bf16; header {} bytes",
        largest as f64 / MB,
        header(&specs).len()
    );

    let mut buf = Vec::with_capacity(chunk);
    // the generator alone, for the share of the time it takes (and the digest, if asked)
    let (t0, c0) = (Instant::now(), cpu_s());
    let mut g = Generator::new(&specs);
    let mut hasher = sha.then(Sha256::new);
    let mut generated = 0u64;
    while g.next_chunk(&mut buf) {
        generated += buf.len() as u64;
        if let Some(h) = &mut hasher {
            h.update(&buf);
        }
    }
    let gen_s = t0.elapsed().as_secs_f64();
    let gen_cpu = cpu_s().zip(c0).map(|(b, a)| b - a);
    assert_eq!(generated, file_len);

    let mut plan = Plan::new(binding);
    for (name, shape) in &specs {
        let kind = if name.ends_with(".alpha") { Kind::F32 } else { Kind::Q8 };
        plan.want(name, shape, kind);
    }
    plan.unknown(Unknown::Refuse);
    let (mut parts, mut split, mut check) = (0usize, Vec::new(), 0u64);
    let mut loaded_bytes = 0u64;
    let base = inferencelayer::heap::reset_peak() as usize;
    let (t0, c0) = (Instant::now(), cpu_s());
    {
        let loader = Loader::new(plan, |t: &TensorEntry, l: Loaded| {
            // stands in for the upload to a GPU buffer: touch the part, then drop it
            parts += 1;
            match l {
                Loaded::Q8(p) => {
                    if p.count > 1 && p.index == 0 {
                        split.push(format!("{} in {} parts of {} rows", t.name, p.count, p.rows));
                    }
                    loaded_bytes += (p.data.quants.len() + p.data.scales.len()) as u64 * 4;
                    check = check.wrapping_add(
                        p.data.quants.iter().fold(0u64, |a, &w| a.wrapping_mul(31).wrapping_add(w as u64)),
                    );
                }
                Loaded::F32(p) => {
                    loaded_bytes += p.data.len() as u64 * 4;
                    check = check.wrapping_add(p.data.iter().map(|v| v.to_bits() as u64).sum::<u64>());
                }
            }
            Ok(())
        });
        // the same path as a browser load: the source driver feeding a checkpoint reader
        let mut reader = CheckpointReader::new(Some(file_len), Limits::default(), loader);
        if let Some(h) = hasher {
            reader = reader.verify_sha256(h.finalize().into());
        }
        let mut source = GeneratorSource { g: Generator::new(&specs), chunk, started: false };
        if let Err(e) = pollster::block_on(load(&mut source, reader, LoadOptions::default())) {
            eprintln!("load_bench: {e}");
            std::process::exit(2);
        }
    }
    let total_s = t0.elapsed().as_secs_f64();
    let total_cpu = cpu_s().zip(c0).map(|(b, a)| b - a);
    let peak = inferencelayer::heap::peak();
    let bound = largest + 64 * MIB;
    let load_s = (total_s - gen_s).max(1e-9);
    println!(
        "loaded: {parts} parts, {:.2} GB on the GPU side (Q8_0 quants + scales, f32 norms), checksum {check:016x}",
        loaded_bytes as f64 / 1e9
    );
    for s in &split {
        println!("  split: {s}");
    }
    println!(
        "peak heap: {:.1} MB ({:.1} MB before loading); bound = largest tensor + 64 MiB = {:.1} MB: {}",
        peak as f64 / MB,
        base as f64 / MB,
        bound as f64 / MB,
        if peak <= bound { "within" } else { "OVER" }
    );
    let sha_note = if sha { " (with SHA-256)" } else { "" };
    println!(
        "wall: {:.1} s for {:.2} GB = {:.0} MB/s end to end, generation included; generator alone {:.1} s; \
         loader net of generation about {:.0} MB/s{sha_note}",
        total_s,
        file_len as f64 / 1e9,
        file_len as f64 / MB / total_s,
        gen_s,
        file_len as f64 / MB / load_s,
    );
    if let (Some(tc), Some(gc)) = (total_cpu, gen_cpu) {
        let net = (tc - gc).max(1e-9);
        println!(
            "cpu: {tc:.1} s end to end, generator alone {gc:.1} s; loader net of generation {net:.1} s = {:.0} MB/s \
             of bf16 read, quantized and repacked{sha_note}",
            file_len as f64 / MB / net
        );
    }
    if peak > bound {
        std::process::exit(1);
    }
}
