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
fn main() {
    if let Err(e) = pollster::block_on(native::run()) {
        eprintln!("sample_bench: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use inferencelayer::gpu::{FrameParams, GpuContext, Readback, KERNELS};
    use inferencelayer::Result;

    /// Passes per timing; the first is dropped (warm-up), the median of the rest reported.
    const REPS: usize = 9;
    /// Dispatches in one timed pass.
    const IN_PASS: usize = 30;

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 32) as u32
        }
        fn unit(&mut self) -> f32 {
            ((self.next() >> 8) as f32 + 0.5) / (1u32 << 24) as f32
        }
        /// An LM head's spread: normal, sd 3, a few tokens 8 higher.
        fn logit(&mut self) -> f32 {
            let (a, b) = (self.unit(), self.unit());
            let z = (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos();
            z * 3.0 + if self.next() % 97 == 0 { 8.0 } else { 0.0 }
        }
    }

    fn pipeline(ctx: &GpuContext, name: &str, source: &str) -> wgpu::ComputePipeline {
        let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(source.into()) });
        ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        })
    }

    /// Per-dispatch ms of `groups` (IN_PASS of them) in one pass, median of REPS - 1 passes.
    async fn time(ctx: &GpuContext, pipeline: &wgpu::ComputePipeline, groups: &[wgpu::BindGroup]) -> Result<f64> {
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor { label: None, ty: wgpu::QueryType::Timestamp, count: 2 * REPS as u32 });
        let bytes = 16 * REPS as u64;
        let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let rb = Readback::new(ctx, bytes);
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        for j in 0..REPS as u32 {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &set,
                    beginning_of_pass_write_index: Some(2 * j),
                    end_of_pass_write_index: Some(2 * j + 1),
                }),
            });
            pass.set_pipeline(pipeline);
            for g in groups {
                pass.set_bind_group(0, g, &[]);
                pass.dispatch_workgroups(1, 1, 1);
            }
        }
        enc.resolve_query_set(&set, 0..2 * REPS as u32, &resolved, 0);
        rb.copy(&mut enc, &resolved);
        ctx.queue.submit([enc.finish()]);
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&rb.read(ctx).await?);
        let period = ctx.queue.get_timestamp_period() as f64 * 1e-6;
        let ms: Vec<f64> = ticks.chunks_exact(2).map(|t| t[1].saturating_sub(t[0]) as f64 * period / groups.len() as f64).collect();
        Ok(median(ms[1..].to_vec()))
    }

    pub async fn run() -> Result<()> {
        let ctx = GpuContext::new().await?;
        println!("adapter {}", ctx.info);
        if !ctx.info.timestamps {
            println!("no timestamp queries: nothing to time");
            return Ok(());
        }
        let source = |name: &str| KERNELS.iter().find(|k| k.name == name).expect("a kernel of the table").source;
        let kernels = [("radix8", pipeline(&ctx, "sample_radix8", source("sample_radix8"))), ("sample", pipeline(&ctx, "sample", source("sample")))];
        let frame = ctx.uniform("frame", bytemuck::bytes_of(&FrameParams { pos: 17, ..Default::default() }));
        let tokens = ctx.zeros("tokens", IN_PASS)?;
        let (unused, unused_out) = (ctx.zeros("unused", 4)?, ctx.zeros("unused out", 4)?);
        let rb = Readback::new(&ctx, (4 * IN_PASS) as u64);
        let mut rng = Lcg(0x3e1f_0c55);
        println!("per dispatch of {IN_PASS} in one pass (a barrier between dispatches), median of {} passes", REPS - 1);
        println!("{:<8}{:>7}{:>7}{:>7}  {:<6}{:>12}{:>12}{:>8}  {}", "draw", "n", "top_k", "temp", "logits", "radix8 us", "sample us", "ratio", "tokens");
        let rows = [
            ("text", 32000usize, 25usize, 0.7f32, false),
            ("text", 32000, 0, 0.0, false),
            ("text", 32000, 25, 0.7, true),
            ("audio", 2048, 250, 0.8, false),
            ("audio", 2048, 0, 0.0, false),
            ("audio", 2048, 250, 0.8, true),
        ];
        for (name, n, top_k, temperature, flat) in rows {
            let all: Vec<f32> = (0..IN_PASS * n).map(|_| if flat { 1.5 } else { rng.logit() }).collect();
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
