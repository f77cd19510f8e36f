//! An MCP session's resources, resource templates, prompts and completions: gathered from the
//! sessions of its plugins (contract 0.3.0), each request routed to the plugin that offers what
//! it names, in that plugin's session instance.

use std::collections::BTreeMap;

use rmcp::model::{
    CacheScope, CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::content;
use super::request::Target;
use super::session::McpServer;
use crate::plugin::{PluginSession, ResourceOwner, resource_owner};
use crate::tool::{CompletionRef, RequestError};

/// How long a client may keep a list or a read (`ttlMs`, revision 2026-07-28): not at all;
/// a plugin's lists change with `--watch` and with what its calls do, and the session says so.
pub(super) const TTL_MS: u64 = 0;

/// The page of `items` a request's cursor asks for (a cursor is an index this server gave).
pub(super) fn page<T>(
    items: Vec<T>,
    request: Option<PaginatedRequestParams>,
    page_size: usize,
) -> Result<(Vec<T>, Option<String>), ErrorData> {
    let total = items.len();
    let start = match request.and_then(|r| r.cursor) {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .ok()
            .filter(|&at| at <= total)
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("the cursor {cursor:?} is not one this server gave"),
                    None,
                )
            })?,
    };
    let end = start.saturating_add(page_size.max(1)).min(total);
    let next = (end < total).then(|| end.to_string());
    Ok((
        items.into_iter().skip(start).take(end - start).collect(),
        next,
    ))
}

/// A plugin's failure to answer a request, as MCP's error.
fn request_error(error: RequestError, not_found: impl FnOnce(String) -> ErrorData) -> ErrorData {
    match error {
        RequestError::NotFound(text) => not_found(text),
        RequestError::InvalidArgument(text) => ErrorData::invalid_params(text, None),
        RequestError::Internal(text) => ErrorData::internal_error(text, None),
    }
}

/// Two plugins answer to one name: refused, naming both.
fn ambiguous(kind: &str, name: &str, one: &PluginSession, two: &PluginSession) -> ErrorData {
    tracing::warn!(
        "the {kind} '{name}' is offered by plugins '{}' and '{}'; refusing to choose",
        one.plugin_name(),
        two.plugin_name()
    );
    ErrorData::invalid_params(
        format!(
            "the {kind} '{name}' is offered by two plugins ('{}' and '{}'); this server will \
             not choose between them",
            one.plugin_name(),
            two.plugin_name()
        ),
        None,
    )
}

/// MCP's "Resource not found" (SEP-2164): invalid params, naming the URI in `data`.
fn resource_not_found(uri: &str) -> ErrorData {
    ErrorData::invalid_params(
        "Resource not found",
        Some(serde_json::json!({ "uri": uri })),
    )
}

/// The resource URIs content blocks carry: embedded resources and links.
pub(super) fn named_uris(content: &[crate::tool::Content]) -> impl Iterator<Item = &str> {
    use crate::tool::Content;
    content.iter().filter_map(|block| match block {
        Content::Resource(contents) => Some(contents.uri.as_str()),
        Content::Link(link) => Some(link.uri.as_str()),
        _ => None,
    })
}

/// The answer for a prompt this session has none of.
fn no_prompt(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no prompt named '{name}'; call prompts/list for the prompts"),
        None,
    )
}

/// Which of `plugins` (a session's, all of them) a request for the prompt `name` goes to, as
/// far as known without asking a plugin: the one that offered it at load, else the one whose
/// list as last read names it (none if two do). What the audit and metrics name.
pub(super) fn known_prompt_owner<'a>(
    plugins: &'a [PluginSession],
    name: &str,
) -> Option<&'a PluginSession> {
    if let Some(owner) = load_time_prompt_owner(plugins, name) {
        return Some(owner);
    }
    let mut listing = plugins.iter().filter(|session| session.offers_prompt(name));
    match (listing.next(), listing.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// The one of `plugins` that offered the prompt `name` at load (no two do: loading refuses
/// such clashes); it keeps the name whatever lists the others give while serving.
fn load_time_prompt_owner<'a>(
    plugins: &'a [PluginSession],
    name: &str,
) -> Option<&'a PluginSession> {
    plugins
        .iter()
        .find(|session| session.offered_prompt_at_load(name))
}

/// A plugin speaks only for its own resources: content it returns (a tool's result, a
/// prompt's messages, a read's contents) may name a URI it offers, or one no plugin of the
/// session offers — never another plugin's, whose contents and links the client would take
/// as that plugin's. `what` names the content in the message.
pub(super) fn speaks_for_itself<'a>(
    plugins: &[PluginSession],
    plugin: &str,
    what: &str,
    uris: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    // Each URI once (a result may name one URI thousands of times), and no more URIs than a
    // plugin may offer resources: each costs a look at every plugin's offerings.
    let most = llm_worker_rules::resource::MAX_RESOURCES;
    let mut seen = std::collections::HashSet::new();
    for uri in uris {
        if !seen.insert(uri) {
            continue;
        }
        if seen.len() > most {
            tracing::warn!(%plugin, "{what} named more than {most} resources; refused");
            return Err(format!(
                "{what} of plugin '{plugin}' names more than {most} resources (links or \
                 embedded resources); the content was refused"
            ));
        }
        // Held to the rules of the URIs a plugin lists (one word, no character that hides
        // text): a client shows a link's URI as a listed resource's.
        if let Err(problem) = llm_worker_rules::resource::check_uri(uri)
            .and_then(|()| llm_worker_rules::resource::check_ascii(uri))
        {
            let shown: String = uri.chars().take(200).collect();
            let shown = shown.escape_debug();
            tracing::warn!(%plugin, "{what} named the resource \"{shown}\": {problem}; refused");
            return Err(format!(
                "{what} of plugin '{plugin}' names the resource \"{shown}\", which is not a \
                 URI a client may be shown: {problem}; the content was refused"
            ));
        }
        let owner = match resource_owner(plugins, uri) {
            ResourceOwner::Nobody => continue,
            owner if owner.is(plugin) => continue,
            ResourceOwner::One(owner) => owner,
            // Two lists that changed while serving name it: neither plugin speaks for it.
            ResourceOwner::Disputed(one, two) => {
                if one.plugin_name() == plugin {
                    two
                } else {
                    one
                }
            }
        };
        let shown: String = uri.chars().take(200).collect();
        tracing::warn!(%plugin, "{what} named another plugin's resource '{shown}'; refused");
        return Err(format!(
            "{what} of plugin '{plugin}' names the resource '{shown}', which plugin '{}' \
             serves; a plugin may embed or link only its own resources or URIs no plugin \
             serves, so the content was refused",
            owner.plugin_name()
        ));
    }
    Ok(())
}

impl McpServer {
    /// The sessions of this MCP session's plugins whose resources and prompts it may use
    /// (opening them starts nothing).
    fn plugins(&self) -> Vec<PluginSession> {
        let mut tools = self.lock();
        tools.refresh();
        tools.visible_plugin_sessions()
    }

    /// The sessions of every plugin of this MCP session, those it was granted only some tools
    /// of included: whose a resource is, is decided among all of them (a plugin granted whole
    /// may not take the URI of one granted in part), and only then whether this session may
    /// use it.
    fn owners(&self) -> Vec<PluginSession> {
        let mut tools = self.lock();
        tools.refresh();
        tools.plugin_sessions()
    }

    /// The plugin session that serves `uri` (see [`resource_owner`]), if this session may use
    /// its resources; an error if two lists that changed while serving both name it: a read
    /// never goes to a guess.
    pub(super) fn resource_owner(&self, uri: &str) -> Result<Option<PluginSession>, ErrorData> {
        // Both lists from one look at the catalog.
        let (owners, usable) = {
            let mut tools = self.lock();
            tools.refresh();
            (tools.plugin_sessions(), tools.visible_plugin_sessions())
        };
        let owner = match resource_owner(&owners, uri) {
            ResourceOwner::Nobody => return Ok(None),
            ResourceOwner::One(one) => one.clone(),
            ResourceOwner::Disputed(one, two) => {
                return Err(ambiguous("resource", uri, one, two));
            }
        };
        let usable = usable
            .iter()
            .any(|session| session.plugin_name() == owner.plugin_name());
        Ok(usable.then_some(owner))
    }

    /// `work` (a request of the plugin `session`), ended as soon as the session no longer
    /// serves that plugin's revision (changed, removed or no longer granted under `--watch`):
    /// it would go on with the withdrawn revision's instance, grants and secrets.
    fn until_withdrawn<'a, T>(
        &self,
        session: &PluginSession,
        what: &'a str,
        work: impl Future<Output = Result<T, RequestError>> + 'a,
    ) -> impl Future<Output = Result<T, RequestError>> + 'a {
        let withdrawn = self.lock().withdrawal_of_plugin(session);
        async move {
            tokio::select! {
                biased;
                () = withdrawn => Err(RequestError::Internal(format!(
                    "{what} stopped: its plugin is no longer served in this session (changed or \
                     removed, or no longer granted)"
                ))),
                done = work => done,
            }
        }
    }

    /// A plugin's list as read now (which may run its code when the plugin said the list
    /// changed), or `None` once the session no longer serves that plugin's revision: a
    /// withdrawn plugin's list is neither waited for nor shown, and its instance (with its
    /// grants and secrets) reads nothing more for this request.
    async fn listed_unless_withdrawn<T>(
        &self,
        session: &PluginSession,
        listing: impl Future<Output = T>,
    ) -> Option<T> {
        let withdrawn = self.lock().withdrawal_of_plugin(session);
        tokio::select! {
            biased;
            () = withdrawn => None,
            listed = listing => Some(listed),
        }
    }

    pub(super) async fn resources_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut resources = Vec::new();
        let owners = self.owners();
        for session in &self.plugins() {
            let Some(listed) = self
                .listed_unless_withdrawn(session, session.resources())
                .await
            else {
                continue;
            };
            // A plugin's list does not show what another plugin offered at load.
            resources.extend(
                listed
                    .iter()
                    .filter(|resource| {
                        !matches!(resource_owner(&owners, &resource.uri),
                            ResourceOwner::One(owner) if owner.plugin_name() != session.plugin_name())
                    })
                    .cloned()
                    .map(content::resource),
            );
        }
        let (page, next) = page(resources, request, self.options.page_size)?;
        let mut result = ListResourcesResult::with_all_items(page)
            .with_ttl_ms(TTL_MS)
            .with_cache_scope(CacheScope::Private);
        result.next_cursor = next;
        Ok(result)
    }

    pub(super) fn templates_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = self
            .plugins()
            .iter()
            .flat_map(|session| {
                session
                    .resource_templates()
                    .iter()
                    .map(content::template)
                    .collect::<Vec<_>>()
            })
            .collect();
        let (page, next) = page(templates, request, self.options.page_size)?;
        let mut result = ListResourceTemplatesResult::with_all_items(page)
            .with_ttl_ms(TTL_MS)
            .with_cache_scope(CacheScope::Private);
        result.next_cursor = next;
        Ok(result)
    }

    /// Reads a resource; the read may report and ask the client, as a tool call does (on
    /// 2026-07-28, deferred like a tool's questions).
    pub(super) async fn read(
        &self,
        mut request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let uri = uri.as_str();
        let Some(session) = self.resource_owner(uri)? else {
            return Err(resource_not_found(uri));
        };
        self.admit()?;
        let revision = self.lock().revision_of(&session);
        let asking = self.asking(
            Target {
                method: "resources/read",
                name: uri,
                revision,
            },
            &serde_json::Map::new(),
            &mut request.request_state,
            &mut request.input_responses,
            &context,
        )?;
        let what = format!("the read of '{uri}'");
        // The plugin is asked for the URI as it spells its own (every URI it offers is in the
        // form RFC 3986 compares by): the owner was found in that form, and the plugin compares
        // URIs and matches its templates as written (`NOTES://all`, `notes://%61ll`).
        let spelled = llm_worker_rules::resource::comparable_uri(uri);
        let read = self
            .run(
                &what,
                context,
                asking.questions(),
                self.until_withdrawn(&session, &what, session.read_resource(&spelled)),
            )
            .await?;
        if let Some(input_required) = self.input_required(&asking, uri)? {
            return Ok(ReadResourceResponse::InputRequired(input_required));
        }
        if read.is_err()
            && let Some(error) = asking.missing_capability()
        {
            return Err(error);
        }
        let contents = read.map_err(|error| request_error(error, |_| resource_not_found(uri)))?;
        if contents.is_empty() {
            // A read answers with contents, or not at all (SEP-2164).
            return Err(resource_not_found(uri));
        }
        speaks_for_itself(
            &self.owners(),
            session.plugin_name(),
            &what,
            contents.iter().map(|contents| contents.uri.as_str()),
        )
        .map_err(|text| ErrorData::internal_error(text, None))?;
        let mut result = ReadResourceResult::new(
            contents
                .into_iter()
                .map(content::resource_contents)
                .collect(),
        );
        result.ttl_ms = Some(TTL_MS);
        result.cache_scope = Some(CacheScope::Private);
        Ok(ReadResourceResponse::Complete(result))
    }

    /// Subscribes to a resource the session's plugins offer; notices of its changes come from
    /// the plugin, during its calls.
    pub(super) fn subscribe_to(&self, uri: &str, subscribe: bool) -> Result<(), ErrorData> {
        // Kept as URIs are compared (`NOTES://all` is `notes://all`, whose notices it gets),
        // and held to the rule of a URI: its length above all (a URI escaped at length, matched
        // by a template, would take kilobytes per subscription for the session's life).
        if let Err(problem) = llm_worker_rules::resource::check_uri(uri) {
            return Err(ErrorData::invalid_params(
                format!("cannot subscribe to this URI: {problem}"),
                None,
            ));
        }
        let comparable = llm_worker_rules::resource::comparable_uri(uri);
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        if !subscribe {
            subscriptions.remove(&comparable);
            return Ok(());
        }
        if self.resource_owner(uri)?.is_none() {
            return Err(resource_not_found(uri));
        }
        // Bounded like a plugin's resource list: one entry per resource it could name.
        if subscriptions.len() >= super::MAX_SUBSCRIPTIONS {
            return Err(ErrorData::invalid_params(
                format!(
                    "this session has {} subscriptions, the most it may have; unsubscribe from \
                     some first",
                    super::MAX_SUBSCRIPTIONS
                ),
                None,
            ));
        }
        subscriptions.insert(comparable);
        Ok(())
    }

    pub(super) async fn prompts_page(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut prompts = Vec::new();
        // Among every plugin of the session, those granted in part included (as for resources).
        let owners = self.owners();
        for session in self.plugins() {
            let Some(listed) = self
                .listed_unless_withdrawn(&session, session.prompts())
                .await
            else {
                continue;
            };
            // A plugin's list does not show what another plugin offered at load.
            prompts.extend(
                listed
                    .iter()
                    .filter(|prompt| {
                        load_time_prompt_owner(&owners, &prompt.name)
                            .is_none_or(|owner| owner.plugin_name() == session.plugin_name())
                    })
                    .map(content::prompt),
            );
        }
        let (page, next) = page(prompts, request, self.options.page_size)?;
        let mut result = ListPromptsResult::with_all_items(page)
            .with_ttl_ms(TTL_MS)
            .with_cache_scope(CacheScope::Private);
        result.next_cursor = next;
        Ok(result)
    }

    /// The plugin session offering the prompt `name`; an error if none does, or two do. The
    /// lists as last read are asked first, so that finding one plugin's prompt never waits for
    /// another plugin reading its changed list again; only a name none of them has makes the
    /// changed lists be read.
    async fn prompt_owner(&self, name: &str) -> Result<PluginSession, ErrorData> {
        let plugins = self.plugins();
        // The plugin that offered it at load keeps it, decided among every plugin of the
        // session: a list another plugin gives while serving cannot take it (nor make it
        // ambiguous), whether or not this session may use its owner.
        if let Some(owner) = load_time_prompt_owner(&self.owners(), name) {
            return plugins
                .iter()
                .find(|session| session.plugin_name() == owner.plugin_name())
                .cloned()
                .ok_or_else(|| no_prompt(name));
        }
        let known: Vec<&PluginSession> = plugins
            .iter()
            .filter(|session| session.offers_prompt(name))
            .collect();
        match known.as_slice() {
            [one] => return Ok((*one).clone()),
            [one, two, ..] => return Err(ambiguous("prompt", name, one, two)),
            [] => {}
        }
        let mut owner: Option<PluginSession> = None;
        let mut withdrawn = false;
        for session in plugins {
            let Some(prompts) = self
                .listed_unless_withdrawn(&session, session.prompts())
                .await
            else {
                withdrawn = true;
                continue;
            };
            if prompts.iter().any(|prompt| prompt.name == name) {
                if let Some(first) = &owner {
                    return Err(ambiguous("prompt", name, first, &session));
                }
                owner = Some(session);
            }
        }
        match owner {
            Some(owner) => Ok(owner),
            // Not "no such prompt": the plugin that offers it may have been replaced meanwhile.
            None if withdrawn => Err(ErrorData::internal_error(
                format!(
                    "a plugin of this session changed while prompt '{name}' was looked for \
                     (replaced or removed); call again"
                ),
                None,
            )),
            None => Err(no_prompt(name)),
        }
    }

    /// Renders a prompt; a prompt may ask the client too (on 2026-07-28, deferred like a
    /// tool's questions).
    pub(super) async fn render(
        &self,
        mut request: GetPromptRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let session = self.prompt_owner(&request.name).await?;
        let arguments_json = request.arguments.take().unwrap_or_default();
        let arguments = string_arguments(arguments_json.clone())?;
        self.admit()?;
        let revision = self.lock().revision_of(&session);
        let asking = self.asking(
            Target {
                method: "prompts/get",
                name: &request.name,
                revision,
            },
            &arguments_json,
            &mut request.request_state,
            &mut request.input_responses,
            context,
        )?;
        let what = format!("prompt '{}'", request.name);
        let rendered = self
            .run(
                &what,
                context.clone(),
                asking.questions(),
                self.until_withdrawn(
                    &session,
                    &what,
                    session.get_prompt(&request.name, &arguments),
                ),
            )
            .await?;
        if let Some(input_required) = self.input_required(&asking, &request.name)? {
            return Ok(GetPromptResponse::InputRequired(input_required));
        }
        if rendered.is_err()
            && let Some(error) = asking.missing_capability()
        {
            return Err(error);
        }
        let rendered = rendered
            .map_err(|error| request_error(error, |text| ErrorData::invalid_params(text, None)))?;
        speaks_for_itself(
            &self.owners(),
            session.plugin_name(),
            &what,
            rendered
                .messages
                .iter()
                .flat_map(|message| named_uris(std::slice::from_ref(&message.content))),
        )
        .map_err(|text| ErrorData::internal_error(text, None))?;
        Ok(GetPromptResponse::Complete(content::rendered_prompt(
            rendered,
        )))
    }

    /// Completes an argument; the completion may report and ask the client of a stateful
    /// session.
    pub(super) async fn completion(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let (reference, session) = match &request.r#ref {
            Reference::Prompt(prompt) => (
                CompletionRef::Prompt(prompt.name.clone()),
                self.prompt_owner(&prompt.name).await?,
            ),
            Reference::Resource(template) => {
                let owner = self.plugins().into_iter().find(|session| {
                    session
                        .resource_templates()
                        .iter()
                        .any(|t| t.uri_template == template.uri)
                });
                let Some(owner) = owner else {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "no resource template '{}'; call resources/templates/list for them",
                            template.uri
                        ),
                        None,
                    ));
                };
                (CompletionRef::ResourceTemplate(template.uri.clone()), owner)
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "the completion's ref is neither ref/prompt nor ref/resource",
                    None,
                ));
            }
        };
        let arguments: Vec<(String, String)> = request
            .context
            .and_then(|context| context.arguments)
            .map(|arguments| arguments.into_iter().collect::<BTreeMap<_, _>>())
            .unwrap_or_default()
            .into_iter()
            .collect();
        self.admit()?;
        let asking = self.asking_now(&context);
        let what = format!("the completion of '{}'", request.argument.name);
        let completing = session.complete(
            reference,
            &request.argument.name,
            &request.argument.value,
            &arguments,
        );
        let completing = self.until_withdrawn(&session, &what, completing);
        let completion = self
            .run(&what, context, asking.questions(), completing)
            .await?
            .map_err(|error| request_error(error, |text| ErrorData::invalid_params(text, None)))?;
        Ok(content::completion(completion))
    }
}

/// A prompt's arguments: MCP sends strings; anything else is refused, naming the argument.
fn string_arguments(
    arguments: serde_json::Map<String, Value>,
) -> Result<Vec<(String, String)>, ErrorData> {
    arguments
        .into_iter()
        .map(|(name, value)| match value {
            Value::String(text) => Ok((name, text)),
            other => Err(ErrorData::invalid_params(
                format!("the prompt argument '{name}' is {other}, not a string"),
                None,
            )),
        })
        .collect()
}
