//! Open files and directories are a host resource: each plugin instance may hold a bounded
//! number, all instances of one host together a share of the process's open-file limit, and
//! files are opened without blocking on FIFOs or devices.
//!
//! wasmtime-wasi's `wasi:filesystem/types` is linked as it is, but for the functions that open
//! descriptors: `[method]descriptor.open-at` and `[method]descriptor.read-directory` (it opens
//! the directory again while it reads it) are replaced by wrappers that take a permit first,
//! and `[resource-drop]descriptor` gives permits back at once. A permit lives as long as the
//! operating system's descriptor, not the plugin's handle: streams of a file keep the file
//! open after its handle is dropped, so each opened file is followed through a weak reference
//! and its permit returned only once nothing holds it. A refused open is the plugin's own
//! error (`insufficient-memory`, what `open` says when the system runs out of descriptors
//! too), never a trap and never another session's problem. `[method]descriptor.set-times-at`
//! is replaced too: following links, wasmtime-wasi opens the file to set its times, blocking;
//! and `[method]descriptor.symlink-at`, which refuses a link whose target climbs out (`..`).
//!
//! The preopened (granted) directories hold a permit each for the whole life of the instance.
//! Directory-entry streams hold no descriptor, but wasmtime-wasi reads a directory's entries at
//! once and keeps them in the stream: an instance may hold [`MAX_LISTINGS_PER_INSTANCE`] at
//! once (`[resource-drop]directory-entry-stream` counts them back), so that a plugin cannot
//! multiply a large directory's listing in host memory. Sockets cannot be created at all (TCP
//! and UDP are denied).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::FsResult;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DirectoryEntryStream, ErrorCode, HostDescriptor, HostDirectoryEntryStream,
    NewTimestamp, OpenFlags, PathFlags,
};

use super::instance::PluginState;

/// Most files and directories one plugin instance may hold open at once, its granted
/// directories included.
pub(crate) const MAX_OPEN_FILES_PER_INSTANCE: usize = 256;

/// Most directory listings (directory-entry streams) one plugin instance may hold at once:
/// each holds every entry of its directory in host memory.
pub(crate) const MAX_LISTINGS_PER_INSTANCE: usize = 8;

/// Most a directory listing may hold, counting each entry's name and 32 bytes beside it (what
/// the host keeps of an entry): 4 MiB, some hundred thousand ordinary names. A plugin with a
/// writable grant could otherwise fill a directory with a million files and hold its listing
/// eight times over.
pub(crate) const MAX_LISTING_BYTES: usize = 4 << 20;

/// What the host keeps of a listed entry beside its name.
const LISTED_ENTRY_BYTES: usize = 32;

/// The share of the process's open-file limit (the soft `RLIMIT_NOFILE`) that the plugin
/// instances of one host may hold together, as a divisor: half. The other half stays with the
/// host itself: plugin files, the compiled cache, clients' connections, outgoing HTTP.
const HOST_SHARE_DIVISOR: u64 = 2;

/// The host-wide budget where the process's limit cannot be read (or is unlimited).
const FALLBACK_HOST_BUDGET: usize = 4_096;

/// The open descriptors of all plugin instances of one host, and what those instances use
/// besides (for [`PluginHost::usage`](crate::PluginHost::usage)).
#[derive(Debug)]
pub(crate) struct HostDescriptors {
    in_use: AtomicUsize,
    max: usize,
    /// Live instances, and the bytes of their linear memories and tables.
    pub(crate) usage: Arc<super::instance::Usage>,
}

impl HostDescriptors {
    /// A budget of `max` descriptors; `None` for the default share of the process's limit.
    pub(crate) fn new(max: Option<usize>) -> Self {
        Self {
            in_use: AtomicUsize::new(0),
            max: max.unwrap_or_else(default_host_budget),
            usage: Arc::default(),
        }
    }

    /// Takes one descriptor from the budget, if any is left.
    fn take(&self) -> bool {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.max).then_some(used + 1)
            })
            .is_ok()
    }

    /// The most descriptors of the budget.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    fn give_back(&self, count: usize) {
        if count > 0 {
            self.in_use.fetch_sub(count, Ordering::AcqRel);
        }
    }

    /// One descriptor of the budget, held until the guard is dropped (a plugin's outgoing
    /// connection: the host's socket, not one of the instance's files); `None` if the budget
    /// is used up.
    #[cfg(feature = "wasi-http")]
    pub(crate) fn hold(self: &Arc<Self>) -> Option<HeldDescriptor> {
        self.take().then(|| HeldDescriptor(Arc::clone(self)))
    }
}

/// A descriptor of a host's budget, given back when dropped ([`HostDescriptors::hold`]).
#[cfg(feature = "wasi-http")]
pub(crate) struct HeldDescriptor(Arc<HostDescriptors>);

#[cfg(feature = "wasi-http")]
impl Drop for HeldDescriptor {
    fn drop(&mut self) {
        self.0.give_back(1);
    }
}

/// Half of the soft `RLIMIT_NOFILE` as it is when the host is built (the command raises the
/// soft limit to the hard limit first).
fn default_host_budget() -> usize {
    #[cfg(unix)]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(soft) = limit.current {
            return usize::try_from(soft / HOST_SHARE_DIVISOR).unwrap_or(usize::MAX);
        }
    }
    FALLBACK_HOST_BUDGET
}

/// Why a descriptor was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The instance holds [`MAX_OPEN_FILES_PER_INSTANCE`] already.
    Instance,
    /// The instance holds [`MAX_LISTINGS_PER_INSTANCE`] directory listings already.
    Listings,
    /// The directory's listing would be over [`MAX_LISTING_BYTES`].
    LargeListing,
    /// The host's budget is used up (by all instances together).
    Host,
}

impl Refused {
    /// What the operator reads.
    pub(crate) fn describe(self, plugin: &str, host_max: usize) -> String {
        match self {
            Refused::Instance => format!(
                "plugin '{plugin}' holds {MAX_OPEN_FILES_PER_INSTANCE} open files and \
                 directories, the most one instance may hold; it was refused another (it sees \
                 `insufficient-memory`); the plugin should close files it no longer needs"
            ),
            Refused::Listings => format!(
                "plugin '{plugin}' holds {MAX_LISTINGS_PER_INSTANCE} directory listings, the \
                 most one instance may hold; it was refused another (it sees \
                 `insufficient-memory`); the plugin should drop a listing once it has read it"
            ),
            Refused::LargeListing => format!(
                "plugin '{plugin}' asked to list a directory whose listing would hold over {} \
                 MiB (its entries' names, {LISTED_ENTRY_BYTES} bytes each beside them); it was \
                 refused (it sees `insufficient-memory`); split the directory, or open its \
                 entries by name",
                MAX_LISTING_BYTES >> 20
            ),
            Refused::Host => format!(
                "the plugins of this host hold {host_max} open files and directories, the most \
                 the host allows them together (`PluginHostBuilder::max_open_files`, by default \
                 half of the process's open-file limit); plugin '{plugin}' was refused another; \
                 end idle sessions or raise the limit (`ulimit -n`)"
            ),
        }
    }
}

/// The open descriptors of one instance: permits taken from the host's budget, given back
/// when the descriptors are closed or, at the latest, when the instance is dropped.
pub(crate) struct InstanceDescriptors {
    host: Arc<HostDescriptors>,
    plugin: String,
    /// Files and directories opened for the plugin; each holds a permit while any handle of
    /// it (descriptor, stream, a blocking operation under way) lives.
    opened: Vec<Weak<std::fs::File>>,
    /// Permits held otherwise: granted directories, and opens under way.
    reserved: usize,
    /// Directory-entry streams the plugin holds.
    listings: usize,
    /// Whether a refusal was logged (once per instance is enough).
    warned: bool,
}

impl InstanceDescriptors {
    pub(crate) fn new(host: &Arc<HostDescriptors>, plugin: &str) -> Self {
        Self {
            host: Arc::clone(host),
            plugin: plugin.to_owned(),
            opened: Vec::new(),
            reserved: 0,
            listings: 0,
            warned: false,
        }
    }

    /// Gives back the permits of descriptors closed since the last look.
    fn sweep(&mut self) {
        let before = self.opened.len();
        self.opened.retain(|file| file.strong_count() > 0);
        self.host.give_back(before - self.opened.len());
    }

    /// Takes a permit for one more descriptor, or says why not.
    pub(crate) fn reserve(&mut self) -> Result<(), Refused> {
        self.sweep();
        if self.opened.len() + self.reserved >= MAX_OPEN_FILES_PER_INSTANCE {
            return Err(Refused::Instance);
        }
        if !self.host.take() {
            return Err(Refused::Host);
        }
        self.reserved += 1;
        Ok(())
    }

    /// Gives back a permit taken with [`reserve`](Self::reserve) and not used.
    fn unreserve(&mut self) {
        self.reserved = self.reserved.saturating_sub(1);
        self.host.give_back(1);
    }

    /// Ties a permit taken with [`reserve`](Self::reserve) to the file it was taken for.
    fn attach(&mut self, file: &Arc<std::fs::File>) {
        self.reserved = self.reserved.saturating_sub(1);
        self.opened.push(Arc::downgrade(file));
    }

    /// The plugin's error for a refused open; logged once per instance.
    fn refuse(&mut self, why: Refused) -> ErrorCode {
        if !std::mem::replace(&mut self.warned, true) {
            tracing::warn!(plugin = %self.plugin, "{}", why.describe(&self.plugin, self.host.max));
        }
        ErrorCode::InsufficientMemory
    }
}

impl Drop for InstanceDescriptors {
    fn drop(&mut self) {
        self.host.give_back(self.opened.len() + self.reserved);
    }
}

/// The operating system's descriptor behind a WASI descriptor.
fn os_file(descriptor: &Descriptor) -> &Arc<std::fs::File> {
    match descriptor {
        Descriptor::File(file) => &file.file,
        Descriptor::Dir(dir) => &dir.dir,
    }
}

/// The version of `wasi:filesystem` wasmtime-wasi links (imports of any 0.2.x match it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Replaces the functions of `wasi:filesystem/types` that open or close descriptors with
/// counting ones; call after `wasmtime_wasi::p2::add_to_linker_async`.
pub(crate) fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let added = shadow(linker);
    linker.allow_shadowing(false);
    added
}

fn shadow(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store,
         (fd, path_flags, path, open_flags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let opened =
                    open_at(store.data_mut(), fd, path_flags, path, open_flags, flags).await;
                Ok((plugin_error(opened)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-times-at",
        |mut store,
         (fd, path_flags, path, atime, mtime): (
            Resource<Descriptor>,
            PathFlags,
            String,
            NewTimestamp,
            NewTimestamp,
        )| {
            Box::new(async move {
                let set = set_times_at(store.data_mut(), fd, path_flags, path, atime, mtime).await;
                Ok((plugin_error(set)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store, (fd, target, name): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let made = symlink_at(store.data_mut(), fd, target, name).await;
                Ok((plugin_error(made)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.read-directory",
        |mut store, (fd,): (Resource<Descriptor>,)| {
            Box::new(async move {
                let read = read_directory(store.data_mut(), fd).await;
                Ok((plugin_error(read)?,))
            })
        },
    )?;
    types.resource(
        "directory-entry-stream",
        ResourceType::host::<DirectoryEntryStream>(),
        |mut store, rep| {
            let (mut files, descriptors) = store.data_mut().files();
            HostDirectoryEntryStream::drop(&mut files, Resource::new_own(rep))?;
            descriptors.listings = descriptors.listings.saturating_sub(1);
            Ok(())
        },
    )?;
    types.resource(
        "descriptor",
        ResourceType::host::<Descriptor>(),
        |mut store, rep| {
            let (mut files, descriptors) = store.data_mut().files();
            HostDescriptor::drop(&mut files, Resource::new_own(rep))?;
            descriptors.sweep();
            Ok(())
        },
    )?;
    Ok(())
}

/// `symlink-at`: a link whose target climbs (`..`) is refused, as wasmtime-wasi refuses an
/// absolute one. The sandbox never follows a link out of a grant, but other programs do: the
/// operator's editor, backup or web server reading the granted directory, a client following a
/// `file://` link, a program writing `out.log` there. A link `notes.txt` → `../../.ssh/id_rsa`
/// planted in a writable grant would read (or write) outside it for them. Checking where a
/// climbing target lands is not enough: renaming the link's directory moves where it points.
/// A target going down from the link (`file.txt`, `sub/file.txt`, `.`) stays beneath it.
async fn symlink_at(
    state: &mut PluginState,
    fd: Resource<Descriptor>,
    target: String,
    name: String,
) -> FsResult<()> {
    if climbs(&target) {
        return Err(ErrorCode::NotPermitted.into());
    }
    let (mut files, _) = state.files();
    HostDescriptor::symlink_at(&mut files, fd, target, name).await
}

/// Whether the link target `target` has a `..` component.
fn climbs(target: &str) -> bool {
    target.split('/').any(|component| component == "..")
}

/// `set-times-at`: following links, wasmtime-wasi opens the file to set its times, blocking
/// (for ever, on a FIFO no one writes to, after the call timed out) and with effects (a
/// device): here it is opened as `open-at` opens files, and only a regular file or a directory
/// has its times set.
async fn set_times_at(
    state: &mut PluginState,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    atime: NewTimestamp,
    mtime: NewTimestamp,
) -> FsResult<()> {
    let (mut files, _) = state.files();
    #[cfg(unix)]
    if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
        let dir = match files.table.get(&fd)? {
            Descriptor::Dir(dir) => dir.clone(),
            Descriptor::File(_) => return Err(ErrorCode::NotDirectory.into()),
        };
        if dir.perms.write_not_permitted() {
            return Err(ErrorCode::NotPermitted.into());
        }
        return nonblocking::set_times_at(dir, path, time(atime)?, time(mtime)?).await;
    }
    // Without following links, wasmtime-wasi sets the times by name, opening nothing.
    HostDescriptor::set_times_at(&mut files, fd, path_flags, path, atime, mtime).await
}

/// What a `new-timestamp` asks for (as wasmtime-wasi reads it).
#[cfg(unix)]
fn time(wanted: NewTimestamp) -> FsResult<Option<std::time::SystemTime>> {
    Ok(match wanted {
        NewTimestamp::NoChange => None,
        NewTimestamp::Now => Some(std::time::SystemTime::now()),
        // Nanoseconds past a second carried into the seconds without overflowing
        // (`Duration::new` panics where they would).
        NewTimestamp::Timestamp(at) => {
            let seconds = at
                .seconds
                .checked_add(u64::from(at.nanoseconds / 1_000_000_000))
                .ok_or(ErrorCode::Overflow)?;
            let since = std::time::Duration::new(seconds, at.nanoseconds % 1_000_000_000);
            Some(
                std::time::UNIX_EPOCH
                    .checked_add(since)
                    .ok_or(ErrorCode::Overflow)?,
            )
        }
    })
}

/// The plugin's error, or a trap (what wasmtime-wasi's bindings do with an `FsResult`).
fn plugin_error<T>(result: FsResult<T>) -> wasmtime::Result<Result<T, ErrorCode>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error) => Ok(Err(error.downcast()?)),
    }
}

async fn read_directory(
    state: &mut PluginState,
    fd: Resource<Descriptor>,
) -> FsResult<Resource<DirectoryEntryStream>> {
    let (mut files, descriptors) = state.files();
    if descriptors.listings >= MAX_LISTINGS_PER_INSTANCE {
        return Err(descriptors.refuse(Refused::Listings).into());
    }
    if let Err(why) = descriptors.reserve() {
        return Err(descriptors.refuse(why).into());
    }
    // wasmtime-wasi opens the directory again, reads every entry and closes it before this
    // returns: the permit covers that while it lasts, and the count of the entries' size
    // before it.
    #[cfg(unix)]
    if let Ok(Descriptor::Dir(dir)) = files.table.get(&fd) {
        let dir = Arc::clone(&dir.dir);
        // A directory that cannot be counted is not listed either (fail closed).
        match tokio::task::spawn_blocking(move || listing_over_limit(&dir)).await {
            Ok(Ok(false)) => {}
            Ok(Ok(true)) => {
                descriptors.unreserve();
                return Err(descriptors.refuse(Refused::LargeListing).into());
            }
            Ok(Err(error)) => {
                descriptors.unreserve();
                return Err(ErrorCode::from(error).into());
            }
            Err(_) => {
                descriptors.unreserve();
                return Err(ErrorCode::Io.into());
            }
        }
    }
    let read = HostDescriptor::read_directory(&mut files, fd).await;
    descriptors.unreserve();
    if read.is_ok() {
        descriptors.listings += 1;
    }
    read
}

/// Whether listing `dir` would hold more than [`MAX_LISTING_BYTES`]: its entries are read one
/// block at a time and only counted. A directory that grows between this and the listing
/// grows by what can be made in that moment.
#[cfg(unix)]
fn listing_over_limit(dir: &std::fs::File) -> std::io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    // Opened again, for reading: the descriptor held may be one opened only to resolve paths
    // (`O_PATH`), which cannot list (and `Dir::read_from` would keep its flags).
    let readable = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut entries = rustix::fs::Dir::new(readable)?;
    let mut bytes = 0;
    while let Some(entry) = entries.read() {
        let name = entry?.file_name().to_bytes().len();
        bytes += name + LISTED_ENTRY_BYTES;
        if bytes > MAX_LISTING_BYTES {
            return Ok(true);
        }
    }
    Ok(false)
}

async fn open_at(
    state: &mut PluginState,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
) -> FsResult<Resource<Descriptor>> {
    #[cfg_attr(unix, allow(unused_mut))]
    let (mut files, descriptors) = state.files();
    if let Err(why) = descriptors.reserve() {
        return Err(descriptors.refuse(why).into());
    }
    // Every way out below gives the permit back or ties it to the file opened.
    #[cfg(unix)]
    let opened = match files.table.get(&fd) {
        Ok(Descriptor::Dir(dir)) => {
            nonblocking::open_at(dir.clone(), path_flags, path, open_flags, flags).await
        }
        Ok(Descriptor::File(_)) => Err(ErrorCode::NotDirectory.into()),
        Err(error) => Err(error.into()),
    }
    .and_then(|descriptor| Ok(files.table.push(descriptor)?));
    #[cfg(not(unix))]
    let opened = HostDescriptor::open_at(&mut files, fd, path_flags, path, open_flags, flags).await;
    match opened.and_then(|resource| Ok((os_file(files.table.get(&resource)?), resource))) {
        Ok((file, resource)) => {
            descriptors.attach(file);
            Ok(resource)
        }
        Err(error) => {
            descriptors.unreserve();
            Err(error)
        }
    }
}

/// `open-at` as wasmtime-wasi does it (the same options, permission checks and sandboxed
/// resolution through cap-primitives), but with `O_NONBLOCK`: opening a FIFO for reading
/// would otherwise block a thread until a writer comes (for ever, after the call has timed
/// out), and opening a device can have effects. Only regular files and directories are
/// opened; anything else is refused as `access`.
#[cfg(unix)]
mod nonblocking {
    use std::fs::FileTimes;
    use std::path::Path;
    use std::time::SystemTime;

    use cap_primitives::fs::{FollowSymlinks, OpenOptions, OpenOptionsExt as _};
    use wasmtime_wasi::filesystem::{Descriptor, Dir, File};
    use wasmtime_wasi::p2::FsResult;
    use wasmtime_wasi::p2::bindings::filesystem::types::{
        DescriptorFlags, ErrorCode, OpenFlags, PathFlags,
    };
    use wasmtime_wasi::{FsPerms, OpenMode};

    enum Opened {
        Dir(std::fs::File),
        File(std::fs::File),
        NotDir,
        Special,
    }

    pub(super) async fn open_at(
        dir: Dir,
        path_flags: PathFlags,
        path: String,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
    ) -> FsResult<Descriptor> {
        let mut create = false;
        let mut open_mode = OpenMode::empty();
        let mut options = OpenOptions::new();
        if open_flags.contains(OpenFlags::CREATE) {
            if open_flags.contains(OpenFlags::EXCLUSIVE) {
                options.create_new(true);
            } else {
                options.create(true);
            }
            create = true;
            options.write(true);
            open_mode |= OpenMode::WRITE;
        }
        if open_flags.contains(OpenFlags::TRUNCATE) {
            options.truncate(true).write(true);
            open_mode |= OpenMode::WRITE;
        }
        if flags.contains(DescriptorFlags::READ) {
            options.read(true);
            open_mode |= OpenMode::READ;
        }
        if flags.contains(DescriptorFlags::WRITE) {
            options.write(true);
            open_mode |= OpenMode::WRITE;
        } else {
            // Open for reading at least, so that the system allows the open; the permissions
            // refuse what was not asked for.
            options.read(true);
            open_mode |= OpenMode::READ;
        }
        // cap-primitives exposes this setting to cap-fs-ext (its `OpenOptionsFollowExt`)
        // under this name; wasmtime-wasi's own copy of cap-primitives sets the same.
        options._cap_fs_ext_follow(if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
            FollowSymlinks::Yes
        } else {
            FollowSymlinks::No
        });
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        if flags.intersects(
            DescriptorFlags::FILE_INTEGRITY_SYNC
                | DescriptorFlags::DATA_INTEGRITY_SYNC
                | DescriptorFlags::REQUESTED_WRITE_SYNC,
        ) {
            return Err(ErrorCode::Unsupported.into());
        }
        if open_flags.contains(OpenFlags::DIRECTORY)
            && open_flags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE)
        {
            return Err(ErrorCode::Invalid.into());
        }
        if dir.perms.write_not_permitted() && (create || open_mode.contains(OpenMode::WRITE)) {
            return Err(ErrorCode::NotPermitted.into());
        }
        let start = std::sync::Arc::clone(&dir.dir);
        let want_dir = open_flags.contains(OpenFlags::DIRECTORY);
        // The open cannot block on the file itself any more, but on a slow file system it can
        // still take a while: off the runtime's threads, as wasmtime-wasi does.
        let opened = tokio::task::spawn_blocking(move || -> std::io::Result<Opened> {
            let file = cap_primitives::fs::open(&start, Path::new(&path), &options)?;
            let kind = file.metadata()?.file_type();
            Ok(if kind.is_dir() {
                Opened::Dir(file)
            } else if want_dir {
                Opened::NotDir
            } else if kind.is_file() {
                // Reads and writes of a regular file behave as before.
                rustix::fs::fcntl_setfl(
                    &file,
                    rustix::fs::fcntl_getfl(&file)? - rustix::fs::OFlags::NONBLOCK,
                )?;
                Opened::File(file)
            } else {
                // A FIFO, a device or a socket: a plugin is given files, not these.
                Opened::Special
            })
        })
        .await
        .map_err(wasmtime_wasi::p2::FsError::trap)?;
        let perms: FsPerms = dir.perms;
        match opened.map_err(ErrorCode::from)? {
            Opened::Dir(file) => Ok(Descriptor::Dir(Dir::new(file, perms, open_mode, false))),
            Opened::File(file) => Ok(Descriptor::File(File::new(file, perms, open_mode, false))),
            Opened::NotDir => Err(ErrorCode::NotDirectory.into()),
            Opened::Special => Err(ErrorCode::Access.into()),
        }
    }

    /// `set-times-at` following links (the grant's write permission checked by the caller):
    /// the file opened for reading (or, without read permission, for writing) without
    /// blocking, as `open-at` opens it, its times set through the descriptor if it is a
    /// regular file or a directory; anything else is `access`.
    pub(super) async fn set_times_at(
        dir: Dir,
        path: String,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
    ) -> FsResult<()> {
        let start = std::sync::Arc::clone(&dir.dir);
        let set = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
            let open = |write: bool| {
                let mut options = OpenOptions::new();
                options.read(!write).write(write);
                options._cap_fs_ext_follow(FollowSymlinks::Yes);
                options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
                cap_primitives::fs::open(&start, Path::new(&path), &options)
            };
            let file = match open(false) {
                Err(error) if error.raw_os_error() == Some(libc::EACCES) => open(true)?,
                opened => opened?,
            };
            let kind = file.metadata()?.file_type();
            if !kind.is_file() && !kind.is_dir() {
                return Ok(false);
            }
            let mut times = FileTimes::new();
            if let Some(atime) = atime {
                times = times.set_accessed(atime);
            }
            if let Some(mtime) = mtime {
                times = times.set_modified(mtime);
            }
            file.set_times(times)?;
            Ok(true)
        })
        .await
        .map_err(wasmtime_wasi::p2::FsError::trap)?;
        match set.map_err(ErrorCode::from)? {
            true => Ok(()),
            false => Err(ErrorCode::Access.into()),
        }
    }
}

/// Open a directory to name it, not to read it (as wasmtime-wasi opens preopened directories,
/// which then need no read permission on the directory itself).
#[cfg(target_os = "linux")]
const PATH_ONLY: i32 = libc::O_PATH;
#[cfg(all(unix, not(target_os = "linux")))]
const PATH_ONLY: i32 = 0;

/// A granted directory, opened once when the plugin is loaded: every instance is given this
/// directory, not whatever its path leads to when the instance starts.
#[derive(Debug)]
pub(crate) struct HeldDir {
    /// Kept open for as long as `path` may name it (`None` where it cannot be opened by
    /// itself).
    _file: Option<std::fs::File>,
    /// Where an instance opens it from.
    path: PathBuf,
}

impl HeldDir {
    /// Opens the directory at `resolved` (a path with no links left: the grant resolved at
    /// load), refusing a link or anything but a directory in its place.
    ///
    /// On Linux an instance opens `/proc/self/fd/N`, which leads to exactly this directory
    /// wherever it is now (wasmtime-wasi opens preopened directories by path only), and the
    /// directory opened is checked to be the one at `resolved`. Elsewhere an instance opens
    /// `resolved` again, and the check at each start (the path still resolves to itself) is
    /// what stands between the grant and a link put in its path.
    #[cfg(unix)]
    pub(crate) fn open(resolved: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | PATH_ONLY)
            .open(resolved)?;
        let path = Self::instance_path(&file, resolved)?;
        Ok(Self {
            _file: Some(file),
            path,
        })
    }

    #[cfg(not(unix))]
    pub(crate) fn open(resolved: &Path) -> std::io::Result<Self> {
        Ok(Self {
            _file: None,
            path: resolved.to_owned(),
        })
    }

    #[cfg(target_os = "linux")]
    fn instance_path(file: &std::fs::File, resolved: &Path) -> std::io::Result<PathBuf> {
        use std::os::fd::AsRawFd as _;
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        match std::fs::read_link(&path) {
            Ok(opened) if opened == resolved => Ok(path),
            Ok(opened) => Err(std::io::Error::other(format!(
                "it changed while it was opened: {} was opened instead",
                opened.display()
            ))),
            // No /proc (a sandbox without it): open by path, as on other systems.
            Err(_) => Ok(resolved.to_owned()),
        }
    }

    #[cfg(all(unix, not(target_os = "linux")))]
    fn instance_path(_file: &std::fs::File, resolved: &Path) -> std::io::Result<PathBuf> {
        Ok(resolved.to_owned())
    }

    /// The path an instance opens to get this directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Which directory this is (its device and inode; `None` where that cannot be read).
    pub(crate) fn identity(&self) -> Option<(u64, u64)> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            let metadata = self._file.as_ref()?.metadata().ok()?;
            Some((metadata.dev(), metadata.ino()))
        }
        #[cfg(not(unix))]
        None
    }

    /// Whether `resolved` (the grant's path, as resolved at load) still names this directory:
    /// not if it was moved away (or removed) and another made in its place. `true` where that
    /// cannot be told.
    pub(crate) fn is_at(&self, resolved: &Path) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            let Some(held) = self.identity() else {
                return true;
            };
            std::fs::symlink_metadata(resolved).is_ok_and(|now| (now.dev(), now.ino()) == held)
        }
        #[cfg(not(unix))]
        {
            let _ = resolved;
            true
        }
    }
}
