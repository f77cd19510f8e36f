//! Memory: a knowledge graph of entities, relations and observations kept in a JSON-lines
//! file, with the tools, descriptions and results of the MCP reference server
//! `@modelcontextprotocol/server-memory` (2026.8.31). See the README for the grants.

pub mod graph;
pub mod store;

use std::sync::Arc;

use llm_worker_guest::{
    Content, ToolDefinition, ToolOutput, ToolRegistry, resource, resource_updated, tool,
    tool_registry,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::graph::{
    AddedObservations, Entity, Graph, ObservationAddition, ObservationDeletion, Relation,
};
use crate::store::Store;

/// The resource holding the whole graph.
pub const GRAPH_URI: &str = "memory://knowledge-graph";

/// The tools, sharing the memory file the environment names.
///
/// `read_graph`, `search_nodes` and `open_nodes` do not claim to be read-only, as the
/// reference server's do: the plugin's read-write directory makes the host drop that claim
/// (with a warning at every load), so clients see no `readOnlyHint` either way.
#[derive(Clone)]
pub struct Memory {
    /// The store, or why the environment names none.
    store: Arc<Result<Store, String>>,
}

impl Default for Memory {
    fn default() -> Self {
        Self {
            store: Arc::new(Store::from_env()),
        }
    }
}

impl Memory {
    /// The tools on the memory file of `store`.
    #[must_use]
    pub fn new(store: Store) -> Self {
        Self {
            store: Arc::new(Ok(store)),
        }
    }

    fn store(&self) -> Result<&Store, String> {
        self.store.as_ref().as_ref().map_err(Clone::clone)
    }

    /// Changes the graph and tells subscribers of the graph's resource.
    fn change<T>(&self, change: impl FnOnce(&mut Graph) -> Result<T, String>) -> Result<T, String> {
        let answer = self.store()?.update(change)?;
        resource_updated(GRAPH_URI);
        Ok(answer)
    }

    fn graph(&self) -> Result<Graph, String> {
        self.store()?.load()
    }
}

#[tool_registry]
impl Memory {
    /// Create multiple new entities in the knowledge graph
    #[tool(
        title = "Create Entities",
        read_only = false,
        destructive = false,
        idempotent = false,
        open_world = false
    )]
    fn create_entities(&self, entities: Vec<Entity>) -> Result<ToolOutput, String> {
        let created = self.change(|graph| Ok(graph.create_entities(entities)))?;
        answer(&created, json!({ "entities": created }))
    }

    /// Create multiple new relations between entities in the knowledge graph. Relations should be in active voice
    #[tool(
        title = "Create Relations",
        read_only = false,
        destructive = false,
        idempotent = false,
        open_world = false
    )]
    fn create_relations(&self, relations: Vec<Relation>) -> Result<ToolOutput, String> {
        let created = self.change(|graph| Ok(graph.create_relations(relations)))?;
        answer(&created, json!({ "relations": created }))
    }

    /// Add new observations to existing entities in the knowledge graph
    #[tool(
        title = "Add Observations",
        read_only = false,
        destructive = false,
        idempotent = false,
        open_world = false
    )]
    fn add_observations(
        &self,
        observations: Vec<ObservationAddition>,
    ) -> Result<ToolOutput, String> {
        let results = self.change(|graph| graph.add_observations(observations))?;
        answer(&results, json!({ "results": results }))
    }

    /// Delete multiple entities and their associated relations from the knowledge graph
    #[tool(
        title = "Delete Entities",
        read_only = false,
        destructive,
        idempotent,
        open_world = false
    )]
    fn delete_entities(
        &self,
        #[description = "An array of entity names to delete"]
        #[serde(rename = "entityNames")]
        entity_names: Vec<String>,
    ) -> Result<ToolOutput, String> {
        self.change(|graph| {
            graph.delete_entities(&entity_names);
            Ok(())
        })?;
        Ok(done("Entities deleted successfully"))
    }

    /// Delete specific observations from entities in the knowledge graph
    #[tool(
        title = "Delete Observations",
        read_only = false,
        destructive,
        idempotent,
        open_world = false
    )]
    fn delete_observations(
        &self,
        deletions: Vec<ObservationDeletion>,
    ) -> Result<ToolOutput, String> {
        self.change(|graph| {
            graph.delete_observations(&deletions);
            Ok(())
        })?;
        Ok(done("Observations deleted successfully"))
    }

    /// Delete multiple relations from the knowledge graph
    #[tool(
        title = "Delete Relations",
        read_only = false,
        destructive,
        idempotent,
        open_world = false
    )]
    fn delete_relations(
        &self,
        #[description = "An array of relations to delete"] relations: Vec<Relation>,
    ) -> Result<ToolOutput, String> {
        self.change(|graph| {
            graph.delete_relations(&relations);
            Ok(())
        })?;
        Ok(done("Relations deleted successfully"))
    }

    /// Read the entire knowledge graph
    #[tool(
        title = "Read Graph",
        destructive = false,
        idempotent,
        open_world = false
    )]
    fn read_graph(&self) -> Result<ToolOutput, String> {
        graph_answer(&self.graph()?)
    }

    /// Search for nodes in the knowledge graph based on a query
    #[tool(
        title = "Search Nodes",
        destructive = false,
        idempotent,
        open_world = false
    )]
    fn search_nodes(
        &self,
        #[description = "The search query to match against entity names, types, and observation content"]
        query: String,
    ) -> Result<ToolOutput, String> {
        graph_answer(&self.graph()?.search(&query))
    }

    /// Open specific nodes in the knowledge graph by their names
    #[tool(
        title = "Open Nodes",
        destructive = false,
        idempotent,
        open_world = false
    )]
    fn open_nodes(
        &self,
        #[description = "An array of entity names to retrieve"] names: Vec<String>,
    ) -> Result<ToolOutput, String> {
        graph_answer(&self.graph()?.open(&names))
    }

    /// The full knowledge graph with all entities and relations
    #[resource(
        uri = "memory://knowledge-graph",
        name = "knowledge-graph",
        title = "Knowledge Graph",
        mime_type = "application/json"
    )]
    fn knowledge_graph(&self) -> Result<String, String> {
        pretty(&self.graph()?)
    }
}

/// `value` as the reference server writes its texts: JSON indented by two spaces.
fn pretty<T: Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value)
        .map_err(|error| format!("the result cannot be written as JSON: {error}"))
}

/// A result whose text is `shown`, indented, and whose structured value is `structured`.
fn answer<T: Serialize>(shown: &T, structured: Value) -> Result<ToolOutput, String> {
    Ok(ToolOutput {
        content: vec![Content::text(pretty(shown)?)],
        structured: Some(structured),
        is_error: false,
    })
}

/// A (part of the) graph as a result.
fn graph_answer(graph: &Graph) -> Result<ToolOutput, String> {
    let structured = serde_json::to_value(graph)
        .map_err(|error| format!("the result cannot be written as JSON: {error}"))?;
    answer(graph, structured)
}

/// The result of a deletion.
fn done(message: &str) -> ToolOutput {
    ToolOutput {
        content: vec![Content::text(message)],
        structured: Some(json!({ "success": true, "message": message })),
        is_error: false,
    }
}

/// `create_entities`' structured result.
#[derive(Serialize, JsonSchema)]
struct CreatedEntities {
    entities: Vec<Entity>,
}

/// `create_relations`' structured result.
#[derive(Serialize, JsonSchema)]
struct CreatedRelations {
    relations: Vec<Relation>,
}

/// `add_observations`' structured result.
#[derive(Serialize, JsonSchema)]
struct AddedResults {
    results: Vec<AddedObservations>,
}

/// A deletion's structured result.
#[derive(Serialize, JsonSchema)]
struct Deleted {
    success: bool,
    message: String,
}

/// The output schema of the tool `name`: its structured result's, as the reference server
/// declares them.
fn output_schema(name: &str) -> Option<Value> {
    let mut schema = match name {
        "create_entities" => schemars::schema_for!(CreatedEntities),
        "create_relations" => schemars::schema_for!(CreatedRelations),
        "add_observations" => schemars::schema_for!(AddedResults),
        "delete_entities" | "delete_observations" | "delete_relations" => {
            schemars::schema_for!(Deleted)
        }
        "read_graph" | "search_nodes" | "open_nodes" => schemars::schema_for!(Graph),
        _ => return None,
    }
    .to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
    }
    Some(schema)
}

/// The plugin: [`Memory`]'s tools with their output schemas (a tool returning a
/// [`ToolOutput`], to write its text as the reference server does, has none of its own), and
/// its resource.
#[derive(Clone, Default)]
pub struct MemoryPlugin(pub Memory);

impl ToolRegistry for MemoryPlugin {
    fn tool_definitions(&self) -> Vec<ToolDefinition> {
        self.0
            .tool_definitions()
            .into_iter()
            .map(|definition| -> ToolDefinition {
                Arc::new(move || {
                    let (meta, tool) = definition();
                    let meta = match output_schema(&meta.name) {
                        Some(schema) => meta.output_schema(schema),
                        None => meta,
                    };
                    (meta, tool)
                })
            })
            .collect()
    }

    llm_worker_guest::forward_offerings!(0);
}

llm_worker_guest::export_plugin!(MemoryPlugin);

#[cfg(test)]
mod tests {
    use super::*;
    use llm_worker_guest::block_on;

    fn plugin(name: &str) -> (MemoryPlugin, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("memory-plugin-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("memory.jsonl");
        (
            MemoryPlugin(Memory::new(Store::new(
                path.clone(),
                store::DEFAULT_MAX_BYTES,
            ))),
            path,
        )
    }

    fn call(plugin: &MemoryPlugin, name: &str, input: &str) -> Result<ToolOutput, String> {
        let definitions = plugin.tool_definitions();
        let (_, tool) = definitions
            .iter()
            .map(|definition| definition())
            .find(|(meta, _)| meta.name == name)
            .unwrap();
        block_on(tool.call(input)).map_err(|error| error.to_string())
    }

    #[test]
    fn every_tool_has_the_reference_servers_output_schema() {
        let (plugin, _) = plugin("schemas");
        let metas: Vec<_> = plugin.tool_definitions().iter().map(|d| d().0).collect();
        assert_eq!(metas.len(), 9);
        for meta in &metas {
            let schema = meta.output_schema.as_ref().unwrap();
            assert_eq!(schema["type"], "object", "{}", meta.name);
        }
        let read = metas.iter().find(|m| m.name == "read_graph").unwrap();
        let required = &read.output_schema.as_ref().unwrap()["required"];
        assert_eq!(required, &json!(["entities", "relations"]));
    }

    #[test]
    fn results_are_indented_text_and_a_structured_value() {
        let (plugin, path) = plugin("results");
        let output = call(
            &plugin,
            "create_entities",
            r#"{"entities":[{"name":"Ada","entityType":"person","observations":["maths"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            output.content,
            vec![Content::text(
                "[\n  {\n    \"name\": \"Ada\",\n    \"entityType\": \"person\",\n    \"observations\": [\n      \"maths\"\n    ]\n  }\n]"
            )]
        );
        assert_eq!(
            output.structured,
            Some(
                json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["maths"]}]})
            )
        );
        let output = call(&plugin, "delete_entities", r#"{"entityNames":["Bob"]}"#).unwrap();
        assert_eq!(
            output.content,
            vec![Content::text("Entities deleted successfully")]
        );
        let error = call(
            &plugin,
            "add_observations",
            r#"{"observations":[{"entityName":"Bob","contents":["x"]}]}"#,
        )
        .unwrap_err();
        assert!(error.contains("Entity with name Bob not found"), "{error}");
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("\"name\":\"Ada\"")
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
