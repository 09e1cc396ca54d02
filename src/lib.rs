//! inferencelayer: Kyutai's Moshi speech LM and its Mimi codec on WebGPU,
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
//! - [`bench`](mod@bench): the per-stage benchmarks (Mimi encode and decode, the LM step, the whole
//!   full-duplex frame), shared by the command-line tool and the web bindings;
//! - [`resample`]: streaming sample-rate conversion (the device's rate to and from 24 kHz);
//! - [`audio`] (native): WAV and `.npy` codes files for the command-line tool;
//! - [`heap`] (native): heap accounting for the benchmarks;
//! - `web` (wasm32): the browser side: checkpoints through `fetch` and the Cache API, and
//!   the bindings the web app's Worker drives.

pub mod bench;
pub mod error;
pub mod gpu;
pub mod mimi;
pub mod moshi;
pub mod resample;
pub mod session;
pub mod weights;

#[cfg(not(target_arch = "wasm32"))]
pub mod audio;
pub mod heap;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use error::{Error, Result};
pub use gpu::GpuContext;
pub use mimi::{Mimi, MimiConfig, MimiCpu, MimiWeights};
