//! Asking the person behind a 2025-era MCP client to approve a program's call (`tools.confirm`), through
//! `elicitation/create`, when the client declared elicitation; a client that did not gets the call failed
//! with a `ToolError` saying what to do. A client that declared URL-mode elicitation can also be sent to a
//! hosted server's login page (see [`crate::engine`]'s login before a run). (2026-07-28 clients are asked through `input_required` results:
//! see [`crate::input_required`].)

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RequestContext, RoleServer};

use crate::engine::{ApprovalRequest, Approver, Refusal};

/// How this request's client can be asked.
enum ClientApprover {
    /// `urls`: it declared URL-mode elicitation too.
    Elicit { peer: Peer<RoleServer>, urls: bool },
    /// It did not declare elicitation.
    CannotElicit,
}

/// The approver for calls of the run this request starts.
pub fn approver_for(context: &RequestContext<RoleServer>) -> Arc<dyn Approver> {
    let elicitation = context.client_capabilities().and_then(|capabilities| capabilities.elicitation.clone());
    Arc::new(match elicitation {
        Some(elicitation) => ClientApprover::Elicit { peer: context.peer.clone(), urls: elicitation.url.is_some() },
        None => ClientApprover::CannotElicit,
    })
}

#[async_trait]
impl Approver for ClientApprover {
    async fn approve(&self, request: &ApprovalRequest) -> Result<(), Refusal> {
        let ClientApprover::Elicit { peer, .. } = self else {
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

    async fn send_to_url(&self, message: &str, url: &str) -> bool {
        let ClientApprover::Elicit { peer, urls: true } = self else { return false };
        let mut id = [0u8; 16];
        let _ = getrandom::fill(&mut id);
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message: message.to_string(),
            url: url.to_string(),
            elicitation_id: id.iter().map(|b| format!("{b:02x}")).collect(),
        };
        match peer.create_elicitation(params).await {
            Ok(answer) => answer.action == ElicitationAction::Accept,
            Err(e) => {
                tracing::warn!("cannot send the person to a login page: {e}");
                false
            }
        }
    }
}
