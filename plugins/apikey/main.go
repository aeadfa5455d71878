// Command apikey is a wsgate auth plugin that admits clients presenting an
// API key listed in a file, reloaded when the file changes. See
// docs/plugins.md for its config keys and the file format.
package main

import "github.com/wsgate/wsgate/plugins/auth"

func main() { auth.Serve(&apiKeyAuth{}) }
