//! The audit log: one JSON line per tool call, resource read, prompt rendering, completion and
//! question a plugin asks — when, who, in which session, which plugin (and its SHA-256), what,
//! the input's SHA-256, how it ended and how long it took. Inputs are written only when the
//! operator asks; secrets never (they live in the host and are not part of any input).

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use super::McpError;
use crate::question::{
    Asker, ElicitationAnswer, QuestionError, QuestionHandler, Root, SamplingAnswer, SamplingRequest,
};

/// Where audit records go, one JSON object per line ([`McpOptions::audit`]).
///
/// [`McpOptions::audit`]: super::McpOptions::audit
#[derive(Clone)]
pub struct AuditLog {
    writer: Arc<Writer>,
    inputs: bool,
}

/// Writes records on a thread of its own, in order: a write that hangs (a stuck network disk,
/// a pipe no one reads) holds that thread, not the requests or the runtime.
struct Writer {
    /// Records waiting to be written, with where to say each was.
    queue: std::sync::mpsc::SyncSender<Queued>,
    /// Records dropped because the queue was full, not yet said in the log.
    dropped: Arc<std::sync::atomic::AtomicU64>,
    /// When a drop was last logged.
    said: Mutex<Option<std::time::Instant>>,
    /// A record was not written within [`RECORD_WAIT`], and the writer has written nothing
    /// since: later requests do not wait for theirs.
    stalled: Arc<std::sync::atomic::AtomicBool>,
}

/// A record's line, and where the writer says it was written.
struct Queued {
    line: Vec<u8>,
    written: std::sync::mpsc::SyncSender<()>,
}

/// Records queued at most; past it, a record is dropped (and the drop counted in the log).
const QUEUED_RECORDS: usize = 1024;

/// How long a request waits for its record to be written before it goes on (its record stays
/// queued).
const RECORD_WAIT: Duration = Duration::from_secs(1);

/// The writer's loop: writes each record whole, and after a write that failed part-way (a
/// full disk) starts the next on a line of its own; says how many records were dropped when
/// it can write again.
fn write_records(
    mut out: Box<dyn Write + Send>,
    queue: std::sync::mpsc::Receiver<Queued>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    stalled: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut broken = false;
    let mut write = |mut line: Vec<u8>| {
        if broken {
            // Joined to the cut line, a reader of lines would lose both.
            line.insert(0, b'\n');
        }
        let written = out.write_all(&line).and_then(|()| out.flush());
        broken = written.is_err();
        if let Err(error) = written {
            tracing::error!("cannot write the audit log: {error}");
        }
    };
    for queued in queue {
        write(queued.line);
        stalled.store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = queued.written.send(());
        let lost = dropped.swap(0, std::sync::atomic::Ordering::Relaxed);
        if lost > 0 {
            let note = serde_json::json!({
                "time": chrono::DateTime::<chrono::Utc>::from(SystemTime::now())
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "event": "audit",
                "outcome": "dropped",
                "records": lost,
            });
            write(format!("{note}\n").into_bytes());
        }
    }
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("inputs", &self.inputs)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Records appended to the file `path`, created readable by this user alone (the records
    /// name who called what). An existing file must be a regular file of this user's that no
    /// one else may read or write, not a link, in a directory no other user could replace
    /// it in (as a lock file's): otherwise this is an error saying what to fix, never a log
    /// written where others read it, through a link another user planted (creating a file of
    /// theirs choosing: a shell's start-up file, which the records' text would then run in),
    /// or into a FIFO that blocks the server.
    pub fn to_file(path: &Path) -> Result<Self, McpError> {
        let error = |reason: String| McpError::Audit {
            path: path.to_owned(),
            reason,
        };
        #[cfg(unix)]
        let opened = {
            let dir = path
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let real = dir.canonicalize().map_err(|e| {
                error(format!(
                    "its directory {} cannot be resolved: {e}",
                    dir.display()
                ))
            })?;
            // As given (another user's link on the way could lead elsewhere: a plugin's
            // granted directory, where it would read who called what), then where it leads.
            let given = std::path::absolute(dir).map_err(|e| {
                error(format!(
                    "its directory {} cannot be resolved: {e}",
                    dir.display()
                ))
            })?;
            crate::file::no_one_else_can_replace(&given, "its directory").map_err(error)?;
            crate::file::no_one_else_can_replace(&real, "its directory").map_err(error)?;
            // Opened in the directory checked, not through the path given again (a link on
            // the way could have been changed since).
            let name = path
                .file_name()
                .ok_or_else(|| error("it names no file".into()))?;
            real.join(name)
        };
        #[cfg(not(unix))]
        let opened = path.to_owned();
        let mut options = std::fs::OpenOptions::new();
        options.append(true).create(true);
        #[cfg(unix)]
        {
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            std::os::unix::fs::OpenOptionsExt::custom_flags(
                &mut options,
                libc::O_NONBLOCK | libc::O_NOFOLLOW,
            );
        }
        let file = options.open(&opened).map_err(|e| {
            #[cfg(unix)]
            if e.raw_os_error() == Some(libc::ELOOP) {
                return error("it is a symbolic link; give the path of the file itself".into());
            }
            error(e.to_string())
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let metadata = file.metadata().map_err(|e| error(e.to_string()))?;
            if !metadata.is_file() {
                return Err(error("it is not a regular file".into()));
            }
            let us = rustix::process::geteuid().as_raw();
            if metadata.uid() != us {
                return Err(error(format!(
                    "it belongs to user {}, not to this user ({us}); use a file of your own",
                    metadata.uid()
                )));
            }
            if metadata.mode() & 0o077 != 0 {
                return Err(error(format!(
                    "other users may read or write it (mode {:o}); run `chmod 600` on it",
                    metadata.mode() & 0o7777
                )));
            }
        }
        Ok(Self::to_writer(file))
    }

    /// Records written to standard error.
    pub fn to_stderr() -> Self {
        Self::to_writer(std::io::stderr())
    }

    /// Records written to `out` (each record one `write` of a whole line).
    pub fn to_writer(out: impl Write + Send + 'static) -> Self {
        let (queue, queued) = std::sync::mpsc::sync_channel(QUEUED_RECORDS);
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let out: Box<dyn Write + Send> = Box::new(out);
        let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (counted, told) = (Arc::clone(&dropped), Arc::clone(&stalled));
        // The thread ends when the last clone of the log is dropped (and the queue is empty).
        if let Err(error) = std::thread::Builder::new()
            .name("llm-worker-audit".into())
            .spawn(move || write_records(out, queued, counted, told))
        {
            tracing::error!("cannot start the audit log's writer: {error}; no record is written");
        }
        Self {
            writer: Arc::new(Writer {
                queue,
                dropped,
                said: Mutex::new(None),
                stalled,
            }),
            inputs: false,
        }
    }

    /// Writes each request's input too (its arguments; off by default: inputs may hold what
    /// people typed).
    #[must_use]
    pub fn with_inputs(mut self, inputs: bool) -> Self {
        self.inputs = inputs;
        self
    }

    /// What a record will say of `input` (a request's arguments): its digest, and the input
    /// itself only if this log writes inputs. Taken when the request begins, so that what
    /// outlives the request until its record is written (a task, for its life) is a digest,
    /// not the arguments.
    ///
    /// An input larger than [`MAX_AUDITED_INPUT`] is not written, its size is (`input_bytes`):
    /// any caller, one the access policy grants nothing included, could otherwise have each
    /// refused request write megabytes.
    pub(crate) fn input(&self, input: &impl serde::Serialize) -> AuditInput {
        let text = serde_json::to_string(input).unwrap_or_default();
        let kept = self.inputs && text.len() <= MAX_AUDITED_INPUT;
        AuditInput {
            sha256: crate::digest::sha256_hex(text.as_bytes()),
            value: kept.then(|| serde_json::to_value(input).unwrap_or_default()),
            bytes: (self.inputs && !kept).then_some(text.len()),
        }
    }

    /// Writes `record`, filled in with `input`; a failed write is logged, never fatal to the
    /// request.
    pub(crate) fn write(&self, mut record: Record, input: AuditInput) {
        record.input_sha256 = Some(input.sha256);
        record.input = input.value;
        record.input_bytes = input.bytes;
        self.write_record(&record);
    }

    /// Writes the refusal of an authenticated request before MCP saw it (`reason`: what the
    /// `llm_worker_http_refusals_total` counter calls it), by `identity`, naming the session
    /// it named (cut: the client's text).
    #[cfg(feature = "mcp-http")]
    pub(crate) fn refused(
        &self,
        reason: &'static str,
        identity: Option<&crate::identity::Identity>,
        session: Option<&str>,
    ) {
        let mut record = Record::new("http", reason);
        if let Some(identity) = identity {
            record = record.by(identity);
        }
        record.session = session.map(cut);
        self.write_record(&record.ended("refused", Duration::ZERO));
    }

    fn write_record(&self, record: &Record) {
        let Ok(text) = serde_json::to_string(record) else {
            return;
        };
        let mut line = escape_hidden(&text).into_bytes();
        line.push(b'\n');
        let (written, wait) = std::sync::mpsc::sync_channel(1);
        match self.writer.queue.try_send(Queued { line, written }) {
            Ok(())
                if self
                    .writer
                    .stalled
                    .load(std::sync::atomic::Ordering::Relaxed) => {}
            Ok(()) => {
                // Written before the request's answer as a rule; a write that hangs holds the
                // request a second at most (the record stays queued), and later requests not
                // at all until the writer moves again.
                let stalled = Arc::clone(&self.writer.stalled);
                let wait = move || {
                    if wait.recv_timeout(RECORD_WAIT).is_err() {
                        stalled.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                };
                let multi_threaded = tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
                    runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                });
                if multi_threaded {
                    tokio::task::block_in_place(wait);
                } else {
                    wait();
                }
            }
            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                let dropped = self
                    .writer
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                let mut said = self.writer.said.lock().unwrap_or_else(|p| p.into_inner());
                if said.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    *said = Some(std::time::Instant::now());
                    tracing::error!(
                        "the audit log is not being written (a write has not returned, with \
                         {QUEUED_RECORDS} records waiting): {dropped} records dropped so far; \
                         the log says how many once it is written again"
                    );
                }
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
                tracing::error!("the audit log's writer has stopped: the record is not written");
            }
        }
    }
}

/// `json` with every character that acts on a terminal or hides text (DEL, C1 controls such as
/// U+009B, which starts an escape sequence, bidirectional overrides, tag characters) written
/// as a `\u` escape: serde_json escapes only those below U+0020, and records go to a terminal
/// with `--audit-log -`. The JSON means the same; such characters occur only inside strings.
fn escape_hidden(json: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_control() || llm_worker_rules::tool::is_hidden_char(c) {
            let mut units = [0; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Most bytes of a record's target (a name or URI the client sent) or identity written.
const MAX_TARGET_BYTES: usize = 256;

/// `text`, cut to [`MAX_TARGET_BYTES`] (on a character's boundary), marked with `…` and the
/// start of the whole text's SHA-256: two long names that begin alike stay apart.
fn cut(text: &str) -> String {
    if text.len() <= MAX_TARGET_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_TARGET_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let digest = crate::digest::sha256_hex(text.as_bytes());
    format!("{}… (sha256 {})", &text[..end], &digest[..16])
}

/// One audit record.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    /// When it ended (RFC 3339, UTC).
    pub(crate) time: String,
    /// `tools/call`, `resources/read`, `prompts/get`, `completion/complete`, `question`,
    /// `task` (the end of a task a tool call became), or `http` (an authenticated request
    /// refused before MCP saw it: its target says why).
    pub(crate) event: &'static str,
    /// Who asked: the identity's name (`null` without authentication).
    pub(crate) identity: Option<String>,
    /// The access token's issuer (`null` for a static token).
    pub(crate) issuer: Option<String>,
    /// Which claim of the access token names the identity: `sub`, or `client_id` for a token
    /// issued to a client without a subject (`null` for a static token). A client may be
    /// named as a user is; it is not that user, and its records say so.
    pub(crate) identity_claim: Option<&'static str>,
    /// The MCP session (its `Mcp-Session-Id`; `null` for a stateless request or stdio).
    pub(crate) session: Option<String>,
    /// The plugin that served it, and its SHA-256 (`null` for an embedder's native tools).
    pub(crate) plugin: Option<String>,
    pub(crate) plugin_sha256: Option<String>,
    /// The tool, resource URI, prompt, or what the question asked for.
    pub(crate) target: String,
    /// The task a tool call became (`outcome: "task"`), and that a `task` record ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<String>,
    pub(crate) input_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input: Option<Value>,
    /// The size of an input too large to write ([`MAX_AUDITED_INPUT`]), in its place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) input_bytes: Option<usize>,
    /// `ok`, `tool_error`, `error`, `skipped` (by a hook), `refused`, `denied` (a tool outside
    /// the identity's grants), `cancelled`, or a question's `accepted`, `declined`,
    /// `unanswered`.
    pub(crate) outcome: &'static str,
    pub(crate) duration_ms: f64,
    /// The CPU time its plugin code took (the thread CPU clock around each run of it; 0 where
    /// the system has no such clock).
    pub(crate) cpu_ms: f64,
    /// What metrics and span names call the target: one the session offers (a resource read
    /// through a template by the template); `None` for one the client made up.
    #[serde(skip)]
    pub(crate) known_target: Option<String>,
}

impl Record {
    /// A record of `event` for `target` (cut to 256 bytes: it comes from the client).
    pub(crate) fn new(event: &'static str, target: &str) -> Self {
        let target = cut(target);
        Self {
            time: String::new(),
            event,
            identity: None,
            issuer: None,
            identity_claim: None,
            session: None,
            plugin: None,
            plugin_sha256: None,
            target,
            task: None,
            input_sha256: None,
            input: None,
            input_bytes: None,
            outcome: "ok",
            duration_ms: 0.0,
            cpu_ms: 0.0,
            known_target: None,
        }
    }

    /// Who asked, in which session.
    pub(crate) fn asked_by(mut self, extensions: &rmcp::model::Extensions) -> Self {
        if let Some(identity) = super::session::identity(extensions) {
            self = self.by(&identity);
        }
        self.session = session_id(extensions);
        self
    }

    /// Asked by `identity` (its name cut to 256 bytes: an issuer's claim, any length).
    fn by(mut self, identity: &crate::identity::Identity) -> Self {
        self.identity = Some(cut(&identity.name));
        self.issuer.clone_from(&identity.issuer);
        self.identity_claim = identity.issuer.is_some().then(|| identity.named_by());
        self
    }

    /// The plugin whose tool was withheld from the identity (`outcome: "denied"`).
    #[cfg(feature = "mcp-http")]
    pub(crate) fn denied_by(&mut self, plugin: &crate::LoadedPlugin) {
        self.plugin = Some(plugin.name().to_owned());
        self.plugin_sha256 = Some(crate::digest::hex(plugin.sha256()));
    }

    /// Which plugin served it.
    pub(crate) fn plugin(mut self, plugin: Option<&crate::PluginSession>) -> Self {
        if let Some(plugin) = plugin {
            self.plugin = Some(plugin.plugin_name().to_owned());
            self.plugin_sha256 = Some(crate::digest::hex(plugin.plugin_sha256()));
        }
        self
    }

    /// How it ended, `took` after it began.
    pub(crate) fn ended(mut self, outcome: &'static str, took: Duration) -> Self {
        self.outcome = outcome;
        self.duration_ms = took.as_secs_f64() * 1000.0;
        self.time = chrono::DateTime::<chrono::Utc>::from(SystemTime::now())
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        self
    }
}

/// What a record says of a request's input: [`AuditLog::input`].
#[derive(Clone)]
pub(crate) struct AuditInput {
    sha256: String,
    value: Option<Value>,
    bytes: Option<usize>,
}

/// The largest input (its JSON text) a record holds with `--audit-inputs`; a larger one is
/// recorded by its digest and size.
pub(crate) const MAX_AUDITED_INPUT: usize = 64 << 10;

/// The `Mcp-Session-Id` of an HTTP request.
fn session_id(extensions: &rmcp::model::Extensions) -> Option<String> {
    #[cfg(feature = "mcp-http")]
    if let Some(parts) = extensions.get::<http::request::Parts>() {
        return parts
            .headers
            .get("mcp-session-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
    }
    let _ = extensions;
    None
}

/// A question handler that records each question asked through it.
pub(crate) struct AuditedQuestions {
    pub(crate) inner: Arc<dyn QuestionHandler>,
    pub(crate) log: AuditLog,
    /// The request's record, whose who and where each question's record takes.
    pub(crate) base: Record,
}

impl AuditedQuestions {
    /// Records a question and its outcome: `judged` says what became of an answer
    /// (`accepted` only for one the host's checks, the ones the plugin's call makes before it
    /// sees the answer, let through; `refused` for one they do not).
    fn record<T>(
        &self,
        asker: &Asker,
        what: &str,
        input: Value,
        started: std::time::Instant,
        result: &Result<T, QuestionError>,
        judged: impl Fn(&T) -> &'static str,
    ) {
        let outcome = match result {
            Ok(answer) => judged(answer),
            Err(_) => "unanswered",
        };
        let mut record = self.base.clone();
        record.event = "question";
        record.target = format!(
            "{what} by tool '{}' of plugin '{}'",
            asker.tool, asker.plugin
        );
        let input = self.log.input(&input);
        self.log
            .write(record.ended(outcome, started.elapsed()), input);
    }
}

/// `accepted` for an answer the host's check lets through, `refused` otherwise.
fn checked(check: Result<(), QuestionError>) -> &'static str {
    match check {
        Ok(()) => "accepted",
        Err(_) => "refused",
    }
}

#[async_trait]
impl QuestionHandler for AuditedQuestions {
    async fn elicit(
        &self,
        asker: &Asker,
        message: &str,
        schema: &Value,
    ) -> Result<ElicitationAnswer, QuestionError> {
        let started = std::time::Instant::now();
        let answer = self.inner.elicit(asker, message, schema).await;
        self.record(
            asker,
            "elicitation",
            serde_json::json!({"message": message, "schema": schema}),
            started,
            &answer,
            // The form is read again only for an answer to judge (the call's own check read
            // it before asking).
            |answer| match answer {
                ElicitationAnswer::Accept(_) => match crate::question::form::Form::parse(schema) {
                    Ok(form) => checked(crate::question::answer::check_elicitation(
                        answer, &form, asker,
                    )),
                    Err(_) => "refused",
                },
                _ => "declined",
            },
        );
        answer
    }

    async fn sample(
        &self,
        asker: &Asker,
        request: &SamplingRequest,
    ) -> Result<SamplingAnswer, QuestionError> {
        let started = std::time::Instant::now();
        let answer = self.inner.sample(asker, request).await;
        let input = Value::String(format!("{request:?}"));
        self.record(asker, "sampling", input, started, &answer, |answer| {
            checked(crate::question::answer::check_sampling(answer, asker))
        });
        answer
    }

    async fn roots(&self, asker: &Asker) -> Result<Vec<Root>, QuestionError> {
        let started = std::time::Instant::now();
        let answer = self.inner.roots(asker).await;
        self.record(asker, "roots", Value::Null, started, &answer, |roots| {
            checked(crate::question::answer::check_roots(roots, asker))
        });
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose bytes the test reads back.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<u8>>>);

    impl Write for Kept {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A client's token (`client_id`, no `sub`) and a user's token (`sub`) of one name and
    /// issuer are two identities (their quotas and sessions are apart): their records were
    /// the same, byte for byte.
    #[test]
    fn a_client_and_a_user_of_one_name_leave_different_records() {
        let identity = |claims: Value| {
            let Value::Object(claims) = claims else {
                unreachable!("an object")
            };
            crate::identity::Identity::from_claims("https://idp.example", claims, true)
                .expect("an identity")
        };
        let user =
            Record::new("tools/call", "t").by(&identity(serde_json::json!({"sub": "alice"})));
        let client =
            Record::new("tools/call", "t").by(&identity(serde_json::json!({"client_id": "alice"})));
        assert_eq!(
            (user.identity_claim, client.identity_claim),
            (Some("sub"), Some("client_id"))
        );
        assert_eq!(user.identity, client.identity);
        let token = Record::new("tools/call", "t").by(&crate::identity::Identity::token("alice"));
        assert_eq!(token.identity_claim, None);
        // A name of any length from an issuer is written cut, as a target is.
        let name = |last: char| format!("{}{last}", "a".repeat(5000));
        let (one, other) = (
            Record::new("tools/call", "t").by(&identity(serde_json::json!({"sub": name('1')}))),
            Record::new("tools/call", "t").by(&identity(serde_json::json!({"sub": name('2')}))),
        );
        let (one, other) = (
            one.identity.unwrap_or_default(),
            other.identity.unwrap_or_default(),
        );
        assert!(one.len() < 300 && one.contains("… (sha256 "), "{one}");
        // Two long names alike in their first 256 bytes stay apart.
        assert_ne!(one, other);
    }

    #[test]
    fn characters_that_act_on_a_terminal_are_written_escaped() {
        let kept = Kept::default();
        let log = AuditLog::to_writer(kept.clone());
        // A client's tool name with a C1 CSI (it turns text red), DEL, a right-to-left
        // override and a tag character.
        let target = "x\u{9b}31m\u{7f}\u{202e}gpj.exe\u{e0041}";
        log.write(Record::new("tools/call", target), log.input(&Value::Null));
        let line = String::from_utf8(kept.0.lock().expect("lock").clone()).expect("UTF-8");
        assert!(
            line.chars()
                .all(|c| c == '\n'
                    || (!c.is_control() && !llm_worker_rules::tool::is_hidden_char(c))),
            "{line:?}"
        );
        assert!(
            line.contains(r"\u009b") && line.contains(r"\udb40\udc41"),
            "{line}"
        );
        let record: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(record["target"], target);
    }

    /// A disk that fills part-way through a record (a write that takes half the line, then
    /// fails): the next record was appended to the cut line, and a reader of lines lost both.
    #[test]
    fn a_record_after_a_failed_write_starts_a_line_of_its_own() {
        #[derive(Clone, Default)]
        struct FillsOnce(Kept, Arc<std::sync::atomic::AtomicBool>);
        impl Write for FillsOnce {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                if self.1.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return self.0.write(bytes);
                }
                self.0.write(&bytes[..bytes.len() / 2])?;
                Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
            }

            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = FillsOnce::default();
        let log = AuditLog::to_writer(out.clone());
        log.write(Record::new("tools/call", "cut"), log.input(&Value::Null));
        log.write(Record::new("tools/call", "whole"), log.input(&Value::Null));
        log.write(Record::new("tools/call", "next"), log.input(&Value::Null));
        let text = String::from_utf8(out.0.0.lock().expect("lock").clone()).expect("UTF-8");
        let whole: Vec<String> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|record| record["target"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(whole, ["whole", "next"], "{text}");
    }

    /// A write that never returns (a stuck disk): requests do not wait on it past a second,
    /// the queue holds what it can, the rest is dropped, and the log says how many once it is
    /// written again.
    #[test]
    fn records_past_a_hanging_write_are_queued_then_dropped_and_counted() {
        #[derive(Clone)]
        struct Gated {
            open: Arc<(Mutex<bool>, std::sync::Condvar)>,
            lines: std::sync::mpsc::SyncSender<Vec<u8>>,
        }
        impl Write for Gated {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                let mut open = self.open.0.lock().expect("lock");
                while !*open {
                    open = self.open.1.wait(open).expect("wait");
                }
                let _ = self.lines.send(bytes.to_vec());
                Ok(bytes.len())
            }

            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (lines, written) = std::sync::mpsc::sync_channel(4096);
        let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let log = AuditLog::to_writer(Gated {
            open: Arc::clone(&gate),
            lines,
        });
        let started = std::time::Instant::now();
        let records = QUEUED_RECORDS + 100;
        for n in 0..records {
            log.write(
                Record::new("tools/call", &n.to_string()),
                log.input(&Value::Null),
            );
        }
        // One wait of a second, not one a record (which would be some twenty minutes).
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
        *gate.0.lock().expect("lock") = true;
        gate.1.notify_all();
        drop(log);
        let text: Vec<Value> = written
            .iter()
            .map(|line| serde_json::from_slice(&line).expect("a JSON line"))
            .collect();
        // The one being written when it hung and the queue's, with the count of the others.
        let kept = text.iter().filter(|r| r["event"] == "tools/call").count();
        assert_eq!(kept, QUEUED_RECORDS + 1);
        let notes: Vec<&Value> = text.iter().filter(|r| r["event"] == "audit").collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0]["outcome"], "dropped");
        assert_eq!(notes[0]["records"], (records - kept) as u64);
    }
}
