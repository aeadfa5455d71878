package admin

import (
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/conf"
)

// TestAdminOwnHost pins which Host names the admin listener takes as its
// own, including names built to look like one (a DNS-rebinding page
// chooses its name freely, but cannot send an IP address or localhost).
func TestAdminOwnHost(t *testing.T) {
	gw := &fakeGateway{cfg: &conf.Config{Admin: conf.Admin{Hosts: []string{"gw1.example.test."}}}}
	a := &API{gw: gw, listenHost: "gw-admin.test"}
	for _, tc := range []struct {
		host string
		own  bool
	}{
		{"127.0.0.1:9090", true},
		{"127.0.0.1", true},
		{"[::1]:9090", true},
		{"[::1]", true},
		{"10.1.2.3:80", true}, // a port map or the machine's own address
		{"localhost", true},
		{"LOCALHOST.:18080", true},
		{"gw-admin.test:9090", true}, // the host of admin.listen
		{"Gw1.Example.Test:443", true},
		{"gw1.example.test.", true},
		{"", true}, // no browser sends a request without Host
		{"evil.example:9090", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.evil.example", false},
		{"gw1.example.test.evil.example", false},
		{"2130706433", false}, // 127.0.0.1 as one number: a name to us
		{"[]", false},
		{"[::1", false},
	} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetHost(tc.host)
		if got := a.ownHost(&ctx); got != tc.own {
			t.Errorf("Host %q: own = %v, want %v (%d %s)", tc.host, got, tc.own, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
