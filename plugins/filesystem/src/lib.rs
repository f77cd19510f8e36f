//! Filesystem: the MCP reference server `@modelcontextprotocol/server-filesystem` (2026.8.31)
//! as a sandboxed plugin, with its fourteen tools, their arguments and their answers. Its
//! allowed directories are the directory grants of its policy (narrowed by the client's roots
//! where the policy lets it read them); every path is checked as the original checks it, and
//! then opened through the WASI preopens, which hold it inside the grant whatever the check
//! missed. Reads, listings and walks are bounded (see [`Limits`]) and stop with a message.

mod edit;
mod format;
mod glob;
mod paths;

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use llm_worker_guest::{Content, QuestionError, ResourceContents, ToolOutput, tool, tool_registry};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use paths::Allowed;
use paths::{RealFs, node_error, validate};

/// How much one call may read, list or walk. The operator sets them in the policy's `[env]`
/// (`set = { FILESYSTEM_MAX_BYTES = "4000000" }`); keep `FILESYSTEM_MAX_BYTES` under the
/// policy's `limits.max_output_bytes`, and the plugin's memory above a few times it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes read from one file, scanned by `head` or `tail`, or answered by one
    /// call (`FILESYSTEM_MAX_BYTES`, default 1000000).
    pub max_bytes: u64,
    /// The most directory entries one call lists or visits (`FILESYSTEM_MAX_ENTRIES`, default
    /// 10000).
    pub max_entries: usize,
    /// The deepest `directory_tree` goes below its path (`FILESYSTEM_MAX_DEPTH`, default 64).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 1_000_000,
            max_entries: 10_000,
            max_depth: 64,
        }
    }
}

impl Limits {
    /// The defaults, with what the environment sets.
    ///
    /// # Errors
    /// A variable set to anything but a whole number from 1 up, named with what to do.
    pub fn from_env() -> Result<Self, String> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// The defaults, with what `var` gives for each variable.
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let read = |name: &str, default: u64| -> Result<u64, String> {
            match var(name) {
                None => Ok(default),
                Some(value) => match value.trim().parse::<u64>() {
                    Ok(n) if n >= 1 => Ok(n),
                    _ => Err(format!(
                        "this plugin's policy sets {name} to {value:?}: give a whole number from \
                         1 up in the [env] table of filesystem.policy.toml, or leave it out \
                         (default {default})"
                    )),
                },
            }
        };
        let default = Self::default();
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Ok(Self {
            max_bytes: read("FILESYSTEM_MAX_BYTES", default.max_bytes)?,
            max_entries: size(read("FILESYSTEM_MAX_ENTRIES", default.max_entries as u64)?),
            max_depth: size(read("FILESYSTEM_MAX_DEPTH", default.max_depth as u64)?),
        })
    }
}

/// The server: its grants and limits.
#[derive(Clone)]
pub struct Filesystem {
    grants: Arc<Vec<Allowed>>,
    limits: Limits,
    /// What is wrong with the limits the policy set: every call fails with it.
    misconfigured: Option<String>,
}

impl Default for Filesystem {
    fn default() -> Self {
        match Limits::from_env() {
            Ok(limits) => Self::new(paths::granted(), limits),
            Err(problem) => Self {
                misconfigured: Some(problem),
                ..Self::new(paths::granted(), Limits::default())
            },
        }
    }
}

/// One edit of `edit_file`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditOperation {
    /// Text to search for - must match exactly
    #[serde(rename = "oldText")]
    pub old_text: String,
    /// Text to replace with
    #[serde(rename = "newText")]
    pub new_text: String,
}

/// How `list_directory_with_sizes` sorts.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SortBy {
    /// By name.
    #[default]
    Name,
    /// By size, largest first.
    Size,
}

/// A node of `directory_tree`'s answer.
#[derive(Serialize)]
struct TreeEntry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    children: Option<Vec<TreeEntry>>,
}

/// A directory entry: its name, whether it is a directory and whether it is a symbolic link
/// (links are not followed).
type Entry = (String, bool, bool);

/// A failed call: the message the client sees.
type Failure = String;

#[tool_registry]
impl Filesystem {
    /// Read the complete contents of a file as text. DEPRECATED: Use read_text_file instead.
    #[tool(title = "Read File (Deprecated)", read_only, open_world = false)]
    async fn read_file(
        &self,
        path: String,
        #[description = "If provided, returns only the last N lines of the file"] tail: Option<f64>,
        #[description = "If provided, returns only the first N lines of the file"] head: Option<
            f64,
        >,
    ) -> ToolOutput {
        answer(self.read_text(&path, head, tail).await)
    }

    /// Read the complete contents of a file from the file system as text. Handles various text encodings and provides detailed error messages if the file cannot be read. Use this tool when you need to examine the contents of a single file. Use the 'head' parameter to read only the first N lines of a file, or the 'tail' parameter to read only the last N lines of a file. Operates on the file as text regardless of extension. Only works within allowed directories.
    #[tool(title = "Read Text File", read_only, open_world = false)]
    async fn read_text_file(
        &self,
        path: String,
        #[description = "If provided, returns only the last N lines of the file"] tail: Option<f64>,
        #[description = "If provided, returns only the first N lines of the file"] head: Option<
            f64,
        >,
    ) -> ToolOutput {
        answer(self.read_text(&path, head, tail).await)
    }

    /// Read a file and return it as a base64-encoded content block with its MIME type. Image and audio files are returned as image/audio content; any other file type is returned as an embedded resource. Only works within allowed directories.
    #[tool(title = "Read Media File", read_only, open_world = false)]
    async fn read_media_file(&self, path: String) -> ToolOutput {
        answer_with(self.run_read_media_file(path).await)
    }

    /// Read the contents of multiple files simultaneously. This is more efficient than reading files one by one when you need to analyze or compare multiple files. Each file's content is returned with its path as a reference. Failed reads for individual files won't stop the entire operation. Only works within allowed directories.
    #[tool(title = "Read Multiple Files", read_only, open_world = false)]
    async fn read_multiple_files(
        &self,
        #[description = "Array of file paths to read. Each path must be a string pointing to a valid file within allowed directories."]
        #[schemars(length(min = 1))]
        paths: Vec<String>,
    ) -> ToolOutput {
        answer(self.run_read_multiple_files(paths).await)
    }

    /// Create a new file or completely overwrite an existing file with new content. Use with caution as it will overwrite existing files without warning. Handles text content with proper encoding. Only works within allowed directories.
    #[tool(
        title = "Write File",
        read_only = false,
        idempotent,
        destructive,
        open_world = false
    )]
    async fn write_file(&self, path: String, content: String) -> ToolOutput {
        answer(self.run_write_file(path, content).await)
    }

    /// Make line-based edits to a text file. Each edit replaces exact line sequences with new content. Returns a git-style diff showing the changes made. Only works within allowed directories.
    #[tool(
        title = "Edit File",
        read_only = false,
        idempotent = false,
        destructive,
        open_world = false
    )]
    async fn edit_file(
        &self,
        path: String,
        edits: Vec<EditOperation>,
        #[description = "Preview changes using git-style diff format"]
        #[serde(rename = "dryRun", default)]
        dry_run: bool,
    ) -> ToolOutput {
        answer(self.run_edit_file(path, edits, dry_run).await)
    }

    /// Create a new directory or ensure a directory exists. Can create multiple nested directories in one operation. If the directory already exists, this operation will succeed silently. Perfect for setting up directory structures for projects or ensuring required paths exist. Only works within allowed directories.
    #[tool(
        title = "Create Directory",
        read_only = false,
        idempotent,
        destructive = false,
        open_world = false
    )]
    async fn create_directory(&self, path: String) -> ToolOutput {
        answer(self.run_create_directory(path).await)
    }

    /// Get a detailed listing of all files and directories in a specified path. Results clearly distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is essential for understanding directory structure and finding specific files within a directory. Only works within allowed directories.
    #[tool(title = "List Directory", read_only, open_world = false)]
    async fn list_directory(&self, path: String) -> ToolOutput {
        answer(self.run_list_directory(path).await)
    }

    /// Get a detailed listing of all files and directories in a specified path, including sizes. Results clearly distinguish between files and directories with [FILE] and [DIR] prefixes. This tool is useful for understanding directory structure and finding specific files within a directory. Only works within allowed directories.
    #[tool(title = "List Directory with Sizes", read_only, open_world = false)]
    async fn list_directory_with_sizes(
        &self,
        path: String,
        #[description = "Sort entries by name or size"]
        #[serde(rename = "sortBy", default)]
        sort_by: SortBy,
    ) -> ToolOutput {
        answer(self.run_list_directory_with_sizes(path, sort_by).await)
    }

    /// Get a recursive tree view of files and directories as a JSON structure. Each entry includes 'name', 'type' (file/directory), and 'children' for directories. Files have no children array, while directories always have a children array (which may be empty). The output is formatted with 2-space indentation for readability. Only works within allowed directories.
    #[tool(title = "Directory Tree", read_only, open_world = false)]
    async fn directory_tree(
        &self,
        path: String,
        #[serde(rename = "excludePatterns", default)] exclude_patterns: Vec<String>,
    ) -> ToolOutput {
        answer(self.run_directory_tree(path, exclude_patterns).await)
    }

    /// Move or rename files and directories. Can move files between directories and rename them in a single operation. If the destination exists, the operation will fail. Works across different directories and can be used for simple renaming within the same directory. Both source and destination must be within allowed directories.
    #[tool(
        title = "Move File",
        read_only = false,
        idempotent = false,
        destructive,
        open_world = false
    )]
    async fn move_file(&self, source: String, destination: String) -> ToolOutput {
        answer(self.run_move_file(source, destination).await)
    }

    /// Recursively search for files and directories matching a pattern. The patterns should be glob-style patterns that match paths relative to the working directory. Use pattern like '*.ext' to match files in current directory, and '**/*.ext' to match files in all subdirectories. Returns full paths to all matching items. Great for finding files when you don't know their exact location. Only searches within allowed directories.
    #[tool(title = "Search Files", read_only, open_world = false)]
    async fn search_files(
        &self,
        path: String,
        pattern: String,
        #[serde(rename = "excludePatterns", default)] exclude_patterns: Vec<String>,
    ) -> ToolOutput {
        answer(self.run_search_files(path, pattern, exclude_patterns).await)
    }

    /// Retrieve detailed metadata about a file or directory. Returns comprehensive information including size, creation time, last modified time, permissions, and type. This tool is perfect for understanding file characteristics without reading the actual content. Only works within allowed directories.
    #[tool(title = "Get File Info", read_only, open_world = false)]
    async fn get_file_info(&self, path: String) -> ToolOutput {
        answer(self.run_get_file_info(path).await)
    }

    /// Returns the list of directories that this server is allowed to access. Subdirectories within these allowed directories are also accessible. Use this to understand which directories and their nested paths are available before trying to access files.
    #[tool(title = "List Allowed Directories", read_only, open_world = false)]
    async fn list_allowed_directories(&self) -> ToolOutput {
        answer(self.run_list_allowed_directories().await)
    }
}

/// What the tools do: each gives its text (or its blocks), or the error the client sees.
impl Filesystem {
    async fn run_read_media_file(&self, path: String) -> Result<ToolOutput, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(&path, &allowed, &RealFs)?;
        let data = self.read_bounded(&real)?;
        let extension = real
            .rsplit('/')
            .next()
            .and_then(|name| name.rfind('.').filter(|&at| at > 0).map(|at| &name[at..]))
            .unwrap_or("")
            .to_ascii_lowercase();
        let mime = match extension.as_str() {
            ".png" => "image/png",
            ".jpg" | ".jpeg" => "image/jpeg",
            ".gif" => "image/gif",
            ".webp" => "image/webp",
            ".bmp" => "image/bmp",
            ".svg" => "image/svg+xml",
            ".mp3" => "audio/mpeg",
            ".wav" => "audio/wav",
            ".ogg" => "audio/ogg",
            ".flac" => "audio/flac",
            _ => "application/octet-stream",
        };
        let block = if mime.starts_with("image/") {
            Content::image(mime, data)
        } else if mime.starts_with("audio/") {
            Content::audio(mime, data)
        } else {
            Content::Resource(ResourceContents::blob(
                format::file_url(&real),
                Some(mime),
                data,
            ))
        };
        Ok(ToolOutput::content(vec![block]))
    }

    async fn run_read_multiple_files(&self, paths: Vec<String>) -> Result<String, Failure> {
        if paths.is_empty() {
            return Err("At least one file path must be provided".into());
        }
        let allowed = self.allowed().await?;
        let mut answers = Vec::with_capacity(paths.len());
        let mut total: u64 = 0;
        for path in &paths {
            let read = validate(path, &allowed, &RealFs).and_then(|real| {
                let text = self.read_whole(&real)?;
                let size = u64::try_from(text.len()).unwrap_or(u64::MAX);
                if total.saturating_add(size) > self.limits.max_bytes {
                    return Err(format!(
                        "not read: with it the answer would be over {} bytes, what this server \
                         answers at once (FILESYSTEM_MAX_BYTES); read it on its own, or with \
                         head or tail",
                        self.limits.max_bytes
                    ));
                }
                total = total.saturating_add(size);
                Ok(text)
            });
            answers.push(match read {
                Ok(text) => format!("{path}:\n{text}\n"),
                Err(error) => format!("{path}: Error - {error}"),
            });
        }
        Ok(answers.join("\n---\n"))
    }

    async fn run_write_file(&self, path: String, content: String) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(&path, &allowed, &RealFs)?;
        writable(&real, &allowed)?;
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&real);
        match created {
            Ok(mut file) => file
                .write_all(content.as_bytes())
                .map_err(|e| node_error(&e, "write", &real))?,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                replace(&real, content.as_bytes())?;
            }
            Err(error) => return Err(node_error(&error, "open", &real)),
        }
        Ok(format!("Successfully wrote to {path}"))
    }

    async fn run_edit_file(
        &self,
        path: String,
        edits: Vec<EditOperation>,
        dry_run: bool,
    ) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(&path, &allowed, &RealFs)?;
        if !dry_run {
            writable(&real, &allowed)?;
        }
        let content = edit::normalize_line_endings(&self.read_whole(&real)?);
        let edits: Vec<edit::Edit> = edits
            .into_iter()
            .map(|e| edit::Edit {
                old_text: e.old_text,
                new_text: e.new_text,
            })
            .collect();
        let limit = usize::try_from(self.limits.max_bytes).unwrap_or(usize::MAX);
        let modified = edit::apply(&content, &edits, limit)?;
        let answer = edit::fenced(&edit::unified_diff(&content, &modified, &real));
        if !dry_run {
            replace(&real, modified.as_bytes())?;
        }
        Ok(answer)
    }

    async fn run_create_directory(&self, path: String) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(&path, &allowed, &RealFs)?;
        if !std::fs::metadata(&real).is_ok_and(|m| m.is_dir()) {
            writable(&real, &allowed)?;
        }
        std::fs::create_dir_all(&real).map_err(|e| node_error(&e, "mkdir", &real))?;
        Ok(format!("Successfully created directory {path}"))
    }

    async fn run_list_directory(&self, path: String) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(&path, &allowed, &RealFs)?;
        let (entries, more) = self.entries(&real)?;
        let mut lines: Vec<String> = entries
            .iter()
            .map(|(name, is_dir, _)| format!("{} {name}", if *is_dir { "[DIR]" } else { "[FILE]" }))
            .collect();
        self.bound_listing(&mut lines, more, &path);
        Ok(lines.join("\n"))
    }

    async fn run_list_directory_with_sizes(
        &self,
        path: String,
        sort_by: SortBy,
    ) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(&path, &allowed, &RealFs)?;
        let (entries, more) = self.entries(&real)?;
        let mut sized: Vec<(String, bool, u64)> = entries
            .into_iter()
            .map(|(name, is_dir, _)| {
                let size = std::fs::metadata(paths::join(&real, &name)).map_or(0, |m| m.len());
                (name, is_dir, size)
            })
            .collect();
        let files = sized.iter().filter(|e| !e.1).count();
        let dirs = sized.len() - files;
        let total: u64 = sized
            .iter()
            .filter(|e| !e.1)
            .fold(0, |sum, e| sum.saturating_add(e.2));
        match sort_by {
            SortBy::Size => sized.sort_by_key(|entry| std::cmp::Reverse(entry.2)),
            SortBy::Name => sized.sort_by(|a, b| locale_order(&a.0, &b.0)),
        }
        let mut lines: Vec<String> = sized
            .iter()
            .map(|(name, is_dir, size)| {
                format!(
                    "{} {} {}",
                    if *is_dir { "[DIR]" } else { "[FILE]" },
                    format::pad_end(name, 30),
                    if *is_dir {
                        String::new()
                    } else {
                        format::pad_start(&format::size(*size), 10)
                    }
                )
            })
            .collect();
        self.bound_listing(&mut lines, more, &path);
        lines.push(String::new());
        lines.push(format!("Total: {files} files, {dirs} directories"));
        lines.push(format!("Combined size: {}", format::size(total)));
        Ok(lines.join("\n"))
    }

    async fn run_directory_tree(
        &self,
        path: String,
        exclude_patterns: Vec<String>,
    ) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let excludes: Vec<(glob::Glob, Option<[glob::Glob; 2]>)> = exclude_patterns
            .iter()
            .map(|pattern| {
                let wider = (!pattern.contains('*')).then(|| {
                    [
                        glob::Glob::new(&format!("**/{pattern}")),
                        glob::Glob::new(&format!("**/{pattern}/**")),
                    ]
                });
                (glob::Glob::new(pattern), wider)
            })
            .collect();
        let mut walk = Walk {
            fs: self,
            allowed: &allowed,
            visited: 0,
            root: &path,
        };
        let tree = walk.tree(&path, "", 0, &|relative: &str| {
            excludes.iter().any(|(glob, wider)| {
                glob.matches(relative)
                    || wider
                        .as_ref()
                        .is_some_and(|w| w.iter().any(|g| g.matches(relative)))
            })
        })?;
        let text = serde_json::to_string_pretty(&tree).map_err(|e| e.to_string())?;
        if u64::try_from(text.len()).unwrap_or(u64::MAX) > self.limits.max_bytes {
            return Err(format!(
                "directory_tree stopped: the tree of {path} is {} bytes of JSON, over the {} \
                 this server answers at once (FILESYSTEM_MAX_BYTES); give a deeper path or \
                 excludePatterns",
                text.len(),
                self.limits.max_bytes
            ));
        }
        Ok(text)
    }

    async fn run_move_file(&self, source: String, destination: String) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let from = validate(&source, &allowed, &RealFs)?;
        let to = validate(&destination, &allowed, &RealFs)?;
        writable(&from, &allowed)?;
        writable(&to, &allowed)?;
        match std::fs::symlink_metadata(&to) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(node_error(&error, "lstat", &to)),
            Ok(_) => return Err(format!("Destination already exists: {to}")),
        }
        std::fs::rename(&from, &to).map_err(|e| {
            let shown = node_error(&e, "rename", &from);
            format!("{shown} -> '{to}'")
        })?;
        Ok(format!("Successfully moved {source} to {destination}"))
    }

    async fn run_search_files(
        &self,
        path: String,
        pattern: String,
        exclude_patterns: Vec<String>,
    ) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let root = validate(&path, &allowed, &RealFs)?;
        let wanted = glob::Glob::new(&pattern);
        let excludes: Vec<glob::Glob> = exclude_patterns
            .iter()
            .map(|p| glob::Glob::new(p))
            .collect();
        let mut found: Vec<String> = Vec::new();
        let mut answer_bytes: u64 = 0;
        let mut visited = 0usize;
        // Depth first, each directory's entries in the order read, as the original.
        let mut stack: Vec<(String, std::vec::IntoIter<Entry>)> = Vec::new();
        let (first, _) = self.entries_up_to(&root, usize::MAX)?;
        stack.push((root.clone(), first.into_iter()));
        while let Some((dir, entries)) = stack.last_mut() {
            let Some((name, is_dir, is_link)) = entries.next() else {
                stack.pop();
                continue;
            };
            visited += 1;
            if visited > self.limits.max_entries {
                return Err(format!(
                    "search_files stopped after looking at {} entries under {path} \
                     (FILESYSTEM_MAX_ENTRIES), with {} matches so far; search a deeper path, or \
                     add excludePatterns",
                    self.limits.max_entries,
                    found.len()
                ));
            }
            let full = paths::join(dir, &name);
            // An entry of a checked directory is inside unless it is a link: only links need
            // the whole check (a walk deep down stays linear).
            if is_link && validate(&full, &allowed, &RealFs).is_err() {
                continue;
            }
            let relative = full[root.len()..].trim_start_matches('/').to_owned();
            if excludes.iter().any(|glob| glob.matches(&relative)) {
                continue;
            }
            if wanted.matches(&relative) {
                answer_bytes =
                    answer_bytes.saturating_add(u64::try_from(full.len() + 1).unwrap_or(u64::MAX));
                if answer_bytes > self.limits.max_bytes {
                    return Err(format!(
                        "search_files stopped: the matches under {path} are over {} bytes, what \
                         this server answers at once (FILESYSTEM_MAX_BYTES); give a narrower \
                         pattern",
                        self.limits.max_bytes
                    ));
                }
                found.push(full.clone());
            }
            if is_dir && stack.len() > self.limits.max_depth {
                return Err(format!(
                    "search_files stopped: {path} is deeper than {} levels \
                     (FILESYSTEM_MAX_DEPTH), with {} matches so far; search a deeper path",
                    self.limits.max_depth,
                    found.len()
                ));
            }
            if is_dir && let Ok((children, _)) = self.entries_up_to(&full, usize::MAX) {
                stack.push((full, children.into_iter()));
            }
        }
        if found.is_empty() {
            Ok("No matches found".into())
        } else {
            Ok(found.join("\n"))
        }
    }

    async fn run_get_file_info(&self, path: String) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(&path, &allowed, &RealFs)?;
        let meta = std::fs::metadata(&real).map_err(|e| node_error(&e, "stat", &real))?;
        let time = |t: std::io::Result<std::time::SystemTime>| {
            t.map_or_else(|_| "unknown".to_owned(), format::date)
        };
        let modified = meta.modified();
        let created = meta.created().or_else(|_| meta.modified());
        let permissions = match paths::containing(&real, &allowed) {
            Some(dir) if dir.writable && !meta.permissions().readonly() => "read-write (granted)",
            _ => "read-only (granted)",
        };
        Ok(format!(
            "size: {}\ncreated: {}\nmodified: {}\naccessed: {}\nisDirectory: {}\nisFile: {}\n\
             permissions: {permissions}",
            meta.len(),
            time(created),
            time(modified),
            time(meta.accessed()),
            meta.is_dir(),
            meta.is_file(),
        ))
    }

    async fn run_list_allowed_directories(&self) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let lines: Vec<String> = allowed
            .iter()
            .map(|dir| {
                if dir.writable {
                    dir.path.clone()
                } else {
                    format!("{} (read-only)", dir.path)
                }
            })
            .collect();
        Ok(format!("Allowed directories:\n{}", lines.join("\n")))
    }
}

impl Filesystem {
    /// A server with these grants and limits (natively, for tests: real host paths).
    #[must_use]
    pub fn new(grants: Vec<Allowed>, limits: Limits) -> Self {
        Self {
            grants: Arc::new(grants),
            limits,
            misconfigured: None,
        }
    }

    /// The allowed directories of this call: the grants, narrowed by the client's roots when
    /// the policy lets the plugin read them (`[client] roots = true`) and the client has some.
    /// A client whose roots cannot be read (its answer failed, was refused by the host's check,
    /// or did not come in time) gets no call: its roots may narrow what the call may touch.
    async fn allowed(&self) -> Result<Vec<Allowed>, Failure> {
        if let Some(problem) = &self.misconfigured {
            return Err(problem.clone());
        }
        match llm_worker_guest::roots("filesystem-roots").await {
            Ok(roots) => {
                let uris: Vec<String> = roots.into_iter().map(|root| root.uri).collect();
                paths::narrowed_by_roots(&self.grants, &uris, &RealFs)
            }
            // The host runs the call again with the answer.
            Err(deferred @ QuestionError::Deferred(_)) => Err(deferred.to_string()),
            // Roots not allowed by the policy, or not offered by the client: the grants.
            Err(QuestionError::Unsupported(_) | QuestionError::Denied(_)) => {
                Ok(self.grants.to_vec())
            }
            Err(failed @ QuestionError::Failed(_)) => Err(format!(
                "Could not read the client's roots, which narrow the directories this call may \
                 touch, so it was not run: {failed}"
            )),
        }
    }

    async fn read_text(
        &self,
        path: &str,
        head: Option<f64>,
        tail: Option<f64>,
    ) -> Result<String, Failure> {
        let allowed = self.allowed().await?;
        let real = validate(path, &allowed, &RealFs)?;
        // As the original: 0 (or no value) means "not given".
        let head = head.filter(|n| *n != 0.0 && !n.is_nan());
        let tail = tail.filter(|n| *n != 0.0 && !n.is_nan());
        match (head, tail) {
            (Some(_), Some(_)) => {
                Err("Cannot specify both head and tail parameters simultaneously".into())
            }
            (None, Some(lines)) => self.tail(&real, lines),
            (Some(lines), None) => self.head(&real, lines),
            (None, None) => self.read_whole(&real),
        }
    }

    /// Opens a regular file for reading: anything else (a FIFO, a socket, a device) is refused
    /// before it is opened, since opening or reading it could wait forever.
    fn open_regular(&self, real: &str) -> Result<(std::fs::File, u64), Failure> {
        let meta = std::fs::metadata(real).map_err(|e| node_error(&e, "open", real))?;
        if meta.is_dir() {
            return Err("EISDIR: illegal operation on a directory, read".into());
        }
        if !meta.is_file() {
            return Err(format!(
                "{real} is not a regular file (a FIFO, socket or device): reading it could wait \
                 forever, so this server reads regular files only"
            ));
        }
        let file = std::fs::File::open(real).map_err(|e| node_error(&e, "open", real))?;
        // Opened through the preopen: what was opened is checked again, not the path.
        let opened = file.metadata().map_err(|e| node_error(&e, "fstat", real))?;
        if !opened.is_file() {
            return Err(format!(
                "{real} is not a regular file; this server reads regular files only"
            ));
        }
        Ok((file, opened.len()))
    }

    /// The whole file's bytes, refused past the read limit.
    fn read_bounded(&self, real: &str) -> Result<Vec<u8>, Failure> {
        let (file, size) = self.open_regular(real)?;
        if size > self.limits.max_bytes {
            return Err(self.too_large(real, size));
        }
        let mut data = Vec::new();
        // A file that grew since it was looked at is still read only to the limit.
        file.take(self.limits.max_bytes.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| node_error(&e, "read", real))?;
        if u64::try_from(data.len()).unwrap_or(u64::MAX) > self.limits.max_bytes {
            return Err(self.too_large(real, u64::try_from(data.len()).unwrap_or(u64::MAX)));
        }
        Ok(data)
    }

    fn too_large(&self, real: &str, size: u64) -> Failure {
        format!(
            "{real} is {size} bytes, over the {} bytes this server reads at once \
             (FILESYSTEM_MAX_BYTES): read part of it with head or tail",
            self.limits.max_bytes
        )
    }

    /// The whole file as text (invalid UTF-8 replaced, as Node decodes it).
    fn read_whole(&self, real: &str) -> Result<String, Failure> {
        let data = self.read_bounded(real)?;
        Ok(String::from_utf8_lossy(&data).into_owned())
    }

    /// The first `lines` lines, as the original's `headFile`.
    fn head(&self, real: &str, lines: f64) -> Result<String, Failure> {
        let (mut file, _) = self.open_regular(real)?;
        let mut data: Vec<u8> = Vec::new();
        let mut chunk = [0u8; 1024];
        let mut newlines = 0usize;
        #[allow(clippy::cast_precision_loss)]
        while (newlines as f64) < lines {
            let read = file
                .read(&mut chunk)
                .map_err(|e| node_error(&e, "read", real))?;
            if read == 0 {
                break;
            }
            newlines += chunk[..read].iter().filter(|b| **b == b'\n').count();
            data.extend_from_slice(&chunk[..read]);
            if u64::try_from(data.len()).unwrap_or(u64::MAX) > self.limits.max_bytes {
                return Err(format!(
                    "{real}: its first lines are longer than the {} bytes this server reads at \
                     once (FILESYSTEM_MAX_BYTES); ask for fewer lines",
                    self.limits.max_bytes
                ));
            }
        }
        let text = String::from_utf8_lossy(&data);
        let mut pieces: Vec<&str> = text.split('\n').collect();
        let leftover = pieces.pop().unwrap_or("");
        let mut out: Vec<&str> = Vec::new();
        for piece in pieces {
            #[allow(clippy::cast_precision_loss)]
            if (out.len() as f64) >= lines {
                break;
            }
            out.push(piece);
        }
        #[allow(clippy::cast_precision_loss)]
        if !leftover.is_empty() && (out.len() as f64) < lines {
            out.push(leftover);
        }
        Ok(out.join("\n"))
    }

    /// The last `lines` lines, as the original's `tailFile`.
    fn tail(&self, real: &str, lines: f64) -> Result<String, Failure> {
        let (mut file, size) = self.open_regular(real)?;
        if size == 0 {
            return Ok(String::new());
        }
        let mut position = size;
        // Read backwards a chunk at a time, kept in the order read and joined once at the end
        // (putting each chunk before the text so far copied it all again: quadratic).
        let mut read_backwards: Vec<Vec<u8>> = Vec::new();
        let mut total = 0usize;
        let mut newlines = 0usize;
        let mut chunk = [0u8; 1024];
        #[allow(clippy::cast_precision_loss)]
        while position > 0 && (newlines as f64) < lines {
            let take = position.min(1024);
            position -= take;
            file.seek(SeekFrom::Start(position))
                .map_err(|e| node_error(&e, "read", real))?;
            let want = usize::try_from(take).unwrap_or(1024);
            file.read_exact(&mut chunk[..want])
                .map_err(|e| node_error(&e, "read", real))?;
            newlines += chunk[..want].iter().filter(|b| **b == b'\n').count();
            read_backwards.push(chunk[..want].to_vec());
            total += want;
            if u64::try_from(total).unwrap_or(u64::MAX) > self.limits.max_bytes {
                return Err(format!(
                    "{real}: its last lines are longer than the {} bytes this server reads at \
                     once (FILESYSTEM_MAX_BYTES); ask for fewer lines",
                    self.limits.max_bytes
                ));
            }
        }
        let chunks: Vec<u8> = read_backwards.into_iter().rev().flatten().collect();
        let text = edit::normalize_line_endings(&String::from_utf8_lossy(&chunks));
        let pieces: Vec<&str> = text.split('\n').collect();
        // `slice(-n)`: n made an integer towards zero; a negative n drops the first -n.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let from = if lines > 0.0 {
            pieces
                .len()
                .saturating_sub(lines.trunc().min(usize::MAX as f64) as usize)
        } else {
            ((-lines).trunc().min(usize::MAX as f64) as usize).min(pieces.len())
        };
        Ok(pieces[from..].join("\n"))
    }

    /// The entries of a directory (name, whether it is a directory, not following links), in
    /// the order read, up to the entry limit; and whether there were more.
    fn entries(&self, real: &str) -> Result<(Vec<Entry>, bool), Failure> {
        self.entries_up_to(real, self.limits.max_entries)
    }

    fn entries_up_to(&self, real: &str, limit: usize) -> Result<(Vec<Entry>, bool), Failure> {
        let reader = std::fs::read_dir(real).map_err(|e| node_error(&e, "scandir", real))?;
        let mut entries = Vec::new();
        for entry in reader {
            let entry = entry.map_err(|e| node_error(&e, "scandir", real))?;
            if entries.len() >= limit || entries.len() >= self.limits.max_entries.saturating_add(1)
            {
                entries.sort_by(|a: &Entry, b: &Entry| a.0.as_bytes().cmp(b.0.as_bytes()));
                return Ok((entries, true));
            }
            let kind = entry.file_type();
            let is_dir = kind.as_ref().is_ok_and(std::fs::FileType::is_dir);
            let is_link = kind.as_ref().is_ok_and(std::fs::FileType::is_symlink);
            entries.push((
                entry.file_name().to_string_lossy().into_owned(),
                is_dir,
                is_link,
            ));
        }
        // Node's `readdir` (libuv's `scandir`) answers in byte order of the names.
        entries.sort_by(|a: &Entry, b: &Entry| a.0.as_bytes().cmp(b.0.as_bytes()));
        Ok((entries, false))
    }

    /// Cuts a listing to the answer's byte limit (keeping room for the lines after it), and
    /// ends it with a `[STOPPED]` line saying which limit stopped it, if one did.
    fn bound_listing(&self, lines: &mut Vec<String>, more_entries: bool, path: &str) {
        // Room for the `[STOPPED]` line and a summary after the listing.
        let room =
            (1024 + u64::try_from(path.len()).unwrap_or(u64::MAX)).min(self.limits.max_bytes / 2);
        let budget = self.limits.max_bytes.saturating_sub(room);
        let mut used: u64 = 0;
        let fits = lines
            .iter()
            .take_while(|line| {
                used = used.saturating_add(u64::try_from(line.len() + 1).unwrap_or(u64::MAX));
                used <= budget
            })
            .count();
        if fits < lines.len() {
            lines.truncate(fits);
            lines.push(format!(
                "[STOPPED] the listing of {path} is longer than {} bytes, what this server \
                 answers at once (FILESYSTEM_MAX_BYTES); use search_files with a pattern to \
                 find the others",
                self.limits.max_bytes
            ));
        } else if more_entries {
            lines.push(format!(
                "[STOPPED] {path} has more than {} entries, the most this server lists at once \
                 (FILESYSTEM_MAX_ENTRIES); use search_files with a pattern to find the others",
                self.limits.max_entries
            ));
        }
    }
}

/// `directory_tree`'s walk: entries visited so far, against the entry limit.
struct Walk<'a> {
    fs: &'a Filesystem,
    allowed: &'a [Allowed],
    visited: usize,
    root: &'a str,
}

impl Walk<'_> {
    fn tree(
        &mut self,
        path: &str,
        relative: &str,
        depth: usize,
        excluded: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<TreeEntry>, Failure> {
        let limits = self.fs.limits;
        if depth > limits.max_depth {
            return Err(format!(
                "directory_tree stopped: {} is deeper than {} levels (FILESYSTEM_MAX_DEPTH); \
                 give a deeper path",
                self.root, limits.max_depth
            ));
        }
        // The path asked for is checked (links resolved) once; below it, an entry listed as a
        // directory is one (links are listed as links, and not followed): checking each
        // directory's whole path again cost as many look-ups as it is deep.
        let real = if depth == 0 {
            validate(path, self.allowed, &RealFs)?
        } else {
            path.to_owned()
        };
        let (entries, _) = self.fs.entries_up_to(&real, usize::MAX)?;
        let mut nodes = Vec::new();
        for (name, is_dir, _) in entries {
            self.visited += 1;
            if self.visited > limits.max_entries {
                return Err(format!(
                    "directory_tree stopped after {} entries under {} (FILESYSTEM_MAX_ENTRIES); \
                     give a deeper path or excludePatterns",
                    limits.max_entries, self.root
                ));
            }
            let child_relative = if relative.is_empty() {
                name.clone()
            } else {
                format!("{relative}/{name}")
            };
            if excluded(&child_relative) {
                continue;
            }
            let children = if is_dir {
                let child = format!("{}/{name}", real.trim_end_matches('/'));
                Some(self.tree(&child, &child_relative, depth + 1, excluded)?)
            } else {
                None
            };
            nodes.push(TreeEntry {
                name,
                kind: if is_dir { "directory" } else { "file" },
                children,
            });
        }
        Ok(nodes)
    }
}

/// A tool's answer: its text, or its error told as content (MCP's `isError`) with the
/// original's text as it is.
fn answer(result: Result<String, Failure>) -> ToolOutput {
    answer_with(result.map(ToolOutput::text))
}

/// A tool's answer: its blocks, or its error told as content.
fn answer_with(result: Result<ToolOutput, Failure>) -> ToolOutput {
    result.unwrap_or_else(|error| ToolOutput::error(vec![Content::Text(error)]))
}

/// Refuses to change `real` when its allowed directory is granted read-only.
fn writable(real: &str, allowed: &[Allowed]) -> Result<(), Failure> {
    match paths::containing(real, allowed) {
        Some(dir) if dir.writable => Ok(()),
        Some(dir) => Err(format!(
            "Access denied - {} is granted read-only by this plugin's policy, so {real} cannot \
             be changed; the operator can grant it with mode = \"rw\" in filesystem.policy.toml",
            dir.path
        )),
        None => Err(format!(
            "Access denied - path outside allowed directories: {real}"
        )),
    }
}

/// Replaces the file `real` by one holding `data`: written to a new temporary file beside it,
/// then renamed over it, so that a link put in its place is replaced, not written through.
fn replace(real: &str, data: &[u8]) -> Result<(), Failure> {
    use std::hash::{BuildHasher, Hasher};
    let random = |n: u64| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(n);
        hasher.finish()
    };
    let temporary = format!("{real}.{:016x}{:016x}.tmp", random(1), random(2));
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut file| file.write_all(data))
        .map_err(|e| node_error(&e, "open", &temporary))
        .and_then(|()| {
            std::fs::rename(&temporary, real).map_err(|e| {
                let shown = node_error(&e, "rename", &temporary);
                format!("{shown} -> '{real}'")
            })
        });
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Names in the order `localeCompare` puts them, near enough: case and accents second.
fn locale_order(a: &str, b: &str) -> std::cmp::Ordering {
    let key = |s: &str| s.to_lowercase();
    key(a).cmp(&key(b)).then_with(|| b.cmp(a))
}

llm_worker_guest::export_plugin!(Filesystem);

#[cfg(test)]
mod tests;
