// Linear layer with Q8_0 weights (the layout and parameters of q8_matvec.wgsl) whose dot
// products run on packed 8-bit integers (q8_dot4_common.wgsl, which precedes this file):
// each workgroup first quantizes the input row into workgroup memory, 4096 inputs at a
// time, one unit of 16 a thread, and the weights' i8 quants meet them in dot4I8Packed,
// four products and their sum per instruction. An f32 kernel has to turn every weight byte
// into a float first, which costs the H200 more than loading it.
//
// A workgroup of 256 threads is 256 / p.lanes row groups of p.lanes threads; a row group
// computes 4 consecutive output rows of one input row, its lanes taking units l,
// l + lanes, ... of the chunk (two per iteration, for more loads in flight); then a tree
// reduction per row over the group's lanes. Workgroup w computes input row
// w / ceil(n / rows) and its rows (w % ceil(n / rows)) * rows, ... (rows = 4 * 256 / lanes).

// the chunk's input units, quantized (Unit's fields apart: 16-byte rows, as lanes read
// them), and (p.input 2, 3) their sums of squares
var<workgroup> x_hi: array<vec4<u32>, 256>;
var<workgroup> x_lo: array<vec4<u32>, 256>;
var<workgroup> x_scale: array<f32, 256>;
var<workgroup> x_sq: array<f32, 256>;

fn chunk_unit(j: u32) -> Unit {
    return Unit(x_hi[j], x_lo[j], x_scale[j]);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
) {
    let lid = lid3.x;
    let lanes = p.lanes;
    let g = lid / lanes;
    let lane = lid % lanes;
    let rows = (WG / lanes) * RT;
    let per_row = (p.n + rows - 1u) / rows;
    let w = wid.x + wid.y * nwg.x;
    // every workgroup of the grid reaches the barriers below; those past the last input row
    // quantize and compute nothing
    let r = w / per_row;
    let i0 = (w % per_row) * rows + g * RT;
    let live = r < p.t;
    let valid = live && i0 < p.n;
    let nu = p.k / 16u;
    let width = select(p.k, 2u * p.k, p.input == 1u);
    let xrow = (p.x_offset + r * width) / 4u;

    var acc = vec4<f32>(0.0);
    var sq = 0.0;
    for (var c0 = 0u; c0 < nu; c0 += CHUNK) {
        let units = min(CHUNK, nu - c0);
        workgroupBarrier();
        if (live && lid < units) {
            var s = 0.0;
            let xu = load_unit(xrow, c0 + lid, &s);
            x_hi[lid] = xu.hi;
            x_lo[lid] = xu.lo;
            x_scale[lid] = xu.s;
            x_sq[lid] = s;
        }
        workgroupBarrier();
        if (valid) {
            var j = lane;
            for (; j + lanes < units; j += 2u * lanes) {
                let j1 = j + lanes;
                let u = c0 + j;
                let u1 = c0 + j1;
                let xa = chunk_unit(j);
                let xb = chunk_unit(j1);
                acc.x += unit_dot(i0, u, xa) + unit_dot(i0, u1, xb);
                acc.y += unit_dot(i0 + 1u, u, xa) + unit_dot(i0 + 1u, u1, xb);
                acc.z += unit_dot(i0 + 2u, u, xa) + unit_dot(i0 + 2u, u1, xb);
                acc.w += unit_dot(i0 + 3u, u, xa) + unit_dot(i0 + 3u, u1, xb);
                if (p.input == 2u || p.input == 3u) {
                    sq += x_sq[j] + x_sq[j1];
                }
            }
            if (j < units) {
                let u = c0 + j;
                let xa = chunk_unit(j);
                acc.x += unit_dot(i0, u, xa);
                acc.y += unit_dot(i0 + 1u, u, xa);
                acc.z += unit_dot(i0 + 2u, u, xa);
                acc.w += unit_dot(i0 + 3u, u, xa);
                if (p.input == 2u || p.input == 3u) {
                    sq += x_sq[j];
                }
            }
        }
    }
    finish(lid, g, lane, lanes, i0, r, valid, acc, sq);
}
