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

// queueFeaturesExample is the README's example of the queue's features,
// word for word (TestReadmeFeaturesExample checks that they agree).
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

func Example_readmeFeatures() {
	dir, err := os.MkdirTemp("", "pagelog-readme-features")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := queueFeaturesExample(dir + "/q"); err != nil {
		log.Fatal(err)
	}
	// Output:
	// retry deduplicated: true
	// received "credit 5"
	// delayed 1 dead letters 0
	// redriven 0
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
