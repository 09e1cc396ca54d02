//! Where the device's memory bandwidth goes: times copy and read kernels of several shapes
//! (`shaders/bandwidth.wgsl`: scalar and 16-byte loads, one or several per thread, a
//! grid-stride loop; with and without naga's bounds checks), `copy_buffer_to_buffer`, an
//! arithmetic probe over a growing number of workgroups (how many run at once, and at what
//! clock), and the Q8_0 matrix-vector kernel at Moshi 7B's shapes, each with timestamp
//! queries, the median of several runs, in GB/s (bytes read plus written). Then a sustained
//! copy of a few seconds, timed on the CPU, to read the clocks against.
//!
//! `cargo run --release --example bandwidth [-- MIB [VARIANT.wgsl ...]]` (buffer size,
//! default 512 MiB; each VARIANT a version of `shaders/q8_matvec.wgsl` with the same
//! bindings and parameters, which the example puts after the kernel's preludes
//! `q8_blocks.wgsl` and `q8_linear.wgsl` as the kernel table does, timed beside it at the
//! same shapes and inputs). The queue
//! follows `INFERENCELAYER_VK_QUEUE` as every context does.

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod common;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    common::run_or_exit("bandwidth", native::run());
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::time::{Instant, SystemTime, UNIX_EPOCH};

    use crate::common::{self, median, time_passes, timed_pass};
    use inferencelayer::gpu::{FrameParams, GpuContext, PlanBuilder};
    use inferencelayer::Result;

    const SOURCE: &str = include_str!("../shaders/bandwidth.wgsl");
    const REPS: usize = 9;

    fn unix() -> f64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
    }

    fn grid(groups: usize) -> [u32; 2] {
        let x = groups.min(32768);
        [x as u32, groups.div_ceil(x).max(1) as u32]
    }

    struct Probe<'a> {
        ctx: &'a GpuContext,
        checked: wgpu::ShaderModule,
        unchecked: wgpu::ShaderModule,
    }

    impl Probe<'_> {
        fn pipeline(&self, entry: &str, trusted: bool) -> wgpu::ComputePipeline {
            self.ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: if trusted { &self.unchecked } else { &self.checked },
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        }

        fn bind(&self, pl: &wgpu::ComputePipeline, bufs: &[(u32, &wgpu::Buffer)]) -> wgpu::BindGroup {
            let entries: Vec<wgpu::BindGroupEntry> = bufs
                .iter()
                .map(|(i, b)| wgpu::BindGroupEntry { binding: *i, resource: b.as_entire_binding() })
                .collect();
            self.ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pl.get_bind_group_layout(0),
                entries: &entries,
            })
        }

        fn params(&self, n: usize, iters: u32) -> wgpu::Buffer {
            self.ctx.uniform("probe params", bytemuck::cast_slice(&[n as u32, iters, 0, 0]))
        }

        /// GPU ms of one dispatch of `pl` over `g` workgroups in a pass of its own, the
        /// median of `REPS - 1` runs.
        async fn dispatch(&self, pl: &wgpu::ComputePipeline, bg: &wgpu::BindGroup, g: [u32; 2]) -> Result<f64> {
            let ms = time_passes(self.ctx, REPS, |enc, set, q| {
                let mut pass = timed_pass(enc, set, q);
                pass.set_pipeline(pl);
                pass.set_bind_group(0, bg, &[]);
                pass.dispatch_workgroups(g[0], g[1], 1);
            })
            .await?;
            Ok(median(ms[1..].to_vec()))
        }
    }

    pub async fn run() -> Result<()> {
        let ctx = GpuContext::new().await?;
        println!("adapter {} queue {}", ctx.info, ctx.info.queue);
        if !common::has_timestamps(&ctx) {
            return Ok(());
        }
        let mib: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(512);
        let variants: Vec<String> = std::env::args().skip(2).filter(|a| a.ends_with(".wgsl")).collect();
        let bytes = (mib << 20).min(ctx.info.max_storage_binding as usize) & !1023;
        let words = bytes / 4;
        let vecs = bytes / 16;
        let checked = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("bandwidth"),
            source: wgpu::ShaderSource::Wgsl(SOURCE.into()),
        });
        // SAFETY: every probe indexes inside its buffers (each guards its index by p.n,
        // which is the buffers' length in its element type).
        let unchecked = unsafe {
            ctx.device.create_shader_module_trusted(
                wgpu::ShaderModuleDescriptor { label: Some("bandwidth trusted"), source: wgpu::ShaderSource::Wgsl(SOURCE.into()) },
                wgpu::ShaderRuntimeChecks::unchecked(),
            )
        };
        let pr = Probe { ctx: &ctx, checked, unchecked };
        let src = ctx.zeros("probe src", words)?;
        let dst = ctx.zeros("probe dst", words)?;
        let sink = ctx.zeros("probe sink", 1 << 22)?;
        let pv = pr.params(vecs, 0);
        let pf = pr.params(words, 0);
        let fill = pr.pipeline("fill_v4", false);
        let fill_with = |buf: &wgpu::Buffer, n: usize| -> Result<()> {
            let p = pr.params(n, 0);
            let bg = pr.bind(&fill, &[(4, buf), (6, &p)]);
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&fill);
                pass.set_bind_group(0, &bg, &[]);
                let g = grid(n.div_ceil(256));
                pass.dispatch_workgroups(g[0], g[1], 1);
            }
            ctx.queue.submit([enc.finish()]);
            Ok(())
        };
        fill_with(&src, vecs)?;
        fill_with(&dst, vecs)?;
        ctx.read_f32(&dst, 1).await?;

        println!();
        println!("buffer {} MiB; GB/s counts bytes read plus written; median of {} runs", bytes >> 20, REPS - 1);
        println!("{:<34}{:>10}{:>10}", "variant", "ms", "GB/s");
        let report = |name: &str, ms: f64, moved: f64| {
            println!("{name:<34}{ms:>10.4}{:>10.0}", moved / (ms * 1e-3) / 1e9);
        };
        let copy_bytes = 2.0 * bytes as f64;
        for trusted in [false, true] {
            let tag = if trusted { " unchecked" } else { "" };
            for (entry, per_thread, scalar, wg) in [
                ("copy_f32_64", 1usize, true, 64usize),
                ("copy_f32_256", 1, true, 256),
                ("copy_v4", 1, false, 256),
                ("copy_v4x4", 4, false, 256),
            ] {
                let pl = pr.pipeline(entry, trusted);
                let bg = if scalar {
                    pr.bind(&pl, &[(0, &src), (1, &dst), (6, &pf)])
                } else {
                    pr.bind(&pl, &[(2, &src), (3, &dst), (6, &pv)])
                };
                let items = if scalar { words } else { vecs };
                let ms = pr.dispatch(&pl, &bg, grid(items.div_ceil(per_thread * wg))).await?;
                report(&format!("{entry}{tag}"), ms, copy_bytes);
            }
            let pl = pr.pipeline("copy_v4_stride", trusted);
            let bg = pr.bind(&pl, &[(2, &src), (3, &dst), (6, &pv)]);
            for groups in [132usize, 264, 528, 1056, 2112, 4224, 8448] {
                let ms = pr.dispatch(&pl, &bg, grid(groups)).await?;
                report(&format!("copy_v4_stride {groups} wg{tag}"), ms, copy_bytes);
            }
            for (entry, per_thread) in [("read_v4x4", 4usize), ("read_v4x8", 8)] {
                let pl = pr.pipeline(entry, trusted);
                let bg = pr.bind(&pl, &[(2, &src), (5, &sink), (6, &pv)]);
                let ms = pr.dispatch(&pl, &bg, grid(vecs.div_ceil(per_thread * 256))).await?;
                report(&format!("{entry} (read only){tag}"), ms, bytes as f64);
            }
        }
        // the copy between an empty pass that writes the start and one that writes the end
        let ms = time_passes(&ctx, REPS, |enc, set, q| {
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: set,
                    beginning_of_pass_write_index: Some(q),
                    end_of_pass_write_index: None,
                }),
            });
            enc.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes as u64);
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: set,
                    beginning_of_pass_write_index: None,
                    end_of_pass_write_index: Some(q + 1),
                }),
            });
        })
        .await?;
        report("copy_buffer_to_buffer", median(ms[1..].to_vec()), copy_bytes);

        // Dispatch cost: 200 dispatches in one pass between two timestamps.
        println!();
        println!("dispatch cost: 200 dispatches in one pass, us per dispatch");
        let pn = pr.params(0, 0);
        for (entry, groups) in [("nop", 1usize), ("nop", 132), ("nop_rw", 1), ("nop_rw", 132), ("nop_rw", 1056)] {
            let pl = pr.pipeline(entry, false);
            let bg = if entry == "nop" { pr.bind(&pl, &[(6, &pn)]) } else { pr.bind(&pl, &[(5, &sink), (6, &pn)]) };
            let ms = time_passes(&ctx, 3, |enc, set, q| {
                let mut pass = timed_pass(enc, set, q);
                pass.set_pipeline(&pl);
                pass.set_bind_group(0, &bg, &[]);
                for _ in 0..200 {
                    pass.dispatch_workgroups(groups as u32, 1, 1);
                }
            })
            .await?;
            println!("  {entry:<8} {groups:>5} workgroups {:>8.2}", 1e3 * median(ms[1..].to_vec()) / 200.0);
        }

        // Arithmetic: 8 chains x iters FMAs per thread, 256 threads per workgroup.
        let iters = 4096u32;
        let pi = pr.params(0, iters);
        let pl = pr.pipeline("fma_chains", false);
        let bg = pr.bind(&pl, &[(5, &sink), (6, &pi)]);
        println!();
        println!("fma_chains: 8 x {iters} dependent FMAs per thread, 256 threads per workgroup");
        println!("{:>10}{:>10}{:>12}{:>14}", "groups", "ms", "TFLOP/s", "us per wave");
        for groups in [1usize, 2, 4, 8, 16, 32, 66, 132, 264, 528, 1056, 2112, 4224] {
            let ms = pr.dispatch(&pl, &bg, grid(groups)).await?;
            let flops = 2.0 * 8.0 * iters as f64 * 256.0 * groups as f64;
            println!("{groups:>10}{ms:>10.4}{:>12.2}{:>14.1}", flops / (ms * 1e-3) / 1e12, 1e3 * ms);
        }

        // Three copies of Q8_0 weights (`qb` bytes of quants, `sb` of scales), filled.
        let q8_copies = |qb: u64, sb: u64| -> Result<Vec<(wgpu::Buffer, wgpu::Buffer)>> {
            let mut w = Vec::new();
            for c in 0..3 {
                let q = ctx.zeros(&format!("q8 quants {c}"), qb as usize / 4)?;
                let s = ctx.zeros(&format!("q8 scales {c}"), sb as usize / 4)?;
                fill_with(&q, qb as usize / 16)?;
                fill_with(&s, sb as usize / 16)?;
                w.push((q, s));
            }
            Ok(w)
        };

        // The Q8_0 matrix-vector kernel at Moshi 7B's temporal shapes, three weight copies
        // in turn so that no replay reads the last one's weights from the L2.
        println!();
        println!("q8_matvec (shaders/q8_matvec.wgsl, plain input, one row): weights + scales + input + output bytes");
        println!("{:<34}{:>10}{:>10}", "shape [n, k]", "us", "GB/s");
        let frame = ctx.uniform("probe frame", bytemuck::bytes_of(&FrameParams::default()));
        for (n, k) in [(22528usize, 4096usize), (12288, 4096), (4096, 11264), (4096, 4096), (2048, 1024)] {
            let (qb, sb) = inferencelayer::weights::q8::Q8Tensor::buffer_sizes(n, k);
            let w = q8_copies(qb, sb)?;
            let x = ctx.zeros("q8 x", k)?;
            fill_with(&x, k / 4)?;
            let y = ctx.zeros("q8 y", n)?;
            let mut b = PlanBuilder::new(&ctx, &frame)?;
            for i in 0..9 {
                let (q, s) = &w[i % 3];
                b.q8_linear(&format!("q8 {i}"), (q, s), (n, k), 1, (&x, 0), (&y, 0, n), false)?;
            }
            let (plan, _, _) = b.finish();
            let ms = plan.profile(&ctx).await?;
            let ms = median(ms[1..].to_vec());
            let moved = (qb + sb) as f64 + 4.0 * (k + n) as f64;
            println!("{:<34}{:>10.1}{:>10.0}", format!("[{n}, {k}]"), 1e3 * ms, moved / (ms * 1e-3) / 1e9);
        }

        // Versions of the Q8_0 kernel side by side: plain, RMSNorm-fused and SiLU-gated inputs.
        if !variants.is_empty() {
            println!();
            println!("q8_matvec versions, us per dispatch (GB/s of weights + scales)");
            let shapes = [(22528usize, 4096usize, 0u32), (22528, 4096, 2), (12288, 4096, 2), (4096, 11264, 1), (4096, 4096, 0), (2048, 1024, 0), (2048, 1024, 2)];
            let mut bufs = Vec::new();
            for &(n, k, input) in &shapes {
                let (qb, sb) = inferencelayer::weights::q8::Q8Tensor::buffer_sizes(n, k);
                let w = q8_copies(qb, sb)?;
                let x = ctx.zeros("q8 x", 2 * k)?;
                fill_with(&x, 2 * k / 4)?;
                let alpha = ctx.zeros("q8 alpha", k)?;
                fill_with(&alpha, k / 4)?;
                let y = ctx.zeros("q8 y", n)?;
                let norm_out = ctx.zeros("q8 norm_out", n + n / 4)?;
                let blocks = k / 32;
                let groups_of = |lanes: usize| n.div_ceil((256 / lanes) * 4);
                let mut lanes = 32;
                while lanes < 256 && 2 * lanes <= blocks.next_power_of_two() && groups_of(lanes) < 512 {
                    lanes *= 2;
                }
                let params: [u32; 12] = [n as u32, k as u32, 1, 0, 0, 0, n as u32, input, lanes as u32, 1e-8f32.to_bits(), 0, 0];
                let pb = ctx.uniform("q8 params", bytemuck::cast_slice(&params));
                bufs.push((w, x, alpha, y, pb, norm_out, grid(groups_of(lanes)), (qb + sb) as f64, lanes));
            }
            print!("{:<22}", "shape [n, k] input");
            for v in &variants {
                print!("{:>20}", std::path::Path::new(v).file_stem().and_then(|s| s.to_str()).unwrap_or("?"));
            }
            println!();
            let mut modules = Vec::new();
            for v in &variants {
                let src = std::fs::read_to_string(v).map_err(|e| inferencelayer::Error::Input(format!("{v}: {e}")))?;
                let src = format!("{}{}{src}", include_str!("../shaders/q8_blocks.wgsl"), include_str!("../shaders/q8_linear.wgsl"));
                modules.push(common::pipeline(&ctx, v, &src));
            }
            for (si, &(n, k, input)) in shapes.iter().enumerate() {
                let (w, x, alpha, y, pb, norm_out, g, wbytes, lanes) = &bufs[si];
                print!("{:<22}", format!("[{n}, {k}] {} l{lanes}", ["plain", "gated", "normed"][input as usize]));
                for pl in &modules {
                    let bgs: Vec<wgpu::BindGroup> = w
                        .iter()
                        .map(|(q, s)| pr.bind(pl, &[(0, q), (1, s), (2, x), (3, alpha), (4, y), (5, pb), (6, norm_out)]))
                        .collect();
                    let ms = time_passes(&ctx, REPS, |enc, set, qi| {
                        let mut pass = timed_pass(enc, set, qi);
                        pass.set_pipeline(pl);
                        pass.set_bind_group(0, &bgs[(qi as usize / 2) % 3], &[]);
                        pass.dispatch_workgroups(g[0], g[1], 1);
                    })
                    .await?;
                    let ms = median(ms[1..].to_vec());
                    print!("{:>12.1}{:>8.0}", 1e3 * ms, wbytes / (ms * 1e-3) / 1e9);
                }
                println!();
            }
        }

        // Sustained: copies back to back in one pass for about 3 s, on the CPU's clock, so
        // that `nvidia-smi` sampling alongside reads the clocks under load.
        let pl = pr.pipeline("copy_v4x4", false);
        let bg = pr.bind(&pl, &[(2, &src), (3, &dst), (6, &pv)]);
        let g = grid(vecs.div_ceil(4 * 256));
        let batch = 200;
        let t0 = Instant::now();
        let start = unix();
        let mut runs = 0usize;
        while t0.elapsed().as_secs_f64() < 3.0 {
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pl);
                pass.set_bind_group(0, &bg, &[]);
                for _ in 0..batch {
                    pass.dispatch_workgroups(g[0], g[1], 1);
                }
            }
            ctx.queue.submit([enc.finish()]);
            ctx.read_f32(&sink, 1).await?;
            runs += batch;
        }
        let secs = t0.elapsed().as_secs_f64();
        println!();
        println!(
            "sustained copy_v4x4: {runs} copies in {secs:.2} s, {:.0} GB/s (CPU clock), unix {start:.1} to {:.1}",
            runs as f64 * copy_bytes / secs / 1e9,
            unix()
        );
        ctx.take_error()
    }
}
