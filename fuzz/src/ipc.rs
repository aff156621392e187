//! The IPC control protocol (`mcast_ipc::proto`): JSON in both directions.

use mcast_ipc::proto::{decode_request, ErrorCode, Response, ServerMessage, MAX_CONTROL_MESSAGE};

/// The daemon's side: decodes a client's request as the server does.
/// Accepted: the request re-encodes no longer than it came (so an answer
/// quoting it fits where it did) and decodes to the same request.
/// Refused: the id given back is one the bytes hold, and the Malformed
/// answer the server sends fits the limit the client reads.
pub fn ipc_request(data: &[u8]) {
    match decode_request(data) {
        Ok(m) => {
            let enc = serde_json::to_vec(&m).expect("requests serialize");
            assert!(
                enc.len() <= data.len(),
                "{m:?} re-encodes to {} bytes from {}",
                enc.len(),
                data.len()
            );
            assert_eq!(decode_request(&enc), Ok(m), "decode(encode(m)) != m");
        }
        Err((id, message)) => {
            assert!(message.starts_with("malformed request"), "{message}");
            if id != 0 {
                let v: serde_json::Value =
                    serde_json::from_slice(data).expect("an id came from valid JSON");
                assert_eq!(v.get("id").and_then(|i| i.as_u64()), Some(id));
            }
            if data.len() <= MAX_CONTROL_MESSAGE {
                let reply = ServerMessage::Response {
                    id,
                    body: Response::error(ErrorCode::Malformed, message),
                };
                let len = serde_json::to_vec(&reply).expect("replies serialize").len();
                assert!(
                    len <= MAX_CONTROL_MESSAGE,
                    "a {}-byte request draws a {len}-byte answer, over the {MAX_CONTROL_MESSAGE}-byte limit",
                    data.len()
                );
            }
        }
    }
}

/// The client library's side: decodes what the daemon sends (responses
/// and notices) as `mcast_ipc::Client` does. What decodes re-encodes to
/// JSON that decodes to the same message.
pub fn ipc_reply(data: &[u8]) {
    if let Ok(m) = serde_json::from_slice::<ServerMessage>(data) {
        let enc = serde_json::to_vec(&m).expect("server messages serialize");
        let again: ServerMessage =
            serde_json::from_slice(&enc).expect("an encoded server message decodes");
        assert_eq!(again, m, "decode(encode(m)) != m");
    }
}
