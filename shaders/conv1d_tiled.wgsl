// Causal streaming Conv1d over one frame (moshi.modules.conv.StreamingConv1d in streaming
// mode) for wide, long layers: a workgroup of 256 threads computes a tile of TO output
// channels x TT output columns of one group. For each chunk of the group's input channels
// it stages the tile's input window into workgroup memory once (the carried prefix, the
// replicate padding and the ELU resolved as each element is staged) and the matching
// weights, four loads in flight a thread; then each of its four quarters of 64 threads
// takes every fourth channel of the chunk, each thread accumulating 2 output channels x 2
// columns from workgroup memory, and the quarters' sums are added at the end. Same
// bindings, parameters, staging and carry as conv1d_lanes.wgsl and conv1d_reduce.wgsl (for
// deep, short layers on GPU and CPU adapters), its result summed in another order; the plan
// builder picks one by shape and adapter.
//
// Parameters, bindings, the staged input, its carry and out_index: conv1d_common.wgsl,
// which the kernel table prepends.
//
// Each quarter sums its channels in the CPU oracle's order, input channel then tap.
//
// Grid: groups * ceil(out_g / TO) * ceil(t_out / TT) workgroups (linear over x then y), the
// column tile fastest. A tile's window is win = (TT - 1) * stride + (k - 1) * dilation + 1
// columns; a chunk takes min(in_g, XS / win, (WS / TO - 1) / k) channels, so the plan builder
// sends a conv here only where win <= XS and k <= WS / TO - 1 (CONV_TILED_* in plan.rs).
// Workgroup memory: (XS + WS) * 4 = 15360 bytes, under WebGPU's default 16384.

// output channels per tile (threads: TO / 2 rows)
const TO: u32 = 16u;
// output columns per tile (threads: TT / 2 columns)
const TT: u32 = 16u;
// workgroup floats for one chunk's input window [channels, win]
const XS: u32 = 1280u;
// workgroup floats for one chunk's weights [TO, channels * k (odd stride)]
const WS: u32 = 2560u;

var<workgroup> xs: array<f32, XS>;
var<workgroup> ws: array<f32, WS>;

// y[oc, t] = act_out(acc (+ res)), where the tile holds that output
fn store(oc: u32, t: u32, ok: bool, acc: f32) {
    if (!ok) {
        return;
    }
    let yo = out_index(oc, t);
    var v = acc;
    if (p.residual == 1u) {
        v += res[yo];
    }
    y[yo] = act_out(v);
}

const WG: u32 = 256u;

// slot of element e of the chunk's input window in xs ([n_c, win])
fn xs_index(e: u32, n_c: u32, win: u32) -> u32 {
    if (p.time_major == 1u) {
        return (e % n_c) * win + e / n_c;
    }
    return e;
}

// element e of the chunk's input window (e runs over x's own layout)
fn stage_x(e: u32, n_c: u32, win: u32, j0: u32, ta: u32, c_base: u32, cur: u32) -> f32 {
    var c: u32;
    var j: u32;
    if (p.time_major == 1u) {
        c = e % n_c;
        j = e / n_c;
    } else {
        c = e / win;
        j = e % win;
    }
    if (j0 + j < ta) {
        return staged(c_base + c, j0 + j, cur);
    }
    return 0.0;
}

// element e of the chunk's weights [TO, row] (0 past the group's channels)
fn stage_w(e: u32, row: u32, n_oc: u32, oc0: u32, in_g: u32, c0: u32) -> f32 {
    let o = e / row;
    if (o < n_oc) {
        return w[((oc0 + o) * in_g + c0) * p.k + e % row];
    }
    return 0.0;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let tile = wid.x + wid.y * nwg.x;
    let cur = frame.index % 2u;
    // the next frame's prefix, strided over every thread of the grid
    carry_prefix(tile * WG + lid, nwg.x * nwg.y * WG, cur);
    let in_g = p.in_c / p.groups;
    let out_g = p.out_c / p.groups;
    let oc_tiles = (out_g + TO - 1u) / TO;
    let t_tiles = (p.t_out + TT - 1u) / TT;
    if (tile >= p.groups * oc_tiles * t_tiles) {
        return;
    }
    let g = tile / (oc_tiles * t_tiles);
    let ol0 = ((tile / t_tiles) % oc_tiles) * TO;
    let oc0 = g * out_g + ol0;
    let n_oc = min(TO, out_g - ol0);
    let t0 = (tile % t_tiles) * TT;
    // the tile's first column of xa, its window, xa's length
    let j0 = t0 * p.stride;
    let win = (TT - 1u) * p.stride + (p.k - 1u) * p.dilation + 1u;
    let ta = p.tp + p.t;
    // (at least 1, so that a shape the plan builder would never send here cannot loop forever)
    let cc = max(1u, min(in_g, min(XS / win, (WS / TO - 1u) / p.k)));
    // this thread's quarter, and its outputs: channels ty, ty + 8 and columns tx, tx + 8 of
    // the tile
    let quarter = lid / 64u;
    let tx = lid % 8u;
    let ty = (lid % 64u) / 8u;
    let ok0 = ty < n_oc;
    let ok1 = ty + 8u < n_oc;
    var a00 = 0.0;
    var a01 = 0.0;
    var a10 = 0.0;
    var a11 = 0.0;
    if (p.has_bias == 1u && quarter == 0u) {
        if (ok0) {
            a00 = b[(oc0 + ty) / max(p.phases, 1u)];
            a01 = a00;
        }
        if (ok1) {
            a10 = b[(oc0 + ty + 8u) / max(p.phases, 1u)];
            a11 = a10;
        }
    }
    let xs1 = 8u * p.stride;
    for (var c0 = 0u; c0 < in_g; c0 += cc) {
        let n_c = min(cc, in_g - c0);
        let row = n_c * p.k;
        // an odd row stride: the 4 channel rows a warp reads at once lie in distinct banks
        let wst = row | 1u;
        // the previous chunk's reads are done
        workgroupBarrier();
        // (xs is channel-major whichever way x lies)
        let nx = n_c * win;
        let cb = g * in_g + c0;
        var e = lid;
        for (; e + 3u * WG < nx; e += 4u * WG) {
            let v0 = stage_x(e, n_c, win, j0, ta, cb, cur);
            let v1 = stage_x(e + WG, n_c, win, j0, ta, cb, cur);
            let v2 = stage_x(e + 2u * WG, n_c, win, j0, ta, cb, cur);
            let v3 = stage_x(e + 3u * WG, n_c, win, j0, ta, cb, cur);
            xs[xs_index(e, n_c, win)] = v0;
            xs[xs_index(e + WG, n_c, win)] = v1;
            xs[xs_index(e + 2u * WG, n_c, win)] = v2;
            xs[xs_index(e + 3u * WG, n_c, win)] = v3;
        }
        for (; e < nx; e += WG) {
            xs[xs_index(e, n_c, win)] = stage_x(e, n_c, win, j0, ta, cb, cur);
        }
        let nw = TO * row;
        e = lid;
        for (; e + 3u * WG < nw; e += 4u * WG) {
            let v0 = stage_w(e, row, n_oc, oc0, in_g, c0);
            let v1 = stage_w(e + WG, row, n_oc, oc0, in_g, c0);
            let v2 = stage_w(e + 2u * WG, row, n_oc, oc0, in_g, c0);
            let v3 = stage_w(e + 3u * WG, row, n_oc, oc0, in_g, c0);
            ws[(e / row) * wst + e % row] = v0;
            ws[((e + WG) / row) * wst + (e + WG) % row] = v1;
            ws[((e + 2u * WG) / row) * wst + (e + 2u * WG) % row] = v2;
            ws[((e + 3u * WG) / row) * wst + (e + 3u * WG) % row] = v3;
        }
        for (; e < nw; e += WG) {
            ws[(e / row) * wst + e % row] = stage_w(e, row, n_oc, oc0, in_g, c0);
        }
        workgroupBarrier();
        for (var c = quarter; c < n_c; c += 4u) {
            let xc = c * win + tx * p.stride;
            let wc = ty * wst + c * p.k;
            for (var j = 0u; j < p.k; j++) {
                let xo = xc + j * p.dilation;
                let x0 = xs[xo];
                let x1 = xs[xo + xs1];
                let w0 = ws[wc + j];
                let w1 = ws[wc + j + 8u * wst];
                a00 += w0 * x0;
                a01 += w0 * x1;
                a10 += w1 * x0;
                a11 += w1 * x1;
            }
        }
    }
    // the quarters' sums, added in quarter order by quarter 0 (xs is free once every
    // thread is past the last chunk)
    workgroupBarrier();
    xs[lid * 4u] = a00;
    xs[lid * 4u + 1u] = a01;
    xs[lid * 4u + 2u] = a10;
    xs[lid * 4u + 3u] = a11;
    workgroupBarrier();
    if (quarter != 0u) {
        return;
    }
    for (var q = 1u; q < 4u; q++) {
        let o = (q * 64u + lid) * 4u;
        a00 += xs[o];
        a01 += xs[o + 1u];
        a10 += xs[o + 2u];
        a11 += xs[o + 3u];
    }
    let t_a = t0 + tx;
    let t_b = t0 + tx + 8u;
    store(oc0 + ty, t_a, ok0 && t_a < p.t_out, a00);
    store(oc0 + ty, t_b, ok0 && t_b < p.t_out, a01);
    store(oc0 + ty + 8u, t_a, ok1 && t_a < p.t_out, a10);
    store(oc0 + ty + 8u, t_b, ok1 && t_b < p.t_out, a11);
}
