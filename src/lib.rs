//! ptc-mcp: programmatic tool calling for any MCP client. The model writes one Python program; it runs in a
//! sandboxed child interpreter where every downstream MCP tool is an async function, and only what the
//! program prints comes back.

pub mod app;
pub mod audit;
pub mod cli;
pub mod config;
pub mod discovery;
pub mod elicit;
pub mod engine;
#[cfg(test)]
mod fuzzing;
pub mod input_required;
pub mod lines;
pub mod metrics;
pub mod naming;
pub mod oauth;
pub mod owner;
pub mod precheck;
pub mod progress;
pub mod registry;
pub mod search;
pub mod serve;
pub mod server;
pub mod signatures;
pub mod stop;
pub mod suggest;
pub mod tasks;
