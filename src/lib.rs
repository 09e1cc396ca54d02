//! inferencelayer: Kyutai's Mimi codec (and, on the same GPU layer, Moshi) on WebGPU,
//! natively through wgpu (Vulkan, Metal, DX12) and in the browser through wgpu's webgpu
//! backend, with one async code path for both.
//!
//! Layers, each depending only on those above it:
//! - [`gpu`]: device context, kernel table (`shaders/*.wgsl`), static-plan builder;
//! - [`weights`]: checkpoint readers and seeded synthetic checkpoints;
//! - [`mimi`]: the codec, one module per concept (SEANet, transformer, quantization), as
//!   GPU plans and as the CPU oracle;
//! - [`moshi`]: the LM (temporal transformer, depformer, sampler, LMGen);
//! - [`session`]: Mimi and the LM wired into a full-duplex session;
//! - [`audio`] (native): WAV and `.npy` codes files for the command-line tool;
//! - `web` (wasm32): checkpoints through `fetch` and the Cache API.

pub mod error;
pub mod gpu;
pub mod mimi;
pub mod moshi;
pub mod session;
pub mod weights;

#[cfg(not(target_arch = "wasm32"))]
pub mod audio;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use error::{Error, Result};
pub use gpu::GpuContext;
pub use mimi::{Mimi, MimiConfig, MimiCpu, MimiWeights};
