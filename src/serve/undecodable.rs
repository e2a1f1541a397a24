//! A request that does not decode is answered, never dropped: a JSON-RPC error that carries the request's
//! `id` whenever one can be found in it — a parse error for text that is not JSON (a lone surrogate escape
//! such as `"\ud800"` makes a string invalid), an invalid-request error for JSON that is not a message we
//! understand or a line too long to read. The client then fails that request at once instead of waiting.

use rmcp::model::{ClientJsonRpcMessage, ErrorData, JsonRpcError, RequestId, ServerJsonRpcMessage};
use serde_json::Value;

/// A message that could not be decoded, and what to answer.
#[derive(Debug)]
pub struct Undecodable {
    id: Option<RequestId>,
    /// Boxed: it is most of the size, and the decoded message is what callers usually get.
    error: Box<ErrorData>,
    /// A notification (a `method` without an `id`): over stdio it is never answered.
    notification: bool,
}

/// Decodes one client message exactly as rmcp's transports do.
pub fn decode(bytes: &[u8]) -> Result<ClientJsonRpcMessage, Undecodable> {
    serde_json::from_slice(bytes).map_err(|e| Undecodable::new(bytes, &e))
}

impl Undecodable {
    fn new(bytes: &[u8], error: &serde_json::Error) -> Undecodable {
        let id = crate::lines::top_level_id(bytes);
        let (error, notification) = match serde_json::from_slice::<Value>(bytes) {
            Ok(value) => (
                ErrorData::invalid_request(
                    format!("invalid request: not an MCP message this server accepts: {error}"),
                    None,
                ),
                value.get("method").is_some() && value.get("id").is_none(),
            ),
            Err(_) => {
                (ErrorData::parse_error(format!("parse error: the message is not valid JSON: {error}"), None), false)
            }
        };
        Undecodable { id: id.and_then(|id| serde_json::from_value(id).ok()), error: Box::new(error), notification }
    }

    /// A message of `len` bytes, over the `max` a message may have, dropped unread but for its `id`.
    pub fn too_long(len: usize, max: usize, id: Option<Value>) -> Undecodable {
        let message = format!("invalid request: the message is {len} bytes, over the {max} a message may have");
        Undecodable {
            id: id.and_then(|id| serde_json::from_value(id).ok()),
            error: Box::new(ErrorData::invalid_request(message, None)),
            notification: false,
        }
    }

    pub fn is_notification(&self) -> bool {
        self.notification
    }

    /// The JSON-RPC error to send back.
    pub fn answer(self) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::Error(JsonRpcError::new(self.id, *self.error))
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::ErrorCode;
    use serde_json::json;

    use super::*;

    fn answer_to(text: &str) -> Value {
        serde_json::to_value(decode(text.as_bytes()).unwrap_err().answer()).unwrap()
    }

    #[test]
    fn a_lone_surrogate_is_a_parse_error_for_the_requests_own_id() {
        let text =
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"code":"\ud800"}}}"#;
        let answer = answer_to(text);
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], ErrorCode::PARSE_ERROR.0);
        assert!(
            answer["error"]["message"].as_str().unwrap().starts_with("parse error: the message is not valid JSON: ")
        );
        let last = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"\udfff"},"id":"req-1"}"#;
        assert_eq!(answer_to(last)["id"], "req-1");
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request_and_garbage_gets_a_null_id() {
        let answer = answer_to(r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":5}"#);
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(3), json!(-32600)));
        let answer = answer_to("not json at all");
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (Value::Null, json!(-32700)));
        let answer = answer_to(r#"{"jsonrpc":"2.0","id":{"nested":1},"method":"ping""#);
        assert_eq!(answer["id"], Value::Null, "an id that is no number or string is not echoed");
    }

    #[test]
    fn only_a_notification_is_marked_as_one() {
        let bad_notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":5}"#;
        assert!(decode(bad_notification.as_bytes()).unwrap_err().is_notification());
        let bad_request = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":5}"#;
        assert!(!decode(bad_request.as_bytes()).unwrap_err().is_notification());
        assert!(!decode(br#"{"method":"x","id":1,"#).unwrap_err().is_notification());
    }

    #[test]
    fn a_line_too_long_is_an_invalid_request_for_its_id() {
        let answer = serde_json::to_value(Undecodable::too_long(20, 10, Some(json!(5))).answer()).unwrap();
        assert_eq!(answer["id"], 5);
        assert_eq!(
            answer["error"]["message"],
            "invalid request: the message is 20 bytes, over the 10 a message may have"
        );
    }
}
