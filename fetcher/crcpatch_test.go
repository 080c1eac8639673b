package fetcher

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// shiftZeros against the register run through the zero bytes one by one.
func TestShiftZerosIsZeroBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 8, 61, 1000, 4096, 65537, 1 << 20} {
		r := rng.Uint32()
		// crc32.Update starts its register at ^crc and returns it inverted.
		want := ^crc32.Update(^r, castagnoli, make([]byte, n))
		if got := shiftZeros(r, n); got != want {
			t.Fatalf("shiftZeros(%#x, %d) = %#x, want %#x", r, n, got, want)
		}
	}
}

// patchCRC against the CRC computed afresh, for changes anywhere in messages
// of many lengths.
func TestPatchCRCIsTheFreshCRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		msg := make([]byte, 1+rng.IntN(3000))
		for i := range msg {
			msg[i] = byte(rng.Uint32())
		}
		at := rng.IntN(len(msg))
		n := 1 + rng.IntN(min(40, len(msg)-at))
		old := crc32.Checksum(msg, castagnoli)
		was := append([]byte(nil), msg[at:at+n]...)
		for i := at; i < at+n; i++ {
			msg[i] = byte(rng.Uint32())
		}
		if got, want := patchCRC(old, was, msg[at:at+n], len(msg)-at-n), crc32.Checksum(msg, castagnoli); got != want {
			t.Fatalf("len %d, %d bytes changed at %d: patched %#x, fresh %#x", len(msg), n, at, got, want)
		}
	}
}

// FuzzPatchCRC: for any message, change and stored CRC (right or wrong), the
// patched CRC is off from the fresh one by exactly what the stored one was.
func FuzzPatchCRC(f *testing.F) {
	f.Add([]byte("a batch"), []byte("xy"), uint16(2), uint32(0))
	f.Add(make([]byte, 100), []byte{1}, uint16(99), uint32(0xdeadbeef))
	f.Fuzz(func(t *testing.T, msg, now []byte, at uint16, damage uint32) {
		if len(now) == 0 || int(at)+len(now) > len(msg) {
			return
		}
		// Copies: the engine's inputs are not ours to change (changing msg in
		// place failed cases that passed on their own).
		msg, now = append([]byte(nil), msg...), append([]byte(nil), now...)
		old := crc32.Checksum(msg, castagnoli) ^ damage
		was := append([]byte(nil), msg[int(at):int(at)+len(now)]...)
		copy(msg[at:], now)
		got := patchCRC(old, was, now, len(msg)-int(at)-len(now))
		if off := got ^ crc32.Checksum(msg, castagnoli); off != damage {
			t.Fatalf("patched CRC off by %#x, stored one was off by %#x", off, damage)
		}
	})
}
