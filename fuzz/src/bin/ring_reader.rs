fn main() {
    afl::fuzz!(|data: &[u8]| mcast_fuzz::ring_reader(data));
}
