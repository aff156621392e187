fn main() {
    afl::fuzz!(|data: &[u8]| mcast_fuzz::auth_trailer(data));
}
