//! An f32 table of rows (an embedding table) kept in as many GPU buffers as the device's
//! limits need: parts of whole rows, each bound whole ([`super::split_table`]). Moshi 7B's
//! audio embeddings (`[16 * 2049, 4096]`, 537 MB) and text embedding (`[32001, 4096]`,
//! 524 MB) are above WebGPU's default 128 MiB binding and 256 MiB buffer, so they live in
//! five parts each; [`super::PlanBuilder::embed_sum`] dispatches once per part.

use super::limits::{part_name, split_table};
use super::GpuContext;
use crate::error::{Error, Result};

/// A `[rows, cols]` f32 table in parts of whole rows (see the module doc).
pub struct SplitTable {
    /// The checkpoint name (the parts are `NAME.partK` when there are several).
    pub name: String,
    /// Rows of the whole table.
    pub rows: usize,
    /// f32 values per row.
    pub cols: usize,
    /// Per part: its buffer, its first row, its rows.
    pub parts: Vec<(wgpu::Buffer, usize, usize)>,
}

impl SplitTable {
    /// A zero-filled table on `ctx`, split for the context's limits. [`Error::Limit`] when
    /// one row does not fit.
    pub fn zeros(ctx: &GpuContext, name: &str, rows: usize, cols: usize) -> Result<Self> {
        let layout = split_table(name, rows, cols, &ctx.info.limits())?;
        let count = layout.len();
        let parts = layout
            .into_iter()
            .enumerate()
            .map(|(k, (row0, n))| Ok((ctx.zeros(&part_name(name, k, count), n * cols)?, row0, n)))
            .collect::<Result<_>>()?;
        Ok(Self { name: name.to_string(), rows, cols, parts })
    }

    /// Write rows from `row0` (`data` holds whole rows, row-major) across the parts they
    /// fall in. [`Error::Input`] when they run past the table.
    pub fn write_rows(&self, queue: &wgpu::Queue, row0: usize, data: &[f32]) -> Result<()> {
        let cols = self.cols.max(1);
        let n = data.len() / cols;
        if data.len() % cols != 0 || row0 + n > self.rows {
            return Err(Error::Input(format!("table `{}`: {} values from row {row0} do not fit [{}, {}]", self.name, data.len(), self.rows, self.cols)));
        }
        for (buf, p0, pn) in &self.parts {
            let a = row0.max(*p0);
            let b = (row0 + n).min(p0 + pn);
            if a < b {
                queue.write_buffer(buf, ((a - p0) * cols * 4) as u64, bytemuck::cast_slice(&data[(a - row0) * cols..(b - row0) * cols]));
            }
        }
        Ok(())
    }

    /// Each part's buffer with its name, in row order.
    pub fn buffers(&self) -> Vec<(String, &wgpu::Buffer)> {
        let count = self.parts.len();
        self.parts.iter().enumerate().map(|(k, (b, _, _))| (part_name(&self.name, k, count), b)).collect()
    }

    /// Bytes the parts take.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|(b, _, _)| b.size()).sum()
    }
}
