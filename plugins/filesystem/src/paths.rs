//! Where the tools may go: the allowed directories (the policy's directory grants, narrowed by
//! the client's roots), and the check every path argument passes before it is used.
//!
//! The check is the original's, in guest paths: the path is made absolute (a relative one
//! against the allowed directories), cleaned of `.` and `..` lexically, refused outside every
//! allowed directory, then its symbolic links are resolved one by one and the result refused
//! if it leads out. It gives the original's messages. It is the first wall only: every file
//! operation then goes through the WASI preopens, where the host resolves the path beneath the
//! granted directory and refuses anything that leaves it, whatever happened since the check.

use std::io;

/// One allowed directory: a guest path and whether the plugin may change what is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// An absolute, clean guest path (`/data`).
    pub path: String,
    /// The grant is `mode = "rw"`.
    pub writable: bool,
}

/// The directories the policy grants, as the guest sees them (its WASI preopens), with
/// whether each is writable. Natively (unit tests) there are none.
#[must_use]
pub fn granted() -> Vec<Allowed> {
    #[cfg(target_arch = "wasm32")]
    {
        use wasip2::filesystem::preopens::get_directories;
        use wasip2::filesystem::types::DescriptorFlags;
        let mut allowed: Vec<Allowed> = get_directories()
            .into_iter()
            .map(|(descriptor, path)| Allowed {
                path: clean(&path),
                writable: descriptor.get_flags().is_ok_and(|flags| {
                    flags.intersects(DescriptorFlags::MUTATE_DIRECTORY | DescriptorFlags::WRITE)
                }),
            })
            .collect();
        allowed.dedup();
        allowed
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Vec::new()
    }
}

/// The allowed directories once the client's roots are taken into account: each root that
/// lies inside a grant (a `file://` URI of the same path the grant is mounted at), its links
/// resolved within the grants (files are opened through them, so the root is where they lead,
/// which must be inside a grant too), and each grant that lies inside a root. With no roots,
/// the grants themselves. Roots of which none meets a grant are refused: the client narrowed
/// the plugin to places it cannot reach, and the grants are not what it asked for. A grant is
/// always the outer bound, and a root never widens it.
pub fn narrowed_by_roots(
    grants: &[Allowed],
    roots: &[String],
    fs: &impl Links,
) -> Result<Vec<Allowed>, String> {
    if roots.is_empty() {
        return Ok(grants.to_vec());
    }
    let mut narrowed: Vec<Allowed> = Vec::new();
    for root in roots {
        let Some(written) = root_path(root) else {
            continue;
        };
        // A root inside a grant is where its links lead (which must be inside a grant), with
        // the mode of the grant it leads into; one outside every grant is as written (the
        // plugin cannot see there to resolve it).
        let path = if containing(&written, grants).is_some() {
            let Some(real) = resolve(&written, grants, fs).ok() else {
                continue;
            };
            if let Some(holder) = containing(&real, grants) {
                let allowed = Allowed {
                    writable: holder.writable,
                    path: real.clone(),
                };
                if !narrowed.contains(&allowed) {
                    narrowed.push(allowed);
                }
            }
            real
        } else {
            written
        };
        // And every grant inside it, with its own mode.
        for grant in grants {
            if is_within(&grant.path, &path) && grant.path != path && !narrowed.contains(grant) {
                narrowed.push(grant.clone());
            }
        }
    }
    if narrowed.is_empty() {
        let shown: Vec<&str> = roots.iter().take(10).map(String::as_str).collect();
        return Err(format!(
            "Access denied - none of the client's roots ({}) lies within the directories this \
             plugin is granted ({}); the client's roots narrow what it may touch, so nothing \
             is allowed: offer a root inside one of them",
            shown.join(", "),
            listed(grants)
        ));
    }
    Ok(narrowed)
}

/// The path of a `file://` root URI (percent-decoded, cleaned); `None` for any other URI or a
/// file URI naming another host.
fn root_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%'
            && let Some(hex) = rest.get(at + 1..at + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            decoded.push(byte);
            at += 3;
            continue;
        }
        decoded.push(bytes[at]);
        at += 1;
    }
    let path = String::from_utf8(decoded).ok()?;
    if path.contains('\0') {
        return None;
    }
    Some(clean(&path))
}

/// `path` made absolute and clean lexically, as Node's `path.resolve` does from `/`: repeated
/// slashes, `.` and `..` removed (`..` at the root stays at the root), no trailing slash.
#[must_use]
pub fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    let mut out = String::with_capacity(path.len() + 1);
    for part in &parts {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Joins a relative `tail` to a clean absolute `base`.
#[must_use]
pub fn join(base: &str, tail: &str) -> String {
    clean(&format!("{base}/{tail}"))
}

/// Whether the clean absolute `path` is `dir` or beneath it (by whole components: `/data_evil`
/// is not within `/data`).
#[must_use]
pub fn is_within(path: &str, dir: &str) -> bool {
    path == dir
        || dir == "/"
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// The allowed directory `path` is in (the innermost), if any.
#[must_use]
pub fn containing<'a>(path: &str, allowed: &'a [Allowed]) -> Option<&'a Allowed> {
    allowed
        .iter()
        .filter(|dir| is_within(path, &dir.path))
        .max_by_key(|dir| dir.path.len())
}

fn listed(allowed: &[Allowed]) -> String {
    allowed
        .iter()
        .map(|dir| dir.path.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The file system as the check sees it: natively and in the guest, `std::fs`; a test may
/// stand in its own.
pub trait Links {
    /// Whether `path` is a symbolic link (`Ok(None)`: it is not; `Err` with `NotFound`: nothing
    /// is there), and its target when it is.
    fn link_target(&self, path: &str) -> io::Result<Option<String>>;
}

/// The real file system, through `std::fs` (in the guest, the WASI preopens).
pub struct RealFs;

impl Links for RealFs {
    fn link_target(&self, path: &str) -> io::Result<Option<String>> {
        match std::fs::read_link(path) {
            Ok(target) => Ok(Some(target.to_string_lossy().into_owned())),
            // Not a link (EINVAL), or something the sandbox will not describe: ask what it is.
            Err(error) => match std::fs::symlink_metadata(path) {
                Ok(meta) if !meta.file_type().is_symlink() => Ok(None),
                Ok(_) => Err(error),
                Err(other) => Err(other),
            },
        }
    }
}

/// How many symbolic links one path may pass through (Linux's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// Checks a path argument as the original does and returns the path to use: absolute, clean,
/// with its links resolved, inside `allowed`. A path that does not exist yet is returned with
/// its existing part resolved (so that a file can be created). The errors are the original's
/// texts.
///
/// # Errors
/// The path is outside every allowed directory, a link in it leads out, or it cannot be
/// looked at.
pub fn validate(requested: &str, allowed: &[Allowed], fs: &impl Links) -> Result<String, String> {
    if allowed.is_empty() {
        return Err(
            "Access denied - this plugin has no allowed directories: its policy grants \
                    none; add a [[dirs]] entry to filesystem.policy.toml"
                .into(),
        );
    }
    if requested == "~" || requested.starts_with("~/") {
        return Err(format!(
            "Access denied - the home directory (~) is not available in this sandbox: {requested}; \
             give a path inside one of the allowed directories: {}",
            listed(allowed)
        ));
    }
    let bytes = requested.as_bytes();
    if bytes.len() >= 2
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && matches!(bytes.get(2), None | Some(b'\\' | b'/'))
    {
        return Err(format!(
            "Access denied - Windows-style path received on a POSIX host: {requested}"
        ));
    }
    if requested.contains('\0') {
        return Err(format!(
            "Access denied - path outside allowed directories: {} not in {}",
            requested.replace('\0', "\\0"),
            listed(allowed)
        ));
    }
    let absolute = if requested.starts_with('/') {
        clean(requested)
    } else {
        allowed
            .iter()
            .map(|dir| join(&dir.path, requested))
            .find(|candidate| containing(candidate, allowed).is_some())
            .unwrap_or_else(|| join(&allowed[0].path, requested))
    };
    if containing(&absolute, allowed).is_none() {
        return Err(format!(
            "Access denied - path outside allowed directories: {absolute} not in {}",
            listed(allowed)
        ));
    }
    resolve(&absolute, allowed, fs)
}

/// Resolves the links of the clean absolute `path`, which is inside `allowed`.
fn resolve(path: &str, allowed: &[Allowed], fs: &impl Links) -> Result<String, String> {
    let mut path = path.to_owned();
    let mut hops = 0;
    'again: loop {
        // The allowed directory itself is the host's resolved path: start below it.
        let Some(dir) = containing(&path, allowed) else {
            return Err(format!(
                "Access denied - symlink target outside allowed directories: {path} not in {}",
                listed(allowed)
            ));
        };
        let mut resolved = dir.path.clone();
        let rest: Vec<String> = path[dir.path.len()..]
            .split('/')
            .filter(|part| !part.is_empty())
            .map(str::to_owned)
            .collect();
        for (at, part) in rest.iter().enumerate() {
            let next = join(&resolved, part);
            match fs.link_target(&next) {
                Ok(None) => resolved = next,
                Ok(Some(target)) => {
                    hops += 1;
                    if hops > MAX_LINKS {
                        return Err(format!(
                            "ELOOP: too many symbolic links encountered, realpath '{path}'"
                        ));
                    }
                    let base = if target.starts_with('/') {
                        target
                    } else {
                        format!("{resolved}/{target}")
                    };
                    let remaining = rest[at + 1..].join("/");
                    path = clean(&format!("{base}/{remaining}"));
                    continue 'again;
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    // Nothing below exists yet: no links left to resolve.
                    return Ok(join(&resolved, &rest[at..].join("/")));
                }
                // The sandbox neither follows nor shows a link to an absolute path outside.
                Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                    return Err(format!(
                        "Access denied - the sandbox refuses to look at {next}: a symbolic link \
                         out of the allowed directories (whose target it does not show), or a \
                         path it may not read; allowed directories: {}",
                        listed(allowed)
                    ));
                }
                Err(error) => return Err(node_error(&error, "lstat", &next)),
            }
        }
        return Ok(resolved);
    }
}

/// An I/O error as Node words it (`ENOENT: no such file or directory, open '/data/a'`), so
/// that our errors read as the original's.
#[must_use]
pub fn node_error(error: &io::Error, syscall: &str, path: &str) -> String {
    let code = match error.kind() {
        io::ErrorKind::NotFound => "ENOENT: no such file or directory",
        io::ErrorKind::PermissionDenied => "EACCES: permission denied",
        io::ErrorKind::AlreadyExists => "EEXIST: file already exists",
        io::ErrorKind::NotADirectory => "ENOTDIR: not a directory",
        io::ErrorKind::IsADirectory => "EISDIR: illegal operation on a directory",
        io::ErrorKind::DirectoryNotEmpty => "ENOTEMPTY: directory not empty",
        io::ErrorKind::CrossesDevices => "EXDEV: cross-device link not permitted",
        io::ErrorKind::ReadOnlyFilesystem => "EROFS: read-only file system",
        io::ErrorKind::InvalidFilename => "ENAMETOOLONG: name too long",
        _ => return format!("{error}, {syscall} '{path}'"),
    };
    format!("{code}, {syscall} '{path}'")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn data() -> Vec<Allowed> {
        vec![Allowed {
            path: "/data".into(),
            writable: true,
        }]
    }

    /// A file system of links only: every other path exists and is not a link.
    struct FakeLinks(HashMap<&'static str, &'static str>);

    impl Links for FakeLinks {
        fn link_target(&self, path: &str) -> io::Result<Option<String>> {
            if path.ends_with("/missing") {
                return Err(io::ErrorKind::NotFound.into());
            }
            Ok(self.0.get(path).map(|target| (*target).to_owned()))
        }
    }

    #[test]
    fn paths_are_cleaned_as_node_resolves_them() {
        assert_eq!(clean("/data//a/./b/../c/"), "/data/a/c");
        assert_eq!(clean("/../.."), "/");
        assert_eq!(join("/data", "../etc"), "/etc");
    }

    #[test]
    fn within_means_whole_components() {
        assert!(is_within("/data", "/data"));
        assert!(is_within("/data/a", "/data"));
        assert!(!is_within("/data_evil", "/data"));
        assert!(!is_within("/dat", "/data"));
        assert!(is_within("/anything", "/"));
    }

    #[test]
    fn paths_outside_are_refused_with_the_originals_text() {
        let fs = FakeLinks(HashMap::new());
        for (path, seen) in [
            ("/data/../etc/passwd", "/etc/passwd"),
            ("/data_evil/x", "/data_evil/x"),
            ("../outside", "/outside"),
            ("/etc", "/etc"),
        ] {
            assert_eq!(
                validate(path, &data(), &fs),
                Err(format!(
                    "Access denied - path outside allowed directories: {seen} not in /data"
                )),
                "{path}"
            );
        }
        assert_eq!(validate("a/b", &data(), &fs).as_deref(), Ok("/data/a/b"));
        assert!(validate("C:\\x", &data(), &fs).is_err());
        assert!(validate("~/x", &data(), &fs).is_err());
        assert!(validate("/data/x", &[], &fs).is_err());
    }

    #[test]
    fn links_are_followed_and_refused_when_they_lead_out() {
        let fs = FakeLinks(HashMap::from([
            ("/data/out", "/etc"),
            ("/data/up", "../secret"),
            ("/data/in", "sub"),
            ("/data/loop", "loop"),
        ]));
        assert_eq!(
            validate("/data/out/passwd", &data(), &fs),
            Err(
                "Access denied - symlink target outside allowed directories: /etc/passwd not in \
                 /data"
                    .into()
            )
        );
        assert!(validate("/data/up", &data(), &fs).is_err());
        assert_eq!(
            validate("/data/in/file", &data(), &fs).as_deref(),
            Ok("/data/sub/file")
        );
        assert_eq!(
            validate("/data/in/missing/x", &data(), &fs).as_deref(),
            Ok("/data/sub/missing/x")
        );
        assert!(
            validate("/data/loop", &data(), &fs)
                .unwrap_err()
                .starts_with("ELOOP")
        );
    }

    #[test]
    fn roots_narrow_grants_and_never_widen_them() {
        let grants = vec![
            Allowed {
                path: "/data".into(),
                writable: true,
            },
            Allowed {
                path: "/ro".into(),
                writable: false,
            },
        ];
        // `/data/link` leads to `/data/other`, `/data/out` out of the grants, `/data/to-ro`
        // into the read-only grant.
        let fs = FakeLinks(HashMap::from([
            ("/data/link", "/data/other"),
            ("/data/out", "/etc"),
            ("/data/to-ro", "/ro/x"),
        ]));
        let roots = |uris: &[&str]| {
            narrowed_by_roots(
                &grants,
                &uris.iter().map(|u| (*u).to_owned()).collect::<Vec<_>>(),
                &fs,
            )
        };
        assert_eq!(roots(&[]), Ok(grants.clone()));
        // Roots that meet no grant narrow the plugin to nothing it can reach: refused.
        for unreachable in [
            &["file:///elsewhere"][..],
            &["https://x"],
            &["file:///data/out"],
        ] {
            let refused = roots(unreachable).expect_err("refused");
            assert!(refused.contains("none of the client's roots"), "{refused}");
        }
        assert_eq!(
            roots(&["file:///data/project%20one", "https://x"]),
            Ok(vec![Allowed {
                path: "/data/project one".into(),
                writable: true
            }])
        );
        assert_eq!(roots(&["file:///"]), Ok(grants.clone()));
        assert!(!roots(&["file:///ro/x"]).expect("a root")[0].writable);
        // A root through a link is where the link leads, with that grant's mode.
        assert_eq!(
            roots(&["file:///data/link/sub"]),
            Ok(vec![Allowed {
                path: "/data/other/sub".into(),
                writable: true
            }])
        );
        assert_eq!(
            roots(&["file:///data/to-ro"]),
            Ok(vec![Allowed {
                path: "/ro/x".into(),
                writable: false
            }])
        );
        // A root through a link to a directory holding a grant of its own brings that grant
        // in, with its mode.
        let nested = vec![
            Allowed {
                path: "/data".into(),
                writable: true,
            },
            Allowed {
                path: "/data/ro".into(),
                writable: false,
            },
        ];
        let fs = FakeLinks(HashMap::from([("/data/lnk", "/data")]));
        assert_eq!(
            narrowed_by_roots(&nested, &["file:///data/lnk".to_owned()], &fs),
            Ok(nested.clone())
        );
    }
}
