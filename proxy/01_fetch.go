package proxy

// Fetch (key 1).
//
// Fetch v16+ (KIP-951) may append the new leaders' endpoints to a response, as a top-level
// tagged field after all the records. Rewriting them would force the proxy to hold every Fetch
// response whole before the client sees its first byte, and that store-and-forward costs about
// half of the consume throughput. The proxy therefore advertises Fetch up to v15 only: those
// responses carry no addresses and are relayed as they arrive. Clients lose nothing but the
// KIP-951 shortcut: after a leader change they refresh Metadata (rewritten) instead of reading
// the new leader from the Fetch response. v17 and v18 add nothing a client needs (the replica
// directory id and high watermark fields are for brokers). Produce keeps v10+ and is rewritten
// whole, because its responses are small and v12 is needed for transactions v2.
const maxFetchVersion = 15
