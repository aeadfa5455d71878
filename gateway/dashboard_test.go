package gateway

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardInBrowser loads the dashboard in headless Chromium, sees a
// row per node, presses drain on one and sees its state change, and keeps
// a screenshot (in WSGATE_ARTIFACTS, or the test's temp dir).
func TestDashboardInBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; CI must install it (apt-get install chromium)")
		}
		t.Skip("chromium not installed (apt-get install chromium)")
	}
	e := newEnv(t, 2, withAdmin)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 720),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()

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
	if got := e.srv.current().pools["relay"].node(e.addrs[0]).State().String(); !strings.HasPrefix(got, "drain") {
		t.Errorf("node state %q after the dashboard's drain", got)
	}
}
