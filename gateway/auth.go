package gateway

import "github.com/wsgate/wsgate/gateway/internal/revoke"

// DefaultRevokeTTL is how long a revoked subject is refused new handshakes
// when the revocation names no ttl (see revoke.DefaultTTL).
const DefaultRevokeTTL = revoke.DefaultTTL
