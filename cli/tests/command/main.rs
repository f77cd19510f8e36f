//! The `llm-worker` binary run as a process: the command line and the MCP server, in one test
//! binary (each would otherwise link the whole host on its own).
// The server's futures (wasmtime's concurrent calls inside rmcp's handlers) nest deeper
// than the default limit of 128 lets the compiler lay them out.
#![recursion_limit = "256"]

mod cli;
mod first_hour;
mod http;
mod mcp;
mod protocol;
mod reference;
mod registry;
