// Sum of embedding rows chosen by tokens (moshi.models.lm_utils ScaledEmbedding, whose
// token -1 gives a zero row): out[c] (+)= sum_l table[l, tokens[p.slot + l], c] over
// p.tables tables of p.rows rows each, skipping negative tokens.
//
//   table  : [part_rows, dim] f32, rows p.row0 .. p.row0 + p.part_rows of the
//            [tables * rows, dim] tables   tokens : [slots] i32   out : [dim] f32
//
// A table above the device's binding limit lives in parts of whole rows, one dispatch each
// (the first as asked, the others accumulating); a part adds only the rows it holds, in
// table order, so the sum is the same as over one buffer.
// p.accumulate == 1 adds onto `out` (a depformer input already holding its projection).

struct Params {
    tables: u32,
    rows: u32,
    dim: u32,
    slot: u32,
    accumulate: u32,
    row0: u32,
    part_rows: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<storage, read> table: array<f32>;
@group(0) @binding(1) var<storage, read> tokens: array<i32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.dim) {
        return;
    }
    var acc = 0.0;
    if (p.accumulate == 1u) {
        acc = out[c];
    }
    for (var l = 0u; l < p.tables; l++) {
        let tok = tokens[p.slot + l];
        if (tok >= 0 && u32(tok) < p.rows) {
            let row = l * p.rows + u32(tok);
            if (row >= p.row0 && row - p.row0 < p.part_rows) {
                acc += table[(row - p.row0) * p.dim + c];
            }
        }
    }
    out[c] = acc;
}
