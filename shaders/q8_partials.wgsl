// The i8 Q8_0 kernel's most partial rows (q8_matvec_dot4.wgsl's p.partials) for the linears
// that read a residual row behind which attention_out_proj.wgsl wrote its partial rows: a
// pipeline of its own, so that the others keep the registers they have without them.
const MAX_PARTIALS: u32 = 8u;
