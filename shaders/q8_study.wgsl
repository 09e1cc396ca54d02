// Variants of the Q8_0 matrix-vector product (the layout of q8_blocks.wgsl, plain input,
// y = W x) for examples/q8_study.rs: which part of the kernel its time goes to. A
// workgroup of 256 threads is 256 / LANES row groups of LANES threads; a row group computes
// 4 consecutive rows, its lanes taking UNROLL 16-weight units per iteration (unit u of
// the row, u + LANES, ...).
//
// DECODE 0: i8 -> f32 by shifts and a conversion (q8_blocks.wgsl's i8x4, as q8_matvec.wgsl)
//        1: i8 -> f32 by the exponent trick (byte | 0x4b000000 as f32, minus 2^23 + 128)
//        2: loads only: the weight words are combined without decoding
//        3: dot4I8Packed against an input already packed as i8 (one 16-byte load of
//           inputs per unit and a scale per unit)
//        4: no weight loads: the inputs only
// Then a tree reduction in workgroup memory, one barrier per level.

override DECODE: u32 = 0u;
override UNROLL: u32 = 2u;
override LANES: u32 = 64u;

struct Params {
    n: u32,
    k: u32,
    _pad0: u32,
    _pad1: u32,
}

// after q8_blocks.wgsl (quants, scales, i8x4: DECODE 0)
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> xq: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const WG: u32 = 256u;
const RT: u32 = 4u;

var<workgroup> red: array<vec4<f32>, 256>;

fn i8x4_exp(w: u32) -> vec4<f32> {
    let v = vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u);
    return bitcast<vec4<f32>>((v & vec4<u32>(0xffu)) | vec4<u32>(0x4b000000u)) - vec4<f32>(8388736.0);
}

fn dot16(q: vec4<u32>, a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) -> f32 {
    if (DECODE == 1u) {
        return dot(i8x4_exp(q.x), a) + dot(i8x4_exp(q.y), b) + dot(i8x4_exp(q.z), c) + dot(i8x4_exp(q.w), d);
    }
    if (DECODE == 2u) {
        return bitcast<f32>((q.x ^ q.y ^ q.z ^ q.w) & 0x3fffffffu) * a.x;
    }
    return dot(i8x4(q.x), a) + dot(i8x4(q.y), b) + dot(i8x4(q.z), c) + dot(i8x4(q.w), d);
}

// Row group (rows i0 .. i0 + 3) partial dot products of lane `lane`.
fn row_group(i0: u32, lane: u32) -> vec4<f32> {
    let nu = p.k / 16u;
    var acc = vec4<f32>(0.0);
    for (var u0 = lane; u0 < nu; u0 += UNROLL * LANES) {
        for (var j = 0u; j < UNROLL; j++) {
            let u = u0 + j * LANES;
            if (u < nu) {
                if (DECODE == 3u) {
                    let xv = xq[u];
                    let xs = x[u].x;
                    for (var r = 0u; r < RT; r++) {
                        let q = quants[(i0 + r) * nu + u];
                        let s = dot4I8Packed(q.x, xv.x) + dot4I8Packed(q.y, xv.y) + dot4I8Packed(q.z, xv.z) + dot4I8Packed(q.w, xv.w);
                        acc[r] += scale_of((i0 + r) * (p.k / 32u) + (u >> 1u)) * xs * f32(s);
                    }
                } else if (DECODE == 4u) {
                    let a = x[4u * u];
                    for (var r = 0u; r < RT; r++) {
                        acc[r] += a[r];
                    }
                } else {
                    let a = x[4u * u];
                    let b = x[4u * u + 1u];
                    let c = x[4u * u + 2u];
                    let d = x[4u * u + 3u];
                    for (var r = 0u; r < RT; r++) {
                        let q = quants[(i0 + r) * nu + u];
                        acc[r] += scale_of((i0 + r) * (p.k / 32u) + (u >> 1u)) * dot16(q, a, b, c, d);
                    }
                }
            }
        }
    }
    return acc;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let g = lid / LANES;
    let lane = lid % LANES;
    let row0 = ((wid.x + wid.y * nwg.x) * (WG / LANES) + g) * RT;
    var acc = vec4<f32>(0.0);
    if (row0 < p.n) {
        acc = row_group(row0, lane);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lane < RT && row0 < p.n) {
        y[row0 + lane] = red[g * LANES][lane];
    }
}
