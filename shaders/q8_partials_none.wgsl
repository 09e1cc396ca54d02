// The i8 Q8_0 kernel's most partial rows (q8_matvec_dot4.wgsl's p.partials) for the linears
// that take none: the loops over them compile away.
const MAX_PARTIALS: u32 = 0u;
