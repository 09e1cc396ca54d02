//! The LM's streaming loader: the reduced-geometry checkpoint of `tests/moshi_parity.rs`
//! streamed through `LmLoader` in random chunk sizes straight into GPU buffers, as the
//! released safetensors (stacked attention names), the current package's split names, bf16,
//! and a candle GGUF named as `scripts/import_rust.py` names it with Q8_0 blocks. The
//! buffers are compared bit for bit with the CPU path (`LmWeights` quantizing the same
//! values, uploaded), and greedy LMGen on the streamed weights is held to Kyutai's goldens.
//! Bad checkpoints are refused with typed errors naming the tensor, and nothing of them is
//! kept.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;

use common::moshi::*;
use inferencelayer::moshi::synthetic::{lm_gguf, upload_synthetic, upload_synthetic_with, Generator};
use inferencelayer::moshi::{Lm, LmGen, LmGpuWeights, LmLoader, LmWeights, Sampling};
use inferencelayer::weights::stream::ByteSink;
use inferencelayer::{Error, GpuContext};

/// Rows through which greedy tokens must equal the reference's (as in moshi_parity.rs).
const EXACT_ROWS: usize = 44;

/// Parts of at most 1000 bytes: a Q8_0 part of the `[128, 352]` FFN output (11 blocks a
/// row, an odd count) holds 2 rows, so parts start at odd blocks and their scales meet
/// `write_buffer`'s 4-byte rule mid-word; a part of the stacked depformer attention
/// (`[8 * 384, 128]`) crosses step boundaries.
const PART_BYTES: u64 = 1000;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A chunk size: often a few bytes (splitting elements, blocks and headers), else up to 64 KiB.
    fn chunk(&mut self) -> usize {
        if self.next() % 4 == 0 {
            1 + (self.next() % 40) as usize
        } else {
            1 + (self.next() % 65536) as usize
        }
    }
}

fn push_all(loader: &mut dyn ByteSink, bytes: &[u8], seed: u64) -> inferencelayer::Result<()> {
    let mut rng = Rng(seed);
    let mut at = 0;
    while at < bytes.len() {
        let n = rng.chunk().min(bytes.len() - at);
        loader.push(&bytes[at..at + n])?;
        at += n;
    }
    Ok(())
}

fn stream(ctx: &Rc<GpuContext>, g: &LmGolden, bytes: &[u8], seed: u64) -> LmGpuWeights {
    let mut loader = LmLoader::with_part_bytes(ctx.clone(), &g.config, Some(bytes.len() as u64), PART_BYTES).unwrap();
    push_all(&mut loader, bytes, seed).unwrap();
    loader.finish().unwrap();
    assert!(loader.bytes_written() > 0);
    loader.into_weights().unwrap()
}

/// Every buffer of `a` equal, bit for bit, to the same buffer of `b`; returns how many.
async fn same_buffers(ctx: &GpuContext, a: &LmGpuWeights, b: &LmGpuWeights, what: &str) -> usize {
    let (ba, bb) = (a.buffers(), b.buffers());
    assert_eq!(ba.len(), bb.len());
    for ((na, x), (nb, y)) in ba.iter().zip(&bb) {
        assert_eq!(na, nb);
        assert_eq!(x.size(), y.size(), "{what}: {na}");
        let n = (x.size() / 4) as usize;
        let (vx, vy) = (ctx.read_f32(x, n).await.unwrap(), ctx.read_f32(y, n).await.unwrap());
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        if let Some(i) = bits(&vx).iter().zip(bits(&vy)).position(|(p, q)| *p != q) {
            panic!("{what}: buffer {na} differs from the CPU path at word {i}");
        }
    }
    ba.len()
}

async fn greedy_rows(ctx: &Rc<GpuContext>, g: &LmGolden, w: &LmGpuWeights) -> Vec<Vec<i32>> {
    let mut lm = Lm::new(ctx.clone(), w, Sampling::greedy()).await.expect("plan");
    let mut gen = LmGen::new(&g.config);
    let mut out = Vec::new();
    for codes in &g.user_codes {
        let input = gen.input(codes).unwrap();
        if let Some(row) = gen.output(&lm.step(&input).await.unwrap()) {
            out.push(row);
        }
    }
    out
}

#[test]
fn streamed_checkpoints_equal_the_cpu_path_and_give_the_reference_greedy_tokens() {
    pollster::block_on(async {
        let g = lm_golden();
        let c = &g.config;
        assert_eq!(c.hidden() / 32 % 2, 1, "the FFN output rows must have an odd block count (alignment branch)");
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        eprintln!("adapter: {}", ctx.info);
        let f32_stacked = lm_checkpoint_bytes(c);
        let tensors = st_tensors(&f32_stacked);
        let f32_split = st_write(&split_naming(&tensors, c.dep_q), false);
        let gguf = lm_gguf(c, inferencelayer::weights::synthetic::SEED).unwrap();
        assert_eq!(&gguf[..4], b"GGUF");
        let cpu = LmWeights::from_safetensors(c, &f32_stacked).unwrap().upload(&ctx).unwrap();

        for (i, (what, bytes)) in [("f32 stacked", &f32_stacked), ("f32 split", &f32_split), ("GGUF Q8_0", &gguf)].into_iter().enumerate() {
            let w = stream(&ctx, &g, bytes, 7 + i as u64);
            let n = same_buffers(&ctx, &w, &cpu, what).await;
            let rows = greedy_rows(&ctx, &g, &w).await;
            let (leading, total) = agreement(&rows, &g.tokens);
            eprintln!("{what}: {n} buffers equal to the CPU path; greedy {leading} leading rows equal, {total}/{} rows", g.tokens.len());
            assert_eq!(rows.len(), g.tokens.len());
            assert!(leading >= EXACT_ROWS, "{what}: only the first {leading} rows equal the reference");
        }

        // bf16 (the released dtype): the synthetic values are not all bf16-exact, so the
        // streamed weights are held to the CPU path quantizing the same bf16 values.
        for (what, t) in [("bf16 stacked", tensors.clone()), ("bf16 split", split_naming(&tensors, c.dep_q))] {
            let bytes = st_write(&t, true);
            let w = stream(&ctx, &g, &bytes, 99);
            let want = LmWeights::from_safetensors(c, &st_write(&tensors, true)).unwrap().upload(&ctx).unwrap();
            let n = same_buffers(&ctx, &w, &want, what).await;
            eprintln!("{what}: {n} buffers equal to the CPU path on the same bf16 values");
        }
        let bf16 = LmWeights::from_safetensors(c, &st_write(&tensors, true)).unwrap();
        let f32w = LmWeights::from_safetensors(c, &f32_stacked).unwrap();
        assert_ne!(bf16.text_emb, f32w.text_emb, "bf16 rounding must change the synthetic tables (else the bf16 case tests nothing new)");
    });
}

fn expect_refused(ctx: &Rc<GpuContext>, g: &LmGolden, bytes: &[u8], check: impl Fn(&Error) -> bool, what: &str) {
    let mut loader = LmLoader::with_part_bytes(ctx.clone(), &g.config, None, PART_BYTES).unwrap();
    let r = push_all(&mut loader, bytes, 3).and_then(|_| loader.finish());
    let e = r.err().unwrap_or_else(|| panic!("{what}: the loader accepted it"));
    eprintln!("{what}: {e}");
    assert!(check(&e), "{what}: wrong error {e:?}");
    assert!(loader.push(&[0]).is_err(), "{what}: a failed loader must refuse more bytes");
    assert!(loader.finish().is_err());
    assert!(loader.into_weights().is_err(), "{what}: a failed load must hand out nothing");
}

#[test]
fn bad_checkpoints_are_refused_naming_the_tensor_and_nothing_is_kept() {
    pollster::block_on(async {
        let g = lm_golden();
        let c = &g.config;
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        let good = lm_checkpoint_bytes(c);
        let tensors = st_tensors(&good);

        // the config disagrees with the checkpoint: refused at the header, before any upload
        let mut wide = c.clone();
        wide.card = 32;
        let mut loader = LmLoader::new(ctx.clone(), &wide, Some(good.len() as u64)).unwrap();
        let e = push_all(&mut loader, &good, 1).expect_err("card 32 must not load a card-64 checkpoint");
        assert!(matches!(&e, Error::Shape { name, expected, found } if name.contains("emb") || name.starts_with("linears") && expected != found), "{e:?}");
        assert_eq!(loader.bytes_written(), 0, "nothing may be uploaded before the header is accepted");
        assert!(loader.into_weights().is_err());
        eprintln!("config disagrees: {e}");

        let without = |name: &str| st_write(&tensors.iter().filter(|t| t.0 != name).cloned().collect::<Vec<_>>(), false);
        expect_refused(&ctx, &g, &without("linears.3.weight"), |e| matches!(e, Error::MissingTensor(n) if n == "linears.3.weight"), "missing");
        expect_refused(
            &ctx,
            &g,
            &without("depformer.layers.1.self_attn.in_proj_weight"),
            |e| matches!(e, Error::MissingTensor(n) if n == "depformer.layers.1.self_attn.in_proj_weight"),
            "missing stacked attention",
        );
        let mut extra = tensors.clone();
        extra.push(("condition_provider.weight".into(), vec![2, 32], vec![0.0; 64]));
        expect_refused(&ctx, &g, &st_write(&extra, false), |e| matches!(e, Error::UnknownTensor(n) if n == "condition_provider.weight"), "unknown");
        let mut bent = tensors.clone();
        let t = bent.iter_mut().find(|t| t.0 == "transformer.layers.1.gating.linear_out.weight").unwrap();
        t.1 = vec![t.1[1], t.1[0]];
        expect_refused(
            &ctx,
            &g,
            &st_write(&bent, false),
            |e| matches!(e, Error::Shape { name, .. } if name == "transformer.layers.1.gating.linear_out.weight"),
            "misshapen",
        );

        // truncated: the stream ends inside a tensor, after parts were already written
        let cut = &good[..good.len() * 2 / 3];
        let mut loader = LmLoader::with_part_bytes(ctx.clone(), c, None, PART_BYTES).unwrap();
        push_all(&mut loader, cut, 5).unwrap();
        assert!(loader.bytes_written() > 0);
        let e = loader.finish().expect_err("a truncated stream must not finish");
        assert!(matches!(&e, Error::Stream { tensor: Some(_), why, .. } if why.contains("truncated")), "{e:?}");
        eprintln!("truncated: {e}");
        assert!(loader.into_weights().is_err(), "a truncated load must hand out nothing");

        // GGUF: a missing per-step tensor of import_rust.py's naming, and a truncated file
        let gguf = lm_gguf(c, inferencelayer::weights::synthetic::SEED).unwrap();
        let mut wide = c.clone();
        wide.depformer_num_layers = 3;
        let mut loader = LmLoader::new(ctx.clone(), &wide, Some(gguf.len() as u64)).unwrap();
        let e = push_all(&mut loader, &gguf, 2).expect_err("3 depformer layers must not load a 2-layer GGUF");
        assert!(matches!(&e, Error::MissingTensor(n) if n.starts_with("depformer.") && n.contains(".transformer.layers.2.")), "{e:?}");
        eprintln!("GGUF, config disagrees: {e}");
        expect_refused(&ctx, &g, &gguf[..gguf.len() - 100], |e| matches!(e, Error::Stream { format: "GGUF", tensor: Some(_), .. }), "GGUF truncated");
    });
}

/// `upload_synthetic` (the wasm build's benchmark weights, written tensor by tensor) gives
/// the buffers of the in-memory synthetic weights uploaded (what `bench-lm` runs), bit for
/// bit, for two seeds; a third seed differs.
#[test]
fn synthetic_weights_written_tensor_by_tensor_equal_the_uploaded_ones() {
    pollster::block_on(async {
        let g = lm_golden();
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        for seed in [3, 42] {
            let streamed = upload_synthetic(&ctx, &g.config, seed).unwrap();
            let uploaded = LmWeights::synthetic(&g.config, seed).unwrap().upload(&ctx).unwrap();
            let n = same_buffers(&ctx, &streamed, &uploaded, &format!("seed {seed}")).await;
            eprintln!("seed {seed}: {n} buffers equal");
        }
        // The fast generator (`bench-lm --weights fast`, `benchLm`'s `weights: "fast"`): the
        // same bits written tensor by tensor as built whole (over threads) and uploaded.
        let streamed = upload_synthetic_with(&ctx, &g.config, 42, Generator::Fast).unwrap();
        let uploaded = LmWeights::synthetic_with(&g.config, 42, Generator::Fast).unwrap().upload(&ctx).unwrap();
        let n = same_buffers(&ctx, &streamed, &uploaded, "fast generator").await;
        eprintln!("fast generator: {n} buffers equal");
        let hash = upload_synthetic(&ctx, &g.config, 42).unwrap();
        let (pa, pb) = (&streamed.text_emb.parts[0].0, &hash.text_emb.parts[0].0);
        let n = (pa.size() / 4) as usize;
        assert_ne!(ctx.read_f32(pa, n).await.unwrap(), ctx.read_f32(pb, n).await.unwrap(), "the fast rule is not the hash rule");
        let (a, b) = (upload_synthetic(&ctx, &g.config, 5).unwrap(), upload_synthetic(&ctx, &g.config, 6).unwrap());
        let (pa, pb) = (&a.text_emb.parts[0].0, &b.text_emb.parts[0].0);
        let n = (pa.size() / 4) as usize;
        assert_ne!(ctx.read_f32(pa, n).await.unwrap(), ctx.read_f32(pb, n).await.unwrap(), "the seed must change the weights");
    });
}
