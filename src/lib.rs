//! ptc-mcp: programmatic tool calling for any MCP client. The model writes one Python program; it runs in a
//! sandboxed child interpreter where every downstream MCP tool is an async function, and only what the
//! program prints comes back.

pub mod config;
pub mod discovery;
pub mod engine;
pub mod lines;
pub mod naming;
pub mod registry;
pub mod search;
pub mod server;
pub mod signatures;
