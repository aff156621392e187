//! Prints every message of a group received through the local mcastd, and
//! the membership changes it is told about.
//!
//! ```sh
//! cargo run -p mcast-ipc --example subscribe -- /run/mcastd/mcastd.sock chat
//! ```

use std::time::Duration;

use mcast_ipc::{Client, MessageKind, Notice};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(socket), Some(group)) = (args.next(), args.next()) else {
        eprintln!("usage: subscribe SOCKET GROUP");
        std::process::exit(2);
    };
    let mut client = Client::connect(&socket, "example-subscribe")?;
    let m = client.join(&group)?;
    eprintln!("joined {group} (group {}) as rank {}", m.group, m.rank);
    loop {
        if let Some(msg) = client.recv_timeout(Duration::from_secs(1))? {
            let text = String::from_utf8_lossy(&msg.data);
            match msg.kind {
                MessageKind::Data => println!("node {}: {text}", msg.source),
                MessageKind::Membership => println!("membership: {text}"),
            }
        }
        for n in client.notices() {
            if let Notice::ViewChanged { epoch, members, .. } = n {
                eprintln!("view {epoch}: {} members", members.len());
            }
        }
    }
}
