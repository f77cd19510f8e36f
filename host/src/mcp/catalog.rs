//! What an MCP server offers: a [`ToolCatalog`] of [`ToolGroup`]s, and the tools one session
//! registered from it, kept up to date as the catalog changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;

use crate::plugin::{LoadedPlugin, PluginSession};
use crate::tool::{Tool, ToolDefinition, ToolError, ToolMeta, ToolOutput};
use crate::tool_server::{ToolServer, ToolServerHandle};

type Definitions = Arc<dyn Fn() -> Vec<ToolDefinition> + Send + Sync>;

/// Tools whose factories have run: what a session holds of a group.
type Created = Vec<(Arc<ToolMeta>, Arc<dyn Tool>)>;

/// Tools registered together in each session, such as the tools of one plugin: a name, a
/// revision, and a function giving the definitions for a new session.
///
/// A session registers each group once and keeps its instances while the group's revision
/// stays the same, however often the catalog is replaced.
#[derive(Clone)]
pub struct ToolGroup {
    name: String,
    revision: u64,
    /// Which directories a plugin's grants hold (their devices and inodes, hashed; 0 for a
    /// native group): a directory made anew at a grant's path is served by new instances,
    /// while the revision (the content, which a request state is bound to, and which
    /// replicas on other machines share) stays.
    held: u64,
    /// The tool names, where known without creating anything (for clashes).
    tool_names: Option<Vec<String>>,
    /// The tools, where known without creating anything: a session then creates the group's
    /// tools only when it needs them (see [`SessionTools`]).
    tools: Option<Arc<[Arc<ToolMeta>]>>,
    definitions: Definitions,
    /// The plugin, for a plugin's group: each session opens a [`PluginSession`] of it, which
    /// serves its tools, resources and prompts.
    plugin: Option<LoadedPlugin>,
}

impl std::fmt::Debug for ToolGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolGroup")
            .field("name", &self.name)
            .field("revision", &self.revision)
            .field("tool_names", &self.tool_names)
            .finish_non_exhaustive()
    }
}

impl ToolGroup {
    /// A group called `name` (unique in its catalog) at `revision`, whose definitions for a
    /// new session come from `definitions`.
    pub fn new(
        name: impl Into<String>,
        revision: u64,
        definitions: impl Fn() -> Vec<ToolDefinition> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            revision,
            held: 0,
            tool_names: None,
            tools: None,
            definitions: Arc::new(definitions),
            plugin: None,
        }
    }

    /// The tools of a plugin: named after its file, at a revision that changes with its bytes
    /// and its policy; each session gets a fresh instance.
    pub fn plugin(plugin: &LoadedPlugin) -> Self {
        let source = plugin.clone();
        Self {
            name: plugin.path().display().to_string(),
            revision: plugin_revision(plugin),
            held: held_dirs(plugin),
            tool_names: Some(plugin.tool_names().into_iter().map(str::to_owned).collect()),
            tools: Some(plugin.shared_tools().into()),
            definitions: Arc::new(move || source.definitions()),
            plugin: Some(plugin.clone()),
        }
    }

    /// Whether the group offers a tool called `tool` (as far as is known without creating
    /// its tools).
    #[cfg(feature = "mcp-http")]
    fn offers_tool(&self, tool: &str) -> bool {
        match (&self.plugin, &self.tool_names, &self.tools) {
            (Some(plugin), _, _) => plugin.tool_names().contains(&tool),
            (None, Some(names), _) => names.iter().any(|name| name == tool),
            (None, None, Some(tools)) => tools.iter().any(|meta| meta.name == tool),
            (None, None, None) => false,
        }
    }

    /// What the group offers that must be unique in a catalog, as (kind, name): a plugin's
    /// tools, resource URIs, templates and prompts; another group's tool names.
    fn offered(&self) -> Vec<(&'static str, String)> {
        match &self.plugin {
            Some(plugin) => plugin.offered(),
            None => self
                .tool_names
                .iter()
                .flatten()
                .map(|name| ("tool", name.clone()))
                .collect(),
        }
    }

    /// What this group offers that one of `others` offers already (a tool, resource, template
    /// or prompt name, or a fixed URI one's template matches), or a directory grant one of
    /// them could redirect, said for the operator with what to do; `None` if nothing.
    pub(crate) fn clash_with(&self, others: &[ToolGroup]) -> Option<String> {
        // A set: a plugin may offer a thousand resources, compared with every other's.
        let offered: std::collections::HashSet<_> = self.offered().into_iter().collect();
        let ways = std::cell::OnceCell::new();
        others.iter().find_map(|other| {
            if let Some((kind, name)) = other
                .offered()
                .into_iter()
                .find(|theirs| offered.contains(theirs))
            {
                return Some(format!(
                    "its {kind} '{name}' is offered by {} already; rename or remove one of them",
                    other.name
                ));
            }
            let (plugin, theirs) = (self.plugin.as_ref()?, other.plugin.as_ref()?);
            if let Some(uri) = crate::clash::uri_clash(plugin, theirs) {
                return Some(format!(
                    "a read of the resource '{uri}' would be answered by {} too (a fixed URI \
                     or template of one, and a template of the other); rename or remove one of \
                     them",
                    other.name
                ));
            }
            self.grant_clash_with(other, &ways)
        })
    }

    /// A directory grant of this group's plugin that `other`'s could redirect, or the
    /// reverse ([`crate::clash::grant_clash`]), said for the operator; `None` if neither.
    /// `mine` keeps the ways to this group's grants, worked out once for all `other`s.
    fn grant_clash_with(
        &self,
        other: &ToolGroup,
        mine: &std::cell::OnceCell<crate::clash::GrantWays>,
    ) -> Option<String> {
        use crate::clash::{GrantWays, grant_clash};
        let (plugin, theirs) = (self.plugin.as_ref()?, other.plugin.as_ref()?);
        let writes =
            |plugin: &LoadedPlugin| plugin.policy().dirs.iter().any(|grant| grant.writable);
        if writes(theirs)
            && let Some((index, why)) =
                grant_clash(mine.get_or_init(|| GrantWays::of(plugin)), theirs)
        {
            return Some(format!("its grant dirs[{index}].host {why}"));
        }
        if !writes(plugin) {
            return None;
        }
        let (index, why) = grant_clash(&GrantWays::of(theirs), plugin)?;
        Some(format!("{}'s grant dirs[{index}].host {why}", other.name))
    }

    /// The plugin the group is, if it is a plugin's.
    pub(crate) fn loaded(&self) -> Option<&LoadedPlugin> {
        self.plugin.as_ref()
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The group's revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// What a session keeps the group's instances for: its revision, and the directories its
    /// grants hold.
    pub(crate) fn generation(&self) -> Generation {
        Generation {
            revision: self.revision,
            held: self.held,
        }
    }
}

/// A group as sessions keep its instances: [`ToolGroup::generation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Generation {
    /// The group's revision.
    pub(crate) revision: u64,
    /// The directories its grants hold, hashed.
    held: u64,
}

/// The directories `plugin`'s grants hold, hashed (0 without grants).
fn held_dirs(plugin: &LoadedPlugin) -> u64 {
    let identities = plugin.grant_identities();
    if identities.is_empty() {
        return 0;
    }
    crate::digest::sha256_u64(format!("{identities:?}").as_bytes())
}

/// A plugin's revision: its bytes, its policy file's bytes (or, for a policy given in code,
/// the policy as loaded), where its directory grants lead (a grant's path re-pointed at
/// another directory, the policy's text unchanged) and its secrets' values — each secret
/// through a one-way hash, so that a changed secret is a new revision while no value is kept
/// or could be read back.
fn plugin_revision(plugin: &LoadedPlugin) -> u64 {
    let mut text = crate::digest::hex(plugin.sha256());
    match plugin.policy_sha256() {
        Some(policy) => text.push_str(policy),
        // `Debug` redacts the secrets: they are added below.
        None => text.push_str(&format!("{:?}", plugin.policy())),
    }
    for dir in crate::lock::grant_paths(plugin.policy()) {
        text.push('|');
        text.push_str(&dir);
    }
    for secret in &plugin.policy().http_secrets {
        text.push_str(&format!("|{}|{}|", secret.grant, secret.header));
        text.push_str(&crate::digest::sha256_hex(secret.value().as_bytes()));
    }
    crate::digest::sha256_u64(text.as_bytes())
}

/// The tool groups an MCP server offers. Cheap to clone: clones share the groups, and
/// [`replace`](Self::replace) reaches every open session, which then tells its client
/// (`notifications/tools/list_changed`).
#[derive(Clone, Debug)]
pub struct ToolCatalog {
    groups: Arc<watch::Sender<Arc<[ToolGroup]>>>,
    /// What the plugins of any session say changed, for the server's subscription streams
    /// (`subscriptions/listen`, revision 2026-07-28).
    notices: super::notices::Notices,
}

/// A plugin's notice, for subscription streams.
#[derive(Debug, Clone)]
pub(crate) enum Notice {
    ListChanged(crate::events::Listing),
    ResourceUpdated(String),
}

/// Who sent a request, as far as notices go: the identity the HTTP service authenticated, as
/// a digest (`None`: the server has no authentication, or the transport has none, as stdio).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct Caller(pub(crate) Option<[u8; 16]>);

/// Where a notice comes from: the MCP session whose call made it, and, for a stateless
/// request (revision 2026-07-28, a session of its own while it runs), who sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) session: u64,
    pub(crate) stateless: Option<Caller>,
}

impl ToolCatalog {
    /// A catalog of these groups (see [`replace`](Self::replace) for clashes).
    pub fn new(groups: impl IntoIterator<Item = ToolGroup>) -> Self {
        Self {
            groups: Arc::new(watch::Sender::new(without_clashes(groups))),
            notices: super::notices::Notices::default(),
        }
    }

    /// A catalog with one group per plugin.
    pub fn from_plugins<'a>(plugins: impl IntoIterator<Item = &'a LoadedPlugin>) -> Self {
        Self::new(plugins.into_iter().map(ToolGroup::plugin))
    }

    /// Replaces the groups. Each open session keeps the instances of groups whose name and
    /// revision are unchanged, creates instances for new or changed groups, and drops those
    /// of groups that are gone. A group offering a tool name that an earlier group offers
    /// already is left out, with a warning naming both. Requests running in a group that is
    /// changed or gone (tool calls, tasks, reads, prompt renderings, completions) end at once,
    /// failing with a message saying so: a plugin's withdrawn revision keeps no grants or
    /// secrets in use, and a native group's tool is dropped mid-call like any cancelled
    /// future.
    pub fn replace(&self, groups: impl IntoIterator<Item = ToolGroup>) {
        self.groups.send_replace(without_clashes(groups));
    }

    /// The current groups.
    pub fn groups(&self) -> Arc<[ToolGroup]> {
        self.groups.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<[ToolGroup]>> {
        self.groups.subscribe()
    }

    /// Where plugins' notices go, for subscription streams.
    pub(crate) fn notices(&self) -> super::notices::Notices {
        self.notices.clone()
    }
}

/// The groups, less those whose tool names, resource URIs, resource templates or prompt names
/// an earlier group has, or whose directory grants one could redirect (each left out with a
/// warning naming both).
fn without_clashes(groups: impl IntoIterator<Item = ToolGroup>) -> Arc<[ToolGroup]> {
    let mut claims = crate::clash::Claims::new();
    let mut kept = Vec::new();
    for group in groups {
        let offered = group.offered();
        if let Some(((kind, name), owner)) = claims.first_taken(&offered) {
            tracing::warn!(
                "not serving {}: its {kind} '{name}' is offered by {owner} already; rename or \
                 remove one of them",
                group.name
            );
            continue;
        }
        // A fixed URI of one plugin that a template of another matches: reads of it would
        // have two answers. The one that came first keeps it.
        let claimed = group.plugin.as_ref().and_then(|plugin| {
            kept.iter().find_map(|earlier: &ToolGroup| {
                let uri = crate::clash::uri_clash(plugin, earlier.plugin.as_ref()?)?;
                Some((uri.to_owned(), earlier.name.clone()))
            })
        });
        let ways = std::cell::OnceCell::new();
        if let Some(why) = kept
            .iter()
            .find_map(|earlier| group.grant_clash_with(earlier, &ways))
        {
            tracing::warn!("not serving {}: {why}", group.name);
            continue;
        }
        if let Some((uri, owner)) = claimed {
            tracing::warn!(
                "not serving {}: a read of the resource '{uri}' would be answered by {owner} \
                 too (a fixed URI of one and a template of the other); rename or remove one \
                 of them",
                group.name
            );
            continue;
        }
        claims.claim(&offered, group.name.clone());
        kept.push(group);
    }
    kept.into()
}

/// One group's tools in one session, created (their factories run) once, when the session
/// first needs them.
struct GroupTools {
    group: ToolGroup,
    created: OnceLock<Created>,
    /// The session of the group's plugin, opened when first needed.
    session: OnceLock<Option<PluginSession>>,
}

impl GroupTools {
    fn new(group: ToolGroup) -> Self {
        Self {
            group,
            created: OnceLock::new(),
            session: OnceLock::new(),
        }
    }

    /// The session of the group's plugin (opening it starts nothing: its tools' registration
    /// or its first request does).
    fn session(&self) -> Option<&PluginSession> {
        self.session
            .get_or_init(|| self.group.plugin.as_ref().map(LoadedPlugin::open))
            .as_ref()
    }

    /// The group's tools, created now if they were not yet.
    fn created(&self) -> &Created {
        self.created.get_or_init(|| match self.session() {
            Some(session) => session.created_tools(),
            None => (self.group.definitions)()
                .into_iter()
                .map(|definition| {
                    let (meta, tool) = definition();
                    (Arc::new(meta), tool)
                })
                .collect(),
        })
    }
}

/// A tool of a group that a session has not created yet: its first call creates the group's
/// tools (starting only that plugin), then every call goes to the created tool.
struct DeferredTool {
    group: Arc<GroupTools>,
    /// Its place among the group's tools, and its name.
    index: usize,
    name: String,
}

#[async_trait::async_trait]
impl Tool for DeferredTool {
    async fn execute(&self, input_json: &str) -> Result<String, ToolError> {
        match self.find() {
            Some(tool) => tool.execute(input_json).await,
            None => Err(self.missing()),
        }
    }

    async fn call(&self, input_json: &str) -> Result<ToolOutput, ToolError> {
        match self.find() {
            Some(tool) => tool.call(input_json).await,
            None => Err(self.missing()),
        }
    }
}

impl DeferredTool {
    /// The created tool (creating the group's tools now).
    fn find(&self) -> Option<&Arc<dyn Tool>> {
        let created = self.group.created();
        created
            .get(self.index)
            .filter(|(meta, _)| meta.name == self.name)
            .or_else(|| created.iter().find(|(meta, _)| meta.name == self.name))
            .map(|(_, tool)| tool)
    }

    fn missing(&self) -> ToolError {
        // A client is told the plugin's name, never where it is on the server.
        let group = &self.group.group;
        ToolError::Internal(format!(
            "{} did not create its tool '{}' for this session",
            group
                .plugin
                .as_ref()
                .map_or(group.name.as_str(), LoadedPlugin::name),
            self.name
        ))
    }
}

/// The group (and plugin) serving a tool when a call looked it up: [`SessionTools::serving`].
#[derive(Clone, Debug)]
pub(crate) struct Serving {
    group: String,
    /// The group's revision (a request state is bound to it).
    pub(crate) revision: u64,
    /// The group as the session keeps its instances (their withdrawal ends the call).
    generation: Generation,
    /// The plugin's name, for a plugin's group (a native group's tools are the operator's).
    pub(crate) plugin: Option<String>,
}

/// The tools of one session: each group's tools, created once per revision.
///
/// Opening a session creates nothing of a group whose tools are known in advance (a plugin's):
/// listing them and looking up a schema need no instance. A session that is set up for calls
/// ([`SessionTools::create_all`], at MCP's `initialized`) creates every group's tools, and the
/// groups added later as they come; until then (a stateless request) a call creates only its
/// own group's tools, so a request starts only the plugin it calls.
pub(crate) struct SessionTools {
    updates: watch::Receiver<Arc<[ToolGroup]>>,
    groups: BTreeMap<String, (Generation, Arc<GroupTools>)>,
    handle: ToolServerHandle,
    /// The group (its key in `groups`) whose tool `handle` serves under each name.
    served_by: HashMap<String, String>,
    /// Counts the handles made: a new one for every change of the session's tools.
    generation: u64,
    /// Whether the tools changed since the client was last told.
    unannounced: bool,
    /// Whether every group's tools are created as soon as the session has the group.
    create_all: bool,
    /// What the session's identity may use, once it is known (`None`: everything).
    #[cfg(feature = "mcp-http")]
    allowed: Option<Arc<super::access::Allowed>>,
    /// Where the instances this session starts are counted, under an identity's CPU quota:
    /// those of groups added or changed later too (a `--watch` reload).
    #[cfg(feature = "mcp-http")]
    pub(crate) starts_counted: Option<StartsCounted>,
}

/// An identity's CPU quota, which the instances its session starts count against.
#[cfg(feature = "mcp-http")]
pub(crate) struct StartsCounted {
    pub(crate) ledger: Arc<super::quota::Ledger>,
    pub(crate) key: [u8; 16],
    pub(crate) who: String,
    pub(crate) quota: super::Quota,
}

#[cfg(feature = "mcp-http")]
impl StartsCounted {
    /// Runs `start` (which starts instances in tasks of their own) with their CPU time counted
    /// against the quota; `false`, running nothing, when the quota is spent.
    pub(crate) fn run(&self, start: impl FnOnce()) -> bool {
        let begun = self.ledger.begin_as(
            self.key,
            &self.who,
            self.quota,
            Arc::default(),
            super::quota::Kind::Start,
        );
        match begun {
            Ok(running) => {
                // Held by the start tasks: the identity's next session starts its instances
                // with its calls until they have ended.
                let running = Arc::new(running);
                super::quota::starting_now(Arc::clone(&running), || {
                    crate::cpu::counted_now(running.spent(), start);
                });
                true
            }
            Err(error) => {
                tracing::debug!(
                    "the session's instances start with its calls: {}",
                    error.message
                );
                false
            }
        }
    }
}

/// The name an access policy gives a group: its plugin's name, else the group's.
#[cfg(feature = "mcp-http")]
fn policy_name(group: &ToolGroup) -> &str {
    group
        .plugin
        .as_ref()
        .map_or(group.name.as_str(), LoadedPlugin::name)
}

impl SessionTools {
    /// The tools of a new session of `catalog`; with `awaiting_identity` (under an access
    /// policy), none until [`restrict`](Self::restrict) says what the session's identity may
    /// use, so that no group's tools are created before.
    pub(crate) fn open(catalog: &ToolCatalog, awaiting_identity: bool) -> Self {
        let mut updates = catalog.subscribe();
        let groups = updates.borrow_and_update().clone();
        let mut tools = Self {
            updates,
            groups: BTreeMap::new(),
            handle: ToolServer::new().handle(),
            served_by: HashMap::new(),
            generation: 0,
            unannounced: false,
            create_all: false,
            #[cfg(feature = "mcp-http")]
            allowed: awaiting_identity.then(Arc::default),
            #[cfg(feature = "mcp-http")]
            starts_counted: None,
        };
        #[cfg(not(feature = "mcp-http"))]
        let _ = awaiting_identity;
        tools.take_in(&groups);
        tools.unannounced = false;
        tools
    }

    /// Creates every group's tools now, and those of groups added later as they come: the
    /// registration of a session that will make calls (each plugin's factory starts its
    /// instance in the background, so this does not wait for any plugin).
    pub(crate) fn create_all(&mut self) {
        if std::mem::replace(&mut self.create_all, true) {
            return;
        }
        for (_, group) in self.groups.values() {
            group.created();
        }
        self.rebuild_handle();
    }

    /// Which group of the session serves `tool` now, at which revision, and which plugin's
    /// (if any) it is: read when a call looks the tool up, so that what the call does later
    /// (a task watching for its plugin's withdrawal, its result checked as that plugin's) holds
    /// to what it ran, whatever the catalog did meanwhile. `None` if no group offers it.
    pub(crate) fn serving(&self, tool: &str) -> Option<Serving> {
        // The group whose tool the session's handle serves under the name (not merely one that
        // offers a tool of that name: another may, whose tool was not registered).
        let (generation, tools) = self.groups.get(self.served_by.get(tool)?)?;
        Some(Serving {
            group: tools.group.name.clone(),
            revision: generation.revision,
            generation: *generation,
            plugin: tools
                .session()
                .map(|session| session.plugin_name().to_owned()),
        })
    }

    /// Ends when the catalog no longer holds `serving`'s revision of its group (at once if it
    /// already does not; watched here, not through the session, which a stateless one would
    /// not take in after its request). A task of the tool, which outlives its request, ends
    /// then, rather than keep the instance of a plugin no longer served (its grants, its
    /// secrets) running until its time limit.
    pub(crate) fn withdrawal(
        &self,
        serving: &Serving,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        self.withdrawal_of_group(Some((serving.group.clone(), serving.generation)))
    }

    /// The withdrawal ([`withdrawal`](Self::withdrawal)) of the plugin `session` is a session
    /// of, as this session serves it now (at once, if it serves it no more): what a read, a
    /// prompt or a completion of it watches.
    pub(crate) fn withdrawal_of_plugin(
        &self,
        session: &PluginSession,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        let served = self.group_of(session);
        self.withdrawal_of_group(served.map(|(name, generation)| (name.to_owned(), generation)))
    }

    /// The name and revision of the group whose plugin `session` is a session of, if this
    /// session serves it.
    fn group_of(&self, session: &PluginSession) -> Option<(&str, Generation)> {
        self.groups
            .iter()
            .find(|(_, (_, tools))| {
                tools
                    .session
                    .get()
                    .and_then(Option::as_ref)
                    .is_some_and(|own| own.is(session))
            })
            .map(|(name, (generation, _))| (name.as_str(), *generation))
    }

    /// The withdrawal of the group `served` (its name and revision); at once for `None` (one
    /// this session serves no more).
    fn withdrawal_of_group(
        &self,
        served: Option<(String, Generation)>,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut updates = self.updates.clone();
        async move {
            let Some((name, generation)) = served else {
                return;
            };
            loop {
                let served = updates
                    .borrow_and_update()
                    .iter()
                    .any(|group| group.name == name && group.generation() == generation);
                // A catalog dropped (no session of it left, nor the embedder's handle: the
                // server stopped) ends its tasks otherwise.
                if !served || updates.changed().await.is_err() {
                    return;
                }
            }
        }
    }

    /// Keeps of the session's tools only what `allowed` gives (its identity's, under the
    /// operator's access policy); groups it has nothing of are dropped before any instance of
    /// theirs is created.
    #[cfg(feature = "mcp-http")]
    pub(crate) fn restrict(&mut self, allowed: Arc<super::access::Allowed>) {
        self.groups
            .retain(|_, (_, tools)| allowed.any_of(policy_name(&tools.group)));
        self.allowed = Some(allowed);
        // The groups left out while the identity was not known come in now.
        let groups = self.updates.borrow().clone();
        self.take_in(&groups);
        self.rebuild_handle();
        self.unannounced = false;
    }

    /// Whether the session may use the group `group` (all of it, with its resources, prompts
    /// and completions).
    fn sees_whole(&self, group: &ToolGroup) -> bool {
        #[cfg(feature = "mcp-http")]
        if let Some(allowed) = &self.allowed {
            return allowed.whole(policy_name(group));
        }
        let _ = group;
        true
    }

    /// Whether the session may use the tool `tool` of `group`.
    fn sees_tool(&self, group: &ToolGroup, tool: &str) -> bool {
        #[cfg(feature = "mcp-http")]
        if let Some(allowed) = &self.allowed {
            return allowed.tool(policy_name(group), tool);
        }
        let _ = (group, tool);
        true
    }

    /// The group offering the tool `tool` that this session's identity may not use (under an
    /// access policy): what the audit log names when the client is told there is no such tool.
    /// `None` when a tool of the session serves the name.
    #[cfg(feature = "mcp-http")]
    pub(crate) fn withheld_tool(&self, tool: &str) -> Option<ToolGroup> {
        self.allowed.as_ref()?;
        if self.served_by.contains_key(tool) {
            return None;
        }
        // Among every group of the catalog: those the identity may use nothing of are not
        // the session's.
        self.updates
            .borrow()
            .iter()
            .find(|group| group.offers_tool(tool) && !self.sees_tool(group, tool))
            .cloned()
    }

    /// Whether the session may use anything of `group`.
    fn sees_any(&self, group: &ToolGroup) -> bool {
        #[cfg(feature = "mcp-http")]
        if let Some(allowed) = &self.allowed {
            return allowed.any_of(policy_name(group));
        }
        let _ = group;
        true
    }

    /// Whether the tools changed since the last call of this (and clears it).
    pub(crate) fn take_unannounced(&mut self) -> bool {
        std::mem::take(&mut self.unannounced)
    }

    /// The session's tools as they are now.
    pub(crate) fn handle(&self) -> ToolServerHandle {
        self.handle.clone()
    }

    /// Which version of the session's tools [`handle`](Self::handle) holds: another number
    /// whenever they change.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Takes in the catalog's groups if they changed since the last look; returns whether the
    /// session's tools changed.
    pub(crate) fn refresh(&mut self) -> bool {
        if !self.updates.has_changed().unwrap_or(false) {
            return false;
        }
        let groups = self.updates.borrow_and_update().clone();
        self.take_in(&groups)
    }

    /// The revision of the group whose plugin session is `session` (the one a request for a
    /// prompt or a resource found); `0` if the session serves it no more. A request state is
    /// bound to it, so that one issued by another version of a plugin does not open (a tool
    /// call's is its tool's [`Serving::revision`]).
    pub(crate) fn revision_of(&self, session: &PluginSession) -> u64 {
        self.group_of(session)
            .map_or(0, |(_, generation)| generation.revision)
    }

    /// The sessions of the plugins of this session, in the order of their groups' names.
    pub(crate) fn plugin_sessions(&self) -> Vec<PluginSession> {
        self.groups
            .values()
            .filter_map(|(_, tools)| tools.session().cloned())
            .collect()
    }

    /// The sessions of the plugins whose resources, prompts and completions this session may
    /// use (under an access policy, those granted whole).
    pub(crate) fn visible_plugin_sessions(&self) -> Vec<PluginSession> {
        self.groups
            .values()
            .filter(|(_, tools)| self.sees_whole(&tools.group))
            .filter_map(|(_, tools)| tools.session().cloned())
            .collect()
    }

    /// Waits until the catalog changes (`false`: it is gone).
    pub(crate) fn changes(&self) -> watch::Receiver<Arc<[ToolGroup]>> {
        self.updates.clone()
    }

    fn take_in(&mut self, groups: &[ToolGroup]) -> bool {
        let wanted: BTreeSet<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        let before = self.groups.len();
        self.groups.retain(|name, _| wanted.contains(name.as_str()));
        let mut changed = self.groups.len() != before;
        let mut to_start = Vec::new();
        for group in groups {
            if !self.sees_any(group) {
                continue;
            }
            if self
                .groups
                .get(&group.name)
                .is_some_and(|(generation, _)| *generation == group.generation())
            {
                continue;
            }
            let tools = Arc::new(GroupTools::new(group.clone()));
            // Tools not known in advance are known only once created.
            if group.tools.is_none() {
                tools.created();
            } else if self.create_all {
                to_start.push(Arc::clone(&tools));
            }
            self.groups
                .insert(group.name.clone(), (group.generation(), tools));
            changed = true;
        }
        // The plugins' instances started for the session, together, count against its
        // identity's CPU quota if it has one (spent: the session's calls start them, each
        // counted).
        let start = || {
            for tools in &to_start {
                tools.created();
            }
        };
        #[cfg(feature = "mcp-http")]
        match &self.starts_counted {
            Some(counted) if !to_start.is_empty() => {
                counted.run(start);
            }
            _ => start(),
        }
        #[cfg(not(feature = "mcp-http"))]
        start();
        if changed {
            self.rebuild_handle();
            self.unannounced = true;
        }
        changed
    }

    /// Registers every group's tools in a new handle: created tools as they are, the others
    /// deferred.
    fn rebuild_handle(&mut self) {
        let handle = ToolServer::new().handle();
        let mut served_by = HashMap::new();
        for (name, (_, tools)) in &self.groups {
            let registered = match (tools.created.get(), &tools.group.tools) {
                (Some(created), _) => created.clone(),
                (None, Some(metas)) => metas
                    .iter()
                    .enumerate()
                    .map(|(index, meta)| {
                        let deferred: Arc<dyn Tool> = Arc::new(DeferredTool {
                            group: Arc::clone(tools),
                            index,
                            name: meta.name.clone(),
                        });
                        (meta.clone(), deferred)
                    })
                    .collect(),
                (None, None) => tools.created().clone(),
            };
            let registered: Vec<_> = registered
                .into_iter()
                .filter(|(meta, _)| self.sees_tool(&tools.group, &meta.name))
                .collect();
            let names: Vec<String> = registered
                .iter()
                .map(|(meta, _)| meta.name.clone())
                .collect();
            match handle.register_created(registered) {
                Ok(()) => served_by.extend(names.into_iter().map(|tool| (tool, name.clone()))),
                Err(error) => {
                    // A plugin's clashes were settled when the catalog took it; a native group's
                    // tools are known only now (its factory runs per session): say so loudly.
                    tracing::warn!(
                        group = %name,
                        "the group's tools are not served in this session: {error}; give each \
                         group its own tool names"
                    );
                }
            }
        }
        self.handle = handle;
        self.served_by = served_by;
        self.generation += 1;
    }
}

/// The failure of a call of `tool` whose plugin stopped being served while the call waited or
/// ran ([`SessionTools::withdrawal`]).
pub(crate) fn no_longer_served(tool: &str) -> crate::ToolError {
    crate::ToolError::Internal(format!(
        "'{tool}' stopped: its plugin is no longer served in this session (changed or removed, \
         or no longer granted)"
    ))
}
