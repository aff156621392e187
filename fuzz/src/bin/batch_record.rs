fn main() {
    afl::fuzz!(|data: &[u8]| mcast_fuzz::batch_record(data));
}
