//! Any bytes, as a safetensors file pushed in chunks: the reader refuses or loads them, and
//! never panics, loops or allocates past its limits. The first byte picks the chunk size
//! and whether tensors load as f32 or Q8_0 (parts cut to a 1 MiB binding, so a header that
//! claims a huge tensor cannot make the target allocate it).
#![no_main]

use inferencelayer::weights::stream::{ByteSink, CheckpointReader, Kind, Limits, Loaded, Loader, Plan, TensorEntry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, file)) = data.split_first() else { return };
    // never the GGUF path: that is gguf_header's
    if file.starts_with(b"GGUF") {
        return;
    }
    let kind = if mode & 1 == 0 { Kind::F32 } else { Kind::Q8 };
    let chunk = 1 + (mode >> 1) as usize * 7;
    let total = (mode & 0x80 != 0).then_some(file.len() as u64);
    let limits = Limits { max_header: 1 << 16 };
    let mut r = CheckpointReader::new(
        total,
        limits,
        Loader::new(Plan::take_all(kind, 1 << 20), |_: &TensorEntry, _: Loaded| Ok(())),
    );
    for c in file.chunks(chunk) {
        if r.push(c).is_err() {
            return;
        }
    }
    let _ = r.finish();
});
