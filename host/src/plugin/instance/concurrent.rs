//! Contract 1.0.0: one instance serving several calls at once.
//!
//! The store of a 1.0.0 instance is owned by its *event loop*, a future that runs
//! `Store::run_concurrent` for the instance's whole life: callers send it calls through a
//! channel, it starts each as a guest task and answers on a oneshot channel when the task
//! returns. While a call awaits (a host future: an HTTP response, a timer, a client's answer)
//! the loop runs the others. A caller that finds the loop idle polls it itself, and the
//! instance's task polls it otherwise ([`super::driver`]).
//!
//! What each call keeps of its own — its deadline, reports, questions and HTTP gate — lives in
//! [`Calls`], keyed by the call's task group; wasmtime's task-group hook tells which group runs
//! at any moment, so that every host import and the epoch check act for the right call. Code
//! that runs for no call (work a call left behind when it returned) reports nothing, may send
//! nothing and ask nothing; that work keeps the call's place among the instance's calls and
//! must finish within [`CANCEL_GRACE`] of the return, or the instance is ended.
//!
//! A call that runs out of time while it awaits is *abandoned*: its caller is answered at once,
//! its requests end, `host.cancelled` resolves for it, and it has [`CANCEL_GRACE`] to return;
//! one that does not is a zombie, and the instance is torn down. wasmtime cannot stop one task
//! of a store without poisoning the store, so a call that runs out of time while running code,
//! or any trap, ends the instance with every call in it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use wasmtime::Store;
use wasmtime::component::{
    Accessor, ComponentNamedList, HasData, Lift, Lower, TaskGroupHook, TaskGroupId, TypedFunc,
};

use super::super::bindings::v10;
use super::super::bindings::v10::llm_worker::tool::client::{
    ElicitationAnswer as WitElicitation, QuestionError as WitQuestionError, Root as WitRoot,
    SamplingAnswer as WitSamplingAnswer, SamplingRequest as WitSamplingRequest,
};
use super::super::bindings::v10::llm_worker::tool::host::{
    Level as WitLevel, Listing as WitListing,
};
use super::super::bindings::{Request, Response};
use super::ask::{Kind, Questions, Waited};
use super::state::{PluginState, TimedOut};
use super::{Done, HttpScope, Subject};
use crate::events::{CallReports, Listing, LogLevel, Sink, ToolEventKind};
use crate::question::{self, QuestionHandler};
use crate::tool::QuestionError;

// Keys are ids the host and wasmtime make (never a plugin's or a client's text): Fx hashing is
// safe here, and a call touches these maps a dozen times.
type HashMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
type HashSet<K> = std::collections::HashSet<K, rustc_hash::FxBuildHasher>;

/// How long an abandoned call has to return before its instance is torn down.
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// How long after its grace the watch outside the event loop looks for work a call left
/// behind ([`Concurrency::watch_lingering`]).
const LINGER_SLACK: Duration = Duration::from_millis(50);

/// How long past its time limit a call may run code before its instance is ended (see
/// [`PluginState::in_time`]).
const RUN_SLACK: Duration = Duration::from_millis(100);

/// The calls of a 1.0.0 instance, and which of them runs now.
pub(crate) struct Calls {
    /// Which task group runs now and how long each has run (kept by the hook).
    clock: Arc<Mutex<GroupClock>>,
    by_group: HashMap<TaskGroupId, CallState>,
    /// The group of each call, by the caller's id for it.
    groups: HashMap<u64, TaskGroupId>,
    /// Calls whose group finished and went to a new call (wasmtime hands a finished group's
    /// id to the next) before they were ended, by id: each keeps its own state (whether it was
    /// abandoned, its reports) until it is ended, rather than lose it to the new call's.
    displaced: HashMap<u64, CallState>,
    /// Calls abandoned before they started: they start cancelled.
    abandoned_early: HashSet<u64>,
    /// Calls the loop received and has not ended yet: an abandon for any other id (one that
    /// ended already) is dropped.
    received: HashSet<u64>,
    /// The call whose time ran out while it ran code (the epoch check saw it), if any.
    pub(crate) timed_out: Option<u64>,
}

/// What the task-group hook keeps: the group running now (since when), how long each group
/// has run code, by when the code a call left running after it ended must stop, and where
/// the CPU time of a group's code is counted, for a call whose request measures it.
#[derive(Default)]
pub(super) struct GroupClock {
    current: Option<(TaskGroupId, Instant)>,
    ran: HashMap<TaskGroupId, Duration>,
    ended: HashMap<TaskGroupId, Instant>,
    cpu: HashMap<TaskGroupId, CpuMeter>,
    /// The groups started and not finished yet.
    live: HashSet<TaskGroupId>,
    /// Calls that returned while their group goes on (work left behind, running or waiting):
    /// each keeps its place among the instance's calls until its group finishes, which it must
    /// by the instant given ([`CANCEL_GRACE`] after it returned) or the instance is ended. A
    /// guest task waiting on nothing runs no code for the epoch check to see, and holds a
    /// fiber stack (host memory) while it waits: without this, a plugin could leave one behind
    /// per call, without bound.
    lingering: HashMap<TaskGroupId, (Instant, OwnedSemaphorePermit)>,
}

/// The CPU time of one call's code (and of what it leaves running), counted into its request's
/// counter (`crate::cpu`): the thread's CPU clock read when the loop switches to the call's
/// code and away from it.
struct CpuMeter {
    spent: Arc<AtomicU64>,
    /// The thread's CPU clock when the call's code was entered, while it runs.
    since: Option<Duration>,
}

impl CpuMeter {
    fn stop(&mut self) {
        if let (Some(since), Some(now)) = (self.since.take(), crate::cpu::thread_cpu()) {
            crate::cpu::charge(&self.spent, now.saturating_sub(since));
        }
    }
}

impl GroupClock {
    /// The event loop is polled (`running`) or returns from a poll: the CPU meter of the group
    /// whose code runs is started or stopped. A thread's CPU clock compares only with itself,
    /// and the loop may be polled on another thread each time; and code that runs on (it
    /// yields at each epoch tick without leaving its group) is counted at each of those
    /// returns, not only when it switches away.
    pub(super) fn polled(clock: &Mutex<Self>, running: bool) {
        let mut clock = clock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some((group, _)) = clock.current else {
            return;
        };
        if let Some(meter) = clock.cpu.get_mut(&group) {
            if running {
                meter.since = crate::cpu::thread_cpu();
            } else {
                meter.stop();
            }
        }
    }

    /// Why the instance must end, if work a call left behind outlived its grace.
    fn overdue(&self) -> Option<String> {
        let now = Instant::now();
        let overdue = self.lingering.values().any(|(until, _)| *until <= now);
        overdue.then(|| {
            format!(
                "a call returned but left work in the instance that had not finished \
                 {CANCEL_GRACE:?} later (a call's work may not outlive it)"
            )
        })
    }

    /// How long `group` has run code, the run going on included.
    fn ran(&self, group: TaskGroupId) -> Duration {
        let before = self.ran.get(&group).copied().unwrap_or_default();
        match self.current {
            Some((current, since)) if current == group => before + since.elapsed(),
            _ => before,
        }
    }
}

/// What one call of a 1.0.0 instance keeps of its own.
pub(crate) struct CallState {
    id: u64,
    pub(crate) deadline: Instant,
    /// Its time limit: how long it may run code (its deadline moves with the time it waits
    /// for answers; its running time does not).
    limit: Duration,
    /// Whether its caller gave up on it (its deadline is then final).
    abandoned: bool,
    /// Whether it was its caller who gave up first (not its running out of time): code it
    /// then runs past its grace ends the instance without counting as the plugin's failure.
    by_caller: bool,
    pub(crate) reports: CallReports,
    pub(crate) questions: Questions,
    #[cfg(feature = "wasi-http")]
    pub(crate) http_gate: super::super::http::HttpGate,
    cancelled: watch::Sender<bool>,
    /// Where it says it becomes a task (`host.start-task`), if it may.
    handoff: Option<crate::task::Handoff>,
    /// The list it reads, if it is the plugin's list of resources or prompts: that list's
    /// change said by its own reading is the list being read (see `list_changed`).
    reads: Option<Listing>,
    /// Whether it said the plugin's resources and prompts changed: once (the session reads
    /// the list again), or again since (read again once more when the call ends).
    said_changed: [Said; 2],
}

/// Whether a call said a list of its plugin changed, and how often.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Said {
    #[default]
    Nothing,
    Once,
    Again,
}

/// The place of `which` in [`CallState::said_changed`].
fn said_index(which: Listing) -> usize {
    match which {
        Listing::Resources => 0,
        Listing::Prompts => 1,
    }
}

impl Calls {
    /// The calls of a new instance, with the hook that keeps `current` up to date.
    pub(crate) fn new() -> (Self, GroupHook) {
        let clock = Arc::new(Mutex::new(GroupClock::default()));
        (
            Self {
                clock: Arc::clone(&clock),
                by_group: HashMap::default(),
                groups: HashMap::default(),
                displaced: HashMap::default(),
                abandoned_early: HashSet::default(),
                received: HashSet::default(),
                timed_out: None,
            },
            GroupHook(clock),
        )
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, GroupClock> {
        self.clock
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn current_group(&self) -> Option<TaskGroupId> {
        self.clock().current.map(|(group, _)| group)
    }

    /// The call running now, if code is running for a call.
    pub(crate) fn running(&mut self) -> Option<&mut CallState> {
        let group = self.current_group()?;
        self.by_group.get_mut(&group)
    }
}

/// Tells [`Calls`] which task group runs and for how long (wasmtime calls it on every
/// switch).
pub(crate) struct GroupHook(Arc<Mutex<GroupClock>>);

impl GroupHook {
    fn clock(&self) -> std::sync::MutexGuard<'_, GroupClock> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl TaskGroupHook for GroupHook {
    fn handle_start(&mut self, id: TaskGroupId) -> wasmtime::Result<()> {
        self.clock().live.insert(id);
        Ok(())
    }

    fn handle_enter(&mut self, id: TaskGroupId) -> wasmtime::Result<()> {
        let mut clock = self.clock();
        // A group entered while another had not left (suspended in its code): what ran from
        // here on is the new one's.
        if let Some((previous, _)) = clock.current
            && previous != id
            && let Some(meter) = clock.cpu.get_mut(&previous)
        {
            meter.stop();
        }
        clock.current = Some((id, Instant::now()));
        if let Some(meter) = clock.cpu.get_mut(&id) {
            meter.since = crate::cpu::thread_cpu();
        }
        Ok(())
    }

    fn handle_exit(&mut self, id: TaskGroupId) -> wasmtime::Result<()> {
        let mut clock = self.clock();
        if let Some((current, since)) = clock.current
            && current == id
        {
            clock.current = None;
            *clock.ran.entry(id).or_default() += since.elapsed();
        }
        if let Some(meter) = clock.cpu.get_mut(&id) {
            meter.stop();
        }
        Ok(())
    }

    fn handle_finish(&mut self, id: TaskGroupId) -> wasmtime::Result<()> {
        // The id may be given to another call from now on.
        let mut clock = self.clock();
        clock.live.remove(&id);
        // A call that returned before its group finished gives its place back now.
        clock.lingering.remove(&id);
        clock.ran.remove(&id);
        clock.ended.remove(&id);
        if let Some(mut meter) = clock.cpu.remove(&id) {
            meter.stop();
        }
        Ok(())
    }
}

impl PluginState {
    fn calls_mut(&mut self) -> Option<&mut Calls> {
        self.calls.as_deref_mut()
    }

    /// The reports of the call running now: the instance's own for an older contract (one
    /// call at a time), none for 1.0.0 code running for no call.
    fn concurrent_reports(&mut self) -> Option<&mut CallReports> {
        self.calls_mut()?.running().map(|call| &mut call.reports)
    }

    /// Whether the code running now may go on (the epoch check asks on every tick).
    ///
    /// A call's limit is twofold: its deadline, moved by the time it waited for answers (once
    /// for questions open together), and the time it ran code, which no wait moves (a call may
    /// run while its question waits). A call found running past its deadline with running
    /// time left (it waited, for a response or a timer, and woke late) is cancelled here as
    /// its caller would cancel it ([`Self::abandon`]): it goes on, with [`CANCEL_GRACE`] (at
    /// most what is left of its running time) to see the cancellation and return, and ends
    /// alone. Code that runs past its running time ([`RUN_SLACK`] included), or an abandoned
    /// call's code past its grace, ends the instance. Code a call left running after it ended
    /// has [`CANCEL_GRACE`] from the end; code of no call at all, the instance's deadline (its
    /// start's).
    pub(crate) fn in_time(&mut self) -> bool {
        let now = Instant::now();
        let deadline = self.deadline;
        let Some(calls) = self.calls.as_deref_mut() else {
            return now < deadline;
        };
        let clock = calls.clock();
        let Some((group, _)) = clock.current else {
            return now < deadline;
        };
        let ran = clock.ran(group);
        let ended = clock.ended.get(&group).copied();
        drop(clock);
        let Some(call) = calls.by_group.get_mut(&group) else {
            return now < ended.unwrap_or(deadline);
        };
        if call.abandoned {
            return now < call.deadline;
        }
        let running_left = (call.limit + RUN_SLACK).saturating_sub(ran);
        if running_left.is_zero() {
            return false;
        }
        if now >= call.deadline + call.questions.waited.get() {
            let id = call.id;
            self.abandon_with(id, CANCEL_GRACE.min(running_left), false);
        }
        true
    }

    /// The epoch check found the code running now out of time: remember whose call it was.
    pub(crate) fn note_timed_out(&mut self) {
        if let Some(calls) = self.calls_mut() {
            let id = calls.running().map(|call| call.id);
            calls.timed_out = id;
        }
    }

    fn begin_concurrent_call(&mut self, group: TaskGroupId, setup: CallSetup) {
        let CallSetup {
            id,
            label,
            scope,
            deadline,
            limit,
            sink,
            handler,
            waited,
            handoff,
            spent,
        } = setup;
        let mut reports = CallReports::new(&self.plugin);
        reports.begin(Some(Arc::clone(&label)), sink);
        let mut questions = Questions::waiting_on(&self.plugin, &self.client_policy, waited);
        questions.begin_with(Some(&label), handler);
        let reads = match &scope {
            Scope::Request(Request::Resources) => Some(Listing::Resources),
            Scope::Request(Request::Prompts) => Some(Listing::Prompts),
            _ => None,
        };
        let scope = match &scope {
            Scope::Tool => HttpScope::Tool(&label),
            Scope::Request(request) => Subject::Request(request).http_scope(),
        };
        // Its requests end when its caller gives up on it (it is abandoned), not before: a
        // request failing at the deadline would wake the call to run past it.
        #[cfg(feature = "wasi-http")]
        let http_gate = self.http_gate.for_call(
            deadline + super::TIMEOUT_GRACE + CANCEL_GRACE,
            Arc::clone(&questions.waited),
            scope,
        );
        #[cfg(not(feature = "wasi-http"))]
        let _ = scope;
        let Some(calls) = self.calls_mut() else {
            return;
        };
        calls.groups.insert(id, group);
        if let Some(spent) = spent {
            calls
                .clock()
                .cpu
                .insert(group, CpuMeter { spent, since: None });
        }
        let displaced = calls.by_group.insert(
            group,
            CallState {
                id,
                deadline,
                limit,
                abandoned: false,
                by_caller: false,
                reports,
                questions,
                #[cfg(feature = "wasi-http")]
                http_gate,
                cancelled: watch::Sender::new(false),
                handoff,
                reads,
                said_changed: [Said::Nothing; 2],
            },
        );
        if let Some(ended) = displaced.filter(|ended| ended.id != id) {
            calls.displaced.insert(ended.id, ended);
        }
        // Given up on before it started: it starts cancelled.
        if calls.abandoned_early.remove(&id) {
            self.abandon(id);
        }
    }

    /// The call `id` returned (or failed): pass on its output, end its reports and requests;
    /// returns its stderr, for quoting in an error, whether it had been abandoned (its caller
    /// gave up on it, or its time ran out), and whether it left work behind. `permit`, its place among the instance's calls, is given back once its
    /// group has finished.
    fn end_concurrent_call(
        &mut self,
        id: u64,
        permit: OwnedSemaphorePermit,
    ) -> (String, bool, bool) {
        let mut lingering = false;
        let call = self.calls_mut().and_then(|calls| {
            calls.abandoned_early.remove(&id);
            calls.received.remove(&id);
            let group = calls.groups.remove(&id)?;
            // Its group finished and went to a new call already: its own state was kept apart
            // (nothing of it lingers: its group finished).
            if let Some(call) = calls.displaced.remove(&id) {
                return Some(call);
            }
            // Its group's state, if it is still this call's: a sibling's state is never ended
            // for it.
            if calls.by_group.get(&group).is_none_or(|call| call.id != id) {
                return None;
            }
            // What it left running or waiting has a short while to finish, and keeps the
            // call's place meanwhile.
            let until = Instant::now() + CANCEL_GRACE;
            let mut clock = calls.clock();
            if clock.live.contains(&group) {
                clock.ended.insert(group, until);
                clock.lingering.insert(group, (until, permit));
                lingering = true;
            }
            drop(clock);
            calls.by_group.remove(&group)
        });
        let Some(mut call) = call else {
            return (String::new(), false, lingering);
        };
        // stdout and stderr are the instance's: what is buffered goes to the call that ends
        // (a sibling running at once, of the same session and client, may have written some).
        let stderr = self.output.drain_into(&mut call.reports);
        call.reports.end();
        call.questions.end();
        for which in [Listing::Resources, Listing::Prompts] {
            if call.said_changed[said_index(which)] == Said::Again {
                self.mark_changed(which);
            }
        }
        (stderr, call.abandoned, lingering)
    }

    /// The session is to read the plugin's list `which` again at its next list request.
    fn mark_changed(&self, which: Listing) {
        if let Some(changed) = &self.changed {
            let flag = match which {
                Listing::Resources => &changed.resources,
                Listing::Prompts => &changed.prompts,
            };
            flag.store(true, Ordering::Release);
        }
    }

    /// The loop received the call `id`.
    fn received(&mut self, id: u64) {
        if let Some(calls) = self.calls_mut() {
            calls.received.insert(id);
        }
    }

    /// The earliest instant by which work a call left behind must have finished, if any was.
    fn next_lingering_deadline(&self) -> Option<Instant> {
        let calls = self.calls.as_deref()?;
        calls
            .clock()
            .lingering
            .values()
            .map(|(until, _)| *until)
            .min()
    }

    /// Why the instance must end, if work a call left behind outlived its grace.
    fn overdue(&self) -> Option<String> {
        let calls = self.calls.as_deref()?;
        calls.clock().overdue()
    }

    /// The caller of `id` gave up on it: it is told to stop (`host.cancelled`), its requests
    /// end, it may ask nothing more, and it has [`CANCEL_GRACE`] of running time to return.
    fn abandon(&mut self, id: u64) {
        self.abandon_with(id, CANCEL_GRACE, true);
    }

    /// Abandons the call `id`, which then has `grace` to return; a call abandoned already
    /// keeps the grace it was given.
    fn abandon_with(&mut self, id: u64, grace: Duration, by_caller: bool) {
        let Some(calls) = self.calls_mut() else {
            return;
        };
        // The group's state, if it is still this call's (wasmtime hands a finished group's id
        // to the next call); else its own, kept apart.
        let in_group = calls
            .groups
            .get(&id)
            .and_then(|group| calls.by_group.get(group))
            .is_some_and(|call| call.id == id);
        let call = if in_group {
            calls
                .groups
                .get(&id)
                .and_then(|group| calls.by_group.get_mut(group))
        } else {
            calls.displaced.get_mut(&id)
        };
        let Some(call) = call else {
            // Not started yet: it starts cancelled. (Ended already: nothing to do.)
            if calls.received.contains(&id) {
                calls.abandoned_early.insert(id);
            }
            return;
        };
        if call.abandoned {
            return;
        }
        call.deadline = Instant::now() + grace;
        call.abandoned = true;
        call.by_caller = by_caller;
        call.cancelled.send_replace(true);
        call.reports.end();
        call.questions.end();
        #[cfg(feature = "wasi-http")]
        call.http_gate.end_call();
    }
}

/// Where the host imports of 1.0.0 that wait (the questions, `cancelled`) find the store.
pub(crate) struct Concurrent;

impl HasData for Concurrent {
    type Data<'a> = &'a mut PluginState;
}

/// The host interface of contract 1.0.0: as 0.3.0's, for the call that runs now.
impl v10::llm_worker::tool::host::Host for PluginState {
    fn log(&mut self, level: WitLevel, message: String) {
        let level = match level {
            WitLevel::Trace => LogLevel::Trace,
            WitLevel::Debug => LogLevel::Debug,
            WitLevel::Info => LogLevel::Info,
            WitLevel::Warn => LogLevel::Warn,
            WitLevel::Error => LogLevel::Error,
        };
        if let Some(reports) = self.concurrent_reports() {
            reports.log(level, message);
        }
    }

    fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        if let Some(reports) = self.concurrent_reports() {
            reports.progress(done, total, message);
        }
    }

    fn resource_updated(&mut self, uri: String) {
        if let Some(reports) = self.concurrent_reports() {
            reports.notice(ToolEventKind::ResourceUpdated { uri });
        }
    }

    fn start_task(&mut self) {
        if let Some(handoff) = self
            .calls_mut()
            .and_then(Calls::running)
            .filter(|call| !call.abandoned)
            .and_then(|call| call.handoff.as_ref())
        {
            handoff.start();
        }
    }

    fn list_changed(&mut self, which: WitListing) {
        let which = match which {
            WitListing::Resources => Listing::Resources,
            WitListing::Prompts => Listing::Prompts,
        };
        // Only a call may say so: code left running by a call that ended reaches no session.
        // Said by the code reading that very list, it is the list being read: taken as a
        // change, every request would read the list again, running the plugin each time.
        // A call its caller gave up (its reports ended) says nothing more either.
        let Some(call) = self
            .calls_mut()
            .and_then(Calls::running)
            .filter(|call| !call.abandoned)
        else {
            return;
        };
        if call.reads == Some(which) {
            return;
        }
        // Said again by a call still running (a task, a call awaiting a timer): the list is
        // read again once more when the call ends, not at every list request meanwhile, each
        // of which would run the plugin's code while the call goes on saying it.
        let said = &mut call.said_changed[said_index(which)];
        if *said != Said::Nothing {
            *said = Said::Again;
            return;
        }
        *said = Said::Once;
        call.reports.notice(ToolEventKind::ListChanged(which));
        self.mark_changed(which);
    }
}

impl v10::llm_worker::tool::host::HostWithStore<PluginState> for Concurrent {
    async fn cancelled(accessor: &Accessor<PluginState, Self>) {
        let signal = accessor.with(|mut access| {
            access
                .get()
                .calls_mut()
                .and_then(Calls::running)
                .map(|call| call.cancelled.subscribe())
        });
        // Code running for no call has nothing to wait for: it is told to stop at once.
        if let Some(mut signal) = signal {
            let _ = signal.wait_for(|cancelled| *cancelled).await;
        }
    }
}

impl v10::llm_worker::tool::types::Host for PluginState {}
impl v10::llm_worker::tool::client::Host for PluginState {}

/// Asks a question for the call running now, waiting for the answer while the instance runs
/// its other calls; the call's deadline moves by the time waited.
async fn ask<T, F, Fut>(
    accessor: &Accessor<PluginState, Concurrent>,
    key: &str,
    kind: Kind,
    question_bytes: usize,
    ask: F,
    answer_bytes: impl Fn(&T) -> usize + Send + 'static,
) -> Result<T, QuestionError>
where
    T: Send + 'static,
    F: FnOnce(Arc<dyn QuestionHandler>, question::Asker) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, QuestionError>> + Send + 'static,
{
    let admitted = accessor.with(|mut access| {
        let state = access.get();
        let plugin = state.plugin.clone();
        let Some(calls) = state.calls_mut() else {
            return Err(no_call(&plugin));
        };
        let Some(group) = calls.current_group() else {
            return Err(no_call(&plugin));
        };
        let Some(call) = calls.by_group.get_mut(&group) else {
            return Err(no_call(&plugin));
        };
        Ok((
            (plugin, call.cancelled.subscribe()),
            call.questions.admit_question(key, kind, question_bytes)?,
        ))
    });
    let ((plugin, mut ended), admitted) = admitted?;
    // The call's deadline moves by the time its questions waited (its `Waited`, which the
    // epoch check and its caller's timer both read).
    let asking = admitted.wait(ask, answer_bytes);
    // Asked from a task of its own: the loop runs in whichever task polls it (another call's
    // caller, see `driver`), whose task-locals must not reach the question (rmcp sends a
    // request on the stream of the request its task serves, and judges it by that request's
    // protocol revision). Dropped (the call ended), the task is aborted, which withdraws the
    // question at the client.
    let asking = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => futures::future::Either::Left(SpawnedQuestion {
            task: runtime.spawn(asking),
            plugin: Arc::clone(&plugin),
        }),
        // Polled outside a runtime (an embedder's own executor): asked in place.
        Err(_) => futures::future::Either::Right(asking),
    };
    // A question lives no longer than its call: one the guest left waiting when the call
    // returned (or its caller gave up on it) is withdrawn, not left open at the client.
    tokio::select! {
        // An answer that came is taken, even if the call ended meanwhile.
        biased;
        (_, answer) = asking => answer,
        _ = ended.wait_for(|cancelled| *cancelled) => Err(QuestionError::Failed(format!(
            "plugin '{plugin}': the call that asked this question ended (it returned, or its \
             caller gave up on it); the question was withdrawn"
        ))),
    }
}

/// A question asked from a task of its own (see `ask`) by `plugin`, aborted when dropped.
struct SpawnedQuestion<T> {
    task: tokio::task::JoinHandle<(Duration, Result<T, QuestionError>)>,
    plugin: Arc<str>,
}

impl<T> std::future::Future for SpawnedQuestion<T> {
    type Output = (Duration, Result<T, QuestionError>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let plugin = Arc::clone(&self.plugin);
        std::pin::Pin::new(&mut self.task).poll(cx).map(|joined| {
            joined.unwrap_or_else(|error| {
                (
                    Duration::ZERO,
                    Err(QuestionError::Failed(format!(
                        "plugin '{plugin}': the host's task asking the client ended without an \
                         answer ({error}); ask again"
                    ))),
                )
            })
        })
    }
}

impl<T> Drop for SpawnedQuestion<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn no_call(plugin: &str) -> QuestionError {
    QuestionError::Unsupported(format!(
        "plugin '{plugin}' asked the client a question outside any call (from work a call \
         left running after it returned, or while starting); ask from within a call"
    ))
}

impl v10::llm_worker::tool::client::HostWithStore<PluginState> for Concurrent {
    async fn elicit(
        accessor: &Accessor<PluginState, Self>,
        key: String,
        message: String,
        requested_schema: String,
    ) -> Result<WitElicitation, WitQuestionError> {
        let max = accessor.with(|mut access| access.get().client_policy.max_question_bytes);
        let (form, bytes) = super::ask::elicitation(&message, &requested_schema, max);
        let answer = ask(
            accessor,
            &key,
            Kind::Elicitation,
            bytes,
            |handler, asker| super::ask::elicit(handler, asker, message, form),
            question::cost::elicitation_answer,
        )
        .await?;
        Ok(answer.into())
    }

    async fn sample(
        accessor: &Accessor<PluginState, Self>,
        key: String,
        request: WitSamplingRequest,
    ) -> Result<WitSamplingAnswer, WitQuestionError> {
        let request: crate::tool::SamplingRequest = request.into();
        let bytes = question::cost::sampling(&request);
        let answer = ask(
            accessor,
            &key,
            Kind::Sampling,
            bytes,
            |handler, asker| super::ask::sample(handler, asker, request),
            question::cost::sampling_answer,
        )
        .await?;
        Ok(answer.into())
    }

    async fn roots(
        accessor: &Accessor<PluginState, Self>,
        key: String,
    ) -> Result<Vec<WitRoot>, WitQuestionError> {
        let roots = ask(
            accessor,
            &key,
            Kind::Roots,
            question::cost::roots_question(),
            super::ask::roots,
            |roots| question::cost::roots_answer(roots),
        )
        .await?;
        Ok(roots.into_iter().map(Into::into).collect())
    }
}

/// What a 1.0.0 instance is asked to do, owned (it crosses to the event loop's task).
pub(crate) enum OwnedWork {
    /// Run the tool (the call's label) with this input.
    Execute(String),
    Request(Request),
}

/// What runs, as far as its HTTP grants go.
enum Scope {
    Tool,
    Request(Request),
}

/// What a call's state is made of, sent with it to the event loop.
struct CallSetup {
    id: u64,
    label: Arc<str>,
    scope: Scope,
    deadline: Instant,
    limit: Duration,
    sink: Option<Sink>,
    handler: Option<Arc<dyn QuestionHandler>>,
    waited: Arc<Waited>,
    handoff: Option<crate::task::Handoff>,
    /// Where its CPU time is counted, if its request measures it.
    spent: Option<Arc<AtomicU64>>,
}

/// One call for the event loop.
struct Job {
    setup: CallSetup,
    work: OwnedWork,
    reply: oneshot::Sender<Finished>,
    /// Its place among the calls the instance may run at once, held until it returns.
    permit: OwnedSemaphorePermit,
    /// Set when it returned (whether or not anyone still waits for it).
    returned: Arc<AtomicBool>,
}

/// How a call ended in the instance.
struct Finished {
    result: wasmtime::Result<Done>,
    stderr: String,
    /// It had been abandoned: its time ran out (what it returned is dropped).
    abandoned: bool,
    /// Whether it left work behind in the instance (which must finish within its grace).
    lingering: bool,
}

enum Message {
    Run(Box<Job>),
    Abandon(u64),
}

/// Why an instance's event loop ended.
#[derive(Clone, Debug)]
pub(crate) struct Death {
    /// What happened, as a [`super::describe`]d failure.
    pub(crate) reason: String,
    /// The call whose time ran out while it ran code, if that was the cause.
    pub(crate) culprit: Option<u64>,
    /// Whether the host lacked capacity (its instance pool's stacks ran out): not the
    /// plugin's failure.
    pub(crate) host_capacity: bool,
    /// Whether it was ended because a call its caller gave up did not return in time: not
    /// counted as the plugin's failure (as a dropped call of contracts 0.x is not), unless the
    /// call had run out of its own time first.
    pub(crate) caller_gave_up: bool,
}

/// A running 1.0.0 instance, as its session holds it: the way to its event loop.
pub(crate) struct Concurrency {
    tx: mpsc::UnboundedSender<Message>,
    permits: Arc<Semaphore>,
    death: watch::Receiver<Option<Death>>,
    kill: watch::Sender<Option<Death>>,
    /// The event loop, polled by a caller that finds it idle or by the instance's task.
    driver: Arc<super::driver::Driver>,
    /// The instance's task.
    task: tokio::task::AbortHandle,
    next_id: AtomicU64,
    /// Whether the instance's end was counted as a failure (once, whoever sees it first).
    pub(crate) counted: AtomicBool,
    max_calls: usize,
    /// The instance's clock, for the watch on work left behind (weak: the store owns it, and
    /// the places that work holds are given back when the store is dropped).
    clock: Option<std::sync::Weak<Mutex<GroupClock>>>,
    /// Whether the watch on work left behind runs ([`Self::watch_lingering`]).
    watching: AtomicBool,
}

impl Drop for Concurrency {
    fn drop(&mut self) {
        self.driver.abort();
        self.task.abort();
    }
}

/// What a caller gets back.
pub(crate) enum Outcome {
    /// The call returned (or trapped, ending the instance).
    Returned {
        result: wasmtime::Result<Done>,
        stderr: String,
    },
    /// The instance ended while the call was in it: the call or another trapped or ran out of
    /// time while running code, or a cancelled call would not end. `mine`: the call itself
    /// ran out of time.
    Lost { death: Death, mine: bool },
    /// The call ran out of time while it awaited: it was cancelled, and the instance goes on.
    /// `queued`: how long it waited for a place among the instance's calls, if it did.
    TimedOut { queued: Option<Duration> },
    /// No place among the instance's calls came free within the call's time limit.
    Busy,
}

impl Concurrency {
    /// Starts the event loop of a new instance on the runtime, serving at most `max_calls` at
    /// once.
    pub(crate) fn start(
        store: Store<PluginState>,
        bindings: v10::ToolPlugin,
        max_calls: usize,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (kill, death) = watch::channel(None);
        let clock = store
            .data()
            .calls
            .as_deref()
            .map(|calls| Arc::clone(&calls.clock));
        let watched = clock.as_ref().map(Arc::downgrade);
        let driver =
            super::driver::Driver::new(Box::pin(serve(store, bindings, rx)), clock, kill.clone());
        let task = tokio::spawn(Arc::clone(&driver).run()).abort_handle();
        Self {
            tx,
            permits: Arc::new(Semaphore::new(max_calls)),
            death,
            kill,
            driver,
            task,
            next_id: AtomicU64::new(0),
            counted: AtomicBool::new(false),
            max_calls,
            clock: watched,
            watching: AtomicBool::new(false),
        }
    }

    /// Work a call left behind must finish within its grace. The event loop checks that
    /// itself, but cannot while guest code blocks it (a WASI 0.2 import such as
    /// `pollable.block` suspends the store's fiber without returning to the loop): this watch,
    /// outside the loop, ends the instance if such work is still there a moment after its
    /// time. One watch per instance, while any work lingers.
    fn watch_lingering(self: &Arc<Self>) {
        let Some(clock) = self.clock.clone() else {
            return;
        };
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.watching.store(false, Ordering::Release);
            return;
        };
        let instance = Arc::downgrade(self);
        let lock = |clock: &Mutex<GroupClock>| {
            let clock = clock
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            (
                clock.lingering.values().map(|(until, _)| *until).min(),
                clock.overdue(),
            )
        };
        runtime.spawn(async move {
            loop {
                // The store gone, the instance is: nothing to watch.
                let Some((next, _)) = clock.upgrade().map(|clock| lock(&clock)) else {
                    return;
                };
                let Some(until) = next else {
                    let Some(instance) = instance.upgrade() else {
                        return;
                    };
                    instance.watching.store(false, Ordering::Release);
                    // Work left behind since the look above started no watch (this one was
                    // on): look again.
                    let again = clock
                        .upgrade()
                        .is_some_and(|clock| lock(&clock).0.is_some());
                    if again && !instance.watching.swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    return;
                };
                // After the loop's own check, which ends the instance first when it can run.
                let at = tokio::time::Instant::from_std(until + LINGER_SLACK);
                tokio::time::sleep_until(at).await;
                let Some((_, overdue)) = clock.upgrade().map(|clock| lock(&clock)) else {
                    return;
                };
                if let Some(reason) = overdue {
                    if let Some(instance) = instance.upgrade() {
                        instance.kill(reason, false);
                    }
                    return;
                }
            }
        });
    }

    /// Why the instance ended, if it did.
    pub(crate) fn dead(&self) -> Option<Death> {
        self.death.borrow().clone()
    }

    /// Ends the instance now, every call in it with it.
    fn kill(&self, reason: String, caller_gave_up: bool) {
        self.kill.send_if_modified(|death| {
            if death.is_some() {
                return false;
            }
            *death = Some(Death {
                reason,
                culprit: None,
                host_capacity: false,
                caller_gave_up,
            });
            true
        });
        self.driver.abort();
        self.task.abort();
    }

    /// Runs `work` in the instance by `deadline` (which moves with the time its questions
    /// wait). `label` is the tool's name or the request's label.
    pub(crate) async fn call(
        self: &Arc<Self>,
        label: &Arc<str>,
        work: OwnedWork,
        deadline: Instant,
        wait: bool,
        subject: &(dyn std::fmt::Display + Sync),
    ) -> Outcome {
        let arrived = Instant::now();
        let (permit, queued) = match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(permit) => (permit, None),
            Err(_) if !wait => return Outcome::Busy,
            Err(_) => {
                match super::within(deadline, Arc::clone(&self.permits).acquire_owned()).await {
                    Ok(Ok(permit)) => (permit, Some(arrived.elapsed())),
                    Ok(Err(_)) | Err(_) => return Outcome::Busy,
                }
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let waited = Arc::new(Waited::default());
        let (reply, mut answer) = oneshot::channel();
        let returned = Arc::new(AtomicBool::new(false));
        // Where the call's CPU time is counted, if its request measures it.
        let spent = crate::cpu::current();
        let measured = spent.is_some();
        let scope = match &work {
            OwnedWork::Execute(_) => Scope::Tool,
            OwnedWork::Request(request) => Scope::Request(request.clone()),
        };
        let job = Job {
            setup: CallSetup {
                id,
                label: Arc::clone(label),
                scope,
                deadline,
                limit: deadline.saturating_duration_since(Instant::now()),
                sink: crate::events::current_sink(),
                handler: question::current_handler(),
                waited: Arc::clone(&waited),
                handoff: crate::task::Handoff::current(),
                spent,
            },
            work,
            reply,
            permit,
            returned: Arc::clone(&returned),
        };
        // Found idle, the loop is polled by this caller (see `driver`): taken before the call
        // is sent, so that sending it wakes no other task.
        let polling = self.driver.acquire();
        if self.tx.send(Message::Run(Box::new(job))).is_err() {
            drop(polling);
            return self.lost(id).await;
        }
        // Dropped by its caller (or out of time) before it returned: abandoned.
        let mut abandon = AbandonOnDrop {
            instance: Some(Arc::clone(self)),
            id,
            returned,
            subject,
            timed_out: false,
        };
        let quick = polling.and_then(|polling| drive_quickly(polling, &mut answer, measured));
        let answered = match quick {
            Some(answered) => Ok(answered),
            None => super::within_moving(deadline + super::TIMEOUT_GRACE, &waited, answer)
                .await
                .map(Result::ok),
        };
        match answered {
            // Its time ran out while it waited, and it returned after the loop cancelled it,
            // before its caller's timer did.
            Ok(Some(Finished {
                abandoned: true,
                lingering,
                ..
            })) => {
                abandon.instance = None;
                if lingering {
                    self.watch_lingering();
                }
                Outcome::TimedOut { queued }
            }
            Ok(Some(Finished {
                result,
                stderr,
                abandoned: false,
                lingering,
            })) => {
                abandon.instance = None;
                if lingering {
                    self.watch_lingering();
                }
                Outcome::Returned { result, stderr }
            }
            Ok(None) => {
                abandon.instance = None;
                self.lost(id).await
            }
            Err(TimedOut) => {
                abandon.timed_out = true;
                Outcome::TimedOut { queued }
            }
        }
    }

    async fn lost(&self, id: u64) -> Outcome {
        let death = self.wait_for_death().await;
        let mine = death.culprit == Some(id);
        Outcome::Lost { death, mine }
    }

    async fn wait_for_death(&self) -> Death {
        let mut death = self.death.clone();
        match death.wait_for(Option::is_some).await {
            Ok(death) => death.clone().unwrap_or_else(unknown_death),
            Err(_) => unknown_death(),
        }
    }

    /// The most calls the instance runs at once.
    pub(crate) fn max_calls(&self) -> usize {
        self.max_calls
    }
}

/// How many times a caller that found the loop idle polls it, at most, while the loop is woken
/// again and the call has not returned (wasmtime's concurrent call may take a few turns of the
/// loop; a warm call returns in one almost always); then the instance's task goes on with it.
const QUICK_POLLS: usize = 4;

/// How long a caller that found the loop idle goes on polling it, at most: the loop may be
/// running a sibling's code (each poll up to an epoch tick), and the caller's own timers and
/// cancellation are not looked at meanwhile.
const QUICK_FOR: Duration = Duration::from_millis(1);

/// Polls the loop for a call just sent to it until the call returns, the loop waits,
/// [`QUICK_POLLS`] polls were made or [`QUICK_FOR`] has passed; hands the loop back. What the
/// call came to if it came (`None` inside: the loop ended without answering it). With
/// `measured`, the loop's CPU time is left out of the caller's own measurement: the loop
/// charges each call its own.
fn drive_quickly(
    mut polling: super::driver::Polling<'_>,
    answer: &mut oneshot::Receiver<Finished>,
    measured: bool,
) -> Option<Option<Finished>> {
    let started = Instant::now();
    for _ in 0..QUICK_POLLS {
        let step = if measured {
            crate::cpu::excluded(|| polling.poll())
        } else {
            polling.poll()
        };
        match answer.try_recv() {
            Ok(finished) => return Some(Some(finished)),
            Err(oneshot::error::TryRecvError::Closed) => return Some(None),
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        if step != (super::driver::Step::Pending { again: true }) || started.elapsed() >= QUICK_FOR
        {
            break;
        }
    }
    None
}

fn unknown_death() -> Death {
    Death {
        reason: "its instance ended".into(),
        culprit: None,
        host_capacity: false,
        caller_gave_up: false,
    }
}

/// Abandons a call its caller no longer waits for, and tears the instance down if the call
/// does not return within [`CANCEL_GRACE`].
struct AbandonOnDrop<'a> {
    instance: Option<Arc<Concurrency>>,
    id: u64,
    returned: Arc<AtomicBool>,
    /// What the call was (written out only if it is abandoned).
    subject: &'a (dyn std::fmt::Display + Sync),
    /// Whether its time ran out (else its caller dropped it).
    timed_out: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        let Some(instance) = self.instance.take() else {
            return;
        };
        if self.returned.load(Ordering::Acquire) {
            // It returned as its caller let go: what it left behind has no caller to see to.
            instance.watch_lingering();
            return;
        }
        let _ = instance.tx.send(Message::Abandon(self.id));
        if !self.timed_out {
            tracing::info!(
                "a call was dropped by its caller ({}); it was cancelled, and the instance goes on",
                self.subject
            );
        }
        let returned = Arc::clone(&self.returned);
        let subject = self.subject.to_string();
        let caller_gave_up = !self.timed_out;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Holds the instance weakly: a session that ends meanwhile ends it anyway.
        let instance = Arc::downgrade(&instance);
        runtime.spawn(async move {
            tokio::time::sleep(CANCEL_GRACE).await;
            let Some(instance) = instance.upgrade() else {
                return;
            };
            if returned.load(Ordering::Acquire) {
                // It returned, maybe leaving work behind, which no caller will see to.
                instance.watch_lingering();
                return;
            }
            instance.kill(
                format!("{subject} was cancelled and did not return within {CANCEL_GRACE:?}"),
                caller_gave_up,
            );
        });
    }
}

/// The event loop: runs the calls it is sent until the session lets go of the instance or
/// the store fails; says why it ended.
async fn serve(
    mut store: Store<PluginState>,
    bindings: v10::ToolPlugin,
    mut rx: mpsc::UnboundedReceiver<Message>,
) -> Death {
    let bindings = &bindings;
    let served = store
        .run_concurrent(async |accessor| {
            let mut running = FuturesUnordered::new();
            loop {
                let lingering =
                    accessor.with(|mut access| access.data_mut().next_lingering_deadline());
                // Made (a timer registered) only when polled, which is only with work lingering.
                let overdue = async {
                    if let Some(until) = lingering {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
                    }
                };
                tokio::select! {
                    // In this order, without drawing a random start each turn: every branch
                    // is polled whenever the ones before it are pending.
                    biased;
                    message = rx.recv() => match message {
                        Some(Message::Run(job)) => {
                            accessor.with(|mut access| access.data_mut().received(job.setup.id));
                            running.push(run(accessor, bindings, *job));
                        }
                        Some(Message::Abandon(id)) => {
                            accessor.with(|mut access| access.data_mut().abandon(id));
                        }
                        None => break None,
                    },
                    Some(()) = running.next(), if !running.is_empty() => {}
                    () = overdue, if lingering.is_some() => {
                        if let Some(reason) = accessor.with(|mut access| access.data_mut().overdue()) {
                            break Some(reason);
                        }
                    }
                }
            }
        })
        .await;
    let calls = store.data_mut().calls.as_deref_mut();
    // Code stopped by a trap was not switched away from: its CPU time is counted now.
    if let Some(calls) = &calls {
        let mut clock = calls.clock();
        if let Some((group, _)) = clock.current
            && let Some(meter) = clock.cpu.get_mut(&group)
        {
            meter.stop();
        }
    }
    let culprit = calls.as_ref().and_then(|calls| calls.timed_out);
    // Code its caller gave up on first, which would not return within its grace, is not the
    // plugin's failure (as the kill from outside, after the same grace, is not).
    let caller_gave_up = calls.as_ref().is_some_and(|calls| {
        culprit
            .and_then(|id| calls.groups.get(&id))
            .and_then(|group| calls.by_group.get(group))
            .is_some_and(|call| call.abandoned && call.by_caller)
    });
    if let Some(calls) = calls {
        calls.timed_out = None;
    }
    let limits = store.data().limits.clone();
    match served {
        Ok(None) => Death {
            reason: "the session ended".into(),
            culprit: None,
            host_capacity: false,
            caller_gave_up: false,
        },
        Ok(Some(reason)) => Death {
            reason,
            culprit: None,
            host_capacity: false,
            caller_gave_up: false,
        },
        Err(error) => Death {
            reason: super::describe(&limits, &error),
            culprit,
            host_capacity: error.is::<wasmtime::PoolConcurrencyLimitError>(),
            caller_gave_up,
        },
    }
}

/// Runs one job in the event loop and answers its caller.
async fn run(accessor: &Accessor<PluginState>, bindings: &v10::ToolPlugin, job: Job) {
    let Job {
        setup,
        work,
        reply,
        permit,
        returned,
    } = job;
    let id = setup.id;
    let result = match work {
        OwnedWork::Execute(input) => {
            let name = setup.label.to_string();
            typed(accessor, bindings.func_execute(), (name, input), setup)
                .await
                .map(|(result,)| Done::Executed(result.map(Into::into).map_err(Into::into)))
        }
        OwnedWork::Request(request) => request_in(accessor, bindings, request, setup).await,
    };
    // What it left behind is recorded before it counts as returned: a watch started when it
    // is seen returned finds that work.
    let (stderr, abandoned, lingering) =
        accessor.with(|mut access| access.data_mut().end_concurrent_call(id, permit));
    returned.store(true, Ordering::Release);
    let _ = reply.send(Finished {
        result,
        stderr,
        abandoned,
        lingering,
    });
}

/// Runs a request other than a tool call.
async fn request_in(
    accessor: &Accessor<PluginState>,
    bindings: &v10::ToolPlugin,
    request: Request,
    setup: CallSetup,
) -> wasmtime::Result<Done> {
    let answered = match request {
        Request::Resources => typed(accessor, bindings.func_resources(), (), setup)
            .await
            .map(|(list,)| {
                Ok(Response::Resources(
                    list.into_iter().map(Into::into).collect(),
                ))
            })?,
        Request::Prompts => typed(accessor, bindings.func_prompts(), (), setup)
            .await
            .map(|(list,)| {
                Ok(Response::Prompts(
                    list.into_iter().map(Into::into).collect(),
                ))
            })?,
        Request::ReadResource(uri) => typed(accessor, bindings.func_read_resource(), (uri,), setup)
            .await?
            .0
            .map(|contents| Response::Contents(contents.into_iter().map(Into::into).collect()))
            .map_err(Into::into),
        Request::GetPrompt(name, arguments) => typed(
            accessor,
            bindings.func_get_prompt(),
            (name, arguments),
            setup,
        )
        .await?
        .0
        .map(|prompt| Response::Prompt(prompt.into()))
        .map_err(Into::into),
        Request::Complete {
            reference,
            argument,
            value,
            context,
        } => typed(
            accessor,
            bindings.func_complete(),
            (reference.into(), argument, value, context),
            setup,
        )
        .await?
        .0
        .map(|completion| Response::Completion(completion.into()))
        .map_err(Into::into),
    };
    Ok(Done::Answered(answered))
}

/// Starts `func` as a guest task with its call's state, and waits for what it returns.
async fn typed<P, R>(
    accessor: &Accessor<PluginState>,
    func: TypedFunc<P, R>,
    params: P,
    setup: CallSetup,
) -> wasmtime::Result<R>
where
    P: ComponentNamedList + Lower + Send + Sync + 'static,
    R: ComponentNamedList + Lift + Send + Sync + 'static,
{
    let call = accessor.with(|mut access| -> wasmtime::Result<_> {
        // A metered instance gets a call's fuel at each call's start (fuel is the instance's:
        // concurrent calls draw on it together).
        let mut store = wasmtime::AsContextMut::as_context_mut(&mut access);
        if store.get_fuel().is_ok() {
            let fuel = store.data().limits.fuel.unwrap_or(u64::MAX);
            let _ = store.set_fuel(fuel);
        }
        let call = func.start_call_concurrent(&mut access, params)?;
        access.data_mut().begin_concurrent_call(call.group(), setup);
        wasmtime::Result::Ok(call)
    })?;
    func.finish_call_concurrent(accessor, call).await
}
