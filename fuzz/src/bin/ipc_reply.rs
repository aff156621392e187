fn main() {
    afl::fuzz!(|data: &[u8]| mcast_fuzz::ipc_reply(data));
}
