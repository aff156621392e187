#!/bin/bash
# Local recovery over the feedback tree (docs/benchmarks.md, "Local recovery
# over the tree"; docs/protocol.md §3.5): 512 receivers, 1,024-frame window,
# 64-byte messages, seeds 1-4, paced (10,000 msg/s, 2,000 messages) and in
# saturation (10,000 messages), lossless and at 1 % loss; flat MAK (no tree)
# beside the tree without local recovery (--near-repairs off) and with it
# (the default). Counts are deterministic per seed. Run from the repository
# root after `cargo build --release -p mcast-bench`.
B=${B:-target/release/mcast-bench}
printf "%-9s %-4s %-9s %-4s %9s %11s %8s %8s %8s %9s %10s %12s\n" mode loss variant seed "ACK/1000" "virtual" "ACK@snd" "NAK@snd" "frm@snd" "repairs" "dups" "lost-copies"
for mode in paced saturated; do
  if [ $mode = paced ]; then args="--messages 2000 --rate 10000"; n=2000; else args="--messages 10000"; n=10000; fi
  for loss in 0 0.01; do
    for variant in flat tree-nak tree-near; do
      case $variant in
        flat) v="--tree-fanout 0";;
        tree-nak) v="--tree-fanout 2 --near-repairs off";;
        tree-near) v="--tree-fanout 2";;
      esac
      for s in 1 2 3 4; do
        out=$(timeout 600 $B run --algo mak --receivers 512 --window-frames 1024 --loss $loss --seed $s $args $v 2>&1)
        ackk=$(echo "$out" | awk '/^mak/{print $8}')
        virt=$(echo "$out" | awk '/^mak/{print $9}')
        acks=$(echo "$out" | awk '/^sender:/{for(i=1;i<=NF;i++) if($i=="ACKs" && $(i+1)=="received") print $(i+2)}')
        naks=$(echo "$out" | awk '/^sender:/{for(i=1;i<=NF;i++) if($i=="NAKs" && $(i+1)=="received") print $(i+2)}')
        retx=$(echo "$out" | awk '/^sender:/{for(i=1;i<=NF;i++) if($i=="retransmitted") print $(i+1)}')
        dups=$(echo "$out" | awk '/^receivers:/{for(i=1;i<=NF;i++) if($i=="duplicates") print $(i+1)}')
        lostc=$(echo "$out" | awk '/^wire:/{for(i=1;i<=NF;i++) if($i=="copies" && $(i+1)=="lost,") print $(i-1)}')
        printf "%-9s %-4s %-9s %-4s %9s %8s ms %8.1f %8.1f %8.1f %9s %10s %12s\n" $mode $loss $variant $s "$ackk" "$virt" \
          $(echo "$acks*1000/$n" | bc -l) $(echo "$naks*1000/$n" | bc -l) $(echo "($acks+$naks)*1000/$n" | bc -l) "$retx" "$dups" "$lostc"
      done
    done
  done
done
