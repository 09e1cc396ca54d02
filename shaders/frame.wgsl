// The per-frame uniform of the stateful kernels (FrameParams in src/gpu/kernels.rs, field for
// field), the first part of each such kernel's source: the stream position of the frame's
// first transformer step, 1 on the stream's first frame, and the frame's index in the stream
// (its parity picks which half of a conv's two-half state is read and which written).

struct Frame {
    pos: u32,
    first: u32,
    index: u32,
    _pad: u32,
}

