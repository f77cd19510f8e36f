//! What every request that runs plugin code shares — a tool call, a resource read, a prompt
//! rendering, a completion: who answers its questions (the session's client, or on revision
//! 2026-07-28 the replay of the request's earlier rounds), where its reports go (logs,
//! progress and notices, to the client), and that the client's cancellation stops it.

use std::sync::Arc;

use rmcp::model::{ErrorCode, InputRequiredResult, InputResponses};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value};

use super::input_required::{Replay, is_stateless};
use super::reports::{REPORTS_DRAIN, REPORTS_QUEUED, Report, forward_reports};
use super::session::McpServer;
use crate::question::QuestionHandler;

/// How long a request runs before it reports progress (to a client that sent a progress
/// token).
const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_millis(50);

/// Who answers the questions of one request.
pub(super) struct Asking {
    questions: Option<Arc<dyn QuestionHandler>>,
    /// On 2026-07-28: the request's earlier rounds, the arguments its state is bound to, and
    /// what else it is bound to (the method and the caller).
    replay: Option<(Arc<Replay>, Map<String, Value>, String)>,
}

impl Asking {
    /// Who answers: the client now, the client's retry, or nobody.
    pub(super) fn questions(&self) -> Option<Arc<dyn QuestionHandler>> {
        self.questions.clone()
    }

    /// The request's earlier rounds, if it has any (2026-07-28).
    pub(super) fn replay(&self) -> Option<Arc<Replay>> {
        self.replay
            .as_ref()
            .map(|(replay, _, _)| Arc::clone(replay))
    }

    /// MCP's "missing required client capability" error for a request that failed after a
    /// question its capabilities could not answer.
    pub(super) fn missing_capability(&self) -> Option<ErrorData> {
        self.replay
            .as_ref()
            .and_then(|(replay, _, _)| replay.missing_capability())
    }
}

/// What a request that may ask questions is for: its method, the tool, prompt or resource it
/// names, and the revision of what serves that (see `SessionTools::revision_of` and `Serving`).
pub(super) struct Target<'a> {
    pub(super) method: &'static str,
    pub(super) name: &'a str,
    pub(super) revision: u64,
}

impl McpServer {
    /// Who answers the questions of a request for `target` with `arguments`. On
    /// 2026-07-28 a question is deferred to the client's retry, which brings its answers and
    /// the signed state of earlier rounds (taken from `state` and `responses`; an error if the
    /// state does not verify); with no key to sign states, such questions fail as
    /// unanswerable.
    pub(super) fn asking(
        &self,
        target: Target<'_>,
        arguments: &Map<String, Value>,
        state: &mut Option<String>,
        responses: &mut Option<InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Asking, ErrorData> {
        let Target {
            method,
            name,
            revision,
        } = target;
        if !is_stateless(context) {
            return Ok(Asking {
                questions: Some(self.client_questions(context)),
                replay: None,
            });
        }
        let Some(codec) = self.options.request_states() else {
            return Ok(Asking {
                questions: None,
                replay: None,
            });
        };
        // A state is its caller's: another caller (a leaked state replayed) cannot open it; over
        // a transport other than HTTP, its connection's (every connection there is the same
        // anonymous caller); and the version's of what serves it (a plugin reloaded in between
        // cannot take it).
        let connection = match super::session::names_session(&context.extensions) {
            Some(_) => String::new(),
            None => format!(
                "connection {} of {:016x}",
                self.origin(context).session,
                process_tag()
            ),
        };
        let scope = format!(
            "{method}\n{}\n{connection}\n{revision:016x}",
            super::session::caller_tag(context)
        );
        let replay = Arc::new(Replay::open(
            codec,
            &scope,
            name,
            arguments,
            state.take().as_deref(),
            responses.take(),
            context.client_capabilities().unwrap_or_default(),
        )?);
        Ok(Asking {
            questions: Some(Arc::clone(&replay) as _),
            replay: Some((replay, arguments.clone(), scope)),
        })
    }

    /// Who answers the questions of a request that has no rounds (a completion): the client
    /// of a stateful session; nobody on 2026-07-28.
    pub(super) fn asking_now(&self, context: &RequestContext<RoleServer>) -> Asking {
        Asking {
            questions: (!is_stateless(context)).then(|| self.client_questions(context)),
            replay: None,
        }
    }

    /// The `input_required` answer to send instead of the result, if the request deferred
    /// questions to the client's retry (its state bound as [`asking`](Self::asking) opened
    /// it: the method, the caller, `name` and the arguments).
    pub(super) fn input_required(
        &self,
        asking: &Asking,
        name: &str,
    ) -> Result<Option<InputRequiredResult>, ErrorData> {
        match (&asking.replay, self.options.request_states()) {
            (Some((replay, arguments, scope)), Some(codec)) => {
                replay.input_required(codec, scope, name, arguments)
            }
            _ => Ok(None),
        }
    }

    /// Runs `work` (the plugin code of `what`, e.g. "the call of 'search'") with its reports
    /// (logs, progress, notices) sent to the client and its questions answered by
    /// `questions`, stopping it if the client cancels the request. A cancelled request drops
    /// the work: the plugin's instance is reset (its state is lost, and the next call says
    /// so), without counting as the plugin's failure.
    pub(super) async fn run<T>(
        &self,
        what: &str,
        context: RequestContext<RoleServer>,
        questions: Option<Arc<dyn QuestionHandler>>,
        work: impl Future<Output = T>,
    ) -> Result<T, ErrorData> {
        // Cancelled before it starts (while a hook held it): not run at all (polled first
        // below, quick work would finish before the cancellation is seen).
        if context.ct.is_cancelled() {
            return Err(cancelled(what));
        }
        let questions = self.audited(questions, &context);
        let (reports, receiver) = tokio::sync::mpsc::channel::<Report>(REPORTS_QUEUED);
        let forwarding = forward_reports(self.reports_to(&context), receiver);
        // Fused: polled again after it ended, it waits instead of panicking.
        let mut forwarding = std::pin::pin!(futures::FutureExt::fuse(forwarding));
        let report = |done: f64, message: String| {
            let _ = reports.try_send(Report::Host { done, message });
        };
        let plugin_reports = reports.clone();
        let sink = move |event| {
            let _ = plugin_reports.try_send(Report::Plugin(event));
        };
        let scopes = crate::call::Scopes {
            events: Some(Arc::new(sink)),
            questions,
        };
        let mut execution = std::pin::pin!(crate::cpu::measured(scopes.run(work)));
        // The reports are sent while the work runs, from this task: `forwarding` is polled
        // beside it (it only ends at `Report::End`, sent below).
        let started = tokio::select! {
            biased;
            outcome = &mut execution => Some(outcome),
            () = tokio::time::sleep(PROGRESS_AFTER) => None,
            () = context.ct.cancelled() => return Err(cancelled(what)),
            // Not before `Report::End`, which comes after the work: this function holds a
            // sender, so the channel stays open.
            () = &mut forwarding => Some((&mut execution).await),
        };
        // Work still running after a moment reports that it started, and then that it
        // finished; quick work's result is all the progress there is to tell.
        let outcome = match started {
            Some(outcome) => outcome,
            None => {
                report(0.0, format!("{what} is running"));
                let outcome = tokio::select! {
                    biased;
                    outcome = &mut execution => outcome,
                    () = context.ct.cancelled() => return Err(cancelled(what)),
                    () = &mut forwarding => (&mut execution).await,
                };
                report(1.0, format!("{what} finished"));
                outcome
            }
        };
        // The notifications go before the result (a client drops progress for a request it
        // has its answer to), within a bound.
        let _ = tokio::time::timeout(REPORTS_DRAIN, async {
            let end = async {
                let _ = reports.send(Report::End).await;
            };
            tokio::join!(end, &mut forwarding);
        })
        .await;
        Ok(outcome)
    }
}

/// The error of a request the client cancelled.
pub(super) fn cancelled(what: &str) -> ErrorData {
    super::session::ended_as("cancelled");
    ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        format!("{what} was cancelled"),
        None,
    )
}

/// This process among others that share a request-state key (replicas, a restart): connections
/// are numbered per process, so a connection's scope names the process too, or connection 0
/// of one would open connection 0's states of another.
fn process_tag() -> u64 {
    static TAG: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TAG.get_or_init(|| {
        let mut bytes = [0; 8];
        match getrandom::fill(&mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            // Without randomness: the process and the moment it asked, which still differ
            // between processes.
            Err(_) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_nanos() as u64);
                now ^ u64::from(std::process::id()).rotate_left(32)
            }
        }
    })
}
