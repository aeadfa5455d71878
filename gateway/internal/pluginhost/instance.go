package pluginhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/plugins/auth"
)

// instance is one running plugin process, configured. Calls hold it with
// acquire/release so a retired instance is stopped only once its in-flight
// calls are done. It is safe for concurrent use.
type instance struct {
	gen      uint64 // unique per instance; part of every cache key
	name     string
	client   *plugin.Client
	auth     *auth.GRPCClient
	keyParts []keyPart // nil: decisions are never cached
	pid      int
	started  time.Time

	hung atomic.Bool // set when calls time out: the process is killed

	mu       sync.Mutex
	inflight int
	retired  bool
	drained  chan struct{} // closed once retired and inflight == 0
	stopOnce sync.Once
}

var instanceGen atomic.Uint64

// startInstance verifies, starts and configures one process for spec.
func startInstance(ctx context.Context, spec conf.Plugin, o *Options) (*instance, error) {
	var secure *plugin.SecureConfig
	if spec.SHA256 != "" {
		want, err := hex.DecodeString(strings.ToLower(spec.SHA256))
		if err != nil || len(want) != sha256.Size {
			return nil, fmt.Errorf("plugin %q: sha256 %q is not 64 hex digits", spec.Name, spec.SHA256)
		}
		got, err := fileSHA256(spec.Path)
		if err != nil {
			return nil, fmt.Errorf("plugin %q: checksum %s: %w", spec.Name, spec.Path, err)
		}
		if !bytes.Equal(got, want) {
			return nil, fmt.Errorf("%w: plugin %q: %s has sha256 %x, config says %s", ErrChecksum, spec.Name, spec.Path, got, spec.SHA256)
		}
		// go-plugin checks again right before it starts the process.
		secure = &plugin.SecureConfig{Checksum: want, Hash: sha256.New()}
	}
	lw := &logWriter{log: o.Logger, plugin: spec.Name}
	cmd := exec.Command(spec.Path)
	dieWithGateway(cmd)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  auth.Handshake,
		Plugins:          plugin.PluginSet{auth.PluginName: &auth.Plugin{}},
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     o.StartTimeout,
		Stderr:           lw,
		SyncStderr:       lw,
		SyncStdout:       lw,
		// Our own logs say what happens to the process; go-plugin's
		// would repeat it in another format.
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Off, Output: io.Discard}),
	})
	in := &instance{
		gen:     instanceGen.Add(1),
		name:    spec.Name,
		client:  client,
		started: time.Now(),
		drained: make(chan struct{}),
	}
	if err := in.connect(ctx, spec); err != nil {
		in.stop()
		return nil, fmt.Errorf("plugin %q (%s): %w", spec.Name, spec.Path, err)
	}
	return in, nil
}

// connect starts the process, dispenses the client and configures it.
func (in *instance) connect(ctx context.Context, spec conf.Plugin) error {
	rpc, err := in.client.Client()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if rc := in.client.ReattachConfig(); rc != nil {
		in.pid = rc.Pid
	}
	raw, err := rpc.Dispense(auth.PluginName)
	if err != nil {
		return fmt.Errorf("dispense: %w", err)
	}
	a, ok := raw.(*auth.GRPCClient)
	if !ok {
		return fmt.Errorf("dispense: unexpected client type %T", raw)
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout(spec))
	defer cancel()
	if err := a.Configure(auth.WithConfigDir(cctx, spec.ConfigDir), spec.Config); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	parts, err := parseCacheKey(a.CacheKey())
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	if len(parts) > 0 {
		in.keyParts = parts
	}
	in.auth = a
	return nil
}

// exited reports whether the process is gone (crashed, killed) or was
// found hung.
func (in *instance) exited() bool {
	if in.hung.Load() {
		return true
	}
	select {
	case <-in.auth.Done():
		return true
	default:
		return false
	}
}

// acquire registers a call; false if the instance is retired.
func (in *instance) acquire() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.retired {
		return false
	}
	in.inflight++
	return true
}

// release ends a call registered by acquire.
func (in *instance) release() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.inflight--
	if in.retired && in.inflight == 0 {
		close(in.drained)
	}
}

// retire stops new calls, waits up to grace for the in-flight ones, then
// stops the process.
func (in *instance) retire(grace time.Duration) {
	in.mu.Lock()
	if !in.retired {
		in.retired = true
		if in.inflight == 0 {
			close(in.drained)
		}
	}
	in.mu.Unlock()
	if !in.exited() {
		t := time.NewTimer(grace)
		select {
		case <-in.drained:
		case <-t.C:
		}
		t.Stop()
	}
	in.stop()
}

// stop ends the process and waits for it. A hung process is killed at
// once (a graceful stop would wait for its stuck calls); a live one is
// asked to stop, then killed if it does not.
func (in *instance) stop() {
	in.stopOnce.Do(func() {
		if in.hung.Load() && in.pid > 0 && !in.client.Exited() {
			_ = syscall.Kill(in.pid, syscall.SIGKILL)
		}
		in.client.Kill()
	})
}

func fileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// callTimeout is the per-call timeout of spec (default 2s, as conf sets).
func callTimeout(spec conf.Plugin) time.Duration {
	if d := spec.Timeout.Duration; d > 0 {
		return d
	}
	return 2 * time.Second
}
