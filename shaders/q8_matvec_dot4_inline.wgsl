// Linear layer with Q8_0 weights on packed 8-bit integers (q8_dot4_common.wgsl, which
// precedes this file), without the workgroup's quantization step of q8_matvec_dot4.wgsl:
// each row group quantizes the input units its lanes take itself, as it reads them, so
// its first weight loads wait for no barrier and no other thread's input. A unit is then
// quantized once per row group rather than once per workgroup (the same arithmetic, so
// the two kernels agree bit for bit).
//
// A workgroup of 256 threads is 256 / p.lanes row groups of p.lanes threads; a row group
// computes 4 consecutive output rows of one input row, its lanes taking units l,
// l + lanes, ... (two per iteration, in chunks of 256 units as q8_matvec_dot4.wgsl sums
// them); then a tree reduction per row over the group's lanes. Workgroup w computes input
// row w / ceil(n / rows) and its rows (w % ceil(n / rows)) * rows, ...
// (rows = 4 * 256 / lanes).

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
    let r = w / per_row;
    let i0 = (w % per_row) * rows + g * RT;
    let valid = r < p.t && i0 < p.n;
    let nu = p.k / 16u;
    let width = select(p.k, 2u * p.k, p.input == 1u);
    let xrow = (p.x_offset + r * width) / 4u;

    var acc = vec4<f32>(0.0);
    var sq = 0.0;
    if (valid) {
        for (var c0 = 0u; c0 < nu; c0 += CHUNK) {
            let units = min(CHUNK, nu - c0);
            var j = lane;
            for (; j + lanes < units; j += 2u * lanes) {
                let u = c0 + j;
                let u1 = c0 + j + lanes;
                var sa = 0.0;
                var sb = 0.0;
                let xa = load_unit(xrow, u, &sa);
                let xb = load_unit(xrow, u1, &sb);
                acc.x += unit_dot(i0, u, xa) + unit_dot(i0, u1, xb);
                acc.y += unit_dot(i0 + 1u, u, xa) + unit_dot(i0 + 1u, u1, xb);
                acc.z += unit_dot(i0 + 2u, u, xa) + unit_dot(i0 + 2u, u1, xb);
                acc.w += unit_dot(i0 + 3u, u, xa) + unit_dot(i0 + 3u, u1, xb);
                if (p.input == 2u || p.input == 3u) {
                    sq += sa + sb;
                }
            }
            if (j < units) {
                let u = c0 + j;
                var sa = 0.0;
                let xa = load_unit(xrow, u, &sa);
                acc.x += unit_dot(i0, u, xa);
                acc.y += unit_dot(i0 + 1u, u, xa);
                acc.z += unit_dot(i0 + 2u, u, xa);
                acc.w += unit_dot(i0 + 3u, u, xa);
                if (p.input == 2u || p.input == 3u) {
                    sq += sa;
                }
            }
        }
    }
    finish(lid, g, lane, lanes, i0, r, valid, acc, sq);
}
