#!/bin/bash
# The feedback tree's figures (docs/benchmarks.md, "ACKs over a feedback tree"):
# 512 receivers, flat (--tree-fanout 0) against the tree (--tree-fanout 2),
# seeds 1-4, paced (10,000 msg/s, 2,000 messages) and in saturation (10,000
# messages), lossless and at 1 % loss. Run from the repository root after
# `cargo build --release -p mcast-bench`.
B=${B:-target/release/mcast-bench}
printf "%-10s %-5s %-5s %-4s %10s %10s %14s %14s %12s\n" mode loss tree seed "ACK/1000" "virtual" "ACKs@sender/1k" "NAKs@sender/1k" "wall"
for mode in paced saturated; do
  if [ $mode = paced ]; then args="--messages 2000 --rate 10000"; n=2000; else args="--messages 10000"; n=10000; fi
  for loss in 0 0.01; do
    for f in 0 2; do
      for s in 1 2 3 4; do
        out=$(timeout 600 $B run --algo mak --receivers 512 --window-frames 1024 --loss $loss --tree-fanout $f --seed $s $args 2>&1)
        ackk=$(echo "$out" | awk '/^mak/{print $8}')
        virt=$(echo "$out" | awk '/^mak/{print $9}')
        wall=$(echo "$out" | awk '/^mak/{print $NF}')
        acks=$(echo "$out" | awk '/^sender:/{for(i=1;i<=NF;i++) if($i=="ACKs" && $(i+1)=="received") print $(i+2)}')
        naks=$(echo "$out" | awk '/^sender:/{for(i=1;i<=NF;i++) if($i=="NAKs" && $(i+1)=="received") print $(i+2)}')
        printf "%-10s %-5s %-5s %-4s %10s %10s %14.1f %14.1f %12s\n" $mode $loss $f $s "$ackk" "$virt ms" $(echo "$acks*1000/$n" | bc -l) $(echo "$naks*1000/$n" | bc -l) "$wall"
      done
    done
  done
done
