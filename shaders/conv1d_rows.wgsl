// Causal streaming Conv1d for deep, short layers on GPU adapters, where the reduction (input
// channels per group times taps) is a multiple of 4: p.lanes threads (16 to 256, a power of
// two; a workgroup of 256 threads takes 256 / p.lanes groups of outputs) stream one output
// channel's weight row as vec4s, eight loads in flight a lane, and apply each weight to
// p.cols consecutive output columns (1 to 4) at once, so that the row is read once for
// them; then a tree reduction over the lanes, a vec4 of columns each. conv1d_lanes.wgsl reads
// the row one f32 at a time, once per output column. Same bindings (the weights as vec4s),
// parameters, staging, carry and result as the other conv kernels.
//
// Parameters, bindings, the staged input, its carry and out_index: conv1d_common.wgsl,
// which the kernel table prepends.

const WG: u32 = 256u;
@group(0) @binding(0) var<storage, read> w: array<vec4<f32>>;
var<workgroup> red: array<vec4<f32>, 256>;

// (channel, tap) of the term after the one at cj
fn next_tap(cj: vec2<u32>) -> vec2<u32> {
    return select(vec2<u32>(cj.x, cj.y + 1u), vec2<u32>(cj.x + 1u, 0u), cj.y + 1u >= p.k);
}

// The staged input of term (channel cin + cj.x, tap cj.y) for each of the nc columns from
// the one whose window starts at x0 (the others 0).
fn column_inputs(cj: vec2<u32>, cin: u32, x0: u32, nc: u32, cur: u32) -> vec4<f32> {
    let c = cin + cj.x;
    let j = x0 + cj.y * p.dilation;
    var v = vec4<f32>(staged(c, j, cur), 0.0, 0.0, 0.0);
    if (nc > 1u) {
        v.y = staged(c, j + p.stride, cur);
    }
    if (nc > 2u) {
        v.z = staged(c, j + 2u * p.stride, cur);
    }
    if (nc > 3u) {
        v.w = staged(c, j + 3u * p.stride, cur);
    }
    return v;
}

// The four terms of weight vec4 wv, the first at cj, for each column
fn terms(wv: vec4<f32>, cj: vec2<u32>, cin: u32, x0: u32, nc: u32, cur: u32) -> vec4<f32> {
    let c1 = next_tap(cj);
    let c2 = next_tap(c1);
    let c3 = next_tap(c2);
    return (wv.x * column_inputs(cj, cin, x0, nc, cur) + wv.y * column_inputs(c1, cin, x0, nc, cur))
        + (wv.z * column_inputs(c2, cin, x0, nc, cur) + wv.w * column_inputs(c3, cin, x0, nc, cur));
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
    // this lane group's outputs: channel oc, columns t0 .. t0 + nc
    let idx = wl * (WG / lanes) + lid / lanes;
    let blocks = (p.t_out + p.cols - 1u) / p.cols;
    // every thread reaches the barriers below; those past the last group sum nothing
    let valid = idx < p.out_c * blocks;
    let oc = idx / blocks;
    let t0 = (idx % blocks) * p.cols;
    let nc = select(0u, min(p.cols, p.t_out - t0), valid);
    let in_g = p.in_c / p.groups;
    let cin = (oc / (p.out_c / p.groups)) * in_g;
    let x0 = t0 * p.stride;
    let n4 = select(0u, in_g * p.k / 4u, valid);
    let wo = oc * (in_g * p.k / 4u);
    let m = 4u * lanes;
    let d = vec2<u32>(m / p.k, m % p.k);
    var cj = vec2<u32>((4u * lane) / p.k, (4u * lane) % p.k);
    var acc = vec4<f32>(0.0);
    var q = lane;
    for (; q + 7u * lanes < n4; q += 8u * lanes) {
        let w0 = w[wo + q];
        let w1 = w[wo + q + lanes];
        let w2 = w[wo + q + 2u * lanes];
        let w3 = w[wo + q + 3u * lanes];
        let w4 = w[wo + q + 4u * lanes];
        let w5 = w[wo + q + 5u * lanes];
        let w6 = w[wo + q + 6u * lanes];
        let w7 = w[wo + q + 7u * lanes];
        let c1 = advance(cj, d);
        let c2 = advance(c1, d);
        let c3 = advance(c2, d);
        let c4 = advance(c3, d);
        let c5 = advance(c4, d);
        let c6 = advance(c5, d);
        let c7 = advance(c6, d);
        acc += ((terms(w0, cj, cin, x0, nc, cur) + terms(w1, c1, cin, x0, nc, cur))
            + (terms(w2, c2, cin, x0, nc, cur) + terms(w3, c3, cin, x0, nc, cur)))
            + ((terms(w4, c4, cin, x0, nc, cur) + terms(w5, c5, cin, x0, nc, cur))
            + (terms(w6, c6, cin, x0, nc, cur) + terms(w7, c7, cin, x0, nc, cur)));
        cj = advance(c7, d);
    }
    for (; q < n4; q += lanes) {
        acc += terms(w[wo + q], cj, cin, x0, nc, cur);
        cj = advance(cj, d);
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var s = lanes / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u) {
        let sums = red[lid];
        for (var c = 0u; c < nc; c++) {
            store_output(oc, t0 + c, sums[c]);
        }
    }
}
