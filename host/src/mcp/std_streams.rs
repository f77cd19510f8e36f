//! How [`serve_stdio`](super::serve_stdio) reaches stdin and stdout.
//!
//! Tokio's own `stdin()` and `stdout()` run every read and every write on its blocking thread
//! pool: a message in and its answer out cost four hand-overs between threads, which on a
//! small machine are most of a quick call's time over stdio. When a stream is a pipe or a
//! socket (what MCP clients give: `tokio::process` and Python make pipes, Node makes Unix
//! sockets), it is read and written through the runtime's reactor instead, in non-blocking
//! mode, on a duplicate of the descriptor. Anything else (a terminal, a file) keeps tokio's
//! blocking streams.
//!
//! Non-blocking mode belongs to the open file, which other processes may share, so it is set
//! back as it was when the streams are dropped; and stdout stays blocking when stderr is the
//! same file (a log line written to a full pipe would otherwise fail instead of waiting).

use tokio::io::{AsyncRead, AsyncWrite};

/// stdin and stdout, as the session reads and writes them.
pub(crate) struct StdStreams {
    pub(crate) input: Box<dyn AsyncRead + Send + Unpin>,
    pub(crate) output: Box<dyn AsyncWrite + Send + Unpin>,
    /// Sets the descriptors' modes back when the session is over.
    pub(crate) restore: Restore,
}

/// Opens stdin and stdout for a session; must be called within a Tokio runtime with I/O
/// enabled.
pub(crate) fn open() -> StdStreams {
    #[cfg(unix)]
    {
        let mut restore = Restore::default();
        let input = match unix::reader() {
            Some((stream, mode)) => {
                restore.0.extend(mode);
                stream
            }
            None => Box::new(tokio::io::stdin()),
        };
        let output = match unix::writer() {
            Some((stream, mode)) => {
                restore.0.extend(mode);
                stream
            }
            None => Box::new(tokio::io::stdout()),
        };
        StdStreams {
            input,
            output,
            restore,
        }
    }
    #[cfg(not(unix))]
    StdStreams {
        input: Box::new(tokio::io::stdin()),
        output: Box::new(tokio::io::stdout()),
        restore: Restore::default(),
    }
}

/// The modes to set back on drop: a duplicate of each descriptor whose mode was changed, and
/// its flags before.
#[derive(Default)]
pub(crate) struct Restore(#[cfg(unix)] Vec<unix::Mode>);

#[cfg(unix)]
impl Drop for Restore {
    fn drop(&mut self) {
        for mode in self.0.drain(..) {
            let _ = rustix::fs::fcntl_setfl(&mode.fd, mode.flags);
        }
    }
}

#[cfg(unix)]
mod unix {
    use std::os::fd::{AsFd, OwnedFd};

    use rustix::fs::{FileType, OFlags};
    use tokio::io::{AsyncRead, AsyncWrite};
    use tokio::net::UnixStream;
    use tokio::net::unix::pipe;

    /// A descriptor's flags before they were changed.
    pub(super) struct Mode {
        pub(super) fd: OwnedFd,
        pub(super) flags: OFlags,
    }

    /// What a descriptor is, as far as the reactor is concerned.
    enum Kind {
        Pipe,
        Socket,
    }

    /// A duplicate of `fd`, what it is, and its mode before, if it is a pipe or a socket.
    fn duplicate(fd: std::os::fd::BorrowedFd<'_>) -> Option<(OwnedFd, Kind, Mode)> {
        let stat = rustix::fs::fstat(fd).ok()?;
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::Fifo => Kind::Pipe,
            FileType::Socket => Kind::Socket,
            _ => return None,
        };
        let flags = rustix::fs::fcntl_getfl(fd).ok()?;
        let mode = Mode {
            fd: fd.try_clone_to_owned().ok()?,
            flags,
        };
        Some((fd.try_clone_to_owned().ok()?, kind, mode))
    }

    /// A socket descriptor, non-blocking, as Tokio's stream.
    fn socket(fd: OwnedFd, flags: OFlags) -> Option<UnixStream> {
        rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK).ok()?;
        UnixStream::from_std(std::os::unix::net::UnixStream::from(fd)).ok()
    }

    type Reader = Box<dyn AsyncRead + Send + Unpin>;
    type Writer = Box<dyn AsyncWrite + Send + Unpin>;

    /// stdin through the reactor, if it is a pipe or a socket.
    pub(super) fn reader() -> Option<(Reader, Option<Mode>)> {
        let (fd, kind, mode) = duplicate(std::io::stdin().as_fd())?;
        let changed = !mode.flags.contains(OFlags::NONBLOCK);
        let stream: Reader = match kind {
            Kind::Pipe => Box::new(pipe::Receiver::from_owned_fd(fd).ok()?),
            Kind::Socket => Box::new(socket(fd, mode.flags)?),
        };
        Some((stream, changed.then_some(mode)))
    }

    /// stdout through the reactor, if it is a pipe or a socket that stderr is not.
    pub(super) fn writer() -> Option<(Writer, Option<Mode>)> {
        let stdout = std::io::stdout();
        let out = rustix::fs::fstat(stdout.as_fd()).ok()?;
        if let Ok(err) = rustix::fs::fstat(std::io::stderr().as_fd())
            && (err.st_dev, err.st_ino) == (out.st_dev, out.st_ino)
        {
            return None;
        }
        let (fd, kind, mode) = duplicate(stdout.as_fd())?;
        let changed = !mode.flags.contains(OFlags::NONBLOCK);
        let stream: Writer = match kind {
            Kind::Pipe => Box::new(pipe::Sender::from_owned_fd(fd).ok()?),
            Kind::Socket => Box::new(socket(fd, mode.flags)?),
        };
        Some((stream, changed.then_some(mode)))
    }
}
