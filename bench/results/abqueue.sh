#!/bin/bash
# Interleaved rounds of AppendTail/path=pwrite-record and QueueSteady from
# two test binaries (built with `go test -c -o BIN ./bench` at two commits).
# Usage: abqueue.sh OLD.test NEW.test ROUNDS (from the bench directory).
# Raw lines go to /tmp/ab-{old,new}.txt, for benchstat.
old=$1 new=$2
rm -f /tmp/ab-old.txt /tmp/ab-new.txt
for i in $(seq 1 "$3"); do
  if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    bin=$old; [ "$b" = new ] && bin=$new
    $bin -test.run '^$' -test.bench 'AppendTail/path=pwrite-record$' -test.benchtime 1x 2>&1 | grep '^Benchmark' >> /tmp/ab-$b.txt
  done
  for b in $order; do
    bin=$old; [ "$b" = new ] && bin=$new
    $bin -test.run '^$' -test.bench 'QueueSteady' -test.benchtime 1x 2>&1 | grep '^Benchmark' >> /tmp/ab-$b.txt
  done
  echo "round $i $(uptime)"
done
