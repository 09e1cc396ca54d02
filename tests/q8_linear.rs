//! The Q8_0 linear kernels (`shaders/q8_matvec.wgsl`, dot products in f32, and
//! `shaders/q8_matvec_dot4.wgsl`, on the input quantized to two 8-bit levels: `Q8Dot`)
//! against a CPU oracle in f64 on the dequantized weights, for plain, SiLU-gated and RMSNorm-fused inputs, with the norm
//! fused into the matrix-vector kernel (small matrices) and apart from it (from
//! `Q8_NORM_APART` weights on), on fresh random inputs, for every `Q8Kernel` lane choice:
//! both rules and fixed lane counts from 4 (a lane per row written) to 256 (lanes without
//! a unit), with a row tail (units not a multiple of twice the lanes); and the RMSNorm
//! prepared by a residual add (`q8_linear_residual`) and taken from there
//! (`q8_linear_prenormed`), with both rules. The f32 kernel stays within 1e-5 of the
//! oracle (relative L2 error); the i8 kernel within 4e-5 (each input carries an error of
//! at most 1 / 64516 of its unit's largest, about 1.5e-5 relative in the RMS for these
//! uniform inputs).
#![cfg(not(target_arch = "wasm32"))]

use inferencelayer::gpu::{FrameParams, GpuContext, NormInput, PlanBuilder, Q8Dispatch, Q8Dot, Q8Kernel, Tensor, Q8_NORM_APART};
use inferencelayer::moshi::transformer::RMS_EPS;
use inferencelayer::weights::q8::Q8Tensor;

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

fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den).sqrt()
}

fn dequant(q: &Q8Tensor) -> Vec<f64> {
    (0..q.blocks()).flat_map(|b| q.block(b).dequantize().map(|v| v as f64)).collect()
}

/// The relative error each kernel is held to.
fn tolerance(dot: Q8Dot) -> f64 {
    match dot {
        Q8Dot::F32 => 1e-5,
        Q8Dot::I8 => 4e-5,
    }
}

fn matvec(w: &[f64], n: usize, k: usize, x: &[f64]) -> Vec<f64> {
    (0..n).map(|i| w[i * k..(i + 1) * k].iter().zip(x).map(|(a, b)| a * b).sum()).collect()
}

#[test]
fn q8_linears_match_the_oracle_plain_gated_and_normed() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0x5_eed0_f0a8);
        let kernels = [
            Q8Kernel::Blocks,
            Q8Kernel::Auto,
            Q8Kernel::Fixed { lanes: 4 },
            Q8Kernel::Fixed { lanes: 8 },
            Q8Kernel::Fixed { lanes: 16 },
            Q8Kernel::Fixed { lanes: 256 },
        ];
        // [n, k] x kernel: below the apart threshold (20 units a row: a tail for 8 and 16
        // lanes, lanes without units at 256), n not a multiple of 8, at the threshold
        let mut cases: Vec<(usize, usize, Q8Kernel)> = kernels.iter().map(|&q| (96usize, 320usize, q)).collect();
        cases.push((100, 320, Q8Kernel::Fixed { lanes: 32 }));
        cases.extend([Q8Kernel::Blocks, Q8Kernel::Auto].map(|q| (Q8_NORM_APART / 2048, 2048, q)));
        // past one chunk of the i8 kernel's quantized input (256 units of 16): 276 units, a
        // second chunk of 20 (a tail for 16 lanes, lanes without a pair)
        cases.extend([Q8Kernel::Auto, Q8Kernel::Fixed { lanes: 16 }].map(|q| (12, 4416, q)));
        // The default: the lanes of `Blocks` at the temporal transformer's shapes, a lane per
        // unit at the depformer's
        assert_eq!(Q8Kernel::Auto.dispatch(22528, 4096, 1), Q8Kernel::Blocks.dispatch(22528, 4096, 1));
        assert_eq!(Q8Kernel::Auto.dispatch(12288, 4096, 1), Q8Kernel::Blocks.dispatch(12288, 4096, 1));
        assert_eq!((Q8Kernel::Blocks.dispatch(2048, 1024, 1).lanes, Q8Kernel::Auto.dispatch(2048, 1024, 1).lanes), (32, 64));
        // The i8 kernel's rule at Moshi 7B's shapes: more rows per workgroup at the temporal
        // transformer's (in_proj, linear_in, out_proj, linear_out, text_linear), the f32
        // rule's lanes at the depformer's (out_proj, linear_in, linear_out, depformer_in)
        for ((n, k), lanes) in [((12288, 4096), 32), ((22528, 4096), 16), ((4096, 4096), 64), ((4096, 11264), 64), ((32000, 4096), 8), ((1024, 1024), 64), ((5632, 1024), 64), ((1024, 2816), 128), ((1024, 4096), 256)] {
            let d = Q8Kernel::Auto.dispatch_for(Q8Dot::I8, n, k, 1);
            assert_eq!(d.lanes, lanes, "i8 [{n}, {k}]");
            if n < 4096 {
                assert_eq!(d, Q8Kernel::Auto.dispatch(n, k, 1), "i8 [{n}, {k}]");
            }
        }
        // `groups:N` is the default's rule with N in place of its 240 workgroups: the same
        // lanes at 240, more at out_proj's shape with more
        for (n, k) in [(12288, 4096), (22528, 4096), (4096, 4096), (1024, 2816)] {
            assert_eq!(Q8Kernel::Groups { groups: 240 }.dispatch_for(Q8Dot::I8, n, k, 1), Q8Kernel::Auto.dispatch_for(Q8Dot::I8, n, k, 1), "[{n}, {k}]");
        }
        assert_eq!(Q8Kernel::Groups { groups: 960 }.dispatch_for(Q8Dot::I8, 4096, 4096, 1), Q8Dispatch { lanes: 256, groups: 1024 });
        assert_eq!(Q8Kernel::Groups { groups: 480 }.dispatch_for(Q8Dot::I8, 4096, 4096, 1), Q8Dispatch { lanes: 128, groups: 512 });
        // A fixed lane count the kernel cannot take falls back to the default.
        assert_eq!(Q8Kernel::Fixed { lanes: 48 }.dispatch(2048, 1024, 1), Q8Kernel::Auto.dispatch(2048, 1024, 1));
        let cases: Vec<(usize, usize, Q8Kernel, Q8Dot)> = [Q8Dot::F32, Q8Dot::I8].into_iter().flat_map(|dot| cases.iter().map(move |&(n, k, q)| (n, k, q, dot))).collect();
        for (n, k, kernel, dot) in cases {
            assert!((n * k >= Q8_NORM_APART) == (k == 2048));
            let d = kernel.dispatch_for(dot, n, k, 1);
            if let Q8Kernel::Fixed { lanes } = kernel {
                assert_eq!(d.lanes, lanes, "{kernel:?} at [{n}, {k}]");
            }
            let wq = Q8Tensor::from_f32("w", n, k, &rng.vec(n * k)).unwrap();
            let wd = dequant(&wq);
            let quants = ctx.storage_bytes("quants", wq.quants_bytes()).unwrap();
            let scales = ctx.storage_bytes("scales", wq.scales_bytes()).unwrap();
            let x = rng.vec(2 * k);
            let alpha = rng.vec(k);
            let eps = 1e-8f32;
            let xb = ctx.storage_f32("x", &x).unwrap();
            let ab = ctx.storage_f32("alpha", &alpha).unwrap();
            let ys: Vec<wgpu::Buffer> = (0..3).map(|_| ctx.storage_f32("y", &vec![f32::NAN; n]).unwrap()).collect();
            let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_q8_kernel(kernel);
            b.set_q8_dot(dot);
            b.q8_linear("plain", (&quants, &scales), (n, k), 1, (&xb, 0), (&ys[0], 0, n), false).unwrap();
            b.q8_linear_gated("gated", (&quants, &scales), (n, k), 1, (&xb, 0), (&ys[1], 0, n), false).unwrap();
            let xt = Tensor { buf: ctx.storage_f32("x row", &x[..k]).unwrap(), shape: vec![1, k] };
            b.q8_linear_normed("normed", (&quants, &scales), (n, k), (&xt, &ab, eps), (&ys[2], 0, n), false).unwrap();
            let (plan, _, _) = b.finish();
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                plan.record(&mut pass);
            }
            ctx.queue.submit([enc.finish()]);
            let xd: Vec<f64> = x.iter().map(|v| *v as f64).collect();
            let silu = |v: f64| v / (1.0 + (-v).exp());
            let gated: Vec<f64> = (0..k).map(|j| silu(xd[j]) * xd[k + j]).collect();
            let ms: f64 = xd[..k].iter().map(|v| v * v).sum::<f64>() / k as f64;
            let inv = 1.0 / (eps as f64 + ms).sqrt();
            let normed: Vec<f64> = (0..k).map(|j| xd[j] * alpha[j] as f64 * inv).collect();
            for (i, (name, input)) in [("plain", &xd[..k]), ("gated", &gated[..]), ("normed", &normed[..])].into_iter().enumerate() {
                let got = ctx.read_f32(&ys[i], n).await.unwrap();
                assert!(got.iter().all(|v| v.is_finite()), "{name} [{n}, {k}] {d:?} {dot:?}: an output was not written");
                let e = rel_err(&got, &matvec(&wd, n, k, input));
                assert!(e < tolerance(dot), "{name} [{n}, {k}] {d:?} {dot:?}: relative error {e:e}");
            }
        }
    });
}

/// A residual add `y += W1 in` (plain and SiLU-gated `in`) that prepares the next RMSNorm,
/// then a linear `W2` of that norm: the residual, the prepared row (`y * alpha`), the sum of
/// its partial squares and the normed linear's output against the f64 oracle, at a width
/// whose row groups span several workgroups.
#[test]
fn residual_adds_prepare_the_next_rmsnorm() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0x0_a0d0_f0a8);
        let (m, k1, n) = (1024usize, 352usize, 96usize);
        let cases = [(Q8Kernel::Blocks, false), (Q8Kernel::Blocks, true), (Q8Kernel::Auto, false), (Q8Kernel::Auto, true)];
        for (kernel, gated, dot) in [Q8Dot::F32, Q8Dot::I8].into_iter().flat_map(|dot| cases.map(|(k, g)| (k, g, dot))) {
            let tol = tolerance(dot);
            let w1 = Q8Tensor::from_f32("w1", m, k1, &rng.vec(m * k1)).unwrap();
            let w2 = Q8Tensor::from_f32("w2", n, m, &rng.vec(n * m)).unwrap();
            let (w1d, w2d) = (dequant(&w1), dequant(&w2));
            let up = |q: &Q8Tensor| (ctx.storage_bytes("quants", q.quants_bytes()).unwrap(), ctx.storage_bytes("scales", q.scales_bytes()).unwrap());
            let ((q1, s1), (q2, s2)) = (up(&w1), up(&w2));
            let x = rng.vec(2 * k1);
            let y0: Vec<f32> = rng.vec(m).iter().map(|v| 4.0 * v).collect();
            let alpha = rng.vec(m);
            let xb = ctx.storage_f32("x", &x).unwrap();
            let ab = ctx.storage_f32("alpha", &alpha).unwrap();
            let y = Tensor { buf: ctx.storage_f32("y", &y0).unwrap(), shape: vec![1, m] };
            let out = ctx.storage_f32("out", &vec![f32::NAN; n]).unwrap();
            let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_q8_kernel(kernel);
            b.set_q8_dot(dot);
            let row = b.normed_row("row", m).unwrap();
            b.q8_linear_residual("residual", (&q1, &s1), (m, k1), gated, &xb, &y, (&ab, &row)).unwrap();
            b.q8_linear_prenormed("prenormed", (&q2, &s2), (n, m), (&row, RMS_EPS), (&out, 0, n), false).unwrap();
            let (plan, _, _) = b.finish();
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                plan.record(&mut pass);
            }
            ctx.queue.submit([enc.finish()]);
            let xd: Vec<f64> = x.iter().map(|v| *v as f64).collect();
            let silu = |v: f64| v / (1.0 + (-v).exp());
            let input: Vec<f64> = if gated { (0..k1).map(|j| silu(xd[j]) * xd[k1 + j]).collect() } else { xd[..k1].to_vec() };
            let yn: Vec<f64> = matvec(&w1d, m, k1, &input).iter().zip(&y0).map(|(v, y)| v + *y as f64).collect();
            let got_y = ctx.read_f32(&y.buf, m).await.unwrap();
            let e = rel_err(&got_y, &yn);
            assert!(e < tol, "{kernel:?} {dot:?}, gated {gated}: residual relative error {e:e}");
            let got_row = ctx.read_f32(&row.buf, m + m / 4).await.unwrap();
            let scaled: Vec<f64> = yn.iter().zip(&alpha).map(|(v, a)| v * *a as f64).collect();
            let e = rel_err(&got_row[..m], &scaled);
            assert!(e < tol, "{kernel:?} {dot:?}, gated {gated}: prepared row relative error {e:e}");
            let ss: f64 = yn.iter().map(|v| v * v).sum();
            let got_ss: f64 = got_row[m..].iter().map(|v| *v as f64).sum();
            assert!(((got_ss - ss) / ss).abs() < tol, "{kernel:?} {dot:?}, gated {gated}: sum of squares {got_ss} against {ss}");
            let inv = 1.0 / (RMS_EPS as f64 + ss / m as f64).sqrt();
            let normed: Vec<f64> = scaled.iter().map(|v| v * inv).collect();
            let got = ctx.read_f32(&out, n).await.unwrap();
            let e = rel_err(&got, &matvec(&w2d, n, m, &normed));
            assert!(e < tol, "{kernel:?} {dot:?}, gated {gated}: normed linear relative error {e:e}");
        }
    });
}


/// The hidden row of a packed gated row (`GatedRow` with the i8 kernel: per unit of 16 the
/// levels hi, lo as i8 and a scale), as values: s (hi + lo / 254).
fn unpack_gated(words: &[u32], dim: usize) -> Vec<f64> {
    let nu = dim / 16;
    (0..dim)
        .map(|j| {
            let (u, c) = (j / 16, j % 16);
            let byte = |w: u32| ((w >> (8 * (c % 4))) & 0xff) as u8 as i8 as f64;
            let hi = byte(words[8 * u + c / 4]);
            let lo = byte(words[8 * u + 4 + c / 4]);
            f32::from_bits(words[8 * nu + u]) as f64 * (hi + lo / 254.0)
        })
        .collect()
}

/// A SiLU-gated FFN as the plans run it: `linear_in` `[2 h, k]` of an RMSNorm with the
/// gate as its epilogue into a `GatedRow` (`q8_linear_gate`: each row group two gate rows
/// and the two up rows beside them; with the i8 kernel each workgroup quantizing its
/// hidden values, at most 32 lanes), then `linear_out` `[n, h]` from that row into the
/// residual (`q8_linear_from_gated`). The norm raw (fused, and for the f32 kernel apart
/// from `Q8_NORM_APART` weights on) and prepared by a residual add; `linear_out` plain and
/// preparing the next norm. Against the f64 oracle: the hidden row (the i8 kernel's packed
/// levels decoded), the residual, the next norm's row and sum of squares. Shapes: hidden
/// rows in several workgroups with a last one half full (h = 96 with the lanes of 32: 16
/// values a workgroup; with 8 lanes 64), fixed lanes past the gate's cap of 32 (64, 256),
/// and 2 h k at `Q8_NORM_APART`.
#[test]
fn gated_ffn_rows_match_the_oracle() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0x9_a7e0_f0a8);
        let kernels = [Q8Kernel::Auto, Q8Kernel::Blocks, Q8Kernel::Fixed { lanes: 8 }, Q8Kernel::Fixed { lanes: 64 }, Q8Kernel::Fixed { lanes: 256 }];
        let mut cases: Vec<(usize, usize, usize, Q8Kernel, bool)> = Vec::new();
        for q in kernels {
            cases.push((96, 320, 64, q, false));
            cases.push((352, 512, 128, q, true));
        }
        cases.push((Q8_NORM_APART / 4096 / 2, 4096, 64, Q8Kernel::Auto, false));
        for dot in [Q8Dot::F32, Q8Dot::I8] {
            for &(h, k, n, kernel, prepared) in &cases {
                let tol = 2.0 * tolerance(dot);
                let w1 = Q8Tensor::from_f32("w1", 2 * h, k, &rng.vec(2 * h * k)).unwrap();
                let w2 = Q8Tensor::from_f32("w2", n, h, &rng.vec(n * h)).unwrap();
                let (w1d, w2d) = (dequant(&w1), dequant(&w2));
                let up = |q: &Q8Tensor| (ctx.storage_bytes("quants", q.quants_bytes()).unwrap(), ctx.storage_bytes("scales", q.scales_bytes()).unwrap());
                let ((q1, s1), (q2, s2)) = (up(&w1), up(&w2));
                let x: Vec<f32> = rng.vec(k).iter().map(|v| 3.0 * v).collect();
                let alpha = rng.vec(k);
                let alpha2 = rng.vec(n);
                let y0 = rng.vec(n);
                let eps = 1e-6f32;
                let xt = Tensor { buf: ctx.storage_f32("x", &x).unwrap(), shape: vec![1, k] };
                // the prepared row a residual add would leave: x * alpha, then the sums of
                // squares of each group of 4
                let mut prep: Vec<f32> = x.iter().zip(&alpha).map(|(a, b)| a * b).collect();
                prep.extend(x.chunks(4).map(|c| c.iter().map(|v| v * v).sum::<f32>()));
                let ab = ctx.storage_f32("alpha", &alpha).unwrap();
                let ab2 = ctx.storage_f32("alpha2", &alpha2).unwrap();
                let y = Tensor { buf: ctx.storage_f32("y", &y0).unwrap(), shape: vec![1, n] };
                let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                b.set_q8_kernel(kernel);
                b.set_q8_dot(dot);
                let hrow = b.gated_row("h", h).unwrap();
                let row = b.normed_row("row", k).unwrap();
                ctx.queue.write_buffer(&row.buf, 0, bytemuck::cast_slice(&prep));
                let next = b.normed_row("next", n).unwrap();
                let norm = if prepared { NormInput::Prepared(&row, eps) } else { NormInput::Raw(&xt, &ab, eps) };
                b.q8_linear_gate("linear_in", (&q1, &s1), (2 * h, k), norm, &hrow).unwrap();
                b.q8_linear_from_gated("linear_out", (&q2, &s2), (n, h), &hrow, &y, 0, prepared.then_some((&ab2, &next))).unwrap();
                let (plan, _, _) = b.finish();
                let mut enc = ctx.device.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    plan.record(&mut pass);
                }
                ctx.queue.submit([enc.finish()]);
                let what = format!("{dot:?} {kernel:?} h {h} k {k}, prepared {prepared}");
                let xd: Vec<f64> = x.iter().map(|v| *v as f64).collect();
                let ms: f64 = xd.iter().map(|v| v * v).sum::<f64>() / k as f64;
                let inv = 1.0 / (eps as f64 + ms).sqrt();
                let normed: Vec<f64> = (0..k).map(|j| xd[j] * alpha[j] as f64 * inv).collect();
                let g = matvec(&w1d, 2 * h, k, &normed);
                let silu = |v: f64| v / (1.0 + (-v).exp());
                let hidden: Vec<f64> = (0..h).map(|j| silu(g[j]) * g[h + j]).collect();
                let got_h: Vec<f32> = if dot == Q8Dot::I8 {
                    let words: Vec<u32> = ctx.read_f32(&hrow.buf, 9 * h / 16).await.unwrap().iter().map(|v| v.to_bits()).collect();
                    unpack_gated(&words, h).iter().map(|v| *v as f32).collect()
                } else {
                    ctx.read_f32(&hrow.buf, h).await.unwrap()
                };
                let e = rel_err(&got_h, &hidden);
                assert!(e < tol, "{what}: hidden row relative error {e:e}");
                let yn: Vec<f64> = matvec(&w2d, n, h, &hidden).iter().zip(&y0).map(|(v, y)| v + *y as f64).collect();
                let got_y = ctx.read_f32(&y.buf, n).await.unwrap();
                let e = rel_err(&got_y, &yn);
                assert!(e < tol, "{what}: residual relative error {e:e}");
                if prepared {
                    let got = ctx.read_f32(&next.buf, n + n / 4).await.unwrap();
                    let scaled: Vec<f64> = yn.iter().zip(&alpha2).map(|(v, a)| v * *a as f64).collect();
                    let e = rel_err(&got[..n], &scaled);
                    assert!(e < tol, "{what}: next norm's row relative error {e:e}");
                    let ss: f64 = yn.iter().map(|v| v * v).sum();
                    let got_ss: f64 = got[n..].iter().map(|v| *v as f64).sum();
                    assert!(((got_ss - ss) / ss).abs() < tol, "{what}: sum of squares {got_ss} against {ss}");
                }
            }
        }
    });
}

/// Weights prefetched into the L2 beside the dispatch before their linear
/// (`PlanBuilder::prefetch`, `prefetch.wgsl`; on GPU adapters the plans' default up to
/// `PREFETCH_MAX`, off on CPU adapters, so here forced on): a chain of linears, each
/// reading the last one's output, gives the same bits with and without, and the prefetch
/// kernel reads buffers whose lengths are not a multiple of its loads a thread.
#[test]
fn prefetched_weights_change_no_output() {
    pollster::block_on(async {
        let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
        let mut rng = Lcg(0x0f_e7c4);
        let shapes = [(96usize, 64usize), (160, 96), (64, 160)];
        let ws: Vec<(wgpu::Buffer, wgpu::Buffer)> = shapes
            .iter()
            .map(|&(n, k)| {
                let q = Q8Tensor::from_f32("w", n, k, &rng.vec(n * k)).unwrap();
                (ctx.storage_bytes("quants", q.quants_bytes()).unwrap(), ctx.storage_bytes("scales", q.scales_bytes()).unwrap())
            })
            .collect();
        let x = ctx.storage_f32("x", &rng.vec(64)).unwrap();
        let mut outs = Vec::new();
        for prefetch in [0, u64::MAX] {
            let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_prefetch(prefetch);
            let ys: Vec<wgpu::Buffer> = shapes.iter().map(|&(n, _)| ctx.storage_f32("y", &vec![f32::NAN; n]).unwrap()).collect();
            for (i, (&(n, k), w)) in shapes.iter().zip(&ws).enumerate() {
                let input = if i == 0 { &x } else { &ys[i - 1] };
                b.q8_linear(&format!("l{i}"), (&w.0, &w.1), (n, k), 1, (input, 0), (&ys[i], 0, n), false).unwrap();
            }
            let (plan, _, _) = b.finish();
            assert_eq!(plan.dispatches(), if prefetch == 0 { 3 } else { 6 }, "one prefetch a linear");
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                plan.record(&mut pass);
            }
            ctx.queue.submit([enc.finish()]);
            let got = ctx.read_f32(&ys[2], 64).await.unwrap();
            assert!(got.iter().all(|v| v.is_finite()));
            outs.push(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
        assert_eq!(outs[0], outs[1], "prefetching changed the chain's output");
    });
}
