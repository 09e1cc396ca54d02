//! Any bytes after a GGUF magic, as a GGUF file pushed in chunks, and the same bytes
//! through the in-memory header parser: refused or read, never a panic. When both accept
//! the header, they agree on it.
#![no_main]

use inferencelayer::weights::gguf;
use inferencelayer::weights::stream::{ByteSink, CheckpointReader, Kind, Limits, Loaded, Loader, Plan, TensorEntry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut file = b"GGUF".to_vec();
    file.extend_from_slice(rest);
    let parsed = gguf::parse_header(&file);
    let kind = if mode & 1 == 0 { Kind::F32 } else { Kind::Q8 };
    let chunk = 1 + (mode >> 1) as usize * 5;
    let limits = Limits { max_header: 1 << 16 };
    let names = std::cell::RefCell::new(Vec::new());
    let emit = |t: &TensorEntry, _: Loaded| {
        names.borrow_mut().push(t.name.clone());
        Ok(())
    };
    let mut r =
        CheckpointReader::new(Some(file.len() as u64), limits, Loader::new(Plan::take_all(kind, 1 << 20), emit));
    let mut ok = true;
    for c in file.chunks(chunk) {
        if r.push(c).is_err() {
            ok = false;
            break;
        }
    }
    if ok && r.finish().is_ok() {
        // the stream accepted the whole file: the in-memory parser reads the same header
        let (h, _) = parsed.expect("the stream accepted a header the parser refuses");
        let mut loaded = names.borrow().clone();
        loaded.dedup();
        let want: Vec<String> = h.tensors.iter().map(|t| t.name.clone()).collect();
        assert!(loaded.iter().all(|n| want.contains(n)));
    }
});
