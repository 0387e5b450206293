package queue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/pagelog/pagelog/queue"
)

// queueExample is the README's example of the queue, word for word
// (readme_test.go at the module's root checks that they agree), so that it
// compiles and runs.
func queueExample(dir string, send func(body []byte) error) error {
	q, err := queue.Open(dir, queue.Options{
		Visibility: 30 * time.Second, // a received message is hidden this long
	})
	if err != nil {
		return err
	}
	defer q.Close()

	if _, err := q.Send([]byte("mail order 4127")); err != nil { // one append: the only write per message
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := q.Receive(ctx) // blocks until a message is ready, or ctx is done
	if err != nil {
		return err
	}
	if err := send(m.Body); err != nil { // zero-copy: valid until m's deadline or its Delete
		return err // not deleted: handed out again after its deadline
	}
	if err := q.Delete(m.Offset); err != nil { // done: never handed out again
		return err
	}
	st := q.Stats() // End, Cursor, Head, InFlight, ReadyAgain, counters
	fmt.Println("sent", st.Sent, "deleted", st.Deleted, "head", st.Head)
	return nil
}

func Example_readme() {
	dir, err := os.MkdirTemp("", "pagelog-readme-queue")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	send := func(body []byte) error {
		fmt.Printf("sending %q\n", body)
		return nil
	}
	if err := queueExample(dir, send); err != nil {
		log.Fatal(err)
	}
	// Output:
	// sending "mail order 4127"
	// sent 1 deleted 1 head 1
}

// storeExample is the README's example of a store, word for word
// (readme_test.go at the module's root checks that they agree).
func storeExample(dir string) error {
	s, err := queue.OpenStore(dir, queue.StoreOptions{}) // one lock, five logs shared by every queue
	if err != nil {
		return err
	}
	defer s.Close() // closes every queue it handed out

	for i, tenant := range []string{"acme", "globex", "initech"} {
		q, err := s.Queue("mail." + tenant) // created on first use: no file, timer or goroutine of its own
		if err != nil {
			return err
		}
		for range i + 1 {
			if _, err := q.Send([]byte("welcome " + tenant)); err != nil { // the whole Queue API
				return err
			}
		}
	}
	st := s.Stats() // totals and the deepest queues
	fmt.Println("queues", st.Queues, "messages", st.Messages, "deepest", st.Deepest[0].Name)
	return s.DeleteQueue("mail.acme") // its messages (and its dead letters, mail.acme.dead) go too
}

func Example_readmeStore() {
	dir, err := os.MkdirTemp("", "pagelog-readme-store")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := storeExample(dir); err != nil {
		log.Fatal(err)
	}
	// Output:
	// queues 3 messages 6 deepest mail.initech
}
