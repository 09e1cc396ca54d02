// The parameters and shared bindings of the two Q8_0 linear kernels (q8_matvec.wgsl, in f32,
// and q8_matvec_dot4.wgsl, on packed 8-bit integers; the fields' meaning is in
// q8_matvec.wgsl's header). Each kernel binds x (2) and y (4) itself, as f32 values or as
// their bits.

struct Params {
    n: u32,
    k: u32,
    t: u32,
    mode: u32,
    x_offset: u32,
    y_offset: u32,
    y_stride: u32,
    input: u32,
    lanes: u32,
    eps: f32,
    parts: u32,
    // the i8 kernel's partial rows (q8_matvec_dot4.wgsl); 0 for the f32 kernel
    partials: u32,
}

@group(0) @binding(3) var<storage, read> alpha: array<vec4<f32>>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<storage, read_write> norm_out: array<f32>;

// threads per workgroup; output rows per row group
const WG: u32 = 256u;
const RT: u32 = 4u;
