//! Tool calls as tasks: started now, answered later. A task runs its call in the background
//! (in the session's instance, as any call), and its owner polls it, waits for it or cancels
//! it; its outcome is kept until its time to live ends. The same store serves
//! [`ToolServerHandle::start_task`](crate::ToolServerHandle::start_task) and MCP's tasks
//! extension.
//!
//! A task outlives the request that started it, not its session (the session's instance runs
//! it) and not its own time limit: a plugin call running as a task gets the policy's
//! `task_timeout_ms` instead of `timeout_ms`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio::sync::{oneshot, watch};

use crate::json_weight::{block, json_bytes};
use crate::tool::{ToolError, ToolOutput};

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskStatus {
    /// Its call is running.
    Working,
    /// Its call waits for its owner to answer the questions in
    /// [`TaskSnapshot::input_requests`].
    InputRequired,
    /// Its call returned: a result, possibly a tool's failure told with content
    /// ([`ToolOutput::is_error`]) or a tool error.
    Completed,
    /// Its call could not run to an answer: the plugin trapped, ran out of time or failed
    /// inside ([`ToolError::Internal`]).
    Failed,
    /// Its owner cancelled it before it ended.
    Cancelled,
}

impl TaskStatus {
    /// Whether it will not change any more.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Working | Self::InputRequired)
    }
}

/// A task as its owner sees it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskSnapshot {
    /// Its id: the store's prefix and 128 random bits, in hex.
    pub id: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// A word on its state, for people.
    pub status_message: Option<String>,
    /// When it was started.
    pub created_at: SystemTime,
    /// When its status last changed.
    pub last_updated_at: SystemTime,
    /// How long it is kept after it was started.
    pub ttl: Duration,
    /// How often its owner should ask.
    pub poll_interval: Duration,
    /// What its call gave, once it ended ([`TaskStatus::Completed`] or
    /// [`TaskStatus::Failed`]): shared by every look at the task, not copied.
    pub outcome: Option<Arc<Result<ToolOutput, ToolError>>>,
    /// The questions its call waits on, by key: what the front end put to the owner (MCP's
    /// `inputRequests`).
    pub input_requests: BTreeMap<String, Value>,
}

/// The longest task id an error quotes whole (ids the store makes are far shorter).
const MAX_QUOTED_ID_BYTES: usize = 256;

/// [`TaskError::NotFound`] for a client's id, quoted cut: a client's id of megabytes is not
/// copied into the answer.
pub(crate) fn not_found(id: &str) -> TaskError {
    if id.len() <= MAX_QUOTED_ID_BYTES {
        return TaskError::NotFound(id.to_owned());
    }
    let cut = id.floor_char_boundary(MAX_QUOTED_ID_BYTES);
    TaskError::NotFound(format!("{}… ({} bytes)", &id[..cut], id.len()))
}

/// Why a task request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// No task of this id belongs to the caller (it never existed, it expired, or it is
    /// another's).
    #[error("no task '{0}' (unknown, expired, or not yours)")]
    NotFound(String),
    /// The caller has as many tasks as it may keep.
    #[error("{0} tasks are kept for you already, the most allowed; wait for them to expire")]
    TooMany(usize),
    /// The store keeps as many tasks as it may, all owners together.
    #[error(
        "this server keeps {0} tasks already, the most it allows for all its clients; try again \
         later"
    )]
    Full(usize),
    /// Tasks run on a Tokio runtime, and there is none here.
    #[error("tasks need a Tokio runtime to run on")]
    NoRuntime,
    /// The system gave no random bytes for the task's id.
    #[error("the system gave no random bytes for a task id")]
    NoRandomness,
    /// The tool does not run as a task: it declares its task support `forbidden`.
    #[error("tool '{0}' does not run as a task (it declares task support \"forbidden\"); call it")]
    NotATask(String),
    /// A question would take more memory than the budgets of kept results leave (the
    /// questions a task waits on are held as its results are, and drawn from the same budgets).
    #[error("{0}")]
    NoRoom(String),
    /// An answer for a question the task is not waiting on.
    #[error("task '{task}' is not waiting for an answer to '{key}'")]
    NotAsked {
        /// The task.
        task: String,
        /// The key answered.
        key: String,
    },
}

/// How a [`TaskStore`] keeps tasks.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskOptions {
    /// How long a task is kept after it was started, and its outcome after it ended. Default
    /// one hour.
    pub ttl: Duration,
    /// How many tasks one owner may keep (running or ended, until they expire). Default 64.
    pub max_tasks_per_owner: usize,
    /// How many tasks the store keeps, all owners together. Default 4,096.
    pub max_tasks: usize,
    /// How often owners are asked to poll. Default one second.
    pub poll_interval: Duration,
    /// What every id begins with: replicas behind one balancer give each its own, and the
    /// balancer routes `tasks/*` requests on it. Default `"task-"`.
    pub prefix: String,
    /// How much memory the outcomes of one owner's tasks may take together (their texts and
    /// bytes, and what a structured result allocates as a `serde_json::Value`, at least: 1 MiB
    /// of JSON made of small objects takes some 100 MiB), and the questions they wait on,
    /// weighed the same way. An outcome over what is left is not kept: the task fails, saying
    /// why; a question over it is not asked ([`TaskError::NoRoom`]). Default 64 MiB.
    pub max_kept_bytes_per_owner: usize,
    /// The same for the outcomes and questions of all owners together. Default 512 MiB.
    pub max_kept_bytes: usize,
    /// How many tasks the owners of one account may keep together (an account: one caller,
    /// whose sessions are owners of their own, [`TaskStore::start_for`]; a task started with
    /// [`TaskStore::start`] has its owner's limits only). Default 256.
    pub max_tasks_per_account: usize,
    /// How much memory the outcomes and questions of one account's tasks may take together: so that one
    /// caller opening many sessions cannot take the whole store's budget from the others.
    /// Default 128 MiB.
    pub max_kept_bytes_per_account: usize,
}

impl TaskOptions {
    /// Sets how long a task is kept after it was started.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets how many tasks one owner may keep.
    #[must_use]
    pub fn max_tasks_per_owner(mut self, tasks: usize) -> Self {
        self.max_tasks_per_owner = tasks;
        self
    }

    /// Sets how many tasks the store keeps, all owners together.
    #[must_use]
    pub fn max_tasks(mut self, tasks: usize) -> Self {
        self.max_tasks = tasks;
        self
    }

    /// Sets how often owners are asked to poll.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets what every id begins with.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets how much memory the outcomes of one owner's tasks may take together.
    #[must_use]
    pub fn max_kept_bytes_per_owner(mut self, bytes: usize) -> Self {
        self.max_kept_bytes_per_owner = bytes;
        self
    }

    /// Sets how much memory the outcomes of all tasks may take together.
    #[must_use]
    pub fn max_kept_bytes(mut self, bytes: usize) -> Self {
        self.max_kept_bytes = bytes;
        self
    }

    /// Sets how many tasks the owners of one account may keep together.
    #[must_use]
    pub fn max_tasks_per_account(mut self, tasks: usize) -> Self {
        self.max_tasks_per_account = tasks;
        self
    }

    /// Sets how much memory the outcomes of one account's tasks may take together.
    #[must_use]
    pub fn max_kept_bytes_per_account(mut self, bytes: usize) -> Self {
        self.max_kept_bytes_per_account = bytes;
        self
    }
}

impl Default for TaskOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(3600),
            max_tasks_per_owner: 64,
            max_tasks: 4096,
            poll_interval: Duration::from_secs(1),
            prefix: "task-".to_owned(),
            max_kept_bytes_per_owner: 64 << 20,
            max_kept_bytes: 512 << 20,
            max_tasks_per_account: 256,
            max_kept_bytes_per_account: 128 << 20,
        }
    }
}

/// Tasks and their outcomes, by owner. Cheap to clone: clones share the tasks.
#[derive(Clone, Default)]
pub struct TaskStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskStore")
            .field("options", &self.inner.options)
            .field("tasks", &self.lock().len())
            .finish()
    }
}

#[derive(Default)]
struct Inner {
    options: TaskOptions,
    tasks: Mutex<Tasks>,
}

/// The tasks by id, and when the first of them expires, at the earliest (`None`: not known).
/// Every expiry is set to the store's time to live from a moment no earlier than any set
/// before, so a task added later never expires before the earliest known: the tasks are
/// scanned for expired ones only once that moment has come, not on every look (a progress
/// report of each of thousands of tasks, many times a second).
#[derive(Default)]
struct Tasks {
    entries: HashMap<String, Entry>,
    earliest: Option<Instant>,
}

impl std::ops::Deref for Tasks {
    type Target = HashMap<String, Entry>;

    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

impl std::ops::DerefMut for Tasks {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.entries
    }
}

/// The last handle on the store gone, its tasks are stopped: no one could ask for them, cancel
/// them or read their results any more, and they would hold their instances until their time
/// limits.
impl Drop for Inner {
    fn drop(&mut self) {
        let tasks = self.tasks.get_mut().unwrap_or_else(|p| p.into_inner());
        for entry in tasks.values_mut() {
            if let Some(abort) = entry.abort.take() {
                abort.abort();
            }
        }
    }
}

struct Entry {
    owner: String,
    /// Whose budget it draws on (its owner's, unless started with [`TaskStore::start_for`]).
    account: String,
    /// Shared with readers: [`TaskStore::get`] takes a reference under the store's lock and
    /// copies the snapshot (its questions may be many kilobytes of JSON) after letting go of it;
    /// a change made meanwhile copies it first ([`Arc::make_mut`]).
    snapshot: Arc<TaskSnapshot>,
    /// What its outcome takes in memory, roughly ([`kept_bytes`]).
    weight: usize,
    expires: Instant,
    abort: Option<tokio::task::AbortHandle>,
    changed: watch::Sender<TaskStatus>,
    /// Who waits for the answer to each question in `snapshot.input_requests`, and what the
    /// question weighs.
    waiting: HashMap<String, (oneshot::Sender<Value>, usize)>,
}

impl Entry {
    /// What it holds in memory, as the budgets count it: its outcome and the questions it
    /// waits on (a few: at most a call's `max_questions`).
    fn held(&self) -> usize {
        self.weight
            + self
                .waiting
                .values()
                .map(|(_, weight)| weight)
                .sum::<usize>()
    }

    /// Forgets question `key`: who waits for its answer, returned.
    fn withdraw(&mut self, key: &str) -> Option<oneshot::Sender<Value>> {
        let (waiting, _) = self.waiting.remove(key)?;
        self.snapshot_mut().input_requests.remove(key);
        Some(waiting)
    }

    /// The snapshot, to change.
    fn snapshot_mut(&mut self) -> &mut TaskSnapshot {
        Arc::make_mut(&mut self.snapshot)
    }

    fn touch(&mut self, status: TaskStatus, message: &str) {
        let snapshot = self.snapshot_mut();
        snapshot.status = status;
        snapshot.status_message = Some(message.into());
        snapshot.last_updated_at = SystemTime::now();
        self.changed.send_replace(status);
    }

    /// Cancels it, `message` saying why, unless it ended already.
    fn end(&mut self, message: &str) {
        if self.snapshot.status.is_terminal() {
            return;
        }
        if let Some(abort) = self.abort.take() {
            abort.abort();
        }
        self.snapshot_mut().input_requests.clear();
        self.waiting.clear();
        self.touch(TaskStatus::Cancelled, message);
    }
}

/// What `outcome` takes in memory, at least: its texts and bytes, 64 bytes for each content
/// block, and what its structured result (a `serde_json::Value`) allocates ([`json_bytes`]).
pub(crate) fn kept_bytes(outcome: &Result<ToolOutput, ToolError>) -> usize {
    let output = match outcome {
        Ok(output) => output,
        Err(error) => return 64 + error.to_string().len(),
    };
    // Every field a block carries (its title and MIME type too: a link's title of a megabyte
    // was weighed as nothing), each string as the allocator serves it, and the blocks' slots.
    let blocks: usize = block(output.content.capacity() * size_of::<crate::content::Content>())
        + output.content.iter().map(block_bytes).sum::<usize>();
    blocks
        + output
            .structured
            .as_ref()
            .map_or(0, |value| size_of::<Value>() + json_bytes(value))
}

/// What the questions a task waits on take in memory (each key and value, as weighed for a
/// kept result): what each poll of the task copies.
#[cfg_attr(not(feature = "mcp-http"), allow(dead_code))]
pub(crate) fn asked_bytes(requests: &BTreeMap<String, Value>) -> usize {
    requests
        .iter()
        .map(|(key, request)| question_bytes(key, request))
        .sum()
}

/// What one question a task waits on takes in memory: its key and its value.
fn question_bytes(key: &str, request: &Value) -> usize {
    block(key.len()) + size_of::<Value>() + json_bytes(request)
}

/// Which budget `weight` more bytes for a task of `owner` drawing on `account` would
/// overrun, in words, with what to do, given what they hold ([`taken`]); `None` if it fits in
/// all three.
fn over_budget(
    options: &TaskOptions,
    owner: &str,
    account: &str,
    (mine, accounts, all): (usize, usize, usize),
    weight: usize,
) -> Option<String> {
    if mine + weight > options.max_kept_bytes_per_owner {
        Some(format!(
            "this server keeps for you now ({} KiB of results and questions at once, {} KiB of \
             them taken); call the tool without a task, or wait for older tasks' results to \
             expire",
            options.max_kept_bytes_per_owner >> 10,
            mine >> 10
        ))
    } else if account != owner && accounts + weight > options.max_kept_bytes_per_account {
        Some(format!(
            "this server keeps for you now in all your sessions together ({} KiB of results and \
             questions at once, {} KiB of them taken); call the tool without a task, or wait \
             for older tasks' results to expire",
            options.max_kept_bytes_per_account >> 10,
            accounts >> 10
        ))
    } else if all + weight > options.max_kept_bytes {
        Some(
            "this server can keep now for all its clients; call the tool without a task, or \
             try again later"
                .to_owned(),
        )
    } else {
        None
    }
}

/// What the tasks of `owner`, of `account`, and all tasks hold now, as the budgets count it.
fn taken(tasks: &HashMap<String, Entry>, owner: &str, account: &str) -> (usize, usize, usize) {
    tasks
        .values()
        .fold((0, 0, 0), |(mine, accounts, all), entry| {
            let held = entry.held();
            (
                mine + if entry.owner == owner { held } else { 0 },
                accounts + if entry.account == account { held } else { 0 },
                all + held,
            )
        })
}

/// What the strings and bytes of a content block take, each as the allocator serves it.
fn block_bytes(content: &crate::content::Content) -> usize {
    use crate::content::{Content, ResourceData};
    let optional = |text: &Option<String>| text.as_ref().map_or(0, |text| block(text.capacity()));
    match content {
        Content::Text(text) => block(text.capacity()),
        Content::Image(media) | Content::Audio(media) => {
            block(media.mime_type.capacity()) + block(media.data.capacity())
        }
        Content::Resource(contents) => {
            block(contents.uri.capacity())
                + optional(&contents.mime_type)
                + match &contents.data {
                    ResourceData::Text(data) => block(data.capacity()),
                    ResourceData::Blob(bytes) => block(bytes.capacity()),
                }
        }
        Content::Link(link) => {
            block(link.uri.capacity())
                + block(link.name.capacity())
                + optional(&link.title)
                + optional(&link.description)
                + optional(&link.mime_type)
        }
    }
}

/// A running task, as its call sees it: the way to put questions to its owner.
#[derive(Clone)]
pub struct TaskHandle {
    store: Weak<Inner>,
    id: String,
}

impl std::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle").field("id", &self.id).finish()
    }
}

impl TaskHandle {
    /// The task's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Says what the task is doing now: its status message while it works (shown by
    /// `tasks/get`), until it waits for input, says something else, or ends. A task's progress
    /// reports (a plugin's `host.progress`) set it, bounded like a log message.
    pub fn say(&self, message: impl Into<String>) {
        let Some(inner) = self.store.upgrade() else {
            return;
        };
        let store = TaskStore { inner };
        let mut tasks = store.lock();
        if let Some(entry) = tasks.get_mut(&self.id)
            && entry.snapshot.status == TaskStatus::Working
        {
            let mut message = message.into();
            crate::events::cut(&mut message);
            crate::events::shown_plainly(&mut message, false);
            let snapshot = entry.snapshot_mut();
            snapshot.status_message = Some(message);
            snapshot.last_updated_at = SystemTime::now();
        }
    }

    /// Puts `request` to the task's owner under `key` (unique within the task while it waits)
    /// and waits for the answer ([`TaskStore::answer`]); the task is
    /// [`TaskStatus::InputRequired`] meanwhile. Dropping the wait withdraws the question.
    ///
    /// # Errors
    /// [`TaskError::NotFound`] when the task is gone (expired, or its store dropped);
    /// [`TaskError::NotAsked`] when `key` is asked already.
    pub async fn ask(&self, key: &str, request: Value) -> Result<Value, TaskError> {
        let gone = || TaskError::NotFound(self.id.clone());
        // Weighed before the store's lock is taken: a question can be large.
        let weight = question_bytes(key, &request);
        let answer = {
            let inner = self.store.upgrade().ok_or_else(gone)?;
            let store = TaskStore { inner };
            let mut tasks = store.lock();
            let entry = tasks.get_mut(&self.id).ok_or_else(gone)?;
            // A task that ended (cancelled) asks nothing more.
            if entry.snapshot.status.is_terminal() {
                return Err(gone());
            }
            if entry.waiting.contains_key(key) {
                return Err(TaskError::NotAsked {
                    task: self.id.clone(),
                    key: key.to_owned(),
                });
            }
            // Held while it waits, within the budgets of kept results.
            let (owner, account) = (entry.owner.clone(), entry.account.clone());
            let held = taken(&tasks, &owner, &account);
            if let Some(full) = over_budget(&store.inner.options, &owner, &account, held, weight) {
                return Err(TaskError::NoRoom(format!(
                    "task '{}' cannot ask question '{key}': it takes {} KiB of memory, more than \
                     {full}",
                    self.id,
                    weight.div_ceil(1024),
                )));
            }
            let entry = tasks.get_mut(&self.id).ok_or_else(gone)?;
            let (answer, answered) = oneshot::channel();
            entry.waiting.insert(key.to_owned(), (answer, weight));
            entry
                .snapshot_mut()
                .input_requests
                .insert(key.to_owned(), request);
            entry.touch(TaskStatus::InputRequired, "waiting for input");
            answered
        };
        let withdraw = Withdraw {
            handle: self,
            key,
            armed: true,
        };
        let answer = answer.await.map_err(|_| gone());
        let mut withdraw = withdraw;
        withdraw.armed = answer.is_err();
        answer
    }
}

/// Withdraws a question whose wait was dropped (or lost its answer).
struct Withdraw<'a> {
    handle: &'a TaskHandle,
    key: &'a str,
    armed: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(inner) = self.handle.store.upgrade() else {
            return;
        };
        let store = TaskStore { inner };
        let mut tasks = store.lock();
        if let Some(entry) = tasks.get_mut(&self.handle.id) {
            entry.withdraw(self.key);
            if entry.waiting.is_empty() && entry.snapshot.status == TaskStatus::InputRequired {
                entry.touch(TaskStatus::Working, "running");
            }
        }
    }
}

/// The sink of a task's events: its progress reports become its status message ("message
/// (3 of 10)", or the figures alone).
pub(crate) fn status_from_progress(task: TaskHandle) -> crate::events::Sink {
    Arc::new(move |event: crate::events::ToolEvent| {
        if let crate::events::ToolEventKind::Progress {
            done,
            total,
            message,
        } = event.kind
        {
            let figures = match total {
                Some(total) => format!("{done} of {total}"),
                None => format!("{done} done"),
            };
            task.say(match message {
                Some(message) if !message.is_empty() => format!("{message} ({figures})"),
                _ => figures,
            });
        }
    })
}

tokio::task_local! {
    /// Set while a task's call runs: plugin calls take the task's time limit.
    static IN_TASK: ();
    /// Set while a call that may become a task runs inside its request.
    static HANDOFF: Handoff;
}

/// Whether the code running now runs a task's call.
pub(crate) fn in_task() -> bool {
    IN_TASK.try_with(|()| ()).is_ok()
}

/// Makes the call running now a task, if it runs as one that its caller has not been handed
/// yet: the caller (an MCP client that takes tasks) is answered with the task at once, and
/// the call goes on in the background. Until then such a call runs inside its request, so
/// that the questions it asks first are asked there (on MCP revision 2026-07-28, as the
/// rounds of a multi round-trip request). A tool that declares task support
/// ([`TaskSupport`](crate::TaskSupport)) calls it where its long work begins; a call that
/// never does is answered when it ends (a tool that requires tasks: with a task that ended).
///
/// Does nothing when called again, outside a tool call, or in a call that is not to become a
/// task. A plugin of contract 1.0.0 calls it as `host.start-task`.
pub fn start() {
    let _ = HANDOFF.try_with(Handoff::start);
}

/// Where a call that may become a task stands: once started or settled, for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) enum HandoffState {
    /// Running inside its request.
    InRequest,
    /// It became a task.
    Started,
    /// It ended inside its request, which answers it: it can no longer become a task.
    Settled,
}

/// Where a call that may become a task tells its request it has (see [`start`]).
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) struct Handoff(Arc<watch::Sender<HandoffState>>);

#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
impl Handoff {
    /// A hand-off, and the receiver its request waits on.
    pub(crate) fn new() -> (Self, watch::Receiver<HandoffState>) {
        let (sender, receiver) = watch::channel(HandoffState::InRequest);
        (Self(Arc::new(sender)), receiver)
    }

    /// The hand-off of the call running now (to be carried where its code runs).
    pub(crate) fn current() -> Option<Self> {
        HANDOFF.try_with(Clone::clone).ok()
    }

    /// Runs `work` (the call) with this hand-off.
    pub(crate) fn scope<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        HANDOFF.scope(self, work)
    }

    /// The call becomes a task, unless it did or was settled already.
    pub(crate) fn start(&self) {
        self.0.send_if_modified(|state| {
            let starts = *state == HandoffState::InRequest;
            if starts {
                *state = HandoffState::Started;
            }
            starts
        });
    }

    /// The call ended inside its request: it is answered there, and a late `start` (code it
    /// left running) does nothing. False if it had become a task first.
    pub(crate) fn settle(&self) -> bool {
        self.0.send_if_modified(|state| {
            let settles = *state == HandoffState::InRequest;
            if settles {
                *state = HandoffState::Settled;
            }
            settles
        })
    }

    /// Whether it became a task.
    pub(crate) fn started(&self) -> bool {
        *self.0.borrow() == HandoffState::Started
    }
}

impl TaskStore {
    /// A store with the default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store with these options.
    pub fn with_options(options: TaskOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                options,
                tasks: Mutex::default(),
            }),
        }
    }

    /// Its options.
    pub fn options(&self) -> &TaskOptions {
        &self.inner.options
    }

    /// The tasks, those past their time to live forgotten first (and any of them still
    /// running stopped): whatever request comes, an expired task holds nothing.
    fn lock(&self) -> MutexGuard<'_, Tasks> {
        // Every update replaces whole values: a panic cannot leave them half-done.
        let mut tasks = self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if tasks.earliest.is_none_or(|earliest| earliest <= now) {
            tasks.entries.retain(|_, entry| {
                let keep = entry.expires > now;
                if !keep && let Some(abort) = entry.abort.take() {
                    abort.abort();
                }
                keep
            });
            tasks.earliest = tasks.entries.values().map(|entry| entry.expires).min();
        }
        tasks
    }

    /// Starts `work` as a task of `owner` (on the current Tokio runtime), and returns it as it
    /// stands: working.
    ///
    /// # Errors
    /// [`TaskError::TooMany`] when `owner` keeps as many tasks as allowed;
    /// [`TaskError::Full`] when the store does, all owners together;
    /// [`TaskError::NoRuntime`] outside a Tokio runtime.
    pub fn start<W, F>(&self, owner: &str, work: W) -> Result<TaskSnapshot, TaskError>
    where
        W: FnOnce(TaskHandle) -> F,
        F: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        self.start_for(owner, owner, work)
    }

    /// Starts `work` as a task of `owner`, drawing on the budget of `account` too (the tasks
    /// and result memory of all the owners of one account: one caller's sessions, each an
    /// owner that sees only its own tasks).
    ///
    /// # Errors
    /// As [`Self::start`]; [`TaskError::TooMany`] also when `account` keeps as many tasks as
    /// allowed.
    pub fn start_for<W, F>(
        &self,
        owner: &str,
        account: &str,
        work: W,
    ) -> Result<TaskSnapshot, TaskError>
    where
        W: FnOnce(TaskHandle) -> F,
        F: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| TaskError::NoRuntime)?;
        let options = &self.inner.options;
        let now = SystemTime::now();
        let id = format!(
            "{}{}",
            options.prefix,
            random_hex().ok_or(TaskError::NoRandomness)?
        );
        let snapshot = TaskSnapshot {
            id: id.clone(),
            status: TaskStatus::Working,
            status_message: Some("running".into()),
            created_at: now,
            last_updated_at: now,
            ttl: options.ttl,
            poll_interval: options.poll_interval,
            outcome: None,
            input_requests: BTreeMap::new(),
        };
        {
            // Expired tasks are forgotten, and one still running stopped.
            let mut tasks = self.lock();
            let started = Instant::now();
            let (kept, kept_by_account) =
                tasks.values().fold((0, 0), |(mine, account_s), entry| {
                    (
                        mine + usize::from(entry.owner == owner),
                        account_s + usize::from(entry.account == account),
                    )
                });
            if kept >= options.max_tasks_per_owner {
                return Err(TaskError::TooMany(options.max_tasks_per_owner));
            }
            // An owner that is its own account ([`Self::start`]) has the owner's limits only.
            if account != owner && kept_by_account >= options.max_tasks_per_account {
                return Err(TaskError::TooMany(options.max_tasks_per_account));
            }
            if tasks.len() >= options.max_tasks {
                return Err(TaskError::Full(options.max_tasks));
            }
            tasks.insert(
                id.clone(),
                Entry {
                    owner: owner.to_owned(),
                    account: account.to_owned(),
                    snapshot: Arc::new(snapshot.clone()),
                    weight: 0,
                    expires: started + options.ttl,
                    abort: None,
                    changed: watch::Sender::new(TaskStatus::Working),
                    waiting: HashMap::new(),
                },
            );
        }
        // The store is held weakly: a store dropped ends its tasks' records, not their calls.
        let store = Arc::downgrade(&self.inner);
        let finished_id = id.clone();
        let handle = TaskHandle {
            store: Weak::clone(&store),
            id: id.clone(),
        };
        // Its progress is its status message.
        let progress = status_from_progress(handle.clone());
        let work = work(handle);
        let task = runtime.spawn(IN_TASK.scope((), async move {
            // A tool that panics (an embedder's `unwrap` of bad input) fails its task, as the
            // `Worker` turns a panicking call into an error: the task does not stay `working`
            // with its waiters waiting for ever.
            let work = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
                crate::events::with_sink(progress, work),
            ));
            let outcome = work.await.unwrap_or_else(|_| {
                tracing::error!(task = %finished_id, "a tool running as a task panicked");
                Err(ToolError::Internal(
                    "the tool panicked while it ran as a task".to_owned(),
                ))
            });
            if let Some(inner) = store.upgrade() {
                TaskStore { inner }.finish(&finished_id, outcome);
            }
        }));
        // Cancelled or forgotten while it was spawned (its session ended): stopped now.
        match self.lock().get_mut(&id) {
            Some(entry) if !entry.snapshot.status.is_terminal() => {
                entry.abort = Some(task.abort_handle());
            }
            _ => task.abort(),
        }
        Ok(snapshot)
    }

    /// Records how a task's call ended (unless it was cancelled first).
    fn finish(&self, id: &str, outcome: Result<ToolOutput, ToolError>) {
        // Weighed before the store's lock is taken: a result can be large.
        let weight = kept_bytes(&outcome);
        let mut tasks = self.lock();
        let Some(entry) = tasks.get_mut(id) else {
            return;
        };
        if entry.snapshot.status.is_terminal() {
            return;
        }
        // Kept only within the owner's, its account's and the store's budgets.
        let (owner, account) = (entry.owner.clone(), entry.account.clone());
        let held = taken(&tasks, &owner, &account);
        let (mine, _, all) = held;
        let options = &self.inner.options;
        let refusal = over_budget(options, &owner, &account, held, weight).map(|full| {
            format!(
                "the task's result takes {} KiB of memory, more than {full}",
                weight >> 10
            )
        });
        let (outcome, weight) = match refusal {
            Some(refusal) => {
                tracing::warn!(
                    task = %id,
                    "a task's result was not kept: it takes {} KiB of memory; its owner's \
                     results take {} KiB of the {} KiB kept per owner, all results {} KiB of \
                     the {} KiB kept for all",
                    weight >> 10,
                    mine >> 10,
                    options.max_kept_bytes_per_owner >> 10,
                    all >> 10,
                    options.max_kept_bytes >> 10
                );
                let refused = Err(ToolError::Internal(refusal));
                let weight = kept_bytes(&refused);
                (refused, weight)
            }
            None => (outcome, weight),
        };
        let Some(entry) = tasks.get_mut(id) else {
            return;
        };
        let (status, message) = match &outcome {
            Err(ToolError::Internal(_)) => (TaskStatus::Failed, "failed"),
            Ok(output) if output.is_error => (TaskStatus::Completed, "completed with an error"),
            Err(_) => (TaskStatus::Completed, "completed with an error"),
            Ok(_) => (TaskStatus::Completed, "completed"),
        };
        entry.weight = weight;
        entry.snapshot_mut().outcome = Some(Arc::new(outcome));
        // Its result is kept for its time to live from now.
        entry.expires = Instant::now() + self.inner.options.ttl;
        entry.snapshot_mut().input_requests.clear();
        entry.waiting.clear();
        entry.abort = None;
        entry.touch(status, message);
    }

    /// Answers questions the task `id` of `owner` waits on ([`TaskHandle::ask`]), by key: the
    /// task goes on once none is left. An answer to a key it does not wait on (one answered
    /// already, or never asked) is ignored, as the protocol has it; the keys ignored are
    /// returned.
    ///
    /// # Errors
    /// [`TaskError::NotFound`] for an id `owner` has no task of.
    pub fn answer(
        &self,
        owner: &str,
        id: &str,
        mut answers: BTreeMap<String, Value>,
    ) -> Result<Vec<String>, TaskError> {
        {
            let mut tasks = self.lock();
            let entry = match tasks.get_mut(id) {
                Some(entry) if entry.owner == owner && entry.expires > Instant::now() => entry,
                _ => return Err(not_found(id)),
            };
            // The keys the task waits on (a handful) are looked up in the answers, not each
            // answer among them: a client's map of a million keys holds the store, which
            // every task of every client shares, no longer than one of a few.
            let asked: Vec<String> = entry
                .waiting
                .keys()
                .filter(|key| answers.contains_key(*key))
                .cloned()
                .collect();
            for key in asked {
                if let (Some(waiting), Some(value)) = (entry.withdraw(&key), answers.remove(&key)) {
                    let _ = waiting.send(value);
                }
            }
            if entry.waiting.is_empty() && entry.snapshot.status == TaskStatus::InputRequired {
                entry.touch(TaskStatus::Working, "running");
            }
        }
        // What was not asked is let go of outside the store's lock.
        Ok(answers.into_keys().collect())
    }

    /// The task `id` of `owner`, as it stands.
    ///
    /// # Errors
    /// [`TaskError::NotFound`] for an id `owner` has no task of.
    pub fn get(&self, owner: &str, id: &str) -> Result<TaskSnapshot, TaskError> {
        let snapshot = {
            let tasks = self.lock();
            match tasks.get(id) {
                Some(entry) if entry.owner == owner && entry.expires > Instant::now() => {
                    Arc::clone(&entry.snapshot)
                }
                _ => return Err(not_found(id)),
            }
        };
        Ok(TaskSnapshot::clone(&snapshot))
    }

    /// Cancels the task `id` of `owner`: its call is dropped (a plugin call of contract 1.0.0
    /// is told to stop; an older plugin's instance is restarted, as for any call dropped by its
    /// caller). A task that ended already is left as it is.
    ///
    /// # Errors
    /// [`TaskError::NotFound`] for an id `owner` has no task of.
    pub fn cancel(&self, owner: &str, id: &str) -> Result<TaskSnapshot, TaskError> {
        let mut tasks = self.lock();
        let entry = match tasks.get_mut(id) {
            Some(entry) if entry.owner == owner && entry.expires > Instant::now() => entry,
            _ => return Err(not_found(id)),
        };
        entry.end("cancelled");
        let snapshot = Arc::clone(&entry.snapshot);
        drop(tasks);
        Ok(TaskSnapshot::clone(&snapshot))
    }

    /// Cancels every task whose owner `owns` (a session that ended, its tasks with it).
    pub fn cancel_owned_by(&self, owns: impl Fn(&str) -> bool) {
        let mut tasks = self.lock();
        for entry in tasks.values_mut().filter(|entry| owns(&entry.owner)) {
            entry.end("cancelled: its session ended");
        }
    }

    /// Cancels every task whose owner `owns` and forgets them all, ended ones too: for owners
    /// that are gone (a session that ended), whose tasks no one can ask for again and which
    /// would otherwise count against the store's caps until their time to live runs out.
    pub fn remove_owned_by(&self, owns: impl Fn(&str) -> bool) {
        let mut tasks = self.lock();
        tasks.retain(|_, entry| {
            if !owns(&entry.owner) {
                return true;
            }
            entry.end("cancelled: its owner is gone");
            false
        });
    }

    /// Forgets the task `id` of `owner` and returns it as it stood (its call is dropped if it
    /// still ran): a call that ended, or whose caller left, before it was handed to the caller
    /// as a task; a task its owner has no more use for.
    pub(crate) fn forget(&self, owner: &str, id: &str) -> Option<TaskSnapshot> {
        let mut tasks = self.lock();
        if !tasks.get(id).is_some_and(|entry| entry.owner == owner) {
            return None;
        }
        let mut entry = tasks.remove(id)?;
        if let Some(abort) = entry.abort.take() {
            abort.abort();
        }
        Some(Arc::unwrap_or_clone(entry.snapshot))
    }

    /// Waits until the task `id` of `owner` ends, and returns it.
    ///
    /// # Errors
    /// [`TaskError::NotFound`] for an id `owner` has no task of (or one that expired while
    /// waited for).
    pub async fn wait(&self, owner: &str, id: &str) -> Result<TaskSnapshot, TaskError> {
        let mut changed = {
            let tasks = self.lock();
            match tasks.get(id) {
                Some(entry) if entry.owner == owner => entry.changed.subscribe(),
                _ => return Err(not_found(id)),
            }
        };
        let _ = changed.wait_for(|status| status.is_terminal()).await;
        self.get(owner, id)
    }
}

/// 128 random bits in hex: an id no one can guess, which is all that guards the tasks of a
/// server's anonymous callers.
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's work that never ends.
    fn endless(_: TaskHandle) -> std::future::Pending<Result<ToolOutput, ToolError>> {
        std::future::pending()
    }

    /// An embedder's tool that panics (an `unwrap` of input the model got wrong) while it runs
    /// as a task: the panic ended the spawned call before its outcome was recorded, so the
    /// task stayed `working`, its place taken, and a waiter waited for ever. It fails.
    #[tokio::test]
    async fn a_task_whose_tool_panics_fails_and_its_waiter_is_told() {
        let store = TaskStore::default();
        let task = store
            .start("alice", |_| async {
                let parsed: Option<u32> = None;
                #[expect(clippy::unnecessary_literal_unwrap, reason = "the tool's bug")]
                Ok(ToolOutput::text(
                    parsed.expect("the model's input").to_string(),
                ))
            })
            .expect("a task");
        let ended = tokio::time::timeout(Duration::from_secs(60), store.wait("alice", &task.id))
            .await
            .expect("the waiter was told")
            .expect("the task");
        assert_eq!(ended.status, TaskStatus::Failed);
        let outcome = ended.outcome.as_deref().expect("an outcome");
        assert!(
            matches!(outcome, Err(ToolError::Internal(why)) if why.contains("panicked")),
            "{outcome:?}"
        );
    }

    /// The attack: many owners, each under its own cap, filling the server with tasks
    /// together. And the error: an owner was told "kept for you" about a limit that is
    /// everyone's.
    #[tokio::test]
    async fn the_stores_cap_holds_for_all_owners_together_and_says_whose_limit_it_is() {
        let store =
            TaskStore::with_options(TaskOptions::default().max_tasks(2).max_tasks_per_owner(2));
        store.start("alice", endless).expect("alice's task");
        store.start("bob", endless).expect("bob's task");
        let refused = store
            .start("carol", endless)
            .expect_err("a third task, over the store's cap");
        assert_eq!(refused, TaskError::Full(2));
        assert!(
            refused.to_string().contains("for all its clients"),
            "{refused}"
        );
        // An owner's own cap says it is theirs.
        let own = TaskStore::with_options(TaskOptions::default().max_tasks_per_owner(1));
        own.start("alice", endless).expect("alice's task");
        let refused = own
            .start("alice", endless)
            .expect_err("a second task of one owner");
        assert_eq!(refused, TaskError::TooMany(1));
        assert!(refused.to_string().contains("for you"), "{refused}");
        own.start("bob", endless).expect("another owner's task");
    }

    /// Ends when `task` waits on a question (its status `InputRequired`); an error if the
    /// task is gone first.
    fn waits_on_its_question(
        store: &TaskStore,
        task: &TaskSnapshot,
    ) -> impl Future<Output = Result<(), watch::error::RecvError>> + use<> {
        let mut changed = store
            .lock()
            .get(&task.id)
            .expect("the task")
            .changed
            .subscribe();
        async move {
            changed
                .wait_for(|status| *status == TaskStatus::InputRequired)
                .await
                .map(|_| ())
        }
    }

    /// The attack: `tasks/get`, `tasks/update` or `tasks/cancel` of an id of megabytes (within
    /// a request body's cap), quoted whole in the error every request answered with. An id is
    /// quoted cut, saying its length; a short one whole.
    #[test]
    fn an_unknown_ids_error_quotes_it_cut() {
        let store = TaskStore::with_options(TaskOptions::default());
        let long = format!("{}é", "x".repeat(4 << 20));
        for error in [
            store.get("alice", &long).map(drop),
            store.cancel("alice", &long).map(drop),
            store.answer("alice", &long, BTreeMap::new()).map(drop),
        ] {
            let message = error.expect_err("no such task").to_string();
            assert!(message.len() < 400, "{} bytes", message.len());
            assert!(
                message.contains(&format!("({} bytes)", long.len())),
                "{message}"
            );
        }
        let short = store.get("alice", "task-1").expect_err("no such task");
        assert_eq!(short, TaskError::NotFound("task-1".into()));
    }

    /// The attack: `tasks/update` with a map of many thousands of keys the task never asked,
    /// walked under the lock every task of every client shares. The one asked is answered, the
    /// rest are returned as ignored, and another owner's update of the task is refused.
    #[tokio::test]
    async fn an_update_answers_what_was_asked_and_returns_the_rest() {
        let store = TaskStore::with_options(TaskOptions::default());
        let (asked, answered) = oneshot::channel();
        let task = store
            .start("alice", move |task: TaskHandle| async move {
                let answer = task.ask("name", serde_json::json!({"ask": "name"})).await;
                let _ = asked.send(answer);
                std::future::pending::<Result<ToolOutput, ToolError>>().await
            })
            .expect("a task");
        // Until the task waits on its question, an answer to it would be ignored.
        waits_on_its_question(&store, &task)
            .await
            .expect("the task goes on");
        let mut answers: BTreeMap<String, Value> = (0..50_000)
            .map(|n| (format!("k{n}"), Value::Null))
            .collect();
        answers.insert("name".into(), serde_json::json!("Ada"));
        assert!(matches!(
            store.answer("mallory", &task.id, answers.clone()),
            Err(TaskError::NotFound(_))
        ));
        let ignored = store.answer("alice", &task.id, answers).expect("answered");
        assert_eq!(ignored.len(), 50_000);
        assert!(!ignored.iter().any(|key| key == "name"));
        assert_eq!(
            answered.await.expect("asked").expect("an answer"),
            serde_json::json!("Ada")
        );
        assert_eq!(
            store.get("alice", &task.id).expect("the task").status,
            TaskStatus::Working
        );
    }

    /// The attack: tasks that ask large questions and never see them answered. The questions
    /// are held while they wait, and drawn from the owner's budget of kept results: a question
    /// past it is refused, and an answered one gives its room back.
    #[tokio::test]
    async fn the_questions_tasks_wait_on_are_held_to_the_owners_budget() {
        let store =
            TaskStore::with_options(TaskOptions::default().max_kept_bytes_per_owner(64 << 10));
        let large = serde_json::json!({"message": "x".repeat(40_000)});
        // Starts a task that asks the large question; returns it with what its ask gave.
        let asking = |store: &TaskStore| {
            let (asked, answered) = oneshot::channel();
            let question = large.clone();
            let task = store
                .start("alice", move |task: TaskHandle| async move {
                    let answer = task.ask("q", question).await;
                    let _ = asked.send(answer);
                    std::future::pending::<Result<ToolOutput, ToolError>>().await
                })
                .expect("a task");
            (task, answered)
        };
        let (first, first_answer) = asking(&store);
        waits_on_its_question(&store, &first)
            .await
            .expect("the first question is held");
        let (second, refused) = asking(&store);
        let refused = tokio::select! {
            refused = refused => refused.expect("the second task asked"),
            _ = waits_on_its_question(&store, &second) => {
                panic!("the second question was held past the owner's budget")
            }
        };
        assert!(
            matches!(&refused, Err(TaskError::NoRoom(why))
                if why.contains("cannot ask question 'q'") && why.contains("64 KiB")),
            "{refused:?}"
        );
        // Answered, the first question gives its room back.
        store
            .answer(
                "alice",
                &first.id,
                BTreeMap::from([("q".into(), Value::Null)]),
            )
            .expect("answered");
        assert_eq!(first_answer.await.expect("asked"), Ok(Value::Null));
        let (third, _) = asking(&store);
        waits_on_its_question(&store, &third)
            .await
            .expect("the third question is held");
        // Cancelled, the third task gives its question's room back too.
        store.cancel("alice", &third.id).expect("cancelled");
        let (fourth, _) = asking(&store);
        waits_on_its_question(&store, &fourth)
            .await
            .expect("the fourth question is held");
        // Other owners' questions are not held to alice's budget.
        let (asked, _answered) = oneshot::channel::<()>();
        let bob = store
            .start("bob", move |task: TaskHandle| async move {
                let _ = task.ask("q", serde_json::json!("x".repeat(40_000))).await;
                drop(asked);
                std::future::pending::<Result<ToolOutput, ToolError>>().await
            })
            .expect("bob's task");
        waits_on_its_question(&store, &bob)
            .await
            .expect("bob's question is held");
    }

    /// The attack: a plugin's progress message, which becomes its task's status message, holds
    /// a terminal's escape sequence, a line break and a right-to-left override (a client shows
    /// `tasks/get`'s status as it is). They are replaced, the rest of the text kept.
    #[tokio::test]
    async fn a_status_message_shows_plainly() {
        let store = TaskStore::with_options(TaskOptions::default());
        let (said, heard) = oneshot::channel();
        let task = store
            .start("alice", move |task: TaskHandle| async move {
                task.say("\u{1b}[2Kfetching\nstep \u{202e}2");
                let _ = said.send(());
                std::future::pending::<Result<ToolOutput, ToolError>>().await
            })
            .expect("a task");
        heard.await.expect("said");
        let snapshot = store.get("alice", &task.id).expect("the task");
        assert_eq!(
            snapshot.status_message.as_deref(),
            Some("\u{FFFD}[2Kfetching\u{FFFD}step \u{FFFD}2")
        );
    }

    /// The attack: a task whose time to live ran out was stopped only when someone started
    /// another task; until then its call ran on, out of its owner's reach (`tasks/get` and
    /// `tasks/cancel` no longer knew it).
    #[tokio::test]
    async fn an_expired_task_is_stopped_at_the_next_request_of_any_kind() {
        /// Says when it is dropped.
        struct Dropped(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(said) = self.0.take() {
                    let _ = said.send(());
                }
            }
        }
        let store = TaskStore::with_options(TaskOptions::default().ttl(Duration::from_millis(50)));
        let (said, dropped) = tokio::sync::oneshot::channel();
        let task = store
            .start("alice", move |_| {
                let guard = Dropped(Some(said));
                async move {
                    let _guard = guard;
                    std::future::pending::<Result<ToolOutput, ToolError>>().await
                }
            })
            .expect("a task");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            store.get("alice", &task.id).expect_err("expired"),
            TaskError::NotFound(task.id.clone())
        );
        tokio::time::timeout(Duration::from_secs(10), dropped)
            .await
            .expect("the expired task's call was dropped")
            .expect("said");
    }

    /// The attack: kept results take memory for their time to live, and a structured result
    /// many times its text (each JSON value a `serde_json::Value`): 64 tasks of one owner, each
    /// with 1 MiB of `[0,0,…]`, held some 2 GiB for an hour. Results are kept within a budget
    /// per owner and one for the store; one over it fails its task, saying why, and other
    /// owners' results are kept.
    /// Work whose result is a text of `bytes` bytes.
    fn text(
        bytes: usize,
    ) -> impl FnOnce(TaskHandle) -> std::future::Ready<Result<ToolOutput, ToolError>> {
        move |_| std::future::ready(Ok(ToolOutput::text("t".repeat(bytes))))
    }

    /// `task` of `owner` once it ended.
    async fn ended(store: &TaskStore, owner: &str, task: TaskSnapshot) -> TaskSnapshot {
        tokio::time::timeout(Duration::from_secs(10), store.wait(owner, &task.id))
            .await
            .expect("it ends")
            .expect("it is there")
    }

    #[tokio::test]
    async fn kept_results_are_held_to_a_memory_budget_per_owner_and_for_the_store() {
        let store = TaskStore::with_options(
            TaskOptions::default()
                .max_kept_bytes_per_owner(40 << 10)
                .max_kept_bytes(60 << 10),
        );
        let run = |owner: &'static str, task: TaskSnapshot| ended(&store, owner, task);
        // 1,000 small values: 3 KiB of text, 32 KiB as values.
        let numbers = serde_json::json!({ "n": vec![0; 1000] });
        let structured = move |_: TaskHandle| {
            let numbers = numbers.clone();
            async move {
                let mut output = ToolOutput::text("numbers");
                output.structured = Some(numbers);
                Ok(output)
            }
        };
        let first = run("alice", store.start("alice", structured).expect("started")).await;
        assert_eq!(first.status, TaskStatus::Completed);
        assert!(first.outcome.as_deref().is_some_and(Result::is_ok));
        // Alice's next result of 16 KiB is over what is left of her 40 KiB.
        let second = run(
            "alice",
            store.start("alice", text(16 << 10)).expect("started"),
        )
        .await;
        assert_eq!(second.status, TaskStatus::Failed);
        let Some(Err(ToolError::Internal(why))) = second.outcome.as_deref() else {
            panic!("not kept: {second:?}");
        };
        assert!(why.contains("more than this server keeps for you"), "{why}");
        // Bob's is kept; then the store's 60 KiB are used up for everyone.
        let bob = run("bob", store.start("bob", text(16 << 10)).expect("started")).await;
        assert_eq!(bob.status, TaskStatus::Completed);
        let carol = run(
            "carol",
            store.start("carol", text(16 << 10)).expect("started"),
        )
        .await;
        assert_eq!(carol.status, TaskStatus::Failed);
        let Some(Err(ToolError::Internal(why))) = carol.outcome.as_deref() else {
            panic!("not kept: {carol:?}");
        };
        assert!(why.contains("for all its clients"), "{why}");
        // A small result still fits.
        let small = run("alice", store.start("alice", text(100)).expect("started")).await;
        assert_eq!(small.status, TaskStatus::Completed);
    }

    /// Counts, per thread, the bytes allocated and not yet freed (this crate's unit tests run
    /// with it): the one use of `unsafe` here, to hand each call to the system's allocator.
    #[allow(unsafe_code)]
    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        struct Counting;

        thread_local! {
            static LIVE: Cell<isize> = const { Cell::new(0) };
        }

        /// Adds what an allocation of `bytes` takes (as [`super::super::block`] says glibc
        /// serves it), or takes it away.
        fn add(bytes: usize, freed: bool) {
            let served = super::super::block(bytes).cast_signed();
            // A `const` local without a destructor is always there; `try_with` costs nothing.
            let _ =
                LIVE.try_with(|live| live.set(live.get() + if freed { -served } else { served }));
        }

        // SAFETY: each call is handed to the system allocator as it came.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                add(layout.size(), false);
                // SAFETY: the caller's contract, passed on.
                unsafe { System.alloc(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                add(layout.size(), true);
                // SAFETY: the caller's contract, passed on.
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
                add(layout.size(), false);
                // SAFETY: the caller's contract, passed on.
                unsafe { System.alloc_zeroed(layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                add(layout.size(), true);
                add(new_size, false);
                // SAFETY: the caller's contract, passed on.
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }

        #[global_allocator]
        static COUNTING: Counting = Counting;

        /// What this thread's allocations take now, less what it freed of other threads'.
        pub(super) fn allocated() -> isize {
            LIVE.with(Cell::get)
        }
    }

    /// The attack: an embedder drops its tool server while a hostile plugin's task runs; the
    /// task went on for its whole time limit, holding its instance, with no one able to cancel
    /// it.
    #[tokio::test]
    async fn a_stores_tasks_end_with_it() {
        struct Dropped(Option<oneshot::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(dropped) = self.0.take() {
                    let _ = dropped.send(());
                }
            }
        }
        let store = TaskStore::default();
        let (dropped, was_dropped) = oneshot::channel();
        let (started, has_started) = oneshot::channel();
        let task = store
            .start("", move |_| async move {
                let _guard = Dropped(Some(dropped));
                let _ = started.send(());
                std::future::pending::<Result<ToolOutput, ToolError>>().await
            })
            .expect("started");
        has_started.await.expect("the task runs");
        assert_eq!(
            store.get("", &task.id).expect("there").status,
            TaskStatus::Working
        );
        drop(store);
        // A liveness bound far above what it takes.
        tokio::time::timeout(Duration::from_secs(30), was_dropped)
            .await
            .expect("the task's work was dropped with its store")
            .expect("dropped, not lost");
    }

    /// The weights above hold for serde_json as this workspace builds it: numbers kept as
    /// numbers (with `arbitrary_precision` each would hold a string, weighed as nothing) and
    /// objects as B-trees (with `preserve_order`, as index maps).
    #[test]
    fn serde_json_keeps_numbers_as_numbers_and_objects_as_b_trees() {
        assert!(
            serde_json::from_str::<Value>("1e400").is_err(),
            "serde_json's `arbitrary_precision` is on: json_bytes must weigh numbers' strings"
        );
        let object: Value = serde_json::from_str(r#"{"b":0,"a":0}"#).expect("json");
        assert_eq!(
            object.to_string(),
            r#"{"a":0,"b":0}"#,
            "serde_json's `preserve_order` is on: json_bytes must weigh index maps"
        );
    }

    /// A result of many small blocks is weighed at least as it is held: each block's slot
    /// and each of its strings as the allocator serves it.
    #[test]
    fn a_results_blocks_weigh_at_least_what_they_allocate() {
        let before = counting::allocated();
        let output = ToolOutput::content(
            (0..2_000)
                .map(|i| {
                    let mut link = crate::content::ResourceMeta::new(format!("m:{i}"), "x");
                    link.title = Some("t".into());
                    crate::content::Content::Link(link)
                })
                .chain((0..2_000).map(|_| crate::content::Content::Text("a".into())))
                .collect(),
        );
        let allocated = (counting::allocated() - before).cast_unsigned();
        let weighed = kept_bytes(&Ok(output));
        assert!(allocated > 0);
        assert!(
            weighed >= allocated,
            "weighed {weighed}, allocated {allocated}"
        );
    }

    /// The attack: a task's result is a link whose title is a megabyte; only its URI, name
    /// and description were weighed.
    #[tokio::test]
    async fn every_field_of_a_result_is_weighed() {
        let store =
            TaskStore::with_options(TaskOptions::default().max_kept_bytes_per_owner(512 << 10));
        let task = store
            .start("alice", |_| async {
                let mut link = crate::content::ResourceMeta::new("memo://x", "x");
                link.title = Some("t".repeat(1 << 20));
                Ok(ToolOutput::content(vec![crate::content::Content::Link(
                    link,
                )]))
            })
            .expect("started");
        let task = ended(&store, "alice", task).await;
        assert_eq!(task.status, TaskStatus::Failed, "{:?}", task.status);
    }

    /// The attack: a plugin's task returns a structured result of many small objects, which
    /// serde_json keeps in B-tree nodes of room for 11 members each: 1 MiB of text took some
    /// 100 MiB kept for an hour, weighed as 14.
    #[tokio::test]
    async fn a_result_of_small_objects_is_weighed_as_it_is_kept() {
        let store =
            TaskStore::with_options(TaskOptions::default().max_kept_bytes_per_owner(4 << 20));
        // 70 KB of text; some 7 MB as values (1 MB as the store weighed it before).
        let text = format!("[{}]", vec![r#"{"":0}"#; 10_000].join(","));
        let objects: Value = serde_json::from_str(&text).expect("json");
        let task = store
            .start("alice", move |_| async move {
                let mut output = ToolOutput::text("objects");
                output.structured = Some(objects);
                Ok(output)
            })
            .expect("started");
        let task = ended(&store, "alice", task).await;
        assert_eq!(task.status, TaskStatus::Failed, "{task:?}");
        let Some(Err(ToolError::Internal(why))) = task.outcome.as_deref() else {
            panic!("not kept: {task:?}");
        };
        assert!(why.contains("more than this server keeps for you"), "{why}");
    }

    /// What a structured value is weighed is at least what it allocates, for the shapes a
    /// plugin could choose to make the most of its output limit.
    #[test]
    fn a_values_weight_is_at_least_what_it_allocates() {
        let shapes = [
            format!("[{}]", vec![r#"{"":0}"#; 5_000].join(",")),
            format!("[{}]", vec!["[]"; 5_000].join(",")),
            format!("[{}]", vec!["0"; 5_000].join(",")),
            format!("[{}]", vec![r#""""#; 5_000].join(",")),
            format!("[{}]", vec![r#""a""#; 5_000].join(",")),
            format!("[{}]", vec![r#"{"a":{"b":{"c":[1]}}}"#; 1_000].join(",")),
            format!(
                "{{{}}}",
                (0..5_000)
                    .map(|i| format!(r#""{i}":{{}}"#))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!(
                "{{{}}}",
                (0..5_000)
                    .rev()
                    .map(|i| format!(r#""k{i:05}":"v""#))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            "[".repeat(100) + &"]".repeat(100),
        ];
        for text in shapes {
            let before = counting::allocated();
            let value: Value = serde_json::from_str(&text).expect("json");
            let allocated = (counting::allocated() - before).cast_unsigned();
            let weighed = json_bytes(&value);
            // The count is real: a value takes more than its text.
            assert!(allocated > text.len(), "{allocated} bytes counted");
            assert!(
                weighed >= allocated,
                "{}…: weighed {weighed}, allocated {allocated}",
                &text[..text.len().min(40)]
            );
            drop(value);
        }
    }

    /// One caller with many sessions (an owner each) draws on one account: it cannot take
    /// the store's whole budget, of tasks or of result memory, from the others.
    #[tokio::test]
    async fn the_sessions_of_one_caller_share_its_budget() {
        let store = TaskStore::with_options(
            TaskOptions::default()
                .max_kept_bytes_per_owner(20 << 10)
                .max_kept_bytes_per_account(30 << 10)
                .max_kept_bytes(100 << 10)
                .max_tasks_per_account(3),
        );
        let run = |owner: &'static str, task: TaskSnapshot| ended(&store, owner, task);
        let start = |owner: &'static str, bytes: usize| {
            store
                .start_for(owner, owner.split('/').next().unwrap_or(owner), text(bytes))
                .expect("started")
        };
        // Mallory's first session keeps 16 KiB; her second, within its own owner's budget,
        // is over what is left of her account's.
        let first = run("mallory/1", start("mallory/1", 16 << 10)).await;
        assert_eq!(first.status, TaskStatus::Completed);
        let second = run("mallory/2", start("mallory/2", 16 << 10)).await;
        assert_eq!(second.status, TaskStatus::Failed);
        let Some(Err(ToolError::Internal(why))) = second.outcome.as_deref() else {
            panic!("not kept: {second:?}");
        };
        assert!(why.contains("in all your sessions together"), "{why}");
        // Alice is not starved.
        let alice = run("alice/1", start("alice/1", 16 << 10)).await;
        assert_eq!(alice.status, TaskStatus::Completed);
        // Mallory's third session may keep one more task (three for her account), not two.
        start("mallory/3", 10);
        let refused = store
            .start_for("mallory/4", "mallory", text(10))
            .expect_err("over the account's count");
        assert!(matches!(refused, TaskError::TooMany(3)), "{refused}");
        store.start_for("bob/1", "bob", text(10)).expect("bob's");
    }
}
