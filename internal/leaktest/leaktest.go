// Package leaktest names the goroutines that test packages may leave running
// when goleak checks them (goleak.VerifyTestMain in each package's
// TestMain): only process-wide goroutines that libraries start once and keep
// by design, never a goroutine of kmirror's own. A package uses only the sets
// it needs, so an ignore always has a reason next to it.
package leaktest

import "go.uber.org/goleak"

// GnetPool ignores gnet's process-wide worker pool (ants): a purge goroutine,
// a clock and idle workers that belong to the process, not to any one engine
// (the proxy's listener).
func GnetPool() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"),
	}
}

// ZstdDecoders ignores the goroutines of the zstd decoders that kgo keeps in
// a process-wide pool to decompress fetched batches.
func ZstdDecoders() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/klauspost/compress/zstd.(*blockDec).startDecoder"),
	}
}

// GoMetrics ignores go-metrics' process-wide meter ticker, which sarama (a
// client some tests use to prove compatibility) starts on first use.
func GoMetrics() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	}
}

// Join concatenates option sets for goleak.VerifyTestMain.
func Join(sets ...[]goleak.Option) []goleak.Option {
	var out []goleak.Option
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}

// Toxiproxy ignores the goroutines of a Toxiproxy proxy that wedged
// (internal/faultnet: Toxiproxy 2.5.0 can block a toxic change forever,
// Shopify/toxiproxy#558): its links' toxics, readers and writers, the change
// waiting on them, and faultnet's goroutine that made the change. They
// cannot be stopped; faultnet replaces the proxy and counts it (Wedged).
func Toxiproxy() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).chainRemoveToxic.func1"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).RemoveToxic.func1"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).chainAddToxic.func1"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*Proxy).server"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*Proxy).Stop"),
		goleak.IgnoreAnyFunction("github.com/kmirror/kmirror/internal/faultnet.(*Front).change.func1"),
	}
}
