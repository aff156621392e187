//! The configuration's checks: every value in range and the values
//! together (peers, queues, groups and their overrides), each error naming
//! its key and what to set.
//!
//! Owns: [`Config::validate`]. May not touch: how the file is read or what
//! the values mean to the daemon.

use super::*;

impl Config {
    /// Checks the values together; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let o = self.origin.as_str();
        let bad = |key: &str, msg: String| Err(ConfigError::invalid(o, key, msg));

        if self.node == 0 || self.node > MAX_NODE {
            return bad(
                "node",
                format!(
                    "node = {} is out of range: node ids are 1..={MAX_NODE} (0 is reserved); give every node a distinct id",
                    self.node
                ),
            );
        }
        if !(1..=1_000_000).contains(&self.beacon_us) {
            return bad(
                "beacon_us",
                format!(
                    "beacon_us = {} is out of range: 1..=1000000 (a total-order group's messages wait up to one interval for an idle node's stamp; 100 is the default)",
                    self.beacon_us
                ),
            );
        }
        // `commit` means something to total-order groups only.
        let total_somewhere = self.mode == GroupMode::Total
            || self.groups.iter().any(|g| g.mode == Some(GroupMode::Total));
        let misplaced = self
            .groups
            .iter()
            .find(|g| {
                g.commit == Some(true) && self.group_settings(&g.name).mode != GroupMode::Total
            })
            .map(|g| format!("[[group]] \"{}\"", g.name))
            .or_else(|| {
                (self.commit && !total_somewhere).then(|| "the daemon's default".to_owned())
            });
        if let Some(which) = misplaced {
            return bad(
                "commit",
                format!(
                    "commit = true in {which} applies to total-order groups only: set mode = \"total\" there, or drop commit"
                ),
            );
        }
        // `commit_tree_from`: 0 (never) or a view of at least two members,
        // and per group only in total-order groups.
        let trees = std::iter::once((
            "the daemon's default".to_owned(),
            Some(self.commit_tree_from),
        ))
        .chain(
            self.groups
                .iter()
                .map(|g| (format!("[[group]] \"{}\"", g.name), g.commit_tree_from)),
        );
        for (which, from) in trees {
            if from == Some(1) {
                return bad(
                    "commit_tree_from",
                    format!(
                        "commit_tree_from = 1 in {which}: a tree needs at least 2 members; set 2 or more, or 0 for never"
                    ),
                );
            }
        }
        // Per group, `commit_tree_from` means something to total-order
        // groups only, `broadcast` to broadcast groups only.
        self.only_in_mode("commit_tree_from", GroupMode::Total, |g| {
            g.commit_tree_from.is_some()
        })?;
        self.only_in_mode("broadcast", GroupMode::Broadcast, |g| g.broadcast.is_some())?;
        if self.interface.is_empty()
            || self.interface.len() > 15
            || self.interface.contains(['/', ' '])
        {
            return bad(
                "interface",
                format!(
                    "interface = {:?} is not an interface name: use a name from `ip link` (at most 15 bytes, no '/' or spaces)",
                    self.interface
                ),
            );
        }

        let mut seen = BTreeSet::new();
        for (i, p) in self.peers.iter().enumerate() {
            let key = format!("peer[{i}].node");
            if p.node == 0 || p.node > MAX_NODE {
                return bad(
                    &key,
                    format!(
                        "[[peer]] node = {} is out of range: node ids are 1..={MAX_NODE}",
                        p.node
                    ),
                );
            }
            if p.node == self.node {
                return bad(
                    &key,
                    format!(
                        "[[peer]] node = {} is this node's own id: remove that [[peer]], or give this node another `node`",
                        p.node
                    ),
                );
            }
            if !seen.insert(p.node) {
                return bad(
                    &key,
                    format!(
                        "[[peer]] node = {} appears twice: keep one [[peer]] per node",
                        p.node
                    ),
                );
            }
            if p.mac.is_multicast() {
                return bad(
                    &format!("peer[{i}].mac"),
                    format!(
                        "[[peer]] node = {} has mac = \"{}\", a multicast address: give the peer interface's own (unicast) MAC, from `ip link show` on that node",
                        p.node, p.mac
                    ),
                );
            }
        }

        if self.registry != self.node && !seen.contains(&self.registry) {
            let mut known: BTreeSet<u32> = seen.clone();
            known.insert(self.node);
            return bad(
                "registry",
                format!(
                    "registry = {} is neither this node ({}) nor a [[peer]]: add a [[peer]] with node = {} or set registry to one of {}",
                    self.registry,
                    self.node,
                    self.registry,
                    list(known)
                ),
            );
        }

        if parse_mode(&self.socket_mode).is_none() {
            return bad(
                "socket_mode",
                format!(
                    "socket_mode = {:?} is not an octal mode: write it like \"0660\" (owner and group read/write)",
                    self.socket_mode
                ),
            );
        }
        if self.socket.as_os_str().is_empty() || self.socket.file_name().is_none() {
            return bad(
                "socket",
                format!(
                    "socket = {:?} is not a file path: use e.g. \"/run/mcastd/mcastd.sock\"",
                    self.socket.display().to_string()
                ),
            );
        }

        if !self.frames.is_power_of_two() || !(64..=65536).contains(&self.frames) {
            return bad(
                "frames",
                format!(
                    "frames = {} must be a power of two from 64 to 65536: e.g. 16384",
                    self.frames
                ),
            );
        }
        if let Some(w) = self.window_frames {
            self.check_window("window_frames", w)?;
        }

        if self.max_message == 0 || self.max_message > MAX_MESSAGE_LIMIT {
            return bad(
                "max_message",
                format!(
                    "max_message = {} is out of range: use 1..={MAX_MESSAGE_LIMIT} bytes (64 MiB)",
                    self.max_message
                ),
            );
        }
        for (key, buf) in [
            ("subscriber_buffer", self.subscriber_buffer),
            ("publication_buffer", self.publication_buffer),
        ] {
            if self.max_message >= buf / 2 {
                return bad(
                    "max_message",
                    format!(
                        "max_message = {} must be less than half of {key} ({buf}): lower max_message or raise {key} to at least {}",
                        self.max_message,
                        (self.max_message + 1) * 2
                    ),
                );
            }
        }
        if self.max_clients == 0 {
            return bad(
                "max_clients",
                "max_clients = 0 would refuse every client: use at least 1 (default 64)".to_owned(),
            );
        }
        for (key, v) in [
            ("heartbeat_ms", self.heartbeat_ms),
            ("suspect_after", u64::from(self.suspect_after)),
            ("probe_ms", self.probe_ms),
            ("probes", u64::from(self.probes)),
        ] {
            if v == 0 {
                return bad(
                    key,
                    format!("{key} = 0 would make failure detection meaningless: use at least 1"),
                );
            }
        }

        if let Some(m) = &self.metrics {
            if m.parse::<std::net::SocketAddr>().is_err() {
                return bad(
                    "metrics",
                    format!(
                        "metrics = {m:?} is not an address and port: write e.g. \"127.0.0.1:9464\" (this host only) or \"[::1]:9464\"; remove the key to serve no metrics"
                    ),
                );
            }
        }

        match (&self.key_file, self.insecure) {
            (None, false) => {
                return bad(
                    "key_file",
                    "key_file is not set: frames must be authenticated. Create a key with `mcast keygen /etc/mcast/cluster.key`, copy it to every node (mode 0600, owned by the daemon's user) and set key_file = \"/etc/mcast/cluster.key\"; or set insecure = true to run without authentication (any host on the segment can then forge frames)".to_owned(),
                )
            }
            (Some(_), true) => {
                return bad(
                    "insecure",
                    "insecure = true and key_file are both set: remove insecure to authenticate frames with the key, or key_file to run without".to_owned(),
                )
            }
            _ => {}
        }
        if self.accept_key_file.is_some() && self.key_file.is_none() {
            return bad(
                "accept_key_file",
                "accept_key_file is set without key_file: a second accepted key needs a first one to seal with (docs/mcastd.md \"Rotating the key\")".to_owned(),
            );
        }
        if self.accept_key_file.is_some() && self.accept_key_file == self.key_file {
            return bad(
                "accept_key_file",
                "accept_key_file names the same file as key_file: name the other key (old or next) of the rotation, or remove it".to_owned(),
            );
        }

        let mut names = BTreeSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            if let Err(why) = check_group_name(&g.name) {
                return bad(
                    &format!("group[{i}].name"),
                    format!("[[group]] name = {:?} {why}", g.name),
                );
            }
            if !names.insert(g.name.as_str()) {
                return bad(
                    &format!("group[{i}].name"),
                    format!(
                        "[[group]] name = {:?} appears twice: merge the two [[group]] tables",
                        g.name
                    ),
                );
            }
            if let Some(w) = g.window_frames {
                self.check_window(&format!("group[{:?}].window_frames", g.name), w)?;
            }
        }
        self.check_queues()
    }

    /// `queue`, `queues` and `queue_cpus`.
    fn check_queues(&self) -> Result<(), ConfigError> {
        let o = self.origin.as_str();
        let bad = |key: &str, msg: String| Err(ConfigError::invalid(o, key, msg));
        let max_queues = mcast_xsk::loader::MAX_QUEUES;
        if self.queues == 0 || self.queue.saturating_add(self.queues) > max_queues {
            return bad(
                "queues",
                format!(
                    "queues = {} from queue = {} is out of range: at least 1, and queue + queues at most {max_queues} (the steering program's sockets)",
                    self.queues, self.queue
                ),
            );
        }
        if self.queues > 1 && self.datapath != Datapath::Xdp {
            return bad(
                "queues",
                format!(
                    "queues = {} needs datapath = \"xdp\": the AF_PACKET fallback takes every queue through one socket",
                    self.queues
                ),
            );
        }
        if self.queue_cpus.len() > self.queues as usize - 1 {
            return bad(
                "queue_cpus",
                format!(
                    "queue_cpus names {} CPUs for {} extra queue(s): one per queue beyond the first (the first queue's thread is the engine's, pinned by `cpu`)",
                    self.queue_cpus.len(),
                    self.queues - 1
                ),
            );
        }
        Ok(())
    }

    fn check_window(&self, key: &str, w: u32) -> Result<(), ConfigError> {
        if w == 0 || w >= self.frames {
            return Err(ConfigError::invalid(
                &self.origin,
                key,
                format!(
                    "{key} = {w} must be at least 1 and less than frames ({}): lower {key} or raise frames",
                    self.frames
                ),
            ));
        }
        Ok(())
    }

    /// A `[[group]]` that sets `key` (`set`) where the group's mode is not
    /// `mode`: an error that says to set the mode or drop the key.
    fn only_in_mode(
        &self,
        key: &str,
        mode: GroupMode,
        set: impl Fn(&GroupConfig) -> bool,
    ) -> Result<(), ConfigError> {
        match self
            .groups
            .iter()
            .find(|g| set(g) && self.group_settings(&g.name).mode != mode)
        {
            Some(g) => Err(ConfigError::invalid(
                self.origin.as_str(),
                key,
                format!(
                    "{key} in [[group]] \"{}\" applies to groups with mode = \"{}\" only: set the mode there, or drop {key}",
                    g.name,
                    mode.name()
                ),
            )),
            None => Ok(()),
        }
    }
}
