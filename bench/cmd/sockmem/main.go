// Command sockmem measures what the kernel holds for one idle TCP socket:
// it opens -pairs connected loopback pairs, waits, and prints the growth
// of each slab cache (/proc/slabinfo, readable by root) per socket. The
// figure backs the kernel column of docs/scaling.md's sizing. Other work on
// the machine moves the totals; run it a few times and read the caches
// that grow by about one object per socket (TCP, sock_inode_cache, filp,
// dentry, eventpoll_epi).
//
//	go run ./bench/cmd/sockmem [-pairs 4500] [-settle 2s]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cache is one line of /proc/slabinfo: active objects and object size.
type cache struct {
	objs, size int64
}

func readSlabs() (map[string]cache, error) {
	f, err := os.Open("/proc/slabinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]cache{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || strings.HasPrefix(fs[0], "#") || fs[0] == "slabinfo" {
			continue
		}
		objs, err1 := strconv.ParseInt(fs[1], 10, 64)
		size, err2 := strconv.ParseInt(fs[3], 10, 64)
		if err1 == nil && err2 == nil {
			out[fs[0]] = cache{objs, size}
		}
	}
	return out, sc.Err()
}

func main() {
	pairs := flag.Int("pairs", 4500, "connected loopback pairs to open (two sockets each)")
	settle := flag.Duration("settle", 2*time.Second, "wait before the second reading")
	flag.Parse()
	if err := run(*pairs, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "sockmem:", err)
		os.Exit(1)
	}
}

func run(pairs int, settle time.Duration) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, pairs)
	go func() {
		for range pairs {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	before, err := readSlabs()
	if err != nil {
		return err
	}
	held := make([]net.Conn, 0, 2*pairs)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range pairs {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		a, ok := <-accepted
		if !ok {
			c.Close()
			return fmt.Errorf("accept failed after %d pairs", len(held)/2)
		}
		held = append(held, c, a)
	}
	time.Sleep(settle)
	after, err := readSlabs()
	if err != nil {
		return err
	}
	sockets := int64(len(held))
	type row struct {
		name       string
		objs, size int64
	}
	var rows []row
	var total int64
	for name, a := range after {
		d := a.objs - before[name].objs
		// Only caches that grew by at least one object per 20 sockets.
		if d*20 < sockets {
			continue
		}
		rows = append(rows, row{name, d, a.size})
		total += d * a.size
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].objs*rows[i].size > rows[j].objs*rows[j].size })
	fmt.Printf("%d idle loopback TCP sockets\n", sockets)
	for _, r := range rows {
		fmt.Printf("%-24s %+8d objects x %5d B = %6.0f B per socket\n", r.name, r.objs, r.size, float64(r.objs*r.size)/float64(sockets))
	}
	fmt.Printf("%-24s %33.0f B per socket\n", "total", float64(total)/float64(sockets))
	return nil
}
