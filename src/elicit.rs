//! Asking the person behind an MCP client to approve a program's call (`tools.confirm`), through MCP
//! elicitation: `elicitation/create` for 2025-era clients that declared the capability. A client that did not,
//! and a 2026-07-28 client (whose revision asks through an `input_required` result, which cannot be given in
//! the middle of a run), get the call failed with a `ToolError` saying why and what to do.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, ProtocolVersion};
use rmcp::service::{Peer, RequestContext, RoleServer};

use crate::engine::{ApprovalRequest, Approver};

/// The `ToolError` message of a call the person declined (or dismissed).
pub const DECLINED: &str = "declined by the user";

/// How this request's client can be asked.
enum ClientApprover {
    Elicit(Peer<RoleServer>),
    /// It cannot: why.
    Cannot(Why),
}

enum Why {
    NoElicitation,
    InputRequiredRevision,
}

/// The approver for calls of the run this request starts.
pub fn approver_for(context: &RequestContext<RoleServer>) -> Arc<dyn Approver> {
    let modern =
        context.protocol_version().is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    let can_elicit = context.client_capabilities().is_some_and(|capabilities| capabilities.elicitation.is_some());
    Arc::new(match (modern, can_elicit) {
        (true, _) => ClientApprover::Cannot(Why::InputRequiredRevision),
        (false, false) => ClientApprover::Cannot(Why::NoElicitation),
        (false, true) => ClientApprover::Elicit(context.peer.clone()),
    })
}

#[async_trait]
impl Approver for ClientApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Result<(), String> {
        let tool = &request.tool;
        let peer = match self {
            ClientApprover::Elicit(peer) => peer,
            ClientApprover::Cannot(Why::NoElicitation) => {
                return Err(format!(
                    "'{tool}' needs the user's approval (tools.confirm), but this client does not support MCP \
                     elicitation: enable elicitation in the client, or call the tool directly"
                ));
            }
            ClientApprover::Cannot(Why::InputRequiredRevision) => {
                return Err(format!(
                    "'{tool}' needs the user's approval (tools.confirm), but a 2026-07-28 client can only be asked \
                     through an input_required result, which ptc-mcp cannot give in the middle of a run: call the \
                     tool directly, or connect with a 2025-era session (initialize) that supports elicitation"
                ));
            }
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: request.question(),
            requested_schema: ElicitationSchema::new(Default::default()),
        };
        match peer.create_elicitation(params).await {
            Ok(answer) if answer.action == ElicitationAction::Accept => Ok(()),
            Ok(_) => Err(DECLINED.to_string()),
            Err(e) => {
                Err(format!("'{tool}' needs the user's approval (tools.confirm), but asking the client failed: {e}"))
            }
        }
    }
}
