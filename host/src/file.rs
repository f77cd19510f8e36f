//! Reading files that others may have placed (plugins, policy files): regular files only,
//! opened without blocking, read up to a size limit.

use std::io::Read;
use std::path::Path;

/// Why a file could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Opening or reading failed.
    Io(std::io::Error),
    /// It is a FIFO, a device, a socket or a directory.
    NotAFile,
    /// It is larger than the limit (its size).
    TooLarge(u64),
}

/// Reads the regular file at `path` (following links) if it holds at most `limit` bytes.
///
/// A FIFO or a device is refused without blocking on it: the file is opened non-blocking and
/// checked with `fstat` on the open descriptor, so it cannot be swapped between check and read.
pub(crate) fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path).map_err(ReadError::Io)?;
    let metadata = file.metadata().map_err(ReadError::Io)?;
    if !metadata.is_file() {
        return Err(ReadError::NotAFile);
    }
    if metadata.len() > limit {
        return Err(ReadError::TooLarge(metadata.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    // The file may grow after the check: never read past the limit.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}
