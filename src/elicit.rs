//! Asking the person behind a 2025-era MCP client to approve a program's call (`tools.confirm`), through
//! `elicitation/create`, when the client declared elicitation; a client that did not gets the call failed
//! with a `ToolError` saying what to do. (2026-07-28 clients are asked through `input_required` results:
//! see [`crate::input_required`].)

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RequestContext, RoleServer};

use crate::engine::{ApprovalRequest, Approver, Refusal};

/// How this request's client can be asked.
enum ClientApprover {
    Elicit(Peer<RoleServer>),
    /// It did not declare elicitation.
    CannotElicit,
}

/// The approver for calls of the run this request starts.
pub fn approver_for(context: &RequestContext<RoleServer>) -> Arc<dyn Approver> {
    let can_elicit = context.client_capabilities().is_some_and(|capabilities| capabilities.elicitation.is_some());
    Arc::new(if can_elicit { ClientApprover::Elicit(context.peer.clone()) } else { ClientApprover::CannotElicit })
}

#[async_trait]
impl Approver for ClientApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Result<(), Refusal> {
        let ClientApprover::Elicit(peer) = self else {
            return Err(Refusal::CannotElicit { tool: request.tool.clone() });
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: request.question(),
            requested_schema: ElicitationSchema::new(Default::default()),
        };
        match peer.create_elicitation(params).await {
            Ok(answer) if answer.action == ElicitationAction::Accept => Ok(()),
            Ok(_) => Err(Refusal::Declined),
            Err(e) => Err(Refusal::AskFailed { tool: request.tool.clone(), source: Box::new(e) }),
        }
    }
}
