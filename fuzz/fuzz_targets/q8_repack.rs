//! Any bytes as the Q8_0 data of a GGUF tensor of `[rows, 32 * k]` (the shape from the first
//! bytes): loaded through the stream (in chunks, parts cut to a small binding) the repacked
//! parts equal repacking the whole tensor at once, and the f32 load equals dequantizing it.
//! Never a panic, for any scale bits (NaN and infinity included).
#![no_main]

use inferencelayer::weights::gguf::{self, Q8_0_BLOCK_BYTES};
use inferencelayer::weights::stream::{ByteSink, CheckpointReader, Kind, Limits, Loaded, Loader, Plan, TensorEntry};
use libfuzzer_sys::fuzz_target;

fn gstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A GGUF v3 file holding one Q8_0 tensor `w` of `[rows, cols]` with `data`.
fn gguf_file(rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    let mut f = b"GGUF".to_vec();
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&1u64.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    gstr(&mut f, "w");
    f.extend_from_slice(&2u32.to_le_bytes());
    f.extend_from_slice(&(cols as u64).to_le_bytes());
    f.extend_from_slice(&(rows as u64).to_le_bytes());
    f.extend_from_slice(&gguf::GGML_Q8_0.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.resize(f.len().next_multiple_of(32), 0);
    f.extend_from_slice(data);
    f
}

fn load(file: &[u8], kind: Kind, binding: u64, chunk: usize) -> Vec<Loaded> {
    let parts = std::cell::RefCell::new(Vec::new());
    let emit = |_: &TensorEntry, l: Loaded| {
        parts.borrow_mut().push(l);
        Ok(())
    };
    let mut r = CheckpointReader::new(
        Some(file.len() as u64),
        Limits::default(),
        Loader::new(Plan::take_all(kind, binding), emit),
    );
    for c in file.chunks(chunk) {
        r.push(c).expect("a well-formed file");
    }
    r.finish().expect("a well-formed file");
    drop(r);
    parts.into_inner()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (k, chunk) = (1 + (data[0] & 3) as usize, 1 + data[1] as usize);
    let blocks = &data[2..];
    let row_bytes = k * Q8_0_BLOCK_BYTES;
    let rows = blocks.len() / row_bytes;
    if rows == 0 {
        return;
    }
    let (cols, body) = (32 * k, &blocks[..rows * row_bytes]);
    let whole = gguf::repack_q8_0("w", rows, cols, body).expect("whole tensor");
    let file = gguf_file(rows, cols, body);

    // Q8_0 parts of at most 2 rows' quants each (binding = 2 rows of 4-byte words)
    let parts = load(&file, Kind::Q8, (2 * cols) as u64, chunk);
    let (mut q, mut s, mut next_row) = (Vec::new(), Vec::new(), 0);
    for p in parts {
        let Loaded::Q8(p) = p else { panic!("asked for Q8_0") };
        assert_eq!(p.row_start, next_row);
        next_row += p.rows;
        q.extend_from_slice(&p.data.quants);
        // scales are packed two per word; parts of an odd block count end in a half word
        for b in 0..p.data.blocks() {
            s.push(p.data.scale_bits(b));
        }
    }
    assert_eq!(next_row, rows);
    assert_eq!(q, whole.quants);
    let want: Vec<u16> = (0..whole.blocks()).map(|b| whole.scale_bits(b)).collect();
    assert_eq!(s, want);

    // f32: dequantized block by block, bit for bit
    let parts = load(&file, Kind::F32, 1 << 20, chunk);
    let mut v = Vec::new();
    for p in parts {
        let Loaded::F32(p) = p else { panic!("asked for f32") };
        v.extend(p.data.iter().map(|x| x.to_bits()));
    }
    let want: Vec<u32> = whole.dequantize().iter().map(|x| x.to_bits()).collect();
    assert_eq!(v, want);
});
