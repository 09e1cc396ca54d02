//! The kernel table: every WGSL kernel of `shaders/`, included once, with the binding
//! layout its pipeline is built with and the uniform parameter struct it reads.
//!
//! Each `*Params` struct mirrors the `Params` struct at the top of its shader, field for
//! field; sizes are checked at compile time here and the shaders' bindings against this
//! table by a test that parses them with naga (`tests/kernels.rs`).

use bytemuck::{Pod, Zeroable};

/// How a kernel binds one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// `var<storage, read>`
    Read,
    /// `var<storage, read_write>`
    ReadWrite,
    /// `var<uniform>`
    Uniform,
}

/// One WGSL kernel: a name (its file stem and pipeline label), its source and its bindings
/// in binding order (all in bind group 0; the entry point is always `main`).
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub name: &'static str,
    pub source: &'static str,
    pub bindings: &'static [Binding],
}

use Binding::{Read as R, ReadWrite as RW, Uniform as U};

macro_rules! kernel {
    ($id:ident, $name:literal, [$($b:expr),*]) => {
        pub const $id: Kernel = Kernel {
            name: $name,
            source: include_str!(concat!("../../shaders/", $name, ".wgsl")),
            bindings: &[$($b),*],
        };
    };
    // a kernel whose source is several files of `shaders/` one after the other (WGSL has
    // no includes): the shared preludes, then the kernel's own file; the label names the
    // pipeline
    ($id:ident, $label:literal = [$($part:literal),+], [$($b:expr),*]) => {
        pub const $id: Kernel = Kernel {
            name: $label,
            source: concat!($(include_str!(concat!("../../shaders/", $part, ".wgsl"))),+),
            bindings: &[$($b),*],
        };
    };
}

// each conv kernel twice: loading its input as it is, and with SEANet's ELU on load (`_elu`)
kernel!(CONV1D_TILED, "conv1d_tiled" = ["frame", "conv1d_common", "conv1d_load_raw", "conv1d_tiled"], [R, R, R, RW, R, RW, U, U]);
kernel!(CONV1D_TILED_ELU, "conv1d_tiled_elu" = ["frame", "conv1d_common", "conv1d_load_elu", "conv1d_tiled"], [R, R, R, RW, R, RW, U, U]);
kernel!(CONV1D_REDUCE, "conv1d_reduce" = ["frame", "conv1d_common", "conv1d_load_raw", "conv1d_reduce"], [R, R, R, RW, R, RW, U, U]);
kernel!(CONV1D_REDUCE_ELU, "conv1d_reduce_elu" = ["frame", "conv1d_common", "conv1d_load_elu", "conv1d_reduce"], [R, R, R, RW, R, RW, U, U]);
kernel!(CONV1D_LANES, "conv1d_lanes" = ["frame", "conv1d_common", "conv1d_load_raw", "conv1d_lanes"], [R, R, R, RW, R, RW, U, U]);
kernel!(CONV1D_LANES_ELU, "conv1d_lanes_elu" = ["frame", "conv1d_common", "conv1d_load_elu", "conv1d_lanes"], [R, R, R, RW, R, RW, U, U]);
kernel!(CONV_TRANSPOSE1D, "conv_transpose1d" = ["frame", "conv_transpose1d"], [R, R, R, RW, RW, U, U]);
kernel!(COPY, "copy", [R, RW, U]);
kernel!(TRANSPOSE, "transpose", [R, RW, U]);
kernel!(LAYER_NORM, "layer_norm" = ["layer_norm_stats", "layer_norm"], [R, R, R, RW, U]);
kernel!(MATVEC, "matvec" = ["layer_norm_stats", "matvec"], [R, R, R, RW, U, R, R]);
kernel!(ROPE_KV, "rope_kv" = ["frame", "rope_kv"], [R, RW, RW, RW, RW, U, U]);
kernel!(ATTENTION, "attention" = ["frame", "attention"], [R, R, R, R, RW, RW, U, U]);
kernel!(ROPE_ATTENTION, "rope_attention" = ["frame", "rope", "rope_attention"], [R, RW, RW, RW, RW, RW, U, U]);
kernel!(ROPE_ATTENTION_SMALL, "rope_attention_small" = ["frame", "rope", "rope_attention_small"], [R, RW, RW, RW, RW, U, U]);
kernel!(ROPE_ATTENTION_SPLIT, "rope_attention_split" = ["frame", "rope", "rope_attention_split"], [R, RW, RW, RW, RW, RW, U, U]);
kernel!(ATTENTION_COMBINE, "attention_combine" = ["frame", "attention_combine"], [R, RW, U, U]);
kernel!(ATTENTION_OUT_PROJ, "attention_out_proj" = ["frame", "q8_blocks", "rope", "attention_out_proj"], [R, R, R, RW, RW, RW, RW, U, U]);
kernel!(VQ_DISTANCE, "vq_distance", [R, R, RW, U]);
kernel!(VQ_ARGMIN, "vq_argmin", [R, R, RW, RW, U]);
kernel!(VQ_SEARCH, "vq_search", [R, RW, RW, RW, U]);
kernel!(VQ_DECODE, "vq_decode", [R, R, RW, U]);
kernel!(VQ_DECODE_PROJ, "vq_decode_proj", [R, R, R, RW, U]);
kernel!(Q8_MATVEC, "q8_matvec" = ["q8_blocks", "q8_linear", "q8_matvec"], [R, R, R, R, RW, U, RW]);
// the i8 kernel with and without partial rows, each for an input it quantizes and one
// quantized already (`_packed`, p.input 4)
kernel!(Q8_MATVEC_DOT4, "q8_matvec_dot4" = ["q8_blocks", "q8_linear", "q8_partials_none", "q8_input_staged", "q8_matvec_dot4"], [R, R, R, R, RW, U, RW]);
kernel!(Q8_MATVEC_DOT4_PACKED, "q8_matvec_dot4_packed" = ["q8_blocks", "q8_linear", "q8_partials_none", "q8_input_packed", "q8_matvec_dot4"], [R, R, R, R, RW, U, RW]);
kernel!(Q8_MATVEC_DOT4_PARTIALS, "q8_matvec_dot4_partials" = ["q8_blocks", "q8_linear", "q8_partials", "q8_input_staged", "q8_matvec_dot4"], [R, R, R, R, RW, U, RW]);
kernel!(Q8_MATVEC_DOT4_PARTIALS_PACKED, "q8_matvec_dot4_partials_packed" = ["q8_blocks", "q8_linear", "q8_partials", "q8_input_packed", "q8_matvec_dot4"], [R, R, R, R, RW, U, RW]);
kernel!(RMS_NORM, "rms_norm", [R, R, RW, U]);
kernel!(SILU_GATE, "silu_gate", [R, RW, U]);
kernel!(EMBED_SUM, "embed_sum", [R, R, RW, U]);
kernel!(SAMPLE, "sample" = ["frame", "sample_common", "sample"], [R, RW, U, U, R, RW]);
kernel!(SAMPLE_RADIX8, "sample_radix8" = ["frame", "sample_common", "sample_radix8"], [R, RW, U, U, R, RW]);
kernel!(REALIGN, "realign" = ["frame", "realign"], [R, R, RW, RW, U, U]);
kernel!(PREFETCH, "prefetch", [R, R, RW, U]);

/// Every kernel, for validation and warm-up.
pub const KERNELS: &[Kernel] = &[
    CONV1D_TILED, CONV1D_TILED_ELU, CONV1D_REDUCE, CONV1D_REDUCE_ELU, CONV1D_LANES, CONV1D_LANES_ELU, CONV_TRANSPOSE1D, COPY, TRANSPOSE, LAYER_NORM, MATVEC, ROPE_KV, ATTENTION, ROPE_ATTENTION,
    ROPE_ATTENTION_SMALL, ROPE_ATTENTION_SPLIT, ATTENTION_COMBINE, ATTENTION_OUT_PROJ, VQ_DISTANCE, VQ_ARGMIN, VQ_SEARCH, VQ_DECODE, VQ_DECODE_PROJ, Q8_MATVEC,
    Q8_MATVEC_DOT4, Q8_MATVEC_DOT4_PACKED, Q8_MATVEC_DOT4_PARTIALS, Q8_MATVEC_DOT4_PARTIALS_PACKED, RMS_NORM, SILU_GATE, EMBED_SUM, SAMPLE, SAMPLE_RADIX8, REALIGN, PREFETCH,
];

/// Threads per workgroup of the element-wise kernels (`@workgroup_size(64)`).
pub(crate) const WG: u32 = 64;

/// The per-frame uniform shared by the stateful kernels (`struct Frame` of `shaders/frame.wgsl`,
/// the first part of each such kernel's source):
/// the stream position of the frame's first transformer step, whether it is the first
/// frame of the stream, and the frame's index in the stream (its parity picks which half
/// of a conv's two-half state is read and which written).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct FrameParams {
    pub pos: u32,
    pub first: u32,
    pub index: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct Conv1dParams {
    pub in_c: u32,
    pub out_c: u32,
    pub k: u32,
    pub stride: u32,
    pub dilation: u32,
    pub groups: u32,
    pub t_out: u32,
    pub t: u32,
    pub tp: u32,
    pub has_bias: u32,
    pub residual: u32,
    pub time_major: u32,
    /// (the ELU on load is the pipeline's: `CONV1D_*_ELU`)
    pub _pad3: u32,
    pub replicate: u32,
    pub time_major_out: u32,
    /// P > 1: the output is P phases interleaved in time (`out_index` in the shaders)
    pub phases: u32,
    /// `conv1d_lanes`: threads per output (16 to 256, a power of two; 256 / lanes outputs
    /// per workgroup); the other conv kernels ignore it
    pub lanes: u32,
    /// ELU on the outputs as they are stored (SEANet's ELU in front of the next conv)
    pub elu_out: u32,
    pub _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct ConvTransposeParams {
    pub in_c: u32,
    pub out_c: u32,
    pub k: u32,
    pub stride: u32,
    pub groups: u32,
    pub t_in: u32,
    pub ts: u32,
    pub tp: u32,
    pub has_bias: u32,
    pub elu: u32,
    pub time_major_out: u32,
    /// ELU on the outputs as they are stored (not on the carried overlap tail)
    pub elu_out: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct Count4 {
    pub a: u32,
    pub b: u32,
    pub c: u32,
    pub d: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct LayerNormParams {
    pub dim: u32,
    pub eps: f32,
    pub _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct MatvecParams {
    pub n: u32,
    pub k: u32,
    pub t: u32,
    pub gelu: u32,
    pub residual: u32,
    pub x_offset: u32,
    pub y_offset: u32,
    pub accumulate: u32,
    /// 1: the input row is LayerNormed on load (gain, bias bound beside it)
    pub norm: u32,
    pub eps: f32,
    /// lanes per output element (64, 128 or 256; `256 / lanes` outputs a workgroup)
    pub lanes: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct RopeKvParams {
    pub dim: u32,
    pub heads: u32,
    pub ring: u32,
    pub t: u32,
    pub freq_coef: f32,
    pub rope: u32,
    pub _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct AttentionParams {
    pub dim: u32,
    pub heads: u32,
    pub ring: u32,
    pub t: u32,
    pub context: u32,
    pub scale: f32,
    pub _pad: [u32; 2],
}

/// What every rotary attention kernel reads first in its Params (`rope_attention`,
/// `rope_attention_small`, `rope_attention_split`, `attention_combine`,
/// `attention_out_proj`): the model width, the heads, the KV ring's positions, the context
/// attended, the softmax scale `1 / sqrt(head_dim)`, the rotary frequencies' coefficient
/// `-2 ln(max_period) / head_dim` and whether to rotate at all.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct RopeHeads {
    pub dim: u32,
    pub heads: u32,
    pub ring: u32,
    pub context: u32,
    pub scale: f32,
    pub freq_coef: f32,
    pub rope: u32,
}

impl RopeHeads {
    /// `spec`'s attention over a ring of `spec.context` positions.
    pub fn new(spec: &crate::gpu::TransformerSpec) -> Self {
        let hd = (spec.dim / spec.heads) as f64;
        Self {
            dim: spec.dim as u32,
            heads: spec.heads as u32,
            ring: spec.context as u32,
            context: spec.context as u32,
            scale: (1.0 / hd.sqrt()) as f32,
            freq_coef: (-(spec.max_period.ln()) * 2.0 / hd) as f32,
            rope: spec.rope as u32,
        }
    }
}

/// The parameters of `rope_attention` and `rope_attention_small`: [`RopeHeads`], then the
/// new positions of the step (`t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct RopeAttentionParams {
    pub attn: RopeHeads,
    pub t: u32,
}

/// The parameters of `attention_out_proj`: [`RopeHeads`], then the heads a workgroup
/// attends (`group`) and the output rows it dots with their columns (`rows`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct AttentionOutProjParams {
    pub attn: RopeHeads,
    pub group: u32,
    pub rows: u32,
    pub _pad: [u32; 3],
}

/// The parameters of `rope_attention_split` and `attention_combine`: [`RopeHeads`], then
/// the most positions per workgroup (`chunk`, which sets the splits of the dispatch), the
/// fewest a workgroup takes of a partly filled window (`least`) and the fewest threads that
/// share a key's dot product where the kernel's partial dots fit (`key_lanes`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct SplitAttentionParams {
    pub attn: RopeHeads,
    pub chunk: u32,
    pub least: u32,
    pub key_lanes: u32,
    /// 1: the rings hold f16 keys and values ([`crate::gpu::TransformerSpec::kv_half`])
    pub half: u32,
    pub _pad: u32,
}

/// Most positions one workgroup of `rope_attention_split` takes (its `dots` and `sc`).
pub(crate) const SPLIT_MAX_CHUNK: usize = 512;
/// Most splits `attention_combine` merges (one partial per thread).
pub(crate) const SPLIT_MAX_SPLITS: usize = 256;
/// Longest window of `rope_attention_small` (its `sc`); the window times hd / 4 must also
/// fit its 256 threads.
pub(crate) const SMALL_MAX_WINDOW: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct VqEncodeParams {
    pub level: u32,
    pub bins: u32,
    pub dim: u32,
    pub slot: u32,
    pub subtract: u32,
    pub dist_offset: u32,
    pub res_offset: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct VqDecodeProjParams {
    pub n: u32,
    pub dim: u32,
    pub levels: u32,
    pub bins: u32,
    pub offset: u32,
    pub accumulate: u32,
    pub _pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct VqDecodeParams {
    pub levels: u32,
    pub bins: u32,
    pub dim: u32,
    pub offset: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct Q8MatvecParams {
    pub n: u32,
    pub k: u32,
    pub t: u32,
    pub mode: u32,
    pub x_offset: u32,
    pub y_offset: u32,
    pub y_stride: u32,
    /// 0: x as it is, 1: SiLU-gated pairs, 2: RMSNorm of x, 3: a row already times its
    /// RMSNorm gain followed by `parts` partial sums of its squares, 4: a row the i8
    /// kernel's mode 3 wrote quantized, 5: the RMSNorm of x plus the `partials` rows behind
    /// it (4 and 5: that kernel only)
    pub input: u32,
    pub lanes: u32,
    pub eps: f32,
    pub parts: u32,
    /// The partial rows behind the residual row (`attention_out_proj`'s): input 5 adds them
    /// into its input, a residual add (mode 1 or 2, one row) into its output (i8 kernel only)
    pub partials: u32,
}

/// Output rows per row group of `q8_matvec` (`RT` in the shader).
pub(crate) const Q8_ROWS_PER_GROUP: usize = 4;

/// `Params` of `prefetch.wgsl`: the two buffers' lengths in vec4s and the grid's threads.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(crate) struct PrefetchParams {
    pub a: u32,
    pub b: u32,
    pub threads: u32,
    pub _pad: u32,
}


#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct EmbedSumParams {
    pub tables: u32,
    pub rows: u32,
    pub dim: u32,
    pub slot: u32,
    pub accumulate: u32,
    pub row0: u32,
    pub part_rows: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub(crate) struct SampleParams {
    pub n: u32,
    pub top_k: u32,
    pub offset: u32,
    pub slot: u32,
    pub greedy: u32,
    pub inv_temp: f32,
    pub seed: u32,
    pub stream: u32,
    /// > 0: the drawn token's row of a `[emb_rows, emb_dim]` table is added into a row
    pub emb_dim: u32,
    pub emb_rows: u32,
    pub _pad: [u32; 2],
}

// Uniform structs must be a multiple of 16 bytes; these sizes are the WGSL structs' sizes.
const _: () = {
    assert!(std::mem::size_of::<FrameParams>() == 16);
    assert!(std::mem::size_of::<Conv1dParams>() == 80);
    assert!(std::mem::size_of::<ConvTransposeParams>() == 48);
    assert!(std::mem::size_of::<Count4>() == 16);
    assert!(std::mem::size_of::<LayerNormParams>() == 16);
    assert!(std::mem::size_of::<MatvecParams>() == 48);
    assert!(std::mem::size_of::<RopeKvParams>() == 32);
    assert!(std::mem::size_of::<AttentionParams>() == 32);
    assert!(std::mem::size_of::<RopeAttentionParams>() == 32);
    assert!(std::mem::size_of::<AttentionOutProjParams>() == 48);
    assert!(std::mem::size_of::<SplitAttentionParams>() == 48);
    assert!(std::mem::size_of::<VqEncodeParams>() == 32);
    assert!(std::mem::size_of::<VqDecodeParams>() == 16);
    assert!(std::mem::size_of::<VqDecodeProjParams>() == 32);
    assert!(std::mem::size_of::<Q8MatvecParams>() == 48);
    assert!(std::mem::size_of::<EmbedSumParams>() == 32);
    assert!(std::mem::size_of::<SampleParams>() == 48);
};
