//! The streaming attention step of one new position (`PlanBuilder::rope_attention_at` with
//! `t = 1`: rotary embedding, KV push, attention over the window) against an f64 CPU oracle
//! of the reference's streaming attention (moshi/modules/transformer.py, `RingKVCache` and
//! `StreamingMultiheadAttention`: a ring of `context` slots written at `pos % context`, the
//! query attending to the keys whose position `p` has `0 <= pos - p < context`), for every
//! kernel choice: `rope_attention` (one workgroup per head), `rope_attention_small` (the
//! depformer's 8 positions) and `rope_attention_split` with `attention_combine` (the
//! temporal transformer's 3000), split as by default (at most 128 positions a workgroup, 125
//! in a full window, 32 or more while it fills; four threads a key beyond 64 positions a
//! workgroup, the keys in rounds of 64) and otherwise (a fixed chunk that is not a power of
//! two, one wider than a workgroup with two threads a key, a single position per workgroup
//! while the window fills, a single split that writes the output itself). Windows from the
//! first frame (empty rings) to full rings that have wrapped
//! many times, with a slot in the window that no longer holds its position (masked); the
//! rings after the step must hold the new rotated key and value. Then one plan replayed
//! frame after frame from empty rings, past their end, each step reading what the steps
//! before it pushed.
#![cfg(not(target_arch = "wasm32"))]

use inferencelayer::gpu::{AttentionDispatch, AttentionKernel, FrameParams, GpuContext, PlanBuilder, Tensor, TransformerSpec, ATTENTION_CHUNK, ATTENTION_LEAST, INVALID_POS};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// One layer's streaming state on the CPU: `[ring, dim]` keys (rotated) and values, and the
/// position each slot holds.
#[derive(Clone)]
struct Rings {
    k: Vec<f32>,
    v: Vec<f32>,
    pos: Vec<u32>,
}

/// Rings as a stream that has run positions `0..pos` leaves them (random keys and values;
/// a slot never written holds [`INVALID_POS`]), with the slot of position `stale` (when
/// given) holding an older position, as after a reset or a skipped write: it must be masked.
fn rings_at(rng: &mut Lcg, spec: &TransformerSpec, pos: usize, stale: Option<usize>) -> Rings {
    let ring = spec.context;
    let mut r = Rings { k: rng.vec(ring * spec.dim), v: rng.vec(ring * spec.dim), pos: vec![INVALID_POS; ring] };
    for s in 0..ring.min(pos) {
        r.pos[s] = (s + (pos - 1 - s) / ring * ring) as u32;
    }
    if let Some(p) = stale {
        r.pos[p % ring] = if p >= ring { (p - ring) as u32 } else { INVALID_POS };
    }
    r
}

/// The oracle: rotate q and k of `qkv` `[3 dim]` at `pos` (the angle in f32 as the kernels and
/// the reference compute it, the rest in f64), push k and v into `rings`, attend.
///
/// With `half` (f16 rings, [`PlanBuilder::kv_half`]) the pushed key and value are rounded to
/// f16 in the rings, and the new key is attended as the rings hold it.
fn oracle(spec: &TransformerSpec, rings: &mut Rings, qkv: &[f32], pos: usize, half: bool) -> Vec<f64> {
    let (d, heads, ring) = (spec.dim, spec.heads, spec.context);
    let hd = d / heads;
    let coef = (-(spec.max_period.ln()) * 2.0 / hd as f64) as f32;
    let mut q: Vec<f64> = qkv[..d].iter().map(|v| *v as f64).collect();
    let mut k: Vec<f64> = qkv[d..2 * d].iter().map(|v| *v as f64).collect();
    if spec.rope {
        for h in 0..heads {
            for j in 0..hd / 2 {
                let angle = ((j as f32 * coef).exp() * pos as f32) as f64;
                let (sn, cs) = angle.sin_cos();
                for x in [&mut q, &mut k] {
                    let o = h * hd + 2 * j;
                    let (a, b) = (x[o], x[o + 1]);
                    x[o] = a * cs - b * sn;
                    x[o + 1] = a * sn + b * cs;
                }
            }
        }
    }
    let slot = pos % ring;
    for (i, kv) in k.iter().enumerate() {
        rings.k[slot * d + i] = *kv as f32;
    }
    rings.v[slot * d..(slot + 1) * d].copy_from_slice(&qkv[2 * d..]);
    rings.pos[slot] = pos as u32;
    if half {
        for x in rings.k[slot * d..(slot + 1) * d].iter_mut().chain(rings.v[slot * d..(slot + 1) * d].iter_mut()) {
            *x = f16_round(*x);
        }
    }
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f64; d];
    for h in 0..heads {
        let mut sc: Vec<(usize, f64)> = Vec::new();
        for (s, &pk) in rings.pos.iter().enumerate() {
            let pk = pk as usize;
            if pk != INVALID_POS as usize && pk <= pos && pos - pk < spec.context {
                // the new key as the kernels attend it: rotated in f32, not rounded again
                let dot: f64 = if pk == pos && !half {
                    (0..hd).map(|e| q[h * hd + e] * k[h * hd + e]).sum()
                } else {
                    (0..hd).map(|e| q[h * hd + e] * rings.k[s * d + h * hd + e] as f64).sum()
                };
                sc.push((s, dot * scale));
            }
        }
        let m = sc.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
        let den: f64 = sc.iter().map(|s| (s.1 - m).exp()).sum();
        for (s, score) in &sc {
            let w = (score - m).exp() / den;
            for e in 0..hd {
                out[h * hd + e] += w * rings.v[s * d + h * hd + e] as f64;
            }
        }
    }
    out
}

fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

impl Rings {
    /// These rings with keys and values rounded to f16, as f16 rings hold them.
    fn rounded(&self) -> Rings {
        Rings { k: self.k.iter().map(|x| f16_round(*x)).collect(), v: self.v.iter().map(|x| f16_round(*x)).collect(), pos: self.pos.clone() }
    }
}

/// A ring's keys or values as the GPU buffer holds them: f32, or f16 bits.
fn ring_bytes(values: &[f32], half: bool) -> Vec<u8> {
    if half {
        values.iter().flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes()).collect()
    } else {
        bytemuck::cast_slice(values).to_vec()
    }
}

/// `n` keys or values read back from a ring buffer (f32, or f16 bits).
async fn read_ring(ctx: &GpuContext, buf: &wgpu::Buffer, n: usize, half: bool) -> Vec<f32> {
    if !half {
        return ctx.read_f32(buf, n).await.unwrap();
    }
    let words = ctx.read_f32(buf, n / 2).await.unwrap();
    words.iter().flat_map(|w| {
        let b = w.to_bits();
        [half::f16::from_bits(b as u16).to_f32(), half::f16::from_bits((b >> 16) as u16).to_f32()]
    }).collect()
}

fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

/// One attention step at `pos` over `start` with `kernel`, against the oracle: the output
/// and the rings afterwards. Returns the output's relative error.
async fn step(ctx: &GpuContext, spec: &TransformerSpec, start: &Rings, qkv: &[f32], pos: usize, kernel: AttentionKernel) -> f64 {
    let what = format!("dim {}, {} heads, ring {}, pos {pos}, {kernel:?} ({:?})", spec.dim, spec.heads, spec.context, kernel.dispatch(spec.dim / spec.heads, spec.context));
    let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams { pos: pos as u32, first: (pos == 0) as u32, ..Default::default() }));
    let mut b = PlanBuilder::new(ctx, &frame).unwrap();
    b.set_attention_kernel(kernel);
    // f16 rings hold what the stream pushed rounded to f16
    let half = b.kv_half(spec);
    let start = &(if half { start.rounded() } else { start.clone() });
    let what = format!("{what}{}", if half { ", f16 rings" } else { "" });
    let rings = [
        ctx.storage_bytes("k_ring", &ring_bytes(&start.k, half)).unwrap(),
        ctx.storage_bytes("v_ring", &ring_bytes(&start.v, half)).unwrap(),
        ctx.storage_bytes("pos_ring", bytemuck::cast_slice(&start.pos)).unwrap(),
    ];
    let x = Tensor { buf: ctx.storage_f32("qkv", qkv).unwrap(), shape: vec![1, 3 * spec.dim] };
    let out = b.rope_attention_at("attn", spec, &x, &frame, &rings).unwrap();
    let (plan, _, _) = b.finish();
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        plan.record(&mut pass);
    }
    ctx.queue.submit([enc.finish()]);
    let mut cpu = start.clone();
    let want = oracle(spec, &mut cpu, qkv, pos, half);
    let got = ctx.read_f32(&out.buf, spec.dim).await.unwrap();
    assert!(got.iter().all(|v| v.is_finite()), "{what}: output not finite");
    // RoPE angles are f32 (pos times a frequency, as the reference computes them), so a
    // rotation is good to about pos 2^-24 radians and the sines of the kernels' and the
    // oracle's differ by that (measured on lavapipe: 3.3e-4 on the keys at position 17999,
    // 5.6e-4 on the output through a sharp softmax); without RoPE the kernels' f32 sums set
    // the error (1e-7 to 1e-6)
    let (tol, tol_k) = if spec.rope { (2e-5 + 6e-8 * pos as f64, 1e-6 + 3e-8 * pos as f64) } else { (1e-5, 0.0) };
    // f16 rings: the new key rotated in f32 and in f64 may round to neighbouring halves
    // (2^-11 apart, relative), and the kernel's rounding of the value may differ from the
    // oracle's by as much
    let (tol, tol_k, tol_v) = if half { (tol + 2e-4, tol_k + 1e-3, 1e-3) } else { (tol, tol_k, 0.0) };
    let e = rel_err(&got, &want);
    assert!(e < tol, "{what}: output relative error {e:e}");
    let (d, slot) = (spec.dim, pos % spec.context);
    let k = read_ring(ctx, &rings[0], spec.context * d, half).await;
    let v = read_ring(ctx, &rings[1], spec.context * d, half).await;
    let p: Vec<u32> = ctx.read_f32(&rings[2], spec.context).await.unwrap().iter().map(|f| f.to_bits()).collect();
    let want_k: Vec<f64> = cpu.k[slot * d..(slot + 1) * d].iter().map(|v| *v as f64).collect();
    let ek = rel_err(&k[slot * d..(slot + 1) * d], &want_k);
    assert!(ek <= tol_k, "{what}: pushed key relative error {ek:e}");
    let want_v: Vec<f64> = cpu.v[slot * d..(slot + 1) * d].iter().map(|v| *v as f64).collect();
    let ev = rel_err(&v[slot * d..(slot + 1) * d], &want_v);
    assert!(ev <= tol_v, "{what}: pushed value relative error {ev:e}");
    assert_eq!(p, cpu.pos, "{what}: position ring");
    // nothing but the new slot written
    let others = |a: &[f32], b: &[f32]| a.iter().zip(b).enumerate().all(|(i, (x, y))| i / d == slot || x == y);
    assert!(others(&k, &start.k) && others(&v, &start.v), "{what}: a ring slot other than {slot} changed");
    e
}

/// The temporal transformer of Moshi 7B: 32 heads of 128, 3000 slots, RoPE.
const TEMPORAL: TransformerSpec = TransformerSpec { dim: 4096, heads: 32, context: 3000, max_period: 10000.0, rope: true, kv_half: false };
/// The depformer: 16 heads of 64, 8 slots, no positional embedding.
const DEPFORMER: TransformerSpec = TransformerSpec { dim: 1024, heads: 16, context: 8, max_period: 10000.0, rope: false, kv_half: false };

#[test]
fn attention_kernels_are_chosen_by_shape() {
    let (chunk, least) = (ATTENTION_CHUNK, ATTENTION_LEAST);
    assert_eq!(AttentionKernel::Auto.dispatch(128, 3000), AttentionDispatch::Split { chunk, least, splits: 3000usize.div_ceil(chunk) });
    assert_eq!(AttentionKernel::Auto.dispatch(64, 8), AttentionDispatch::Small);
    // the window a workgroup's threads cannot cover: one split (no combine)
    assert_eq!(AttentionKernel::Auto.dispatch(128, 20), AttentionDispatch::Split { chunk, least, splits: 1 });
    // at most 256 splits: wider chunks for long windows, the fused kernel past 256 x 512
    assert_eq!(AttentionKernel::Auto.dispatch(128, 100_000), AttentionDispatch::Split { chunk: 391, least, splits: 256 });
    assert_eq!(AttentionKernel::Auto.dispatch(128, 200_000), AttentionDispatch::Fused);
    assert_eq!(AttentionKernel::Fused.dispatch(64, 8), AttentionDispatch::Fused);
    assert_eq!(AttentionKernel::Split { chunk: 2, least: 2 }.dispatch(64, 8), AttentionDispatch::Split { chunk: 2, least: 2, splits: 4 });
    // the least clamped to the chunk
    assert_eq!(AttentionKernel::Split { chunk: 64, least: 100 }.dispatch(128, 3000), AttentionDispatch::Split { chunk: 64, least: 64, splits: 47 });
    assert_eq!(AttentionKernel::Split { chunk: 64, least: 0 }.dispatch(128, 3000), AttentionDispatch::Split { chunk: 64, least: 1, splits: 47 });
    // a chunk the kernels cannot take falls back to the default
    for chunk in [0, 513, 10] {
        assert_eq!(AttentionKernel::Split { chunk, least: 1 }.dispatch(128, 3000), AttentionKernel::Auto.dispatch(128, 3000), "chunk {chunk}");
    }
}

#[test]
fn temporal_attention_matches_the_oracle_from_the_first_frame_to_wrapped_rings() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0xa77e_2000);
        let kernels = [
            AttentionKernel::Auto,
            AttentionKernel::Fused,
            AttentionKernel::Split { chunk: 200, least: 200 },
            AttentionKernel::Split { chunk: 512, least: 1 },
            AttentionKernel::Split { chunk: 16, least: 16 },
            AttentionKernel::Split { chunk: 128, least: 7 },
        ];
        // positions in the window: 1 (first frame), 16, 200, 1000, 3000 (full), then rings
        // that wrapped (slot 417, and the last slot after five laps)
        let cases: [(usize, Option<usize>); 7] = [(0, None), (15, Some(3)), (199, None), (999, Some(998)), (2999, Some(1500)), (3417, Some(2000)), (5 * 3000 + 2999, Some(5 * 3000 + 10))];
        // without RoPE the attention's own rounding, with it the model's step
        // and with f16 rings where the kernel is the split one
        for spec in [TransformerSpec { rope: false, ..TEMPORAL }, TEMPORAL, TransformerSpec { kv_half: true, ..TEMPORAL }] {
            let mut worst = 0f64;
            for (pos, stale) in cases {
                let start = rings_at(&mut rng, &spec, pos, stale);
                // queries scaled up so that the softmax is far from uniform
                let mut qkv = rng.vec(3 * spec.dim);
                qkv[..spec.dim].iter_mut().for_each(|v| *v *= 6.0);
                for kernel in kernels {
                    worst = worst.max(step(&ctx, &spec, &start, &qkv, pos, kernel).await);
                }
            }
            println!("temporal attention, rope {}, f16 rings {}: worst relative error {worst:e}", spec.rope, spec.kv_half);
        }
        ctx.take_error().unwrap();
    });
}

#[test]
fn depformer_attention_matches_the_oracle_step_by_step_and_wrapped() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0xde9f_0008);
        let kernels = [
            AttentionKernel::Auto,
            AttentionKernel::Fused,
            AttentionKernel::Split { chunk: 8, least: 8 },
            AttentionKernel::Split { chunk: 3, least: 1 },
            AttentionKernel::Split { chunk: 2, least: 2 },
        ];
        // the depformer's steps 0..8 of a frame over rings the last frame left (every slot
        // holds the same step of that frame), one slot stale; then rotated, past the ring
        for (spec, cases) in [
            (DEPFORMER, vec![(0, None), (1, None), (4, Some(2)), (7, None)]),
            (TransformerSpec { rope: true, ..DEPFORMER }, vec![(0, None), (11, Some(9)), (8 * 41 + 7, None)]),
        ] {
            let mut worst = 0f64;
            for (pos, stale) in cases {
                let mut start = rings_at(&mut rng, &spec, if spec.rope { pos } else { spec.context }, None);
                if let Some(s) = stale {
                    start.pos[s % spec.context] = INVALID_POS;
                }
                let mut qkv = rng.vec(3 * spec.dim);
                qkv[..spec.dim].iter_mut().for_each(|v| *v *= 6.0);
                for kernel in kernels {
                    worst = worst.max(step(&ctx, &spec, &start, &qkv, pos, kernel).await);
                }
            }
            println!("depformer attention, rope {}: worst relative error {worst:e}", spec.rope);
        }
        ctx.take_error().unwrap();
    });
}

/// One plan replayed frame after frame from empty rings, two and a half times around them:
/// each step reads the keys and values the steps before it pushed (the split kernels over
/// several workgroups and their combine, the small kernel), against the oracle's rings.
#[test]
fn consecutive_steps_follow_the_oracle_around_the_ring() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0x5e9_0040);
        let wide = TransformerSpec { dim: 256, heads: 4, context: 40, max_period: 10000.0, rope: true, kv_half: false };
        let short = TransformerSpec { context: 8, ..wide };
        for (spec, kernel) in [
            (wide, AttentionKernel::Auto),
            (wide, AttentionKernel::Split { chunk: 8, least: 2 }),
            (wide, AttentionKernel::Split { chunk: 3, least: 1 }),
            (short, AttentionKernel::Auto),
            (short, AttentionKernel::Split { chunk: 2, least: 1 }),
            (TransformerSpec { kv_half: true, ..wide }, AttentionKernel::Auto),
            (TransformerSpec { kv_half: true, ..wide }, AttentionKernel::Split { chunk: 3, least: 1 }),
        ] {
            let what = format!("ring {}, {kernel:?} ({:?})", spec.context, kernel.dispatch(spec.dim / spec.heads, spec.context));
            let (d, ring) = (spec.dim, spec.context);
            let mut cpu = Rings { k: vec![0.0; ring * d], v: vec![0.0; ring * d], pos: vec![INVALID_POS; ring] };
            let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
            let x = Tensor { buf: ctx.zeros("qkv", 3 * d).unwrap(), shape: vec![1, 3 * d] };
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_attention_kernel(kernel);
            let half = b.kv_half(&spec);
            let what = format!("{what}{}", if half { ", f16 rings" } else { "" });
            let rings = b.attention_state("attn", &spec).unwrap();
            let out = b.rope_attention_at("attn", &spec, &x, &frame, &rings).unwrap();
            let (plan, _, _) = b.finish();
            let mut worst = 0f64;
            for pos in 0..5 * ring / 2 {
                let mut qkv = rng.vec(3 * d);
                qkv[..d].iter_mut().for_each(|v| *v *= 6.0);
                ctx.queue.write_buffer(&x.buf, 0, bytemuck::cast_slice(&qkv));
                ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&FrameParams { pos: pos as u32, first: (pos == 0) as u32, ..Default::default() }));
                let mut enc = ctx.device.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    plan.record(&mut pass);
                }
                ctx.queue.submit([enc.finish()]);
                let want = oracle(&spec, &mut cpu, &qkv, pos, half);
                // later steps attend the older keys as the kernel rotated them (the rotation
                // is checked above): the rounding of RoPE at one position does not add up;
                // likewise the values as f16 rings rounded them
                let k = read_ring(&ctx, &rings[0], ring * d, half).await;
                cpu.k.copy_from_slice(&k);
                if half {
                    let v = read_ring(&ctx, &rings[1], ring * d, half).await;
                    cpu.v.copy_from_slice(&v);
                }
                let got = ctx.read_f32(&out.buf, d).await.unwrap();
                let e = rel_err(&got, &want);
                let tol = 2e-5 + 6e-8 * pos as f64 + if half { 2e-4 } else { 0.0 };
                assert!(e < tol, "{what}, pos {pos}: relative error {e:e}");
                worst = worst.max(e);
            }
            println!("{what}: worst relative error {worst:e} over {} steps", 5 * ring / 2);
        }
        ctx.take_error().unwrap();
    });
}

/// The depformer's attention taken into its `out_proj` (`PlanBuilder::attention_out_proj`,
/// `shaders/attention_out_proj.wgsl`: each group of heads attended and dotted with its
/// columns of the Q8_0 `out_proj` into a partial row behind the residual row), then the
/// layer's gated FFN reading those partial rows (`NormInput::RawPartials` into `linear_in`,
/// the `partials` of `q8_linear_from_gated` into the residual), against the oracle: the
/// attention above, `out_proj` and the FFN in f64 on the dequantized weights. At the
/// depformer's shape (2 heads a workgroup: 8 partial rows, the most the i8 kernel takes),
/// with RoPE past a wrapped ring, and at the test model's (4 heads of 32: every head in one
/// workgroup, 1 partial row; a window of 24: a head a workgroup, 4 partial rows). Also the
/// partial rows' sum against `out_proj` of the attention alone, and the rings as
/// `rope_attention_at` leaves them.
#[test]
fn attention_into_out_proj_then_the_ffn_match_the_oracle() {
    use inferencelayer::gpu::{NormInput, Q8Dot};
    use inferencelayer::weights::q8::Q8Tensor;
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0x0a77_0a0b);
        let small = TransformerSpec { dim: 128, heads: 4, context: 8, max_period: 10000.0, rope: false, kv_half: false };
        let cases: [(TransformerSpec, usize, usize, Option<usize>, usize); 6] = [
            (DEPFORMER, 4224, 0, None, 8),
            (DEPFORMER, 4224, 5, Some(3), 8),
            (TransformerSpec { rope: true, ..DEPFORMER }, 4224, 8 * 41 + 7, None, 8),
            (small, 512, 7, None, 1),
            (TransformerSpec { context: 24, rope: true, ..small }, 512, 30, Some(29), 4),
            (TransformerSpec { context: 24, rope: true, ..small }, 512, 0, None, 4),
        ];
        let dq = |q: &Q8Tensor| -> Vec<f64> { (0..q.blocks()).flat_map(|b| q.block(b).dequantize().map(|v| v as f64)).collect() };
        let matvec = |w: &[f64], n: usize, k: usize, x: &[f64]| -> Vec<f64> { (0..n).map(|i| w[i * k..(i + 1) * k].iter().zip(x).map(|(a, b)| a * b).sum()).collect() };
        for (spec, hidden, pos, stale, want_parts) in cases {
            let (d, ring) = (spec.dim, spec.context);
            let what = format!("dim {d}, {} heads, ring {ring}, rope {}, pos {pos}", spec.heads, spec.rope);
            let mut start = rings_at(&mut rng, &spec, if spec.rope { pos } else { ring.max(pos) }, None);
            if let Some(s) = stale {
                start.pos[s % ring] = INVALID_POS;
            }
            let mut qkv = rng.vec(3 * d);
            qkv[..d].iter_mut().for_each(|v| *v *= 6.0);
            let scaled = |rng: &mut Lcg, n: usize, s: f32| -> Vec<f32> { rng.vec(n).iter().map(|v| v * s).collect() };
            let wo = Q8Tensor::from_f32("out_proj", d, d, &scaled(&mut rng, d * d, 0.05)).unwrap();
            let w1 = Q8Tensor::from_f32("linear_in", 2 * hidden, d, &scaled(&mut rng, 2 * hidden * d, 0.05)).unwrap();
            let w2 = Q8Tensor::from_f32("linear_out", d, hidden, &scaled(&mut rng, d * hidden, 0.03)).unwrap();
            let x0 = rng.vec(d);
            let alpha: Vec<f32> = rng.vec(d).iter().map(|v| 1.0 + 0.5 * v).collect();
            let eps = 1e-8f32;

            let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams { pos: pos as u32, first: (pos == 0) as u32, ..Default::default() }));
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_q8_dot(Q8Dot::I8);
            let g = b.attention_out_proj_group(&spec).unwrap_or_else(|| panic!("{what}: attention_out_proj does not take it"));
            assert_eq!(spec.heads / g, want_parts, "{what}: partial rows");
            let rings = [
                ctx.storage_bytes("k_ring", &ring_bytes(&start.k, false)).unwrap(),
                ctx.storage_bytes("v_ring", &ring_bytes(&start.v, false)).unwrap(),
                ctx.storage_bytes("pos_ring", bytemuck::cast_slice(&start.pos)).unwrap(),
            ];
            let up = |q: &Q8Tensor| (ctx.storage_bytes("quants", q.quants_bytes()).unwrap(), ctx.storage_bytes("scales", q.scales_bytes()).unwrap());
            let ((qo, so), (q1, s1), (q2, s2)) = (up(&wo), up(&w1), up(&w2));
            // the residual row with room for the partial rows (stale values: each is
            // written whole)
            let mut xbuf = x0.clone();
            xbuf.extend(rng.vec(want_parts * d));
            let x = Tensor { buf: ctx.storage_f32("x", &xbuf).unwrap(), shape: vec![1, d] };
            let qkv_t = Tensor { buf: ctx.storage_f32("qkv", &qkv).unwrap(), shape: vec![1, 3 * d] };
            let ab = ctx.storage_f32("alpha", &alpha).unwrap();
            let hrow = b.gated_row("h", hidden).unwrap();
            let parts = b.attention_out_proj("attn", &spec, &qkv_t, &frame, &rings, (&qo, &so), &x).unwrap();
            assert_eq!(parts, want_parts, "{what}");
            // the partial rows before the FFN reads them
            let partials = ctx.zeros("partials copy", parts * d).unwrap();
            let (plan_a, _, _) = b.finish();
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_q8_dot(Q8Dot::I8);
            b.q8_linear_gate("linear_in", (&q1, &s1), (2 * hidden, d), NormInput::RawPartials(&x, &ab, eps, parts), &hrow).unwrap();
            b.q8_linear_from_gated("linear_out", (&q2, &s2), (d, hidden), &hrow, &x, parts, None).unwrap();
            let (plan_b, _, _) = b.finish();
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                plan_a.record(&mut pass);
            }
            enc.copy_buffer_to_buffer(&x.buf, (d * 4) as u64, &partials, 0, (parts * d * 4) as u64);
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                plan_b.record(&mut pass);
            }
            ctx.queue.submit([enc.finish()]);

            let mut cpu = start.clone();
            let attn = oracle(&spec, &mut cpu, &qkv, pos, false);
            let proj = matvec(&dq(&wo), d, d, &attn);
            let got_parts = ctx.read_f32(&partials, parts * d).await.unwrap();
            let sum: Vec<f32> = (0..d).map(|i| (0..parts).map(|j| got_parts[j * d + i]).sum()).collect();
            let tol = if spec.rope { 2e-5 + 6e-8 * pos as f64 } else { 1e-5 };
            let e = rel_err(&sum, &proj);
            assert!(e < tol, "{what}: out_proj of the attention (the partial rows' sum) relative error {e:e}");
            let h1: Vec<f64> = x0.iter().zip(&proj).map(|(a, p)| *a as f64 + p).collect();
            let inv = 1.0 / (eps as f64 + h1.iter().map(|v| v * v).sum::<f64>() / d as f64).sqrt();
            let normed: Vec<f64> = h1.iter().zip(&alpha).map(|(v, a)| v * *a as f64 * inv).collect();
            let gu = matvec(&dq(&w1), 2 * hidden, d, &normed);
            let silu = |v: f64| v / (1.0 + (-v).exp());
            let hid: Vec<f64> = (0..hidden).map(|j| silu(gu[j]) * gu[hidden + j]).collect();
            let want: Vec<f64> = matvec(&dq(&w2), d, hidden, &hid).iter().zip(&h1).map(|(f, h)| f + h).collect();
            let got = ctx.read_f32(&x.buf, d).await.unwrap();
            // the i8 kernel's inputs carry 1.5e-5 relative (tests/q8_linear.rs), twice over
            let e = rel_err(&got, &want);
            assert!(e < tol + 8e-5, "{what}: residual after the FFN relative error {e:e}");
            let slot = pos % ring;
            let k = read_ring(&ctx, &rings[0], ring * d, false).await;
            let v = read_ring(&ctx, &rings[1], ring * d, false).await;
            let p: Vec<u32> = ctx.read_f32(&rings[2], ring).await.unwrap().iter().map(|f| f.to_bits()).collect();
            let want_k: Vec<f64> = cpu.k[slot * d..(slot + 1) * d].iter().map(|v| *v as f64).collect();
            let ek = rel_err(&k[slot * d..(slot + 1) * d], &want_k);
            assert!(ek <= if spec.rope { 1e-6 + 3e-8 * pos as f64 } else { 0.0 }, "{what}: pushed key relative error {ek:e}");
            assert_eq!(&v[slot * d..(slot + 1) * d], &cpu.v[slot * d..(slot + 1) * d], "{what}: pushed value");
            assert_eq!(p, cpu.pos, "{what}: position ring");
            let others = |a: &[f32], b: &[f32]| a.iter().zip(b).enumerate().all(|(i, (x, y))| i / d == slot || x == y);
            assert!(others(&k, &start.k) && others(&v, &start.v), "{what}: a ring slot other than {slot} changed");
            println!("{what}: {parts} partial rows, residual relative error {e:e}");
        }
        ctx.take_error().unwrap();
    });
}
