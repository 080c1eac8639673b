// Package proxy is kmirror's Kafka-wire-compatible front door for the destination brokers.
//
// A request's whole path lives here:
//
//	listener (plaintext: a goroutine per connection, or gnet; crypto/tls) -> frame -> session.dispatch
//	  -> local answer (mirror RPC keys, ApiVersions fallback)   or
//	  -> upstream broker (one TCP connection per client connection)
//	  -> response rewrite (only the keys that carry broker addresses or API versions)
//	  -> client, strictly in request order
//
// Files named NN_name.go hold the behaviour of API key NN (franz-go kfake's convention).
// Everything else is transport, configuration and bookkeeping. docs/proxy.md describes the
// configuration and the port rule; the concurrency map is at the top of session.go.
package proxy
