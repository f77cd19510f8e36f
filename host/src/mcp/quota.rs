//! What each identity used of its quota ([`Quota`]): calls started and call time in the last
//! minute, calls running now. One ledger per server, shared by its sessions.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::model::ErrorCode;

use super::access::Quota;

/// The JSON-RPC error code of a request refused by a quota (in the range JSON-RPC leaves to
/// servers).
pub const QUOTA_EXCEEDED: i32 = -32029;

const MINUTE: Duration = Duration::from_secs(60);

/// Most entries kept per identity for the last minute's call time (older ones are merged).
const MAX_BUSY_ENTRIES: usize = 4096;

pub(crate) struct Ledger {
    by_identity: Mutex<HashMap<[u8; 16], Used>>,
    /// How many identities the ledger may hold before the idle ones are forgotten: twice as
    /// many as were left after the last sweep (at least [`SWEEP_FROM`]), so that with many
    /// identities active a sweep is not made on every call (amortised, it costs each call
    /// one identity's look).
    sweep_at: std::sync::atomic::AtomicUsize,
}

/// The fewest identities a ledger sweeps at.
const SWEEP_FROM: usize = 1024;

impl Default for Ledger {
    fn default() -> Self {
        Self {
            by_identity: Mutex::default(),
            sweep_at: SWEEP_FROM.into(),
        }
    }
}

/// CPU time counted at one moment of the last minute: what a running call took since it was
/// last looked at, or, for a call that ended, its counter (less what was counted of it while
/// it ran), read when the quota is checked, so that the time of code the call left running (a
/// call whose caller gave up, until the instance stops it) counts too; and what merged entries
/// took.
struct Busy {
    took: Duration,
    spent: Option<(Arc<std::sync::atomic::AtomicU64>, Duration)>,
}

impl Busy {
    fn total(&self) -> Duration {
        self.took
            + self
                .spent
                .as_ref()
                .map_or(Duration::ZERO, |(spent, counted)| {
                    crate::cpu::spent(spent).saturating_sub(*counted)
                })
    }
}

/// A running call's CPU counter, and how much of it was counted already.
struct Live {
    spent: Arc<std::sync::atomic::AtomicU64>,
    counted: Duration,
}

#[derive(Default)]
struct Used {
    /// When each call of the last minute started (kept only under a `calls_per_minute`).
    started: VecDeque<Instant>,
    running: u32,
    /// Sessions whose instances are starting now (counted in the background): while one is,
    /// another session's are not started at its opening (see [`Kind::Start`]).
    starting: u32,
    /// Requests reading changed lists now (at most one: see [`Kind::Listing`]).
    listing: u32,
    /// The CPU counters of the calls running now, by their number: what they take is counted
    /// as they run (at each check), not only when they end, so that long calls (tasks) that
    /// run for minutes meet the quota while they run.
    live: HashMap<u64, Live>,
    next_live: u64,
    /// CPU time of the last minute: when it was counted, and how much.
    busy: VecDeque<(Instant, Busy)>,
}

impl Used {
    fn forget_before(&mut self, now: Instant) {
        while self
            .started
            .front()
            .is_some_and(|at| now.duration_since(*at) >= MINUTE)
        {
            self.started.pop_front();
        }
        while self
            .busy
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= MINUTE)
        {
            self.busy.pop_front();
        }
    }

    fn is_idle(&self) -> bool {
        self.started.is_empty()
            && self.running == 0
            && self.starting == 0
            && self.listing == 0
            && self.busy.is_empty()
            && self.live.is_empty()
    }

    /// Counts, as of `now`, what the running calls took since they were last looked at.
    fn count_running(&mut self, now: Instant) {
        for live in self.live.values_mut() {
            let spent = crate::cpu::spent(&live.spent);
            let new = spent.saturating_sub(live.counted);
            if !new.is_zero() {
                live.counted = spent;
                self.busy.push_back((
                    now,
                    Busy {
                        took: new,
                        spent: None,
                    },
                ));
            }
        }
        self.merge_oldest();
    }

    /// Keeps at most [`MAX_BUSY_ENTRIES`] entries, the oldest merged into the next.
    fn merge_oldest(&mut self) {
        while self.busy.len() > MAX_BUSY_ENTRIES
            && let Some((_, oldest)) = self.busy.pop_front()
            && let Some(next) = self.busy.front_mut()
        {
            next.1.took += oldest.total();
        }
    }
}

/// A call counted as running until dropped; its CPU time counts from then on (read from its
/// counter at each check, so code it left running counts as it runs).
pub(crate) struct Running {
    ledger: Arc<Ledger>,
    key: [u8; 16],
    /// Its number among the identity's running calls.
    number: u64,
    /// The CPU time of its plugin code so far, in nanoseconds (see `mcp::cpu`).
    spent: Arc<std::sync::atomic::AtomicU64>,
    /// What it counts.
    kind: Kind,
}

/// What a [`Running`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A call (or a read, prompt or completion): a running call, against every quota.
    Call,
    /// A session's instances starting when it opens: against the CPU quota, one session's at
    /// a time (the quota is checked before the work runs: sessions opened at once would
    /// otherwise each start their instances and together overshoot it by as many starts). The
    /// work runs while the count is held ([`starting`]).
    Start,
    /// A request that may read a plugin's changed list of resources or prompts again: against
    /// the CPU quota, one request's at a time (the check is made before the reads run: list
    /// requests sent at once would otherwise each read). Refused, the request serves the lists
    /// as last read.
    Listing,
}

impl Running {
    /// Where the call's CPU time is to be counted.
    pub(crate) fn spent(&self) -> &Arc<std::sync::atomic::AtomicU64> {
        &self.spent
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut all = self.ledger.lock();
        if let Some(used) = all.get_mut(&self.key) {
            match self.kind {
                Kind::Call => used.running = used.running.saturating_sub(1),
                Kind::Start => used.starting = used.starting.saturating_sub(1),
                Kind::Listing => used.listing = used.listing.saturating_sub(1),
            }
            let counted = used
                .live
                .remove(&self.number)
                .map_or(Duration::ZERO, |live| live.counted);
            // A list request that read nothing again (the common case, and free to send)
            // leaves nothing to remember: its entries would push out those of real work.
            if self.kind == Kind::Listing && crate::cpu::spent(&self.spent).is_zero() {
                return;
            }
            used.busy.push_back((
                now,
                Busy {
                    took: Duration::ZERO,
                    spent: Some((Arc::clone(&self.spent), counted)),
                },
            ));
            used.merge_oldest();
        }
    }
}

tokio::task_local! {
    /// The count of the request running now, for work that outlives its request (a call that
    /// goes on as a task) to hold until it ends.
    static HELD: Arc<Running>;
}

tokio::task_local! {
    /// The count of a session's instances starting in the background, which each start task
    /// holds until its start has ended.
    static STARTING: Arc<Running>;
}

/// Runs `start` (which spawns the tasks that start a session's instances) with `running` as
/// the count those tasks hold ([`starting`]).
pub(crate) fn starting_now<T>(running: Arc<Running>, start: impl FnOnce() -> T) -> T {
    STARTING.sync_scope(running, start)
}

/// The count of the instances starting now in the background, for a start task to hold until
/// its start has ended.
pub(crate) fn starting() -> Option<Arc<Running>> {
    STARTING.try_with(Arc::clone).ok()
}

/// Runs `request` with `running` as the count that work going on after it may hold.
pub(crate) fn holding<T>(
    running: Arc<Running>,
    request: impl Future<Output = T>,
) -> impl Future<Output = T> {
    HELD.scope(running, request)
}

/// The count of the request running now, if it is counted: a call that goes on as a task
/// holds it, so that the call counts as running (and its CPU time is counted) until it ends.
pub(crate) fn held() -> Option<Arc<Running>> {
    HELD.try_with(Arc::clone).ok()
}

/// A refusal by a quota, as the JSON-RPC error the client gets.
fn exceeded(who: &str, what: &str, limit: u32, retry: Option<Duration>) -> ErrorData {
    let retry_seconds = retry.map(|retry| retry.as_secs().max(1));
    let mut message = format!("{who} is over its quota of {limit} {what}");
    match retry_seconds {
        Some(seconds) => message.push_str(&format!("; try again in {seconds} s")),
        None => message.push_str("; try again when one of them ends"),
    }
    ErrorData::new(
        ErrorCode(QUOTA_EXCEEDED),
        message,
        Some(serde_json::json!({
            "quota": what,
            "limit": limit,
            "retryAfterSeconds": retry_seconds,
        })),
    )
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 16], Used>> {
        self.by_identity.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a call of the identity `key` (called `who`) under `quota`, its CPU time in
    /// `spent`, or refuses it.
    pub(crate) fn begin(
        self: &Arc<Self>,
        key: [u8; 16],
        who: &str,
        quota: Quota,
        spent: Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<Running, ErrorData> {
        self.begin_as(key, who, quota, spent, Kind::Call)
    }

    /// Counts work of the identity `key` (called `who`) under `quota`, its CPU time in
    /// `spent`, or refuses it: a call against every quota; other work (see [`Kind`]) against
    /// the CPU quota only, refused when that is spent (and instances starting, while others of
    /// the identity's are still starting).
    pub(crate) fn begin_as(
        self: &Arc<Self>,
        key: [u8; 16],
        who: &str,
        quota: Quota,
        spent: Arc<std::sync::atomic::AtomicU64>,
        kind: Kind,
    ) -> Result<Running, ErrorData> {
        let quota = match kind {
            Kind::Call => quota,
            Kind::Start | Kind::Listing => Quota {
                concurrent_calls: None,
                calls_per_minute: None,
                ..quota
            },
        };
        let now = Instant::now();
        let mut all = self.lock();
        // Identities with nothing to remember are forgotten (under the lock: the threshold
        // moves with what is held).
        use std::sync::atomic::Ordering::Relaxed;
        if all.len() > self.sweep_at.load(Relaxed) {
            all.retain(|_, used| {
                used.forget_before(now);
                !used.is_idle()
            });
            self.sweep_at
                .store(all.len().saturating_mul(2).max(SWEEP_FROM), Relaxed);
        }
        let used = all.entry(key).or_default();
        used.forget_before(now);
        if quota.cpu_seconds_per_minute.is_some() {
            let (busy, what) = match kind {
                Kind::Call => (0, ""),
                Kind::Start => (
                    used.starting,
                    "instances of another session are still starting",
                ),
                Kind::Listing => (used.listing, "lists are being read for another request"),
            };
            if busy > 0 {
                return Err(ErrorData::invalid_request(format!("{who}'s {what}"), None));
            }
        }
        if let Some(limit) = quota.concurrent_calls
            && used.running >= limit
        {
            return Err(exceeded(who, "concurrent calls", limit, None));
        }
        if let Some(limit) = quota.calls_per_minute
            && used.started.len() >= limit as usize
        {
            let retry = used
                .started
                .front()
                .map(|first| MINUTE.saturating_sub(now.duration_since(*first)));
            return Err(exceeded(who, "calls per minute", limit, retry));
        }
        if let Some(limit) = quota.cpu_seconds_per_minute {
            used.count_running(now);
            let busy: Duration = used.busy.iter().map(|(_, busy)| busy.total()).sum();
            if busy >= Duration::from_secs(u64::from(limit)) {
                let retry = used
                    .busy
                    .front()
                    .map(|(first, _)| MINUTE.saturating_sub(now.duration_since(*first)));
                return Err(exceeded(who, "CPU seconds per minute", limit, retry));
            }
        }
        if quota.calls_per_minute.is_some() {
            used.started.push_back(now);
        }
        match kind {
            Kind::Call => used.running += 1,
            Kind::Start => used.starting += 1,
            Kind::Listing => used.listing += 1,
        }
        let number = used.next_live;
        used.next_live += 1;
        used.live.insert(
            number,
            Live {
                spent: Arc::clone(&spent),
                counted: Duration::ZERO,
            },
        );
        Ok(Running {
            ledger: Arc::clone(self),
            key,
            number,
            spent,
            kind,
        })
    }
}

/// The refusal of a session past the identity's `sessions` quota.
pub(crate) fn too_many_sessions(who: &str, limit: u32) -> ErrorData {
    exceeded(who, "sessions", limit, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many identities each with a call running (none idle, none forgotten): the ledger is not
    /// swept on every call past the threshold (each sweep looked at every identity, under the
    /// lock every call takes), only once what it holds has doubled.
    #[test]
    fn many_active_identities_are_swept_rarely() {
        use std::sync::atomic::Ordering::Relaxed;
        let ledger = Arc::new(Ledger::default());
        let quota = Quota {
            concurrent_calls: Some(1),
            ..Quota::default()
        };
        let key = |n: u32| {
            let mut key = [0u8; 16];
            key[..4].copy_from_slice(&n.to_le_bytes());
            key
        };
        let running: Vec<_> = (0..3000)
            .map(|n| {
                ledger
                    .begin(key(n), "someone", quota, Arc::default())
                    .expect("counted")
            })
            .collect();
        // Swept at 1,025 identities (all kept: each has a call running; next at twice that)
        // and at 2,051: twice, not 1,976 times.
        assert_eq!(ledger.sweep_at.load(Relaxed), 4102);
        assert_eq!(ledger.lock().len(), 3000);
        drop(running);
    }

    #[test]
    fn each_limit_refuses_past_it_and_frees_as_calls_end() {
        let ledger = Arc::new(Ledger::default());
        let quota = Quota {
            concurrent_calls: Some(2),
            calls_per_minute: Some(3),
            ..Quota::default()
        };
        let (alice, bob) = ([1; 16], [2; 16]);
        let begin = |key, who, quota| ledger.begin(key, who, quota, Arc::default());
        let first = begin(alice, "alice", quota).expect("first");
        let second = begin(alice, "alice", quota).expect("second");
        let refused = begin(alice, "alice", quota).err().expect("third at once");
        assert!(
            refused.message.contains("2 concurrent calls"),
            "{}",
            refused.message
        );
        // Another identity has its own.
        drop(begin(bob, "bob", quota).expect("bob"));
        drop(first);
        let third = begin(alice, "alice", quota).expect("one ended");
        drop((second, third));
        let refused = begin(alice, "alice", quota)
            .err()
            .expect("a fourth this minute");
        assert_eq!(refused.code, ErrorCode(QUOTA_EXCEEDED));
        assert!(
            refused.message.contains("3 calls per minute"),
            "{}",
            refused.message
        );
        assert!(
            refused.message.contains("try again in"),
            "{}",
            refused.message
        );

        let timed = Quota {
            cpu_seconds_per_minute: Some(1),
            ..Quota::default()
        };
        // A call that spent 1.2 s of CPU (as `mcp::cpu` counts it).
        let spent = Arc::new(std::sync::atomic::AtomicU64::new(1_200_000_000));
        let call = ledger
            .begin(bob, "bob", timed, Arc::clone(&spent))
            .expect("a call");
        drop(call);
        let refused = begin(bob, "bob", timed).err().expect("a second used up");
        assert!(
            refused.message.contains("CPU seconds"),
            "{}",
            refused.message
        );
    }

    /// The attack: calls that run for minutes (tasks) spend CPU time the quota saw only when
    /// they ended; while they ran, their identity was never refused.
    #[test]
    fn a_running_calls_cpu_time_counts_while_it_runs_and_once() {
        use std::sync::atomic::Ordering;
        let ledger = Arc::new(Ledger::default());
        let carol = [3; 16];
        let timed = Quota {
            cpu_seconds_per_minute: Some(1),
            ..Quota::default()
        };
        let spent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let running = ledger
            .begin(carol, "carol", timed, Arc::clone(&spent))
            .expect("a call");
        // 0.6 s so far: under the quota.
        spent.store(600_000_000, Ordering::Relaxed);
        let second = ledger
            .begin(carol, "carol", timed, Arc::default())
            .expect("under the quota");
        drop(second);
        // 1.2 s, and still running: over it.
        spent.store(1_200_000_000, Ordering::Relaxed);
        let refused = ledger
            .begin(carol, "carol", timed, Arc::default())
            .err()
            .expect("over the quota while the call runs");
        assert!(
            refused.message.contains("CPU seconds"),
            "{}",
            refused.message
        );
        // Counted once: what was counted while it ran is not counted again when it ends.
        drop(running);
        let all = ledger.lock();
        let used = all.get(&carol).expect("carol's use");
        let total: Duration = used.busy.iter().map(|(_, busy)| busy.total()).sum();
        assert_eq!(total, Duration::from_millis(1200));
        assert!(used.live.is_empty());
    }
}
