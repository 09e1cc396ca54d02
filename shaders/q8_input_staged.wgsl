// q8_matvec_dot4.wgsl's pipelines for the linears that quantize their input row into
// workgroup memory (every p.input but 4); q8_input_packed.wgsl is the one of an input row
// already quantized.
const PACKED: bool = false;
