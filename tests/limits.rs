//! Device limits, natively: the codec and the reduced-geometry LM of the parity tests on a
//! device opened with emulated limits far below the adapter's (wgpu enforces them), their
//! outputs held to Kyutai's goldens; limits too small refused from the config alone before
//! a byte of the checkpoint is read, with the limit named; Moshi 7B's capability check
//! under WebGPU's defaults (128 MiB binding, 256 MiB buffer), and the buffers the plans
//! really make compared with what the check says.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::collections::HashMap;
use std::rc::Rc;

use common::moshi::*;
use common::*;
use inferencelayer::gpu::{GpuLimits, Requirements, MAX_BUFFER, MAX_STORAGE_BINDING};
use inferencelayer::mimi::{self, MimiLoader};
use inferencelayer::moshi::{self, Lm, LmConfig, LmGen, LmGpuWeights, LmLoader, Sampling};
use inferencelayer::weights::source::{self, ByteSource, LoadOptions, Opened};
use inferencelayer::{Error, GpuContext, Mimi, MimiConfig, Result};

/// Rows through which greedy tokens must equal the reference's (as in moshi_parity.rs).
const EXACT_ROWS: usize = 44;

/// A checkpoint in memory that counts what is asked of it.
struct Counting {
    bytes: Vec<u8>,
    at: usize,
    opens: u32,
    read: u64,
}

impl Counting {
    fn new(bytes: Vec<u8>) -> Self {
        Self { bytes, at: 0, opens: 0, read: 0 }
    }
}

impl ByteSource for Counting {
    fn url(&self) -> &str {
        "memory://checkpoint"
    }
    async fn open(&mut self, offset: u64) -> Result<Opened> {
        self.opens += 1;
        self.at = offset as usize;
        let total = self.bytes.len() as u64;
        Ok(Opened { start: offset, len: Some(total - offset), total: Some(total), version: None })
    }
    async fn read(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        if self.at >= self.bytes.len() {
            return Ok(false);
        }
        let n = (64 << 10).min(self.bytes.len() - self.at);
        buf.extend_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        self.read += n as u64;
        Ok(true)
    }
    async fn pause(&mut self, _ms: u32) {}
}

/// The LM loaded as the command-line tool and the web load it: the loader first (which
/// checks the limits), then the source opened and streamed into it.
async fn load_lm(ctx: &Rc<GpuContext>, config: &LmConfig, src: &mut Counting) -> Result<LmGpuWeights> {
    let loader = LmLoader::new(ctx.clone(), config, Some(src.bytes.len() as u64))?;
    let (loader, _) = source::load(src, loader, LoadOptions::default()).await?;
    loader.into_weights()
}

/// Mimi loaded the same way, for a device with `limits`.
async fn load_mimi(config: &MimiConfig, limits: &GpuLimits, src: &mut Counting) -> Result<inferencelayer::MimiWeights> {
    let loader = MimiLoader::checked(config, limits, Some(src.bytes.len() as u64))?;
    let (loader, _) = source::load(src, loader, LoadOptions::default()).await?;
    loader.into_weights()
}

fn limits(binding: u64, buffer: u64) -> GpuLimits {
    GpuLimits { max_storage_binding: binding, max_buffer: buffer }
}

/// Every buffer the check lists was made, with its size, and none larger than its largest.
fn same_as_check(req: &Requirements, made: &[(String, u64)], what: &str) {
    let mut left: HashMap<(&str, u64), usize> = HashMap::new();
    for (n, b) in made {
        *left.entry((n.as_str(), *b)).or_default() += 1;
    }
    for b in &req.buffers {
        let k = left.get_mut(&(b.name.as_str(), b.bytes)).unwrap_or_else(|| panic!("{what}: the check lists `{}` ({} bytes), the plans made no such buffer", b.name, b.bytes));
        assert!(*k > 0, "{what}: the check lists `{}` more often than it was made", b.name);
        *k -= 1;
    }
    let largest = req.largest().expect("buffers");
    let made_largest = made.iter().map(|(_, b)| *b).max().unwrap();
    assert_eq!(made_largest, largest.bytes, "{what}: the largest buffer made is not the check's largest (`{}`)", largest.name);
    let listed = req.total_bytes();
    let all: u64 = made.iter().map(|(_, b)| b).sum();
    eprintln!("{what}: {} buffers made, {} listed by the check; {all} bytes made, {listed} listed (the rest: a frame's activations)", made.len(), req.buffers.len());
    assert!(all >= listed && (all - listed) * 20 < listed, "{what}: activations beyond the check's list are more than 5% ({all} vs {listed})");
}

#[test]
fn moshi_7b_fits_webgpu_defaults_once_its_embedding_tables_are_split() {
    let c = LmConfig::default();
    let r = moshi::requirements(&c, &GpuLimits::WEBGPU_DEFAULT).unwrap();
    eprintln!("{r}");
    assert!(r.fits(), "{:?}", r.check());
    let largest = r.largest().unwrap();
    assert!(largest.bytes <= 128 << 20);
    // the tables above 128 MiB, in parts of whole rows
    let emb = (c.n_q * (c.card + 1) * c.dim * 4) as u64;
    let text = ((c.text_card + 1) * c.dim * 4) as u64;
    assert_eq!((emb, text), (537_133_056, 524_304_384), "Moshi 7B's tables");
    assert_eq!(r.split, vec![("emb".to_string(), 5), ("text_emb.weight".to_string(), 4)]);
    let part_sum = |n: &str| r.buffers.iter().filter(|b| b.name.starts_with(n) && b.name[n.len()..].starts_with(".part")).map(|b| b.bytes).sum::<u64>();
    assert_eq!((part_sum("emb"), part_sum("text_emb.weight")), (emb, text), "the parts hold the whole tables");
    // the largest whole buffer is the text head's quants, 32000 x 4096 bytes
    assert!(r.buffers.iter().any(|b| b.name == "text_linear.weight.quants" && b.bytes == 131_072_000));
    // 7.69 B parameters in Q8_0 (8.2 GB) and 1.6 GB of KV rings for 3000 frames (the
    // temporal transformer's keys and values in f16, the depformer's 8 slots in f32)
    let rings: u64 = r.buffers.iter().filter(|b| b.name.ends_with("_ring")).map(|b| b.bytes).sum();
    assert_eq!(rings, 32 * (2 * 3000 * 4096 * 2 + 3000 * 4) + 6 * (2 * 8 * 1024 * 4 + 8 * 4));
    assert!(r.total_bytes() > 9 << 30 && r.total_bytes() < 10 << 30, "{}", r.total_bytes());

    // on a device binding 64 MiB the text head cannot be bound: the check names the limit
    match moshi::requirements(&c, &limits(64 << 20, 256 << 20)).unwrap().check() {
        Err(Error::Limit { limit, what, needed, allowed }) => {
            assert_eq!((limit, needed, allowed), (MAX_STORAGE_BINDING, 131_072_000, 64 << 20));
            assert!(what.contains("text_linear.weight.quants"), "{what}");
        }
        other => panic!("expected a limit, got {other:?}"),
    }
    // a 100 MiB buffer limit under a 128 MiB binding: maxBufferSize is the one broken
    let e = moshi::requirements(&c, &limits(128 << 20, 100 << 20)).unwrap().check().unwrap_err();
    assert!(matches!(e, Error::Limit { limit: MAX_BUFFER, needed: 131_072_000, allowed: 104_857_600, .. }), "{e}");
    assert!(e.to_string().contains("maxBufferSize") && e.to_string().contains("125.0 MiB"), "{e}");
    // the released Mimi fits the defaults whole
    let m = mimi::requirements(&MimiConfig::default(), &GpuLimits::WEBGPU_DEFAULT).unwrap();
    eprintln!("{m}");
    assert!(m.fits() && m.split.is_empty());
}

#[test]
fn reduced_lm_under_small_limits_splits_its_tables_and_gives_the_reference_tokens() {
    pollster::block_on(async {
        let g = lm_golden();
        let c = &g.config;
        // a 96 KiB binding and a 112 KiB buffer: every Q8_0 linear (the largest, the FFN
        // input, is 704 x 128 = 88 KiB) binds whole, the audio embeddings (16 x 65 rows of
        // 512 bytes, 520 KiB) do not and go in parts
        let lim = limits(96 << 10, 112 << 10);
        let req = moshi::requirements(c, &lim).unwrap();
        eprintln!("{req}");
        assert!(req.fits(), "{:?}", req.check());
        assert_eq!(req.split, vec![("emb".to_string(), 6)]);
        let ctx = Rc::new(GpuContext::with_limits(Some(lim)).await.expect("adapter"));
        eprintln!("adapter: {}", ctx.info);
        assert_eq!(ctx.info.limits(), lim);
        let dl = ctx.device.limits();
        assert_eq!((dl.max_storage_buffer_binding_size, dl.max_buffer_size), (96 << 10, 112 << 10), "the device itself has the lowered limits");

        ctx.record_buffers();
        let mut src = Counting::new(lm_checkpoint_bytes(c));
        let w = load_lm(&ctx, c, &mut src).await.expect("load under the lowered limits");
        assert_eq!(src.read, src.bytes.len() as u64);
        assert_eq!(w.emb.parts.len(), 6);
        let mut lm = Lm::new(ctx.clone(), &w, Sampling::greedy()).await.expect("plan");
        same_as_check(&req, &ctx.recorded_buffers(), "reduced LM");

        let mut gen = LmGen::new(c);
        let mut out = Vec::new();
        for codes in &g.user_codes {
            let input = gen.input(codes).unwrap();
            if let Some(row) = gen.output(&lm.step(&input).await.unwrap()) {
                out.push(row);
            }
        }
        let (leading, total) = agreement(&out, &g.tokens);
        eprintln!("LM with split tables: {leading} leading rows equal, {total}/{} rows equal", g.tokens.len());
        assert!(leading >= EXACT_ROWS, "only the first {leading} rows equal the reference");
    });
}

#[test]
fn codec_under_small_limits_gives_the_reference_codes_and_audio() {
    pollster::block_on(async {
        let g = golden();
        let config = MimiConfig::default();
        // the codec's largest buffer, bound whole, is the binding and buffer limit
        let largest = mimi::requirements(&config, &GpuLimits::WEBGPU_DEFAULT).unwrap().largest().unwrap().bytes;
        assert_eq!(largest, 32 << 20);
        let lim = limits(largest, largest);
        let req = mimi::requirements(&config, &lim).unwrap();
        assert!(req.fits(), "{:?}", req.check());
        let ctx = Rc::new(GpuContext::with_limits(Some(lim)).await.expect("adapter"));
        eprintln!("adapter: {}, limits {}", ctx.info, ctx.info.limits());
        let mut src = Counting::new(checkpoint_bytes());
        let w = load_mimi(&config, &ctx.info.limits(), &mut src).await.expect("load");
        ctx.record_buffers();
        let mut codec = Mimi::new(ctx.clone(), &w).await.expect("plans under the lowered limits");
        same_as_check(&req, &ctx.recorded_buffers(), "Mimi");
        let frames = 6;
        let fs = codec.frame_size();
        let mut codes = Vec::new();
        for frame in g.pcm.chunks_exact(fs).take(frames) {
            codes.push(codec.encode_frame(frame).await.expect("encode"));
        }
        let gate = code_gate(&codes, &g.codes[..frames]);
        eprintln!("encode under {}: {gate:?}", ctx.info.limits());
        assert!(gate.is_ok());
        let mut pcm = Vec::new();
        for (f, c) in g.codes.iter().take(frames).enumerate() {
            pcm.extend(codec.decode_frame(f, c).await.expect("decode"));
        }
        let snr = snr_db(&pcm, &g.decoded[..frames * fs]);
        eprintln!("decode SNR vs reference: {snr:.1} dB");
        assert!(snr >= 40.0, "decode SNR {snr:.1} dB < 40 dB");

        // 4 bytes less: refused before any upload, naming the buffer and the limit
        let small = Rc::new(GpuContext::with_limits(Some(limits(largest - 4, largest))).await.unwrap());
        small.record_buffers();
        match Mimi::new(small.clone(), &w).await {
            Err(Error::Limit { limit, what, needed, allowed }) => {
                assert_eq!((limit, needed, allowed), (MAX_STORAGE_BINDING, largest, largest - 4));
                assert!(what.contains("encoder.model.12.conv.conv.weight"), "{what}");
            }
            Err(e) => panic!("expected a limit, got {e}"),
            Ok(_) => panic!("expected a limit"),
        }
        assert!(small.recorded_buffers().is_empty(), "a refused codec uploads nothing");
    });
}

#[test]
fn limits_too_small_are_refused_before_a_byte_is_read() {
    pollster::block_on(async {
        let g = lm_golden();
        let c = &g.config;
        let ckpt = lm_checkpoint_bytes(c);
        // (binding, buffer) -> (limit, bytes needed, what the message names)
        type Case = ((u64, u64), (&'static str, u64, &'static str));
        let cases: [Case; 3] = [
            ((32 << 10, 32 << 10), (MAX_STORAGE_BINDING, 90_112, "transformer.layers.0.gating.linear_in.weight.quants")),
            ((1 << 20, 64 << 10), (MAX_BUFFER, 90_112, "transformer.layers.0.gating.linear_in.weight.quants")),
            ((256, 256), (MAX_STORAGE_BINDING, 512, "one row of table `emb`")),
        ];
        for ((binding, buffer), (want_limit, want_needed, want_what)) in cases {
            let lim = limits(binding, buffer);
            let ctx = Rc::new(GpuContext::with_limits(Some(lim)).await.expect("adapter"));
            ctx.record_buffers();
            let mut src = Counting::new(ckpt.clone());
            let e = load_lm(&ctx, c, &mut src).await.err().expect("refused");
            eprintln!("LM under {lim}: {e}");
            match &e {
                Error::Limit { limit, what, needed, allowed } => {
                    assert_eq!((*limit, *needed), (want_limit, want_needed), "{e}");
                    assert_eq!(*allowed, if want_limit == MAX_BUFFER { buffer } else { binding });
                    assert!(what.contains(want_what), "{e}");
                    assert!(e.to_string().contains(want_limit));
                }
                other => panic!("expected a limit, got {other}"),
            }
            assert_eq!((src.opens, src.read), (0, 0), "the checkpoint must not be opened");
            assert!(ctx.recorded_buffers().is_empty(), "nothing allocated");
            // the check from the config says the same
            let r = moshi::requirements(c, &lim).unwrap();
            assert_eq!(r.check().unwrap_err().to_string(), e.to_string());
        }
        // Mimi under a 16 MiB binding: refused from its config, nothing read
        let lim = limits(16 << 20, 256 << 20);
        let mut src = Counting::new(b"never read".to_vec());
        let e = load_mimi(&MimiConfig::default(), &lim, &mut src).await.err().expect("refused");
        eprintln!("Mimi under {lim}: {e}");
        assert!(matches!(&e, Error::Limit { limit: MAX_STORAGE_BINDING, needed, allowed, .. } if *needed == 32 << 20 && *allowed == 16 << 20), "{e}");
        assert_eq!((src.opens, src.read), (0, 0));
    });
}

/// Moshi 7B's whole frame plan (zero weights) on a device opened with WebGPU's default
/// limits: every buffer the check lists is made at the size it says, none is larger than
/// its largest (125 MiB), and a frame runs without a validation error. Needs about 12 GB of
/// GPU memory, so it is left to a machine with a GPU: `cargo test --release --test limits
/// -- --ignored`.
#[test]
#[ignore]
fn moshi_7b_plan_under_webgpu_defaults_makes_the_buffers_the_check_lists() {
    pollster::block_on(async {
        let c = LmConfig::default();
        let lim = GpuLimits::WEBGPU_DEFAULT;
        let req = moshi::requirements(&c, &lim).unwrap();
        let ctx = Rc::new(GpuContext::with_limits(Some(lim)).await.expect("adapter"));
        eprintln!("adapter: {}, limits {}", ctx.info, ctx.info.limits());
        ctx.record_buffers();
        let w = LmGpuWeights::allocate(&ctx, &c).expect("allocate");
        let mut lm = Lm::new(ctx.clone(), &w, Sampling::greedy()).await.expect("plan");
        same_as_check(&req, &ctx.recorded_buffers(), "Moshi 7B");
        let tokens = lm.step(&vec![0; 1 + c.n_q]).await.expect("one frame");
        assert_eq!(tokens.len(), 1 + c.dep_q);
        ctx.take_error().expect("no GPU error");
        eprintln!("Moshi 7B: one frame under {lim}: tokens {tokens:?}");
    });
}

/// `inferencelayer check`: Moshi 7B and Mimi under WebGPU's defaults fit (the tables in
/// parts), as JSON too; under a 64 MiB binding the LM is refused with exit status 1 and the
/// limit, the buffer and the bytes in the error line; a limit of 0 bytes is refused before
/// any device is made (the usage error's status 2).
#[test]
fn the_command_line_check_reports_what_fits_and_what_does_not() {
    use common::cli::{run, run_err, run_ok};
    for flag in ["--max-storage-binding", "--max-buffer"] {
        let out = run(&["check", flag, "0"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "check {flag} 0 should be refused: {stderr}");
        assert!(stderr.contains(flag) && stderr.contains("0 is not in 1.."), "{stderr}");
    }
    let out = run_ok(&["check", "--webgpu-defaults"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("split into 5 parts of whole rows: `emb`") && text.contains("split into 4 parts of whole rows: `text_emb.weight`"), "{text}");
    assert_eq!(text.matches("  fits").count(), 2, "{text}");
    let out = run_ok(&["check", "--webgpu-defaults", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["fits"], true);
    assert_eq!(v["limits"][MAX_BUFFER], 256 << 20);
    assert_eq!(v["models"][1]["largestBuffer"]["bytes"], 131_088_384u64);
    run_err(&["check", "--max-storage-binding", "67108864"], &["maxStorageBufferBindingSize", "text_linear.weight.quants", "131072000 bytes", "67108864"]);
}
