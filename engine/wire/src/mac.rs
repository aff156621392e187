//! MAC addresses of groups and nodes.

use core::fmt;

/// A 48-bit Ethernet address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for group (multicast or broadcast) addresses: the I/G bit of the first octet.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True for locally administered addresses: the U/L bit of the first octet.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// The destination MAC of group `group`: first octet 0x03 (group bit and
/// locally-administered bit both set), second octet 0x00, then the 32-bit group
/// number big-endian. Distinct groups never share a MAC, and no IEEE-assigned
/// multicast address (IPv4 01:00:5e, IPv6 33:33, spanning tree 01:80:c2) is used.
pub const fn group_mac(group: u32) -> MacAddr {
    let g = group.to_be_bytes();
    MacAddr([0x03, 0x00, g[0], g[1], g[2], g[3]])
}

/// The MAC that the simulator gives node `node`: locally administered unicast
/// (first octet 0x02). Real nodes use their interface's own MAC instead.
pub const fn node_mac(node: u32) -> MacAddr {
    let n = node.to_be_bytes();
    MacAddr([0x02, 0x00, n[0], n[1], n[2], n[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_macs_are_local_multicast_and_distinct() {
        let a = group_mac(1);
        let b = group_mac(0x0100_0001);
        assert!(a.is_multicast() && a.is_local());
        assert_ne!(a, b);
        assert_eq!(std::format!("{a}"), "03:00:00:00:00:01");
    }

    #[test]
    fn node_macs_are_local_unicast() {
        let m = node_mac(258);
        assert!(!m.is_multicast() && m.is_local());
        assert_eq!(std::format!("{m}"), "02:00:00:00:01:02");
    }
}
