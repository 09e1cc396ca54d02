// The input activation of the conv kernels that load their input as it is (no ELU, or the
// ELU applied by the conv that wrote it: PlanBuilder's `Elu`); conv1d_load_elu.wgsl is the
// one of the convs that apply it on load.
fn act_in(v: f32) -> f32 {
    return v;
}
