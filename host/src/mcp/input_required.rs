//! Questions on revision 2026-07-28, which has no server-to-client requests (SEP-2322,
//! "multi round-trip requests"): a call's question the client has not answered yet is
//! deferred — the plugin is told so, and the call is answered `input_required` with the
//! questions and a request state. The client's retry carries its answers (`inputResponses`)
//! and the state; the tool runs again from the start, and each question gets the answer of its
//! key. The state, signed by this server (`RequestStateCodec`, HMAC-SHA256), holds the answers
//! of earlier rounds and is bound to the method, the tool or prompt and its arguments: a
//! tampered or foreign state is refused.

#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitResult, InputRequest, InputRequiredResult, ListRootsRequest,
    ListRootsResult, ModelHint, ModelPreferences, RequestStateCodec, SealOptions,
};
use serde_json::Value;

use super::ask::{elicitation_answer, elicitation_params, roots_answer, sampling_answer};
use super::content::sampling_message;
use crate::question::answer::{check_elicitation, check_roots, check_sampling};
use crate::question::cost;
use crate::question::form::Form;
use crate::question::{
    Asker, ElicitationAnswer, QuestionError, QuestionHandler, Root, SamplingAnswer, SamplingRequest,
};

/// How long a request state stays valid.
const STATE_TTL: Duration = Duration::from_secs(3600);

/// The signing key of request states: the operator's (shared by replicas behind one
/// balancer), or one made at random for this process.
pub(crate) fn codec(key: Option<&[u8]>) -> Result<RequestStateCodec, String> {
    match key {
        Some(key) => RequestStateCodec::try_new(key.to_vec()).map_err(|error| error.to_string()),
        None => {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key)
                .map_err(|error| format!("cannot make a request-state key: {error}"))?;
            RequestStateCodec::try_new(key.to_vec()).map_err(|error| error.to_string())
        }
    }
}

/// What a request state holds: the answers of earlier rounds, and the questions the last round
/// deferred to the client, by key, each with the digest of the question it answers. A retry's
/// answer counts for the question the client was shown, not for whatever the tool asks next
/// under the same key.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct State {
    answers: BTreeMap<String, Answered>,
    #[serde(default)]
    asked: BTreeMap<String, String>,
}

/// An answer, and the digest of the question it answers.
#[derive(serde::Serialize, serde::Deserialize, Clone)]
struct Answered {
    question: String,
    answer: Value,
}

/// The digest a question is known by across rounds: of the request the client is shown.
fn question_digest(request: &InputRequest) -> Result<String, QuestionError> {
    let text = serde_json::to_vec(request).map_err(|error| {
        QuestionError::Failed(format!("the question cannot be written as JSON: {error}"))
    })?;
    Ok(crate::digest::sha256_hex(&text))
}

/// What is kept of an answer for the next round: what serde read of it (fields it does not know
/// are gone), written again without the protocol's `_meta` (at the top, and in each object
/// under `nested`: a sampling result's content blocks, roots), so that a client cannot have the
/// state carry (and this server sign) bytes the size limit never counted. A form's own fields
/// are kept whatever their names.
fn kept<T: serde::Serialize>(answer: &T, nested: &[&str]) -> Result<Value, QuestionError> {
    let mut value = serde_json::to_value(answer)
        .map_err(|error| QuestionError::Failed(format!("the answer cannot be kept: {error}")))?;
    if let Value::Object(map) = &mut value {
        map.remove("_meta");
        for key in nested {
            match map.get_mut(*key) {
                Some(Value::Object(inner)) => {
                    inner.remove("_meta");
                }
                Some(Value::Array(items)) => {
                    for item in items.iter_mut().filter_map(Value::as_object_mut) {
                        item.remove("_meta");
                    }
                }
                _ => {}
            }
        }
    }
    Ok(value)
}

/// What binds a state to its request: the method, the tool's or prompt's name, its arguments.
fn binding(method: &str, name: &str, arguments: &serde_json::Map<String, Value>) -> Vec<u8> {
    // serde_json's map is ordered by key: the same arguments give the same bytes.
    let arguments = Value::Object(arguments.clone()).to_string();
    let digest = crate::digest::sha256(arguments.as_bytes());
    let mut bound = format!("{method}\n{name}\n").into_bytes();
    bound.extend_from_slice(&digest);
    bound
}

/// One 2026-07-28 request's questions: answered from the client's responses and the state's,
/// the others deferred.
pub(crate) struct Replay {
    answers: BTreeMap<String, Answered>,
    capabilities: ClientCapabilities,
    /// The questions deferred, by key, with their digests.
    deferred: Mutex<BTreeMap<String, (InputRequest, String)>>,
    /// The answers this run used, by key: carried to the next round.
    used: Mutex<BTreeMap<String, Answered>>,
    /// The capabilities the run's questions needed and the request did not declare.
    missing: Mutex<ClientCapabilities>,
}

impl Replay {
    /// The questions of a request of `method` for `name` with `arguments`: the answers of the
    /// verified `state` (an error if it does not verify), then the client's `responses`.
    pub(crate) fn open(
        codec: &RequestStateCodec,
        method: &str,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
        state: Option<&str>,
        responses: Option<BTreeMap<String, Value>>,
        capabilities: ClientCapabilities,
    ) -> Result<Self, ErrorData> {
        let state = match state {
            None => None,
            Some(sealed) => {
                let state: State = codec
                    .open_json_with(sealed, &binding(method, name, arguments))
                    .map_err(|error| {
                        tracing::debug!("a request state was refused: {error}");
                        ErrorData::invalid_params(
                            "requestState integrity check failed: it was not made by this \
                             server for this request (or it expired); retry without it and \
                             without inputResponses",
                            None,
                        )
                    })?;
                Some(state)
            }
        };
        // The answers of earlier rounds stand: a retry adds answers, it does not change them.
        // A response answers the question the last round showed under its key; one under a key
        // that round did not ask, or sent with no state (nothing was asked: a client told its
        // state is refused retries without it), is dropped.
        let Some(state) = state else {
            if let Some(responses) = responses.filter(|responses| !responses.is_empty()) {
                tracing::debug!(
                    "{} responses sent without a request state are dropped",
                    responses.len()
                );
            }
            return Ok(Self::with(BTreeMap::new(), capabilities));
        };
        let State { mut answers, asked } = state;
        let mut unasked = 0usize;
        for (key, answer) in responses.unwrap_or_default() {
            let Some(question) = asked.get(&key) else {
                unasked += 1;
                continue;
            };
            let question = question.clone();
            answers.entry(key).or_insert(Answered { question, answer });
        }
        if unasked > 0 {
            tracing::debug!(
                "{unasked} responses to questions the last round did not ask are dropped"
            );
        }
        Ok(Self::with(answers, capabilities))
    }

    fn with(answers: BTreeMap<String, Answered>, capabilities: ClientCapabilities) -> Self {
        Self {
            answers,
            capabilities,
            deferred: Mutex::default(),
            used: Mutex::default(),
            missing: Mutex::default(),
        }
    }

    /// Whether the run deferred a question to the client's retry.
    pub(crate) fn deferred_any(&self) -> bool {
        !lock(&self.deferred).is_empty()
    }

    /// The `input_required` answer if the run deferred questions, with a state holding the
    /// answers it used.
    pub(crate) fn input_required(
        &self,
        codec: &RequestStateCodec,
        method: &str,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
    ) -> Result<Option<InputRequiredResult>, ErrorData> {
        let deferred = std::mem::take(&mut *lock(&self.deferred));
        if deferred.is_empty() {
            return Ok(None);
        }
        let mut asked = BTreeMap::new();
        let deferred: BTreeMap<String, InputRequest> = deferred
            .into_iter()
            .map(|(key, (request, question))| {
                asked.insert(key.clone(), question);
                (key, request)
            })
            .collect();
        let state = State {
            answers: std::mem::take(&mut *lock(&self.used)),
            asked,
        };
        let sealed = codec
            .seal_json_with(
                &state,
                &SealOptions::new()
                    .associated_data(&binding(method, name, arguments))
                    .ttl(STATE_TTL),
            )
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        Ok(Some(InputRequiredResult::new(Some(deferred), Some(sealed))))
    }

    /// MCP's "missing required client capability" (-32021) for a run that failed after a
    /// question the request's capabilities could not answer, naming them; `None` if none was
    /// missing.
    pub(crate) fn missing_capability(&self) -> Option<ErrorData> {
        let missing = lock(&self.missing).clone();
        let any =
            missing.elicitation.is_some() || missing.sampling.is_some() || missing.roots.is_some();
        any.then(|| ErrorData::missing_required_client_capability(missing))
    }

    /// Records that a question needed `capability`, which the request did not declare.
    fn undeclared(&self, asker: &Asker, capability: &str) -> QuestionError {
        {
            let mut missing = lock(&self.missing);
            match capability {
                "elicitation" => missing.elicitation = Some(Default::default()),
                "sampling" => missing.sampling = Some(Default::default()),
                _ => missing.roots = Some(Default::default()),
            }
        }
        super::ask::undeclared(asker, capability)
    }

    /// The answer to `key`, if the client gave one to this question (not another asked under
    /// the same key) of the right shape that `fits` (turns into ours, and passes the checks
    /// every answer passes) and is within the asker's size (as `bytes` counts it); otherwise
    /// the question is deferred: asked again, never passed on, never kept in the state.
    fn answer<T: serde::de::DeserializeOwned + serde::Serialize, U>(
        &self,
        asker: &Asker,
        request: InputRequest,
        nested: &[&str],
        fits: impl FnOnce(T) -> Result<U, QuestionError>,
        bytes: impl FnOnce(&U) -> usize,
    ) -> Result<U, QuestionError> {
        let question = question_digest(&request)?;
        if let Some(given) = self.answers.get(&asker.key) {
            let checked = if given.question != question {
                Err(QuestionError::Failed(
                    "it answers another question than the one asked now under its key".into(),
                ))
            } else {
                serde_json::from_value::<T>(given.answer.clone())
                    .map_err(|error| QuestionError::Failed(error.to_string()))
                    .and_then(|read| Ok((kept(&read, nested)?, read)))
                    .and_then(|(kept, read)| Ok((kept, fits(read)?)))
                    .and_then(|(kept, answer)| {
                        cost::within_limit(bytes(&answer), asker.max_answer_bytes, &asker.plugin)?;
                        Ok((kept, answer))
                    })
            };
            match checked {
                Ok((kept, answer)) => {
                    let used = Answered {
                        question,
                        answer: kept,
                    };
                    lock(&self.used).insert(asker.key.clone(), used);
                    return Ok(answer);
                }
                Err(error) => {
                    tracing::debug!(
                        "the answer to question {:?} is asked again: {error}",
                        asker.key
                    );
                }
            }
        }
        lock(&self.deferred).insert(asker.key.clone(), (request, question));
        Err(QuestionError::Deferred(format!(
            "question '{}' goes to the client with this call's answer",
            asker.key
        )))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl QuestionHandler for Replay {
    async fn elicit(
        &self,
        asker: &Asker,
        message: &str,
        schema: &Value,
    ) -> Result<ElicitationAnswer, QuestionError> {
        if self.capabilities.elicitation.is_none() {
            return Err(self.undeclared(asker, "elicitation"));
        }
        let params = elicitation_params(message, schema, asker)?;
        let form = Form::parse(schema).map_err(QuestionError::Denied)?;
        self.answer(
            asker,
            InputRequest::Elicitation(ElicitRequest::new(params)),
            &[],
            |result: ElicitResult| {
                let answer = elicitation_answer(result)?;
                check_elicitation(&answer, &form, asker)?;
                Ok(answer)
            },
            cost::elicitation_answer,
        )
    }

    async fn sample(
        &self,
        asker: &Asker,
        request: &SamplingRequest,
    ) -> Result<SamplingAnswer, QuestionError> {
        if self.capabilities.sampling.is_none() {
            return Err(self.undeclared(asker, "sampling"));
        }
        self.answer(
            asker,
            InputRequest::CreateMessage(CreateMessageRequest::new(sampling_params(request, asker))),
            &["content"],
            |result: CreateMessageResult| {
                let answer = sampling_answer(result)?;
                check_sampling(&answer, asker)?;
                Ok(answer)
            },
            cost::sampling_answer,
        )
    }

    async fn roots(&self, asker: &Asker) -> Result<Vec<Root>, QuestionError> {
        if self.capabilities.roots.is_none() {
            return Err(self.undeclared(asker, "roots"));
        }
        self.answer(
            asker,
            InputRequest::ListRoots(ListRootsRequest::default()),
            &["roots"],
            |result: ListRootsResult| {
                let roots = roots_answer(result);
                check_roots(&roots, asker)?;
                Ok(roots)
            },
            |roots: &Vec<Root>| cost::roots_answer(roots),
        )
    }
}

/// A sampling request as MCP's, its system prompt saying first which plugin and tool (or
/// request) ask, as an elicitation's message does: the person approving it should know which
/// of the server's plugins wants the client's model, and the plugin's texts cannot imitate that
/// line (`question::message`).
pub(crate) fn sampling_params(
    request: &SamplingRequest,
    asker: &Asker,
) -> CreateMessageRequestParams {
    let messages = request.messages.iter().map(sampling_message).collect();
    let mut params = CreateMessageRequestParams::new(messages, request.max_tokens);
    let attribution = super::ask::attribution(asker);
    params.system_prompt = Some(match &request.system_prompt {
        Some(prompt) => format!("{attribution}\n{prompt}"),
        None => attribution,
    });
    params.temperature = request.temperature.map(|t| t as f32);
    if !request.stop_sequences.is_empty() {
        params.stop_sequences = Some(request.stop_sequences.clone());
    }
    if !request.model_hints.is_empty() {
        let mut preferences = ModelPreferences::default();
        preferences.hints = Some(
            request
                .model_hints
                .iter()
                .map(|name| ModelHint::new(name.clone()))
                .collect(),
        );
        params.model_preferences = Some(preferences);
    }
    params
}

/// Whether a request is a stateless one of revision 2026-07-28 or later: its `_meta` names its
/// version, and it is not part of a session. Questions are then deferred, not sent, and its
/// tasks are its caller's, not a session's.
///
/// The transport decides, not the request alone: a client of a stateful session that wrote a
/// version into its `_meta` would otherwise own tasks that outlive its session. Over HTTP a
/// request with an `Mcp-Session-Id` is its session's; over other transports (stdio, an
/// embedder's), one whose connection was opened with `initialize` is.
pub(crate) fn is_stateless(context: &rmcp::service::RequestContext<rmcp::RoleServer>) -> bool {
    if context.meta.protocol_version().is_none() {
        return false;
    }
    if let Some(in_session) = super::session::names_session(&context.extensions) {
        return !in_session;
    }
    !context
        .peer
        .peer_info()
        .is_some_and(|peer| peer.protocol_version.has_initialize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capabilities() -> ClientCapabilities {
        serde_json::from_value(serde_json::json!({"elicitation": {}, "sampling": {}}))
            .expect("capabilities")
    }

    fn asker(key: &str) -> Asker {
        Asker::new("p", "t", key)
    }

    fn form() -> Value {
        serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}})
    }

    fn arguments(text: &str) -> serde_json::Map<String, Value> {
        let mut map = serde_json::Map::new();
        map.insert("a".into(), Value::String(text.into()));
        map
    }

    #[tokio::test]
    async fn a_question_is_deferred_then_answered_from_the_state_and_the_responses() {
        let codec = codec(Some(&[7u8; 32])).expect("codec");
        let args = arguments("x");
        // Round 1: nothing answered: the question is deferred.
        let round1 = Replay::open(&codec, "tools/call", "t", &args, None, None, capabilities())
            .expect("round 1");
        let deferred = round1.elicit(&asker("name"), "Name?", &form()).await;
        assert!(
            matches!(deferred, Err(QuestionError::Deferred(_))),
            "{deferred:?}"
        );
        let result = round1
            .input_required(&codec, "tools/call", "t", &args)
            .expect("seal")
            .expect("input required");
        let requests = result.input_requests.expect("requests");
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["name"]);
        let state1 = result.request_state.expect("state");
        // Round 2: answered; a second question is deferred, and the state carries the first.
        let responses = BTreeMap::from([(
            "name".to_owned(),
            serde_json::json!({"action": "accept", "content": {"name": "Ada"}}),
        )]);
        let round2 = Replay::open(
            &codec,
            "tools/call",
            "t",
            &args,
            Some(&state1),
            Some(responses),
            capabilities(),
        )
        .expect("round 2");
        let answer = round2.elicit(&asker("name"), "Name?", &form()).await;
        assert!(
            matches!(&answer, Ok(ElicitationAnswer::Accept(content)) if content["name"] == "Ada"),
            "{answer:?}"
        );
        let colour = round2.elicit(&asker("colour"), "Colour?", &form()).await;
        assert!(matches!(colour, Err(QuestionError::Deferred(_))));
        let state2 = round2
            .input_required(&codec, "tools/call", "t", &args)
            .expect("seal")
            .and_then(|result| result.request_state)
            .expect("state 2");
        assert_ne!(state1, state2);
        // Round 3: the first answer comes from the state alone.
        let responses = BTreeMap::from([(
            "colour".to_owned(),
            serde_json::json!({"action": "accept", "content": {"name": "blue"}}),
        )]);
        let round3 = Replay::open(
            &codec,
            "tools/call",
            "t",
            &args,
            Some(&state2),
            Some(responses),
            capabilities(),
        )
        .expect("round 3");
        assert!(
            round3
                .elicit(&asker("name"), "Name?", &form())
                .await
                .is_ok()
        );
        assert!(
            round3
                .elicit(&asker("colour"), "Colour?", &form())
                .await
                .is_ok()
        );
        assert!(
            round3
                .input_required(&codec, "tools/call", "t", &args)
                .expect("seal")
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_tampered_foreign_or_rebound_state_is_refused() {
        let codec = codec(Some(&[7u8; 32])).expect("codec");
        let args = arguments("x");
        let round1 = Replay::open(&codec, "tools/call", "t", &args, None, None, capabilities())
            .expect("round 1");
        let _ = round1.roots(&asker("r")).await;
        let _ = round1.elicit(&asker("name"), "Name?", &form()).await;
        let state = round1
            .input_required(&codec, "tools/call", "t", &args)
            .expect("seal")
            .and_then(|result| result.request_state)
            .expect("state");
        let open = |codec: &RequestStateCodec, method: &str, name: &str, args, state: &str| {
            Replay::open(codec, method, name, args, Some(state), None, capabilities()).map(|_| ())
        };
        assert!(open(&codec, "tools/call", "t", &args, &state).is_ok());
        let tampered = format!("{state}-TAMPERED");
        let error = open(&codec, "tools/call", "t", &args, &tampered).expect_err("tampered");
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(error.message.contains("integrity"), "{}", error.message);
        let other_server = codec_with(&[9u8; 32]);
        assert!(open(&other_server, "tools/call", "t", &args, &state).is_err());
        assert!(open(&codec, "tools/call", "other", &args, &state).is_err());
        assert!(open(&codec, "prompts/get", "t", &args, &state).is_err());
        assert!(open(&codec, "tools/call", "t", &arguments("y"), &state).is_err());
    }

    fn codec_with(key: &[u8]) -> RequestStateCodec {
        codec(Some(key)).expect("codec")
    }

    /// A question the tests ask: a form with its message, a sampling request, or roots.
    enum Question<'a> {
        Form(&'a str, &'a Value),
        Sample(&'a SamplingRequest),
        Roots,
    }

    /// Asks `questions` (by key) in one run of `replay`, each answered or deferred.
    async fn ask_all(replay: &Replay, questions: &[(&str, Question<'_>)]) {
        for (key, question) in questions {
            let _ = match question {
                Question::Form(message, form) => {
                    replay.elicit(&asker(key), message, form).await.map(|_| ())
                }
                Question::Sample(request) => replay.sample(&asker(key), request).await.map(|_| ()),
                Question::Roots => replay.roots(&asker(key)).await.map(|_| ()),
            };
        }
    }

    /// The request state after a first round (no answers) of a call asking `questions`.
    async fn state_asking(
        codec: &RequestStateCodec,
        args: &serde_json::Map<String, Value>,
        capabilities: ClientCapabilities,
        questions: &[(&str, Question<'_>)],
    ) -> String {
        let round = Replay::open(codec, "tools/call", "t", args, None, None, capabilities)
            .expect("round 1");
        ask_all(&round, questions).await;
        round
            .input_required(codec, "tools/call", "t", args)
            .expect("seal")
            .and_then(|result| result.request_state)
            .expect("a state")
    }

    /// A second round answering `key` with `answer` and asking `questions` again: the state it
    /// seals (some question must still be unanswered), and what that state holds.
    async fn second_round(
        codec: &RequestStateCodec,
        args: &serde_json::Map<String, Value>,
        state: &str,
        (key, answer): (&str, Value),
        questions: &[(&str, Question<'_>)],
    ) -> (String, State) {
        let round = Replay::open(
            codec,
            "tools/call",
            "t",
            args,
            Some(state),
            Some(BTreeMap::from([(key.to_owned(), answer)])),
            capabilities(),
        )
        .expect("round 2");
        ask_all(&round, questions).await;
        let sealed = round
            .input_required(codec, "tools/call", "t", args)
            .expect("seal")
            .and_then(|result| result.request_state)
            .expect("a question is still asked");
        let kept: State = codec
            .open_json_with(&sealed, &binding("tools/call", "t", args))
            .expect("open");
        (sealed, kept)
    }

    #[tokio::test]
    async fn an_undeclared_capability_is_a_clear_error_and_a_malformed_answer_asks_again() {
        let codec = codec_with(&[7u8; 32]);
        let args = arguments("x");
        let form = form();
        let state = state_asking(
            &codec,
            &args,
            capabilities(),
            &[("name", Question::Form("Name?", &form))],
        )
        .await;
        let responses = BTreeMap::from([("name".to_owned(), serde_json::json!(12345))]);
        let replay = Replay::open(
            &codec,
            "tools/call",
            "t",
            &args,
            Some(&state),
            Some(responses),
            capabilities(),
        )
        .expect("open");
        let roots = replay.roots(&asker("r")).await;
        assert!(
            matches!(&roots, Err(QuestionError::Unsupported(text)) if text.contains("roots")),
            "{roots:?}"
        );
        let missing = replay.missing_capability().expect("roots were missing");
        assert_eq!(missing.code.0, -32021);
        let data = missing.data.expect("data");
        assert!(data["requiredCapabilities"]["roots"].is_object(), "{data}");
        assert!(
            data["requiredCapabilities"].get("sampling").is_none(),
            "{data}"
        );
        let again = replay.elicit(&asker("name"), "Name?", &form).await;
        assert!(
            matches!(again, Err(QuestionError::Deferred(_))),
            "{again:?}"
        );
        assert!(
            super::codec(Some(&[1u8; 8])).is_err(),
            "a short key is refused"
        );
    }

    /// Item 7 of issue 29: a retry's answers are checked before the plugin sees them; one
    /// that does not fit its question is asked again, and not carried in the state.
    #[tokio::test]
    async fn a_retrys_answer_that_does_not_fit_its_question_is_asked_again() {
        let codec = codec_with(&[7u8; 32]);
        let args = arguments("x");
        let capabilities: ClientCapabilities = serde_json::from_value(
            serde_json::json!({"elicitation": {}, "sampling": {}, "roots": {}}),
        )
        .expect("capabilities");
        let form = serde_json::json!({
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"]
        });
        let responses = BTreeMap::from([
            (
                "forged".to_owned(),
                serde_json::json!({"action": "accept", "content": {"name": 12345, "role": "admin"}}),
            ),
            (
                "extra".to_owned(),
                serde_json::json!({"action": "accept", "content": {"name": "Ada", "role": "admin"}}),
            ),
            (
                "missing".to_owned(),
                serde_json::json!({"action": "accept"}),
            ),
            (
                "fits".to_owned(),
                serde_json::json!({"action": "accept", "content": {"name": "Ada"}}),
            ),
            (
                "as_user".to_owned(),
                serde_json::json!({"role": "user", "content": {"type": "text", "text": "hi"}, "model": "m"}),
            ),
            (
                "tool_use".to_owned(),
                serde_json::json!({"role": "assistant", "model": "m", "content":
                    [{"type": "tool_use", "id": "1", "name": "rm", "input": {}}]}),
            ),
            (
                "two_blocks".to_owned(),
                serde_json::json!({"role": "assistant", "model": "m", "content":
                    [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            ),
            (
                "model".to_owned(),
                serde_json::json!({"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}),
            ),
            (
                "web_root".to_owned(),
                serde_json::json!({"roots": [{"uri": "https://evil.example/"}]}),
            ),
            (
                "dotted_root".to_owned(),
                serde_json::json!({"roots": [{"uri": "file:///work/../etc"}]}),
            ),
            (
                "root".to_owned(),
                serde_json::json!({"roots": [{"uri": "file:///work"}]}),
            ),
        ]);
        let request = SamplingRequest::default();
        let mut questions: Vec<(&str, Question<'_>)> = Vec::new();
        for key in ["forged", "extra", "missing", "fits"] {
            questions.push((key, Question::Form("Name?", &form)));
        }
        for key in ["as_user", "tool_use", "two_blocks", "model"] {
            questions.push((key, Question::Sample(&request)));
        }
        for key in ["web_root", "dotted_root", "root"] {
            questions.push((key, Question::Roots));
        }
        let state = state_asking(&codec, &args, capabilities.clone(), &questions).await;
        let replay = Replay::open(
            &codec,
            "tools/call",
            "t",
            &args,
            Some(&state),
            Some(responses),
            capabilities,
        )
        .expect("open");
        for key in ["forged", "extra", "missing"] {
            let again = replay.elicit(&asker(key), "Name?", &form).await;
            assert!(
                matches!(again, Err(QuestionError::Deferred(_))),
                "{key}: {again:?}"
            );
        }
        let fits = replay.elicit(&asker("fits"), "Name?", &form).await;
        assert!(
            matches!(&fits, Ok(ElicitationAnswer::Accept(content)) if content["name"] == "Ada"),
            "{fits:?}"
        );
        for key in ["as_user", "tool_use", "two_blocks"] {
            let again = replay.sample(&asker(key), &request).await;
            assert!(
                matches!(again, Err(QuestionError::Deferred(_))),
                "{key}: {again:?}"
            );
        }
        assert!(replay.sample(&asker("model"), &request).await.is_ok());
        // The tool use and the two blocks are read, and refused by the host, not by serde.
        for (key, why) in [("tool_use", "tool use"), ("two_blocks", "2 content blocks")] {
            let value = replay
                .answers
                .get(key)
                .map(|given| given.answer.clone())
                .unwrap_or_default();
            let read: CreateMessageResult = serde_json::from_value(value).expect("a result");
            let refused = sampling_answer(read);
            assert!(
                matches!(&refused, Err(QuestionError::Failed(text)) if text.contains(why)),
                "{key}: {refused:?}"
            );
        }
        for key in ["web_root", "dotted_root"] {
            let again = replay.roots(&asker(key)).await;
            assert!(
                matches!(again, Err(QuestionError::Deferred(_))),
                "{key}: {again:?}"
            );
        }
        assert!(replay.roots(&asker("root")).await.is_ok());
        // The state carries the answers that fit, and the misfits are asked again.
        let result = replay
            .input_required(&codec, "tools/call", "t", &args)
            .expect("seal")
            .expect("input required");
        let asked: Vec<&String> = result
            .input_requests
            .as_ref()
            .expect("requests")
            .keys()
            .collect();
        assert_eq!(
            asked,
            [
                "as_user",
                "dotted_root",
                "extra",
                "forged",
                "missing",
                "tool_use",
                "two_blocks",
                "web_root"
            ]
        );
        let state: State = codec
            .open_json_with(
                result.request_state.as_deref().expect("state"),
                &binding("tools/call", "t", &args),
            )
            .expect("open the state");
        assert_eq!(
            state.answers.keys().collect::<Vec<_>>(),
            ["fits", "model", "root"]
        );
    }

    fn accept(name: &str) -> Value {
        serde_json::json!({"action": "accept", "content": {"name": name}})
    }

    /// Round 1 of a call asking `message` under `key`: the state of its `input_required`.
    async fn first_round(codec: &RequestStateCodec, key: &str, message: &str) -> String {
        let round = Replay::open(
            codec,
            "tools/call",
            "t",
            &arguments("x"),
            None,
            None,
            capabilities(),
        )
        .expect("round 1");
        let deferred = round.elicit(&asker(key), message, &form()).await;
        assert!(
            matches!(deferred, Err(QuestionError::Deferred(_))),
            "{deferred:?}"
        );
        round
            .input_required(codec, "tools/call", "t", &arguments("x"))
            .expect("seal")
            .and_then(|result| result.request_state)
            .expect("state")
    }

    /// A retry's answer is bound to the question the client was shown: a tool that asks
    /// another question under the same key (a consent for one file, reused for another) is
    /// asked again, and a response under a key the last round did not ask is dropped.
    #[tokio::test]
    async fn a_retrys_answer_counts_only_for_the_question_it_was_given_for() {
        let codec = codec_with(&[7u8; 32]);
        let args = arguments("x");
        let state = first_round(&codec, "consent", "Delete notes.txt?").await;
        let responses = BTreeMap::from([
            ("consent".to_owned(), accept("yes")),
            ("unasked".to_owned(), accept("yes")),
        ]);
        let open = || {
            Replay::open(
                &codec,
                "tools/call",
                "t",
                &args,
                Some(&state),
                Some(responses.clone()),
                capabilities(),
            )
            .expect("round 2")
        };
        let other = open();
        let swapped = other
            .elicit(&asker("consent"), "Delete secrets.txt?", &form())
            .await;
        assert!(
            matches!(swapped, Err(QuestionError::Deferred(_))),
            "{swapped:?}"
        );
        let unasked = other.elicit(&asker("unasked"), "Anything?", &form()).await;
        assert!(
            matches!(unasked, Err(QuestionError::Deferred(_))),
            "{unasked:?}"
        );
        let same = open();
        let answer = same
            .elicit(&asker("consent"), "Delete notes.txt?", &form())
            .await;
        assert!(
            matches!(&answer, Ok(ElicitationAnswer::Accept(content)) if content["name"] == "yes"),
            "{answer:?}"
        );
    }

    /// An answer over the plugin's `max_question_bytes` is asked again, not sealed into the
    /// state, so that a retry within the limit is taken.
    #[tokio::test]
    async fn an_answer_over_the_size_limit_is_asked_again_and_not_kept() {
        let codec = codec_with(&[7u8; 32]);
        let args = arguments("x");
        let limited = asker("name").with_max_answer_bytes(256);
        let state = first_round(&codec, "name", "Name?").await;
        let round = |state: &str, name: &str| {
            Replay::open(
                &codec,
                "tools/call",
                "t",
                &args,
                Some(state),
                Some(BTreeMap::from([("name".to_owned(), accept(name))])),
                capabilities(),
            )
            .expect("round")
        };
        let large = round(&state, &"A".repeat(1000));
        let refused = large.elicit(&limited, "Name?", &form()).await;
        assert!(
            matches!(refused, Err(QuestionError::Deferred(_))),
            "{refused:?}"
        );
        let again = large
            .input_required(&codec, "tools/call", "t", &args)
            .expect("seal")
            .expect("asked again");
        assert!(again.input_requests.expect("requests").contains_key("name"));
        let state = again.request_state.expect("state");
        let sealed: State = codec
            .open_json_with(&state, &binding("tools/call", "t", &args))
            .expect("open");
        assert!(sealed.answers.is_empty(), "the refused answer was kept");
        let small = round(&state, "Ada");
        let answer = small.elicit(&limited, "Name?", &form()).await;
        assert!(
            matches!(&answer, Ok(ElicitationAnswer::Accept(content)) if content["name"] == "Ada"),
            "{answer:?}"
        );
    }

    /// A client whose state was refused (expired, or the plugin changed under `--watch`)
    /// retries without it, as told, keeping its responses: they answered questions of the
    /// version it was shown, so they answer nothing now, and the questions are asked again.
    #[tokio::test]
    async fn responses_sent_without_a_state_answer_nothing() {
        let codec = codec_with(&[7u8; 32]);
        let args = arguments("x");
        let stateless = Replay::open(
            &codec,
            "tools/call",
            "t",
            &args,
            None,
            Some(BTreeMap::from([("consent".to_owned(), accept("yes"))])),
            capabilities(),
        )
        .expect("open");
        let asked = stateless
            .elicit(&asker("consent"), "Delete secrets.txt?", &form())
            .await;
        assert!(
            matches!(asked, Err(QuestionError::Deferred(_))),
            "{asked:?}"
        );
    }

    /// An answer is kept for the next round as what was read of it: fields nobody reads and
    /// `_meta` (which no size limit counts) are not carried in the state this server signs;
    /// an answer kept meets a changed question in a later round and is asked again.
    #[tokio::test]
    async fn the_state_keeps_what_was_read_of_an_answer_for_its_question_only() {
        let codec = codec_with(&[7u8; 32]);
        let args = arguments("x");
        let form = form();
        let questions = [
            ("name", Question::Form("Name?", &form)),
            ("colour", Question::Form("Colour?", &form)),
        ];
        let state = state_asking(&codec, &args, capabilities(), &questions).await;
        let padding = "p".repeat(100_000);
        let padded = serde_json::json!({
            "action": "accept",
            "content": {"name": "Ada"},
            "_meta": {"pad": padding},
            "unknown": padding,
        });
        let (sealed, kept) =
            second_round(&codec, &args, &state, ("name", padded), &questions).await;
        assert!(
            sealed.len() < 2_000,
            "the state carries the padding: {} bytes",
            sealed.len()
        );
        assert_eq!(
            kept.answers["name"].answer,
            serde_json::json!({"action": "accept", "content": {"name": "Ada"}})
        );
        // Round 3: the tool asks another question under `name`; the kept answer is not its.
        let round = Replay::open(
            &codec,
            "tools/call",
            "t",
            &args,
            Some(&sealed),
            None,
            capabilities(),
        )
        .expect("round 3");
        let changed = round
            .elicit(&asker("name"), "Your manager's name?", &form)
            .await;
        assert!(
            matches!(changed, Err(QuestionError::Deferred(_))),
            "{changed:?}"
        );
        let same = round.elicit(&asker("name"), "Name?", &form).await;
        assert!(same.is_ok(), "{same:?}");
    }

    /// A form's own field named `_meta` is the user's answer, not the protocol's: kept.
    #[tokio::test]
    async fn a_forms_field_named_meta_is_kept() {
        let codec = codec_with(&[7u8; 32]);
        let args = arguments("x");
        let form = serde_json::json!({"type": "object", "properties": {
            "_meta": {"type": "string"}, "other": {"type": "string"}}});
        let questions = [
            ("a", Question::Form("A?", &form)),
            ("b", Question::Form("B?", &form)),
        ];
        let state = state_asking(&codec, &args, capabilities(), &questions).await;
        let answer = serde_json::json!({"action": "accept", "content": {"_meta": "kept"}});
        let (_, kept) = second_round(&codec, &args, &state, ("a", answer), &questions).await;
        assert_eq!(kept.answers["a"].answer["content"]["_meta"], "kept");
    }
}
