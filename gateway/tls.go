package gateway

import (
	"crypto/tls"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/plugins/auth"
)

// swapTLS puts set in force for the next handshakes (connections already
// up keep what they negotiated) and, once the gateway has started, watches
// its files.
func (s *Server) swapTLS(set *edge.CertSet) { s.tls.Swap(set) }

// startTLSWatch starts watching the TLS files (Start).
func (s *Server) startTLSWatch() { s.tls.Start(s.reloadTLSFiles) }

// stopTLSWatch stops the watchers for good (Shutdown).
func (s *Server) stopTLSWatch() { s.tls.Stop() }

// reloadTLSFiles loads the TLS files of the config in force again after
// one of them changed (see edge.Certificates.Reload), unless the gateway
// is draining.
func (s *Server) reloadTLSFiles() {
	s.reload.mu.Lock() // one loading at a time, config reloads included
	defer s.reload.mu.Unlock()
	if s.draining.Load() {
		return
	}
	s.tls.Reload(s.current().cfg, edgeMetrics{s.metrics})
}

// tlsInfo is what auth plugins learn of a request's TLS connection. The
// client's certificates are handed over only as verified against
// client_ca_file: the chain, leaf first, up to that CA.
func tlsInfo(ctx *fasthttp.RequestCtx) *auth.TLSInfo {
	st := ctx.TLSConnectionState()
	if st == nil {
		return nil
	}
	info := &auth.TLSInfo{
		Version:            tls.VersionName(st.Version),
		CipherSuite:        tls.CipherSuiteName(st.CipherSuite),
		ServerName:         st.ServerName,
		NegotiatedProtocol: st.NegotiatedProtocol,
	}
	if len(st.VerifiedChains) > 0 {
		for _, c := range st.VerifiedChains[0] {
			info.PeerCertificates = append(info.PeerCertificates, c.Raw)
		}
	}
	return info
}
