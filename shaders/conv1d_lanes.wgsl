// Causal streaming Conv1d for deep, short layers on GPU adapters: p.lanes threads per
// output element (16 to 256, a power of two; a workgroup of 256 threads computes
// 256 / p.lanes consecutive outputs), the lanes striding over (input channel, tap) pairs
// eight at a time (their loads go out together: a lane's chain of round trips to memory is
// n / (8 lanes) long), then a tree reduction over the lanes. Same bindings, parameters,
// staging, carry and result as conv1d_tiled.wgsl (a workgroup per tile of outputs, which
// suits wide, long layers) and conv1d_reduce.wgsl (a workgroup of 64 per output, which CPU
// adapters run faster); the plan builder picks one by shape and adapter.
//
// Parameters, bindings, the staged input, its carry and out_index: conv1d_common.wgsl,
// which the kernel table prepends.

const WG: u32 = 256u;
var<workgroup> red: array<f32, 256>;

// Term e of the output's reduction: weight e of its row times input (channel cin + cj.x,
// tap cj.y), cj = (e / k, e % k) kept by `advance` (no division a term). Where `fresh_only`
// (the output's every term reads a fresh column: x0 >= p.tp) straight from the input, else
// from the staged input, which decides a term between the carried prefix and a fresh column.
fn term(wo: u32, e: u32, cj: vec2<u32>, cin: u32, x0: u32, cur: u32, fresh_only: bool) -> f32 {
    let j = x0 + cj.y * p.dilation;
    if (fresh_only) {
        return w[wo + e] * fresh(cin + cj.x, j - p.tp);
    }
    return w[wo + e] * staged(cin + cj.x, j, cur);
}

// (channel, tap) of term e + lanes from that of e, d = (lanes / k, lanes % k)
fn advance(cj: vec2<u32>, d: vec2<u32>) -> vec2<u32> {
    let t = cj.y + d.y;
    return select(vec2<u32>(cj.x + d.x, t), vec2<u32>(cj.x + d.x + 1u, t - p.k), t >= p.k);
}

// This lane's part of an output's reduction: terms lane, lane + lanes, ... below n, eight
// at a time (their loads go out together). Called with `fresh_only` a constant at each call
// site, so that the compiler makes a loop of each, the one of the outputs that read only
// fresh columns (all but a frame's first few) without the prefix branch in every term (on an
// H100 the stride-6 downsampling 39.1 us against 46.1 with it, the stride-8 34.9 against 37.5).
fn lane_sum(wo: u32, lane: u32, lanes: u32, n: u32, cin: u32, x0: u32, cur: u32, fresh_only: bool) -> f32 {
    let d = vec2<u32>(lanes / p.k, lanes % p.k);
    var cj = vec2<u32>(lane / p.k, lane % p.k);
    var acc = 0.0;
    var e = lane;
    for (; e + 7u * lanes < n; e += 8u * lanes) {
        let c1 = advance(cj, d);
        let c2 = advance(c1, d);
        let c3 = advance(c2, d);
        let c4 = advance(c3, d);
        let c5 = advance(c4, d);
        let c6 = advance(c5, d);
        let c7 = advance(c6, d);
        let a0 = term(wo, e, cj, cin, x0, cur, fresh_only);
        let a1 = term(wo, e + lanes, c1, cin, x0, cur, fresh_only);
        let a2 = term(wo, e + 2u * lanes, c2, cin, x0, cur, fresh_only);
        let a3 = term(wo, e + 3u * lanes, c3, cin, x0, cur, fresh_only);
        let a4 = term(wo, e + 4u * lanes, c4, cin, x0, cur, fresh_only);
        let a5 = term(wo, e + 5u * lanes, c5, cin, x0, cur, fresh_only);
        let a6 = term(wo, e + 6u * lanes, c6, cin, x0, cur, fresh_only);
        let a7 = term(wo, e + 7u * lanes, c7, cin, x0, cur, fresh_only);
        acc += ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
        cj = advance(c7, d);
    }
    for (; e < n; e += lanes) {
        acc += term(wo, e, cj, cin, x0, cur, fresh_only);
        cj = advance(cj, d);
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
    let wl = wid.x + wid.y * nwg.x;
    let cur = frame.index % 2u;
    // the next frame's prefix, strided over every thread of the grid
    carry_prefix(wl * WG + lid, nwg.x * nwg.y * WG, cur);
    let lanes = p.lanes;
    let lane = lid % lanes;
    let idx = wl * (WG / lanes) + lid / lanes;
    // every thread reaches the barriers below; those past the last output sum nothing
    let valid = idx < p.out_c * p.t_out;
    let oc = idx / p.t_out;
    let t = idx % p.t_out;
    let in_g = p.in_c / p.groups;
    let cin = (oc / (p.out_c / p.groups)) * in_g;
    let x0 = t * p.stride;
    let n = select(0u, in_g * p.k, valid);
    let wo = oc * in_g * p.k;
    var acc: f32;
    if (x0 >= p.tp) {
        acc = lane_sum(wo, lane, lanes, n, cin, x0, cur, true);
    } else {
        acc = lane_sum(wo, lane, lanes, n, cin, x0, cur, false);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && valid) {
        store_output(oc, t, red[lid]);
    }
}
