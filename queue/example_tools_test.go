package queue_test

import (
	"fmt"
	"log"
	"path/filepath"

	"github.com/pagelog/pagelog/queue"
)

// Names are checked before a store is asked for them.
func ExampleCheckQueueName() {
	fmt.Println(queue.CheckQueueName("orders-eu"))
	fmt.Println(queue.CheckQueueName("a/b") != nil)
	// Output:
	// <nil>
	// true
}

// A queue's dead letters live in a directory beside it.
func ExampleDeadLetterPath() {
	fmt.Println(filepath.Base(queue.DeadLetterPath("/var/lib/app/orders")))
	// Output: orders.dead
}

// Tools tell a queue, a store and neither apart before they open anything.
func ExampleIsQueue() {
	dir, remove := tempDir()
	defer remove()
	q, err := queue.Open(filepath.Join(dir, "q"), queue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	q.Close()
	s, err := queue.OpenStore(filepath.Join(dir, "s"), queue.StoreOptions{})
	if err != nil {
		log.Fatal(err)
	}
	s.Close()
	for _, d := range []string{"q", "s", "none"} {
		isQ, _ := queue.IsQueue(filepath.Join(dir, d))
		isS, _ := queue.IsStore(filepath.Join(dir, d))
		fmt.Println(d, isQ, isS)
	}
	// Output:
	// q true false
	// s false true
	// none false false
}

// Messages reads a queue's files without opening it: beside the process
// that has it open, or after it stopped. A message in flight is not
// deleted.
func ExampleMessages() {
	dir, remove := tempDir()
	defer remove()
	q, err := queue.Open(filepath.Join(dir, "q"), queue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range []string{"one", "two", "three"} {
		if _, err := q.Send([]byte(b)); err != nil {
			log.Fatal(err)
		}
	}
	for range 2 { // the first two handed out; the second one deleted
		m, _, err := q.TryReceive()
		if err != nil {
			log.Fatal(err)
		}
		if m.Offset == 1 {
			if err := q.Delete(m.Offset); err != nil {
				log.Fatal(err)
			}
		}
	}
	q.Close()
	err = queue.Messages(filepath.Join(dir, "q"), func(m queue.Stored) bool {
		fmt.Println(m.Offset, string(m.Body))
		return true
	})
	fmt.Println(err)
	// Output:
	// 0 one
	// 2 three
	// <nil>
}

// StoreMessages is Messages for one queue of a store.
func ExampleStoreMessages() {
	dir, remove := tempDir()
	defer remove()
	s, err := queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		log.Fatal(err)
	}
	q, err := s.Queue("orders")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Send([]byte("order 4127")); err != nil {
		log.Fatal(err)
	}
	s.Close()
	err = queue.StoreMessages(dir, "orders", func(m queue.Stored) bool {
		fmt.Println(string(m.Body))
		return true
	})
	fmt.Println(err)
	// Output:
	// order 4127
	// <nil>
}
