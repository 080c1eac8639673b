package faultnet

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unsafe"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
)

// forceCloseAfter is how long replace waits for a wedged proxy's Stop to
// free its port before it closes the listener itself.
const forceCloseAfter = 3 * time.Second

// closeListener closes a Toxiproxy proxy's listening socket directly. The
// listener is unexported and Stop closes it only from a goroutine of the
// proxy's accept loop, which a wedged toxic collection can hold up; the
// proxy is being discarded, so reaching into it cannot break anything that
// still runs. A layout without the field is left alone (the port wait then
// reports what holds it).
func closeListener(p *toxiproxy.Proxy) {
	v := reflect.ValueOf(p).Elem().FieldByName("listener")
	if !v.IsValid() || v.Type() != reflect.TypeFor[net.Listener]() {
		return
	}
	ln := *(*net.Listener)(unsafe.Pointer(v.UnsafeAddr()))
	if ln != nil {
		_ = ln.Close()
	}
}

// portHolders describes the sockets bound to addr's port (from
// /proc/net/tcp): their state, and whether this process owns them.
func portHolders(addr string) string {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "port unknown"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "port unknown"
	}
	mine := ownSocketInodes()
	states := map[string]string{"01": "ESTABLISHED", "06": "TIME_WAIT", "08": "CLOSE_WAIT", "0A": "LISTEN", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "09": "LAST_ACK", "0B": "CLOSING"}
	var out []string
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			local := f[1]
			hexPort := local[strings.LastIndexByte(local, ':')+1:]
			if p, err := strconv.ParseInt(hexPort, 16, 32); err != nil || int(p) != port {
				continue
			}
			owner := "another process"
			if mine[f[9]] {
				owner = "this process"
			}
			out = append(out, fmt.Sprintf("%s remote %s, %s", states[f[3]], f[2], owner))
		}
	}
	if len(out) == 0 {
		return "no socket holds the port now"
	}
	return "held by: " + strings.Join(out, "; ")
}

// ownSocketInodes are the inodes of this process's sockets.
func ownSocketInodes() map[string]bool {
	out := map[string]bool{}
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out
}
