package pluginhost

import (
	"context"

	"github.com/wsgate/wsgate/conf"
)

// Check does for p what New does, without keeping the result: it verifies
// the executable's checksum, starts the process, configures it with
// p.Config, then stops it. It returns the error New would return for p
// (naming the plugin), so a config the plugin rejects is found before a
// start or a reload. It is safe for concurrent use.
func Check(p conf.Plugin, opts Options) error {
	opts.defaults()
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	in, err := startInstance(ctx, p, &opts)
	if err != nil {
		return err
	}
	in.stop()
	return nil
}
