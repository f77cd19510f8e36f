//! The knowledge graph: entities, relations, the changes the tools make to them, and the
//! JSON-lines text a memory file holds (one entity or relation per line, as the reference
//! server writes it, so a file moves between the two).

use std::collections::{HashMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

// The types below have plain comments, not doc comments: a doc comment would become a
// description in the tools' schemas, which the reference server's do not have.

// A node of the graph: a named thing, its type, and what is known about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Entity {
    /// The name of the entity
    pub name: String,
    /// The type of the entity
    pub entity_type: String,
    /// An array of observation contents associated with the entity
    pub observations: Vec<String>,
}

// A directed edge of the graph, between two entities by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Relation {
    /// The name of the entity where the relation starts
    pub from: String,
    /// The name of the entity where the relation ends
    pub to: String,
    /// The type of the relation
    pub relation_type: String,
}

// Observations to add to one entity.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservationAddition {
    /// The name of the entity to add the observations to
    pub entity_name: String,
    /// An array of observation contents to add
    pub contents: Vec<String>,
}

// Observations to delete from one entity.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservationDeletion {
    /// The name of the entity containing the observations
    pub entity_name: String,
    /// An array of observations to delete
    pub observations: Vec<String>,
}

// What `add_observations` added to one entity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddedObservations {
    pub entity_name: String,
    pub added_observations: Vec<String>,
}

// The whole graph, or the part of it a search or an open found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Graph {
    pub entities: Vec<Entity>,
    pub relations: Vec<Relation>,
}

/// One line of a memory file, as it is written.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum LineOut<'a> {
    Entity(&'a Entity),
    Relation(&'a Relation),
}

/// Most entities, relations and observations together that a graph may hold. The reference
/// server has no such limit; here the graph, and the answers made from it (a structured copy
/// and its text), must fit the plugin's memory, and a small item takes far more of it than its
/// bytes in the file: a 5 MB file of 1.7 million empty observations would make a read of the
/// whole graph pass a 64 MiB limit. A file of the default size limit holds some 120,000
/// entities, which stay within it.
pub const MAX_ITEMS: usize = 250_000;

impl Graph {
    /// How many entities, relations and observations the graph holds.
    #[must_use]
    pub fn items(&self) -> usize {
        self.entities
            .iter()
            .map(|entity| 1 + entity.observations.len())
            .sum::<usize>()
            + self.relations.len()
    }

    /// The graph a memory file's text holds. Blank lines are skipped, and so are lines that
    /// are neither an entity nor a relation (the reference server skips them too, and a save
    /// drops them); a line that is not JSON, or an entity or relation missing a field, is an
    /// error naming the line, so that a damaged file is never overwritten.
    ///
    /// # Errors
    /// The line (from 1) and what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut graph = Self::default();
        // Counted as lines are read: a file of many lines each within the bound per line
        // (eleven entities of 249,990 observations) would otherwise be read whole first.
        let mut items = 0usize;
        for (at, line) in text.split('\n').enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let number = at + 1;
            // Parsed whole, a line of millions of tiny values (`[0,0,…]`, 6 MiB) would take more
            // than the plugin's memory before any count could refuse it, and so would every
            // later call: its values are counted first.
            if values_in(line) > MAX_ITEMS + 16 {
                return Err(format!(
                    "line {number} holds more than the {MAX_ITEMS} values this plugin reads"
                ));
            }
            let value: Value = serde_json::from_str(line)
                .map_err(|error| format!("line {number} is not JSON: {error}"))?;
            match value.get("type").and_then(Value::as_str) {
                Some("entity") => {
                    let entity = Entity::deserialize(&value)
                        .map_err(|error| format!("line {number} is not an entity: {error}"))?;
                    items += 1 + entity.observations.len();
                    graph.entities.push(entity);
                }
                Some("relation") => {
                    graph
                        .relations
                        .push(Relation::deserialize(&value).map_err(|error| {
                            format!("line {number} is not a relation: {error}")
                        })?);
                    items += 1;
                }
                _ => {}
            }
            if items > MAX_ITEMS {
                return Err(format!(
                    "up to line {number} it holds more than the {MAX_ITEMS} entities, \
                     relations and observations this plugin reads"
                ));
            }
        }
        Ok(graph)
    }

    /// The memory file's text: one line per entity, then one per relation, keys in the
    /// reference server's order, lines separated by `\n` with none after the last.
    #[must_use]
    pub fn to_jsonl(&self) -> String {
        let lines = self
            .entities
            .iter()
            .map(LineOut::Entity)
            .chain(self.relations.iter().map(LineOut::Relation));
        let mut text = String::new();
        for (at, line) in lines.enumerate() {
            if at > 0 {
                text.push('\n');
            }
            // Strings and arrays of strings: serialising cannot fail.
            text.push_str(&serde_json::to_string(&line).unwrap_or_default());
        }
        text
    }

    /// Adds the entities whose names are not in the graph yet; returns those added. Like the
    /// reference server, entities of one call are checked against the graph only, not
    /// against each other.
    pub fn create_entities(&mut self, entities: Vec<Entity>) -> Vec<Entity> {
        let known: HashSet<&str> = self.entities.iter().map(|e| e.name.as_str()).collect();
        let new: Vec<Entity> = entities
            .into_iter()
            .filter(|entity| !known.contains(entity.name.as_str()))
            .collect();
        self.entities.extend(new.iter().cloned());
        new
    }

    /// Adds the relations not in the graph yet (same ends and type); returns those added.
    /// Their ends need not exist, as with the reference server.
    pub fn create_relations(&mut self, relations: Vec<Relation>) -> Vec<Relation> {
        let known: HashSet<&Relation> = self.relations.iter().collect();
        let new: Vec<Relation> = relations
            .into_iter()
            .filter(|relation| !known.contains(relation))
            .collect();
        self.relations.extend(new.iter().cloned());
        new
    }

    /// Adds to each named entity the contents it does not have yet, in order.
    ///
    /// # Errors
    /// An entity that does not exist: nothing is added (the caller does not save).
    pub fn add_observations(
        &mut self,
        additions: Vec<ObservationAddition>,
    ) -> Result<Vec<AddedObservations>, String> {
        // Looked up by name and by content, not searched for each item: a call's items times
        // the graph's would keep the memory file locked for every other session.
        let by_name = self.by_name();
        let mut results = Vec::with_capacity(additions.len());
        for addition in additions {
            let Some(&at) = by_name.get(addition.entity_name.as_str()) else {
                return Err(format!(
                    "Entity with name {} not found",
                    addition.entity_name
                ));
            };
            let entity = &mut self.entities[at];
            let had: HashSet<&str> = entity.observations.iter().map(String::as_str).collect();
            let added: Vec<String> = addition
                .contents
                .into_iter()
                .filter(|content| !had.contains(content.as_str()))
                .collect();
            entity.observations.extend(added.iter().cloned());
            results.push(AddedObservations {
                entity_name: addition.entity_name,
                added_observations: added,
            });
        }
        Ok(results)
    }

    /// Removes the named entities and every relation from or to them.
    pub fn delete_entities(&mut self, names: &[String]) {
        let names: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.entities.retain(|e| !names.contains(e.name.as_str()));
        self.relations
            .retain(|r| !names.contains(r.from.as_str()) && !names.contains(r.to.as_str()));
    }

    /// Removes the given observations from each named entity; unknown entities are skipped.
    pub fn delete_observations(&mut self, deletions: &[ObservationDeletion]) {
        let by_name = self.by_name();
        for deletion in deletions {
            if let Some(&at) = by_name.get(deletion.entity_name.as_str()) {
                let doomed: HashSet<&str> =
                    deletion.observations.iter().map(String::as_str).collect();
                self.entities[at]
                    .observations
                    .retain(|o| !doomed.contains(o.as_str()));
            }
        }
    }

    /// Where each entity's name first stands in the graph (what a search from the start finds).
    fn by_name(&self) -> HashMap<String, usize> {
        let mut by_name = HashMap::with_capacity(self.entities.len());
        for (at, entity) in self.entities.iter().enumerate() {
            by_name.entry(entity.name.clone()).or_insert(at);
        }
        by_name
    }

    /// Removes the given relations (same ends and type).
    pub fn delete_relations(&mut self, relations: &[Relation]) {
        let doomed: HashSet<&Relation> = relations.iter().collect();
        self.relations.retain(|r| !doomed.contains(r));
    }

    /// The entities whose name, type or an observation contains `query`, ignoring case, and
    /// the relations with at least one end among them.
    #[must_use]
    pub fn search(&self, query: &str) -> Self {
        let query = query.to_lowercase();
        let matches = |text: &str| text.to_lowercase().contains(&query);
        self.subgraph(|e| {
            matches(&e.name) || matches(&e.entity_type) || e.observations.iter().any(|o| matches(o))
        })
    }

    /// The entities named, and the relations with at least one end among them.
    #[must_use]
    pub fn open(&self, names: &[String]) -> Self {
        let names: HashSet<&str> = names.iter().map(String::as_str).collect();
        self.subgraph(|e| names.contains(e.name.as_str()))
    }

    /// The entities `keep` keeps, in graph order, and the relations touching them.
    fn subgraph(&self, keep: impl Fn(&Entity) -> bool) -> Self {
        let entities: Vec<Entity> = self.entities.iter().filter(|e| keep(e)).cloned().collect();
        let names: HashSet<&str> = entities.iter().map(|e| e.name.as_str()).collect();
        let relations = self
            .relations
            .iter()
            .filter(|r| names.contains(r.from.as_str()) || names.contains(r.to.as_str()))
            .cloned()
            .collect();
        Self {
            entities,
            relations,
        }
    }
}

/// About how many JSON values `line` holds, without parsing it: one more than its `,`, `[`, `{`
/// and `:` outside strings (a value's members and elements are separated or opened by one).
fn values_in(line: &str) -> usize {
    let mut count = 1;
    let mut in_string = false;
    let mut escaped = false;
    for byte in line.bytes() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b',' | b'[' | b'{' | b':' => count += 1,
                _ => {}
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(name: &str, kind: &str, observations: &[&str]) -> Entity {
        Entity {
            name: name.into(),
            entity_type: kind.into(),
            observations: observations.iter().map(|o| (*o).into()).collect(),
        }
    }

    fn relation(from: &str, to: &str, kind: &str) -> Relation {
        Relation {
            from: from.into(),
            to: to.into(),
            relation_type: kind.into(),
        }
    }

    #[test]
    fn the_file_format_is_the_reference_servers() {
        let graph = Graph {
            entities: vec![entity("Ada", "person", &["wrote \"notes\"\n"])],
            relations: vec![relation("Ada", "Babbage", "knew")],
        };
        let text = graph.to_jsonl();
        assert_eq!(
            text,
            "{\"type\":\"entity\",\"name\":\"Ada\",\"entityType\":\"person\",\"observations\":[\"wrote \\\"notes\\\"\\n\"]}\n\
             {\"type\":\"relation\",\"from\":\"Ada\",\"to\":\"Babbage\",\"relationType\":\"knew\"}"
        );
        assert_eq!(Graph::parse(&text), Ok(graph));
        assert_eq!(Graph::default().to_jsonl(), "");
    }

    #[test]
    fn parsing_skips_blank_and_foreign_lines_and_names_a_bad_one() {
        let text = "\n  \n{\"type\":\"note\",\"x\":1}\r\n{\"type\":\"entity\",\"name\":\"A\",\"entityType\":\"t\",\"observations\":[],\"extra\":true}\r\n";
        let graph = Graph::parse(text).unwrap();
        assert_eq!(graph.entities, vec![entity("A", "t", &[])]);
        let error = Graph::parse("{\"type\":\"entity\"}\n{oops").unwrap_err();
        assert!(error.starts_with("line 1 is not an entity"), "{error}");
        let error = Graph::parse("\n{oops").unwrap_err();
        assert!(error.starts_with("line 2 is not JSON"), "{error}");
    }

    /// A line of millions of tiny values, foreign or an entity's, is refused before it is
    /// parsed (parsed, it took more than the plugin's memory); one of many values in a string
    /// is one value.
    #[test]
    fn a_line_of_more_values_than_a_graph_holds_is_refused_unparsed() {
        let zeros = format!("{{\"type\":\"note\",\"x\":[{}0]}}", "0,".repeat(3_000_000));
        let error = Graph::parse(&format!("\n{zeros}")).unwrap_err();
        assert!(
            error.starts_with("line 2 holds more than the 250000 values"),
            "{error}"
        );
        let empties = format!(
            "{{\"type\":\"entity\",\"name\":\"A\",\"entityType\":\"t\",\"observations\":[{}\"\"]}}",
            "\"\",".repeat(MAX_ITEMS + 20)
        );
        assert!(Graph::parse(&empties).is_err());
        let text = format!(
            "{{\"type\":\"entity\",\"name\":\"A\",\"entityType\":\"t\",\"observations\":[\"{}\"]}}",
            ",[{:".repeat(1_000_000)
        );
        assert_eq!(
            Graph::parse(&text).unwrap().entities[0].observations.len(),
            1
        );
        // Many lines each within the bound, together past it: refused as they are read.
        let line = format!(
            "{{\"type\":\"entity\",\"name\":\"A\",\"entityType\":\"t\",\"observations\":[{}\"\"]}}\n",
            "\"\",".repeat(99_999)
        );
        let error = Graph::parse(&line.repeat(3)).unwrap_err();
        assert!(
            error.starts_with("up to line 3 it holds more than the 250000"),
            "{error}"
        );
        assert_eq!(values_in(r#"{"a":["x,\",y",1]}"#), 5);
    }

    /// Adding and deleting observations looks them up instead of searching for each one: a
    /// client's 30,000 items against an entity's 30,000 took 900 million comparisons while
    /// the memory file stayed locked for every other session.
    #[test]
    fn large_changes_are_looked_up_not_searched() {
        let many = |from: usize, count: usize| -> Vec<String> {
            (from..from + count).map(|n| format!("o{n}")).collect()
        };
        let mut graph = Graph::default();
        let mut a = entity("A", "t", &[]);
        a.observations = many(0, 30_000);
        graph.create_entities(vec![a]);
        let results = graph
            .add_observations(vec![ObservationAddition {
                entity_name: "A".into(),
                contents: many(15_000, 30_000),
            }])
            .unwrap();
        assert_eq!(results[0].added_observations, many(30_000, 15_000));
        assert_eq!(graph.entities[0].observations.len(), 45_000);
        graph.delete_observations(&[ObservationDeletion {
            entity_name: "A".into(),
            observations: many(0, 30_000),
        }]);
        assert_eq!(graph.entities[0].observations, many(30_000, 15_000));
    }

    #[test]
    fn changes_behave_as_the_reference_servers() {
        let mut graph = Graph::default();
        let added = graph.create_entities(vec![entity("A", "t", &["x"]), entity("B", "t", &[])]);
        assert_eq!(added.len(), 2);
        assert!(
            graph
                .create_entities(vec![entity("A", "u", &[])])
                .is_empty()
        );
        assert_eq!(
            graph.create_relations(vec![relation("A", "B", "r"), relation("A", "Z", "r")]),
            vec![relation("A", "B", "r"), relation("A", "Z", "r")]
        );
        assert!(
            graph
                .create_relations(vec![relation("A", "B", "r")])
                .is_empty()
        );

        let results = graph
            .add_observations(vec![ObservationAddition {
                entity_name: "A".into(),
                contents: vec!["x".into(), "y".into()],
            }])
            .unwrap();
        assert_eq!(results[0].added_observations, vec!["y".to_owned()]);
        let before = graph.clone();
        let error = graph
            .add_observations(vec![ObservationAddition {
                entity_name: "Q".into(),
                contents: vec![],
            }])
            .unwrap_err();
        assert_eq!(error, "Entity with name Q not found");
        assert_eq!(graph, before);

        assert_eq!(graph.search("X").entities.len(), 1);
        assert_eq!(graph.search("").entities.len(), 2);
        assert_eq!(graph.search("T").relations.len(), 2);
        let opened = graph.open(&["B".into()]);
        assert_eq!(opened.entities, vec![entity("B", "t", &[])]);
        assert_eq!(opened.relations, vec![relation("A", "B", "r")]);

        graph.delete_observations(&[ObservationDeletion {
            entity_name: "A".into(),
            observations: vec!["x".into()],
        }]);
        assert_eq!(graph.entities[0].observations, vec!["y".to_owned()]);
        graph.delete_relations(&[relation("A", "Z", "r")]);
        assert_eq!(graph.relations, vec![relation("A", "B", "r")]);
        graph.delete_entities(&["B".into()]);
        assert_eq!(graph.entities.len(), 1);
        assert!(graph.relations.is_empty());
    }
}
