// Command jwt is a wsgate auth plugin that admits clients presenting a
// valid JSON Web Token, signed HS256 or RS256. See docs/plugins.md for its
// config keys.
package main

import "github.com/wsgate/wsgate/plugins/auth"

func main() { auth.Serve(&jwtAuth{}) }
