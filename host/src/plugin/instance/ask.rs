//! A plugin's questions to the client (contract 0.3.0's `client` imports): checked against
//! the plugin's `[client]` policy, passed to the call's [`QuestionHandler`], waited for
//! within the policy's answer time — time that does not count against the call's own limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::policy::ClientPolicy;
use crate::question::{Asker, QuestionError, QuestionHandler};

/// Time a call spent waiting for answers, shared by the store (which moves the epoch deadline)
/// and the future running the call (which moves its own timer): the waits that ended, and the
/// one going on. Questions asked at once (a 1.0.0 call may) count once: the time at least one
/// was open.
#[derive(Debug)]
pub(crate) struct Waited {
    /// What the times below count from.
    base: Instant,
    /// Nanoseconds of the waits that ended.
    ended: AtomicU64,
    /// When the wait going on began, in nanoseconds after `base` plus one; 0 when none is.
    since: AtomicU64,
    /// How many questions are open.
    open: std::sync::atomic::AtomicU32,
}

impl Default for Waited {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            ended: AtomicU64::new(0),
            since: AtomicU64::new(0),
            open: std::sync::atomic::AtomicU32::new(0),
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Waited {
    /// The time waited so far, the wait going on included.
    pub(crate) fn get(&self) -> Duration {
        let ended = self.ended.load(Ordering::Acquire);
        let since = self.since.load(Ordering::Acquire);
        let ongoing = match since {
            0 => 0,
            began => nanos(self.base.elapsed()).saturating_sub(began - 1),
        };
        Duration::from_nanos(ended.saturating_add(ongoing))
    }

    /// A question opens: the wait begins with the first one open.
    pub(crate) fn begin(&self) {
        if self.open.fetch_add(1, Ordering::AcqRel) == 0 {
            let now = nanos(self.base.elapsed()).saturating_add(1);
            self.since.store(now, Ordering::Release);
        }
    }

    /// A question closed: the wait ends with the last one open.
    fn end(&self) {
        if self.open.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let began = self.since.swap(0, Ordering::AcqRel);
        if began == 0 {
            return;
        }
        let waited = nanos(self.base.elapsed()).saturating_sub(began - 1);
        let _ = self
            .ended
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_add(waited))
            });
    }

    /// Whether a question is open (the wait goes on).
    pub(crate) fn asking(&self) -> bool {
        self.open.load(Ordering::Acquire) > 0
    }

    pub(crate) fn reset(&self) {
        self.ended.store(0, Ordering::Release);
        self.since.store(0, Ordering::Release);
        self.open.store(0, Ordering::Release);
    }
}

/// The questions side of one store: who answers during the current call, and how many
/// questions it asked.
pub(crate) struct Questions {
    plugin: Arc<str>,
    policy: ClientPolicy,
    handler: Option<Arc<dyn QuestionHandler>>,
    tool: Option<Arc<str>>,
    /// The keys of the questions this call asked.
    asked: Vec<String>,
    pub(crate) waited: Arc<Waited>,
}

/// The kinds of question, with their policy key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Elicitation,
    Sampling,
    Roots,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Sampling => "sampling",
            Self::Roots => "roots",
        }
    }
}

impl Questions {
    pub(crate) fn new(plugin: &Arc<str>, policy: &ClientPolicy) -> Self {
        Self::waiting_on(plugin, policy, Arc::default())
    }

    /// The questions of one call, whose time waiting for answers is counted in `waited`.
    pub(crate) fn waiting_on(
        plugin: &Arc<str>,
        policy: &ClientPolicy,
        waited: Arc<Waited>,
    ) -> Self {
        Self {
            plugin: Arc::clone(plugin),
            policy: policy.clone(),
            handler: None,
            tool: None,
            asked: Vec::new(),
            waited,
        }
    }

    /// A call of `tool` begins (`None`: the instance starting, which may not ask), answered
    /// by the handler in scope.
    pub(crate) fn begin(&mut self, tool: Option<&Arc<str>>) {
        self.begin_with(tool, tool.and_then(|_| crate::question::current_handler()));
    }

    /// The largest question and answer the policy allows, in bytes (as charged).
    pub(crate) fn max_question_bytes(&self) -> usize {
        self.policy.max_question_bytes
    }

    pub(crate) fn end(&mut self) {
        self.handler = None;
        self.tool = None;
    }

    /// Whether the question may be asked, and who answers it.
    fn admit(
        &mut self,
        key: &str,
        kind: Kind,
        question_bytes: usize,
    ) -> Result<(Arc<dyn QuestionHandler>, Asker), QuestionError> {
        let plugin = &self.plugin;
        let Some(tool) = &self.tool else {
            return Err(QuestionError::Unsupported(format!(
                "plugin '{plugin}' asked the client a question while starting; ask from \
                 within a tool call"
            )));
        };
        let allowed = match kind {
            Kind::Elicitation => self.policy.elicitation,
            Kind::Sampling => self.policy.sampling,
            Kind::Roots => self.policy.roots,
        };
        if !allowed {
            return Err(QuestionError::Denied(format!(
                "plugin '{plugin}' may not ask the client for {}: its policy does not allow it \
                 (the operator can set `[client] {} = true` in its policy file)",
                kind.key(),
                kind.key()
            )));
        }
        if let Err(problem) = llm_worker_rules::tool::check_name(key) {
            return Err(QuestionError::Denied(format!(
                "tool '{tool}' of plugin '{plugin}' asked a question whose key {problem}"
            )));
        }
        if self.asked.iter().any(|asked| asked == key) {
            return Err(QuestionError::Denied(format!(
                "tool '{tool}' of plugin '{plugin}' asked a second question with the key \
                 '{key}'; give each question of a call its own key"
            )));
        }
        if self.asked.len() >= self.policy.max_questions as usize {
            return Err(QuestionError::Denied(format!(
                "tool '{tool}' of plugin '{plugin}' has asked its {} questions, the most one \
                 call may ask (`[client] max_questions`)",
                self.policy.max_questions
            )));
        }
        if question_bytes > self.policy.max_question_bytes {
            return Err(QuestionError::Denied(format!(
                "a question of tool '{tool}' of plugin '{plugin}' is {question_bytes} bytes, \
                 over the limit of {} bytes (`[client] max_question_bytes`)",
                self.policy.max_question_bytes
            )));
        }
        let Some(handler) = &self.handler else {
            return Err(QuestionError::Unsupported(format!(
                "tool '{tool}' of plugin '{plugin}' asked for {}, but nothing answers questions \
                 on this call (no MCP client, and no question handler set on the worker)",
                kind.key()
            )));
        };
        self.asked.push(key.to_owned());
        let asker = Asker::new(&**plugin, &**tool, key)
            .with_max_answer_bytes(self.policy.max_question_bytes);
        Ok((Arc::clone(handler), asker))
    }

    /// Asks: admits the question (`question_bytes` as [`cost`](crate::question::cost)
    /// charges it), waits for `ask`'s answer within the answer time, checks its size with
    /// `answer_bytes`, and moves `deadline` by the time waited. `ask` checks the answer's
    /// shape ([`answer`](crate::question::answer)), whoever gave it.
    pub(crate) async fn ask<T, F, Fut>(
        &mut self,
        deadline: &mut Instant,
        key: &str,
        kind: Kind,
        question_bytes: usize,
        ask: F,
        answer_bytes: impl Fn(&T) -> usize,
    ) -> Result<T, QuestionError>
    where
        F: FnOnce(Arc<dyn QuestionHandler>, Asker) -> Fut,
        Fut: std::future::Future<Output = Result<T, QuestionError>>,
    {
        let admitted = self.admit_question(key, kind, question_bytes)?;
        let (waited, answer) = admitted.wait(ask, answer_bytes).await;
        *deadline += waited;
        answer
    }

    /// Admits a question (see [`ask`](Self::ask)), to be waited for apart from the store (a
    /// contract 1.0.0 call waits while its instance runs others).
    pub(crate) fn admit_question(
        &mut self,
        key: &str,
        kind: Kind,
        question_bytes: usize,
    ) -> Result<Admitted, QuestionError> {
        let (handler, asker) = self.admit(key, kind, question_bytes)?;
        Ok(Admitted {
            handler,
            asker,
            timeout: self.policy.answer_timeout,
            max_bytes: self.policy.max_question_bytes,
            plugin: Arc::clone(&self.plugin),
            waited: Arc::clone(&self.waited),
        })
    }

    /// A call of `tool` begins (`None`: the instance starting, which may not ask), answered
    /// by `handler`.
    pub(crate) fn begin_with(
        &mut self,
        tool: Option<&Arc<str>>,
        handler: Option<Arc<dyn QuestionHandler>>,
    ) {
        self.tool = tool.map(Arc::clone);
        self.handler = tool.and(handler);
        self.asked.clear();
        self.waited.reset();
    }
}

/// A question the policy let through, with who answers it.
pub(crate) struct Admitted {
    handler: Arc<dyn QuestionHandler>,
    asker: Asker,
    timeout: Duration,
    max_bytes: usize,
    plugin: Arc<str>,
    waited: Arc<Waited>,
}

impl Admitted {
    /// Waits for `ask`'s answer within the answer time and checks its size; returns the time
    /// waited (which moves the call's deadline) beside the answer.
    pub(crate) async fn wait<T, F, Fut>(
        self,
        ask: F,
        answer_bytes: impl Fn(&T) -> usize,
    ) -> (Duration, Result<T, QuestionError>)
    where
        F: FnOnce(Arc<dyn QuestionHandler>, Asker) -> Fut,
        Fut: std::future::Future<Output = Result<T, QuestionError>>,
    {
        let Self {
            handler,
            asker,
            timeout,
            max_bytes,
            plugin,
            waited: clock,
        } = self;
        let started = Instant::now();
        // The wait ends when the answer comes, or when the question is dropped (its call was
        // cancelled): an open question never stays counted.
        struct Open<'a>(&'a Waited);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                self.0.end();
            }
        }
        clock.begin();
        let open = Open(&clock);
        let answer = tokio::time::timeout(timeout, ask(handler, asker)).await;
        let waited = started.elapsed();
        drop(open);
        let checked = answer
            .map_err(|_| {
                QuestionError::Failed(format!(
                    "no answer came within {timeout:?} (`[client] answer_timeout_ms` of plugin \
                     '{plugin}')"
                ))
            })
            .and_then(|answer| answer)
            .and_then(|answer| {
                crate::question::cost::within_limit(answer_bytes(&answer), max_bytes, &plugin)?;
                Ok(answer)
            });
        (waited, checked)
    }
}

/// An elicitation's form as far as the host read it: `None` when the question is over the size
/// limit (refused unread), else the parsed form and its schema, or what is wrong with it.
pub(crate) type ElicitationForm =
    Option<Result<(crate::question::form::Form, serde_json::Value), String>>;

/// Reads an elicitation's requested schema (only when the question is within `max_bytes`) and
/// says what the question costs.
pub(crate) fn elicitation(
    message: &str,
    requested_schema: &str,
    max_bytes: usize,
) -> (ElicitationForm, usize) {
    let within = message.len().saturating_add(requested_schema.len()) <= max_bytes;
    let form = within.then(|| {
        serde_json::from_str::<serde_json::Value>(requested_schema)
            .map_err(|error| format!("the requested schema is not JSON: {error}"))
            .and_then(|schema| Ok((crate::question::form::Form::parse(&schema)?, schema)))
    });
    let parsed = form.as_ref().and_then(|form| form.as_ref().ok());
    let bytes = crate::question::cost::elicitation(
        message,
        requested_schema.len(),
        parsed.map(|(form, _)| form),
    );
    (form, bytes)
}

/// Asks an admitted elicitation and checks the answer against its form. The message and form
/// are checked here, once the policy let the question through: a bad one is a question asked
/// all the same, and counts.
pub(crate) async fn elicit(
    handler: Arc<dyn QuestionHandler>,
    asker: Asker,
    message: String,
    form: ElicitationForm,
) -> Result<crate::tool::ElicitationAnswer, QuestionError> {
    crate::question::message::check_message(&message, &asker)?;
    let (form, schema) = match form {
        Some(Ok(form)) => form,
        Some(Err(problem)) => {
            return Err(QuestionError::Denied(format!(
                "tool '{}' of plugin '{}' asked question '{}' with a form MCP does not allow \
                 ({problem}); give a flat object schema of string, number, integer, boolean \
                 and enum fields",
                asker.tool, asker.plugin, asker.key
            )));
        }
        None => {
            return Err(QuestionError::Denied(format!(
                "question '{}' is over `[client] max_question_bytes`",
                asker.key
            )));
        }
    };
    let answer = handler.elicit(&asker, &message, &schema).await?;
    crate::question::answer::check_elicitation(&answer, &form, &asker)?;
    Ok(answer)
}

/// Asks an admitted sampling question and checks the answer's shape. A client shows the
/// request to a person for approval: its texts may not imitate the host's attribution (they
/// are held to no other rule of a message's: they are often documents, with their carriage
/// returns and blank lines).
pub(crate) async fn sample(
    handler: Arc<dyn QuestionHandler>,
    asker: Asker,
    request: crate::tool::SamplingRequest,
) -> Result<crate::tool::SamplingAnswer, QuestionError> {
    if let Some(temperature) = request.temperature
        && !(temperature.is_finite() && (0.0..=f64::from(f32::MAX)).contains(&temperature))
    {
        return Err(QuestionError::Denied(format!(
            "tool '{}' of plugin '{}' asked question '{}' for sampling with the temperature \
             {temperature}; give a finite number, 0 or more, or none",
            asker.tool, asker.plugin, asker.key
        )));
    }
    // An image's or audio clip's MIME type goes to the client as it is: a MIME type, and no
    // more (checked as a text below too).
    for message in &request.messages {
        if let crate::tool::Content::Image(media) | crate::tool::Content::Audio(media) =
            &message.content
        {
            llm_worker_rules::resource::check_mime_type(&media.mime_type).map_err(|problem| {
                QuestionError::Denied(format!(
                    "tool '{}' of plugin '{}' asked question '{}' for sampling with a MIME \
                     type \"{}\" that is refused: {problem}",
                    asker.tool,
                    asker.plugin,
                    asker.key,
                    llm_worker_rules::tool::OneLine(
                        &media.mime_type.chars().take(100).collect::<String>()
                    )
                ))
            })?;
        }
    }
    // Every block but an image or audio reaches the client as text: a text as it is, a
    // resource or a link as the text it is written as (what MCP's sampling can carry); of an
    // image or audio, its MIME type.
    let texts = request
        .messages
        .iter()
        .map(|message| match &message.content {
            crate::tool::Content::Text(text) => std::borrow::Cow::Borrowed(text.as_str()),
            crate::tool::Content::Image(media) | crate::tool::Content::Audio(media) => {
                std::borrow::Cow::Borrowed(media.mime_type.as_str())
            }
            other => {
                let mut text = String::new();
                other.write_text(&mut text);
                std::borrow::Cow::Owned(text)
            }
        })
        .chain(
            request
                .system_prompt
                .as_deref()
                .map(std::borrow::Cow::Borrowed),
        );
    let refused = |problem: String| {
        QuestionError::Denied(format!(
            "tool '{}' of plugin '{}' asked question '{}' for sampling with a text {problem}; \
             the host refuses it rather than show it to the person approving",
            asker.tool, asker.plugin, asker.key
        ))
    };
    for text in texts {
        crate::question::message::check_document(&text)
            .map_err(|problem| refused(format!("holding {problem}")))?;
        crate::question::message::check_not_attributed(&text)
            .map_err(|problem| refused(format!("that {problem}")))?;
    }
    // Model hints and stop sequences go to the client as they are: no character it would act
    // on or hide.
    // (A stop sequence may hold `\r\n`, a common one; a carriage return alone, no.)
    let stops = request
        .stop_sequences
        .iter()
        .map(|stop| stop.replace("\r\n", "\n"));
    for text in request.model_hints.iter().cloned().chain(stops) {
        crate::question::message::check_text(&text).map_err(|problem| {
            QuestionError::Denied(format!(
                "tool '{}' of plugin '{}' asked question '{}' for sampling with a model hint \
                 or stop sequence holding {problem}",
                asker.tool, asker.plugin, asker.key
            ))
        })?;
    }
    let answer = handler.sample(&asker, &request).await?;
    crate::question::answer::check_sampling(&answer, &asker)?;
    Ok(answer)
}

/// Asks an admitted question for the client's roots and checks them.
pub(crate) async fn roots(
    handler: Arc<dyn QuestionHandler>,
    asker: Asker,
) -> Result<Vec<crate::tool::Root>, QuestionError> {
    let roots = handler.roots(&asker).await?;
    crate::question::answer::check_roots(&roots, &asker)?;
    Ok(roots)
}
