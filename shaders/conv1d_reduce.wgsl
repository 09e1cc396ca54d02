// Causal streaming Conv1d for deep, short layers on CPU adapters: one workgroup of 64
// threads per output element, the threads striding over (input channel, tap) pairs, then a
// tree reduction. Same bindings, parameters, staging, carry and result as conv1d_tiled.wgsl
// (a workgroup per tile of outputs, which suits wide, long layers) and conv1d_lanes.wgsl
// (16 to 256 threads per output, several outputs a workgroup of 256, which GPUs run
// faster); the plan builder picks one by shape and adapter.
//
// Parameters, bindings, the staged input, its carry and out_index: conv1d_common.wgsl,
// which the kernel table prepends.

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let idx = wid.x + wid.y * nwg.x;
    let cur = frame.index % 2u;
    // the next frame's prefix, strided over every thread of the grid
    carry_prefix(idx * 64u + lid, nwg.x * nwg.y * 64u, cur);
    if (idx >= p.out_c * p.t_out) {
        return;
    }
    let oc = idx / p.t_out;
    let t = idx % p.t_out;
    let in_g = p.in_c / p.groups;
    let g = oc / (p.out_c / p.groups);
    let x0 = t * p.stride;
    var acc = 0.0;
    let n = in_g * p.k;
    let wo = oc * n;
    // four (weight, input) pairs a lane at a time: their loads go out together instead of
    // one round trip to memory per pair
    var e = lid;
    for (; e + 192u < n; e += 256u) {
        let w0 = w[wo + e];
        let w1 = w[wo + e + 64u];
        let w2 = w[wo + e + 128u];
        let w3 = w[wo + e + 192u];
        let a0 = staged(g * in_g + e / p.k, x0 + (e % p.k) * p.dilation, cur);
        let a1 = staged(g * in_g + (e + 64u) / p.k, x0 + ((e + 64u) % p.k) * p.dilation, cur);
        let a2 = staged(g * in_g + (e + 128u) / p.k, x0 + ((e + 128u) % p.k) * p.dilation, cur);
        let a3 = staged(g * in_g + (e + 192u) / p.k, x0 + ((e + 192u) % p.k) * p.dilation, cur);
        acc += (w0 * a0 + w1 * a1) + (w2 * a2 + w3 * a3);
    }
    for (; e < n; e += 64u) {
        acc += w[wo + e] * staged(g * in_g + e / p.k, x0 + (e % p.k) * p.dilation, cur);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        store_output(oc, t, red[0]);
    }
}
