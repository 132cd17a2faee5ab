//! Reading a trace file for `summary` and `export`, with one clear error per way it can fail. A
//! report's `.html` (`collector report`) is read as the trace it embeds, so a report attached to a
//! ticket can be summarised and compared like the recording it was made from.

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use oomscope_format::{Decoded, decode};
use oomscope_report::page::trace_in_report;

/// A decoded trace and, when it came from a report holding a thinned copy, the report's notice.
#[derive(Debug)]
pub struct TraceFile {
    /// What decoded; damage inside the file comes back as warnings, not errors.
    pub decoded: Decoded,
    /// The report's notice that its trace is a thinned copy of the recording.
    pub notice: Option<String>,
}

/// Reads and decodes a trace, or the trace a report embeds.
pub fn read_trace_file(path: &Path) -> Result<TraceFile> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    not_a_snapshot(path, &bytes)?;
    let (bytes, notice) = match trace_in_report(&bytes) {
        None => (bytes, None),
        Some(Ok(t)) => (t.bytes, t.notice),
        Some(Err(e)) => return Err(anyhow!("cannot open {}: {e}", path.display())),
    };
    let decoded = decode(&bytes).with_context(|| format!("cannot open {}", path.display()))?;
    Ok(TraceFile { decoded, notice })
}

/// Reads and decodes a trace (or a report's); damage inside the file comes back as warnings.
pub fn read_trace(path: &Path) -> Result<Decoded> {
    read_trace_file(path).map(|f| f.decoded)
}

/// The error for a PyTorch memory snapshot given where a trace is expected.
pub fn not_a_snapshot(path: &Path, bytes: &[u8]) -> Result<()> {
    if oomscope_snapshot::looks_like_pickle(bytes) {
        return Err(anyhow!(
            "{} is a PyTorch memory snapshot (a pickle), not a trace: `collector summary`, \
             `collector report` and `collector export --format csv|chrome` read snapshots",
            path.display()
        ));
    }
    Ok(())
}

/// `path` opened for reading when it holds a pickle (a PyTorch memory snapshot) rather than a
/// trace; the bytes looked at stay in the reader.
pub fn open_snapshot(path: &Path) -> Result<Option<BufReader<File>>> {
    let cannot = || format!("cannot read {}", path.display());
    let mut reader = BufReader::new(File::open(path).with_context(cannot)?);
    let head = reader.fill_buf().with_context(cannot)?;
    Ok(oomscope_snapshot::looks_like_pickle(head).then_some(reader))
}
