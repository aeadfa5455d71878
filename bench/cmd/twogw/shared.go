package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/wsgate/wsgate/bench/internal/stack"
)

// shareCounts turns [pools.shared_counts] on in every gateway of st, on
// the stack's redis-server with the default interval, by rewriting its
// config and reloading it through the admin API.
func shareCounts(st *stack.Stack) error {
	section := fmt.Sprintf("  [pools.shared_counts]\n  redis = %q\n", "redis://"+st.RedisAddr+"/0")
	for _, g := range st.Gateways {
		b, err := os.ReadFile(g.Config)
		if err != nil {
			return err
		}
		cfg, routes, ok := strings.Cut(string(b), "\n[[routes]]")
		if !ok {
			return fmt.Errorf("%s: no [[routes]] to put [pools.shared_counts] before", g.Config)
		}
		if err := os.WriteFile(g.Config, []byte(cfg+"\n"+section+"\n[[routes]]"+routes), 0o644); err != nil {
			return err
		}
		c := http.Client{Timeout: 10 * time.Second}
		req, err := http.NewRequest(http.MethodPost, "http://"+g.Admin+"/api/reload", nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-Wsgate-Admin", "1")
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("reload %s: %w", g.Config, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("reload %s: %s: %s", g.Config, resp.Status, body)
		}
	}
	return nil
}

// writeExchanges prints each gateway's shared-count exchanges (Redis
// commands) from its /metrics, and their rate over took.
func writeExchanges(w io.Writer, st *stack.Stack, took time.Duration) {
	for i, g := range st.Gateways {
		b, err := g.Metrics()
		if err != nil {
			fmt.Fprintf(w, "gateway %d: metrics: %v\n", i+1, err)
			continue
		}
		var ok, failed float64
		for line := range strings.Lines(string(b)) {
			var v float64
			switch {
			case strings.HasPrefix(line, `wsgate_shared_counts_exchanges_total{pool="relay",result="ok"}`):
				_, _ = fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
				ok = v
			case strings.HasPrefix(line, `wsgate_shared_counts_exchanges_total{pool="relay",result="error"}`):
				_, _ = fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
				failed = v
			}
		}
		fmt.Fprintf(w, "gateway %d: %.0f exchanges ok, %.0f failed, %.2f Redis commands/s over %v\n",
			i+1, ok, failed, (ok+failed)/took.Seconds(), took.Round(time.Second))
	}
}
