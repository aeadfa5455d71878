package gateway

import (
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/wsgate/wsgate/internal/browsertest"
)

// TestDashboardInBrowser loads the dashboard in headless Chromium, sees a
// row per node, presses drain on one and sees its state change, and keeps
// a screenshot (in WSGATE_ARTIFACTS, or the test's temp dir).
func TestDashboardInBrowser(t *testing.T) {
	e := newEnv(t, 2, withAdmin)
	ctx := browsertest.Start(t)

	row := `tr.node[data-addr="` + e.addrs[0] + `"]`
	browse := func() (rows int, state string, png []byte, err error) {
		err = chromedp.Do(ctx,
			chromedp.Navigate("http://"+e.srv.AdminAddr().String()+"/"),
			chromedp.WaitVisible(row+` td.state.up`),
		)
		if err != nil {
			return
		}
		if rows, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tr.node").length`)); err != nil {
			return
		}
		err = chromedp.Do(ctx,
			chromedp.Click(row+` button.drain`),
			chromedp.WaitVisible(row+` td.state.draining, `+row+` td.state.drained`),
		)
		if err != nil {
			return
		}
		if state, err = chromedp.Run(ctx, chromedp.Text(row+` td.state`)); err != nil {
			return
		}
		png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 gives a PNG
		return
	}
	rows, state, png, err := browse()
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	if rows != 2 {
		t.Errorf("dashboard shows %d node rows, want 2", rows)
	}
	if !strings.HasPrefix(state, "drain") {
		t.Errorf("state after drain %q", state)
	}
	dir := os.Getenv("WSGATE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	if got := e.srv.current().pools["relay"].Node(e.addrs[0]).State().String(); !strings.HasPrefix(got, "drain") {
		t.Errorf("node state %q after the dashboard's drain", got)
	}
}

// attackPage is a page on another origin that, once loaded, makes the
// browser send the admin API the requests any web page can send without a
// CORS preflight: a form post of the given enctype (the browser then shows
// the admin's answer), or no-cors fetches, after which its title is "sent".
const attackPage = `<!doctype html><title>attack</title><body>
<form id="f" method="POST" action="{{.Drain}}" enctype="{{.Enctype}}"><input name="subject" value="mallory"></form>
<script>
if ("{{.Enctype}}") document.getElementById("f").submit();
else (async () => {
  const opts = [
    { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: '{"subject":"mallory"}' },
    { method: "POST", mode: "no-cors" },
    // Not allowed in no-cors mode: the browser drops the header.
    { method: "POST", mode: "no-cors", headers: { "Content-Type": "application/json" }, body: "{}" },
  ];
  for (const url of ["{{.Drain}}", "{{.Revoke}}", "{{.Reload}}"])
    for (const o of opts) await fetch(url, o).catch(() => {});
  // With the header the browser asks first (preflight), and is refused.
  await fetch("{{.Drain}}", { method: "POST", headers: { "X-Wsgate-Admin": "1" } }).then(
    () => { document.title = "preflight passed"; }, () => { document.title = "sent"; });
})();
</script>`

// TestDashboardRefusesCrossSitePages pins the admin API obeying web pages
// on other sites: from a page on another origin, a real browser's form
// posts and no-cors fetches drained a node, and a DNS-rebinding page
// (evil.example resolving to 127.0.0.1) read and steered the API as if it
// were the dashboard. Each must now be refused, and the node stay up.
func TestDashboardRefusesCrossSitePages(t *testing.T) {
	e := newEnv(t, 2, withAdmin)
	admin := e.srv.AdminAddr().String()
	_, port, _ := strings.Cut(admin, ":")
	ctx := browsertest.Start(t, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	node := e.addrs[0]
	api := "http://" + admin
	page := template.Must(template.New("attack").Parse(attackPage))
	var requests atomic.Int64
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = page.Execute(w, map[string]string{
			"Enctype": r.URL.Query().Get("enctype"),
			"Drain":   api + "/api/pools/relay/nodes/" + node + "/drain?migrate=1",
			"Revoke":  api + "/api/revoke",
			"Reload":  api + "/api/reload",
		})
		requests.Add(1)
	}))
	defer attacker.Close()
	drained := func() bool { return e.srv.current().pools["relay"].CheckView(node).AdminDrain }
	generation := e.srv.current().n

	for _, tc := range []struct{ enctype, answer string }{
		{"application/x-www-form-urlencoded", "is not this admin listener's own"},
		{"multipart/form-data", "is not this admin listener's own"},
		{"text/plain", "is not this admin listener's own"},
	} {
		err := chromedp.Do(ctx,
			chromedp.Navigate(attacker.URL+"/?enctype="+url.QueryEscape(tc.enctype)),
			chromedp.WaitVisible("pre"), // the admin's JSON answer, shown after the form posted
		)
		var answer string
		if err == nil {
			answer, err = chromedp.Run(ctx, chromedp.Text("body"))
		}
		if err != nil || !strings.Contains(answer, tc.answer) {
			t.Fatalf("form %s: %v, browser shows %q, want %q", tc.enctype, err, answer, tc.answer)
		}
	}
	err := chromedp.Do(ctx, chromedp.Navigate(attacker.URL+"/"))
	var title string
	if err == nil {
		title, err = chromedp.Run(ctx, chromedp.Poll[string](`document.title !== "attack" && document.title`))
	}
	if err != nil || title != "sent" {
		t.Fatalf("fetches: %v, title %q", err, title)
	}
	if drained() || e.srv.current().n != generation {
		t.Fatal("a page on another origin drained the node or reloaded the config")
	}

	// DNS rebinding: the browser takes evil.example:PORT for the page's
	// own origin, so its scripts may read and post there freely.
	err = chromedp.Do(ctx, chromedp.Navigate("http://evil.example:"+port+"/"))
	var shown string
	var status []int
	if err == nil {
		shown, err = chromedp.Run(ctx, chromedp.Text("body"))
	}
	if err == nil {
		status, err = chromedp.Run(ctx, chromedp.Evaluate[[]int](`Promise.all([
			fetch("/api/nodes").then(r => r.status),
			fetch("/api/config").then(r => r.status),
			fetch("/api/pools/relay/nodes/`+node+`/drain?migrate=1", { method: "POST", headers: { "X-Wsgate-Admin": "1" } }).then(r => r.status),
		])`, chromedp.EvalAwaitPromise))
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown, "does not name this admin listener") || fmt.Sprint(status) != "[403 403 403]" {
		t.Fatalf("rebinding page shows %q, gets %v; want the Host refusal and [403 403 403]", shown, status)
	}
	if drained() {
		t.Fatal("a rebinding page drained the node")
	}
	if requests.Load() == 0 {
		t.Fatal("the browser never loaded the attack page")
	}
}
