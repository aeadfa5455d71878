package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthcheck pins `wsgate -healthcheck URL` (issue 19 item 5: the
// image has no shell, so compose had no way to check a container's
// health): 0 on a 2xx answer, 1 with the status and body on any other, 1
// with the error when nothing answers, 1 on a redirect it does not follow,
// 2 on a URL that is not http(s); no config is read.
func TestHealthcheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.Write([]byte("ok\n"))
		case "/moved":
			http.Redirect(w, r, "/readyz", http.StatusFound)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("draining\n"))
		}
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/readyz"
	ln.Close()

	for _, tc := range []struct {
		url       string
		code      int
		out, errs string
	}{
		{srv.URL + "/readyz", 0, "200 OK: ok", ""},
		{srv.URL + "/drain", 1, "", "503 Service Unavailable: draining"},
		{srv.URL + "/moved", 1, "", "302 Found"},
		{closed, 1, "", "connection refused"},
		{"127.0.0.1:9090/readyz", 2, "", "want an http:// or https:// URL"},
	} {
		var out, errb bytes.Buffer
		code := run([]string{"-healthcheck", tc.url, "-config", "/nonexistent.toml"}, &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.errs) {
			t.Errorf("-healthcheck %s: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.url, code, out.String(), errb.String(), tc.code, tc.out, tc.errs)
		}
	}
}
