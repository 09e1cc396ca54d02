//! Native file formats for the command-line tool: WAV in (any rate, any channel count,
//! down-mixed and resampled to 24 kHz with `rubato`), WAV out (24 kHz mono 16-bit), and
//! codes as NumPy `.npy` integer arrays of shape `[frames, n_q]`.
