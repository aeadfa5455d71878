package tlsrecord

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenSSLClient runs `openssl s_client -tls1_3` against a Session
// server, offering one suite at a time, so each of the three is run by a
// peer that is not crypto/tls: a line each way, then s_client's "K"
// command (a KeyUpdate with update_requested: the server rotates its read
// key, and its next record is its own KeyUpdate), a line each way under
// the new keys, then s_client's close_notify at the end of its input. It
// is skipped without openssl.
func TestOpenSSLClient(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl")
	}
	for id, name := range suiteNames {
		t.Run(name, func(t *testing.T) {
			ts := newTestServer(t, nil)
			caFile := filepath.Join(t.TempDir(), "ca.pem")
			if err := os.WriteFile(caFile, ts.ca.PEM(), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "s_client", "-connect", ts.ln.Addr().String(),
				"-tls1_3", "-ciphersuites", tls.CipherSuiteName(id), "-servername", "localhost",
				"-CAfile", caFile, "-verify_return_error")
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			stderr, _ := cmd.StderrPipe()
			ch := ts.serveOne(t)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cancel()
			errLines := lines(stderr)
			outLines := lines(stdout)

			r := <-ch
			server := wantCarried(t, r)
			if r.session.suite.id != id {
				t.Fatalf("suite %s", tls.CipherSuiteName(r.session.suite.id))
			}
			in := bufio.NewReader(server)
			say := func(s string) {
				t.Helper()
				if _, err := io.WriteString(stdin, s); err != nil {
					t.Fatal(err)
				}
			}
			hear := func(want string) {
				t.Helper()
				if line, err := in.ReadString('\n'); err != nil || line != want {
					t.Fatalf("server read %q, %v; want %q", line, err, want)
				}
			}
			echo := func(s string) {
				t.Helper()
				if _, err := server.Write([]byte(s)); err != nil {
					t.Fatal(err)
				}
				waitFor(t, outLines, strings.TrimSuffix(s, "\n"))
			}

			say("hello from openssl\n")
			hear("hello from openssl\n")
			echo("hello from the session\n")

			writeSecret := r.session.out.secret
			say("K\n")
			waitFor(t, errLines, "KEYUPDATE")
			say("after the update\n")
			hear("after the update\n")
			if !r.session.keyUpdateDue {
				t.Fatal("no KeyUpdate due after update_requested")
			}
			echo("reply after the update\n")
			// Its KeyUpdate under the old key, then the reply at 0 under the new.
			if r.session.keyUpdateDue || r.session.out.seq != 1 || bytes.Equal(r.session.out.secret, writeSecret) {
				t.Fatalf("write side after the update: due %v, seq %d", r.session.keyUpdateDue, r.session.out.seq)
			}

			stdin.Close()
			if line, err := in.ReadString('\n'); line != "" || err != io.EOF {
				t.Fatalf("after s_client's input ended: %q, %v; want close_notify", line, err)
			}
		})
	}
}

// lines delivers r's lines on a channel, closed at the end of r.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// waitFor reads ch until a line that is want.
func waitFor(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	var seen []string
	for line := range ch {
		if strings.TrimSpace(line) == want {
			return
		}
		seen = append(seen, line)
	}
	t.Fatalf("no line %q; saw:\n%s", want, strings.Join(seen, "\n"))
}
