package balancer

import "math"

// DefaultHashBalanceFactor is the bounded-load factor [NewHash] uses for a
// factor that is not above 0: no node takes more than 1.25 times its
// weighted share of the pool's live leases.
const DefaultHashBalanceFactor = 0.25

// Hash sends every key to the same node while that node can take it, so
// the clients of one room meet on one relay. It ranks the candidates for a
// key by weighted rendezvous hashing (highest random weight): each node
// scores w / -ln(u), u a hash of the key and the node's address mapped to
// (0, 1) and w its effective weight ([Node.EffectiveWeight]), and the
// highest score wins. While no bound bites, a node that leaves moves only
// the keys it held, and a node of weight 2 wins twice the keys of a node
// of weight 1. The hash is FNV-1a, fixed across processes, so several
// gateways with the same nodes agree on every key.
//
// Load is bounded as HAProxy's hash-balance-factor and Envoy's
// hash_balance_factor bound it: with L live leases over the candidates
// (the nodes up, under their cap and not excluded) of total weight W, a
// node of weight w takes the key only while its live count stays within
// ceil((1 + factor) × (L + 1) × w / W); otherwise the next node in the
// key's ranking is tried. With equal weights that is (1 + factor) times
// the pool average. The counts are read without a lock at pick time, so
// picks that run at the same moment may each see the same counts and
// together pass a bound by up to their number; the caps
// ([Node.TryAcquire]) hold exactly, the bound does not. During slow start
// a node's effective weight, and so both its score and its bound, grow
// with the ramp: keys move onto it gradually.
//
// A pick without a key (the request did not carry it, or it was empty)
// falls back to least connections, as [LeastConn] picks.
//
// A Hash is immutable after [NewHash] and safe for concurrent use.
type Hash struct {
	factor float64
	lc     LeastConn // picks without a key
}

// NewHash returns a hash picker with the given bounded-load factor; a
// factor that is not above 0 (or is NaN or infinite) becomes
// [DefaultHashBalanceFactor].
func NewHash(factor float64) *Hash {
	if !(factor > 0) || math.IsInf(factor, 1) {
		factor = DefaultHashBalanceFactor
	}
	return &Hash{factor: factor}
}

// Factor returns the picker's bounded-load factor.
func (h *Hash) Factor() float64 { return h.factor }

// Pick has no key, so it picks as [LeastConn] does.
func (h *Hash) Pick(candidates []*Node) *Node {
	var clk clock
	return h.lc.pick(candidates, &clk)
}

// PickKey returns the highest-ranked candidate for key whose live count
// stays within the bounded load, or, without a key, the least-loaded
// candidate as [LeastConn] picks it. It returns nil for an empty slice.
func (h *Hash) PickKey(candidates []*Node, key []byte) *Node {
	var clk clock
	if len(key) == 0 {
		return h.lc.pick(candidates, &clk)
	}
	return h.pick(candidates, hashKey(key), &clk)
}

// pick ranks candidates for the key hash kh and returns the first within
// its bound. The ranking is kept in stack arrays for up to stackCandidates
// nodes.
func (h *Hash) pick(candidates []*Node, kh uint64, clk *clock) *Node {
	if len(candidates) <= 1 {
		if len(candidates) == 0 {
			return nil
		}
		return candidates[0]
	}
	var sbuf [stackCandidates]float64
	var wbuf [stackCandidates]uint64
	scores, ws := sbuf[:0], wbuf[:0]
	if len(candidates) > stackCandidates {
		scores = make([]float64, 0, len(candidates))
		ws = make([]uint64, 0, len(candidates))
	}
	var live uint64
	var weight float64
	for _, n := range candidates {
		w := n.pickWeight(clk)
		ws = append(ws, w)
		scores = append(scores, rendezvous(kh, n.keySeed, w))
		live += nonNeg(n.live.Load())
		weight += float64(w)
	}
	load := (1 + h.factor) * float64(live+1)
	for range candidates {
		best := -1
		for i, s := range scores {
			if s >= 0 && (best < 0 || s > scores[best]) {
				best = i
			}
		}
		n := candidates[best]
		bound := math.Ceil(load * float64(ws[best]) / weight)
		if float64(nonNeg(n.live.Load())+1) <= bound {
			return n
		}
		scores[best] = -1 // over its bound: try the next in the ranking
	}
	// Only reachable when live counts moved under the reads above: the
	// bounds add up to more than L + 1, so one node is always within.
	return h.lc.pick(candidates, clk)
}

// rendezvous is the weighted rendezvous score of a node with key seed seed
// and effective weight w for the key hash kh: w / -ln(u), u uniform in
// (0, 1) from the pair's hash. It is positive.
func rendezvous(kh, seed, w uint64) float64 {
	u := (float64(mix64(kh^seed)>>11) + 0.5) / (1 << 53)
	return float64(w) / -math.Log(u)
}

// hashKey hashes a request's key with FNV-1a (64-bit) and a final mix.
func hashKey(b []byte) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, c := range b {
		h ^= uint64(c)
		h *= prime
	}
	return mix64(h)
}

// mix64 is the splitmix64 finalizer: every input bit flips about half of
// the output bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

var _ Picker = (*Hash)(nil)
var _ KeyPicker = (*Hash)(nil)
