//! Mimi's streaming convs (`PlanBuilder::conv1d`, every `StreamingConv1d` of its encoder and
//! decoder, and its transposed convs, which run as convs into stride phases:
//! `PlanBuilder::conv_transpose1d_as_conv`; one 80 ms frame, 1920 samples at 24 kHz) side by
//! side on each conv kernel:
//! `tiled` (`conv1d_tiled`, a workgroup per 16 output channels x 16 columns), `reduce`
//! (`conv1d_reduce`, a workgroup per output), `lanes` (`conv1d_lanes`, 16 to 256 threads per
//! output) and `auto` (the plan builder's choice by shape and adapter: `conv_kernel_auto`).
//!
//! Per shape and kernel it prints the workgroups of the dispatch, the GPU time of one
//! dispatch in a pass of its own (`alone`, as `Plan::profile` times a plan) and per dispatch
//! of `COPIES` in one pass (`pass`), both medians of timestamp queries, in us; and the
//! largest difference from `reduce`'s output, relative to its largest value.
//!
//! The copies of a pass are chained as a plan's steps are: after each, a one-element copy
//! reads its output and writes a sink that every copy shares, so the next conv starts only
//! once the one before it has finished (the GPU waits at the barrier before the copy), as in
//! Mimi's plans, where each conv reads the output of the step before it. Without it the
//! copies, each with its own output and state and nothing between them, would run side by
//! side, and a conv of few workgroups would seem many times faster than it is in a plan.
//! The copy runs beside the next conv and is left out of `alone`.
//!
//! `cargo run --release --example conv_bench [-- COPIES]` (default 16; a small count suits a
//! software adapter).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod common;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    common::run_or_exit("conv_bench", native::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use crate::common::{self, diff, median, Lcg};
    use inferencelayer::gpu::{conv_reduce_lanes, ConvKernel, Elu, FrameParams, GpuContext, Plan, PlanBuilder, Tensor};
    use inferencelayer::mimi::conv::{Conv1d, ConvTr1d};
    use inferencelayer::{Error, Result};

    /// Passes timed per kernel; the first is dropped (warm-up), the median of the rest kept.
    const REPS: usize = 7;

    /// (name, in_c, out_c, k, stride, t, elu, time-major input, time-major output, residual)
    type Shape = (&'static str, usize, usize, usize, usize, usize, bool, bool, bool, bool);

    /// Mimi's convs for one frame (SEANet ratios 8, 6, 5, 4; 64 filters; the 12.5 Hz
    /// downsample after the encoder's transformer).
    const SHAPES: [Shape; 25] = [
        ("enc.conv0 1>64 k7", 1, 64, 7, 1, 1920, false, false, false, false),
        ("enc.block0 k3", 64, 32, 3, 1, 1920, true, false, false, false),
        ("enc.block0 k1", 32, 64, 1, 1, 1920, true, false, false, true),
        ("enc.down 64>128 s4", 64, 128, 8, 4, 1920, true, false, false, false),
        ("enc.block1 k3", 128, 64, 3, 1, 480, true, false, false, false),
        ("enc.block1 k1", 64, 128, 1, 1, 480, true, false, false, true),
        ("enc.down 128>256 s5", 128, 256, 10, 5, 480, true, false, false, false),
        ("enc.block2 k3", 256, 128, 3, 1, 96, true, false, false, false),
        ("enc.block2 k1", 128, 256, 1, 1, 96, true, false, false, true),
        ("enc.down 256>512 s6", 256, 512, 12, 6, 96, true, false, false, false),
        ("enc.block3 k3", 512, 256, 3, 1, 16, true, false, false, false),
        ("enc.block3 k1", 256, 512, 1, 1, 16, true, false, false, true),
        ("enc.down 512>1024 s8", 512, 1024, 16, 8, 16, true, false, false, false),
        ("enc.last 1024>512 k3", 1024, 512, 3, 1, 2, true, false, true, false),
        ("downsample k4 s2", 512, 512, 4, 2, 2, false, true, false, false),
        ("dec.first 512>1024 k7", 512, 1024, 7, 1, 2, false, true, false, false),
        ("dec.block0 k3", 512, 256, 3, 1, 16, true, false, false, false),
        ("dec.block0 k1", 256, 512, 1, 1, 16, true, false, false, true),
        ("dec.block1 k3", 256, 128, 3, 1, 96, true, false, false, false),
        ("dec.block1 k1", 128, 256, 1, 1, 96, true, false, false, true),
        ("dec.block2 k3", 128, 64, 3, 1, 480, true, false, false, false),
        ("dec.block2 k1", 64, 128, 1, 1, 480, true, false, false, true),
        ("dec.block3 k3", 64, 32, 3, 1, 1920, true, false, false, false),
        ("dec.block3 k1", 32, 64, 1, 1, 1920, true, false, false, true),
        ("dec.last 64>1 k7", 64, 1, 7, 1, 1920, true, false, false, false),
    ];

    /// (name, in_c, out_c, k, stride, groups, t_in, time-major output)
    type TransposedShape = (&'static str, usize, usize, usize, usize, usize, usize, bool);

    /// Mimi's transposed convs.
    const TRANSPOSED: [TransposedShape; 5] = [
        ("upsample ch-wise s2", 512, 512, 4, 2, 512, 1, true),
        ("dec.up 1024>512 s8", 1024, 512, 16, 8, 1, 2, false),
        ("dec.up 512>256 s6", 512, 256, 12, 6, 1, 16, false),
        ("dec.up 256>128 s5", 256, 128, 10, 5, 1, 96, false),
        ("dec.up 128>64 s4", 128, 64, 8, 4, 1, 480, false),
    ];

    /// (alone, pass) in us: medians of `REPS - 1` profiles and one-pass timings of `plan`,
    /// which holds `copies` dispatches of one conv, each followed by its ordering copy (left
    /// out of `alone`).
    async fn time(ctx: &GpuContext, plan: &Plan, copies: usize) -> Result<(f64, f64)> {
        let mut alone = Vec::new();
        let mut pass = Vec::new();
        for _ in 0..REPS {
            alone.push(median(plan.profile(ctx).await?.into_iter().step_by(2).collect()));
            pass.push(plan.time_one_pass(ctx).await? / copies as f64);
        }
        Ok((1e3 * median(alone[1..].to_vec()), 1e3 * median(pass[1..].to_vec())))
    }

    const KERNELS: [(&str, ConvKernel); 4] = [("reduce", ConvKernel::Reduce), ("lanes", ConvKernel::Lanes), ("tiled", ConvKernel::Tiled), ("auto", ConvKernel::Auto)];

    /// Workgroups of `conv1d_lanes` for `out_c` channels of `t_out` columns of a reduction of
    /// `n` terms.
    fn lanes_workgroups(out_c: usize, t_out: usize, n: usize) -> String {
        (out_c * t_out).div_ceil(256 / conv_reduce_lanes(out_c * t_out, n)).to_string()
    }

    pub async fn run() -> Result<()> {
        let copies: usize = match std::env::args().nth(1) {
            None => 16,
            Some(a) => a.parse().ok().filter(|n| *n >= 1).ok_or_else(|| Error::Input(format!("COPIES must be a count of 1 or more, got {a:?}")))?,
        };
        let ctx = common::context().await?;
        if !common::has_timestamps(&ctx) {
            return Ok(());
        }
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams { pos: 1, first: 0, index: 1, _pad: 0 }));
        // what each conv's ordering copy writes
        let sink = ctx.zeros("order sink", 1)?;
        let mut rng = Lcg(0xc0_4f_be);
        println!("alone: one dispatch in a pass of its own; pass: per dispatch of {copies} in one pass, each waiting for the one before; medians; us");
        println!("{:<24}{:<8}{:>12}{:>10}{:>10}{:>10}", "conv", "kernel", "workgroups", "alone", "pass", "diff");
        let (mut sum_alone, mut sum_pass) = ([0f64; KERNELS.len()], [0f64; KERNELS.len()]);
        for &(name, in_c, out_c, k, stride, t, elu, time_major, time_major_out, residual) in &SHAPES {
            let conv = Conv1d { name: name.into(), w: rng.f32s(out_c * in_c * k), b: Some(rng.f32s(out_c)), in_c, out_c, k, stride, dilation: 1, groups: 1, replicate: false };
            let t_out = t / stride;
            let x = Tensor { buf: ctx.storage_f32("x", &rng.f32s(in_c * t))?, shape: if time_major { vec![t, in_c] } else { vec![in_c, t] } };
            let res = Tensor { buf: ctx.storage_f32("res", &rng.f32s(out_c * t_out))?, shape: if time_major_out { vec![t_out, out_c] } else { vec![out_c, t_out] } };
            let mut reference: Option<Vec<f32>> = None;
            for (ki, (kname, kernel)) in KERNELS.into_iter().enumerate() {
                let mut b = PlanBuilder::new(&ctx, &frame)?;
                b.set_conv_kernel(kernel);
                let mut outs = Vec::with_capacity(copies);
                for _ in 0..copies {
                    outs.push(conv.plan(&mut b, &x, time_major, time_major_out, Elu { input: elu, output: false }, residual.then_some(&res))?);
                    b.copy("order", &outs[outs.len() - 1].buf, &sink, 1);
                }
                let (plan, _, _) = b.finish();
                let (alone, pass) = time(&ctx, &plan, copies).await?;
                sum_alone[ki] += alone;
                sum_pass[ki] += pass;
                let d = diff(&mut reference, ctx.read_f32(&outs[copies - 1].buf, out_c * t_out).await?);
                let groups = match kernel {
                    ConvKernel::Reduce => (out_c * t_out).to_string(),
                    ConvKernel::Lanes => lanes_workgroups(out_c, t_out, in_c * k),
                    ConvKernel::Tiled => (out_c.div_ceil(16) * t_out.div_ceil(16)).to_string(),
                    ConvKernel::Auto => "-".to_string(),
                };
                println!("{:<24}{:<8}{:>12}{:>10.1}{:>10.1}{:>10.1e}", name, kname, groups, alone, pass, d);
            }
        }
        for &(name, in_c, out_c, k, stride, groups, t_in, time_major_out) in &TRANSPOSED {
            let convtr = ConvTr1d { name: name.into(), w: rng.f32s(in_c * (out_c / groups) * k), b: Some(rng.f32s(out_c)), in_c, out_c, k, stride, groups };
            let x = Tensor { buf: ctx.storage_f32("x", &rng.f32s(in_c * t_in))?, shape: vec![in_c, t_in] };
            let mut reference: Option<Vec<f32>> = None;
            for (ki, (kname, kernel)) in KERNELS.into_iter().enumerate() {
                let mut b = PlanBuilder::new(&ctx, &frame)?;
                b.set_conv_kernel(kernel);
                let mut outs = Vec::with_capacity(copies);
                for _ in 0..copies {
                    outs.push(convtr.plan(&mut b, &x, Elu::INPUT, time_major_out)?);
                    b.copy("order", &outs[outs.len() - 1].buf, &sink, 1);
                }
                let (plan, _, _) = b.finish();
                let (alone, pass) = time(&ctx, &plan, copies).await?;
                sum_alone[ki] += alone;
                sum_pass[ki] += pass;
                let d = diff(&mut reference, ctx.read_f32(&outs[copies - 1].buf, out_c * t_in * stride).await?);
                // as a conv: out_c * stride channels of groups, t_in columns
                let (oc, og) = (out_c * stride, out_c * stride / groups);
                let wg = match kernel {
                    ConvKernel::Reduce => (oc * t_in).to_string(),
                    ConvKernel::Lanes => lanes_workgroups(oc, t_in, (in_c / groups) * 2),
                    ConvKernel::Tiled => (groups * og.div_ceil(16) * t_in.div_ceil(16)).to_string(),
                    ConvKernel::Auto => "-".to_string(),
                };
                println!("{:<24}{:<8}{:>12}{:>10.1}{:>10.1}{:>10.1e}", name, kname, wg, alone, pass, d);
            }
        }
        for (ki, (kname, _)) in KERNELS.into_iter().enumerate() {
            println!("all {} convs on {kname}: alone {:.1} us, pass {:.1} us", SHAPES.len() + TRANSPOSED.len(), sum_alone[ki], sum_pass[ki]);
        }
        ctx.take_error()
    }
}
