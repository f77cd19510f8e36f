//! [`PluginSession`]: one session of a plugin as a library sees it — the tool definitions to
//! register, and the plugin's resources, prompts and completions (contract 0.3.0), all served by
//! the session's one instance, so they share its state.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::PluginImage;
use super::bindings::{Request, Response};
use super::instance::{PluginTool, SessionOwner};
use super::validate::offerings;
use crate::tool::{
    Completion, CompletionRef, Prompt, PromptMeta, RequestError, ResourceContents, ResourceMeta,
    ResourceTemplate, ToolDefinition,
};

/// Most values a completion passes on; more are cut (and `has_more` set).
pub use llm_worker_rules::prompt::MAX_COMPLETION_VALUES;

tokio::task_local! {
    /// Set around a request whose lists may not be read again from the plugins (its identity's
    /// CPU quota is spent): the lists last read are served.
    static LAST_LISTS_ONLY: ();
}

/// Sets a list's `changed` flag back when dropped: the read it was cleared for did not end.
struct StillChanged<'a>(Option<&'a AtomicBool>);

impl Drop for StillChanged<'_> {
    fn drop(&mut self) {
        if let Some(changed) = self.0 {
            changed.store(true, Ordering::Release);
        }
    }
}

/// Runs `request` serving the plugins' lists of resources and prompts as last read, without
/// running plugin code to read a changed list again.
#[cfg_attr(not(feature = "mcp-http"), allow(dead_code))]
pub(crate) async fn last_lists_only<T>(request: impl std::future::Future<Output = T>) -> T {
    LAST_LISTS_ONLY.scope((), request).await
}

/// One session of a plugin: its tools' definitions (register them on a
/// [`Worker`](crate::Worker) or a [`ToolServer`](crate::ToolServer)) and its resources,
/// prompts and completions. All are served by one instance of the plugin, created at the
/// registration of its tools (or by the first request), whose state they share: a resource
/// a tool wrote is there to read. Cheap to clone; clones are the same session.
///
/// A plugin of contract 0.1.0 or 0.2.0 has no resources or prompts: the lists are empty, and
/// reading or rendering anything is [`RequestError::NotFound`].
#[derive(Clone)]
pub struct PluginSession {
    owner: Arc<SessionOwner>,
    /// The lists as read again after the plugin said they changed.
    lists: Arc<std::sync::Mutex<Lists>>,
}

/// A tool's shared meta, compiled input schema and compiled output schema (if any).
type ToolParts = (
    Arc<crate::ToolMeta>,
    Arc<super::validate::CheckedSchema>,
    Option<Arc<super::validate::CheckedSchema>>,
);

#[derive(Default)]
struct Lists {
    resources: Option<Arc<[ResourceMeta]>>,
    prompts: Option<Arc<[PromptMeta]>>,
    /// The URIs of `resources` as [`offerings::comparable_uri`] spells them, made once for
    /// each list (the list they were made of beside them).
    comparable: Option<(Arc<[ResourceMeta]>, ComparableUris)>,
    /// The problem last logged for each kind of list that could not be read again (until it
    /// is read): a client listing again and again while the instance is busy logs it once.
    logged: std::collections::HashMap<&'static str, String>,
}

/// Resources' URIs as [`offerings::comparable_uri`] spells them.
type ComparableUris = Arc<HashSet<String>>;

impl std::fmt::Debug for PluginSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSession")
            .field("plugin", &self.image().name)
            .finish_non_exhaustive()
    }
}

impl PluginSession {
    pub(super) fn new(image: Arc<PluginImage>) -> Self {
        Self {
            owner: Arc::new(SessionOwner::new(image)),
            lists: Arc::default(),
        }
    }

    fn image(&self) -> &PluginImage {
        &self.owner.0.image
    }

    /// Whether `other` is this session (a clone of it), not merely one of the same plugin.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn is(&self, other: &PluginSession) -> bool {
        Arc::ptr_eq(&self.owner, &other.owner)
    }

    /// The plugin's name (its file stem).
    pub fn plugin_name(&self) -> &str {
        &self.image().name
    }

    /// The SHA-256 of the plugin's file.
    pub fn plugin_sha256(&self) -> &[u8; 32] {
        &self.image().sha256
    }

    /// Each tool's shared meta, input schema and output schema, in order.
    fn tool_parts(&self) -> Vec<ToolParts> {
        let tools = &self.image().tools;
        tools
            .shared
            .iter()
            .zip(&tools.validators)
            .zip(&tools.output_validators)
            .map(|((meta, validator), output)| {
                (Arc::clone(meta), Arc::clone(validator), output.clone())
            })
            .collect()
    }

    /// The plugin's tools in this session, created now (its instance starts in the
    /// background), each with the meta every session shares: what a served session registers.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn created_tools(&self) -> Vec<(Arc<crate::ToolMeta>, Arc<dyn crate::Tool>)> {
        self.tool_parts()
            .into_iter()
            .map(|(meta, validator, output)| {
                let tool = PluginTool::created(&self.owner, &meta.name, &validator, output);
                (meta, tool)
            })
            .collect()
    }

    /// The definitions of the plugin's tools in this session; each factory starts the
    /// session's instance (once), as the spec's registration does.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tool_parts()
            .into_iter()
            .map(|(meta, validator, output)| {
                let session = Arc::clone(&self.owner);
                let factory: ToolDefinition = Arc::new(move || {
                    PluginTool::create(&session, &meta, &validator, output.clone())
                });
                factory
            })
            .collect()
    }

    fn lists(&self) -> std::sync::MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The resources the plugin offers now: as listed at load, or, once the plugin said the
    /// list changed, as it lists them again (checked like the first list). If the plugin cannot
    /// list them now (busy, failing, or the new list is refused), the last list is served and
    /// the list is read again next time: a busy instance is not waited for, so one plugin's
    /// long call (a question a person has not answered) never delays another plugin's lists,
    /// nor the routing of a request to its owner.
    pub async fn resources(&self) -> Arc<[ResourceMeta]> {
        self.relisted(
            &self.owner.0.changed.resources,
            Request::Resources,
            "resource",
            |response| match response {
                Response::Resources(resources) => Some(resources),
                _ => None,
            },
            offerings::check_resources,
            |lists| &mut lists.resources,
            &self.image().offerings.resources,
            |resource: &ResourceMeta| {
                (!self.offered_at_load(&offerings::comparable_uri(&resource.uri))).then(|| {
                    format!(
                        "'{}'",
                        llm_worker_rules::tool::VisibleCut(&resource.uri, 80)
                    )
                })
            },
        )
        .await
    }

    /// A list of the plugin's (`what`s): the one cached, or, when `changed` says the plugin
    /// changed it, the plugin's answer to `request`, checked. A list that cannot be read or is
    /// refused leaves the last one served and `changed` set, to be read again next time; so
    /// does a request that may not run plugin code for lists ([`last_lists_only`]). Under
    /// a lock, what the lock did not approve (`unapproved` names it: a resource neither offered
    /// nor under a template at load, a prompt not offered at load) is left out of the list,
    /// saying so.
    #[allow(clippy::too_many_arguments)]
    async fn relisted<T: Clone>(
        &self,
        changed: &AtomicBool,
        request: Request,
        what: &'static str,
        take: impl FnOnce(Response) -> Option<Vec<T>>,
        check: impl FnOnce(&[T]) -> Result<(), String>,
        cache: impl Fn(&mut Lists) -> &mut Option<Arc<[T]>>,
        at_load: &[T],
        unapproved: impl Fn(&T) -> Option<String>,
    ) -> Arc<[T]> {
        let may_read = LAST_LISTS_ONLY.try_with(|()| ()).is_err();
        if may_read && changed.swap(false, Ordering::AcqRel) {
            // A request dropped while the list is read (its client cancelled it) leaves the
            // list to be read again next time.
            let mut unread = StillChanged(Some(changed));
            // Never behind a busy instance: the last list is served meanwhile.
            let read = self.owner.0.request_if_idle(&request).await;
            unread.0 = None;
            let listed = match read.map(take) {
                Ok(Some(items)) => check(&items)
                    .map(|()| self.approved_only(items, what, unapproved))
                    .map_err(|reason| format!("its new {what} list is refused: {reason}")),
                Ok(None) => Err(format!("it answered a list of {what}s wrongly")),
                Err(error) => Err(format!("it could not list its {what}s: {error}")),
            };
            match listed {
                Ok(items) => {
                    // A change said while its list was being read (by the list's own code:
                    // nothing else runs in a serial instance) is the list just read: a plugin
                    // saying so from its list export would otherwise have every request read
                    // it again. A 1.0.0 instance's other calls may say so meanwhile: kept.
                    if !self.image().pre.is_concurrent() {
                        changed.store(false, Ordering::Release);
                    }
                    let mut lists = self.lists();
                    *cache(&mut lists) = Some(items.into());
                    lists.logged.remove(what);
                }
                Err(problem) => {
                    changed.store(true, Ordering::Release);
                    let mut lists = self.lists();
                    if lists.logged.get(what) != Some(&problem) {
                        tracing::warn!(
                            plugin = %self.plugin_name(),
                            "{problem}; serving its last list (said once until it is read)"
                        );
                        lists.logged.insert(what, problem);
                    }
                }
            }
        }
        let cached = cache(&mut self.lists()).clone();
        cached.unwrap_or_else(|| at_load.into())
    }

    /// `items`, without what the lock did not approve (when the plugin was loaded under one),
    /// saying what was left out.
    fn approved_only<T>(
        &self,
        items: Vec<T>,
        what: &str,
        unapproved: impl Fn(&T) -> Option<String>,
    ) -> Vec<T> {
        if !self.image().listing_locked {
            return items;
        }
        let mut left_out = Vec::new();
        let kept = items
            .into_iter()
            .filter(|item| match unapproved(item) {
                Some(named) => {
                    left_out.push(named);
                    false
                }
                None => true,
            })
            .collect();
        if !left_out.is_empty() {
            let shown = left_out
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            tracing::warn!(
                plugin = %self.plugin_name(),
                "its new {what} list names {} the lock did not approve ({shown}{}); they are \
                 not served: review them, and run `llm-worker lock` to approve them",
                left_out.len(),
                if left_out.len() > 5 { ", …" } else { "" }
            );
        }
        kept
    }

    /// Whether the plugin offers a tool named `name`.
    pub fn offers_tool(&self, name: &str) -> bool {
        self.image()
            .tools
            .metas
            .iter()
            .any(|meta| meta.name == name)
    }

    /// The plugin's resource templates (fixed at load).
    pub fn resource_templates(&self) -> &[ResourceTemplate] {
        &self.image().offerings.templates
    }

    /// Whether `uri` is one of the resources the plugin offered at load, or matches one of its
    /// templates: what no list it gives later can change, and what no other plugin of the
    /// directory offers (loading refuses such clashes).
    /// `uri` is compared as [`offerings::comparable_uri`] spells it.
    fn offered_at_load(&self, uri: &str) -> bool {
        let offerings = &self.image().offerings;
        offerings.comparable.contains(uri)
            || offerings
                .templates
                .iter()
                .any(|template| offerings::template_matches(&template.uri_template, uri))
    }

    /// Whether the plugin's resource list as last read names `uri` (compared as
    /// [`offerings::comparable_uri`] spells it).
    fn lists_comparable(&self, uri: &str) -> bool {
        let listed = {
            let mut lists = self.lists();
            let Some(resources) = lists.resources.clone() else {
                drop(lists);
                return self.image().offerings.comparable.contains(uri);
            };
            match &lists.comparable {
                Some((of, comparable)) if Arc::ptr_eq(of, &resources) => Arc::clone(comparable),
                _ => {
                    let comparable: ComparableUris = Arc::new(
                        resources
                            .iter()
                            .map(|resource| offerings::comparable_uri(&resource.uri))
                            .collect(),
                    );
                    lists.comparable = Some((resources, Arc::clone(&comparable)));
                    comparable
                }
            }
        };
        listed.contains(uri)
    }

    /// Whether `uri` is one of the plugin's resources as last listed, or matches one of its
    /// templates.
    pub fn offers_resource(&self, uri: &str) -> bool {
        self.offers_listed_resource(uri)
            || self
                .image()
                .offerings
                .templates
                .iter()
                .any(|template| offerings::template_matches(&template.uri_template, uri))
    }

    /// What names `uri` among what the plugin offered at load (a metric's label, a span's
    /// name): the URI itself if the plugin offered it at load, else the template it matches;
    /// `None` if neither. A resource a list gave while serving is not named: such lists often
    /// hold what clients created (a note's title), which would become series without bound and
    /// show one client's names to whoever reads the metrics.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn resource_family(&self, uri: &str) -> Option<String> {
        if self
            .image()
            .offerings
            .resources
            .iter()
            .any(|r| r.uri == uri)
        {
            return Some(uri.to_owned());
        }
        self.image()
            .offerings
            .templates
            .iter()
            .find(|template| offerings::template_matches(&template.uri_template, uri))
            .map(|template| template.uri_template.clone())
    }

    fn offers_listed_resource(&self, uri: &str) -> bool {
        match &self.lists().resources {
            Some(resources) => resources.iter().any(|r| r.uri == uri),
            None => self
                .image()
                .offerings
                .resources
                .iter()
                .any(|r| r.uri == uri),
        }
    }

    /// Reads the resource `uri`. Its contents together are bounded like a tool's output
    /// (`max_output_bytes`).
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<ResourceContents>, RequestError> {
        llm_worker_rules::resource::check_uri(uri).map_err(|reason| {
            RequestError::InvalidArgument(format!("the URI is refused: {reason}"))
        })?;
        match self
            .owner
            .0
            .request(&Request::ReadResource(uri.to_owned()))
            .await?
        {
            Response::Contents(contents) => {
                let size = super::charged(
                    contents.iter().map(ResourceContents::size).sum(),
                    contents.len(),
                );
                self.within_output_limit(size, || format!("resource '{uri}'"))?;
                for read in &contents {
                    offerings::check_resource_contents(read).map_err(|problem| {
                        self.broke(format!("it answered a read with {problem}"))
                    })?;
                }
                Ok(contents)
            }
            _ => Err(self.broke("it answered a read wrongly".into())),
        }
    }

    /// The prompts the plugin offers now (like [`resources`](Self::resources)).
    pub async fn prompts(&self) -> Arc<[PromptMeta]> {
        self.relisted(
            &self.owner.0.changed.prompts,
            Request::Prompts,
            "prompt",
            |response| match response {
                Response::Prompts(prompts) => Some(prompts),
                _ => None,
            },
            offerings::check_prompts,
            |lists| &mut lists.prompts,
            &self.image().offerings.prompts,
            |prompt: &PromptMeta| {
                (!self.offered_prompt_at_load(&prompt.name))
                    .then(|| format!("'{}'", llm_worker_rules::tool::VisibleCut(&prompt.name, 80)))
            },
        )
        .await
    }

    /// Whether the plugin offered the prompt `name` at load (not only in a list given while
    /// serving): what may name it in a metric's label or a span's name, and what no list
    /// another plugin gives later can take.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn offered_prompt_at_load(&self, name: &str) -> bool {
        self.image()
            .offerings
            .prompts
            .iter()
            .any(|p| p.name == name)
    }

    /// Whether `name` is one of the plugin's prompts as last listed (asking the plugin
    /// nothing, even if it said its list changed).
    pub fn offers_prompt(&self, name: &str) -> bool {
        match &self.lists().prompts {
            Some(prompts) => prompts.iter().any(|p| p.name == name),
            None => self
                .image()
                .offerings
                .prompts
                .iter()
                .any(|p| p.name == name),
        }
    }

    /// Renders the prompt `name` with `arguments` (name, value). Its messages together are
    /// bounded like a tool's output.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: &[(String, String)],
    ) -> Result<Prompt, RequestError> {
        // Each argument charged besides its bytes: many short ones are copied one by one.
        self.within_input_limit(
            super::charged(
                arguments.iter().map(|(n, v)| n.len() + v.len()).sum(),
                arguments.len(),
            ),
            || format!("the arguments of prompt '{name}'"),
        )?;
        match self
            .owner
            .0
            .request(&Request::GetPrompt(name.to_owned(), arguments.to_vec()))
            .await?
        {
            Response::Prompt(prompt) => {
                let size = super::charged(
                    prompt
                        .messages
                        .iter()
                        .map(|message| message.content.size())
                        .sum::<usize>()
                        + prompt.description.as_ref().map_or(0, String::len),
                    prompt.messages.len(),
                );
                self.within_output_limit(size, || format!("prompt '{name}'"))?;
                for message in &prompt.messages {
                    offerings::check_content(&message.content).map_err(|problem| {
                        self.broke(format!("it rendered prompt '{name}' with {problem}"))
                    })?;
                }
                Ok(prompt)
            }
            _ => Err(self.broke("it answered a prompt wrongly".into())),
        }
    }

    /// Suggests values for `argument` of `reference`, typed so far as `value`, with the
    /// arguments already given in `context`. At most [`MAX_COMPLETION_VALUES`] values.
    pub async fn complete(
        &self,
        reference: CompletionRef,
        argument: &str,
        value: &str,
        context: &[(String, String)],
    ) -> Result<Completion, RequestError> {
        self.within_input_limit(
            super::charged(
                argument.len()
                    + value.len()
                    + context
                        .iter()
                        .map(|(n, v)| n.len() + v.len())
                        .sum::<usize>(),
                context.len(),
            ),
            || format!("the completion of '{argument}'"),
        )?;
        let request = Request::Complete {
            reference,
            argument: argument.to_owned(),
            value: value.to_owned(),
            context: context.to_vec(),
        };
        match self.owner.0.request(&request).await? {
            Response::Completion(mut completion) => {
                if completion.values.len() > MAX_COMPLETION_VALUES {
                    completion.values.truncate(MAX_COMPLETION_VALUES);
                    completion.has_more = true;
                }
                let size = super::charged(
                    completion.values.iter().map(String::len).sum(),
                    completion.values.len(),
                );
                self.within_output_limit(size, || format!("the completion of '{argument}'"))?;
                Ok(completion)
            }
            _ => Err(self.broke("it answered a completion wrongly".into())),
        }
    }

    /// Refuses what a client sends a plugin beyond a tool call's input limit
    /// (`max_input_bytes`), before any plugin code runs.
    fn within_input_limit(
        &self,
        size: usize,
        what: impl Fn() -> String,
    ) -> Result<(), RequestError> {
        let image = self.image();
        let cap = image.policy.limits.max_input_bytes;
        if size > cap {
            return Err(RequestError::InvalidArgument(format!(
                "{} for plugin '{}' are {size} bytes, over its input limit of {cap} bytes; send \
                 less",
                what(),
                image.name
            )));
        }
        Ok(())
    }

    fn within_output_limit(
        &self,
        size: usize,
        what: impl Fn() -> String,
    ) -> Result<(), RequestError> {
        let image = self.image();
        let cap = image.policy.limits.max_output_bytes;
        if size > cap {
            return Err(RequestError::Internal(format!(
                "{} of plugin '{}' is {size} bytes, over the output limit of {cap} bytes",
                what(),
                image.name
            )));
        }
        Ok(())
    }

    fn broke(&self, problem: String) -> RequestError {
        let image = self.image();
        let message = format!(
            "plugin '{}' broke its own contract: {problem}; this is a bug in the plugin",
            image.name
        );
        tracing::warn!(plugin = %image.name, "{message}");
        RequestError::Internal(message)
    }
}

/// Who serves a resource among one session's plugins: see [`resource_owner`].
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) enum ResourceOwner<'a> {
    /// No plugin offers it.
    Nobody,
    /// This plugin serves it.
    One(&'a PluginSession),
    /// Two plugins' lists, both changed while serving, name it: neither speaks for it.
    Disputed(&'a PluginSession, &'a PluginSession),
}

impl ResourceOwner<'_> {
    /// Whether the plugin named `plugin` serves the resource.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn is(&self, plugin: &str) -> bool {
        matches!(self, Self::One(owner) if owner.plugin_name() == plugin)
    }
}

/// Who serves `uri` among `plugins` (one session's): the plugin that offered it at load (as a
/// resource or through a template), else the one plugin whose resource list, as last read,
/// names it. A list a plugin gives while serving can add resources of its own, never take one
/// another plugin offered at load: content, notices and reads of that URI stay that plugin's.
/// URIs are compared as RFC 3986 normalises them, so that another spelling of a URI (its scheme
/// in capitals, a letter percent-escaped) is its owner's too.
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) fn resource_owner<'a>(plugins: &'a [PluginSession], uri: &str) -> ResourceOwner<'a> {
    fn one_of<'a>(mut owners: impl Iterator<Item = &'a PluginSession>) -> ResourceOwner<'a> {
        match (owners.next(), owners.next()) {
            (None, _) => ResourceOwner::Nobody,
            (Some(one), None) => ResourceOwner::One(one),
            (Some(one), Some(two)) => ResourceOwner::Disputed(one, two),
        }
    }
    let uri = offerings::comparable_uri(uri);
    match one_of(
        plugins
            .iter()
            .filter(|session| session.offered_at_load(&uri)),
    ) {
        ResourceOwner::Nobody => one_of(
            plugins
                .iter()
                .filter(|session| session.lists_comparable(&uri)),
        ),
        owner => owner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list read again (the plugin said it changed) is read only from a running instance
    /// that is free now: it never starts the instance (a hostile plugin's slow start, after a
    /// trap, would hold every list of the session for its time limit, and run outside any
    /// request's quota), on either kind of contract.
    #[tokio::test]
    async fn a_list_read_again_never_starts_an_instance() {
        let host = crate::PluginHost::new().expect("host");
        for path in [
            llm_worker_tests::plugin_path("echo"),
            llm_worker_tests::plugin_v03_path("echo"),
        ] {
            let plugin = host.load(&path).expect("loads");
            let session = plugin.open();
            let read = session.owner.0.request_if_idle(&Request::Resources).await;
            assert!(
                read.as_ref()
                    .is_err_and(|error| error.to_string().contains("not running")),
                "{}: {:?}",
                plugin.contract_version(),
                read.map(|_| ())
            );
            assert_eq!(host.usage().instances, 0, "{}", plugin.contract_version());
        }
    }
}
