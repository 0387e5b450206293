package queue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// A work queue: send, receive (the message is hidden until its deadline),
// delete once processed. After a reopen, what was not deleted is handed out
// again, lowest offset first.
func ExampleQueue() {
	dir, err := os.MkdirTemp("", "pagelog-queue-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	q, err := queue.Open(dir, queue.Options{Visibility: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	for _, job := range []string{"resize photo 1", "resize photo 2", "send email"} {
		if _, err := q.Send([]byte(job)); err != nil {
			log.Fatal(err)
		}
	}
	ctx := context.Background()
	for range 2 {
		m, err := q.Receive(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// m.Body is zero-copy: use it before deleting the message.
		fmt.Printf("got %d %q receives=%d\n", m.Offset, m.Body, m.Receives)
		if m.Offset == 0 {
			if err := q.Delete(m.Offset); err != nil {
				log.Fatal(err)
			}
		}
	}
	st := q.Stats()
	fmt.Println("end", st.End, "cursor", st.Cursor, "head", st.Head, "in flight", st.InFlight)
	if err := q.Close(); err != nil {
		log.Fatal(err)
	}

	// Message 1 was received but not deleted: it comes back first.
	q, err = queue.Open(dir, queue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	fmt.Println("reopened at head", q.Recovery().Head, "from", q.Recovery().HeadFrom)
	for range 2 {
		m, err := q.Receive(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("got %d %q receives=%d\n", m.Offset, m.Body, m.Receives)
	}
	// Output:
	// got 0 "resize photo 1" receives=1
	// got 1 "resize photo 2" receives=1
	// end 3 cursor 2 head 1 in flight 1
	// reopened at head 1 from checkpoint
	// got 1 "resize photo 2" receives=1
	// got 2 "send email" receives=1
}
