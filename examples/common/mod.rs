//! What the benchmark examples share: the `main` wrapper, the context with its adapter line
//! and timestamp check, passes timed with timestamp queries, the median of the timings, a
//! seeded generator of inputs and the difference of an output from a reference. Each
//! example takes it with `mod common;` (cargo does not build `examples/common/` as an
//! example of its own).

// Each example compiles this module apart and uses only part of it.
#![allow(dead_code)]

use std::fmt::Display;
use std::future::Future;

use inferencelayer::gpu::{GpuContext, Readback};
use inferencelayer::Result;

/// Runs an example's `run` to its end; an error is printed as `name: error` and the process
/// exits with status 1.
pub fn run_or_exit<E: Display>(name: &str, run: impl Future<Output = std::result::Result<(), E>>) {
    if let Err(e) = pollster::block_on(run) {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}

/// A GPU context on the default adapter, printed as `adapter ...`.
pub async fn context() -> Result<GpuContext> {
    let ctx = GpuContext::new().await?;
    println!("adapter {}", ctx.info);
    Ok(ctx)
}

/// Whether the adapter has timestamp queries; without them prints that there is nothing to
/// time.
pub fn has_timestamps(ctx: &GpuContext) -> bool {
    if !ctx.info.timestamps {
        println!("no timestamp queries: nothing to time");
    }
    ctx.info.timestamps
}

/// The median of `v` (of an even count, the upper of the middle two).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A compute pass that writes timestamp `q` of `set` at its start and `q + 1` at its end.
pub fn timed_pass<'e>(enc: &'e mut wgpu::CommandEncoder, set: &wgpu::QuerySet, q: u32) -> wgpu::ComputePass<'e> {
    enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: None,
        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: Some(q),
            end_of_pass_write_index: Some(q + 1),
        }),
    })
}

/// GPU ms of each of `reps` recordings, all in one submit: `record` gets the encoder, the
/// query set and the timestamp its recording starts with (it ends with the next one, as a
/// [`timed_pass`] writes them).
pub async fn time_passes(ctx: &GpuContext, reps: usize, mut record: impl FnMut(&mut wgpu::CommandEncoder, &wgpu::QuerySet, u32)) -> Result<Vec<f64>> {
    let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor { label: None, ty: wgpu::QueryType::Timestamp, count: 2 * reps as u32 });
    let bytes = 16 * reps as u64;
    let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: bytes,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let rb = Readback::new(ctx, bytes);
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    for j in 0..reps {
        record(&mut enc, &set, 2 * j as u32);
    }
    enc.resolve_query_set(&set, 0..2 * reps as u32, &resolved, 0);
    rb.copy(&mut enc, &resolved);
    ctx.queue.submit([enc.finish()]);
    let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&rb.read(ctx).await?);
    let period = ctx.queue.get_timestamp_period() as f64 * 1e-6;
    Ok(ticks.chunks_exact(2).map(|t| t[1].saturating_sub(t[0]) as f64 * period).collect())
}

/// A compute pipeline of `source`'s `main`, its module and pipeline both labelled `label`.
pub fn pipeline(ctx: &GpuContext, label: &str, source: &str) -> wgpu::ComputePipeline {
    let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(label), source: wgpu::ShaderSource::Wgsl(source.into()) });
    ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// The largest difference of `got` from `reference`, relative to the reference's largest
/// magnitude; the first output becomes the reference (and differs by 0).
pub fn diff(reference: &mut Option<Vec<f32>>, got: Vec<f32>) -> f32 {
    match reference {
        None => {
            *reference = Some(got);
            0.0
        }
        Some(r) => {
            let top = r.iter().fold(0f32, |m, v| m.max(v.abs()));
            r.iter().zip(&got).fold(0f32, |m, (a, g)| m.max((a - g).abs())) / top
        }
    }
}

/// A seeded linear congruential generator (Knuth's MMIX constants) for the inputs, so that
/// every run times the same data.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 32 bits.
    pub fn next(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 32) as u32
    }

    /// `n` values uniform in [-1, 1).
    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (self.next() >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0).collect()
    }
}
