//! Where the Q8_0 matrix-vector kernel's time goes, at Moshi 7B's linear shapes: variants of
//! one kernel (`shaders/q8_study.wgsl`, specialised by override constants) that leave a
//! stage out or do it another way, timed side by side with timestamp queries:
//! - `decode`: `shift` (i8 -> f32 by shifts and a conversion, `q8_blocks.wgsl`'s `i8x4` as `q8_matvec.wgsl` uses it), `exp`
//!   (the exponent trick), `loads` (the weight words loaded and combined, not decoded),
//!   `dot4` (`dot4I8Packed` against inputs packed as i8), `none` (no weight loads);
//! - `lanes` per row group of 4 rows and `unroll` (16-weight units per lane per iteration).
//!
//! Per variant it prints the GPU time per dispatch of a pass of 30 with a barrier between
//! dispatches (`bar`: each writes the same output, as in a plan) and without (`free`:
//! each writes its own), in us and GB/s of weights and scales, and for `shift` and `exp`
//! the largest difference from an f64 product on the CPU, relative to the largest output.
//! Weight copies are cycled (128 MiB or more) so no dispatch finds its weights in the L2.
//!
//! `cargo run --release --example q8_study [-- SHAPES]` (`SHAPES`: a comma-separated subset
//! of the names printed, default all).

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod common;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    common::run_or_exit("q8_study", native::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use crate::common::{self, median, Lcg};
    use inferencelayer::moshi::LmConfig;
    use inferencelayer::weights::q8::Q8Tensor;
    use std::collections::{hash_map::Entry, HashMap};
    use wgpu::util::DeviceExt;

    const PLAIN: &str = concat!(include_str!("../shaders/q8_blocks.wgsl"), include_str!("../shaders/q8_study.wgsl"));
    const REPS: usize = 7;
    const IN_PASS: usize = 30;

    type Res<T> = std::result::Result<T, String>;

    fn f16_to_f32(h: u16) -> f64 {
        let (e, m) = (((h >> 10) & 0x1f) as i32, (h & 0x3ff) as f64);
        let v = if e == 0 { m * 2f64.powi(-24) } else { (1.0 + m / 1024.0) * 2f64.powi(e - 15) };
        if h & 0x8000 != 0 {
            -v
        } else {
            v
        }
    }

    struct Gpu {
        device: wgpu::Device,
        queue: wgpu::Queue,
    }

    impl Gpu {
        fn storage(&self, data: &[u8]) -> wgpu::Buffer {
            self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: data,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            })
        }

        async fn read(&self, buf: &wgpu::Buffer, bytes: u64) -> Res<Vec<u8>> {
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = self.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(buf, 0, &staging, 0, bytes);
            self.queue.submit([enc.finish()]);
            let (tx, rx) = std::sync::mpsc::channel();
            staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| e.to_string())?;
            rx.recv().map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
            let out = staging.slice(..).get_mapped_range().map_err(|e| e.to_string())?.to_vec();
            Ok(out)
        }
    }

    #[derive(Clone, Copy)]
    struct Variant {
        decode: u32,
        lanes: u32,
        unroll: u32,
    }

    const DECODES: [&str; 5] = ["shift", "exp", "loads", "dot4", "none"];

    /// Per-dispatch ms of `IN_PASS` dispatches in one pass, `REPS` passes, median of all
    /// but the first; each dispatch binds one of `groups`.
    async fn time(gpu: &Gpu, pipeline: &wgpu::ComputePipeline, groups: &[wgpu::BindGroup], grid: [u32; 2]) -> Res<f64> {
        let set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor { label: None, ty: wgpu::QueryType::Timestamp, count: 2 * REPS as u32 });
        let resolved = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16 * REPS as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        for j in 0..REPS as u32 {
            let mut pass = common::timed_pass(&mut enc, &set, 2 * j);
            pass.set_pipeline(pipeline);
            for i in 0..IN_PASS {
                pass.set_bind_group(0, &groups[(j as usize * IN_PASS + i) % groups.len()], &[]);
                pass.dispatch_workgroups(grid[0], grid[1], 1);
            }
        }
        enc.resolve_query_set(&set, 0..2 * REPS as u32, &resolved, 0);
        gpu.queue.submit([enc.finish()]);
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&gpu.read(&resolved, 16 * REPS as u64).await?);
        let period = gpu.queue.get_timestamp_period() as f64 * 1e-6;
        let ms: Vec<f64> = ticks.chunks_exact(2).map(|t| t[1].saturating_sub(t[0]) as f64 * period / IN_PASS as f64).collect();
        Ok(median(ms[1..].to_vec()))
    }

    pub async fn run() -> Res<()> {
        let only: Option<Vec<String>> = std::env::args().nth(1).map(|a| a.split(',').map(str::to_string).collect());
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() })
            .await
            .map_err(|e| e.to_string())?;
        let info = adapter.get_info();
        println!("adapter {} ({:?}, {:?}, driver {} {})", info.name, info.backend, info.device_type, info.driver, info.driver_info);
        let want = wgpu::Features::TIMESTAMP_QUERY;
        let features = adapter.features() & want;
        if !features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            println!("no timestamp queries: nothing to time");
            return Ok(());
        }
        let mut limits = wgpu::Limits::default();
        let al = adapter.limits();
        limits.max_storage_buffer_binding_size = al.max_storage_buffer_binding_size;
        limits.max_buffer_size = al.max_buffer_size;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor { required_features: features, required_limits: limits, ..Default::default() })
            .await
            .map_err(|e| e.to_string())?;
        let gpu = Gpu { device, queue };
        let module = gpu.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some("q8_study"), source: wgpu::ShaderSource::Wgsl(PLAIN.into()) });

        let c = LmConfig::default();
        let (d, h, dd, dh) = (c.dim, c.hidden(), c.depformer_dim, c.depformer_hidden());
        let shapes = [
            ("in_proj", 3 * d, d),
            ("out_proj", d, d),
            ("linear_in", 2 * h, d),
            ("linear_out", d, h),
            ("text_linear", c.text_card, d),
            ("dep_in_proj", 3 * dd, dd),
            ("dep_out_proj", dd, dd),
            ("dep_linear_in", 2 * dh, dd),
            ("dep_linear_out", dd, dh),
            ("depformer_in", dd, d),
            ("dep_linears", c.card, dd),
        ];
        let mut rng = Lcg(0x51ed_2701);
        let mut pipelines: HashMap<(u32, u32, u32), wgpu::ComputePipeline> = HashMap::new();
        println!("per dispatch of {IN_PASS} in one pass, median of {} passes; GB/s of weights + scales", REPS - 1);
        println!("{:<15}{:>14} {:<6}{:>6}{:>7}{:>7}{:>9}{:>7}{:>9}{:>7}{:>10}", "shape", "[n, k]", "decode", "lanes", "unroll", "groups", "bar us", "GB/s", "free us", "GB/s", "diff");
        for &(name, n, k) in &shapes {
            if only.as_ref().is_some_and(|o| !o.iter().any(|s| s == name)) {
                continue;
            }
            let (qb, sb) = Q8Tensor::buffer_sizes(n, k);
            let copies = ((128usize << 20) / (qb + sb) as usize).clamp(3, 64);
            let quants: Vec<u8> = (0..qb / 4).flat_map(|_| rng.next().to_le_bytes()).collect();
            let scales: Vec<u8> = (0..sb / 2).flat_map(|_| (0x3800u16 | (rng.next() as u16 & 0x3ff)).to_le_bytes()).collect();
            let xs: Vec<f32> = rng.f32s(k);
            // the f64 oracle of y = W x
            let oracle: Vec<f64> = (0..n)
                .map(|i| {
                    (0..k)
                        .map(|j| {
                            let q = quants[i * k + j] as i8 as f64;
                            let b = i * (k / 32) + j / 32;
                            q * f16_to_f32(u16::from_le_bytes([scales[2 * b], scales[2 * b + 1]])) * xs[j] as f64
                        })
                        .sum()
                })
                .collect();
            let top = oracle.iter().fold(0f64, |m, v| m.max(v.abs()));
            let w: Vec<(wgpu::Buffer, wgpu::Buffer)> = (0..copies).map(|_| (gpu.storage(&quants), gpu.storage(&scales))).collect();
            let x = gpu.storage(bytemuck::cast_slice(&xs));
            let ys: Vec<wgpu::Buffer> = (0..IN_PASS).map(|_| gpu.storage(&vec![0u8; 4 * n])).collect();
            let params = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: None,
                contents: bytemuck::cast_slice(&[n as u32, k as u32, 0, 0]),
                usage: wgpu::BufferUsages::UNIFORM,
            });
            let bytes = (qb + sb) as f64;
            let nu = k / 16;
            let mut variants = Vec::new();
            for lanes in [16u32, 32, 64, 128, 256] {
                if lanes as usize > nu {
                    continue;
                }
                for unroll in [1u32, 2, 4] {
                    if (lanes * unroll) as usize > nu {
                        continue;
                    }
                    for decode in 0..5u32 {
                        variants.push(Variant { decode, lanes, unroll });
                    }
                }
            }
            for v in variants {
                let key = (v.decode, v.lanes, v.unroll);
                if let Entry::Vacant(e) = pipelines.entry(key) {
                    let constants = [("DECODE", v.decode as f64), ("UNROLL", v.unroll as f64), ("LANES", v.lanes as f64)];
                    let pipeline = gpu.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: None,
                        layout: None,
                        module: &module,
                        entry_point: Some("main"),
                        compilation_options: wgpu::PipelineCompilationOptions { constants: &constants, ..Default::default() },
                        cache: None,
                    });
                    e.insert(pipeline);
                }
                let pipeline = &pipelines[&key];
                let layout = pipeline.get_bind_group_layout(0);
                let group = |wi: usize, y: &wgpu::Buffer| {
                    fn e(i: u32, b: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
                        wgpu::BindGroupEntry { binding: i, resource: b.as_entire_binding() }
                    }
                    gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &layout,
                        entries: &[e(0, &w[wi].0), e(1, &w[wi].1), e(2, &x), e(3, &x), e(4, y), e(5, &params)],
                    })
                };
                let bar: Vec<wgpu::BindGroup> = (0..copies).map(|i| group(i, &ys[0])).collect();
                let free: Vec<wgpu::BindGroup> = (0..copies.max(IN_PASS)).map(|i| group(i % copies, &ys[i % IN_PASS])).collect();
                let rows_per_group = (256 / v.lanes) as usize * 4;
                let groups = n.div_ceil(rows_per_group) as u32;
                let grid = if groups <= 65535 { [groups, 1] } else { [65535, groups.div_ceil(65535)] };
                let t_bar = time(&gpu, pipeline, &bar, grid).await?;
                let t_free = time(&gpu, pipeline, &free, grid).await?;
                let diff = if v.decode <= 1 {
                    let got: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu.read(&ys[0], 4 * n as u64).await?);
                    let e = got.iter().zip(&oracle).fold(0f64, |m, (g, o)| m.max((*g as f64 - o).abs()));
                    format!("{:.1e}", e / top)
                } else {
                    "-".to_string()
                };
                let gbs = |ms: f64| bytes / (ms * 1e-3) / 1e9;
                println!(
                    "{:<15}{:>14} {:<6}{:>6}{:>7}{:>7}{:>9.2}{:>7.0}{:>9.2}{:>7.0}{:>10}",
                    name,
                    format!("[{n}, {k}]"),
                    DECODES[v.decode as usize],
                    v.lanes,
                    v.unroll,
                    groups,
                    1e3 * t_bar,
                    gbs(t_bar),
                    1e3 * t_free,
                    gbs(t_free),
                    diff
                );
            }
        }
        Ok(())
    }
}
