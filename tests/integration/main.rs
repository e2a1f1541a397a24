//! Integration tests: the built `ptc-mcp` binary driven over stdio as an MCP client would, against real
//! downstream servers (our mock fault-injection servers and third-party ones).

#[macro_use]
mod harness;

mod common;

mod approval;
mod attach;
mod audit;
mod channel;
mod checks;
mod cli;
mod conformance;
mod discovery;
mod docker;
mod downstreams;
mod escape;
mod execute;
mod hangup;
mod health;
mod http;
mod http_hardening;
mod kubernetes;
mod limits;
mod mounts;
mod oauth;
mod observed_shapes;
mod packages;
mod pool;
mod progress;
mod reaper;
mod registry;
mod replicas;
mod results_shapes;
mod scratch;
mod seatbelt;
mod sessions;
mod shell;
mod show;
mod shutdown;
mod surface;
mod tasks;
mod thirdparty;
mod transports;
mod zygote;

fn main() {
    harness::main()
}
