package proxy

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Frame buffers are pooled by power-of-two size class: at hundreds of MB/s, allocating every
// frame afresh makes the garbage collector the proxy's largest cost. A buffer goes back to
// the pool only where its last user is known: after the upstream write of a forwarded
// request, and after the client transport took a response. Frames that escape to code
// outside the proxy (mirror RPC handlers) are never pooled.

const (
	minFrameClass = 12 // 4 KiB
	maxFrameClass = 27 // 128 MiB
)

var framePools [maxFrameClass - minFrameClass + 1]sync.Pool

func frameClass(n int) int {
	if n <= 1<<minFrameClass {
		return 0
	}
	return bits.Len(uint(n-1)) - minFrameClass
}

// getFrame returns a buffer of length n.
func getFrame(n int) []byte {
	c := frameClass(n)
	if c >= len(framePools) {
		return make([]byte, n)
	}
	if v := framePools[c].Get(); v != nil {
		return unsafe.Slice((*byte)(v.(unsafe.Pointer)), 1<<(c+minFrameClass))[:n]
	}
	return make([]byte, n, 1<<(c+minFrameClass))
}

// putFrame recycles a buffer that came from getFrame; anything else is left to the GC. The
// pools hold the buffer's first byte (a pointer fits an interface without an allocation,
// a slice header does not; the class gives the capacity back).
func putFrame(b []byte) {
	c := frameClass(cap(b))
	if c >= len(framePools) || cap(b) != 1<<(c+minFrameClass) {
		return
	}
	framePools[c].Put(unsafe.Pointer(unsafe.SliceData(b[:1])))
}
