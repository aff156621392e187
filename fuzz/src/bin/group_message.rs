fn main() {
    afl::fuzz!(|data: &[u8]| mcast_fuzz::group_message(data));
}
