package admin

import (
	"time"

	"github.com/valyala/fasthttp"
)

// TLSLister is the optional ability of a Gateway to list the TLS
// listener's certificates (GET /api/tls).
type TLSLister interface {
	// TLSCertificates lists the certificates the TLS listener serves,
	// files first in config order, then ACME's by name.
	TLSCertificates() []Certificate
}

// Certificate is one certificate of the TLS listener as GET /api/tls
// shows it.
type Certificate struct {
	// Names are its DNS names (SANs).
	Names []string `json:"names"`
	// Issuer is its issuer's distinguished name.
	Issuer string `json:"issuer"`
	// NotAfter is when it expires.
	NotAfter time.Time `json:"not_after"`
	// ExpiresIn is the seconds until then, negative once expired.
	ExpiresIn int64 `json:"expires_in_seconds"`
	// Source is "file" (a [[gateway.tls.certificates]] entry) or "acme".
	Source string `json:"source"`
	// File is the cert_file of a "file" certificate.
	File string `json:"file,omitempty"`
}

// TLS is the answer of GET /api/tls.
type TLS struct {
	Certificates []Certificate `json:"certificates"`
}

// tls serves GET /api/tls.
func (a *API) tls(ctx *fasthttp.RequestCtx) {
	if !method(ctx, fasthttp.MethodGet) {
		return
	}
	out := TLS{Certificates: []Certificate{}}
	if l, ok := a.gw.(TLSLister); ok {
		if cs := l.TLSCertificates(); cs != nil {
			out.Certificates = cs
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}
