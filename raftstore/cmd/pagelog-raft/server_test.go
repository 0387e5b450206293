package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// inProcess is a node run by run in this process.
type inProcess struct {
	base   string     // scheme://host:port of its HTTP API
	stderr *os.File   // its stderr, in the test's directory
	stop   func() int // cancels run and returns its status
}

// errors returns what the node wrote on stderr so far.
func (p *inProcess) errors() string {
	b, _ := os.ReadFile(p.stderr.Name())
	return string(b)
}

// startRun runs the command with args until stop or the end of the test;
// lines receives what it prints on stdout.
func startRun(t *testing.T, args []string) (p *inProcess, lines <-chan string, done <-chan struct{}) {
	t.Helper()
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stderr.Close() })
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 16)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	exit, code := make(chan struct{}), 0
	go func() {
		code = run(ctx, args, w, stderr)
		w.Close()
		close(exit)
	}()
	p = &inProcess{stderr: stderr, stop: func() int {
		cancel()
		<-exit
		return code
	}}
	t.Cleanup(func() { p.stop(); r.Close() })
	return p, out, exit
}

// runNode runs the command with args and --http 127.0.0.1:0 until the test
// ends (or stop), and waits for the line that says where it serves.
func runNode(t *testing.T, args ...string) *inProcess {
	t.Helper()
	p, lines, _ := startRun(t, append(args, "--http", "127.0.0.1:0", "--log-level", "warn"))
	select {
	case line, ok := <-lines:
		// node n1: raft 127.0.0.1:7001, http://127.0.0.1:8001 (dir D)
		_, rest, _ := strings.Cut(line, ", ")
		p.base, _, _ = strings.Cut(rest, " ")
		if !ok || !strings.Contains(p.base, "://") {
			t.Fatalf("run %q: exit %d, stdout %q; stderr:\n%s", args, p.stop(), line, p.errors())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("run %q: not serving after 20 s; stderr:\n%s", args, p.errors())
	}
	return p
}

// singleNode returns the flags of a cluster of one node in a new directory.
func singleNode(t *testing.T) []string {
	return []string{"--id", "n1", "--dir", filepath.Join(t.TempDir(), "n1"), "--peers", "n1=" + freePorts(t, 1)[0], "--no-sync"}
}

// waitReady waits until the node leads.
func (p *inProcess) waitReady(t *testing.T, c *http.Client) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		resp, err := c.Get(p.base + "/status")
		if err == nil {
			var st struct{ Ready bool }
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Ready {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: no leader within 20 s; stderr:\n%s", p.base, p.errors())
}

// Clients that send their headers and then trickle a body, more of them
// than --max-conns, are cut by --read-timeout, and /status still answers
// (once a place is free): they cannot hold the node's descriptors.
func TestSlowClientsAreCutByTimeouts(t *testing.T) {
	const maxConns, slow = 4, 12
	readTimeout := 400 * time.Millisecond
	p := runNode(t, append(singleNode(t), "--max-conns", fmt.Sprint(maxConns), "--read-timeout", readTimeout.String(),
		"--write-timeout", readTimeout.String(), "--idle-timeout", readTimeout.String())...)
	client := &http.Client{Timeout: 20 * time.Second}
	p.waitReady(t, client)
	addr := strings.TrimPrefix(p.base, "http://")

	start := time.Now()
	cut := make(chan error, slow)
	var connected sync.WaitGroup
	connected.Add(slow)
	for i := range slow {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				connected.Done()
				cut <- err
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /send HTTP/1.1\r\nHost: n1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"body\":\"")
			connected.Done()
			go func() { // a byte of body every 20 ms, until the server hangs up
				for {
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			// The server answers (a 400 for the body cut short) or just
			// closes: either way the connection ends.
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err = io.Copy(io.Discard, c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				cut <- fmt.Errorf("slow client %d: still connected after 30 s", i)
				return
			}
			cut <- nil
		}()
	}
	// /status comes after the slow clients in the accept queue: it is
	// served once the timeouts have cut enough of them.
	connected.Wait()
	resp, err := client.Get(p.base + "/status")
	if err != nil {
		t.Fatalf("/status behind %d slow clients: %v", slow, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/status: %d", resp.StatusCode)
	}
	for range slow {
		if err := <-cut; err != nil {
			t.Error(err)
		}
	}
	// At most maxConns at once, each cut after readTimeout: the last
	// batch ends after slow/maxConns timeouts.
	if took := time.Since(start); took < slow/maxConns*readTimeout {
		t.Errorf("%d slow clients ended in %v: fewer than %d at a time", slow, took, maxConns)
	}
	resp, err = client.Get(p.base + "/status")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/status after the slow clients: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A receive waits for its ?wait, longer than the read and write timeouts,
// and answers (204 here) instead of being cut or ended early; so does one
// that carries a body (some clients send {} with every POST), of a known
// length or chunked: a message handed out after --write-timeout would
// otherwise be lost to its client until its visibility timeout.
func TestReceiveWaitOutlastsTimeouts(t *testing.T) {
	timeout := 200 * time.Millisecond
	p := runNode(t, append(singleNode(t), "--read-timeout", timeout.String(), "--write-timeout", timeout.String())...)
	client := &http.Client{Timeout: 20 * time.Second}
	p.waitReady(t, client)
	wait := 5 * timeout
	type receive struct {
		path string
		body io.Reader
	}
	for _, r := range []receive{{"/receive", nil}, {"/receive", strings.NewReader("{}")},
		{"/receive", io.MultiReader(strings.NewReader("{}"))}, {"/queues/jobs/receive", nil}} {
		body := r.body
		req, err := http.NewRequest("POST", p.base+r.path+"?wait="+wait.String(), body)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s?wait=%v with a body of length %d, timeouts of %v: %v", r.path, wait, req.ContentLength, timeout, err)
		}
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != http.StatusNoContent || took < wait {
			t.Fatalf("%s?wait=%v with a body of length %d: %d after %v; want 204 after the whole wait", r.path, wait, req.ContentLength, resp.StatusCode, took)
		}
	}
	// The connection served its next request as usual.
	if resp, err := client.Get(p.base + "/status"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/status after the receive: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, both signed by the CA, as PEM files in dir.
type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	client                    tls.Certificate
}

func newTestPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: fmt.Sprint("leaf ", serial)},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := leaf(2, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	cliDER, cliKey := leaf(3, x509.ExtKeyUsageClientAuth, nil)
	pki := &testPKI{caFile: write("ca.pem", "CERTIFICATE", caDER), certFile: write("server.pem", "CERTIFICATE", srvDER),
		pool: x509.NewCertPool(), client: tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}}
	der, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pki.keyFile = write("server-key.pem", "EC PRIVATE KEY", der)
	pki.pool.AddCert(ca)
	return pki
}

// Over HTTPS with client certificates (--client-ca) and --token-file: a
// client without a certificate signed by the CA is refused, and the routes
// that change state answer 401 without the token; /status and /digest
// need none.
func TestWriteRoutesNeedTokenAndClientCertificate(t *testing.T) {
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	const token = "s3cret-token"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := runNode(t, append(singleNode(t), "--tls-cert", pki.certFile, "--tls-key", pki.keyFile,
		"--client-ca", pki.caFile, "--token-file", tokenFile)...)
	if !strings.HasPrefix(p.base, "https://") {
		t.Fatalf("serves %s, want https://", p.base)
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}}}
	p.waitReady(t, client)

	noCert := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	if resp, err := noCert.Get(p.base + "/status"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate: %d, want the handshake refused", resp.StatusCode)
	}
	if resp, err := http.Get("http" + strings.TrimPrefix(p.base, "https") + "/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("plain HTTP: %d, want 400", resp.StatusCode)
		}
	}
	do := func(method, path, auth, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", method, path)
		}
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, auth, body string
		want                     int
	}{
		{"POST", "/send", "", `{"body":"a"}`, 401},
		{"POST", "/send", "Bearer wrong", `{"body":"a"}`, 401},
		{"POST", "/send", "Bearer " + token + "x", `{"body":"a"}`, 401},
		{"POST", "/send", "Basic " + token, `{"body":"a"}`, 401},
		{"POST", "/receive", "", "", 401},
		{"POST", "/delete", "", `{"ids":[1]}`, 401},
		{"POST", "/visibility", "", `{"id":1,"timeout":"0s"}`, 401},
		{"GET", "/status", "", "", 200},
		{"GET", "/digest", "", "", 200},
		{"POST", "/send", "Bearer " + token, `{"body":"a"}`, 200},
		// With a wait: the send above may not be applied yet when the
		// receive comes (a 204 under emulated arm).
		{"POST", "/receive?wait=10s", "bearer " + token, "", 200},
		{"POST", "/delete", "Bearer " + token, `{"ids":[1]}`, 200},
		{"POST", "/queues/jobs/send", "", `{"body":"a"}`, 401},
		{"POST", "/queues/jobs/receive", "", "", 401},
		{"PUT", "/queues/jobs", "", "", 401},
		{"DELETE", "/queues/jobs", "", "", 401},
		{"GET", "/queues", "", "", 200},
		{"PUT", "/queues/jobs", "Bearer " + token, "", 200},
		{"POST", "/queues/jobs/send", "Bearer " + token, `{"body":"a"}`, 200},
		{"GET", "/queues/jobs", "", "", 200},
		{"DELETE", "/queues/jobs", "Bearer " + token, "", 200},
	} {
		if code := do(c.method, c.path, c.auth, c.body); code != c.want {
			t.Errorf("%s %s (Authorization %q): %d, want %d", c.method, c.path, c.auth, code, c.want)
		}
	}
}

// A node restarted with --peers other than the configuration raft stored
// refuses to start, naming both; with the stored ones it starts.
func TestRestartWithOtherPeersIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	ports := freePorts(t, 2)
	args := func(addr string) []string {
		return []string{"--id", "n1", "--dir", dir, "--peers", "n1=" + addr, "--no-sync"}
	}
	p := runNode(t, args(ports[0])...)
	if code := p.stop(); code != 0 {
		t.Fatalf("first run: exit %d; stderr:\n%s", code, p.errors())
	}
	q, lines, done := startRun(t, append(args(ports[1]), "--http", "127.0.0.1:0"))
	select {
	case <-done:
	case line, ok := <-lines: // it serves: stop it (closed: it ended)
		if ok {
			q.stop()
			t.Errorf("the node started with --peers n1=%s (stored n1=%s): %q", ports[1], ports[0], line)
		}
	}
	code := q.stop()
	if msg := q.errors(); code != 1 || !strings.Contains(msg, "n1="+ports[0]) || !strings.Contains(msg, "n1="+ports[1]) ||
		!strings.Contains(msg, "stored") {
		t.Fatalf("restart with --peers n1=%s (stored n1=%s): exit %d, stderr %q; want 1 and both addresses", ports[1], ports[0], code, msg)
	}
	p = runNode(t, args(ports[0])...)
	p.waitReady(t, &http.Client{Timeout: 20 * time.Second})
	if code := p.stop(); code != 0 {
		t.Fatalf("restart with the stored peers: exit %d; stderr:\n%s", code, p.errors())
	}
}

// A node's directory started with another --id (and the same --peers)
// refuses to start, naming both ids; with its own id it starts.
func TestRestartWithOtherIDIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	ports := freePorts(t, 2)
	args := func(id string) []string {
		return []string{"--id", id, "--dir", dir, "--peers", "n1=" + ports[0] + ",n2=" + ports[1], "--no-sync"}
	}
	p := runNode(t, args("n1")...)
	if code := p.stop(); code != 0 {
		t.Fatalf("first run: exit %d; stderr:\n%s", code, p.errors())
	}
	q, lines, done := startRun(t, append(args("n2"), "--http", "127.0.0.1:0"))
	select {
	case <-done:
	case line, ok := <-lines: // it serves: stop it (closed: it ended)
		if ok {
			q.stop()
			t.Errorf("n1's directory started as n2: %q", line)
		}
	}
	code := q.stop()
	if msg := q.errors(); code != 1 || !strings.Contains(msg, "node id differs") || !strings.Contains(msg, `"n1"`) || !strings.Contains(msg, `"n2"`) {
		t.Fatalf("restart as n2: exit %d, stderr %q; want 1 and both ids", code, msg)
	}
	p = runNode(t, args("n1")...)
	if code := p.stop(); code != 0 {
		t.Fatalf("restart as n1: exit %d; stderr:\n%s", code, p.errors())
	}
}
