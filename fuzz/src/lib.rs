//! The checkpoint readers as the fuzz targets see them: the crate's own source files
//! (`src/error.rs`, `src/weights/{stream,gguf,q8}.rs`), compiled here on their own. They
//! depend on nothing else of the crate, and leaving the GPU stack out makes an instrumented
//! build take a minute instead of building wgpu and naga with coverage on two cores.
#![allow(dead_code)]

#[path = "../../src/error.rs"]
pub mod error;

pub use error::{Error, Result};

pub mod weights;
