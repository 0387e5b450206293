package httpserve

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveOn serves h as s says on a loopback port until the test ends; it
// returns the server and its address.
func serveOn(t *testing.T, s *Setup, h http.Handler) (*http.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.Server(h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(s.Listener(ln)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, ln.Addr().String()
}

// A request that waits (a long poll) ends when the server shuts down: its
// context is cancelled, it answers, and Shutdown returns at once instead
// of after its wait.
func TestShutdownEndsWaitingRequests(t *testing.T) {
	s, err := Load(Options{ShutdownGrace: time.Minute, Wait: func(*http.Request) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	srv, addr := serveOn(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusNoContent)
		case <-time.After(time.Hour):
		}
	}))
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/receive?wait=1h", "", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		answered <- err
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(srv) }()
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown still waits 20 s after it began, for a request that waits an hour")
	}
	if err := <-answered; err != nil {
		t.Errorf("the waiting request: %v, want 204", err)
	}
}

// A client that never finishes its request's body does not hold Shutdown
// past ShutdownGrace: its connection is closed, and Shutdown reports no
// error (the server was asked to stop, and it stopped).
func TestShutdownClosesSlowClientsAfterGrace(t *testing.T) {
	s, err := Load(Options{ShutdownGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reading := make(chan struct{})
	srv, addr := serveOn(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(reading)
		_, _ = io.Copy(io.Discard, r.Body) // until --read-timeout, a minute
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	<-reading
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(srv) }()
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown with a client that never finishes its request: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown still waits 20 s after it began, for a client that never finishes its request")
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("the slow client's connection: %v, want it closed", err)
	}
}

// A waiting request's deadlines are the timeouts plus its wait, without
// overflow when the timeouts are the largest durations.
func TestWaitDeadlinesDoNotOverflow(t *testing.T) {
	const maxDuration = time.Duration(1<<63 - 1)
	s, err := Load(Options{ReadTimeout: maxDuration, WriteTimeout: maxDuration, IdleTimeout: maxDuration,
		Wait: func(*http.Request) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serveOn(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	resp, err := http.Post("http://"+addr+"/receive?wait=1h", "", nil)
	if err != nil {
		t.Fatalf("a waiting request with --read-timeout and --write-timeout of %v: %v", maxDuration, err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
		t.Fatalf("answer %q, %v", b, err)
	}
}
