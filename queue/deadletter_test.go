package queue

import (
	"testing"
)

// TestRedriveTakesNoDeadLetterWhoseMoveHasNotEnded holds a move to the
// dead letters between its append there and its delete record here: the
// dead letter is in the dead-letter queue, but Redrive leaves it until the
// move has ended (a crash in that window would otherwise leave the message
// in three places), and takes it once it has.
func TestRedriveTakesNoDeadLetterWhoseMoveHasNotEnded(t *testing.T) {
	clock := newFakeClock()
	q := openTestQueue(t, t.TempDir(), clock, func(o *Options) { o.MaxReceives = 1 })
	defer mustCloseQueue(t, q)
	off := mustSend(t, q, "dies")
	if m, ok := tryRecv(t, q); !ok || m.Offset != off {
		t.Fatalf("received %+v, %v", m, ok)
	}
	reached, release := make(chan struct{}), make(chan struct{})
	q.mu.Lock()
	q.dm.copied = func() {
		close(reached)
		<-release
	}
	q.mu.Unlock()
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		clock.Advance(testVisibility) // the deadline passes: the timer runs the move
	}()
	<-reached
	if st := q.DeadLetter().Stats(); st.Messages != 1 {
		t.Fatalf("the dead letter is not in the dead-letter queue during the move: %+v", st)
	}
	if n, err := q.Redrive(0); n != 0 || err != nil {
		t.Errorf("Redrive during the move = %d, %v; want 0: its delete here is not written", n, err)
	}
	close(release)
	<-advanced
	if st := q.Stats(); st.DeadLettered != 1 || st.Messages != 0 {
		t.Fatalf("after the move: %+v", st)
	}
	if n, err := q.Redrive(0); n != 1 || err != nil {
		t.Errorf("Redrive after the move = %d, %v; want 1", n, err)
	}
	if st := q.Stats(); st.Messages != 1 || st.DeadLetters != 0 {
		t.Errorf("after the redrive: %+v", st)
	}
}
