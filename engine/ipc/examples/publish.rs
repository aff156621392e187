//! Publishes lines of standard input to a group through the local mcastd.
//!
//! ```sh
//! cargo run -p mcast-ipc --example publish -- /run/mcastd/mcastd.sock chat < messages.txt
//! ```

use std::io::BufRead;

use mcast_ipc::Client;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(socket), Some(group)) = (args.next(), args.next()) else {
        eprintln!("usage: publish SOCKET GROUP < lines");
        std::process::exit(2);
    };
    let mut client = Client::connect(&socket, "example-publish")?;
    let m = client.join(&group)?;
    eprintln!(
        "joined {group} as rank {} of {} members",
        m.rank,
        m.view.members.len()
    );
    for line in std::io::stdin().lock().lines() {
        // Blocks while the group's window (and then the ring) is full.
        client.publish_blocking(m.group, line?.as_bytes(), None)?;
    }
    // Dropping the client waits until the daemon has taken every message.
    Ok(())
}
