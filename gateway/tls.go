package gateway

import (
	"crypto/tls"
	"reflect"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/plugins/auth"
)

// startTLSWatch starts watching the TLS files (Start).
func (s *Server) startTLSWatch() { s.tls.Start(s.reloadTLSFiles) }

// stopTLSWatch stops the watchers for good (Shutdown).
func (s *Server) stopTLSWatch() { s.tls.Stop() }

// reloadTLSFiles loads the TLS files of the config in force again after
// one of them changed, unless the gateway is draining. The files are read
// before reload.mu is taken; under it, the set goes in only if the config
// in force still names those files (a config reload that named others
// read them itself), and only if no newer reading of them went in first
// (see edge.Certificates.Offer).
func (s *Server) reloadTLSFiles() {
	cfg := s.current().cfg
	set, err := s.tls.Load(cfg)
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	if s.draining.Load() || !reflect.DeepEqual(s.current().cfg.Gateway.TLS, cfg.Gateway.TLS) {
		return
	}
	s.tls.Reloaded(cfg, set, err, edgeMetrics{s.metrics})
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
