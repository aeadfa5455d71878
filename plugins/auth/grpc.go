package auth

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	authpb "github.com/wsgate/wsgate/plugins/auth/proto"
	"google.golang.org/grpc"
)

// grpcServer is the plugin-side shim: it serves the gRPC service by
// calling the plugin's Authenticator.
type grpcServer struct {
	authpb.UnimplementedAuthenticatorServer
	impl Authenticator
}

// Configure implements authpb.AuthenticatorServer.
func (s *grpcServer) Configure(ctx context.Context, in *authpb.ConfigureRequest) (out *authpb.ConfigureResponse, err error) {
	defer recoverPanic(&err)
	config, err := decodeConfig(in.GetConfigJson())
	if err != nil {
		return nil, toStatus(err, true)
	}
	if err := s.impl.Configure(incomingConfigDir(ctx), config); err != nil {
		return nil, toStatus(err, true)
	}
	out = &authpb.ConfigureResponse{}
	if ck, ok := s.impl.(CacheKeyer); ok {
		out.CacheKey = ck.CacheKey()
	}
	return out, nil
}

// Authenticate implements authpb.AuthenticatorServer.
func (s *grpcServer) Authenticate(ctx context.Context, in *authpb.AuthenticateRequest) (out *authpb.AuthenticateResponse, err error) {
	defer recoverPanic(&err)
	d, err := s.impl.Authenticate(ctx, requestFromProto(in))
	if err != nil {
		return nil, toStatus(err, false)
	}
	if d == nil {
		return nil, toStatus(fmt.Errorf("Authenticate returned neither a decision nor an error"), false)
	}
	return decisionToProto(d), nil
}

// recoverPanic turns a panic in the plugin's code into an error for this
// call, so one bad request does not take the process down.
func recoverPanic(err *error) {
	if r := recover(); r != nil {
		*err = toStatus(fmt.Errorf("plugin panic: %v\n%s", r, debug.Stack()), false)
	}
}

// GRPCClient is the gateway-side shim: an Authenticator that calls a plugin
// process over gRPC. Errors wrap ErrInvalidConfig, ErrPlugin or
// ErrTransport, or are the caller's context error. It is safe for
// concurrent use once Configure has returned.
type GRPCClient struct {
	client   authpb.AuthenticatorClient
	done     <-chan struct{}
	cacheKey []string
}

// NewGRPCClient returns a client for the plugin served on conn. done, if
// not nil, is closed when the plugin process exits.
func NewGRPCClient(conn grpc.ClientConnInterface, done <-chan struct{}) *GRPCClient {
	return &GRPCClient{client: authpb.NewAuthenticatorClient(conn), done: done}
}

// Done returns a channel closed when the plugin process exits (nil if the
// client was built without one).
func (c *GRPCClient) Done() <-chan struct{} { return c.done }

// Configure implements Authenticator: it sends config, and the config
// directory ctx carries (see WithConfigDir), to the plugin. It also
// records the plugin's cache key (see CacheKey).
func (c *GRPCClient) Configure(ctx context.Context, config map[string]any) error {
	b, err := encodeConfig(config)
	if err != nil {
		return fmt.Errorf("%w: encode config: %w", ErrInvalidConfig, err)
	}
	out, err := c.client.Configure(outgoingConfigDir(ctx), &authpb.ConfigureRequest{ConfigJson: b})
	if err != nil {
		return fromStatus(ctx, err)
	}
	c.cacheKey = out.GetCacheKey()
	return nil
}

// CacheKey implements CacheKeyer: the parts the plugin named in its answer
// to Configure.
func (c *GRPCClient) CacheKey() []string { return c.cacheKey }

// Authenticate implements Authenticator.
func (c *GRPCClient) Authenticate(ctx context.Context, req *Request) (*Decision, error) {
	out, err := c.client.Authenticate(ctx, requestToProto(req))
	if err != nil {
		return nil, fromStatus(ctx, err)
	}
	return decisionFromProto(out), nil
}

func requestToProto(r *Request) *authpb.AuthenticateRequest {
	out := &authpb.AuthenticateRequest{
		Method:     r.Method,
		Host:       r.Host,
		Path:       r.Path,
		RawQuery:   r.RawQuery,
		ClientAddr: r.ClientAddr,
		Route:      r.Route,
	}
	if len(r.Header) > 0 {
		out.Headers = make(map[string]*authpb.HeaderValues, len(r.Header))
		for k, v := range r.Header {
			out.Headers[k] = &authpb.HeaderValues{Values: v}
		}
	}
	if t := r.TLS; t != nil {
		out.Tls = &authpb.TLSInfo{
			Version:            t.Version,
			CipherSuite:        t.CipherSuite,
			ServerName:         t.ServerName,
			NegotiatedProtocol: t.NegotiatedProtocol,
			PeerCertificates:   t.PeerCertificates,
		}
	}
	return out
}

func requestFromProto(in *authpb.AuthenticateRequest) *Request {
	r := &Request{
		Method:     in.GetMethod(),
		Host:       in.GetHost(),
		Path:       in.GetPath(),
		RawQuery:   in.GetRawQuery(),
		ClientAddr: in.GetClientAddr(),
		Route:      in.GetRoute(),
		Header:     make(http.Header, len(in.GetHeaders())),
	}
	for k, v := range in.GetHeaders() {
		r.Header[http.CanonicalHeaderKey(k)] = v.GetValues()
	}
	if t := in.GetTls(); t != nil {
		r.TLS = &TLSInfo{
			Version:            t.GetVersion(),
			CipherSuite:        t.GetCipherSuite(),
			ServerName:         t.GetServerName(),
			NegotiatedProtocol: t.GetNegotiatedProtocol(),
			PeerCertificates:   t.GetPeerCertificates(),
		}
	}
	return r
}

func decisionToProto(d *Decision) *authpb.AuthenticateResponse {
	out := &authpb.AuthenticateResponse{
		Allow:           d.Allow,
		Status:          int32(d.Status),
		Reason:          d.Reason,
		Headers:         d.Headers,
		ResponseHeaders: d.ResponseHeaders,
		AffinityKey:     d.AffinityKey,
		CacheTtlMs:      d.CacheTTL.Milliseconds(),
		Subject:         d.Subject,
		CredentialId:    d.CredentialID,
	}
	if !d.Expires.IsZero() {
		out.ExpiresUnixMs = d.Expires.UnixMilli()
	}
	return out
}

func decisionFromProto(in *authpb.AuthenticateResponse) *Decision {
	d := &Decision{
		Allow:           in.GetAllow(),
		Status:          int(in.GetStatus()),
		Reason:          in.GetReason(),
		Headers:         in.GetHeaders(),
		ResponseHeaders: in.GetResponseHeaders(),
		AffinityKey:     in.GetAffinityKey(),
		CacheTTL:        time.Duration(in.GetCacheTtlMs()) * time.Millisecond,
		Subject:         in.GetSubject(),
		CredentialID:    in.GetCredentialId(),
	}
	if ms := in.GetExpiresUnixMs(); ms != 0 {
		d.Expires = time.UnixMilli(ms)
	}
	return d
}

var _ Authenticator = (*GRPCClient)(nil)
var _ CacheKeyer = (*GRPCClient)(nil)
