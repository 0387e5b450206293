package queue

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDedupExpiryCopiesFewIDs: in the steady state, where each send
// expires about one id, the window does not copy the ids it keeps at each
// expiry: over many sends each kept id is copied at most about once per id
// expired (expiry is O(1) amortized, whatever the window's size).
func TestDedupExpiryCopiesFewIDs(t *testing.T) {
	const n, sends = 1000, 5000
	d := newDedupWindow(n) // one id per ns of queue time
	var now int64
	next := uint64(0)
	send := func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.expire(now)
		id := fmt.Sprint("id-", next)
		d.remember(id, d.hash(id), next, now+n, false)
		next++
		now++
	}
	for range n {
		send()
	}
	where := func() map[uint64]*dedupRef {
		m := make(map[uint64]*dedupRef, d.tail-d.head)
		for i := d.head; i < d.tail; i++ {
			m[d.at(i).off] = d.at(i)
		}
		return m
	}
	copied := 0
	for range sends {
		before := where()
		send()
		after := where()
		for off, p := range before {
			if q, ok := after[off]; ok && q != p {
				copied++
			}
		}
	}
	if copied > 2*sends {
		t.Fatalf("%d sends with %d ids in the window copied kept ids %d times (want at most %d)", sends, n, copied, 2*sends)
	}
	if got := d.size(now - 1); got != n {
		t.Fatalf("%d ids remembered, want %d", got, n)
	}
}

// TestDedupWindowExpiresOldestFirstAcrossReopen: ids sent one per second
// into a 100-second window are remembered exactly as long as the window
// and then forgotten, through enough sends for the window to reuse
// its space; after a reopen (the window rebuilt from the log) the ids
// sent before it are still remembered, and they expire as the clock
// passes the window.
func TestDedupWindowExpiresOldestFirstAcrossReopen(t *testing.T) {
	const window = 100 * time.Second
	clock := newFakeClock()
	dir := t.TempDir()
	opts := func(o *Options) {
		o.DedupWindow = window
		o.CheckpointInterval = time.Hour
	}
	q := openTestQueue(t, dir, clock, opts)
	first := map[int]uint64{}
	send := func(i int) uint64 {
		return mustSendWith(t, q, fmt.Sprint("m", i), SendOptions{DedupID: fmt.Sprint("id-", i)})
	}
	const sent = 450
	for i := range sent {
		first[i] = send(i)
		clock.Advance(time.Second)
		if i < 99 {
			continue
		}
		// Now i+1: id-(i-98), sent 99 s ago, is in the window; id-(i-99)
		// reached its end.
		if off := send(i - 98); off != first[i-98] {
			t.Fatalf("after send %d: id-%d sent 99 s ago gave offset %d, its first send's was %d", i, i-98, off, first[i-98])
		}
		if off := send(i - 99); off == first[i-99] {
			t.Fatalf("after send %d: id-%d sent 100 s ago is still remembered", i, i-99)
		} else {
			first[i-99] = off // sent again: remembered from now on
		}
		// Remembered: the first sends of the last 99 s, and the sends
		// again of the last 100 s (one a second since i = 99).
		if got, want := q.Stats().DedupIDs, 99+min(100, i-98); got != want {
			t.Fatalf("after send %d: %d ids remembered, want %d", i, got, want)
		}
	}
	end := q.Stats().End
	mustCloseQueue(t, q)

	q = openTestQueue(t, dir, clock, opts)
	defer func() { mustCloseQueue(t, q) }()
	if got := q.Recovery().DedupIDs; got < 100 {
		t.Fatalf("reopen remembered %d ids, want the last 100 at least", got)
	}
	for i := sent - 99; i < sent; i++ {
		if off := send(i); off != first[i] {
			t.Fatalf("after the reopen, id-%d gave offset %d, its first send's was %d", i, off, first[i])
		}
	}
	if got := q.Stats().End; got != end {
		t.Fatalf("resends after the reopen appended: end %d, was %d", got, end)
	}
	clock.Advance(window)
	if got := q.Stats().DedupIDs; got != 0 {
		t.Fatalf("%d ids remembered once the window passed after the reopen", got)
	}
	for i := sent - 99; i < sent; i++ {
		if off := send(i); off == first[i] {
			t.Fatalf("id-%d is still remembered once the window passed after the reopen", i)
		}
	}
}

// TestDedupRingKeepsOffsetOrderThroughResizes: ids remembered in bursts
// whose offsets come out of order (sends that overlapped), through phases
// that grow the window to thousands of ids and empty it again (so that
// the expiry ring wraps, grows and shrinks), leave the window holding
// exactly the ids a sorted list holds, lowest offset first, each still
// found by its hash.
func TestDedupRingKeepsOffsetOrderThroughResizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 11))
	d := newDedupWindow(1 << 62) // expiry times are set per id below
	type ref struct {
		off uint64
		exp int64
		id  string
	}
	var model []ref // by offset
	var now int64
	next := uint64(0)
	grew, shrank := 0, 0
	for phase := range 12 {
		life := int64(1 + rng.IntN(8000)) // how long an id lives, in sends
		if phase%3 == 2 {
			life = 1 // drain
		}
		for step := range 6000 {
			now++
			d.mu.Lock()
			before := len(d.ring)
			d.expire(now)
			if len(d.ring) < before {
				shrank++
			}
			for len(model) > 0 && model[0].exp <= now {
				model = model[1:]
			}
			// A burst of 1-4 sends whose offsets are taken in one order
			// and remembered in another.
			k := 1 + rng.IntN(4)
			offs := make([]uint64, k)
			for i := range offs {
				offs[i] = next + uint64(i)
			}
			next += uint64(k)
			rng.Shuffle(k, func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
			for _, off := range offs {
				id := fmt.Sprint("id-", off)
				before := len(d.ring)
				d.remember(id, d.hash(id), off, now+life, false)
				if len(d.ring) > before {
					grew++
				}
				i := len(model)
				for i > 0 && model[i-1].off > off {
					i--
				}
				model = append(model[:i], append([]ref{{off, now + life, id}}, model[i:]...)...)
			}
			if got := d.tail - d.head; got != uint64(len(model)) {
				d.mu.Unlock()
				t.Fatalf("phase %d, time %d: the ring holds %d ids, the list %d", phase, now, got, len(model))
			}
			for i, m := range model {
				if step%256 != 0 && i > 0 && i < len(model)-8 {
					continue // all of them now and then, the ends always
				}
				if r := d.at(d.head + uint64(i)); r.off != m.off || r.exp != m.exp {
					d.mu.Unlock()
					t.Fatalf("phase %d, time %d: ring[%d] is offset %d expiring at %d, want %d at %d", phase, now, i, r.off, r.exp, m.off, m.exp)
				}
				if off, ok := d.ids.get(d.hash(m.id)); !ok || off != m.off {
					d.mu.Unlock()
					t.Fatalf("phase %d: %s -> %d, %v; want %d", phase, m.id, off, ok, m.off)
				}
			}
			d.mu.Unlock()
		}
		if got, want := d.size(now), len(model); got != want {
			t.Fatalf("phase %d: size %d, want %d", phase, got, want)
		}
		if low, ok := d.low(now); len(model) > 0 && (!ok || low != model[0].off) {
			t.Fatalf("phase %d: lowest offset %d, %v; want %d", phase, low, ok, model[0].off)
		}
	}
	if grew == 0 || shrank == 0 {
		t.Fatalf("the ring grew %d times and shrank %d times: the test did not resize it both ways", grew, shrank)
	}
}
