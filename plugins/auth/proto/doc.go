// Package authpb is the generated Go code for auth.proto, the wire contract
// between wsgate and its auth plugins. Regenerate it with gen.sh (make proto);
// plugin authors use package auth, not this one.
package authpb
