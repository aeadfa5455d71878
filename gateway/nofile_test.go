package gateway

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/testproc"
)

// lowNoFileEnv names the config a TestLowNoFileGateway process serves.
const lowNoFileEnv = "WSGATE_TEST_LOW_NOFILE_CONFIG"

// lowNoFile is the open-file limit the gateway of TestClientH2StreamsUnder
// LowNoFile runs under: max_conns is held to (256 - 128 - 2) / 2 = 63.
const lowNoFile = 256

// TestLowNoFileGateway is not a test of its own: run by
// TestClientH2StreamsUnderLowNoFile as a process of its own, it lowers the
// open-file limit to lowNoFile, serves the config named by lowNoFileEnv
// and logs to standard error until SIGTERM.
func TestLowNoFileGateway(t *testing.T) {
	path := os.Getenv(lowNoFileEnv)
	if path == "" {
		t.Skip("run by TestClientH2StreamsUnderLowNoFile")
	}
	lim := syscall.Rlimit{Cur: lowNoFile, Max: lowNoFile}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := conf.Parse(path, text)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(c, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	<-stop
}

// TestClientH2StreamsUnderLowNoFile pins max_conns over HTTP/2 where it
// matters, at the open-file limit: a gateway process under RLIMIT_NOFILE
// 256 (max_conns held to 63) gets a TLS connection of 250 WebSocket
// streams (h2_max_streams = 250), on an http1 pool whose every tunnel
// dials a node socket.
// Each stream beyond what the limit carries is answered 503; the process
// never runs out of descriptors (no EMFILE in its log, no dial failing on
// its side); once the connections close, its slots are back to zero and
// a new WebSocket gets in. Before, the streams took no slot: the tunnels
// dialed node sockets until accepts and dials failed for everyone.
func TestClientH2StreamsUnderLowNoFile(t *testing.T) {
	if os.Getenv(lowNoFileEnv) != "" {
		t.Skip("the gateway process's own run")
	}
	up := websocket.Upgrader{}
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}))
	t.Cleanup(node.Close)
	f := newTLSFiles(t)
	admin := testproc.FreeAddr(t)
	cfg := fmt.Sprintf(tlsGatewayConfig("", f.table(testproc.FreeAddr(t), "  h2 = true\n  h2_max_streams = 250"), catchAll),
		"127.0.0.1:0", strings.TrimPrefix(node.URL, "http://"))
	cfg = strings.Replace(cfg, "[admin]\nlisten = \"\"", fmt.Sprintf("[admin]\nlisten = %q", admin), 1)
	cfgFile := filepath.Join(t.TempDir(), "lownofile.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLowNoFileGateway$", "-test.count=1")
	cmd.Env = append(os.Environ(), lowNoFileEnv+"="+cfgFile)
	p := testproc.StartCmd(t, "gateway", cmd)
	testproc.WaitHTTP(t, "http://"+admin+"/readyz", http.StatusOK, 60*time.Second)
	tlsAddr := tlsListenAddr(t, cfg)

	const conns, streams = 1, 250
	ok, full := 0, 0
	var open []*websocket.Conn
	var hcs []*h2client.Conn
	for range conns {
		hc := h2DialAddr(t, tlsAddr, f)
		hcs = append(hcs, hc)
		d := hc.Dialer(20 * time.Second)
		for range streams {
			c, resp, err := d.Dial("ws://gw.test/room/nofile", nil)
			switch {
			case err == nil:
				ok++
				open = append(open, c)
			case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
				full++
			default:
				t.Fatalf("stream %d: %v %+v", ok+full+1, err, resp)
			}
		}
	}
	t.Logf("%d WebSockets opened, %d answered 503 (max_conns held to what %d descriptors carry)", ok, full, lowNoFile)
	if ok > 63 || full == 0 {
		t.Errorf("%d WebSockets opened, %d refused; want at most 63 (max_conns under RLIMIT_NOFILE %d), the rest 503", ok, full, lowNoFile)
	}
	if n := metricValue(t, admin, "wsgate_client_connections"); n != float64(ok) {
		t.Errorf("wsgate_client_connections %v with %d tunnels open, want %d", n, ok, ok)
	}
	for _, c := range open {
		c.Close()
	}
	for _, hc := range hcs {
		hc.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(t, admin, "wsgate_client_connections") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slots still held after every connection closed: %v", metricValue(t, admin, "wsgate_client_connections"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, _, err := wssDial(tlsAddr, "/room/nofile", f.clientConfig("gw.test"))
	if err != nil {
		t.Fatalf("a WebSocket after the attack: %v", err)
	}
	c.Close()
	_ = p.Signal(syscall.SIGTERM)
	if _, err := p.Wait(20 * time.Second); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"too many open files", "no_descriptors", "local_dial_error"} {
		if strings.Contains(p.Output(), bad) {
			t.Errorf("the gateway ran out of descriptors (%q in its log)", bad)
		}
	}
}

// tlsListenAddr is the [gateway.tls] listen address of cfg.
func tlsListenAddr(t *testing.T, cfg string) string {
	t.Helper()
	m := regexp.MustCompile(`\[gateway\.tls\]\n  listen = "([^"]+)"`).FindStringSubmatch(cfg)
	if m == nil {
		t.Fatal("no [gateway.tls] listen in the config")
	}
	return m[1]
}

// metricValue reads one unlabelled sample from the admin listener's
// /metrics.
func metricValue(t *testing.T, admin, name string) float64 {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second} // a gateway out of descriptors accepts nothing
	resp, err := c.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), name+" "); found {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	t.Fatalf("no %s in /metrics", name)
	return 0
}
