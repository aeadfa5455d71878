package h2

import (
	"testing"
)

// TestNeverIndexedFields pins that credentials do not enter the dynamic
// table the encoder shares among every client on the connection (RFC 7541
// section 7.1.3): Sec-WebSocket-Protocol, Authorization, Cookie (of any
// length) and a :path with a query reach the node as never-indexed
// literals, on the first stream and on the next, as does any field a
// client over HTTP/2 sent never-indexed; other fields are indexed. Before,
// only Authorization and cookies under 20 bytes were.
func TestNeverIndexedFields(t *testing.T) {
	c, n, err := newFakeNode(t, Config{}, xconnect)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string][]string{
		"Sec-Websocket-Protocol": {"token.eyJhbGciOiJIUzI1NiJ9.secret"},
		"Authorization":          {"Bearer abc"},
		"Cookie":                 {"session=0123456789abcdef0123456789abcdef"},
		"Origin":                 {"https://app.test"},
		"X-Client-Secret":        {"s3"},
	}
	want := map[string]bool{
		":path": true, "sec-websocket-protocol": true, "authorization": true, "cookie": true,
		"x-client-secret": true, // the client sent it never-indexed
		"origin":          false, ":authority": false, ":method": false,
	}
	for i := range 2 {
		res := openAsync(c, &Request{Authority: "node.test", Path: "/ws?access_token=t0ken", Header: h,
			NeverIndexed: map[string]bool{"x-client-secret": true}})
		hf := n.nextHeaders()
		for _, f := range hf.Fields {
			if w, ok := want[f.Name]; ok && f.Sensitive != w {
				t.Errorf("stream %d: %s sensitive %v, want %v", i, f.Name, f.Sensitive, w)
			}
		}
		n.respond(hf.StreamID, 1000, ":status", "200")
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.s.Abort()
	}
	// Without a query the path is indexed as before.
	res := openAsync(c, &Request{Authority: "node.test", Path: "/ws"})
	hf := n.nextHeaders()
	for _, f := range hf.Fields {
		if f.Name == ":path" && f.Sensitive {
			t.Error(":path without a query sent never-indexed")
		}
	}
	n.respond(hf.StreamID, 1000, ":status", "200")
	if r := <-res; r.err != nil {
		t.Fatal(r.err)
	}
}
