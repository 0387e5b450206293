package queue

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// TestQueuePoisonMessage: a message kills its consumer process (SIGKILL)
// on every receive. Its receive count is durable before each hand-out,
// so after MaxReceives crashes the next process moves it to the dead
// letters instead of handing it out, and processes the rest: the messages
// of its group, held back behind it until then, included.
func TestQueuePoisonMessage(t *testing.T) {
	if dir := os.Getenv("PAGELOG_QUEUE_POISON_DIR"); dir != "" {
		poisonChild(dir, os.Getenv("PAGELOG_QUEUE_POISON_SYNC"))
		return
	}
	t.Parallel()
	const maxReceives, poison = 3, 7
	for _, policy := range []engine.SyncPolicy{engine.SyncNone, engine.SyncAlways} {
		dir := t.TempDir()
		q, err := Open(dir, Options{Log: engine.Options{Sync: policy}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			var o SendOptions
			body := fmt.Sprint("job ", i)
			switch {
			case i == poison:
				body = "poison"
				o.Group = "g"
			case i > poison && i < poison+3:
				o.Group = "g"
			}
			mustSendWith(t, q, body, o)
		}
		mustCloseQueue(t, q)

		processed := map[uint64]int{}
		kills, done := 0, false
		for run := 0; run < maxReceives+3 && !done; run++ {
			cmd := testkit.Child("TestQueuePoisonMessage")
			cmd.Env = append(os.Environ(), "PAGELOG_QUEUE_POISON_DIR="+dir, "PAGELOG_QUEUE_POISON_SYNC="+policy.String())
			out, err := cmd.Output()
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				if off, ok := strings.CutPrefix(sc.Text(), "processed "); ok {
					n, _ := strconv.ParseUint(off, 10, 64)
					processed[n]++
				}
			}
			switch {
			case err == nil:
				done = true
			case testkit.KilledBySIGKILL(err):
				kills++
			default:
				t.Fatalf("%v: run %d: %v\n%s", policy, run, err, out)
			}
		}
		if !done || kills != maxReceives {
			t.Fatalf("%v: %d kills, done %v: want %d kills, then a run that ends", policy, kills, done, maxReceives)
		}
		for i := range uint64(20) {
			if want := i != poison; (processed[i] > 0) != want {
				t.Errorf("%v: offset %d processed %d times", policy, i, processed[i])
			}
		}
		q, err = Open(dir, Options{Log: engine.Options{Sync: policy}})
		if err != nil {
			t.Fatal(err)
		}
		d := q.DeadLetter()
		if st := q.Stats(); st.Messages != 0 || d == nil || d.Stats().Messages != 1 {
			t.Fatalf("%v: after the runs: %+v, dead letters %v", policy, st, d)
		}
		body, a := recAttrs(t, d, 0)
		if body != "poison" || a.Origin != poison || a.Receives != maxReceives || string(a.Group) != "g" {
			t.Errorf("%v: dead letter %q %+v", policy, body, a)
		}
		mustCloseQueue(t, q)
	}
}

// poisonChild consumes the queue in dir, killing itself on the poison.
func poisonChild(dir, syncName string) {
	policy, _ := engine.ParseSyncPolicy(syncName)
	q, err := Open(dir, Options{Log: engine.Options{Sync: policy}, MaxReceives: 3, Visibility: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, ok, err := q.TryReceive()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
		if !ok {
			if st := q.Stats(); st.Messages == 0 {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintln(os.Stderr, "messages left:", q.Stats())
				os.Exit(5)
			}
			time.Sleep(time.Millisecond) // the poison is on its way to the dead letters
			continue
		}
		if string(m.Body) == "poison" {
			testkit.KillSelf()
			select {}
		}
		if err := q.Delete(m.Offset); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(6)
		}
		fmt.Printf("processed %d\n", m.Offset)
	}
	if err := q.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(7)
	}
	os.Exit(0)
}

// TestQueueSecondProcessLocked: while a process has a queue open, another
// process that opens it, or opens another queue on its dead-letter
// directory, gets ErrLocked and changes nothing; the first goes on.
func TestQueueSecondProcessLocked(t *testing.T) {
	if dir := os.Getenv("PAGELOG_QUEUE_LOCK_DIR"); dir != "" {
		_, err1 := Open(dir, Options{})
		_, err2 := Open(dir+"-other", Options{DeadLetterDir: DeadLetterPath(dir)})
		fmt.Printf("queue: %v\ndead letters: %v\n", err1, err2)
		if !errors.Is(err1, engine.ErrLocked) || !errors.Is(err2, engine.ErrLocked) {
			os.Exit(1)
		}
		os.Exit(0)
	}
	t.Parallel()
	dir := t.TempDir() + "/q"
	q, err := Open(dir, Options{MaxReceives: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer mustCloseQueue(t, q)
	mustSend(t, q, "mine")
	cmd := testkit.Child("TestQueueSecondProcessLocked")
	cmd.Env = append(os.Environ(), "PAGELOG_QUEUE_LOCK_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("second process: %v\n%s", err, out)
	}
	if m, ok := tryRecv(t, q); !ok || string(m.Body) != "mine" {
		t.Fatalf("after the second process: %+v %v", m, ok)
	}
	if st := q.Stats(); st.End != 1 {
		t.Fatalf("the second process changed the queue: %+v", st)
	}
}

// TestQueueBodyWriteFaults: a received body is a read-only mapping:
// writing into it faults (recovered here as a panic), and neither the
// body nor the log changes.
func TestQueueBodyWriteFaults(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	q := openTestQueue(t, dir, clock)
	mustSend(t, q, "precious")
	m, _ := tryRecv(t, q)
	fault := func() (r any) {
		old := debug.SetPanicOnFault(true)
		defer debug.SetPanicOnFault(old)
		defer func() { r = recover() }()
		m.Body[0] = 'X'
		return nil
	}()
	if fault == nil {
		t.Fatal("a write into a received body did not fault")
	}
	if string(m.Body) != "precious" {
		t.Fatalf("the body reads %q after the write", m.Body)
	}
	mustCloseQueue(t, q)
	l, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := l.Verify(nil)
	l.Close()
	if err != nil || !rep.Healthy() {
		t.Fatalf("verify after the write: %v %+v", err, rep)
	}
	q = openTestQueue(t, dir, clock)
	defer mustCloseQueue(t, q)
	if m, ok := tryRecv(t, q); !ok || string(m.Body) != "precious" {
		t.Fatalf("after a reopen: %q", m.Body)
	}
	t.Logf("the write faulted: %v", fault)
}
