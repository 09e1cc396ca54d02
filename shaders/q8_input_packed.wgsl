// q8_matvec_dot4.wgsl's pipelines for an input row already quantized (p.input 4, the
// hidden row `linear_in` writes for `linear_out`): nothing is staged.
// q8_input_staged.wgsl is the one of the linears that quantize their input into workgroup
// memory. A constant of each pipeline, not a branch on a parameter, so that neither carries
// the other's code.
const PACKED: bool = true;
