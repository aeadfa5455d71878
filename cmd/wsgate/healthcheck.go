package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// healthcheckTimeout bounds the whole request of -healthcheck: connect,
// request and the start of the answer. Container runtimes kill a check that
// outlasts their own timeout (Docker's default is 30 s), so the check
// gives up first and says why.
const healthcheckTimeout = 3 * time.Second

// healthcheck is `wsgate -healthcheck URL`, for images without a shell or
// curl: it GETs target and returns 0 on a 2xx answer, else 1, printing the
// status (and the start of the body, such as "draining") or the error.
// Redirects are not followed and no proxy from the environment is used: the
// answer judged is the target's own.
func healthcheck(target string, stdout, stderr io.Writer) int {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "wsgate: -healthcheck %q: want an http:// or https:// URL\n", target)
		return 2
	}
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "wsgate: healthcheck %s: %v\n", target, err)
		return 1
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s: %w", healthcheckTimeout, err)
		}
		fmt.Fprintf(stderr, "wsgate: healthcheck %s: %v\n", target, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	line := fmt.Sprintf("healthcheck %s: %s", target, resp.Status)
	if b := strings.TrimSpace(string(body)); b != "" {
		line += ": " + strings.ReplaceAll(b, "\n", " ")
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintln(stderr, "wsgate: "+line)
		return 1
	}
	fmt.Fprintln(stdout, line)
	return 0
}
