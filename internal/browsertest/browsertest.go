// Package browsertest starts headless Chromium for tests that drive a real
// browser (the dashboard, a room joined from a page). It is for tests only.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Start starts a headless Chromium for the test and returns its context,
// bounded to a minute; everything is stopped when the test ends. It skips
// the test when Chromium is not installed, except in CI (CI set), which
// must install it. Extra options are added to the defaults.
func Start(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; CI must install it (apt-get install chromium)")
		}
		t.Skip("chromium not installed (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 720),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}
