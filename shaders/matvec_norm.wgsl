// matvec.wgsl's pipeline that LayerNorms its input rows as it reads them (PlanBuilder's
// `linear_layer_norm`); matvec_plain.wgsl is the one of the linears that read them as they
// are. A constant of each pipeline, not a branch on a parameter: with the branch, each of
// Mimi's f32 linears ran 0.2 to 0.3 us longer (an NVIDIA H100, README "Benchmark").
const NORM: bool = true;
