package queue_test

import (
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// tempDir returns a new directory for an example, and its removal.
func tempDir() (string, func()) {
	dir, err := os.MkdirTemp("", "pagelog-example")
	if err != nil {
		log.Fatal(err)
	}
	return dir, func() { os.RemoveAll(dir) }
}

// queueFeaturesExample is the example of docs/queue.md, word for word
// (readme_test.go at the module's root checks every Go block of the docs
// against the example files), so that it compiles and runs.
func queueFeaturesExample(dir string) error {
	q, err := queue.Open(dir, queue.Options{
		MaxReceives: 3, // received 3 times without a Delete: moved to the dead letters
	})
	if err != nil {
		return err
	}
	defer q.Close() // closes the dead-letter queue, dir + ".dead", too

	// Hidden for a minute; handed out one at a time, in send order, within
	// group "acct-42"; the same DedupID within DedupWindow appends nothing.
	debit := queue.SendOptions{Delay: time.Minute, Group: "acct-42", DedupID: "txn-9001"}
	off, err := q.SendWith([]byte("debit 10"), debit)
	if err != nil {
		return err
	}
	retry, err := q.SendWith([]byte("debit 10"), debit) // a retry of the same send
	if err != nil {
		return err
	}
	fmt.Println("retry deduplicated:", retry == off)
	if _, err := q.SendBatch([][]byte{[]byte("credit 5"), []byte("credit 7")}); err != nil { // one append, one sync
		return err
	}
	m, ok, err := q.TryReceive() // the delayed debit holds back its own group only
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("nothing ready")
	}
	fmt.Printf("received %q\n", m.Body)
	if err := q.ChangeVisibility(m.Offset, 5*time.Minute); err != nil { // more time to work on it
		return err
	}
	if err := q.DeleteBatch([]uint64{m.Offset}); err != nil { // one append, one sync
		return err
	}
	st := q.Stats()
	fmt.Println("delayed", st.Delayed, "dead letters", st.DeadLetters)
	moved, err := q.Redrive(0) // dead letters back as new sends (none here)
	fmt.Println("redriven", moved)
	return err
}

func Example_docsFeatures() {
	dir, remove := tempDir()
	defer remove()
	if err := queueFeaturesExample(dir + "/q"); err != nil {
		log.Fatal(err)
	}
	// Output:
	// retry deduplicated: true
	// received "credit 5"
	// delayed 1 dead letters 0
	// redriven 0
}

// storeQueuesExample is the example of docs/store.md, word for word.
func storeQueuesExample(dir string) error {
	s, err := queue.OpenStore(dir, queue.StoreOptions{Visibility: time.Minute}) // the defaults of every queue
	if err != nil {
		return err
	}
	q, err := s.QueueWith("reports", queue.QueueOptions{Visibility: time.Hour}) // this queue's own
	if err != nil {
		return err
	}
	if _, err := q.SendBatch([][]byte{[]byte("q1"), []byte("q2")}); err != nil {
		return err
	}
	if _, err := s.Queue("alerts"); err != nil { // an empty queue is a name, nothing more
		return err
	}
	for _, d := range s.Depths() { // every queue, deepest first
		fmt.Println(d.Name, d.Messages)
	}
	if err := s.Close(); err != nil {
		return err
	}

	// Read a queue's messages without opening the store (no lock), as
	// `pagelog queue stats --store` does beside the owner.
	err = queue.StoreMessages(dir, "reports", func(m queue.Stored) bool {
		fmt.Printf("%d %s\n", m.Offset, m.Body)
		return true
	})
	if err != nil {
		return err
	}
	s, err = queue.OpenStore(dir, queue.StoreOptions{})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Println("reopened:", s.Recovery().Queues, "queues", s.Names())
	return nil
}

func Example_docsStore() {
	dir, remove := tempDir()
	defer remove()
	if err := storeQueuesExample(dir); err != nil {
		log.Fatal(err)
	}
	// Output:
	// reports 2
	// alerts 0
	// 0 q1
	// 1 q2
	// reopened: 2 queues [alerts reports]
}
