//! The streaming attention step of one new position (`PlanBuilder::rope_attention_at`,
//! rotary embedding, KV push and attention fused) side by side for each kernel choice at
//! Moshi 7B's shapes (`LmConfig::default()`): the temporal transformer (32 heads of 128,
//! 3000 slots, RoPE) with 16, 200, 1000 and 3000 positions in the window, the same with f16
//! keys and values in the rings as the plans hold them (`tempf16`: the split kernels only)
//! with 200, 1000 and 3000, the depformer (16 heads of 64, 8 slots) with 1 and 8. Kernels:
//! `fused` (`rope_attention`, one workgroup per head: `INFERENCELAYER_ATTENTION=fused`),
//! `auto` (the default: `rope_attention_small` for the depformer, `rope_attention_split` +
//! `attention_combine` for the temporal transformer), and `rope_attention_split` with other
//! bounds on the positions per workgroup (`chunk/least`: at most `chunk`, which sets the
//! splits of the dispatch, and at least `least` while the window fills).
//!
//! Per shape, fill and kernel it prints the dispatches of one step, the GPU time of a step
//! with each dispatch in a pass of its own (`alone`, as `Plan::profile` times a plan) and
//! per step in a pass of `LAYERS` steps (`pass`, each step waiting for the one before, as a
//! plan replays a stack of layers), both the median of several runs with timestamp
//! queries, in us and in GB/s of the keys and values read; and the largest difference from
//! `fused`'s output, relative to its largest value. Each step of a pass has its own rings
//! (a layer's), so that beyond a few hundred positions no step finds its keys in the L2
//! (at 16 positions the 32 layers' keys and values, 16 MB, fit it).
//!
//! The steps of a pass are chained as a plan's layers are: after each, a one-element copy
//! reads its output and writes a sink that every step shares, so the next step starts only
//! once the one before it has finished (the GPU waits at the barrier before the copy).
//! Without it the steps, each with its own rings and output and nothing between them, would
//! run side by side, and a step of few workgroups would seem faster than it is in a plan.
//! The copy runs beside the next step and is left out of `alone`.
//!
//! `cargo run --release --example attention_bench [-- LAYERS]` (default 32, the temporal
//! transformer's layers; a small count suits a software adapter).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod common;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    common::run_or_exit("attention_bench", native::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use crate::common::{self, median, Lcg};
    use inferencelayer::gpu::{AttentionDispatch, AttentionKernel, FrameParams, GpuContext, Plan, PlanBuilder, Tensor, TransformerSpec};
    use inferencelayer::moshi::LmConfig;
    use inferencelayer::{Error, Result};

    /// Runs per timing; the first is dropped (warm-up), the median of the rest reported.
    const REPS: usize = 7;

    /// GPU ms of one replay of `plan` between two timestamps, the median of `REPS - 1` runs.
    async fn in_pass(ctx: &GpuContext, plan: &Plan) -> Result<f64> {
        let ms = common::time_passes(ctx, REPS, |enc, set, q| plan.record(&mut common::timed_pass(enc, set, q))).await?;
        Ok(median(ms[1..].to_vec()))
    }

    fn describe(d: AttentionDispatch) -> String {
        match d {
            AttentionDispatch::Fused => "fused".into(),
            AttentionDispatch::Small => "small".into(),
            AttentionDispatch::Split { chunk, least, splits: 1 } => format!("split {chunk}/{least} x1"),
            AttentionDispatch::Split { chunk, least, splits } => format!("split {chunk}/{least} x{splits}+c"),
        }
    }

    pub async fn run() -> Result<()> {
        let layers: usize = match std::env::args().nth(1) {
            None => 32,
            Some(a) => a.parse().ok().filter(|n| *n >= 2).ok_or_else(|| Error::Input(format!("LAYERS must be a count of 2 or more, got {a:?}")))?,
        };
        let ctx = common::context().await?;
        if !common::has_timestamps(&ctx) {
            return Ok(());
        }
        let c = LmConfig::default();
        let temporal = TransformerSpec { dim: c.dim, heads: c.num_heads, context: c.context, max_period: c.max_period, rope: true, kv_half: false };
        // the temporal transformer as the plans run it: f16 keys and values in the rings
        let temporal_f16 = TransformerSpec { kv_half: true, ..temporal };
        let depformer = TransformerSpec { dim: c.depformer_dim, heads: c.depformer_num_heads, context: c.depformer_context, max_period: c.depformer_max_period, rope: false, kv_half: false };
        let split = |(chunk, least)| (format!("{chunk}/{least}"), AttentionKernel::Split { chunk, least });
        let base = || vec![("fused".to_string(), AttentionKernel::Fused), ("auto".to_string(), AttentionKernel::Auto)];
        let mut temporal_kernels = base();
        temporal_kernels.extend([(64, 64), (16, 16), (32, 16), (32, 32), (128, 16), (128, 128), (256, 32)].map(split));
        let f16_kernels: Vec<_> = std::iter::once(("auto".to_string(), AttentionKernel::Auto))
            .chain([(32, 32), (64, 32), (96, 32), (128, 32), (256, 32)].map(split))
            .collect();
        let mut depformer_kernels = base();
        depformer_kernels.extend([(8, 8), (2, 2)].map(split));
        let shapes = [
            ("temporal", temporal, vec![16usize, 200, 1000, 3000], temporal_kernels),
            ("tempf16", temporal_f16, vec![200, 1000, 3000], f16_kernels),
            ("depformer", depformer, vec![1, 8], depformer_kernels),
        ];
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams::default()));
        let mut rng = Lcg(0xa77e_be4c);
        // what each step's ordering copy writes
        let sink = ctx.zeros("order sink", 1)?;
        println!("alone: each dispatch of a step in a pass of its own; pass: per step of {layers} in one pass (a layer's rings each), each waiting for the one before; median of {} runs", REPS - 1);
        println!("GB/s: keys and values read; diff: largest |out - out(fused)| / largest |out(fused)|");
        println!("{:<10}{:>10} {:<11}{:<18}{:>10}{:>8}{:>10}{:>8}{:>10}", "shape", "positions", "kernel", "dispatch", "alone us", "GB/s", "pass us", "GB/s", "diff");
        for (name, spec, fills, kernels) in &shapes {
            let (dim, ring) = (spec.dim, spec.context);
            let hd = dim / spec.heads;
            // one layer's rings: random keys and values, every slot up to the fill stamped
            let k = rng.f32s(ring * dim);
            let v = rng.f32s(ring * dim);
            let mut rings = Vec::with_capacity(layers);
            // f16 rings (`kv_half`, the split kernels): the values' halves in element order,
            // as `pack2x16float` of consecutive pairs lays them out
            let ring_of = |label: &str, x: &[f32]| {
                if spec.kv_half {
                    let h: Vec<u16> = x.iter().map(|&f| half::f16::from_f32(f).to_bits()).collect();
                    ctx.storage_bytes(label, bytemuck::cast_slice(&h))
                } else {
                    ctx.storage_f32(label, x)
                }
            };
            for l in 0..layers {
                rings.push([
                    ring_of(&format!("k_ring {l}"), &k)?,
                    ring_of(&format!("v_ring {l}"), &v)?,
                    ctx.zeros(&format!("pos_ring {l}"), ring)?,
                ]);
            }
            let qkv = Tensor { buf: ctx.storage_f32("qkv", &rng.f32s(3 * dim))?, shape: vec![1, 3 * dim] };
            for &fill in fills {
                let fill = fill.min(ring);
                let stamps: Vec<u32> = (0..ring as u32).map(|s| if (s as usize) < fill { s } else { u32::MAX }).collect();
                for r in &rings {
                    ctx.queue.write_buffer(&r[2], 0, bytemuck::cast_slice(&stamps));
                }
                let f = FrameParams { pos: fill as u32 - 1, first: (fill == 1) as u32, ..Default::default() };
                ctx.queue.write_buffer(&frame, 0, bytemuck::bytes_of(&f));
                let bytes = (2 * fill * dim * if spec.kv_half { 2 } else { 4 }) as f64;
                let mut reference: Option<Vec<f32>> = None;
                for (kname, kernel) in kernels {
                    let mut b = PlanBuilder::new(&ctx, &frame)?;
                    b.set_attention_kernel(*kernel);
                    let mut outs = Vec::with_capacity(layers);
                    for r in &rings {
                        let out = b.rope_attention_at("attn", spec, &qkv, &frame, r)?;
                        b.copy("order", &out.buf, &sink, 1);
                        outs.push(out);
                    }
                    let (plan, _, _) = b.finish();
                    // a step's dispatches, then its ordering copy (left out of `alone`)
                    let per_step = plan.dispatches() / layers;
                    let times = plan.profile(&ctx).await?;
                    let steps: Vec<f64> = times.chunks_exact(per_step).map(|s| s[..per_step - 1].iter().sum()).collect();
                    let alone = median(steps[1..].to_vec());
                    let pass = in_pass(&ctx, &plan).await? / layers as f64;
                    let got = ctx.read_f32(&outs[layers - 1].buf, dim).await?;
                    let diff = common::diff(&mut reference, got);
                    let gbs = |ms: f64| bytes / (ms * 1e-3) / 1e9;
                    println!(
                        "{:<10}{:>10} {:<11}{:<18}{:>10.1}{:>8.0}{:>10.1}{:>8.0}{:>10.1e}",
                        name,
                        fill,
                        kname,
                        describe(kernel.dispatch(hd, ring)),
                        1e3 * alone,
                        gbs(alone),
                        1e3 * pass,
                        gbs(pass),
                        diff
                    );
                }
            }
        }
        ctx.take_error()
    }
}
