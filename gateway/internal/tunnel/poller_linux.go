package tunnel

import (
	"container/heap"
	"errors"
	"github.com/wsgate/wsgate/internal/rawio"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A poller runs the tunnels of the event-driven engine: one goroutine does
// all the reads and writes of its tunnels' sockets, with one read buffer
// for all of them. Its tunnels' framing state and unsent tails are touched
// by no other goroutine; other goroutines reach a tunnel through run, which
// queues a function for the poller and wakes it.
//
// The poller's epoll descriptor is itself registered with the runtime's
// network poller, and the goroutine parks there while nothing is ready:
// the poller's own epoll_wait never blocks. A goroutine blocked in a
// system call would have its P taken away by the runtime's monitor every
// 20µs, which wakes that thread and another each time; measured on the
// bench's fanout, that cost more CPU than the forwarding itself (see
// docs/architecture.md). Timers are the runtime poller's read deadline on
// the epoll descriptor.
type poller struct {
	epfd   int
	epfile *os.File        // epfd, registered with the runtime's poller
	rc     syscall.RawConn // epfile's, to park on it
	wait   func(uintptr) bool
	armed  int64 // the read deadline set on epfile, mono ns; 0 = none, armedExpired = passed
	wakefd int   // an eventfd: a write wakes the poller to run its queue
	buf    []byte
	events []unix.EpollEvent
	iov    [outSegs]unix.Iovec // writev's vector, one per segment forward may queue; poller-owned so a write allocates nothing
	out    *outBuf             // forward's queue for every half of the poller's (see half.forward)
	recs   *pollerRecords      // the buffers of its TLS clients' records; nil until the first

	// slots holds the poller's tunnels; an epoll event names its
	// tunnel by slot index and generation (see eventData), not by
	// descriptor number, so the table is as long as the most tunnels the
	// poller has held at once since it last shrank (see compact), however
	// high the process's descriptors go. free heads the free slots'
	// list (-1: none); live counts the slots in use. Only the poller
	// uses them.
	slots []slot
	free  int32
	live  int

	timers timerHeap
	// ended counts the tunnels ended since the timer heap was last swept
	// of their entries (see sweepTimers).
	ended int

	// again holds halves that used up their read budget with bytes still
	// waiting; they are read on after the events at hand.
	again, spareAgain []*half
	// kicks holds the node streams written to in this pass, kicked once
	// each at its end (see kickStreams).
	kicks []*polledStream
	// conns holds the connections the poller reads (see AttachConn),
	// indexed by their event data; pokedPending says poked holds tunnels
	// a read of one of them woke, to be seen to in this pass.
	conns        []*polledConn
	pokedPending bool
	// againConns holds the connections whose read budget ran out with
	// bytes still waiting (see connRead).
	againConns, spareConns []*polledConn

	// sockets holds the NodeSockets registered with the poller, indexed
	// by their event data (see socketEventFd), with freeSockets the
	// indexes free; smu guards both, as NodeSockets come and go on
	// handshakes' goroutines.
	smu         sync.Mutex
	sockets     []*NodeSocket
	freeSockets []int32

	mu    sync.Mutex
	queue []func()
	spare []func()
	// poked holds the tunnels whose node stream notified (see poke);
	// sparePoked is its other buffer. inline is set while the poller
	// reads a polled connection (see connRead).
	poked, sparePoked []*Tunnel
	inline            bool
	woken             atomic.Bool
}

// pollerReadSize is the poller's read buffer: a read that fills it is
// followed by another before the poller waits again.
const pollerReadSize = bufSize

var (
	pollersOnce sync.Once
	pollers     []*poller
	pollerNext  atomic.Uint32
	pollersWant atomic.Int32 // SetPollers; 0 = one per core
	pollersUp   atomic.Int32 // pollers started
)

// SetPollers sets how many pollers the event-driven engine starts with its
// first tunnel (or NodeSocket): n > 0, or 0 for one per core
// (GOMAXPROCS). It reports false, changing nothing, once the pollers have
// started.
func SetPollers(n int) bool {
	if pollersUp.Load() != 0 {
		return false
	}
	pollersWant.Store(int32(max(n, 0)))
	return true
}

// Pollers is the number of pollers running: 0 until the first tunnel on
// the event-driven engine or NodeSocket.
func Pollers() int { return int(pollersUp.Load()) }

// pickPoller returns a poller for a new tunnel, starting the pollers on
// first use; nil when the engine cannot run (epoll or eventfd failed).
func pickPoller() *poller {
	pollersOnce.Do(func() {
		n := runtime.GOMAXPROCS(0)
		if w := int(pollersWant.Load()); w > 0 {
			n = w
		}
		defer func() { pollersUp.Store(int32(len(pollers))) }()
		for range n {
			p, err := newPoller()
			if err != nil {
				return // the engine cannot run: tunnels go on goroutines
			}
			pollers = append(pollers, p)
			go p.loop()
		}
	})
	if len(pollers) == 0 {
		return nil
	}
	i := pollerNext.Add(1) % uint32(len(pollers))
	return pollers[i]
}

// pickPollerBeside is pickPoller avoiding the pollers busy names: the
// first from the next in turn that busy names least.
func pickPollerBeside(busy []any) *poller {
	p := pickPoller()
	if p == nil || len(busy) == 0 {
		return p
	}
	start := slices.Index(pollers, p)
	best, bestN := p, -1
	for k := range pollers {
		cand := pollers[(start+k)%len(pollers)]
		n := 0
		for _, b := range busy {
			if b == any(cand) {
				n++
			}
		}
		if bestN < 0 || n < bestN {
			best, bestN = cand, n
		}
		if n == 0 {
			break
		}
	}
	return best
}

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	fail := func(err error) (*poller, error) {
		_ = unix.Close(epfd)
		_ = unix.Close(wfd)
		return nil, err
	}
	// The eventfd's data names no slot: its events are not routed (the
	// queue is run after every batch of events).
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wfd, &ev); err != nil {
		return fail(err)
	}
	// A non-blocking descriptor given to os.NewFile is registered with
	// the runtime's poller, as a socket is.
	if err := unix.SetNonblock(epfd, true); err != nil {
		return fail(err)
	}
	p := &poller{
		epfd:   epfd,
		wakefd: wfd,
		buf:    make([]byte, pollerReadSize),
		events: make([]unix.EpollEvent, 256),
		out:    new(outBuf),
		free:   -1,
	}
	p.epfile = os.NewFile(uintptr(epfd), "tunnel-poller")
	rc, err := p.epfile.SyscallConn()
	if err != nil {
		_ = p.epfile.Close()
		_ = unix.Close(wfd)
		return nil, err
	}
	p.rc = rc
	p.wait = p.ready
	return p, nil
}

// poke queues t, whose node stream notified, to be seen to on the
// poller's goroutine, and wakes the poller. It never waits on I/O, and
// takes no lock but the queue's.
func (p *poller) poke(t *Tunnel) {
	p.mu.Lock()
	p.poked = append(p.poked, t)
	inline := p.inline
	p.mu.Unlock()
	if !inline {
		p.wake()
	}
}

// kickStreams kicks each node stream written to since the last call, so
// that what the pass queued on one connection leaves in one write.
func (p *poller) kickStreams() {
	for i, ns := range p.kicks {
		ns.kick = false
		if ns.own {
			ns.s.FlushNB()
		} else {
			ns.s.Kick()
		}
		p.kicks[i] = nil
	}
	p.kicks = p.kicks[:0]
}

// run queues f to run on the poller's goroutine and wakes the poller. It
// never waits on I/O.
func (p *poller) run(f func()) {
	p.mu.Lock()
	p.queue = append(p.queue, f)
	p.mu.Unlock()
	p.wake()
}

// wake wakes the poller to run its queues, unless it is woken already.
func (p *poller) wake() {
	if p.woken.CompareAndSwap(false, true) {
		var one = [8]byte{1}
		_, _ = rawWrite(p.wakefd, one[:])
	}
}

// loop is the poller's goroutine: it parks on the epoll descriptor in the
// runtime's poller until it is readable or the next timer is due.
func (p *poller) loop() {
	for {
		p.runTimers()
		p.kickStreams()
		p.armTimer()
		// Read returns when ready asks to re-arm the timer, or at the
		// deadline; any other error would be a bug.
		err := p.rc.Read(p.wait)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The deadline on the file has passed: whatever comes next
			// (the same timer, another, or none) must be set again, or
			// every Read would fail at once and the poller spin.
			p.armed = armedExpired
		case err != nil:
			panic("tunnel: poller: " + err.Error())
		}
	}
}

// ready handles everything ready now, without blocking; it returns false
// to park until the epoll descriptor is readable again, true when the
// next timer moved earlier than the deadline armed for it.
func (p *poller) ready(uintptr) bool {
	for {
		n, err := epollWaitNow(p.epfd, p.events)
		if err != nil {
			// epoll_wait fails only on a bad descriptor or
			// argument: a bug, not a condition to carry on in.
			panic("tunnel: epoll_wait: " + err.Error())
		}
		for i := range n {
			ev := &p.events[i]
			if ev.Fd < -1 && ev.Pad == socketEventPad {
				p.socketEvent(ev)
			} else if ev.Fd < -1 {
				p.connEvent(ev)
			} else if t, node := p.route(ev); t != nil {
				t.event(node, ev.Events)
			}
		}
		p.runQueue()
		p.runTimers()
		p.readAgain()
		p.readConnsAgain()
		p.kickStreams()
		p.compact()
		// Every registration is edge-triggered, so a wait that did not
		// fill the events left nothing ready behind (but the halves to
		// read on): the next edge makes the descriptor readable for the
		// runtime's poller.
		if n < len(p.events) && len(p.again) == 0 && len(p.againConns) == 0 && !p.pokedPending {
			break
		}
	}
	return len(p.timers) > 0 && (p.armed <= 0 || p.timers[0].when < p.armed)
}

// later queues h to be read on after the events at hand.
func (p *poller) later(h *half) {
	if !h.queued {
		h.queued = true
		p.again = append(p.again, h)
	}
}

// readAgain reads on the halves queued by later, each once more within
// its budget.
func (p *poller) readAgain() {
	if len(p.again) == 0 {
		return
	}
	list := p.again
	p.again = p.spareAgain[:0]
	for i, h := range list {
		h.queued = false
		h.readSrc()
		list[i] = nil
	}
	p.spareAgain = list[:0]
}

// armedExpired marks the epoll descriptor's read deadline as passed: it
// differs from every timer and from none, so armTimer sets a deadline (or
// clears it) whatever the next timer is.
const armedExpired = -1

// armTimer sets the epoll descriptor's read deadline to the next timer.
func (p *poller) armTimer() {
	var next int64
	if len(p.timers) > 0 {
		next = p.timers[0].when
	}
	if next == p.armed {
		return
	}
	p.armed = next
	dl := time.Time{}
	if next != 0 {
		dl = monoTime(next)
	}
	_ = p.epfile.SetReadDeadline(dl)
}

// epollWaitNow is epoll_wait with a zero timeout: it cannot block, so it
// skips the scheduler's system-call bookkeeping.
func epollWaitNow(epfd int, events []unix.EpollEvent) (int, error) {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

// runQueue runs what other goroutines queued.
func (p *poller) runQueue() {
	signalled := p.woken.Load()
	if !signalled && !p.pokedPending {
		return
	}
	p.pokedPending = false
	if signalled {
		var b [8]byte
		_, _ = rawRead(p.wakefd, b[:])
		p.woken.Store(false)
	}
	p.mu.Lock()
	q := p.queue
	p.queue = p.spare[:0]
	pk := p.poked
	p.poked = p.sparePoked[:0]
	p.mu.Unlock()
	for i, f := range q {
		f()
		q[i] = nil
	}
	for i, t := range pk {
		t.poked()
		pk[i] = nil
	}
	p.mu.Lock()
	p.spare = q[:0]
	p.sparePoked = pk[:0]
	p.mu.Unlock()
}

// A slot is a poller's entry for one tunnel, from watch to forget. Both
// of the tunnel's sockets are registered with the slot's index and
// generation as their event data; forget deletes them from the epoll set
// before they are closed and moves the generation on, so an event that
// still names the slot afterwards (one fetched in the same batch, or one of
// a registration some other process's copy of the socket kept alive) is
// told apart from the events of the slot's next tunnel and dropped.
type slot struct {
	t    *Tunnel
	gen  uint32 // counts the tunnels the slot has held, modulo 2^31
	next int32  // the next free slot while this one is free
}

// slotGenMask bounds a slot's generation: the event data holds it with the
// socket's side (client or node) in one 32-bit word.
const slotGenMask = 1<<31 - 1

// eventData returns the epoll event data naming side of t's slot i at
// generation gen: the index in Fd, the generation and the side in Pad
// (together the 64 bits of epoll_data).
func eventData(ev *unix.EpollEvent, i int32, gen uint32, node bool) {
	ev.Fd = i
	ev.Pad = int32(gen << 1)
	if node {
		ev.Pad |= 1
	}
}

// route returns the tunnel an event is for and whether it is for its
// node's socket; nil for an event naming no slot (the eventfd's), a free
// slot or an earlier tunnel of the slot.
func (p *poller) route(ev *unix.EpollEvent) (*Tunnel, bool) {
	i := uint32(ev.Fd)
	if i >= uint32(len(p.slots)) {
		return nil, false
	}
	s := &p.slots[i]
	if s.t == nil || s.gen != uint32(ev.Pad)>>1 {
		return nil, false
	}
	return s.t, ev.Pad&1 != 0
}

// watchEvents are the events a tunnel's socket is registered for: edge-
// triggered reads, writes and the peer's hang-up, and urgent data (TCP's
// MSG_OOB), which stops a read short of the bytes behind it (see readSrc).
const watchEvents = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLPRI | unix.EPOLLET

// slotNodeWatched is a tunnel's slot before watch when its node socket is
// a NodeSocket's, registered with the poller since its connect (see
// adoptSocket); any other tunnel has -1 there.
const slotNodeWatched = -2

// watch takes a slot for t and registers both of its sockets with it. A
// readable or writable socket is reported at once. On failure nothing of
// t stays registered.
func (p *poller) watch(t *Tunnel) error {
	i := p.take(t)
	gen := p.slots[i].gen
	var ev unix.EpollEvent
	ev.Events = watchEvents
	eventData(&ev, i, gen, false)
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(t.clientFD), &ev); err != nil {
		p.release(i)
		return err
	}
	eventData(&ev, i, gen, true)
	op := unix.EPOLL_CTL_ADD
	if t.slot == slotNodeWatched {
		// A NodeSocket's, registered since its connect: its event data
		// changes to the slot's, and the modification reports at once
		// whatever the socket has ready (the events between the handshake
		// and now were the NodeSocket's).
		op = unix.EPOLL_CTL_MOD
	}
	if t.nodeFD < 0 {
		// A node stream: its notifications come by poke.
	} else if err := unix.EpollCtl(p.epfd, op, int(t.nodeFD), &ev); err != nil {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(t.clientFD), nil)
		p.release(i)
		return err
	}
	t.slot = i
	return nil
}

// forget deletes t's sockets from the epoll set and frees its slot; it is
// called before the sockets are closed. Closing a socket removes it from
// the set only once no other descriptor refers to it: a child process
// forked meanwhile (a plugin's start, the restart's hand-over) holds a
// copy until it execs, and the registration would live on, its events
// still naming t's slot, while the descriptor's number is reused here.
func (p *poller) forget(t *Tunnel) {
	i := t.slot
	if i == slotNodeWatched {
		// Ended before watch: its node socket is still in the set
		// under the NodeSocket's event data.
		t.slot = -1
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(t.nodeFD), nil)
		return
	}
	if i < 0 {
		return
	}
	t.slot = -1
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(t.clientFD), nil)
	if t.nodeFD >= 0 {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(t.nodeFD), nil)
	}
	p.release(i)
}

// take returns a free slot, holding t; the table grows only when none is
// free.
func (p *poller) take(t *Tunnel) int32 {
	i := p.free
	if i < 0 {
		i = int32(len(p.slots))
		p.slots = append(p.slots, slot{next: -1})
	} else {
		p.free = p.slots[i].next
	}
	p.slots[i].t = t
	p.slots[i].next = -1
	p.live++
	return i
}

// release frees slot i and moves its generation on.
func (p *poller) release(i int32) {
	s := &p.slots[i]
	s.t = nil
	s.gen = (s.gen + 1) & slotGenMask
	s.next = p.free
	p.free = i
	p.live--
}

// compactMin is the table length below which the poller never shrinks its
// slot table.
const compactMin = 1024

// compact shrinks the slot table once fewer than a quarter of its slots
// are in use, halving it until a quarter or more are: the tunnels above the
// new length move to free slots below it (each socket's registration is
// modified in place) and the rest is dropped. So a table longer than
// compactMin stays within four times the poller's live tunnels, and a
// burst of tunnels does not hold its memory after it ends. Each move costs
// two system calls, paid for by the three quarters of the table freed
// since it was last that long. Called between batches of events only: an
// event fetched before a move would name the old slot.
func (p *poller) compact() {
	n := int32(len(p.slots))
	size := n
	for size > compactMin && p.live < int(size/4) {
		size /= 2
	}
	if size == n {
		return
	}
	// Rebuild the free list from the free slots below size, lowest
	// first; those above go with the cut.
	p.free = -1
	for i := size - 1; i >= 0; i-- {
		if p.slots[i].t == nil {
			p.slots[i].next = p.free
			p.free = i
		}
	}
	for j := size; j < n; j++ {
		t := p.slots[j].t
		if t == nil {
			continue
		}
		// There is room: fewer than half of size are in use.
		i := p.free
		s := &p.slots[i]
		p.free = s.next
		s.t, s.next = t, -1
		// MOD fails only for a descriptor not in the set, and t's
		// stay in it from watch to forget.
		var ev unix.EpollEvent
		ev.Events = watchEvents
		eventData(&ev, i, s.gen, false)
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, int(t.clientFD), &ev)
		if t.nodeFD >= 0 {
			eventData(&ev, i, s.gen, true)
			_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, int(t.nodeFD), &ev)
		}
		t.slot = i
	}
	kept := make([]slot, size)
	copy(kept, p.slots)
	p.slots = kept
}

// writev writes the segments of out to fd in one system call, without
// blocking, and returns how many bytes went.
func (p *poller) writev(fd int, out [][]byte) (int, error) {
	if len(out) == 1 {
		return rawWrite(fd, out[0])
	}
	n := 0
	for _, b := range out {
		if len(b) == 0 {
			continue
		}
		p.iov[n].Base = &b[0]
		p.iov[n].SetLen(len(b))
		n++
	}
	for {
		r, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&p.iov[0])), uintptr(n))
		if e == unix.EINTR {
			continue
		}
		clear(p.iov[:n])
		if e != 0 {
			return 0, e
		}
		return int(r), nil
	}
}

// rawWrite and rawRead are the package's non-blocking write(2) and
// read(2) (see internal/rawio).
func rawWrite(fd int, b []byte) (int, error) { return rawio.Write(fd, b) }

func rawRead(fd int, b []byte) (int, error) { return rawio.Read(fd, b) }

// Timers: a tunnel asks to be woken at a time for one reason; stale
// entries are harmless, since the tunnel looks at its own state when woken.
// Times are on the package's monotonic clock (mono).

type timerKind uint8

const (
	timerClose       timerKind = iota // the close deadline
	timerStallNode                    // the write to the node may have timed out
	timerStallClient                  // the write to the client may have timed out
	timerKeepalive                    // the keepalive's next look at the client
)

type timer struct {
	when int64 // mono ns
	t    *Tunnel
	kind timerKind
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when < h[j].when }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = timer{}
	*h = old[:len(old)-1]
	return x
}

// after wakes t for kind at when.
func (p *poller) after(when time.Time, t *Tunnel, kind timerKind) {
	heap.Push(&p.timers, timer{when: mono(when), t: t, kind: kind})
}

// sweepMin is the fewest ended tunnels that make the poller sweep its
// timer heap.
const sweepMin = 64

// tunnelEnded notes that a tunnel of the poller's has ended. Its timers
// would do nothing when they fire, but each holds the ended Tunnel until
// then: the close deadline for the close timeout, a keepalive look for a
// whole ping interval. Once at least sweepMin tunnels, and at least half
// as many as there are timers, have ended since the last sweep, the heap
// drops every entry of an ended tunnel; each sweep costs one pass over the
// heap, paid for by the ends since the last.
func (p *poller) tunnelEnded() {
	p.ended++
	if p.ended < sweepMin || p.ended < len(p.timers)/2 {
		return
	}
	p.ended = 0
	live := p.timers[:0]
	for _, tm := range p.timers {
		if !tm.t.fdsClosed() {
			live = append(live, tm)
		}
	}
	clear(p.timers[len(live):])
	p.timers = live
	heap.Init(&p.timers)
}

// runTimers fires the timers that are due.
func (p *poller) runTimers() {
	if len(p.timers) == 0 {
		return
	}
	now := time.Now()
	ns := mono(now)
	for len(p.timers) > 0 && p.timers[0].when <= ns {
		tm := heap.Pop(&p.timers).(timer)
		tm.t.fire(tm.kind, now)
	}
}
