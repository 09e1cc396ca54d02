// The input activation of the conv kernels that apply SEANet's ELU (alpha 1) as they load
// their input (PlanBuilder's `Elu::input`); conv1d_load_raw.wgsl is the one of the convs
// that load it as it is. A prelude of its own, not a branch on a parameter: the ELU's
// exp() in the loads of conv1d_lanes cost registers and time even where the branch was
// never taken.
fn act_in(v: f32) -> f32 {
    if (v < 0.0) {
        return exp(v) - 1.0;
    }
    return v;
}
