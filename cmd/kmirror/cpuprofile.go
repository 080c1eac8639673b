package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file the process writes its CPU profile to, from start to exit
// (go tool pprof reads it). Off unless set: it is for benchmarks (bench/mirror's
// KMIRROR_BENCH_CPUPROFILE sets it for the copiers it starts), not an endpoint: nothing
// reaches it over the network, only whoever sets the process's environment, and the
// profile holds function names and sample counts, no records or secrets. Beside it, at
// exit, goes the allocation profile (path + ".allocs"): what the process allocated over
// its life, by call site, which is where a copier's garbage collection time comes from.
const cpuProfileEnv = "KMIRROR_CPUPROFILE"

// startCPUProfile starts the profile cpuProfileEnv asks for and returns what stops it and
// writes it out; a no-op when the variable is unset.
func startCPUProfile() (stop func()) {
	path := os.Getenv(cpuProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kmirror: %s=%s: %v\n", cpuProfileEnv, path, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		if a, err := os.Create(path + ".allocs"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(a, 0)
			_ = a.Close()
		}
	}
}
