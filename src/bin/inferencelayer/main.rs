//! `inferencelayer`: the native command-line tool (encode, decode, roundtrip, bench,
//! synthetic-checkpoint, converse, synthetic-lm, load-lm, bench-lm). See `cli.rs`; on wasm32 there is no command line.

#[cfg(not(target_arch = "wasm32"))]
mod cli;

/// The system allocator, counting live heap bytes and their peak (for `load-lm`'s report).
#[cfg(not(target_arch = "wasm32"))]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub struct Counting;
    pub static LIVE: AtomicUsize = AtomicUsize::new(0);
    pub static PEAK: AtomicUsize = AtomicUsize::new(0);

    fn grew(n: usize) {
        let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            let p = unsafe { System.alloc(l) };
            if !p.is_null() {
                grew(l.size());
            }
            p
        }
        unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
            let p = unsafe { System.alloc_zeroed(l) };
            if !p.is_null() {
                grew(l.size());
            }
            p
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            unsafe { System.dealloc(p, l) };
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            let q = unsafe { System.realloc(p, l, new) };
            if !q.is_null() {
                if new > l.size() {
                    grew(new - l.size());
                } else {
                    LIVE.fetch_sub(l.size() - new, Ordering::Relaxed);
                }
            }
            q
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;
}

/// Start a new heap peak from the live bytes now; returns them.
#[cfg(not(target_arch = "wasm32"))]
fn heap_peak_reset() -> u64 {
    use std::sync::atomic::Ordering;
    let live = counting::LIVE.load(Ordering::Relaxed);
    counting::PEAK.store(live, Ordering::Relaxed);
    live as u64
}

/// The heap peak since [`heap_peak_reset`], in bytes.
#[cfg(not(target_arch = "wasm32"))]
fn heap_peak() -> u64 {
    counting::PEAK.load(std::sync::atomic::Ordering::Relaxed) as u64
}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
