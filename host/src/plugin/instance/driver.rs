//! Who polls a 1.0.0 instance's event loop: the caller of a call, while no one else does, and
//! a task of the instance's own otherwise.
//!
//! A call handed to a task and answered back crosses two tasks twice (a channel, a wake-up of
//! the loop's task, a reply, a wake-up of the caller): for a quick call that is most of what
//! the host adds. So a caller that finds the loop idle polls it itself, in its own task, and a
//! call that returns at once never leaves that task. The loop is polled with a waker of its
//! own, never the caller's: whatever it waits for (a sibling's HTTP response, a timer, the next
//! call) wakes the instance's task, which polls it when no caller does. A caller polls it a
//! few times at most, until its own call has returned; what is left is the task's.
//!
//! The loop's code runs in whichever task polls it: its CPU time is charged to each call by the
//! task-group hook (`GroupClock`), and a caller's own measurement leaves it out
//! ([`crate::cpu::excluded`]); what a call needs of its request (its event sink, question
//! handler, hand-off, CPU counter) is carried to the loop in its setup, never read from the
//! task that happens to poll, and its questions to the client are sent from a task of their
//! own (rmcp reads the request a question belongs to from its sender's task). A caller stops
//! polling after a few polls or a millisecond, whichever comes first, so that a sibling's code
//! does not hold it from its own timers; a kill stops whoever polls at the next poll.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;
use tokio::sync::watch;

use super::concurrent::{Death, GroupClock};

/// The event loop, until it ends with why.
pub(super) type Loop = Pin<Box<dyn Future<Output = Death> + Send>>;

/// No one polls the loop, and nothing woke it since it was last polled.
const IDLE: u8 = 0;
/// No one polls the loop, and something woke it: the instance's task was told to.
const NOTIFIED: u8 = 1;
/// Someone polls the loop.
const RUNNING: u8 = 2;
/// Someone polls the loop, and something woke it meanwhile: it is to be polled again.
const RUNNING_NOTIFIED: u8 = 3;

/// The loop's waker: it tells whoever polls the loop to poll it again, or the instance's task
/// when no one does.
struct Signal {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            let next = match state {
                IDLE => NOTIFIED,
                RUNNING => RUNNING_NOTIFIED,
                _ => return,
            };
            match self
                .state
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if next == NOTIFIED {
                        self.task.wake();
                    }
                    return;
                }
                Err(now) => state = now,
            }
        }
    }
}

/// Where the loop is kept between polls.
struct Slot {
    /// The loop, while no one polls it and it has not ended.
    future: Option<Loop>,
    /// It ended (returned, panicked or was aborted): no one polls it again.
    ended: bool,
}

/// A 1.0.0 instance's event loop, as its callers and its task share it.
pub(super) struct Driver {
    slot: Mutex<Slot>,
    /// The loop is to be dropped (the instance is killed or let go of): whoever holds it stops
    /// polling it and drops it.
    aborted: AtomicBool,
    signal: Arc<Signal>,
    waker: Waker,
    /// The task-group hook's clock: the CPU meter of the code running now starts and stops
    /// with each poll (a thread's CPU clock compares only with itself).
    clock: Option<Arc<Mutex<GroupClock>>>,
    /// Where why the loop ended is said (a reason said first, by a kill, is kept).
    death: watch::Sender<Option<Death>>,
}

/// What one poll of the loop came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// The loop ended (why is said).
    Ended,
    /// It waits; `again`: it was woken while polled, and is to be polled again.
    Pending { again: bool },
}

impl Driver {
    pub(super) fn new(
        future: Loop,
        clock: Option<Arc<Mutex<GroupClock>>>,
        death: watch::Sender<Option<Death>>,
    ) -> Arc<Self> {
        let signal = Arc::new(Signal {
            state: AtomicU8::new(NOTIFIED),
            task: AtomicWaker::new(),
        });
        Arc::new(Self {
            aborted: AtomicBool::new(false),
            slot: Mutex::new(Slot {
                future: Some(future),
                ended: false,
            }),
            waker: Waker::from(Arc::clone(&signal)),
            signal,
            clock,
            death,
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The loop, to poll, if no one else polls it and it has not ended.
    pub(super) fn acquire(&self) -> Option<Polling<'_>> {
        let future = {
            let mut slot = self.slot();
            let future = slot.future.take()?;
            self.signal.state.store(RUNNING, Ordering::Release);
            future
        };
        Some(Polling {
            driver: self,
            future: Some(future),
        })
    }

    /// Drops the loop (and with it the instance's store) as soon as no one polls it; the
    /// instance's task then ends.
    pub(super) fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
        let future = {
            let mut slot = self.slot();
            slot.ended = true;
            slot.future.take()
        };
        drop_quietly(future);
        self.signal.task.wake();
    }

    /// The instance's task: polls the loop whenever it is woken and no caller polls it, until
    /// it ends.
    pub(super) async fn run(self: Arc<Self>) {
        std::future::poll_fn(|cx| {
            self.signal.task.register(cx.waker());
            let Some(mut polling) = self.acquire() else {
                // A caller polls it (and hands it back here if it is woken meanwhile), or it
                // ended.
                return if self.slot().ended {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                };
            };
            // Once per wake-up, as a task would be polled: woken while polled, the release
            // below wakes this task again, and the runtime polls it after the others waiting.
            match polling.poll() {
                Step::Ended => Poll::Ready(()),
                Step::Pending { .. } => Poll::Pending,
            }
        })
        .await;
    }

    fn say(&self, reason: Death) {
        // A kill said why first: keep its reason.
        self.death.send_if_modified(|death| {
            if death.is_some() {
                return false;
            }
            *death = Some(reason);
            true
        });
    }
}

/// The loop, held by whoever polls it; handed back when dropped.
pub(super) struct Polling<'a> {
    driver: &'a Driver,
    future: Option<Loop>,
}

impl Polling<'_> {
    /// Polls the loop once, with its own waker.
    pub(super) fn poll(&mut self) -> Step {
        let driver = self.driver;
        // Killed while held here: not run any further (dropped when handed back).
        if driver.aborted.load(Ordering::Acquire) {
            return Step::Ended;
        }
        let Some(future) = self.future.as_mut() else {
            return Step::Ended;
        };
        // A wake-up before this poll is this poll's to see.
        driver.signal.state.store(RUNNING, Ordering::Release);
        let mut cx = Context::from_waker(&driver.waker);
        if let Some(clock) = &driver.clock {
            GroupClock::polled(clock, true);
        }
        // A panic in host code ends the instance, not the caller that happened to poll it.
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            future.as_mut().poll(&mut cx)
        }));
        if let Some(clock) = &driver.clock {
            GroupClock::polled(clock, false);
        }
        match polled {
            Ok(Poll::Pending) => Step::Pending {
                again: driver.signal.state.load(Ordering::Acquire) == RUNNING_NOTIFIED,
            },
            Ok(Poll::Ready(reason)) => {
                driver.say(reason);
                drop_quietly(self.future.take());
                Step::Ended
            }
            Err(_) => {
                driver.say(Death {
                    reason: "the instance's event loop ended unexpectedly (a panic in host \
                             code)"
                        .into(),
                    culprit: None,
                    host_capacity: false,
                    caller_gave_up: false,
                });
                drop_quietly(self.future.take());
                Step::Ended
            }
        }
    }
}

/// Drops the loop, and with it the instance's store: a panic in a host resource's drop ends
/// here, not in the caller that happened to hold the loop.
fn drop_quietly(future: Option<Loop>) {
    if let Some(future) = future {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(future)));
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        let driver = self.driver;
        let mut dropped = None;
        let wake = {
            let mut slot = driver.slot();
            match self.future.take() {
                Some(future) if !driver.aborted.load(Ordering::Acquire) => {
                    slot.future = Some(future);
                    // Woken while it was polled: the instance's task polls it again.
                    match driver.signal.state.compare_exchange(
                        RUNNING,
                        IDLE,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => false,
                        Err(_) => {
                            driver.signal.state.store(NOTIFIED, Ordering::Release);
                            true
                        }
                    }
                }
                future => {
                    // Ended, or aborted while it was polled: the instance's task ends too.
                    dropped = future;
                    slot.ended = true;
                    driver.signal.state.store(IDLE, Ordering::Release);
                    true
                }
            }
        };
        drop_quietly(dropped);
        if wake {
            driver.signal.task.wake();
        }
    }
}
