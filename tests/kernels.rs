//! Every kernel in `shaders/` parses and validates with naga (the native WGSL front end;
//! the browser tests cover Tint), and its `@group(0)` bindings are exactly the kernel
//! table's, in order and access mode.
#![cfg(not(target_arch = "wasm32"))]

use inferencelayer::gpu::{Binding, KERNELS};
use naga::{AddressSpace, StorageAccess};

#[test]
fn every_kernel_validates_and_matches_its_binding_table() {
    for k in KERNELS {
        let module = naga::front::wgsl::parse_str(k.source)
            .unwrap_or_else(|e| panic!("{}: {}", k.name, e.emit_to_string(k.source)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
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

mod oracles {
    //! Fused kernel modes against CPU oracles: the streaming convs with their staging and
    //! carry inside the conv dispatch (both conv kernels, ELU on load, time-major input,
    //! replicate padding, a prefix longer than the frame, no prefix), the transposed conv
    //! with its overlap tail, over several frames; the LayerNorm-fused linear.
    use inferencelayer::gpu::{FrameParams, GpuContext, LinearOut, Plan, PlanBuilder, Tensor};
    use inferencelayer::mimi::conv::{Conv1d, ConvTr1d};

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

    /// (in_c, out_c, k, stride, dilation, t, elu, time_major, replicate, residual)
    type ConvCase = (usize, usize, usize, usize, usize, usize, bool, bool, bool, bool);

    #[test]
    fn streaming_convs_stage_and_carry_inside_the_conv_dispatch() {
        pollster::block_on(async {
            let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
            let mut rng = Lcg(0xc0_4f_1d);
            let cases: [ConvCase; 6] = [
                // a thread per output, dilated, ELU on load, a residual
                (8, 6, 3, 1, 2, 40, true, false, false, true),
                // a workgroup per output, strided, replicate padding, time-major input
                (64, 16, 4, 2, 1, 2, true, true, true, false),
                // the prefix (6) longer than the frame (2): a workgroup per output, then a
                // thread per output
                (32, 8, 7, 1, 1, 2, false, true, false, false),
                (3, 4, 7, 1, 1, 2, true, false, false, false),
                // no prefix (1x1), ELU on load
                (16, 8, 1, 1, 1, 10, true, false, false, true),
                // SEANet's downsampling shape: kernel twice the stride, prefix = stride
                (16, 32, 8, 4, 1, 16, true, false, false, false),
            ];
            for (i, &(in_c, out_c, k, stride, dilation, t, elu, time_major, replicate, residual)) in cases.iter().enumerate() {
                let conv = Conv1d {
                    name: format!("conv{i}"),
                    w: rng.vec(out_c * in_c * k),
                    b: Some(rng.vec(out_c)),
                    in_c,
                    out_c,
                    k,
                    stride,
                    dilation,
                    groups: 1,
                    replicate,
                };
                let t_out = t / stride;
                let x = Tensor { buf: ctx.zeros("x", in_c * t).unwrap(), shape: if time_major { vec![t, in_c] } else { vec![in_c, t] } };
                let res = Tensor { buf: ctx.zeros("res", out_c * t_out).unwrap(), shape: vec![out_c, t_out] };
                let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                let y = conv.plan(&mut b, &x, time_major, elu, residual.then_some(&res)).unwrap();
                let (plan, state, _) = b.finish();
                assert_eq!(plan.dispatches(), 1, "case {i}: one dispatch per conv");
                for stream in 0..2 {
                    let mut st = conv.state();
                    for f in 0..4u32 {
                        let xs = rng.vec(in_c * t);
                        let rs = rng.vec(out_c * t_out);
                        let up = if time_major { transpose(&xs, in_c, t) } else { xs.clone() };
                        ctx.queue.write_buffer(&x.buf, 0, bytemuck::cast_slice(&up));
                        ctx.queue.write_buffer(&res.buf, 0, bytemuck::cast_slice(&rs));
                        let fp = FrameParams { pos: f, first: (f == 0) as u32, index: f, _pad: 0 };
                        ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&fp));
                        replay(&ctx, &plan);
                        let mut want = conv.step(&mut st, &xs, elu);
                        if residual {
                            want.iter_mut().zip(&rs).for_each(|(w, r)| *w += r);
                        }
                        let got = ctx.read_f32(&y.buf, out_c * t_out).await.unwrap();
                        let e = rel_err(&got, &want);
                        assert!(e < 1e-5, "case {i}, stream {stream}, frame {f}: relative error {e:e}");
                    }
                    state.reset(&ctx);
                }
            }
        });
    }

    #[test]
    fn streaming_transposed_convs_carry_their_tail_inside_the_dispatch() {
        pollster::block_on(async {
            let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
            let mut rng = Lcg(0x7c_0a_9e);
            // (in_c, out_c, k, stride, groups, t_in, elu, bias): SEANet's upsampling, Mimi's
            // channel-wise upsample
            for (i, &(in_c, out_c, k, stride, groups, t_in, elu, bias)) in
                [(8usize, 6usize, 4usize, 2usize, 1usize, 3usize, true, true), (4, 4, 4, 2, 4, 2, false, false), (5, 3, 10, 5, 1, 40, true, true)].iter().enumerate()
            {
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
                let x = Tensor { buf: ctx.zeros("x", in_c * t_in).unwrap(), shape: vec![in_c, t_in] };
                let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                let y = convtr.plan(&mut b, &x, elu).unwrap();
                let (plan, _, _) = b.finish();
                assert_eq!(plan.dispatches(), 1, "case {i}: one dispatch per transposed conv");
                let mut st = convtr.state();
                for f in 0..4u32 {
                    let xs = rng.vec(in_c * t_in);
                    ctx.queue.write_buffer(&x.buf, 0, bytemuck::cast_slice(&xs));
                    let fp = FrameParams { pos: f, first: (f == 0) as u32, index: f, _pad: 0 };
                    ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&fp));
                    replay(&ctx, &plan);
                    let want = convtr.step(&mut st, &xs, elu);
                    let got = ctx.read_f32(&y.buf, out_c * ts).await.unwrap();
                    let e = rel_err(&got, &want);
                    assert!(e < 1e-5, "case {i}, frame {f}: relative error {e:e}");
                }
            }
        });
    }

    /// `linear_layer_norm` gives bit for bit a `layer_norm` dispatch then a `linear` (the
    /// fused kernel sums in the LayerNorm kernel's order), and both the f64 oracle, at a
    /// width below one LayerNorm workgroup (96), one of two passes (512) and a tail (600).
    #[test]
    fn layer_norm_fused_linear_equals_the_two_dispatches() {
        pollster::block_on(async {
            let ctx = GpuContext::new().await.expect("a GPU adapter (lavapipe works)");
            let mut rng = Lcg(0x1a_4e_0f);
            let (t, n, eps) = (2usize, 40usize, 1e-5f32);
            for k in [96usize, 512, 600] {
                let xs: Vec<f32> = rng.vec(t * k).iter().map(|v| 3.0 * v + 0.5).collect();
                let (lw, lb, w, scale) = (rng.vec(k), rng.vec(k), rng.vec(n * k), rng.vec(n));
                let y0 = rng.vec(t * n);
                let x = Tensor { buf: ctx.storage_f32("x", &xs).unwrap(), shape: vec![t, k] };
                let up = |v: &[f32]| ctx.storage_f32("w", v).unwrap();
                let (lwb, lbb, wb, sb) = (up(&lw), up(&lb), up(&w), up(&scale));
                let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
                let mut b = PlanBuilder::new(&ctx, &frame).unwrap();
                let h = b.tensor("h", &[t, k]).unwrap();
                let outs: Vec<Tensor> = (0..4).map(|_| Tensor { buf: ctx.storage_f32("y", &y0).unwrap(), shape: vec![t, n] }).collect();
                b.layer_norm("norm", &x, &lwb, &lbb, eps, &h);
                b.linear("apart", &wb, (n, k), t, &h.buf, 0, &outs[0].buf, 0, LinearOut::Store);
                b.linear("apart residual", &wb, (n, k), t, &h.buf, 0, &outs[1].buf, 0, LinearOut::Residual(&sb));
                b.linear_layer_norm("fused", &wb, (n, k), &x, (&lwb, &lbb, eps), &outs[2], LinearOut::Store).unwrap();
                b.linear_layer_norm("fused residual", &wb, (n, k), &x, (&lwb, &lbb, eps), &outs[3], LinearOut::Residual(&sb)).unwrap();
                let (plan, _, _) = b.finish();
                replay(&ctx, &plan);
                let mut got = Vec::new();
                for o in &outs {
                    got.push(ctx.read_f32(&o.buf, t * n).await.unwrap());
                }
                assert_eq!(got[2], got[0], "k {k}: fused and apart differ");
                assert_eq!(got[3], got[1], "k {k}: fused and apart residual adds differ");
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
                assert!(e < 1e-5, "k {k}: relative error {e:e}");
            }
        });
    }
}
