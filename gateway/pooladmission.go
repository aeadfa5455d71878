package gateway

import "github.com/wsgate/wsgate/gateway/internal/upstream"

// poolAdmission is a pool's [pools.admission] limit (a rateLimit) as the
// pool carries it from one generation to the next.
type poolAdmission rateLimit

// newPoolAdmission returns a pool's admission limit at rate and burst.
func newPoolAdmission(rate, burst int) *poolAdmission {
	a := &poolAdmission{}
	a.Set(rate, burst)
	return a
}

// Allow takes a token, or reports false with the rate and burst in force.
func (a *poolAdmission) Allow() (ok bool, rate, burst int) { return (*rateLimit)(a).allow() }

// Set changes the rate and burst for the next requests.
func (a *poolAdmission) Set(rate, burst int) { (*rateLimit)(a).set(rate, burst) }

var _ upstream.Admission = (*poolAdmission)(nil)
