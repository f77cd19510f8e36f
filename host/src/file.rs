//! Reading files that others may have placed (plugins, policy files): regular files only,
//! opened without blocking, read up to a size limit; and reading the operator's secrets
//! (tokens, keys), which must be private to the user.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Why a file could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Opening or reading failed.
    Io(std::io::Error),
    /// It is a FIFO, a device, a socket or a directory.
    NotAFile,
    /// It is larger than the limit (its size).
    TooLarge(u64),
    /// The file opened (through links) is outside the directory it must be in (where it is).
    Outside(PathBuf),
}

/// Reads the regular file at `path` (following links) if it holds at most `limit` bytes.
///
/// A FIFO or a device is refused without blocking on it: the file is opened non-blocking and
/// checked with `fstat` on the open descriptor, so it cannot be swapped between check and read.
#[cfg_attr(not(feature = "registry"), allow(dead_code))]
pub(crate) fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    read_regular_file_within(path, limit, None)
}

/// [`read_regular_file`], and with `within`, only if the file opened (links followed) is
/// inside that directory (a real path): checked on the open file, so a link swapped between a
/// check and the read changes nothing.
pub(crate) fn read_regular_file_within(
    path: &Path,
    limit: u64,
    within: Option<&Path>,
) -> Result<Vec<u8>, ReadError> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path).map_err(ReadError::Io)?;
    if let Some(root) = within {
        let real = opened_path(&file, path).map_err(ReadError::Io)?;
        if !real.starts_with(root) {
            return Err(ReadError::Outside(real));
        }
    }
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

/// Who may own a private file besides the user, and how.
#[cfg_attr(not(any(feature = "mcp-http", feature = "registry")), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Private {
    /// The user's own, readable and writable by no one else, and not a link: a file this
    /// program wrote.
    Ours,
    /// As `Ours`, through links too, or root's and readable by its group at most: a file the
    /// operator put there (a Kubernetes secret is mounted as root's, its group the pod's
    /// `fsGroup`, through links into `..data/`); root could read it anyway.
    Operators,
}

/// The bytes of the private file at `path` (at most `limit`), `None` if there is none; checked
/// on the file opened (never by path and then read again), refused with what to fix when it is
/// not a regular file, not the user's (see [`Private`]), or readable or writable by others.
#[cfg(unix)]
#[cfg_attr(not(any(feature = "mcp-http", feature = "registry")), allow(dead_code))]
pub(crate) fn read_private_file(
    path: &Path,
    limit: u64,
    who: Private,
) -> Result<Option<Vec<u8>>, String> {
    use std::os::unix::fs::MetadataExt;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    let flags = match who {
        Private::Ours => libc::O_NOFOLLOW | libc::O_NONBLOCK,
        Private::Operators => libc::O_NONBLOCK,
    };
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, flags);
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if who == Private::Ours => {
            return Err(format!("cannot open it ({e}); is it a link?"));
        }
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let metadata = file.metadata().map_err(|e| e.to_string())?;
    if !metadata.is_file() {
        return Err("it is not a regular file".into());
    }
    let us = rustix::process::geteuid().as_raw();
    let others = match metadata.uid() {
        owner if owner == us => 0o077,
        0 if who == Private::Operators => 0o037,
        owner => {
            return Err(format!(
                "it belongs to user {owner}, not to this user ({us}); use a file of your own"
            ));
        }
    };
    if metadata.mode() & others != 0 {
        return Err(format!(
            "other users may read or write it (mode {:o}); run `chmod 600` on it",
            metadata.mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("it is larger than {limit} bytes"));
    }
    Ok(Some(bytes))
}

/// Elsewhere the file's owner and mode are not checked (keep such files where only you can
/// read them).
#[cfg(not(unix))]
#[cfg_attr(not(any(feature = "mcp-http", feature = "registry")), allow(dead_code))]
pub(crate) fn read_private_file(
    path: &Path,
    limit: u64,
    _who: Private,
) -> Result<Option<Vec<u8>>, String> {
    match read_regular_file(path, limit) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(ReadError::Io(e)) => Err(format!("cannot read it: {e}")),
        Err(ReadError::NotAFile) => Err("it is not a regular file".into()),
        Err(ReadError::TooLarge(_)) => Err(format!("it is larger than {limit} bytes")),
        Err(ReadError::Outside(_)) => Err("it is outside its directory".into()),
    }
}

/// Checks that no other user can replace what is in `dir` or on the way to it: `dir` and each
/// directory above it owned by this user or root, and writable by no other user (its group
/// included, unless it is the user's own: see [`others_may_write`]) — unless it is
/// above `dir` and has the sticky bit (then others cannot rename or remove what is ours, as in
/// `/tmp`; `dir` itself must not let them add names either), or is on a read-only mount (as a
/// Kubernetes ConfigMap's, whose mode says anyone may write). `what` names `dir` in the
/// message.
///
/// Every link on the way (a component of `dir` as written, or of where a link leads) must be
/// this user's or root's too, in a directory no one else can replace it in: another user's
/// link, even in a sticky directory such as `/tmp`, is theirs to point elsewhere after the
/// check, and a link of ours in a directory others may write is theirs to swap.
#[cfg(unix)]
pub(crate) fn no_one_else_can_replace(dir: &Path, what: &str) -> Result<(), String> {
    let us = rustix::process::geteuid().as_raw();
    links_are_ours(dir, us, &mut 0)?;
    directories_are_ours(dir, what, us, false)
}

/// The owner and mode checks of [`no_one_else_can_replace`] on `dir` and the directories above
/// it, as the system resolves them; with `sticky_self`, `dir` itself may be sticky (it holds
/// a link of ours, which others then cannot replace).
#[cfg(unix)]
fn directories_are_ours(dir: &Path, what: &str, us: u32, sticky_self: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    for path in dir.ancestors() {
        let metadata = std::fs::metadata(path)
            .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
        let named = if path == dir {
            what.to_owned()
        } else {
            format!("{} above it", path.display())
        };
        if metadata.uid() != us && metadata.uid() != 0 {
            return Err(format!(
                "{named} belongs to user {}, who could replace what is in it",
                metadata.uid()
            ));
        }
        // Sticky (as /tmp is), a directory above lets others add names but not replace ours;
        // the directory itself must not let them add names at all (a file planted before
        // ours is written: a policy, a lock, a plugin).
        let sticky = metadata.mode() & 0o1000 != 0 && (path != dir || sticky_self);
        if others_may_write(path, &metadata) && !sticky && !on_read_only_mount(path) {
            let how = if path == dir && !sticky_self {
                "so they could put files in it before you do"
            } else {
                "and is not sticky, so they could replace what is in it"
            };
            // Every such directory on the way, in one `chmod` (a umask of 002 makes a build's
            // `target/…/release` and each directory above it so).
            let more: Vec<String> = path
                .ancestors()
                .skip(1)
                .filter(|above| {
                    std::fs::metadata(above).is_ok_and(|above_metadata| {
                        others_may_write(above, &above_metadata)
                            && above_metadata.mode() & 0o1000 == 0
                            && above_metadata.uid() == us
                            && !on_read_only_mount(above)
                    })
                })
                .map(shell_word)
                .collect();
            let all = std::iter::once(shell_word(path))
                .chain(more)
                .collect::<Vec<_>>()
                .join(" ");
            // Root's (as `/tmp` is): not the user's to change.
            if metadata.uid() != us {
                return Err(format!(
                    "{named} may be written by other users (mode {:o}) {how}; move what is \
                     there into a directory of your own",
                    metadata.mode() & 0o7777
                ));
            }
            return Err(format!(
                "{named} may be written by other users (mode {:o}) {how}; run `chmod go-w {all}`",
                metadata.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// `path` as one word of a shell command line: quoted when it holds anything but letters,
/// digits and `/._-+,:@%=`.
#[cfg(unix)]
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Whether `path` is on a read-only mount (as a Kubernetes ConfigMap's, whose mode says anyone
/// may write): no one changes it through this mount.
#[cfg(unix)]
fn on_read_only_mount(path: &Path) -> bool {
    rustix::fs::statvfs(path)
        .is_ok_and(|mount| mount.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

/// Whether users other than this one may write `path` (whose metadata is `metadata`): everyone
/// may, or its group may and the group is not the user's own. A user's own group, as Debian's
/// and Ubuntu's user private groups are (a umask of 002 then makes every directory and file
/// group-writable), is: the process's effective group, named as the user, the primary group of
/// no other user and listing no other member in the system's files (what OpenSSH's Debian
/// build accepts too). Not when the entry has a POSIX ACL (its group bits then show the ACL's
/// mask, not who may write) or the set-group-ID bit (a directory shared by a group, as
/// Kubernetes makes an `fsGroup` volume). A group whose members a directory service keeps is
/// not known to be private, so counts as others.
#[cfg(unix)]
pub(crate) fn others_may_write(path: &Path, metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = metadata.mode();
    if mode & 0o002 != 0 {
        return true;
    }
    if mode & 0o020 == 0 {
        return false;
    }
    let own = mode & 0o2000 == 0
        && metadata.gid() == rustix::process::getegid().as_raw()
        && !has_acl(path)
        && group_is_private(metadata.gid(), rustix::process::geteuid().as_raw());
    !own
}

/// Whether `path` has a POSIX access ACL (or cannot be told not to).
#[cfg(unix)]
fn has_acl(path: &Path) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        match rustix::fs::getxattr_query(path, "system.posix_acl_access") {
            Ok(_) => true,
            Err(error) => !matches!(error, rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP),
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = path;
        true
    }
}

/// Whether the group `gid` is `us`'s alone, by `/etc/passwd` and `/etc/group`.
#[cfg(unix)]
fn group_is_private(gid: u32, us: u32) -> bool {
    let read = |path: &str| read_regular_file(Path::new(path), 1 << 20).ok();
    match (read("/etc/passwd"), read("/etc/group")) {
        (Some(passwd), Some(group)) => group_is_private_in(
            &String::from_utf8_lossy(&passwd),
            &String::from_utf8_lossy(&group),
            gid,
            us,
        ),
        _ => false,
    }
}

/// [`group_is_private`] on the texts of `/etc/passwd` and `/etc/group`: the group `gid` is
/// listed once, named as one of `us`'s names, with no member but those; no other user has it as
/// their primary group; and every line is one these rules read (a NIS `+` line, or any line
/// not of the format, could add members: then it is not private).
#[cfg(unix)]
fn group_is_private_in(passwd: &str, group: &str, gid: u32, us: u32) -> bool {
    let mut names = Vec::new();
    for line in passwd.lines().filter(|line| !line.trim().is_empty()) {
        let fields: Vec<&str> = line.split(':').collect();
        let (Some(name), Some(Ok(uid)), Some(Ok(primary))) = (
            fields.first(),
            fields.get(2).map(|uid| uid.parse::<u32>()),
            fields.get(3).map(|gid| gid.parse::<u32>()),
        ) else {
            return false;
        };
        if uid == us {
            names.push(*name);
        } else if primary == gid {
            return false;
        }
    }
    if names.is_empty() {
        return false;
    }
    let mut listed = 0;
    for line in group.lines().filter(|line| !line.trim().is_empty()) {
        let fields: Vec<&str> = line.split(':').collect();
        let (Some(name), Some(Ok(id)), Some(members)) = (
            fields.first(),
            fields.get(2).map(|id| id.parse::<u32>()),
            fields.get(3),
        ) else {
            return false;
        };
        if id != gid {
            continue;
        }
        listed += 1;
        let own_members = members
            .split(',')
            .filter(|member| !member.is_empty())
            .all(|member| names.contains(&member));
        if !names.contains(name) || !own_members {
            return false;
        }
    }
    listed == 1
}

/// How many links [`links_are_ours`] follows on one path before refusing it (Linux's own
/// limit).
#[cfg(unix)]
const MAX_LINKS: u32 = 40;

/// Checks that each link on the way to `path` — among its components as written, and among
/// those of every link's target — belongs to `us` or root, in a directory no one else can
/// replace it in. A component that cannot be read is left to the caller's own checks, which
/// report it.
#[cfg(unix)]
fn links_are_ours(path: &Path, us: u32, followed: &mut u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let mut so_far = PathBuf::new();
    for component in path.components() {
        so_far.push(component);
        let Ok(metadata) = std::fs::symlink_metadata(&so_far) else {
            return Ok(());
        };
        if !metadata.file_type().is_symlink() {
            continue;
        }
        if metadata.uid() != us && metadata.uid() != 0 {
            return Err(format!(
                "{} is a link belonging to user {}, who could point it elsewhere; use the \
                 directory it leads to, or a link of your own",
                so_far.display(),
                metadata.uid()
            ));
        }
        *followed += 1;
        if *followed > MAX_LINKS {
            return Err(format!(
                "{} is reached through more than {MAX_LINKS} links",
                path.display()
            ));
        }
        // Where the link is, really: whoever may write there may swap it.
        let parent = so_far.parent().unwrap_or(Path::new("/"));
        let real_parent = parent
            .canonicalize()
            .map_err(|e| format!("{} cannot be resolved: {e}", parent.display()))?;
        directories_are_ours(
            &real_parent,
            &format!("the directory holding the link {}", so_far.display()),
            us,
            true,
        )?;
        let target = std::fs::read_link(&so_far)
            .map_err(|e| format!("the link {} cannot be read: {e}", so_far.display()))?;
        // A relative target is read from the link's directory (where it really is, so that the
        // links before it are not followed again); an absolute one replaces it.
        links_are_ours(&real_parent.join(target), us, followed)?;
    }
    Ok(())
}

/// Checks the links on the way to `path` as [`no_one_else_can_replace`] does, as far as its
/// components exist: before a directory is made there.
#[cfg(unix)]
pub(crate) fn links_on_the_way_are_ours(path: &Path) -> Result<(), String> {
    links_are_ours(path, rustix::process::geteuid().as_raw(), &mut 0)
}

/// Elsewhere, links are not checked.
#[cfg(not(unix))]
pub(crate) fn links_on_the_way_are_ours(_path: &Path) -> Result<(), String> {
    Ok(())
}

/// Why another user could change the file at `path` (links followed), if they could: a link on
/// its way (it may be one) is not the user's or root's or is held in a directory others may
/// write, its directory (where it really is) is one others could replace it in, or — a regular
/// file — it is not the user's or root's, or others may write it; or why it cannot be checked
/// (a link leading nowhere: what appears there later would be read). A FIFO or a device is
/// not judged by its owner and mode: reading refuses it.
#[cfg(unix)]
pub(crate) fn file_problem(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let us = rustix::process::geteuid().as_raw();
    // The links on its way, as given: each ours, in a directory no one else can swap it in, so
    // that what is read is what is checked below.
    if let Err(problem) = std::path::absolute(path)
        .map_err(|e| format!("{} cannot be resolved: {e}", path.display()))
        .and_then(|given| links_are_ours(&given, us, &mut 0))
    {
        return Some(problem);
    }
    let real = match path.canonicalize() {
        Ok(real) => real,
        Err(e) => return Some(format!("{} cannot be resolved: {e}", path.display())),
    };
    let parent = real.parent().unwrap_or(Path::new("/"));
    if let Err(problem) =
        no_one_else_can_replace(parent, &format!("the directory of {}", path.display()))
    {
        return Some(problem);
    }
    let metadata = match std::fs::metadata(&real) {
        Ok(metadata) => metadata,
        Err(e) => return Some(format!("{} cannot be checked: {e}", path.display())),
    };
    if !metadata.is_file() {
        return None;
    }
    if metadata.uid() != us && metadata.uid() != 0 {
        return Some(format!(
            "{} belongs to user {}, who could change it",
            path.display(),
            metadata.uid()
        ));
    }
    if others_may_write(&real, &metadata) && !on_read_only_mount(&real) {
        let fix = if metadata.uid() == us {
            format!("run `chmod go-w {}`", shell_word(&real))
        } else {
            "ask its owner to make it writable by them alone, or copy it into a directory of \
             your own"
                .to_owned()
        };
        return Some(format!(
            "other users may write {} (mode {:o}); {fix}",
            path.display(),
            metadata.mode() & 0o7777
        ));
    }
    None
}

/// Elsewhere, files' owners and modes are not checked (see SECURITY.md).
#[cfg(not(unix))]
pub(crate) fn file_problem(_path: &Path) -> Option<String> {
    None
}

/// Elsewhere, directories' owners and modes are not checked (see SECURITY.md).
#[cfg(not(unix))]
pub(crate) fn no_one_else_can_replace(_dir: &Path, _what: &str) -> Result<(), String> {
    Ok(())
}

/// Creates the directory `path` and any missing directory above it (with `mode` on Unix, less
/// the umask), following no link another user could have put or pointed on the way.
///
/// The path is walked a directory at a time from `/`, each opened inside the one before: a
/// name that is missing is made there and opened without following a link; a name that is a
/// link is followed only if it is this user's or root's in a directory that is this user's or
/// root's and that others may not write (or that is sticky, so they cannot replace the link).
/// So a link another user plants at any name of the path, before or during the creation, is
/// refused rather than followed, and nothing is made where it leads. Where a link leads is
/// resolved by the system: the links on its way are the caller's to check first
/// ([`links_on_the_way_are_ours`]), as no one else can then change them.
pub(crate) fn create_dir_all_through_own_links(path: &Path, mode: u32) -> std::io::Result<()> {
    make_all(&std::path::absolute(path)?, mode)
}

#[cfg(unix)]
fn make_all(path: &Path, mode: u32) -> std::io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use rustix::io::Errno;
    use std::os::unix::fs::MetadataExt;
    use std::path::Component;
    let refused = |what: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, what);
    // On Linux, a directory is opened as a place only (`O_PATH`): like a path, it needs no
    // permission to read the directory, only to search it.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let us = rustix::process::geteuid().as_raw();
    let mut dir = rustix::fs::open("/", flags, Mode::empty())?;
    let mut so_far = PathBuf::from("/");
    let mut followed = 0;
    for component in path.components() {
        let name = match component {
            Component::Normal(name) => name,
            Component::ParentDir => std::ffi::OsStr::new(".."),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        };
        so_far.push(name);
        dir = loop {
            match rustix::fs::openat(&dir, name, flags | OFlags::NOFOLLOW, Mode::empty()) {
                Ok(next) => break next,
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
                        // Open what is there now: a link planted meanwhile is judged below.
                        Ok(()) | Err(Errno::EXIST) => continue,
                        Err(error) => return Err(error.into()),
                    }
                }
                Err(error) => {
                    let link = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
                    if FileType::from_raw_mode(link.st_mode) != FileType::Symlink {
                        return Err(error.into());
                    }
                    // The directory holding the link, judged as the checks after the
                    // creation judge directories (a user's private group is not others; a
                    // read-only mount cannot change).
                    let holder_file = std::fs::File::from(dir.try_clone()?);
                    let holder = holder_file.metadata()?;
                    let holder_path =
                        opened_path(&holder_file, so_far.parent().unwrap_or(Path::new("/")))?;
                    let others_write = others_may_write(&holder_path, &holder)
                        && holder.mode() & 0o1000 == 0
                        && !on_read_only_mount(&holder_path);
                    if link.st_uid != us && link.st_uid != 0 {
                        return Err(refused(format!(
                            "{} is a link belonging to user {}, who could point it elsewhere; \
                             not following it",
                            so_far.display(),
                            link.st_uid
                        )));
                    }
                    if (holder.uid() != us && holder.uid() != 0) || others_write {
                        return Err(refused(format!(
                            "{} is a link in a directory others may change (owner {}, mode \
                             {:o}), who could replace it; not following it",
                            so_far.display(),
                            holder.uid(),
                            holder.mode() & 0o7777
                        )));
                    }
                    followed += 1;
                    if followed > MAX_LINKS {
                        return Err(Errno::LOOP.into());
                    }
                    break rustix::fs::openat(&dir, name, flags, Mode::empty())?;
                }
            }
        };
    }
    Ok(())
}

/// Elsewhere, the standard library's recursive creation.
#[cfg(not(unix))]
fn make_all(path: &Path, _mode: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(path)
}

/// Writes `path` atomically with what `write` puts in it: into a temporary file created new
/// beside it (never through a link, with `mode` on Unix), synced to disk, then renamed over
/// `path`. A reader sees the old file or the new one, never half of one, and a link planted
/// under the name is replaced rather than written through. The temporary file is removed if
/// anything fails.
pub(crate) fn write_atomically(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(Default::default, |name| name.to_string_lossy().into_owned());
    let temporary = path.with_file_name(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut options = std::fs::OpenOptions::new();
    // `create_new` fails on anything already there, a link included.
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode).custom_flags(libc::O_NOFOLLOW);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let written = options.open(&temporary).and_then(|mut file| {
        write(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temporary, path)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// The real path of an open file: on Linux, of the descriptor itself (so a link swapped after
/// opening changes nothing); elsewhere, of the path.
pub(crate) fn opened_path(file: &std::fs::File, path: &Path) -> std::io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        match std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            // Without `/proc` (a minimal container or chroot), the path's, as elsewhere.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => path.canonicalize(),
            read => read,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        path.canonicalize()
    }
}

/// `path` with links resolved: its own real path if it exists, else its nearest existing
/// parent's joined with the rest (`.` and `..` in the rest taken as written); `None` if not
/// even the root resolves.
pub(crate) fn real_path_of(path: &Path) -> Option<PathBuf> {
    let path = std::path::absolute(path).ok()?;
    path.ancestors().find_map(|ancestor| {
        let mut real = ancestor.canonicalize().ok()?;
        for component in path.strip_prefix(ancestor).ok()?.components() {
            match component {
                std::path::Component::ParentDir => {
                    real.pop();
                }
                std::path::Component::Normal(part) => real.push(part),
                _ => {}
            }
        }
        Some(real)
    })
}

/// The real paths of `path` and of each directory on the way to it, as it is written: the
/// directories whose entries decide where it leads; `None` if one cannot be resolved.
pub(crate) fn on_the_way(path: &Path) -> Option<Vec<PathBuf>> {
    let absolute = std::path::absolute(path).ok()?;
    let mut prefix = PathBuf::new();
    absolute
        .components()
        .map(|component| {
            prefix.push(component);
            real_path_of(&prefix)
        })
        .collect()
}

/// The real paths of the directories that decide where `path` leads: [`on_the_way`]'s, and
/// every directory its links lead through ([`looked_up_in`]); `None` if one cannot be told.
pub(crate) fn deciding_dirs(path: &Path) -> Option<Vec<PathBuf>> {
    let mut dirs = on_the_way(path)?;
    dirs.extend(looked_up_in(path)?);
    Some(dirs)
}

/// The real paths of every directory in which resolving `path` looks a name up, following
/// its links one at a time (each link's own directory, and the directories its target passes
/// through, included): the directories whose entries decide where `path` leads, so that one
/// a plugin may write could redirect it. The directory `path` leads to is not among them
/// unless it is looked in on the way. A name that does not exist ends the following: the rest
/// is taken as written. `None` past 40 links (a loop) or if `path` cannot be made absolute.
pub(crate) fn looked_up_in(path: &Path) -> Option<Vec<PathBuf>> {
    use std::path::Component;
    let absolute = std::path::absolute(path).ok()?;
    let mut pending: std::collections::VecDeque<PathBuf> = absolute
        .components()
        .map(|component| PathBuf::from(component.as_os_str()))
        .collect();
    let mut at = PathBuf::from("/");
    let mut dirs = Vec::new();
    let mut links = 0;
    let mut exists = true;
    while let Some(part) = pending.pop_front() {
        match part.components().next() {
            Some(Component::RootDir) => at = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                dirs.push(at.clone());
                at.pop();
            }
            Some(Component::Normal(name)) => {
                dirs.push(at.clone());
                let next = at.join(name);
                let link = exists
                    && std::fs::symlink_metadata(&next)
                        .map(|meta| meta.file_type().is_symlink())
                        .unwrap_or_else(|_| {
                            exists = false;
                            false
                        });
                if link {
                    links += 1;
                    if links > 40 {
                        return None;
                    }
                    let target = std::fs::read_link(&next).ok()?;
                    for component in target.components().rev() {
                        pending.push_front(PathBuf::from(component.as_os_str()));
                    }
                } else {
                    at = next;
                }
            }
            _ => {}
        }
    }
    dirs.sort();
    dirs.dedup();
    Some(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every directory a lookup passes through, across a chain of links, is named; the
    /// directory reached is not, and a missing name ends the following.
    #[cfg(unix)]
    #[test]
    fn the_directories_a_path_is_resolved_through_are_all_named() {
        let base = std::env::temp_dir().join(format!("llm-worker-lookups-{}", std::process::id()));
        // What a failed run of an earlier process of this id left.
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).expect("mkdir");
        let root = base.canonicalize().expect("real");
        for dir in ["srv/work", "srv/releases/v3", "srv/other"] {
            std::fs::create_dir_all(root.join(dir)).expect("mkdir");
        }
        // ref -> work/current -> ../releases/v3
        std::os::unix::fs::symlink(root.join("srv/work/current"), root.join("srv/ref"))
            .expect("link");
        std::os::unix::fs::symlink("../releases/v3", root.join("srv/work/current")).expect("link");
        let dirs = looked_up_in(&root.join("srv/ref")).expect("resolved");
        assert!(dirs.contains(&root.join("srv")), "{dirs:?}");
        assert!(dirs.contains(&root.join("srv/work")), "{dirs:?}");
        assert!(dirs.contains(&root.join("srv/releases")), "{dirs:?}");
        assert!(!dirs.contains(&root.join("srv/releases/v3")), "{dirs:?}");
        // `..` looks in the directory it leaves.
        let dirs = looked_up_in(&root.join("srv/other/../releases")).expect("resolved");
        assert!(dirs.contains(&root.join("srv/other")), "{dirs:?}");
        // A loop is not followed for ever.
        std::os::unix::fs::symlink("loop", root.join("srv/loop")).expect("link");
        assert!(looked_up_in(&root.join("srv/loop")).is_none());
        // A missing name: the rest as written.
        let dirs = looked_up_in(&root.join("srv/missing/ref")).expect("resolved");
        assert!(dirs.contains(&root.join("srv/missing")), "{dirs:?}");
        std::fs::remove_dir_all(&base).expect("cleaned up");
    }

    /// A user's own group (Debian's and Ubuntu's user private groups) is not "others"; a group
    /// another user is in, or is the primary group of, is, and so is one listed twice, named
    /// otherwise, or in files with lines these rules do not read (NIS `+` lines).
    #[cfg(unix)]
    #[test]
    fn a_group_is_private_only_when_no_one_else_is_in_it() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      ana:x:1000:1000:Ana:/home/ana:/bin/bash\n\
                      bo:x:1001:1001:Bo:/home/bo:/bin/bash\n";
        let group = "root:x:0:\nana:x:1000:\nbo:x:1001:\nteam:x:2000:ana,bo\nmine:x:2001:ana\n";
        assert!(group_is_private_in(passwd, group, 1000, 1000));
        assert!(group_is_private_in(passwd, "ana:x:1000:ana\n", 1000, 1000));
        // Another user's primary group too.
        let shared = format!("{passwd}svc:x:1002:1000::/srv:/usr/sbin/nologin\n");
        assert!(!group_is_private_in(&shared, group, 1000, 1000));
        assert!(
            !group_is_private_in(passwd, group, 2000, 1000),
            "Bo is in it"
        );
        assert!(
            !group_is_private_in(passwd, group, 2001, 1000),
            "not named as Ana"
        );
        assert!(!group_is_private_in(passwd, group, 1001, 1000), "Bo's");
        assert!(
            !group_is_private_in(passwd, group, 3000, 1000),
            "not listed"
        );
        assert!(
            !group_is_private_in(passwd, group, 1000, 4242),
            "an unknown user"
        );
        let twice = format!("{group}devs:x:1000:bo\n");
        assert!(
            !group_is_private_in(passwd, &twice, 1000, 1000),
            "listed twice"
        );
        let nis = format!("{passwd}+::::::\n");
        assert!(!group_is_private_in(&nis, group, 1000, 1000), "a NIS line");
    }

    /// A link another user could change is not followed when directories are made: one in a
    /// directory anyone may write (not sticky), another user's in a sticky one (when the tests
    /// run as root, which can give a link away); nothing is made where they lead. The user's own
    /// link in a sticky directory is followed.
    #[cfg(unix)]
    #[test]
    fn directories_are_not_made_through_a_link_another_user_could_change() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("llm-worker-mkdir-{}", std::process::id()));
        let (open, sticky, elsewhere) = (
            base.join("open"),
            base.join("sticky"),
            base.join("elsewhere"),
        );
        for (dir, mode) in [(&open, 0o777), (&sticky, 0o1777), (&elsewhere, 0o700)] {
            std::fs::create_dir_all(dir).expect("mkdir");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        // A link in a directory anyone may write: anyone could have swapped it.
        std::os::unix::fs::symlink(&elsewhere, open.join("cache")).expect("link");
        let refused = create_dir_all_through_own_links(&open.join("cache/v1"), 0o700)
            .expect_err("a link others could replace");
        assert!(
            refused.to_string().contains("others may change"),
            "{refused}"
        );
        assert!(!elsewhere.join("v1").exists(), "made through the link");
        // Another user's link in a sticky directory, as in /tmp.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::symlink(&elsewhere, sticky.join("theirs")).expect("link");
            std::os::unix::fs::lchown(sticky.join("theirs"), Some(4242), None).expect("lchown");
            let refused = create_dir_all_through_own_links(&sticky.join("theirs/v1"), 0o700)
                .expect_err("another user's link");
            assert!(
                refused.to_string().contains("belonging to user 4242"),
                "{refused}"
            );
            assert!(!elsewhere.join("v1").exists(), "made through their link");
        }
        // The user's own link in a sticky directory: followed, and the directories made private.
        std::os::unix::fs::symlink(&elsewhere, sticky.join("mine")).expect("link");
        create_dir_all_through_own_links(&sticky.join("mine/v1/v2"), 0o700).expect("made");
        let mode = std::fs::metadata(elsewhere.join("v1/v2"))
            .expect("made where the link leads")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        // Made again: nothing to do; `..` resolved as the system resolves it.
        create_dir_all_through_own_links(&sticky.join("mine/v1/v2"), 0o700).expect("again");
        create_dir_all_through_own_links(&sticky.join("mine/v1/../v3"), 0o700).expect("..");
        assert!(elsewhere.join("v3").is_dir());
        // A file where a directory must be.
        std::fs::write(elsewhere.join("file"), "").expect("write");
        assert!(create_dir_all_through_own_links(&elsewhere.join("file/v1"), 0o700).is_err());
        std::fs::remove_dir_all(&base).expect("clean up");
    }

    /// The check is made on the file opened: a link inside the directory leading out of it is
    /// refused, one leading to a file inside is followed.
    #[cfg(unix)]
    #[test]
    fn a_file_read_within_a_directory_is_inside_it_where_it_was_opened() {
        let base = std::env::temp_dir().join(format!("llm-worker-within-{}", std::process::id()));
        let (root, outside) = (base.join("root"), base.join("outside"));
        for dir in [&root, &outside] {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        std::fs::write(outside.join("policy.toml"), "outside").expect("write");
        std::fs::write(root.join("real.toml"), "inside").expect("write");
        std::os::unix::fs::symlink(outside.join("policy.toml"), root.join("out.toml"))
            .expect("link");
        std::os::unix::fs::symlink(root.join("real.toml"), root.join("in.toml")).expect("link");
        let root = root.canonicalize().expect("real path");
        let read = |name: &str| read_regular_file_within(&root.join(name), 64, Some(&root));
        assert!(
            matches!(read("out.toml"), Err(ReadError::Outside(real)) if real.ends_with("outside/policy.toml"))
        );
        assert_eq!(read("in.toml").ok().as_deref(), Some(b"inside".as_slice()));
        std::fs::remove_dir_all(&base).expect("clean up");
    }
}
