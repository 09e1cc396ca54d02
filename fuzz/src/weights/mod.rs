//! The crate's streaming readers and the Q8_0 layout, from their own files.

#[path = "../../../src/weights/gguf.rs"]
pub mod gguf;
#[path = "../../../src/weights/q8.rs"]
pub mod q8;
#[path = "../../../src/weights/stream.rs"]
pub mod stream;
