//! The GPU layer: the device context, the kernel table and the static-plan builder.
//!
//! Everything here is model-agnostic. Models describe their layers to [`PlanBuilder`], which
//! turns them into a [`Plan`]: a prebuilt list of (pipeline, bind group, grid) steps replayed
//! per frame with no CPU wait inside (a few submits of growing size, recorded while the GPU
//! runs the frame before, [`FrameRecorder`]; the first frame recorded and submitted part by
//! part, [`submit_plans`], so the GPU starts while the CPU records the rest) and one readback. All buffers are f32 (codes u32); every
//! kernel lives in `shaders/*.wgsl` and is portable (no optional features), so the same plan
//! runs on wgpu's native backends and on a browser's WebGPU (Tint).

mod context;
mod kernels;
mod limits;
mod plan;
mod table;

pub use context::{GpuContext, GpuInfo, Readback, ShaderChecks};
pub use limits::{capability_json, part_name, split_table, BufferNeed, GpuLimits, Requirements, MAX_BUFFER, MAX_STORAGE_BINDING};
pub use table::SplitTable;
pub use kernels::{Binding, FrameParams, Kernel, KERNELS};
pub use plan::{
    conv_kernel_auto, conv_reduce_lanes, elu_on_store_from_env, fuse_norms, gate_in_linear_out, matvec_lanes_auto, matvec_lanes_from_env, out_proj_fused_from_env, prefetch_from_env, submit_plans, submits_for, submits_from_env, frame_submits, AttentionDispatch, FrameRecorder, AttentionKernel, ConvKernel, ConvSpec, ConvTrSpec, Elu, GatedRow, LinearOut, NormInput, NormedRow, Plan, PlanBuilder, PlanState, Q8Dispatch, Q8Dot, Q8Kernel, Tensor,
    TransformerSpec, ATTENTION_CHUNK, ATTENTION_KEY_LANES, ATTENTION_LEAST, INVALID_POS, MAX_PARTIALS, PREFETCH_MAX, Q8_NORM_APART,
};
