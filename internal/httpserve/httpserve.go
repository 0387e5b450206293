// Package httpserve holds what pagelog's two HTTP servers share (`pagelog
// serve`, and raftstore's pagelog-raft): their timeouts, a bound on the
// connections open at once, TLS (with client certificates for mutual TLS)
// and a bearer token, with the flags that set them.
//
// Neither server authenticates anyone unless told to: these options are
// what an operator needs to expose one beyond the loopback interface.
package httpserve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// The defaults of the flags. A request must arrive whole within
// ReadTimeout of its first byte (a body of 64 MiB at about 1 MiB/s) and
// its answer leave within WriteTimeout; a kept-alive connection with no
// request is closed after IdleTimeout. MaxConns connections are served at
// once: the next one takes the place of a kept-alive connection with no
// request, if any, else waits (and the others in the kernel's accept
// queue, holding no descriptor of the process) until one closes.
const (
	DefaultReadTimeout  = time.Minute
	DefaultWriteTimeout = time.Minute
	DefaultIdleTimeout  = 2 * time.Minute
	DefaultMaxConns     = 1024
	// ReadHeaderTimeout bounds the headers alone (and a TLS handshake).
	ReadHeaderTimeout = 10 * time.Second
	// DefaultShutdownGrace is how long Shutdown waits for the requests
	// under way.
	DefaultShutdownGrace = 5 * time.Second
)

// ErrBadOptions is returned by Load for options that cannot work
// together, or files that cannot be used.
var ErrBadOptions = errors.New("httpserve: bad options")

// Options configures a server. Zero durations and a zero MaxConns take the
// defaults above.
type Options struct {
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConns bounds the connections served at once.
	MaxConns int
	// TLSCert and TLSKey, PEM files, serve HTTPS instead of HTTP.
	TLSCert, TLSKey string
	// ClientCA, a PEM file of CA certificates (with TLSCert), makes every
	// client present a certificate signed by one of them (mutual TLS).
	ClientCA string
	// TokenFile holds a bearer token (white space around it is dropped;
	// at most 4096 bytes):
	// the requests Guarded tells must carry "Authorization: Bearer TOKEN".
	TokenFile string
	// Guarded tells the requests that need the token; nil: every one.
	Guarded func(*http.Request) bool
	// Wait, when set, returns how long a request may wait before it
	// answers (a long poll): its read and write deadlines move out by as
	// much, so that the timeouts do not cut it.
	Wait          func(*http.Request) time.Duration
	ShutdownGrace time.Duration
}

// AddFlags defines the flags that set o on fs: --read-timeout,
// --write-timeout, --idle-timeout, --max-conns, --tls-cert, --tls-key,
// --client-ca and --token-file.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.ReadTimeout, "read-timeout", DefaultReadTimeout, "longest time to read a request, body included; 0 is the default, not no limit")
	fs.DurationVar(&o.WriteTimeout, "write-timeout", DefaultWriteTimeout, "longest time to write an answer (a request that waits, such as a receive, gets its wait on top); 0 is the default, not no limit")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "a kept-alive connection with no request is closed after this; 0 is the default, not no limit")
	fs.IntVar(&o.MaxConns, "max-conns", DefaultMaxConns, fmt.Sprintf("most connections served at once (`n`); more wait to be accepted; 0 is %d, not no limit", DefaultMaxConns))
	fs.StringVar(&o.TLSCert, "tls-cert", "", "PEM certificate `file`: serve HTTPS (with --tls-key)")
	fs.StringVar(&o.TLSKey, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.StringVar(&o.ClientCA, "client-ca", "", "PEM CA certificates `file`: every client must present a certificate they signed (mutual TLS; needs --tls-cert)")
	fs.StringVar(&o.TokenFile, "token-file", "", "`file` holding a bearer token that requests must carry (Authorization: Bearer TOKEN)")
}

// Setup is Options made ready to serve: files read, TLS configured.
type Setup struct {
	o     Options
	tls   *tls.Config
	token [sha256.Size]byte
	guard bool
	idle  *idleConns // the connections of Server's servers waiting for a request
}

// Load checks o and reads its files.
func Load(o Options) (*Setup, error) {
	bad := func(format string, a ...any) (*Setup, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrBadOptions}, a...)...)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.ReadTimeout, DefaultReadTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.ShutdownGrace, DefaultShutdownGrace)
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	switch {
	case o.ReadTimeout < 0 || o.WriteTimeout < 0 || o.IdleTimeout < 0:
		return bad("--read-timeout %v, --write-timeout %v, --idle-timeout %v: not negative", o.ReadTimeout, o.WriteTimeout, o.IdleTimeout)
	case o.ShutdownGrace < 0:
		return bad("shutdown grace %v: not negative", o.ShutdownGrace)
	case o.MaxConns < 0:
		return bad("--max-conns %d: at least 1", o.MaxConns)
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return bad("--tls-cert and --tls-key go together")
	case o.ClientCA != "" && o.TLSCert == "":
		return bad("--client-ca needs --tls-cert and --tls-key")
	}
	s := &Setup{o: o, idle: newIdleConns()}
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return bad("--tls-cert %s, --tls-key %s: %v", o.TLSCert, o.TLSKey, err)
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if o.ClientCA != "" {
			pem, err := os.ReadFile(o.ClientCA)
			if err != nil {
				return bad("--client-ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return bad("--client-ca %s: no PEM certificate in it", o.ClientCA)
			}
			s.tls.ClientCAs, s.tls.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	if o.TokenFile != "" {
		b, err := readSmall(o.TokenFile, maxTokenFile)
		if err != nil {
			return bad("--token-file: %v", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
			return bad("--token-file %s: want one token, without white space inside", o.TokenFile)
		}
		s.token, s.guard = sha256.Sum256([]byte(tok)), true
	}
	return s, nil
}

// maxTokenFile bounds what Load reads of --token-file: a token is far
// shorter, and a header that carried more would pass no client or proxy.
const maxTokenFile = 4096

// readSmall reads the file at path, which must hold at most limit bytes
// (a device such as /dev/zero, or the wrong file, is refused without
// reading it whole).
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes, not a token", path, limit)
	}
	return b, nil
}

// Scheme is "https" with TLS, else "http".
func (s *Setup) Scheme() string {
	if s.tls != nil {
		return "https"
	}
	return "http"
}

// Listener returns ln bounded to MaxConns connections at once, under TLS
// when configured. At the bound, a new client takes the place of the
// connection of Server's servers that has waited the longest for a
// request, if any, else it waits for a connection to close.
func (s *Setup) Listener(ln net.Listener) net.Listener {
	ln = &limitListener{Listener: ln, sem: make(chan struct{}, s.o.MaxConns), done: make(chan struct{}), idle: s.idle}
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	return ln
}

// Server returns an http.Server of h with the timeouts, the token check
// and the deadlines of the requests that wait. Serve it on Listener's
// listener, and stop it with Shutdown (or its own Shutdown, which also
// ends the requests that wait).
func (s *Setup) Server(h http.Handler) *http.Server {
	stopping, stop := context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           s.handler(h, stopping),
		ReadHeaderTimeout: min(ReadHeaderTimeout, s.o.ReadTimeout),
		ReadTimeout:       s.o.ReadTimeout,
		WriteTimeout:      s.o.WriteTimeout,
		IdleTimeout:       s.o.IdleTimeout,
		ConnState:         s.idle.track,
	}
	srv.RegisterOnShutdown(stop)
	return srv
}

// Shutdown stops srv, a Server of s: it stops accepting, ends the
// requests that wait (their context is cancelled, so that a long poll
// answers at once), waits up to ShutdownGrace for the other requests under
// way, then closes the connections still open (a client that trickles its
// request does not hold the process). It returns an error only when the
// listener or a connection fails to close.
func (s *Setup) Shutdown(srv *http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	return err
}

// handler is h behind the token check; a request that waits has its
// deadlines moved out by its wait, and its context cancelled when
// stopping is done (the server shuts down).
func (s *Setup) handler(h http.Handler, stopping context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.guard && (s.o.Guarded == nil || s.o.Guarded(r)) && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pagelog"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "unauthorized: this route needs the header Authorization: Bearer TOKEN"})
			return
		}
		if s.o.Wait != nil {
			if d := s.o.Wait(r); d > 0 {
				rc := http.NewResponseController(w)
				now := time.Now()
				// The read deadline cancels the request's context once
				// its body is read (net/http then watches the connection
				// for a close): it moves out only for a request without a
				// body, so that a body is still read within ReadTimeout.
				// The answer's deadline moves out whatever the body.
				if r.ContentLength == 0 {
					_ = rc.SetReadDeadline(now.Add(addSat(d, s.o.ReadTimeout)))
				}
				_ = rc.SetWriteDeadline(now.Add(addSat(d, s.o.WriteTimeout)))
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				defer context.AfterFunc(stopping, cancel)()
				r = r.WithContext(ctx)
			}
		}
		h.ServeHTTP(w, r)
	})
}

// addSat is a+b of two durations not negative, at most the largest
// duration.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// authorized compares the request's bearer token with the token in
// constant time (of their SHA-256, so that the length does not show).
func (s *Setup) authorized(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "Bearer ") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(auth[7:])))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

// LimitListener returns a listener that serves at most n connections at
// once from ln: past n, Accept takes one more connection from ln and holds
// it until a connection's Close frees a place.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	// idle, when set, frees a place for a connection accepted past the
	// bound by closing a kept-alive connection with no request.
	idle *idleConns
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.sem <- struct{}{}:
	default:
		// A client waits for a place (its connection is the only one
		// held past the bound: the server accepts one at a time).
		wanted := l.idle != nil && l.idle.evict()
		select {
		case l.sem <- struct{}{}:
			if wanted {
				l.idle.unwant()
			}
		case <-l.done:
			if wanted {
				l.idle.unwant()
			}
			c.Close()
			return nil, net.ErrClosed
		}
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// idleConns tracks a server's kept-alive connections that wait for a
// request (http.Server.ConnState), so that a client waiting at the bound
// gets the place of the one idle the longest, as it would after
// IdleTimeout. Closing an idle connection is what IdleTimeout does: HTTP
// clients expect it.
type idleConns struct {
	mu    sync.Mutex
	since map[net.Conn]uint64 // idle connections, by when they became idle
	seq   uint64
	want  int // connections to close as they become idle
}

func newIdleConns() *idleConns { return &idleConns{since: map[net.Conn]uint64{}} }

// track is the server's ConnState.
func (ic *idleConns) track(c net.Conn, st http.ConnState) {
	ic.mu.Lock()
	if st != http.StateIdle {
		delete(ic.since, c)
		ic.mu.Unlock()
		return
	}
	if ic.want > 0 {
		ic.want--
		ic.mu.Unlock()
		closeConn(c)
		return
	}
	ic.seq++
	ic.since[c] = ic.seq
	ic.mu.Unlock()
}

// evict closes the connection idle the longest; with none, it asks for
// the next one to become idle and returns true (unwant cancels the ask).
func (ic *idleConns) evict() (wanted bool) {
	ic.mu.Lock()
	var oldest net.Conn
	for c, seq := range ic.since {
		if oldest == nil || seq < ic.since[oldest] {
			oldest = c
		}
	}
	if oldest == nil {
		ic.want++
		ic.mu.Unlock()
		return true
	}
	delete(ic.since, oldest)
	ic.mu.Unlock()
	closeConn(oldest)
	return false
}

// unwant cancels an ask of evict that no connection answered.
func (ic *idleConns) unwant() {
	ic.mu.Lock()
	if ic.want > 0 {
		ic.want--
	}
	ic.mu.Unlock()
}

// closeConn closes c's network connection (under TLS, without the
// close-notify alert a concurrent read of the server would race with):
// the server's read fails and it closes c itself.
func closeConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	_ = c.Close()
}
