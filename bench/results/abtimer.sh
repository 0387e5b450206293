#!/bin/bash
# Interleaved rounds of QueueSteady and AppendTail/path=pwrite-record, each
# with the old per-operation timer (time.Now/time.Since, 0b79ea7) and the
# new one (time-stamp counter, 00669b9). Build the two test binaries first:
#   git worktree add /tmp/wt-OLD 0b79ea7 && (cd /tmp/wt-OLD && go test -c -o /tmp/bench-0b79ea7.test ./bench)
#   git worktree add /tmp/wt-NEW 00669b9 && (cd /tmp/wt-NEW && go test -c -o /tmp/bench-00669b9.test ./bench)
# Usage: abtimer.sh ROUNDS (from the bench directory). Raw lines go to
# /tmp/timer-{old,new}.txt, for benchstat.
rm -f /tmp/timer-old.txt /tmp/timer-new.txt
for i in $(seq 1 "$1"); do
  if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    bin=/tmp/bench-0b79ea7.test; [ "$b" = new ] && bin=/tmp/bench-00669b9.test
    $bin -test.run '^$' -test.bench 'AppendTail/path=pwrite-record$' -test.benchtime 1x 2>&1 | grep '^Benchmark' >> /tmp/timer-$b.txt
  done
  for b in $order; do
    bin=/tmp/bench-0b79ea7.test; [ "$b" = new ] && bin=/tmp/bench-00669b9.test
    $bin -test.run '^$' -test.bench 'QueueSteady' -test.benchtime 1x 2>&1 | grep '^Benchmark' >> /tmp/timer-$b.txt
  done
  echo "round $i $(uptime)"
done
