//! The `llm-worker` binary run as a process: the command line and the MCP server, in one test
//! binary (each would otherwise link the whole host on its own).

mod cli;
mod first_hour;
mod http;
mod mcp;
mod protocol;
mod reference;
mod registry;
