//! Streaming causal convolutions (moshi.modules.conv `StreamingConv1d` and
//! `StreamingConvTranspose1d`): weights, the CPU oracle's step, and the GPU plan step.
//!
//! Per call a conv takes `[in_c, t]` (t a multiple of the stride) and returns
//! `[out_c, t / stride]`; it keeps the last `k_eff - stride` input columns for the next call
//! (`previous`). A transposed conv returns `[out_c, t * stride]` and keeps the
//! `k - stride` overlapping output columns, bias removed (`partial`).

use crate::error::{Error, Result};
use crate::gpu::{ConvSpec, ConvTrSpec, Elu, PlanBuilder, Tensor};
use crate::weights::TensorSource;

/// A causal Conv1d with its checkpoint name (`<name>.weight`, `<name>.bias`).
pub struct Conv1d {
    pub name: String,
    /// `[out_c, in_c / groups, k]`
    pub w: Vec<f32>,
    /// `[out_c]`
    pub b: Option<Vec<f32>>,
    pub in_c: usize,
    pub out_c: usize,
    pub k: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
    /// `pad_mode == "replicate"` (the first frame's prefix repeats its first sample).
    pub replicate: bool,
}

/// The CPU oracle's streaming state of one [`Conv1d`].
pub struct Conv1dState {
    previous: Vec<f32>,
    first: bool,
}

impl Conv1d {
    /// Load `<name>.weight` `[out_c, in_c, k]` (and `<name>.bias` when `bias`).
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        store: &dyn TensorSource,
        name: &str,
        (in_c, out_c, k): (usize, usize, usize),
        stride: usize,
        dilation: usize,
        bias: bool,
        replicate: bool,
    ) -> Result<Self> {
        let w = store.get(&format!("{name}.weight"), &[out_c, in_c, k])?;
        let b = if bias { Some(store.get(&format!("{name}.bias"), &[out_c])?) } else { None };
        Ok(Self { name: name.to_string(), w, b, in_c, out_c, k, stride, dilation, groups: 1, replicate })
    }

    /// `(k - 1) * dilation + 1`.
    pub fn k_eff(&self) -> usize {
        (self.k - 1) * self.dilation + 1
    }

    /// Columns carried between calls.
    pub fn tp(&self) -> usize {
        self.k_eff() - self.stride
    }

    /// A fresh stream.
    pub fn state(&self) -> Conv1dState {
        Conv1dState { previous: vec![0.0; self.in_c * self.tp()], first: true }
    }

    /// CPU oracle: one call on `x` `[in_c, t]`, applying ELU to the input first when `elu`.
    pub fn step(&self, st: &mut Conv1dState, x: &[f32], elu: bool) -> Vec<f32> {
        let t = x.len() / self.in_c;
        let tp = self.tp();
        let ta = tp + t;
        let mut xa = vec![0f32; self.in_c * ta];
        for c in 0..self.in_c {
            for i in 0..t {
                let v = x[c * t + i];
                xa[c * ta + tp + i] = if elu { elu1(v) } else { v };
            }
            let first_col = xa[c * ta + tp];
            for i in 0..tp {
                xa[c * ta + i] = if self.replicate && st.first { first_col } else { st.previous[c * tp + i] };
            }
        }
        let t_out = t / self.stride;
        let in_g = self.in_c / self.groups;
        let out_g = self.out_c / self.groups;
        let mut y = vec![0f32; self.out_c * t_out];
        for oc in 0..self.out_c {
            let g = oc / out_g;
            for to in 0..t_out {
                let mut acc = self.b.as_ref().map_or(0.0, |b| b[oc]);
                for ic in 0..in_g {
                    let w = &self.w[(oc * in_g + ic) * self.k..][..self.k];
                    let xr = &xa[(g * in_g + ic) * ta + to * self.stride..];
                    for (j, wj) in w.iter().enumerate() {
                        acc += wj * xr[j * self.dilation];
                    }
                }
                y[oc * t_out + to] = acc;
            }
        }
        for c in 0..self.in_c {
            st.previous[c * tp..(c + 1) * tp].copy_from_slice(&xa[c * ta + t..c * ta + t + tp]);
        }
        st.first = false;
        y
    }

    /// GPU: upload the weights and append this conv to the plan (see
    /// [`PlanBuilder::conv1d`]; `time_major` is the input's layout, `time_major_out` the
    /// output's).
    #[allow(clippy::too_many_arguments)]
    pub fn plan(
        &self,
        b: &mut PlanBuilder<'_>,
        x: &Tensor,
        time_major: bool,
        time_major_out: bool,
        elu: Elu,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (w, bias) = upload(b, &self.name, &self.w, self.b.as_deref())?;
        let spec = ConvSpec {
            name: &self.name,
            w: &w,
            b: bias.as_ref(),
            in_c: self.in_c,
            out_c: self.out_c,
            k: self.k,
            stride: self.stride,
            dilation: self.dilation,
            groups: self.groups,
            replicate: self.replicate,
        };
        b.conv1d(&spec, x, time_major, time_major_out, elu, residual)
    }
}

/// A causal ConvTranspose1d with its checkpoint name.
pub struct ConvTr1d {
    pub name: String,
    /// `[in_c, out_c / groups, k]`
    pub w: Vec<f32>,
    /// `[out_c]`
    pub b: Option<Vec<f32>>,
    pub in_c: usize,
    pub out_c: usize,
    pub k: usize,
    pub stride: usize,
    pub groups: usize,
}

/// The CPU oracle's streaming state of one [`ConvTr1d`].
pub struct ConvTr1dState {
    partial: Vec<f32>,
}

impl ConvTr1d {
    /// Load `<name>.weight` `[in_c, out_c / groups, k]` (and `<name>.bias` when `bias`).
    pub fn load(
        store: &dyn TensorSource,
        name: &str,
        (in_c, out_c, k): (usize, usize, usize),
        stride: usize,
        groups: usize,
        bias: bool,
    ) -> Result<Self> {
        let w = store.get(&format!("{name}.weight"), &[in_c, out_c / groups, k])?;
        let b = if bias { Some(store.get(&format!("{name}.bias"), &[out_c])?) } else { None };
        Ok(Self { name: name.to_string(), w, b, in_c, out_c, k, stride, groups })
    }

    /// A fresh stream.
    pub fn state(&self) -> ConvTr1dState {
        ConvTr1dState { partial: vec![0.0; self.out_c * (self.k - self.stride)] }
    }

    /// CPU oracle: one call on `x` `[in_c, t]` (ELU on the input first when `elu`).
    pub fn step(&self, st: &mut ConvTr1dState, x: &[f32], elu: bool) -> Vec<f32> {
        let t = x.len() / self.in_c;
        let tp = self.k - self.stride;
        let full_t = (t - 1) * self.stride + self.k;
        let in_g = self.in_c / self.groups;
        let out_g = self.out_c / self.groups;
        let mut full = vec![0f32; self.out_c * full_t];
        for ic in 0..self.in_c {
            let g = ic / in_g;
            for ti in 0..t {
                let v = x[ic * t + ti];
                let v = if elu { elu1(v) } else { v };
                for ol in 0..out_g {
                    let oc = g * out_g + ol;
                    let w = &self.w[(ic * out_g + ol) * self.k..][..self.k];
                    for (j, wj) in w.iter().enumerate() {
                        full[oc * full_t + ti * self.stride + j] += wj * v;
                    }
                }
            }
        }
        if let Some(b) = &self.b {
            for oc in 0..self.out_c {
                for i in 0..full_t {
                    full[oc * full_t + i] += b[oc];
                }
            }
        }
        let ts = full_t - tp;
        let mut y = vec![0f32; self.out_c * ts];
        for oc in 0..self.out_c {
            for i in 0..tp {
                full[oc * full_t + i] += st.partial[oc * tp + i];
            }
            let bias = self.b.as_ref().map_or(0.0, |b| b[oc]);
            for i in 0..tp {
                st.partial[oc * tp + i] = full[oc * full_t + ts + i] - bias;
            }
            y[oc * ts..(oc + 1) * ts].copy_from_slice(&full[oc * full_t..oc * full_t + ts]);
        }
        y
    }

    /// GPU: upload the weights and append this transposed conv to the plan (`[t * stride,
    /// out_c]` when `time_major_out`, see [`PlanBuilder::conv_transpose1d`]).
    /// A kernel of twice the stride (every one of Mimi's) runs as a conv of kernel 2 into
    /// `stride` phases ([`PlanBuilder::conv_transpose1d_as_conv`], its weights laid out
    /// here); any other on [`PlanBuilder::conv_transpose1d`].
    pub fn plan(&self, b: &mut PlanBuilder<'_>, x: &Tensor, elu: Elu, time_major_out: bool) -> Result<Tensor> {
        let s = self.stride;
        let fits = self.groups > 0
            && self.in_c % self.groups == 0
            && self.out_c % self.groups == 0
            && self.w.len() == self.in_c * (self.out_c / self.groups) * self.k;
        if !fits {
            return Err(Error::config(
                &self.name,
                format!("a transposed conv {} -> {} of kernel {} in {} groups cannot hold {} weights", self.in_c, self.out_c, self.k, self.groups, self.w.len()),
            ));
        }
        if self.k == 2 * s && x.shape.len() == 2 && x.shape[0] == self.in_c {
            let (in_g, out_g) = (self.in_c / self.groups, self.out_c / self.groups);
            // w2[oc * s + r, icl, 0] = w[g in_g + icl, ocl, r + s], [.., 1] = [.., r]
            let mut w2 = vec![0f32; self.out_c * s * in_g * 2];
            for oc in 0..self.out_c {
                let (g, ocl) = (oc / out_g, oc % out_g);
                for icl in 0..in_g {
                    let src = &self.w[((g * in_g + icl) * out_g + ocl) * self.k..][..self.k];
                    for r in 0..s {
                        let dst = ((oc * s + r) * in_g + icl) * 2;
                        w2[dst] = src[r + s];
                        w2[dst + 1] = src[r];
                    }
                }
            }
            // (the bias stays `[out_c]`: each phase reads its channel's)
            let (w, bias) = upload(b, &self.name, &w2, self.b.as_deref())?;
            let spec = ConvSpec {
                name: &self.name,
                w: &w,
                b: bias.as_ref(),
                in_c: self.in_c,
                out_c: self.out_c * s,
                k: 2,
                stride: 1,
                dilation: 1,
                groups: self.groups,
                replicate: false,
            };
            return b.conv_transpose1d_as_conv(&spec, x, elu, time_major_out, s);
        }
        let (w, bias) = upload(b, &self.name, &self.w, self.b.as_deref())?;
        let spec = ConvTrSpec {
            name: &self.name,
            w: &w,
            b: bias.as_ref(),
            in_c: self.in_c,
            out_c: self.out_c,
            k: self.k,
            stride: self.stride,
            groups: self.groups,
        };
        b.conv_transpose1d(&spec, x, elu, time_major_out)
    }
}

/// Upload a layer's weight and optional bias as `<name>.weight` and `<name>.bias`.
fn upload(b: &PlanBuilder<'_>, name: &str, w: &[f32], bias: Option<&[f32]>) -> Result<(wgpu::Buffer, Option<wgpu::Buffer>)> {
    let ctx = b.ctx();
    let w = ctx.storage_f32(&format!("{name}.weight"), w)?;
    let bias = bias.map(|v| ctx.storage_f32(&format!("{name}.bias"), v)).transpose()?;
    Ok((w, bias))
}

/// ELU with alpha 1 (torch.nn.ELU).
pub fn elu1(v: f32) -> f32 {
    if v > 0.0 {
        v
    } else {
        v.exp_m1()
    }
}
