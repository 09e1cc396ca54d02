//! Lifecycle: load, run and dispose ten times in one process. On one device, the GPU
//! memory wgpu's allocator reports returns to its baseline after every cycle; with a new
//! instance, adapter and device per cycle (what a reload does), the Rust heap returns to the
//! level of the first cycle's end every time, and the process's resident memory stops
//! growing. The plans run the f32 Q8_0 kernel here: lavapipe keeps part of the memory it
//! compiled the i8 kernel's pipeline with on every new device (+20 to 27 MiB at a few
//! cycles, then about 2 MiB a device, our heap and GPU memory flat; with the f32 kernel the
//! resident memory stays within 6 MiB over ten devices), which would hide a leak of ours.
//! `tests/q8_linear.rs` and the parity tests cover the i8 kernel.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use std::rc::Rc;

use inferencelayer::heap;
use inferencelayer::GpuContext;

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

const CYCLES: usize = 10;
const FRAMES: usize = 4;

/// Live GPU memory: wgpu's allocator report (bytes, allocations), after letting the device
/// finish and free what was dropped.
fn gpu_live(ctx: &GpuContext) -> Option<(u64, usize)> {
    ctx.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    ctx.device.generate_allocator_report().map(|r| (r.total_allocated_bytes, r.allocations.len()))
}

/// Resident set size of this process, in bytes (Linux).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

async fn cycle(m: &common::small::Small, ctx: &Rc<GpuContext>) -> Vec<i32> {
    let mut s = m.session(ctx).await.expect("session");
    let mut texts = Vec::new();
    for i in 0..FRAMES {
        if let Some(f) = s.step(&m.frame(i)).await.expect("frame") {
            texts.push(f.text);
            assert_eq!(f.pcm.len(), 1920);
        }
    }
    texts
}

#[test]
fn ten_loads_runs_and_disposals_return_gpu_memory_and_heap_to_their_baseline() {
    pollster::block_on(async {
        // Read by every PlanBuilder::new; this binary has one test, so no thread races it.
        std::env::set_var("INFERENCELAYER_Q8_DOT", "f32");
        let t0 = std::time::Instant::now();
        let m = common::small::small(None);

        // One device: GPU memory per cycle.
        let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
        eprintln!("adapter: {}", ctx.info);
        let base = gpu_live(&ctx);
        let heap0 = heap::live();
        let mut first = None;
        let mut heap_cycle0 = 0;
        for c in 0..CYCLES {
            let texts = cycle(&m, &ctx).await;
            assert_eq!(first.get_or_insert_with(|| texts.clone()), &texts, "cycle {c} gives other frames");
            let after = gpu_live(&ctx);
            let h = heap::live();
            eprintln!("{:.1} s: one device, cycle {c}: GPU (bytes, allocations) {after:?}, before the first load {base:?}; heap {h} B, before the first load {heap0} B", t0.elapsed().as_secs_f64());
            if let (Some(a), Some(b)) = (after, base) {
                // wgpu's own small buffers (zero-init staging) may go, never stay
                assert!(a.0 <= b.0 && a.1 <= b.1, "cycle {c}: GPU memory {a:?} did not return to its baseline {b:?}");
            }
            // The context keeps the compiled pipelines: the first cycle fills that cache.
            if c == 0 {
                heap_cycle0 = h;
            } else {
                // wgpu's trackers keep vectors at their high-water mark: a few pages at most.
                // One of them may double once after the first cycle (lavapipe, the fused Mimi
                // plans: +81 KiB once, at cycle 3 or 6 from run to run, then flat over 26 more
                // cycles), and with each frame recorded during the frame before two frames'
                // command buffers are alive at once, which raises those marks by some 40 KiB
                // more over the first cycles (then flat); a leak grows every cycle.
                assert!(h <= heap_cycle0 + (256 << 10), "cycle {c}: the heap grew from {heap_cycle0} B to {h} B");
            }
        }
        assert!(base.is_some() || ctx.info.backend != "Vulkan", "wgpu's Vulkan backend reports its allocator");
        drop(ctx);

        // A new device per cycle: the heap and the resident memory.
        let mut heap_first = 0;
        let mut rss_first = 0;
        for c in 0..CYCLES {
            let ctx = Rc::new(GpuContext::new().await.expect("adapter"));
            let texts = cycle(&m, &ctx).await;
            assert_eq!(first.as_ref(), Some(&texts), "cycle {c} on a new device gives other frames");
            drop(ctx);
            let (h, r) = (heap::live(), rss());
            eprintln!("{:.1} s: new device, cycle {c}: heap {h} B, resident {:.1} MiB", t0.elapsed().as_secs_f64(), r as f64 / (1 << 20) as f64);
            if c == 0 {
                heap_first = h;
                rss_first = r;
            } else {
                assert!(h <= heap_first, "cycle {c}: the heap grew from {heap_first} B to {h} B");
                assert!(r <= rss_first + (16 << 20), "cycle {c}: resident memory grew from {rss_first} B to {r} B");
            }
        }
    });
}
