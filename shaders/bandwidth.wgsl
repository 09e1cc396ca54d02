// Probes of the device's memory bandwidth and parallelism, timed by `examples/bandwidth.rs`
// (one entry point per variant; each pipeline takes only the bindings its entry point uses).
//
//   src_f, dst_f : [p.n] f32                 scalar copies
//   src_v, dst_v : [p.n] vec4<u32>           16-byte copies and reads
//   fill         : [p.n] vec4<u32>           a hashed pattern, so nothing reads zeros
//   sink         : [threads] u32             written only when a read-back sum hits a
//                                            value it never does (keeps the loads alive)
//   p.iters      : dependent FMAs per chain (the `fma` probe)
//
// Workgroup ids are linear over a 2D grid: wid.x + wid.y * nwg.x.

struct Params {
    n: u32,
    iters: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> src_f: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst_f: array<f32>;
@group(0) @binding(2) var<storage, read> src_v: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> dst_v: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> fill: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> sink: array<u32>;
@group(0) @binding(6) var<uniform> p: Params;

fn linear(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, wg: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * wg + lid;
}

fn hash(i: u32) -> u32 {
    var h = i * 2654435761u;
    h ^= h >> 15u;
    h *= 2246822519u;
    h ^= h >> 13u;
    return h;
}

@compute @workgroup_size(256)
fn fill_v4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 256u);
    if (i < p.n) {
        fill[i] = vec4<u32>(hash(4u * i), hash(4u * i + 1u), hash(4u * i + 2u), hash(4u * i + 3u));
    }
}

@compute @workgroup_size(64)
fn copy_f32_64(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 64u);
    if (i < p.n) {
        dst_f[i] = src_f[i];
    }
}

@compute @workgroup_size(256)
fn copy_f32_256(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 256u);
    if (i < p.n) {
        dst_f[i] = src_f[i];
    }
}

@compute @workgroup_size(256)
fn copy_v4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 256u);
    if (i < p.n) {
        dst_v[i] = src_v[i];
    }
}

// Four vec4s per thread, a quarter of the buffer apart (each load coalesced across the
// workgroup); all four loads issued before the stores. p.n a multiple of 4.
@compute @workgroup_size(256)
fn copy_v4x4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 256u);
    let q = p.n / 4u;
    if (i < q) {
        let a = src_v[i];
        let b = src_v[i + q];
        let c = src_v[i + 2u * q];
        let d = src_v[i + 3u * q];
        dst_v[i] = a;
        dst_v[i + q] = b;
        dst_v[i + 2u * q] = c;
        dst_v[i + 3u * q] = d;
    }
}

// A grid-stride loop over the whole buffer with however many workgroups were dispatched.
@compute @workgroup_size(256)
fn copy_v4_stride(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let total = nwg.x * nwg.y * 256u;
    for (var i = linear(wid, nwg, lid, 256u); i < p.n; i += total) {
        dst_v[i] = src_v[i];
    }
}

// Read only: four vec4s per thread, as copy_v4x4.
@compute @workgroup_size(256)
fn read_v4x4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 256u);
    let q = p.n / 4u;
    if (i < q) {
        let s = src_v[i] ^ src_v[i + q] ^ src_v[i + 2u * q] ^ src_v[i + 3u * q];
        if (s.x == 0x9e3779b9u && s.y == 0x7f4a7c15u && s.z == s.w) {
            sink[i] = s.x;
        }
    }
}

// Read only: eight vec4s per thread, an eighth of the buffer apart. p.n a multiple of 8.
@compute @workgroup_size(256)
fn read_v4x8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 256u);
    let q = p.n / 8u;
    if (i < q) {
        var s = vec4<u32>(0u);
        for (var j = 0u; j < 8u; j++) {
            s ^= src_v[i + j * q];
        }
        if (s.x == 0x9e3779b9u && s.y == 0x7f4a7c15u && s.z == s.w) {
            sink[i] = s.x;
        }
    }
}

// Arithmetic only: eight independent chains of p.iters dependent FMAs per thread.
@compute @workgroup_size(256)
fn fma_chains(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = linear(wid, nwg, lid, 256u);
    var a = array<f32, 8>(f32(i), 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0);
    let m = 0.999 + f32(lid) * 1e-7;
    for (var k = 0u; k < p.iters; k++) {
        a[0] = fma(a[0], m, 0.5);
        a[1] = fma(a[1], m, 0.5);
        a[2] = fma(a[2], m, 0.5);
        a[3] = fma(a[3], m, 0.5);
        a[4] = fma(a[4], m, 0.5);
        a[5] = fma(a[5], m, 0.5);
        a[6] = fma(a[6], m, 0.5);
        a[7] = fma(a[7], m, 0.5);
    }
    let s = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    if (s == 1.2345) {
        sink[i] = bitcast<u32>(s);
    }
}

// Dispatch cost: nop binds only the uniform (no barrier between two of them); nop_rw also
// binds `sink` read-write (a barrier between each two), writing it only when p.n says so.
@compute @workgroup_size(256)
fn nop(@builtin(local_invocation_index) lid: u32) {
    if (p.n == 0xffffffffu && lid == 1000u) {
        let z = p.iters;
    }
}

@compute @workgroup_size(256)
fn nop_rw(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (p.n == 0xfffffffeu) {
        sink[wid.x * 256u + lid] = p.iters;
    }
}
