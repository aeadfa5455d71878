package main

import (
	"flag"
	"fmt"
	"io"
)

// usage is the text of `wsgate -h`: every way to run the command, the
// gateway's flags, and where the demo is.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage:
  wsgate [-config FILE] [flags]   run the gateway (SIGHUP reloads, SIGUSR2 restarts in place, SIGTERM drains)
  wsgate -check [-config FILE]    validate the config, load the TLS files, start each auth plugin with its config, and exit
  wsgate -version                 print the version, VCS revision and Go version, and exit
  wsgate -healthcheck URL         GET URL, exit 0 on a 2xx answer and 1 otherwise (container health checks)

Try it: `+demoCommand+` runs the gateway and two relay replicas in one
process (its own command, so that wsgate does not link the relay).

Flags:
`)
	fs.PrintDefaults()
}
