package inflight_test

import (
	"fmt"

	"github.com/pagelog/pagelog/inflight"
)

// The engine hands out messages at the cursor, lets deadlines pass and
// hands the expired ones out again, lowest offset first.
func Example() {
	t := inflight.New(0)
	t.Add(0, 100) // deadlines and now are Unix nanoseconds from the caller
	t.Add(1, 50)
	t.Add(2, 200)

	fmt.Println("expired:", t.Expire(150))
	off, receives, _ := t.PopReady(300)
	fmt.Println("redeliver:", off, "receives:", receives)

	st, err := t.Done(0)
	fmt.Println("done 0:", st, err, "head:", t.Head())
	st, err = t.Done(0)
	fmt.Println("again:", st, err)
	_, err = t.Done(3)
	fmt.Println("done 3:", err)
	// Output:
	// expired: 2
	// redeliver: 0 receives: 2
	// done 0: in flight <nil> head: 1
	// again: done <nil>
	// done 3: inflight: offset not handed out
}

// At open the engine replays its delete log, then sets the cursor: the
// offsets neither deleted nor registered become ready again.
func ExampleTable_SetCursor() {
	t := inflight.New(10)
	t.MarkDone(11)
	t.MarkDone(10)
	t.MarkDone(13)
	t.AddReady(14, 3)
	t.SetCursor(16)
	fmt.Println("head:", t.Head(), "cursor:", t.Cursor(), "ready:", t.ReadyAgain())
	for {
		off, receives, ok := t.PopReady(1000)
		if !ok {
			break
		}
		fmt.Println(off, receives)
	}
	// Output:
	// head: 12 cursor: 16 ready: 3
	// 12 1
	// 14 4
	// 15 1
}
