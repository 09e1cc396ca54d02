// Reads two buffers through so that the dispatch after it finds them in the GPU's L2 cache:
// a plan puts it beside a short, latency-bound dispatch (no barrier separates the two: it
// writes nothing the other touches), ahead of the dispatch that reads the weights it loads
// (PlanBuilder::prefetch). The xor of every word goes to `sink` only if it equals a constant
// no real data is likely to give, which keeps the loads from being optimized away; nothing
// reads `sink`.
//
//   a, b : the buffers, p.a and p.b vec4<u32> long
//   sink : [1] u32
// Thread i of the grid's p.threads reads vec4s i, i + p.threads, ... of a, then of b, four
// loads in flight at a time. The plans dispatch one row of workgroups (at most 65535: 2 GiB
// a buffer); the index allows a second grid dimension all the same.

struct Params {
    a: u32,
    b: u32,
    threads: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> a: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> sink: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = gid.x + gid.y * nwg.x * 256u;
    let s = p.threads;
    var acc = vec4<u32>(0u);
    var i = t;
    for (; i + 3u * s < p.a; i += 4u * s) {
        acc ^= (a[i] ^ a[i + s]) ^ (a[i + 2u * s] ^ a[i + 3u * s]);
    }
    for (; i < p.a; i += s) {
        acc ^= a[i];
    }
    for (var j = t; j < p.b; j += s) {
        acc ^= b[j];
    }
    if (all(acc == vec4<u32>(0x9e3779b9u, 0x7f4a7c15u, 0xf39cc060u, 0x5ced1d3eu))) {
        sink[0] = acc.x;
    }
}
