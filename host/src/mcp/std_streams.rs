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
//! back as it was when the streams are dropped (a process killed by a signal cannot: the
//! command ends the session on SIGINT and SIGTERM first). A stream that shares its file with
//! one that stays blocking keeps tokio's blocking stream too: stderr always stays blocking (a
//! log line written to a full pipe must wait, not fail), so stdout does when it is stderr's
//! file, and stdin does when it is the file of stderr or of a blocking stdout (one socket on
//! all three, as inetd gives).

use tokio::io::{AsyncRead, AsyncWrite};

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout, as the session reads and writes them.
pub(crate) struct StdStreams {
    pub(crate) input: Reader,
    pub(crate) output: Writer,
    /// Sets the descriptors' modes back when the session is over.
    pub(crate) restore: Restore,
}

/// Opens stdin and stdout for a session.
///
/// # Panics
///
/// Outside a Tokio runtime with I/O enabled, when stdin or stdout is a pipe or a socket.
pub(crate) fn open() -> StdStreams {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut restore = Restore::default();
    #[cfg(unix)]
    let (input, output) = {
        let same = unix::same_files();
        // stdout through the reactor unless it is stderr's file; stdin unless it is the file
        // of stderr or of a stdout that stays blocking.
        let output = (!same.out_err)
            .then(|| unix::writer(&mut restore))
            .flatten();
        let input = (!same.in_err && (output.is_some() || !same.in_out))
            .then(|| unix::reader(&mut restore))
            .flatten();
        (input, output)
    };
    #[cfg(not(unix))]
    let (input, output): (Option<Reader>, Option<Writer>) = (None, None);
    StdStreams {
        input: input.unwrap_or_else(|| Box::new(tokio::io::stdin())),
        output: output.unwrap_or_else(|| Box::new(tokio::io::stdout())),
        restore,
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
            mode.set_back();
        }
    }
}

#[cfg(unix)]
mod unix {
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

    use rustix::fs::{FileType, OFlags};
    use tokio::net::UnixStream;
    use tokio::net::unix::pipe;

    use super::{Reader, Restore, Writer};

    /// A descriptor's flags before they were changed, on a duplicate of it.
    pub(super) struct Mode {
        fd: OwnedFd,
        flags: OFlags,
    }

    impl Mode {
        pub(super) fn set_back(&self) {
            let _ = rustix::fs::fcntl_setfl(&self.fd, self.flags);
        }
    }

    /// Which of the standard streams are the same open file (or the same socket).
    pub(super) struct Same {
        pub(super) in_out: bool,
        pub(super) in_err: bool,
        pub(super) out_err: bool,
    }

    pub(super) fn same_files() -> Same {
        let id = |fd: BorrowedFd<'_>| rustix::fs::fstat(fd).ok().map(|s| (s.st_dev, s.st_ino));
        let [input, output, error] = [
            id(std::io::stdin().as_fd()),
            id(std::io::stdout().as_fd()),
            id(std::io::stderr().as_fd()),
        ];
        let same = |a: &Option<_>, b: &Option<_>| a.is_some() && a == b;
        Same {
            in_out: same(&input, &output),
            in_err: same(&input, &error),
            out_err: same(&output, &error),
        }
    }

    /// What a descriptor is, as far as the reactor is concerned.
    enum Kind {
        Pipe,
        Socket,
    }

    /// A duplicate of `fd` set non-blocking, and what it is, if it is a pipe or a socket; its
    /// mode before goes to `restore` first (a failure later sets it back at once).
    fn non_blocking(fd: BorrowedFd<'_>, restore: &mut Restore) -> Option<(OwnedFd, Kind)> {
        let stat = rustix::fs::fstat(fd).ok()?;
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::Fifo => Kind::Pipe,
            FileType::Socket => Kind::Socket,
            _ => return None,
        };
        let flags = rustix::fs::fcntl_getfl(fd).ok()?;
        let duplicate = fd.try_clone_to_owned().ok()?;
        if !flags.contains(OFlags::NONBLOCK) {
            restore.0.push(Mode {
                fd: fd.try_clone_to_owned().ok()?,
                flags,
            });
            if rustix::fs::fcntl_setfl(&duplicate, flags | OFlags::NONBLOCK).is_err() {
                undo(restore);
                return None;
            }
        }
        Some((duplicate, kind))
    }

    /// Sets back the mode recorded last, after the stream it was changed for failed.
    fn undo(restore: &mut Restore) {
        if let Some(mode) = restore.0.pop() {
            mode.set_back();
        }
    }

    /// stdin through the reactor, if it is a pipe or a socket.
    pub(super) fn reader(restore: &mut Restore) -> Option<Reader> {
        through_reactor(std::io::stdin().as_fd(), restore, |fd, kind| match kind {
            Kind::Pipe => pipe::Receiver::from_owned_fd_unchecked(fd)
                .ok()
                .map(|pipe| Box::new(pipe) as Reader),
            Kind::Socket => socket(fd).map(|socket| Box::new(socket) as Reader),
        })
    }

    /// stdout through the reactor, if it is a pipe or a socket.
    pub(super) fn writer(restore: &mut Restore) -> Option<Writer> {
        through_reactor(std::io::stdout().as_fd(), restore, |fd, kind| match kind {
            Kind::Pipe => pipe::Sender::from_owned_fd_unchecked(fd)
                .ok()
                .map(|pipe| Box::new(pipe) as Writer),
            Kind::Socket => socket(fd).map(|socket| Box::new(socket) as Writer),
        })
    }

    /// The stream `make` makes of a non-blocking duplicate of `fd`; if it makes none, the mode
    /// changed for it is set back at once.
    fn through_reactor<T>(
        fd: BorrowedFd<'_>,
        restore: &mut Restore,
        make: impl FnOnce(OwnedFd, Kind) -> Option<T>,
    ) -> Option<T> {
        let changed = restore.0.len();
        let (fd, kind) = non_blocking(fd, restore)?;
        let stream = make(fd, kind);
        if stream.is_none() && restore.0.len() > changed {
            undo(restore);
        }
        stream
    }

    /// A non-blocking socket descriptor as Tokio's stream (any stream socket reads and writes
    /// the same way).
    fn socket(fd: OwnedFd) -> Option<UnixStream> {
        UnixStream::from_std(std::os::unix::net::UnixStream::from(fd)).ok()
    }
}
