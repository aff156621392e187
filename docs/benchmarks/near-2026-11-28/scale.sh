#!/bin/bash
# 512 against 1,024 receivers with the tree and local recovery (the
# default), paced (2,000 messages at 10,000/s) and in saturation (10,000
# messages), 0 % and 1 % loss, seed 1: three alternated runs of each size,
# the summary line of each run (its last column is the simulator's wall time).
B=${B:-target/release/mcast-bench}
for mode in paced saturated; do
  if [ $mode = paced ]; then args="--messages 2000 --rate 10000"; else args="--messages 10000"; fi
  for loss in 0 0.01; do
    for rep in 1 2 3; do
      for n in 512 1024; do
        out=$(timeout 900 $B run --algo mak --receivers $n --window-frames 1024 --loss $loss --tree-fanout 2 --seed 1 $args 2>&1)
        echo "$mode loss $loss run $rep: $(echo "$out" | grep '^mak')"
        echo "    $(echo "$out" | grep '^sender:')"
      done
    done
  done
done
