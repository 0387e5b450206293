package queue

import (
	"math/rand/v2"
	"testing"
)

// posList against a plain slice, through pushes and drops of every size.
func TestPosListMatchesASlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var l posList
	var model []uint64
	next := uint64(0)
	for step := range 20000 {
		switch r := rng.IntN(10); {
		case r < 6:
			for range rng.IntN(700) {
				l.push(next)
				model = append(model, next)
				next++
			}
		case r < 9:
			k := rng.IntN(len(model) + 1)
			l.dropFront(k)
			model = model[k:]
		default:
			l.dropFront(len(model))
			model = model[:0]
		}
		if l.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, l.len(), len(model))
		}
		for _, i := range []int{0, len(model) / 2, len(model) - 1} {
			if i >= 0 && i < len(model) && l.at(i) != model[i] {
				t.Fatalf("step %d: at(%d) = %d, want %d", step, i, l.at(i), model[i])
			}
		}
	}
}

// An append to a view allocates nothing while its head follows its end.
func TestPosListFollowingItsEndAllocatesNothing(t *testing.T) {
	var l posList
	for i := range 4 * posChunk {
		l.push(uint64(i))
	}
	n := uint64(0)
	allocs := testing.AllocsPerRun(10000, func() {
		l.push(n)
		n++
		l.dropFront(1)
	})
	if allocs != 0 {
		t.Fatalf("push and drop allocate %v times", allocs)
	}
}

// TestPosListHeadFollowingEndAllocatesNothing: a busy view whose head
// follows its end (pushes, then drops of several chunks at once, as a
// checkpoint drops) reuses the chunks it let go: its appends allocate
// nothing, so the collector's cycles do not come with the queue's rate.
func TestPosListHeadFollowingEndAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops a share of its items under the race detector")
	}
	var l posList
	round := func() {
		for i := range 4 * posChunk {
			l.push(uint64(i))
		}
		l.dropFront(l.len() - 1)
	}
	round() // the first chunks are made
	if n := testing.AllocsPerRun(100, round); n >= 0.5 {
		t.Fatalf("%.1f allocations per %d appends, want none", n, 4*posChunk)
	}
}
