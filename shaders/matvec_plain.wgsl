// matvec.wgsl's pipeline for the linears that read their input rows as they are;
// matvec_norm.wgsl is the one that LayerNorms them as it reads them.
const NORM: bool = false;
