fn main() {
    afl::fuzz!(|data: &[u8]| mcast_fuzz::link_message(data));
}
