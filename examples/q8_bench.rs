//! The Q8_0 matrix-vector kernel's lane choices side by side at Moshi 7B's shapes
//! (`LmConfig::default()`):
//! the temporal transformer's `in_proj`, `out_proj`, `linear_in`, `linear_out` and
//! `text_linear`, the depformer's `in_proj`, `out_proj`, `linear_in`, `linear_out`,
//! `depformer_in` and `linears`, each with the input it has in the plans (plain,
//! RMSNorm-fused; the FFN's `linear_in` with the SiLU gate as its epilogue into a
//! `GatedRow`, `gate`, and `linear_out` from that row, `row`; and both as the rule before
//! them, `normed` into `[gate; up]` and `gated` from it), for each [`Q8Kernel`] of `shaders/q8_matvec.wgsl`: `blocks`
//! (`INFERENCELAYER_Q8_LANES=blocks`), `auto` (the default), then every lane count. Per
//! shape and rule it prints the dispatch (lanes per row group of 4 rows, workgroups), the
//! GPU time of one dispatch in a pass of its
//! own (`alone`, as `Plan::profile` times a plan) and per dispatch of a pass of 30 (`pass`,
//! with the barriers between them, as a plan replays), both as the median of several runs
//! with timestamp queries, in us and in GB/s of weights + scales + input + output; and
//! the largest difference from `blocks`'s output, relative to its largest value. Enough
//! weight copies are cycled (128 MiB or more) that no dispatch finds its weights in the L2.
//!
//! `cargo run --release --example q8_bench [-- SWEEP]` (`SWEEP` 0: only `blocks` and
//! `auto`; default 1: also every lane count). The kernel is the plans' own choice
//! (`INFERENCELAYER_Q8_DOT`: the i8 kernel `shaders/q8_matvec_dot4.wgsl` by default, `f32`
//! for `shaders/q8_matvec.wgsl`), its lanes by `Q8Kernel::dispatch_for`.

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod common;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    common::run_or_exit("q8_bench", native::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use crate::common::{self, median, Lcg};
    use inferencelayer::gpu::{FrameParams, GatedRow, GpuContext, NormInput, PlanBuilder, Q8Dot, Q8Kernel, Tensor};
    use inferencelayer::moshi::LmConfig;
    use inferencelayer::weights::q8::Q8Tensor;
    use inferencelayer::Result;

    /// Runs per timing; the first is dropped (warm-up), the median of the rest reported.
    const REPS: usize = 7;
    /// Dispatches in one timed pass.
    const IN_PASS: usize = 30;

    #[derive(Clone, Copy, PartialEq)]
    enum Input {
        Plain,
        Normed,
        Gated,
        /// normed input, the gate as the epilogue into a gated row
        Gate,
        /// from a gated row
        Row,
    }

    struct Shape {
        name: String,
        n: usize,
        k: usize,
        input: Input,
    }

    /// One shape's buffers: weight copies, input (2 k wide for the gated input), gain, output.
    struct Bufs {
        w: Vec<(wgpu::Buffer, wgpu::Buffer)>,
        x: Tensor,
        alpha: wgpu::Buffer,
        y: wgpu::Buffer,
        /// the gated row a `gate` shape writes (n / 2 wide) or a `row` shape reads (k wide)
        row: GatedRow,
        bytes: f64,
    }

    fn build<'a>(ctx: &'a GpuContext, frame: &wgpu::Buffer, s: &Shape, b: &Bufs, kernel: Q8Kernel, count: usize) -> Result<PlanBuilder<'a>> {
        let mut pb = PlanBuilder::new(ctx, frame)?;
        pb.set_q8_kernel(kernel);
        // the linears alone: no prefetch dispatches between them (the plans put one before
        // each of the depformer's on GPU adapters)
        pb.set_prefetch(0);
        for i in 0..count {
            let w = &b.w[i % b.w.len()];
            let (w, nk, y) = ((&w.0, &w.1), (s.n, s.k), (&b.y, 0, s.n));
            match s.input {
                Input::Plain => pb.q8_linear("q8", w, nk, 1, (&b.x.buf, 0), y, false)?,
                Input::Gated => pb.q8_linear_gated("q8", w, nk, 1, (&b.x.buf, 0), y, false)?,
                Input::Gate => {
                    let xt = Tensor { buf: b.x.buf.clone(), shape: vec![1, s.k] };
                    pb.q8_linear_gate("q8", w, nk, NormInput::Raw(&xt, &b.alpha, 1e-8), &b.row)?
                }
                Input::Row => {
                    let yt = Tensor { buf: b.y.clone(), shape: vec![1, s.n] };
                    pb.q8_linear_from_gated("q8", w, nk, &b.row, &yt, 0, None)?
                }
                // The fused norm whatever the size (the plans take it apart from
                // Q8_NORM_APART weights on; `plain` is then the linear they dispatch).
                Input::Normed => {
                    let xt = Tensor { buf: b.x.buf.clone(), shape: vec![1, s.k] };
                    pb.q8_linear_normed_fused("q8", w, nk, (&xt, &b.alpha, 1e-8), y, false)?
                }
            }
        }
        Ok(pb)
    }

    /// GPU ms per dispatch of `plan` replayed in one pass between two timestamps.
    async fn in_pass(ctx: &GpuContext, plan: &inferencelayer::gpu::Plan, dispatches: usize) -> Result<f64> {
        let ms = common::time_passes(ctx, REPS, |enc, set, q| plan.record(&mut common::timed_pass(enc, set, q))).await?;
        Ok(median(ms[1..].iter().map(|t| t / dispatches as f64).collect()))
    }

    pub async fn run() -> Result<()> {
        let sweep = std::env::args().nth(1).map(|a| a != "0").unwrap_or(true);
        let dot = Q8Dot::from_env()?;
        let ctx = common::context().await?;
        println!("dot products {dot:?} (INFERENCELAYER_Q8_DOT)");
        if !common::has_timestamps(&ctx) {
            return Ok(());
        }
        let c = LmConfig::default();
        let (d, h, dd, dh) = (c.dim, c.hidden(), c.depformer_dim, c.depformer_hidden());
        let sh = |name: &str, n, k, input| Shape { name: name.to_string(), n, k, input };
        let shapes = [
            sh("in_proj", 3 * d, d, Input::Normed),
            sh("in_proj", 3 * d, d, Input::Plain),
            sh("out_proj", d, d, Input::Plain),
            sh("linear_in", 2 * h, d, Input::Normed),
            sh("linear_in", 2 * h, d, Input::Plain),
            sh("linear_in", 2 * h, d, Input::Gate),
            sh("linear_out", d, h, Input::Gated),
            sh("linear_out", d, h, Input::Row),
            sh("text_linear", c.text_card, d, Input::Plain),
            sh("dep in_proj", 3 * dd, dd, Input::Normed),
            sh("dep out_proj", dd, dd, Input::Plain),
            sh("dep linear_in", 2 * dh, dd, Input::Normed),
            sh("dep linear_in", 2 * dh, dd, Input::Gate),
            sh("dep linear_out", dd, dh, Input::Gated),
            sh("dep linear_out", dd, dh, Input::Row),
            sh("depformer_in", dd, d, Input::Plain),
            sh("dep linears", c.card, dd, Input::Plain),
        ];
        let mut kernels = vec![("blocks".to_string(), Q8Kernel::Blocks), ("auto".to_string(), Q8Kernel::Auto)];
        if sweep {
            for lanes in [8usize, 16, 32, 64, 128, 256] {
                kernels.push((format!("{lanes} lanes"), Q8Kernel::Fixed { lanes }));
            }
        }
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
        let mut rng = Lcg(0x0a8b_e4c4);
        println!("alone: one dispatch in a pass of its own; pass: per dispatch of {IN_PASS} in one pass; median of {} runs", REPS - 1);
        println!("GB/s: weights + scales + input + output bytes; diff: largest |y - y(blocks)| / largest |y(blocks)|");
        println!(
            "{:<16}{:>14} {:<7}{:<10}{:>6}{:>7}{:>10}{:>8}{:>10}{:>8}{:>10}",
            "shape", "[n, k]", "input", "lanes by", "lanes", "groups", "alone us", "GB/s", "pass us", "GB/s", "diff"
        );
        for s in &shapes {
            let (qb, sb) = Q8Tensor::buffer_sizes(s.n, s.k);
            let copies = ((128usize << 20) / (qb + sb) as usize).clamp(3, 64);
            let quants: Vec<u8> = (0..qb / 4).flat_map(|_| rng.next().to_le_bytes()).collect();
            // Scales in [0.5, 1) as f16 (positive normal values).
            let scales: Vec<u8> = (0..sb / 2).flat_map(|_| (0x3800u16 | (rng.next() as u16 & 0x3ff)).to_le_bytes()).collect();
            let mut w = Vec::new();
            for i in 0..copies {
                w.push((ctx.storage_bytes(&format!("quants {i}"), &quants)?, ctx.storage_bytes(&format!("scales {i}"), &scales)?));
            }
            let x = Tensor { buf: ctx.storage_f32("x", &rng.f32s(2 * s.k))?, shape: vec![1, 2 * s.k] };
            let alpha = ctx.storage_f32("alpha", &rng.f32s(s.k))?;
            let y = ctx.zeros("y", s.n)?;
            // the gated row: for `row`, valid levels (any bytes) and scales of 1 / 64 as the
            // i8 kernel packs them, or plain values for the f32 kernel
            let row = PlanBuilder::new(&ctx, &frame)?.gated_row("row", if s.input == Input::Gate { s.n / 2 } else { s.k })?;
            if s.input == Input::Row {
                let words: Vec<u32> = if dot == Q8Dot::I8 {
                    (0..s.k / 2).map(|_| rng.next()).chain((0..s.k / 16).map(|_| (1.0f32 / 64.0).to_bits())).collect()
                } else {
                    rng.f32s(s.k).iter().map(|v| v.to_bits()).collect()
                };
                ctx.queue.write_buffer(&row.buf, 0, bytemuck::cast_slice(&words));
            }
            // a packed row: 36 bytes per 16 values
            let row_bytes = if dot == Q8Dot::I8 { 2.25 } else { 4.0 };
            let (kf, nf) = (s.k as f64, s.n as f64);
            let (input_bytes, output_bytes) = match s.input {
                Input::Gated => (8.0 * kf, 4.0 * nf),
                Input::Gate => (4.0 * kf, row_bytes * nf / 2.0),
                Input::Row => (row_bytes * kf, 4.0 * nf),
                Input::Plain | Input::Normed => (4.0 * kf, 4.0 * nf),
            };
            let bytes = (qb + sb) as f64 + input_bytes + output_bytes;
            let b = Bufs { w, x, alpha, y, row, bytes };
            let mut reference: Option<Vec<f32>> = None;
            for (kname, kernel) in &kernels {
                // `row` adds into y: every rule from zero, with the same number of adds
                ctx.queue.write_buffer(&b.y, 0, &vec![0u8; 4 * s.n]);
                let dsp = if s.input == Input::Gate { kernel.dispatch_gate(dot, s.n, s.k) } else { kernel.dispatch_for(dot, s.n, s.k, 1) };
                let (plan, _, _) = build(&ctx, &frame, s, &b, *kernel, REPS + 2)?.finish();
                let alone = median(plan.profile(&ctx).await?[1..].to_vec());
                let (plan, _, _) = build(&ctx, &frame, s, &b, *kernel, IN_PASS)?.finish();
                let pass = in_pass(&ctx, &plan, IN_PASS).await?;
                // a gated row as its words (packed levels for the i8 kernel: 9 per 16 values)
                let got = match s.input {
                    Input::Gate if dot == Q8Dot::I8 => ctx.read_f32(&b.row.buf, 9 * s.n / 32).await?.iter().map(|v| f32::from_bits(v.to_bits() & 0x3f7f_ffff)).collect(),
                    Input::Gate => ctx.read_f32(&b.row.buf, s.n / 2).await?,
                    _ => ctx.read_f32(&b.y, s.n).await?,
                };
                let diff = common::diff(&mut reference, got);
                let gbs = |ms: f64| b.bytes / (ms * 1e-3) / 1e9;
                println!(
                    "{:<16}{:>14} {:<7}{:<10}{:>6}{:>7}{:>10.1}{:>8.0}{:>10.1}{:>8.0}{:>10.1e}",
                    s.name,
                    format!("[{}, {}]", s.n, s.k),
                    ["plain", "normed", "gated", "gate", "row"][s.input as usize],
                    kname,
                    dsp.lanes,
                    dsp.groups,
                    1e3 * alone,
                    gbs(alone),
                    1e3 * pass,
                    gbs(pass),
                    diff
                );
            }
        }
        ctx.take_error()
    }
}
