//! The sampler's draws at Moshi's shapes, the kernel of `shaders/sample.wgsl` against the
//! four-round radix select (`shaders/sample_radix8.wgsl`, which the plans use up to 4096
//! logits, where it is the faster): the text draw (32000 logits, top-k 25 at temperature 0.7,
//! Moshi's defaults) and an audio draw (2048 logits, top-k 250 at 0.8), each also greedy,
//! and on logits all equal (the slow path: every logit ties at the threshold).
//!
//! Per row it prints the GPU time per dispatch of a pass of 30 dispatches (each drawing
//! from its own logit vector into its own slot of one token buffer, so a barrier separates
//! them, as in a plan), the median of several passes timed with timestamp queries, in us;
//! and whether both kernels drew the same 30 tokens.
//!
//! `cargo run --release --example sample_bench`

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod common;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    common::run_or_exit("sample_bench", native::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use crate::common::{self, median, Lcg};
    use inferencelayer::gpu::{FrameParams, GpuContext, Readback, KERNELS};
    use inferencelayer::Result;

    /// Passes per timing; the first is dropped (warm-up), the median of the rest reported.
    const REPS: usize = 9;
    /// Dispatches in one timed pass.
    const IN_PASS: usize = 30;

    /// A uniform draw in (0, 1).
    fn unit(rng: &mut Lcg) -> f32 {
        ((rng.next() >> 8) as f32 + 0.5) / (1u32 << 24) as f32
    }

    /// An LM head's spread: normal, sd 3, a few tokens 8 higher.
    fn logit(rng: &mut Lcg) -> f32 {
        let (a, b) = (unit(rng), unit(rng));
        let z = (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos();
        z * 3.0 + if rng.next() % 97 == 0 { 8.0 } else { 0.0 }
    }

    /// Per-dispatch ms of `groups` (IN_PASS of them) in one pass, median of REPS - 1 passes.
    async fn time(ctx: &GpuContext, pipeline: &wgpu::ComputePipeline, groups: &[wgpu::BindGroup]) -> Result<f64> {
        let ms = common::time_passes(ctx, REPS, |enc, set, q| {
            let mut pass = common::timed_pass(enc, set, q);
            pass.set_pipeline(pipeline);
            for g in groups {
                pass.set_bind_group(0, g, &[]);
                pass.dispatch_workgroups(1, 1, 1);
            }
        })
        .await?;
        Ok(median(ms[1..].iter().map(|t| t / groups.len() as f64).collect()))
    }

    pub async fn run() -> Result<()> {
        let ctx = common::context().await?;
        if !common::has_timestamps(&ctx) {
            return Ok(());
        }
        let source = |name: &str| KERNELS.iter().find(|k| k.name == name).expect("a kernel of the table").source;
        let kernels = [("radix8", common::pipeline(&ctx, "sample_radix8", source("sample_radix8"))), ("sample", common::pipeline(&ctx, "sample", source("sample")))];
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams { pos: 17, ..Default::default() }));
        let tokens = ctx.zeros("tokens", IN_PASS)?;
        let (unused, unused_out) = (ctx.zeros("unused", 4)?, ctx.zeros("unused out", 4)?);
        let rb = Readback::new(&ctx, (4 * IN_PASS) as u64);
        let mut rng = Lcg(0x3e1f_0c55);
        println!("per dispatch of {IN_PASS} in one pass (a barrier between dispatches), median of {} passes", REPS - 1);
        println!("{:<8}{:>7}{:>7}{:>7}  {:<6}{:>12}{:>12}{:>8}  tokens", "draw", "n", "top_k", "temp", "logits", "radix8 us", "sample us", "ratio");
        let rows = [
            ("text", 32000usize, 25usize, 0.7f32, false),
            ("text", 32000, 0, 0.0, false),
            ("text", 32000, 25, 0.7, true),
            ("audio", 2048, 250, 0.8, false),
            ("audio", 2048, 0, 0.0, false),
            ("audio", 2048, 250, 0.8, true),
        ];
        for (name, n, top_k, temperature, flat) in rows {
            let all: Vec<f32> = (0..IN_PASS * n).map(|_| if flat { 1.5 } else { logit(&mut rng) }).collect();
            let logits = ctx.storage_f32("logits", &all)?;
            let greedy = temperature <= 0.0;
            let inv_temp = if greedy { 0.0f32 } else { 1.0 / temperature };
            let mut times = Vec::new();
            let mut drawn = Vec::new();
            for (_, p) in &kernels {
                let layout = p.get_bind_group_layout(0);
                let groups: Vec<wgpu::BindGroup> = (0..IN_PASS)
                    .map(|d| {
                        // (no embedding added: emb_dim 0)
                        let words = [n as u32, top_k as u32, (d * n) as u32, d as u32, greedy as u32, inv_temp.to_bits(), 42, 1 + d as u32 % 9, 0, 0, 0, 0];
                        let params = ctx.uniform("params", bytemuck::cast_slice(&words));
                        let bufs = [&logits, &tokens, &params, &frame, &unused, &unused_out];
                        let entries: Vec<wgpu::BindGroupEntry> =
                            bufs.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() }).collect();
                        ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries })
                    })
                    .collect();
                times.push(time(&ctx, p, &groups).await?);
                let mut enc = ctx.device.create_command_encoder(&Default::default());
                rb.copy(&mut enc, &tokens);
                ctx.queue.submit([enc.finish()]);
                drawn.push(bytemuck::pod_collect_to_vec::<u8, i32>(&rb.read(&ctx).await?));
            }
            println!(
                "{:<8}{:>7}{:>7}{:>7}  {:<6}{:>12.1}{:>12.1}{:>8.1}  {}",
                name,
                n,
                if greedy { "-".to_string() } else { top_k.to_string() },
                if greedy { "greedy".to_string() } else { temperature.to_string() },
                if flat { "equal" } else { "lm" },
                1e3 * times[0],
                1e3 * times[1],
                times[0] / times[1],
                if drawn[0] == drawn[1] { "same" } else { "DIFFER" }
            );
        }
        ctx.take_error()
    }
}
