package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// openTemp opens a new queue in a temporary directory for an example;
// done closes and removes it.
func openTemp(opts queue.Options) (q *queue.Queue, done func()) {
	dir, remove := tempDir()
	q, err := queue.Open(filepath.Join(dir, "q"), opts)
	if err != nil {
		remove()
		log.Fatal(err)
	}
	return q, func() {
		q.Close()
		remove()
	}
}

// openTempStore opens a new store in a temporary directory for an
// example; done closes and removes it.
func openTempStore() (s *queue.Store, done func()) {
	dir, remove := tempDir()
	s, err := queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		remove()
		log.Fatal(err)
	}
	return s, func() {
		s.Close()
		remove()
	}
}

// Open creates the queue on first use and owns its directory until Close:
// a second Open, in this process or another, gets ErrLocked. What was not
// deleted is handed out again after a reopen.
func ExampleOpen() {
	dir, remove := tempDir()
	defer remove()

	q, err := queue.Open(dir, queue.Options{Visibility: time.Minute, Log: engine.Options{Sync: engine.SyncAlways}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Send([]byte("job 1")); err != nil {
		log.Fatal(err)
	}
	_, err = queue.Open(dir, queue.Options{})
	fmt.Println("second opener locked out:", errors.Is(err, engine.ErrLocked))
	if err := q.Close(); err != nil {
		log.Fatal(err)
	}

	q, err = queue.Open(dir, queue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	m, ok, err := q.TryReceive()
	if err != nil || !ok {
		log.Fatal(ok, err)
	}
	fmt.Printf("after the reopen: %d %s\n", m.Offset, m.Body)
	// Output:
	// second opener locked out: true
	// after the reopen: 0 job 1
}

// Send appends the message (the only write per message) and returns its
// offset, which names it from then on.
func ExampleQueue_Send() {
	q, done := openTemp(queue.Options{})
	defer done()

	for _, body := range []string{"resize 1.jpg", "resize 2.jpg"} {
		off, err := q.Send([]byte(body))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(off, body)
	}
	fmt.Println("messages:", q.Stats().Messages)
	// Output:
	// 0 resize 1.jpg
	// 1 resize 2.jpg
	// messages: 2
}

// Receive blocks until a message is ready or the context is done; the
// message is hidden from other receivers until its deadline.
func ExampleQueue_Receive() {
	q, done := openTemp(queue.Options{Visibility: 30 * time.Second})
	defer done()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	_, err := q.Receive(ctx) // nothing sent yet
	cancel()
	fmt.Println("empty:", errors.Is(err, context.DeadlineExceeded))

	if _, err := q.Send([]byte("hello")); err != nil {
		log.Fatal(err)
	}
	m, err := q.Receive(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d %s receives=%d\n", m.Offset, m.Body, m.Receives) // Body: valid until the deadline or Delete
	_, ok, _ := q.TryReceive()
	fmt.Println("hidden while in flight:", !ok)
	// Output:
	// empty: true
	// 0 hello receives=1
	// hidden while in flight: true
}

// Delete acknowledges a message: it is never handed out again. Deleting
// twice is harmless; an offset not handed out gets ErrNotInFlight.
func ExampleQueue_Delete() {
	q, done := openTemp(queue.Options{})
	defer done()
	if _, err := q.SendBatch([][]byte{[]byte("a"), []byte("b")}); err != nil {
		log.Fatal(err)
	}
	m, err := q.Receive(context.Background())
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println(q.Delete(m.Offset), q.Delete(m.Offset))
	fmt.Println(errors.Is(q.Delete(1), queue.ErrNotInFlight)) // b was never received
	st := q.Stats()
	fmt.Println("deleted", st.Deleted, "messages", st.Messages, "head", st.Head)
	// Output:
	// <nil> <nil>
	// true
	// deleted 1 messages 1 head 1
}

// Stat reads a queue's files without opening it (no lock), beside the
// process that owns it.
func ExampleStat() {
	q, done := openTemp(queue.Options{})
	defer done()
	for _, body := range []string{"x", "y", "z"} {
		if _, err := q.Send([]byte(body)); err != nil {
			log.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		log.Fatal(err)
	}

	st, err := queue.Stat(q.Dir())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("end", st.End, "head", st.Head, "messages", st.Messages)
	// Output:
	// end 3 head 0 messages 3
}

// OpenStore opens (creating it on first use) a directory of any number of
// named queues; Close closes every queue it handed out.
func ExampleOpenStore() {
	dir, remove := tempDir()
	defer remove()

	s, err := queue.OpenStore(dir, queue.StoreOptions{Visibility: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"mail", "sms"} {
		q, err := s.Queue(name)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := q.Send([]byte("to " + name)); err != nil {
			log.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}

	s, err = queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	isStore, _ := queue.IsStore(dir)
	fmt.Println("store:", isStore, "queues:", s.Names(), "messages:", s.Stats().Messages)
	// Output:
	// store: true queues: [mail sms] messages: 2
}

// Store.Queue returns the same *Queue for a name until it is closed; the
// queue has the whole Queue API.
func ExampleStore_Queue() {
	s, done := openTempStore()
	defer done()

	a, err := s.Queue("orders")
	if err != nil {
		log.Fatal(err)
	}
	b, err := s.Queue("orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same queue:", a == b)
	_, err = s.Queue("orders/eu")
	fmt.Println("bad name:", errors.Is(err, queue.ErrBadQueueName))
	// Output:
	// same queue: true
	// bad name: true
}

// DeleteQueue removes a queue and its messages (and its dead letters);
// a queue created later under the name starts empty.
func ExampleStore_DeleteQueue() {
	s, done := openTempStore()
	defer done()
	q, err := s.Queue("tmp")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Send([]byte("short-lived")); err != nil {
		log.Fatal(err)
	}

	if err := s.DeleteQueue("tmp"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("has tmp:", s.Has("tmp"))
	q, err = s.Queue("tmp")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("messages:", q.Stats().Messages)
	// Output:
	// has tmp: false
	// messages: 0
}
