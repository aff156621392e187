//! The control protocol: JSON messages over a `SOCK_SEQPACKET` Unix socket,
//! one message per packet.
//!
//! Client → daemon: `{"id": 7, "request": {"type": "join", "group": "orders"}}`.
//! Daemon → client: `{"response": {"id": 7, "body": {"type": "joined", ...}}}`
//! or an unsolicited `{"notice": {"type": "view_changed", ...}}`.
//!
//! The control path is not hot: JSON keeps `mcast` and `socat` debugging
//! easy. The data path is the rings ([`crate::ring`]).

use serde::{Deserialize, Serialize};

/// Version sent in Hello; the server refuses any other.
pub const PROTOCOL_VERSION: u32 = 1;
/// Largest request the daemon accepts (and largest message it sends but
/// for answers, [`MAX_REPLY`]).
pub const MAX_CONTROL_MESSAGE: usize = 64 * 1024;
/// Largest answer the daemon sends and a client accepts: `mcast stat` of a
/// node with hundreds of streams is larger than a request ever is. A longer
/// answer is replaced by an error that says so.
pub const MAX_REPLY: usize = 1 << 20;
/// Malformed requests tolerated on one connection before it is closed.
pub const MAX_MALFORMED: u32 = 16;
/// Longest description of a malformed request: the parser's message quotes
/// the offending name, so a request just under [`MAX_CONTROL_MESSAGE`]
/// would otherwise draw an answer over it.
const MAX_MALFORMED_TEXT: usize = 1024;

/// A request from a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// First message on a connection; answered with [`Response::Welcome`]
    /// (and the ring memfd and eventfds attached).
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
        /// A name for logs and `mcast` listings.
        name: String,
    },
    /// Join a group by name; answered with [`Response::Joined`].
    Join {
        /// Group name.
        group: String,
        /// The group mode the client relies on (`"fifo"`, `"sequenced"`,
        /// `"total"` or `"broadcast"`, as mcastd's configuration spells
        /// them): the join is refused unless the daemon runs the group in
        /// that mode. Absent: any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// Leave a group by the number Joined gave; answered with [`Response::Left`].
    Leave {
        /// Group number.
        group: u32,
    },
    /// Describe one group.
    Query {
        /// Group name.
        group: String,
    },
    /// List groups.
    Groups,
    /// List a group's members.
    Members {
        /// Group name.
        group: String,
    },
    /// Daemon statistics.
    Stats,
    /// Wait at the group's barrier (seed 004 §2.1): answered with
    /// [`Response::Released`] once every member of the group's view has
    /// called it (a member that leaves or fails meanwhile is no longer
    /// awaited).
    Barrier {
        /// Group number (from Joined).
        group: u32,
    },
}

/// One member of a group's view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Rank in the group (unique while the group lives).
    pub rank: u32,
    /// The node the member's daemon runs on.
    pub node: u32,
    /// The member's client id on that daemon.
    pub member: u64,
}

/// A group's membership at one epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct View {
    /// Increases with every membership change.
    pub epoch: u64,
    /// Members in rank order.
    pub members: Vec<Member>,
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, or not a request this server knows.
    Malformed,
    /// Larger than [`MAX_CONTROL_MESSAGE`].
    TooLarge,
    /// Credentials not allowed by the daemon's configuration.
    PermissionDenied,
    /// Hello with a version the server does not speak.
    VersionMismatch,
    /// A request before Hello, or a second Hello.
    BadState,
    /// The daemon is at its client limit.
    TooManyClients,
    /// No such group (or not a member).
    UnknownGroup,
    /// The daemon could not do it now (resources, limits).
    Unavailable,
    /// Anything else the daemon wants to say.
    Other,
}

/// A response to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "body", rename_all = "snake_case")]
pub enum Response {
    /// Answer to Hello. Three fds travel with it (`SCM_RIGHTS`): the memfd
    /// holding both rings, the doorbell eventfd (client → daemon) and the
    /// wake eventfd (daemon → client). The publication ring is at offset 0
    /// with `pub_ring_bytes` of data, the subscription ring right after it
    /// (see [`RingLayout`]).
    Welcome {
        /// This connection's id (never reused by the daemon).
        client_id: u64,
        /// Largest message a publish may carry.
        max_message: u64,
        /// Data capacity of the publication ring (client → daemon).
        pub_ring_bytes: u64,
        /// Data capacity of the subscription ring (daemon → client).
        sub_ring_bytes: u64,
        /// The daemon traces (docs/mcastd.md "Where the time goes"): the
        /// client stamps what it publishes and times what it reads.
        #[serde(default)]
        trace: bool,
    },
    /// Answer to Join.
    Joined {
        /// The number that tags this group's records in the rings.
        group: u32,
        /// The group's name.
        name: String,
        /// Our rank in the view.
        rank: u32,
        /// The view we joined.
        view: View,
    },
    /// Answer to Leave.
    Left,
    /// The request failed.
    Error {
        /// Machine-readable reason.
        code: ErrorCode,
        /// What a user reads.
        message: String,
    },
    /// Whatever the daemon answers to queries and stats.
    Json(serde_json::Value),
    /// Answer to Barrier: every member has arrived.
    Released {
        /// The group.
        group: u32,
        /// Nodes that were in the group's view when this client arrived
        /// and left it before the release (failed or left): the barrier
        /// completed without them.
        dropped: Vec<u32>,
    },
}

impl Response {
    /// An Error response.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Response {
        Response::Error {
            code,
            message: message.into(),
        }
    }
}

/// Unsolicited messages from the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Notice {
    /// A group we belong to has a new view.
    ViewChanged {
        /// Group number.
        group: u32,
        /// The new epoch.
        epoch: u64,
        /// Members in rank order.
        members: Vec<Member>,
    },
    /// The daemon cut this client off (e.g. a subscriber too slow to keep
    /// up); the connection closes after this.
    CutOff {
        /// Why.
        reason: String,
    },
    /// The daemon is stopping; the connection closes after this.
    Shutdown {
        /// Why.
        reason: String,
    },
    /// Something the client did was refused without a request to answer
    /// (e.g. a message published to a group it has not joined was dropped).
    Error {
        /// What happened.
        message: String,
    },
}

/// Client → daemon envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientMessage {
    /// Chosen by the client; echoed in the response.
    pub id: u64,
    /// The request.
    pub request: Request,
}

/// Daemon → client envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerMessage {
    /// A response to request `id`.
    Response {
        /// The request's id (0 when the request was too broken to have one).
        id: u64,
        /// The answer.
        body: Response,
    },
    /// An unsolicited notice.
    Notice(Notice),
}

/// Where the two rings sit in the client's memfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    /// Publication ring data capacity (client → daemon), at offset 0.
    pub publication: usize,
    /// Subscription ring data capacity (daemon → client).
    pub subscription: usize,
}

impl RingLayout {
    /// Offset of the publication ring.
    pub fn publication_offset(&self) -> usize {
        0
    }
    /// Offset of the subscription ring.
    pub fn subscription_offset(&self) -> usize {
        crate::ring::ring_bytes(self.publication)
    }
    /// Bytes of the memfd (before page rounding).
    pub fn total(&self) -> usize {
        self.subscription_offset() + crate::ring::ring_bytes(self.subscription)
    }
}

/// Decodes a client message, saying what was wrong in terms a user of a
/// raw socket understands; returns the id if one could be found.
pub fn decode_request(bytes: &[u8]) -> Result<ClientMessage, (u64, String)> {
    match serde_json::from_slice::<ClientMessage>(bytes) {
        Ok(m) => Ok(m),
        Err(e) => {
            let id = serde_json::from_slice::<serde_json::Value>(bytes)
                .ok()
                .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
                .unwrap_or(0);
            let mut text = format!("malformed request: {e}");
            if text.len() > MAX_MALFORMED_TEXT {
                let mut end = MAX_MALFORMED_TEXT;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str("… (cut)");
            }
            Err((id, text))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_wire_format() {
        let m = ClientMessage {
            id: 3,
            request: Request::Join {
                group: "orders".into(),
                mode: None,
            },
        };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(s, r#"{"id":3,"request":{"type":"join","group":"orders"}}"#);
        assert_eq!(decode_request(s.as_bytes()).unwrap(), m);
        // A join that names the mode it relies on.
        let s = r#"{"id":3,"request":{"type":"join","group":"orders","mode":"total"}}"#;
        assert_eq!(
            decode_request(s.as_bytes()).unwrap().request,
            Request::Join {
                group: "orders".into(),
                mode: Some("total".into())
            }
        );
        let s = r#"{"id":4,"request":{"type":"groups"}}"#;
        assert_eq!(
            decode_request(s.as_bytes()).unwrap().request,
            Request::Groups
        );
    }

    #[test]
    fn response_and_notice_wire_format() {
        let m = ServerMessage::Response {
            id: 9,
            body: Response::Joined {
                group: 2,
                name: "g".into(),
                rank: 1,
                view: View {
                    epoch: 5,
                    members: vec![Member {
                        rank: 0,
                        node: 1,
                        member: 7,
                    }],
                },
            },
        };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(
            s,
            r#"{"response":{"id":9,"body":{"type":"joined","body":{"group":2,"name":"g","rank":1,"view":{"epoch":5,"members":[{"rank":0,"node":1,"member":7}]}}}}}"#
        );
        assert_eq!(serde_json::from_str::<ServerMessage>(&s).unwrap(), m);
        let j = ServerMessage::Response {
            id: 1,
            body: Response::Json(serde_json::json!([1, "x"])),
        };
        let s = serde_json::to_string(&j).unwrap();
        assert_eq!(serde_json::from_str::<ServerMessage>(&s).unwrap(), j);
        let n = ServerMessage::Notice(Notice::CutOff {
            reason: "slow".into(),
        });
        let s = serde_json::to_string(&n).unwrap();
        assert_eq!(s, r#"{"notice":{"type":"cut_off","reason":"slow"}}"#);
    }

    /// Found by the `ipc_request` fuzz target's invariant (issue 23): a
    /// request within the limit naming an unknown type of 65,000 bytes drew
    /// a Malformed answer quoting all of it, over the limit the client reads.
    #[test]
    fn the_answer_to_a_malformed_request_fits_the_limit() {
        let overhead = r#"{"id":5,"request":{"type":""}}"#.len();
        let name = "\u{e9}".repeat((MAX_CONTROL_MESSAGE - overhead) / 2);
        let req = format!(r#"{{"id":5,"request":{{"type":"{name}"}}}}"#);
        assert!(req.len() <= MAX_CONTROL_MESSAGE);
        let (id, message) = decode_request(req.as_bytes()).unwrap_err();
        assert_eq!(id, 5);
        assert!(
            message.starts_with("malformed request: unknown variant `\u{e9}\u{e9}"),
            "{message}"
        );
        assert!(message.ends_with("… (cut)"), "{message}");
        let answer = ServerMessage::Response {
            id,
            body: Response::error(ErrorCode::Malformed, message),
        };
        assert!(serde_json::to_vec(&answer).unwrap().len() <= MAX_CONTROL_MESSAGE);
    }

    /// Found by fuzzing (issue 23, `ipc_reply`, 5-minute AFL campaign): a
    /// number with more digits than a double holds parsed one unit in the
    /// last place away from the nearest double, so what the client read
    /// and wrote back was not what it had read. serde_json's
    /// `float_roundtrip` parses to the nearest.
    #[test]
    fn numbers_in_answers_parse_to_the_nearest_double() {
        let s = r#"{"response":{"id":1,"body":{"type":"json","body":{"loss":0.015555555505000000000}}}}"#;
        let m: ServerMessage = serde_json::from_str(s).unwrap();
        let again: ServerMessage =
            serde_json::from_slice(&serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(again, m);
        let ServerMessage::Response {
            body: Response::Json(v),
            ..
        } = m
        else {
            panic!("{m:?}")
        };
        assert_eq!(v["loss"].as_f64(), Some(0.015555555505));
    }

    #[test]
    fn malformed_requests_name_the_problem_and_keep_the_id() {
        let (id, msg) = decode_request(br#"{"id":12,"request":{"type":"jion"}}"#).unwrap_err();
        assert_eq!(id, 12);
        assert!(msg.contains("unknown variant `jion`"), "{msg}");
        let (id, msg) = decode_request(b"\xff garbage").unwrap_err();
        assert_eq!(id, 0);
        assert!(msg.starts_with("malformed request"), "{msg}");
        let (_, msg) =
            decode_request(br#"{"id":1,"request":{"type":"leave","group":"x"}}"#).unwrap_err();
        assert!(msg.contains("invalid type"), "{msg}");
    }
}
