package acmecert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ProbeTimeout bounds Probe's request, answer included.
const ProbeTimeout = 10 * time.Second

// maxDirectory bounds the directory answer Probe reads; a directory is a
// few hundred bytes.
const maxDirectory = 64 << 10

// ErrUntrusted is wrapped by Probe's error when the directory's HTTPS
// certificate does not chain to the CAs trusted for it: ca_file's, or
// the system's without one. A private ACME server (Pebble, step-ca)
// needs its root in ca_file.
var ErrUntrusted = errors.New("acme: the directory's certificate is not trusted")

// Probe fetches the ACME directory at url, trusting roots for its HTTPS
// (nil: the system's), within ProbeTimeout or ctx, and checks that the
// answer is a directory (RFC 8555 section 7.1.1: JSON naming newNonce,
// newAccount and newOrder). caFile is only named in the error of a
// certificate that does not verify. It orders nothing and sends no
// account; `wsgate -check` runs it, so a start that could never obtain
// a certificate is seen before it.
func Probe(ctx context.Context, url string, roots *x509.CertPool, caFile string) error {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, Proxy: http.ProxyFromEnvironment}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("ACME directory %s: %w", url, err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			trust := "ca_file " + caFile
			if caFile == "" {
				trust = "the system's roots (ca_file is not set: a private ACME server such as Pebble or step-ca needs its root CA there)"
			}
			return fmt.Errorf("%w: %s does not verify against %s: %w", ErrUntrusted, url, trust, verr.Err)
		}
		return fmt.Errorf("ACME directory %s cannot be reached: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDirectory))
	if err != nil {
		return fmt.Errorf("ACME directory %s: reading the answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ACME directory %s answered %s, want 200 and the directory", url, resp.Status)
	}
	var dir struct {
		NewNonce   string `json:"newNonce"`
		NewAccount string `json:"newAccount"`
		NewOrder   string `json:"newOrder"`
	}
	if err := json.Unmarshal(body, &dir); err != nil {
		return fmt.Errorf("ACME directory %s answered something else than a directory (JSON naming newNonce, newAccount and newOrder): %w", url, err)
	}
	if dir.NewNonce == "" || dir.NewAccount == "" || dir.NewOrder == "" {
		return fmt.Errorf("ACME directory %s answered JSON without newNonce, newAccount and newOrder: not an ACME directory", url)
	}
	return nil
}
