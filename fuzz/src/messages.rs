//! The messages between daemons: group management (`mcast-groups`) and
//! the link messages that carry them (`mcast_cli::links`).

use mcast_cli::links::LinkMessage;
use mcast_groups::wire::{Message, MAX_MESSAGE_LEN};

/// Decodes a group-management message. Whatever decodes encodes to as
/// many bytes (every field has one width), and that encoding decodes to
/// the same message and is a fixed point. (It need not be the input byte
/// for byte: an invalid-name error that is not "too long" carries length
/// fields the decoder ignores and the encoder writes as zero; a REGISTER
/// of the layout before its settings field decodes with empty settings,
/// which encode to one byte more.)
pub fn group_message(data: &[u8]) {
    match Message::decode(data) {
        Ok(m) => {
            assert!(data.len() <= MAX_MESSAGE_LEN);
            let enc = m.encode();
            let earlier = match &m {
                Message::Register { settings, .. } => settings.is_empty(),
                _ => false,
            };
            assert!(
                enc.len() == data.len() || earlier && enc.len() == data.len() + 1,
                "{m:?} re-encodes to {} bytes, from {}",
                enc.len(),
                data.len()
            );
            let again = Message::decode(&enc).expect("an encoded message decodes");
            assert_eq!(again, m, "decode(encode(m)) != m");
            assert_eq!(again.encode(), enc, "encoding is not a fixed point");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// Decodes a link message; the same round trip, and a group message it
/// carries goes through [`group_message`].
pub fn link_message(data: &[u8]) {
    match LinkMessage::decode(data) {
        Ok(m) => {
            let enc = m.encode();
            assert_eq!(enc.len(), data.len(), "{m:?} re-encodes to another length");
            let again = LinkMessage::decode(&enc).expect("an encoded link message decodes");
            assert_eq!(again, m, "decode(encode(m)) != m");
            assert_eq!(again.encode(), enc, "encoding is not a fixed point");
            if let LinkMessage::Groups(inner) = &m {
                group_message(inner);
            }
        }
        Err(e) => assert!(!e.is_empty(), "an error says nothing"),
    }
}
