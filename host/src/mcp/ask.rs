//! The MCP session as a [`QuestionHandler`]: a plugin's question becomes a request to the
//! session's client (`elicitation/create`, `sampling/createMessage`, `roots/list`), asked only
//! of a client that declared the capability, and answered back to the plugin.
//!
//! A session without an `initialize` handshake (revision 2026-07-28's stateless requests)
//! cannot be sent requests: its questions fail as unsupported, a tool error the model reads.

#![allow(deprecated)]

use async_trait::async_trait;
use rmcp::model::{ClientResult, ServerRequest};
use rmcp::model::{
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    ListRootsResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleServer};
use serde_json::Value;

use super::content::{our_role, sampled_content};
use crate::question::{
    Asker, ElicitationAnswer, QuestionError, QuestionHandler, Root, SamplingAnswer, SamplingRequest,
};

/// Asks the client of one MCP session.
pub(crate) struct PeerQuestions {
    pub(crate) peer: Peer<RoleServer>,
}

impl PeerQuestions {
    /// The client's capabilities, or why it cannot be asked at all.
    fn capabilities(
        &self,
        asker: &Asker,
        what: &str,
    ) -> Result<rmcp::model::ClientCapabilities, QuestionError> {
        match self.peer.peer_info() {
            Some(info) => Ok(info.capabilities.clone()),
            None => Err(QuestionError::Unsupported(format!(
                "tool '{}' of plugin '{}' asked the client to {what}, but this session has no \
                 initialize handshake (a stateless request) and cannot be sent requests",
                asker.tool, asker.plugin
            ))),
        }
    }
}

/// An elicitation's message, saying first which plugin and tool ask: one server hosts many
/// plugins, and the person answering should know which of them wants what. The host's line
/// comes before anything the plugin wrote, which cannot imitate it and is bounded
/// ([`question::message`](crate::question::message)), so it can be neither forged nor
/// pushed out of sight.
pub(crate) fn attributed(message: &str, asker: &Asker) -> String {
    format!("{}\n{message}", attribution(asker))
}

/// The host's line naming which plugin and tool (or request) ask: `[plugin 'P', tool 'T'
/// asks]`.
pub(crate) fn attribution(asker: &Asker) -> String {
    format!("[plugin '{}', {} asks]", asker.plugin, asker.subject())
}

/// A form question as MCP's `elicitation/create` params. MCP's elicitation schema is a flat
/// object of primitive fields: one the protocol does not allow is refused here, not passed on
/// for the client to choke on.
pub(crate) fn elicitation_params(
    message: &str,
    schema: &Value,
    asker: &Asker,
) -> Result<ElicitRequestParams, QuestionError> {
    let requested_schema: ElicitationSchema =
        serde_json::from_value(schema.clone()).map_err(|error| {
            QuestionError::Denied(format!(
                "the form's schema is not one MCP elicitation allows (a flat object of string, \
                 number, integer, boolean and enum fields): {error}"
            ))
        })?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: attributed(message, asker),
        requested_schema,
    })
}

/// What the client answered to a form, in our terms.
pub(crate) fn elicitation_answer(result: ElicitResult) -> Result<ElicitationAnswer, QuestionError> {
    Ok(match result.action {
        ElicitationAction::Accept => match result.content {
            Some(Value::Object(content)) => ElicitationAnswer::Accept(content),
            None => ElicitationAnswer::Accept(serde_json::Map::new()),
            Some(_) => {
                return Err(QuestionError::Failed(
                    "the client accepted with content that is not a JSON object".into(),
                ));
            }
        },
        ElicitationAction::Decline => ElicitationAnswer::Decline,
        _ => ElicitationAnswer::Cancel,
    })
}

/// What the client's model said, in our terms (its shape is checked with every handler's,
/// in [`question::answer`](crate::question::answer)).
pub(crate) fn sampling_answer(
    result: CreateMessageResult,
) -> Result<SamplingAnswer, QuestionError> {
    Ok(SamplingAnswer {
        role: our_role(result.message.role),
        content: sampled_content(result.message.content).map_err(QuestionError::Failed)?,
        model: result.model,
        stop_reason: result.stop_reason,
    })
}

/// The client's roots, in our terms (checked with every handler's, in
/// [`question::answer`](crate::question::answer)).
pub(crate) fn roots_answer(result: ListRootsResult) -> Vec<Root> {
    result
        .roots
        .into_iter()
        .map(|root| Root {
            uri: root.uri,
            name: root.name,
        })
        .collect()
}

/// A question needing a capability the client did not declare.
pub(crate) fn undeclared(asker: &Asker, capability: &str) -> QuestionError {
    QuestionError::Unsupported(format!(
        "tool '{}' of plugin '{}' needs the client's `{capability}` capability, which this \
         client did not declare",
        asker.tool, asker.plugin
    ))
}

/// Sends a question to the client and waits for its answer. A question given up on before the
/// answer came (its call ended, or its time to be answered ran out: this future is dropped) is
/// cancelled at the client too (`notifications/cancelled`), so that no form or sampling request
/// stays open there for a call that is over.
async fn ask_client(
    peer: &Peer<RoleServer>,
    request: ServerRequest,
) -> Result<ClientResult, ServiceError> {
    let handle = peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await?;
    let mut unanswered = CancelOnDrop(Some((peer.clone(), handle.id.clone())));
    let answer = handle.await_response().await;
    unanswered.0 = None;
    answer
}

/// Tells the client a request is cancelled when dropped, unless disarmed.
struct CancelOnDrop(Option<(Peer<RoleServer>, rmcp::model::RequestId)>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((peer, id)) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let reason = "the tool call that asked ended before the answer came".to_owned();
            let _ = peer
                .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some(reason),
                ))
                .await;
        });
    }
}

fn failed(error: impl std::fmt::Display) -> QuestionError {
    QuestionError::Failed(format!("the client answered with an error: {error}"))
}

#[async_trait]
impl QuestionHandler for PeerQuestions {
    async fn elicit(
        &self,
        asker: &Asker,
        message: &str,
        schema: &Value,
    ) -> Result<ElicitationAnswer, QuestionError> {
        if self
            .capabilities(asker, "elicit input")?
            .elicitation
            .is_none()
        {
            return Err(undeclared(asker, "elicitation"));
        }
        let params = elicitation_params(message, schema, asker)?;
        let request = ServerRequest::ElicitRequest(rmcp::model::ElicitRequest::new(params));
        match ask_client(&self.peer, request).await.map_err(failed)? {
            ClientResult::ElicitResult(result) => elicitation_answer(result),
            _ => Err(failed(ServiceError::UnexpectedResponse)),
        }
    }

    async fn sample(
        &self,
        asker: &Asker,
        request: &SamplingRequest,
    ) -> Result<SamplingAnswer, QuestionError> {
        if self.capabilities(asker, "sample")?.sampling.is_none() {
            return Err(undeclared(asker, "sampling"));
        }
        let params = super::input_required::sampling_params(request, asker);
        params.validate().map_err(failed)?;
        let request =
            ServerRequest::CreateMessageRequest(rmcp::model::CreateMessageRequest::new(params));
        match ask_client(&self.peer, request).await.map_err(failed)? {
            ClientResult::CreateMessageResult(result) => sampling_answer(*result),
            _ => Err(failed(ServiceError::UnexpectedResponse)),
        }
    }

    async fn roots(&self, asker: &Asker) -> Result<Vec<Root>, QuestionError> {
        if self.capabilities(asker, "list its roots")?.roots.is_none() {
            return Err(undeclared(asker, "roots"));
        }
        let request = ServerRequest::ListRootsRequest(rmcp::model::ListRootsRequest {
            method: Default::default(),
            extensions: Default::default(),
        });
        match ask_client(&self.peer, request).await.map_err(failed)? {
            ClientResult::ListRootsResult(result) => Ok(roots_answer(result)),
            _ => Err(failed(ServiceError::UnexpectedResponse)),
        }
    }
}
