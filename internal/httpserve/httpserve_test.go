package httpserve

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The listener holds at most n connections: Accept waits while n are
// open, and a Close lets the next one in.
func TestLimitListenerBoundsConnections(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	select {
	case c := <-accepted:
		t.Fatalf("a third connection accepted (%v) while two are open", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond):
	}
	first.Close()
	first.Close() // a second Close frees no second place
	third := <-accepted
	if third == nil {
		t.Fatal("listener closed")
	}
	second.Close()
	third.Close()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-accepted; ok {
		t.Fatal("Accept after Close")
	}
}

func TestLoadRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	spaced := filepath.Join(dir, "spaced")
	huge := filepath.Join(dir, "huge") // not a token: the wrong file, or a device that never ends
	for path, content := range map[string]string{empty: " \n", spaced: "two words\n", huge: strings.Repeat("a", 1<<20)} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []Options{
		{ReadTimeout: -time.Second},
		{MaxConns: -1},
		{TLSCert: "cert.pem"},
		{TLSKey: "key.pem"},
		{ClientCA: "ca.pem"},
		{TLSCert: filepath.Join(dir, "missing"), TLSKey: filepath.Join(dir, "missing")},
		{TokenFile: filepath.Join(dir, "missing")},
		{TokenFile: empty},
		{TokenFile: spaced},
		{TokenFile: huge},
	} {
		if _, err := Load(o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("Load(%+v): %v, want ErrBadOptions", o, err)
		}
	}
	s, err := Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := s.Server(http.NotFoundHandler())
	if srv.ReadTimeout != DefaultReadTimeout || srv.WriteTimeout != DefaultWriteTimeout || srv.IdleTimeout != DefaultIdleTimeout ||
		srv.ReadHeaderTimeout != ReadHeaderTimeout || s.o.MaxConns != DefaultMaxConns || s.Scheme() != "http" {
		t.Errorf("defaults: %+v, max conns %d, scheme %s", srv, s.o.MaxConns, s.Scheme())
	}
}

// Only the requests Guarded names need the token; it is compared whole.
func TestTokenGuardsRoutes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("  tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(Options{TokenFile: file, Guarded: func(r *http.Request) bool { return r.Method == http.MethodPost }})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).Handler
	for _, c := range []struct {
		method, auth string
		want         int
	}{
		{"GET", "", 200},
		{"POST", "", 401},
		{"POST", "Bearer", 401},
		{"POST", "Bearer ", 401},
		{"POST", "Bearer tok-", 401},
		{"POST", "Bearer tok-12", 401},
		{"POST", "Token tok-1", 401},
		{"POST", "Bearer tok-1", 200},
		{"POST", "BEARER  tok-1 ", 200},
	} {
		r := httptest.NewRequest(c.method, "/x", nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s with %q: %d, want %d", c.method, c.auth, w.Code, c.want)
		}
	}
}

// Kept-alive connections with no request do not hold the bound until
// --idle-timeout: a new client, at the bound, gets the place of the
// connection idle the longest.
func TestIdleConnectionsGiveWayAtTheBound(t *testing.T) {
	s, err := Load(Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serveOn(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	get := func(c *http.Client) error {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	// Two clients that keep their connections open, idle (the bound).
	for range 2 {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		if err := get(&http.Client{Transport: tr, Timeout: 20 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	// A third is served (before the idle timeout, two minutes).
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if err := get(&http.Client{Transport: tr, Timeout: 20 * time.Second}); err != nil {
		t.Fatalf("a client while %d connections are open and idle: %v", 2, err)
	}
}
