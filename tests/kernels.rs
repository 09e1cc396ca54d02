//! Every kernel in `shaders/` parses and validates with naga (the native WGSL front end;
//! the browser tests cover Tint), and its `@group(0)` bindings are exactly the kernel
//! table's, in order and access mode.
#![cfg(not(target_arch = "wasm32"))]

use inferencelayer::gpu::{Binding, Kernel, KERNELS};
use naga::{AddressSpace, StorageAccess};

/// A kernel's source as naga parses it; a parse error panics with naga's report.
fn parse(k: &Kernel) -> naga::Module {
    naga::front::wgsl::parse_str(k.source).unwrap_or_else(|e| panic!("{}: {}", k.name, e.emit_to_string(k.source)))
}

#[test]
fn every_kernel_validates_and_matches_its_binding_table() {
    for k in KERNELS {
        let module = parse(k);
        // pack2x16float / unpack2x16float (rope_attention_split's f16 rings): core WGSL in
        // browsers, and in wgpu's Vulkan and Metal backends
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {e:?}", k.name));
        assert!(
            module.entry_points.iter().any(|e| e.name == "main" && e.stage == naga::ShaderStage::Compute),
            "{}: no compute entry point `main`",
            k.name
        );
        let mut found: Vec<(u32, Binding)> = module
            .global_variables
            .iter()
            .filter_map(|(_, g)| {
                let rb = g.binding.as_ref()?;
                assert_eq!(rb.group, 0, "{}: binding outside group 0", k.name);
                let b = match g.space {
                    AddressSpace::Uniform => Binding::Uniform,
                    AddressSpace::Storage { access } if access.contains(StorageAccess::STORE) => Binding::ReadWrite,
                    AddressSpace::Storage { .. } => Binding::Read,
                    other => panic!("{}: unexpected address space {other:?}", k.name),
                };
                Some((rb.binding, b))
            })
            .collect();
        found.sort_by_key(|(i, _)| *i);
        let indices: Vec<u32> = found.iter().map(|(i, _)| *i).collect();
        let want: Vec<u32> = (0..k.bindings.len() as u32).collect();
        assert_eq!(indices, want, "{}: bindings are not 0..{}", k.name, k.bindings.len());
        let kinds: Vec<Binding> = found.into_iter().map(|(_, b)| b).collect();
        assert_eq!(kinds, k.bindings, "{}: binding kinds differ from the kernel table", k.name);
    }
}

/// Every kernel that reads the per-frame uniform takes its `Frame` struct from
/// `shaders/frame.wgsl`, the first part of its source, and that struct is `FrameParams`
/// field for field, so the one uniform buffer a plan writes each frame means the same to all
/// of them.
#[test]
fn every_kernel_with_a_frame_uniform_takes_frame_wgsl_first() {
    use inferencelayer::gpu::FrameParams;
    let prelude = include_str!("../shaders/frame.wgsl");
    let mut stateful = 0;
    for k in KERNELS {
        let module = parse(k);
        let Some((_, ty)) = module.types.iter().find(|(_, t)| t.name.as_deref() == Some("Frame")) else {
            assert!(!k.source.contains("var<uniform> frame"), "{}: binds a frame uniform without the Frame struct", k.name);
            continue;
        };
        stateful += 1;
        assert!(k.source.starts_with(prelude), "{}: its Frame struct is not frame.wgsl's", k.name);
        let naga::TypeInner::Struct { members, span } = &ty.inner else { panic!("{}: Frame is {:?}", k.name, ty.inner) };
        assert_eq!(*span as usize, std::mem::size_of::<FrameParams>(), "{}: Frame is not FrameParams's size", k.name);
        let fields: Vec<(&str, u32)> = members.iter().map(|m| (m.name.as_deref().unwrap_or(""), m.offset)).collect();
        assert_eq!(fields, [("pos", 0), ("first", 4), ("index", 8), ("_pad", 12)], "{}: Frame's fields are not FrameParams's", k.name);
    }
    assert!(stateful >= 10, "only {stateful} kernels read the frame uniform");
}

mod oracles {
    //! Fused kernel modes against CPU oracles: the streaming convs with their staging and
    //! carry inside the conv dispatch (both conv kernels at Mimi's shapes, ELU on load, time-major input,
    //! replicate padding, a prefix longer than the frame, no prefix), the transposed conv
    //! with its overlap tail, over several frames; the LayerNorm-fused linear; rope, KV push
    //! and attention of several steps in one dispatch, across ring wraps.
    use inferencelayer::gpu::{ConvKernel, Elu, FrameParams, GpuContext, LinearOut, Plan, PlanBuilder, Tensor, TransformerSpec};
    use inferencelayer::mimi::conv::{elu1, Conv1d, ConvTr1d};

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

    fn rel_err(got: &[f32], want: &[f32]) -> f64 {
        assert_eq!(got.len(), want.len());
        let num: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - *w as f64).powi(2)).sum();
        let den: f64 = want.iter().map(|w| (*w as f64).powi(2)).sum();
        (num / den).sqrt()
    }

    fn replay(ctx: &GpuContext, plan: &Plan) {
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            plan.record(&mut pass);
        }
        ctx.queue.submit([enc.finish()]);
    }

    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        (0..cols * rows).map(|i| x[(i % rows) * cols + i / rows]).collect()
    }

    /// (in_c, out_c, k, stride, dilation, groups, t, elu, time_major (in, out), replicate,
    /// residual)
    type ConvCase = (usize, usize, usize, usize, usize, usize, usize, bool, (bool, bool), bool, bool);

    /// Each case on each conv kernel (by shape, tiled, a workgroup per output, lanes per
    /// output), four frames of two streams against the CPU oracle; every other case with an
    /// ELU on its outputs as they are stored (`Elu::output`, after the residual).
    #[test]
    fn streaming_convs_stage_and_carry_inside_the_conv_dispatch() {
        pollster::block_on(async {
            let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
            let mut rng = Lcg(0xc0_4f_1d);
            let cases: [ConvCase; 23] = [
                // dilated, ELU on load, a residual
                (8, 6, 3, 1, 2, 1, 40, true, (false, false), false, true),
                // strided, replicate padding, time-major input
                (64, 16, 4, 2, 1, 1, 2, true, (true, false), true, false),
                // the prefix (6) longer than the frame (2)
                (32, 8, 7, 1, 1, 1, 2, false, (true, false), false, false),
                (3, 4, 7, 1, 1, 1, 2, true, (false, false), false, false),
                // no prefix (1x1), ELU on load
                (16, 8, 1, 1, 1, 1, 10, true, (false, false), false, true),
                // SEANet's downsampling shape: kernel twice the stride, prefix = stride
                (16, 32, 8, 4, 1, 1, 16, true, (false, false), false, false),
                // time-major output (the encoder's last conv), with a residual
                (64, 8, 3, 1, 1, 1, 2, true, (false, true), false, true),
                (4, 8, 3, 1, 1, 1, 12, true, (false, true), false, true),
                // Mimi's first conv and first residual block at their shapes (64 x 1920)
                (1, 64, 7, 1, 1, 1, 1920, false, (false, false), false, false),
                (64, 32, 3, 1, 1, 1, 1920, true, (false, false), false, false),
                (32, 64, 1, 1, 1, 1, 1920, true, (false, false), false, true),
                // Mimi's downsampling strides (4, 5, 8 with k = 2 * stride), channels and
                // columns not a multiple of the 16 x 16 tile, several chunks of input
                // channels, replicate padding, time-major in and out
                (20, 40, 8, 4, 1, 1, 200, true, (false, false), true, false),
                (24, 36, 10, 5, 1, 1, 160, true, (true, false), true, false),
                (12, 20, 16, 8, 1, 1, 64, true, (false, true), true, false),
                // a k3 residual block (dim -> dim / 2 -> dim) off the tile's multiples
                (70, 35, 3, 1, 1, 1, 100, true, (false, false), false, false),
                (35, 70, 1, 1, 1, 1, 100, true, (false, false), false, true),
                // groups (4 groups of 8 -> 12: a tile within one group), dilated
                (32, 48, 3, 1, 3, 4, 40, true, (false, false), false, true),
                // reductions past conv1d_reduce's four-pair loads (300 = 256 + a tail of 44;
                // 1600 = 6 x 256 + 64) and conv1d_lanes's lanes per output
                // (conv_reduce_lanes): few outputs get 256 (300 terms: a tail only; 1600:
                // 6 x 256 + 64; 8192: 4 rounds of 8 x 256; 2048: one round), 1920 outputs of
                // 896 terms 64 (a round of 512 and a tail), 4095 of 300 terms 16 (two rounds
                // of 128 and a tail of 44; a last workgroup of 15 outputs for 16)
                (100, 4, 3, 1, 1, 1, 2, true, (false, false), false, false),
                (200, 6, 8, 4, 1, 1, 8, true, (false, false), true, true),
                (512, 3, 16, 8, 1, 1, 16, true, (true, false), true, false),
                (256, 3, 8, 4, 1, 1, 8, true, (false, true), false, true),
                (128, 1, 7, 1, 1, 1, 1920, true, (false, false), false, false),
                (100, 65, 3, 1, 1, 1, 63, true, (true, false), false, true),
            ];
            for (i, &(in_c, out_c, k, stride, dilation, groups, t, elu, (time_major, time_major_out), replicate, residual)) in cases.iter().enumerate() {
                let conv = Conv1d {
                    name: format!("conv{i}"),
                    w: rng.vec(out_c * (in_c / groups) * k),
                    b: Some(rng.vec(out_c)),
                    in_c,
                    out_c,
                    k,
                    stride,
                    dilation,
                    groups,
                    replicate,
                };
                let t_out = t / stride;
                for kernel in [ConvKernel::Auto, ConvKernel::Tiled, ConvKernel::Reduce, ConvKernel::Lanes] {
                    let x = Tensor { buf: ctx.zeros("x", in_c * t).unwrap(), shape: if time_major { vec![t, in_c] } else { vec![in_c, t] } };
                    let res = Tensor { buf: ctx.zeros("res", out_c * t_out).unwrap(), shape: if time_major_out { vec![t_out, out_c] } else { vec![out_c, t_out] } };
                    let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                    let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                    b.set_conv_kernel(kernel);
                    let y = conv.plan(&mut b, &x, time_major, time_major_out, Elu { input: elu, output: i % 2 == 1 }, residual.then_some(&res)).unwrap();
                    let (plan, state, _) = b.finish();
                    assert_eq!(plan.dispatches(), 1, "case {i}, {kernel:?}: one dispatch per conv");
                    for stream in 0..2 {
                        let mut st = conv.state();
                        for f in 0..4u32 {
                            let xs = rng.vec(in_c * t);
                            let rs = rng.vec(out_c * t_out);
                            let up = if time_major { transpose(&xs, in_c, t) } else { xs.clone() };
                            ctx.queue.write_buffer(&x.buf, 0, bytemuck::cast_slice(&up));
                            let rs_up = if time_major_out { transpose(&rs, out_c, t_out) } else { rs.clone() };
                            ctx.queue.write_buffer(&res.buf, 0, bytemuck::cast_slice(&rs_up));
                            let fp = FrameParams { pos: f, first: (f == 0) as u32, index: f, _pad: 0 };
                            ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&fp));
                            replay(&ctx, &plan);
                            let mut want = conv.step(&mut st, &xs, elu);
                            if residual {
                                want.iter_mut().zip(&rs).for_each(|(w, r)| *w += r);
                            }
                            if i % 2 == 1 {
                                want.iter_mut().for_each(|w| *w = elu1(*w));
                            }
                            let mut got = ctx.read_f32(&y.buf, out_c * t_out).await.unwrap();
                            if time_major_out {
                                got = transpose(&got, t_out, out_c);
                            }
                            let e = rel_err(&got, &want);
                            assert!(e < 1e-5, "case {i}, {kernel:?}, stream {stream}, frame {f}: relative error {e:e}");
                        }
                        state.reset(&ctx);
                    }
                }
            }
            // a kernel of 160 taps passes the tiled kernel's weights in workgroup memory: an
            // error when asked for, the reduction kernel by shape
            let conv = Conv1d { name: "long".into(), w: rng.vec(2 * 160), b: None, in_c: 1, out_c: 2, k: 160, stride: 1, dilation: 1, groups: 1, replicate: false };
            let x = Tensor { buf: ctx.zeros("x", 8).unwrap(), shape: vec![1, 8] };
            let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
            let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
            b.set_conv_kernel(ConvKernel::Tiled);
            assert!(conv.plan(&mut b, &x, false, false, Elu::NONE, None).is_err(), "160 taps on the tiled kernel");
            b.set_conv_kernel(ConvKernel::Auto);
            conv.plan(&mut b, &x, false, false, Elu::NONE, None).expect("160 taps by shape");
        });
    }

    #[test]
    fn streaming_transposed_convs_carry_their_tail_inside_the_dispatch() {
        pollster::block_on(async {
            let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
            let mut rng = Lcg(0x7c_0a_9e);
            // (in_c, out_c, k, stride, groups, t_in, elu, bias, time_major_out): SEANet's
            // upsampling, Mimi's channel-wise upsample (time-major out, for the transformer);
            // kernels of twice the stride run as a conv into phases, on each conv kernel (by
            // shape: a deep, short layer on the one of a workgroup per output, the others
            // tiled), other kernels on the transposed-conv kernel; Mimi's last upsampling
            // (128 -> 64, stride 4, 480 columns), its channel-wise upsample (512 groups); every
            // other case with an ELU on its outputs as they are stored (`Elu::output`)
            let cases = [
                (8usize, 6usize, 4usize, 2usize, 1usize, 3usize, true, true, false),
                (4, 4, 4, 2, 4, 2, false, false, true),
                (5, 3, 10, 5, 1, 40, true, true, false),
                (96, 10, 16, 8, 1, 2, true, true, false),
                (200, 4, 8, 4, 1, 2, true, true, false),
                (24, 12, 8, 4, 1, 30, true, false, true),
                (6, 4, 5, 2, 1, 7, true, true, false),
                (6, 4, 7, 3, 2, 5, false, true, true),
                (128, 64, 8, 4, 1, 480, true, true, false),
                (20, 9, 10, 5, 1, 24, true, true, true),
                (512, 512, 4, 2, 512, 1, false, false, true),
            ];
            for (i, &(in_c, out_c, k, stride, groups, t_in, elu, bias, time_major_out)) in cases.iter().enumerate() {
                let convtr = ConvTr1d {
                    name: format!("convtr{i}"),
                    w: rng.vec(in_c * (out_c / groups) * k),
                    b: bias.then(|| rng.vec(out_c)),
                    in_c,
                    out_c,
                    k,
                    stride,
                    groups,
                };
                let ts = t_in * stride;
                for kernel in [ConvKernel::Auto, ConvKernel::Tiled, ConvKernel::Reduce, ConvKernel::Lanes] {
                    let x = Tensor { buf: ctx.zeros("x", in_c * t_in).unwrap(), shape: vec![in_c, t_in] };
                    let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                    let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                    b.set_conv_kernel(kernel);
                    let y = convtr.plan(&mut b, &x, Elu { input: elu, output: i % 2 == 1 }, time_major_out).unwrap();
                    let (plan, _, _) = b.finish();
                    assert_eq!(plan.dispatches(), 1, "case {i}, {kernel:?}: one dispatch per transposed conv");
                    let mut st = convtr.state();
                    for f in 0..4u32 {
                        let xs = rng.vec(in_c * t_in);
                        ctx.queue.write_buffer(&x.buf, 0, bytemuck::cast_slice(&xs));
                        let fp = FrameParams { pos: f, first: (f == 0) as u32, index: f, _pad: 0 };
                        ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&fp));
                        replay(&ctx, &plan);
                        let mut want = convtr.step(&mut st, &xs, elu);
                        if i % 2 == 1 {
                            want.iter_mut().for_each(|w| *w = elu1(*w));
                        }
                        let mut got = ctx.read_f32(&y.buf, out_c * ts).await.unwrap();
                        if time_major_out {
                            got = transpose(&got, ts, out_c);
                        }
                        let e = rel_err(&got, &want);
                        assert!(e < 1e-5, "case {i}, {kernel:?}, frame {f}: relative error {e:e}");
                    }
                }
            }
        });
    }

    /// `linear_layer_norm` gives bit for bit a `layer_norm` dispatch then a `linear` (the
    /// fused kernel sums in the LayerNorm kernel's order), and both the f64 oracle, at a
    /// width below one LayerNorm workgroup (96), one of two passes (512) and a tail (600),
    /// on 2, 3 and 5 time rows (two groups of 4), with 64, 128 and 256 lanes an output
    /// (`PlanBuilder::set_matvec_lanes`), and rows whose mean (100) is far from zero beside
    /// their spread (the one tree of sums keeps their variance); a width or input offset off
    /// a multiple of 4 is refused, and so is a lane count the kernel does not take.
    #[test]
    fn layer_norm_fused_linear_equals_the_two_dispatches() {
        pollster::block_on(async {
            let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
            let mut rng = Lcg(0x1a_4e_0f);
            let (n, eps) = (41usize, 1e-5f32);
            // (time rows, width): more than one group of 4 rows
            for (lanes, (t, k)) in [64usize, 128, 256].into_iter().flat_map(|l| [(2usize, 96usize), (2, 512), (5, 600), (3, 100)].map(|c| (l, c))) {
                let mean = if k == 100 { 100.0 } else { 0.5 };
                let xs: Vec<f32> = rng.vec(t * k).iter().map(|v| 3.0 * v + mean).collect();
                let (lw, lb, w, scale) = (rng.vec(k), rng.vec(k), rng.vec(n * k), rng.vec(n));
                let y0 = rng.vec(t * n);
                let x = Tensor { buf: ctx.storage_f32("x", &xs).unwrap(), shape: vec![t, k] };
                let up = |v: &[f32]| ctx.storage_f32("w", v).unwrap();
                let (lwb, lbb, wb, sb) = (up(&lw), up(&lb), up(&w), up(&scale));
                let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                assert!(b.set_matvec_lanes(Some(100)).is_err());
                b.set_matvec_lanes(Some(lanes)).unwrap();
                let h = b.tensor("h", &[t, k]).unwrap();
                let outs: Vec<Tensor> = (0..4).map(|_| Tensor { buf: ctx.storage_f32("y", &y0).unwrap(), shape: vec![t, n] }).collect();
                b.layer_norm("norm", &x, &lwb, &lbb, eps, &h);
                b.linear("apart", &wb, (n, k), t, &h.buf, 0, &outs[0].buf, 0, LinearOut::Store).unwrap();
                b.linear("apart residual", &wb, (n, k), t, &h.buf, 0, &outs[1].buf, 0, LinearOut::Residual(&sb)).unwrap();
                b.linear_layer_norm("fused", &wb, (n, k), &x, (&lwb, &lbb, eps), &outs[2], LinearOut::Store).unwrap();
                b.linear_layer_norm("fused residual", &wb, (n, k), &x, (&lwb, &lbb, eps), &outs[3], LinearOut::Residual(&sb)).unwrap();
                // rows that would not start a vec4: refused, nothing added to the plan
                let before = b.dispatches();
                assert!(b.linear("odd width", &wb, (n, k - 1), t, &h.buf, 0, &outs[0].buf, 0, LinearOut::Store).is_err());
                assert!(b.linear("odd offset", &wb, (n, k - 4), 1, &h.buf, 2, &outs[0].buf, 0, LinearOut::Store).is_err());
                assert_eq!(b.dispatches(), before);
                let (plan, _, _) = b.finish();
                replay(&ctx, &plan);
                let mut got = Vec::new();
                for o in &outs {
                    got.push(ctx.read_f32(&o.buf, t * n).await.unwrap());
                }
                assert_eq!(got[2], got[0], "k {k}, {lanes} lanes: fused and apart differ");
                assert_eq!(got[3], got[1], "k {k}, {lanes} lanes: fused and apart residual adds differ");
                let mut want = vec![0f32; t * n];
                for r in 0..t {
                    let row: Vec<f64> = xs[r * k..(r + 1) * k].iter().map(|v| *v as f64).collect();
                    let mean = row.iter().sum::<f64>() / k as f64;
                    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / k as f64;
                    let inv = 1.0 / (var + eps as f64).sqrt();
                    for i in 0..n {
                        let v: f64 = (0..k).map(|j| w[i * k + j] as f64 * ((row[j] - mean) * inv * lw[j] as f64 + lb[j] as f64)).sum();
                        want[r * n + i] = v as f32;
                    }
                }
                let e = rel_err(&got[2], &want);
                assert!(e < 1e-5, "k {k}, {lanes} lanes: relative error {e:e}");
                let added: Vec<f32> = (0..t * n).map(|i| y0[i] + scale[i % n] * want[i]).collect();
                let e = rel_err(&got[3], &added);
                assert!(e < 1e-5, "k {k}, {lanes} lanes: residual add, relative error {e:e}");
            }
        });
    }

    /// The CPU oracle of one frame of rope + KV push + attention (as
    /// `mimi::transformer::Transformer::step` does it): `qkv` `[t, 3 dim]` at positions
    /// `offset..offset + t`, every row pushed before any row attends.
    #[allow(clippy::too_many_arguments)]
    fn attention_oracle(
        qkv: &[f32],
        (dim, heads, ctx, max_period): (usize, usize, usize, f64),
        offset: usize,
        k_ring: &mut [f32],
        v_ring: &mut [f32],
        pos_ring: &mut [Option<usize>],
    ) -> Vec<f32> {
        let t = qkv.len() / (3 * dim);
        let hd = dim / heads;
        let coef = (-(max_period.ln()) * 2.0 / hd as f64) as f32;
        let scale = (1.0 / (hd as f64).sqrt()) as f32;
        let mut qkv = qkv.to_vec();
        for r in 0..t {
            let pos = offset + r;
            for h in 0..heads {
                for j in 0..hd / 2 {
                    let (sn, cs) = ((j as f32 * coef).exp() * pos as f32).sin_cos();
                    for part in 0..2 {
                        let o = r * 3 * dim + part * dim + h * hd + 2 * j;
                        let (a, b) = (qkv[o], qkv[o + 1]);
                        qkv[o] = a * cs - b * sn;
                        qkv[o + 1] = a * sn + b * cs;
                    }
                }
            }
            let slot = pos % ctx;
            k_ring[slot * dim..(slot + 1) * dim].copy_from_slice(&qkv[r * 3 * dim + dim..r * 3 * dim + 2 * dim]);
            v_ring[slot * dim..(slot + 1) * dim].copy_from_slice(&qkv[r * 3 * dim + 2 * dim..r * 3 * dim + 3 * dim]);
            pos_ring[slot] = Some(pos);
        }
        let mut out = vec![0f32; t * dim];
        for r in 0..t {
            let pos_q = offset + r;
            for h in 0..heads {
                let q = &qkv[r * 3 * dim + h * hd..][..hd];
                let mut scores: Vec<(usize, f32)> = Vec::new();
                for (slot, p) in pos_ring.iter().enumerate() {
                    if let Some(pk) = *p {
                        if pk <= pos_q && pos_q - pk < ctx {
                            let k = &k_ring[slot * dim + h * hd..][..hd];
                            scores.push((slot, q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale));
                        }
                    }
                }
                let m = scores.iter().map(|s| s.1).fold(f32::NEG_INFINITY, f32::max);
                let den: f32 = scores.iter().map(|s| (s.1 - m).exp()).sum();
                let o = &mut out[r * dim + h * hd..][..hd];
                for (slot, s) in &scores {
                    let e = (s - m).exp() / den;
                    for (ov, vv) in o.iter_mut().zip(&v_ring[slot * dim + h * hd..][..hd]) {
                        *ov += e * vv;
                    }
                }
            }
        }
        out
    }

    /// Rope, KV push and attention of t steps a frame against the oracle over frames that
    /// wrap the ring: one dispatch for 1 and 2 steps (Mimi's), for as many steps as the ring
    /// holds (3 of 3: a frame's last step takes the slot of the window's oldest key), and the
    /// two-dispatch path past 256 / (hd / 4) steps. Heads of 256 over 80 slots give each
    /// lane of the value sums up to 20 positions (4 lanes a column): past the loop's rounds
    /// of four, a tail.
    #[test]
    fn rope_attention_of_several_steps_in_one_dispatch() {
        pollster::block_on(async {
            let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
            let mut rng = Lcg(0xa7_7e_17);
            // (t, dim, heads, context, dispatches)
            for &(t, dim, heads, context, dispatches) in &[(1usize, 16usize, 2usize, 5usize, 1usize), (2, 16, 2, 5, 1), (2, 32, 4, 4, 1), (3, 16, 2, 3, 1), (2, 512, 2, 80, 1), (5, 512, 2, 7, 2)] {
                let spec = TransformerSpec { dim, heads, context, max_period: 10000.0, rope: true, kv_half: false };
                let qkv = Tensor { buf: ctx.zeros("qkv", t * 3 * dim).unwrap(), shape: vec![t, 3 * dim] };
                let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                let out = b.rope_attention("attn", &spec, &qkv).unwrap();
                let (plan, state, _) = b.finish();
                assert_eq!(plan.dispatches(), dispatches, "t {t}, dim {dim}");
                state.reset(&ctx);
                let (mut kr, mut vr, mut pr) = (vec![0f32; context * dim], vec![0f32; context * dim], vec![None; context]);
                for f in 0..(2 * context / t + 3) {
                    let x = rng.vec(t * 3 * dim);
                    ctx.queue.write_buffer(&qkv.buf, 0, bytemuck::cast_slice(&x));
                    let fp = FrameParams { pos: (f * t) as u32, first: (f == 0) as u32, index: f as u32, _pad: 0 };
                    ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&fp));
                    replay(&ctx, &plan);
                    let want = attention_oracle(&x, (dim, heads, context, 10000.0), f * t, &mut kr, &mut vr, &mut pr);
                    let got = ctx.read_f32(&out.buf, t * dim).await.unwrap();
                    let e = rel_err(&got, &want);
                    assert!(e < 1e-5, "t {t}, dim {dim}, context {context}, frame {f}: relative error {e:e}");
                }
            }
        });
    }
}
