// Keep the newest tp columns of a staged conv input as the next frame's prefix:
// xa[c, i] = xa[c, t + i] for i < tp (StreamingConv1d's `previous = x[..., -TP:]`).
//
//   xa : [c, ta], ta = tp + t
//
// One thread per channel, ascending. When tp > t the source [t, t + tp) overlaps the
// destination [0, tp); ascending order inside one thread reads every source column before it
// is overwritten, where a thread per element would race on the overlap (Mimi's decoder input
// conv has tp = 6 and t = 2).

struct Params {
    c: u32,
    t: u32,
    ta: u32,
    tp: u32,
}

@group(0) @binding(0) var<storage, read_write> xa: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= p.c) {
        return;
    }
    let base = c * p.ta;
    for (var i = 0u; i < p.tp; i++) {
        xa[base + i] = xa[base + p.t + i];
    }
}
